/*
 * The rbd driver on the block-layer path, against the single-node Ceph test
 * cluster of scripts/ceph-cluster: read-back (one and several iovecs, at
 * unaligned offsets), flush, write-zeroes, discard, size and block_resize,
 * query-block's filename for -drive and -blockdev, option errors (one-line,
 * no crash), and werror=report when the OSD stops (rados_osd_op_timeout
 * from the filename), then I/O again once it is back; werror=stop parks the
 * write and resuming after the OSD's restart completes it.
 * cephx (the cluster requires it): the restricted user client.vblk through
 * its keyring reads back what it wrote (-blockdev user=, -drive :id=);
 * key-secret= with the right key (client.vblk-key, which has no keyring, so
 * only the secret can authenticate it), on -blockdev and as -drive's
 * file.password-secret; a wrong key fails at once with "Permission denied"
 * even though client.vblk's keyring holds the right one; a missing secret;
 * a user without caps on the pool fails cleanly.
 * Exits 77 (skip) with the reason when no cluster answers; without librbd it
 * checks the "not compiled in" error only.
 */
#include <stdio.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "cephtest.h"
#include "remotefix.h"
#include "ioq/ioq.h"
#include "util/secret.h"

#define SIZE (8u << 20)

static char *conf;

/* rf_check_data(), and byte-granular I/O: librbd takes any offset. */
static void check_data(BlockBackend *blk)
{
    uint8_t w[1007], r[1000];

    rf_check_data(blk, SIZE);
    rf_fill(w, sizeof(w), 3);
    g_assert_cmpint(bt_write(blk, 333, w + 7, 1000), ==, 0);
    g_assert_cmpint(bt_read(blk, 333, r, 1000), ==, 0);
    g_assert_cmpmem(r, 1000, w + 7, 1000);
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
    rf_fill(w, sizeof(w), 9);
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

static void test_errors(void)
{
    g_autofree char *img = ceph_test_image_new(conf, 1 << 20);
    g_autofree char *bad_conf = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=x,conf=%s.nope", conf);
    g_autofree char *no_img = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=no-such-image,conf=%s", conf);
    g_autofree char *no_pool = g_strdup_printf("driver=rbd,node-name=r0,pool=no-such-pool,image=x,conf=%s", conf);
    g_autofree char *bad_key = g_strdup_printf("file=rbd:rbd/x:conf=%s:no_such_option=1", conf);
    g_autofree char *bogus = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,bogus=1",
                                             img, conf);

    rf_expect_err(true, "driver=rbd,node-name=r0,image=x", "Parameter 'pool' is missing");
    rf_expect_err(true, "driver=rbd,node-name=r0,pool=rbd", "Parameter 'image' is missing");
    rf_expect_err(true, "driver=rbd,node-name=r0,pool=rbd,image=x,snapshot=s", "snapshot");
    rf_expect_err(true, bogus, "Invalid parameter 'bogus'");
    rf_expect_err(true, bad_conf, "error reading conf file");
    rf_expect_err(true, no_img, "error opening image no-such-image");
    rf_expect_err(true, no_pool, "error opening pool no-such-pool");
    rf_expect_err(false, "file=rbd:", "Pool name is required");
    rf_expect_err(false, "file=rbd:rbd", "Pool name is required");
    rf_expect_err(false, "file=rbd:rbd/", "Image name is required");
    rf_expect_err(false, "file=rbd:rbd/img@snap", "snapshots are not supported");
    rf_expect_err(false, "file=rbd:rbd/img:conf", "has no value");
    rf_expect_err(false, "file=rbd:rbd/img:keyring=/k", "not supported");
    rf_expect_err(false, bad_key, "error setting config option 'no_such_option'");
    ceph_test_image_remove(conf, img);
}

/* rf_expect_err() on options made from @fmt. */
static void G_GNUC_PRINTF(3, 4) expect_errf(bool blockdev, const char *want, const char *fmt, ...)
{
    g_autofree char *opts = NULL;
    va_list ap;

    va_start(ap, fmt);
    opts = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    rf_expect_err(blockdev, opts, want);
}

/* Whether the cluster has scripts/ceph-cluster's cephx users (else the test is skipped). */
static bool have_cephx_users(void)
{
    g_autofree char *k = ceph_test_key(conf, "vblk");
    g_autofree char *k2 = ceph_test_key(conf, "vblk-key");

    if (!k || !k2) {
        g_test_skip("the test cluster has no cephx users (made by an older scripts/ceph-cluster: "
                    "destroy it and start it again)");
        return false;
    }
    return true;
}

/* Write 64 KiB of pattern @seed at 4096 + flush through @blk. */
static void write_pattern(BlockBackend *blk, uint8_t seed)
{
    static uint8_t w[65536];

    rf_fill(w, sizeof(w), seed);
    g_assert_cmpint(bt_write(blk, 4096, w, sizeof(w)), ==, 0);
    g_assert_cmpint(bt_flush(blk), ==, 0);
}

/* The 64 KiB at 4096 read through @blk are pattern @seed. */
static void check_pattern(BlockBackend *blk, uint8_t seed)
{
    static uint8_t w[65536], r[65536];

    rf_fill(w, sizeof(w), seed);
    memset(r, 0, sizeof(r));
    g_assert_cmpint(bt_read(blk, 4096, r, sizeof(r)), ==, 0);
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
}

/* (a) client.vblk (mon 'profile rbd', osd 'profile rbd pool=rbd') through its keyring. */
static void test_cephx_user_keyring(void)
{
    g_autofree char *img = NULL;
    BlockBackend *blk;

    if (!have_cephx_users()) {
        return;
    }
    img = ceph_test_image_new(conf, SIZE);
    blk = bt_blockdev("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,user=vblk", img, conf);
    write_pattern(blk, 21);
    check_pattern(blk, 21);
    rf_check_data(blk, SIZE);
    write_pattern(blk, 22);
    blk_unref(blk);
    /* a new connection, as -drive :id=, reads what the first wrote */
    blk = bt_drive("file=rbd:rbd/%s:conf=%s:id=vblk,format=raw", img, conf);
    check_pattern(blk, 22);
    blk_unref(blk);
    ceph_test_image_remove(conf, img);
}

/*
 * (b) key-secret= with the right key, from a file and inline (format=base64:
 * a Ceph key's bytes hold NULs, so format=raw cannot carry it inline).
 */
static void test_cephx_key_secret(void)
{
    g_autofree char *img = NULL, *key = NULL, *file = NULL;
    GError *err = NULL;
    BlockBackend *blk;

    if (!have_cephx_users()) {
        return;
    }
    key = ceph_test_key(conf, "vblk-key");
    file = ceph_test_path(conf, "vblk-key.secret");
    g_assert_true(secret_add(&(SecretProps){.id = "kf", .file = file, .format = "base64"}, &err));
    g_assert_no_error(err);
    g_assert_true(secret_add(&(SecretProps){.id = "kd", .data = key, .format = "base64"}, &err));
    g_assert_no_error(err);
    img = ceph_test_image_new(conf, SIZE);
    /* client.vblk-key has no keyring: without its key it cannot connect */
    expect_errf(true, "error connecting to the cluster (no key for the user",
                "driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,user=vblk-key", img, conf);
    blk = bt_blockdev("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,user=vblk-key,"
                      "key-secret=kf",
                      img, conf);
    write_pattern(blk, 31);
    check_pattern(blk, 31);
    blk_unref(blk);
    blk = bt_drive("file=rbd:rbd/%s:conf=%s:id=vblk-key,file.password-secret=kd,format=raw", img,
                   conf);
    check_pattern(blk, 31);
    write_pattern(blk, 32);
    blk_unref(blk);
    secret_clear_all();
    ceph_test_image_remove(conf, img);
}

/* (c) a wrong key: "Permission denied" at once (the key wins over the keyring); no secret. */
static void test_cephx_wrong_key(void)
{
    g_autofree char *img = NULL, *key = NULL, *bad = NULL, *opts = NULL, *nosecret = NULL;
    GError *err = NULL;
    int64_t t0;

    if (!have_cephx_users()) {
        return;
    }
    key = ceph_test_key(conf, "vblk");
    bad = ceph_test_wrong_key(key);
    g_assert_true(secret_add(&(SecretProps){.id = "bad", .data = bad, .format = "base64"}, &err));
    g_assert_no_error(err);
    img = ceph_test_image_new(conf, SIZE);
    opts = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,user=vblk,"
                           "key-secret=bad",
                           img, conf);
    t0 = g_get_monotonic_time();
    rf_expect_err(true, opts, "error connecting to the cluster: Permission denied");
    /* well under the 10 s connect timeout: the monitor refuses the key */
    g_assert_cmpint(g_get_monotonic_time() - t0, <, 5 * G_USEC_PER_SEC);
    t0 = g_get_monotonic_time();
    expect_errf(false, "Permission denied",
                "file=rbd:rbd/%s:conf=%s:id=vblk,file.key-secret=bad,format=raw", img, conf);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, 5 * G_USEC_PER_SEC);
    nosecret = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,user=vblk,"
                               "key-secret=nope",
                               img, conf);
    rf_expect_err(true, nosecret, "No secret with id 'nope'");
    secret_clear_all();
    ceph_test_image_remove(conf, img);
}

/* (d) client.vblk-nopool has caps on another pool only: opening the image is refused. */
static void test_cephx_no_caps(void)
{
    g_autofree char *img = NULL, *want = NULL;

    if (!have_cephx_users()) {
        return;
    }
    img = ceph_test_image_new(conf, SIZE);
    want = g_strdup_printf("error opening image %s: Operation not permitted", img);
    expect_errf(true, want, "driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,user=vblk-nopool",
                img, conf);
    expect_errf(false, "Operation not permitted", "file=rbd:rbd/%s:conf=%s:id=vblk-nopool", img,
                conf);
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
    rf_fill(w, sizeof(w), 5);
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

/*
 * werror=stop: a write to a stopped OSD fails after rados_osd_op_timeout and
 * is parked (BLOCK_IO_ERROR, action stop); once the OSD is back, resuming
 * ('cont') completes it and the data is there.
 */
static void test_osd_stop_resume(void)
{
    g_autofree char *img = NULL;
    BlockBackend *blk;
    RfHookLog h = {0};
    uint8_t w[4096];
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
    blk_set_error_hook(blk, rf_hook, &h);
    rf_fill(w, sizeof(w), 11);
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
    rf_resume_until_written(blk, &d, &h, 10, 0, 65536, w, sizeof(w));
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
    g_test_add_func("/block-rbd/cephx/user-keyring", test_cephx_user_keyring);
    g_test_add_func("/block-rbd/cephx/key-secret", test_cephx_key_secret);
    g_test_add_func("/block-rbd/cephx/wrong-key", test_cephx_wrong_key);
    g_test_add_func("/block-rbd/cephx/no-caps", test_cephx_no_caps);
    g_test_add_func("/block-rbd/fault/osd-stop", test_osd_fault);
    g_test_add_func("/block-rbd/fault/osd-stop-werror-stop", test_osd_stop_resume);
    return g_test_run();
}
