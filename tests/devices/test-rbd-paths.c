/*
 * A virtio-blk device on a Ceph RBD disk, both request paths and the switch,
 * in-process: the test driver plays the guest, the request engine runs on
 * the dataplane's "rbd" IOQ (its own image handle; librbd's completions
 * reach the iothread through the IOQ's eventfd) and on the block layer's
 * rbd node. The cluster is scripts/ceph-cluster's (scripts/test-rbd starts
 * it); without one the test exits 77 with the reason.
 *
 * Checked: what one path wrote the other reads back, with multi-descriptor
 * requests (handed to librbd as one readv/writev); FLUSH, WRITE_ZEROES and
 * DISCARD with their status bytes; writes in flight across twenty switches
 * all complete once and land; the OSD stopped under the dataplane gives
 * IOERR (werror=report, rados_osd_op_timeout=3 in the filename) and the
 * dataplane works again once it is back.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <endian.h>
#include <stdio.h>
#include <linux/virtio_blk.h>
#include <string.h>
#include <unistd.h>

#include "dataplane/dataplane.h"
#include "devices/dp-switch.h"
#include "cephtest.h"
#include "ioq/ioq.h"
#include "testdrv.h"

#define QSIZE 64
#define SIZE  (4u << 20)

static char *ceph_conf;

typedef struct Fix {
    char *image;
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

static void fix_init(Fix *f, const char *extra, bool dataplane)
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
    f->image = ceph_test_image_new(ceph_conf, SIZE);
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
    f->iothread = iothread_new("rbd-io", &err);
    g_assert_no_error(err);
    opts = g_strdup_printf("file=rbd:rbd/%s:conf=%s%s,format=raw,cache=writeback,discard=unmap",
                           f->image, ceph_conf, extra);
    t = blk_opts_parse(opts);
    f->backend = blk_new_from_drive_opts(t, f->main_loop, &err);
    g_hash_table_unref(t);
    g_assert_no_error(err);
    blk_get_host_info(f->backend, &hi);
    g_assert_true(hi.rbd);
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
    /* What virtio-blk-pci hands over for an rbd drive (blk_open_host). */
    f->sw = dp_switch_new(&(DpSwitchConf){.blk = f->blk,
                                          .main_loop = f->main_loop,
                                          .backend = f->backend,
                                          .iothread = f->iothread,
                                          .ioq = {.engine = "rbd",
                                                  .bounce_pool_size = 8 << 20,
                                                  .rbd = {.pool = hi.rbd_pool,
                                                          .rbd_namespace = hi.rbd_namespace,
                                                          .image = hi.rbd_image,
                                                          .conf = hi.rbd_conf,
                                                          .user = hi.rbd_user,
                                                          .conf_kv = hi.rbd_conf_kv}},
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
    ceph_test_image_remove(ceph_conf, f->image);
    g_free(f->image);
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
    for (int i = 0; i < 1000000 && !f->used[hd]; i++) {
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

static void test_paths(void)
{
    Fix f;
    IOQStats is;

    fix_init(&f, "", true);
    check_rw(&f, 0, 1);     /* dataplane -> block layer -> dataplane */
    check_zero_discard(&f); /* on the dataplane */
    g_assert_true(dp_switch_set_dataplane(f.sw, false, NULL));
    check_rw(&f, 1000, 2);  /* block layer -> dataplane -> block layer */
    check_zero_discard(&f);
    dataplane_get_ioq_stats(dp_switch_dataplane(f.sw), &is);
    g_assert_cmpuint(is.submitted, >, 0);
    g_assert_cmpuint(is.bounces, ==, 0); /* several iovecs go to librbd as they are */
    g_assert_cmpuint(blk_getlength(f.backend), ==, SIZE);
    fix_free(&f);
}

/* Writes in flight while the device switches, twenty times. */
static void test_switch_inflight(void)
{
    enum { N = 8, ROUNDS = 20 };
    uint8_t w[N][4096], r[4096];
    uint64_t wb[N], rb;
    int hd[N];
    Fix f;

    fix_init(&f, "", false);
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

/* The OSD stops under the dataplane: IOERR (werror=report), then it comes back. */
static void test_dataplane_osd_stop(void)
{
    uint8_t w[4096], r[4096];
    uint64_t wb, rb;
    uint8_t st = 0xff;
    Fix f;

    if (!g_getenv("VBLK_CEPH_SCRIPT")) {
        g_test_skip("VBLK_CEPH_SCRIPT is not set");
        return;
    }
    fix_init(&f, ":rados_osd_op_timeout=3,werror=report,rerror=report", true);
    wb = testdrv_alloc(f.d, 4096, 4096);
    rb = testdrv_alloc(f.d, 4096, 4096);
    pattern(w, sizeof(w), 9);
    testdrv_memwrite(f.d, wb, w, sizeof(w));
    g_assert_cmpuint(do_req(&f, VIRTIO_BLK_T_OUT, 8, wb, 4096, 1), ==, VIRTIO_BLK_S_OK);
    g_assert_true(ceph_test_osd(false));
    g_assert_cmpuint(do_req(&f, VIRTIO_BLK_T_OUT, 16, wb, 4096, 1), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(do_req(&f, VIRTIO_BLK_T_IN, 8, rb, 4096, 1), ==, VIRTIO_BLK_S_IOERR);
    g_assert_true(ceph_test_osd(true));
    for (int i = 0; i < 30 && st != VIRTIO_BLK_S_OK; i++) {
        st = do_req(&f, VIRTIO_BLK_T_IN, 8, rb, 4096, 1);
    }
    g_assert_cmpuint(st, ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f.d, rb, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    /* And the switch still works both ways. */
    check_rw(&f, 100, 4);
    fix_free(&f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    if (!ioq_have_rbd()) {
        printf("1..0 # SKIP rbd support not compiled in\n");
        return 77;
    }
    ceph_conf = ceph_test_conf_or_skip();
    g_test_add_func("/rbd-paths/rw", test_paths);
    g_test_add_func("/rbd-paths/switch-inflight", test_switch_inflight);
    g_test_add_func("/rbd-paths/fault/dataplane-osd-stop", test_dataplane_osd_stop);
    return g_test_run();
}
