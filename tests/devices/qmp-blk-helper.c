/*
 * virtio-blk-pci's QMP side without KVM: "-qmp stdio" over one device model
 * whose transport is absent (no VM, no PCI bus), so that query-block,
 * query-blockstats, query-iothreads, qom-list/get/set of the device,
 * block_resize, block_set_io_throttle and query-qmp-schema can be compared
 * with QEMU's (tests/devices/qmp-transcript.py) on a machine without
 * /dev/kvm. Everything the handlers read is real: the BlockBackend over the
 * image, the request engine's configuration, the iothread registry.
 *
 * usage: qmp-blk-helper drive|blockdev OPTS DEVICE-ID [IOTHREAD-ID]
 *   drive:    OPTS as -drive (id=, file=, format=, cache=, aio=, ...)
 *   blockdev: OPTS as one -blockdev (driver=raw,node-name=...,file.driver=...)
 * $QMP_MONITOR opens QMP there (as -qmp) instead of on stdio.
 * With $HMP_MONITOR set, the monitor is the human one instead, opened as
 * "-monitor $HMP_MONITOR" (stdio, unix:PATH,server=on,wait=off, telnet:...).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "event/iothread-registry.h"
#include "monitor/qmp.h"
#include "virtio-blk-pci-int.h"

static void on_quit(void *opaque)
{
    g_main_loop_quit(opaque);
}

static void die(const char *what, GError *err)
{
    fprintf(stderr, "qmp-blk-helper: %s: %s\n", what, err ? err->message : "failed");
    exit(1);
}

int main(int argc, char **argv)
{
    GMainLoop *loop = g_main_loop_new(NULL, FALSE);
    QmpMachineHooks hooks = {.quit = on_quit, .opaque = loop};
    VirtIOBlkPCI *s = g_new0(VirtIOBlkPCI, 1);
    GError *err = NULL;
    EventLoop *el;
    GSource *src;
    GHashTable *opts;
    BlockHostInfo hi;
    int64_t len;

    if (argc < 4 || (strcmp(argv[1], "drive") && strcmp(argv[1], "blockdev"))) {
        fprintf(stderr, "usage: %s drive|blockdev OPTS DEVICE-ID [IOTHREAD-ID]\n", argv[0]);
        return 2;
    }
    qmp_init(NULL);
    qmp_machine_set_hooks(&hooks);
    el = event_loop_new(&err);
    if (!el) {
        die("event loop", err);
    }
    src = event_loop_create_gsource(el);
    g_source_attach(src, NULL);

    s->blockdev = !strcmp(argv[1], "blockdev");
    opts = blk_opts_parse(argv[2]);
    s->drive_id = g_strdup(g_hash_table_lookup(opts, s->blockdev ? "node-name" : "id"));
    s->backend = s->blockdev ? blk_new_from_blockdev_opts(opts, el, &err)
                             : blk_new_from_drive_opts(opts, el, &err);
    g_hash_table_destroy(opts);
    if (!s->backend || !s->drive_id) {
        die(argv[2], err);
    }
    blk_set_device_name(s->backend, s->drive_id);
    s->id = g_strdup(argv[3]);
    s->fd = -1;
    s->slot = -1;
    s->write_cache = -1;
    s->bootindex = -1;
    blk_get_host_info(s->backend, &hi);
    s->direct = hi.direct;
    s->no_flush = hi.no_flush;
    s->readonly = hi.read_only;
    s->engine = hi.aio && !strcmp(hi.aio, "native") ? "native" : "io_uring";
    len = blk_getlength(s->backend);
    virtio_blk_conf_init(&s->conf, (uint64_t)MAX(len, 0) / VIRTIO_BLK_SECTOR_SIZE);
    s->conf.readonly = s->readonly;
    s->conf.writeback = blk_enable_write_cache(s->backend);
    if (g_getenv("QMP_BLK_NUM_QUEUES")) {
        /* multiqueue (tests/devices/qmp-remap.py) */
        s->conf.num_queues = (uint16_t)atoi(g_getenv("QMP_BLK_NUM_QUEUES"));
    }
    s->blk = virtio_blk_new(&s->conf, &err);
    if (!s->blk) {
        die("virtio-blk", err);
    }
    if (argc > 4) {
        s->iothread_id = g_strdup(argv[4]);
        s->iothread = iothread_registry_get(argv[4], NULL, &err);
        s->data_plane = true; /* iothread= means x-data-plane=on, as in vblk */
    } else {
        /* as vblk: every device has a thread to switch to, "<id>-dataplane" */
        g_autofree char *own = g_strdup_printf("%s-dataplane", s->id);

        s->iothread = iothread_registry_get(own, NULL, &err);
    }
    if (!s->iothread) {
        die("iothread", err);
    }
    for (unsigned q = 0; q < s->conf.num_queues; q++) {
        s->vq_iothread[q] = s->iothread;
        s->vq_iothread_id[q] = g_strdup(argc > 4 ? argv[4] : "");
    }
    if (g_getenv("QMP_BLK_IOTHREADS")) {
        /* more -object iothread for x-blockdev-remap-vqs, comma-separated ids */
        g_auto(GStrv) ids = g_strsplit(g_getenv("QMP_BLK_IOTHREADS"), ",", -1);

        for (unsigned i = 0; ids[i]; i++) {
            if (!iothread_registry_get(ids[i], NULL, &err)) {
                die("iothread", err);
            }
        }
    }
    blk_pci_qmp_add(s);

    qmp_run_state_set(QMP_RUN_STATE_PRELAUNCH); /* as vblk -S */
    if (g_getenv("HMP_MONITOR")) {
        if (!qmp_monitor_add_hmp(g_getenv("HMP_MONITOR"), &err)) {
            die("-monitor", err);
        }
    } else if (!qmp_monitor_add_qmp(g_getenv("QMP_MONITOR") ? g_getenv("QMP_MONITOR") : "stdio",
                                    &err)) {
        die("-qmp", err);
    }
    g_main_loop_run(loop);

    blk_pci_qmp_remove(s);
    qmp_cleanup();
    iothread_registry_clear();
    virtio_blk_free(s->blk);
    blk_unref(s->backend);
    g_source_destroy(src);
    g_source_unref(src);
    event_loop_free(el);
    g_free(s->id);
    g_free(s->drive_id);
    g_free(s->iothread_id);
    for (unsigned q = 0; q < VIRTIO_BLK_MAX_QUEUES; q++) {
        g_free(s->vq_iothread_id[q]);
    }
    g_free(s);
    g_main_loop_unref(loop);
    return 0;
}
