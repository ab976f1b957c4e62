/*
 * Generic node I/O: the rules every node gets before its driver sees a
 * request (after QEMU's bdrv_co_preadv/pwritev padding):
 *
 *  - discard=ignore turns discards into successful no-ops; discards shrink
 *    to the aligned part (they are advisory);
 *  - requests whose offset or length is not a multiple of the node's request
 *    alignment are widened to aligned bounds: reads go through an aligned
 *    bounce buffer, writes become read-modify-write of the head and tail
 *    blocks; misaligned write-zeroes become RMW writes of zeroes;
 *  - iovecs whose base or length breaks the O_DIRECT rules are copied
 *    through a buffer aligned to opt_mem_align (qemu_blockalign);
 *  - an RMW request is "serialising": it waits for overlapping in-flight
 *    requests, and later overlapping requests wait for it, so two sub-block
 *    writes into the same block cannot lose each other's bytes.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <stdlib.h>

#include "block-int.h"

/* Largest misaligned write-zeroes turned into a write of a zero buffer. */
#define BDRV_MAX_ZERO_BOUNCE (16u << 20)

typedef struct BdrvTracked {
    BlockNode *bs;
    BlockNodeReq *orig;
    BlockNodeReq dreq;     /* what the driver gets */
    BlockNodeReq head_req; /* RMW reads */
    BlockNodeReq tail_req;
    struct iovec biov, hiov, tiov;
    uint64_t start, end; /* aligned range covered */
    uint8_t *buf;        /* bounce buffer for [start, end), or NULL */
    int rmw_pending;
    int rmw_ret;
    bool serialising;
    bool tracked; /* in bs->tracked */
    bool zeroes;  /* write-zeroes done as a write of zeroes */
} BdrvTracked;

/* Context: loop thread */
bool bdrv_iov_aligned(BlockNode *bs, const struct iovec *iov, int niov)
{
    uintptr_t mmask = bs->min_mem_align - 1;
    uintptr_t lmask = bs->request_alignment - 1;

    if (!mmask && !lmask) {
        return true;
    }
    for (int i = 0; i < niov; i++) {
        if (((uintptr_t)iov[i].iov_base & mmask) || (iov[i].iov_len & lmask)) {
            return false;
        }
    }
    return true;
}

/* Context: any thread */
void *bdrv_blockalign(BlockNode *bs, size_t size)
{
    void *p = NULL;
    size_t align = MAX(bs->opt_mem_align, sizeof(void *));

    if (posix_memalign(&p, align, size ? size : align) != 0) {
        return NULL;
    }
    return p;
}

/* ---- serialisation ---- */

static bool ranges_conflict(const BdrvTracked *a, const BdrvTracked *b)
{
    if (!a->serialising && !b->serialising) {
        return false;
    }
    return a->start < b->end && b->start < a->end;
}

/* Whether @t must wait: a conflicting request is in flight or queued before it. */
static bool must_wait(BlockNode *bs, BdrvTracked *t)
{
    for (GList *l = bs->tracked.head; l; l = l->next) {
        if (ranges_conflict(l->data, t)) {
            return true;
        }
    }
    for (GList *l = bs->waiting.head; l && l->data != t; l = l->next) {
        BdrvTracked *w = l->data;

        /* any overlap with an earlier waiter keeps submission order */
        if (w->start < t->end && t->start < w->end) {
            return true;
        }
    }
    return false;
}

static void tracked_start(BdrvTracked *t);

static void wake_waiters(BlockNode *bs)
{
    GList *l = bs->waiting.head;

    while (l) {
        GList *next = l->next;
        BdrvTracked *w = l->data;

        if (!must_wait(bs, w)) {
            g_queue_delete_link(&bs->waiting, l);
            tracked_start(w);
        }
        l = next;
    }
}

/* ---- completion ---- */

static void tracked_finish(BdrvTracked *t, int ret)
{
    BlockNode *bs = t->bs;
    BlockNodeReq *orig = t->orig;

    if (t->tracked) {
        g_queue_remove(&bs->tracked, t);
    }
    free(t->buf);
    g_free(t);
    bs->inflight--;
    wake_waiters(bs);
    orig->cb(orig, ret);
}

static void plain_done(BlockNodeReq *r, int ret)
{
    tracked_finish(r->opaque, ret);
}

static void bounce_read_done(BlockNodeReq *r, int ret)
{
    BdrvTracked *t = r->opaque;

    if (ret == 0) {
        iov_from_buf(t->orig->iov, t->orig->niov, 0, t->buf + (t->orig->offset - t->start),
                     t->orig->bytes);
    }
    tracked_finish(t, ret);
}

static void submit_bounced_write(BdrvTracked *t)
{
    BlockNode *bs = t->bs;
    size_t skip = t->orig->offset - t->start;

    if (t->zeroes) {
        memset(t->buf + skip, 0, t->orig->bytes);
    } else {
        iov_to_buf(t->orig->iov, t->orig->niov, 0, t->buf + skip, t->orig->bytes);
    }
    t->biov = (struct iovec){t->buf, t->end - t->start};
    t->dreq = (BlockNodeReq){
        .op = BLOCK_OP_WRITE,
        .offset = t->start,
        .bytes = t->end - t->start,
        .iov = &t->biov,
        .niov = 1,
        .flags = t->orig->flags & BLK_REQ_FUA,
        .cb = plain_done,
        .opaque = t,
    };
    bs->drv->submit(bs, &t->dreq);
}

static void rmw_read_done(BlockNodeReq *r, int ret)
{
    BdrvTracked *t = r->opaque;

    if (ret < 0 && t->rmw_ret == 0) {
        t->rmw_ret = ret;
    }
    if (--t->rmw_pending > 0) {
        return;
    }
    if (t->rmw_ret < 0) {
        tracked_finish(t, t->rmw_ret);
        return;
    }
    submit_bounced_write(t);
}

/* ---- start ---- */

static void rmw_read(BdrvTracked *t, BlockNodeReq *r, struct iovec *iov, uint64_t off)
{
    uint32_t align = t->bs->request_alignment;

    *iov = (struct iovec){t->buf + (off - t->start), align};
    *r = (BlockNodeReq){
        .op = BLOCK_OP_READ,
        .offset = off,
        .bytes = align,
        .iov = iov,
        .niov = 1,
        .cb = rmw_read_done,
        .opaque = t,
    };
}

static void start_padded_write(BdrvTracked *t)
{
    BlockNode *bs = t->bs;
    uint32_t align = bs->request_alignment;
    uint64_t orig_end = t->orig->offset + t->orig->bytes;
    bool head = t->orig->offset != t->start;
    bool tail = orig_end != t->end && !(head && t->end - t->start == align);

    if (!head && !tail) {
        submit_bounced_write(t);
        return;
    }
    bs->stats.rmw++;
    /* count both reads before issuing either: completions are deferred anyway */
    t->rmw_pending = head + tail;
    if (head) {
        rmw_read(t, &t->head_req, &t->hiov, t->start);
    }
    if (tail) {
        rmw_read(t, &t->tail_req, &t->tiov, t->end - align);
    }
    if (head) {
        bs->drv->submit(bs, &t->head_req);
    }
    if (tail) {
        bs->drv->submit(bs, &t->tail_req);
    }
}

static void tracked_start(BdrvTracked *t)
{
    BlockNode *bs = t->bs;
    BlockNodeReq *o = t->orig;

    g_queue_push_tail(&bs->tracked, t);
    t->tracked = true;
    if (!t->buf) {
        t->dreq = *o;
        t->dreq.cb = plain_done;
        t->dreq.opaque = t;
        if (o->op == BLOCK_OP_DISCARD) {
            /* the driver sees the aligned part only */
            t->dreq.offset = t->start;
            t->dreq.bytes = t->end - t->start;
        }
        bs->drv->submit(bs, &t->dreq);
        return;
    }
    bs->stats.bounced++;
    if (o->op == BLOCK_OP_READ) {
        t->biov = (struct iovec){t->buf, t->end - t->start};
        t->dreq = (BlockNodeReq){
            .op = BLOCK_OP_READ,
            .offset = t->start,
            .bytes = t->end - t->start,
            .iov = &t->biov,
            .niov = 1,
            .cb = bounce_read_done,
            .opaque = t,
        };
        bs->drv->submit(bs, &t->dreq);
    } else {
        start_padded_write(t);
    }
}

/* Decide padding/bounce for a data request; false if it failed (already completed). */
static bool prepare_data(BlockNode *bs, BdrvTracked *t)
{
    BlockNodeReq *o = t->orig;
    uint64_t mask = bs->request_alignment - 1;
    bool pad = ((o->offset | o->bytes) & mask) != 0;

    t->start = o->offset & ~mask;
    t->end = (o->offset + o->bytes + mask) & ~mask;
    if (o->op == BLOCK_OP_WRITE_ZEROES) {
        if (!pad) {
            return true;
        }
        if (o->bytes > BDRV_MAX_ZERO_BOUNCE) {
            bdrv_complete_later(bs, &t->dreq, -ENOTSUP);
            return false;
        }
        t->zeroes = true;
    } else if (!pad && bdrv_iov_aligned(bs, o->iov, o->niov)) {
        return true;
    }
    t->serialising = pad && o->op != BLOCK_OP_READ;
    t->buf = bdrv_blockalign(bs, t->end - t->start);
    if (!t->buf) {
        bdrv_complete_later(bs, &t->dreq, -ENOMEM);
        return false;
    }
    return true;
}

/* Context: loop thread */
void bdrv_submit(BlockNode *bs, BlockNodeReq *req)
{
    BdrvTracked *t = g_new0(BdrvTracked, 1);
    uint64_t mask = bs->request_alignment - 1;

    t->bs = bs;
    t->orig = req;
    t->dreq.cb = plain_done;
    t->dreq.opaque = t;
    bs->inflight++;

    switch (req->op) {
    case BLOCK_OP_FLUSH:
        t->dreq = *req;
        t->dreq.cb = plain_done;
        t->dreq.opaque = t;
        bs->drv->submit(bs, &t->dreq);
        return;
    case BLOCK_OP_DISCARD:
        t->start = (req->offset + mask) & ~mask;
        t->end = (req->offset + req->bytes) & ~mask;
        if (!bs->discard_unmap || t->end <= t->start) {
            bdrv_complete_later(bs, &t->dreq, 0);
            return;
        }
        break;
    case BLOCK_OP_READ:
    case BLOCK_OP_WRITE:
    case BLOCK_OP_WRITE_ZEROES:
        if (!prepare_data(bs, t)) {
            return;
        }
        break;
    default:
        bdrv_complete_later(bs, &t->dreq, -EINVAL);
        return;
    }
    if (bs->request_alignment > 1 && must_wait(bs, t)) {
        bs->stats.serialised_waits++;
        g_queue_push_tail(&bs->waiting, t);
        return;
    }
    tracked_start(t);
}
