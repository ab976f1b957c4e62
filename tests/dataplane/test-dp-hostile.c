/*
 * Hostile-driver suite with the dataplane executing: every malformed ring or
 * request case of tests/virtio/hostile-cases.c, served by a DataPlane on its
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
 * The cases come from tests/virtio/hostile-cases.c, the library the virtio
 * suite runs too. The cases that keep requests in flight and republish while
 * they are (.holds: duplicate-head, over-submit) have their builder run
 * inside the iothread, where no completion can be reaped meanwhile, followed
 * by the pass the next kick would make.
 */
#include <string.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_ring.h>

#include "virtio/virtio-blk.h"
#include "dphostile-fix.h"
#include "hostile-cases.h"

#define TIMEOUT_MS 10000

/* Set while a case's builder runs in the iothread (see build_in_iothread). */
static bool building_in_iothread;

/* The IOQ holds every request in flight while an iothread callback runs. */
static void dp_hold(HostileFix *h)
{
}

/* In flight on the IOQ: nothing is reaped while this iothread callback runs. */
static unsigned dp_pass(HostileFix *h)
{
    g_assert_true(building_in_iothread);
    virtio_blk_handle_queue(h->q);
    return virtio_blk_queue_inflight(h->q);
}

static const HostileOps dp_ops = {.hold = dp_hold, .pass = dp_pass};

typedef struct DpCase {
    const HostileCase *hc;
    const char *engine;
} DpCase;

typedef struct InThread {
    HostileFix *h;
    const HostileCase *hc;
    int head;
} InThread;

static void build_in_iothread(void *opaque)
{
    InThread *t = opaque;

    building_in_iothread = true;
    t->head = t->hc->build(t->h);
    /* The pass the next kick makes, with the case's requests still in flight. */
    dp_pass(t->h);
    virtio_blk_queue_flush(t->h->q);
    building_in_iothread = false;
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
static void check_followup_dp(DpFix *f, HostileFix *h, bool broken)
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
    g_assert_cmpuint(hostile_used_len(h, r.head), ==, 4096 + 1);
    g_assert_cmpuint(testblk_status(f->tvq, &r), ==, VIRTIO_BLK_S_OK);
}

static void run_dp_case(gconstpointer data)
{
    const DpCase *dc = data;
    const HostileCase *hc = dc->hc;
    bool broken = hc->status == HOSTILE_BROKEN;
    unsigned broken_calls = 0;
    DataPlaneQueueStats st;
    VirtIOBlkConf conf;
    HostileFix h;
    DpFix *f;
    int head;

    hostile_case_conf(hc, &conf);
    f = dphostile_fix_new(&(DpHostileOpts){.engine = dc->engine,
                                           .conf = &conf,
                                           .features = hc->features,
                                           .nregions = hc->nregions,
                                           .broken_calls = &broken_calls});
    if (!f) {
        g_test_skip("engine or O_DIRECT not usable here");
        return;
    }
    h = (HostileFix){.drv = f->d, .tvq = f->tvq, .q = f->q, .ops = &dp_ops, .opaque = f};
    dpfix_start(f);

    if (hc->holds) {
        InThread t = {.h = &h, .hc = hc};

        iothread_run_sync(f->iothread, build_in_iothread, &t);
        head = t.head;
    } else {
        head = hc->build(&h);
        kick_and_sync(f);
    }

    if (broken) {
        g_assert_true(virtqueue_is_broken(f->vq));
    } else {
        g_assert_true(testvq_wait_used(f->tvq, TIMEOUT_MS));
        g_assert_false(virtqueue_is_broken(f->vq));
    }
    hostile_check_used(hc, &h, head);
    if (!broken) {
        g_assert_true(testvq_wait_call(f->tvq, TIMEOUT_MS));
    }
    check_followup_dp(f, &h, broken);

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
    DpCase *dp_cases = g_new(DpCase, G_N_ELEMENTS(engines) * hostile_ncases);
    int ret;

    g_test_init(&argc, &argv, NULL);
    for (size_t e = 0; e < G_N_ELEMENTS(engines); e++) {
        for (size_t i = 0; i < hostile_ncases; i++) {
            g_autofree char *path =
                g_strdup_printf("/dp-hostile/%s/%s", engines[e], hostile_cases[i].name);
            DpCase *dc = &dp_cases[e * hostile_ncases + i];

            *dc = (DpCase){.hc = &hostile_cases[i], .engine = engines[e]};
            g_test_add_data_func(path, dc, run_dp_case);
        }
    }
    ret = g_test_run();
    g_free(dp_cases);
    return ret;
}
