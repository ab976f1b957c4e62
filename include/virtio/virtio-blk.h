/*
 * virtio-blk request engine: configuration, feature negotiation, config
 * space, and the parse/complete logic shared by the dataplane and the
 * block-layer path. The engine does no I/O: valid requests go to an
 * executor (VirtIOBlkExecOps), which calls virtio_blk_req_complete() later.
 *
 * Threads: a VirtIOBlk is created/configured on the main loop. Each
 * VirtIOBlkQueue belongs to one thread at a time (the owner of its
 * VirtQueue); handle_queue, req_complete and queue_flush run there. The
 * writeback flag may be changed by a config write on another thread and is
 * read atomically.
 */
#ifndef VBLK_VIRTIO_BLK_H
#define VBLK_VIRTIO_BLK_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include <linux/virtio_blk.h>

#include "virtio/guest-notifier.h"
#include "virtio/virtqueue.h"

#define VIRTIO_BLK_SECTOR_SIZE    512
#define VIRTIO_BLK_MAX_QUEUE_SIZE 1024
#define VIRTIO_BLK_MAX_QUEUES     64

typedef struct VirtIOBlkConf {
    uint64_t capacity;            /* in 512-byte sectors */
    uint32_t logical_block_size;  /* power of two, 512..1 MiB */
    uint32_t physical_block_size; /* power of two, >= logical */
    uint32_t size_max;            /* max bytes per segment; 0 = no limit, not offered */
    uint32_t seg_max;             /* max data segments; 0 = derive (see seg_max_adjust) */
    bool seg_max_adjust;          /* seg_max = queue_size - 2 (else 126) when seg_max == 0 */
    uint16_t num_queues;          /* 1..VIRTIO_BLK_MAX_QUEUES */
    uint16_t queue_size;          /* power of two, 2..VIRTIO_BLK_MAX_QUEUE_SIZE */
    bool readonly;                /* offer VIRTIO_BLK_F_RO, refuse writes */
    bool config_wce;              /* offer VIRTIO_BLK_F_CONFIG_WCE */
    bool writeback;               /* initial cache mode (reset value of config.wce) */
    bool discard;                 /* offer VIRTIO_BLK_F_DISCARD */
    uint32_t max_discard_sectors;
    uint32_t discard_sector_alignment; /* in sectors; 0 = logical block */
    bool write_zeroes;                 /* offer VIRTIO_BLK_F_WRITE_ZEROES */
    uint32_t max_write_zeroes_sectors;
    bool write_zeroes_may_unmap;
    bool indirect_desc;                   /* offer VIRTIO_RING_F_INDIRECT_DESC */
    bool event_idx;                       /* offer VIRTIO_RING_F_EVENT_IDX */
    char serial[VIRTIO_BLK_ID_BYTES + 1]; /* NUL-terminated, up to 20 bytes */
} VirtIOBlkConf;

/* QEMU defaults: 1 queue of 256, 512-byte blocks, writeback, everything on. */
/* Context: any thread */
void virtio_blk_conf_init(VirtIOBlkConf *conf, uint64_t capacity_sectors);

/*
 * Set a property by its QEMU name: config-wce, discard, write-zeroes,
 * num-queues, queue-size, seg-max-adjust, serial, logical_block_size,
 * physical_block_size, max-discard-sectors, max-write-zeroes-sectors,
 * indirect_desc, event_idx (plus vblk's readonly, writeback, size-max,
 * seg-max). Booleans accept on/off/true/false/yes/no/1/0.
 * Context: main loop (control path)
 */
bool virtio_blk_conf_set_property(VirtIOBlkConf *conf, const char *name, const char *value,
                                  GError **errp);

/* Check the whole configuration for consistency. Context: main loop */
bool virtio_blk_conf_validate(const VirtIOBlkConf *conf, GError **errp);

/* seg_max as offered to the guest. Context: any thread */
uint32_t virtio_blk_conf_seg_max(const VirtIOBlkConf *conf);

/* Feature bits the device offers for @conf. Context: any thread */
uint64_t virtio_blk_host_features(const VirtIOBlkConf *conf);

typedef struct VirtIOBlk VirtIOBlk;

/* Context: main loop */
VirtIOBlk *virtio_blk_new(const VirtIOBlkConf *conf, GError **errp);
/* Context: main loop; no queue may still exist */
void virtio_blk_free(VirtIOBlk *blk);
/* Context: any thread */
uint64_t virtio_blk_get_host_features(const VirtIOBlk *blk);

/*
 * Accept the driver's features. Fails unless VIRTIO_F_VERSION_1 is set and
 * the driver set no bit the device did not offer.
 * Context: main loop
 */
bool virtio_blk_set_features(VirtIOBlk *blk, uint64_t driver_features, GError **errp);
/* Negotiated features. Context: any thread (stable while queues run) */
uint64_t virtio_blk_get_features(const VirtIOBlk *blk);

/* block_resize: the new capacity in sectors (raise a config interrupt after). */
/* Context: main loop; queue threads see it atomically */
void virtio_blk_set_capacity(VirtIOBlk *blk, uint64_t sectors);

/* Device reset: forget negotiated features, restore the initial writeback. */
/* Context: main loop, no queue running */
void virtio_blk_reset(VirtIOBlk *blk);

/* Fill the little-endian config space. Context: any thread */
void virtio_blk_get_config(const VirtIOBlk *blk, struct virtio_blk_config *cfg);
/*
 * Guest write to config space at @offset. Only `writeback` is writable, and
 * only with VIRTIO_BLK_F_CONFIG_WCE negotiated; other writes are ignored.
 * Context: vCPU / main loop
 */
void virtio_blk_config_write(VirtIOBlk *blk, uint32_t offset, const void *data, uint32_t len);

/* Current cache mode: true = writeback (the guest flushes), false = the
 * executor must make each write stable before completing it. */
/* Context: any thread */
bool virtio_blk_get_writeback(const VirtIOBlk *blk);

typedef enum VirtIOBlkOp {
    VIRTIO_BLK_OP_READ,
    VIRTIO_BLK_OP_WRITE,
    VIRTIO_BLK_OP_FLUSH,
    VIRTIO_BLK_OP_DISCARD,
    VIRTIO_BLK_OP_WRITE_ZEROES,
} VirtIOBlkOp;

typedef struct VirtIOBlkQueue VirtIOBlkQueue;

/*
 * One request slot. The executor reads the public fields; the others are
 * private to the engine. A slot is stable from submit() to req_complete().
 */
typedef struct VirtIOBlkReq {
    /* public, read-only for the executor */
    VirtIOBlkOp op;
    unsigned idx;      /* slot index in [0, queue size): for parallel arrays */
    uint64_t offset;   /* byte offset on the disk */
    uint64_t len;      /* bytes: data length (READ/WRITE) or range (DISCARD/WZ) */
    struct iovec *iov; /* data iovecs (READ: guest-writable, WRITE: readable) */
    unsigned niov;
    bool unmap; /* WRITE_ZEROES with VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP */
    VirtIOBlkQueue *queue;
    /* public, owned by the executor */
    void *exec_opaque;

    /* private */
    VirtQueueElement elem;
    uint8_t *status;  /* host address of the status byte in guest RAM */
    uint32_t written; /* bytes the device writes to the guest on success */
    bool in_use;
    struct VirtIOBlkReq *next_free;
} VirtIOBlkReq;

typedef struct VirtIOBlkExecOps {
    /* Start @req; complete it later (or now) with virtio_blk_req_complete(). */
    void (*submit)(void *opaque, VirtIOBlkReq *req);
    /* End of one handle_queue pass: submit what was queued (may be NULL). */
    void (*batch_end)(void *opaque);
    /*
     * Optional, before submit(): false defers @req (throttling). The engine
     * un-pops it (it stays in the avail ring, and is parsed again next
     * time), ends the pass with guest notifications left disabled, and
     * virtio_blk_queue_pending() says false until the next handle_queue.
     * The executor must call virtio_blk_handle_queue() again later.
     */
    bool (*admit)(void *opaque, const VirtIOBlkReq *req);
    /*
     * Optional: a READ/WRITE/DISCARD/WRITE_ZEROES request failed validation
     * (range, alignment, size) and was completed with IOERR inline. For
     * QEMU's invalid_*_operations; @op is the operation it asked for.
     */
    void (*invalid)(void *opaque, VirtIOBlkOp op);
} VirtIOBlkExecOps;

/*
 * Create the engine for one queue on top of @vq (borrowed; must have
 * virtqueue_num(vq) <= conf.queue_size). Preallocates virtqueue_num(vq)
 * request slots, each with VIRTQUEUE_ELEM_IOV(num) iovecs.
 * Context: owner thread of @vq (control path)
 */
VirtIOBlkQueue *virtio_blk_queue_new(VirtIOBlk *blk, VirtQueue *vq, const VirtIOBlkExecOps *ops,
                                     void *opaque, GError **errp);
/* Context: owner thread (control path); no request may be in flight */
void virtio_blk_queue_free(VirtIOBlkQueue *q);
/* Swap the executor (e.g. dataplane <-> block layer). No request in flight. */
/* Context: owner thread */
void virtio_blk_queue_set_exec(VirtIOBlkQueue *q, const VirtIOBlkExecOps *ops, void *opaque);
/* Context: owner thread */
VirtQueue *virtio_blk_queue_get_vq(const VirtIOBlkQueue *q);
/* Requests handed to the executor and not completed yet. Context: owner thread */
unsigned virtio_blk_queue_inflight(const VirtIOBlkQueue *q);

/*
 * Process the avail ring: pop everything with guest notifications disabled,
 * complete invalid requests and GET_ID inline, submit valid I/O to the
 * executor, re-enable notifications and re-check (no lost wakeup), then call
 * batch_end once. One pass pops at most the queue size. Returns the number of
 * chains popped. Call virtio_blk_queue_flush() afterwards (inline
 * completions are pushed but not yet published).
 * Context: owner thread (hot path)
 */
unsigned virtio_blk_handle_queue(VirtIOBlkQueue *q);

/*
 * Whether chains are still waiting in the avail ring (a pass stopped at its
 * cap): the caller should call virtio_blk_handle_queue() again.
 * Context: owner thread
 */
bool virtio_blk_queue_pending(VirtIOBlkQueue *q);

/*
 * Complete @req: @ret >= 0 success, -ENOTSUP/-EOPNOTSUPP -> UNSUPP, other
 * negative errno -> IOERR. Writes the status byte, pushes the used element
 * (len = bytes written + 1) and returns the slot to the pool. Not visible to
 * the guest until virtio_blk_queue_flush().
 * Context: owner thread (hot path)
 */
void virtio_blk_req_complete(VirtIOBlkReq *req, int ret);

/*
 * Publish pushed completions; returns true if the guest should be
 * interrupted now (write its irqfd once per batch).
 * Context: owner thread (hot path)
 */
bool virtio_blk_queue_flush(VirtIOBlkQueue *q);

/*
 * Serve @q after a kick (virtio-blk-serve.c, used by every request path):
 * virtio_blk_handle_queue() pass after pass while a pass pops something and
 * chains are still waiting. Every request goes to the executor (or completes
 * inline). Returns the chains popped; *@passes (if not NULL) the passes that
 * popped at least one. Follow with virtio_blk_queue_notify().
 * Context: owner thread (hot path)
 */
unsigned virtio_blk_queue_process(VirtIOBlkQueue *q, unsigned *passes);

/*
 * Publish pushed completions and, when EVENT_IDX / VRING_AVAIL_F_NO_INTERRUPT
 * ask for it, interrupt the guest through @gn. Returns true if it did.
 * Context: owner thread (hot path)
 */
bool virtio_blk_queue_notify(VirtIOBlkQueue *q, const GuestNotifier *gn);

#endif /* VBLK_VIRTIO_BLK_H */
