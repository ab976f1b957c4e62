/*
 * virtio-blk data plane: a device's queues served by an iothread.
 *
 * The guest's kick arrives on a host notifier (an eventfd the VMM registers
 * as KVM_IOEVENTFD; in tests, the test driver's kick eventfd) watched by the
 * iothread's loop. The iothread pops every available request through the
 * shared request engine (virtio/virtio-blk.h), submits them to the IOQ
 * (libaio / io_uring / null) in one syscall per batch, and on completion
 * writes status, publishes the used ring and signals the queue's
 * GuestNotifier (virtio/guest-notifier.h: the transport's irqfd, plus ISR
 * for virtio-pci) once per batch when EVENT_IDX or
 * VRING_AVAIL_F_NO_INTERRUPT allow it. No global lock and no allocation on
 * that path.
 *
 * Lifecycle (all from one control thread, the main loop in the VMM):
 *   dataplane_create()  IOQ, per-queue request slots, counters
 *   dataplane_start()   takes the queues: executor switched to the
 *                       dataplane, notifiers attached inside the iothread,
 *                       one pass over each queue (the "kick once")
 *   dataplane_stop()    inside the iothread: detach notifiers, test-and-clear
 *                       them, wait for all in-flight I/O, publish the used
 *                       ring; the queues (ring state included) are then the
 *                       caller's again, to continue exactly where the
 *                       dataplane stopped
 *   dataplane_destroy() stop if needed, free
 *
 * "Context: control thread" functions assert (unless NDEBUG) that they do
 * not run in the iothread; the iothread's handlers assert that the queues
 * are bound to it (between start and stop), and the IOQ's entry points that
 * it is the IOQ thread (ioq_bind_thread()).
 */
#ifndef VBLK_DATAPLANE_H
#define VBLK_DATAPLANE_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "util/block-acct.h"
#include "util/block-throttle.h"
#include "event/event.h"
#include "ioq/ioq.h"
#include "virtio/virtio-blk.h"

#define DATAPLANE_MAX_QUEUES VIRTIO_BLK_MAX_QUEUES

typedef struct DataPlane DataPlane;

/*
 * werror= / rerror= on the dataplane, with the block layer's meaning
 * (block/block.h, which this module does not include): rerror for reads,
 * werror for writes, flushes, discards and write-zeroes. An I/O error of the
 * IOQ (not a request refused up front) is
 *   report  completed with VIRTIO_BLK_S_IOERR;
 *   ignore  completed with VIRTIO_BLK_S_OK;
 *   stop    held in the iothread, not completed, until dataplane_resume();
 *   enospc  stop on ENOSPC, report otherwise.
 * Every one of them is announced to the error hook (QEMU's BLOCK_IO_ERROR
 * goes out for all three actions).
 */
typedef enum DataPlaneErrorPolicy {
    DATAPLANE_ERR_REPORT,
    DATAPLANE_ERR_IGNORE,
    DATAPLANE_ERR_STOP,
    DATAPLANE_ERR_ENOSPC,
} DataPlaneErrorPolicy;

typedef enum DataPlaneErrorAction {
    DATAPLANE_ERR_ACTION_REPORT,
    DATAPLANE_ERR_ACTION_IGNORE,
    DATAPLANE_ERR_ACTION_STOP,
} DataPlaneErrorAction;

typedef struct DataPlaneIOError {
    bool is_read; /* rerror applied; else werror (write, flush, discard, write-zeroes) */
    DataPlaneErrorAction action;
    int error; /* positive errno */
} DataPlaneIOError;

/*
 * Runs in the thread of DataPlaneConf.main_loop (a bottom half of that loop,
 * posted by the iothread), once per failed request, in the order the
 * failures happened (up to DATAPLANE_ERR_EVENTS_MAX waiting at a time). For
 * action "stop" the request is already held: the owner should pause the VM
 * through its own stop path and, on resume, call
 * dataplane_resume().
 */
typedef void DataPlaneErrorHook(void *opaque, const DataPlaneIOError *ev);

/*
 * At most this many failures wait for the main loop; beyond it report and
 * ignore events are dropped (counted, one warning per bottom half) and one
 * stop is still delivered.
 */
#define DATAPLANE_ERR_EVENTS_MAX 64

typedef struct DataPlaneConf {
    VirtIOBlk *blk;      /* the device (borrowed) */
    IOThread *iothread;  /* borrowed; several devices may share one */
    IOQConfig ioq;       /* backend: engine, fd, O_DIRECT, alignment */
    unsigned num_queues; /* 1..DATAPLANE_MAX_QUEUES */
    unsigned queue_size; /* slots per queue (the largest queue size in use) */
    bool no_flush;       /* cache.no-flush: flushes complete without reaching the disk */
    /*
     * Completion groups: while reaping, publish the used ring (and notify the
     * guest if EVENT_IDX asks for it) after this many completions of one
     * queue, so that a guest can refill while the rest are still being
     * reaped. 0: DATAPLANE_COMPLETE_BATCH; UINT_MAX: one group per reap.
     */
    unsigned complete_batch;
    /*
     * Completion hold (vblk's x-complete-hold-ns of the iothread): while at
     * least @complete_hold_depth requests are in the IOQ after a pass, the
     * pass does not publish its completions; a timer publishes them
     * @complete_hold_ns after the first one was held (or an earlier pass that
     * finds fewer in flight does). A guest that keeps a deep queue then takes
     * one interrupt for several completions; a shallow queue never waits.
     * Completion groups (@complete_batch) still publish within a reap.
     * 0: off. @complete_hold_depth 0: DATAPLANE_COMPLETE_HOLD_DEPTH.
     */
    int64_t complete_hold_ns;
    unsigned complete_hold_depth;
    /*
     * Optional, for a device whose queues are split between several
     * dataplanes (one per iothread): @acct is the device's array of
     * accounting shards, one per device queue, and @queue_index[i] the device
     * index of this dataplane's queue i, whose requests are counted in
     * @acct[queue_index[i]]. Both borrowed. NULL: the dataplane's own shards.
     */
    BlockAcctShard *acct;
    const unsigned *queue_index;
    /*
     * With @acct: the most queues dataplane_set_queues() may give it later
     * (slots are made for that many now); 0: num_queues.
     */
    unsigned max_queues;
    /* Optional: I/O errors reported to @error_hook in @main_loop's thread. */
    EventLoop *main_loop;
    DataPlaneErrorHook *error_hook;
    void *error_opaque;
} DataPlaneConf;

#define DATAPLANE_COMPLETE_BATCH 8
#define DATAPLANE_COMPLETE_HOLD_DEPTH 16
/* The longest hold accepted (1 ms); longer values are clamped. */
#define DATAPLANE_COMPLETE_HOLD_MAX_NS 1000000

/* One queue handed to dataplane_start(). */
typedef struct DataPlaneQueue {
    VirtIOBlkQueue *q;      /* owned by the caller; the dataplane borrows it */
    int host_notifier;      /* eventfd the guest's kick writes (read by the iothread) */
    GuestNotifier notifier; /* interrupts the guest (the transport's; copied) */
} DataPlaneQueue;

/*
 * Counters of one queue. Written by the iothread only, read from any thread
 * with relaxed loads (values may be a few requests apart from each other).
 * Stage times are in TSC cycles, summed over all requests or batches.
 */
typedef struct DataPlaneQueueStats {
    uint64_t requests;        /* chains popped */
    uint64_t completed;       /* requests completed */
    uint64_t batches;         /* handle_queue passes that popped >= 1 chain */
    uint64_t kicks;           /* host notifier wakeups */
    uint64_t kick_reads;      /* host notifier eventfd reads (drains, 1 per 64 kicks) */
    uint64_t avail_polls;     /* the loop's polling found chains (no kick needed) */
    uint64_t irqs;            /* guest notifier writes */
    uint64_t irqs_suppressed; /* completion groups with no interrupt needed */
    uint64_t publishes;       /* used-index publishes that moved it (completion groups) */
    uint64_t inflight;        /* handed to the IOQ, not completed */
    uint64_t throttle_waits;  /* times the queue stopped for the throttle timer */
    uint64_t cycles_pop;      /* pop + parse + enqueue */
    uint64_t cycles_submit;   /* ioq_submit (the syscall) */
    uint64_t cycles_complete; /* reaping completions + status/used writes */
    uint64_t cycles_notify;   /* used idx publish + interrupt decision + irqfd write */
} DataPlaneQueueStats;

/* Context: control thread */
DataPlane *dataplane_create(const DataPlaneConf *conf, GError **errp);

/*
 * Start serving @queues (count must be conf.num_queues). No request may be in
 * flight on them. Idempotent: starting a started dataplane returns true.
 * Context: control thread (not the iothread)
 */
bool dataplane_start(DataPlane *dp, const DataPlaneQueue *queues, unsigned n, GError **errp);

/*
 * Stop serving the queues and wait for every in-flight request. Afterwards
 * the queues have no executor (set one before processing them again) and
 * their ring state continues where the dataplane left off. Idempotent.
 * Context: control thread (not the iothread)
 */
void dataplane_stop(DataPlane *dp);

/* Wait until no request is in flight (the dataplane keeps running). */
/* Context: control thread */
void dataplane_drain(DataPlane *dp);

/* Stop if started, then free. NULL is ignored. Context: control thread */
void dataplane_destroy(DataPlane *dp);

/*
 * Serve other device queues from now on: @n (0..max_queues) of them, whose
 * device indices (into DataPlaneConf.acct) are @queue_index. Only while
 * stopped, only for a dataplane made with DataPlaneConf.acct. The IOQ and
 * the iothread stay; the queues' counters (dataplane_get_queue_stats())
 * start from zero. A dataplane with no queue cannot be started.
 * Context: control thread (not the iothread)
 */
bool dataplane_set_queues(DataPlane *dp, const unsigned *queue_index, unsigned n, GError **errp);
/* Queues served (num_queues, or as dataplane_set_queues() last said). Context: control thread */
unsigned dataplane_num_queues(DataPlane *dp);
/* Context: any thread */
bool dataplane_is_started(DataPlane *dp);
/* Context: any thread */
void dataplane_get_queue_stats(DataPlane *dp, unsigned qidx, DataPlaneQueueStats *st);
/* Context: any thread. The IOQ's counters (bounces, retries, batches). */
void dataplane_get_ioq_stats(DataPlane *dp, IOQStats *st);

/*
 * How the dataplane learned of completions: from the IOQ's fd, through the
 * loop's epoll_wait (@events), or by the loop's polling of the completion
 * ring (@polls, each one that reaped something). Same rules as the queue
 * counters.
 */
typedef struct DataPlaneWakeStats {
    uint64_t completion_events;
    uint64_t completion_polls;
    uint64_t complete_holds; /* passes that held their completions back (hold timer armed) */
} DataPlaneWakeStats;
/* Context: any thread */
void dataplane_get_wake_stats(DataPlane *dp, DataPlaneWakeStats *st);

/*
 * Accounting: one shard per queue (@n = num_queues), written by the iothread
 * (the device's, as given in DataPlaneConf.acct, when it gave them),
 * for blk_acct_attach_shards() (query-blockstats). Each request is counted
 * once at completion (a writethrough write with its flush as one write);
 * requests the engine refused (range, alignment) and IOQ refusals count as
 * invalid, I/O errors as failed. Without a histogram until attached.
 * Context: control thread
 */
BlockAcctShard *dataplane_acct_shards(DataPlane *dp, unsigned *n);

/*
 * Throttling: the drive's bucket state, levels included (block-throttle.h).
 * Set replaces limits and levels and re-times throttled queues at once; on a
 * started dataplane both run inside the iothread (synchronously). Reads,
 * writes, write-zeroes and discards are throttled, flushes are not. A
 * throttled queue is not popped until a timer in the iothread's loop says
 * the buckets have room; its request stays in the avail ring meanwhile.
 * Context: control thread (not the iothread)
 */
void dataplane_set_throttle_state(DataPlane *dp, const ThrottleState *ts);
void dataplane_get_throttle_state(DataPlane *dp, ThrottleState *ts);

/*
 * The error policy (default: report for both). Takes effect for failures
 * that happen from now on. Context: control thread (not the iothread)
 */
void dataplane_set_error_policy(DataPlane *dp, DataPlaneErrorPolicy rerror,
                                DataPlaneErrorPolicy werror);
/* Requests held by "stop", waiting for dataplane_resume(). Context: any thread */
unsigned dataplane_held_count(DataPlane *dp);
/*
 * `cont`: resubmit the held requests one at a time in their submission
 * order (each after the previous one completed), so they complete in that
 * order. One that fails with "stop" again stays held, with every request
 * behind it, and the resubmission ends there (the owner stops the VM again).
 * No-op when nothing is held or the dataplane is not started.
 * Context: control thread (not the iothread)
 */
void dataplane_resume(DataPlane *dp);
/*
 * dataplane_stop(), unless requests are held by "stop" (before or during
 * the drain): then the dataplane keeps the queues and keeps running, and
 * false is returned with @errp set. For the path switch: a held request is
 * never handed over, lost or completed twice. dataplane_stop() itself (reset,
 * teardown) completes held requests with their error, as "report", and
 * "stop" is "report" while it drains.
 * Context: control thread (not the iothread)
 */
bool dataplane_try_stop(DataPlane *dp, GError **errp);

/*
 * Error injection into the dataplane's IOQ (ioq_inject_add(): blkdebug's
 * rules for the I/O engines), applied inside the iothread when started.
 * Context: control thread (not the iothread)
 */
bool dataplane_inject_error(DataPlane *dp, const IOQInjectRule *rule, GError **errp);
void dataplane_inject_clear(DataPlane *dp);

#endif /* VBLK_DATAPLANE_H */
