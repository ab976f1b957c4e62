/*
 * Worker pool for aio=threads. One mutex guards the work queue, the done
 * list and the BH pointer: a worker schedules the BH while holding it, so
 * the loop thread can delete the BH (under the same lock) without racing a
 * late schedule.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <pthread.h>

#include "thread-pool.h"

struct ThreadPool {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    ThreadPoolItem *work_head, **work_tail;
    ThreadPoolItem *done_head, **done_tail;
    EventBH *bh;
    GPtrArray *threads; /* pthread_t* */
    unsigned max_workers;
    unsigned idle;
    unsigned pending; /* loop thread only */
    bool stopping;
};

static void *worker_main(void *opaque)
{
    ThreadPool *p = opaque;

    pthread_mutex_lock(&p->lock);
    for (;;) {
        ThreadPoolItem *it;

        while (!p->work_head && !p->stopping) {
            p->idle++;
            pthread_cond_wait(&p->cond, &p->lock);
            p->idle--;
        }
        if (!p->work_head) {
            break; /* stopping and nothing left */
        }
        it = p->work_head;
        p->work_head = it->next;
        if (!p->work_head) {
            p->work_tail = &p->work_head;
        }
        pthread_mutex_unlock(&p->lock);

        it->ret = it->fn(it);

        pthread_mutex_lock(&p->lock);
        it->next = NULL;
        *p->done_tail = it;
        p->done_tail = &it->next;
        if (p->bh) {
            event_bh_schedule(p->bh);
        }
    }
    pthread_mutex_unlock(&p->lock);
    return NULL;
}

static void run_inline(ThreadPool *p)
{
    ThreadPoolItem *it = p->work_head;

    p->work_head = NULL;
    p->work_tail = &p->work_head;
    while (it) {
        ThreadPoolItem *next = it->next;

        it->ret = it->fn(it);
        pthread_mutex_lock(&p->lock);
        it->next = NULL;
        *p->done_tail = it;
        p->done_tail = &it->next;
        if (p->bh) {
            event_bh_schedule(p->bh);
        }
        pthread_mutex_unlock(&p->lock);
        it = next;
    }
}

static void pool_bh(void *opaque)
{
    ThreadPool *p = opaque;
    ThreadPoolItem *list;

    pthread_mutex_lock(&p->lock);
    list = p->done_head;
    p->done_head = NULL;
    p->done_tail = &p->done_head;
    pthread_mutex_unlock(&p->lock);
    while (list) {
        ThreadPoolItem *it = list;

        list = it->next;
        p->pending--;
        it->done(it, it->ret);
    }
}

/* Context: loop thread */
ThreadPool *thread_pool_new(EventLoop *loop, unsigned max_workers)
{
    ThreadPool *p = g_new0(ThreadPool, 1);

    pthread_mutex_init(&p->lock, NULL);
    pthread_cond_init(&p->cond, NULL);
    p->work_tail = &p->work_head;
    p->done_tail = &p->done_head;
    p->threads = g_ptr_array_new_with_free_func(g_free);
    p->max_workers = max_workers ? max_workers : 1;
    thread_pool_set_loop(p, loop);
    return p;
}

/* Context: loop thread */
void thread_pool_set_loop(ThreadPool *p, EventLoop *loop)
{
    EventBH *old;

    pthread_mutex_lock(&p->lock);
    old = p->bh;
    p->bh = loop ? event_bh_new(loop, pool_bh, p) : NULL;
    if (p->bh && p->done_head) {
        event_bh_schedule(p->bh);
    }
    pthread_mutex_unlock(&p->lock);
    if (old) {
        event_bh_delete(old);
    }
}

static void spawn_worker(ThreadPool *p)
{
    pthread_t *th = g_new(pthread_t, 1);

    if (pthread_create(th, NULL, worker_main, p) != 0) {
        g_free(th);
        return; /* the existing workers will get to it */
    }
    pthread_setname_np(*th, "blk-worker");
    g_ptr_array_add(p->threads, th);
}

/* Context: loop thread */
void thread_pool_submit(ThreadPool *p, ThreadPoolItem *item)
{
    p->pending++;
    pthread_mutex_lock(&p->lock);
    item->next = NULL;
    *p->work_tail = item;
    p->work_tail = &item->next;
    if (p->idle == 0 && p->threads->len < p->max_workers) {
        spawn_worker(p);
    }
    if (p->threads->len == 0) {
        /* no thread could be started: nobody else touches the queue, run it here */
        pthread_mutex_unlock(&p->lock);
        run_inline(p);
        return;
    }
    pthread_cond_signal(&p->cond);
    pthread_mutex_unlock(&p->lock);
}

/* Context: loop thread */
unsigned thread_pool_pending(ThreadPool *p)
{
    return p->pending;
}

/* Context: loop thread */
void thread_pool_free(ThreadPool *p)
{
    if (!p) {
        return;
    }
    pthread_mutex_lock(&p->lock);
    p->stopping = true;
    pthread_cond_broadcast(&p->cond);
    pthread_mutex_unlock(&p->lock);
    for (unsigned i = 0; i < p->threads->len; i++) {
        pthread_join(*(pthread_t *)g_ptr_array_index(p->threads, i), NULL);
    }
    g_ptr_array_free(p->threads, TRUE);
    thread_pool_set_loop(p, NULL);
    pthread_mutex_destroy(&p->lock);
    pthread_cond_destroy(&p->cond);
    g_free(p);
}
