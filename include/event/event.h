/*
 * Per-thread event loop: epoll fd handlers, cross-thread bottom halves,
 * monotonic timers, eventfd notifiers, optional adaptive polling, and the
 * IOThread helper that runs one loop on its own pthread.
 *
 * Threading model: an EventLoop belongs to the thread that runs it (its
 * "owner").  fd handlers and timers are changed from the owner only.  Bottom
 * halves may be scheduled from any thread; that is the way other threads ask
 * the owner to do something.  The main thread can drive a loop from glib with
 * event_loop_create_gsource().
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_EVENT_H
#define VBLK_EVENT_H

#include <stdbool.h>
#include <stdint.h>
#include <glib.h>

/* ---- EventNotifier: an eventfd used as a level-triggered doorbell ---- */

typedef struct EventNotifier {
    int fd;
} EventNotifier;

/* Context: any thread. @active: create it already set. */
bool event_notifier_init(EventNotifier *e, bool active, GError **errp);
/* Context: any thread, once no other thread uses @e. Safe on a zeroed or cleaned notifier. */
void event_notifier_cleanup(EventNotifier *e);
/* Context: any thread. Returns 0 or -errno. */
int event_notifier_set(EventNotifier *e);
/* Context: any thread. Returns true if it was set; it is clear afterwards. */
bool event_notifier_test_and_clear(EventNotifier *e);
/* Context: any thread. */
int event_notifier_get_fd(const EventNotifier *e);

/* ---- EventLoop ---- */

typedef struct EventLoop EventLoop;
typedef struct EventBH EventBH;
typedef struct EventTimer EventTimer;

typedef void EventHandler(void *opaque);
/* Busy-poll callback: do the work if there is any, return true if it made progress. */
typedef bool EventPollFn(void *opaque);

/*
 * Callbacks of one fd.  @read/@write run when epoll reports the fd readable or
 * writable.  @poll (optional) is called in a busy loop when adaptive polling is
 * enabled; @poll_begin/@poll_end (optional) bracket a polling phase, e.g. to
 * suppress guest kicks while polling.  After @poll_end the loop polls once more
 * before blocking, to catch work that raced with re-enabling notifications.
 *
 * @edge watches the fd edge-triggered (EPOLLET): @read runs once per write
 * that came after the loop last collected the fd, whether or not anything was
 * read from it, so a doorbell eventfd needs no read() per wakeup. Only for
 * eventfds whose writers add small counts (KVM's ioeventfd, io_uring's and
 * AIO's completion eventfd, a front end's +1 kicks); the handler still drains
 * the count now and then so that it never nears saturation.
 */
typedef struct EventFdOps {
    EventHandler *read;
    EventHandler *write;
    EventPollFn *poll;
    EventHandler *poll_begin;
    EventHandler *poll_end;
    bool edge;
} EventFdOps;

/* Counters readable from any thread (relaxed atomics). */
typedef struct EventLoopStats {
    uint64_t iterations;     /* event_loop_run_once() calls */
    uint64_t blocking_waits; /* epoll_wait calls with a non-zero timeout */
    uint64_t epoll_waits;    /* epoll_wait calls (blocking or not) */
    uint64_t notify_writes;  /* eventfd writes done by event_loop_notify() */
    uint64_t notify_skipped; /* event_loop_notify() calls that skipped the write */
    uint64_t bh_runs;        /* bottom halves dispatched */
    uint64_t poll_success;   /* polling phases that found work */
    uint64_t poll_ns;        /* current adaptive polling time */
} EventLoopStats;

/* Context: any thread; the loop's owner is whoever runs it. */
EventLoop *event_loop_new(GError **errp);
/*
 * Context: owner thread, or any thread once the owner stopped running it.
 * fd handlers still registered are dropped (their fds are not closed); pending
 * bottom halves are discarded; BHs and timers must have been deleted.
 */
void event_loop_free(EventLoop *loop);

/*
 * Add, change or (with @ops NULL or all of read/write/poll NULL) remove the
 * handler of @fd.  Removal is safe from inside any callback of the same loop,
 * including the handler being removed.
 * Context: owner thread.
 */
bool event_loop_set_fd_handler(EventLoop *loop, int fd, const EventFdOps *ops, void *opaque,
                               GError **errp);
/* Context: owner thread. Shorthand for read-only handlers; @read NULL removes. */
bool event_loop_set_notifier(EventLoop *loop, EventNotifier *e, EventHandler *read,
                             EventPollFn *poll, void *opaque, GError **errp);

/*
 * Run one iteration: busy-poll (if enabled), wait for events (blocking only if
 * @blocking and no bottom half is pending), then dispatch fd handlers, expired
 * timers and bottom halves.  Returns true if any callback ran.
 * Context: owner thread (callbacks may call it recursively).
 */
bool event_loop_run_once(EventLoop *loop, bool blocking);

/*
 * Wake the loop if it is (about to be) blocked.  Skips the eventfd write when
 * the loop is running and will see new work before it blocks.
 * Context: any thread.
 */
void event_loop_notify(EventLoop *loop);

/* Context: any thread. True if the calling thread is currently running @loop. */
bool event_loop_in_owner(EventLoop *loop);

/*
 * Adaptive polling (QEMU's rules): 0 disables (default).  Polling starts at
 * 4 us, grows by @grow (0 = 2) while the blocked time stays under @max_ns and
 * shrinks by @shrink (0 = reset to 0) when it exceeds it.
 * Context: any thread (values are read atomically by the owner).
 */
void event_loop_set_poll_params(EventLoop *loop, int64_t max_ns, int64_t grow, int64_t shrink);

/* Context: any thread. */
void event_loop_get_stats(EventLoop *loop, EventLoopStats *stats);
/*
 * Appends (no newline) whether the owner waits in epoll_wait or runs, for how
 * long, and its counters: for debug-state dumps (util/debug-state.h).
 * Context: any thread.
 */
void event_loop_debug_state(EventLoop *loop, GString *out);

/*
 * The epoll fd: readable when an fd handler, a timer or a wakeup is ready.
 * For embedding the loop into another poller.  Context: any thread.
 */
int event_loop_get_fd(EventLoop *loop);

/*
 * A GSource that drives @loop from a GMainContext: attach it with
 * g_source_attach(); the thread that iterates that context becomes the owner.
 * Context: any thread.
 */
GSource *event_loop_create_gsource(EventLoop *loop);

/* ---- Bottom halves ---- */

/* Context: any thread. Allocates; not for the hot path. */
EventBH *event_bh_new(EventLoop *loop, EventHandler *cb, void *opaque);
/*
 * Run @bh's callback once, soon, in the loop's thread.  Scheduling an already
 * scheduled BH is a no-op.  Lock-free; wakes the loop if needed.
 * Context: any thread.
 */
void event_bh_schedule(EventBH *bh);
/* Context: owner thread. The callback will not run unless scheduled again. */
void event_bh_cancel(EventBH *bh);
/*
 * Context: owner thread, or any thread if no one else can schedule @bh any
 * more (the caller guarantees it).  Freed now or after a pending dispatch.
 */
void event_bh_delete(EventBH *bh);

/* ---- Timers (CLOCK_MONOTONIC nanoseconds) ---- */

/* Context: any thread. */
int64_t event_clock_ns(void);
/* Context: owner thread. */
EventTimer *event_timer_new(EventLoop *loop, EventHandler *cb, void *opaque);
/*
 * Arm (or re-arm) @t to fire at absolute time @expire_ns.  Timers with equal
 * deadlines fire in the order they were armed.  Context: owner thread.
 */
void event_timer_mod(EventTimer *t, int64_t expire_ns);
/* Context: owner thread. */
void event_timer_del(EventTimer *t);
/* Context: owner thread. */
bool event_timer_pending(EventTimer *t);
/* Context: owner thread. */
void event_timer_free(EventTimer *t);

/* ---- IOThread: a pthread running one EventLoop until asked to stop ---- */

typedef struct IOThread IOThread;
typedef void IOThreadFunc(void *opaque);

/* Context: control thread. @name names the pthread (truncated to 15 chars). */
IOThread *iothread_new(const char *name, GError **errp);
/* Context: control thread. */
EventLoop *iothread_get_loop(IOThread *t);
/*
 * Run @fn(@opaque) inside the iothread and wait for it to return.  Called from
 * the iothread itself, runs @fn directly.  Context: any thread.
 */
void iothread_run_sync(IOThread *t, IOThreadFunc *fn, void *opaque);
/* Context: any thread. The Linux thread id (query-iothreads), 0 before it runs. */
int iothread_get_thread_id(IOThread *t);
/*
 * QEMU's aio-max-batch of the iothread: at most this many requests per submit
 * syscall in the dataplanes it runs; 0 (the default): the engine's own (32).
 * Set before a dataplane is created on it. Context: main thread.
 */
void iothread_set_aio_max_batch(IOThread *t, unsigned n);
unsigned iothread_get_aio_max_batch(const IOThread *t);
/*
 * vblk's x-submit-early: while fewer than @n requests are in the kernel, its
 * dataplanes submit each request at once (IOQConfig.submit_early); 0: off.
 * Set before a dataplane is created on it. Context: main thread.
 */
void iothread_set_submit_early(IOThread *t, unsigned n);
unsigned iothread_get_submit_early(const IOThread *t);
/*
 * vblk's x-complete-hold-ns and x-complete-hold-depth: while at least @depth
 * requests are in flight, its dataplanes publish completions at most @ns
 * after the first one was held (DataPlaneConf.complete_hold_ns); @ns 0: off.
 * Set before a dataplane is created on it. Context: main thread.
 */
void iothread_set_complete_hold(IOThread *t, int64_t ns, unsigned depth);
int64_t iothread_get_complete_hold(const IOThread *t, unsigned *depth);
/* Context: control thread. Stops and joins the thread; idempotent. */
void iothread_stop(IOThread *t);
/* Context: control thread. Stops, joins, frees the loop. NULL is ignored. */
void iothread_free(IOThread *t);

#endif /* VBLK_EVENT_H */
