/*
 * The "nbd" engine: a remote disk through libnbd's asynchronous API.
 *
 * One connection per IOQ. Requests are queued by ioq_enqueue() and issued
 * in ioq_submit() as nbd_aio_pread/pwrite/flush/trim/zero commands; libnbd
 * writes them to the socket as far as it can without blocking. The
 * connection's fd is watched in an epoll set of the engine's own, in the
 * direction nbd_aio_get_direction() asks for, next to a reconnect timerfd
 * and a wake-up eventfd; that epoll fd is ioq_get_fd(), so the IOQ thread's
 * loop sees one readable fd whatever the connection wants and whichever
 * connection is current. ioq_process_completions() tells libnbd what is
 * ready (nbd_aio_notify_read/write) and runs the callbacks of the commands
 * that finished.
 *
 * libnbd's completion callbacks run with the handle's lock held and must not
 * call libnbd: they only store the result in the request and put it on the
 * done list, which the reap empties. Nothing here allocates per request (a
 * request's links live in IOQReqPriv; libnbd keeps its own command record).
 *
 * Connection loss (the server died, or sent something libnbd refuses): the
 * handle is closed, the requests it still held and those issued afterwards
 * wait on a list while a new connection is attempted (first at once, then
 * with a growing pause up to 1 s); a new connection to an export of another
 * size is refused. Once reconnect_delay_s has passed since the loss, the
 * waiting requests and any new ones fail with -EIO, and attempts go on.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <libnbd.h>
#include <limits.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "ioq-internal.h"

#define NBD_DEFAULT_PORT       "10809"
#define NBD_CONNECT_TIMEOUT_MS 10000
#define NBD_MAX_REQUEST        (32u << 20) /* libnbd refuses payloads over 64 MiB */
#define NBD_BACKOFF_FIRST_MS   50
#define NBD_BACKOFF_MAX_MS     1000
#define NBD_READS_PER_REAP     64
#define NBD_RET_PENDING        INT_MIN /* priv.ret while libnbd has the command */

/* epoll_event.data.u32 of the three fds in the engine's set. */
enum { NBD_EV_SOCK = 1, NBD_EV_TIMER, NBD_EV_WAKE };

typedef struct NbdEngine {
    IOQ *ioq;
    IOQNbdConfig cfg; /* strings owned */
    struct nbd_handle *h;
    bool connected;   /* h finished its handshake */
    int sock;         /* h's fd in the epoll set, or -1 */
    uint32_t sock_ev; /* its registered events */
    int tfd;          /* reconnect timer */
    int wfd;          /* wake-up: the done list filled outside a reap */
    bool woken;
    int64_t lost_ns; /* when the connection was lost (0: not lost) */
    int64_t attempt_ns; /* when the current reconnect attempt started */
    unsigned backoff_ms;
    IOQList queued;  /* enqueued, issued at the next submit */
    IOQList waiting; /* issued while disconnected: for the next connection */
    IOQList done;    /* finished, priv.ret holds the result */
    IOQReq *issued;  /* with libnbd (links in priv.engine[0..1]) */
    IOQRemoteInfo info;
    uint64_t reconnects;
} NbdEngine;

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* ---- the issued list: doubly linked through priv.engine ---- */

#define ISS_PREV(r) (*(IOQReq **)&(r)->priv.engine[0])
#define ISS_NEXT(r) (*(IOQReq **)&(r)->priv.engine[1])

static void issued_add(NbdEngine *e, IOQReq *req)
{
    ISS_PREV(req) = NULL;
    ISS_NEXT(req) = e->issued;
    if (e->issued) {
        ISS_PREV(e->issued) = req;
    }
    e->issued = req;
}

static void issued_remove(NbdEngine *e, IOQReq *req)
{
    if (ISS_PREV(req)) {
        ISS_NEXT(ISS_PREV(req)) = ISS_NEXT(req);
    } else {
        e->issued = ISS_NEXT(req);
    }
    if (ISS_NEXT(req)) {
        ISS_PREV(ISS_NEXT(req)) = ISS_PREV(req);
    }
}

/* ---- fd bookkeeping ---- */

static void wake(NbdEngine *e)
{
    uint64_t one = 1;

    if (!e->woken && write(e->wfd, &one, sizeof(one)) == sizeof(one)) {
        e->woken = true;
    }
}

static void finish(NbdEngine *e, IOQReq *req, int ret)
{
    req->priv.ret = ret;
    ioq_list_push(&e->done, req);
}

/* Watch h's fd in the direction libnbd wants (none once it is dead). */
static void update_watch(NbdEngine *e)
{
    int fd = e->h ? nbd_aio_get_fd(e->h) : -1;
    uint32_t ev = 0;

    if (fd >= 0) {
        unsigned dir = nbd_aio_get_direction(e->h);

        ev = (dir & LIBNBD_AIO_DIRECTION_READ ? EPOLLIN : 0) |
             (dir & LIBNBD_AIO_DIRECTION_WRITE ? EPOLLOUT : 0);
    }
    if (fd != e->sock) {
        if (e->sock >= 0) {
            epoll_ctl(e->ioq->efd, EPOLL_CTL_DEL, e->sock, NULL);
        }
        e->sock = -1;
        if (fd >= 0) {
            struct epoll_event ee = {.events = ev, .data.u32 = NBD_EV_SOCK};

            if (epoll_ctl(e->ioq->efd, EPOLL_CTL_ADD, fd, &ee) == 0) {
                e->sock = fd;
                e->sock_ev = ev;
            }
        }
    } else if (fd >= 0 && ev != e->sock_ev) {
        struct epoll_event ee = {.events = ev, .data.u32 = NBD_EV_SOCK};

        if (epoll_ctl(e->ioq->efd, EPOLL_CTL_MOD, fd, &ee) == 0) {
            e->sock_ev = ev;
        }
    }
}

static void arm_timer(NbdEngine *e, unsigned ms)
{
    struct itimerspec its = {.it_value = {.tv_sec = ms / 1000, .tv_nsec = (ms % 1000) * 1000000L}};

    if (!ms) {
        its.it_value.tv_nsec = 1;
    }
    timerfd_settime(e->tfd, 0, &its, NULL);
}

/* ---- connection ---- */

static struct nbd_handle *start_connect(NbdEngine *e)
{
    struct nbd_handle *h = nbd_create();

    if (!h) {
        return NULL;
    }
    /* Requests fail with an error anyway; no need to zero the guest's buffer first. */
    if (nbd_set_export_name(h, e->cfg.export_name) < 0 || nbd_set_pread_initialize(h, false) < 0 ||
        (e->cfg.socket ? nbd_aio_connect_unix(h, e->cfg.socket)
                       : nbd_aio_connect_tcp(h, e->cfg.host, e->cfg.port)) < 0) {
        nbd_close(h);
        return NULL;
    }
    return h;
}

static bool read_info(struct nbd_handle *h, IOQRemoteInfo *info)
{
    int64_t size = nbd_get_size(h);
    int64_t minb = nbd_get_block_size(h, LIBNBD_SIZE_MINIMUM);
    int64_t maxb = nbd_get_block_size(h, LIBNBD_SIZE_MAXIMUM);

    if (size < 0) {
        return false;
    }
    *info = (IOQRemoteInfo){
        .size = (uint64_t)size,
        .read_only = nbd_is_read_only(h) == 1,
        .can_flush = nbd_can_flush(h) == 1,
        .can_fua = nbd_can_fua(h) == 1,
        .can_trim = nbd_can_trim(h) == 1,
        .can_zero = nbd_can_zero(h) == 1,
        .min_block = minb > 0 && minb <= 65536 && !(minb & (minb - 1)) ? (uint32_t)minb : 1,
        .max_block = maxb > 0 && maxb < NBD_MAX_REQUEST ? (uint64_t)maxb : NBD_MAX_REQUEST,
    };
    return true;
}

/* Forget the current handle; libnbd finishes what it still held first. */
static void drop_handle(NbdEngine *e)
{
    if (!e->h) {
        return;
    }
    if (e->sock >= 0) {
        epoll_ctl(e->ioq->efd, EPOLL_CTL_DEL, e->sock, NULL);
        e->sock = -1;
    }
    nbd_close(e->h);
    e->h = NULL;
    e->connected = false;
    /* Commands libnbd dropped without a callback: they were never answered. */
    while (e->issued) {
        IOQReq *req = e->issued;

        issued_remove(e, req);
        finish(e, req, -ENOTCONN);
    }
}

static bool in_reconnect_window(NbdEngine *e)
{
    return e->lost_ns &&
           (uint64_t)(now_ns() - e->lost_ns) < e->cfg.reconnect_delay_s * 1000000000ull;
}

static void connection_lost(NbdEngine *e)
{
    drop_handle(e);
    if (!e->lost_ns) {
        e->lost_ns = now_ns();
        e->backoff_ms = 0;
        arm_timer(e, 0);
    }
}

static void fail_waiting(NbdEngine *e, int ret)
{
    IOQReq *req;

    while ((req = ioq_list_pop(&e->waiting))) {
        finish(e, req, ret);
    }
}

static void issue(NbdEngine *e, IOQReq *req);

/* A new handle finished its handshake (or died trying). */
static void check_connecting(NbdEngine *e)
{
    IOQRemoteInfo info;
    IOQReq *req;

    if (!e->h || e->connected) {
        return;
    }
    if (nbd_aio_is_ready(e->h)) {
        if (!read_info(e->h, &info) || info.size != e->info.size) {
            /* Another disk behind the same name: refuse it, as QEMU does. */
            drop_handle(e);
            return;
        }
        e->connected = true;
        e->lost_ns = 0;
        e->reconnects++;
        timerfd_settime(e->tfd, 0, &(struct itimerspec){0}, NULL);
        IOQList w = e->waiting;

        e->waiting = (IOQList){0};
        while ((req = ioq_list_pop(&w))) {
            issue(e, req);
        }
    } else if (nbd_aio_is_dead(e->h) || nbd_aio_is_closed(e->h)) {
        drop_handle(e);
    }
}

/* The reconnect timer: give up on waiting requests after the delay, try again. */
static void reconnect_tick(NbdEngine *e)
{
    uint64_t cnt;

    if (read(e->tfd, &cnt, sizeof(cnt)) < 0 || e->connected) {
        return;
    }
    if (!in_reconnect_window(e)) {
        fail_waiting(e, -EIO);
    }
    if (e->h && now_ns() - e->attempt_ns > (int64_t)NBD_CONNECT_TIMEOUT_MS * 1000000) {
        drop_handle(e); /* a server that accepts and says nothing */
    }
    if (!e->h) {
        e->h = start_connect(e);
        e->attempt_ns = now_ns();
    }
    e->backoff_ms = MIN(MAX(e->backoff_ms * 2, NBD_BACKOFF_FIRST_MS), NBD_BACKOFF_MAX_MS);
    arm_timer(e, e->backoff_ms);
}

/* ---- requests ---- */

/* libnbd's completion callback: lock held, so only record the result. */
static int cmd_done(void *opaque, int *error)
{
    IOQReq *req = opaque;

    req->priv.ret = *error ? -*error : 0;
    return 1; /* retire the command */
}

static void issue(NbdEngine *e, IOQReq *req)
{
    IOQReqPriv *p = &req->priv;
    nbd_completion_callback cb = {.callback = cmd_done, .user_data = req};
    void *buf = p->cur_niov ? p->cur_iov[0].iov_base : NULL;
    int64_t cookie = -1;
    int err;

    if (!e->connected) {
        if (in_reconnect_window(e)) {
            ioq_list_push(&e->waiting, req);
        } else {
            finish(e, req, -EIO);
        }
        return;
    }
    switch (req->op) {
    case IOQ_OP_READ:
    case IOQ_OP_WRITE:
        if (req->len == 0) {
            finish(e, req, 0);
            return;
        }
        if (req->len > e->info.max_block || !buf) {
            finish(e, req, -EINVAL);
            return;
        }
        break;
    case IOQ_OP_FLUSH:
        if (!e->info.can_flush) {
            finish(e, req, 0);
            return;
        }
        break;
    case IOQ_OP_DISCARD:
        if (!e->info.can_trim) {
            finish(e, req, 0); /* advisory */
            return;
        }
        /* fall through */
    case IOQ_OP_WRITE_ZEROES:
        if (req->len > UINT32_MAX) {
            finish(e, req, -EINVAL); /* NBD lengths are 32-bit */
            return;
        }
        if (req->op == IOQ_OP_WRITE_ZEROES && !e->info.can_zero) {
            finish(e, req, -ENOTSUP);
            return;
        }
        break;
    }
    p->ret = NBD_RET_PENDING;
    issued_add(e, req);
    switch (req->op) {
    case IOQ_OP_READ:
        cookie = nbd_aio_pread(e->h, buf, req->len, req->offset, cb, 0);
        break;
    case IOQ_OP_WRITE:
        cookie = nbd_aio_pwrite(e->h, buf, req->len, req->offset, cb, 0);
        break;
    case IOQ_OP_FLUSH:
        cookie = nbd_aio_flush(e->h, cb, 0);
        break;
    case IOQ_OP_DISCARD:
        cookie = nbd_aio_trim(e->h, req->len, req->offset, cb, 0);
        break;
    case IOQ_OP_WRITE_ZEROES:
        cookie = nbd_aio_zero(e->h, req->len, req->offset, cb,
                              req->may_unmap ? 0 : LIBNBD_CMD_FLAG_NO_HOLE);
        break;
    }
    if (cookie >= 0) {
        ioq_stat_add(&e->ioq->stats.submitted, 1);
        return;
    }
    err = nbd_get_errno();
    if (p->ret == NBD_RET_PENDING) {
        issued_remove(e, req);
        if (nbd_aio_is_dead(e->h) || nbd_aio_is_closed(e->h)) {
            connection_lost(e); /* issue() again once connected, or -EIO */
            issue(e, req);
            return;
        }
        finish(e, req, err > 0 ? -err : -EIO);
    }
    /* else: libnbd already ran the callback; the reap finds it */
}

/* Move requests whose callback ran from the issued list to the done list. */
static void collect_done(NbdEngine *e)
{
    IOQReq *req = e->issued;

    while (req) {
        IOQReq *next = ISS_NEXT(req);

        if (req->priv.ret != NBD_RET_PENDING) {
            issued_remove(e, req);
            ioq_list_push(&e->done, req);
        }
        req = next;
    }
}

/* Run the callbacks of finished requests; failures of a lost connection may wait for the next. */
static unsigned complete_done(NbdEngine *e)
{
    IOQList list = e->done;
    unsigned n = 0;
    IOQReq *req;

    e->done = (IOQList){0};
    while ((req = ioq_list_pop(&list))) {
        int ret = req->priv.ret;

        if (ret < 0 && !e->connected && e->lost_ns && ret != -EINVAL && ret != -ENOTSUP) {
            if (in_reconnect_window(e)) {
                ioq_list_push(&e->waiting, req);
                continue;
            }
            ret = -EIO;
        }
        ioq_complete(e->ioq, req, ret);
        n++;
    }
    return n;
}

static void nbd_engine_queue(IOQ *ioq, IOQReq *req)
{
    NbdEngine *e = ioq->engine_state;

    ioq_list_push(&e->queued, req);
}

static void nbd_engine_submit(IOQ *ioq)
{
    NbdEngine *e = ioq->engine_state;
    IOQReq *req;

    if (!e->queued.head) {
        return;
    }
    ioq_stat_add(&ioq->stats.batches, 1);
    while ((req = ioq_list_pop(&e->queued))) {
        issue(e, req);
    }
    collect_done(e);
    update_watch(e);
    if (e->done.head) {
        wake(e); /* refused at once: completed by the next reap */
    }
}

static unsigned nbd_engine_reap(IOQ *ioq)
{
    NbdEngine *e = ioq->engine_state;
    struct epoll_event evs[3];
    int n = epoll_wait(ioq->efd, evs, G_N_ELEMENTS(evs), 0);

    for (int i = 0; i < n; i++) {
        uint32_t ev = evs[i].events;

        switch (evs[i].data.u32) {
        case NBD_EV_WAKE: {
            uint64_t cnt;

            if (read(e->wfd, &cnt, sizeof(cnt)) < 0) {
                /* EAGAIN: already cleared */
            }
            e->woken = false;
            break;
        }
        case NBD_EV_TIMER:
            reconnect_tick(e);
            break;
        case NBD_EV_SOCK:
            if (!e->h) {
                break;
            }
            /*
             * Hang-up and errors too: libnbd finds out what happened by
             * reading. One call handles one reply: go on while the socket
             * stays readable (bounded), so that a burst completes in one
             * pass. Never without data: libnbd would then wait in the
             * middle of a reply and hold back the commands issued meanwhile.
             */
            if (ev & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                for (int k = 0; k < NBD_READS_PER_REAP; k++) {
                    struct pollfd sp = {.fd = e->sock, .events = POLLIN};

                    if (nbd_aio_notify_read(e->h) < 0 || !(ev & EPOLLIN) ||
                        !(nbd_aio_get_direction(e->h) & LIBNBD_AIO_DIRECTION_READ) ||
                        poll(&sp, 1, 0) <= 0 || !(sp.revents & POLLIN)) {
                        break;
                    }
                }
            }
            /* Only while libnbd still wants to write (reading may have changed that). */
            if (e->h && (ev & EPOLLOUT) &&
                (nbd_aio_get_direction(e->h) & LIBNBD_AIO_DIRECTION_WRITE)) {
                nbd_aio_notify_write(e->h);
            }
            break;
        }
    }
    if (e->h) {
        if (!e->connected) {
            check_connecting(e);
        } else if (nbd_aio_is_dead(e->h) || nbd_aio_is_closed(e->h)) {
            collect_done(e);
            connection_lost(e);
        }
    }
    collect_done(e);
    update_watch(e);
    return complete_done(e);
}

static bool nbd_engine_ready(IOQ *ioq)
{
    NbdEngine *e = ioq->engine_state;
    struct pollfd pfd = {.fd = ioq->efd, .events = POLLIN};

    return e->done.head || poll(&pfd, 1, 0) > 0;
}

static bool nbd_engine_supports(IOQ *ioq, IOQOp op)
{
    return true;
}

static bool nbd_engine_remote_info(IOQ *ioq, IOQRemoteInfo *info)
{
    *info = ((NbdEngine *)ioq->engine_state)->info;
    return true;
}

/* ---- setup ---- */

static void engine_free(NbdEngine *e)
{
    if (e->h) {
        nbd_close(e->h);
    }
    if (e->tfd >= 0) {
        close(e->tfd);
    }
    if (e->wfd >= 0) {
        close(e->wfd);
    }
    g_free((char *)e->cfg.host);
    g_free((char *)e->cfg.port);
    g_free((char *)e->cfg.socket);
    g_free((char *)e->cfg.export_name);
    g_free(e);
}

/* The first connection, synchronous but bounded: a silent server is an error too. */
static bool connect_first(NbdEngine *e, GError **errp)
{
    unsigned timeout = e->cfg.connect_timeout_ms ? e->cfg.connect_timeout_ms
                                                 : NBD_CONNECT_TIMEOUT_MS;
    int64_t deadline = now_ns() + (int64_t)timeout * 1000000;
    g_autofree char *where = e->cfg.socket ? g_strdup(e->cfg.socket)
                                           : g_strdup_printf("%s:%s", e->cfg.host, e->cfg.port);

    e->h = start_connect(e);
    while (e->h && !nbd_aio_is_ready(e->h)) {
        int64_t left = (deadline - now_ns()) / 1000000;

        if (nbd_aio_is_dead(e->h) || nbd_aio_is_closed(e->h)) {
            break;
        }
        if (left <= 0) {
            g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_FAILED,
                        "Failed to connect to '%s': no NBD handshake within %u ms", where,
                        timeout);
            return false;
        }
        if (nbd_poll(e->h, (int)MIN(left, 1000)) < 0) {
            break;
        }
    }
    if (!e->h || !nbd_aio_is_ready(e->h)) {
        const char *msg = nbd_get_error();

        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_IO, "Failed to connect to '%s': %s", where,
                    msg ? msg : "unknown error");
        return false;
    }
    if (!read_info(e->h, &e->info)) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_IO, "Failed to get the NBD export size: %s",
                    nbd_get_error());
        return false;
    }
    e->connected = true;
    return true;
}

static bool add_fd(IOQ *ioq, int fd, uint32_t tag, GError **errp)
{
    struct epoll_event ee = {.events = EPOLLIN, .data.u32 = tag};

    if (fd < 0 || epoll_ctl(ioq->efd, EPOLL_CTL_ADD, fd, &ee) < 0) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(errno),
                    "nbd engine: cannot set up its fds: %s", g_strerror(errno));
        return false;
    }
    return true;
}

static bool nbd_engine_init(IOQ *ioq, GError **errp)
{
    NbdEngine *e = g_new0(NbdEngine, 1);
    const IOQNbdConfig *c = ioq->nbd_cfg;

    e->ioq = ioq;
    e->sock = -1;
    e->cfg = (IOQNbdConfig){
        .host = g_strdup(c->host),
        .port = g_strdup(c->port ? c->port : NBD_DEFAULT_PORT),
        .socket = g_strdup(c->socket),
        .export_name = g_strdup(c->export_name ? c->export_name : ""),
        .reconnect_delay_s = c->reconnect_delay_s,
        .connect_timeout_ms = c->connect_timeout_ms,
    };
    e->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    e->wfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ioq->efd = epoll_create1(EPOLL_CLOEXEC);
    if (!e->cfg.socket && !e->cfg.host) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_INVAL, "nbd engine: no server given");
        goto fail;
    }
    if (ioq->efd < 0 || !add_fd(ioq, e->tfd, NBD_EV_TIMER, errp) ||
        !add_fd(ioq, e->wfd, NBD_EV_WAKE, errp) || !connect_first(e, errp)) {
        goto fail;
    }
    ioq->engine_state = e;
    update_watch(e);
    return true;

fail:
    engine_free(e);
    return false; /* ioq_new() closes ioq->efd */
}

static void nbd_engine_cleanup(IOQ *ioq)
{
    NbdEngine *e = ioq->engine_state;

    /* ioq_free() drained first: nothing is issued or waiting. */
    fail_waiting(e, -ECANCELED);
    complete_done(e);
    drop_handle(e);
    complete_done(e);
    engine_free(e);
}

const IOQEngine ioq_engine_nbd = {
    .name = "nbd",
    .init = nbd_engine_init,
    .cleanup = nbd_engine_cleanup,
    .supports = nbd_engine_supports,
    .queue = nbd_engine_queue,
    .submit = nbd_engine_submit,
    .reap = nbd_engine_reap,
    .ready = nbd_engine_ready,
    .remote_info = nbd_engine_remote_info,
    .own_fd = true,
    .contiguous = true,
};
