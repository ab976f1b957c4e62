/*
 * The nbd driver on the block-layer path, against real servers started by
 * the test (nbdkit's memory plugin and qemu-nbd over a file, on a unix
 * socket and on 127.0.0.1): read-back, flush, discard, write-zeroes, size,
 * query-block's filename; option errors; a server killed mid-I/O with
 * werror=report (EIO) and werror=stop (parked, resumed once it is back);
 * reconnect-delay; a wrong size and a server that sends garbage.
 * Skips, saying so, when nbdkit or qemu-nbd is not installed.
 */
#include <stdlib.h>

#include "nbdserver.h"
#include "remotefix.h"

#define SIZE (8u << 20)

typedef struct Case {
    NbdServerKind kind;
    bool tcp;
    bool blockdev;
} Case;

static void test_rw(gconstpointer data)
{
    const Case *c = data;
    NbdServer srv;
    BlockBackend *blk;
    g_autofree char *want_fn = NULL;

    if (!nbd_server_need(c->kind)) {
        return;
    }
    nbd_server_start(&srv, c->kind, c->tcp, SIZE);
    if (c->blockdev) {
        blk = bt_blockdev("driver=nbd,node-name=n0,%s", srv.blockdev);
        g_assert_cmpstr(blk_root_driver_name(blk), ==, "nbd");
    } else {
        blk = bt_drive("file=%s,format=raw,cache=writeback", srv.uri);
        g_assert_cmpstr(blk_root_driver_name(blk), ==, "raw");
    }
    /* The URI QEMU prints for the node. */
    want_fn = c->tcp ? g_strdup_printf("nbd://127.0.0.1:%d/exp", srv.port)
                     : g_strdup_printf("nbd+unix:///exp?socket=%s", srv.sock);
    g_assert_cmpstr(blk_get_filename(blk), ==, want_fn);
    g_assert_cmpint(blk_getlength(blk), ==, SIZE);

    rf_check_data(blk, SIZE);

    /* block_resize: an NBD node cannot change its size. */
    {
        GError *err = NULL;

        g_assert_true(blk_truncate(blk, SIZE, NULL));
        g_assert_false(blk_truncate(blk, SIZE * 2, &err));
        g_assert_cmpstr(err->message, ==, "Cannot grow NBD nodes");
        g_error_free(err);
    }
    blk_unref(blk);
    nbd_server_free(&srv);
}

/* ---- option errors ---- */

static void test_bad_options(void)
{
    rf_expect_err(true, "driver=nbd", "Parameter 'server.type' is missing");
    rf_expect_err(true, "driver=nbd,server.type=vsock", "does not accept value 'vsock'");
    rf_expect_err(true, "driver=nbd,server.type=inet,server.host=127.0.0.1",
                  "Parameter 'server.port' is missing");
    rf_expect_err(true, "driver=nbd,server.type=unix", "Parameter 'server.path' is missing");
    rf_expect_err(true, "driver=nbd,server.type=unix,server.path=/x,server.port=1",
                  "Invalid parameter 'server.port'");
    rf_expect_err(true, "driver=nbd,server.type=unix,server.path=/x,tls-creds=t",
                  "TLS is not supported");
}

static void test_bad_options2(void)
{
    g_autofree char *dir = g_dir_make_tmp("vblk-nbdopt-XXXXXX", NULL);
    g_autofree char *nosock = g_build_filename(dir, "none", NULL);
    g_autofree char *o1 = g_strdup_printf("driver=nbd,server.type=unix,server.path=%s", nosock);
    g_autofree char *o2 = g_strdup_printf("file=nbd+unix:///e?socket=%s", nosock);
    g_autofree char *o3 =
        g_strdup_printf("driver=nbd,server.type=unix,server.path=%s,reconnect-delay=x", nosock);

    rf_expect_err(true, o1, "Failed to connect");
    rf_expect_err(false, o2, "Failed to connect");
    rf_expect_err(true, o3, "reconnect-delay");
    rf_expect_err(false, "file=nbd+unix:///e", "socket=PATH");
    rf_expect_err(false, "file=nbd:///e", "need a host");
    rf_expect_err(false, "file=nbd://127.0.0.1:1/e?x=y", "take no query");
    rf_expect_err(true, "driver=nbd,filename=http://x/y", "Invalid scheme");
    rmdir(dir);
}

/* ---- faults ---- */

/* werror=report, no reconnect-delay: the guest sees EIO at once, later writes work again. */
static void test_kill_report(void)
{
    NbdServer srv;
    BlockBackend *blk;
    RfHookLog h = {0};
    uint8_t w[4096], r[4096];
    int ret = -1;

    if (!nbd_server_need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    nbd_server_start(&srv, NBD_SRV_QEMU_NBD, false, SIZE);
    blk = bt_drive("file=%s,format=raw,werror=report,rerror=report", srv.uri);
    blk_set_error_hook(blk, rf_hook, &h);
    rf_fill(w, sizeof(w), 3);
    g_assert_cmpint(bt_write(blk, 0, w, sizeof(w)), ==, 0);
    nbd_server_kill(&srv);
    g_assert_cmpint(bt_write(blk, 8192, w, sizeof(w)), ==, -EIO);
    g_assert_cmpint(bt_read(blk, 0, r, sizeof(r)), ==, -EIO);
    g_assert_cmpuint(h.calls, ==, 2);
    g_assert_cmpstr(h.action, ==, "report");
    g_assert_cmpint(h.error, ==, EIO);
    /* The server is back: attempts in the background reconnect. */
    nbd_server_restart(&srv, SIZE);
    for (int i = 0; i < 50 && ret != 0; i++) {
        rf_spin(100);
        ret = bt_read(blk, 0, r, sizeof(r));
    }
    g_assert_cmpint(ret, ==, 0);
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    blk_unref(blk);
    nbd_server_free(&srv);
}

/* werror=stop: the failed write is parked; once the server is back, resuming completes it. */
static void test_kill_stop(void)
{
    NbdServer srv;
    BlockBackend *blk;
    RfHookLog h = {0};
    uint8_t w[4096];
    struct iovec iov = {w, sizeof(w)};
    BtDone d = {0};

    if (!nbd_server_need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    nbd_server_start(&srv, NBD_SRV_QEMU_NBD, true, SIZE);
    blk = bt_drive("file=%s,format=raw,werror=stop", srv.uri);
    blk_set_error_hook(blk, rf_hook, &h);
    rf_fill(w, sizeof(w), 5);
    nbd_server_kill(&srv);
    blk_aio_pwritev(blk, 65536, &iov, 1, sizeof(w), 0, bt_cb, &d);
    for (int i = 0; i < 500 && !h.calls; i++) {
        rf_spin(10);
    }
    g_assert_cmpuint(h.calls, ==, 1);
    g_assert_cmpstr(h.action, ==, "stop");
    g_assert_false(d.done);
    g_assert_cmpuint(blk_parked_count(blk), ==, 1);
    nbd_server_restart(&srv, SIZE);
    /* 'cont' until the background reconnect made it (attempts at most 1 s apart). */
    rf_resume_until_written(blk, &d, &h, 100, 100, 65536, w, sizeof(w));
    blk_unref(blk);
    nbd_server_free(&srv);
}

/* reconnect-delay: requests wait for the server to come back, and then succeed. */
static void test_reconnect(gconstpointer data)
{
    const Case *c = data;
    NbdServer srv;
    BlockBackend *blk;
    uint8_t w[8][4096], r[4096];
    struct iovec iov[8];
    BtDone d[8] = {{0}};
    RfHookLog h = {0};

    if (!nbd_server_need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    nbd_server_start(&srv, NBD_SRV_QEMU_NBD, c->tcp, SIZE);
    blk = bt_drive("file=%s,format=raw,werror=report,reconnect-delay=10", srv.uri);
    blk_set_error_hook(blk, rf_hook, &h);
    for (int i = 0; i < 8; i++) {
        rf_fill(w[i], 4096, (uint8_t)(i + 20));
        iov[i] = (struct iovec){w[i], 4096};
    }
    g_assert_cmpint(bt_write(blk, 0, w[0], 4096), ==, 0);
    /* Killed with writes in flight: they wait instead of failing. */
    for (int i = 0; i < 4; i++) {
        blk_aio_pwritev(blk, (uint64_t)i * 4096, &iov[i], 1, 4096, 0, bt_cb, &d[i]);
    }
    nbd_server_kill(&srv);
    for (int i = 4; i < 8; i++) {
        blk_aio_pwritev(blk, (uint64_t)i * 4096, &iov[i], 1, 4096, 0, bt_cb, &d[i]);
    }
    rf_spin(700);
    nbd_server_restart(&srv, SIZE);
    bt_wait_all(d, 8);
    for (int i = 0; i < 8; i++) {
        g_assert_cmpint(d[i].ret, ==, 0);
    }
    g_assert_cmpuint(h.calls, ==, 0);
    for (int i = 0; i < 8; i++) {
        g_assert_cmpint(bt_read(blk, (uint64_t)i * 4096, r, 4096), ==, 0);
        g_assert_cmpmem(r, 4096, w[i], 4096);
    }
    blk_unref(blk);
    nbd_server_free(&srv);
}

/* The delay passes with the server still gone: EIO, not a hang. */
static void test_reconnect_gives_up(void)
{
    NbdServer srv;
    BlockBackend *blk;
    uint8_t w[4096] = {1};
    int64_t t0;

    if (!nbd_server_need(NBD_SRV_NBDKIT)) {
        return;
    }
    nbd_server_start(&srv, NBD_SRV_NBDKIT, false, SIZE);
    blk = bt_drive("file=%s,format=raw,werror=report,file.reconnect-delay=1", srv.uri);
    nbd_server_kill(&srv);
    t0 = event_clock_ns();
    g_assert_cmpint(bt_write(blk, 0, w, sizeof(w)), ==, -EIO);
    g_assert_cmpint(event_clock_ns() - t0, >=, 500000000);
    blk_unref(blk);
    nbd_server_free(&srv);
}

/* A size that is no multiple of 512, and a server that comes back with another size. */
static void test_wrong_size(void)
{
    NbdServer srv;
    BlockBackend *blk;
    uint8_t buf[1024] = {7};

    if (!nbd_server_need(NBD_SRV_NBDKIT)) {
        return;
    }
    nbd_server_start(&srv, NBD_SRV_NBDKIT, false, 1000);
    blk = bt_blockdev("driver=nbd,node-name=n0,reconnect-delay=1,%s", srv.blockdev);
    g_assert_cmpint(blk_getlength(blk), ==, 1000);
    g_assert_cmpint(bt_write(blk, 0, buf, 512), ==, 0);
    g_assert_cmpint(bt_read(blk, 512, buf, 1024), <, 0);
    nbd_server_restart(&srv, 2000);
    /* The old connection is gone; the new one has another size and is refused. */
    for (int i = 0; i < 3; i++) {
        g_assert_cmpint(bt_write(blk, 0, buf, 512), ==, -EIO);
    }
    g_assert_cmpint(blk_getlength(blk), ==, 1000);
    nbd_server_restart(&srv, 1000);
    {
        int ret = -1;

        for (int i = 0; i < 100 && ret != 0; i++) {
            rf_spin(100);
            ret = bt_write(blk, 0, buf, 512);
            g_assert_true(ret == 0 || ret == -EIO);
        }
        g_assert_cmpint(ret, ==, 0);
    }
    blk_unref(blk);
    nbd_server_free(&srv);
}

static void test_garbage(void)
{
    static const size_t sizes[] = {0, 8, 100, 4096};

    for (unsigned i = 0; i < G_N_ELEMENTS(sizes); i++) {
        NbdGarbage *g = nbd_garbage_new("g", sizes[i]);
        g_autofree char *o =
            g_strdup_printf("driver=nbd,server.type=unix,server.path=%s", nbd_garbage_path(g));

        rf_expect_err(true, o, "Failed to connect");
        nbd_garbage_free(g);
    }
}

/* Throttling applies to the nbd drive as to any other. */
static void test_throttle(void)
{
    NbdServer srv;
    BlockBackend *blk;
    uint8_t buf[4096];
    BtDone d[10] = {{0}};
    struct iovec iov = {buf, sizeof(buf)};
    int64_t t0;

    if (!nbd_server_need(NBD_SRV_NBDKIT)) {
        return;
    }
    nbd_server_start(&srv, NBD_SRV_NBDKIT, true, SIZE);
    blk = bt_drive("file=%s,format=raw,throttling.iops-total=20", srv.uri);
    t0 = event_clock_ns();
    for (int i = 0; i < 10; i++) {
        blk_aio_preadv(blk, 0, &iov, 1, sizeof(buf), 0, bt_cb, &d[i]);
    }
    bt_wait_all(d, 10);
    for (int i = 0; i < 10; i++) {
        g_assert_cmpint(d[i].ret, ==, 0);
    }
    /* 10 requests at 20 IOPS: about half a second (the bucket lets a burst through first). */
    g_assert_cmpint(event_clock_ns() - t0, >=, 300000000);
    blk_unref(blk);
    nbd_server_free(&srv);
}

int main(int argc, char **argv)
{
    static const Case cases[] = {
        {NBD_SRV_NBDKIT, false, false},  {NBD_SRV_NBDKIT, true, false},
        {NBD_SRV_NBDKIT, false, true},   {NBD_SRV_NBDKIT, true, true},
        {NBD_SRV_QEMU_NBD, false, false}, {NBD_SRV_QEMU_NBD, true, false},
        {NBD_SRV_QEMU_NBD, false, true},  {NBD_SRV_QEMU_NBD, true, true},
    };

    g_test_init(&argc, &argv, NULL);
    bt_init();
    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        const Case *c = &cases[i];
        g_autofree char *p = g_strdup_printf(
            "/nbd/rw/%s/%s/%s", c->kind == NBD_SRV_NBDKIT ? "nbdkit" : "qemu-nbd",
            c->tcp ? "tcp" : "unix", c->blockdev ? "blockdev" : "drive");

        g_test_add_data_func(p, c, test_rw);
    }
    g_test_add_func("/nbd/bad-options", test_bad_options);
    g_test_add_func("/nbd/bad-options-connect", test_bad_options2);
    g_test_add_func("/nbd/fault/kill-report", test_kill_report);
    g_test_add_func("/nbd/fault/kill-stop", test_kill_stop);
    g_test_add_data_func("/nbd/fault/reconnect/unix", &cases[4], test_reconnect);
    g_test_add_data_func("/nbd/fault/reconnect/tcp", &cases[5], test_reconnect);
    g_test_add_func("/nbd/fault/reconnect-gives-up", test_reconnect_gives_up);
    g_test_add_func("/nbd/fault/wrong-size", test_wrong_size);
    g_test_add_func("/nbd/fault/garbage", test_garbage);
    g_test_add_func("/nbd/throttle", test_throttle);
    return g_test_run();
}
