/*
 * Request paths of the file node. Requests arrive already aligned (io.c).
 *
 *  aio=threads: each request is a ThreadPoolItem; a worker runs the
 *    blocking syscall (preadv/pwritev loops, fdatasync, fallocate/ioctl);
 *  aio=native / io_uring: the dataplane's IOQ, its completion eventfd
 *    watched by the node's loop, one ioq_submit() per loop iteration.
 *
 * cache.no-flush makes flushes succeed without a syscall. BLK_REQ_FUA on a
 * write adds an fdatasync before the write completes (writethrough).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <fcntl.h>
#include <limits.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <stdlib.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "file-int.h"
#include "util/error-report.h"
#include "util/iov.h"

#define ZERO_CHUNK (1u << 20)

typedef struct FileReq {
    ThreadPoolItem item;
    FileState *s;
    BlockNodeReq *req;
} FileReq;

/* ---- blocking helpers, run in a worker ---- */

/*
 * The whole of @r, resuming after short transfers. A read past the end of
 * the file reads zeroes (as QEMU's); a write that makes no progress is ENOSPC.
 */
static int do_prwv(int fd, BlockNodeReq *r, bool write)
{
    uint64_t done = 0;

    if (r->niov > IOV_MAX) {
        return -EINVAL;
    }
    while (done < r->bytes) {
        struct iovec local[IOV_MAX];
        /* the iovec tail still to transfer */
        int n = iov_copy(local, IOV_MAX, r->iov, r->niov, done, r->bytes - done);
        ssize_t got;

        got = write ? pwritev(fd, local, n, (off_t)(r->offset + done))
                    : preadv(fd, local, n, (off_t)(r->offset + done));
        if (got < 0 && errno == EINTR) {
            continue;
        }
        if (got < 0) {
            return -errno;
        }
        if (got == 0 && write) {
            return -ENOSPC;
        }
        if (got == 0) {
            iov_memset(local, n, 0, 0, SIZE_MAX);
            break;
        }
        done += (uint64_t)got;
    }
    return 0;
}

static int do_fdatasync(int fd)
{
    return fdatasync(fd) < 0 ? -errno : 0;
}

/* Write zeroes with plain writes when the filesystem cannot do it cheaply. */
static int write_zero_chunks(FileState *s, uint64_t off, uint64_t len)
{
    void *buf = NULL;
    int ret = 0;

    if (posix_memalign(&buf, 4096, ZERO_CHUNK) != 0) {
        return -ENOMEM;
    }
    memset(buf, 0, ZERO_CHUNK);
    while (len && ret == 0) {
        struct iovec iov = {buf, MIN(len, ZERO_CHUNK)};
        BlockNodeReq w = {.offset = off, .bytes = iov.iov_len, .iov = &iov, .niov = 1};

        ret = do_prwv(s->fd, &w, true);
        off += iov.iov_len;
        len -= iov.iov_len;
    }
    free(buf);
    return ret;
}

static int do_discard(FileState *s, BlockNodeReq *r)
{
    int ret;

    if (s->is_blockdev) {
        uint64_t range[2] = {r->offset, r->bytes};

        ret = ioctl(s->fd, BLKDISCARD, range) < 0 ? -errno : 0;
    } else {
        ret = fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)r->offset,
                        (off_t)r->bytes) < 0
                  ? -errno
                  : 0;
    }
    /* discard is advisory: "not supported here" is not an error */
    return ret == -EOPNOTSUPP || ret == -ENOTTY ? 0 : ret;
}

static int do_write_zeroes(FileState *s, BlockNodeReq *r)
{
    int ret;

    if (s->is_blockdev) {
        uint64_t range[2] = {r->offset, r->bytes};

        ret = ioctl(s->fd, BLKZEROOUT, range) < 0 ? -errno : 0;
    } else {
        ret = -EOPNOTSUPP;
        if (r->flags & BLK_REQ_MAY_UNMAP) {
            ret = fallocate(s->fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, (off_t)r->offset,
                            (off_t)r->bytes) < 0
                      ? -errno
                      : 0;
        }
        if (ret < 0) {
            ret = fallocate(s->fd, FALLOC_FL_ZERO_RANGE, (off_t)r->offset, (off_t)r->bytes) < 0
                      ? -errno
                      : 0;
        }
    }
    if (ret == -EOPNOTSUPP || ret == -ENOTTY || ret == -EINVAL) {
        ret = write_zero_chunks(s, r->offset, r->bytes);
    }
    return ret;
}

static int file_worker(ThreadPoolItem *item)
{
    FileReq *fr = container_of(item, FileReq, item);
    FileState *s = fr->s;
    BlockNodeReq *r = fr->req;
    int ret;

    switch (r->op) {
    case BLOCK_OP_READ:
        return do_prwv(s->fd, r, false);
    case BLOCK_OP_WRITE:
        ret = do_prwv(s->fd, r, true);
        break;
    case BLOCK_OP_FLUSH:
        return do_fdatasync(s->fd);
    case BLOCK_OP_DISCARD:
        return do_discard(s, r);
    case BLOCK_OP_WRITE_ZEROES:
        ret = do_write_zeroes(s, r);
        break;
    default:
        return -EINVAL;
    }
    if (ret == 0 && (r->flags & BLK_REQ_FUA) && !s->bs->no_flush) {
        ret = do_fdatasync(s->fd);
    }
    return ret;
}

/* ---- completion (loop thread) ---- */

static void pool_done(ThreadPoolItem *item, int ret)
{
    FileReq *fr = container_of(item, FileReq, item);
    BlockNodeReq *r = fr->req;

    fr->s->inflight--;
    g_free(fr);
    r->cb(r, ret);
}

/* ---- submission ---- */

/* Context: loop thread */
void file_io_submit(BlockNode *bs, BlockNodeReq *req)
{
    FileState *s = bs->opaque;
    FileReq *fr;

    /* Both paths count a writethrough write's flush here, when it is asked for. */
    if (bdrv_req_prologue(bs, req)) {
        return;
    }
    if (s->aio != FILE_AIO_THREADS) {
        ioq_drv_submit(&s->io, req);
        return;
    }
    fr = g_new0(FileReq, 1);
    fr->s = s;
    fr->req = req;
    s->inflight++;
    fr->item.fn = file_worker;
    fr->item.done = pool_done;
    thread_pool_submit(s->pool, &fr->item);
}

/* ---- setup ---- */

/* Context: main loop */
bool file_io_init(BlockNode *bs, GError **errp)
{
    FileState *s = bs->opaque;
    IOQConfig cfg = {
        .engine = s->aio == FILE_AIO_NATIVE ? "native" : "io_uring",
        .fd = s->fd,
        .direct = bs->direct,
        .logical_block_size = bs->direct ? bs->request_alignment : 512,
        .mem_align = bs->direct ? bs->min_mem_align : 0,
    };

    if (s->aio == FILE_AIO_THREADS) {
        s->pool = thread_pool_new(NULL, FILE_POOL_WORKERS);
        return true;
    }
    s->ioq = ioq_new(&cfg, errp);
    if (!s->ioq) {
        return false;
    }
    ioq_drv_init(&s->io, bs, s->ioq, s->filename);
    return true;
}

/* Context: main loop; drained */
void file_io_cleanup(BlockNode *bs)
{
    FileState *s = bs->opaque;

    thread_pool_free(s->pool);
    s->pool = NULL;
    if (s->ioq) {
        ioq_free(s->ioq);
        s->ioq = NULL;
    }
}

/* Context: main loop */
void file_io_attach(BlockNode *bs)
{
    FileState *s = bs->opaque;

    if (s->pool) {
        thread_pool_set_loop(s->pool, bs->loop);
        return;
    }
    ioq_drv_attach(&s->io);
}

/* Context: main loop; drained. Safe if never attached. */
void file_io_detach(BlockNode *bs)
{
    FileState *s = bs->opaque;

    if (!s) {
        return;
    }
    if (s->pool) {
        thread_pool_set_loop(s->pool, NULL);
        return;
    }
    ioq_drv_detach(&s->io);
}
