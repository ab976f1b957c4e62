/*
 * IOQ: the engine-neutral I/O queue of the dataplane.  One IOQ per iothread
 * (per device); all calls except ioq_get_stats() come from that thread.
 *
 *   ioq_enqueue()  prepares a request (iocb / SQE) without a syscall
 *   ioq_submit()   one io_submit / io_uring_submit for everything enqueued
 *   ioq_get_fd()   eventfd that becomes readable when completions are ready
 *   ioq_process_completions()  reaps them and runs the callbacks
 *
 * Engines: "native" (libaio), "io_uring", "null".  Requests are owned by the
 * caller (embed IOQReq in the request slot): nothing is allocated per request.
 * See docs/ioq.md for the flush/discard strategies and the bounce pool.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_IOQ_H
#define VBLK_IOQ_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>
#include <glib.h>

typedef enum IOQOp {
    IOQ_OP_READ,
    IOQ_OP_WRITE,
    IOQ_OP_FLUSH,        /* fdatasync; ordered after earlier modifying requests */
    IOQ_OP_DISCARD,      /* punch a hole, keep the size */
    IOQ_OP_WRITE_ZEROES, /* zero range (punch when may_unmap) */
} IOQOp;

typedef struct IOQ IOQ;
typedef struct IOQReq IOQReq;

/* @ret: 0 on success or -errno.  Runs in the IOQ's thread. */
typedef void IOQCompletionFunc(IOQReq *req, int ret);

/* Engine state inside IOQReq.  Private: the caller must not touch it. */
typedef struct IOQReqPriv {
    IOQReq *next;          /* pending / held / completion list link */
    IOQReq *wprev, *wnext; /* in-flight modifying requests, in enqueue order */
    uint64_t seq;          /* modifying request: its sequence; FLUSH: barrier */
    uint64_t done;         /* bytes already transferred (short read resubmit) */
    struct iovec *cur_iov; /* iovecs still to transfer (after a short read) */
    int cur_niov;
    int saved_idx;       /* caller iovec trimmed for a resubmit, or -1 */
    struct iovec saved;  /* its original value, restored at completion */
    struct iovec bounce; /* aligned bounce buffer, iov_base NULL if none */
    uint32_t bounce_slot;
    uint32_t bounce_nslots;
    int ret; /* result handed over by the helper thread */
    uint8_t state;
    uint64_t engine[8]; /* engine-private storage (the libaio struct iocb) */
} IOQReqPriv;

struct IOQReq {
    /* Filled in by the caller before ioq_enqueue(). */
    IOQOp op;
    uint64_t offset;   /* bytes */
    uint64_t len;      /* bytes; for READ/WRITE it must equal the iovec total */
    struct iovec *iov; /* READ/WRITE; must stay valid until completion */
    int niov;
    bool may_unmap; /* WRITE_ZEROES: punching a hole is fine */
    IOQCompletionFunc *cb;
    void *opaque;

    IOQReqPriv priv;
};

typedef struct IOQConfig {
    const char *engine;          /* "native", "io_uring" or "null" */
    int fd;                      /* backing file; -1 for null */
    unsigned queue_depth;        /* max requests in flight (default 128) */
    unsigned max_batch;          /* requests per submit syscall (default 32) */
    bool direct;                 /* fd was opened with O_DIRECT */
    uint32_t logical_block_size; /* default 512 */
    uint32_t mem_align;          /* 0: statx STATX_DIOALIGN, else 4096 (direct only) */
    size_t bounce_pool_size;     /* bytes of aligned bounce buffers (default 4 MiB) */
    unsigned aio_max_events;     /* native: io_setup() size; 0 = queue_depth */
    bool null_read_zeroes;       /* null: fill reads with zeroes */
    bool force_helper;           /* use the helper thread for flush/discard (tests) */
} IOQConfig;

/* Counters, readable from any thread without locks (relaxed atomics). */
typedef struct IOQStats {
    uint64_t submitted;    /* requests handed to the kernel (or null engine) */
    uint64_t completed;    /* callbacks run */
    uint64_t batches;      /* submit syscalls */
    uint64_t retries;      /* EAGAIN / partial submits / EINTR / short reads */
    uint64_t bounces;      /* requests that went through the bounce pool */
    uint64_t held_flushes; /* flushes that waited for earlier writes */
    uint64_t helper_ops;   /* requests done by the helper thread */
    uint64_t inflight;     /* accepted by ioq_enqueue, callback not yet run */
} IOQStats;

/* Context: control thread. */
IOQ *ioq_new(const IOQConfig *cfg, GError **errp);
/*
 * Waits for every request in flight (running their callbacks), then frees.
 * Context: IOQ thread. NULL is ignored.
 */
void ioq_free(IOQ *ioq);

/*
 * Accept @req.  Returns 0, and then @req->cb runs exactly once later (from
 * ioq_submit() for the null engine, from ioq_process_completions() or
 * ioq_drain() otherwise); or -errno (bad op, size mismatch, O_DIRECT offset or
 * length not a multiple of the logical block size, request larger than the
 * bounce pool) and the callback never runs.  May submit by itself when
 * max_batch requests are queued.  No allocation, no lock.
 * Context: IOQ thread.
 */
int ioq_enqueue(IOQ *ioq, IOQReq *req);

/*
 * Hand everything enqueued to the kernel in one syscall (per max_batch).
 * Reentrancy: completion callbacks may call ioq_enqueue() and ioq_submit();
 * the null engine completes requests inside ioq_submit(), after its submit
 * loop, and a nested ioq_submit() from those callbacks only queues: the outer
 * call picks the new requests up before it returns.
 * Context: IOQ thread.
 */
void ioq_submit(IOQ *ioq);

/* Context: IOQ thread.  The completion eventfd (never signalled for null). */
int ioq_get_fd(IOQ *ioq);

/*
 * Reap every ready completion without blocking and run the callbacks; then
 * submit requests that were waiting (EAGAIN, held flushes, bounce buffers).
 * Does not read the eventfd: the caller's fd handler clears it first.
 * Callbacks must not call ioq_process_completions() or ioq_drain() themselves.
 * Returns the number of callbacks run.  Context: IOQ thread.
 */
unsigned ioq_process_completions(IOQ *ioq);

/*
 * True if ioq_process_completions() would find something, checked without a
 * syscall (io_uring CQ, the libaio user ring): the event loop's busy-poll
 * callback for the completion side.  Context: IOQ thread.
 */
bool ioq_completions_ready(IOQ *ioq);

/* Context: IOQ thread.  Blocks until every accepted request has completed. */
void ioq_drain(IOQ *ioq);

/* Context: IOQ thread. */
unsigned ioq_inflight(IOQ *ioq);

/* Context: any thread. */
void ioq_get_stats(IOQ *ioq, IOQStats *stats);

/* Context: any thread.  The engine name as resolved ("native", ...). */
const char *ioq_engine_name(IOQ *ioq);

/* Context: any thread.  Memory alignment used for O_DIRECT checks. */
uint32_t ioq_mem_align(IOQ *ioq);

#endif /* VBLK_IOQ_H */
