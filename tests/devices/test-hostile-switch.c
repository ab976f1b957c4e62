/*
 * The hostile-driver cases of tests/virtio/hostile-cases.c during a path
 * switch: a whole device (tests/devices/devfix.h: the DpSwitch over a file
 * drive, the dataplane on its iothread with libaio or io_uring, the block
 * layer in the test's main loop) serves each case while x-data-plane flips.
 *
 * Three timings per case and engine:
 *   - to-block: the case's chains are published on the dataplane without a
 *     kick, then the device switches to the block layer, whose start pass
 *     finds them;
 *   - to-dataplane: the same from the block layer to the dataplane;
 *   - kick-then-switch: published on the dataplane, kicked, and the switch
 *     starts at once, racing the iothread's pass over the hostile chains.
 * The outcome must be the case's exact one (the status byte and used
 * length, or a broken queue with the known reason, the broken notifier run
 * once and the chain back where the case says), whichever path saw it. Then
 * a valid read is served, or refused on a broken queue, and the device stops
 * with nothing in flight. A switch may be refused once the queue is broken
 * (the switch needs a healthy ring); it must not crash or hang.
 *
 * Not here: the cases that hold requests in flight while they republish
 * (.holds): they need the executor paused, which a live switch does not
 * allow. tests/virtio/test-hostile.c and tests/dataplane/test-dp-hostile.c
 * run them.
 */
#include <string.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_ring.h>

#include "devfix.h"
#include "hostile-cases.h"
#include "virtio/virtio-blk.h"

#define TIMEOUT_US (10 * G_USEC_PER_SEC)

typedef enum { TO_BLOCK, TO_DATAPLANE, KICK_THEN_SWITCH } Timing;

static const char *const timing_names[] = {"to-block", "to-dataplane", "kick-then-switch"};

typedef struct SwCase {
    const HostileCase *hc;
    const char *aio;
    Timing timing;
} SwCase;

static void on_broken(void *opaque, VirtQueue *vq, const char *reason)
{
    unsigned *calls = opaque;

    g_assert(reason && *reason);
    __atomic_add_fetch(calls, 1, __ATOMIC_SEQ_CST);
}

/* Serve the main loop (the block layer's path) until @done or the deadline. */
static bool pump_until(DevFix *f, bool (*done)(DevFix *f, void *o), void *o)
{
    gint64 deadline = g_get_monotonic_time() + TIMEOUT_US;

    while (!done(f, o)) {
        if (g_get_monotonic_time() > deadline) {
            return false;
        }
        event_loop_run_once(f->main_loop, false);
        g_usleep(50);
    }
    return true;
}

static bool queue_broken(DevFix *f, void *o)
{
    return virtqueue_is_broken(f->vq[0]);
}

static bool used_moved(DevFix *f, void *o)
{
    return testvq_used_idx(f->tvq[0]) != *(uint16_t *)o;
}

static bool nothing_in_flight(DevFix *f, void *o)
{
    return virtio_blk_queue_inflight(f->q[0]) == 0;
}

/* Switch the running device; a refusal is allowed only once the queue is broken. */
static void flip(DevFix *f, bool to_dataplane)
{
    GError *err = NULL;

    if (!dp_switch_set_dataplane(f->sw, to_dataplane, &err)) {
        g_assert_nonnull(err);
        g_test_message("switch refused: %s", err->message);
        g_assert_true(virtqueue_is_broken(f->vq[0]));
        g_error_free(err);
    }
}

/* A valid read after the case: served on a live queue, refused on a broken one. */
static void followup(DevFix *f, HostileFix *h, bool broken)
{
    uint16_t before = testvq_used_idx(f->tvq[0]);
    TestBlkReq r;

    if (broken) {
        r = testblk_prepare(f->tvq[0], VIRTIO_BLK_T_IN, 0, NULL, 4096);
        testvq_set_desc(f->tvq[0], 0, r.hdr_gpa, 16, VRING_DESC_F_NEXT, 1);
        testvq_set_desc(f->tvq[0], 1, r.data_gpa, 4096, VRING_DESC_F_NEXT | VRING_DESC_F_WRITE, 2);
        testvq_set_desc(f->tvq[0], 2, r.status_gpa, 1, VRING_DESC_F_WRITE, 0);
        testvq_publish(f->tvq[0], 0);
        testvq_kick_force(f->tvq[0]);
        for (int i = 0; i < 200; i++) { /* 20 ms of chances to (wrongly) serve it */
            event_loop_run_once(f->main_loop, false);
            g_usleep(100);
        }
        g_assert_cmpuint(testvq_used_idx(f->tvq[0]), ==, before);
        g_assert_cmpuint(testblk_status(f->tvq[0], &r), ==, 0xff);
        return;
    }
    r = testblk_submit(f->tvq[0], VIRTIO_BLK_T_IN, 0, NULL, 4096, true);
    g_assert_cmpint(r.head, >=, 0);
    testvq_kick_force(f->tvq[0]);
    g_assert_true(pump_until(f, used_moved, &before));
    g_assert_cmpuint(hostile_used_len(h, r.head), ==, 4096 + 1);
    g_assert_cmpuint(testblk_status(f->tvq[0], &r), ==, VIRTIO_BLK_S_OK);
}

static void run_case(gconstpointer data)
{
    const SwCase *sc = data;
    const HostileCase *hc = sc->hc;
    bool broken = hc->status == HOSTILE_BROKEN;
    bool start_dp = sc->timing != TO_DATAPLANE;
    g_autofree char *drive = g_strdup_printf("file=%%s,format=raw,cache=none,aio=%s", sc->aio);
    unsigned broken_calls = 0;
    uint16_t used_before;
    VirtIOBlkConf conf;
    GError *err = NULL;
    HostileFix h;
    DevFix f;
    int head;

    hostile_case_conf(hc, &conf);
    if (!devfix_init(&f,
                     &(DevFixConf){.drive = drive,
                                   .dir = "/var/tmp",
                                   .bytes = conf.capacity * VIRTIO_BLK_SECTOR_SIZE,
                                   .queue_size = HOSTILE_QUEUE_SIZE,
                                   .iothread = "hostile-switch",
                                   .blk_conf = &conf,
                                   .driver_features = hc->features,
                                   .nregions = hc->nregions},
                     &err)) {
        g_test_skip(err->message); /* O_DIRECT or io_uring not usable here */
        g_error_free(err);
        devfix_fini(&f);
        return;
    }
    virtqueue_set_broken_notifier(f.vq[0], on_broken, &broken_calls);
    devfix_start(&f, start_dp, NULL);
    g_assert_true(dp_switch_is_dataplane(f.sw) == start_dp);
    h = (HostileFix){.drv = f.d, .tvq = f.tvq[0], .q = f.q[0], .opaque = &f};
    used_before = testvq_used_idx(f.tvq[0]);

    head = hc->build(&h);
    if (sc->timing == KICK_THEN_SWITCH) {
        testvq_kick_force(f.tvq[0]);
    }
    flip(&f, !start_dp);

    if (broken) {
        g_assert_true(pump_until(&f, queue_broken, NULL));
    } else {
        g_assert_true(pump_until(&f, used_moved, &used_before));
        g_assert_false(virtqueue_is_broken(f.vq[0]));
    }
    /* Whatever the path, it has let go of the case's requests. */
    g_assert_true(pump_until(&f, nothing_in_flight, NULL));
    hostile_check_used(hc, &h, head);
    followup(&f, &h, broken);
    /* And back once more: the device stays usable (or stays broken). */
    flip(&f, start_dp);
    if (!broken) {
        followup(&f, &h, false);
    }
    g_assert_cmpuint(virtio_blk_queue_inflight(f.q[0]), ==, 0);
    if (broken) {
        g_assert_cmpstr(virtqueue_broken_reason(f.vq[0]), ==, hc->reason);
        g_assert_cmpuint(__atomic_load_n(&broken_calls, __ATOMIC_SEQ_CST), ==, 1);
    } else {
        g_assert_cmpuint(broken_calls, ==, 0);
    }
    devfix_fini(&f);
}

int main(int argc, char **argv)
{
    static const char *const aios[] = {"native", "io_uring"};
    GPtrArray *cases = g_ptr_array_new_with_free_func(g_free);
    unsigned registered = 0;
    int ret;

    g_test_init(&argc, &argv, NULL);
    for (size_t i = 0; i < hostile_ncases; i++) {
        if (hostile_cases[i].holds) {
            continue; /* see the header */
        }
        for (unsigned a = 0; a < G_N_ELEMENTS(aios); a++) {
            for (unsigned t = 0; t < G_N_ELEMENTS(timing_names); t++) {
                SwCase *sc = g_new(SwCase, 1);
                g_autofree char *path = NULL;

                *sc = (SwCase){.hc = &hostile_cases[i], .aio = aios[a], .timing = t};
                g_ptr_array_add(cases, sc);
                path = g_strdup_printf("/hostile-switch/%s/%s/%s", aios[a], timing_names[t],
                                       hostile_cases[i].name);
                g_test_add_data_func(path, sc, run_case);
                registered++;
            }
        }
    }
    g_assert_cmpuint(registered, >=, 60 * 2 * 3);
    ret = g_test_run();
    g_ptr_array_free(cases, TRUE);
    return ret;
}
