/*
 * The libaio engine (aio=native): iocbs live inside the caller's requests,
 * one io_submit() per batch, completions signalled on the IOQ eventfd by
 * io_set_eventfd().  When the AIO context is full (EAGAIN or a partial
 * io_submit) the rest waits on the pending list with `blocked` set and is
 * resubmitted after the next completions: never exit, never spin.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <libaio.h>
#include <string.h>

#include "ioq-internal.h"

G_STATIC_ASSERT(sizeof(struct iocb) <= sizeof(((IOQReqPriv *)0)->engine));

/*
 * The completion ring the kernel maps at the io_context_t address (Linux ABI,
 * fs/aio.c).  Reading it directly saves the io_getevents() syscall; only this
 * thread consumes events, so advancing `head` ourselves is safe.
 */
#define AIO_RING_MAGIC 0xa10a10a1u

/* io_submit EAGAINs with nothing in flight before a request fails. */
#define AIO_IDLE_EAGAIN_TRIES 16

typedef struct AioRing {
    unsigned id;
    unsigned nr;   /* events in the ring */
    unsigned head; /* consumer (us) */
    unsigned tail; /* producer (kernel) */
    unsigned magic;
    unsigned compat_features;
    unsigned incompat_features;
    unsigned header_length;
    struct io_event events[];
} AioRing;

typedef struct AioEngine {
    io_context_t ctx;
    unsigned nevents;
    struct io_event *events; /* reap buffer, nevents long */
    struct iocb **batch;     /* submit buffer, max_batch long */
    IOQList pending;         /* prepared, not yet accepted by the kernel */
    unsigned kernel_inflight;
    bool blocked;   /* the context is full: wait for a completion */
    unsigned idle_eagain; /* EAGAINs in a row with nothing of ours in flight */
    bool fdsync_ok; /* IOCB_CMD_FDSYNC works on this file */
} AioEngine;

static struct iocb *req_iocb(IOQReq *req)
{
    return (struct iocb *)req->priv.engine;
}

/* Does this kernel/filesystem accept IOCB_CMD_FDSYNC?  Many return -EINVAL. */
static bool aio_probe_fdsync(AioEngine *e, int fd)
{
    struct iocb cb, *cbs[1] = {&cb};
    struct io_event ev;
    int ret;

    io_prep_fdsync(&cb, fd);
    ret = io_submit(e->ctx, 1, cbs);
    if (ret != 1) {
        return false;
    }
    do {
        ret = io_getevents(e->ctx, 1, 1, &ev, NULL);
    } while (ret == -EINTR);
    return ret == 1 && (long)ev.res >= 0;
}

static bool aio_init(IOQ *ioq, GError **errp)
{
    AioEngine *e = g_new0(AioEngine, 1);
    int ret;

    e->nevents = ioq->aio_max_events;
    ret = io_setup(e->nevents, &e->ctx);
    if (ret < 0) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(-ret),
                    "io_setup(%u) failed: %s (see /proc/sys/fs/aio-max-nr)", e->nevents,
                    g_strerror(-ret));
        g_free(e);
        return false;
    }
    /* The kernel may hold more events than asked for: reap in a loop. */
    e->events = g_new(struct io_event, e->nevents);
    e->batch = g_new(struct iocb *, ioq->max_batch);
    e->fdsync_ok = aio_probe_fdsync(e, ioq->fd);
    ioq->engine_state = e;
    return true;
}

static void aio_cleanup(IOQ *ioq)
{
    AioEngine *e = ioq->engine_state;

    io_destroy(e->ctx);
    g_free(e->events);
    g_free(e->batch);
    g_free(e);
}

static bool aio_supports(IOQ *ioq, IOQOp op)
{
    AioEngine *e = ioq->engine_state;

    /* No DISCARD / WRITE_ZEROES in Linux AIO: those go to the helper. */
    return op == IOQ_OP_READ || op == IOQ_OP_WRITE || (op == IOQ_OP_FLUSH && e->fdsync_ok);
}

static void aio_prep(IOQ *ioq, IOQReq *req)
{
    struct iocb *cb = req_iocb(req);
    IOQReqPriv *p = &req->priv;
    off_t pos = req->offset + p->done;

    switch (req->op) {
    case IOQ_OP_READ:
        io_prep_preadv(cb, ioq->fd, p->cur_iov, p->cur_niov, pos);
        break;
    case IOQ_OP_WRITE:
        io_prep_pwritev(cb, ioq->fd, p->cur_iov, p->cur_niov, pos);
        break;
    default:
        io_prep_fdsync(cb, ioq->fd);
        break;
    }
    io_set_eventfd(cb, ioq->efd);
    cb->data = req;
}

static void aio_submit(IOQ *ioq);

static void aio_queue(IOQ *ioq, IOQReq *req)
{
    AioEngine *e = ioq->engine_state;

    aio_prep(ioq, req);
    ioq_list_push(&e->pending, req);
    if ((e->pending.len >= ioq->max_batch || e->kernel_inflight < ioq->submit_early) &&
        !e->blocked) {
        aio_submit(ioq);
    }
}

/* io_submit() refused the head request outright (not EAGAIN): fail it alone. */
static void aio_fail_head(IOQ *ioq, AioEngine *e, int err)
{
    ioq_complete(ioq, ioq_list_pop(&e->pending), err);
}

static void aio_submit(IOQ *ioq)
{
    AioEngine *e = ioq->engine_state;

    while (e->pending.len && !e->blocked) {
        unsigned n = 0;
        int ret;

        for (IOQReq *req = e->pending.head; req && n < ioq->max_batch; req = req->priv.next) {
            e->batch[n++] = req_iocb(req);
        }
        ret = io_submit(e->ctx, n, e->batch);
        ioq_stat_add(&ioq->stats.batches, 1);
        if (ret == -EAGAIN || ret == -EINTR) {
            ioq_stat_add(&ioq->stats.retries, 1);
            if (e->kernel_inflight == 0) {
                /*
                 * No completion of ours will retry this. The kernel can still
                 * say EAGAIN with nothing in flight: it keeps free slots in
                 * per-CPU caches, and those cached on another CPU are not
                 * this thread's until it runs there. Back off briefly (the
                 * thread may move; about 50 ms in all), then fail the request
                 * rather than hang it. A loaded machine turned 553 requests
                 * into guest I/O errors before this (tests/devices/test-bounds.c).
                 */
                if (e->idle_eagain < AIO_IDLE_EAGAIN_TRIES) {
                    g_usleep(MIN(50u << e->idle_eagain, 5000u));
                    e->idle_eagain++;
                    continue;
                }
                e->idle_eagain = 0;
                aio_fail_head(ioq, e, -EAGAIN);
                continue;
            }
            e->blocked = true;
            break;
        }
        if (ret < 0) {
            aio_fail_head(ioq, e, ret);
            continue;
        }
        e->idle_eagain = 0;
        for (int i = 0; i < ret; i++) {
            ioq_list_pop(&e->pending);
        }
        e->kernel_inflight += ret;
        ioq_stat_add(&ioq->stats.submitted, ret);
        if ((unsigned)ret < n) {
            /* Partial submit: the context is full; resume after completions. */
            ioq_stat_add(&ioq->stats.retries, 1);
            e->blocked = true;
        }
    }
}

static AioRing *aio_ring(AioEngine *e)
{
    AioRing *ring = (AioRing *)e->ctx;

    return ring->magic == AIO_RING_MAGIC && ring->incompat_features == 0 ? ring : NULL;
}

/* Copy up to @max ready events out of the user-visible ring, no syscall. */
static int aio_ring_get(AioRing *ring, struct io_event *out, unsigned max)
{
    unsigned head = ring->head;
    /* Acquire: the events before the tail; pairs with the kernel's smp_wmb()
     * between writing an event and publishing the new tail. */
    unsigned tail = __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
    unsigned n = 0;

    while (head != tail && n < max) {
        out[n++] = ring->events[head];
        head = (head + 1) % ring->nr;
    }
    /* Release: we are done reading those slots before the kernel may reuse
     * them; pairs with the kernel reading head under its ring lock. */
    __atomic_store_n(&ring->head, head, __ATOMIC_RELEASE);
    return n;
}

static bool aio_ready(IOQ *ioq)
{
    AioEngine *e = ioq->engine_state;
    AioRing *ring = aio_ring(e);

    return ring && ring->head != __atomic_load_n(&ring->tail, __ATOMIC_ACQUIRE);
}

static void aio_complete_event(IOQ *ioq, struct io_event *ev)
{
    IOQReq *req = ev->data;
    long res = (long)ev->res;

    if (req->op == IOQ_OP_FLUSH) {
        ioq_complete(ioq, req, res < 0 ? (int)res : 0);
    } else {
        /* Short reads only happen at EOF with AIO: zero-fill. */
        ioq_complete_rw(ioq, req, res, false);
    }
}

static unsigned aio_reap(IOQ *ioq)
{
    AioEngine *e = ioq->engine_state;
    AioRing *ring = aio_ring(e);
    struct timespec zero = {0, 0};
    unsigned total = 0;
    int n;

    do {
        if (ring) {
            n = aio_ring_get(ring, e->events, e->nevents);
        } else {
            n = io_getevents(e->ctx, 0, e->nevents, e->events, &zero);
        }
        if (n <= 0) {
            break;
        }
        e->kernel_inflight -= n;
        /* Completions freed context slots. */
        e->blocked = false;
        /* Callbacks must not reap (see ioq.h): e->events stays ours. */
        for (int i = 0; i < n; i++) {
            aio_complete_event(ioq, &e->events[i]);
        }
        total += n;
    } while ((unsigned)n == e->nevents);
    return total;
}

const IOQEngine ioq_engine_aio = {
    .name = "native",
    .init = aio_init,
    .cleanup = aio_cleanup,
    .supports = aio_supports,
    .queue = aio_queue,
    .submit = aio_submit,
    .reap = aio_reap,
    .ready = aio_ready,
};
