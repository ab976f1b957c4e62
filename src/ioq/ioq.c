/*
 * IOQ core: configuration, request validation, FLUSH ordering, the O_DIRECT
 * bounce pool and completion bookkeeping shared by every engine.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ioq-internal.h"
#include "util/iov.h"

#define IOQ_DEFAULT_DEPTH        128
#define IOQ_DEFAULT_BATCH        32
#define IOQ_DEFAULT_POOL         (4u << 20)
#define IOQ_BOUNCE_SLOT          (64u << 10)
#define IOQ_DEFAULT_DIRECT_ALIGN 4096

/* ---- bounce pool: fixed slots, first fit over a bitmap ---- */

static bool pool_init(IOQBouncePool *pool, size_t bytes, uint32_t align, GError **errp)
{
    void *base;
    int err;

    pool->slot_size = IOQ_BOUNCE_SLOT;
    pool->nslots = MAX(bytes / IOQ_BOUNCE_SLOT, 1);
    err = posix_memalign(&base, MAX(align, 4096), (size_t)pool->nslots * pool->slot_size);
    if (err) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(err),
                    "cannot allocate the %u KiB bounce pool: %s",
                    (unsigned)(pool->nslots * (pool->slot_size >> 10)), g_strerror(err));
        return false;
    }
    pool->base = base;
    pool->bitmap = g_new0(uint64_t, (pool->nslots + 63) / 64);
    return true;
}

static void pool_cleanup(IOQBouncePool *pool)
{
    free(pool->base);
    g_free(pool->bitmap);
}

static bool pool_slot_used(IOQBouncePool *pool, uint32_t i)
{
    return pool->bitmap[i / 64] & (1ull << (i % 64));
}

static void pool_mark(IOQBouncePool *pool, uint32_t first, uint32_t n, bool used)
{
    for (uint32_t i = first; i < first + n; i++) {
        if (used) {
            pool->bitmap[i / 64] |= 1ull << (i % 64);
        } else {
            pool->bitmap[i / 64] &= ~(1ull << (i % 64));
        }
    }
}

/* Returns the first slot of @n free consecutive slots, or -1. */
static int64_t pool_alloc(IOQBouncePool *pool, uint32_t n)
{
    uint32_t run = 0;

    for (uint32_t i = 0; i < pool->nslots; i++) {
        run = pool_slot_used(pool, i) ? 0 : run + 1;
        if (run == n) {
            pool_mark(pool, i + 1 - n, n, true);
            return i + 1 - n;
        }
    }
    return -1;
}

/* ---- request helpers ---- */

static bool op_modifies(IOQOp op)
{
    return op == IOQ_OP_WRITE || op == IOQ_OP_DISCARD || op == IOQ_OP_WRITE_ZEROES;
}

static bool req_is_rw(IOQReq *req)
{
    return req->op == IOQ_OP_READ || req->op == IOQ_OP_WRITE;
}

static bool req_needs_bounce(IOQ *ioq, IOQReq *req)
{
    uintptr_t mask = ioq->mem_align - 1;

    if (ioq->engine->contiguous) {
        return req_is_rw(req) && req->niov > 1;
    }
    if (!ioq->direct || !req_is_rw(req)) {
        return false;
    }
    for (int i = 0; i < req->niov; i++) {
        if (((uintptr_t)req->iov[i].iov_base | req->iov[i].iov_len) & mask) {
            return true;
        }
    }
    return false;
}

static int req_validate(IOQ *ioq, IOQReq *req)
{
    uint64_t total = 0;

    if (req->priv.state != IOQ_REQ_IDLE) {
        return -EBUSY;
    }
    if ((req->flags & ~IOQ_REQ_FUA) ||
        ((req->flags & IOQ_REQ_FUA) && req->op != IOQ_OP_WRITE && req->op != IOQ_OP_WRITE_ZEROES)) {
        return -EINVAL;
    }
    switch (req->op) {
    case IOQ_OP_READ:
    case IOQ_OP_WRITE:
        if (req->niov < 0 || req->niov > IOV_MAX || (req->niov && !req->iov)) {
            return -EINVAL;
        }
        for (int i = 0; i < req->niov; i++) {
            total += req->iov[i].iov_len;
        }
        if (total != req->len || req->len > SSIZE_MAX) {
            return -EINVAL;
        }
        break;
    case IOQ_OP_DISCARD:
    case IOQ_OP_WRITE_ZEROES:
        if (req->len == 0 || req->len > INT64_MAX) {
            return -EINVAL;
        }
        break;
    case IOQ_OP_FLUSH:
        return 0;
    default:
        return -EINVAL;
    }
    if (req->offset > INT64_MAX || req->len > INT64_MAX - req->offset) {
        return -EINVAL;
    }
    if (ioq->direct && ((req->offset | req->len) & (ioq->lbs - 1))) {
        return -EINVAL;
    }
    return 0;
}

/* Give @req to the engine, through the bounce pool or the helper as needed. */
static void ioq_dispatch(IOQ *ioq, IOQReq *req);

static bool req_take_bounce(IOQ *ioq, IOQReq *req)
{
    IOQBouncePool *pool = &ioq->pool;
    uint32_t n = MAX((req->len + pool->slot_size - 1) / pool->slot_size, 1);
    int64_t slot;

    /* FIFO: do not overtake requests already waiting for the pool. */
    if (ioq->bounce_wait.head && ioq->bounce_wait.head != req) {
        return false;
    }
    slot = pool_alloc(pool, n);
    if (slot < 0) {
        return false;
    }
    req->priv.bounce_slot = slot;
    req->priv.bounce_nslots = n;
    req->priv.bounce.iov_base = pool->base + (size_t)slot * pool->slot_size;
    req->priv.bounce.iov_len = req->len;
    if (req->op == IOQ_OP_WRITE) {
        size_t off = 0;
        for (int i = 0; i < req->niov; i++) {
            memcpy((uint8_t *)req->priv.bounce.iov_base + off, req->iov[i].iov_base,
                   req->iov[i].iov_len);
            off += req->iov[i].iov_len;
        }
    }
    /* The engine transfers through a copy of the descriptor it may trim. */
    req->priv.saved = req->priv.bounce;
    req->priv.cur_iov = &req->priv.saved;
    req->priv.cur_niov = 1;
    ioq_stat_add(&ioq->stats.bounces, 1);
    return true;
}

static void pool_release(IOQ *ioq, IOQReq *req)
{
    pool_mark(&ioq->pool, req->priv.bounce_slot, req->priv.bounce_nslots, false);
    req->priv.bounce.iov_base = NULL;
}

static void retry_bounce_waiters(IOQ *ioq)
{
    while (ioq->bounce_wait.head && req_take_bounce(ioq, ioq->bounce_wait.head)) {
        IOQReq *req = ioq_list_pop(&ioq->bounce_wait);
        ioq->engine->queue(ioq, req);
    }
}

/* ---- error injection ---- */

static bool inject_matches(const IOQInjectRule *r, const IOQReq *req)
{
    if (r->op >= 0 && r->op != (int)req->op) {
        return false;
    }
    if (r->length && req->op != IOQ_OP_FLUSH) {
        return req->offset < r->offset + r->length && r->offset < req->offset + req->len;
    }
    return true;
}

/* The errno a rule fails @req with, or 0. Every matching rule counts @req. */
static int inject_check(IOQ *ioq, const IOQReq *req)
{
    int fire = -1, err;

    for (unsigned i = 0; i < ioq->ninject; i++) {
        if (!inject_matches(&ioq->inject[i], req)) {
            continue;
        }
        ioq->inject_seen[i]++;
        if (fire < 0 && (!ioq->inject[i].nth || ioq->inject_seen[i] == ioq->inject[i].nth)) {
            fire = (int)i;
        }
    }
    if (fire < 0) {
        return 0;
    }
    err = ioq->inject[fire].error;
    if (ioq->inject[fire].once) {
        ioq->ninject--;
        memmove(&ioq->inject[fire], &ioq->inject[fire + 1],
                (ioq->ninject - (unsigned)fire) * sizeof(ioq->inject[0]));
        memmove(&ioq->inject_seen[fire], &ioq->inject_seen[fire + 1],
                (ioq->ninject - (unsigned)fire) * sizeof(ioq->inject_seen[0]));
    }
    ioq_stat_add(&ioq->stats.injected, 1);
    return err;
}

/*
 * Run the callbacks of the requests a rule failed, in the order they failed.
 * Callbacks may enqueue (and fail) more: the loop takes them too.
 */
static void ioq_complete_injected(IOQ *ioq)
{
    IOQReq *req;

    if (ioq->completing_injected) {
        return;
    }
    ioq->completing_injected = true;
    while ((req = ioq_list_pop(&ioq->injected))) {
        ioq_complete(ioq, req, req->priv.ret);
    }
    ioq->completing_injected = false;
}

static void ioq_dispatch(IOQ *ioq, IOQReq *req)
{
    if (ioq->ninject) {
        int err = inject_check(ioq, req);

        if (err) {
            static const uint64_t one = 1;

            req->priv.ret = -err;
            ioq_list_push(&ioq->injected, req);
            /* Wake the loop too, for a caller that does not submit right away. */
            if (!ioq->engine->own_fd && write(ioq->efd, &one, sizeof(one)) < 0) {
                /* counter full: the loop is awake already */
            }
            return;
        }
    }
    if (!req_is_rw(req) && ioq->helper &&
        (ioq->force_helper || !ioq->engine->supports(ioq, req->op))) {
        ioq_stat_add(&ioq->stats.helper_ops, 1);
        ioq_helper_queue(ioq->helper, req);
        return;
    }
    if (req_needs_bounce(ioq, req) && !req_take_bounce(ioq, req)) {
        /* Pool exhausted: wait for a completion to return slots. */
        ioq_list_push(&ioq->bounce_wait, req);
        return;
    }
    ioq->engine->queue(ioq, req);
}

/* ---- FLUSH ordering ---- */

static void wlist_append(IOQ *ioq, IOQReq *req)
{
    req->priv.seq = ++ioq->mod_seq;
    req->priv.wnext = NULL;
    req->priv.wprev = ioq->wlast;
    if (ioq->wlast) {
        ioq->wlast->priv.wnext = req;
    } else {
        ioq->wfirst = req;
    }
    ioq->wlast = req;
}

static void wlist_remove(IOQ *ioq, IOQReq *req)
{
    IOQReqPriv *p = &req->priv;

    if (p->wprev) {
        p->wprev->priv.wnext = p->wnext;
    } else {
        ioq->wfirst = p->wnext;
    }
    if (p->wnext) {
        p->wnext->priv.wprev = p->wprev;
    } else {
        ioq->wlast = p->wprev;
    }
}

/* A flush may go once every modifying request enqueued before it is done. */
static bool flush_ready(IOQ *ioq, IOQReq *flush)
{
    return !ioq->wfirst || ioq->wfirst->priv.seq > flush->priv.seq;
}

static void release_held_flushes(IOQ *ioq)
{
    while (ioq->held.head && flush_ready(ioq, ioq->held.head)) {
        ioq_dispatch(ioq, ioq_list_pop(&ioq->held));
    }
}

/* ---- public API ---- */

/* Context: IOQ thread. */
int ioq_enqueue(IOQ *ioq, IOQReq *req)
{
    IOQReqPriv *p = &req->priv;
    int ret;

    IOQ_ASSERT_THREAD(ioq);
    ret = req_validate(ioq, req);
    if (ret < 0) {
        return ret;
    }
    if (req_needs_bounce(ioq, req) && req->len > (uint64_t)ioq->pool.nslots * ioq->pool.slot_size) {
        return -EINVAL;
    }
    p->state = IOQ_REQ_ACTIVE;
    p->done = 0;
    p->cur_iov = req->iov;
    p->cur_niov = req->niov;
    p->saved_idx = -1;
    p->bounce.iov_base = NULL;
    p->ret = 0;
    ioq->inflight++;
    __atomic_store_n(&ioq->stats.inflight, ioq->inflight, __ATOMIC_RELAXED);

    if (op_modifies(req->op)) {
        wlist_append(ioq, req);
    } else if (req->op == IOQ_OP_FLUSH) {
        /* Barrier: the newest modifying request enqueued so far. */
        p->seq = ioq->mod_seq;
        if (!flush_ready(ioq, req) || ioq->held.head) {
            ioq_stat_add(&ioq->stats.held_flushes, 1);
            ioq_list_push(&ioq->held, req);
            return 0;
        }
    }
    ioq_dispatch(ioq, req);
    return 0;
}

/* Context: IOQ thread. */
void ioq_submit(IOQ *ioq)
{
    IOQ_ASSERT_THREAD(ioq);
    ioq->engine->submit(ioq);
    if (ioq->injected.head) {
        ioq_complete_injected(ioq);
    }
}

/* Context: IOQ thread. */
int ioq_get_fd(IOQ *ioq)
{
    IOQ_ASSERT_THREAD(ioq);
    return ioq->efd;
}

/* Context: any thread. */
bool ioq_fd_is_eventfd(const IOQ *ioq)
{
    return !ioq->engine->own_fd;
}

/* Context: IOQ thread. */
void ioq_clear_fd(IOQ *ioq)
{
    uint64_t cnt;

    IOQ_ASSERT_THREAD(ioq);
    /* EAGAIN: nothing was signalled; the reap that follows finds what there is. */
    if (ioq->engine->own_fd) {
        return;
    }
    ioq_stat_add(&ioq->stats.efd_reads, 1);
    if (read(ioq->efd, &cnt, sizeof(cnt)) < 0) {
        return;
    }
}

/* Context: IOQ thread. */
bool ioq_remote_resize(IOQ *ioq, uint64_t size, GError **errp)
{
    IOQ_ASSERT_THREAD(ioq);
    if (!ioq->engine->resize) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_NOSYS, "the %s engine cannot resize",
                    ioq->engine->name);
        return false;
    }
    return ioq->engine->resize(ioq, size, errp);
}

/* Context: IOQ thread. */
bool ioq_get_remote_info(IOQ *ioq, IOQRemoteInfo *info)
{
    IOQ_ASSERT_THREAD(ioq);
    return ioq->engine->remote_info && ioq->engine->remote_info(ioq, info);
}

/* Context: IOQ thread. */
unsigned ioq_inflight(IOQ *ioq)
{
    IOQ_ASSERT_THREAD(ioq);
    return ioq->inflight;
}

/* Context: IOQ thread. */
unsigned ioq_process_completions(IOQ *ioq)
{
    uint64_t before = ioq->stats.completed;

    IOQ_ASSERT_THREAD(ioq);
    ioq->engine->reap(ioq);
    if (ioq->helper) {
        ioq_helper_reap(ioq, ioq->helper);
    }
    /* Resubmissions, released flushes, FUA flushes, bounce waiters, EAGAIN leftovers. */
    ioq->engine->submit(ioq);
    if (ioq->injected.head) {
        ioq_complete_injected(ioq);
    }
    /* Callbacks, not reaped events: a FUA write's first half runs none. */
    return (unsigned)(ioq->stats.completed - before);
}

/* Context: IOQ thread. */
bool ioq_completions_ready(IOQ *ioq)
{
    IOQ_ASSERT_THREAD(ioq);
    return ioq->engine->ready(ioq) || (ioq->helper && ioq_helper_ready(ioq->helper));
}

static void req_restore_iov(IOQReq *req)
{
    IOQReqPriv *p = &req->priv;

    if (p->saved_idx >= 0) {
        req->iov[p->saved_idx] = p->saved;
        p->saved_idx = -1;
    }
}

/*
 * The write of an IOQ_REQ_FUA request succeeded: the same request becomes
 * its flush. Its barrier is its own write, already complete, so it goes to
 * the engine at once (submitted by the ioq_process_completions() or
 * ioq_submit() that is running).
 */
static void fua_start_flush(IOQ *ioq, IOQReq *req)
{
    IOQReqPriv *p = &req->priv;

    p->fua_op = (uint8_t)req->op;
    req->op = IOQ_OP_FLUSH;
    p->done = 0;
    p->cur_iov = NULL;
    p->cur_niov = 0;
    ioq_stat_add(&ioq->stats.fua_flushes, 1);
    ioq_dispatch(ioq, req);
}

/* Context: IOQ thread (engines). */
void ioq_complete(IOQ *ioq, IOQReq *req, int ret)
{
    IOQReqPriv *p = &req->priv;
    bool had_bounce = p->bounce.iov_base != NULL;
    bool fua = req->flags & IOQ_REQ_FUA;

    if (had_bounce) {
        if (req->op == IOQ_OP_READ && ret == 0) {
            size_t off = 0;
            for (int i = 0; i < req->niov; i++) {
                memcpy(req->iov[i].iov_base, (uint8_t *)p->bounce.iov_base + off,
                       req->iov[i].iov_len);
                off += req->iov[i].iov_len;
            }
        }
        pool_release(ioq, req);
    } else {
        req_restore_iov(req);
    }
    if (op_modifies(req->op)) {
        wlist_remove(ioq, req);
    }
    if (fua && req->op != IOQ_OP_FLUSH && ret == 0) {
        fua_start_flush(ioq, req);
        goto out;
    }
    if (fua && req->op == IOQ_OP_FLUSH) {
        req->op = p->fua_op; /* the caller sees its own request again */
    }
    p->state = IOQ_REQ_IDLE;
    ioq->inflight--;
    __atomic_store_n(&ioq->stats.inflight, ioq->inflight, __ATOMIC_RELAXED);
    ioq_stat_add(&ioq->stats.completed, 1);

    /* Last touch of @req before the callback: it may reuse the struct. */
    req->cb(req, ret);

out:
    /* Cheap when nothing waits: both lists are usually empty. */
    release_held_flushes(ioq);
    if (had_bounce) {
        retry_bounce_waiters(ioq);
    }
}

/* Zero everything from the current position to the end (short read at EOF). */
static void req_zero_rest(IOQReq *req)
{
    iov_memset(req->priv.cur_iov, req->priv.cur_niov, 0, 0, SIZE_MAX);
}

/* Move the transfer position forward by @n bytes, trimming one iovec in place. */
static void req_advance(IOQReq *req, size_t n)
{
    IOQReqPriv *p = &req->priv;
    unsigned cnt = p->cur_niov;
    IOVDiscardUndo u;

    p->done += n;
    iov_discard_front_undoable(&p->cur_iov, &cnt, n, &u);
    p->cur_niov = cnt;
    if (u.modified && p->bounce.iov_base == NULL &&
        (p->saved_idx < 0 || req->iov + p->saved_idx != u.modified)) {
        /* Caller-owned array: remember the entry, restored at completion. */
        req_restore_iov(req);
        p->saved_idx = u.modified - req->iov;
        p->saved = u.orig;
    }
}

/* Context: IOQ thread (engines). */
bool ioq_complete_rw(IOQ *ioq, IOQReq *req, long res, bool resubmit_short)
{
    uint64_t remaining = req->len - req->priv.done;

    if (res < 0) {
        ioq_complete(ioq, req, (int)res);
        return true;
    }
    if ((uint64_t)res >= remaining) {
        ioq_complete(ioq, req, 0);
        return true;
    }
    if (req->op == IOQ_OP_WRITE) {
        /* A short write means the disk is full (QEMU reports ENOSPC too). */
        ioq_complete(ioq, req, -ENOSPC);
        return true;
    }
    req_advance(req, res);
    if (res > 0 && resubmit_short) {
        ioq_stat_add(&ioq->stats.retries, 1);
        return false;
    }
    /* End of file: the rest of the disk reads as zeroes. */
    req_zero_rest(req);
    ioq_complete(ioq, req, 0);
    return true;
}

/* Context: IOQ thread. */
void ioq_drain(IOQ *ioq)
{
    IOQ_ASSERT_THREAD(ioq);
    while (ioq->inflight) {
        struct pollfd pfd = {.fd = ioq->efd, .events = POLLIN};
        uint64_t cnt;

        ioq->engine->submit(ioq);
        if (ioq_process_completions(ioq) || !ioq->inflight) {
            continue;
        }
        /* Bounded wait: completions always signal efd, the timeout is a guard. */
        if (poll(&pfd, 1, 1000) > 0 && read(ioq->efd, &cnt, sizeof(cnt)) < 0) {
            /* EAGAIN: someone else consumed it; the reap finds the events. */
        }
    }
}

/* ---- creation ---- */

static const IOQEngine *engine_lookup(const char *name)
{
    if (!name || !strcmp(name, "native") || !strcmp(name, "aio")) {
        return &ioq_engine_aio;
    }
    if (!strcmp(name, "io_uring")) {
        return &ioq_engine_uring;
    }
    if (!strcmp(name, "null")) {
        return &ioq_engine_null;
    }
    if (!strcmp(name, "nbd")) {
        return &ioq_engine_nbd;
    }
#ifdef VBLK_HAVE_RBD
    if (!strcmp(name, "rbd")) {
        return &ioq_engine_rbd;
    }
#endif
    return NULL;
}

/* An engine with no file of its own: it needs no fd and no helper thread. */
static bool engine_is_remote(const IOQEngine *engine)
{
#ifdef VBLK_HAVE_RBD
    if (engine == &ioq_engine_rbd) {
        return true;
    }
#endif
    return engine == &ioq_engine_null || engine == &ioq_engine_nbd;
}

/* Context: any thread */
bool ioq_have_rbd(void)
{
#ifdef VBLK_HAVE_RBD
    return true;
#else
    return false;
#endif
}

static void ioq_probe_alignment(IOQ *ioq, const IOQConfig *cfg)
{
    uint32_t mem = cfg->mem_align;
    uint32_t off = 0;

#ifdef STATX_DIOALIGN
    struct statx stx;
    if (statx(ioq->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
        (stx.stx_mask & STATX_DIOALIGN)) {
        mem = mem ? mem : stx.stx_dio_mem_align;
        off = stx.stx_dio_offset_align;
    }
#endif
    ioq->mem_align = mem ? mem : IOQ_DEFAULT_DIRECT_ALIGN;
    ioq->lbs = cfg->logical_block_size ? cfg->logical_block_size : MAX(off, 512);
    if (!ioq->direct) {
        ioq->mem_align = 1;
    }
}

static bool ioq_check_config(IOQ *ioq, GError **errp)
{
    if (ioq->lbs & (ioq->lbs - 1) || ioq->mem_align & (ioq->mem_align - 1)) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                    "block size %u and memory alignment %u must be powers of two", ioq->lbs,
                    ioq->mem_align);
        return false;
    }
    if (!engine_is_remote(ioq->engine) && ioq->fd < 0) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_BADF, "engine '%s' needs an open file",
                    ioq->engine->name);
        return false;
    }
    return true;
}

/* Context: control thread. */
IOQ *ioq_new(const IOQConfig *cfg, GError **errp)
{
    const IOQEngine *engine = engine_lookup(cfg->engine);
    IOQ *ioq;

    if (!engine && cfg->engine && !strcmp(cfg->engine, "rbd")) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_NOSYS, "rbd support not compiled in");
        return NULL;
    }
    if (!engine) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_INVAL,
                    "unknown I/O engine '%s' (expected native, io_uring, null, nbd or rbd)", cfg->engine);
        return NULL;
    }
    ioq = g_new0(IOQ, 1);
    ioq->engine = engine;
    ioq->fd = cfg->fd;
    ioq->depth = cfg->queue_depth ? cfg->queue_depth : IOQ_DEFAULT_DEPTH;
    ioq->max_batch = cfg->max_batch ? cfg->max_batch : IOQ_DEFAULT_BATCH;
    ioq->max_batch = MIN(ioq->max_batch, ioq->depth);
    ioq->submit_early = cfg->submit_early;
    ioq->direct = cfg->direct;
    ioq->read_zeroes = cfg->null_read_zeroes;
    ioq->force_helper = cfg->force_helper;
    ioq->aio_max_events = cfg->aio_max_events ? cfg->aio_max_events : ioq->depth;
    ioq->efd = -1;
    ioq->nbd_cfg = &cfg->nbd;
    ioq->rbd_cfg = &cfg->rbd;
    ioq_probe_alignment(ioq, cfg);

    if (!ioq_check_config(ioq, errp)) {
        goto fail;
    }
    ioq->efd = engine->own_fd ? -1 : eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (!engine->own_fd && ioq->efd < 0) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(errno),
                    "cannot create the completion eventfd: %s", g_strerror(errno));
        goto fail;
    }
    if ((ioq->direct || engine->contiguous) &&
        !pool_init(&ioq->pool, cfg->bounce_pool_size ? cfg->bounce_pool_size : IOQ_DEFAULT_POOL,
                   ioq->mem_align, errp)) {
        goto fail;
    }
    if (!engine->init(ioq, errp)) {
        goto fail;
    }
    ioq->nbd_cfg = NULL;
    ioq->rbd_cfg = NULL;
    if (!engine_is_remote(engine)) {
        ioq->helper = ioq_helper_new(ioq, errp);
        if (!ioq->helper) {
            engine->cleanup(ioq);
            goto fail;
        }
    }
    return ioq;

fail:
    pool_cleanup(&ioq->pool);
    if (ioq->efd >= 0) {
        close(ioq->efd);
    }
    g_free(ioq);
    return NULL;
}

/* Context: IOQ thread. */
void ioq_free(IOQ *ioq)
{
    if (!ioq) {
        return;
    }
    IOQ_ASSERT_THREAD(ioq);
    ioq_drain(ioq);
    ioq_helper_free(ioq->helper);
    ioq->engine->cleanup(ioq);
    pool_cleanup(&ioq->pool);
    close(ioq->efd);
    g_free(ioq);
}

/* Context: the thread taking the IOQ over. */
void ioq_bind_thread(IOQ *ioq)
{
    thread_owner_set(&ioq->owner);
}

/* Context: IOQ thread. */
void ioq_unbind_thread(IOQ *ioq)
{
    IOQ_ASSERT_THREAD(ioq);
    thread_owner_clear(&ioq->owner);
}

/* Context: any thread. */
void ioq_get_stats(IOQ *ioq, IOQStats *s)
{
    s->submitted = __atomic_load_n(&ioq->stats.submitted, __ATOMIC_RELAXED);
    s->completed = __atomic_load_n(&ioq->stats.completed, __ATOMIC_RELAXED);
    s->batches = __atomic_load_n(&ioq->stats.batches, __ATOMIC_RELAXED);
    s->retries = __atomic_load_n(&ioq->stats.retries, __ATOMIC_RELAXED);
    s->bounces = __atomic_load_n(&ioq->stats.bounces, __ATOMIC_RELAXED);
    s->held_flushes = __atomic_load_n(&ioq->stats.held_flushes, __ATOMIC_RELAXED);
    s->helper_ops = __atomic_load_n(&ioq->stats.helper_ops, __ATOMIC_RELAXED);
    s->inflight = __atomic_load_n(&ioq->stats.inflight, __ATOMIC_RELAXED);
    s->fua_flushes = __atomic_load_n(&ioq->stats.fua_flushes, __ATOMIC_RELAXED);
    s->efd_reads = __atomic_load_n(&ioq->stats.efd_reads, __ATOMIC_RELAXED);
    s->injected = __atomic_load_n(&ioq->stats.injected, __ATOMIC_RELAXED);
}

/* Context: IOQ thread (or any thread while unbound and idle). */
bool ioq_inject_add(IOQ *ioq, const IOQInjectRule *rule, GError **errp)
{
    if (rule->error <= 0 || rule->error > 4095 || rule->op < -1 ||
        rule->op > (int)IOQ_OP_WRITE_ZEROES) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_INVAL, "invalid injection rule");
        return false;
    }
    if (ioq->ninject == IOQ_INJECT_MAX_RULES) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_NOSPC, "at most %u injection rules",
                    IOQ_INJECT_MAX_RULES);
        return false;
    }
    ioq->inject[ioq->ninject] = *rule;
    ioq->inject_seen[ioq->ninject] = 0;
    ioq->ninject++;
    return true;
}

/* Context: as ioq_inject_add(). */
void ioq_inject_clear(IOQ *ioq)
{
    ioq->ninject = 0;
}
