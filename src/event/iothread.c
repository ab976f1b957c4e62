/*
 * IOThread: one pthread running one EventLoop until asked to stop, plus a way
 * for other threads to run a function inside it and wait for the result.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <pthread.h>
#include <unistd.h>
#include <signal.h>
#include <string.h>

#include "loop-internal.h"
#include "util/debug-state.h"

struct IOThread {
    EventLoop *loop;
    EventBH *stop_bh;
    pthread_t thread;
    bool running;  /* created and not yet joined (control thread only) */
    bool stopping; /* written by stop_bh inside the thread */
    int tid;       /* the thread's Linux TID, published once it runs */
    char *name;
    unsigned aio_max_batch; /* 0: the engine's */
    unsigned submit_early;  /* 0: off */
    int64_t complete_hold_ns;     /* 0: off */
    unsigned complete_hold_depth; /* 0: the dataplane's default */
};

/* The debug-state line of one iothread (util/debug-state.h). Context: any thread. */
static void iothread_debug_state(GString *out, void *opaque)
{
    IOThread *t = opaque;

    g_string_append_printf(out, "iothread %s (thread %d): ", t->name ? t->name : "?",
                           iothread_get_thread_id(t));
    event_loop_debug_state(t->loop, out);
    g_string_append_c(out, '\n');
}

typedef struct RunSync {
    IOThreadFunc *fn;
    void *opaque;
    bool done;
    pthread_mutex_t lock;
    pthread_cond_t cond;
} RunSync;

static void *iothread_main(void *opaque)
{
    IOThread *t = opaque;

    /* The thread owns the loop for its whole life, not only inside run_once,
     * so iothread_run_sync() from a callback knows not to wait for itself. */
    loop_set_current(t->loop);
    __atomic_store_n(&t->tid, (int)gettid(), __ATOMIC_RELEASE);
    while (!t->stopping) {
        event_loop_run_once(t->loop, true);
    }
    loop_set_current(NULL);
    return NULL;
}

static void iothread_stop_bh(void *opaque)
{
    IOThread *t = opaque;

    /* Set from inside the thread: a flag written from outside could be
     * missed by a loop that is just about to block; a BH cannot. */
    t->stopping = true;
}

/* Context: control thread. */
IOThread *iothread_new(const char *name, GError **errp)
{
    IOThread *t = g_new0(IOThread, 1);
    sigset_t all, old;
    int err;

    t->loop = event_loop_new(errp);
    if (!t->loop) {
        g_free(t);
        return NULL;
    }
    t->stop_bh = event_bh_new(t->loop, iothread_stop_bh, t);

    /* Signals belong to the main thread: start ours with all blocked. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&t->thread, NULL, iothread_main, t);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(err),
                    "cannot create iothread '%s': %s", name ? name : "", g_strerror(err));
        event_bh_delete(t->stop_bh);
        event_loop_free(t->loop);
        g_free(t);
        return NULL;
    }
    t->running = true;
    t->name = g_strdup(name);
    debug_state_register(iothread_debug_state, t);
    if (name) {
        char short_name[16];
        g_strlcpy(short_name, name, sizeof(short_name));
        pthread_setname_np(t->thread, short_name);
    }
    return t;
}

/* Context: control thread. */
EventLoop *iothread_get_loop(IOThread *t)
{
    return t->loop;
}

static void run_sync_bh(void *opaque)
{
    RunSync *rs = opaque;

    rs->fn(rs->opaque);
    pthread_mutex_lock(&rs->lock);
    rs->done = true;
    pthread_cond_signal(&rs->cond);
    pthread_mutex_unlock(&rs->lock);
}

/* Context: any thread. */
void iothread_run_sync(IOThread *t, IOThreadFunc *fn, void *opaque)
{
    RunSync rs = {.fn = fn, .opaque = opaque};
    EventBH *bh;

    if (event_loop_in_owner(t->loop) || !t->running) {
        /* Inside the iothread already, or nobody runs the loop any more. */
        fn(opaque);
        return;
    }
    pthread_mutex_init(&rs.lock, NULL);
    pthread_cond_init(&rs.cond, NULL);
    bh = event_bh_new(t->loop, run_sync_bh, &rs);
    event_bh_schedule(bh);
    pthread_mutex_lock(&rs.lock);
    while (!rs.done) {
        pthread_cond_wait(&rs.cond, &rs.lock);
    }
    pthread_mutex_unlock(&rs.lock);
    /* The dispatcher cleared PENDING before the callback: freed right here. */
    event_bh_delete(bh);
    pthread_cond_destroy(&rs.cond);
    pthread_mutex_destroy(&rs.lock);
}

/* Context: control thread. */
void iothread_stop(IOThread *t)
{
    if (!t->running) {
        return;
    }
    event_bh_schedule(t->stop_bh);
    pthread_join(t->thread, NULL);
    t->running = false;
}

/* Context: control thread. */
void iothread_free(IOThread *t)
{
    if (!t) {
        return;
    }
    debug_state_unregister(iothread_debug_state, t);
    iothread_stop(t);
    event_bh_delete(t->stop_bh);
    event_loop_free(t->loop);
    g_free(t->name);
    g_free(t);
}

/* Context: any thread. 0 until the thread has started. */
int iothread_get_thread_id(IOThread *t)
{
    return __atomic_load_n(&t->tid, __ATOMIC_ACQUIRE);
}

/* Context: main thread */
void iothread_set_aio_max_batch(IOThread *t, unsigned n)
{
    t->aio_max_batch = n;
}

/* Context: main thread */
unsigned iothread_get_aio_max_batch(const IOThread *t)
{
    return t->aio_max_batch;
}

/* Context: main thread */
void iothread_set_submit_early(IOThread *t, unsigned n)
{
    t->submit_early = n;
}

/* Context: main thread */
unsigned iothread_get_submit_early(const IOThread *t)
{
    return t->submit_early;
}

/* Context: main thread */
void iothread_set_complete_hold(IOThread *t, int64_t ns, unsigned depth)
{
    t->complete_hold_ns = ns;
    t->complete_hold_depth = depth;
}

/* Context: main thread */
int64_t iothread_get_complete_hold(const IOThread *t, unsigned *depth)
{
    *depth = t->complete_hold_depth;
    return t->complete_hold_ns;
}
