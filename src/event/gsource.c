/*
 * Drive an EventLoop from a GMainContext: the loop's epoll fd is the one fd
 * glib polls, and the notify_me handshake is done in prepare/check so that
 * cross-thread wakeups still skip the eventfd write while glib is busy.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "loop-internal.h"

typedef struct LoopSource {
    GSource source;
    EventLoop *loop;
    gpointer tag;
} LoopSource;

static gboolean loop_source_prepare(GSource *source, gint *timeout)
{
    EventLoop *loop = ((LoopSource *)source)->loop;

    /* Bit 0: glib may block in poll() on our epoll fd. */
    __atomic_store_n(&loop->notify_me, __atomic_load_n(&loop->notify_me, __ATOMIC_RELAXED) | 1,
                     __ATOMIC_RELAXED);
    /* Full barrier: pairs with the fence in event_loop_notify(). */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    /* Timers need no timeout: the timerfd makes the epoll fd readable. */
    *timeout = loop_bh_pending(loop) ? 0 : -1;
    return *timeout == 0;
}

static void loop_source_clear_notify_me(EventLoop *loop)
{
    /* Release: pairs with the acquire-side fence in event_loop_notify(). */
    __atomic_store_n(&loop->notify_me, __atomic_load_n(&loop->notify_me, __ATOMIC_RELAXED) & ~1u,
                     __ATOMIC_RELEASE);
}

static gboolean loop_source_check(GSource *source)
{
    LoopSource *ls = (LoopSource *)source;

    loop_source_clear_notify_me(ls->loop);
    return (g_source_query_unix_fd(source, ls->tag) & G_IO_IN) || loop_bh_pending(ls->loop);
}

static gboolean loop_source_dispatch(GSource *source, GSourceFunc callback, gpointer user_data)
{
    LoopSource *ls = (LoopSource *)source;

    /* check() is skipped when prepare() returned TRUE. */
    loop_source_clear_notify_me(ls->loop);
    event_loop_run_once(ls->loop, false);
    return G_SOURCE_CONTINUE;
}

static GSourceFuncs loop_source_funcs = {
    .prepare = loop_source_prepare,
    .check = loop_source_check,
    .dispatch = loop_source_dispatch,
};

/* Context: any thread. */
GSource *event_loop_create_gsource(EventLoop *loop)
{
    LoopSource *ls = (LoopSource *)g_source_new(&loop_source_funcs, sizeof(LoopSource));

    ls->loop = loop;
    ls->tag = g_source_add_unix_fd(&ls->source, loop->epfd, G_IO_IN);
    g_source_set_name(&ls->source, "vblk-event-loop");
    return &ls->source;
}
