/* Private state shared by the virtio-blk engine's translation units. */
#ifndef VBLK_VIRTIO_BLK_INT_H
#define VBLK_VIRTIO_BLK_INT_H

#include "virtio/virtio-blk.h"

struct VirtIOBlk {
    VirtIOBlkConf conf;
    uint64_t host_features;
    uint64_t features;            /* negotiated */
    bool writeback;               /* atomic: config writes race with the queue threads */
    char id[VIRTIO_BLK_ID_BYTES]; /* GET_ID answer: serial, NUL padded */
};

#endif
