/*
 * EventLoop internals shared by loop.c, timer.c, gsource.c and iothread.c.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef EVENT_LOOP_INTERNAL_H
#define EVENT_LOOP_INTERNAL_H

#include "event/event.h"

enum {
    BH_PENDING = 1 << 0,   /* on loop->bh_pending */
    BH_SCHEDULED = 1 << 1, /* callback must run when dispatched */
    BH_DELETED = 1 << 2,   /* free when dispatched */
};

typedef struct FdNode {
    int fd;
    bool deleted;  /* removed; freed once no dispatch walks the events */
    bool internal; /* the loop's own notifier/timerfd: not "progress" */
    EventFdOps ops;
    void *opaque;
    struct FdNode *next;
} FdNode;

struct EventBH {
    EventLoop *loop;
    EventHandler *cb;
    void *opaque;
    unsigned flags; /* atomic BH_* */
    EventBH *next;  /* link in loop->bh_pending */
};

struct EventTimer {
    EventLoop *loop;
    EventHandler *cb;
    void *opaque;
    int64_t expire_ns;
    bool armed;
    EventTimer *next; /* sorted by expire_ns, then arming order */
};

struct EventLoop {
    int epfd;
    EventNotifier notifier; /* cross-thread wakeup doorbell */

    /* Owner-only state. */
    FdNode *nodes;
    unsigned walking; /* run_once depth; deleted nodes freed at 0 */
    bool nodes_deleted;
    unsigned npoll; /* nodes with a poll callback */
    unsigned nplain; /* non-internal nodes without one (only epoll_wait sees them) */
    unsigned wait_skips; /* epoll_waits skipped after polling made progress */

    /* Timers (timer.c), owner only. */
    int timerfd;
    EventTimer *timers;
    int64_t timerfd_deadline; /* what the timerfd is armed for, INT64_MAX: off */

    /* Cross-thread state. */
    EventBH *bh_pending; /* lock-free stack (push: CAS, pop all: exchange) */
    unsigned notify_me;  /* +2 per blocking run_once, bit 0 by the GSource */
    bool notified;       /* someone called event_loop_notify() */

    /* Adaptive polling: parameters written by any thread, poll_ns by the owner. */
    int64_t poll_max_ns;
    int64_t poll_grow;
    int64_t poll_shrink;
    int64_t poll_ns;
    bool poll_started;

    EventLoopStats stats;
    /* Debug state: set by the owner around a blocking epoll_wait (event_clock_ns). */
    int64_t wait_enter_ns;
    int64_t wait_leave_ns;
};

bool loop_add_internal(EventLoop *loop, int fd, EventHandler *read, GError **errp);
bool loop_bh_pending(EventLoop *loop);
void loop_notify_accept(EventLoop *loop);
void loop_set_current(EventLoop *loop);

bool loop_timers_init(EventLoop *loop, GError **errp);
void loop_timers_cleanup(EventLoop *loop);
bool loop_run_timers(EventLoop *loop);

#endif /* EVENT_LOOP_INTERNAL_H */
