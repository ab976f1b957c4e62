/*
 * Monotonic timers of an EventLoop: a sorted list whose earliest deadline arms
 * one timerfd in the loop's epoll set (nanosecond precision, and the epoll fd
 * becomes readable on expiry, which the GSource embedding needs).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <stdint.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "loop-internal.h"

/* Context: any thread. */
int64_t event_clock_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void timerfd_read(void *opaque)
{
    EventLoop *loop = opaque;
    uint64_t expirations;

    /* Only resets the fd; loop_run_timers() runs whatever has expired. */
    if (read(loop->timerfd, &expirations, sizeof(expirations)) < 0) {
        /* EAGAIN: already consumed; nothing else can fail on a timerfd. */
    }
}

static void timers_rearm(EventLoop *loop)
{
    int64_t deadline = loop->timers ? loop->timers->expire_ns : INT64_MAX;
    struct itimerspec its = {0};

    if (deadline == loop->timerfd_deadline) {
        return;
    }
    loop->timerfd_deadline = deadline;
    if (deadline != INT64_MAX) {
        /* An all-zero it_value would disarm: deadlines <= 0 are "now". */
        deadline = MAX(deadline, 1);
        its.it_value.tv_sec = deadline / 1000000000;
        its.it_value.tv_nsec = deadline % 1000000000;
    }
    timerfd_settime(loop->timerfd, TFD_TIMER_ABSTIME, &its, NULL);
}

bool loop_timers_init(EventLoop *loop, GError **errp)
{
    loop->timerfd_deadline = INT64_MAX;
    loop->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (loop->timerfd < 0) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(errno), "cannot create timerfd: %s",
                    g_strerror(errno));
        return false;
    }
    return loop_add_internal(loop, loop->timerfd, timerfd_read, errp);
}

void loop_timers_cleanup(EventLoop *loop)
{
    /* Timers belong to their users; just unlink any still armed. */
    while (loop->timers) {
        EventTimer *t = loop->timers;
        loop->timers = t->next;
        t->armed = false;
    }
    if (loop->timerfd >= 0) {
        close(loop->timerfd);
        loop->timerfd = -1;
    }
}

static void timer_unlink(EventTimer *t)
{
    EventTimer **link = &t->loop->timers;

    while (*link && *link != t) {
        link = &(*link)->next;
    }
    if (*link) {
        *link = t->next;
    }
    t->armed = false;
}

bool loop_run_timers(EventLoop *loop)
{
    bool ran = false;
    int64_t now;

    if (!loop->timers) {
        return false;
    }
    now = event_clock_ns();
    while (loop->timers && loop->timers->expire_ns <= now) {
        EventTimer *t = loop->timers;

        /* Unlink first: the callback may re-arm or free the timer. */
        loop->timers = t->next;
        t->armed = false;
        t->cb(t->opaque);
        ran = true;
    }
    timers_rearm(loop);
    return ran;
}

/* Context: owner thread. */
EventTimer *event_timer_new(EventLoop *loop, EventHandler *cb, void *opaque)
{
    EventTimer *t = g_new0(EventTimer, 1);

    t->loop = loop;
    t->cb = cb;
    t->opaque = opaque;
    return t;
}

/* Context: owner thread. */
void event_timer_mod(EventTimer *t, int64_t expire_ns)
{
    EventTimer **link;

    if (t->armed) {
        timer_unlink(t);
    }
    /* Insert after every timer with a deadline <= ours: FIFO among equals. */
    link = &t->loop->timers;
    while (*link && (*link)->expire_ns <= expire_ns) {
        link = &(*link)->next;
    }
    t->expire_ns = expire_ns;
    t->next = *link;
    *link = t;
    t->armed = true;
    timers_rearm(t->loop);
}

/* Context: owner thread. */
void event_timer_del(EventTimer *t)
{
    if (t && t->armed) {
        timer_unlink(t);
        timers_rearm(t->loop);
    }
}

/* Context: owner thread. */
bool event_timer_pending(EventTimer *t)
{
    return t->armed;
}

/* Context: owner thread. */
void event_timer_free(EventTimer *t)
{
    if (t) {
        event_timer_del(t);
        g_free(t);
    }
}
