/*
 * Throttling at the BlockBackend: two FIFO queues (reads; writes, including
 * write-zeroes and discards, as QEMU's throttle filter), one timer each.
 * A request waits if its queue is not empty (order is kept) or the buckets
 * say so; the timer releases requests from the head while the buckets
 * allow, then re-arms for the next one. Flushes are never throttled.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "backend-int.h"
#include "util/thread-check.h"

static bool throttled_op(BlockOp op, bool *is_write)
{
    *is_write = op != BLOCK_OP_READ;
    return op != BLOCK_OP_FLUSH;
}

static void schedule_queue(BlockBackend *blk, int dir)
{
    int64_t now = event_clock_ns();

    while (!g_queue_is_empty(&blk->tq[dir])) {
        int64_t wait = throttle_wait_ns(&blk->ts, dir == 1, now);
        BlkReq *req;

        if (wait > 0) {
            if (blk->ttimer[dir]) {
                event_timer_mod(blk->ttimer[dir], now + wait);
            }
            return;
        }
        req = g_queue_pop_head(&blk->tq[dir]);
        throttle_account(&blk->ts, dir == 1, req->bytes);
        blk_dispatch(req);
    }
}

static void read_timer_cb(void *opaque)
{
    schedule_queue(opaque, 0);
}

static void write_timer_cb(void *opaque)
{
    schedule_queue(opaque, 1);
}

/* Context: loop thread */
bool blk_throttle_intercept(BlkReq *req)
{
    BlockBackend *blk = req->blk;
    bool is_write;
    int dir;

    if (!blk->throttling || !throttled_op(req->op, &is_write)) {
        return true;
    }
    dir = is_write;
    if (g_queue_is_empty(&blk->tq[dir]) &&
        throttle_wait_ns(&blk->ts, is_write, event_clock_ns()) == 0) {
        throttle_account(&blk->ts, is_write, req->bytes);
        return true;
    }
    g_queue_push_tail(&blk->tq[dir], req);
    if (g_queue_get_length(&blk->tq[dir]) == 1) {
        schedule_queue(blk, dir);
    }
    return false;
}

/* Context: loop thread */
void blk_throttle_release_all(BlockBackend *blk)
{
    for (int dir = 0; dir < 2; dir++) {
        while (!g_queue_is_empty(&blk->tq[dir])) {
            BlkReq *req = g_queue_pop_head(&blk->tq[dir]);

            throttle_account(&blk->ts, dir == 1, req->bytes);
            blk_dispatch(req);
        }
        if (blk->ttimer[dir]) {
            event_timer_del(blk->ttimer[dir]);
        }
    }
}

/* Context: loop thread */
void blk_throttle_attach(BlockBackend *blk)
{
    blk->ttimer[0] = event_timer_new(blk->loop, read_timer_cb, blk);
    blk->ttimer[1] = event_timer_new(blk->loop, write_timer_cb, blk);
}

/* Context: loop thread; queues empty (drained) */
void blk_throttle_detach(BlockBackend *blk)
{
    for (int dir = 0; dir < 2; dir++) {
        if (blk->ttimer[dir]) {
            event_timer_free(blk->ttimer[dir]);
            blk->ttimer[dir] = NULL;
        }
    }
}

/* Context: main loop */
void blk_throttle_init(BlockBackend *blk)
{
    ThrottleLimits l;

    throttle_limits_init(&l);
    throttle_state_config(&blk->ts, &l, event_clock_ns());
    g_queue_init(&blk->tq[0]);
    g_queue_init(&blk->tq[1]);
    blk_throttle_attach(blk);
}

/* Context: main loop */
void blk_throttle_cleanup(BlockBackend *blk)
{
    blk_throttle_detach(blk);
}

/* Context: loop thread */
bool blk_set_io_limits(BlockBackend *blk, const ThrottleLimits *limits, GError **errp)
{
    THREAD_ASSERT_MAIN();
    if (!throttle_limits_validate(limits, errp)) {
        return false;
    }
    throttle_state_config(&blk->ts, limits, event_clock_ns());
    blk->throttling = throttle_limits_enabled(limits);
    if (!blk->throttling) {
        /* limits removed: whatever waits goes now */
        blk_throttle_release_all(blk);
        return true;
    }
    for (int dir = 0; dir < 2; dir++) {
        if (blk->ttimer[dir]) {
            event_timer_del(blk->ttimer[dir]);
        }
        schedule_queue(blk, dir);
    }
    return true;
}

/* Context: loop thread */
void blk_get_throttle_state(BlockBackend *blk, ThrottleState *ts)
{
    THREAD_ASSERT_MAIN();
    *ts = blk->ts;
}

/* Context: loop thread; the throttle queues are empty (drained) */
void blk_set_throttle_state(BlockBackend *blk, const ThrottleState *ts)
{
    THREAD_ASSERT_MAIN();
    blk->ts = *ts;
    blk->throttling = throttle_limits_enabled(&ts->limits);
}

/* Context: loop thread */
void blk_get_io_limits(BlockBackend *blk, ThrottleLimits *limits)
{
    THREAD_ASSERT_MAIN();
    *limits = blk->ts.limits;
}

/* Context: loop thread */
unsigned blk_throttled_count(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    return g_queue_get_length(&blk->tq[0]) + g_queue_get_length(&blk->tq[1]);
}
