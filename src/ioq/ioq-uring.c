/*
 * The io_uring engine (aio=io_uring): SQEs are written while enqueuing and
 * published by one io_uring_submit() per batch; the file and the completion
 * eventfd are registered with the ring.  Requests that find no free SQE (or
 * would overflow the CQ) wait on an overflow list, moved into the ring after
 * the next submit or completion.  CQEs with -EAGAIN/-EINTR are resubmitted,
 * short reads resubmit the remainder.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>

#include "ioq-internal.h"

#define URING_FILE_INDEX 0 /* the one registered file */

typedef struct UringEngine {
    struct io_uring ring;
    IOQList overflow; /* no SQE / CQ room yet, FIFO */
    unsigned queued;  /* SQEs written, not yet submitted */
    unsigned kernel_inflight;
    unsigned max_inflight; /* CQ size: never more in flight, so no CQ overflow */
    bool fallocate_ok;
} UringEngine;

static bool uring_probe_fallocate(struct io_uring *ring)
{
    struct io_uring_probe *probe = io_uring_get_probe_ring(ring);
    bool ok = probe && io_uring_opcode_supported(probe, IORING_OP_FALLOCATE);

    if (probe) {
        io_uring_free_probe(probe);
    }
    return ok;
}

static bool uring_init(IOQ *ioq, GError **errp)
{
    UringEngine *e = g_new0(UringEngine, 1);
    int ret;

    ret = io_uring_queue_init(MAX(ioq->depth, 8), &e->ring, 0);
    if (ret < 0) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(-ret),
                    "io_uring_queue_init failed: %s", g_strerror(-ret));
        g_free(e);
        return false;
    }
    ret = io_uring_register_files(&e->ring, &ioq->fd, 1);
    if (ret == 0) {
        ret = io_uring_register_eventfd(&e->ring, ioq->efd);
    }
    if (ret < 0) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(-ret),
                    "cannot register the file/eventfd with io_uring: %s", g_strerror(-ret));
        io_uring_queue_exit(&e->ring);
        g_free(e);
        return false;
    }
    e->max_inflight = e->ring.cq.ring_entries;
    e->fallocate_ok = uring_probe_fallocate(&e->ring);
    ioq->engine_state = e;
    return true;
}

static void uring_cleanup(IOQ *ioq)
{
    UringEngine *e = ioq->engine_state;

    io_uring_queue_exit(&e->ring);
    g_free(e);
}

static bool uring_supports(IOQ *ioq, IOQOp op)
{
    UringEngine *e = ioq->engine_state;

    return op == IOQ_OP_READ || op == IOQ_OP_WRITE || op == IOQ_OP_FLUSH || e->fallocate_ok;
}

static void uring_prep(IOQReq *req, struct io_uring_sqe *sqe)
{
    IOQReqPriv *p = &req->priv;
    uint64_t pos = req->offset + p->done;

    switch (req->op) {
    case IOQ_OP_READ:
        io_uring_prep_readv(sqe, URING_FILE_INDEX, p->cur_iov, p->cur_niov, pos);
        break;
    case IOQ_OP_WRITE:
        io_uring_prep_writev(sqe, URING_FILE_INDEX, p->cur_iov, p->cur_niov, pos);
        break;
    case IOQ_OP_FLUSH:
        io_uring_prep_fsync(sqe, URING_FILE_INDEX, IORING_FSYNC_DATASYNC);
        break;
    case IOQ_OP_DISCARD:
        io_uring_prep_fallocate(sqe, URING_FILE_INDEX, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                                req->offset, req->len);
        break;
    case IOQ_OP_WRITE_ZEROES:
        io_uring_prep_fallocate(sqe, URING_FILE_INDEX,
                                req->may_unmap ? FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE
                                               : FALLOC_FL_ZERO_RANGE,
                                req->offset, req->len);
        break;
    }
    sqe->flags |= IOSQE_FIXED_FILE;
    io_uring_sqe_set_data(sqe, req);
}

/* Write @req into a free SQE; false if the ring (or the CQ budget) is full. */
static bool uring_try_prep(UringEngine *e, IOQReq *req)
{
    struct io_uring_sqe *sqe;

    if (e->kernel_inflight + e->queued >= e->max_inflight) {
        return false;
    }
    sqe = io_uring_get_sqe(&e->ring);
    if (!sqe) {
        return false;
    }
    uring_prep(req, sqe);
    e->queued++;
    return true;
}

static void uring_submit(IOQ *ioq);

static void uring_queue(IOQ *ioq, IOQReq *req)
{
    UringEngine *e = ioq->engine_state;

    /* FIFO: nobody overtakes requests already waiting for room. */
    if (e->overflow.head || !uring_try_prep(e, req)) {
        ioq_list_push(&e->overflow, req);
        return;
    }
    if (e->queued >= ioq->max_batch || e->kernel_inflight < ioq->submit_early) {
        uring_submit(ioq);
    }
}

static bool uring_fill_from_overflow(UringEngine *e)
{
    bool moved = false;

    while (e->overflow.head && uring_try_prep(e, e->overflow.head)) {
        ioq_list_pop(&e->overflow);
        moved = true;
    }
    return moved;
}

/* io_uring_submit EAGAIN/EBUSYs with nothing in flight before giving up for now. */
#define URING_IDLE_EAGAIN_TRIES 16

static void uring_submit(IOQ *ioq)
{
    UringEngine *e = ioq->engine_state;
    unsigned idle_tries = 0;

    uring_fill_from_overflow(e);
    while (e->queued) {
        int ret = io_uring_submit(&e->ring);

        ioq_stat_add(&ioq->stats.batches, 1);
        if (ret < 0) {
            /*
             * -EAGAIN/-EBUSY: the kernel is short of resources or has CQEs to
             * hand back.  The SQEs stay in the ring; the next completion (or
             * submit) retries.  With nothing of ours in flight there is no
             * next completion: back off briefly and try again here (about
             * 50 ms in all) rather than leave the requests unsubmitted.
             */
            ioq_stat_add(&ioq->stats.retries, 1);
            if (e->kernel_inflight == 0 && idle_tries < URING_IDLE_EAGAIN_TRIES) {
                g_usleep(MIN(50u << idle_tries, 5000u));
                idle_tries++;
                continue;
            }
            return;
        }
        e->queued -= ret;
        e->kernel_inflight += ret;
        ioq_stat_add(&ioq->stats.submitted, ret);
        if (ret == 0 || !uring_fill_from_overflow(e)) {
            break;
        }
    }
}

static void uring_complete_one(IOQ *ioq, UringEngine *e, IOQReq *req, int res)
{
    if (res == -EAGAIN || res == -EINTR) {
        /* Known to happen (e.g. Linux SCSI): try again. */
        ioq_stat_add(&ioq->stats.retries, 1);
        uring_queue(ioq, req);
        return;
    }
    if (req->op == IOQ_OP_READ || req->op == IOQ_OP_WRITE) {
        if (!ioq_complete_rw(ioq, req, res, true)) {
            uring_queue(ioq, req); /* short read: the remainder */
        }
        return;
    }
    ioq_complete(ioq, req, res < 0 ? res : 0);
}

static unsigned uring_reap(IOQ *ioq)
{
    UringEngine *e = ioq->engine_state;
    struct io_uring_cqe *cqe;
    unsigned n = 0;

    /* One CQE at a time: a callback may enqueue and submit in between. */
    while (io_uring_peek_cqe(&e->ring, &cqe) == 0) {
        IOQReq *req = io_uring_cqe_get_data(cqe);
        int res = cqe->res;

        io_uring_cqe_seen(&e->ring, cqe);
        e->kernel_inflight--;
        uring_complete_one(ioq, e, req, res);
        n++;
    }
    return n;
}

static bool uring_ready(IOQ *ioq)
{
    UringEngine *e = ioq->engine_state;

    return io_uring_cq_ready(&e->ring) > 0;
}

const IOQEngine ioq_engine_uring = {
    .name = "io_uring",
    .init = uring_init,
    .cleanup = uring_cleanup,
    .supports = uring_supports,
    .queue = uring_queue,
    .submit = uring_submit,
    .reap = uring_reap,
    .ready = uring_ready,
};
