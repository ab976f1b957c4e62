/*
 * cache.no-flush on both paths of one device: a guest FLUSH completes with
 * VIRTIO_BLK_S_OK without reaching the disk (QEMU's cache=unsafe), counted
 * where a flush would reach the file: the dataplane's IOQ submissions and
 * the block layer's file node (flushes vs flushes_skipped). With no-flush
 * off, the same flush does reach it on both paths.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <endian.h>
#include <linux/virtio_blk.h>

#include "devfix.h"

#define QSIZE 64

/* One FLUSH, published and kicked; returns the status the device wrote. */
static uint8_t guest_flush(TestDrv *d, TestVq *tvq, uint64_t base, EventLoop *main_loop)
{
    struct virtio_blk_outhdr h = {.type = htole32(VIRTIO_BLK_T_FLUSH)};
    TestBuf bufs[2] = {{base, 16, false}, {base + 512, 1, true}};
    uint8_t ff = 0xff;
    uint16_t head;
    uint32_t len;
    int hd;

    testdrv_memwrite(d, base, &h, sizeof(h));
    testdrv_memwrite(d, base + 512, &ff, 1);
    hd = testvq_add_chain(tvq, bufs, 2);
    g_assert_cmpint(hd, >=, 0);
    testvq_publish(tvq, (uint16_t)hd);
    testvq_kick(tvq);
    for (int i = 0; i < 20000 && !testvq_get_used(tvq, &head, &len); i++) {
        event_loop_run_once(main_loop, false); /* serves the block-layer path */
        g_usleep(50);
    }
    g_assert_cmpint(head, ==, hd);
    return testdrv_readb(d, base + 512);
}

typedef struct Case {
    const char *opts;
    bool no_flush;
} Case;

static void test_no_flush(gconstpointer data)
{
    const Case *c = data;
    DevFix f;
    BlockNodeStats ns;
    IOQStats is;
    uint64_t buf;
    BlockNode *file;

    devfix_init(&f,
                &(DevFixConf){.drive = c->opts,
                              .bytes = 1 << 20,
                              .ram_size = 16 << 20,
                              .queue_size = QSIZE,
                              .iothread = "noflush-io",
                              .ioq = {.logical_block_size = 512}},
                NULL);
    /* What the device hands to the dataplane and reports in query-block. */
    g_assert_cmpint(f.hi.no_flush, ==, c->no_flush);
    g_assert_cmpint(f.swconf.no_flush, ==, c->no_flush);
    g_assert_cmpstr(f.swconf.ioq.engine, ==, "io_uring");
    buf = testdrv_alloc(f.d, 1024, 512);

    /* Dataplane: the flush is an IOQ submission (an fdatasync) unless no-flush. */
    devfix_start(&f, true, NULL);
    g_assert_cmpuint(guest_flush(f.d, f.tvq[0], buf, f.main_loop), ==, VIRTIO_BLK_S_OK);
    dataplane_get_ioq_stats(dp_switch_dataplane(f.sw), &is);
    g_assert_cmpuint(is.submitted, ==, c->no_flush ? 0 : 1);

    /* Block layer: the file node does the fdatasync, or counts it as skipped. */
    g_assert_true(dp_switch_set_dataplane(f.sw, false, NULL));
    g_assert_cmpuint(guest_flush(f.d, f.tvq[0], buf, f.main_loop), ==, VIRTIO_BLK_S_OK);
    file = blk_node_get_child(blk_find_node(f.backend, blk_root_node_name(f.backend)));
    blk_node_get_stats(file, &ns);
    g_assert_cmpstr(blk_node_get_driver(file), ==, "file");
    g_assert_cmpuint(ns.flushes, ==, c->no_flush ? 0 : 1);
    g_assert_cmpuint(ns.flushes_skipped, ==, c->no_flush ? 1 : 0);
    /* Both flushes are the drive's flushes in query-blockstats either way. */
    {
        BlockAcctStats st;

        blk_get_stats(f.backend, &st);
        g_assert_cmpuint(st.flush_operations, ==, 2);
    }
    devfix_fini(&f);
}

int main(int argc, char **argv)
{
    static const Case cases[] = {
        {"file=%s,cache=unsafe", true},
        {"file=%s,cache=writeback,cache.no-flush=on", true},
        {"driver=raw,node-name=r,cache.no-flush=on,file.driver=file,file.filename=%s", true},
        {"file=%s,cache=writeback", false},
        {"file=%s,cache=unsafe,cache.no-flush=off", false},
    };
    static const char *const names[] = {"drive-unsafe", "drive-no-flush-on", "blockdev-no-flush-on",
                                        "drive-writeback", "drive-unsafe-no-flush-off"};

    g_test_init(&argc, &argv, NULL);
    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *p = g_strdup_printf("/no-flush/%s", names[i]);

        g_test_add_data_func(p, &cases[i], test_no_flush);
    }
    return g_test_run();
}
