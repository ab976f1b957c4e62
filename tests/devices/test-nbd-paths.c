/*
 * A virtio-blk device on an NBD disk, both request paths and the switch,
 * in-process: the test driver plays the guest, the request engine runs on
 * the dataplane's "nbd" IOQ (its own connection, polled in the iothread)
 * and on the block layer's nbd node. Servers: nbdkit (memory, unix socket)
 * and qemu-nbd (file, 127.0.0.1), started by the test.
 *
 * Checked: what one path wrote the other reads back, with multi-descriptor
 * requests (bounced into one NBD command); FLUSH, WRITE_ZEROES and DISCARD;
 * writes in flight across twenty switches all complete once and land; a
 * server killed under the dataplane gives IOERR (werror=report, no
 * reconnect-delay) and the dataplane works again once it is back; with a
 * reconnect-delay the dataplane's requests wait for the server instead.
 * Skips, saying so, without nbdkit / qemu-nbd.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <endian.h>
#include <linux/virtio_blk.h>
#include <string.h>
#include <unistd.h>

#include "dataplane/dataplane.h"
#include "devices/dp-switch.h"
#include "nbdserver.h"
#include "testdrv.h"

#define QSIZE 64
#define SIZE  (4u << 20)

typedef struct Fix {
    NbdServer srv;
    TestDrv *d;
    TestVq *tvq;
    VirtQueue *vq;
    VirtIOBlkQueue *q;
    VirtIOBlk *blk;
    EventLoop *main_loop;
    IOThread *iothread;
    BlockBackend *backend;
    DpSwitch *sw;
    bool used[QSIZE];
    uint8_t status_of[QSIZE];
    uint64_t status_gpa[QSIZE];
} Fix;

static void fix_init(Fix *f, NbdServerKind kind, bool tcp, const char *extra, bool dataplane)
{
    TestDrvOpts dopts = {.ram_size = 32 << 20};
    GError *err = NULL;
    VirtIOBlkConf conf;
    BlockHostInfo hi;
    uint64_t features;
    g_autofree char *opts = NULL;
    GHashTable *t;
    DataPlaneQueue dq;

    memset(f, 0, sizeof(*f));
    nbd_server_start(&f->srv, kind, tcp, SIZE);
    f->d = testdrv_new(&dopts);
    virtio_blk_conf_init(&conf, SIZE / 512);
    conf.queue_size = QSIZE;
    conf.discard = true;
    conf.write_zeroes = true;
    f->blk = virtio_blk_new(&conf, &err);
    g_assert_no_error(err);
    features = testdrv_negotiate(virtio_blk_get_host_features(f->blk), ~0ull);
    g_assert_true(virtio_blk_set_features(f->blk, features, &err));
    f->main_loop = event_loop_new(&err);
    g_assert_no_error(err);
    f->iothread = iothread_new("nbd-io", &err);
    g_assert_no_error(err);
    opts = g_strdup_printf("file=%s,format=raw,cache=writeback%s", f->srv.uri, extra);
    t = blk_opts_parse(opts);
    f->backend = blk_new_from_drive_opts(t, f->main_loop, &err);
    g_hash_table_unref(t);
    g_assert_no_error(err);
    blk_get_host_info(f->backend, &hi);
    g_assert_true(hi.nbd);
    g_assert_null(hi.not_passthrough);

    f->tvq = testvq_new(f->d, QSIZE, features);
    f->vq = virtqueue_new(testdrv_guestmem(f->d), QSIZE, testvq_desc_gpa(f->tvq),
                          testvq_avail_gpa(f->tvq), testvq_used_gpa(f->tvq), features, &err);
    g_assert_no_error(err);
    f->q = virtio_blk_queue_new(f->blk, f->vq, NULL, NULL, &err);
    g_assert_no_error(err);
    dq = (DataPlaneQueue){.q = f->q,
                          .host_notifier = testvq_kick_fd(f->tvq),
                          .notifier = {.fd = testvq_call_fd(f->tvq)}};
    /* What virtio-blk-pci hands over for an nbd drive (blk_open_host). */
    f->sw = dp_switch_new(&(DpSwitchConf){.blk = f->blk,
                                          .main_loop = f->main_loop,
                                          .backend = f->backend,
                                          .iothread = f->iothread,
                                          .ioq = {.engine = "nbd",
                                                  .bounce_pool_size = 8 << 20,
                                                  .nbd = {.host = hi.nbd_host,
                                                          .port = hi.nbd_port,
                                                          .socket = hi.nbd_socket,
                                                          .export_name = hi.nbd_export,
                                                          .reconnect_delay_s =
                                                              hi.nbd_reconnect_delay}},
                                          .num_queues = 1,
                                          .queue_size = QSIZE},
                          &err);
    g_assert_no_error(err);
    g_assert_true(dp_switch_start(f->sw, dataplane, &dq, 1, &err));
    g_assert_no_error(err);
}

static void fix_free(Fix *f)
{
    dp_switch_stop(f->sw);
    dp_switch_free(f->sw);
    blk_unref(f->backend);
    iothread_free(f->iothread);
    event_loop_free(f->main_loop);
    virtio_blk_queue_free(f->q);
    virtqueue_free(f->vq);
    testvq_free(f->tvq);
    virtio_blk_free(f->blk);
    testdrv_free(f->d);
    nbd_server_free(&f->srv);
}

/*
 * Queue one request: header, @nbuf data buffers of @len/@nbuf bytes at @data
 * (device-writable for reads), status. Returns the head.
 */
static int submit(Fix *f, uint32_t type, uint64_t sector, uint64_t data, uint32_t len,
                  unsigned nbuf)
{
    struct virtio_blk_outhdr h = {.type = htole32(type), .sector = htole64(sector)};
    uint64_t hdr = testdrv_alloc(f->d, 16, 16), st = testdrv_alloc(f->d, 1, 1);
    TestBuf bufs[6];
    unsigned n = 0;
    uint8_t ff = 0xff;
    int hd;

    testdrv_memwrite(f->d, hdr, &h, sizeof(h));
    testdrv_memwrite(f->d, st, &ff, 1);
    bufs[n++] = (TestBuf){hdr, 16, false};
    for (unsigned i = 0; i < nbuf; i++) {
        bufs[n++] = (TestBuf){data + (uint64_t)i * (len / nbuf), len / nbuf,
                              type == VIRTIO_BLK_T_IN};
    }
    bufs[n++] = (TestBuf){st, 1, true};
    hd = testvq_add_chain(f->tvq, bufs, n);
    g_assert_cmpint(hd, >=, 0);
    f->used[hd] = false;
    f->status_gpa[hd] = st;
    testvq_publish(f->tvq, (uint16_t)hd);
    return hd;
}

/* Serve the block layer (main loop) until @hd is used; returns its status. */
static uint8_t wait_head(Fix *f, int hd)
{
    uint16_t head;
    uint32_t len;

    testvq_kick(f->tvq);
    for (int i = 0; i < 400000 && !f->used[hd]; i++) {
        while (testvq_get_used(f->tvq, &head, &len)) {
            g_assert_cmpuint(head, <, QSIZE);
            g_assert_false(f->used[head]); /* once */
            f->used[head] = true;
            f->status_of[head] = testdrv_readb(f->d, f->status_gpa[head]);
        }
        if (!f->used[hd]) {
            event_loop_run_once(f->main_loop, false);
            g_usleep(50);
        }
    }
    g_assert_true(f->used[hd]);
    return f->status_of[hd];
}

static uint8_t do_req(Fix *f, uint32_t type, uint64_t sector, uint64_t data, uint32_t len,
                      unsigned nbuf)
{
    return wait_head(f, submit(f, type, sector, data, len, nbuf));
}

static void pattern(uint8_t *b, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++) {
        b[i] = (uint8_t)(i * 31 + seed + (i >> 9));
    }
}

/* Write on the current path, then check on the other (and back). */
static void check_rw(Fix *f, uint64_t sector, uint8_t seed)
{
    uint8_t w[16384], r[16384];
    uint64_t wb = testdrv_alloc(f->d, sizeof(w), 4096), rb = testdrv_alloc(f->d, sizeof(r), 4096);
    GError *err = NULL;
    bool on = dp_switch_is_dataplane(f->sw);

    pattern(w, sizeof(w), seed);
    testdrv_memwrite(f->d, wb, w, sizeof(w));
    g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_OUT, sector, wb, sizeof(w), 4), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_FLUSH, 0, 0, 0, 0), ==, VIRTIO_BLK_S_OK);
    for (int pass = 0; pass < 2; pass++) {
        g_assert_true(dp_switch_set_dataplane(f->sw, pass == 0 ? !on : on, &err));
        g_assert_no_error(err);
        testdrv_memset(f->d, rb, 0, sizeof(r));
        g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_IN, sector, rb, sizeof(r), pass ? 1 : 2), ==,
                         VIRTIO_BLK_S_OK);
        testdrv_memread(f->d, rb, r, sizeof(r));
        g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    }
}

/* WRITE_ZEROES and DISCARD on the current path. */
static void check_zero_discard(Fix *f)
{
    struct virtio_blk_discard_write_zeroes seg = {.sector = htole64(64),
                                                  .num_sectors = htole32(8)};
    uint64_t sb = testdrv_alloc(f->d, sizeof(seg), 16), rb = testdrv_alloc(f->d, 4096, 4096);
    uint8_t r[4096], zero[4096] = {0};

    testdrv_memwrite(f->d, sb, &seg, sizeof(seg));
    g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_WRITE_ZEROES, 0, sb, sizeof(seg), 1), ==,
                     VIRTIO_BLK_S_OK);
    testdrv_memset(f->d, rb, 0xaa, sizeof(r));
    g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_IN, 64, rb, sizeof(r), 1), ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f->d, rb, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), zero, sizeof(zero));
    seg.sector = htole64(256);
    testdrv_memwrite(f->d, sb, &seg, sizeof(seg));
    g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_DISCARD, 0, sb, sizeof(seg), 1), ==,
                     VIRTIO_BLK_S_OK);
}

typedef struct Case {
    NbdServerKind kind;
    bool tcp;
} Case;

static bool need(NbdServerKind kind)
{
    if (!nbd_server_available(kind)) {
        g_test_skip(kind == NBD_SRV_NBDKIT ? "nbdkit is not installed"
                                           : "qemu-nbd is not installed");
        return false;
    }
    return true;
}

static void test_paths(gconstpointer data)
{
    const Case *c = data;
    Fix f;
    IOQStats is;

    if (!need(c->kind)) {
        return;
    }
    fix_init(&f, c->kind, c->tcp, "", true);
    check_rw(&f, 0, 1);       /* dataplane -> block layer -> dataplane */
    check_zero_discard(&f);   /* on the dataplane */
    g_assert_true(dp_switch_set_dataplane(f.sw, false, NULL));
    check_rw(&f, 1000, 2);    /* block layer -> dataplane -> block layer */
    check_zero_discard(&f);
    dataplane_get_ioq_stats(dp_switch_dataplane(f.sw), &is);
    g_assert_cmpuint(is.submitted, >, 0);
    g_assert_cmpuint(is.bounces, >, 0); /* the multi-descriptor requests */
    g_assert_cmpuint(blk_getlength(f.backend), ==, SIZE);
    fix_free(&f);
}

/* Writes in flight while the device switches, twenty times. */
static void test_switch_inflight(gconstpointer data)
{
    const Case *c = data;
    enum { N = 8, ROUNDS = 20 };
    uint8_t w[N][4096], r[4096];
    uint64_t wb[N], rb;
    int hd[N];
    Fix f;

    if (!need(c->kind)) {
        return;
    }
    fix_init(&f, c->kind, c->tcp, "", false);
    rb = testdrv_alloc(f.d, 4096, 4096);
    for (int i = 0; i < N; i++) {
        wb[i] = testdrv_alloc(f.d, 4096, 4096);
    }
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < N; i++) {
            pattern(w[i], 4096, (uint8_t)(round * N + i));
            testdrv_memwrite(f.d, wb[i], w[i], 4096);
            hd[i] = submit(&f, VIRTIO_BLK_T_OUT, (uint64_t)i * 8, wb[i], 4096, i % 2 + 1);
        }
        testvq_kick(f.tvq);
        g_assert_true(dp_switch_set_dataplane(f.sw, round % 2 == 0, NULL));
        for (int i = 0; i < N; i++) {
            g_assert_cmpuint(wait_head(&f, hd[i]), ==, VIRTIO_BLK_S_OK);
        }
        for (int i = 0; i < N; i++) {
            testdrv_memset(f.d, rb, 0, 4096);
            g_assert_cmpuint(do_req(&f, VIRTIO_BLK_T_IN, (uint64_t)i * 8, rb, 4096, 1), ==,
                             VIRTIO_BLK_S_OK);
            testdrv_memread(f.d, rb, r, 4096);
            g_assert_cmpmem(r, 4096, w[i], 4096);
        }
    }
    fix_free(&f);
}

/* The server dies under the dataplane: IOERR (no reconnect-delay), then it comes back. */
static void test_dataplane_kill(void)
{
    uint8_t w[4096], r[4096];
    uint64_t wb, rb;
    uint8_t st = 0xff;
    Fix f;

    if (!need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    fix_init(&f, NBD_SRV_QEMU_NBD, false, ",werror=report", true);
    wb = testdrv_alloc(f.d, 4096, 4096);
    rb = testdrv_alloc(f.d, 4096, 4096);
    pattern(w, sizeof(w), 9);
    testdrv_memwrite(f.d, wb, w, sizeof(w));
    g_assert_cmpuint(do_req(&f, VIRTIO_BLK_T_OUT, 8, wb, 4096, 1), ==, VIRTIO_BLK_S_OK);
    nbd_server_kill(&f.srv);
    g_assert_cmpuint(do_req(&f, VIRTIO_BLK_T_OUT, 16, wb, 4096, 1), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(do_req(&f, VIRTIO_BLK_T_IN, 8, rb, 4096, 1), ==, VIRTIO_BLK_S_IOERR);
    nbd_server_restart(&f.srv, SIZE);
    for (int i = 0; i < 50 && st != VIRTIO_BLK_S_OK; i++) {
        g_usleep(100000);
        st = do_req(&f, VIRTIO_BLK_T_IN, 8, rb, 4096, 1);
    }
    g_assert_cmpuint(st, ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f.d, rb, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    /* And the switch still works both ways. */
    check_rw(&f, 100, 4);
    fix_free(&f);
}

/* reconnect-delay: the dataplane's requests wait for the server, then succeed. */
static void test_dataplane_reconnect(void)
{
    uint8_t w[4096], r[4096];
    uint64_t wb, rb;
    int hd;
    Fix f;

    if (!need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    fix_init(&f, NBD_SRV_QEMU_NBD, true, ",werror=report,reconnect-delay=10", true);
    wb = testdrv_alloc(f.d, 4096, 4096);
    rb = testdrv_alloc(f.d, 4096, 4096);
    pattern(w, sizeof(w), 11);
    testdrv_memwrite(f.d, wb, w, sizeof(w));
    nbd_server_kill(&f.srv);
    hd = submit(&f, VIRTIO_BLK_T_OUT, 24, wb, 4096, 1);
    testvq_kick(f.tvq);
    g_usleep(500000);
    nbd_server_restart(&f.srv, SIZE);
    g_assert_cmpuint(wait_head(&f, hd), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(do_req(&f, VIRTIO_BLK_T_IN, 24, rb, 4096, 1), ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f.d, rb, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    fix_free(&f);
}

int main(int argc, char **argv)
{
    static const Case cases[] = {{NBD_SRV_NBDKIT, false}, {NBD_SRV_QEMU_NBD, true}};

    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/nbd-paths/rw/nbdkit-unix", &cases[0], test_paths);
    g_test_add_data_func("/nbd-paths/rw/qemu-nbd-tcp", &cases[1], test_paths);
    g_test_add_data_func("/nbd-paths/switch-inflight/nbdkit-unix", &cases[0],
                         test_switch_inflight);
    g_test_add_data_func("/nbd-paths/switch-inflight/qemu-nbd-tcp", &cases[1],
                         test_switch_inflight);
    g_test_add_func("/nbd-paths/fault/dataplane-kill", test_dataplane_kill);
    g_test_add_func("/nbd-paths/fault/dataplane-reconnect", test_dataplane_reconnect);
    return g_test_run();
}
