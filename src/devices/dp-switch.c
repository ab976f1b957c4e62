/*
 * A virtio-blk device's two request paths and the runtime switch between
 * them; see include/devices/dp-switch.h.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
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

/* One dataplane: one iothread and the device queues it serves. */
typedef struct SwDp {
    IOThread *iothread;
    DataPlane *dp;
    unsigned n;
    unsigned qidx[DATAPLANE_MAX_QUEUES]; /* device queue indices, ascending */
} SwDp;

struct DpSwitch {
    DpSwitchConf conf;
    IOThread *map[DATAPLANE_MAX_QUEUES]; /* each queue's iothread */
    /*
     * One dataplane per iothread the device ever used: those of @map serve
     * their queues (n > 0), the others are idle (n == 0, stopped) and kept
     * with their IOQ for the next remap to them (an IOQ is dear to make and
     * to free: io_destroy() waits for an RCU grace period).
     */
    SwDp *dps;
    unsigned ndp;
    BlockAcctShard *acct;                               /* one per device queue */
    DataPlaneQueueStats retired[DATAPLANE_MAX_QUEUES]; /* of dataplanes freed by remaps */
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
 * With several iothreads each dataplane gets the drive's state and the
 * first one's levels come back (docs/architecture.md, "Multiqueue"): the limits hold
 * per iothread, not for the drive as a whole.
 */
static void throttle_to_dataplane(DpSwitch *sw)
{
    ThrottleState ts;

    blk_get_throttle_state(sw->conf.backend, &ts);
    for (unsigned i = 0; i < sw->ndp; i++) {
        if (sw->dps[i].n) {
            dataplane_set_throttle_state(sw->dps[i].dp, &ts);
        }
    }
}

/* The first dataplane that serves queues (there is always one). */
static SwDp *first_active(DpSwitch *sw)
{
    for (unsigned i = 0; i < sw->ndp; i++) {
        if (sw->dps[i].n) {
            return &sw->dps[i];
        }
    }
    g_assert_not_reached();
}

static void throttle_to_block_layer(DpSwitch *sw)
{
    ThrottleState ts;

    dataplane_get_throttle_state(first_active(sw)->dp, &ts);
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
    for (unsigned i = 0; i < sw->ndp; i++) {
        dataplane_set_error_policy(sw->dps[i].dp, dp_policy(r), dp_policy(w));
    }
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
        for (unsigned i = 0; i < sw->ndp; i++) {
            if (sw->dps[i].n) {
                dataplane_resume(sw->dps[i].dp);
            }
        }
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

/* ---- the dataplanes: one per iothread of the mapping ---- */

/* Group the queues of @map by iothread, in the order iothreads first appear. */
static unsigned group_map(unsigned nq, IOThread *const *map, SwDp *out)
{
    unsigned n = 0;

    for (unsigned q = 0; q < nq; q++) {
        unsigned g = 0;

        while (g < n && out[g].iothread != map[q]) {
            g++;
        }
        if (g == n) {
            out[n++] = (SwDp){.iothread = map[q]};
        }
        out[g].qidx[out[g].n++] = q;
    }
    return n;
}

/* A dataplane for @g's queues (not started), with the drive's policy. */
static bool sw_dp_create(DpSwitch *sw, SwDp *g, GError **errp)
{
    DataPlaneConf dc = {
        .blk = sw->conf.blk,
        .iothread = g->iothread,
        .ioq = sw->conf.ioq,
        .num_queues = g->n,
        .max_queues = sw->conf.num_queues,
        .queue_size = sw->conf.queue_size,
        .no_flush = sw->conf.no_flush,
        .acct = sw->acct,
        .queue_index = g->qidx,
        .main_loop = sw->conf.main_loop,
        .error_hook = dp_io_error,
        .error_opaque = sw,
    };
    BlockErrorPolicy r, w;

    if (iothread_get_aio_max_batch(g->iothread)) {
        dc.ioq.max_batch = iothread_get_aio_max_batch(g->iothread); /* aio-max-batch, as QEMU */
    }
    dc.ioq.submit_early = iothread_get_submit_early(g->iothread);
    dc.complete_hold_ns = iothread_get_complete_hold(g->iothread, &dc.complete_hold_depth);
    assert(!event_loop_in_owner(iothread_get_loop(g->iothread)));
    g->dp = dataplane_create(&dc, errp);
    if (!g->dp) {
        return false;
    }
    blk_get_error_policy(sw->conf.backend, &r, &w);
    dataplane_set_error_policy(g->dp, dp_policy(r), dp_policy(w));
    return true;
}

/* Keep the counters of @g's queues (stopped): its dataplane forgets them. */
static void sw_dp_retire(DpSwitch *sw, SwDp *g)
{
    for (unsigned i = 0; g->dp && i < g->n; i++) {
        DataPlaneQueueStats st;
        DataPlaneQueueStats *r = &sw->retired[g->qidx[i]];

        dataplane_get_queue_stats(g->dp, i, &st);
        r->requests += st.requests;
        r->completed += st.completed;
        r->batches += st.batches;
        r->kicks += st.kicks;
        r->irqs += st.irqs;
        r->irqs_suppressed += st.irqs_suppressed;
        r->publishes += st.publishes;
        r->throttle_waits += st.throttle_waits;
        r->cycles_pop += st.cycles_pop;
        r->cycles_submit += st.cycles_submit;
        r->cycles_complete += st.cycles_complete;
        r->cycles_notify += st.cycles_notify;
    }
}

static bool sw_dp_start(DpSwitch *sw, SwDp *g, GError **errp)
{
    DataPlaneQueue dqs[DATAPLANE_MAX_QUEUES];

    for (unsigned i = 0; i < g->n; i++) {
        dqs[i] = sw->q[g->qidx[i]].dq;
    }
    return dataplane_start(g->dp, dqs, g->n, errp);
}

static void dataplanes_stop(DpSwitch *sw)
{
    for (unsigned i = 0; i < sw->ndp; i++) {
        dataplane_stop(sw->dps[i].dp); /* idle ones: a no-op */
    }
}

/* All or nothing: a dataplane that fails leaves every one stopped. */
static bool dataplanes_start(DpSwitch *sw, GError **errp)
{
    for (unsigned i = 0; i < sw->ndp; i++) {
        if (sw->dps[i].n && !sw_dp_start(sw, &sw->dps[i], errp)) {
            while (i-- > 0) {
                dataplane_stop(sw->dps[i].dp);
            }
            return false;
        }
    }
    return true;
}

/*
 * dataplane_try_stop() on every dataplane; if one keeps requests held for
 * 'cont', the ones already stopped start again and false is returned.
 */
static bool dataplanes_try_stop(DpSwitch *sw, GError **errp)
{
    for (unsigned i = 0; i < sw->ndp; i++) {
        if (!dataplane_try_stop(sw->dps[i].dp, errp)) {
            while (i-- > 0) {
                if (sw->dps[i].n && !sw_dp_start(sw, &sw->dps[i], NULL)) {
                    error_report_id(sw->conf.id, "queues of iothread %u lost their dataplane", i);
                }
            }
            return false;
        }
    }
    return true;
}

/* ---- lifecycle ---- */

/* Context: main loop, BQL held */
DpSwitch *dp_switch_new(const DpSwitchConf *conf, GError **errp)
{
    DpSwitch *sw;

    if (!conf->blk || !conf->main_loop || !conf->backend || !conf->iothread) {
        g_set_error(errp, DP_SWITCH_ERROR, EINVAL, "both paths need their resources");
        return NULL;
    }
    if (conf->num_queues == 0 || conf->num_queues > DATAPLANE_MAX_QUEUES) {
        g_set_error(errp, DP_SWITCH_ERROR, EINVAL, "%u queues: 1..%u supported", conf->num_queues,
                    DATAPLANE_MAX_QUEUES);
        return NULL;
    }
    DP_SWITCH_ASSERT_CONTROL(conf->iothread);
    sw = g_malloc0(sizeof(*sw) + conf->num_queues * sizeof(SwQueue));
    sw->conf = *conf;
    for (unsigned i = 0; i < conf->num_queues; i++) {
        sw->q[i].sw = sw;
        sw->map[i] = conf->vq_iothread[i] ? conf->vq_iothread[i] : conf->iothread;
    }
    sw->acct = g_new0(BlockAcctShard, conf->num_queues);
    /* query-blockstats counts the dataplanes' requests as the drive's. */
    blk_acct_attach_shards(conf->backend, sw->acct, conf->num_queues);
    sw->dps = g_new0(SwDp, conf->num_queues);
    sw->ndp = group_map(conf->num_queues, sw->map, sw->dps);
    for (unsigned i = 0; i < sw->ndp; i++) {
        if (!sw_dp_create(sw, &sw->dps[i], errp)) {
            while (i-- > 0) {
                dataplane_destroy(sw->dps[i].dp);
            }
            blk_acct_detach_shards(conf->backend);
            g_free(sw->acct);
            g_free(sw->dps);
            g_free(sw);
            return NULL;
        }
    }
    sw->exec = blk_exec_new(conf->backend, conf->blk, bl_exec_notify, sw);
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
    if (dataplane ? !dataplanes_start(sw, errp) : !bl_attach(sw, errp)) {
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
        dataplanes_stop(sw);
        throttle_to_block_layer(sw);
    } else {
        bl_detach(sw);
    }
    __atomic_store_n(&sw->started, false, __ATOMIC_RELEASE);
}

/* Context: main loop, BQL held */
bool dp_switch_set_dataplane(DpSwitch *sw, bool on, GError **errp)
{
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
        ok = dataplanes_start(sw, errp);
        if (!ok && !bl_attach(sw, NULL)) {
            error_report_id(sw->conf.id, "the device lost both request paths");
        }
    } else {
        /*
         * Requests held by werror/rerror=stop stay in the iothread until
         * 'cont': the switch is refused and the dataplanes keep running.
         */
        if (!dataplanes_try_stop(sw, errp)) {
            g_prefix_error(errp, "staying on the dataplane: ");
            return false;
        }
        throttle_to_block_layer(sw);
        ok = bl_attach(sw, errp);
        if (!ok && !dataplanes_start(sw, NULL)) {
            error_report_id(sw->conf.id, "the device lost both request paths");
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

static bool same_queues(const SwDp *a, const SwDp *b)
{
    return a->n == b->n && !memcmp(a->qidx, b->qidx, a->n * sizeof(a->qidx[0]));
}

/* Context: main loop, BQL held */
bool dp_switch_remap(DpSwitch *sw, IOThread *const *map, unsigned n, GError **errp)
{
    unsigned nq = sw->conf.num_queues;
    g_autofree SwDp *next = NULL;  /* the groups of @map */
    g_autofree SwDp *fresh = NULL; /* dataplanes made for iothreads new to the device */
    g_autofree int *want = NULL;   /* pool entry i -> its group in @next, or -1 */
    g_autofree bool *changed = NULL;
    unsigned nnext, nfresh = 0;
    bool running = sw->started && sw->on_dataplane;
    ThrottleState ts;
    int64_t t0 = event_clock_ns();
    uint64_t ns;

    DP_SWITCH_ASSERT_CONTROL(sw->conf.iothread);
    if (n != nq) {
        g_set_error(errp, DP_SWITCH_ERROR, EINVAL, "%u queues mapped, the device has %u", n, nq);
        return false;
    }
    for (unsigned q = 0; q < nq; q++) {
        if (!map[q]) {
            g_set_error(errp, DP_SWITCH_ERROR, EINVAL, "queue %u has no iothread", q);
            return false;
        }
        /* The hand-over runs in each iothread synchronously: never from one of them. */
        assert(!event_loop_in_owner(iothread_get_loop(map[q])));
    }
    next = g_new0(SwDp, nq);
    fresh = g_new0(SwDp, nq);
    want = g_new0(int, sw->ndp);
    changed = g_new0(bool, sw->ndp);
    nnext = group_map(nq, map, next);
    for (unsigned i = 0; i < sw->ndp; i++) {
        want[i] = -1;
        for (unsigned j = 0; j < nnext; j++) {
            if (next[j].iothread == sw->dps[i].iothread) {
                want[i] = (int)j;
            }
        }
        changed[i] = want[i] < 0 ? sw->dps[i].n > 0 : !same_queues(&sw->dps[i], &next[want[i]]);
    }
    /* Dataplanes for new iothreads first: nothing has moved if one cannot be made. */
    for (unsigned j = 0; j < nnext; j++) {
        bool known = false;

        for (unsigned i = 0; i < sw->ndp; i++) {
            known |= want[i] == (int)j;
        }
        if (known) {
            continue;
        }
        fresh[nfresh] = next[j];
        if (!sw_dp_create(sw, &fresh[nfresh], errp)) {
            while (nfresh-- > 0) {
                dataplane_destroy(fresh[nfresh].dp);
            }
            return false;
        }
        nfresh++;
    }
    dataplane_get_throttle_state(first_active(sw)->dp, &ts);
    /*
     * Quiesce the dataplanes that lose or gain queues, each in its iothread:
     * notifiers detached and test-and-cleared, in-flight I/O drained,
     * completions published. The others keep running.
     */
    for (unsigned i = 0; running && i < sw->ndp; i++) {
        if (changed[i] && sw->dps[i].n && !dataplane_try_stop(sw->dps[i].dp, errp)) {
            g_prefix_error(errp, "queues not moved: ");
            while (i-- > 0) {
                if (changed[i] && sw->dps[i].n && !sw_dp_start(sw, &sw->dps[i], NULL)) {
                    error_report_id(sw->conf.id, "queues of iothread %u lost their dataplane", i);
                }
            }
            while (nfresh-- > 0) {
                dataplane_destroy(fresh[nfresh].dp);
            }
            return false;
        }
    }
    /* Levels of a stopped dataplane, so that the move gives no free tokens. */
    for (unsigned i = 0; running && i < sw->ndp; i++) {
        if (changed[i] && sw->dps[i].n) {
            dataplane_get_throttle_state(sw->dps[i].dp, &ts);
            break;
        }
    }
    /* Stopped ones take their new queue sets (none: idle); the IOQ stays. */
    for (unsigned i = 0; i < sw->ndp; i++) {
        SwDp *g = &sw->dps[i];
        static const SwDp none;
        const SwDp *to = want[i] >= 0 ? &next[want[i]] : &none;

        if (!changed[i]) {
            continue;
        }
        sw_dp_retire(sw, g);
        if (!dataplane_set_queues(g->dp, to->qidx, to->n, errp)) {
            g_assert_not_reached(); /* stopped, made for every queue of the device */
        }
        g->n = to->n;
        memcpy(g->qidx, to->qidx, to->n * sizeof(to->qidx[0]));
    }
    if (nfresh) {
        sw->dps = g_renew(SwDp, sw->dps, sw->ndp + nfresh);
        memcpy(&sw->dps[sw->ndp], fresh, nfresh * sizeof(*fresh));
    }
    {
        unsigned old = sw->ndp;

        sw->ndp += nfresh;
        memcpy(sw->map, map, nq * sizeof(*map));
        /*
         * Start where the old owners stopped: the ring state is in each
         * VirtQueue, and the start's one pass picks up what the guest
         * queued meanwhile.
         */
        for (unsigned i = 0; i < sw->ndp; i++) {
            SwDp *g = &sw->dps[i];

            if (!g->n || (i < old && !changed[i])) {
                continue;
            }
            dataplane_set_throttle_state(g->dp, &ts);
            if (running && !sw_dp_start(sw, g, errp)) {
                /* Cannot happen short of running out of fds: keep the queues served. */
                g_prefix_error(errp, "queues of iothread %u not started: ", i);
                dataplanes_stop(sw);
                throttle_to_block_layer(sw);
                if (bl_attach(sw, NULL)) {
                    __atomic_store_n(&sw->on_dataplane, false, __ATOMIC_RELEASE);
                } else {
                    error_report_id(sw->conf.id, "the device lost both request paths");
                }
                return false;
            }
        }
    }
    ns = (uint64_t)(event_clock_ns() - t0);
    sw->st.remaps++;
    sw->st.last_remap_ns = ns;
    sw->st.total_remap_ns += ns;
    if (ns > sw->st.max_remap_ns) {
        sw->st.max_remap_ns = ns;
    }
    return true;
}

/* Context: main loop, BQL held */
void dp_switch_get_map(DpSwitch *sw, IOThread **map)
{
    THREAD_ASSERT_MAIN();
    memcpy(map, sw->map, sw->conf.num_queues * sizeof(*map));
}

/* Context: any thread */
bool dp_switch_is_dataplane(DpSwitch *sw)
{
    return __atomic_load_n(&sw->on_dataplane, __ATOMIC_ACQUIRE);
}

/* Context: any thread */
DataPlane *dp_switch_dataplane(DpSwitch *sw)
{
    return first_active(sw)->dp;
}

/* Context: main loop, BQL held */
unsigned dp_switch_num_dataplanes(DpSwitch *sw)
{
    unsigned n = 0;

    THREAD_ASSERT_MAIN();
    for (unsigned i = 0; i < sw->ndp; i++) {
        n += sw->dps[i].n > 0;
    }
    return n;
}

/* Context: main loop, BQL held */
DataPlane *dp_switch_get_dataplane(DpSwitch *sw, unsigned i, IOThread **iothread,
                                   const unsigned **qidx, unsigned *n)
{
    THREAD_ASSERT_MAIN();
    for (unsigned k = 0; k < sw->ndp; k++) {
        SwDp *g = &sw->dps[k];

        if (!g->n || i--) {
            continue;
        }
        if (iothread) {
            *iothread = g->iothread;
        }
        if (qidx) {
            *qidx = g->qidx;
        }
        if (n) {
            *n = g->n;
        }
        return g->dp;
    }
    return NULL;
}

/* Context: main loop, BQL held */
void dp_switch_get_queue_stats(DpSwitch *sw, unsigned q, DataPlaneQueueStats *st)
{
    memset(st, 0, sizeof(*st));
    if (q >= sw->conf.num_queues) {
        return;
    }
    *st = sw->retired[q];
    for (unsigned i = 0; i < sw->ndp; i++) {
        for (unsigned k = 0; k < sw->dps[i].n; k++) {
            DataPlaneQueueStats c;

            if (sw->dps[i].qidx[k] != q) {
                continue;
            }
            dataplane_get_queue_stats(sw->dps[i].dp, k, &c);
            st->requests += c.requests;
            st->completed += c.completed;
            st->batches += c.batches;
            st->kicks += c.kicks;
            st->irqs += c.irqs;
            st->irqs_suppressed += c.irqs_suppressed;
            st->publishes += c.publishes;
            st->inflight += c.inflight;
            st->throttle_waits += c.throttle_waits;
            st->cycles_pop += c.cycles_pop;
            st->cycles_submit += c.cycles_submit;
            st->cycles_complete += c.cycles_complete;
            st->cycles_notify += c.cycles_notify;
        }
    }
}

/* Context: main loop, BQL held */
unsigned dp_switch_held_count(DpSwitch *sw)
{
    unsigned n = 0;

    THREAD_ASSERT_MAIN();
    for (unsigned i = 0; i < sw->ndp; i++) {
        n += dataplane_held_count(sw->dps[i].dp);
    }
    return n;
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
    for (unsigned i = 0; i < sw->ndp; i++) {
        dataplane_destroy(sw->dps[i].dp);
    }
    g_free(sw->dps);
    g_free(sw->acct);
    g_free(sw);
}
