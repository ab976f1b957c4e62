/*
 * The device fixture of the tests of src/devices (devfix.h).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
#include <linux/virtio_blk.h>

#include "devfix.h"

/* A failure: into @errp with what failed, or (@errp NULL) the test fails. */
static bool devfix_fail(GError **errp, GError *err, const char *what)
{
    if (!errp) {
        g_assert_no_error(err);
    }
    g_propagate_prefixed_error(errp, err, "%s: ", what);
    return false;
}

static bool devfix_new_image(DevFix *f, const DevFixConf *c, GError **errp)
{
    int fd;

    f->path = g_build_filename(c->dir ? c->dir : g_get_tmp_dir(), "vblk-devfix-XXXXXX", NULL);
    fd = g_mkstemp(f->path);
    if (fd < 0 || ftruncate(fd, (off_t)c->bytes) < 0) {
        int e = errno;

        if (fd >= 0) {
            close(fd);
        }
        return devfix_fail(
            errp,
            g_error_new(G_FILE_ERROR, g_file_error_from_errno(e), "%s: %s", f->path, g_strerror(e)),
            "image");
    }
    close(fd);
    return true;
}

static BlockBackend *devfix_backend(DevFix *f, const DevFixConf *c, GError **err)
{
    g_autofree char *opts = g_strdup_printf(c->drive, c->image ? c->image : f->path);
    GHashTable *t = blk_opts_parse(opts);
    BlockBackend *b = strstr(opts, "driver=") ? blk_new_from_blockdev_opts(t, f->main_loop, err)
                                              : blk_new_from_drive_opts(t, f->main_loop, err);

    g_hash_table_unref(t);
    if (!b) {
        g_prefix_error(err, "%s: ", opts);
    }
    return b;
}

/* What virtio-blk-pci's blk_open_host() gives the dataplane: engine, fd, O_DIRECT, nbd, rbd. */
static bool devfix_dataplane_host(DevFix *f, const DevFixConf *c, IOQConfig *ioq, GError **err)
{
    const BlockHostInfo *hi = &f->hi;
    int flags = (hi->read_only || c->dataplane_read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC |
                (hi->direct ? O_DIRECT : 0);

    *ioq = c->ioq;
    if (hi->nbd) {
        ioq->engine = ioq->engine ? ioq->engine : "nbd";
        ioq->nbd = (IOQNbdConfig){.host = hi->nbd_host,
                                  .port = hi->nbd_port,
                                  .socket = hi->nbd_socket,
                                  .export_name = hi->nbd_export,
                                  .reconnect_delay_s = hi->nbd_reconnect_delay};
        return true;
    }
    if (hi->rbd) {
        ioq->engine = ioq->engine ? ioq->engine : "rbd";
        ioq->rbd = (IOQRbdConfig){.pool = hi->rbd_pool,
                                  .rbd_namespace = hi->rbd_namespace,
                                  .image = hi->rbd_image,
                                  .conf = hi->rbd_conf,
                                  .user = hi->rbd_user,
                                  .conf_kv = hi->rbd_conf_kv};
        return true;
    }
    if (hi->null) {
        /* A null leaf: the dataplane's null engine, as virtio-blk-pci picks it; no fd. */
        ioq->engine = ioq->engine ? ioq->engine : "null";
        ioq->null_read_zeroes = hi->null_read_zeroes;
        ioq->fd = -1;
        return true;
    }
    f->fd = open(hi->filename, flags);
    if (f->fd < 0) {
        g_set_error(err, G_FILE_ERROR, g_file_error_from_errno(errno), "open %s: %s", hi->filename,
                    g_strerror(errno));
        return false;
    }
    ioq->fd = f->fd;
    ioq->direct = hi->direct;
    if (!ioq->engine) {
        ioq->engine = !strcmp(hi->aio, "native") ? "native" : "io_uring";
    }
    return true;
}

/* The device and its queues on the test driver's rings. */
static bool devfix_device(DevFix *f, const DevFixConf *c, GError **err)
{
    TestDrvOpts dopts = {.ram_size = c->ram_size, .nregions = c->nregions};
    VirtIOBlkConf conf;

    f->d = testdrv_new(&dopts);
    if (c->blk_conf) {
        conf = *c->blk_conf;
    } else {
        virtio_blk_conf_init(&conf, c->bytes / 512);
    }
    conf.num_queues = f->nq;
    conf.queue_size = c->queue_size;
    conf.writeback = blk_enable_write_cache(f->backend);
    f->blk = virtio_blk_new(&conf, err);
    if (!f->blk) {
        return false;
    }
    f->features = testdrv_negotiate(virtio_blk_get_host_features(f->blk),
                                    c->driver_features ? c->driver_features : ~0ull);
    if (!virtio_blk_set_features(f->blk, f->features, err)) {
        return false;
    }
    for (unsigned i = 0; i < f->nq; i++) {
        f->tvq[i] = testvq_new(f->d, c->queue_size, f->features);
        f->vq[i] = virtqueue_new(testdrv_guestmem(f->d), c->queue_size, testvq_desc_gpa(f->tvq[i]),
                                 testvq_avail_gpa(f->tvq[i]), testvq_used_gpa(f->tvq[i]),
                                 f->features, err);
        if (!f->vq[i]) {
            return false;
        }
        f->q[i] = virtio_blk_queue_new(f->blk, f->vq[i], NULL, NULL, err);
        if (!f->q[i]) {
            return false;
        }
        f->dq[i] = (DataPlaneQueue){.q = f->q[i],
                                    .host_notifier = testvq_kick_fd(f->tvq[i]),
                                    .notifier = {.fd = testvq_call_fd(f->tvq[i])}};
    }
    return true;
}

bool devfix_init(DevFix *f, const DevFixConf *c, GError **errp)
{
    GError *err = NULL;

    memset(f, 0, sizeof(*f));
    f->fd = -1;
    f->nq = c->num_queues ? c->num_queues : 1;
    g_assert_cmpuint(f->nq, <=, DEVFIX_MAX_QUEUES);
    if (!c->image && !devfix_new_image(f, c, errp)) {
        return false;
    }
    f->main_loop = event_loop_new(&err);
    if (!f->main_loop) {
        return devfix_fail(errp, err, "event loop");
    }
    f->backend = devfix_backend(f, c, &err);
    if (!f->backend) {
        return devfix_fail(errp, err, "drive");
    }
    blk_get_host_info(f->backend, &f->hi);
    f->swconf = (DpSwitchConf){.id = c->id,
                               .main_loop = f->main_loop,
                               .backend = f->backend,
                               .num_queues = f->nq,
                               .queue_size = c->queue_size,
                               .no_flush = f->hi.no_flush};
    if (!devfix_dataplane_host(f, c, &f->swconf.ioq, &err)) {
        return devfix_fail(errp, err, "dataplane fd");
    }
    if (!devfix_device(f, c, &err)) {
        return devfix_fail(errp, err, "device");
    }
    f->iothread = iothread_new(c->iothread, &err);
    if (!f->iothread) {
        return devfix_fail(errp, err, "iothread");
    }
    iothread_set_aio_max_batch(f->iothread, c->aio_max_batch);
    iothread_set_submit_early(f->iothread, c->submit_early);
    f->swconf.blk = f->blk;
    f->swconf.iothread = f->iothread;
    f->sw = dp_switch_new(&f->swconf, &err);
    if (!f->sw) {
        return devfix_fail(errp, err, "switch");
    }
    return true;
}

bool devfix_start(DevFix *f, bool dataplane, GError **errp)
{
    GError *err = NULL;

    if (!dp_switch_start(f->sw, dataplane, f->dq, f->nq, &err)) {
        return devfix_fail(errp, err, "start");
    }
    return true;
}

void devfix_guest_start(DevFix *f, GThreadFunc fn, void *opaque)
{
    g_assert_cmpuint(f->nguests, <, DEVFIX_MAX_QUEUES);
    f->guest[f->nguests++] = g_thread_new("guest", fn, opaque);
}

bool devfix_guests_stopping(DevFix *f)
{
    return __atomic_load_n(&f->guests_stop, __ATOMIC_ACQUIRE);
}

void devfix_guest_done(DevFix *f)
{
    __atomic_add_fetch(&f->guests_done, 1, __ATOMIC_RELEASE);
}

void devfix_stop_guests(DevFix *f)
{
    __atomic_store_n(&f->guests_stop, true, __ATOMIC_RELEASE);
    while (__atomic_load_n(&f->guests_done, __ATOMIC_ACQUIRE) < f->nguests) {
        event_loop_run_once(f->main_loop, false);
        g_usleep(100);
    }
    for (unsigned i = 0; i < f->nguests; i++) {
        g_thread_join(f->guest[i]);
    }
    f->nguests = 0;
}

void devfix_fini(DevFix *f)
{
    g_assert_cmpuint(f->nguests, ==, 0); /* devfix_stop_guests() first */
    dp_switch_free(f->sw);
    if (f->backend) {
        blk_unref(f->backend);
    }
    if (f->iothread) {
        iothread_free(f->iothread);
    }
    if (f->main_loop) {
        event_loop_free(f->main_loop);
    }
    for (unsigned i = 0; i < f->nq; i++) {
        if (f->q[i]) {
            virtio_blk_queue_free(f->q[i]);
        }
        if (f->vq[i]) {
            virtqueue_free(f->vq[i]);
        }
        if (f->tvq[i]) {
            testvq_free(f->tvq[i]);
        }
    }
    if (f->blk) {
        virtio_blk_free(f->blk);
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
    memset(f, 0, sizeof(*f));
    f->fd = -1;
}

int devfix_submit_write(TestDrv *d, TestVq *tvq, uint64_t base, uint64_t sector, uint8_t fill)
{
    struct virtio_blk_outhdr h = {.type = htole32(VIRTIO_BLK_T_OUT), .sector = htole64(sector)};
    uint8_t data[512], ff = 0xff;
    TestBuf bufs[3] = {{base, 16, false}, {base + 512, 512, false}, {base + 1024, 1, true}};
    int hd;

    memset(data, fill, sizeof(data));
    testdrv_memwrite(d, base, &h, sizeof(h));
    testdrv_memwrite(d, base + 512, data, sizeof(data));
    testdrv_memwrite(d, base + 1024, &ff, 1);
    hd = testvq_add_chain(tvq, bufs, 3);
    g_assert_cmpint(hd, >=, 0);
    testvq_publish(tvq, (uint16_t)hd);
    testvq_kick(tvq);
    return hd;
}

/* ---- the seq-tagged writer ---- */

typedef struct WriterSlot {
    uint64_t hdr, data, status;
    uint32_t seq;
    bool flush;
    uint32_t writes_before; /* flush: writes submitted before it */
} WriterSlot;

#define WRITER_MAX_SEQ (1u << 20)

void devfix_writer_init(DevFixWriter *w, TestDrv *d, TestVq *tvq, unsigned qidx,
                        unsigned queue_size, unsigned depth, unsigned region, gint64 timeout_us)
{
    *w = (DevFixWriter){.d = d,
                        .tvq = tvq,
                        .qidx = qidx,
                        .queue_size = queue_size,
                        .depth = depth,
                        .region = region,
                        .timeout_us = timeout_us,
                        .last_seq = g_new(uint32_t, region)};
    memset(w->last_seq, 0xff, region * sizeof(uint32_t));
}

/* Fill slot @s with request @seq and add its chain; returns its head. */
static int writer_submit(DevFixWriter *w, WriterSlot *s, uint32_t seq, uint32_t writes_submitted)
{
    bool flush = seq % 16 == 15;
    uint64_t sector = (uint64_t)w->qidx * w->region + seq % w->region;
    struct virtio_blk_outhdr h = {.type = htole32(flush ? VIRTIO_BLK_T_FLUSH : VIRTIO_BLK_T_OUT),
                                  .sector = htole64(flush ? 0 : sector)};
    uint8_t blk[512] = {0}, ff = 0xff;
    TestBuf bufs[3] = {{s->hdr, 16, false}, {s->data, 512, false}, {s->status, 1, true}};

    s->seq = seq;
    s->flush = flush;
    s->writes_before = writes_submitted;
    memcpy(blk, &seq, 4);
    memcpy(blk + 4, &w->qidx, 4);
    testdrv_memwrite(w->d, s->hdr, &h, sizeof(h));
    testdrv_memwrite(w->d, s->status, &ff, 1);
    if (flush) {
        bufs[1] = bufs[2];
        return testvq_add_chain(w->tvq, bufs, 2);
    }
    testdrv_memwrite(w->d, s->data, blk, sizeof(blk));
    return testvq_add_chain(w->tvq, bufs, 3);
}

void devfix_writer_run(DevFixWriter *w, bool (*stopping)(void *opaque), void *opaque)
{
    WriterSlot *slots = g_new0(WriterSlot, w->depth);
    int *slot_of_head = g_new(int, w->queue_size);
    unsigned *free_slots = g_new(unsigned, w->depth);
    unsigned nfree = w->depth, inflight = 0;
    uint32_t seq = 0, writes_submitted = 0, writes_completed = 0;
    uint8_t *done_seq = g_new0(uint8_t, WRITER_MAX_SEQ); /* completion flag per write seq */
    gint64 deadline = g_get_monotonic_time() + w->timeout_us;

    for (unsigned i = 0; i < w->depth; i++) {
        slots[i].hdr = testdrv_alloc(w->d, 16, 16);
        slots[i].data = testdrv_alloc(w->d, 512, 512);
        slots[i].status = testdrv_alloc(w->d, 1, 1);
        free_slots[i] = i;
    }
    for (unsigned i = 0; i < w->queue_size; i++) {
        slot_of_head[i] = -1;
    }
    while (!stopping(opaque) || inflight) {
        uint16_t head;
        uint32_t len;

        while (!stopping(opaque) && nfree && seq < WRITER_MAX_SEQ - 1) {
            unsigned k = free_slots[--nfree];
            int hd = writer_submit(w, &slots[k], seq, writes_submitted);

            g_assert_cmpint(hd, >=, 0);
            g_assert_cmpint(slot_of_head[hd], ==, -1);
            if (!slots[k].flush) {
                writes_submitted++;
            }
            slot_of_head[hd] = (int)k;
            testvq_publish(w->tvq, (uint16_t)hd);
            seq++;
            inflight++;
        }
        testvq_kick(w->tvq);
        while (testvq_get_used(w->tvq, &head, &len)) {
            int k;
            WriterSlot *s;

            g_assert_cmpuint(head, <, w->queue_size);
            k = slot_of_head[head];
            g_assert_cmpint(k, >=, 0); /* completed once, and only if submitted */
            s = &slots[k];
            g_assert_cmpuint(len, ==, 1);
            g_assert_cmpuint(testdrv_readb(w->d, s->status), ==, VIRTIO_BLK_S_OK);
            if (s->flush) {
                /* Every write submitted before the flush has completed. */
                g_assert_cmpuint(writes_completed, >=, s->writes_before);
                for (uint32_t i = s->seq > 64 ? s->seq - 64 : 0; i < s->seq; i++) {
                    g_assert_true(i % 16 == 15 || done_seq[i]);
                }
                w->flushes++;
            } else {
                uint64_t sector = s->seq % w->region;

                g_assert_false(done_seq[s->seq]);
                done_seq[s->seq] = 1;
                writes_completed++;
                if (w->last_seq[sector] == UINT32_MAX || s->seq >= w->last_seq[sector]) {
                    w->last_seq[sector] = s->seq;
                }
            }
            slot_of_head[head] = -1;
            free_slots[nfree++] = (unsigned)k;
            inflight--;
            __atomic_add_fetch(&w->completed, 1, __ATOMIC_RELAXED);
        }
        if (inflight) {
            testvq_wait_used(w->tvq, 50);
        }
        g_assert_cmpint(g_get_monotonic_time(), <, deadline); /* nothing lost */
    }
    g_free(done_seq);
    g_free(free_slots);
    g_free(slot_of_head);
    g_free(slots);
}

void devfix_writer_check(DevFixWriter *w, int fd)
{
    for (unsigned s = 0; s < w->region; s++) {
        uint8_t b[512] __attribute__((aligned(512)));
        uint32_t seq, qi;

        if (w->last_seq[s] == UINT32_MAX) {
            continue;
        }
        g_assert_cmpint(pread(fd, b, 512, (off_t)((uint64_t)w->qidx * w->region + s) * 512), ==,
                        512);
        memcpy(&seq, b, 4);
        memcpy(&qi, b + 4, 4);
        g_assert_cmpuint(qi, ==, w->qidx);
        g_assert_cmpuint(seq, ==, w->last_seq[s]);
    }
    g_free(w->last_seq);
    w->last_seq = NULL;
}
