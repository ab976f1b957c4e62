/*
 * BlockBackend: the drive as the device sees it. Checks requests (range,
 * read-only), throttles them, accounts them, adds FUA when the write cache
 * is off (writethrough), applies the error policy on failure, and completes
 * through the caller's callback in the loop thread.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "backend-int.h"
#include "util/thread-check.h"

/* Context: main loop */
BlockBackend *blk_new_with_root(BlockNode *root, EventLoop *loop, bool wce)
{
    BlockBackend *blk = g_new0(BlockBackend, 1);

    blk->root = root;
    blk->loop = loop;
    blk->wce = wce;
    blk->device = g_strdup("");
    blk->on_read_error = BLOCK_ERR_REPORT;
    blk->on_write_error = BLOCK_ERR_ENOSPC;
    g_queue_init(&blk->parked);
    blk_acct_init(blk);
    blk_throttle_init(blk);
    return blk;
}

/* Context: main loop */
void blk_unref(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    if (!blk) {
        return;
    }
    /* The device is going away: parked requests fail, none is parked meanwhile. */
    blk_set_quiescing(blk, true);
    blk_drain(blk);
    blk_throttle_cleanup(blk);
    bdrv_close(blk->root);
    g_free(blk->device);
    g_free(blk);
}

/* ---- completion ---- */

static void blk_req_finish(BlkReq *req, int ret)
{
    BlockBackend *blk = req->blk;
    bool resumed = req->resumed;

    blk->in_flight--;
    req->cb(req->opaque, ret);
    g_free(req);
    if (resumed) {
        blk_resume_next(blk);
    }
}

static void blk_req_node_done(BlockNodeReq *nreq, int ret)
{
    BlkReq *req = nreq->opaque;

    if (req->invalid) {
        blk_req_finish(req, ret);
        return;
    }
    if (ret < 0 && blk_handle_error(req, &ret)) {
        return; /* parked; blk_handle_error dropped it from in_flight */
    }
    blk_acct_done(req->blk, req, ret < 0);
    blk_req_finish(req, ret);
}

/* ---- submission ---- */

/* Context: loop thread */
void blk_dispatch(BlkReq *req)
{
    BlockBackend *blk = req->blk;
    unsigned flags = req->flags;

    if ((req->op == BLOCK_OP_WRITE || req->op == BLOCK_OP_WRITE_ZEROES) && !blk->wce) {
        flags |= BLK_REQ_FUA;
    }
    req->start_ns = event_clock_ns();
    req->nreq = (BlockNodeReq){
        .op = req->op,
        .offset = req->offset,
        .bytes = req->bytes,
        .iov = req->iov,
        .niov = req->niov,
        .flags = flags,
        .cb = blk_req_node_done,
        .opaque = req,
    };
    bdrv_submit(blk->root, &req->nreq);
}

static int blk_check_request(BlockBackend *blk, BlkReq *req)
{
    int64_t len;

    if (req->op != BLOCK_OP_READ && req->op != BLOCK_OP_FLUSH && blk->root->read_only) {
        return -EPERM;
    }
    if (req->op == BLOCK_OP_FLUSH) {
        return 0;
    }
    if ((req->op == BLOCK_OP_READ || req->op == BLOCK_OP_WRITE) &&
        (req->niov < 0 || (req->niov && !req->iov) ||
         iov_size(req->iov, req->niov) != req->bytes)) {
        return -EINVAL;
    }
    len = bdrv_getlength(blk->root);
    if (len < 0) {
        return (int)len;
    }
    if (req->offset > (uint64_t)len || req->bytes > (uint64_t)len - req->offset) {
        return -EIO;
    }
    return 0;
}

static void blk_submit(BlockBackend *blk, BlockOp op, uint64_t offset, struct iovec *iov, int niov,
                       uint64_t bytes, unsigned flags, BlockCompletionFunc *cb, void *opaque)
{
    BlkReq *req = g_new0(BlkReq, 1);
    int ret;

    *req = (BlkReq){
        .blk = blk,
        .op = op,
        .offset = offset,
        .bytes = bytes,
        .iov = iov,
        .niov = niov,
        .flags = flags,
        .cb = cb,
        .opaque = opaque,
        .seq = blk->next_seq++,
    };
    blk->in_flight++;
    ret = blk_check_request(blk, req);
    if (ret < 0) {
        req->invalid = true;
        blk_acct_invalid(blk, op);
        req->nreq.cb = blk_req_node_done;
        req->nreq.opaque = req;
        bdrv_complete_later(blk->root, &req->nreq, ret);
        return;
    }
    if (blk_throttle_intercept(req)) {
        blk_dispatch(req);
    }
}

/* Context: loop thread */
void blk_aio_preadv(BlockBackend *blk, uint64_t offset, struct iovec *iov, int niov, uint64_t bytes,
                    unsigned flags, BlockCompletionFunc *cb, void *opaque)
{
    THREAD_ASSERT_MAIN();
    blk_submit(blk, BLOCK_OP_READ, offset, iov, niov, bytes, flags, cb, opaque);
}

/* Context: loop thread */
void blk_aio_pwritev(BlockBackend *blk, uint64_t offset, struct iovec *iov, int niov,
                     uint64_t bytes, unsigned flags, BlockCompletionFunc *cb, void *opaque)
{
    THREAD_ASSERT_MAIN();
    blk_submit(blk, BLOCK_OP_WRITE, offset, iov, niov, bytes, flags, cb, opaque);
}

/* Context: loop thread */
void blk_aio_flush(BlockBackend *blk, BlockCompletionFunc *cb, void *opaque)
{
    THREAD_ASSERT_MAIN();
    blk_submit(blk, BLOCK_OP_FLUSH, 0, NULL, 0, 0, 0, cb, opaque);
}

/* Context: loop thread */
void blk_aio_pdiscard(BlockBackend *blk, uint64_t offset, uint64_t bytes, BlockCompletionFunc *cb,
                      void *opaque)
{
    THREAD_ASSERT_MAIN();
    blk_submit(blk, BLOCK_OP_DISCARD, offset, NULL, 0, bytes, 0, cb, opaque);
}

/* Context: loop thread */
void blk_aio_pwrite_zeroes(BlockBackend *blk, uint64_t offset, uint64_t bytes, unsigned flags,
                           BlockCompletionFunc *cb, void *opaque)
{
    THREAD_ASSERT_MAIN();
    blk_submit(blk, BLOCK_OP_WRITE_ZEROES, offset, NULL, 0, bytes,
               flags & (BLK_REQ_FUA | BLK_REQ_MAY_UNMAP), cb, opaque);
}

/* ---- drain, size, loop ---- */

/* Context: loop thread */
void blk_drain(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    while (blk->in_flight > 0) {
        blk_throttle_release_all(blk);
        event_loop_run_once(blk->loop, true);
    }
}

/* Context: loop thread */
unsigned blk_in_flight(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    return blk->in_flight;
}

/* Context: loop thread */
int64_t blk_getlength(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    return bdrv_getlength(blk->root);
}

/* Context: loop thread */
bool blk_truncate(BlockBackend *blk, int64_t size, GError **errp)
{
    THREAD_ASSERT_MAIN();
    if (size < 0 || size % 512) {
        g_set_error(errp, BLOCK_ERROR, EINVAL,
                    "Parameter 'size' expects a non-negative multiple of 512");
        return false;
    }
    if (blk->root->read_only) {
        g_set_error(errp, BLOCK_ERROR, EACCES, "Cannot resize a read-only device");
        return false;
    }
    if (!blk->root->drv->truncate) {
        g_set_error(errp, BLOCK_ERROR, ENOTSUP, "Image format driver does not support resize");
        return false;
    }
    blk_drain(blk);
    return blk->root->drv->truncate(blk->root, (uint64_t)size, errp);
}

/* Context: loop thread */
void blk_set_event_loop(BlockBackend *blk, EventLoop *loop)
{
    THREAD_ASSERT_MAIN();
    if (loop == blk->loop) {
        return;
    }
    blk_drain(blk);
    blk_throttle_detach(blk);
    bdrv_detach_loop(blk->root);
    blk->loop = loop;
    bdrv_attach_loop(blk->root, loop);
    blk_throttle_attach(blk);
}

/* Context: any thread */
EventLoop *blk_get_event_loop(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    return blk->loop;
}

/* ---- properties ---- */

/* Context: loop thread */
bool blk_is_read_only(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    return blk->root->read_only;
}

/* Context: loop thread */
bool blk_enable_write_cache(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    return blk->wce;
}

/* Context: loop thread */
void blk_set_enable_write_cache(BlockBackend *blk, bool wce)
{
    THREAD_ASSERT_MAIN();
    blk->wce = wce;
}

/* Context: loop thread */
uint32_t blk_get_request_alignment(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    return blk->root->request_alignment;
}

/* Context: loop thread */
uint32_t blk_get_opt_mem_alignment(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    return blk->root->opt_mem_align;
}

/* Context: loop thread */
const char *blk_root_node_name(BlockBackend *blk)
{
    return blk->root->node_name;
}

/* Context: loop thread */
const char *blk_root_driver_name(BlockBackend *blk)
{
    return blk->root->drv->name;
}

/* Context: loop thread */
const char *blk_get_filename(BlockBackend *blk)
{
    for (BlockNode *bs = blk->root; bs; bs = bs->child) {
        const char *fn = blk_file_node_filename(bs) ?: blk_nbd_node_filename(bs)
                                                 ?: blk_rbd_node_filename(bs, bs != blk->root);

        if (fn) {
            return fn;
        }
    }
    return NULL;
}

/* Context: loop thread */
void blk_get_host_info(BlockBackend *blk, BlockHostInfo *info)
{
    THREAD_ASSERT_MAIN();
    *info = (BlockHostInfo){.read_only = blk->root->read_only};
    for (BlockNode *bs = blk->root; bs; bs = bs->child) {
        if (blk_file_node_host_info(bs, info) || blk_null_node_host_info(bs, info) ||
            blk_nbd_node_host_info(bs, info) || blk_rbd_node_host_info(bs, info)) {
            info->no_flush = bs->no_flush;
            return;
        }
        if (bs->drv == &bdrv_blkdebug) {
            info->not_passthrough = "a blkdebug filter";
        } else if (!blk_raw_node_is_identity(bs) && !info->not_passthrough) {
            info->not_passthrough = "a raw node with offset or size";
        }
    }
    info->not_passthrough = "no file, null, nbd or rbd node";
}

/* Context: loop thread */
void blk_set_device_name(BlockBackend *blk, const char *name)
{
    THREAD_ASSERT_MAIN();
    g_free(blk->device);
    blk->device = g_strdup(name ? name : "");
}

/* Context: loop thread */
const char *blk_get_device_name(BlockBackend *blk)
{
    return blk->device;
}

/* Context: loop thread */
BlockNode *blk_find_node(BlockBackend *blk, const char *node_name)
{
    THREAD_ASSERT_MAIN();
    for (BlockNode *bs = blk->root; bs; bs = bs->child) {
        if (!strcmp(bs->node_name, node_name)) {
            return bs;
        }
    }
    return NULL;
}
