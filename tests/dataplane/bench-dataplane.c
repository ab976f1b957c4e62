/*
 * Dataplane benchmark (not a test; scripts/bench-dataplane runs it).
 *
 * The calling thread plays the guest: it keeps --qd 4 KiB random reads in
 * flight on one virtio-blk queue, kicks through the host notifier as EVENT_IDX
 * allows, and sleeps in poll() on the guest notifier (the "interrupt") when it
 * has nothing to reap. The DataPlane runs on its own iothread, optionally
 * pinned to --iothread-cpu. Prints one line:
 *   RESULT iops=N mean_us=X p99_us=X cycles_per_req=N cycles_total_per_req=N
 *          reqs_per_batch=X irqs_per_req=X kicks_per_req=X
 * cycles_per_req is the iothread's own cost (pop+parse, completion, notify),
 * excluding the submit syscall; cycles_total_per_req includes it.
 *
 * --backend nbd --file URI: an NBD export (nbd://H:P/E, nbd+unix:///E?socket=S)
 * instead of a file; the dataplane has its own connection (the "nbd" IOQ).
 *
 * --path block serves the same queue through the x-data-plane=off path
 * instead: a DpSwitch started on the block layer, whose main loop runs on a
 * thread of its own (pinned like the iothread); its per-stage counters are
 * "na" there.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include <linux/virtio_blk.h>

#include "dpfix.h"
#include "block/block.h"
#include "devices/dp-switch.h"
#include "util/thread-check.h"

#define HIST_US 200000 /* 1 us buckets up to 200 ms */

static int iothread_cpu = -1;

static void pin_self(void *opaque)
{
    int cpu = *(int *)opaque;
    cpu_set_t set;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    pthread_setaffinity_np(pthread_self(), sizeof(set), &set);
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Upper bound of the 1 us bucket holding the 99th percentile. */
static unsigned p99_us(const uint64_t *hist, uint64_t done)
{
    uint64_t target = done - done / 100, acc = 0;

    for (unsigned i = 0; i <= HIST_US; i++) {
        acc += hist[i];
        if (acc >= target) {
            return i + 1;
        }
    }
    return HIST_US + 1;
}

/* The block-layer path: its main loop on a thread of its own. */
typedef struct MainLoopThread {
    EventLoop *loop;
    bool glib; /* --main-loop glib: run it as the VMM does, a GSource in a GMainContext */
    bool stop;
} MainLoopThread;

static GMutex fake_bql;
static GPollFunc glib_poll;

/* As the VMM's main loop: the "BQL" is held except while sleeping in poll(). */
static gint bql_poll(GPollFD *fds, guint nfds, gint timeout)
{
    gint r;

    bql_note_held(false);
    g_mutex_unlock(&fake_bql);
    r = glib_poll(fds, nfds, timeout);
    g_mutex_lock(&fake_bql);
    bql_note_held(true);
    return r;
}

static gpointer main_loop_thread(gpointer opaque)
{
    MainLoopThread *m = opaque;
    GMainContext *ctx = NULL;
    GSource *src = NULL;

    if (iothread_cpu >= 0) {
        pin_self(&iothread_cpu);
    }
    /* This thread is the block layer's main loop: main-loop context for THREAD_ASSERT_MAIN(). */
    bql_note_held(true);
    if (m->glib) {
        ctx = g_main_context_new();
        g_main_context_push_thread_default(ctx);
        src = event_loop_create_gsource(m->loop);
        g_source_attach(src, ctx);
        glib_poll = g_main_context_get_poll_func(ctx);
        g_main_context_set_poll_func(ctx, bql_poll);
        g_mutex_lock(&fake_bql);
    }
    while (!__atomic_load_n(&m->stop, __ATOMIC_ACQUIRE)) {
        if (ctx) {
            g_main_context_iteration(ctx, TRUE);
        } else {
            event_loop_run_once(m->loop, true);
        }
    }
    if (ctx) {
        g_mutex_unlock(&fake_bql);
        g_source_destroy(src);
        g_source_unref(src);
        g_main_context_pop_thread_default(ctx);
        g_main_context_unref(ctx);
    }
    return NULL;
}

/* A DpSwitch on @f's queue, started on the block-layer path (aio: threads, native, io_uring). */
static DpSwitch *start_block_path(DpFix *f, const char *aio, EventLoop **loop,
                                  BlockBackend **backend)
{
    DataPlaneQueue dq = {.q = f->q,
                         .host_notifier = testvq_kick_fd(f->tvq),
                         .notifier = {.fd = testvq_call_fd(f->tvq)}};
    g_autofree char *optstr = NULL;
    GHashTable *opts;
    GError *err = NULL;
    DpSwitch *sw;

    *loop = event_loop_new(&err);
    g_assert_no_error(err);
    optstr = !strcmp(f->o.engine, "nbd")
                 ? g_strdup_printf("file=%s,format=raw", f->o.path)
             : f->fd < 0 ? g_strdup_printf("file=null-co://,size=%" PRIu64, f->o.disk_size)
                         : g_strdup_printf("file=%s,cache=none,aio=%s", f->o.path, aio);
    opts = blk_opts_parse(optstr);
    *backend = blk_new_from_drive_opts(opts, *loop, &err);
    g_hash_table_unref(opts);
    if (!*backend) {
        fprintf(stderr, "bench-dataplane: %s: %s\n", optstr, err->message);
        exit(1);
    }
    sw = dp_switch_new(&(DpSwitchConf){.blk = f->blk,
                                       .main_loop = *loop,
                                       .backend = *backend,
                                       .iothread = f->iothread,
                                       .ioq = {.engine = !strcmp(f->o.engine, "nbd") ? "nbd"
                                                         : f->fd < 0                  ? "null"
                                                                                      : "io_uring",
                                               .fd = f->fd,
                                               .direct = f->direct_ok,
                                               .logical_block_size = 512,
                                               .nbd = f->o.nbd},
                                       .num_queues = 1,
                                       .queue_size = f->o.queue_size},
                       &err);
    g_assert_no_error(err);
    g_assert_true(dp_switch_start(sw, false, &dq, 1, &err));
    return sw;
}

typedef struct Slot {
    uint64_t hdr, data, status;
    uint64_t t0;
} Slot;

int main(int argc, char **argv)
{
    const char *backend = "null", *aio = "native", *file = NULL, *path = "dataplane";
    EventLoop *probe_loop = NULL;
    BlockBackend *probe = NULL; /* nbd: the drive whose server the paths connect to */
    MainLoopThread ml = {0};
    GThread *ml_thread = NULL;
    BlockBackend *blkbe = NULL;
    DpSwitch *sw = NULL;
    unsigned qd = 32, secs = 5;
    long long poll_ns = 0;
    uint64_t halt_poll_ns = 0; /* driver: spin on the used ring before sleeping */
    uint64_t drv_kicks = 0, drv_sleeps = 0, drv_halt_hits = 0;
    DpFixOpts o = {0};
    DpFix *f;
    Slot *slots;
    int *slot_of_head;
    uint64_t *hist = calloc(HIST_US + 1, sizeof(uint64_t));
    uint64_t done = 0, lat_sum = 0, start, end, nsect;
    GRand *rnd = g_rand_new_with_seed(42);
    DataPlaneQueueStats st;
    struct pollfd pfd;

    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--backend")) {
            backend = argv[i + 1];
        } else if (!strcmp(argv[i], "--aio")) {
            aio = argv[i + 1];
        } else if (!strcmp(argv[i], "--qd")) {
            qd = (unsigned)atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--seconds")) {
            secs = (unsigned)atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--file")) {
            file = argv[i + 1];
        } else if (!strcmp(argv[i], "--poll-max-ns")) {
            poll_ns = atoll(argv[i + 1]);
        } else if (!strcmp(argv[i], "--path")) {
            path = argv[i + 1];
        } else if (!strcmp(argv[i], "--main-loop")) {
            ml.glib = !strcmp(argv[i + 1], "glib");
        } else if (!strcmp(argv[i], "--iothread-cpu")) {
            iothread_cpu = atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--complete-batch")) {
            o.complete_batch = (unsigned)strtoul(argv[i + 1], NULL, 0);
        } else if (!strcmp(argv[i], "--halt-poll-us")) {
            halt_poll_ns = (uint64_t)atoll(argv[i + 1]) * 1000;
        } else {
            fprintf(stderr, "bench-dataplane: unknown option %s\n", argv[i]);
            return 1;
        }
    }
    if (strcmp(path, "dataplane") && strcmp(path, "block")) {
        fprintf(stderr, "bench-dataplane: --path dataplane|block\n");
        return 1;
    }
    if (qd < 1 || qd > 64) {
        fprintf(stderr, "bench-dataplane: --qd must be 1..64\n");
        return 1;
    }
    if (!strcmp(backend, "null")) {
        o.engine = "null";
        o.disk_size = 1ull << 30;
    } else if (!strcmp(backend, "file") && file) {
        o.engine = strcmp(aio, "threads") ? aio : "io_uring"; /* the block path's own pool */
        o.path = file;
        o.direct = true;
    } else if (!strcmp(backend, "nbd") && file) {
        /* What the device does: open the drive, hand its server to the dataplane. */
        g_autofree char *s = g_strdup_printf("file=%s,format=raw", file);
        GHashTable *t = blk_opts_parse(s);
        GError *err = NULL;
        BlockHostInfo hi;

        probe_loop = event_loop_new(&err);
        g_assert_no_error(err);
        probe = blk_new_from_drive_opts(t, probe_loop, &err);
        g_hash_table_unref(t);
        if (!probe) {
            fprintf(stderr, "bench-dataplane: %s: %s\n", file, err->message);
            return 1;
        }
        blk_get_host_info(probe, &hi);
        o.engine = "nbd";
        o.path = file;
        o.disk_size = (uint64_t)blk_getlength(probe);
        o.nbd = (IOQNbdConfig){.host = hi.nbd_host,
                               .port = hi.nbd_port,
                               .socket = hi.nbd_socket,
                               .export_name = hi.nbd_export};
    } else {
        fprintf(stderr, "bench-dataplane: --backend null|file|nbd (file and nbd need --file)\n");
        return 1;
    }
    o.queue_size = 256;
    f = dpfix_new(&o);
    if (!f) {
        return 1;
    }
    if (iothread_cpu >= 0) {
        iothread_run_sync(f->iothread, pin_self, &iothread_cpu);
    }
    /* Adaptive polling of the avail ring and the completion ring (QEMU's rules). */
    event_loop_set_poll_params(iothread_get_loop(f->iothread), poll_ns, 0, 0);
    if (!strcmp(path, "block")) {
        sw = start_block_path(f, aio, &ml.loop, &blkbe);
        event_loop_set_poll_params(ml.loop, poll_ns, 0, 0);
        ml_thread = g_thread_new("main-loop", main_loop_thread, &ml);
    } else {
        dpfix_start(f);
    }
    nsect = f->o.disk_size / 512;
    slots = g_new0(Slot, qd);
    slot_of_head = g_new0(int, o.queue_size);
    for (unsigned i = 0; i < qd; i++) {
        uint8_t ff = 0xff;

        slots[i].hdr = testdrv_alloc(f->d, 16, 16);
        slots[i].data = testdrv_alloc(f->d, 4096, 4096);
        slots[i].status = testdrv_alloc(f->d, 1, 1);
        testdrv_memwrite(f->d, slots[i].status, &ff, 1);
    }
    pfd.fd = testvq_call_fd(f->tvq);
    pfd.events = POLLIN;

#define SUBMIT(k)                                                                                  \
    do {                                                                                           \
        struct virtio_blk_outhdr h = {                                                             \
            .type = htole32(VIRTIO_BLK_T_IN),                                                      \
            .sector = htole64((uint64_t)g_rand_int_range(rnd, 0, (gint32)(nsect / 8)) * 8)};       \
        TestBuf b[3] = {                                                                           \
            {slots[k].hdr, 16, false}, {slots[k].data, 4096, true}, {slots[k].status, 1, true}};   \
        int hd;                                                                                    \
        testdrv_memwrite(f->d, slots[k].hdr, &h, sizeof(h));                                       \
        hd = testvq_add_chain(f->tvq, b, 3);                                                       \
        if (hd < 0) {                                                                              \
            fprintf(stderr, "bench-dataplane: ring full\n");                                       \
            return 1;                                                                              \
        }                                                                                          \
        slot_of_head[hd] = (int)(k);                                                               \
        slots[k].t0 = now_ns();                                                                    \
        testvq_publish(f->tvq, (uint16_t)hd);                                                      \
    } while (0)

    start = now_ns();
    end = start + (uint64_t)secs * 1000000000ull;
    for (unsigned k = 0; k < qd; k++) {
        SUBMIT(k);
    }
    testvq_kick(f->tvq);
    for (;;) {
        uint16_t head;
        uint32_t len;
        unsigned reaped = 0;
        uint64_t t = 0;

        while (testvq_get_used(f->tvq, &head, &len)) {
            int k = slot_of_head[head];
            uint64_t lat;

            t = now_ns();
            lat = t - slots[k].t0;
            if (testdrv_readb(f->d, slots[k].status) != VIRTIO_BLK_S_OK || len != 4097) {
                fprintf(stderr, "bench-dataplane: request failed (status %u len %u)\n",
                        testdrv_readb(f->d, slots[k].status), len);
                return 1;
            }
            lat_sum += lat;
            hist[lat / 1000 < HIST_US ? lat / 1000 : HIST_US]++;
            done++;
            reaped++;
            if (t < end) {
                SUBMIT(k);
            }
        }
        if (reaped) {
            drv_kicks += testvq_kick(f->tvq);
            if (t >= end && testvq_free_descs(f->tvq) == o.queue_size) {
                break;
            }
            continue;
        }
        if (now_ns() >= end && testvq_free_descs(f->tvq) == o.queue_size) {
            break;
        }
        /*
         * Nothing to reap. With --halt-poll-us the driver first spins on the
         * used index, as KVM's halt-polling keeps a halted vCPU on its CPU for
         * a few microseconds; then it sleeps on the guest notifier like a
         * guest waits for its interrupt.
         */
        if (halt_poll_ns) {
            uint64_t until = now_ns() + halt_poll_ns;
            uint16_t seen = testvq_used_idx(f->tvq);

            while (testvq_used_idx(f->tvq) == seen && now_ns() < until) {
                __builtin_ia32_pause();
            }
            if (testvq_used_idx(f->tvq) != seen) {
                drv_halt_hits++;
                continue;
            }
        }
        drv_sleeps++;
        if (poll(&pfd, 1, 1000) > 0) {
            uint64_t cnt;

            if (read(pfd.fd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN) {
                return 1;
            }
        }
    }
    end = now_ns();
    if (sw) {
        double iops = (double)done * 1e9 / (double)(end - start);

        printf("RESULT iops=%.0f mean_us=%.1f p99_us=%u cycles_per_req=na cycles_total_per_req=na "
               "reqs_per_batch=na irqs_per_req=na kicks_per_req=na requests=%" PRIu64 "\n",
               iops, (double)lat_sum / (double)done / 1000.0, p99_us(hist, done), done);
        {
            EventLoopStats ls;

            event_loop_get_stats(ml.loop, &ls);
            fprintf(stderr,
                    "main loop per request: iterations %.2f blocking waits %.2f notify writes "
                    "%.2f BH runs %.2f\n",
                    (double)ls.iterations / done, (double)ls.blocking_waits / done,
                    (double)ls.notify_writes / done, (double)ls.bh_runs / done);
        }
        __atomic_store_n(&ml.stop, true, __ATOMIC_RELEASE);
        event_loop_notify(ml.loop);
        g_thread_join(ml_thread);
        dp_switch_stop(sw);
        dp_switch_free(sw);
        blk_unref(blkbe);
        event_loop_free(ml.loop);
        goto out;
    }
    dataplane_get_queue_stats(f->dp, 0, &st);
    {
        double own = (double)(st.cycles_pop + st.cycles_complete + st.cycles_notify);
        double r = (double)(st.requests ? st.requests : 1);
        IOQStats is;
        EventLoopStats ls;

        /*
         * Syscalls per request, from counters. Iothread: kick eventfd reads,
         * submits (io_submit / io_uring_enter), completion eventfd reads,
         * epoll_wait, irqfd writes. Driver: kick writes, sleeps in poll()
         * (each followed by a read of the interrupt eventfd).
         */
        dataplane_get_ioq_stats(f->dp, &is);
        event_loop_get_stats(iothread_get_loop(f->iothread), &ls);
        fprintf(stderr,
                "syscalls per request: iothread kick-reads %.3f submits %.3f completion-efd-reads "
                "%.3f epoll_waits %.3f (blocking %.3f) irq-writes %.3f = %.3f; driver kicks %.3f "
                "sleeps %.3f (halt-poll hits %.3f); used publishes %.3f\n",
                (double)st.kicks / r, (double)is.batches / r, (double)is.efd_reads / r,
                (double)ls.epoll_waits / r, (double)ls.blocking_waits / r, (double)st.irqs / r,
                (double)(st.kicks + is.batches + is.efd_reads + ls.epoll_waits + st.irqs) / r,
                (double)drv_kicks / r, (double)drv_sleeps / r, (double)drv_halt_hits / r,
                (double)st.publishes / r);

        printf("RESULT iops=%.0f mean_us=%.1f p99_us=%u cycles_per_req=%.0f "
               "cycles_total_per_req=%.0f reqs_per_batch=%.2f irqs_per_req=%.3f "
               "kicks_per_req=%.3f requests=%" PRIu64 " sys_iothread_per_req=%.3f "
               "sys_driver_per_req=%.3f\n",
               (double)done * 1e9 / (double)(end - start), (double)lat_sum / (double)done / 1000.0,
               p99_us(hist, done), own / (double)st.requests,
               (own + (double)st.cycles_submit) / (double)st.requests,
               (double)st.requests / (double)(st.batches ? st.batches : 1),
               (double)st.irqs / (double)st.completed, (double)st.kicks / (double)st.requests,
               done, (double)(st.kicks + is.batches + is.efd_reads + ls.epoll_waits + st.irqs) / r,
               (double)(drv_kicks + 2 * drv_sleeps) / r);
    }
    dpfix_stop(f);
out:
    dpfix_free(f);
    blk_unref(probe);
    event_loop_free(probe_loop);
    g_free(slots);
    g_free(slot_of_head);
    free(hist);
    g_rand_free(rnd);
    return 0;
}
