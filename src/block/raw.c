/*
 * The "raw" format node: passes requests to its "file" child, shifted by the
 * optional `offset` and bounded by the optional `size` (a window into the
 * child, as QEMU's raw-format).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block-int.h"

typedef struct RawState {
    uint64_t offset;
    uint64_t size;
    bool has_size;
} RawState;

typedef struct RawReq {
    BlockNodeReq child_req;
    BlockNodeReq *parent;
} RawReq;

static bool raw_open(BlockNode *bs, BlockOpts *opts, GError **errp)
{
    RawState *s = g_new0(RawState, 1);
    int64_t len;

    bs->opaque = s;
    s->has_size = block_opts_get(opts, "size") != NULL;
    if (!block_opts_get_size(opts, "offset", 0, &s->offset, errp) ||
        !block_opts_get_size(opts, "size", 0, &s->size, errp)) {
        goto fail;
    }
    bs->child = bdrv_open_child(bs, opts, "file", NULL, errp);
    if (!bs->child) {
        goto fail;
    }
    bdrv_inherit_limits(bs);
    len = bdrv_getlength(bs->child);
    if (len < 0) {
        g_set_error(errp, BLOCK_ERROR, (int)-len, "Could not get the size of the file: %s",
                    g_strerror((int)-len));
        goto fail;
    }
    if (s->offset > (uint64_t)len) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "The offset has to be smaller than the file size");
        goto fail;
    }
    if (s->has_size && s->size > (uint64_t)len - s->offset) {
        g_set_error(errp, BLOCK_ERROR, EINVAL,
                    "The sum of offset (%" PRIu64 ") and size (%" PRIu64 ") has to be smaller "
                    "or equal to the  actual size of the containing file (%" PRId64 ")",
                    s->offset, s->size, len);
        goto fail;
    }
    return true;

fail:
    g_free(s);
    bs->opaque = NULL;
    return false;
}

static void raw_close(BlockNode *bs)
{
    g_free(bs->opaque);
    bs->opaque = NULL;
}

static int64_t raw_getlength(BlockNode *bs)
{
    RawState *s = bs->opaque;
    int64_t len;

    if (s->has_size) {
        return (int64_t)s->size;
    }
    len = bdrv_getlength(bs->child);
    if (len < 0) {
        return len;
    }
    return (uint64_t)len >= s->offset ? len - (int64_t)s->offset : 0;
}

static void raw_child_done(BlockNodeReq *r, int ret)
{
    RawReq *rr = container_of(r, RawReq, child_req);
    BlockNodeReq *parent = rr->parent;

    g_free(rr);
    parent->cb(parent, ret);
}

static void raw_submit(BlockNode *bs, BlockNodeReq *req)
{
    RawState *s = bs->opaque;
    RawReq *rr = g_new0(RawReq, 1);

    rr->parent = req;
    rr->child_req = *req;
    rr->child_req.cb = raw_child_done;
    rr->child_req.opaque = NULL;
    if (req->op != BLOCK_OP_FLUSH) {
        int64_t len = raw_getlength(bs);

        /* the backend checked the range already; stay inside the window anyway */
        if (len < 0 || req->offset > (uint64_t)len || req->bytes > (uint64_t)len - req->offset) {
            g_free(rr);
            bdrv_complete_later(bs, req, len < 0 ? (int)len : -EIO);
            return;
        }
        rr->child_req.offset += s->offset;
    }
    bdrv_submit(bs->child, &rr->child_req);
}

static bool raw_truncate(BlockNode *bs, uint64_t size, GError **errp)
{
    RawState *s = bs->opaque;

    if (s->has_size) {
        g_set_error(errp, BLOCK_ERROR, ENOTSUP, "Cannot resize fixed-size raw disks");
        return false;
    }
    if (size > UINT64_MAX - s->offset) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Resize of %" PRIu64 " bytes is too large", size);
        return false;
    }
    return bs->child->drv->truncate(bs->child, size + s->offset, errp);
}

/* Context: loop thread */
bool blk_raw_node_is_identity(BlockNode *bs)
{
    const RawState *s = bs->opaque;

    return bs->drv == &bdrv_raw && s->offset == 0 && !s->has_size;
}

const BlockDriver bdrv_raw = {
    .name = "raw",
    .open = raw_open,
    .close = raw_close,
    .submit = raw_submit,
    .getlength = raw_getlength,
    .truncate = raw_truncate,
};
