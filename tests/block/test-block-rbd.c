/*
 * The rbd driver on the block-layer path, against the single-node Ceph test
 * cluster of scripts/ceph-cluster: read-back (one and several iovecs, at
 * unaligned offsets), flush, write-zeroes, discard, size and block_resize,
 * query-block's filename for -drive and -blockdev, option errors (one-line,
 * no crash), and werror=report when the OSD stops (rados_osd_op_timeout
 * from the filename), then I/O again once it is back; werror=stop parks the
 * write and resuming after the OSD's restart completes it.
 * Exits 77 (skip) with the reason when no cluster answers; without librbd it
 * checks the "not compiled in" error only.
 */
#include <stdio.h>
#include <stdlib.h>

#include "blocktest.h"
#include "cephtest.h"
#include "ioq/ioq.h"

#define SIZE (8u << 20)

static char *conf;

static void fill(uint8_t *buf, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++) {
        buf[i] = (uint8_t)(i * 7 + seed + (i >> 11));
    }
}

static int rw_async(BlockBackend *blk, bool write, uint64_t off, struct iovec *iov, int niov,
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

static void check_data(BlockBackend *blk)
{
    g_autofree uint8_t *w = g_malloc(256 << 10);
    g_autofree uint8_t *r = g_malloc(256 << 10);
    BtDone d = {0};

    fill(w, 256 << 10, 3);
    g_assert_cmpint(bt_write(blk, 4096, w, 64 << 10), ==, 0);
    {
        struct iovec iov[3] = {{w, 512}, {w + 512, 7680}, {w + 8192, 248 << 10}};

        g_assert_cmpint(rw_async(blk, true, 1 << 20, iov, 3, 256 << 10), ==, 0);
    }
    g_assert_cmpint(bt_flush(blk), ==, 0);
    memset(r, 0, 256 << 10);
    g_assert_cmpint(bt_read(blk, 4096, r, 64 << 10), ==, 0);
    g_assert_cmpmem(r, 64 << 10, w, 64 << 10);
    {
        struct iovec iov[2] = {{r, 4096}, {r + 4096, (256 << 10) - 4096}};

        memset(r, 0, 256 << 10);
        g_assert_cmpint(rw_async(blk, false, 1 << 20, iov, 2, 256 << 10), ==, 0);
        g_assert_cmpmem(r, 256 << 10, w, 256 << 10);
    }
    /* byte-granular: librbd takes any offset */
    g_assert_cmpint(bt_write(blk, 333, w + 7, 1000), ==, 0);
    g_assert_cmpint(bt_read(blk, 333, r, 1000), ==, 0);
    g_assert_cmpmem(r, 1000, w + 7, 1000);
    /* the last sector, and past the end */
    g_assert_cmpint(bt_write(blk, SIZE - 512, w, 512), ==, 0);
    g_assert_cmpint(bt_read(blk, SIZE - 512, r, 512), ==, 0);
    g_assert_cmpmem(r, 512, w, 512);
    g_assert_cmpint(bt_read(blk, SIZE - 512, r, 1024), <, 0);
    /* write-zeroes reads back as zeroes, around it the data stays */
    blk_aio_pwrite_zeroes(blk, 1 << 20, 64 << 10, 0, bt_cb, &d);
    bt_wait(&d);
    g_assert_cmpint(d.ret, ==, 0);
    g_assert_cmpint(bt_read(blk, 1 << 20, r, (64 << 10) + 4096), ==, 0);
    for (unsigned i = 0; i < 64 << 10; i++) {
        g_assert_cmpuint(r[i], ==, 0);
    }
    g_assert_cmpmem(r + (64 << 10), 4096, w + (64 << 10), 4096);
    /* discard (unmap) succeeds */
    d = (BtDone){0};
    blk_aio_pdiscard(blk, 4 << 20, 1 << 20, bt_cb, &d);
    bt_wait(&d);
    g_assert_cmpint(d.ret, ==, 0);
    g_assert_cmpint(bt_flush(blk), ==, 0);
}

static void test_drive(void)
{
    g_autofree char *img = ceph_test_image_new(conf, SIZE);
    /* what QEMU 7.2 prints for the same -drive */
    g_autofree char *want = g_strdup_printf(
        "json:{\"driver\": \"raw\", \"file\": {\"pool\": \"rbd\", \"image\": \"%s\", "
        "\"conf\": \"%s\", \"driver\": \"rbd\", \"namespace\": \"\"}}",
        img, conf);
    BlockBackend *blk = bt_drive("file=rbd:rbd/%s:conf=%s,format=raw,cache=writeback,discard=unmap",
                                 img, conf);

    g_assert_cmpstr(blk_root_driver_name(blk), ==, "raw");
    g_assert_cmpstr(blk_get_filename(blk), ==, want);
    g_assert_cmpint(blk_getlength(blk), ==, SIZE);
    check_data(blk);
    blk_unref(blk);
    ceph_test_image_remove(conf, img);
}

static void test_blockdev_resize(void)
{
    g_autofree char *img = ceph_test_image_new(conf, SIZE);
    /* what QEMU 7.2 prints for the same -blockdev */
    g_autofree char *want = g_strdup_printf(
        "json:{\"pool\": \"rbd\", \"image\": \"%s\", \"conf\": \"%s\", \"driver\": \"rbd\", "
        "\"user\": \"admin\"}",
        img, conf);
    BlockBackend *blk =
        bt_blockdev("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,user=admin,discard=unmap",
                    img, conf);
    uint8_t w[4096], r[4096];
    GError *err = NULL;
    BlockHostInfo hi;

    g_assert_cmpstr(blk_root_driver_name(blk), ==, "rbd");
    g_assert_cmpstr(blk_root_node_name(blk), ==, "r0");
    g_assert_cmpstr(blk_get_filename(blk), ==, want);
    blk_get_host_info(blk, &hi);
    g_assert_true(hi.rbd);
    g_assert_null(hi.not_passthrough);
    g_assert_cmpstr(hi.rbd_pool, ==, "rbd");
    g_assert_cmpstr(hi.rbd_image, ==, img);
    check_data(blk);
    /* block_resize: grow, write at the new end, shrink back */
    g_assert_true(blk_truncate(blk, 2 * SIZE, &err));
    g_assert_no_error(err);
    g_assert_cmpint(blk_getlength(blk), ==, 2 * SIZE);
    fill(w, sizeof(w), 9);
    g_assert_cmpint(bt_write(blk, 2 * SIZE - 4096, w, 4096), ==, 0);
    g_assert_cmpint(bt_read(blk, 2 * SIZE - 4096, r, 4096), ==, 0);
    g_assert_cmpmem(r, 4096, w, 4096);
    g_assert_true(blk_truncate(blk, SIZE, &err));
    g_assert_no_error(err);
    g_assert_cmpint(blk_getlength(blk), ==, SIZE);
    g_assert_cmpint(bt_read(blk, SIZE, r, 4096), <, 0);
    blk_unref(blk);
    ceph_test_image_remove(conf, img);
}

static void expect_err(bool blockdev, const char *opts, const char *want)
{
    g_autofree char *msg = blockdev ? bt_blockdev_err(opts) : bt_drive_err(opts);

    g_assert_nonnull(msg);
    if (!strstr(msg, want)) {
        g_error("'%s': got '%s', want '%s'", opts, msg, want);
    }
    g_assert_null(strchr(msg, '\n'));
}

static void test_errors(void)
{
    g_autofree char *img = ceph_test_image_new(conf, 1 << 20);
    g_autofree char *bad_conf = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=x,conf=%s.nope", conf);
    g_autofree char *no_img = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=no-such-image,conf=%s", conf);
    g_autofree char *no_pool = g_strdup_printf("driver=rbd,node-name=r0,pool=no-such-pool,image=x,conf=%s", conf);
    g_autofree char *bad_key = g_strdup_printf("file=rbd:rbd/x:conf=%s:no_such_option=1", conf);
    g_autofree char *bogus = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,bogus=1",
                                             img, conf);

    expect_err(true, "driver=rbd,node-name=r0,image=x", "Parameter 'pool' is missing");
    expect_err(true, "driver=rbd,node-name=r0,pool=rbd", "Parameter 'image' is missing");
    expect_err(true, "driver=rbd,node-name=r0,pool=rbd,image=x,snapshot=s", "snapshot");
    expect_err(true, bogus, "Invalid parameter 'bogus'");
    expect_err(true, bad_conf, "error reading conf file");
    expect_err(true, no_img, "error opening image no-such-image");
    expect_err(true, no_pool, "error opening pool no-such-pool");
    expect_err(false, "file=rbd:", "Pool name is required");
    expect_err(false, "file=rbd:rbd", "Pool name is required");
    expect_err(false, "file=rbd:rbd/", "Image name is required");
    expect_err(false, "file=rbd:rbd/img@snap", "snapshots are not supported");
    expect_err(false, "file=rbd:rbd/img:conf", "has no value");
    expect_err(false, "file=rbd:rbd/img:keyring=/k", "not supported");
    expect_err(false, bad_key, "error setting config option 'no_such_option'");
    ceph_test_image_remove(conf, img);
}

/* The OSD stops with a request in flight: EIO after rados_osd_op_timeout (werror=report). */
static void test_osd_fault(void)
{
    g_autofree char *img = NULL;
    BlockBackend *blk;
    uint8_t w[4096], r[4096];
    BtDone d = {0};
    int ret = -1;

    if (!g_getenv("VBLK_CEPH_SCRIPT")) {
        g_test_skip("VBLK_CEPH_SCRIPT is not set");
        return;
    }
    img = ceph_test_image_new(conf, SIZE);
    blk = bt_drive("file=rbd:rbd/%s:conf=%s:rados_osd_op_timeout=3,format=raw,"
                   "cache=writeback,werror=report,rerror=report",
                   img, conf);
    fill(w, sizeof(w), 5);
    g_assert_cmpint(bt_write(blk, 8192, w, 4096), ==, 0);
    g_assert_true(ceph_test_osd(false));
    blk_aio_pwritev(blk, 16384, &(struct iovec){w, 4096}, 1, 4096, 0, bt_cb, &d);
    bt_wait_all(&d, 1);
    g_assert_cmpint(d.ret, <, 0);
    g_assert_cmpint(bt_read(blk, 8192, r, 4096), <, 0);
    g_assert_true(ceph_test_osd(true));
    for (int i = 0; i < 30 && ret != 0; i++) {
        ret = bt_read(blk, 8192, r, 4096);
    }
    g_assert_cmpint(ret, ==, 0);
    g_assert_cmpmem(r, 4096, w, 4096);
    g_assert_cmpint(bt_write(blk, 16384, w, 4096), ==, 0);
    blk_unref(blk);
    ceph_test_image_remove(conf, img);
}

typedef struct HookLog {
    unsigned calls;
    char action[16];
    int error;
} HookLog;

static void hook(void *opaque, BlockBackend *blk, const BlockIOErrorEvent *ev)
{
    HookLog *h = opaque;

    h->calls++;
    g_strlcpy(h->action, ev->action, sizeof(h->action));
    h->error = ev->error;
}

/*
 * werror=stop: a write to a stopped OSD fails after rados_osd_op_timeout and
 * is parked (BLOCK_IO_ERROR, action stop); once the OSD is back, resuming
 * ('cont') completes it and the data is there.
 */
static void test_osd_stop_resume(void)
{
    g_autofree char *img = NULL;
    BlockBackend *blk;
    HookLog h = {0};
    uint8_t w[4096], r[4096];
    struct iovec iov = {w, sizeof(w)};
    BtDone d = {0};
    int64_t deadline;

    if (!g_getenv("VBLK_CEPH_SCRIPT")) {
        g_test_skip("VBLK_CEPH_SCRIPT is not set");
        return;
    }
    img = ceph_test_image_new(conf, SIZE);
    blk = bt_drive("file=rbd:rbd/%s:conf=%s:rados_osd_op_timeout=3,format=raw,werror=stop",
                   img, conf);
    blk_set_error_hook(blk, hook, &h);
    fill(w, sizeof(w), 11);
    g_assert_true(ceph_test_osd(false));
    blk_aio_pwritev(blk, 65536, &iov, 1, sizeof(w), 0, bt_cb, &d);
    deadline = event_clock_ns() + 20 * 1000000000LL;
    while (!h.calls && event_clock_ns() < deadline) {
        event_loop_run_once(bt_loop, true);
    }
    g_assert_cmpuint(h.calls, ==, 1);
    g_assert_cmpstr(h.action, ==, "stop");
    g_assert_false(d.done);
    g_assert_cmpuint(blk_parked_count(blk), ==, 1);
    g_assert_true(ceph_test_osd(true));
    /* 'cont' until it goes through (a retry may time out while the PG peers) */
    for (int i = 0; i < 10 && !d.done; i++) {
        unsigned calls = h.calls;

        blk_resume_parked(blk);
        while (!d.done && h.calls == calls) {
            event_loop_run_once(bt_loop, true);
        }
    }
    g_assert_true(d.done);
    g_assert_cmpint(d.ret, ==, 0);
    g_assert_cmpuint(blk_parked_count(blk), ==, 0);
    g_assert_cmpint(bt_read(blk, 65536, r, sizeof(r)), ==, 0);
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    blk_unref(blk);
    ceph_test_image_remove(conf, img);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    bt_init();
    if (!ioq_have_rbd()) {
        g_autofree char *msg = bt_blockdev_err("driver=rbd,node-name=r0,pool=p,image=i");

        g_assert_cmpstr(msg, ==, "rbd support not compiled in");
        printf("# rbd support not compiled in: checked the error only\n");
        return 0;
    }
    conf = ceph_test_conf_or_skip();
    g_test_add_func("/block-rbd/drive", test_drive);
    g_test_add_func("/block-rbd/blockdev-resize", test_blockdev_resize);
    g_test_add_func("/block-rbd/errors", test_errors);
    g_test_add_func("/block-rbd/fault/osd-stop", test_osd_fault);
    g_test_add_func("/block-rbd/fault/osd-stop-werror-stop", test_osd_stop_resume);
    return g_test_run();
}
