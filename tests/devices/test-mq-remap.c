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

#include "devfix.h"
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
    DevFixWriter w;
    bool stop; /* main -> guest */
    bool done; /* guest -> main */
} Guest;

static bool guest_stopping(void *opaque)
{
    Guest *g = opaque;

    return __atomic_load_n(&g->stop, __ATOMIC_ACQUIRE);
}

static gpointer guest_thread(gpointer opaque)
{
    Guest *g = opaque;

    devfix_writer_run(&g->w, guest_stopping, g);
    __atomic_store_n(&g->done, true, __ATOMIC_RELEASE);
    return NULL;
}

/*
 * A device of @nq queues (of @qsize; 0: the default) over @sectors, built
 * into @conf; with @features, the test driver's features negotiated there.
 */
static VirtIOBlk *new_blk(VirtIOBlkConf *conf, uint64_t sectors, unsigned nq, unsigned qsize,
                          uint64_t *features)
{
    GError *err = NULL;
    VirtIOBlk *blk;

    virtio_blk_conf_init(conf, sectors);
    conf->num_queues = nq;
    if (qsize) {
        conf->queue_size = qsize;
    }
    blk = virtio_blk_new(conf, &err);
    g_assert_no_error(err);
    if (features) {
        *features = testdrv_negotiate(virtio_blk_get_host_features(blk), ~0ull);
        g_assert_true(virtio_blk_set_features(blk, *features, &err));
    }
    return blk;
}

/* A device's queues on the test driver, as the dataplanes take them. */
typedef struct Queues {
    unsigned n;
    TestVq *tvq[NQ];
    VirtQueue *vq[NQ];
    VirtIOBlkQueue *q[NQ];
    DataPlaneQueue dq[NQ];
} Queues;

static void queues_init(Queues *qs, TestDrv *d, VirtIOBlk *blk, unsigned n, unsigned size,
                        uint64_t features)
{
    GError *err = NULL;

    g_assert_cmpuint(n, <=, NQ);
    qs->n = n;
    for (unsigned i = 0; i < n; i++) {
        qs->tvq[i] = testvq_new(d, size, features);
        qs->vq[i] = virtqueue_new(testdrv_guestmem(d), size, testvq_desc_gpa(qs->tvq[i]),
                                  testvq_avail_gpa(qs->tvq[i]), testvq_used_gpa(qs->tvq[i]),
                                  features, &err);
        g_assert_no_error(err);
        qs->q[i] = virtio_blk_queue_new(blk, qs->vq[i], NULL, NULL, &err);
        g_assert_no_error(err);
        qs->dq[i] = (DataPlaneQueue){.q = qs->q[i],
                                     .host_notifier = testvq_kick_fd(qs->tvq[i]),
                                     .notifier = {.fd = testvq_call_fd(qs->tvq[i])}};
    }
}

static void queues_fini(Queues *qs)
{
    for (unsigned i = 0; i < qs->n; i++) {
        virtio_blk_queue_free(qs->q[i]);
        virtqueue_free(qs->vq[i]);
        testvq_free(qs->tvq[i]);
    }
}

/* @n iothreads named @prefix0, @prefix1, ... */
static void iothreads_new(IOThread **io, unsigned n, const char *prefix)
{
    GError *err = NULL;

    for (unsigned t = 0; t < n; t++) {
        g_autofree char *name = g_strdup_printf("%s%u", prefix, t);

        io[t] = iothread_new(name, &err);
        g_assert_no_error(err);
    }
}

static void iothreads_free(IOThread **io, unsigned n)
{
    for (unsigned t = 0; t < n; t++) {
        iothread_free(io[t]);
    }
}

/* The BlockBackend of the -drive options @drive. */
static BlockBackend *open_backend(const char *drive, EventLoop *main_loop)
{
    GHashTable *opts = blk_opts_parse(drive);
    GError *err = NULL;
    BlockBackend *backend = blk_new_from_drive_opts(opts, main_loop, &err);

    g_assert_no_error(err);
    g_hash_table_unref(opts);
    return backend;
}

static EventLoop *new_main_loop(void)
{
    GError *err = NULL;
    EventLoop *main_loop = event_loop_new(&err);

    g_assert_no_error(err);
    return main_loop;
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
    Queues qs;
    EventLoop *main_loop;
    IOThread *io[NT];
    IOThread *map[NQ];
    BlockBackend *backend;
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
    blk = new_blk(&conf, NQ * REGION, NQ, QSIZE, &features);
    main_loop = new_main_loop();
    iothreads_new(io, NT, "mq-io");
    optstr = g_strdup_printf("file=%s,cache=none,aio=%s", path,
                             strcmp(c->engine, "native") ? "io_uring" : "native");
    backend = open_backend(optstr, main_loop);
    g_free(optstr);
    queues_init(&qs, d, blk, NQ, QSIZE, features);

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
    g_assert_true(dp_switch_start(sw, true, qs.dq, NQ, &err));
    g_assert_no_error(err);

    for (unsigned i = 0; i < NQ; i++) {
        g[i] = (Guest){0};
        devfix_writer_init(&g[i].w, d, qs.tvq[i], i, QSIZE, DEPTH, REGION, TIMEOUT);
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
        DataPlaneQueueStats qstats;

        dp_switch_get_queue_stats(sw, i, &qstats);
        g_assert_cmpuint(qstats.inflight, ==, 0);
        g_assert_cmpuint(qstats.requests, ==, qstats.completed);
        g_assert_cmpuint(qstats.requests, >, 0);
        if (c->with_switch) {
            g_assert_cmpuint(qstats.requests, <=, g[i].w.completed);
        } else {
            /* the dataplanes saw them all */
            g_assert_cmpuint(qstats.requests, ==, g[i].w.completed);
        }
        popped_total += qstats.requests;
        completed_total += g[i].w.completed;
    }
    g_test_message("%s: %u remaps (stall mean %.1f us, max %.1f us), %u switches, %" PRIu64
                   " requests completed, %" PRIu64 " popped by the dataplanes",
                   c->engine, c->remaps, st.total_remap_ns / 1e3 / c->remaps,
                   st.max_remap_ns / 1e3, switches, completed_total, popped_total);
    dp_switch_free(sw);

    /* The file holds the last completed write of every sector. */
    for (unsigned i = 0; i < NQ; i++) {
        g_assert_cmpuint(g[i].w.completed, >, 200);
        devfix_writer_check(&g[i].w, dfd);
    }
    blk_unref(backend);
    iothreads_free(io, NT);
    event_loop_free(main_loop);
    queues_fini(&qs);
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
    IOThread *io[2];
    IOThread *map[NQ], *got[NQ];
    BlockBackend *backend;
    DpSwitch *sw;

    blk = new_blk(&conf, 2048, NQ, 0, NULL);
    main_loop = new_main_loop();
    iothreads_new(io, 2, "mq-refused");
    backend = open_backend("file=null-co://,size=1048576", main_loop);
    sw = dp_switch_new(&(DpSwitchConf){.blk = blk,
                                       .main_loop = main_loop,
                                       .backend = backend,
                                       .iothread = io[0],
                                       .ioq = {.engine = "null", .fd = -1},
                                       .num_queues = NQ,
                                       .queue_size = 64},
                       &err);
    g_assert_no_error(err);
    g_assert_cmpuint(dp_switch_num_dataplanes(sw), ==, 1);
    for (unsigned i = 0; i < NQ; i++) {
        map[i] = io[1];
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
        g_assert_true(got[i] == io[0]);
    }
    /* Not started: the mapping changes for the next start. */
    map[2] = io[0];
    g_assert_true(dp_switch_remap(sw, map, NQ, &err));
    g_assert_cmpuint(dp_switch_num_dataplanes(sw), ==, 2);
    check_groups(sw, map);
    dp_switch_free(sw);
    blk_unref(backend);
    iothreads_free(io, 2);
    event_loop_free(main_loop);
    virtio_blk_free(blk);
    testdrv_free(d);
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
    Queues qs;
    EventLoop *main_loop;
    IOThread *io[3], *map[2], *got[2];
    BlockBackend *backend;
    DpSwitch *sw;
    DpSwitchConf sc;
    g_autofree char *optstr = NULL;
    IOQInjectRule rule = {.op = IOQ_OP_WRITE, .offset = 7 * 512, .length = 512, .error = EIO};
    DataPlane *dp0;
    int held, hd;

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 1 << 20), ==, 0);
    d = testdrv_new(&dopts);
    blk = new_blk(&conf, 2048, 2, QSIZE, &features);
    main_loop = new_main_loop();
    iothreads_new(io, 3, "held-io");
    optstr = g_strdup_printf("file=%s,cache=writeback,werror=stop", path);
    backend = open_backend(optstr, main_loop);
    blk_set_device_name(backend, "disk-held");
    queues_init(&qs, d, blk, 2, QSIZE, features);
    for (unsigned i = 0; i < 2; i++) {
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
    g_assert_true(dp_switch_start(sw, true, qs.dq, 2, &err));
    dp0 = dp_switch_get_dataplane(sw, 0, &got[0], NULL, NULL);
    g_assert_true(got[0] == io[0]);
    g_assert_true(dataplane_inject_error(dp0, &rule, &err));
    g_assert_no_error(err);

    /* Queue 0's write fails: held by io0's dataplane. */
    held = devfix_submit_write(d, qs.tvq[0], base[0], 7, 0xab);
    g_assert_cmpint(next_used(qs.tvq[0], main_loop, 200), ==, -1);
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
    hd = devfix_submit_write(d, qs.tvq[1], base[1], 9, 0xcd);
    g_assert_cmpint(next_used(qs.tvq[1], main_loop, 5000), ==, hd);
    g_assert_cmpuint(testdrv_readb(d, base[1] + 1024), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(next_used(qs.tvq[0], main_loop, 50), ==, -1); /* still held */

    /* 'cont' with the disk fine again: the held write completes, once; then queue 0 moves. */
    dataplane_inject_clear(dp0);
    dp_switch_resume(sw);
    g_assert_cmpint(next_used(qs.tvq[0], main_loop, 5000), ==, held);
    g_assert_cmpuint(testdrv_readb(d, base[0] + 1024), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpint(next_used(qs.tvq[0], main_loop, 50), ==, -1);
    g_assert_cmpuint(dp_switch_held_count(sw), ==, 0);
    map[0] = io[2];
    g_assert_true(dp_switch_remap(sw, map, 2, &err));
    g_assert_no_error(err);
    g_assert_cmpuint(dp_switch_num_dataplanes(sw), ==, 1);
    hd = devfix_submit_write(d, qs.tvq[0], base[0], 7, 0xef);
    g_assert_cmpint(next_used(qs.tvq[0], main_loop, 5000), ==, hd);
    {
        uint8_t b[512];

        g_assert_cmpint(pread(fd, b, 512, 7 * 512), ==, 512);
        g_assert_cmpuint(b[0], ==, 0xef);
        g_assert_cmpint(pread(fd, b, 512, 9 * 512), ==, 512);
        g_assert_cmpuint(b[0], ==, 0xcd);
    }
    dp_switch_free(sw);
    blk_unref(backend);
    iothreads_free(io, 3);
    event_loop_free(main_loop);
    queues_fini(&qs);
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
    Queues qs;
    uint64_t features;
    DpSwitchConf sc;
    bool stop = false;
    GThread *dumper;
    static const char *const good[] = {
        "[{\"iothread\":\"mq-t0\",\"vqs\":[0,1]},{\"iothread\":\"mq-t1\",\"vqs\":[2,3]}]",
        "[{\"iothread\":\"mq-t1\"},{\"iothread\":\"mq-t0\"}]",
        "[{\"iothread\":\"mq-t1\",\"vqs\":[3,2,1,0]}]",
    };

    s->id = g_strdup("vd-mq");
    pthread_mutex_init(&s->debug_lock, NULL);
    s->blk = new_blk(&s->conf, 2048, NQ, 64, &features);
    main_loop = new_main_loop();
    /* No machine here: the registry's iothreads stand for the -object ones. */
    qmp_init(NULL); /* the registry registers query-iothreads */
    t0 = iothread_registry_get("mq-t0", NULL, &err);
    t1 = iothread_registry_get("mq-t1", NULL, &err);
    g_assert_no_error(err);
    s->backend = open_backend("file=null-co://,size=1048576", main_loop);
    sc = (DpSwitchConf){.id = s->id,
                        .blk = s->blk,
                        .main_loop = main_loop,
                        .backend = s->backend,
                        .iothread = t0,
                        .ioq = {.engine = "null", .fd = -1},
                        .num_queues = NQ,
                        .queue_size = 64};
    queues_init(&qs, d, s->blk, NQ, 64, features);
    for (unsigned i = 0; i < NQ; i++) {
        s->vq_iothread[i] = t0;
        s->vq_iothread_id[i] = g_strdup("mq-t0");
    }
    s->iothread = t0;
    s->sw = dp_switch_new(&sc, &err);
    g_assert_no_error(err);
    g_assert_true(dp_switch_start(s->sw, true, qs.dq, NQ, &err));
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
    queues_fini(&qs);
    for (unsigned i = 0; i < NQ; i++) {
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
    static const struct {
        const char *path;
        Case c;
    } stress[] = {
        {"/mq/remap/io_uring", {"io_uring", false, 1000}},
        {"/mq/remap/native", {"native", false, 1000}},
        {"/mq/remap/io_uring-with-path-switch", {"io_uring", true, 300}},
    };

    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/mq/remap/refused", test_remap_refused);
    g_test_add_func("/mq/remap/held", test_remap_held);
    g_test_add_func("/mq/remap/device-model", test_device_remap);
    for (unsigned i = 0; i < G_N_ELEMENTS(stress); i++) {
        g_test_add_data_func(stress[i].path, &stress[i].c, test_remap_stress);
    }
    return g_test_run();
}
