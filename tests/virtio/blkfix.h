/*
 * Test fixture shared by the virtio-blk test programs: a TestDrv guest, a
 * VirtIOBlk device with one queue, and an in-memory executor that really
 * stores data (so reads return what was written).
 */
#ifndef VBLK_TESTS_BLKFIX_H
#define VBLK_TESTS_BLKFIX_H

#include "virtio/virtio-blk.h"
#include "testdrv.h"

#define BLKFIX_SECTORS 8192 /* 4 MiB disk */

typedef struct BlkFix {
    TestDrv *drv;
    TestVq *tvq;
    VirtIOBlk *blk;
    VirtQueue *vq;
    VirtIOBlkQueue *q;
    uint8_t *disk; /* capacity * 512 bytes */
    uint64_t disk_size;
    bool defer; /* executor: keep requests until blkfix_complete_deferred() */
    VirtIOBlkReq *deferred[1024];
    unsigned ndeferred;
    unsigned submits, batch_ends, flushes, broken_calls;
    VirtIOBlkOp last_op;
    uint64_t last_offset, last_len;
    bool last_unmap;
} BlkFix;

typedef struct BlkFixOpts {
    const VirtIOBlkConf *conf; /* NULL: defaults, 4 MiB, queue 16 */
    unsigned num;              /* virtqueue size (default conf.queue_size) */
    uint64_t features;         /* driver wants (default: all host features) */
    unsigned nregions;         /* guest RAM regions (default 1) */
    bool adjacent;             /* regions without holes between them */
} BlkFixOpts;

void blkfix_init(BlkFix *f, const BlkFixOpts *o);
void blkfix_cleanup(BlkFix *f);
/* Run the device: handle_queue + flush; returns whether it would interrupt. */
bool blkfix_run(BlkFix *f);
/* Complete deferred requests (in order) with @ret (<0 errno, else success). */
void blkfix_complete_deferred(BlkFix *f, int ret);
/* Next used element: asserts there is one, returns its len and checks head. */
uint32_t blkfix_used_len(BlkFix *f, int head);
/* Submit (direct) + run; return used len via *len, status as return value. */
uint8_t blkfix_do(BlkFix *f, uint32_t type, uint64_t sector, void *data, uint32_t len,
                  uint32_t *used_len);
void blkfix_default_conf(VirtIOBlkConf *conf);

#endif
