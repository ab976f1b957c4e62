/*
 * Runtime switching between the dataplane and the block layer, through the
 * test driver: one guest thread per queue keeps a verifying workload running
 * (writes with sequence-numbered content and FLUSHes), while the main thread
 * (the "main loop": it owns the EventLoop and the BlockBackend) switches the
 * device back and forth thousands of times.
 *
 * Checked: every request completes exactly once (no loss, no duplicate), a
 * FLUSH completes only after every write the guest submitted before it, and
 * the file holds exactly the last write of every sector.
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
#include "util/debug-state.h"
#include "virtio-blk-pci-int.h"

#define NQ      2
#define QSIZE   128
#define DEPTH   32   /* requests in flight per queue (3 descriptors each) */
#define REGION  4096 /* sectors per queue */
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
    uint32_t *done_seq = g_new0(uint32_t, 1 << 20); /* completion flag per write seq */
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

                done_seq[s->seq] = 1;
                writes_completed++;
                if (s->seq >= g->last_seq[sector] || g->last_seq[sector] == UINT32_MAX) {
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

/* Collects debug-state dumps while the device switches, until told to stop. */
static gpointer dump_thread(gpointer opaque)
{
    bool *stop = opaque;
    unsigned n = 0;

    while (!__atomic_load_n(stop, __ATOMIC_ACQUIRE)) {
        g_autofree char *text = debug_state_collect();

        g_assert_nonnull(strstr(text, "device disk-t: path "));
        g_assert_nonnull(strstr(text, "iothread switch-io (thread "));
        n++;
        g_usleep(500);
    }
    return GUINT_TO_POINTER(n);
}

static void test_switch_stress(gconstpointer data)
{
    const char *engine = data;
    char *path = g_build_filename("/var/tmp", "vblk-switch-XXXXXX", NULL);
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
    IOThread *iothread;
    BlockBackend *backend;
    GHashTable *opts;
    DpSwitch *sw;
    DpSwitchStats st;
    Guest g[NQ];
    GThread *th[NQ];
    unsigned switches = 0, target = 10000;
    char *optstr;
    VirtIOBlkPCI *dev = g_new0(VirtIOBlkPCI, 1);
    bool dump_stop = false;
    GThread *dumper;
    char *text, *line;
    uint64_t popped[NQ];

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, (off_t)NQ * REGION * 512), ==, 0);
    close(fd);
    dfd = open(path, O_RDWR | O_DIRECT);
    if (dfd < 0) {
        g_test_skip("no O_DIRECT on /var/tmp");
        unlink(path);
        g_free(path);
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
    iothread = iothread_new("switch-io", &err);
    g_assert_no_error(err);
    optstr = g_strdup_printf("file=%s,cache=none,aio=%s", path,
                             strcmp(engine, "native") ? "io_uring" : "native");
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
    sw = dp_switch_new(
        &(DpSwitchConf){
            .blk = blk,
            .main_loop = main_loop,
            .backend = backend,
            .iothread = iothread,
            .ioq = {.engine = engine, .fd = dfd, .direct = true, .logical_block_size = 512},
            .num_queues = NQ,
            .queue_size = QSIZE},
        &err);
    g_assert_no_error(err);
    g_assert_true(dp_switch_start(sw, true, dq, NQ, &err));

    /* The device model's dump, as virtio-blk-pci registers it, taken all along from a thread. */
    dev->id = "disk-t";
    pthread_mutex_init(&dev->debug_lock, NULL);
    dev->debug_sw = sw;
    dev->debug_nq = NQ;
    debug_state_register(blk_pci_debug_state, dev);
    dumper = g_thread_new("dump", dump_thread, &dump_stop);

    for (unsigned i = 0; i < NQ; i++) {
        g[i] = (Guest){.d = d, .tvq = tvq[i], .qidx = i, .last_seq = g_new(uint32_t, REGION)};
        memset(g[i].last_seq, 0xff, REGION * sizeof(uint32_t));
        th[i] = g_thread_new("guest", guest_thread, &g[i]);
    }
    while (switches < target) {
        /* The main loop serves the block-layer path between switches. */
        for (int k = 0; k < 3; k++) {
            event_loop_run_once(main_loop, false);
        }
        g_assert_true(dp_switch_set_dataplane(sw, !dp_switch_is_dataplane(sw), &err));
        g_assert_true(
            dp_switch_set_dataplane(sw, dp_switch_is_dataplane(sw), &err)); /* idempotent */
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
    g_assert_cmpuint(st.switches, ==, target);
    g_test_message("%s: %u switches; %" PRIu64 " + %" PRIu64 " requests (%" PRIu64 " + %" PRIu64
                   " flushes); stall mean %.1f us, max %.1f us",
                   engine, switches, g[0].completed, g[1].completed, g[0].flushes, g[1].flushes,
                   st.total_stall_ns / 1e3 / st.switches, st.max_stall_ns / 1e3);
    printf("# BENCH-SWITCH engine=%s switches=%u stall_mean_us=%.1f stall_max_us=%.1f\n", engine,
           switches, st.total_stall_ns / 1e3 / st.switches, st.max_stall_ns / 1e3);

    /* Quiet now: the dump's counters are exact, every popped request completed. */
    __atomic_store_n(&dump_stop, true, __ATOMIC_RELEASE);
    g_assert_cmpuint(GPOINTER_TO_UINT(g_thread_join(dumper)), >, 0);
    text = debug_state_collect();
    line = g_strdup_printf("device disk-t: path %s, dataplane %s, %u switches",
                           dp_switch_is_dataplane(sw) ? "dataplane" : "block layer",
                           dp_switch_is_dataplane(sw) ? "started" : "stopped", target);
    g_assert_nonnull(strstr(text, line));
    g_free(line);
    for (unsigned i = 0; i < NQ; i++) {
        DataPlaneQueueStats qs;

        dataplane_get_queue_stats(dp_switch_dataplane(sw), i, &qs);
        popped[i] = qs.requests;
        g_assert_cmpuint(popped[i], >, 0);
        g_assert_cmpuint(popped[i], <=, g[i].completed);
        line = g_strdup_printf("device disk-t queue %u (dataplane counters): popped %" PRIu64
                               ", completed %" PRIu64 ", in flight 0,",
                               i, popped[i], popped[i]);
        g_assert_nonnull(strstr(text, line));
        g_free(line);
    }
    g_free(text);
    debug_state_unregister(blk_pci_debug_state, dev);
    pthread_mutex_destroy(&dev->debug_lock);
    g_free(dev);
    dp_switch_free(sw);

    /* The file holds the last completed write of every sector. */
    for (unsigned i = 0; i < NQ; i++) {
        g_assert_cmpuint(g[i].completed, >, 1000);
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
    iothread_free(iothread);
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
}

/* One 512-byte write of @fill at @sector, published and kicked. */
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

/*
 * werror=stop on the block-layer path: a request parked before a switch to
 * the dataplane belongs to the block layer until 'cont'. The switch is
 * refused (it used to wait for it forever), the request completes after the
 * resume, and then the switch succeeds.
 */
static void test_switch_parked(void)
{
    char *path = g_build_filename("/var/tmp", "vblk-switch-parked-XXXXXX", NULL);
    int fd = g_mkstemp(path), dfd;
    TestDrvOpts dopts = {.ram_size = 16 << 20};
    TestDrv *d;
    TestVq *tvq;
    VirtQueue *vq;
    VirtIOBlkQueue *q;
    VirtIOBlkConf conf;
    VirtIOBlk *blk;
    EventLoop *main_loop;
    IOThread *iothread;
    BlockBackend *backend;
    GHashTable *opts;
    DpSwitch *sw;
    DataPlaneQueue dq;
    GError *err = NULL;
    uint64_t features, buf;
    BlkdebugRule rule = {.op = BLOCK_OP_WRITE, .nth = 1, .error = EIO, .once = true};
    uint16_t head;
    uint32_t len;
    uint8_t got[512];
    char *optstr;
    int hd;

    alarm(60); /* a regression hangs in the switch: fail instead */
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, 1 << 20), ==, 0);
    close(fd);
    dfd = open(path, O_RDWR);
    g_assert_cmpint(dfd, >=, 0);
    d = testdrv_new(&dopts);
    virtio_blk_conf_init(&conf, (1 << 20) / 512);
    conf.queue_size = QSIZE;
    blk = virtio_blk_new(&conf, &err);
    g_assert_no_error(err);
    features = testdrv_negotiate(virtio_blk_get_host_features(blk), ~0ull);
    g_assert_true(virtio_blk_set_features(blk, features, &err));
    main_loop = event_loop_new(&err);
    g_assert_no_error(err);
    iothread = iothread_new("parked-io", &err);
    g_assert_no_error(err);
    optstr = g_strdup_printf("driver=raw,node-name=top,file.driver=blkdebug,file.node-name=dbg,"
                             "file.image.driver=file,file.image.filename=%s",
                             path);
    opts = blk_opts_parse(optstr);
    backend = blk_new_from_blockdev_opts(opts, main_loop, &err);
    g_assert_no_error(err);
    g_hash_table_unref(opts);
    g_free(optstr);
    blk_set_error_policy(backend, BLOCK_ERR_REPORT, BLOCK_ERR_STOP);
    g_assert_true(blkdebug_add_rule(blk_find_node(backend, "dbg"), &rule, &err));

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
                        .ioq = {.engine = "io_uring", .fd = dfd, .logical_block_size = 512},
                        .num_queues = 1,
                        .queue_size = QSIZE},
        &err);
    g_assert_no_error(err);
    g_assert_true(dp_switch_start(sw, false, &dq, 1, &err));

    /* The first write fails once and is parked. */
    buf = testdrv_alloc(d, 2048, 512);
    hd = submit_write(d, tvq, buf, 8, 0xa5);
    for (int i = 0; i < 10000 && blk_parked_count(backend) == 0; i++) {
        event_loop_run_once(main_loop, false);
        g_usleep(100);
    }
    g_assert_cmpuint(blk_parked_count(backend), ==, 1);
    g_assert_false(testvq_get_used(tvq, &head, &len));

    g_assert_false(dp_switch_set_dataplane(sw, true, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "wait for 'cont'"));
    g_clear_error(&err);
    g_assert_false(dp_switch_is_dataplane(sw));

    /* 'cont': the request is resubmitted and completes on the block layer. */
    blk_resume_parked(backend);
    for (int i = 0; i < 10000 && !testvq_get_used(tvq, &head, &len); i++) {
        event_loop_run_once(main_loop, false);
        g_usleep(100);
    }
    g_assert_cmpint(head, ==, hd);
    g_assert_cmpuint(testdrv_readb(d, buf + 1024), ==, VIRTIO_BLK_S_OK);

    /* Nothing parked: the switch goes through, and the dataplane serves the next write. */
    g_assert_true(dp_switch_set_dataplane(sw, true, &err));
    g_assert_no_error(err);
    hd = submit_write(d, tvq, buf, 9, 0x5a);
    for (int i = 0; i < 200 && !testvq_get_used(tvq, &head, &len); i++) {
        testvq_wait_used(tvq, 50);
    }
    g_assert_cmpint(head, ==, hd);
    g_assert_cmpuint(testdrv_readb(d, buf + 1024), ==, VIRTIO_BLK_S_OK);
    dp_switch_stop(sw);
    dp_switch_free(sw);

    g_assert_cmpint(pread(dfd, got, 512, 8 * 512), ==, 512);
    for (int i = 0; i < 512; i++) {
        g_assert_cmpuint(got[i], ==, 0xa5);
    }
    g_assert_cmpint(pread(dfd, got, 512, 9 * 512), ==, 512);
    for (int i = 0; i < 512; i++) {
        g_assert_cmpuint(got[i], ==, 0x5a);
    }
    alarm(0);
    blk_unref(backend);
    iothread_free(iothread);
    event_loop_free(main_loop);
    virtio_blk_queue_free(q);
    virtqueue_free(vq);
    testvq_free(tvq);
    virtio_blk_free(blk);
    testdrv_free(d);
    close(dfd);
    unlink(path);
    g_free(path);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/dp-switch/native/10000-switches", "native", test_switch_stress);
    g_test_add_data_func("/dp-switch/io_uring/10000-switches", "io_uring", test_switch_stress);
    g_test_add_func("/dp-switch/werror-stop-parked", test_switch_parked);
    return g_test_run();
}
