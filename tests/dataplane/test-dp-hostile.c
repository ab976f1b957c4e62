/*
 * Hostile-driver suite with the dataplane executing: every malformed ring or
 * request case of tests/virtio/test-hostile.c, served by a DataPlane on its
 * iothread over an O_DIRECT temp file, with the native (libaio) and the
 * io_uring engines. The test thread is the guest: it publishes the case's
 * chains, kicks, and checks the exact outcome:
 *   - protocol errors: the queue is broken, the broken notifier ran once, a
 *     known status location got IOERR with the chain returned, a later valid
 *     request is refused (nothing popped, nothing pushed, no interrupt), the
 *     iothread still answers and the dataplane stops; the reason is read
 *     after dataplane_stop();
 *   - request errors: the exact status byte and used length, an interrupt,
 *     and a later valid read completes through the IOQ.
 *
 * The builders and the case table are test-hostile.c's own, compiled into
 * this file (it is #included, its main() renamed and unused). Two cases keep
 * requests in flight and republish while they are (duplicate-head,
 * over-submit): their builder runs inside the iothread, where no completion
 * can be reaped meanwhile, followed by the pass the next kick would make.
 */
#include <string.h>
#include <linux/virtio_blk.h>

#include "vblk/virtio-blk.h"
#include "dphostile-fix.h"

/*
 * The builders that hold requests in flight call virtio_blk_handle_queue()
 * and then check BlkFix.ndeferred: count the requests the dataplane's
 * executor holds instead (see hostile_handle_queue below).
 */
static unsigned hostile_handle_queue(VirtIOBlkQueue *q);
#define virtio_blk_handle_queue hostile_handle_queue
#define main                    test_hostile_main
#include "../virtio/test-hostile.c"
#undef main
#undef virtio_blk_handle_queue

#define TIMEOUT_MS 10000

/* The case whose builder runs in the iothread (owned by the iothread meanwhile). */
static Ctx *inthread_ctx;

static unsigned hostile_handle_queue(VirtIOBlkQueue *q)
{
    unsigned n = virtio_blk_handle_queue(q);

    g_assert_nonnull(inthread_ctx);
    /* In flight on the IOQ: nothing is reaped while this iothread callback runs. */
    inthread_ctx->f.ndeferred = virtio_blk_queue_inflight(q);
    return n;
}

typedef struct DpCase {
    const HostileCase *hc;
    const char *engine;
} DpCase;

static DpCase dp_cases[2][G_N_ELEMENTS(cases)];

/* Cases that need requests held in flight while they republish. */
static bool builds_in_iothread(const HostileCase *hc)
{
    return hc->build == dup_head || hc->build == over_submit;
}

typedef struct InThread {
    Ctx *c;
    const HostileCase *hc;
    int head;
} InThread;

static void build_in_iothread(void *opaque)
{
    InThread *t = opaque;

    inthread_ctx = t->c;
    t->head = t->hc->build(t->c);
    /* The pass the next kick makes, with the case's requests still in flight. */
    hostile_handle_queue(t->c->f.q);
    virtio_blk_queue_flush(t->c->f.q);
    inthread_ctx = NULL;
}

static void noop(void *opaque)
{
}

static uint64_t kicks(DpFix *f)
{
    DataPlaneQueueStats st;

    dataplane_get_queue_stats(f->dp, 0, &st);
    return st.kicks;
}

/* Kick and wait until the iothread has handled it (the pass included). */
static void kick_and_sync(DpFix *f)
{
    uint64_t before = kicks(f);
    gint64 deadline = g_get_monotonic_time() + TIMEOUT_MS * 1000;

    testvq_kick_force(f->tvq);
    while (kicks(f) == before) {
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        g_usleep(20);
    }
    /* handle_kick() runs to its end before the iothread takes this. */
    iothread_run_sync(f->iothread, noop, NULL);
}

/* A valid request after the case: served if the queue lives, refused if broken. */
static void check_followup_dp(DpFix *f, Ctx *c, bool broken)
{
    uint16_t used_before = testvq_used_idx(f->tvq);
    TestBlkReq r;

    if (broken) {
        /* Raw descriptors: a broken case may have left no free ones. */
        r = testblk_prepare(f->tvq, VIRTIO_BLK_T_IN, 0, NULL, 4096);
        testvq_set_desc(f->tvq, 0, r.hdr_gpa, 16, VRING_DESC_F_NEXT, 1);
        testvq_set_desc(f->tvq, 1, r.data_gpa, 4096, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 2);
        testvq_set_desc(f->tvq, 2, r.status_gpa, 1, VRING_DESC_F_WRITE, 0);
        testvq_publish(f->tvq, 0);
        testvq_take_calls(f->tvq);
        kick_and_sync(f);
        g_assert_cmpuint(testvq_used_idx(f->tvq), ==, used_before);
        g_assert_cmpuint(testblk_status(f->tvq, &r), ==, 0xff);
        g_assert_cmpuint(testvq_take_calls(f->tvq), ==, 0);
        return;
    }
    r = testblk_submit(f->tvq, VIRTIO_BLK_T_IN, 0, NULL, 4096, true);
    g_assert_cmpint(r.head, >=, 0);
    kick_and_sync(f);
    g_assert_true(testvq_wait_used(f->tvq, TIMEOUT_MS));
    g_assert_cmpuint(blkfix_used_len(&c->f, r.head), ==, 4096 + 1);
    g_assert_cmpuint(testblk_status(f->tvq, &r), ==, VIRTIO_BLK_S_OK);
}

static void run_dp_case(gconstpointer data)
{
    const DpCase *dc = data;
    const HostileCase *hc = dc->hc;
    bool broken = hc->status == BROKEN;
    unsigned broken_calls = 0;
    DataPlaneQueueStats st;
    VirtIOBlkConf conf;
    DpFix *f;
    Ctx c;
    int head;

    blkfix_default_conf(&conf);
    if (hc->conf) {
        hc->conf(&conf);
    }
    f = dphostile_fix_new(&(DpHostileOpts){.engine = dc->engine,
                                           .conf = &conf,
                                           .features = hc->features,
                                           .nregions = hc->nregions,
                                           .broken_calls = &broken_calls});
    if (!f) {
        g_test_skip("engine or O_DIRECT not usable here");
        return;
    }
    memset(&c, 0, sizeof(c));
    c.f.drv = f->d;
    c.f.tvq = f->tvq;
    c.f.blk = f->blk;
    c.f.vq = f->vq;
    c.f.q = f->q;
    c.f.disk_size = conf.capacity * VIRTIO_BLK_SECTOR_SIZE;
    dpfix_start(f);

    if (builds_in_iothread(hc)) {
        InThread t = {.c = &c, .hc = hc};

        iothread_run_sync(f->iothread, build_in_iothread, &t);
        head = t.head;
    } else {
        head = hc->build(&c);
        kick_and_sync(f);
    }

    if (broken) {
        g_assert_true(virtqueue_is_broken(f->vq));
        if (hc->build == short_header) {
            /* test-hostile's header-missing-returns-chain: the chain does come back. */
            g_assert_cmpuint(testvq_used_idx(f->tvq), ==, 1);
        }
        /* A known status location still gets IOERR and the chain back. */
        if (head >= 0 && c.status_gpa && testvq_used_idx(f->tvq) > 0) {
            g_assert_cmpuint(blkfix_used_len(&c.f, head), ==, 1);
            g_assert_cmpuint(testdrv_readb(f->d, c.status_gpa), ==, VIRTIO_BLK_S_IOERR);
        }
    } else {
        g_assert_true(testvq_wait_used(f->tvq, TIMEOUT_MS));
        g_assert_false(virtqueue_is_broken(f->vq));
        g_assert_cmpuint(blkfix_used_len(&c.f, head), ==, hc->used_len);
        if (c.status_gpa) {
            g_assert_cmpuint(testdrv_readb(f->d, c.status_gpa), ==, hc->status);
        }
        g_assert_true(testvq_wait_call(f->tvq, TIMEOUT_MS));
    }
    check_followup_dp(f, &c, broken);

    /* The iothread survived the case: it still runs work and lets go of the queue. */
    iothread_run_sync(f->iothread, noop, NULL);
    dpfix_stop(f);
    g_assert_false(dataplane_is_started(f->dp));
    dataplane_get_queue_stats(f->dp, 0, &st);
    g_assert_cmpuint(st.inflight, ==, 0);
    g_assert_cmpuint(virtio_blk_queue_inflight(f->q), ==, 0);
    if (broken) {
        g_assert_true(virtqueue_is_broken(f->vq));
        g_assert_cmpstr(virtqueue_broken_reason(f->vq), ==, hc->reason);
        g_assert_cmpuint(__atomic_load_n(&broken_calls, __ATOMIC_SEQ_CST), ==, 1);
        g_test_message("%s/%s: %s", dc->engine, hc->name, virtqueue_broken_reason(f->vq));
    } else {
        g_assert_false(virtqueue_is_broken(f->vq));
        g_assert_null(virtqueue_broken_reason(f->vq));
        g_assert_cmpuint(broken_calls, ==, 0);
    }
    dpfix_free(f);
}

int main(int argc, char **argv)
{
    static const char *const engines[] = {"native", "io_uring"};

    g_test_init(&argc, &argv, NULL);
    for (size_t e = 0; e < G_N_ELEMENTS(engines); e++) {
        for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
            g_autofree char *path = g_strdup_printf("/dp-hostile/%s/%s", engines[e], cases[i].name);

            dp_cases[e][i] = (DpCase){.hc = &cases[i], .engine = engines[e]};
            g_test_add_data_func(path, &dp_cases[e][i], run_dp_case);
        }
    }
    return g_test_run();
}
