/*
 * IOQ: the engine-neutral I/O queue of the dataplane and the block layer.
 * One IOQ per user; all calls except ioq_new() and ioq_get_stats() come from
 * one thread at a time, the "IOQ thread". The user binds the IOQ to that
 * thread with ioq_bind_thread() when it attaches the IOQ there (the iothread
 * when a dataplane starts) and unbinds it at hand-over; in between, every
 * "Context: IOQ thread" entry point asserts that it runs there
 * (util/thread-check.h; compiled out with NDEBUG). An unbound IOQ is not
 * checked (the block layer's: its loop may be run by different threads).
 *
 *   ioq_enqueue()  prepares a request (iocb / SQE) without a syscall
 *   ioq_submit()   one io_submit / io_uring_submit for everything enqueued
 *   ioq_get_fd()   eventfd that becomes readable when completions are ready
 *   ioq_process_completions()  reaps them and runs the callbacks
 *
 * Engines: "native" (libaio), "io_uring", "null", "nbd" (a remote disk through
 * libnbd's asynchronous API, see below), "rbd" (a Ceph RBD image through
 * librbd's aio calls, when built with librbd).  Requests are owned by the
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

/*
 * IOQReq.flags.
 *
 * IOQ_REQ_FUA (WRITE and WRITE_ZEROES only): writethrough. Once the write
 * has succeeded the IOQ issues a flush (fdatasync) on the same request, and
 * the callback runs only after that flush, with its result: 0, or the
 * flush's -errno. A failed write completes with its own error and no flush.
 * The flush waits for nothing but its own write (not for writes enqueued
 * later, nor behind held guest flushes): fdatasync after the write completed
 * is all FUA needs. The write and its flush count as one request for
 * ioq_inflight() and IOQStats.completed; IOQStats.fua_flushes counts the
 * flushes.
 */
#define IOQ_REQ_FUA (1u << 0)

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
    uint8_t fua_op;     /* IOQ_REQ_FUA: the caller's op while its flush runs */
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
    uint32_t flags; /* IOQ_REQ_* */
    IOQCompletionFunc *cb;
    void *opaque;

    IOQReqPriv priv;
};

/*
 * The "nbd" engine's server. The engine connects in ioq_new() (bounded by
 * connect_timeout_ms) and owns the connection; ioq_get_fd() is then an epoll
 * fd that becomes readable when the connection (in the direction libnbd asks
 * for) or the reconnect timer is ready. Requests with several iovecs go
 * through the bounce pool (libnbd takes one buffer per command). After the
 * connection is lost, requests wait up to reconnect_delay_s for a new one,
 * then fail with -EIO; reconnect attempts go on in the background.
 */
typedef struct IOQNbdConfig {
    const char *host;   /* TCP: host and port ... */
    const char *port;   /* default "10809" */
    const char *socket; /* ... or a unix socket path */
    const char *export_name; /* NULL: "" */
    uint64_t reconnect_delay_s;
    unsigned connect_timeout_ms; /* 0: 10 s */
} IOQNbdConfig;

/*
 * The "rbd" engine's image (only when vblk was built with librbd; otherwise
 * ioq_new() fails with "rbd support not compiled in"). The engine connects
 * to the cluster and opens the image in ioq_new(), bounded by
 * connect_timeout_s. Requests become librbd aio calls; their completions
 * arrive on librbd's threads and reach the IOQ thread through the
 * completion eventfd.
 */
typedef struct IOQRbdConfig {
    const char *pool;
    const char *rbd_namespace; /* NULL: the default namespace */
    const char *image;
    const char *conf;          /* ceph.conf path; NULL: librados' default search */
    const char *user;          /* client id without "client."; NULL: "admin" */
    unsigned connect_timeout_s; /* 0: 10 s */
    unsigned op_timeout_s;      /* rados_osd_op_timeout; 0: librados' default (none) */
    const char *const *conf_kv; /* more options: key, value, ..., NULL */
} IOQRbdConfig;

/* What the NBD server said in the handshake, or the RBD image (ioq_get_remote_info()). */
typedef struct IOQRemoteInfo {
    uint64_t size;
    bool read_only;
    bool can_flush, can_fua, can_trim, can_zero;
    uint32_t min_block; /* 1 when the server gave none */
    uint64_t max_block; /* largest request the engine takes (bytes) */
    uint64_t object_size; /* rbd: the image's object size (QEMU's cluster-size); else 0 */
} IOQRemoteInfo;

typedef struct IOQConfig {
    const char *engine;          /* "native", "io_uring", "null", "nbd" or "rbd" */
    int fd;                      /* backing file; -1 for null */
    unsigned queue_depth;        /* max requests in flight (default 128) */
    unsigned max_batch;          /* requests per submit syscall (default 32) */
    /*
     * While fewer than this many requests are in the kernel, submit each
     * request at once instead of waiting for max_batch or ioq_submit(): an
     * idle disk starts on the first request of a pass (0: off, QEMU's rule).
     */
    unsigned submit_early;
    bool direct;                 /* fd was opened with O_DIRECT */
    uint32_t logical_block_size; /* default 512 */
    uint32_t mem_align;          /* 0: statx STATX_DIOALIGN, else 4096 (direct only) */
    size_t bounce_pool_size;     /* bytes of aligned bounce buffers (default 4 MiB) */
    unsigned aio_max_events;     /* native: io_setup() size; 0 = queue_depth */
    bool null_read_zeroes;       /* null: fill reads with zeroes */
    bool force_helper;           /* use the helper thread for flush/discard (tests) */
    IOQNbdConfig nbd;            /* engine "nbd" (fd unused) */
    IOQRbdConfig rbd;            /* engine "rbd" (fd unused) */
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
    uint64_t fua_flushes;  /* flushes issued after IOQ_REQ_FUA writes */
    uint64_t efd_reads;    /* completion eventfd reads (ioq_clear_fd syscalls) */
    uint64_t injected;     /* requests failed by an injection rule */
} IOQStats;

/* Context: control thread. */
IOQ *ioq_new(const IOQConfig *cfg, GError **errp);
/*
 * Waits for every request in flight (running their callbacks), then frees.
 * Context: IOQ thread. NULL is ignored.
 */
void ioq_free(IOQ *ioq);

/*
 * Make the calling thread the IOQ thread, checked by the entry points below.
 * Context: the thread taking the IOQ over (nothing may be in flight on another)
 */
void ioq_bind_thread(IOQ *ioq);
/* Hand-over: any thread may be the next IOQ thread. Context: IOQ thread */
void ioq_unbind_thread(IOQ *ioq);

/*
 * Accept @req.  Returns 0, and then @req->cb runs exactly once later (from
 * ioq_submit() for the null engine and for a request an injection rule
 * failed, from ioq_process_completions() or ioq_drain() otherwise); or -errno (bad op, size mismatch, O_DIRECT offset or
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

/*
 * Context: IOQ thread.  The fd the IOQ thread's loop watches for readability:
 * the completion eventfd (never signalled for null), or for "nbd" an epoll fd
 * over the connection and the reconnect timer. The fd handler calls
 * ioq_clear_fd(), then ioq_process_completions().
 */
int ioq_get_fd(IOQ *ioq);
/* Context: IOQ thread.  Reset ioq_get_fd()'s readiness (reads the eventfd; no-op for nbd). */
void ioq_clear_fd(IOQ *ioq);
/*
 * Context: any thread.  True when ioq_get_fd() is an eventfd that is only ever
 * incremented (every engine but "nbd"): it may be watched edge-triggered, with
 * ioq_clear_fd() called only now and then to keep the count small.
 */
bool ioq_fd_is_eventfd(const IOQ *ioq);
/*
 * Context: IOQ thread.  The NBD server's view of the disk ("nbd" engine;
 * false for the others). The size is the one of the first connection.
 */
bool ioq_get_remote_info(IOQ *ioq, IOQRemoteInfo *info);
/*
 * Context: IOQ thread; drained. Resize the remote disk ("rbd" engine; the
 * others fail with ENOTSUP). Synchronous.
 */
bool ioq_remote_resize(IOQ *ioq, uint64_t size, GError **errp);
/* Whether this build has the "rbd" engine. Context: any thread */
bool ioq_have_rbd(void);

/*
 * Reap every ready completion without blocking and run the callbacks; then
 * submit requests that were waiting (EAGAIN, held flushes, bounce buffers,
 * the flushes of IOQ_REQ_FUA writes that just completed).
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

/*
 * Error injection, the IOQ's counterpart of the block layer's blkdebug rules
 * (same fields, same matching): a request that reaches the engine (after the
 * flush ordering, before the bounce pool; an IOQ_REQ_FUA write's flush is a
 * FLUSH of its own) is checked against every rule; each matching rule counts
 * it, and the first one that is eligible (nth == 0, or this is its nth
 * matching request) fails it with -@error instead of doing the I/O. The
 * failed request completes like any other: from the ioq_submit() or
 * ioq_process_completions() that follows, so the caller sees an ordinary
 * asynchronous error. A @once rule is removed after it fired.
 */
#define IOQ_INJECT_MAX_RULES 16
typedef struct IOQInjectRule {
    int op;          /* IOQOp, or -1 for any */
    uint64_t nth;    /* fire on the nth matching request (1-based); 0 = every one */
    uint64_t offset; /* with @length: only requests overlapping [offset, offset+length) */
    uint64_t length; /* 0 = any offset (flushes always match the range) */
    int error;       /* positive errno, e.g. EIO, ENOSPC */
    bool once;       /* remove the rule after it fired once */
} IOQInjectRule;

/*
 * Add a rule (at most IOQ_INJECT_MAX_RULES); false and @errp for a bad rule
 * or a full table. Context: IOQ thread (or any thread while the IOQ is not
 * bound and idle).
 */
bool ioq_inject_add(IOQ *ioq, const IOQInjectRule *rule, GError **errp);
/* Remove every rule. Context: as ioq_inject_add(). */
void ioq_inject_clear(IOQ *ioq);

#endif /* VBLK_IOQ_H */
