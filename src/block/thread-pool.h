/*
 * A small worker pool for blocking syscalls (aio=threads): the loop thread
 * submits work items; workers run them; completions come back through a
 * bottom half of the loop, in the order workers finished them.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_BLOCK_THREAD_POOL_H
#define VBLK_BLOCK_THREAD_POOL_H

#include "event/event.h"

typedef struct ThreadPool ThreadPool;
typedef struct ThreadPoolItem ThreadPoolItem;

struct ThreadPoolItem {
    int (*fn)(ThreadPoolItem *item);             /* worker thread; returns 0 or -errno */
    void (*done)(ThreadPoolItem *item, int ret); /* loop thread */
    ThreadPoolItem *next;                        /* private */
    int ret;                                     /* private */
};

/* Context: loop thread. Workers start on demand, up to @max_workers. */
ThreadPool *thread_pool_new(EventLoop *loop, unsigned max_workers);
/* Context: loop thread; no item may be pending. Joins the workers. NULL ok. */
void thread_pool_free(ThreadPool *p);
/* Context: loop thread */
void thread_pool_submit(ThreadPool *p, ThreadPoolItem *item);
/* Items submitted and not yet done. Context: loop thread */
unsigned thread_pool_pending(ThreadPool *p);
/* Move completions to @loop (NULL: detach). Context: loop thread, pool idle. */
void thread_pool_set_loop(ThreadPool *p, EventLoop *loop);

#endif /* VBLK_BLOCK_THREAD_POOL_H */
