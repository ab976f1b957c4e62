/*
 * Shared by the remote-disk driver tests (remotefix.h).
 */
#include <string.h>

#include "remotefix.h"

void rf_fill(uint8_t *buf, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++) {
        buf[i] = (uint8_t)(i * 13 + seed + (i >> 9));
    }
}

int rf_rw_async(BlockBackend *blk, bool write, uint64_t off, struct iovec *iov, int niov,
                uint64_t len)
{
    BtDone d = {0};

    if (write) {
        blk_aio_pwritev(blk, off, iov, niov, len, 0, bt_cb, &d);
    } else {
        blk_aio_preadv(blk, off, iov, niov, len, 0, bt_cb, &d);
    }
    bt_wait(&d);
    return d.ret;
}

void rf_check_data(BlockBackend *blk, uint64_t size)
{
    g_autofree uint8_t *w = g_malloc(256 << 10);
    g_autofree uint8_t *r = g_malloc(256 << 10);
    BtDone d = {0};

    /* One buffer, then three pieces (nbd bounces them into one command). */
    rf_fill(w, 256 << 10, 1);
    g_assert_cmpint(bt_write(blk, 4096, w, 64 << 10), ==, 0);
    {
        struct iovec iov[3] = {{w, 512}, {w + 512, 7680}, {w + 8192, 248 << 10}};

        g_assert_cmpint(rf_rw_async(blk, true, 1 << 20, iov, 3, 256 << 10), ==, 0);
    }
    g_assert_cmpint(bt_flush(blk), ==, 0);
    memset(r, 0, 256 << 10);
    g_assert_cmpint(bt_read(blk, 4096, r, 64 << 10), ==, 0);
    g_assert_cmpmem(r, 64 << 10, w, 64 << 10);
    {
        struct iovec iov[2] = {{r, 4096}, {r + 4096, (256 << 10) - 4096}};

        memset(r, 0, 256 << 10);
        g_assert_cmpint(rf_rw_async(blk, false, 1 << 20, iov, 2, 256 << 10), ==, 0);
        g_assert_cmpmem(r, 256 << 10, w, 256 << 10);
    }
    /* The last sector, and past the end. */
    g_assert_cmpint(bt_write(blk, size - 512, w, 512), ==, 0);
    g_assert_cmpint(bt_read(blk, size - 512, r, 512), ==, 0);
    g_assert_cmpmem(r, 512, w, 512);
    g_assert_cmpint(bt_read(blk, size - 512, r, 1024), <, 0);

    /* Write-zeroes reads back as zeroes, the data after it stays; discard succeeds. */
    blk_aio_pwrite_zeroes(blk, 1 << 20, 64 << 10, 0, bt_cb, &d);
    bt_wait(&d);
    g_assert_cmpint(d.ret, ==, 0);
    g_assert_cmpint(bt_read(blk, 1 << 20, r, 64 << 10), ==, 0);
    for (unsigned i = 0; i < 64 << 10; i++) {
        g_assert_cmpuint(r[i], ==, 0);
    }
    g_assert_cmpint(bt_read(blk, (1 << 20) + (64 << 10), r, 4096), ==, 0);
    g_assert_cmpmem(r, 4096, w + (64 << 10), 4096);
    d = (BtDone){0};
    blk_aio_pdiscard(blk, 2 << 20, 1 << 20, bt_cb, &d);
    bt_wait(&d);
    g_assert_cmpint(d.ret, ==, 0);
    g_assert_cmpint(bt_flush(blk), ==, 0);
}

void rf_expect_err(bool blockdev, const char *opts, const char *want)
{
    g_autofree char *msg = blockdev ? bt_blockdev_err(opts) : bt_drive_err(opts);

    g_assert_nonnull(msg);
    if (!strstr(msg, want)) {
        g_error("'%s': got '%s', want '%s'", opts, msg, want);
    }
    g_assert_null(strchr(msg, '\n'));
}

void rf_hook(void *opaque, BlockBackend *blk, const BlockIOErrorEvent *ev)
{
    RfHookLog *h = opaque;

    (void)blk;
    h->calls++;
    g_strlcpy(h->action, ev->action, sizeof(h->action));
    h->error = ev->error;
}

void rf_spin(unsigned ms)
{
    int64_t end = event_clock_ns() + (int64_t)ms * 1000000;

    while (event_clock_ns() < end) {
        event_loop_run_once(bt_loop, false);
        g_usleep(1000);
    }
}

void rf_resume_until_written(BlockBackend *blk, BtDone *d, RfHookLog *h, unsigned tries,
                             unsigned pause_ms, uint64_t off, const uint8_t *w, size_t len)
{
    g_autofree uint8_t *r = g_malloc(len);

    for (unsigned i = 0; i < tries && !d->done; i++) {
        unsigned calls = h->calls;

        rf_spin(pause_ms);
        blk_resume_parked(blk);
        while (!d->done && h->calls == calls) {
            event_loop_run_once(bt_loop, true);
        }
    }
    g_assert_true(d->done);
    g_assert_cmpint(d->ret, ==, 0);
    g_assert_cmpuint(blk_parked_count(blk), ==, 0);
    g_assert_cmpint(bt_read(blk, off, r, len), ==, 0);
    g_assert_cmpmem(r, len, w, len);
}
