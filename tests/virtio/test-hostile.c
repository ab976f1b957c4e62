/*
 * Hostile-driver suite: the cases of hostile-cases.c against the request
 * engine with blkfix's in-memory executor. Every case asserts its exact
 * outcome: either the queue is broken (and refuses all later work), or the
 * request completes with the expected status byte and used length and the
 * queue keeps working.
 */
#include "hostile-cases.h"

typedef struct Ctx {
    HostileFix h;
    BlkFix f;
} Ctx;

static void hold(HostileFix *h)
{
    ((Ctx *)h->opaque)->f.defer = true;
}

static unsigned pass(HostileFix *h)
{
    Ctx *c = h->opaque;

    virtio_blk_handle_queue(c->f.q);
    return c->f.ndeferred;
}

static const HostileOps ops = {.hold = hold, .pass = pass};

static void ctx_init(Ctx *c, const HostileCase *hc)
{
    VirtIOBlkConf conf;

    hostile_case_conf(hc, &conf);
    blkfix_init(&c->f,
                &(BlkFixOpts){.conf = &conf, .features = hc->features, .nregions = hc->nregions});
    c->h = (HostileFix){.drv = c->f.drv, .tvq = c->f.tvq, .q = c->f.q, .ops = &ops, .opaque = c};
}

/* After the case, a well-formed request must (not) be served. */
static void check_followup(Ctx *c, bool broken)
{
    uint8_t data[4096];
    TestBlkReq r;
    uint16_t used_before = testvq_used_idx(c->f.tvq);

    c->f.defer = false;
    testdrv_alloc_reset(c->f.drv, testdrv_alloc_mark(c->f.drv));
    if (broken) {
        /* Nothing is popped or pushed anymore; no interrupt is raised. */
        g_assert_cmpuint(virtio_blk_handle_queue(c->f.q), ==, 0);
        g_assert_false(virtio_blk_queue_flush(c->f.q));
        g_assert_cmpuint(testvq_used_idx(c->f.tvq), ==, used_before);
        return;
    }
    r = testblk_submit(c->f.tvq, VIRTIO_BLK_T_IN, 0, NULL, sizeof(data), true);
    g_assert_cmpint(r.head, >=, 0);
    blkfix_run(&c->f);
    g_assert_cmpuint(testblk_status(c->f.tvq, &r), ==, VIRTIO_BLK_S_OK);
}

static void run_case(gconstpointer data)
{
    const HostileCase *hc = data;
    Ctx c;
    int head;

    ctx_init(&c, hc);
    head = hc->build(&c.h);
    blkfix_run(&c.f);
    if (c.f.defer) {
        /* In-flight requests of the case finish (refused if broken). */
        blkfix_complete_deferred(&c.f, 0);
        virtio_blk_queue_flush(c.f.q);
    }
    if (hc->status == HOSTILE_BROKEN) {
        g_assert_true(virtqueue_is_broken(c.f.vq));
        g_assert_cmpstr(virtqueue_broken_reason(c.f.vq), ==, hc->reason);
        g_assert_cmpuint(c.f.broken_calls, ==, 1);
        g_test_message("%s: %s", hc->name, virtqueue_broken_reason(c.f.vq));
    } else {
        g_assert_false(virtqueue_is_broken(c.f.vq));
        g_assert_cmpuint(virtio_blk_queue_inflight(c.f.q), ==, 0);
    }
    hostile_check_used(hc, &c.h, head);
    check_followup(&c, hc->status == HOSTILE_BROKEN);
    blkfix_cleanup(&c.f);
}

/* Protocol errors that know where the status goes must still return the chain. */
static void test_header_missing_returns_chain(void)
{
    const HostileCase *hc = hostile_case_find("header-15-bytes");
    Ctx c;
    int head;

    ctx_init(&c, hc);
    head = hc->build(&c.h);
    blkfix_run(&c.f);
    g_assert_true(virtqueue_is_broken(c.f.vq));
    g_assert_cmpuint(hostile_used_len(&c.h, head), ==, 1);
    g_assert_cmpuint(testdrv_readb(c.f.drv, c.h.status_gpa), ==, VIRTIO_BLK_S_IOERR);
    blkfix_cleanup(&c.f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    for (size_t i = 0; i < hostile_ncases; i++) {
        g_autofree char *path = g_strdup_printf("/hostile/%s", hostile_cases[i].name);
        g_test_add_data_func(path, &hostile_cases[i], run_case);
    }
    g_test_add_func("/hostile/header-missing-returns-chain", test_header_missing_returns_chain);
    return g_test_run();
}
