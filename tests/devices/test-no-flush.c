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
#include <fcntl.h>
#include <linux/virtio_blk.h>
#include <stdio.h>
#include <unistd.h>

#include "dataplane/dataplane.h"
#include "devices/dp-switch.h"
#include "testdrv.h"

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

static BlockBackend *open_backend(const char *fmt, const char *path, EventLoop *loop)
{
    g_autofree char *s = g_strdup_printf(fmt, path);
    GHashTable *t = blk_opts_parse(s);
    GError *err = NULL;
    BlockBackend *b = strstr(s, "driver=") ? blk_new_from_blockdev_opts(t, loop, &err)
                                           : blk_new_from_drive_opts(t, loop, &err);

    g_assert_no_error(err);
    g_hash_table_unref(t);
    return b;
}

typedef struct Case {
    const char *opts;
    bool no_flush;
} Case;

static void test_no_flush(gconstpointer data)
{
    const Case *c = data;
    char *path = g_build_filename(g_get_tmp_dir(), "vblk-noflush-XXXXXX", NULL);
    int fd = g_mkstemp(path);
    TestDrvOpts dopts = {.ram_size = 16 << 20};
    GError *err = NULL;
    VirtIOBlkConf conf;
    BlockHostInfo hi;
    BlockNodeStats ns;
    IOQStats is;
    TestDrv *d;
    TestVq *tvq;
    VirtQueue *vq;
    VirtIOBlkQueue *q;
    VirtIOBlk *blk;
    EventLoop *main_loop;
    IOThread *iothread;
    BlockBackend *backend;
    DataPlaneQueue dq;
    DpSwitch *sw;
    uint64_t features, buf;
    BlockNode *file;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 1 << 20), ==, 0);
    d = testdrv_new(&dopts);
    virtio_blk_conf_init(&conf, (1 << 20) / 512);
    conf.queue_size = QSIZE;
    blk = virtio_blk_new(&conf, &err);
    g_assert_no_error(err);
    features = testdrv_negotiate(virtio_blk_get_host_features(blk), ~0ull);
    g_assert_true(virtio_blk_set_features(blk, features, &err));
    main_loop = event_loop_new(&err);
    g_assert_no_error(err);
    iothread = iothread_new("noflush-io", &err);
    g_assert_no_error(err);
    backend = open_backend(c->opts, path, main_loop);

    /* What the device hands to the dataplane and reports in query-block. */
    blk_get_host_info(backend, &hi);
    g_assert_cmpint(hi.no_flush, ==, c->no_flush);

    tvq = testvq_new(d, QSIZE, features);
    vq = virtqueue_new(testdrv_guestmem(d), QSIZE, testvq_desc_gpa(tvq), testvq_avail_gpa(tvq),
                       testvq_used_gpa(tvq), features, &err);
    g_assert_no_error(err);
    q = virtio_blk_queue_new(blk, vq, NULL, NULL, &err);
    g_assert_no_error(err);
    dq = (DataPlaneQueue){
        .q = q, .host_notifier = testvq_kick_fd(tvq), .notifier = {.fd = testvq_call_fd(tvq)}};
    sw = dp_switch_new(
        &(DpSwitchConf){.blk = blk,
                        .main_loop = main_loop,
                        .backend = backend,
                        .iothread = iothread,
                        .ioq = {.engine = "io_uring", .fd = fd, .logical_block_size = 512},
                        .num_queues = 1,
                        .queue_size = QSIZE,
                        .no_flush = hi.no_flush},
        &err);
    g_assert_no_error(err);
    buf = testdrv_alloc(d, 1024, 512);

    /* Dataplane: the flush is an IOQ submission (an fdatasync) unless no-flush. */
    g_assert_true(dp_switch_start(sw, true, &dq, 1, &err));
    g_assert_cmpuint(guest_flush(d, tvq, buf, main_loop), ==, VIRTIO_BLK_S_OK);
    dataplane_get_ioq_stats(dp_switch_dataplane(sw), &is);
    g_assert_cmpuint(is.submitted, ==, c->no_flush ? 0 : 1);

    /* Block layer: the file node does the fdatasync, or counts it as skipped. */
    g_assert_true(dp_switch_set_dataplane(sw, false, &err));
    g_assert_cmpuint(guest_flush(d, tvq, buf, main_loop), ==, VIRTIO_BLK_S_OK);
    file = blk_node_get_child(blk_find_node(backend, blk_root_node_name(backend)));
    blk_node_get_stats(file, &ns);
    g_assert_cmpstr(blk_node_get_driver(file), ==, "file");
    g_assert_cmpuint(ns.flushes, ==, c->no_flush ? 0 : 1);
    g_assert_cmpuint(ns.flushes_skipped, ==, c->no_flush ? 1 : 0);
    /* Both flushes are the drive's flushes in query-blockstats either way. */
    {
        BlockAcctStats st;

        blk_get_stats(backend, &st);
        g_assert_cmpuint(st.flush_operations, ==, 2);
    }

    dp_switch_stop(sw);
    dp_switch_free(sw);
    blk_unref(backend);
    iothread_free(iothread);
    event_loop_free(main_loop);
    virtio_blk_queue_free(q);
    virtqueue_free(vq);
    testvq_free(tvq);
    virtio_blk_free(blk);
    testdrv_free(d);
    close(fd);
    unlink(path);
    g_free(path);
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
