/*
 * virtio-blk data plane: the glue between the request engine (virtio-blk.c),
 * the IOQ engines (ioq*.c) and an iothread's event loop. See
 * include/dataplane/dataplane.h for the lifecycle.
 *
 * Hot path, all in the iothread:
 *   host notifier readable -> handle_kick() -> process_queue():
 *       virtio_blk_queue_process() (shared with the block-layer path) pops
 *       every chain with kicks suppressed and calls dp_submit() per request
 *       (fill the IOQReq of the same slot index, ioq_enqueue) and
 *       dp_batch_end() once per pass (ioq_submit: one syscall)
 *   IOQ eventfd readable -> handle_completions() -> ioq_process_completions()
 *       -> dp_complete() per request (virtio_blk_req_complete) -> one used-idx
 *       publish and at most one guest notification per queue per batch
 *       (virtio_blk_queue_notify(), shared too)
 *
 * Throttling (the drive's block_set_io_throttle limits, shared with the block
 * layer through a ThrottleState that moves with the queues): the engine asks
 * dp_admit() before each submit; when the buckets say wait, the request goes
 * back into the avail ring, the queue stops being popped and a timer in this
 * loop resumes it. Accounting (query-blockstats): one BlockAcctShard per
 * queue, written by this thread only, summed by the BlockBackend's reader.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <x86intrin.h>

#include "dataplane/dataplane.h"
#include "util/thread-check.h"

#define DATAPLANE_ERROR g_quark_from_static_string("vblk-dataplane-error")

/*
 * Thread context, asserted (compiled out with NDEBUG). The control thread is
 * whoever holds the BQL (main loop or a vCPU at a status write), so what is
 * checked is that it is not the iothread: iothread_run_sync() from there
 * would deadlock. The iothread's own handlers check that the queues are
 * theirs (dp->owner, bound in start_in_thread, cleared in stop_in_thread).
 */
#define DP_ASSERT_CONTROL(dp)                                                                      \
    do {                                                                                           \
        THREAD_ASSERT_MAIN();                                                                      \
        assert(!event_loop_in_owner((dp)->loop));                                                  \
    } while (0)
#define DP_ASSERT_IOTHREAD(dp) THREAD_OWNER_ASSERT(&(dp)->owner)

/* Edge-triggered eventfds (doorbells, the IOQ's) are read once per this many wakeups. */
#define DP_DRAIN_EVERY 64

/* Count one wakeup of an edge-triggered eventfd; true when it is time to read it. */
static inline bool drain_due(unsigned *wakeups)
{
    if (++*wakeups < DP_DRAIN_EVERY) {
        return false;
    }
    *wakeups = 0;
    return true;
}

typedef struct DPQueue {
    struct DataPlane *dp;
    unsigned idx;
    VirtIOBlkQueue *q;
    int host_fd;
    GuestNotifier notifier;
    IOQReq *ioreqs;    /* one per request slot, indexed by VirtIOBlkReq.idx */
    int64_t *start_ns; /* per slot: when it was submitted (latency accounting) */
    uint64_t *seq;     /* per slot: submission order (held requests resume in it) */
    BlockAcctShard *acct;
    EventTimer *ttimer; /* throttled: resumes popping (iothread's loop) */
    bool throttled;     /* iothread: waiting for ttimer, not popping */
    unsigned unpublished; /* iothread: completions pushed since the last publish */
    unsigned kicks_undrained; /* iothread: kicks since the doorbell's count was read */
    DataPlaneQueueStats st;
} DPQueue;

struct DataPlane {
    VirtIOBlk *blk;
    bool no_flush; /* cache.no-flush */
    unsigned complete_batch; /* completions per group (see DataPlaneConf) */
    IOThread *iothread;
    EventLoop *loop;
    IOQ *ioq;
    unsigned nq;     /* queues served */
    unsigned max_nq; /* DPQueues made (dataplane_set_queues() may use them all) */
    unsigned qsize;
    BlockAcctShard *dev_acct; /* the device's shards (DataPlaneConf.acct), or NULL */
    bool started;           /* written by the control thread, read anywhere */
    uint64_t touched;       /* iothread: queues with pushed, unpublished completions */
    uint64_t submit_cycles; /* iothread: cycles spent in batch_end this pass */
    unsigned completions_undrained; /* iothread: wakeups since the IOQ's eventfd was read */
    DataPlaneWakeStats wst;         /* iothread writes, any thread reads */
    int64_t hold_ns;                /* DataPlaneConf.complete_hold_ns (0: off) */
    unsigned hold_depth;            /* ... complete_hold_depth */
    EventTimer *hold_timer;         /* iothread: publishes what a pass held back */
    int64_t now_ns;         /* iothread: clock at the start of this pass */
    ThrottleState ts;       /* iothread while started, else the control thread */
    bool throttling;        /* any limit set (same owner as ts) */
    BlockAcctShard *acct;   /* one per queue */
    ThreadOwner owner;      /* the iothread while started */
    /* werror/rerror: policy and held requests (same owner as ts) */
    DataPlaneErrorPolicy rerror, werror;
    GQueue held;         /* IOQReq* failed with "stop", by submission order */
    unsigned held_count; /* its length, for any thread (atomic) */
    bool resuming;       /* dataplane_resume() is going through @held */
    IOQReq *resumed;     /* the held request resubmitted now */
    bool quiescing;      /* dataplane_stop() drains: "stop" is "report" */
    uint64_t next_seq;   /* iothread: submission counter */
    /* I/O error events, iothread -> main loop */
    EventBH *err_bh;
    GMutex err_lock;
    /*
     * Failures waiting for the main loop, under err_lock. Bounded: a guest
     * whose requests keep failing while the main loop is busy (BQL held, a
     * slow QMP command) must not grow memory. Beyond the bound, report and
     * ignore events are counted in err_dropped and one stop is kept aside in
     * err_stop, so a stop policy still pauses the VM.
     */
    DataPlaneIOError err_events[DATAPLANE_ERR_EVENTS_MAX];
    unsigned err_nevents;
    bool err_stop_pending;
    DataPlaneIOError err_stop;
    uint64_t err_dropped;
    DataPlaneErrorHook *err_hook;
    void *err_opaque;
    DPQueue queues[];
};

/* Single-writer counters: the iothread stores, any thread loads. */
static inline void stat_add(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

static inline uint64_t stat_get(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

static const IOQOp op_map[] = {
    [VIRTIO_BLK_OP_READ] = IOQ_OP_READ,
    [VIRTIO_BLK_OP_WRITE] = IOQ_OP_WRITE,
    [VIRTIO_BLK_OP_FLUSH] = IOQ_OP_FLUSH,
    [VIRTIO_BLK_OP_DISCARD] = IOQ_OP_DISCARD,
    [VIRTIO_BLK_OP_WRITE_ZEROES] = IOQ_OP_WRITE_ZEROES,
};

/* As the block layer: write-zeroes count as writes, discards as unmaps. */
/* clang-format off */
static const BlockAcctType acct_map[] = {
    [VIRTIO_BLK_OP_READ] = BLOCK_ACCT_READ,
    [VIRTIO_BLK_OP_WRITE] = BLOCK_ACCT_WRITE,
    [VIRTIO_BLK_OP_FLUSH] = BLOCK_ACCT_FLUSH,
    [VIRTIO_BLK_OP_DISCARD] = BLOCK_ACCT_UNMAP,
    [VIRTIO_BLK_OP_WRITE_ZEROES] = BLOCK_ACCT_WRITE,
};
/* clang-format on */

/* ---- werror / rerror ---- */

/* Main loop: hand the iothread's failures to the owner's hook, in order. */
static void dp_error_bh(void *opaque)
{
    DataPlane *dp = opaque;
    DataPlaneIOError evs[DATAPLANE_ERR_EVENTS_MAX + 1];
    unsigned n;
    uint64_t dropped;

    g_mutex_lock(&dp->err_lock);
    n = dp->err_nevents;
    memcpy(evs, dp->err_events, n * sizeof(evs[0]));
    if (dp->err_stop_pending) {
        evs[n++] = dp->err_stop;
    }
    dropped = dp->err_dropped;
    dp->err_nevents = 0;
    dp->err_stop_pending = false;
    dp->err_dropped = 0;
    g_mutex_unlock(&dp->err_lock);
    for (unsigned i = 0; i < n; i++) {
        dp->err_hook(dp->err_opaque, &evs[i]);
    }
    if (dropped) {
        g_warning("dataplane: %" G_GUINT64_FORMAT " more I/O error events than the %u that "
                  "wait for the main loop were not reported", dropped, DATAPLANE_ERR_EVENTS_MAX);
    }
}

/* Iothread: queue an event for the main loop (bounded, no allocation). */
static void dp_post_error(DataPlane *dp, bool is_read, DataPlaneErrorAction action, int error)
{
    DataPlaneIOError ev = {.is_read = is_read, .action = action, .error = error};

    if (!dp->err_bh) {
        return;
    }
    g_mutex_lock(&dp->err_lock);
    if (dp->err_nevents < DATAPLANE_ERR_EVENTS_MAX) {
        dp->err_events[dp->err_nevents++] = ev;
    } else if (action == DATAPLANE_ERR_ACTION_STOP && !dp->err_stop_pending) {
        dp->err_stop = ev;
        dp->err_stop_pending = true;
    } else {
        dp->err_dropped++;
    }
    g_mutex_unlock(&dp->err_lock);
    event_bh_schedule(dp->err_bh);
}

static uint64_t held_seq(const IOQReq *ior)
{
    const VirtIOBlkReq *req = ior->opaque;
    const DPQueue *dq = req->exec_opaque;

    return dq->seq[req->idx];
}

static gint by_seq(gconstpointer a, gconstpointer b, gpointer unused)
{
    uint64_t x = held_seq(a), y = held_seq(b);

    return x < y ? -1 : x > y;
}

/*
 * An IOQ error on @ior: apply werror/rerror. Returns true if the request is
 * now held (not completed); otherwise *ret is what the guest gets (0 for
 * ignore).
 */
static bool dp_handle_error(DataPlane *dp, IOQReq *ior, int *ret)
{
    VirtIOBlkReq *req = ior->opaque;
    bool is_read = req->op == VIRTIO_BLK_OP_READ;
    DataPlaneErrorPolicy p = is_read ? dp->rerror : dp->werror;
    int error = -*ret;
    DataPlaneErrorAction action;

    switch (p) {
    case DATAPLANE_ERR_IGNORE:
        action = DATAPLANE_ERR_ACTION_IGNORE;
        break;
    case DATAPLANE_ERR_STOP:
        action = DATAPLANE_ERR_ACTION_STOP;
        break;
    case DATAPLANE_ERR_ENOSPC:
        action = error == ENOSPC ? DATAPLANE_ERR_ACTION_STOP : DATAPLANE_ERR_ACTION_REPORT;
        break;
    default:
        action = DATAPLANE_ERR_ACTION_REPORT;
        break;
    }
    if (action == DATAPLANE_ERR_ACTION_STOP && dp->quiescing) {
        action = DATAPLANE_ERR_ACTION_REPORT; /* reset or teardown: nobody will resume it */
    }
    if (action == DATAPLANE_ERR_ACTION_STOP) {
        g_queue_insert_sorted(&dp->held, ior, by_seq, NULL);
        __atomic_store_n(&dp->held_count, g_queue_get_length(&dp->held), __ATOMIC_RELEASE);
        dp->resuming = false; /* the VM stops (again): the next resume goes on */
    } else if (action == DATAPLANE_ERR_ACTION_IGNORE) {
        *ret = 0;
    }
    dp_post_error(dp, is_read, action, error);
    return action == DATAPLANE_ERR_ACTION_STOP;
}

/* ---- completion side ---- */

static void notify_queue(DataPlane *dp, DPQueue *dq);
static void dp_resume_next(DataPlane *dp);

static void dp_complete(IOQReq *ior, int ret)
{
    VirtIOBlkReq *req = ior->opaque;
    DPQueue *dq = req->exec_opaque;
    DataPlane *dp = dq->dp;
    int64_t now = event_clock_ns();
    bool resumed = ior == dp->resumed;

    if (resumed) {
        dp->resumed = NULL;
    }
    if (ret < 0 && dp_handle_error(dp, ior, &ret)) {
        return; /* held: still in flight for the guest and the counters */
    }

    /* A writethrough write (IOQ_REQ_FUA) is accounted once, as the write, flush included. */
    block_acct_shard_done(dq->acct, acct_map[req->op], req->len,
                          (uint64_t)MAX(now - dq->start_ns[req->idx], 0), ret < 0, now);
    if (ret == 0 && (req->op == VIRTIO_BLK_OP_WRITE || req->op == VIRTIO_BLK_OP_WRITE_ZEROES)) {
        block_acct_shard_write_end(dq->acct, req->offset + req->len); /* wr_highest_offset */
    }
    virtio_blk_req_complete(req, ret);
    dp->touched |= 1ull << dq->idx;
    stat_add(&dq->st.completed, 1);
    stat_add(&dq->st.inflight, (uint64_t)-1);
    /*
     * A completion group is full: let the guest see it now rather than after
     * the whole reap, so it refills while the rest are reaped. With EVENT_IDX
     * a guest that has not run since the last interrupt gets no second one.
     */
    if (++dq->unpublished >= dp->complete_batch) {
        notify_queue(dp, dq);
    }
    if (resumed) {
        dp_resume_next(dp);
    }
}

/* Publish @dq's completions; interrupt the guest if it asked for it. */
static void notify_queue(DataPlane *dp, DPQueue *dq)
{
    uint64_t t0 = __rdtsc();
    VirtQueue *vq = virtio_blk_queue_get_vq(dq->q);
    uint16_t before = virtqueue_published_used(vq);
    bool irq;

    dp->touched &= ~(1ull << dq->idx);
    dq->unpublished = 0;
    irq = virtio_blk_queue_notify(dq->q, &dq->notifier);
    if (virtqueue_published_used(vq) != before) { /* counted when the index moved */
        stat_add(&dq->st.publishes, 1);
        stat_add(irq ? &dq->st.irqs : &dq->st.irqs_suppressed, 1);
    } else if (irq) {
        stat_add(&dq->st.irqs, 1);
    }
    stat_add(&dq->st.cycles_notify, __rdtsc() - t0);
}

/* Publish completions of the touched queues; at most one interrupt per queue. */
static void notify_guests(DataPlane *dp)
{
    while (dp->touched) {
        notify_queue(dp, &dp->queues[__builtin_ctzll(dp->touched)]);
    }
}

/*
 * The end of a pass: publish, or with the completion hold on and a deep
 * queue, leave the completions for the hold timer (armed once: a held
 * completion waits at most hold_ns). A pass with fewer in flight publishes
 * everything, the held ones included.
 */
static bool any_unpublished(DataPlane *dp)
{
    for (uint64_t t = dp->touched; t; t &= t - 1) {
        if (virtqueue_has_unpublished(virtio_blk_queue_get_vq(dp->queues[__builtin_ctzll(t)].q))) {
            return true;
        }
    }
    return false;
}

static void publish_or_hold(DataPlane *dp)
{
    if (dp->hold_ns && dp->touched && ioq_inflight(dp->ioq) >= dp->hold_depth &&
        any_unpublished(dp)) {
        if (!event_timer_pending(dp->hold_timer)) {
            event_timer_mod(dp->hold_timer, event_clock_ns() + dp->hold_ns);
            stat_add(&dp->wst.complete_holds, 1);
        }
        return;
    }
    notify_guests(dp);
}

static void hold_timer_cb(void *opaque)
{
    DataPlane *dp = opaque;

    DP_ASSERT_IOTHREAD(dp);
    notify_guests(dp);
}

/* ---- submission side ---- */

/* The IOQ request of @req (at submission, and again when a held one is resubmitted). */
static void dp_fill_ioreq(DPQueue *dq, VirtIOBlkReq *req, IOQReq *ior)
{
    req->exec_opaque = dq;
    ior->op = op_map[req->op];
    ior->offset = req->offset;
    ior->len = req->len;
    ior->iov = req->iov;
    ior->niov = (int)req->niov;
    ior->may_unmap = req->unmap;
    /*
     * Writethrough (the guest turned the write cache off, or never got
     * FLUSH): a write completes only once it is stable; the IOQ flushes after
     * it. Write-zeroes too, as QEMU's block layer makes every write FUA.
     * cache.no-flush: no flush ever reaches the disk, this one neither.
     */
    ior->flags = (req->op == VIRTIO_BLK_OP_WRITE || req->op == VIRTIO_BLK_OP_WRITE_ZEROES) &&
                         !virtio_blk_get_writeback(dq->dp->blk) && !dq->dp->no_flush
                     ? IOQ_REQ_FUA
                     : 0;
    ior->cb = dp_complete;
    ior->opaque = req;
}

/* Refused up front (e.g. misaligned for O_DIRECT): an I/O error, no werror/rerror. */
static void dp_refused(DPQueue *dq, VirtIOBlkReq *req, int ret)
{
    block_acct_shard_invalid(dq->acct, acct_map[req->op], dq->dp->now_ns);
    virtio_blk_req_complete(req, ret);
    dq->dp->touched |= 1ull << dq->idx;
    stat_add(&dq->st.completed, 1);
    stat_add(&dq->st.inflight, (uint64_t)-1);
}

static void dp_submit(void *opaque, VirtIOBlkReq *req)
{
    DPQueue *dq = opaque;
    IOQReq *ior = &dq->ioreqs[req->idx];
    int ret;

    dp_fill_ioreq(dq, req, ior);
    dq->seq[req->idx] = dq->dp->next_seq++;
    dq->start_ns[req->idx] = dq->dp->now_ns;
    stat_add(&dq->st.inflight, 1);
    if (req->op == VIRTIO_BLK_OP_FLUSH && dq->dp->no_flush) {
        dp_complete(ior, 0); /* cache.no-flush: done, as QEMU's cache=unsafe */
        return;
    }
    ret = ioq_enqueue(dq->dp->ioq, ior);
    if (ret < 0) {
        dp_refused(dq, req, ret);
    }
}

/*
 * Resubmit the oldest held request, unless one is already on its way; the
 * next goes when it completes (dp_complete). Iothread.
 */
static void dp_resume_next(DataPlane *dp)
{
    while (dp->resuming && !dp->resumed) {
        IOQReq *ior = g_queue_pop_head(&dp->held);
        VirtIOBlkReq *req;
        DPQueue *dq;
        int ret;

        __atomic_store_n(&dp->held_count, g_queue_get_length(&dp->held), __ATOMIC_RELEASE);
        if (!ior) {
            dp->resuming = false;
            break;
        }
        req = ior->opaque;
        dq = req->exec_opaque;
        dp_fill_ioreq(dq, req, ior);
        dp->resumed = ior;
        ret = ioq_enqueue(dp->ioq, ior);
        if (ret < 0) {
            dp->resumed = NULL;
            dp_refused(dq, req, ret);
            continue;
        }
        ioq_submit(dp->ioq); /* may complete it at once (null engine, injected error) */
    }
}

static void dp_batch_end(void *opaque)
{
    DPQueue *dq = opaque;
    uint64_t t0 = __rdtsc();

    ioq_submit(dq->dp->ioq);
    dq->dp->submit_cycles += __rdtsc() - t0;
}

/*
 * Throttle gate, before submit. Over the limit: the engine un-pops @req and
 * stops the pass; this queue is not popped again (kicks and polling ignore
 * it) until its timer fires. Flushes are never throttled, as in the block
 * layer. Requests of all queues share the drive's buckets (one iothread).
 */
static bool dp_admit(void *opaque, const VirtIOBlkReq *req)
{
    DPQueue *dq = opaque;
    DataPlane *dp = dq->dp;
    bool is_write = req->op != VIRTIO_BLK_OP_READ;
    int64_t wait;

    if (!dp->throttling || req->op == VIRTIO_BLK_OP_FLUSH) {
        return true;
    }
    wait = throttle_wait_ns(&dp->ts, is_write, dp->now_ns);
    if (wait > 0) {
        dq->throttled = true;
        event_timer_mod(dq->ttimer, dp->now_ns + wait);
        stat_add(&dq->st.throttle_waits, 1);
        return false;
    }
    throttle_account(&dp->ts, is_write, req->len);
    return true;
}

/* The engine refused a guest request (range, alignment): QEMU's invalid_*. */
static void dp_invalid(void *opaque, VirtIOBlkOp op)
{
    DPQueue *dq = opaque;

    block_acct_shard_invalid(dq->acct, acct_map[op], dq->dp->now_ns);
}

static const VirtIOBlkExecOps dp_exec_ops = {
    .submit = dp_submit,
    .batch_end = dp_batch_end,
    .admit = dp_admit,
    .invalid = dp_invalid,
};

/* Pop and submit everything available on @dq, then publish completions. */
static bool process_queue(DPQueue *dq)
{
    DataPlane *dp = dq->dp;
    uint64_t t0 = __rdtsc(), t1;
    unsigned popped, passes;

    dp->submit_cycles = 0;
    dp->now_ns = event_clock_ns(); /* one clock read per kick: throttle, latency */
    popped = virtio_blk_queue_process(dq->q, &passes);
    t1 = __rdtsc();
    if (popped) {
        stat_add(&dq->st.requests, popped);
        stat_add(&dq->st.batches, passes);
        stat_add(&dq->st.cycles_submit, dp->submit_cycles);
        stat_add(&dq->st.cycles_pop, t1 - t0 - dp->submit_cycles);
        dp->touched |= 1ull << dq->idx; /* inline completions (GET_ID, errors) */
    }
    publish_or_hold(dp);
    return popped > 0;
}

static void handle_kick(void *opaque)
{
    DPQueue *dq = opaque;
    uint64_t cnt;

    DP_ASSERT_IOTHREAD(dq->dp);
    /*
     * The doorbell is watched edge-triggered: every kick after the loop
     * collected this one wakes it again whether or not the count is read, so
     * a wakeup costs no read(). The count is drained every DP_DRAIN_EVERY
     * kicks only to keep it far from saturation (a saturated eventfd refuses
     * a front end's write(); KVM's ioeventfd caps and still wakes).
     */
    if (drain_due(&dq->kicks_undrained)) {
        stat_add(&dq->st.kick_reads, 1);
        if (read(dq->host_fd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN) {
            return;
        }
    }
    stat_add(&dq->st.kicks, 1);
    if (dq->throttled) {
        return; /* the throttle timer resumes this queue */
    }
    process_queue(dq);
}

static void throttle_timer_cb(void *opaque)
{
    DPQueue *dq = opaque;

    DP_ASSERT_IOTHREAD(dq->dp);
    dq->throttled = false;
    process_queue(dq); /* may throttle again and re-arm */
}

/* Adaptive polling of the avail ring (only when the loop polls). */
static bool poll_queue(void *opaque)
{
    DPQueue *dq = opaque;

    DP_ASSERT_IOTHREAD(dq->dp);
    if (dq->throttled || !virtqueue_has_avail(virtio_blk_queue_get_vq(dq->q))) {
        return false;
    }
    if (!process_queue(dq)) {
        return false;
    }
    stat_add(&dq->st.avail_polls, 1);
    return true;
}

static void poll_begin(void *opaque)
{
    DPQueue *dq = opaque;

    virtqueue_disable_notification(virtio_blk_queue_get_vq(dq->q));
}

static void poll_end(void *opaque)
{
    DPQueue *dq = opaque;

    /* The loop polls once more after this, catching a racing chain. */
    if (!dq->throttled) {
        virtqueue_enable_notification(virtio_blk_queue_get_vq(dq->q));
    }
}

static const EventFdOps kick_ops = {
    .read = handle_kick,
    .poll = poll_queue,
    .poll_begin = poll_begin,
    .poll_end = poll_end,
    .edge = true,
};

static void reap(DataPlane *dp)
{
    uint64_t t0 = __rdtsc();
    unsigned n;
    uint64_t touched, share;

    n = ioq_process_completions(dp->ioq);
    if (!n) {
        return;
    }
    /* Attribute the reaping cost evenly to the queues that completed something. */
    touched = dp->touched;
    share = (__rdtsc() - t0) / (uint64_t)(touched ? __builtin_popcountll(touched) : 1);
    while (touched) {
        DPQueue *dq = &dp->queues[__builtin_ctzll(touched)];

        touched &= touched - 1;
        stat_add(&dq->st.cycles_complete, share);
    }
    publish_or_hold(dp);
    /* Slots were freed: a queue that hit its cap may have more to pop. */
    for (unsigned i = 0; i < dp->nq; i++) {
        if (!dp->queues[i].throttled && virtio_blk_queue_pending(dp->queues[i].q)) {
            process_queue(&dp->queues[i]);
        }
    }
}

static void handle_completions(void *opaque)
{
    DataPlane *dp = opaque;

    DP_ASSERT_IOTHREAD(dp);
    /*
     * An eventfd is watched edge-triggered (see handle_kick): drained only
     * now and then. Any other fd (nbd's) is level-triggered: cleared first, so
     * that a completion after this wakes us again.
     */
    if (!ioq_fd_is_eventfd(dp->ioq) || drain_due(&dp->completions_undrained)) {
        ioq_clear_fd(dp->ioq);
    }
    stat_add(&dp->wst.completion_events, 1);
    reap(dp);
}

static bool poll_completions(void *opaque)
{
    DataPlane *dp = opaque;

    DP_ASSERT_IOTHREAD(dp);
    /* Peek without a syscall (AIO ring / io_uring CQ); reap only when ready. */
    if (!ioq_inflight(dp->ioq) || !ioq_completions_ready(dp->ioq)) {
        return false;
    }
    if (!ioq_process_completions(dp->ioq)) {
        return false;
    }
    stat_add(&dp->wst.completion_polls, 1);
    publish_or_hold(dp);
    return true;
}

static const EventFdOps completion_ops = {
    .read = handle_completions,
    .poll = poll_completions,
};

static const EventFdOps completion_ops_edge = {
    .read = handle_completions,
    .poll = poll_completions,
    .edge = true,
};

/* ---- lifecycle (control thread; the _in_thread halves run in the iothread) ---- */

/* Timers belong to the loop's owner: made and freed inside the iothread. */
static void timers_new_in_thread(void *opaque)
{
    DataPlane *dp = opaque;

    for (unsigned i = 0; i < dp->max_nq; i++) {
        dp->queues[i].ttimer = event_timer_new(dp->loop, throttle_timer_cb, &dp->queues[i]);
    }
    dp->hold_timer = event_timer_new(dp->loop, hold_timer_cb, dp);
}

static void timers_free_in_thread(void *opaque)
{
    DataPlane *dp = opaque;

    for (unsigned i = 0; i < dp->max_nq; i++) {
        event_timer_free(dp->queues[i].ttimer);
        dp->queues[i].ttimer = NULL;
    }
    event_timer_free(dp->hold_timer);
    dp->hold_timer = NULL;
}

/* Context: control thread */
DataPlane *dataplane_create(const DataPlaneConf *conf, GError **errp)
{
    DataPlane *dp;
    IOQConfig ioqc = conf->ioq;
    ThrottleLimits ts_limits;

    assert(!conf->iothread || !event_loop_in_owner(iothread_get_loop(conf->iothread)));
    if (!conf->blk || !conf->iothread || conf->num_queues == 0 ||
        conf->num_queues > DATAPLANE_MAX_QUEUES || conf->queue_size == 0 ||
        conf->queue_size > VIRTIO_BLK_MAX_QUEUE_SIZE) {
        g_set_error(errp, DATAPLANE_ERROR, EINVAL,
                    "dataplane: invalid configuration (%u queues of %u)", conf->num_queues,
                    conf->queue_size);
        return NULL;
    }
    unsigned max_nq = conf->acct && conf->queue_index && conf->max_queues > conf->num_queues
                          ? MIN(conf->max_queues, DATAPLANE_MAX_QUEUES)
                          : conf->num_queues;

    for (unsigned i = 0; conf->acct && conf->queue_index && i < conf->num_queues; i++) {
        if (conf->queue_index[i] >= DATAPLANE_MAX_QUEUES) {
            g_set_error(errp, DATAPLANE_ERROR, EINVAL, "dataplane: queue index %u out of range",
                        conf->queue_index[i]);
            return NULL;
        }
    }
    if (!ioqc.queue_depth) {
        /* More in flight than this waits in the IOQ's pending list. */
        ioqc.queue_depth = MAX(conf->num_queues * conf->queue_size,
                               MIN(max_nq * conf->queue_size, 4096u));
    }
    dp = g_malloc0(sizeof(*dp) + max_nq * sizeof(DPQueue));
    dp->max_nq = max_nq;
    dp->blk = conf->blk;
    dp->no_flush = conf->no_flush;
    dp->complete_batch = conf->complete_batch ? conf->complete_batch : DATAPLANE_COMPLETE_BATCH;
    dp->hold_ns = CLAMP(conf->complete_hold_ns, 0, DATAPLANE_COMPLETE_HOLD_MAX_NS);
    dp->hold_depth =
        conf->complete_hold_depth ? conf->complete_hold_depth : DATAPLANE_COMPLETE_HOLD_DEPTH;
    dp->iothread = conf->iothread;
    dp->loop = iothread_get_loop(conf->iothread);
    dp->nq = conf->num_queues;
    dp->qsize = conf->queue_size;
    dp->ioq = ioq_new(&ioqc, errp);
    if (!dp->ioq) {
        g_free(dp);
        return NULL;
    }
    if (conf->acct && conf->queue_index) {
        dp->dev_acct = conf->acct; /* queue_index checked above */
    } else {
        dp->acct = g_new0(BlockAcctShard, dp->nq);
    }
    for (unsigned i = 0; i < dp->max_nq; i++) {
        static const BlockAcctStats no_histogram;

        dp->queues[i].dp = dp;
        dp->queues[i].idx = i;
        dp->queues[i].host_fd = -1;
        dp->queues[i].notifier.fd = -1;
        dp->queues[i].ioreqs = g_new0(IOQReq, dp->qsize);
        dp->queues[i].start_ns = g_new0(int64_t, dp->qsize);
        dp->queues[i].seq = g_new0(uint64_t, dp->qsize);
        if (dp->acct) {
            dp->queues[i].acct = &dp->acct[i];
            block_acct_shard_init(&dp->acct[i], &no_histogram);
        } else if (i < dp->nq) {
            /* The device's shard: initialised and attached by the owner, and kept. */
            dp->queues[i].acct = &conf->acct[conf->queue_index[i]];
        }
    }
    throttle_limits_init(&ts_limits);
    throttle_state_config(&dp->ts, &ts_limits, event_clock_ns());
    g_queue_init(&dp->held);
    g_mutex_init(&dp->err_lock);
    if (conf->main_loop && conf->error_hook) {
        dp->err_hook = conf->error_hook;
        dp->err_opaque = conf->error_opaque;
        dp->err_bh = event_bh_new(conf->main_loop, dp_error_bh, dp);
    }
    iothread_run_sync(dp->iothread, timers_new_in_thread, dp);
    return dp;
}

typedef struct StartArgs {
    DataPlane *dp;
    GError *err;
} StartArgs;

static void start_in_thread(void *opaque)
{
    StartArgs *a = opaque;
    DataPlane *dp = a->dp;

    /* The queues and the IOQ are this thread's until stop_in_thread. */
    thread_owner_set(&dp->owner);
    ioq_bind_thread(dp->ioq);
    if (!event_loop_set_fd_handler(dp->loop, ioq_get_fd(dp->ioq),
                                   ioq_fd_is_eventfd(dp->ioq) ? &completion_ops_edge
                                                              : &completion_ops,
                                   dp, &a->err)) {
        ioq_unbind_thread(dp->ioq);
        thread_owner_clear(&dp->owner);
        return;
    }
    for (unsigned i = 0; i < dp->nq; i++) {
        if (!event_loop_set_fd_handler(dp->loop, dp->queues[i].host_fd, &kick_ops, &dp->queues[i],
                                       &a->err)) {
            while (i-- > 0) {
                event_loop_set_fd_handler(dp->loop, dp->queues[i].host_fd, NULL, NULL, NULL);
            }
            event_loop_set_fd_handler(dp->loop, ioq_get_fd(dp->ioq), NULL, NULL, NULL);
            ioq_unbind_thread(dp->ioq);
            thread_owner_clear(&dp->owner);
            return;
        }
    }
    /* Kick once: requests queued while nobody was watching the notifier. */
    for (unsigned i = 0; i < dp->nq; i++) {
        process_queue(&dp->queues[i]);
    }
}

/* Context: control thread */
bool dataplane_start(DataPlane *dp, const DataPlaneQueue *queues, unsigned n, GError **errp)
{
    StartArgs a = {.dp = dp};

    DP_ASSERT_CONTROL(dp);
    if (dp->started) {
        return true;
    }
    if (n != dp->nq || n == 0) {
        g_set_error(errp, DATAPLANE_ERROR, EINVAL, "dataplane: %u queues given, %u configured", n,
                    dp->nq);
        return false;
    }
    for (unsigned i = 0; i < n; i++) {
        VirtQueue *vq = virtio_blk_queue_get_vq(queues[i].q);

        if (virtqueue_num(vq) > dp->qsize || virtio_blk_queue_inflight(queues[i].q)) {
            g_set_error(errp, DATAPLANE_ERROR, EBUSY,
                        "dataplane: queue %u is larger than %u or has requests in flight", i,
                        dp->qsize);
            return false;
        }
    }
    for (unsigned i = 0; i < n; i++) {
        DPQueue *dq = &dp->queues[i];

        dq->q = queues[i].q;
        dq->host_fd = queues[i].host_notifier;
        dq->notifier = queues[i].notifier;
        /* Both notifiers are read/written without ever blocking the iothread. */
        fcntl(dq->host_fd, F_SETFL, fcntl(dq->host_fd, F_GETFL) | O_NONBLOCK);
        guest_notifier_set_nonblocking(&dq->notifier);
        virtqueue_invalidate_signalled_used(virtio_blk_queue_get_vq(dq->q));
        virtio_blk_queue_set_exec(dq->q, &dp_exec_ops, dq);
    }
    /* The synchronous hand-over is the barrier that gives the iothread the queues. */
    iothread_run_sync(dp->iothread, start_in_thread, &a);
    if (a.err) {
        for (unsigned i = 0; i < n; i++) {
            virtio_blk_queue_set_exec(dp->queues[i].q, NULL, NULL);
        }
        g_propagate_error(errp, a.err);
        return false;
    }
    __atomic_store_n(&dp->started, true, __ATOMIC_RELEASE);
    return true;
}

/* Wait for every request (a writethrough write until its flush is done). */
static void drain_in_thread(void *opaque)
{
    DataPlane *dp = opaque;

    ioq_drain(dp->ioq);
    event_timer_del(dp->hold_timer); /* nothing is held after this */
    notify_guests(dp);
}

/* Complete every held request with an I/O error (reset, teardown). Iothread. */
static void dp_fail_held(DataPlane *dp)
{
    IOQReq *ior;
    int64_t now = event_clock_ns();

    dp->resuming = false;
    while ((ior = g_queue_pop_head(&dp->held))) {
        VirtIOBlkReq *req = ior->opaque;
        DPQueue *dq = req->exec_opaque;

        block_acct_shard_done(dq->acct, acct_map[req->op], req->len,
                              (uint64_t)MAX(now - dq->start_ns[req->idx], 0), true, now);
        virtio_blk_req_complete(req, -EIO);
        dp->touched |= 1ull << dq->idx;
        stat_add(&dq->st.completed, 1);
        stat_add(&dq->st.inflight, (uint64_t)-1);
    }
    __atomic_store_n(&dp->held_count, 0, __ATOMIC_RELEASE);
}

typedef struct StopArgs {
    DataPlane *dp;
    bool keep_held; /* dataplane_try_stop(): give up if requests are held */
    bool busy;      /* out: requests are held, the dataplane still runs */
} StopArgs;

/*
 * dataplane_try_stop() found held requests after the drain: take the kicks
 * back and make one pass (what the guest queued meanwhile). Iothread.
 */
static void dp_stay_started(DataPlane *dp)
{
    for (unsigned i = 0; i < dp->nq; i++) {
        GError *err = NULL;

        if (!event_loop_set_fd_handler(dp->loop, dp->queues[i].host_fd, &kick_ops, &dp->queues[i],
                                       &err)) {
            /* Cannot happen for an fd that was just watched; say so if it does. */
            g_warning("dataplane: cannot watch queue %u again: %s", i, err->message);
            g_error_free(err);
        }
    }
    for (unsigned i = 0; i < dp->nq; i++) {
        process_queue(&dp->queues[i]);
    }
}

static void stop_in_thread(void *opaque)
{
    StopArgs *a = opaque;
    DataPlane *dp = a->dp;

    dp->quiescing = !a->keep_held;
    if (dp->quiescing) {
        dp->resuming = false; /* nothing more is resubmitted: held requests fail below */
    }
    for (unsigned i = 0; i < dp->nq; i++) {
        DPQueue *dq = &dp->queues[i];
        uint64_t cnt;

        /* A throttled request is still in the avail ring: the next owner throttles it. */
        event_timer_del(dq->ttimer);
        dq->throttled = false;
        event_loop_set_fd_handler(dp->loop, dq->host_fd, NULL, NULL, NULL);
        /*
         * Test-and-clear the doorbell: whatever it announced is still in the
         * avail ring, and the next owner makes one pass when it starts.
         */
        while (read(dq->host_fd, &cnt, sizeof(cnt)) > 0) {
        }
    }
    drain_in_thread(dp);
    if (a->keep_held && !g_queue_is_empty(&dp->held)) {
        a->busy = true;
        dp_stay_started(dp);
        return;
    }
    dp_fail_held(dp);
    notify_guests(dp);
    dp->quiescing = false;
    event_loop_set_fd_handler(dp->loop, ioq_get_fd(dp->ioq), NULL, NULL, NULL);
    /* Hand-over: the queues go back to the control thread. */
    ioq_unbind_thread(dp->ioq);
    thread_owner_clear(&dp->owner);
}

static bool dp_stop(DataPlane *dp, bool keep_held, GError **errp)
{
    StopArgs a = {.dp = dp, .keep_held = keep_held};

    DP_ASSERT_CONTROL(dp);
    if (!dp->started) {
        return true;
    }
    if (keep_held && dataplane_held_count(dp)) {
        g_set_error(errp, DATAPLANE_ERROR, EBUSY,
                    "%u request(s) failed with werror/rerror=stop and wait for 'cont'",
                    dataplane_held_count(dp));
        return false;
    }
    iothread_run_sync(dp->iothread, stop_in_thread, &a);
    if (a.busy) {
        g_set_error(errp, DATAPLANE_ERROR, EBUSY,
                    "%u request(s) failed with werror/rerror=stop and wait for 'cont'",
                    dataplane_held_count(dp));
        return false;
    }
    for (unsigned i = 0; i < dp->nq; i++) {
        DPQueue *dq = &dp->queues[i];

        virtio_blk_queue_set_exec(dq->q, NULL, NULL);
        /* The next owner decides about interrupts afresh. */
        virtqueue_invalidate_signalled_used(virtio_blk_queue_get_vq(dq->q));
        dq->q = NULL;
    }
    __atomic_store_n(&dp->started, false, __ATOMIC_RELEASE);
    return true;
}

/* Context: control thread */
void dataplane_stop(DataPlane *dp)
{
    dp_stop(dp, false, NULL);
}

/* Context: control thread */
bool dataplane_try_stop(DataPlane *dp, GError **errp)
{
    return dp_stop(dp, true, errp);
}

/* Context: control thread */
void dataplane_drain(DataPlane *dp)
{
    DP_ASSERT_CONTROL(dp);
    if (dp->started) {
        iothread_run_sync(dp->iothread, drain_in_thread, dp);
    }
}

static void free_ioq_in_thread(void *opaque)
{
    ioq_free(opaque);
}

/* Context: control thread */
void dataplane_destroy(DataPlane *dp)
{
    if (!dp) {
        return;
    }
    DP_ASSERT_CONTROL(dp);
    dataplane_stop(dp);
    iothread_run_sync(dp->iothread, free_ioq_in_thread, dp->ioq);
    iothread_run_sync(dp->iothread, timers_free_in_thread, dp);
    for (unsigned i = 0; i < dp->max_nq; i++) {
        g_free(dp->queues[i].ioreqs);
        g_free(dp->queues[i].start_ns);
        g_free(dp->queues[i].seq);
    }
    if (dp->err_bh) {
        event_bh_delete(dp->err_bh); /* stopped: nobody schedules it any more */
    }
    g_mutex_clear(&dp->err_lock);
    g_free(dp->acct);
    g_free(dp);
}

/* Context: control thread */
bool dataplane_set_queues(DataPlane *dp, const unsigned *queue_index, unsigned n, GError **errp)
{
    DP_ASSERT_CONTROL(dp);
    if (dp->started || !dp->dev_acct || n > dp->max_nq) {
        g_set_error(errp, DATAPLANE_ERROR, EINVAL,
                    "dataplane: cannot serve %u queues now (started %d, at most %u)", n,
                    dp->started, dp->dev_acct ? dp->max_nq : dp->nq);
        return false;
    }
    for (unsigned i = 0; i < n; i++) {
        if (queue_index[i] >= DATAPLANE_MAX_QUEUES) {
            g_set_error(errp, DATAPLANE_ERROR, EINVAL, "dataplane: queue index %u out of range",
                        queue_index[i]);
            return false;
        }
    }
    for (unsigned i = 0; i < dp->max_nq; i++) {
        DPQueue *dq = &dp->queues[i];

        /* Stopped: no request, timer or handler refers to the queue. */
        memset(&dq->st, 0, sizeof(dq->st));
        dq->acct = i < n ? &dp->dev_acct[queue_index[i]] : NULL;
        dq->q = NULL;
        dq->host_fd = -1;
        dq->notifier.fd = -1;
        dq->throttled = false;
        dq->unpublished = 0;
    }
    dp->touched = 0;
    dp->nq = n;
    return true;
}

/* Context: control thread */
unsigned dataplane_num_queues(DataPlane *dp)
{
    DP_ASSERT_CONTROL(dp);
    return dp->nq;
}

/* Context: any thread */
bool dataplane_is_started(DataPlane *dp)
{
    return __atomic_load_n(&dp->started, __ATOMIC_ACQUIRE);
}

/* Context: any thread */
void dataplane_get_queue_stats(DataPlane *dp, unsigned qidx, DataPlaneQueueStats *st)
{
    const DataPlaneQueueStats *s;

    memset(st, 0, sizeof(*st));
    if (qidx >= dp->nq) {
        return;
    }
    s = &dp->queues[qidx].st;
    st->requests = stat_get(&s->requests);
    st->completed = stat_get(&s->completed);
    st->batches = stat_get(&s->batches);
    st->kicks = stat_get(&s->kicks);
    st->kick_reads = stat_get(&s->kick_reads);
    st->avail_polls = stat_get(&s->avail_polls);
    st->irqs = stat_get(&s->irqs);
    st->irqs_suppressed = stat_get(&s->irqs_suppressed);
    st->publishes = stat_get(&s->publishes);
    st->inflight = stat_get(&s->inflight);
    st->throttle_waits = stat_get(&s->throttle_waits);
    st->cycles_pop = stat_get(&s->cycles_pop);
    st->cycles_submit = stat_get(&s->cycles_submit);
    st->cycles_complete = stat_get(&s->cycles_complete);
    st->cycles_notify = stat_get(&s->cycles_notify);
}

/* Context: any thread */
void dataplane_get_ioq_stats(DataPlane *dp, IOQStats *st)
{
    ioq_get_stats(dp->ioq, st);
}

/* Context: any thread */
void dataplane_get_wake_stats(DataPlane *dp, DataPlaneWakeStats *st)
{
    st->completion_events = stat_get(&dp->wst.completion_events);
    st->completion_polls = stat_get(&dp->wst.completion_polls);
    st->complete_holds = stat_get(&dp->wst.complete_holds);
}

/* Context: control thread */
BlockAcctShard *dataplane_acct_shards(DataPlane *dp, unsigned *n)
{
    DP_ASSERT_CONTROL(dp);
    *n = dp->acct ? dp->nq : 0;
    return dp->acct;
}

typedef struct ThrottleArgs {
    DataPlane *dp;
    ThrottleState *ts;
} ThrottleArgs;

static void set_throttle_in_thread(void *opaque)
{
    ThrottleArgs *a = opaque;
    DataPlane *dp = a->dp;

    dp->ts = *a->ts;
    dp->throttling = throttle_limits_enabled(&dp->ts.limits);
    /* Re-time the waiting queues under the new limits (they may go at once). */
    for (unsigned i = 0; i < dp->nq; i++) {
        DPQueue *dq = &dp->queues[i];

        if (dq->throttled) {
            event_timer_del(dq->ttimer);
            dq->throttled = false;
            process_queue(dq);
        }
    }
}

static void get_throttle_in_thread(void *opaque)
{
    ThrottleArgs *a = opaque;

    *a->ts = a->dp->ts;
}

/* Context: control thread */
void dataplane_set_throttle_state(DataPlane *dp, const ThrottleState *ts)
{
    ThrottleArgs a = {.dp = dp, .ts = (ThrottleState *)ts};

    DP_ASSERT_CONTROL(dp);
    if (!dp->started) {
        /* Not running: dataplane_start's hand-over publishes it to the iothread. */
        dp->ts = *ts;
        dp->throttling = throttle_limits_enabled(&ts->limits);
        return;
    }
    /* The synchronous hand-over orders the copy with the iothread's accesses. */
    iothread_run_sync(dp->iothread, set_throttle_in_thread, &a);
}

/* Context: control thread */
void dataplane_get_throttle_state(DataPlane *dp, ThrottleState *ts)
{
    ThrottleArgs a = {.dp = dp, .ts = ts};

    DP_ASSERT_CONTROL(dp);
    if (!dp->started) {
        *ts = dp->ts;
        return;
    }
    iothread_run_sync(dp->iothread, get_throttle_in_thread, &a);
}

/* ---- werror / rerror: control side ---- */

typedef struct PolicyArgs {
    DataPlane *dp;
    DataPlaneErrorPolicy rerror, werror;
} PolicyArgs;

static void set_policy_in_thread(void *opaque)
{
    PolicyArgs *a = opaque;

    a->dp->rerror = a->rerror;
    a->dp->werror = a->werror;
}

/* Context: control thread */
void dataplane_set_error_policy(DataPlane *dp, DataPlaneErrorPolicy rerror,
                                DataPlaneErrorPolicy werror)
{
    PolicyArgs a = {.dp = dp, .rerror = rerror, .werror = werror};

    DP_ASSERT_CONTROL(dp);
    if (!dp->started) {
        set_policy_in_thread(&a); /* dataplane_start's hand-over publishes it */
        return;
    }
    iothread_run_sync(dp->iothread, set_policy_in_thread, &a);
}

/* Context: any thread */
unsigned dataplane_held_count(DataPlane *dp)
{
    return __atomic_load_n(&dp->held_count, __ATOMIC_ACQUIRE);
}

static void resume_in_thread(void *opaque)
{
    DataPlane *dp = opaque;

    DP_ASSERT_IOTHREAD(dp);
    if (g_queue_is_empty(&dp->held)) {
        return;
    }
    dp->resuming = true;
    dp_resume_next(dp);
    notify_guests(dp); /* a resubmission refused at once completed inline */
}

/* Context: control thread */
void dataplane_resume(DataPlane *dp)
{
    DP_ASSERT_CONTROL(dp);
    if (dp->started) {
        iothread_run_sync(dp->iothread, resume_in_thread, dp);
    }
}

typedef struct InjectArgs {
    DataPlane *dp;
    const IOQInjectRule *rule; /* NULL: clear */
    GError *err;
    bool ok;
} InjectArgs;

static void inject_in_thread(void *opaque)
{
    InjectArgs *a = opaque;

    if (a->rule) {
        a->ok = ioq_inject_add(a->dp->ioq, a->rule, &a->err);
    } else {
        ioq_inject_clear(a->dp->ioq);
        a->ok = true;
    }
}

/* Context: control thread */
bool dataplane_inject_error(DataPlane *dp, const IOQInjectRule *rule, GError **errp)
{
    InjectArgs a = {.dp = dp, .rule = rule};

    DP_ASSERT_CONTROL(dp);
    if (dp->started) {
        iothread_run_sync(dp->iothread, inject_in_thread, &a);
    } else {
        inject_in_thread(&a); /* unbound and idle: the control thread's */
    }
    if (a.err) {
        g_propagate_error(errp, a.err);
    }
    return a.ok;
}

/* Context: control thread */
void dataplane_inject_clear(DataPlane *dp)
{
    InjectArgs a = {.dp = dp};

    DP_ASSERT_CONTROL(dp);
    if (dp->started) {
        iothread_run_sync(dp->iothread, inject_in_thread, &a);
    } else {
        inject_in_thread(&a);
    }
}
