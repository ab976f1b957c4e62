/*
 * virtio-blk request engine: per-queue request pool, parsing and validation
 * of requests popped from the virtqueue, completion.
 *
 * Request errors (bad sector, unknown type, ...) complete with IOERR or
 * UNSUPP; protocol errors (no status byte, no header) break the queue.
 * Hot path: no allocation, no lock; one pool slot per request.
 */
#include <endian.h>
#include <errno.h>
#include <string.h>
#include <linux/virtio_ring.h>

#include "util/barrier.h"
#include "util/iov.h"
#include "virtio-blk-int.h"

/* Largest single request: Linux's per-syscall limit (MAX_RW_COUNT, 4K pages). */
#define VIRTIO_BLK_MAX_REQ_BYTES 0x7ffff000ull

struct VirtIOBlkQueue {
    VirtIOBlk *blk;
    VirtQueue *vq;
    const VirtIOBlkExecOps *ops;
    void *opaque;

    /* Limits cached at setup so the hot path reads one structure. */
    uint32_t lbs; /* logical block size, bytes */
    uint32_t seg_max;
    uint32_t size_max; /* 0 = no limit */
    bool readonly;
    bool discard;      /* VIRTIO_BLK_F_DISCARD negotiated */
    bool write_zeroes; /* VIRTIO_BLK_F_WRITE_ZEROES negotiated */
    uint32_t max_discard_sectors;
    uint32_t max_write_zeroes_sectors;

    unsigned nreq;
    unsigned inflight;  /* requests owned by the executor */
    bool deferred;      /* the executor's admit() refused the last pass's request */
    VirtIOBlkReq *reqs; /* nreq slots */
    struct iovec *iovs; /* nreq * VIRTQUEUE_ELEM_IOV(nreq) */
    VirtIOBlkReq *free_list;
};

#define BIT(n) (1ull << (n))

/* Context: owner thread of @vq (control path) */
VirtIOBlkQueue *virtio_blk_queue_new(VirtIOBlk *blk, VirtQueue *vq, const VirtIOBlkExecOps *ops,
                                     void *opaque, GError **errp)
{
    unsigned num = virtqueue_num(vq), cap = VIRTQUEUE_ELEM_IOV(num);
    VirtIOBlkQueue *q;

    if (num > blk->conf.queue_size) {
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                    "virtqueue size %u exceeds queue-size %u", num, blk->conf.queue_size);
        return NULL;
    }
    q = g_new0(VirtIOBlkQueue, 1);
    q->blk = blk;
    q->vq = vq;
    q->ops = ops;
    q->opaque = opaque;
    q->lbs = blk->conf.logical_block_size;
    q->seg_max = virtio_blk_conf_seg_max(&blk->conf);
    q->size_max = blk->conf.size_max;
    q->readonly = blk->conf.readonly;
    q->discard = blk->features & BIT(VIRTIO_BLK_F_DISCARD);
    q->write_zeroes = blk->features & BIT(VIRTIO_BLK_F_WRITE_ZEROES);
    q->max_discard_sectors = blk->conf.max_discard_sectors;
    q->max_write_zeroes_sectors = blk->conf.max_write_zeroes_sectors;
    q->nreq = num;
    q->reqs = g_new0(VirtIOBlkReq, num);
    q->iovs = g_new(struct iovec, (size_t)num * cap);
    for (unsigned i = num; i-- > 0;) {
        VirtIOBlkReq *req = &q->reqs[i];

        req->idx = i;
        req->queue = q;
        req->elem.iov = q->iovs + (size_t)i * cap;
        req->elem.iov_cap = cap;
        req->next_free = q->free_list;
        q->free_list = req;
    }
    return q;
}

/* Context: owner thread (control path); no request may be in flight */
void virtio_blk_queue_free(VirtIOBlkQueue *q)
{
    if (q) {
        g_free(q->iovs);
        g_free(q->reqs);
        g_free(q);
    }
}

/* Context: owner thread */
void virtio_blk_queue_set_exec(VirtIOBlkQueue *q, const VirtIOBlkExecOps *ops, void *opaque)
{
    q->ops = ops;
    q->opaque = opaque;
}

/* Context: owner thread */
VirtQueue *virtio_blk_queue_get_vq(const VirtIOBlkQueue *q)
{
    return q->vq;
}

/* Context: owner thread */
unsigned virtio_blk_queue_inflight(const VirtIOBlkQueue *q)
{
    return q->inflight;
}

static inline VirtIOBlkReq *req_alloc(VirtIOBlkQueue *q)
{
    VirtIOBlkReq *req = q->free_list;

    if (req) {
        q->free_list = req->next_free;
        req->in_use = true;
    }
    return req;
}

static inline void req_release(VirtIOBlkReq *req)
{
    VirtIOBlkQueue *q = req->queue;

    req->in_use = false;
    req->exec_opaque = NULL;
    req->next_free = q->free_list;
    q->free_list = req;
}

/* Write the status byte and push the chain: bytes written + 1 on success. */
static void req_finish(VirtIOBlkReq *req, uint8_t status)
{
    uint32_t len = (status == VIRTIO_BLK_S_OK ? req->written : 0) + 1;

    qatomic_set(req->status, status);
    virtqueue_push(req->queue->vq, req->elem.head, len);
    req_release(req);
}

/* Context: owner thread (hot path) */
void virtio_blk_req_complete(VirtIOBlkReq *req, int ret)
{
    uint8_t status = VIRTIO_BLK_S_OK;

    if (!req->in_use) {
        return; /* executor bug: double completion; never touch the ring twice */
    }
    if (ret == -ENOTSUP || ret == -EOPNOTSUPP) {
        status = VIRTIO_BLK_S_UNSUPP;
    } else if (ret < 0) {
        status = VIRTIO_BLK_S_IOERR;
    }
    req->queue->inflight--;
    req_finish(req, status);
}

/*
 * Sector range check in 512-byte units, overflow-safe:
 * aligned to the logical block, inside the disk.
 */
static bool sector_range_ok(const VirtIOBlkQueue *q, uint64_t sector, uint64_t nsectors)
{
    uint64_t lbs_sectors = q->lbs / VIRTIO_BLK_SECTOR_SIZE;

    if ((sector | nsectors) & (lbs_sectors - 1)) {
        return false;
    }
    /* block_resize may change the capacity while the queue runs (relaxed read). */
    uint64_t cap = __atomic_load_n(&q->blk->conf.capacity, __ATOMIC_RELAXED);

    return sector <= cap && nsectors <= cap - sector;
}

/* Segment count and per-segment size limits for a data transfer. */
static bool segments_ok(const VirtIOBlkQueue *q, const VirtIOBlkReq *req)
{
    /* ndesc counts header and status descriptors too. */
    if (req->elem.ndesc > q->seg_max + 2u) {
        return false;
    }
    if (q->size_max) {
        for (unsigned i = 0; i < req->niov; i++) {
            if (req->iov[i].iov_len > q->size_max) {
                return false;
            }
        }
    }
    return true;
}

/*
 * IN/OUT: data only in the transfer direction, length a multiple of the
 * logical block, range inside the disk.
 * Returns a status to complete with inline, or 0xff to submit.
 */
static uint8_t parse_rw(VirtIOBlkQueue *q, VirtIOBlkReq *req, uint64_t sector, bool write,
                        unsigned other_niov)
{
    uint64_t len;

    if (other_niov) {
        return VIRTIO_BLK_S_IOERR; /* data in the wrong direction */
    }
    if (write && q->readonly) {
        return VIRTIO_BLK_S_IOERR;
    }
    len = iov_size(req->iov, req->niov);
    if (len % q->lbs || len > VIRTIO_BLK_MAX_REQ_BYTES ||
        !sector_range_ok(q, sector, len / VIRTIO_BLK_SECTOR_SIZE) || !segments_ok(q, req)) {
        return VIRTIO_BLK_S_IOERR;
    }
    if (len == 0) {
        return VIRTIO_BLK_S_OK; /* nothing to transfer */
    }
    req->op = write ? VIRTIO_BLK_OP_WRITE : VIRTIO_BLK_OP_READ;
    req->offset = sector * VIRTIO_BLK_SECTOR_SIZE;
    req->len = len;
    req->written = write ? 0 : len;
    return 0xff;
}

/* DISCARD / WRITE_ZEROES: exactly one 16-byte segment in the out data. */
static uint8_t parse_dwz(VirtIOBlkQueue *q, VirtIOBlkReq *req, bool wz, struct iovec *out,
                         unsigned out_n, uint64_t out_len, unsigned in_n)
{
    struct virtio_blk_discard_write_zeroes seg;
    uint32_t flags, nsectors, max;
    uint64_t sector;

    if (!(wz ? q->write_zeroes : q->discard)) {
        return VIRTIO_BLK_S_UNSUPP;
    }
    if (q->readonly || in_n || out_len != sizeof(seg) ||
        iov_to_buf(out, out_n, 0, &seg, sizeof(seg)) != sizeof(seg)) {
        return VIRTIO_BLK_S_IOERR;
    }
    sector = le64toh(seg.sector);
    nsectors = le32toh(seg.num_sectors);
    flags = le32toh(seg.flags);
    /* Unknown flags, or UNMAP on a discard: "MUST set the status to UNSUPP". */
    if (flags & ~VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP || (!wz && flags)) {
        return VIRTIO_BLK_S_UNSUPP;
    }
    max = wz ? q->max_write_zeroes_sectors : q->max_discard_sectors;
    if (nsectors > max || !sector_range_ok(q, sector, nsectors)) {
        return VIRTIO_BLK_S_IOERR;
    }
    if (nsectors == 0) {
        return VIRTIO_BLK_S_OK;
    }
    req->op = wz ? VIRTIO_BLK_OP_WRITE_ZEROES : VIRTIO_BLK_OP_DISCARD;
    req->offset = sector * VIRTIO_BLK_SECTOR_SIZE;
    req->len = (uint64_t)nsectors * VIRTIO_BLK_SECTOR_SIZE;
    req->unmap = flags & VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP;
    req->iov = NULL;
    req->niov = 0;
    return 0xff;
}

/* GET_ID: the serial, NUL-padded only when shorter than 20 bytes. */
static uint8_t parse_get_id(VirtIOBlkQueue *q, VirtIOBlkReq *req)
{
    req->written = iov_from_buf(req->iov, req->niov, 0, q->blk->id, VIRTIO_BLK_ID_BYTES);
    return VIRTIO_BLK_S_OK;
}

/*
 * Locate the status byte: the last byte of the last device-writable iovec.
 * Trims it off the element. Returns false when there is none.
 */
static bool req_take_status(VirtIOBlkReq *req)
{
    VirtQueueElement *e = &req->elem;
    struct iovec *last;

    if (e->in_num == 0) {
        return false;
    }
    last = &e->iov[e->out_num + e->in_num - 1];
    req->status = (uint8_t *)last->iov_base + last->iov_len - 1;
    if (--last->iov_len == 0) {
        e->in_num--;
    }
    return true;
}

/* Protocol error with a known status location: return the chain, then break. */
static void req_protocol_error(VirtIOBlkQueue *q, VirtIOBlkReq *req, const char *why)
{
    req_finish(req, VIRTIO_BLK_S_IOERR);
    virtqueue_set_broken(q->vq, why); /* publishes the chain first */
}

/* Parse one popped chain; returns a status to complete inline, or 0xff = submitted. */
static uint8_t req_parse(VirtIOBlkQueue *q, VirtIOBlkReq *req, const struct virtio_blk_outhdr *h)
{
    VirtQueueElement *e = &req->elem;
    struct iovec *out = e->iov, *in = e->iov + e->out_num;
    unsigned out_n = e->out_num, in_n = e->in_num;
    uint32_t type = le32toh(h->type) & ~VIRTIO_BLK_T_BARRIER;

    /* Linux sets the barrier bit even when VIRTIO_BLK_F_BARRIER is not offered. */
    iov_discard_front(&out, &out_n, sizeof(*h));
    req->written = 0;
    req->unmap = false;
    switch (type) {
    case VIRTIO_BLK_T_IN:
        req->op = VIRTIO_BLK_OP_READ; /* also for invalid accounting */
        req->iov = in;
        req->niov = in_n;
        return parse_rw(q, req, le64toh(h->sector), false, out_n);
    case VIRTIO_BLK_T_OUT:
        req->op = VIRTIO_BLK_OP_WRITE;
        req->iov = out;
        req->niov = out_n;
        return parse_rw(q, req, le64toh(h->sector), true, in_n);
    case VIRTIO_BLK_T_FLUSH:
        req->op = VIRTIO_BLK_OP_FLUSH;
        req->iov = NULL;
        req->niov = 0;
        req->offset = req->len = 0;
        return 0xff;
    case VIRTIO_BLK_T_GET_ID:
        req->iov = in;
        req->niov = in_n;
        return parse_get_id(q, req);
    case VIRTIO_BLK_T_DISCARD:
    case VIRTIO_BLK_T_WRITE_ZEROES:
        req->op = type == VIRTIO_BLK_T_DISCARD ? VIRTIO_BLK_OP_DISCARD : VIRTIO_BLK_OP_WRITE_ZEROES;
        return parse_dwz(q, req, type == VIRTIO_BLK_T_WRITE_ZEROES, out, out_n,
                         e->out_len - sizeof(*h), in_n);
    default:
        return VIRTIO_BLK_S_UNSUPP;
    }
}

/*
 * Validate and dispatch one request: complete inline or hand to the executor.
 * Returns false when the executor deferred it (un-popped): end the pass.
 */
static bool req_handle(VirtIOBlkQueue *q, VirtIOBlkReq *req)
{
    struct virtio_blk_outhdr hdr;
    uint8_t status;

    if (!req_take_status(req)) {
        /* Nowhere to report: the chain cannot be returned meaningfully. */
        req_release(req);
        virtqueue_set_broken(q->vq, "virtio-blk request without a status byte");
        return true;
    }
    if (req->elem.out_len < sizeof(hdr) ||
        iov_to_buf(req->elem.iov, req->elem.out_num, 0, &hdr, sizeof(hdr)) != sizeof(hdr)) {
        req_protocol_error(q, req, "virtio-blk request without a complete header");
        return true;
    }
    req->op = VIRTIO_BLK_OP_FLUSH; /* not counted as invalid unless req_parse says */
    status = req_parse(q, req, &hdr);
    if (status != 0xff) {
        if (status == VIRTIO_BLK_S_IOERR && req->op != VIRTIO_BLK_OP_FLUSH && q->ops->invalid) {
            q->ops->invalid(q->opaque, req->op);
        }
        req_finish(req, status);
        return true;
    }
    if (q->ops->admit && !q->ops->admit(q->opaque, req)) {
        /* Throttled: back into the avail ring, the executor comes back for it. */
        virtqueue_unpop(q->vq, &req->elem);
        req_release(req);
        q->deferred = true;
        return false;
    }
    q->inflight++;
    q->ops->submit(q->opaque, req);
    return true;
}

/* Context: owner thread */
bool virtio_blk_queue_pending(VirtIOBlkQueue *q)
{
    return !q->deferred && virtqueue_has_avail(q->vq);
}

/* Pop and dispatch until empty, the cap, or a broken queue. Returns false to stop. */
static bool handle_pass(VirtIOBlkQueue *q, unsigned *popped)
{
    while (*popped < q->nreq) {
        VirtIOBlkReq *req = req_alloc(q);
        int rc;

        if (!req) {
            /*
             * Every slot is in flight, so every head is: a further chain can
             * only be a duplicate or exceed the queue size.
             */
            if (virtqueue_has_avail(q->vq)) {
                virtqueue_set_broken(q->vq, "more virtio-blk requests than the queue size");
            }
            return false;
        }
        rc = virtqueue_pop(q->vq, &req->elem);
        if (rc <= 0) {
            req_release(req);
            return rc == 0;
        }
        if (!req_handle(q, req)) {
            return false; /* deferred: not counted as popped */
        }
        (*popped)++;
    }
    return true;
}

/* Context: owner thread (hot path) */
unsigned virtio_blk_handle_queue(VirtIOBlkQueue *q)
{
    unsigned popped = 0;
    bool more;

    q->deferred = false;
    do {
        virtqueue_disable_notification(q->vq);
        if (!handle_pass(q, &popped)) {
            /*
             * Pool exhausted or queue broken. Never leave notifications off
             * on a live queue: the next chain could arrive without a kick.
             * Deferred by the executor: it comes back by itself (a timer),
             * so no kick is wanted meanwhile.
             */
            if (!virtqueue_is_broken(q->vq) && !q->deferred) {
                virtqueue_enable_notification(q->vq);
            }
            break;
        }
        /* Re-enable, then re-check: a chain added meanwhile is not lost. */
        more = virtqueue_enable_notification(q->vq);
    } while (more && popped < q->nreq);
    if (q->ops && q->ops->batch_end) {
        q->ops->batch_end(q->opaque);
    }
    return popped;
}

/* Context: owner thread (hot path) */
bool virtio_blk_queue_flush(VirtIOBlkQueue *q)
{
    virtqueue_flush(q->vq);
    return virtqueue_should_notify(q->vq);
}
