/*
 * A virtio-blk device's two request paths and the runtime switch between
 * them; see include/devices/dp-switch.h.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include "devices/block-exec.h"
#include "devices/dp-switch.h"
#include "util/error-report.h"
#include "util/thread-check.h"

#define DP_SWITCH_ERROR g_quark_from_static_string("vblk-dp-switch-error")

/*
 * "Main loop, BQL held", asserted as far as this module can see it (compiled
 * out with NDEBUG): main-loop context (THREAD_ASSERT_MAIN: the main thread or
 * the BQL holder, e.g. a vCPU thread at a virtio status write), and never the
 * dataplane's iothread, where the
 * synchronous hand-over to that iothread would deadlock.
 */
#define DP_SWITCH_ASSERT_CONTROL(iothread)                                                         \
    do {                                                                                           \
        THREAD_ASSERT_MAIN();                                                                      \
        assert(!event_loop_in_owner(iothread_get_loop(iothread)));                                 \
    } while (0)

typedef struct SwQueue {
    struct DpSwitch *sw;
    DataPlaneQueue dq;
    bool block_layer; /* the main loop serves this queue now */
} SwQueue;

struct DpSwitch {
    DpSwitchConf conf;
    DataPlane *dp;
    BlkExec *exec;
    bool started;
    bool on_dataplane;
    DpSwitchStats st;
    SwQueue q[];
};

/* ---- block-layer path (main loop) ---- */

/* BlkExec's once-per-batch hook. */
static void bl_exec_notify(void *opaque, VirtIOBlkQueue *q)
{
    DpSwitch *sw = opaque;

    for (unsigned i = 0; i < sw->conf.num_queues; i++) {
        /* A hook queued before a switch may arrive after it: only our queues. */
        if (sw->q[i].dq.q == q && sw->q[i].block_layer) {
            virtio_blk_queue_notify(q, &sw->q[i].dq.notifier);
        }
    }
}

/* The same pass as the dataplane's, with the BlkExec executor. */
static void bl_process(SwQueue *sq)
{
    virtio_blk_queue_process(sq->dq.q, NULL);
    /* requests completed inline (GET_ID, invalid ones) */
    virtio_blk_queue_notify(sq->dq.q, &sq->dq.notifier);
}

static void bl_kick(void *opaque)
{
    SwQueue *sq = opaque;
    uint64_t cnt;

    DP_SWITCH_ASSERT_CONTROL(sq->sw->conf.iothread); /* the main loop's handler */
    if (read(sq->dq.host_notifier, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN) {
        return;
    }
    bl_process(sq);
}

static const EventFdOps bl_kick_ops = {.read = bl_kick};

static bool bl_attach(DpSwitch *sw, GError **errp)
{
    for (unsigned i = 0; i < sw->conf.num_queues; i++) {
        SwQueue *sq = &sw->q[i];

        virtio_blk_queue_set_exec(sq->dq.q, blk_exec_ops(), sw->exec);
        if (!event_loop_set_fd_handler(sw->conf.main_loop, sq->dq.host_notifier, &bl_kick_ops, sq,
                                       errp)) {
            while (i-- > 0) {
                event_loop_set_fd_handler(sw->conf.main_loop, sw->q[i].dq.host_notifier, NULL, NULL,
                                          NULL);
                sw->q[i].block_layer = false;
                virtio_blk_queue_set_exec(sw->q[i].dq.q, NULL, NULL);
            }
            virtio_blk_queue_set_exec(sq->dq.q, NULL, NULL);
            return false;
        }
        sq->block_layer = true;
    }
    /* Kick once: what arrived while no one watched the notifiers. */
    for (unsigned i = 0; i < sw->conf.num_queues; i++) {
        bl_process(&sw->q[i]);
    }
    return true;
}

/* Requests of the block layer still running; parked ones wait for 'cont' instead. */
static unsigned bl_running(DpSwitch *sw)
{
    unsigned inflight = blk_exec_inflight(sw->exec);
    unsigned parked = blk_parked_count(sw->conf.backend);

    return inflight > parked ? inflight - parked : 0;
}

/*
 * Returns false when requests are parked by werror/rerror=stop (before or
 * during the drain): they belong to the block layer until 'cont', so the
 * caller must not hand the queues over.
 */
static bool bl_detach(DpSwitch *sw)
{
    for (unsigned i = 0; i < sw->conf.num_queues; i++) {
        SwQueue *sq = &sw->q[i];
        uint64_t cnt;

        event_loop_set_fd_handler(sw->conf.main_loop, sq->dq.host_notifier, NULL, NULL, NULL);
        /* Test-and-clear: the chains it announced stay in the ring for the next path. */
        while (read(sq->dq.host_notifier, &cnt, sizeof(cnt)) > 0) {
        }
    }
    /* Wait for every request of the block layer, then publish their completions. */
    blk_drain(sw->conf.backend);
    while (bl_running(sw)) {
        event_loop_run_once(sw->conf.main_loop, true);
    }
    for (unsigned i = 0; i < sw->conf.num_queues; i++) {
        SwQueue *sq = &sw->q[i];

        virtio_blk_queue_notify(sq->dq.q, &sq->dq.notifier);
        sq->block_layer = false;
        virtio_blk_queue_set_exec(sq->dq.q, NULL, NULL);
    }
    return blk_parked_count(sw->conf.backend) == 0;
}

/* ---- one throttle and one set of counters for the drive ---- */

/*
 * The bucket state follows the queues: the block layer's while it serves
 * them (or nobody does), the dataplane's while it runs. Handing the levels
 * over, not just the limits, keeps a switch from giving free tokens.
 */
static void throttle_to_dataplane(DpSwitch *sw)
{
    ThrottleState ts;

    blk_get_throttle_state(sw->conf.backend, &ts);
    dataplane_set_throttle_state(sw->dp, &ts);
}

static void throttle_to_block_layer(DpSwitch *sw)
{
    ThrottleState ts;

    dataplane_get_throttle_state(sw->dp, &ts);
    blk_set_throttle_state(sw->conf.backend, &ts);
}

/* ---- werror / rerror on the dataplane ---- */

static DataPlaneErrorPolicy dp_policy(BlockErrorPolicy p)
{
    switch (p) {
    case BLOCK_ERR_IGNORE:
        return DATAPLANE_ERR_IGNORE;
    case BLOCK_ERR_STOP:
        return DATAPLANE_ERR_STOP;
    case BLOCK_ERR_ENOSPC:
        return DATAPLANE_ERR_ENOSPC;
    default:
        return DATAPLANE_ERR_REPORT;
    }
}

/* The drive's werror/rerror, for the dataplane about to start. */
static void error_policy_to_dataplane(DpSwitch *sw)
{
    BlockErrorPolicy r, w;

    blk_get_error_policy(sw->conf.backend, &r, &w);
    dataplane_set_error_policy(sw->dp, dp_policy(r), dp_policy(w));
}

/*
 * The dataplane's failures, in the main loop: the drive's error hook sees
 * them as its own (BLOCK_IO_ERROR, and the VM stop for action "stop").
 */
static void dp_io_error(void *opaque, const DataPlaneIOError *ev)
{
    DpSwitch *sw = opaque;
    static const BlockErrorAction actions[] = {
        [DATAPLANE_ERR_ACTION_REPORT] = BLOCK_ERR_ACTION_REPORT,
        [DATAPLANE_ERR_ACTION_IGNORE] = BLOCK_ERR_ACTION_IGNORE,
        [DATAPLANE_ERR_ACTION_STOP] = BLOCK_ERR_ACTION_STOP,
    };

    DP_SWITCH_ASSERT_CONTROL(sw->conf.iothread);
    blk_emit_io_error(sw->conf.backend, ev->is_read, actions[ev->action], ev->error);
}

/* Context: main loop, BQL held */
void dp_switch_resume(DpSwitch *sw)
{
    DP_SWITCH_ASSERT_CONTROL(sw->conf.iothread);
    if (sw->started && sw->on_dataplane) {
        dataplane_resume(sw->dp);
    }
}

/* Context: main loop, BQL held */
bool dp_switch_set_io_limits(DpSwitch *sw, const ThrottleLimits *limits, GError **errp)
{
    DP_SWITCH_ASSERT_CONTROL(sw->conf.iothread);
    if (!blk_set_io_limits(sw->conf.backend, limits, errp)) {
        return false;
    }
    if (sw->started && sw->on_dataplane) {
        throttle_to_dataplane(sw); /* fresh buckets, as the block layer's */
    }
    return true;
}

/* ---- lifecycle ---- */

/* Context: main loop, BQL held */
DpSwitch *dp_switch_new(const DpSwitchConf *conf, GError **errp)
{
    DpSwitch *sw;
    DataPlaneConf dc = {
        .blk = conf->blk,
        .iothread = conf->iothread,
        .ioq = conf->ioq,
        .num_queues = conf->num_queues,
        .queue_size = conf->queue_size,
        .no_flush = conf->no_flush,
        .main_loop = conf->main_loop,
        .error_hook = dp_io_error,
    };

    if (!conf->blk || !conf->main_loop || !conf->backend || !conf->iothread) {
        g_set_error(errp, DP_SWITCH_ERROR, EINVAL, "both paths need their resources");
        return NULL;
    }
    DP_SWITCH_ASSERT_CONTROL(conf->iothread);
    sw = g_malloc0(sizeof(*sw) + conf->num_queues * sizeof(SwQueue));
    sw->conf = *conf;
    for (unsigned i = 0; i < conf->num_queues; i++) {
        sw->q[i].sw = sw;
    }
    dc.error_opaque = sw;
    sw->dp = dataplane_create(&dc, errp);
    if (!sw->dp) {
        g_free(sw);
        return NULL;
    }
    sw->exec = blk_exec_new(conf->backend, conf->blk, bl_exec_notify, sw);
    {
        unsigned n;
        BlockAcctShard *shards = dataplane_acct_shards(sw->dp, &n);

        /* query-blockstats counts the dataplane's requests as the drive's. */
        blk_acct_attach_shards(conf->backend, shards, n);
    }
    return sw;
}

/* Context: main loop, BQL held */
bool dp_switch_start(DpSwitch *sw, bool dataplane, const DataPlaneQueue *queues, unsigned n,
                     GError **errp)
{
    DP_SWITCH_ASSERT_CONTROL(sw->conf.iothread);
    if (sw->started) {
        g_set_error(errp, DP_SWITCH_ERROR, EBUSY, "already started");
        return false;
    }
    if (n != sw->conf.num_queues) {
        g_set_error(errp, DP_SWITCH_ERROR, EINVAL, "%u queues given, %u configured", n,
                    sw->conf.num_queues);
        return false;
    }
    for (unsigned i = 0; i < n; i++) {
        sw->q[i].dq = queues[i];
        /* The main loop reads the kick and writes the call without ever blocking. */
        fcntl(queues[i].host_notifier, F_SETFL,
              fcntl(queues[i].host_notifier, F_GETFL) | O_NONBLOCK);
        guest_notifier_set_nonblocking(&queues[i].notifier);
    }
    if (dataplane) {
        throttle_to_dataplane(sw);
        error_policy_to_dataplane(sw);
    }
    if (dataplane ? !dataplane_start(sw->dp, queues, n, errp) : !bl_attach(sw, errp)) {
        return false;
    }
    sw->on_dataplane = dataplane;
    __atomic_store_n(&sw->started, true, __ATOMIC_RELEASE);
    return true;
}

/* Context: main loop, BQL held */
void dp_switch_stop(DpSwitch *sw)
{
    DP_SWITCH_ASSERT_CONTROL(sw->conf.iothread);
    if (!sw->started) {
        return;
    }
    if (sw->on_dataplane) {
        dataplane_stop(sw->dp);
        throttle_to_block_layer(sw);
    } else {
        bl_detach(sw);
    }
    __atomic_store_n(&sw->started, false, __ATOMIC_RELEASE);
}

/* Context: main loop, BQL held */
bool dp_switch_set_dataplane(DpSwitch *sw, bool on, GError **errp)
{
    DataPlaneQueue dqs[DATAPLANE_MAX_QUEUES];
    int64_t t0;
    uint64_t ns;
    bool ok;

    DP_SWITCH_ASSERT_CONTROL(sw->conf.iothread);
    if (!sw->started || sw->on_dataplane == on) {
        __atomic_store_n(&sw->on_dataplane, sw->started ? sw->on_dataplane : on, __ATOMIC_RELEASE);
        return true;
    }
    t0 = event_clock_ns();
    if (on) {
        if (!bl_detach(sw)) {
            if (!bl_attach(sw, NULL)) {
                error_report_id(sw->conf.id, "the device lost both request paths");
            }
            g_set_error(errp, DP_SWITCH_ERROR, EBUSY,
                        "%u request(s) failed with werror/rerror=stop and wait for 'cont'; "
                        "staying on the block layer",
                        blk_parked_count(sw->conf.backend));
            return false;
        }
        throttle_to_dataplane(sw);
        error_policy_to_dataplane(sw);
        for (unsigned i = 0; i < sw->conf.num_queues; i++) {
            dqs[i] = sw->q[i].dq;
        }
        ok = dataplane_start(sw->dp, dqs, sw->conf.num_queues, errp);
        if (!ok && !bl_attach(sw, NULL)) {
            error_report_id(sw->conf.id, "the device lost both request paths");
        }
    } else {
        /*
         * Requests held by werror/rerror=stop stay in the iothread until
         * 'cont': the switch is refused and the dataplane keeps running.
         */
        if (!dataplane_try_stop(sw->dp, errp)) {
            g_prefix_error(errp, "staying on the dataplane: ");
            return false;
        }
        throttle_to_block_layer(sw);
        ok = bl_attach(sw, errp);
        if (!ok) {
            for (unsigned i = 0; i < sw->conf.num_queues; i++) {
                dqs[i] = sw->q[i].dq;
            }
            if (!dataplane_start(sw->dp, dqs, sw->conf.num_queues, NULL)) {
                error_report_id(sw->conf.id, "the device lost both request paths");
            }
        }
    }
    if (!ok) {
        return false;
    }
    ns = (uint64_t)(event_clock_ns() - t0);
    __atomic_store_n(&sw->on_dataplane, on, __ATOMIC_RELEASE);
    sw->st.switches++;
    sw->st.last_stall_ns = ns;
    sw->st.total_stall_ns += ns;
    if (ns > sw->st.max_stall_ns) {
        sw->st.max_stall_ns = ns;
    }
    return true;
}

/* Context: any thread */
bool dp_switch_is_dataplane(DpSwitch *sw)
{
    return __atomic_load_n(&sw->on_dataplane, __ATOMIC_ACQUIRE);
}

/* Context: any thread */
DataPlane *dp_switch_dataplane(DpSwitch *sw)
{
    return sw->dp;
}

/* Context: any thread (values written under the BQL; a torn read is harmless) */
void dp_switch_get_stats(DpSwitch *sw, DpSwitchStats *st)
{
    *st = sw->st;
}

/* Context: main loop, BQL held */
void dp_switch_free(DpSwitch *sw)
{
    if (!sw) {
        return;
    }
    DP_SWITCH_ASSERT_CONTROL(sw->conf.iothread);
    dp_switch_stop(sw);
    blk_acct_detach_shards(sw->conf.backend); /* folded in: totals stay */
    blk_exec_free(sw->exec);
    dataplane_destroy(sw->dp);
    g_free(sw);
}
