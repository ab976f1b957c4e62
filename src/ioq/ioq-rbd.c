/*
 * The "rbd" engine: a Ceph RBD image through librbd's aio calls.
 *
 * One cluster connection and one open image per IOQ, made in ioq_new().
 * Enqueued requests wait on a list and are issued in ioq_submit() as
 * rbd_aio_readv/writev/flush/discard/write_zeroes. librbd runs their
 * completion callbacks on its own threads: the callback stores the result
 * in the request, pushes the request onto a lock-free stack (a
 * compare-and-swap on its head; the link lives in IOQReqPriv) and, when the
 * stack was empty, writes the IOQ's completion eventfd. The IOQ thread's
 * reap takes the whole stack with one exchange, restores submission order
 * and completes the requests. So nothing here allocates or takes a lock per
 * request; librbd allocates its own completion record inside
 * rbd_aio_create_completion(), which cannot be reused through its C API.
 *
 * Several iovecs go straight to librbd (readv/writev): no bounce buffer.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <limits.h>
#include <rados/librados.h>
#include <rbd/librbd.h>
#include <stdio.h>
#include <unistd.h>

#include "ioq-internal.h"

#define RBD_CONNECT_TIMEOUT_S 10

typedef struct RbdEngine {
    IOQ *ioq;
    rados_t cluster;
    bool connected;
    rados_ioctx_t io;
    rbd_image_t image;
    IOQList queued;        /* enqueued, issued at the next submit */
    IOQReq *done;          /* finished on librbd's threads: a stack (priv.next) */
    IOQRemoteInfo info;
} RbdEngine;

/* priv.engine[0]: the rbd_completion_t while librbd has the request. */
#define REQ_COMP(req) ((req)->priv.engine[0])
/* priv.engine[1]: the engine, for the callback. */
#define REQ_ENGINE(req) ((req)->priv.engine[1])

/* Context: any thread (librbd's callback threads, or the IOQ thread on a refusal). */
static void push_done(RbdEngine *e, IOQReq *req, int ret)
{
    IOQReq *head = __atomic_load_n(&e->done, __ATOMIC_RELAXED);
    static const uint64_t one = 1;

    req->priv.ret = ret;
    do {
        req->priv.next = head;
    } while (!__atomic_compare_exchange_n(&e->done, &head, req, true, __ATOMIC_RELEASE,
                                          __ATOMIC_RELAXED));
    if (!head && write(e->ioq->efd, &one, sizeof(one)) < 0) {
        /* counter full: the IOQ thread is awake already */
    }
}

/* Context: a librbd thread. */
static void rbd_cb(rbd_completion_t c, void *arg)
{
    IOQReq *req = arg;
    RbdEngine *e = (RbdEngine *)(uintptr_t)REQ_ENGINE(req);
    ssize_t r = rbd_aio_get_return_value(c);

    rbd_aio_release(c);
    REQ_COMP(req) = 0;
    push_done(e, req, r < 0 ? (int)r : 0);
}

static void issue(RbdEngine *e, IOQReq *req)
{
    rbd_completion_t c;
    int r;

    REQ_ENGINE(req) = (uint64_t)(uintptr_t)e;
    if ((req->op == IOQ_OP_READ || req->op == IOQ_OP_WRITE) && req->len == 0) {
        push_done(e, req, 0); /* nothing to transfer (librbd refuses empty iovec arrays) */
        return;
    }
    r = rbd_aio_create_completion(req, rbd_cb, &c);
    if (r < 0) {
        push_done(e, req, r);
        return;
    }
    REQ_COMP(req) = (uint64_t)(uintptr_t)c;
    switch (req->op) {
    case IOQ_OP_READ:
        r = rbd_aio_readv(e->image, req->iov, req->niov, req->offset, c);
        break;
    case IOQ_OP_WRITE:
        r = rbd_aio_writev(e->image, req->iov, req->niov, req->offset, c);
        break;
    case IOQ_OP_FLUSH:
        r = rbd_aio_flush(e->image, c);
        break;
    case IOQ_OP_DISCARD:
        r = rbd_aio_discard(e->image, req->offset, req->len, c);
        break;
    case IOQ_OP_WRITE_ZEROES:
        /* librbd deallocates whole objects by itself; there is no "keep allocated" */
        r = rbd_aio_write_zeroes(e->image, req->offset, req->len, c, 0, 0);
        break;
    default:
        r = -EINVAL;
        break;
    }
    if (r < 0) {
        /* librbd refused it: the callback will not run */
        rbd_aio_release(c);
        REQ_COMP(req) = 0;
        push_done(e, req, r);
    }
}

static void rbd_engine_queue(IOQ *ioq, IOQReq *req)
{
    RbdEngine *e = ioq->engine_state;

    ioq_list_push(&e->queued, req);
}

static void rbd_engine_submit(IOQ *ioq)
{
    RbdEngine *e = ioq->engine_state;
    IOQReq *req;

    if (!e->queued.head) {
        return;
    }
    ioq_stat_add(&ioq->stats.batches, 1);
    while ((req = ioq_list_pop(&e->queued))) {
        ioq_stat_add(&ioq->stats.submitted, 1);
        issue(e, req);
    }
}

static unsigned rbd_engine_reap(IOQ *ioq)
{
    RbdEngine *e = ioq->engine_state;
    IOQReq *list = __atomic_exchange_n(&e->done, NULL, __ATOMIC_ACQUIRE);
    IOQReq *fifo = NULL;
    unsigned n = 0;

    /* the stack is newest first: reverse it so requests complete in the order they finished */
    while (list) {
        IOQReq *next = list->priv.next;

        list->priv.next = fifo;
        fifo = list;
        list = next;
    }
    while (fifo) {
        IOQReq *next = fifo->priv.next;

        ioq_complete(ioq, fifo, fifo->priv.ret);
        fifo = next;
        n++;
    }
    return n;
}

static bool rbd_engine_ready(IOQ *ioq)
{
    RbdEngine *e = ioq->engine_state;

    return __atomic_load_n(&e->done, __ATOMIC_ACQUIRE) != NULL;
}

static bool rbd_engine_supports(IOQ *ioq, IOQOp op)
{
    return true;
}

static bool rbd_engine_remote_info(IOQ *ioq, IOQRemoteInfo *info)
{
    *info = ((RbdEngine *)ioq->engine_state)->info;
    return true;
}

static bool rbd_engine_resize(IOQ *ioq, uint64_t size, GError **errp)
{
    RbdEngine *e = ioq->engine_state;
    int r = rbd_resize(e->image, size);

    if (r < 0) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(-r), "error resizing the image: %s",
                    g_strerror(-r));
        return false;
    }
    e->info.size = size;
    return true;
}

/* ---- setup ---- */

static void engine_free(RbdEngine *e)
{
    if (e->image) {
        rbd_close(e->image);
    }
    if (e->io) {
        rados_ioctx_destroy(e->io);
    }
    if (e->cluster) {
        rados_shutdown(e->cluster);
    }
    g_free(e);
}

static bool fail(GError **errp, int r, const char *fmt, const char *arg)
{
    g_autofree char *what = g_strdup_printf(fmt, arg);

    g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(-r), "%s: %s", what, g_strerror(-r));
    return false;
}

static bool connect_image(RbdEngine *e, const IOQRbdConfig *c, GError **errp)
{
    unsigned timeout = c->connect_timeout_s ? c->connect_timeout_s : RBD_CONNECT_TIMEOUT_S;
    char tbuf[32];
    rbd_image_info_t st;
    uint64_t size;
    int r;

    if (!c->pool || !*c->pool || !c->image || !*c->image) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_INVAL, "rbd engine: no pool or image given");
        return false;
    }
    r = rados_create(&e->cluster, c->user && *c->user ? c->user : NULL);
    if (r < 0) {
        e->cluster = NULL;
        return fail(errp, r, "error initializing the cluster handle (user '%s')",
                    c->user ? c->user : "admin");
    }
    r = rados_conf_read_file(e->cluster, c->conf && *c->conf ? c->conf : NULL);
    if (r < 0 && c->conf && *c->conf) {
        return fail(errp, r, "error reading conf file %s", c->conf);
    }
    /* a cluster that does not answer fails the open instead of hanging it */
    snprintf(tbuf, sizeof(tbuf), "%u", timeout);
    rados_conf_set(e->cluster, "client_mount_timeout", tbuf);
    rados_conf_set(e->cluster, "rados_mon_op_timeout", tbuf);
    if (c->op_timeout_s) {
        snprintf(tbuf, sizeof(tbuf), "%u", c->op_timeout_s);
        rados_conf_set(e->cluster, "rados_osd_op_timeout", tbuf);
    }
    for (unsigned i = 0; c->conf_kv && c->conf_kv[i] && c->conf_kv[i + 1]; i += 2) {
        r = rados_conf_set(e->cluster, c->conf_kv[i], c->conf_kv[i + 1]);
        if (r < 0) {
            return fail(errp, r, "error setting config option '%s'", c->conf_kv[i]);
        }
    }
    r = rados_connect(e->cluster);
    if (r < 0) {
        const char *hint = "";

        if (!c->conf || !*c->conf) {
            hint = " (no conf given)";
        } else if (r == -ENOENT) {
            /* librados found neither a keyring nor a key for the user */
            hint = " (no key for the user: name a keyring in the conf or give key-secret)";
        }
        return fail(errp, r, "error connecting to the cluster%s", hint);
    }
    e->connected = true;
    r = rados_ioctx_create(e->cluster, c->pool, &e->io);
    if (r < 0) {
        e->io = NULL;
        return fail(errp, r, "error opening pool %s", c->pool);
    }
    if (c->rbd_namespace && *c->rbd_namespace) {
        rados_ioctx_set_namespace(e->io, c->rbd_namespace);
    }
    r = rbd_open(e->io, c->image, &e->image, NULL);
    if (r < 0) {
        e->image = NULL;
        return fail(errp, r, "error opening image %s", c->image);
    }
    r = rbd_stat(e->image, &st, sizeof(st));
    if (r < 0) {
        return fail(errp, r, "error getting the size of image %s", c->image);
    }
    size = st.size;
    e->info = (IOQRemoteInfo){.size = size,
                              .can_flush = true,
                              .can_fua = false,
                              .can_trim = true,
                              .can_zero = true,
                              .min_block = 1,
                              .max_block = (uint64_t)SSIZE_MAX,
                              .object_size = st.obj_size};
    return true;
}

static bool rbd_engine_init(IOQ *ioq, GError **errp)
{
    RbdEngine *e = g_new0(RbdEngine, 1);

    e->ioq = ioq;
    if (!connect_image(e, ioq->rbd_cfg, errp)) {
        engine_free(e);
        return false;
    }
    ioq->engine_state = e;
    return true;
}

static void rbd_engine_cleanup(IOQ *ioq)
{
    RbdEngine *e = ioq->engine_state;

    /* ioq_free() drained first: librbd holds nothing of ours */
    rbd_engine_reap(ioq);
    engine_free(e);
}

const IOQEngine ioq_engine_rbd = {
    .name = "rbd",
    .init = rbd_engine_init,
    .cleanup = rbd_engine_cleanup,
    .supports = rbd_engine_supports,
    .queue = rbd_engine_queue,
    .submit = rbd_engine_submit,
    .reap = rbd_engine_reap,
    .ready = rbd_engine_ready,
    .remote_info = rbd_engine_remote_info,
    .resize = rbd_engine_resize,
};
