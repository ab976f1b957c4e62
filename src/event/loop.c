/*
 * The per-thread event loop: epoll fd handlers, cross-thread bottom halves and
 * the notify_me/notified wakeup handshake, adaptive polling.
 *
 * Timers live in timer.c and are reached through one timerfd in the epoll set,
 * so "something is ready" is always "the epoll fd is readable" (which is what
 * the GSource in gsource.c relies on).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "loop-internal.h"

#define LOOP_MAX_EVENTS 64
#define POLL_START_NS   4000 /* first polling time once polling is enabled */

/* The loop this thread is running right now (nested run_once restores it). */
static __thread EventLoop *current_loop;

/* Counters written only by the owner: a relaxed load+store, no locked RMW. */
static void stat_inc(uint64_t *counter)
{
    __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
}

/* Counters written by any thread (notify): one atomic add. */
static void stat_add_shared(uint64_t *counter)
{
    __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

static void loop_notifier_read(void *opaque)
{
    EventLoop *loop = opaque;

    /* Reset the doorbell; the work it announced is found by the dispatch. */
    event_notifier_test_and_clear(&loop->notifier);
}

static FdNode *loop_find_node(EventLoop *loop, int fd)
{
    for (FdNode *node = loop->nodes; node; node = node->next) {
        if (node->fd == fd && !node->deleted) {
            return node;
        }
    }
    return NULL;
}

static void loop_free_deleted_nodes(EventLoop *loop)
{
    FdNode **link = &loop->nodes;

    while (*link) {
        FdNode *node = *link;
        if (node->deleted) {
            *link = node->next;
            g_free(node);
        } else {
            link = &node->next;
        }
    }
    loop->nodes_deleted = false;
}

static uint32_t fd_ops_events(const EventFdOps *ops)
{
    return (ops->read ? EPOLLIN : 0) | (ops->write ? EPOLLOUT : 0) | (ops->edge ? EPOLLET : 0);
}

static void loop_remove_node(EventLoop *loop, FdNode *node)
{
    epoll_ctl(loop->epfd, EPOLL_CTL_DEL, node->fd, NULL);
    if (node->ops.poll) {
        loop->npoll--;
    } else if (!node->internal) {
        loop->nplain--;
    }
    /* Pending epoll events may still point at the node: free it only when no
     * dispatch is walking the event array. */
    node->deleted = true;
    loop->nodes_deleted = true;
    if (loop->walking == 0) {
        loop_free_deleted_nodes(loop);
    }
}

bool loop_add_internal(EventLoop *loop, int fd, EventHandler *read, GError **errp)
{
    EventFdOps ops = {.read = read};

    if (!event_loop_set_fd_handler(loop, fd, &ops, loop, errp)) {
        return false;
    }
    loop_find_node(loop, fd)->internal = true;
    loop->nplain--; /* counted as plain by event_loop_set_fd_handler */
    return true;
}

/* Context: owner thread. */
bool event_loop_set_fd_handler(EventLoop *loop, int fd, const EventFdOps *ops, void *opaque,
                               GError **errp)
{
    FdNode *node = loop_find_node(loop, fd);
    bool remove = !ops || (!ops->read && !ops->write && !ops->poll);
    struct epoll_event ev = {0};
    int op;

    if (remove) {
        if (node) {
            loop_remove_node(loop, node);
        }
        return true;
    }

    ev.events = fd_ops_events(ops);
    if (node) {
        op = EPOLL_CTL_MOD;
        ev.data.ptr = node;
    } else {
        op = EPOLL_CTL_ADD;
        node = g_new0(FdNode, 1);
        node->fd = fd;
        ev.data.ptr = node;
    }
    if (epoll_ctl(loop->epfd, op, fd, &ev) < 0) {
        int err = errno;
        if (op == EPOLL_CTL_ADD) {
            g_free(node);
        }
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(err), "cannot watch fd %d: %s", fd,
                    g_strerror(err));
        return false;
    }
    if (op == EPOLL_CTL_ADD) {
        node->next = loop->nodes;
        loop->nodes = node;
    } else if (node->ops.poll) {
        loop->npoll--;
    } else if (!node->internal) {
        loop->nplain--;
    }
    node->ops = *ops;
    node->opaque = opaque;
    if (ops->poll) {
        loop->npoll++;
    } else if (!node->internal) {
        loop->nplain++;
    }
    return true;
}

/* Context: owner thread. */
bool event_loop_set_notifier(EventLoop *loop, EventNotifier *e, EventHandler *read,
                             EventPollFn *poll, void *opaque, GError **errp)
{
    EventFdOps ops = {.read = read, .poll = read ? poll : NULL};

    return event_loop_set_fd_handler(loop, e->fd, &ops, opaque, errp);
}

/* Context: any thread. */
EventLoop *event_loop_new(GError **errp)
{
    EventLoop *loop = g_new0(EventLoop, 1);

    loop->timerfd = -1;
    loop->notifier.fd = -1;
    loop->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (loop->epfd < 0) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(errno),
                    "cannot create epoll instance: %s", g_strerror(errno));
        g_free(loop);
        return NULL;
    }
    if (!event_notifier_init(&loop->notifier, false, errp) ||
        !loop_add_internal(loop, loop->notifier.fd, loop_notifier_read, errp) ||
        !loop_timers_init(loop, errp)) {
        event_loop_free(loop);
        return NULL;
    }
    return loop;
}

static void loop_discard_bhs(EventLoop *loop)
{
    EventBH *bh = __atomic_exchange_n(&loop->bh_pending, NULL, __ATOMIC_ACQUIRE);

    while (bh) {
        EventBH *next = bh->next;
        unsigned old =
            __atomic_fetch_and(&bh->flags, ~(BH_PENDING | BH_SCHEDULED), __ATOMIC_ACQ_REL);
        if (old & BH_DELETED) {
            g_free(bh);
        }
        bh = next;
    }
}

/* Context: owner thread, or any thread once the owner stopped running it. */
void event_loop_free(EventLoop *loop)
{
    if (!loop) {
        return;
    }
    loop_discard_bhs(loop);
    loop_timers_cleanup(loop);
    for (FdNode *node = loop->nodes; node; node = node->next) {
        node->deleted = true;
    }
    loop_free_deleted_nodes(loop);
    event_notifier_cleanup(&loop->notifier);
    if (loop->epfd >= 0) {
        close(loop->epfd);
    }
    g_free(loop);
}

/* Context: any thread. */
void event_loop_notify(EventLoop *loop)
{
    /* Publish the work (the BH push already did, with release) before the flag. */
    __atomic_store_n(&loop->notified, true, __ATOMIC_RELEASE);
    /*
     * Full barrier: orders our work/notified stores before reading notify_me.
     * Pairs with the full barrier in event_loop_run_once()/gsource prepare
     * between raising notify_me and checking for pending work: either the
     * loop sees our work, or we see notify_me != 0 and write the eventfd.
     */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&loop->notify_me, __ATOMIC_RELAXED)) {
        event_notifier_set(&loop->notifier);
        stat_add_shared(&loop->stats.notify_writes);
    } else {
        stat_add_shared(&loop->stats.notify_skipped);
    }
}

void loop_notify_accept(EventLoop *loop)
{
    /* The eventfd itself is reset by its read handler; the flag only tells a
     * polling loop that someone wanted attention. */
    if (__atomic_load_n(&loop->notified, __ATOMIC_RELAXED)) {
        __atomic_store_n(&loop->notified, false, __ATOMIC_RELAXED);
    }
}

/* Context: any thread. */
bool event_loop_in_owner(EventLoop *loop)
{
    return current_loop == loop;
}

void loop_set_current(EventLoop *loop)
{
    current_loop = loop;
}

/* ---- bottom halves ---- */

/* Context: any thread. */
EventBH *event_bh_new(EventLoop *loop, EventHandler *cb, void *opaque)
{
    EventBH *bh = g_new0(EventBH, 1);

    bh->loop = loop;
    bh->cb = cb;
    bh->opaque = opaque;
    return bh;
}

/* Context: any thread. */
void event_bh_schedule(EventBH *bh)
{
    EventLoop *loop = bh->loop;
    unsigned old = __atomic_fetch_or(&bh->flags, BH_PENDING | BH_SCHEDULED, __ATOMIC_ACQ_REL);
    EventBH *head;

    if (old & BH_PENDING) {
        /* Already on the pending list; whoever pushed it woke the loop. */
        return;
    }
    head = __atomic_load_n(&loop->bh_pending, __ATOMIC_RELAXED);
    do {
        bh->next = head;
        /* Release: bh->next and the flags are visible before the bh is;
         * pairs with the acquire exchange in loop_run_bhs(). */
    } while (!__atomic_compare_exchange_n(&loop->bh_pending, &head, bh, true, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
    event_loop_notify(loop);
}

/* Context: owner thread. */
void event_bh_cancel(EventBH *bh)
{
    __atomic_fetch_and(&bh->flags, ~BH_SCHEDULED, __ATOMIC_RELAXED);
}

/* Context: owner thread, or any thread no one else can schedule @bh from. */
void event_bh_delete(EventBH *bh)
{
    unsigned old;

    if (!bh) {
        return;
    }
    old = __atomic_fetch_or(&bh->flags, BH_DELETED, __ATOMIC_ACQ_REL);
    if (!(old & BH_PENDING)) {
        g_free(bh);
    }
    /* else: still on the pending stack, loop_run_bhs() frees it. */
}

bool loop_bh_pending(EventLoop *loop)
{
    return __atomic_load_n(&loop->bh_pending, __ATOMIC_ACQUIRE) != NULL;
}

static bool loop_run_bhs(EventLoop *loop)
{
    /* Acquire: pairs with the release CAS in event_bh_schedule(). */
    EventBH *bh = __atomic_exchange_n(&loop->bh_pending, NULL, __ATOMIC_ACQUIRE);
    EventBH *fifo = NULL;
    bool ran = false;

    /* The stack is newest-first; run in scheduling order. */
    while (bh) {
        EventBH *next = bh->next;
        bh->next = fifo;
        fifo = bh;
        bh = next;
    }
    while (fifo) {
        EventBH *next = fifo->next;
        /* Clear PENDING before the callback so it (or another thread) can
         * schedule the BH again; after this we no longer touch it unless it
         * must run, because its owner may delete it from another thread. */
        unsigned old =
            __atomic_fetch_and(&fifo->flags, ~(BH_PENDING | BH_SCHEDULED), __ATOMIC_ACQ_REL);
        if (old & BH_DELETED) {
            g_free(fifo);
        } else if (old & BH_SCHEDULED) {
            EventHandler *cb = fifo->cb;
            void *opaque = fifo->opaque;
            stat_inc(&loop->stats.bh_runs);
            cb(opaque);
            ran = true;
        }
        fifo = next;
    }
    return ran;
}

/* ---- adaptive polling ---- */

/* Context: any thread. */
void event_loop_set_poll_params(EventLoop *loop, int64_t max_ns, int64_t grow, int64_t shrink)
{
    __atomic_store_n(&loop->poll_max_ns, max_ns > 0 ? max_ns : 0, __ATOMIC_RELAXED);
    __atomic_store_n(&loop->poll_grow, grow > 1 ? grow : 2, __ATOMIC_RELAXED);
    __atomic_store_n(&loop->poll_shrink, shrink > 1 ? shrink : 0, __ATOMIC_RELAXED);
    event_loop_notify(loop);
}

static bool loop_call_pollers(EventLoop *loop)
{
    bool progress = false;

    for (FdNode *node = loop->nodes; node; node = node->next) {
        if (!node->deleted && node->ops.poll && node->ops.poll(node->opaque)) {
            progress = true;
        }
    }
    return progress;
}

static void loop_poll_set_started(EventLoop *loop, bool started)
{
    if (loop->poll_started == started) {
        return;
    }
    loop->poll_started = started;
    for (FdNode *node = loop->nodes; node; node = node->next) {
        EventHandler *fn = started ? node->ops.poll_begin : node->ops.poll_end;
        if (!node->deleted && node->ops.poll && fn) {
            fn(node->opaque);
        }
    }
}

/*
 * Busy-poll for up to poll_ns.  Returns true if a poll handler made progress;
 * then the caller must not block.  Stops early when a BH or notify arrives.
 */
static bool loop_try_poll(EventLoop *loop)
{
    int64_t deadline;
    bool progress = false;

    if (loop->poll_ns > 0 && loop->npoll > 0) {
        loop_poll_set_started(loop, true);
        /* Polling past the next timer would only delay it. */
        deadline = event_clock_ns() + loop->poll_ns;
        if (loop->timers) {
            deadline = MIN(deadline, loop->timers->expire_ns);
        }
        do {
            progress = loop_call_pollers(loop);
        } while (!progress && !loop_bh_pending(loop) &&
                 !__atomic_load_n(&loop->notified, __ATOMIC_RELAXED) &&
                 event_clock_ns() < deadline);
        if (progress) {
            stat_inc(&loop->stats.poll_success);
            return true;
        }
    }
    if (loop->poll_started) {
        /* About to block: re-enable notifications, then look once more for
         * work that raced with re-enabling them. */
        loop_poll_set_started(loop, false);
        progress = loop_call_pollers(loop);
    }
    return progress;
}

static void loop_adjust_poll(EventLoop *loop, int64_t block_ns)
{
    int64_t max_ns = __atomic_load_n(&loop->poll_max_ns, __ATOMIC_RELAXED);
    int64_t ns = loop->poll_ns;

    if (max_ns == 0) {
        ns = 0;
    } else if (block_ns <= ns) {
        /* Polling time was long enough to catch the event: keep it. */
    } else if (block_ns > max_ns) {
        int64_t shrink = __atomic_load_n(&loop->poll_shrink, __ATOMIC_RELAXED);
        ns = shrink ? ns / shrink : 0;
    } else if (ns < max_ns) {
        int64_t grow = __atomic_load_n(&loop->poll_grow, __ATOMIC_RELAXED);
        ns = ns ? ns * grow : POLL_START_NS;
        ns = MIN(ns, max_ns);
    }
    loop->poll_ns = ns;
    __atomic_store_n(&loop->stats.poll_ns, (uint64_t)ns, __ATOMIC_RELAXED);
}

/* ---- dispatch ---- */

#define LOOP_BH_PASSES 4 /* rounds of BHs per iteration (BHs scheduling BHs) */
#define LOOP_WAIT_SKIP_MAX 16 /* at least one epoll_wait per this many polled iterations */

static bool loop_dispatch_events(EventLoop *loop, struct epoll_event *events, int n)
{
    bool progress = false;

    for (int i = 0; i < n; i++) {
        FdNode *node = events[i].data.ptr;
        uint32_t ev = events[i].events;

        if (!node->deleted && node->ops.read && (ev & (EPOLLIN | EPOLLHUP | EPOLLERR))) {
            node->ops.read(node->opaque);
            progress |= !node->internal;
        }
        /* The read callback may have removed the node: re-check. */
        if (!node->deleted && node->ops.write && (ev & (EPOLLOUT | EPOLLHUP | EPOLLERR))) {
            node->ops.write(node->opaque);
            progress = true;
        }
    }
    return progress;
}

/* Context: owner thread (also the GSource dispatch). */
bool event_loop_run_once(EventLoop *loop, bool blocking)
{
    struct epoll_event events[LOOP_MAX_EVENTS];
    EventLoop *prev = current_loop;
    bool polling = __atomic_load_n(&loop->poll_max_ns, __ATOMIC_RELAXED) > 0 || loop->poll_ns;
    int64_t start = 0;
    bool progress = false;
    int timeout = 0;
    int n;

    current_loop = loop;
    loop->walking++;
    stat_inc(&loop->stats.iterations);

    if (blocking && polling) {
        start = event_clock_ns();
        progress = loop_try_poll(loop);
    }
    if (blocking && !progress) {
        /* Tell event_loop_notify() that we may sleep. */
        __atomic_store_n(&loop->notify_me, __atomic_load_n(&loop->notify_me, __ATOMIC_RELAXED) + 2,
                         __ATOMIC_RELAXED);
        /* Full barrier: the notify_me store before reading bh_pending.  Pairs
         * with the fence in event_loop_notify(). */
        __atomic_thread_fence(__ATOMIC_SEQ_CST);
        timeout = loop_bh_pending(loop) ? 0 : -1;
        if (timeout) {
            stat_inc(&loop->stats.blocking_waits);
        }
    }

    if (timeout) {
        __atomic_store_n(&loop->wait_enter_ns, event_clock_ns(), __ATOMIC_RELAXED);
    }
    /*
     * Polling made progress and every fd that wants attention has a poll
     * handler: skip the non-blocking epoll_wait (a syscall per iteration on
     * a busy queue), as QEMU's aio_poll does. Every LOOP_WAIT_SKIP_MAX-th
     * time it still runs, so that an fd's read handler is never starved.
     */
    if (progress && loop->nplain == 0 && ++loop->wait_skips % LOOP_WAIT_SKIP_MAX != 0) {
        n = 0;
    } else {
        stat_inc(&loop->stats.epoll_waits);
        n = epoll_wait(loop->epfd, events, LOOP_MAX_EVENTS, timeout);
    }
    if (timeout) {
        __atomic_store_n(&loop->wait_leave_ns, event_clock_ns(), __ATOMIC_RELAXED);
    }

    if (blocking && !progress) {
        /* Release: our reads of shared state above happen before a notifier
         * may again skip the eventfd write. */
        __atomic_store_n(&loop->notify_me, __atomic_load_n(&loop->notify_me, __ATOMIC_RELAXED) - 2,
                         __ATOMIC_RELEASE);
    }
    loop_notify_accept(loop);

    if (n > 0) {
        progress |= loop_dispatch_events(loop, events, n);
    }
    progress |= loop_run_timers(loop);
    /*
     * BHs scheduled by BHs (a completion BH scheduling the device's notify BH)
     * run in this iteration too, instead of costing another trip through
     * epoll_wait (and, under glib, a whole GMainContext cycle). Bounded, so a
     * BH that always reschedules itself cannot starve the fds.
     */
    for (int pass = 0; pass < LOOP_BH_PASSES && loop_run_bhs(loop); pass++) {
        progress = true;
        if (!loop_bh_pending(loop)) {
            break;
        }
    }

    if (blocking && polling) {
        loop_adjust_poll(loop, event_clock_ns() - start);
    }

    if (--loop->walking == 0 && loop->nodes_deleted) {
        loop_free_deleted_nodes(loop);
    }
    current_loop = prev;
    return progress;
}

/* Context: any thread. */
int event_loop_get_fd(EventLoop *loop)
{
    return loop->epfd;
}

/* Context: any thread. */
void event_loop_get_stats(EventLoop *loop, EventLoopStats *s)
{
    s->iterations = __atomic_load_n(&loop->stats.iterations, __ATOMIC_RELAXED);
    s->blocking_waits = __atomic_load_n(&loop->stats.blocking_waits, __ATOMIC_RELAXED);
    s->epoll_waits = __atomic_load_n(&loop->stats.epoll_waits, __ATOMIC_RELAXED);
    s->notify_writes = __atomic_load_n(&loop->stats.notify_writes, __ATOMIC_RELAXED);
    s->notify_skipped = __atomic_load_n(&loop->stats.notify_skipped, __ATOMIC_RELAXED);
    s->bh_runs = __atomic_load_n(&loop->stats.bh_runs, __ATOMIC_RELAXED);
    s->poll_success = __atomic_load_n(&loop->stats.poll_success, __ATOMIC_RELAXED);
    s->poll_ns = __atomic_load_n(&loop->stats.poll_ns, __ATOMIC_RELAXED);
}

/* Context: any thread. */
void event_loop_debug_state(EventLoop *loop, GString *out)
{
    int64_t now = event_clock_ns();
    int64_t enter = __atomic_load_n(&loop->wait_enter_ns, __ATOMIC_RELAXED);
    int64_t leave = __atomic_load_n(&loop->wait_leave_ns, __ATOMIC_RELAXED);
    EventLoopStats st;

    event_loop_get_stats(loop, &st);
    if (enter > leave) {
        g_string_append_printf(out, "waiting in epoll_wait for %" PRId64 " ms", (now - enter) / 1000000);
    } else if (leave) {
        g_string_append_printf(out, "running for %" PRId64 " ms since its last wait",
                               (now - leave) / 1000000);
    } else {
        g_string_append(out, "has not waited yet");
    }
    g_string_append_printf(out,
                           "; %" PRIu64 " iterations, %" PRIu64 " blocking waits, %" PRIu64
                           " BHs run, bottom half pending: %s",
                           st.iterations, st.blocking_waits, st.bh_runs,
                           loop_bh_pending(loop) ? "yes" : "no");
}
