/*
 * IOQ internals shared by the engine-neutral core (ioq.c), the helper thread
 * (ioq-helper.c) and the engines (ioq-aio.c, ioq-uring.c, ioq-null.c,
 * ioq-nbd.c, ioq-rbd.c).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef DATAPLANE_IOQ_INTERNAL_H
#define DATAPLANE_IOQ_INTERNAL_H

#include "ioq/ioq.h"
#include "util/thread-check.h"

enum {
    IOQ_REQ_IDLE = 0, /* owned by the caller */
    IOQ_REQ_ACTIVE,   /* accepted; callback pending */
};

typedef struct IOQList {
    IOQReq *head;
    IOQReq *tail;
    unsigned len;
} IOQList;

typedef struct IOQHelper IOQHelper;

typedef struct IOQEngine {
    const char *name;
    bool (*init)(IOQ *ioq, GError **errp);
    void (*cleanup)(IOQ *ioq);
    /* Can the engine run @op itself?  If not, the helper thread does. */
    bool (*supports)(IOQ *ioq, IOQOp op);
    /* Prepare @req (already aligned / bounced / released); no syscall unless
     * max_batch requests are now queued. */
    void (*queue)(IOQ *ioq, IOQReq *req);
    /* Hand prepared requests to the kernel. */
    void (*submit)(IOQ *ioq);
    /* Reap ready completions without blocking; returns how many callbacks ran. */
    unsigned (*reap)(IOQ *ioq);
    /* Are completions waiting?  No syscall (for busy polling). */
    bool (*ready)(IOQ *ioq);
    /* Optional: the server's view of the disk (remote engines). */
    bool (*remote_info)(IOQ *ioq, IOQRemoteInfo *info);
    /* Optional: resize the remote disk (drained, synchronous). */
    bool (*resize)(IOQ *ioq, uint64_t size, GError **errp);
    /* init() makes ioq->efd itself (not an eventfd: ioq_clear_fd() skips it). */
    bool own_fd;
    /* One buffer per request: several iovecs go through the bounce pool. */
    bool contiguous;
} IOQEngine;

typedef struct IOQBouncePool {
    uint8_t *base;
    size_t slot_size;
    uint32_t nslots;
    uint64_t *bitmap; /* bit set = slot in use */
} IOQBouncePool;

struct IOQ {
    const IOQEngine *engine;
    void *engine_state;
    int fd;
    int efd; /* completion eventfd */
    unsigned depth;
    unsigned max_batch;
    unsigned submit_early;
    bool direct;
    bool read_zeroes;
    bool force_helper;
    unsigned aio_max_events;
    uint32_t lbs;
    uint32_t mem_align;

    /* FLUSH ordering: modifying requests in flight, oldest first. */
    uint64_t mod_seq;
    IOQReq *wfirst;
    IOQReq *wlast;
    IOQList held; /* flushes waiting for wfirst->priv.seq > their barrier */

    IOQBouncePool pool;
    IOQList bounce_wait; /* requests waiting for bounce slots */

    /* Error injection (ioq_inject_add): rules, and the requests they failed. */
    IOQInjectRule inject[IOQ_INJECT_MAX_RULES];
    uint64_t inject_seen[IOQ_INJECT_MAX_RULES];
    unsigned ninject;
    IOQList injected;        /* failed by a rule, callback not yet run */
    bool completing_injected; /* ioq_complete_injected() is running */

    IOQHelper *helper;
    const IOQNbdConfig *nbd_cfg; /* the caller's, during ioq_new() only */
    const IOQRbdConfig *rbd_cfg; /* the caller's, during ioq_new() only */
    unsigned inflight;
    IOQStats stats;
    ThreadOwner owner; /* the IOQ thread, between ioq_bind_thread and ioq_unbind_thread */
};

/* Every "Context: IOQ thread" entry point (compiled out with NDEBUG). */
#define IOQ_ASSERT_THREAD(ioq) THREAD_OWNER_ASSERT(&(ioq)->owner)

static inline void ioq_list_push(IOQList *l, IOQReq *req)
{
    req->priv.next = NULL;
    if (l->tail) {
        l->tail->priv.next = req;
    } else {
        l->head = req;
    }
    l->tail = req;
    l->len++;
}

static inline IOQReq *ioq_list_pop(IOQList *l)
{
    IOQReq *req = l->head;

    if (req) {
        l->head = req->priv.next;
        if (!l->head) {
            l->tail = NULL;
        }
        l->len--;
    }
    return req;
}

/* Counters have one writer (the IOQ thread): relaxed load + store. */
static inline void ioq_stat_add(uint64_t *counter, uint64_t n)
{
    __atomic_store_n(counter, __atomic_load_n(counter, __ATOMIC_RELAXED) + n, __ATOMIC_RELAXED);
}

/* Finish @req with @ret (0 / -errno): undo engine state, run the callback. */
void ioq_complete(IOQ *ioq, IOQReq *req, int ret);
/*
 * A READ/WRITE returned @res (bytes or -errno).  Returns true if the request
 * is finished (it was completed); false if the caller must resubmit the rest
 * (only when @resubmit_short is true, for short reads).
 */
bool ioq_complete_rw(IOQ *ioq, IOQReq *req, long res, bool resubmit_short);

IOQHelper *ioq_helper_new(IOQ *ioq, GError **errp);
void ioq_helper_free(IOQHelper *h);
void ioq_helper_queue(IOQHelper *h, IOQReq *req);
unsigned ioq_helper_reap(IOQ *ioq, IOQHelper *h);
bool ioq_helper_ready(IOQHelper *h);

extern const IOQEngine ioq_engine_aio;
extern const IOQEngine ioq_engine_uring;
extern const IOQEngine ioq_engine_null;
extern const IOQEngine ioq_engine_nbd;
#ifdef VBLK_HAVE_RBD
extern const IOQEngine ioq_engine_rbd;
#endif

#endif /* DATAPLANE_IOQ_INTERNAL_H */
