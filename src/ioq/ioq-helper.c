/*
 * The IOQ helper thread: runs the requests an engine cannot make
 * asynchronous (fdatasync where libaio has no FDSYNC, fallocate for libaio)
 * so that the iothread never blocks on them.  Completions come back through
 * the IOQ's completion eventfd, like the engine's own.
 *
 * The lock is taken only for these rare operations; the iothread checks a
 * lock-free counter before touching it.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <unistd.h>

#include "ioq-internal.h"

#define ZERO_BUF_SIZE (64u << 10)

struct IOQHelper {
    int fd;
    int efd;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;
    IOQList todo;   /* under lock */
    IOQList done;   /* under lock */
    unsigned ndone; /* atomic mirror of done.len, read without the lock */
    bool stop;      /* under lock */
};

/* Aligned for O_DIRECT: the write-zeroes fallback when ZERO_RANGE is missing. */
static uint8_t zero_buf[ZERO_BUF_SIZE] __attribute__((aligned(4096)));

static int write_zeroes_slow(int fd, uint64_t offset, uint64_t len)
{
    while (len) {
        ssize_t n = pwrite(fd, zero_buf, MIN(len, ZERO_BUF_SIZE), offset);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n <= 0) {
            return n < 0 ? -errno : -EIO;
        }
        offset += n;
        len -= n;
    }
    return 0;
}

static int do_fallocate(int fd, int mode, uint64_t offset, uint64_t len)
{
    return fallocate(fd, mode, offset, len) < 0 ? -errno : 0;
}

static int helper_run(IOQHelper *h, IOQReq *req)
{
    int ret;

    switch (req->op) {
    case IOQ_OP_FLUSH:
        return fdatasync(h->fd) < 0 ? -errno : 0;
    case IOQ_OP_DISCARD:
        return do_fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, req->offset,
                            req->len);
    case IOQ_OP_WRITE_ZEROES:
        if (req->may_unmap) {
            ret = do_fallocate(h->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, req->offset,
                               req->len);
            if (ret != -EOPNOTSUPP) {
                return ret;
            }
        }
        ret = do_fallocate(h->fd, FALLOC_FL_ZERO_RANGE, req->offset, req->len);
        if (ret == -EOPNOTSUPP) {
            ret = write_zeroes_slow(h->fd, req->offset, req->len);
        }
        return ret;
    default:
        return -EINVAL;
    }
}

static void *helper_main(void *opaque)
{
    IOQHelper *h = opaque;
    const uint64_t one = 1;

    pthread_mutex_lock(&h->lock);
    for (;;) {
        IOQReq *req = ioq_list_pop(&h->todo);
        if (!req) {
            if (h->stop) {
                break;
            }
            pthread_cond_wait(&h->cond, &h->lock);
            continue;
        }
        pthread_mutex_unlock(&h->lock);
        req->priv.ret = helper_run(h, req);
        pthread_mutex_lock(&h->lock);
        ioq_list_push(&h->done, req);
        /* Release: the request's result before the count the iothread polls;
         * pairs with the acquire load in ioq_helper_reap(). */
        __atomic_store_n(&h->ndone, h->done.len, __ATOMIC_RELEASE);
        if (write(h->efd, &one, sizeof(one)) < 0) {
            /* EAGAIN: the counter is saturated, the iothread will wake anyway. */
        }
    }
    pthread_mutex_unlock(&h->lock);
    return NULL;
}

IOQHelper *ioq_helper_new(IOQ *ioq, GError **errp)
{
    IOQHelper *h = g_new0(IOQHelper, 1);
    sigset_t all, old;
    int err;

    h->fd = ioq->fd;
    h->efd = ioq->efd;
    pthread_mutex_init(&h->lock, NULL);
    pthread_cond_init(&h->cond, NULL);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    err = pthread_create(&h->thread, NULL, helper_main, h);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (err) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(err),
                    "cannot create the I/O helper thread: %s", g_strerror(err));
        pthread_cond_destroy(&h->cond);
        pthread_mutex_destroy(&h->lock);
        g_free(h);
        return NULL;
    }
    pthread_setname_np(h->thread, "ioq-helper");
    return h;
}

/* Only after ioq_drain(): nothing is queued or done. */
void ioq_helper_free(IOQHelper *h)
{
    if (!h) {
        return;
    }
    pthread_mutex_lock(&h->lock);
    h->stop = true;
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
    pthread_join(h->thread, NULL);
    pthread_cond_destroy(&h->cond);
    pthread_mutex_destroy(&h->lock);
    g_free(h);
}

void ioq_helper_queue(IOQHelper *h, IOQReq *req)
{
    pthread_mutex_lock(&h->lock);
    ioq_list_push(&h->todo, req);
    pthread_cond_signal(&h->cond);
    pthread_mutex_unlock(&h->lock);
}

unsigned ioq_helper_reap(IOQ *ioq, IOQHelper *h)
{
    IOQList done;
    IOQReq *req;
    unsigned n = 0;

    /* Acquire: pairs with the release store in helper_main(). */
    if (!__atomic_load_n(&h->ndone, __ATOMIC_ACQUIRE)) {
        return 0;
    }
    pthread_mutex_lock(&h->lock);
    done = h->done;
    h->done = (IOQList){0};
    __atomic_store_n(&h->ndone, 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&h->lock);

    while ((req = ioq_list_pop(&done))) {
        ioq_complete(ioq, req, req->priv.ret);
        n++;
    }
    return n;
}

bool ioq_helper_ready(IOQHelper *h)
{
    /* Acquire: pairs with the release store in helper_main(). */
    return __atomic_load_n(&h->ndone, __ATOMIC_ACQUIRE) != 0;
}
