/*
 * Multiqueue: one dataplane per iothread (iothread-vq-mapping) and the
 * runtime remap of queues between iothreads (dp_switch_remap, QMP
 * x-blockdev-remap-vqs), driven through the test driver like the path
 * switch in tests/devices/test-dp-switch.c: one guest thread per queue
 * keeps sequence-tagged, verified writes and FLUSHes in flight while the
 * main thread moves queues between iothreads hundreds of times (and, in the
 * second case, also switches the whole device to the block layer and back,
 * remapping on both paths).
 *
 * Checked: every request completes exactly once (a head never completes
 * twice or unsubmitted; a lost one trips the deadline), a FLUSH completes
 * only after every write submitted before it, each sector on disk holds the
 * last completed write of it (a repeated or reordered old write would
 * overwrite a newer one: writes to one sector are REGION requests apart),
 * every request popped by a dataplane completed, and the per-iothread
 * dataplanes serve exactly the queues of the mapping.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include <linux/virtio_blk.h>

#include "testdrv.h"
#include "devices/dp-switch.h"
#include "event/iothread-registry.h"
#include "monitor/qmp.h"
#include "util/debug-state.h"
#include "virtio-blk-pci-int.h"

#define NQ      4
#define NT      3 /* iothreads to map onto */
#define QSIZE   64
#define DEPTH   16  /* requests in flight per queue */
#define REGION  256 /* sectors per queue: same-sector writes are REGION apart */
#define TIMEOUT (120 * G_USEC_PER_SEC)

typedef struct Guest {
    TestDrv *d;
    TestVq *tvq;
    unsigned qidx;
    bool stop; /* main -> guest */
    bool done; /* guest -> main */
    uint64_t completed;
    uint64_t flushes;
    uint32_t *last_seq; /* per sector of the region: seq of the last completed write */
} Guest;

typedef struct Slot {
    uint64_t hdr, data, status;
    uint32_t seq;
    bool flush;
    uint32_t writes_before; /* flush: writes submitted before it */
} Slot;

static gpointer guest_thread(gpointer opaque)
{
    Guest *g = opaque;
    Slot slots[DEPTH];
    int slot_of_head[QSIZE];
    unsigned free_slots[DEPTH], nfree = DEPTH, inflight = 0;
    uint32_t seq = 0, writes_submitted = 0, writes_completed = 0;
    uint8_t *done_seq = g_new0(uint8_t, 1 << 20); /* completion flag per write seq */
    gint64 deadline = g_get_monotonic_time() + TIMEOUT;

    for (unsigned i = 0; i < DEPTH; i++) {
        slots[i].hdr = testdrv_alloc(g->d, 16, 16);
        slots[i].data = testdrv_alloc(g->d, 512, 512);
        slots[i].status = testdrv_alloc(g->d, 1, 1);
        free_slots[i] = i;
    }
    for (unsigned i = 0; i < QSIZE; i++) {
        slot_of_head[i] = -1;
    }
    while (!__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE) || inflight) {
        uint16_t head;
        uint32_t len;

        while (!__atomic_load_n(&g->stop, __ATOMIC_ACQUIRE) && nfree && seq < (1u << 20) - 1) {
            unsigned k = free_slots[--nfree];
            Slot *s = &slots[k];
            bool flush = seq % 16 == 15;
            uint64_t sector = (uint64_t)g->qidx * REGION + seq % REGION;
            struct virtio_blk_outhdr h = {
                .type = htole32(flush ? VIRTIO_BLK_T_FLUSH : VIRTIO_BLK_T_OUT),
                .sector = htole64(flush ? 0 : sector)};
            uint8_t blk[512] = {0}, ff = 0xff;
            TestBuf bufs[3] = {{s->hdr, 16, false}, {s->data, 512, false}, {s->status, 1, true}};
            int hd;

            s->seq = seq;
            s->flush = flush;
            s->writes_before = writes_submitted;
            memcpy(blk, &seq, 4);
            memcpy(blk + 4, &g->qidx, 4);
            testdrv_memwrite(g->d, s->hdr, &h, sizeof(h));
            testdrv_memwrite(g->d, s->status, &ff, 1);
            if (flush) {
                bufs[1] = bufs[2];
                hd = testvq_add_chain(g->tvq, bufs, 2);
            } else {
                testdrv_memwrite(g->d, s->data, blk, sizeof(blk));
                hd = testvq_add_chain(g->tvq, bufs, 3);
                writes_submitted++;
            }
            g_assert_cmpint(hd, >=, 0);
            g_assert_cmpint(slot_of_head[hd], ==, -1);
            slot_of_head[hd] = (int)k;
            testvq_publish(g->tvq, (uint16_t)hd);
            seq++;
            inflight++;
        }
        testvq_kick(g->tvq);
        while (testvq_get_used(g->tvq, &head, &len)) {
            int k;
            Slot *s;

            g_assert_cmpuint(head, <, QSIZE);
            k = slot_of_head[head];
            g_assert_cmpint(k, >=, 0); /* completed once, and only if submitted */
            s = &slots[k];
            g_assert_cmpuint(len, ==, 1);
            g_assert_cmpuint(testdrv_readb(g->d, s->status), ==, VIRTIO_BLK_S_OK);
            if (s->flush) {
                /* Every write submitted before the flush has completed. */
                g_assert_cmpuint(writes_completed, >=, s->writes_before);
                for (uint32_t i = s->seq > 64 ? s->seq - 64 : 0; i < s->seq; i++) {
                    g_assert_true(i % 16 == 15 || done_seq[i]);
                }
                g->flushes++;
            } else {
                uint64_t sector = s->seq % REGION;

                g_assert_false(done_seq[s->seq]);
                done_seq[s->seq] = 1;
                writes_completed++;
                if (g->last_seq[sector] == UINT32_MAX || s->seq >= g->last_seq[sector]) {
                    g->last_seq[sector] = s->seq;
                }
            }
            slot_of_head[head] = -1;
            free_slots[nfree++] = (unsigned)k;
            inflight--;
            __atomic_add_fetch(&g->completed, 1, __ATOMIC_RELAXED);
        }
        if (inflight) {
            testvq_wait_used(g->tvq, 50);
        }
        g_assert_cmpint(g_get_monotonic_time(), <, deadline); /* nothing lost */
    }
    g_free(done_seq);
    __atomic_store_n(&g->done, true, __ATOMIC_RELEASE);
    return NULL;
}

/* The dataplanes serve exactly the queues @map gives each iothread. */
static void check_groups(DpSwitch *sw, IOThread *const *map)
{
    unsigned seen = 0;
    IOThread *got[NQ];

    dp_switch_get_map(sw, got);
    for (unsigned q = 0; q < NQ; q++) {
        g_assert_true(got[q] == map[q]);
    }
    for (unsigned i = 0; i < dp_switch_num_dataplanes(sw); i++) {
        IOThread *t;
        const unsigned *qidx;
        unsigned n;

        g_assert_nonnull(dp_switch_get_dataplane(sw, i, &t, &qidx, &n));
        g_assert_cmpuint(n, >, 0);
        for (unsigned k = 0; k < n; k++) {
            g_assert_true(map[qidx[k]] == t);
            g_assert_false(seen & (1u << qidx[k]));
            seen |= 1u << qidx[k];
        }
    }
    g_assert_null(dp_switch_get_dataplane(sw, dp_switch_num_dataplanes(sw), NULL, NULL, NULL));
    g_assert_cmpuint(seen, ==, (1u << NQ) - 1);
}

typedef struct Case {
    const char *engine;
    bool with_switch; /* also move the device between the two paths */
    unsigned remaps;
} Case;

static void test_remap_stress(gconstpointer data)
{
    const Case *c = data;
    char *path = g_build_filename("/var/tmp", "vblk-remap-XXXXXX", NULL);
    int fd = g_mkstemp(path), dfd;
    TestDrvOpts dopts = {.ram_size = 32 << 20};
    TestDrv *d;
    VirtIOBlkConf conf;
    VirtIOBlk *blk;
    GError *err = NULL;
    uint64_t features;
    TestVq *tvq[NQ];
    VirtQueue *vq[NQ];
    VirtIOBlkQueue *q[NQ];
    DataPlaneQueue dq[NQ];
    EventLoop *main_loop;
    IOThread *io[NT];
    IOThread *map[NQ];
    BlockBackend *backend;
    GHashTable *opts;
    DpSwitch *sw;
    DpSwitchStats st;
    DpSwitchConf sc;
    Guest g[NQ];
    GThread *th[NQ];
    char *optstr;
    uint64_t popped_total = 0, completed_total = 0;
    unsigned switches = 0;
    GRand *rnd = g_rand_new_with_seed(20261202);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, (off_t)NQ * REGION * 512), ==, 0);
    close(fd);
    dfd = open(path, O_RDWR | O_DIRECT);
    if (dfd < 0) {
        g_test_skip("no O_DIRECT on /var/tmp");
        unlink(path);
        g_free(path);
        g_rand_free(rnd);
        return;
    }
    d = testdrv_new(&dopts);
    virtio_blk_conf_init(&conf, NQ * REGION);
    conf.num_queues = NQ;
    conf.queue_size = QSIZE;
    blk = virtio_blk_new(&conf, &err);
    g_assert_no_error(err);
    features = testdrv_negotiate(virtio_blk_get_host_features(blk), ~0ull);
    g_assert_true(virtio_blk_set_features(blk, features, &err));

    main_loop = event_loop_new(&err);
    g_assert_no_error(err);
    for (unsigned t = 0; t < NT; t++) {
        g_autofree char *name = g_strdup_printf("mq-io%u", t);

        io[t] = iothread_new(name, &err);
        g_assert_no_error(err);
    }
    optstr = g_strdup_printf("file=%s,cache=none,aio=%s", path,
                             strcmp(c->engine, "native") ? "io_uring" : "native");
    opts = blk_opts_parse(optstr);
    backend = blk_new_from_drive_opts(opts, main_loop, &err);
    g_assert_no_error(err);
    g_hash_table_unref(opts);
    g_free(optstr);

    for (unsigned i = 0; i < NQ; i++) {
        tvq[i] = testvq_new(d, QSIZE, features);
        vq[i] = virtqueue_new(testdrv_guestmem(d), QSIZE, testvq_desc_gpa(tvq[i]),
                              testvq_avail_gpa(tvq[i]), testvq_used_gpa(tvq[i]), features, &err);
        g_assert_no_error(err);
        q[i] = virtio_blk_queue_new(blk, vq[i], NULL, NULL, &err);
        g_assert_no_error(err);
        dq[i] = (DataPlaneQueue){.q = q[i],
                                 .host_notifier = testvq_kick_fd(tvq[i]),
                                 .notifier = {.fd = testvq_call_fd(tvq[i])}};
    }
    /* QEMU's example: queues 0, 1 on the first iothread, 2, 3 on the second. */
    sc = (DpSwitchConf){.blk = blk,
                        .main_loop = main_loop,
                        .backend = backend,
                        .iothread = io[0],
                        .ioq = {.engine = c->engine, .fd = dfd, .direct = true,
                                .logical_block_size = 512},
                        .num_queues = NQ,
                        .queue_size = QSIZE};
    for (unsigned i = 0; i < NQ; i++) {
        map[i] = io[i / 2];
        sc.vq_iothread[i] = map[i];
    }
    sw = dp_switch_new(&sc, &err);
    g_assert_no_error(err);
    g_assert_cmpuint(dp_switch_num_dataplanes(sw), ==, 2);
    check_groups(sw, map);
    g_assert_true(dp_switch_start(sw, true, dq, NQ, &err));
    g_assert_no_error(err);

    for (unsigned i = 0; i < NQ; i++) {
        g[i] = (Guest){.d = d, .tvq = tvq[i], .qidx = i, .last_seq = g_new(uint32_t, REGION)};
        memset(g[i].last_seq, 0xff, REGION * sizeof(uint32_t));
        th[i] = g_thread_new("guest", guest_thread, &g[i]);
    }
    for (unsigned r = 0; r < c->remaps; r++) {
        /* Let the workload run on the current mapping (and the main loop serve its path). */
        for (int k = 0; k < 3; k++) {
            event_loop_run_once(main_loop, false);
        }
        g_usleep(200);
        for (unsigned i = 0; i < NQ; i++) {
            map[i] = io[g_rand_int_range(rnd, 0, NT)];
        }
        if (r % 10 == 0) {
            /* Move a single queue: the other dataplanes keep running undisturbed. */
            dp_switch_get_map(sw, map);
            map[r / 10 % NQ] = io[(r / 10) % NT];
        }
        g_assert_true(dp_switch_remap(sw, map, NQ, &err));
        g_assert_no_error(err);
        check_groups(sw, map);
        if (c->with_switch && r % 7 == 3) {
            g_assert_true(dp_switch_set_dataplane(sw, !dp_switch_is_dataplane(sw), &err));
            g_assert_no_error(err);
            switches++;
        }
    }
    if (!dp_switch_is_dataplane(sw)) {
        g_assert_true(dp_switch_set_dataplane(sw, true, &err));
        switches++;
    }
    for (unsigned i = 0; i < NQ; i++) {
        __atomic_store_n(&g[i].stop, true, __ATOMIC_RELEASE);
    }
    for (bool all = false; !all;) {
        all = true;
        for (unsigned i = 0; i < NQ; i++) {
            all &= __atomic_load_n(&g[i].done, __ATOMIC_ACQUIRE);
        }
        event_loop_run_once(main_loop, false);
        g_usleep(100);
    }
    for (unsigned i = 0; i < NQ; i++) {
        g_thread_join(th[i]);
    }
    dp_switch_get_stats(sw, &st);
    g_assert_cmpuint(st.remaps, ==, c->remaps);
    g_assert_cmpuint(st.switches, ==, switches);
    /* Quiet: every request a dataplane popped (remaps included) completed. */
    for (unsigned i = 0; i < NQ; i++) {
        DataPlaneQueueStats qs;

        dp_switch_get_queue_stats(sw, i, &qs);
        g_assert_cmpuint(qs.inflight, ==, 0);
        g_assert_cmpuint(qs.requests, ==, qs.completed);
        g_assert_cmpuint(qs.requests, >, 0);
        if (c->with_switch) {
            g_assert_cmpuint(qs.requests, <=, g[i].completed);
        } else {
            g_assert_cmpuint(qs.requests, ==, g[i].completed); /* the dataplanes saw them all */
        }
        popped_total += qs.requests;
        completed_total += g[i].completed;
    }
    g_test_message("%s: %u remaps (stall mean %.1f us, max %.1f us), %u switches, %" PRIu64
                   " requests completed, %" PRIu64 " popped by the dataplanes",
                   c->engine, c->remaps, st.total_remap_ns / 1e3 / c->remaps,
                   st.max_remap_ns / 1e3, switches, completed_total, popped_total);
    dp_switch_free(sw);

    /* The file holds the last completed write of every sector. */
    for (unsigned i = 0; i < NQ; i++) {
        g_assert_cmpuint(g[i].completed, >, 200);
        for (unsigned s = 0; s < REGION; s++) {
            uint8_t b[512] __attribute__((aligned(512)));
            uint32_t seq, qi;

            if (g[i].last_seq[s] == UINT32_MAX) {
                continue;
            }
            g_assert_cmpint(pread(dfd, b, 512, (off_t)((uint64_t)i * REGION + s) * 512), ==, 512);
            memcpy(&seq, b, 4);
            memcpy(&qi, b + 4, 4);
            g_assert_cmpuint(qi, ==, i);
            g_assert_cmpuint(seq, ==, g[i].last_seq[s]);
        }
        g_free(g[i].last_seq);
    }
    blk_unref(backend);
    for (unsigned t = 0; t < NT; t++) {
        iothread_free(io[t]);
    }
    event_loop_free(main_loop);
    for (unsigned i = 0; i < NQ; i++) {
        virtio_blk_queue_free(q[i]);
        virtqueue_free(vq[i]);
        testvq_free(tvq[i]);
    }
    virtio_blk_free(blk);
    testdrv_free(d);
    close(dfd);
    unlink(path);
    g_free(path);
    g_rand_free(rnd);
}

/* Bad mappings are refused and change nothing; a device without a mapping has one dataplane. */
static void test_remap_refused(void)
{
    TestDrvOpts dopts = {.ram_size = 16 << 20};
    TestDrv *d = testdrv_new(&dopts);
    VirtIOBlkConf conf;
    VirtIOBlk *blk;
    GError *err = NULL;
    EventLoop *main_loop;
    IOThread *io0, *io1;
    IOThread *map[NQ], *got[NQ];
    BlockBackend *backend;
    GHashTable *opts;
    DpSwitch *sw;

    virtio_blk_conf_init(&conf, 2048);
    conf.num_queues = NQ;
    blk = virtio_blk_new(&conf, &err);
    g_assert_no_error(err);
    main_loop = event_loop_new(&err);
    io0 = iothread_new("mq-a", &err);
    io1 = iothread_new("mq-b", &err);
    g_assert_no_error(err);
    opts = blk_opts_parse("file=null-co://,size=1048576");
    backend = blk_new_from_drive_opts(opts, main_loop, &err);
    g_assert_no_error(err);
    g_hash_table_unref(opts);
    sw = dp_switch_new(&(DpSwitchConf){.blk = blk,
                                       .main_loop = main_loop,
                                       .backend = backend,
                                       .iothread = io0,
                                       .ioq = {.engine = "null", .fd = -1},
                                       .num_queues = NQ,
                                       .queue_size = 64},
                       &err);
    g_assert_no_error(err);
    g_assert_cmpuint(dp_switch_num_dataplanes(sw), ==, 1);
    for (unsigned i = 0; i < NQ; i++) {
        map[i] = io1;
    }
    g_assert_false(dp_switch_remap(sw, map, NQ - 1, &err));
    g_assert_error(err, g_quark_from_static_string("vblk-dp-switch-error"), EINVAL);
    g_clear_error(&err);
    map[2] = NULL;
    g_assert_false(dp_switch_remap(sw, map, NQ, &err));
    g_assert_nonnull(strstr(err->message, "queue 2 has no iothread"));
    g_clear_error(&err);
    dp_switch_get_map(sw, got);
    for (unsigned i = 0; i < NQ; i++) {
        g_assert_true(got[i] == io0);
    }
    /* Not started: the mapping changes for the next start. */
    map[2] = io0;
    g_assert_true(dp_switch_remap(sw, map, NQ, &err));
    g_assert_cmpuint(dp_switch_num_dataplanes(sw), ==, 2);
    check_groups(sw, map);
    dp_switch_free(sw);
    blk_unref(backend);
    iothread_free(io0);
    iothread_free(io1);
    event_loop_free(main_loop);
    virtio_blk_free(blk);
    testdrv_free(d);
}

/* One 512-byte write of @fill at @sector on @tvq (buffers at @base), published and kicked. */
static int submit_write(TestDrv *d, TestVq *tvq, uint64_t base, uint64_t sector, uint8_t fill)
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

/* The next used head of @tvq within @ms, or -1; the main loop runs meanwhile. */
static int next_used(TestVq *tvq, EventLoop *main_loop, int ms)
{
    gint64 end = g_get_monotonic_time() + ms * 1000;
    uint16_t head;
    uint32_t len;

    while (g_get_monotonic_time() < end) {
        if (testvq_get_used(tvq, &head, &len)) {
            return head;
        }
        event_loop_run_once(main_loop, false);
        testvq_wait_used(tvq, 5);
    }
    return -1;
}

/*
 * werror=stop: a request held by a dataplane for 'cont' is never moved. A
 * remap that would quiesce that dataplane is refused and moves nothing; one
 * that leaves it alone goes ahead; after 'cont' the held request completes
 * once and the queue can move.
 */
static void test_remap_held(void)
{
    char *path = g_build_filename("/var/tmp", "vblk-remap-held-XXXXXX", NULL);
    int fd = g_mkstemp(path);
    TestDrvOpts dopts = {.ram_size = 16 << 20};
    TestDrv *d;
    VirtIOBlkConf conf;
    VirtIOBlk *blk;
    GError *err = NULL;
    uint64_t features, base[2];
    TestVq *tvq[2];
    VirtQueue *vq[2];
    VirtIOBlkQueue *q[2];
    DataPlaneQueue dq[2];
    EventLoop *main_loop;
    IOThread *io[3], *map[2], *got[2];
    BlockBackend *backend;
    GHashTable *opts;
    DpSwitch *sw;
    DpSwitchConf sc;
    g_autofree char *optstr = NULL;
    IOQInjectRule rule = {.op = IOQ_OP_WRITE, .offset = 7 * 512, .length = 512, .error = EIO};
    DataPlane *dp0;
    int held, hd;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 1 << 20), ==, 0);
    d = testdrv_new(&dopts);
    virtio_blk_conf_init(&conf, 2048);
    conf.num_queues = 2;
    conf.queue_size = QSIZE;
    blk = virtio_blk_new(&conf, &err);
    g_assert_no_error(err);
    features = testdrv_negotiate(virtio_blk_get_host_features(blk), ~0ull);
    g_assert_true(virtio_blk_set_features(blk, features, &err));
    main_loop = event_loop_new(&err);
    g_assert_no_error(err);
    for (unsigned t = 0; t < 3; t++) {
        g_autofree char *name = g_strdup_printf("held-io%u", t);

        io[t] = iothread_new(name, &err);
        g_assert_no_error(err);
    }
    optstr = g_strdup_printf("file=%s,cache=writeback,werror=stop", path);
    opts = blk_opts_parse(optstr);
    backend = blk_new_from_drive_opts(opts, main_loop, &err);
    g_assert_no_error(err);
    g_hash_table_unref(opts);
    blk_set_device_name(backend, "disk-held");
    for (unsigned i = 0; i < 2; i++) {
        tvq[i] = testvq_new(d, QSIZE, features);
        vq[i] = virtqueue_new(testdrv_guestmem(d), QSIZE, testvq_desc_gpa(tvq[i]),
                              testvq_avail_gpa(tvq[i]), testvq_used_gpa(tvq[i]), features, &err);
        g_assert_no_error(err);
        q[i] = virtio_blk_queue_new(blk, vq[i], NULL, NULL, &err);
        g_assert_no_error(err);
        dq[i] = (DataPlaneQueue){.q = q[i],
                                 .host_notifier = testvq_kick_fd(tvq[i]),
                                 .notifier = {.fd = testvq_call_fd(tvq[i])}};
        base[i] = testdrv_alloc(d, 2048, 512);
    }
    sc = (DpSwitchConf){.id = "disk-held",
                        .blk = blk,
                        .main_loop = main_loop,
                        .backend = backend,
                        .iothread = io[0],
                        .ioq = {.engine = "io_uring", .fd = fd, .logical_block_size = 512},
                        .num_queues = 2,
                        .queue_size = QSIZE,
                        .vq_iothread = {io[0], io[1]}};
    sw = dp_switch_new(&sc, &err);
    g_assert_no_error(err);
    g_assert_true(dp_switch_start(sw, true, dq, 2, &err));
    dp0 = dp_switch_get_dataplane(sw, 0, &got[0], NULL, NULL);
    g_assert_true(got[0] == io[0]);
    g_assert_true(dataplane_inject_error(dp0, &rule, &err));
    g_assert_no_error(err);

    /* Queue 0's write fails: held by io0's dataplane. */
    held = submit_write(d, tvq[0], base[0], 7, 0xab);
    g_assert_cmpint(next_used(tvq[0], main_loop, 200), ==, -1);
    g_assert_cmpuint(dp_switch_held_count(sw), ==, 1);

    /* Moving queue 0, or moving queue 1 onto io0: io0 would stop. Refused, nothing moved. */
    map[0] = io[1];
    map[1] = io[1];
    g_assert_false(dp_switch_remap(sw, map, 2, &err));
    g_assert_error(err, g_quark_from_static_string("vblk-dataplane-error"), EBUSY);
    g_assert_nonnull(strstr(err->message, "queues not moved"));
    g_clear_error(&err);
    map[0] = io[0];
    map[1] = io[0];
    g_assert_false(dp_switch_remap(sw, map, 2, &err));
    g_clear_error(&err);
    dp_switch_get_map(sw, got);
    g_assert_true(got[0] == io[0] && got[1] == io[1]);
    g_assert_cmpuint(dp_switch_held_count(sw), ==, 1);

    /* Queue 1 to io2 leaves io0 alone: done, and queue 1 serves on its new iothread. */
    map[0] = io[0];
    map[1] = io[2];
    g_assert_true(dp_switch_remap(sw, map, 2, &err));
    g_assert_no_error(err);
    hd = submit_write(d, tvq[1], base[1], 9, 0xcd);
    g_assert_cmpint(next_used(tvq[1], main_loop, 5000), ==, hd);
    g_assert_cmpuint(testdrv_readb(d, base[1] + 1024), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(next_used(tvq[0], main_loop, 50), ==, -1); /* still held */

    /* 'cont' with the disk fine again: the held write completes, once; then queue 0 moves. */
    dataplane_inject_clear(dp0);
    dp_switch_resume(sw);
    g_assert_cmpint(next_used(tvq[0], main_loop, 5000), ==, held);
    g_assert_cmpuint(testdrv_readb(d, base[0] + 1024), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(next_used(tvq[0], main_loop, 50), ==, -1);
    g_assert_cmpuint(dp_switch_held_count(sw), ==, 0);
    map[0] = io[2];
    g_assert_true(dp_switch_remap(sw, map, 2, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(dp_switch_num_dataplanes(sw), ==, 1);
    hd = submit_write(d, tvq[0], base[0], 7, 0xef);
    g_assert_cmpint(next_used(tvq[0], main_loop, 5000), ==, hd);
    {
        uint8_t b[512];

        g_assert_cmpint(pread(fd, b, 512, 7 * 512), ==, 512);
        g_assert_cmpuint(b[0], ==, 0xef);
        g_assert_cmpint(pread(fd, b, 512, 9 * 512), ==, 512);
        g_assert_cmpuint(b[0], ==, 0xcd);
    }
    dp_switch_free(sw);
    blk_unref(backend);
    for (unsigned t = 0; t < 3; t++) {
        iothread_free(io[t]);
    }
    event_loop_free(main_loop);
    for (unsigned i = 0; i < 2; i++) {
        virtio_blk_queue_free(q[i]);
        virtqueue_free(vq[i]);
        testvq_free(tvq[i]);
    }
    virtio_blk_free(blk);
    testdrv_free(d);
    close(fd);
    unlink(path);
    g_free(path);
}

/* Debug-state dumps from another thread while the device model remaps. */
static gpointer dump_thread(gpointer opaque)
{
    bool *stop = opaque;
    unsigned n = 0;

    while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
        g_autofree char *text = debug_state_collect();

        g_assert_nonnull(strstr(text, "device vd-mq"));
        n++;
        g_usleep(200);
    }
    return GUINT_TO_POINTER(n);
}

static GPtrArray *mapping(const char *json)
{
    g_autoptr(JsonParser) p = json_parser_new();
    GError *err = NULL;
    GPtrArray *m;

    g_assert_true(json_parser_load_from_data(p, json, -1, &err));
    m = vq_mapping_from_json(json_parser_get_root(p), "iothread-vq-mapping", &err);
    g_assert_no_error(err);
    return m;
}

/*
 * The device model's remap (what x-blockdev-remap-vqs runs): validation,
 * the running DpSwitch remapped, the ids it reports updated, and the
 * debug-state dump (any thread) kept away from dataplanes a remap frees.
 */
static void test_device_remap(void)
{
    TestDrvOpts dopts = {.ram_size = 16 << 20};
    TestDrv *d = testdrv_new(&dopts);
    VirtIOBlkPCI *s = g_new0(VirtIOBlkPCI, 1);
    GError *err = NULL;
    EventLoop *main_loop;
    IOThread *t0, *t1, *got[NQ];
    GHashTable *opts;
    TestVq *tvq[NQ];
    VirtQueue *vq[NQ];
    VirtIOBlkQueue *q[NQ];
    DataPlaneQueue dq[NQ];
    uint64_t features;
    DpSwitchConf sc;
    bool stop = false;
    GThread *dumper;
    static const char *const good[] = {
        "[{\"iothread\":\"mq-t0\",\"vqs\":[0,1]},{\"iothread\":\"mq-t1\",\"vqs\":[2,3]}]",
        "[{\"iothread\":\"mq-t1\"},{\"iothread\":\"mq-t0\"}]",
        "[{\"iothread\":\"mq-t1\",\"vqs\":[3,2,1,0]}]",
    };

    virtio_blk_conf_init(&s->conf, 2048);
    s->conf.num_queues = NQ;
    s->conf.queue_size = 64;
    s->blk = virtio_blk_new(&s->conf, &err);
    g_assert_no_error(err);
    s->id = g_strdup("vd-mq");
    pthread_mutex_init(&s->debug_lock, NULL);
    features = testdrv_negotiate(virtio_blk_get_host_features(s->blk), ~0ull);
    g_assert_true(virtio_blk_set_features(s->blk, features, &err));
    main_loop = event_loop_new(&err);
    g_assert_no_error(err);
    /* No machine here: the registry's iothreads stand for the -object ones. */
    qmp_init(NULL); /* the registry registers query-iothreads */
    t0 = iothread_registry_get("mq-t0", NULL, &err);
    t1 = iothread_registry_get("mq-t1", NULL, &err);
    g_assert_no_error(err);
    opts = blk_opts_parse("file=null-co://,size=1048576");
    s->backend = blk_new_from_drive_opts(opts, main_loop, &err);
    g_assert_no_error(err);
    g_hash_table_unref(opts);
    sc = (DpSwitchConf){.id = s->id,
                        .blk = s->blk,
                        .main_loop = main_loop,
                        .backend = s->backend,
                        .iothread = t0,
                        .ioq = {.engine = "null", .fd = -1},
                        .num_queues = NQ,
                        .queue_size = 64};
    for (unsigned i = 0; i < NQ; i++) {
        tvq[i] = testvq_new(d, 64, features);
        vq[i] = virtqueue_new(testdrv_guestmem(d), 64, testvq_desc_gpa(tvq[i]),
                              testvq_avail_gpa(tvq[i]), testvq_used_gpa(tvq[i]), features, &err);
        g_assert_no_error(err);
        q[i] = virtio_blk_queue_new(s->blk, vq[i], NULL, NULL, &err);
        g_assert_no_error(err);
        dq[i] = (DataPlaneQueue){.q = q[i],
                                 .host_notifier = testvq_kick_fd(tvq[i]),
                                 .notifier = {.fd = testvq_call_fd(tvq[i])}};
        s->vq_iothread[i] = t0;
        s->vq_iothread_id[i] = g_strdup("mq-t0");
    }
    s->iothread = t0;
    s->sw = dp_switch_new(&sc, &err);
    g_assert_no_error(err);
    g_assert_true(dp_switch_start(s->sw, true, dq, NQ, &err));
    s->nq = NQ;
    s->debug_sw = s->sw;
    s->debug_nq = NQ;
    debug_state_register(blk_pci_debug_state, s);
    dumper = g_thread_new("dump", dump_thread, &stop);

    for (unsigned round = 0; round < 60; round++) {
        g_autoptr(GPtrArray) m = mapping(good[round % G_N_ELEMENTS(good)]);

        g_assert_true(blk_pci_remap(s, m, &err));
        g_assert_no_error(err);
        g_assert_true(s->debug_sw == s->sw);
    }
    /* The last one: everything on mq-t1, queue order reversed in the list. */
    dp_switch_get_map(s->sw, got);
    for (unsigned i = 0; i < NQ; i++) {
        g_assert_true(got[i] == t1);
        g_assert_true(s->vq_iothread[i] == t1);
        g_assert_cmpstr(s->vq_iothread_id[i], ==, "mq-t1");
    }
    /* Refused ones change nothing. */
    {
        g_autoptr(GPtrArray) m1 = mapping("[{\"iothread\":\"mq-t0\",\"vqs\":[0,1]}]");
        g_autoptr(GPtrArray) m2 = mapping("[{\"iothread\":\"nope\"}]");

        g_assert_false(blk_pci_remap(s, m1, &err));
        g_assert_cmpstr(err->message, ==, "missing vq 2 IOThread assignment in iothread-vq-mapping");
        g_clear_error(&err);
        g_assert_false(blk_pci_remap(s, m2, &err));
        g_assert_cmpstr(err->message, ==, "IOThread \"nope\" object does not exist");
        g_clear_error(&err);
        dp_switch_get_map(s->sw, got);
        for (unsigned i = 0; i < NQ; i++) {
            g_assert_true(got[i] == t1);
        }
    }
    __atomic_store_n(&stop, true, __ATOMIC_RELEASE);
    g_assert_cmpuint(GPOINTER_TO_UINT(g_thread_join(dumper)), >, 0);
    debug_state_unregister(blk_pci_debug_state, s);
    dp_switch_free(s->sw);
    blk_unref(s->backend);
    for (unsigned i = 0; i < NQ; i++) {
        virtio_blk_queue_free(q[i]);
        virtqueue_free(vq[i]);
        testvq_free(tvq[i]);
        g_free(s->vq_iothread_id[i]);
    }
    iothread_registry_clear();
    qmp_cleanup();
    event_loop_free(main_loop);
    virtio_blk_free(s->blk);
    pthread_mutex_destroy(&s->debug_lock);
    g_free(s->id);
    g_free(s);
    testdrv_free(d);
}

int main(int argc, char **argv)
{
    static const Case uring = {"io_uring", false, 1000};
    static const Case native = {"native", false, 1000};
    static const Case uring_sw = {"io_uring", true, 300};

    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mq/remap/refused", test_remap_refused);
    g_test_add_func("/mq/remap/held", test_remap_held);
    g_test_add_func("/mq/remap/device-model", test_device_remap);
    g_test_add_data_func("/mq/remap/io_uring", &uring, test_remap_stress);
    g_test_add_data_func("/mq/remap/native", &native, test_remap_stress);
    g_test_add_data_func("/mq/remap/io_uring-with-path-switch", &uring_sw, test_remap_stress);
    return g_test_run();
}
