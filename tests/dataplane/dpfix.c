/*
 * Dataplane test fixture: see dpfix.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "dpfix.h"

static int open_backing(DpFix *f)
{
    int flags = O_RDWR | O_CLOEXEC;

    if (f->o.path) {
        f->fd = open(f->o.path, flags | (f->o.direct ? O_DIRECT : 0));
        if (f->fd < 0) {
            fprintf(stderr, "dpfix: cannot open %s: %s\n", f->o.path, strerror(errno));
            return -1;
        }
        f->direct_ok = f->o.direct;
        return 0;
    }
    f->path = g_build_filename(g_getenv("VBLK_TEST_DIR") ? g_getenv("VBLK_TEST_DIR") : "/var/tmp",
                               "vblk-dp-XXXXXX", NULL);
    f->fd = g_mkstemp_full(f->path, flags, 0600);
    if (f->fd < 0) {
        fprintf(stderr, "dpfix: mkstemp %s: %s\n", f->path, strerror(errno));
        return -1;
    }
    if (ftruncate(f->fd, (off_t)f->o.disk_size) < 0) {
        return -1;
    }
    if (f->o.direct) {
        int dfd = open(f->path, flags | O_DIRECT);

        if (dfd < 0) {
            fprintf(stderr, "dpfix: O_DIRECT not supported on %s: %s\n", f->path, strerror(errno));
            return -1;
        }
        close(f->fd);
        f->fd = dfd;
        f->direct_ok = true;
    }
    return 0;
}

DpFix *dpfix_new(const DpFixOpts *o)
{
    DpFix *f = g_new0(DpFix, 1);
    TestDrvOpts dopts = {0};
    VirtIOBlkConf conf;
    GError *err = NULL;
    uint64_t wanted = ~0ull;
    DataPlaneConf dc = {0};

    f->o = *o;
    f->fd = -1;
    if (!f->o.disk_size) {
        f->o.disk_size = 16 << 20;
    }
    if (!f->o.queue_size) {
        f->o.queue_size = 128;
    }
    if (strcmp(f->o.engine, "null") != 0 && strcmp(f->o.engine, "nbd") != 0 &&
        strcmp(f->o.engine, "rbd") != 0 &&
        open_backing(f) < 0) {
        dpfix_free(f);
        return NULL;
    }
    if (f->o.path && f->fd >= 0 && !f->o.stream) {
        f->o.disk_size = (uint64_t)lseek(f->fd, 0, SEEK_END);
    }
    dopts.ram_size = f->o.ram_size ? f->o.ram_size : 64 << 20;
    f->d = testdrv_new(&dopts);

    virtio_blk_conf_init(&conf, f->o.disk_size / 512);
    conf.queue_size = (uint16_t)f->o.queue_size;
    f->blk = virtio_blk_new(&conf, &err);
    g_assert_no_error(err);
    if (f->o.writethrough) {
        wanted &= ~((1ull << VIRTIO_BLK_F_FLUSH) | (1ull << VIRTIO_BLK_F_CONFIG_WCE));
    }
    f->features = testdrv_negotiate(virtio_blk_get_host_features(f->blk), wanted);
    g_assert_true(virtio_blk_set_features(f->blk, f->features, &err));
    f->tvq = testvq_new(f->d, f->o.queue_size, f->features);
    f->vq = virtqueue_new(testdrv_guestmem(f->d), f->o.queue_size, testvq_desc_gpa(f->tvq),
                          testvq_avail_gpa(f->tvq), testvq_used_gpa(f->tvq), f->features, &err);
    g_assert_no_error(err);
    f->q = virtio_blk_queue_new(f->blk, f->vq, NULL, NULL, &err);
    g_assert_no_error(err);
    f->iothread = iothread_new("dp-test", &err);
    g_assert_no_error(err);

    dc.blk = f->blk;
    dc.iothread = f->iothread;
    dc.num_queues = 1;
    dc.queue_size = f->o.queue_size;
    dc.complete_batch = f->o.complete_batch;
    dc.complete_hold_ns = f->o.complete_hold_ns;
    dc.complete_hold_depth = f->o.complete_hold_depth;
    dc.ioq.engine = f->o.engine;
    dc.ioq.fd = f->fd;
    dc.ioq.direct = f->direct_ok;
    dc.ioq.logical_block_size = 512;
    dc.ioq.aio_max_events = f->o.aio_max_events;
    dc.ioq.max_batch = f->o.max_batch;
    dc.ioq.submit_early = f->o.submit_early;
    dc.ioq.null_read_zeroes = f->o.null_read_zeroes;
    dc.ioq.nbd = f->o.nbd;
    dc.ioq.rbd = f->o.rbd;
    dc.ioq.bounce_pool_size = 8 << 20;
    f->dp = dataplane_create(&dc, &err);
    if (!f->dp) {
        fprintf(stderr, "dpfix: dataplane_create(%s): %s\n", f->o.engine, err->message);
        g_error_free(err);
        dpfix_free(f);
        return NULL;
    }
    return f;
}

void dpfix_start(DpFix *f)
{
    DataPlaneQueue dq = {
        .q = f->q,
        .host_notifier = testvq_kick_fd(f->tvq),
        .notifier = {.fd = testvq_call_fd(f->tvq)},
    };
    GError *err = NULL;

    g_assert_true(dataplane_start(f->dp, &dq, 1, &err));
    g_assert_no_error(err);
}

void dpfix_stop(DpFix *f)
{
    dataplane_stop(f->dp);
}

void dpfix_free(DpFix *f)
{
    if (!f) {
        return;
    }
    dataplane_destroy(f->dp);
    iothread_free(f->iothread);
    if (f->q) {
        virtio_blk_queue_free(f->q);
    }
    if (f->vq) {
        virtqueue_free(f->vq);
    }
    if (f->blk) {
        virtio_blk_free(f->blk);
    }
    if (f->tvq) {
        testvq_free(f->tvq);
    }
    if (f->d) {
        testdrv_free(f->d);
    }
    if (f->fd >= 0) {
        close(f->fd);
    }
    if (f->path) {
        unlink(f->path);
        g_free(f->path);
    }
    g_free(f);
}

bool dpfix_add(DpFix *f, DpReq *r, uint32_t type, uint64_t sector, const void *data, uint32_t len,
               unsigned nseg, unsigned misalign, GRand *rnd)
{
    struct virtio_blk_outhdr h = {.type = htole32(type), .ioprio = 0, .sector = htole64(sector)};
    TestBuf bufs[DPFIX_MAX_SEG + 2];
    uint32_t left = len, off = 0;
    unsigned n = 0;
    uint8_t ff = 0xff;
    bool writable = type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID;

    memset(r, 0, sizeof(*r));
    r->type = type;
    r->sector = sector;
    r->len = len;
    r->hdr_gpa = testdrv_alloc(f->d, sizeof(h), 16);
    testdrv_memwrite(f->d, r->hdr_gpa, &h, sizeof(h));
    bufs[n++] = (TestBuf){.gpa = r->hdr_gpa, .len = sizeof(h), .write = false};
    if (nseg > DPFIX_MAX_SEG) {
        nseg = DPFIX_MAX_SEG;
    }
    if (nseg > len) {
        nseg = len ? len : 0;
    }
    for (unsigned i = 0; i < nseg; i++) {
        /* Aligned requests split at sector boundaries, misaligned ones anywhere. */
        uint32_t unit = (misalign || len % 512) ? 1 : 512;
        uint32_t units_left = left / unit;
        uint32_t seg = (i == nseg - 1 || units_left <= nseg - 1 - i)
                           ? left
                           : unit * (uint32_t)g_rand_int_range(
                                        rnd, 1, (gint32)(units_left - (nseg - 1 - i)) + 1);
        unsigned shift = misalign ? (unsigned)g_rand_int_range(rnd, 0, (gint32)misalign) : 0;
        uint64_t gpa = testdrv_alloc(f->d, seg + shift, 4096) + shift;

        if (data) {
            testdrv_memwrite(f->d, gpa, (const uint8_t *)data + off, seg);
        } else {
            testdrv_memset(f->d, gpa, 0xa5, seg);
        }
        if (!seg) {
            break;
        }
        r->seg_gpa[i] = gpa;
        r->seg_len[i] = seg;
        bufs[n++] = (TestBuf){.gpa = gpa, .len = seg, .write = writable};
        left -= seg;
        off += seg;
    }
    r->nseg = (unsigned)(n - 1);
    r->status_gpa = testdrv_alloc(f->d, 1, 1);
    testdrv_memwrite(f->d, r->status_gpa, &ff, 1);
    bufs[n++] = (TestBuf){.gpa = r->status_gpa, .len = 1, .write = true};
    r->head =
        f->indirect ? testvq_add_indirect(f->tvq, bufs, n) : testvq_add_chain(f->tvq, bufs, n);
    if (r->head < 0) {
        return false;
    }
    testvq_publish(f->tvq, (uint16_t)r->head);
    return true;
}

void dpfix_read_data(DpFix *f, const DpReq *r, void *buf)
{
    uint32_t off = 0;

    for (unsigned i = 0; i < r->nseg; i++) {
        testdrv_memread(f->d, r->seg_gpa[i], (uint8_t *)buf + off, r->seg_len[i]);
        off += r->seg_len[i];
    }
}

uint8_t dpfix_status(DpFix *f, const DpReq *r)
{
    return testdrv_readb(f->d, r->status_gpa);
}
