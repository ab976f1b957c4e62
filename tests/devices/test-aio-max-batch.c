/*
 * aio-max-batch of -object iothread (QEMU's): the dataplane a device runs on
 * that iothread hands the kernel at most that many requests per submit
 * syscall; 0, the default, is the engine's own batch (32). Checked on a real
 * file with both engines: 32 reads published at once and kicked once make
 * 32 / min(batch, 32) submit calls, and every read completes with its data.
 * With vblk's x-submit-early N the first N requests of such a pass go to an
 * idle disk one by one before the rest are batched.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <endian.h>
#include <fcntl.h>
#include <linux/virtio_blk.h>
#include <unistd.h>

#include "devfix.h"

#define QSIZE 128 /* 3 descriptors a request */
#define NREQ  32

typedef struct Case {
    const char *drive;
    unsigned batch;    /* the iothread's aio-max-batch */
    unsigned early;    /* its x-submit-early */
    uint64_t expected; /* submit calls for NREQ requests popped in one pass */
} Case;

static void test_batch(gconstpointer data)
{
    const Case *c = data;
    DevFix f;
    IOQStats is;
    uint64_t base;
    int heads[NREQ];
    unsigned used = 0;

    devfix_init(&f,
                &(DevFixConf){.drive = c->drive,
                              .bytes = 1 << 20,
                              .ram_size = 16 << 20,
                              .queue_size = QSIZE,
                              .iothread = "batch-io",
                              .aio_max_batch = c->batch,
                              .submit_early = c->early,
                              .ioq = {.logical_block_size = 512}},
                NULL);
    /* Block k holds the byte k + 1 everywhere, so each read says where it read. */
    {
        int wfd = open(f.path, O_WRONLY);

        g_assert_cmpint(wfd, >=, 0);
        for (unsigned k = 0; k < NREQ; k++) {
            uint8_t blk[4096];

            memset(blk, (int)k + 1, sizeof(blk));
            g_assert_cmpint(pwrite(wfd, blk, sizeof(blk), (off_t)k * 4096), ==,
                            (ssize_t)sizeof(blk));
        }
        g_assert_cmpint(fsync(wfd), ==, 0);
        close(wfd);
    }
    base = testdrv_alloc(f.d, NREQ * 8192, 4096);
    devfix_start(&f, true, NULL);

    for (unsigned k = 0; k < NREQ; k++) {
        uint64_t b = base + (uint64_t)k * 8192;
        struct virtio_blk_outhdr h = {.type = htole32(VIRTIO_BLK_T_IN),
                                      .sector = htole64((uint64_t)k * 8)};
        TestBuf bufs[3] = {{b + 4096, 16, false}, {b, 4096, true}, {b + 4096 + 512, 1, true}};
        uint8_t ff = 0xff;

        testdrv_memwrite(f.d, b + 4096, &h, sizeof(h));
        testdrv_memwrite(f.d, b + 4096 + 512, &ff, 1);
        heads[k] = testvq_add_chain(f.tvq[0], bufs, 3);
        g_assert_cmpint(heads[k], >=, 0);
        testvq_publish(f.tvq[0], (uint16_t)heads[k]);
    }
    testvq_kick(f.tvq[0]); /* one kick: the iothread pops all NREQ in one pass */
    for (int i = 0; i < 40000 && used < NREQ; i++) {
        uint16_t head;
        uint32_t len;

        while (testvq_get_used(f.tvq[0], &head, &len)) {
            used++;
        }
        g_usleep(50);
    }
    g_assert_cmpuint(used, ==, NREQ);
    for (unsigned k = 0; k < NREQ; k++) {
        uint64_t b = base + (uint64_t)k * 8192;
        uint8_t got[4096];

        g_assert_cmpuint(testdrv_readb(f.d, b + 4096 + 512), ==, VIRTIO_BLK_S_OK);
        testdrv_memread(f.d, b, got, sizeof(got));
        g_assert_cmpuint(got[0], ==, k + 1);
        g_assert_cmpuint(got[4095], ==, k + 1);
    }
    dataplane_get_ioq_stats(dp_switch_dataplane(f.sw), &is);
    g_assert_cmpuint(is.submitted, ==, NREQ);
    g_assert_cmpuint(is.batches, ==, c->expected);
    devfix_fini(&f);
}

int main(int argc, char **argv)
{
    static const char *const drives[] = {"file=%s,cache=none,aio=native",
                                         "file=%s,cache=none,aio=io_uring"};
    static const char *const engines[] = {"native", "io_uring"};
    static Case cases[2][6];
    /*
     * x-submit-early N: the first N requests of the pass go out one by one
     * while the kernel has fewer than N, the rest in batches: N + the
     * batches of NREQ - N.
     */
    static const unsigned batches[] = {0, 1, 4, 100, 0, 8};
    static const unsigned earlies[] = {0, 0, 0, 0, 4, 4};
    static const uint64_t expected[] = {1, NREQ, NREQ / 4, 1, 4 + 1, 4 + (NREQ - 4) / 8 + 1};

    g_test_init(&argc, &argv, NULL);
    for (unsigned e = 0; e < 2; e++) {
        for (unsigned i = 0; i < G_N_ELEMENTS(batches); i++) {
            g_autofree char *p = g_strdup_printf("/aio-max-batch/%s/batch-%u-early-%u", engines[e],
                                                 batches[i], earlies[i]);

            cases[e][i] = (Case){drives[e], batches[i], earlies[i], expected[i]};
            g_test_add_data_func(p, &cases[e][i], test_batch);
        }
    }
    return g_test_run();
}
