/*
 * Shared helpers of the block-layer tests (see blocktest.h).
 */
#include <fcntl.h>
#include <unistd.h>

#include "blocktest.h"

EventLoop *bt_loop;
static int bt_order;

void bt_init(void)
{
    GError *err = NULL;

    bt_loop = event_loop_new(&err);
    g_assert_no_error(err);
}

char *bt_scratch_file(uint64_t size, uint8_t seed)
{
    char *path = g_strdup("/var/tmp/vblk-block-XXXXXX");
    int fd = g_mkstemp(path);
    uint8_t *buf = g_malloc(size);

    g_assert_cmpint(fd, >=, 0);
    for (uint64_t i = 0; i < size; i++) {
        buf[i] = (uint8_t)(i * 7 + seed + (i >> 9));
    }
    g_assert_cmpint(pwrite(fd, buf, size, 0), ==, (ssize_t)size);
    close(fd);
    g_free(buf);
    return path;
}

void bt_remove(char *path)
{
    unlink(path);
    g_free(path);
}

static BlockBackend *make(bool drive, const char *opts, GError **errp)
{
    GHashTable *t = blk_opts_parse(opts);
    BlockBackend *blk = drive ? blk_new_from_drive_opts(t, bt_loop, errp)
                              : blk_new_from_blockdev_opts(t, bt_loop, errp);

    g_hash_table_destroy(t);
    return blk;
}

BlockBackend *bt_drive(const char *fmt, ...)
{
    va_list ap;
    g_autofree char *s = NULL;
    GError *err = NULL;
    BlockBackend *blk;

    va_start(ap, fmt);
    s = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    blk = make(true, s, &err);
    g_assert_no_error(err);
    g_assert_nonnull(blk);
    return blk;
}

BlockBackend *bt_blockdev(const char *fmt, ...)
{
    va_list ap;
    g_autofree char *s = NULL;
    GError *err = NULL;
    BlockBackend *blk;

    va_start(ap, fmt);
    s = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    blk = make(false, s, &err);
    g_assert_no_error(err);
    g_assert_nonnull(blk);
    return blk;
}

static char *make_err(bool drive, const char *opts)
{
    GError *err = NULL;
    BlockBackend *blk = make(drive, opts, &err);
    char *msg;

    g_assert_null(blk);
    g_assert_nonnull(err);
    msg = g_strdup(err->message);
    g_error_free(err);
    return msg;
}

char *bt_drive_err(const char *opts)
{
    return make_err(true, opts);
}

char *bt_blockdev_err(const char *opts)
{
    return make_err(false, opts);
}

void bt_cb(void *opaque, int ret)
{
    BtDone *d = opaque;

    g_assert_false(d->done);
    d->ret = ret;
    d->done = true;
    d->order = bt_order++;
}

void bt_wait(BtDone *d)
{
    int64_t deadline = event_clock_ns() + 10 * 1000000000LL;

    while (!d->done) {
        g_assert_cmpint(event_clock_ns(), <, deadline);
        event_loop_run_once(bt_loop, true);
    }
}

void bt_wait_all(BtDone *d, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        bt_wait(&d[i]);
    }
}

int bt_read(BlockBackend *blk, uint64_t off, void *buf, uint64_t len)
{
    struct iovec iov = {buf, len};
    BtDone d = {0};

    blk_aio_preadv(blk, off, &iov, 1, len, 0, bt_cb, &d);
    g_assert_false(d.done); /* never completes inside the call */
    bt_wait(&d);
    return d.ret;
}

int bt_write(BlockBackend *blk, uint64_t off, const void *buf, uint64_t len)
{
    struct iovec iov = {(void *)buf, len};
    BtDone d = {0};

    blk_aio_pwritev(blk, off, &iov, 1, len, 0, bt_cb, &d);
    g_assert_false(d.done);
    bt_wait(&d);
    return d.ret;
}

int bt_flush(BlockBackend *blk)
{
    BtDone d = {0};

    blk_aio_flush(blk, bt_cb, &d);
    bt_wait(&d);
    return d.ret;
}
