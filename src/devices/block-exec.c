/*
 * virtio-blk executor adapter: maps engine requests onto blk_aio_*().
 * No allocation per request: the VirtIOBlkReq is the callback's opaque and
 * its exec_opaque points back to the BlkExec.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block/block.h"
#include "devices/block-exec.h"

struct BlkExec {
    BlockBackend *blk;
    VirtIOBlk *vdev;
    BlkExecNotifyFunc *notify;
    void *opaque;
    EventBH *notify_bh;
    VirtIOBlkQueue *touched[VIRTIO_BLK_MAX_QUEUES];
    unsigned ntouched;
    unsigned inflight;
};

static void exec_notify_bh(void *opaque)
{
    BlkExec *e = opaque;
    unsigned n = e->ntouched;

    /* the hook may complete more requests (inline): take the list first */
    e->ntouched = 0;
    for (unsigned i = 0; i < n; i++) {
        if (e->notify) {
            e->notify(e->opaque, e->touched[i]);
        }
    }
}

static void exec_complete(void *opaque, int ret)
{
    VirtIOBlkReq *req = opaque;
    BlkExec *e = req->exec_opaque;
    VirtIOBlkQueue *q = req->queue;
    unsigned i;

    virtio_blk_req_complete(req, ret);
    e->inflight--;
    for (i = 0; i < e->ntouched && e->touched[i] != q; i++) {
    }
    if (i == e->ntouched && e->ntouched < VIRTIO_BLK_MAX_QUEUES) {
        e->touched[e->ntouched++] = q;
    }
    event_bh_schedule(e->notify_bh);
}

static void exec_submit(void *opaque, VirtIOBlkReq *req)
{
    BlkExec *e = opaque;
    unsigned fua = virtio_blk_get_writeback(e->vdev) ? 0 : BLK_REQ_FUA;

    req->exec_opaque = e;
    e->inflight++;
    switch (req->op) {
    case VIRTIO_BLK_OP_READ:
        blk_aio_preadv(e->blk, req->offset, req->iov, (int)req->niov, req->len, 0, exec_complete,
                       req);
        break;
    case VIRTIO_BLK_OP_WRITE:
        blk_aio_pwritev(e->blk, req->offset, req->iov, (int)req->niov, req->len, fua, exec_complete,
                        req);
        break;
    case VIRTIO_BLK_OP_FLUSH:
        blk_aio_flush(e->blk, exec_complete, req);
        break;
    case VIRTIO_BLK_OP_DISCARD:
        blk_aio_pdiscard(e->blk, req->offset, req->len, exec_complete, req);
        break;
    case VIRTIO_BLK_OP_WRITE_ZEROES:
        blk_aio_pwrite_zeroes(e->blk, req->offset, req->len,
                              fua | (req->unmap ? BLK_REQ_MAY_UNMAP : 0), exec_complete, req);
        break;
    default:
        e->inflight--;
        virtio_blk_req_complete(req, -ENOTSUP);
        break;
    }
}

/* Guest requests the engine refused (range, alignment): QEMU's block_acct_invalid(). */
static void exec_invalid(void *opaque, VirtIOBlkOp op)
{
    BlkExec *e = opaque;

    blk_account_invalid(e->blk, op == VIRTIO_BLK_OP_READ      ? BLOCK_ACCT_READ
                                : op == VIRTIO_BLK_OP_DISCARD ? BLOCK_ACCT_UNMAP
                                                              : BLOCK_ACCT_WRITE);
}

static const VirtIOBlkExecOps exec_ops = {
    .submit = exec_submit,
    .batch_end = NULL,
    .invalid = exec_invalid,
};

/* Context: main loop */
const VirtIOBlkExecOps *blk_exec_ops(void)
{
    return &exec_ops;
}

/* Context: main loop */
BlkExec *blk_exec_new(BlockBackend *blk, VirtIOBlk *vdev, BlkExecNotifyFunc *notify, void *opaque)
{
    BlkExec *e = g_new0(BlkExec, 1);

    e->blk = blk;
    e->vdev = vdev;
    e->notify = notify;
    e->opaque = opaque;
    e->notify_bh = event_bh_new(blk_get_event_loop(blk), exec_notify_bh, e);
    return e;
}

/* Context: main loop */
void blk_exec_free(BlkExec *e)
{
    if (e) {
        event_bh_delete(e->notify_bh);
        g_free(e);
    }
}

/* Context: loop thread */
unsigned blk_exec_inflight(BlkExec *e)
{
    return e->inflight;
}
