/*
 * The request glue of a block driver whose I/O goes through an IOQ (the file
 * node with aio=native / io_uring, nbd, rbd): node statistics, the
 * BlockNodeReq -> IOQReq mapping, one ioq_submit() per loop iteration from a
 * bottom half, and the IOQ's fd watched by the node's loop.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_BLOCK_IOQ_DRV_H
#define VBLK_BLOCK_IOQ_DRV_H

#include "block-int.h"
#include "ioq/ioq.h"

typedef struct IoqDrv {
    BlockNode *bs;
    IOQ *ioq;
    const char *what;   /* names the node in error messages (borrowed) */
    EventBH *submit_bh; /* batches ioq_submit() per loop iteration */
    GQueue pending;     /* requests waiting for submit_bh */
    bool fd_watched;
    unsigned inflight; /* accepted by ioq_drv_submit(), callback not yet run */
} IoqDrv;

/*
 * The checks every driver makes first: an unknown op fails with -EINVAL and
 * a flush under cache.no-flush succeeds at once (both completed later, and
 * true is returned); otherwise the request is counted in the node's
 * statistics (a writethrough write's flush too) and false is returned.
 * Context: loop thread
 */
bool bdrv_req_prologue(BlockNode *bs, BlockNodeReq *req);

/* Context: main loop. @ioq stays the caller's. */
void ioq_drv_init(IoqDrv *d, BlockNode *bs, IOQ *ioq, const char *what);

/*
 * The tail of an IOQ-backed driver's open (nbd, rbd), @d being the first
 * member of the driver's state: the IOQ from @cfg into *@ioq (its error
 * becomes EIO), the remote's info into *@info, then a read-only remote under
 * a writable node (EACCES) and a size above INT64_MAX (EINVAL) refused, the
 * remote named in those messages as "The @kind @name". On success the node's
 * request alignment is the remote's block size, @d is initialised over the
 * IOQ (@what names the node in its errors) and bs->opaque is the state.
 * On failure *@ioq may be set: the caller frees its state as usual.
 * Context: main loop
 */
bool ioq_drv_open_finish(IoqDrv *d, BlockNode *bs, const IOQConfig *cfg, IOQ **ioq,
                         IOQRemoteInfo *info, const char *kind, const char *name,
                         const char *what, GError **errp);
/* Queue @req (after bdrv_req_prologue()) for the next submit. Context: loop thread */
void ioq_drv_submit(IoqDrv *d, BlockNodeReq *req);
/* Context: main loop (bs->loop is set). */
void ioq_drv_attach(IoqDrv *d);
/* Context: main loop; drained. Safe if never attached. */
void ioq_drv_detach(IoqDrv *d);

/*
 * BlockDriver callbacks for a driver whose state (bs->opaque) starts with
 * its IoqDrv (nbd, rbd): submit after bdrv_req_prologue(), attach, detach
 * (safe before open finished), inflight.
 */
void ioq_drv_bdrv_submit(BlockNode *bs, BlockNodeReq *req);
void ioq_drv_bdrv_attach(BlockNode *bs);
void ioq_drv_bdrv_detach(BlockNode *bs);
unsigned ioq_drv_bdrv_inflight(BlockNode *bs);

#endif /* VBLK_BLOCK_IOQ_DRV_H */
