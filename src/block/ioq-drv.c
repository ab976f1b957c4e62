/*
 * The request glue shared by the IOQ-backed drivers (ioq-drv.h).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "ioq-drv.h"
#include "util/error-report.h"

typedef struct IoqDrvReq {
    IOQReq ioreq;
    IoqDrv *d;
    BlockNodeReq *req;
} IoqDrvReq;

static bool is_write_op(BlockOp op)
{
    return op == BLOCK_OP_WRITE || op == BLOCK_OP_WRITE_ZEROES;
}

/* Context: loop thread */
bool bdrv_req_prologue(BlockNode *bs, BlockNodeReq *req)
{
    if (req->op >= BLOCK_OP__MAX) {
        bdrv_complete_later(bs, req, -EINVAL);
        return true;
    }
    if (req->op == BLOCK_OP_FLUSH && bs->no_flush) {
        bs->stats.flushes_skipped++;
        bdrv_complete_later(bs, req, 0);
        return true;
    }
    switch (req->op) {
    case BLOCK_OP_READ:
        bs->stats.reads++;
        break;
    case BLOCK_OP_WRITE:
        bs->stats.writes++;
        break;
    case BLOCK_OP_FLUSH:
        bs->stats.flushes++;
        break;
    case BLOCK_OP_DISCARD:
        bs->stats.discards++;
        bs->stats.discard_bytes += req->bytes;
        break;
    case BLOCK_OP_WRITE_ZEROES:
        bs->stats.write_zeroes++;
        break;
    default:
        break;
    }
    if ((req->flags & BLK_REQ_FUA) && !bs->no_flush && is_write_op(req->op)) {
        bs->stats.flushes++; /* the flush that makes it stable */
    }
    return false;
}

/* A writethrough write (IOQ_REQ_FUA) arrives here once its flush is done too. */
static void ioq_drv_done(IOQReq *ior, int ret)
{
    IoqDrvReq *dr = ior->opaque;
    BlockNodeReq *r = dr->req;

    /* discard is advisory: "not supported here" is not an error */
    if (ret == -EOPNOTSUPP && ior->op == IOQ_OP_DISCARD) {
        ret = 0;
    }
    dr->d->inflight--;
    g_free(dr);
    r->cb(r, ret);
}

static const IOQOp ioq_ops[] = {
    [BLOCK_OP_READ] = IOQ_OP_READ,
    [BLOCK_OP_WRITE] = IOQ_OP_WRITE,
    [BLOCK_OP_FLUSH] = IOQ_OP_FLUSH,
    [BLOCK_OP_DISCARD] = IOQ_OP_DISCARD,
    [BLOCK_OP_WRITE_ZEROES] = IOQ_OP_WRITE_ZEROES,
};

static void enqueue_one(IoqDrv *d, IoqDrvReq *dr)
{
    BlockNodeReq *r = dr->req;
    IOQReq *ior = &dr->ioreq;
    int ret;

    ior->op = ioq_ops[r->op];
    ior->offset = r->offset;
    ior->len = r->op == BLOCK_OP_FLUSH ? 0 : r->bytes;
    ior->iov = r->iov;
    ior->niov = r->niov;
    ior->may_unmap = (r->flags & BLK_REQ_MAY_UNMAP) != 0;
    /* writethrough: the IOQ flushes after the write, before completing it */
    ior->flags =
        (r->flags & BLK_REQ_FUA) && !d->bs->no_flush && is_write_op(r->op) ? IOQ_REQ_FUA : 0;
    ior->cb = ioq_drv_done;
    ior->opaque = dr;
    ret = ioq_enqueue(d->ioq, ior);
    if (ret < 0) {
        d->inflight--;
        g_free(dr);
        bdrv_complete_later(d->bs, r, ret);
    }
}

/*
 * Requests are handed to the IOQ only from this BH, never from inside
 * ioq_process_completions(): a completion callback that issues a new request
 * (resubmission, RMW, a guest-like workload on a fast device) would otherwise
 * keep the reap loop busy forever and starve the rest of the main loop.
 */
static void submit_bh_cb(void *opaque)
{
    IoqDrv *d = opaque;
    IoqDrvReq *dr;

    while ((dr = g_queue_pop_head(&d->pending))) {
        enqueue_one(d, dr);
    }
    ioq_submit(d->ioq);
}

/* Context: main loop */
void ioq_drv_init(IoqDrv *d, BlockNode *bs, IOQ *ioq, const char *what)
{
    *d = (IoqDrv){.bs = bs, .ioq = ioq, .what = what};
    g_queue_init(&d->pending);
}

/* Context: main loop */
bool ioq_drv_open_finish(IoqDrv *d, BlockNode *bs, const IOQConfig *cfg, IOQ **ioq,
                         IOQRemoteInfo *info, const char *kind, const char *name,
                         const char *what, GError **errp)
{
    GError *err = NULL;

    *ioq = ioq_new(cfg, &err);
    if (!*ioq) {
        g_set_error(errp, BLOCK_ERROR, EIO, "%s", err->message);
        g_error_free(err);
        return false;
    }
    ioq_get_remote_info(*ioq, info);
    if (info->read_only && !bs->read_only) {
        g_set_error(errp, BLOCK_ERROR, EACCES, "The %s %s is read-only; use read-only=on", kind,
                    name);
        return false;
    }
    if (info->size > INT64_MAX) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "The %s %s has an invalid size", kind, name);
        return false;
    }
    bs->request_alignment = info->min_block;
    ioq_drv_init(d, bs, *ioq, what);
    bs->opaque = d; /* == the driver's state: @d is its first member */
    return true;
}

/* Context: loop thread */
void ioq_drv_submit(IoqDrv *d, BlockNodeReq *req)
{
    IoqDrvReq *dr = g_new0(IoqDrvReq, 1);

    dr->d = d;
    dr->req = req;
    d->inflight++;
    g_queue_push_tail(&d->pending, dr);
    event_bh_schedule(d->submit_bh);
}

static void ioq_drv_fd_read(void *opaque)
{
    IoqDrv *d = opaque;

    /* clear the fd first, then reap: a completion after this re-arms it */
    ioq_clear_fd(d->ioq);
    ioq_process_completions(d->ioq);
}

/* Context: main loop */
void ioq_drv_attach(IoqDrv *d)
{
    EventFdOps ops = {.read = ioq_drv_fd_read};
    GError *err = NULL;

    d->submit_bh = event_bh_new(d->bs->loop, submit_bh_cb, d);
    if (!event_loop_set_fd_handler(d->bs->loop, ioq_get_fd(d->ioq), &ops, d, &err)) {
        error_report_id(d->what, "cannot watch the IOQ: %s", err->message);
        g_error_free(err);
        return;
    }
    d->fd_watched = true;
}

/* Context: main loop; drained. Safe if never attached. */
void ioq_drv_detach(IoqDrv *d)
{
    if (d->fd_watched) {
        event_loop_set_fd_handler(d->bs->loop, ioq_get_fd(d->ioq), NULL, NULL, NULL);
        d->fd_watched = false;
    }
    if (d->submit_bh) {
        event_bh_delete(d->submit_bh);
        d->submit_bh = NULL;
    }
}

/* Context: loop thread */
void ioq_drv_bdrv_submit(BlockNode *bs, BlockNodeReq *req)
{
    if (!bdrv_req_prologue(bs, req)) {
        ioq_drv_submit(bs->opaque, req);
    }
}

/* Context: main loop */
void ioq_drv_bdrv_attach(BlockNode *bs)
{
    ioq_drv_attach(bs->opaque);
}

/* Context: main loop; drained. Safe if never attached. */
void ioq_drv_bdrv_detach(BlockNode *bs)
{
    if (bs->opaque) {
        ioq_drv_detach(bs->opaque);
    }
}

unsigned ioq_drv_bdrv_inflight(BlockNode *bs)
{
    return ((IoqDrv *)bs->opaque)->inflight;
}
