/*
 * virtio-blk executor over a BlockBackend (x-data-plane=off): implements
 * VirtIOBlkExecOps so the request engine's READ/WRITE/FLUSH/DISCARD/
 * WRITE_ZEROES go through the block layer in the main loop.
 *
 * Completions call virtio_blk_req_complete(); the queues that got
 * completions are then handed to the device's notify hook once per batch (a
 * bottom half after the completions of one loop iteration), which publishes
 * the used ring and interrupts the guest.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_BLOCK_EXEC_H
#define VBLK_BLOCK_EXEC_H

#include "block/block.h"
#include "virtio/virtio-blk.h"

typedef struct BlkExec BlkExec;

/* Flush the used ring of @q and notify the guest if needed. Context: loop thread */
typedef void BlkExecNotifyFunc(void *opaque, VirtIOBlkQueue *q);

/*
 * @vdev: for the guest's write-cache setting (writethrough adds FUA).
 * Context: main loop.
 */
BlkExec *blk_exec_new(BlockBackend *blk, VirtIOBlk *vdev, BlkExecNotifyFunc *notify, void *opaque);
/* Context: main loop; nothing in flight (blk_drain first). NULL ok. */
void blk_exec_free(BlkExec *e);
/* The ops to pass to virtio_blk_queue_new()/set_exec() with the BlkExec as opaque. */
const VirtIOBlkExecOps *blk_exec_ops(void);
/* Requests submitted and not completed. Context: loop thread */
unsigned blk_exec_inflight(BlkExec *e);

#endif /* VBLK_BLOCK_EXEC_H */
