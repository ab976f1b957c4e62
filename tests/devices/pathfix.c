/*
 * A virtio-blk device on a remote disk, for test-nbd-paths and
 * test-rbd-paths (pathfix.h).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <endian.h>
#include <linux/virtio_blk.h>
#include <string.h>

#include "pathfix.h"

void pathfix_init(PathFix *f, const char *drive, const char *image, const char *iothread,
                  bool dataplane, unsigned wait_polls)
{
    pathfix_init_pool(f, drive, image, iothread, dataplane, wait_polls, 8 << 20);
}

void pathfix_init_pool(PathFix *f, const char *drive, const char *image, const char *iothread,
                       bool dataplane, unsigned wait_polls, size_t bounce_pool_size)
{
    memset(f, 0, sizeof(*f));
    f->wait_polls = wait_polls;
    /* What virtio-blk-pci hands over for a remote drive (blk_open_host). */
    devfix_init(&f->dev, &(DevFixConf){.drive = drive,
                                       .image = image,
                                       .bytes = PATHFIX_SIZE,
                                       .ram_size = 32 << 20,
                                       .queue_size = PATHFIX_QSIZE,
                                       .iothread = iothread,
                                       .ioq = {.bounce_pool_size = bounce_pool_size}},
                NULL);
    g_assert_null(f->dev.hi.not_passthrough);
    devfix_start(&f->dev, dataplane, NULL);
}

void pathfix_free(PathFix *f)
{
    devfix_fini(&f->dev);
}

int pathfix_submit(PathFix *f, uint32_t type, uint64_t sector, uint64_t data, uint32_t len,
                   unsigned nbuf)
{
    struct virtio_blk_outhdr h = {.type = htole32(type), .sector = htole64(sector)};
    uint64_t hdr = testdrv_alloc(f->dev.d, 16, 16), st = testdrv_alloc(f->dev.d, 1, 1);
    TestBuf bufs[6];
    unsigned n = 0;
    uint8_t ff = 0xff;
    int hd;

    g_assert_cmpuint(nbuf, <=, 4);
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

uint8_t pathfix_wait(PathFix *f, int hd)
{
    uint16_t head;
    uint32_t len;

    testvq_kick(f->dev.tvq[0]);
    for (unsigned i = 0; i < f->wait_polls && !f->used[hd]; i++) {
        while (testvq_get_used(f->dev.tvq[0], &head, &len)) {
            g_assert_cmpuint(head, <, PATHFIX_QSIZE);
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

uint8_t pathfix_req(PathFix *f, uint32_t type, uint64_t sector, uint64_t data, uint32_t len,
                    unsigned nbuf)
{
    return pathfix_wait(f, pathfix_submit(f, type, sector, data, len, nbuf));
}

void pathfix_pattern(uint8_t *b, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++) {
        b[i] = (uint8_t)(i * 31 + seed + (i >> 9));
    }
}

/* Write on the current path, then check on the other (and back). */
static void check_rw(PathFix *f, uint64_t sector, uint8_t seed)
{
    uint8_t w[16384], r[16384];
    uint64_t wb = testdrv_alloc(f->dev.d, sizeof(w), 4096);
    uint64_t rb = testdrv_alloc(f->dev.d, sizeof(r), 4096);
    GError *err = NULL;
    bool on = dp_switch_is_dataplane(f->dev.sw);

    pathfix_pattern(w, sizeof(w), seed);
    testdrv_memwrite(f->dev.d, wb, w, sizeof(w));
    g_assert_cmpuint(pathfix_req(f, VIRTIO_BLK_T_OUT, sector, wb, sizeof(w), 4), ==,
                     VIRTIO_BLK_S_OK);
    g_assert_cmpuint(pathfix_req(f, VIRTIO_BLK_T_FLUSH, 0, 0, 0, 0), ==, VIRTIO_BLK_S_OK);
    for (int pass = 0; pass < 2; pass++) {
        g_assert_true(dp_switch_set_dataplane(f->dev.sw, pass == 0 ? !on : on, &err));
        g_assert_no_error(err);
        testdrv_memset(f->dev.d, rb, 0, sizeof(r));
        g_assert_cmpuint(pathfix_req(f, VIRTIO_BLK_T_IN, sector, rb, sizeof(r), pass ? 1 : 2), ==,
                         VIRTIO_BLK_S_OK);
        testdrv_memread(f->dev.d, rb, r, sizeof(r));
        g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    }
}

/* WRITE_ZEROES and DISCARD on the current path. */
static void check_zero_discard(PathFix *f)
{
    struct virtio_blk_discard_write_zeroes seg = {.sector = htole64(64),
                                                  .num_sectors = htole32(8)};
    uint64_t sb = testdrv_alloc(f->dev.d, sizeof(seg), 16);
    uint64_t rb = testdrv_alloc(f->dev.d, 4096, 4096);
    uint8_t r[4096], zero[4096] = {0};

    testdrv_memwrite(f->dev.d, sb, &seg, sizeof(seg));
    g_assert_cmpuint(pathfix_req(f, VIRTIO_BLK_T_WRITE_ZEROES, 0, sb, sizeof(seg), 1), ==,
                     VIRTIO_BLK_S_OK);
    testdrv_memset(f->dev.d, rb, 0xaa, sizeof(r));
    g_assert_cmpuint(pathfix_req(f, VIRTIO_BLK_T_IN, 64, rb, sizeof(r), 1), ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f->dev.d, rb, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), zero, sizeof(zero));
    seg.sector = htole64(256);
    testdrv_memwrite(f->dev.d, sb, &seg, sizeof(seg));
    g_assert_cmpuint(pathfix_req(f, VIRTIO_BLK_T_DISCARD, 0, sb, sizeof(seg), 1), ==,
                     VIRTIO_BLK_S_OK);
}

void pathfix_check_paths(PathFix *f, IOQStats *is)
{
    check_rw(f, 0, 1);     /* dataplane -> block layer -> dataplane */
    check_zero_discard(f); /* on the dataplane */
    g_assert_true(dp_switch_set_dataplane(f->dev.sw, false, NULL));
    check_rw(f, 1000, 2);  /* block layer -> dataplane -> block layer */
    check_zero_discard(f);
    dataplane_get_ioq_stats(dp_switch_dataplane(f->dev.sw), is);
    g_assert_cmpuint(is->submitted, >, 0);
    g_assert_cmpuint(blk_getlength(f->dev.backend), ==, PATHFIX_SIZE);
}

void pathfix_check_switch_inflight(PathFix *f)
{
    enum { N = 8, ROUNDS = 20 };
    uint8_t w[N][4096], r[4096];
    uint64_t wb[N], rb;
    int hd[N];

    rb = testdrv_alloc(f->dev.d, 4096, 4096);
    for (int i = 0; i < N; i++) {
        wb[i] = testdrv_alloc(f->dev.d, 4096, 4096);
    }
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < N; i++) {
            pathfix_pattern(w[i], 4096, (uint8_t)(round * N + i));
            testdrv_memwrite(f->dev.d, wb[i], w[i], 4096);
            hd[i] = pathfix_submit(f, VIRTIO_BLK_T_OUT, (uint64_t)i * 8, wb[i], 4096, i % 2 + 1);
        }
        testvq_kick(f->dev.tvq[0]);
        g_assert_true(dp_switch_set_dataplane(f->dev.sw, round % 2 == 0, NULL));
        for (int i = 0; i < N; i++) {
            g_assert_cmpuint(pathfix_wait(f, hd[i]), ==, VIRTIO_BLK_S_OK);
        }
        for (int i = 0; i < N; i++) {
            testdrv_memset(f->dev.d, rb, 0, 4096);
            g_assert_cmpuint(pathfix_req(f, VIRTIO_BLK_T_IN, (uint64_t)i * 8, rb, 4096, 1), ==,
                             VIRTIO_BLK_S_OK);
            testdrv_memread(f->dev.d, rb, r, 4096);
            g_assert_cmpmem(r, 4096, w[i], 4096);
        }
    }
}

void pathfix_check_outage(PathFix *f, void (*outage)(bool down, void *opaque), void *opaque,
                          unsigned tries, unsigned pause_us)
{
    uint8_t w[4096], r[4096];
    uint64_t wb = testdrv_alloc(f->dev.d, 4096, 4096);
    uint64_t rb = testdrv_alloc(f->dev.d, 4096, 4096);
    uint8_t st = 0xff;

    pathfix_pattern(w, sizeof(w), 9);
    testdrv_memwrite(f->dev.d, wb, w, sizeof(w));
    g_assert_cmpuint(pathfix_req(f, VIRTIO_BLK_T_OUT, 8, wb, 4096, 1), ==, VIRTIO_BLK_S_OK);
    outage(true, opaque);
    g_assert_cmpuint(pathfix_req(f, VIRTIO_BLK_T_OUT, 16, wb, 4096, 1), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(pathfix_req(f, VIRTIO_BLK_T_IN, 8, rb, 4096, 1), ==, VIRTIO_BLK_S_IOERR);
    outage(false, opaque);
    for (unsigned i = 0; i < tries && st != VIRTIO_BLK_S_OK; i++) {
        g_usleep(pause_us);
        st = pathfix_req(f, VIRTIO_BLK_T_IN, 8, rb, 4096, 1);
    }
    g_assert_cmpuint(st, ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f->dev.d, rb, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    /* And the switch still works both ways. */
    check_rw(f, 100, 4);
}
