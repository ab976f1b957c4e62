/*
 * "null-co" and "null-aio": a disk of `size` bytes (default 1 GiB) that
 * stores nothing; reads return zeroes with read-zeroes=on and leave the
 * buffer untouched otherwise. Both complete from a bottom half (null-aio
 * as QEMU's), after `latency-ns` with a timer when set.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block-int.h"

typedef struct NullState {
    uint64_t size;
    bool read_zeroes;
    uint64_t latency_ns;
    GQueue delayed; /* BlockNodeReq*, waiting for the latency timer (FIFO deadlines) */
    GQueue deadlines;
    EventTimer *timer;
} NullState;

static bool null_open(BlockNode *bs, BlockOpts *opts, GError **errp)
{
    NullState *s = g_new0(NullState, 1);

    bs->opaque = s;
    if (!block_opts_get_size(opts, "size", 1ull << 30, &s->size, errp) ||
        !block_opts_get_bool(opts, "read-zeroes", false, &s->read_zeroes, errp) ||
        !block_opts_get_size(opts, "latency-ns", 0, &s->latency_ns, errp)) {
        g_free(s);
        bs->opaque = NULL;
        return false;
    }
    if (s->size > INT64_MAX) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "size must be at most %" PRId64, INT64_MAX);
        g_free(s);
        bs->opaque = NULL;
        return false;
    }
    g_queue_init(&s->delayed);
    g_queue_init(&s->deadlines);
    return true;
}

static void null_close(BlockNode *bs)
{
    g_free(bs->opaque);
    bs->opaque = NULL;
}

static int64_t null_getlength(BlockNode *bs)
{
    return (int64_t)((NullState *)bs->opaque)->size;
}

static bool null_truncate(BlockNode *bs, uint64_t size, GError **errp)
{
    if (size > INT64_MAX) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "size must be at most %" PRId64, INT64_MAX);
        return false;
    }
    ((NullState *)bs->opaque)->size = size;
    return true;
}

static void null_timer_cb(void *opaque)
{
    BlockNode *bs = opaque;
    NullState *s = bs->opaque;
    int64_t now = event_clock_ns();

    while (!g_queue_is_empty(&s->deadlines) &&
           GPOINTER_TO_SIZE(g_queue_peek_head(&s->deadlines)) <= (gsize)now) {
        BlockNodeReq *r = g_queue_pop_head(&s->delayed);

        g_queue_pop_head(&s->deadlines);
        r->cb(r, 0);
    }
    if (!g_queue_is_empty(&s->deadlines)) {
        event_timer_mod(s->timer, (int64_t)GPOINTER_TO_SIZE(g_queue_peek_head(&s->deadlines)));
    }
}

static void null_submit(BlockNode *bs, BlockNodeReq *req)
{
    NullState *s = bs->opaque;

    if (req->op == BLOCK_OP_READ && s->read_zeroes) {
        for (int i = 0; i < req->niov; i++) {
            memset(req->iov[i].iov_base, 0, req->iov[i].iov_len);
        }
    }
    switch (req->op) {
    case BLOCK_OP_READ:
        bs->stats.reads++;
        break;
    case BLOCK_OP_FLUSH:
        bs->stats.flushes++;
        break;
    default:
        bs->stats.writes++;
        break;
    }
    if (s->latency_ns && s->timer) {
        gsize deadline = (gsize)(event_clock_ns() + (int64_t)s->latency_ns);

        g_queue_push_tail(&s->delayed, req);
        g_queue_push_tail(&s->deadlines, GSIZE_TO_POINTER(deadline));
        if (!event_timer_pending(s->timer)) {
            event_timer_mod(s->timer, (int64_t)deadline);
        }
        return;
    }
    bdrv_complete_later(bs, req, 0);
}

static void null_attach(BlockNode *bs)
{
    NullState *s = bs->opaque;

    s->timer = event_timer_new(bs->loop, null_timer_cb, bs);
}

static void null_detach(BlockNode *bs)
{
    NullState *s = bs->opaque;

    if (s && s->timer) {
        event_timer_free(s->timer);
        s->timer = NULL;
    }
}

static unsigned null_inflight(BlockNode *bs)
{
    return g_queue_get_length(&((NullState *)bs->opaque)->delayed);
}

/* Context: loop thread */
bool blk_null_node_host_info(BlockNode *bs, BlockHostInfo *info)
{
    if (bs->drv != &bdrv_null_co && bs->drv != &bdrv_null_aio) {
        return false;
    }
    info->null = true;
    info->null_read_zeroes = ((NullState *)bs->opaque)->read_zeroes;
    return true;
}

const BlockDriver bdrv_null_co = {
    .name = "null-co",
    .open = null_open,
    .close = null_close,
    .submit = null_submit,
    .getlength = null_getlength,
    .truncate = null_truncate,
    .attach_loop = null_attach,
    .detach_loop = null_detach,
    .inflight = null_inflight,
};

const BlockDriver bdrv_null_aio = {
    .name = "null-aio",
    .open = null_open,
    .close = null_close,
    .submit = null_submit,
    .getlength = null_getlength,
    .truncate = null_truncate,
    .attach_loop = null_attach,
    .detach_loop = null_detach,
    .inflight = null_inflight,
};
