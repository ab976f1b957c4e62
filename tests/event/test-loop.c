/*
 * Event loop tests: fd handlers, cross-thread bottom halves, timers, the
 * notify_me handshake, adaptive polling, the GSource and IOThread.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "event/event.h"
#include "util/debug-state.h"

static EventLoop *new_loop(void)
{
    GError *err = NULL;
    EventLoop *loop = event_loop_new(&err);

    g_assert_no_error(err);
    g_assert_nonnull(loop);
    return loop;
}

/* Run the loop (blocking) until *counter reaches target, with a safety cap. */
static void run_until(EventLoop *loop, int *counter, int target)
{
    int64_t deadline = event_clock_ns() + 10 * (int64_t)G_USEC_PER_SEC * 1000;

    while (__atomic_load_n(counter, __ATOMIC_ACQUIRE) < target) {
        g_assert_cmpint(event_clock_ns(), <, deadline);
        event_loop_run_once(loop, true);
    }
}

/* ---- fd handlers ---- */

typedef struct PipeState {
    EventLoop *loop;
    int fds[2];
    int reads;
    int writes;
    char last;
    bool remove_self;
} PipeState;

static void pipe_read(void *opaque)
{
    PipeState *s = opaque;

    g_assert_cmpint(read(s->fds[0], &s->last, 1), ==, 1);
    s->reads++;
    if (s->remove_self) {
        g_assert_true(event_loop_set_fd_handler(s->loop, s->fds[0], NULL, NULL, NULL));
    }
}

static void pipe_write(void *opaque)
{
    PipeState *s = opaque;

    s->writes++;
}

static void test_fd_handlers(void)
{
    EventLoop *loop = new_loop();
    PipeState s = {.loop = loop};
    EventFdOps rd = {.read = pipe_read};
    EventFdOps wr = {.write = pipe_write};
    GError *err = NULL;

    g_assert_cmpint(pipe(s.fds), ==, 0);
    g_assert_true(event_loop_set_fd_handler(loop, s.fds[0], &rd, &s, &err));
    g_assert_no_error(err);

    /* Nothing ready: a non-blocking iteration runs nothing. */
    g_assert_false(event_loop_run_once(loop, false));
    g_assert_cmpint(s.reads, ==, 0);

    g_assert_cmpint(write(s.fds[1], "x", 1), ==, 1);
    g_assert_true(event_loop_run_once(loop, true));
    g_assert_cmpint(s.reads, ==, 1);
    g_assert_cmpint(s.last, ==, 'x');

    /* Modify: the write end is always writable. */
    g_assert_true(event_loop_set_fd_handler(loop, s.fds[1], &wr, &s, &err));
    g_assert_true(event_loop_run_once(loop, false));
    g_assert_cmpint(s.writes, ==, 1);
    g_assert_true(event_loop_set_fd_handler(loop, s.fds[1], NULL, NULL, &err));
    event_loop_run_once(loop, false);
    g_assert_cmpint(s.writes, ==, 1);

    /* A handler that removes itself while two bytes are pending runs once. */
    s.remove_self = true;
    g_assert_cmpint(write(s.fds[1], "yz", 2), ==, 2);
    event_loop_run_once(loop, false);
    event_loop_run_once(loop, false);
    g_assert_cmpint(s.reads, ==, 2);
    g_assert_cmpint(s.last, ==, 'y');

    /* Bad fd: a GError, no crash. */
    g_assert_false(event_loop_set_fd_handler(loop, -5, &rd, &s, &err));
    g_assert_nonnull(err);
    g_clear_error(&err);

    event_loop_free(loop);
    close(s.fds[0]);
    close(s.fds[1]);
}

/* ---- bottom halves ---- */

typedef struct BHState {
    EventLoop *loop;
    EventBH *bh;
    int runs;
    int order[8];
    int norder;
} BHState;

static void bh_count(void *opaque)
{
    BHState *s = opaque;

    __atomic_fetch_add(&s->runs, 1, __ATOMIC_RELEASE);
}

static void *bh_thread(void *opaque)
{
    BHState *s = opaque;

    for (int i = 0; i < 1000; i++) {
        int seen = __atomic_load_n(&s->runs, __ATOMIC_ACQUIRE);
        event_bh_schedule(s->bh);
        /* Wait for the loop to run it so every schedule counts. */
        while (__atomic_load_n(&s->runs, __ATOMIC_ACQUIRE) == seen) {
            g_usleep(10);
        }
    }
    return NULL;
}

static void test_bh_cross_thread(void)
{
    EventLoop *loop = new_loop();
    BHState s = {.loop = loop};
    EventLoopStats st;
    pthread_t th;

    s.bh = event_bh_new(loop, bh_count, &s);
    pthread_create(&th, NULL, bh_thread, &s);
    /* Only blocking iterations: each BH must wake the loop. */
    run_until(loop, &s.runs, 1000);
    pthread_join(th, NULL);
    event_loop_get_stats(loop, &st);
    g_assert_cmpint(s.runs, ==, 1000);
    g_assert_cmpuint(st.bh_runs, ==, 1000);
    event_bh_delete(s.bh);
    event_loop_free(loop);
}

typedef struct OrderArg {
    int id;
    int *log;
    int *nlog;
} OrderArg;

static void bh_record(void *opaque)
{
    OrderArg *a = opaque;

    a->log[(*a->nlog)++] = a->id;
}

static void test_bh_order_cancel_delete(void)
{
    EventLoop *loop = new_loop();
    int log[8];
    int nlog = 0;
    OrderArg args[4];
    EventBH *bh[4];

    for (int i = 0; i < 4; i++) {
        args[i] = (OrderArg){i, log, &nlog};
        bh[i] = event_bh_new(loop, bh_record, &args[i]);
    }
    event_bh_schedule(bh[2]);
    event_bh_schedule(bh[0]);
    event_bh_schedule(bh[0]); /* double schedule: runs once */
    event_bh_schedule(bh[3]);
    event_bh_schedule(bh[1]);
    event_bh_cancel(bh[3]);
    event_bh_delete(bh[1]); /* pending: freed by the dispatch, never run */
    g_assert_true(event_loop_run_once(loop, true));
    g_assert_cmpint(nlog, ==, 2);
    g_assert_cmpint(log[0], ==, 2);
    g_assert_cmpint(log[1], ==, 0);
    g_assert_false(event_loop_run_once(loop, false));
    /* A cancelled BH can be scheduled again. */
    event_bh_schedule(bh[3]);
    g_assert_true(event_loop_run_once(loop, false));
    g_assert_cmpint(nlog, ==, 3);
    g_assert_cmpint(log[2], ==, 3);
    event_bh_delete(bh[0]);
    event_bh_delete(bh[2]);
    event_bh_delete(bh[3]);
    event_loop_free(loop);
}

/* ---- timers ---- */

typedef struct TimerState {
    int fired[3];
    int nfired;
    int64_t when[3];
    int64_t deadline[3];
} TimerState;

typedef struct TimerArg {
    TimerState *s;
    int id;
} TimerArg;

static void timer_cb(void *opaque)
{
    TimerArg *a = opaque;

    a->s->when[a->id] = event_clock_ns();
    a->s->fired[a->s->nfired++] = a->id;
}

static void test_timers(void)
{
    EventLoop *loop = new_loop();
    TimerState s = {0};
    TimerArg args[3];
    EventTimer *t[3];
    EventTimer *cancelled;
    int64_t now = event_clock_ns();
    const int64_t ms = 1000000;
    int64_t delay[3] = {30 * ms, 10 * ms, 20 * ms};

    for (int i = 0; i < 3; i++) {
        args[i] = (TimerArg){&s, i};
        t[i] = event_timer_new(loop, timer_cb, &args[i]);
        s.deadline[i] = now + delay[i];
        event_timer_mod(t[i], s.deadline[i]);
    }
    cancelled = event_timer_new(loop, timer_cb, &args[0]);
    event_timer_mod(cancelled, now + 5 * ms);
    event_timer_del(cancelled);
    g_assert_false(event_timer_pending(cancelled));

    run_until(loop, &s.nfired, 3);
    g_assert_cmpint(s.fired[0], ==, 1);
    g_assert_cmpint(s.fired[1], ==, 2);
    g_assert_cmpint(s.fired[2], ==, 0);
    for (int i = 0; i < 3; i++) {
        g_assert_cmpint(s.when[i], >=, s.deadline[i]);
        g_assert_false(event_timer_pending(t[i]));
    }

    /* Equal deadlines fire in arming order; re-arming moves a timer. */
    s.nfired = 0;
    now = event_clock_ns();
    event_timer_mod(t[2], now + ms);
    event_timer_mod(t[0], now + ms);
    event_timer_mod(t[1], now + 100 * ms);
    event_timer_mod(t[1], now + ms);
    run_until(loop, &s.nfired, 3);
    g_assert_cmpint(s.fired[0], ==, 2);
    g_assert_cmpint(s.fired[1], ==, 0);
    g_assert_cmpint(s.fired[2], ==, 1);

    for (int i = 0; i < 3; i++) {
        event_timer_free(t[i]);
    }
    event_timer_free(cancelled);
    event_loop_free(loop);
}

/* ---- notify_me: wakeups skip the eventfd write when the loop is awake ---- */

static void test_notify_skip(void)
{
    EventLoop *loop = new_loop();
    BHState s = {.loop = loop};
    EventLoopStats st;
    pthread_t th;

    s.bh = event_bh_new(loop, bh_count, &s);
    /* The loop is not blocked: 1000 schedules, not one eventfd write. */
    for (int i = 0; i < 1000; i++) {
        event_bh_schedule(s.bh);
        event_loop_run_once(loop, false);
    }
    event_loop_get_stats(loop, &st);
    g_assert_cmpint(s.runs, ==, 1000);
    g_assert_cmpuint(st.notify_writes, ==, 0);
    g_assert_cmpuint(st.notify_skipped, ==, 1000);

    /* From another thread while the loop sleeps: writes happen, about one per
     * blocking wait. Not exactly: a schedule that lands between the loop's
     * pending check (timeout 0, not counted as a blocking wait) and its
     * clearing of notify_me still writes; each such race adds one. */
    s.runs = 0;
    pthread_create(&th, NULL, bh_thread, &s);
    run_until(loop, &s.runs, 1000);
    pthread_join(th, NULL);
    event_loop_get_stats(loop, &st);
    g_assert_cmpuint(st.notify_writes, >, 0);
    g_assert_cmpuint(st.notify_writes, <=, st.blocking_waits + 10);
    event_bh_delete(s.bh);
    event_loop_free(loop);
}

/* ---- adaptive polling ---- */

typedef struct PollState {
    EventNotifier e;
    int polls;
    int reads;
    int begins;
    int ends;
    int work; /* atomic: set by another thread, consumed by poll or read */
    int done;
} PollState;

static bool poll_fn(void *opaque)
{
    PollState *s = opaque;

    s->polls++;
    if (__atomic_exchange_n(&s->work, 0, __ATOMIC_ACQ_REL)) {
        __atomic_fetch_add(&s->done, 1, __ATOMIC_RELEASE);
        return true;
    }
    return false;
}

static void poll_read(void *opaque)
{
    PollState *s = opaque;

    event_notifier_test_and_clear(&s->e);
    s->reads++;
    poll_fn(s);
}

static void poll_begin(void *opaque)
{
    ((PollState *)opaque)->begins++;
}

static void poll_end(void *opaque)
{
    ((PollState *)opaque)->ends++;
}

static void nop_cb(void *opaque)
{
}

static void test_adaptive_poll(void)
{
    EventLoop *loop = new_loop();
    PollState s = {0};
    EventFdOps ops = {
        .read = poll_read, .poll = poll_fn, .poll_begin = poll_begin, .poll_end = poll_end};
    EventLoopStats st;
    uint64_t first_ns = 0, max_ns = 0;
    EventTimer *t;

    g_assert_true(event_notifier_init(&s.e, false, NULL));
    g_assert_true(event_loop_set_fd_handler(loop, s.e.fd, &ops, &s, NULL));

    /* Off by default: blocking with nothing to do never calls poll. */
    t = event_timer_new(loop, nop_cb, NULL);
    event_timer_mod(t, event_clock_ns() + 1000000);
    event_loop_run_once(loop, true);
    g_assert_cmpint(s.polls, ==, 0);

    /*
     * Waits of 200 us, under max (2 ms): the poll time starts at 4 us and
     * doubles until it covers the wait (256 us).
     */
    event_loop_set_poll_params(loop, 2000000, 0, 0);
    /* 12 rounds suffice on an idle machine; a preempted round (a wait over
     * max) resets the poll time, so allow more rounds on a loaded one. */
    for (int i = 0; i < 200 && (i < 12 || max_ns < 256000); i++) {
        event_timer_mod(t, event_clock_ns() + 200000);
        while (event_timer_pending(t)) {
            event_loop_run_once(loop, true);
            event_loop_get_stats(loop, &st);
            if (st.poll_ns && !first_ns) {
                first_ns = st.poll_ns;
            }
            max_ns = MAX(max_ns, st.poll_ns);
        }
    }
    g_assert_cmpuint(first_ns, ==, 4000);
    g_assert_cmpuint(max_ns, >=, 256000);
    g_assert_cmpuint(max_ns, <=, 2000000);
    g_assert_cmpint(s.polls, >, 0);
    g_assert_cmpint(s.begins, >, 0);
    g_assert_cmpint(s.begins - s.ends, >=, 0);
    g_assert_cmpint(s.begins - s.ends, <=, 1);

    /*
     * Work that shows up while polling is found by poll, with no eventfd.
     * A preempted round on a loaded machine resets the poll time to zero:
     * run 200 us rounds until it is non-zero again (only run_once changes it).
     */
    for (int i = 0; i < 200; i++) {
        event_loop_get_stats(loop, &st);
        if (st.poll_ns) {
            break;
        }
        event_timer_mod(t, event_clock_ns() + 200000);
        while (event_timer_pending(t)) {
            event_loop_run_once(loop, true);
        }
    }
    g_assert_cmpuint(st.poll_ns, >, 0);
    __atomic_store_n(&s.work, 1, __ATOMIC_RELEASE);
    event_timer_mod(t, event_clock_ns() + 10000000); /* bounds the wait if it fails */
    event_loop_run_once(loop, true);
    g_assert_cmpint(s.done, ==, 1);
    g_assert_cmpint(s.reads, ==, 0);
    event_loop_get_stats(loop, &st);
    g_assert_cmpuint(st.poll_success, >=, 1);

    /* A long wait (5 ms > max) resets polling (shrink 0 = to zero). */
    event_timer_mod(t, event_clock_ns() + 5000000);
    while (event_timer_pending(t)) {
        event_loop_run_once(loop, true);
    }
    event_loop_get_stats(loop, &st);
    g_assert_cmpuint(st.poll_ns, ==, 0);
    g_assert_cmpint(s.begins, ==, s.ends);
    /* Disabled again: poll time stays zero. */
    event_loop_set_poll_params(loop, 0, 0, 0);
    event_loop_run_once(loop, false);
    event_loop_get_stats(loop, &st);
    g_assert_cmpuint(st.poll_ns, ==, 0);

    event_timer_free(t);
    event_loop_set_notifier(loop, &s.e, NULL, NULL, NULL, NULL);
    event_notifier_cleanup(&s.e);
    event_loop_free(loop);
}

static bool poll_always(void *opaque)
{
    ((PollState *)opaque)->polls++;
    return true;
}

static void plain_read(void *opaque)
{
    PollState *s = opaque;

    event_notifier_test_and_clear(&s->e);
    s->reads++;
}

/*
 * While polling makes progress, the loop skips its non-blocking epoll_wait
 * (a syscall per iteration) except every 16th iteration; an fd without a
 * poll handler turns the skipping off, so its read handler is never starved.
 */
static void test_poll_skips_epoll_wait(void)
{
    EventLoop *loop = new_loop();
    PollState s = {0}, plain = {0};
    EventFdOps ops = {.read = poll_read, .poll = poll_always};
    EventFdOps plain_ops = {.read = plain_read};
    EventLoopStats before, after;

    g_assert_true(event_notifier_init(&s.e, false, NULL));
    g_assert_true(event_loop_set_fd_handler(loop, s.e.fd, &ops, &s, NULL));
    event_loop_set_poll_params(loop, 1000000, 0, 0);
    /* One wakeup through the fd starts the adaptive poll time. */
    event_notifier_set(&s.e);
    event_loop_run_once(loop, true);
    g_assert_cmpint(s.reads, ==, 1);

    event_loop_get_stats(loop, &before);
    for (int i = 0; i < 64; i++) {
        g_assert_true(event_loop_run_once(loop, true));
    }
    event_loop_get_stats(loop, &after);
    g_assert_cmpuint(after.poll_success - before.poll_success, ==, 64);
    g_assert_cmpuint(after.epoll_waits - before.epoll_waits, >=, 3);
    g_assert_cmpuint(after.epoll_waits - before.epoll_waits, <=, 5);

    /* A readable fd that only epoll_wait can see: dispatched at once. */
    g_assert_true(event_notifier_init(&plain.e, false, NULL));
    g_assert_true(event_loop_set_fd_handler(loop, plain.e.fd, &plain_ops, &plain, NULL));
    event_notifier_set(&plain.e);
    event_loop_get_stats(loop, &before);
    event_loop_run_once(loop, true);
    g_assert_cmpint(plain.reads, ==, 1);
    for (int i = 0; i < 16; i++) {
        event_loop_run_once(loop, true);
    }
    event_loop_get_stats(loop, &after);
    g_assert_cmpuint(after.epoll_waits - before.epoll_waits, ==, 17);

    /* Removed again: skipping resumes. */
    event_loop_set_fd_handler(loop, plain.e.fd, NULL, NULL, NULL);
    event_loop_get_stats(loop, &before);
    for (int i = 0; i < 32; i++) {
        event_loop_run_once(loop, true);
    }
    event_loop_get_stats(loop, &after);
    g_assert_cmpuint(after.epoll_waits - before.epoll_waits, <=, 3);

    event_loop_set_fd_handler(loop, s.e.fd, NULL, NULL, NULL);
    event_notifier_cleanup(&plain.e);
    event_notifier_cleanup(&s.e);
    event_loop_free(loop);
}

/* ---- GSource embedding ---- */

static void test_gsource(void)
{
    EventLoop *loop = new_loop();
    GMainContext *ctx = g_main_context_new();
    GSource *src = event_loop_create_gsource(loop);
    BHState s = {.loop = loop};
    PipeState p = {.loop = loop};
    EventFdOps rd = {.read = pipe_read};
    pthread_t th;

    g_source_attach(src, ctx);
    s.bh = event_bh_new(loop, bh_count, &s);
    event_bh_schedule(s.bh);
    g_main_context_iteration(ctx, FALSE);
    g_assert_cmpint(s.runs, ==, 1);

    g_assert_cmpint(pipe(p.fds), ==, 0);
    g_assert_true(event_loop_set_fd_handler(loop, p.fds[0], &rd, &p, NULL));
    g_assert_cmpint(write(p.fds[1], "g", 1), ==, 1);
    g_main_context_iteration(ctx, TRUE);
    g_assert_cmpint(p.reads, ==, 1);

    /* BHs from another thread wake glib's blocking poll. */
    s.runs = 0;
    pthread_create(&th, NULL, bh_thread, &s);
    while (__atomic_load_n(&s.runs, __ATOMIC_ACQUIRE) < 1000) {
        g_main_context_iteration(ctx, TRUE);
    }
    pthread_join(th, NULL);

    g_assert_true(event_loop_set_fd_handler(loop, p.fds[0], NULL, NULL, NULL));
    close(p.fds[0]);
    close(p.fds[1]);
    event_bh_delete(s.bh);
    g_source_destroy(src);
    g_source_unref(src);
    g_main_context_unref(ctx);
    event_loop_free(loop);
}

/* ---- IOThread ---- */

typedef struct SyncArg {
    IOThread *t;
    pthread_t ran_on;
    bool in_owner;
    int nested;
} SyncArg;

static void sync_nested(void *opaque)
{
    SyncArg *a = opaque;

    a->nested++;
}

static void sync_fn(void *opaque)
{
    SyncArg *a = opaque;

    a->ran_on = pthread_self();
    a->in_owner = event_loop_in_owner(iothread_get_loop(a->t));
    /* Re-entering from inside must run directly, not deadlock. */
    iothread_run_sync(a->t, sync_nested, a);
}

static void test_iothread(void)
{
    GError *err = NULL;
    IOThread *t = iothread_new("test-iothread", &err);
    SyncArg a = {.t = t};
    BHState s = {0};

    g_assert_no_error(err);
    for (int i = 0; i < 100; i++) {
        iothread_run_sync(t, sync_fn, &a);
    }
    g_assert_false(pthread_equal(a.ran_on, pthread_self()));
    g_assert_true(a.in_owner);
    g_assert_cmpint(a.nested, ==, 100);
    g_assert_false(event_loop_in_owner(iothread_get_loop(t)));

    /* BHs scheduled from here run there. */
    s.bh = event_bh_new(iothread_get_loop(t), bh_count, &s);
    for (int i = 0; i < 100; i++) {
        int seen = __atomic_load_n(&s.runs, __ATOMIC_ACQUIRE);
        event_bh_schedule(s.bh);
        while (__atomic_load_n(&s.runs, __ATOMIC_ACQUIRE) == seen) {
            g_usleep(10);
        }
    }
    g_assert_cmpint(s.runs, ==, 100);
    event_bh_delete(s.bh);

    iothread_stop(t);
    iothread_stop(t); /* idempotent */
    /* Stopped: run_sync runs in the caller. */
    iothread_run_sync(t, sync_nested, &a);
    g_assert_cmpint(a.nested, ==, 101);
    iothread_free(t);
    iothread_free(NULL);
}

static void bh_delete_fn(void *opaque)
{
    event_bh_delete(opaque);
}

static void bh_sleep(void *opaque)
{
    __atomic_store_n((int *)opaque, 1, __ATOMIC_RELEASE);
    g_usleep(300 * 1000);
    __atomic_store_n((int *)opaque, 2, __ATOMIC_RELEASE);
}

/* Reads the "for N ms" that follows @what in @text. */
static long dump_ms(const char *text, const char *what)
{
    const char *p = strstr(text, what);

    g_assert_nonnull(p);
    return strtol(p + strlen(what), NULL, 10);
}

/*
 * The iothread's debug-state line says whether it sleeps in epoll_wait or runs,
 * and since when: idle, then stuck in a 300 ms bottom half, then idle again.
 */
static void test_iothread_debug_state(void)
{
    GError *err = NULL;
    IOThread *t = iothread_new("dbg-io", &err);
    g_autofree char *want = NULL;
    char *text;
    int state = 0;
    EventBH *bh;

    g_assert_no_error(err);
    while (!iothread_get_thread_id(t)) {
        g_usleep(1000);
    }
    want = g_strdup_printf("iothread dbg-io (thread %d): ", iothread_get_thread_id(t));
    g_usleep(100 * 1000);
    text = debug_state_collect();
    g_assert_nonnull(strstr(text, want));
    g_assert_cmpint(dump_ms(text, "waiting in epoll_wait for "), >=, 50);
    g_free(text);

    bh = event_bh_new(iothread_get_loop(t), bh_sleep, &state);
    event_bh_schedule(bh);
    while (__atomic_load_n(&state, __ATOMIC_ACQUIRE) == 0) {
        g_usleep(1000);
    }
    g_usleep(150 * 1000);
    text = debug_state_collect();
    g_assert_cmpint(dump_ms(text, "running for "), >=, 100);
    g_assert_null(strstr(text, "waiting in epoll_wait"));
    g_free(text);
    while (__atomic_load_n(&state, __ATOMIC_ACQUIRE) != 2) {
        g_usleep(1000);
    }
    g_usleep(50 * 1000);
    text = debug_state_collect();
    g_assert_nonnull(strstr(text, "waiting in epoll_wait for "));
    g_free(text);
    iothread_run_sync(t, bh_delete_fn, bh);

    iothread_free(t);
    text = debug_state_collect();
    g_assert_null(strstr(text, "dbg-io"));
    g_free(text);
}

static void test_notifier(void)
{
    EventNotifier e;

    g_assert_true(event_notifier_init(&e, true, NULL));
    g_assert_cmpint(event_notifier_get_fd(&e), >=, 0);
    g_assert_true(event_notifier_test_and_clear(&e));
    g_assert_false(event_notifier_test_and_clear(&e));
    g_assert_cmpint(event_notifier_set(&e), ==, 0);
    g_assert_cmpint(event_notifier_set(&e), ==, 0);
    g_assert_true(event_notifier_test_and_clear(&e));
    g_assert_false(event_notifier_test_and_clear(&e));
    event_notifier_cleanup(&e);
    event_notifier_cleanup(&e);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/event/notifier", test_notifier);
    g_test_add_func("/event/fd-handlers", test_fd_handlers);
    g_test_add_func("/event/bh/cross-thread", test_bh_cross_thread);
    g_test_add_func("/event/bh/order-cancel-delete", test_bh_order_cancel_delete);
    g_test_add_func("/event/timers", test_timers);
    g_test_add_func("/event/notify-skip", test_notify_skip);
    g_test_add_func("/event/adaptive-poll", test_adaptive_poll);
    g_test_add_func("/event/poll-skips-epoll-wait", test_poll_skips_epoll_wait);
    g_test_add_func("/event/gsource", test_gsource);
    g_test_add_func("/event/iothread", test_iothread);
    g_test_add_func("/event/iothread-debug-state", test_iothread_debug_state);
    return g_test_run();
}
