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

#include "devfix.h"
#include "nbdserver.h"

#define QSIZE 64
#define SIZE  (4u << 20)

typedef struct Fix {
    NbdServer srv;
    DevFix dev;
    bool used[QSIZE];
    uint8_t status_of[QSIZE];
    uint64_t status_gpa[QSIZE];
} Fix;

static void fix_init(Fix *f, NbdServerKind kind, bool tcp, const char *extra, bool dataplane)
{
    g_autofree char *opts = NULL;

    memset(f, 0, sizeof(*f));
    nbd_server_start(&f->srv, kind, tcp, SIZE);
    opts = g_strdup_printf("file=%%s,format=raw,cache=writeback%s", extra);
    /* What virtio-blk-pci hands over for an nbd drive (blk_open_host). */
    devfix_init(&f->dev, &(DevFixConf){.drive = opts,
                                       .image = f->srv.uri,
                                       .bytes = SIZE,
                                       .ram_size = 32 << 20,
                                       .queue_size = QSIZE,
                                       .iothread = "nbd-io",
                                       .ioq = {.bounce_pool_size = 8 << 20}},
                NULL);
    g_assert_true(f->dev.hi.nbd);
    g_assert_null(f->dev.hi.not_passthrough);
    g_assert_cmpstr(f->dev.swconf.ioq.engine, ==, "nbd");
    devfix_start(&f->dev, dataplane, NULL);
}

static void fix_free(Fix *f)
{
    devfix_fini(&f->dev);
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
    uint64_t hdr = testdrv_alloc(f->dev.d, 16, 16), st = testdrv_alloc(f->dev.d, 1, 1);
    TestBuf bufs[6];
    unsigned n = 0;
    uint8_t ff = 0xff;
    int hd;

    testdrv_memwrite(f->dev.d, hdr, &h, sizeof(h));
    testdrv_memwrite(f->dev.d, st, &ff, 1);
    bufs[n++] = (TestBuf){hdr, 16, false};
    for (unsigned i = 0; i < nbuf; i++) {
        bufs[n++] = (TestBuf){data + (uint64_t)i * (len / nbuf), len / nbuf,
                              type == VIRTIO_BLK_T_IN};
    }
    bufs[n++] = (TestBuf){st, 1, true};
    hd = testvq_add_chain(f->dev.tvq[0], bufs, n);
    g_assert_cmpint(hd, >=, 0);
    f->used[hd] = false;
    f->status_gpa[hd] = st;
    testvq_publish(f->dev.tvq[0], (uint16_t)hd);
    return hd;
}

/* Serve the block layer (main loop) until @hd is used; returns its status. */
static uint8_t wait_head(Fix *f, int hd)
{
    uint16_t head;
    uint32_t len;

    testvq_kick(f->dev.tvq[0]);
    for (int i = 0; i < 400000 && !f->used[hd]; i++) {
        while (testvq_get_used(f->dev.tvq[0], &head, &len)) {
            g_assert_cmpuint(head, <, QSIZE);
            g_assert_false(f->used[head]); /* once */
            f->used[head] = true;
            f->status_of[head] = testdrv_readb(f->dev.d, f->status_gpa[head]);
        }
        if (!f->used[hd]) {
            event_loop_run_once(f->dev.main_loop, false);
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
    uint64_t wb = testdrv_alloc(f->dev.d, sizeof(w), 4096);
    uint64_t rb = testdrv_alloc(f->dev.d, sizeof(r), 4096);
    GError *err = NULL;
    bool on = dp_switch_is_dataplane(f->dev.sw);

    pattern(w, sizeof(w), seed);
    testdrv_memwrite(f->dev.d, wb, w, sizeof(w));
    g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_OUT, sector, wb, sizeof(w), 4), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_FLUSH, 0, 0, 0, 0), ==, VIRTIO_BLK_S_OK);
    for (int pass = 0; pass < 2; pass++) {
        g_assert_true(dp_switch_set_dataplane(f->dev.sw, pass == 0 ? !on : on, &err));
        g_assert_no_error(err);
        testdrv_memset(f->dev.d, rb, 0, sizeof(r));
        g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_IN, sector, rb, sizeof(r), pass ? 1 : 2), ==,
                         VIRTIO_BLK_S_OK);
        testdrv_memread(f->dev.d, rb, r, sizeof(r));
        g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    }
}

/* WRITE_ZEROES and DISCARD on the current path. */
static void check_zero_discard(Fix *f)
{
    struct virtio_blk_discard_write_zeroes seg = {.sector = htole64(64),
                                                  .num_sectors = htole32(8)};
    uint64_t sb = testdrv_alloc(f->dev.d, sizeof(seg), 16);
    uint64_t rb = testdrv_alloc(f->dev.d, 4096, 4096);
    uint8_t r[4096], zero[4096] = {0};

    testdrv_memwrite(f->dev.d, sb, &seg, sizeof(seg));
    g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_WRITE_ZEROES, 0, sb, sizeof(seg), 1), ==,
                     VIRTIO_BLK_S_OK);
    testdrv_memset(f->dev.d, rb, 0xaa, sizeof(r));
    g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_IN, 64, rb, sizeof(r), 1), ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f->dev.d, rb, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), zero, sizeof(zero));
    seg.sector = htole64(256);
    testdrv_memwrite(f->dev.d, sb, &seg, sizeof(seg));
    g_assert_cmpuint(do_req(f, VIRTIO_BLK_T_DISCARD, 0, sb, sizeof(seg), 1), ==,
                     VIRTIO_BLK_S_OK);
}

typedef struct Case {
    NbdServerKind kind;
    bool tcp;
} Case;

static void test_paths(gconstpointer data)
{
    const Case *c = data;
    Fix f;
    IOQStats is;

    if (!nbd_server_need(c->kind)) {
        return;
    }
    fix_init(&f, c->kind, c->tcp, "", true);
    check_rw(&f, 0, 1);       /* dataplane -> block layer -> dataplane */
    check_zero_discard(&f);   /* on the dataplane */
    g_assert_true(dp_switch_set_dataplane(f.dev.sw, false, NULL));
    check_rw(&f, 1000, 2);    /* block layer -> dataplane -> block layer */
    check_zero_discard(&f);
    dataplane_get_ioq_stats(dp_switch_dataplane(f.dev.sw), &is);
    g_assert_cmpuint(is.submitted, >, 0);
    g_assert_cmpuint(is.bounces, >, 0); /* the multi-descriptor requests */
    g_assert_cmpuint(blk_getlength(f.dev.backend), ==, SIZE);
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

    if (!nbd_server_need(c->kind)) {
        return;
    }
    fix_init(&f, c->kind, c->tcp, "", false);
    rb = testdrv_alloc(f.dev.d, 4096, 4096);
    for (int i = 0; i < N; i++) {
        wb[i] = testdrv_alloc(f.dev.d, 4096, 4096);
    }
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < N; i++) {
            pattern(w[i], 4096, (uint8_t)(round * N + i));
            testdrv_memwrite(f.dev.d, wb[i], w[i], 4096);
            hd[i] = submit(&f, VIRTIO_BLK_T_OUT, (uint64_t)i * 8, wb[i], 4096, i % 2 + 1);
        }
        testvq_kick(f.dev.tvq[0]);
        g_assert_true(dp_switch_set_dataplane(f.dev.sw, round % 2 == 0, NULL));
        for (int i = 0; i < N; i++) {
            g_assert_cmpuint(wait_head(&f, hd[i]), ==, VIRTIO_BLK_S_OK);
        }
        for (int i = 0; i < N; i++) {
            testdrv_memset(f.dev.d, rb, 0, 4096);
            g_assert_cmpuint(do_req(&f, VIRTIO_BLK_T_IN, (uint64_t)i * 8, rb, 4096, 1), ==,
                             VIRTIO_BLK_S_OK);
            testdrv_memread(f.dev.d, rb, r, 4096);
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

    if (!nbd_server_need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    fix_init(&f, NBD_SRV_QEMU_NBD, false, ",werror=report", true);
    wb = testdrv_alloc(f.dev.d, 4096, 4096);
    rb = testdrv_alloc(f.dev.d, 4096, 4096);
    pattern(w, sizeof(w), 9);
    testdrv_memwrite(f.dev.d, wb, w, sizeof(w));
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
    testdrv_memread(f.dev.d, rb, r, sizeof(r));
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

    if (!nbd_server_need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    fix_init(&f, NBD_SRV_QEMU_NBD, true, ",werror=report,reconnect-delay=10", true);
    wb = testdrv_alloc(f.dev.d, 4096, 4096);
    rb = testdrv_alloc(f.dev.d, 4096, 4096);
    pattern(w, sizeof(w), 11);
    testdrv_memwrite(f.dev.d, wb, w, sizeof(w));
    nbd_server_kill(&f.srv);
    hd = submit(&f, VIRTIO_BLK_T_OUT, 24, wb, 4096, 1);
    testvq_kick(f.dev.tvq[0]);
    g_usleep(500000);
    nbd_server_restart(&f.srv, SIZE);
    g_assert_cmpuint(wait_head(&f, hd), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(do_req(&f, VIRTIO_BLK_T_IN, 24, rb, 4096, 1), ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f.dev.d, rb, r, sizeof(r));
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
