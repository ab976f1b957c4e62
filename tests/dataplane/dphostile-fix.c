/*
 * Dataplane hostile-driver fixture: see dphostile-fix.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dphostile-fix.h"

/* Temp file of @size bytes, reopened with O_DIRECT; false if impossible. */
static bool open_direct_temp(DpFix *f, uint64_t size)
{
    const char *dir = g_getenv("VBLK_TEST_DIR") ? g_getenv("VBLK_TEST_DIR") : "/var/tmp";
    int fd;

    f->path = g_build_filename(dir, "vblk-dph-XXXXXX", NULL);
    fd = g_mkstemp_full(f->path, O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "dphostile: mkstemp %s: %s\n", f->path, strerror(errno));
        g_clear_pointer(&f->path, g_free);
        return false;
    }
    if (ftruncate(fd, (off_t)size) < 0) {
        fprintf(stderr, "dphostile: ftruncate: %s\n", strerror(errno));
        close(fd);
        return false;
    }
    f->fd = open(f->path, O_RDWR | O_CLOEXEC | O_DIRECT);
    close(fd);
    if (f->fd < 0) {
        fprintf(stderr, "dphostile: O_DIRECT not supported on %s: %s\n", f->path, strerror(errno));
        return false;
    }
    f->direct_ok = true;
    return true;
}

static void on_broken(void *opaque, VirtQueue *vq, const char *reason)
{
    unsigned *calls = opaque;

    g_assert(reason && *reason);
    __atomic_add_fetch(calls, 1, __ATOMIC_SEQ_CST);
}

/* Context: test (control) thread */
DpFix *dphostile_fix_new(const DpHostileOpts *o)
{
    DpFix *f = g_new0(DpFix, 1);
    TestDrvOpts dopts = {.nregions = o->nregions};
    DataPlaneConf dc = {0};
    GError *err = NULL;

    f->fd = -1;
    f->o.engine = o->engine;
    f->o.direct = true;
    f->o.disk_size = o->conf->capacity * VIRTIO_BLK_SECTOR_SIZE;
    f->o.queue_size = o->conf->queue_size;
    if (!open_direct_temp(f, f->o.disk_size)) {
        dpfix_free(f);
        return NULL;
    }
    f->d = testdrv_new(&dopts);
    f->blk = virtio_blk_new(o->conf, &err);
    g_assert_no_error(err);
    f->features =
        testdrv_negotiate(virtio_blk_get_host_features(f->blk), o->features ? o->features : ~0ull);
    g_assert_true(virtio_blk_set_features(f->blk, f->features, &err));
    g_assert_no_error(err);
    f->tvq = testvq_new(f->d, f->o.queue_size, f->features);
    f->vq = virtqueue_new(testdrv_guestmem(f->d), f->o.queue_size, testvq_desc_gpa(f->tvq),
                          testvq_avail_gpa(f->tvq), testvq_used_gpa(f->tvq), f->features, &err);
    g_assert_no_error(err);
    if (o->broken_calls) {
        virtqueue_set_broken_notifier(f->vq, on_broken, o->broken_calls);
    }
    f->q = virtio_blk_queue_new(f->blk, f->vq, NULL, NULL, &err);
    g_assert_no_error(err);
    f->iothread = iothread_new("dp-hostile", &err);
    g_assert_no_error(err);

    dc.blk = f->blk;
    dc.iothread = f->iothread;
    dc.num_queues = 1;
    dc.queue_size = f->o.queue_size;
    dc.ioq.engine = o->engine;
    dc.ioq.fd = f->fd;
    dc.ioq.direct = true;
    dc.ioq.logical_block_size = o->conf->logical_block_size;
    f->dp = dataplane_create(&dc, &err);
    if (!f->dp) {
        fprintf(stderr, "dphostile: dataplane_create(%s): %s\n", o->engine, err->message);
        g_error_free(err);
        dpfix_free(f);
        return NULL;
    }
    return f;
}
