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
 * --backend rbd --file rbd:POOL/IMAGE[:conf=F]...: a Ceph RBD image the same
 * way (the "rbd" IOQ with its own image handle).
 *
 * --path block serves the same queue through the x-data-plane=off path
 * instead: a DpSwitch started on the block layer, whose main loop runs on a
 * thread of its own (pinned like the iothread); its per-stage counters are
 * "na" there.
 *
 * --queues N, --bs BYTES, --rw randread|randwrite and --busy-devs N (with
 * --busy-qd, --busy-bs, --busy-rw, --busy-backend null|file) select the
 * multi-queue, multi-device run below (run_multi): --qd is then per queue,
 * the backend null or file, and RESULT also carries busy_iops= (what the
 * busy devices completed per second) and the shape of the run. It measures
 * the seeds' experiments (scripts/bench-dataplane): 8 KiB randread QD8 on
 * each of 4 queues, and 16 KiB randwrite QD50 beside busy block-layer devices.
 * --iothreads N (1..--queues) spreads the measured device's queues round
 * robin over N iothreads (iothread-vq-mapping: one dataplane, one IOQ each);
 * --iothread-cpu then pins only the first.
 */
#include <errno.h>
#include <fcntl.h>
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
#include "event/iothread-registry.h"
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
    optstr = !strcmp(f->o.engine, "nbd") || !strcmp(f->o.engine, "rbd")
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
                                       .ioq = {.engine = !strcmp(f->o.engine, "nbd")   ? "nbd"
                                                         : !strcmp(f->o.engine, "rbd") ? "rbd"
                                                         : f->fd < 0                   ? "null"
                                                                                       : "io_uring",
                                               .fd = f->fd,
                                               .direct = f->direct_ok,
                                               .logical_block_size = 512,
                                               .nbd = f->o.nbd,
                                               .rbd = f->o.rbd},
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

/*
 * ---- Several queues and several devices (the seeds' experiments) ----
 *
 * One guest thread drives every queue of every device: it keeps @qd requests
 * of @bs bytes in flight on each queue, reaps what completed on all of them,
 * and sleeps in one poll() over all their guest notifiers when nothing is
 * left to reap. Each device has its own guest RAM (its own "VM"), its own
 * VirtIOBlk and a DpSwitch started on the path asked for. All block-layer
 * devices share one main loop (one thread), all dataplane devices one
 * iothread, as one VMM with one iothread would.
 *
 * The measured device (--queues, --qd, --bs, --rw, --path) is the one the
 * RESULT line reports. --busy-devs N adds N more devices, always on the
 * block-layer path, each keeping --busy-qd requests of --busy-bs bytes in
 * flight (--busy-rw, --busy-backend null|file): they keep the main loop busy
 * whatever path the measured device takes.
 */
typedef struct MQueue {
    TestVq *tvq;
    VirtQueue *vq;
    VirtIOBlkQueue *q;
    Slot *slots;
    int *slot_of_head;
    GRand *rnd;
} MQueue;

typedef struct MDev {
    TestDrv *d;
    VirtIOBlk *blk;
    unsigned nq, qd, bs;
    bool write;
    bool measured;
    uint64_t nsect;
    int fd;
    BlockBackend *be;
    DpSwitch *sw;
    MQueue q[DATAPLANE_MAX_QUEUES];
} MDev;

#define MQ_SIZE 256

static MDev *mdev_new(const char *backend, const char *aio, const char *file, unsigned nq,
                      unsigned qd, unsigned bs, bool write, bool dataplane, EventLoop *loop,
                      IOThread *const *its, unsigned nit, unsigned seed)
{
    IOThread *it = its[0];
    DpSwitchConf sc;
    MDev *m = g_new0(MDev, 1);
    TestDrvOpts dopts = {.ram_size = 64 << 20};
    DataPlaneQueue dq[DATAPLANE_MAX_QUEUES];
    bool null = !strcmp(backend, "null");
    g_autofree char *optstr = NULL;
    VirtIOBlkConf conf;
    GError *err = NULL;
    GHashTable *opts;
    uint64_t features, size = 1ull << 30;

    m->nq = nq;
    m->qd = qd;
    m->bs = bs;
    m->write = write;
    m->fd = -1;
    if (!null) {
        m->fd = open(file, O_RDWR | O_CLOEXEC | O_DIRECT);
        if (m->fd < 0) {
            fprintf(stderr, "bench-dataplane: cannot open %s: %s\n", file, strerror(errno));
            exit(1);
        }
        size = (uint64_t)lseek(m->fd, 0, SEEK_END);
    }
    m->nsect = size / 512;
    m->d = testdrv_new(&dopts);
    virtio_blk_conf_init(&conf, m->nsect);
    conf.num_queues = (uint16_t)nq;
    conf.queue_size = MQ_SIZE;
    m->blk = virtio_blk_new(&conf, &err);
    g_assert_no_error(err);
    features = testdrv_negotiate(virtio_blk_get_host_features(m->blk), ~0ull);
    g_assert_true(virtio_blk_set_features(m->blk, features, &err));
    for (unsigned i = 0; i < nq; i++) {
        MQueue *q = &m->q[i];

        q->tvq = testvq_new(m->d, MQ_SIZE, features);
        q->vq = virtqueue_new(testdrv_guestmem(m->d), MQ_SIZE, testvq_desc_gpa(q->tvq),
                              testvq_avail_gpa(q->tvq), testvq_used_gpa(q->tvq), features, &err);
        g_assert_no_error(err);
        q->q = virtio_blk_queue_new(m->blk, q->vq, NULL, NULL, &err);
        g_assert_no_error(err);
        q->slots = g_new0(Slot, qd);
        q->slot_of_head = g_new0(int, MQ_SIZE);
        q->rnd = g_rand_new_with_seed(seed * 64 + i);
        for (unsigned k = 0; k < qd; k++) {
            uint8_t ff = 0xff;

            q->slots[k].hdr = testdrv_alloc(m->d, 16, 16);
            q->slots[k].data = testdrv_alloc(m->d, bs, 4096);
            q->slots[k].status = testdrv_alloc(m->d, 1, 1);
            testdrv_memset(m->d, q->slots[k].data, 0x5a, bs);
            testdrv_memwrite(m->d, q->slots[k].status, &ff, 1);
        }
        dq[i] = (DataPlaneQueue){.q = q->q,
                                 .host_notifier = testvq_kick_fd(q->tvq),
                                 .notifier = {.fd = testvq_call_fd(q->tvq)}};
    }
    optstr = null ? g_strdup_printf("file=null-co://,size=%" PRIu64, size)
                  : g_strdup_printf("file=%s,cache=none,aio=%s", file, aio);
    opts = blk_opts_parse(optstr);
    m->be = blk_new_from_drive_opts(opts, loop, &err);
    g_hash_table_unref(opts);
    if (!m->be) {
        fprintf(stderr, "bench-dataplane: %s: %s\n", optstr, err->message);
        exit(1);
    }
    sc = (DpSwitchConf){.blk = m->blk,
                        .main_loop = loop,
                        .backend = m->be,
                        .iothread = it,
                        .ioq = {.engine = null                     ? "null"
                                          : strcmp(aio, "threads") ? aio
                                                                   : "io_uring",
                                .fd = m->fd,
                                .direct = !null,
                                .logical_block_size = 512},
                        .num_queues = nq,
                        .queue_size = MQ_SIZE};
    for (unsigned i = 0; i < nq; i++) {
        sc.vq_iothread[i] = its[i % nit]; /* round robin, as iothread-vq-mapping without vqs */
    }
    m->sw = dp_switch_new(&sc, &err);
    g_assert_no_error(err);
    g_assert_true(dp_switch_start(m->sw, dataplane, dq, nq, &err));
    return m;
}

static void mdev_free(MDev *m)
{
    dp_switch_stop(m->sw);
    dp_switch_free(m->sw);
    blk_unref(m->be);
    for (unsigned i = 0; i < m->nq; i++) {
        virtio_blk_queue_free(m->q[i].q);
        virtqueue_free(m->q[i].vq);
        testvq_free(m->q[i].tvq);
        g_free(m->q[i].slots);
        g_free(m->q[i].slot_of_head);
        g_rand_free(m->q[i].rnd);
    }
    virtio_blk_free(m->blk);
    testdrv_free(m->d);
    if (m->fd >= 0) {
        close(m->fd);
    }
    g_free(m);
}

/* Build, publish (not kick) the request of slot @k: a random aligned @bs-byte read or write. */
static void mdev_submit(MDev *m, MQueue *q, unsigned k)
{
    uint32_t spb = m->bs / 512;
    struct virtio_blk_outhdr h = {
        .type = htole32(m->write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN),
        .sector = htole64((uint64_t)g_rand_int_range(q->rnd, 0, (gint32)(m->nsect / spb)) * spb)};
    TestBuf b[3] = {{q->slots[k].hdr, 16, false},
                    {q->slots[k].data, m->bs, !m->write},
                    {q->slots[k].status, 1, true}};
    int hd;

    testdrv_memwrite(m->d, q->slots[k].hdr, &h, sizeof(h));
    hd = testvq_add_chain(q->tvq, b, 3);
    if (hd < 0) {
        fprintf(stderr, "bench-dataplane: ring full\n");
        exit(1);
    }
    q->slot_of_head[hd] = (int)k;
    q->slots[k].t0 = now_ns();
    testvq_publish(q->tvq, (uint16_t)hd);
}

typedef struct MultiOpts {
    const char *backend, *aio, *file, *path;
    unsigned nq, qd, bs, secs;
    unsigned niothreads; /* the measured device's queues over this many iothreads */
    bool write;
    unsigned busy_devs, busy_qd, busy_bs;
    bool busy_write;
    const char *busy_backend;
    long long poll_ns;
} MultiOpts;

static int run_multi(const MultiOpts *o, MainLoopThread *ml)
{
    unsigned ndev = 1 + o->busy_devs, nfd = 0;
    MDev **devs = g_new0(MDev *, ndev);
    struct pollfd *pfd;
    uint64_t *hist = calloc(HIST_US + 1, sizeof(uint64_t));
    uint64_t done = 0, busy_done = 0, lat_sum = 0, start, end;
    GThread *ml_thread;
    IOThread *it, *its[DATAPLANE_MAX_QUEUES];
    unsigned nit = MAX(o->niothreads, 1);
    GError *err = NULL;
    bool dataplane = !strcmp(o->path, "dataplane");

    it = iothread_new("bench", &err);
    g_assert_no_error(err);
    its[0] = it;
    for (unsigned i = 1; i < nit; i++) {
        g_autofree char *name = g_strdup_printf("bench%u", i);

        its[i] = iothread_new(name, &err);
        g_assert_no_error(err);
        event_loop_set_poll_params(iothread_get_loop(its[i]), o->poll_ns, 0, 0);
    }
    if (iothread_cpu >= 0) {
        iothread_run_sync(it, pin_self, &iothread_cpu);
    }
    event_loop_set_poll_params(iothread_get_loop(it), o->poll_ns, 0, 0);
    ml->loop = event_loop_new(&err);
    g_assert_no_error(err);
    event_loop_set_poll_params(ml->loop, o->poll_ns, 0, 0);
    devs[0] = mdev_new(o->backend, o->aio, o->file, o->nq, o->qd, o->bs, o->write, dataplane,
                       ml->loop, its, nit, 1);
    devs[0]->measured = true;
    for (unsigned i = 1; i < ndev; i++) {
        devs[i] = mdev_new(o->busy_backend, o->aio, o->file, 1, o->busy_qd, o->busy_bs,
                           o->busy_write, false, ml->loop, its, 1, 1 + i);
    }
    /* The main loop runs whatever the measured path: the busy devices need it. */
    ml_thread = g_thread_new("main-loop", main_loop_thread, ml);
    for (unsigned i = 0; i < ndev; i++) {
        nfd += devs[i]->nq;
    }
    pfd = g_new0(struct pollfd, nfd);
    nfd = 0;
    for (unsigned i = 0; i < ndev; i++) {
        for (unsigned j = 0; j < devs[i]->nq; j++) {
            pfd[nfd].fd = testvq_call_fd(devs[i]->q[j].tvq);
            pfd[nfd++].events = POLLIN;
        }
    }

    start = now_ns();
    end = start + (uint64_t)o->secs * 1000000000ull;
    for (unsigned i = 0; i < ndev; i++) {
        for (unsigned j = 0; j < devs[i]->nq; j++) {
            for (unsigned k = 0; k < devs[i]->qd; k++) {
                mdev_submit(devs[i], &devs[i]->q[j], k);
            }
            testvq_kick(devs[i]->q[j].tvq);
        }
    }
    for (;;) {
        bool past = now_ns() >= end, idle = true;
        unsigned reaped = 0;

        for (unsigned i = 0; i < ndev; i++) {
            MDev *m = devs[i];

            for (unsigned j = 0; j < m->nq; j++) {
                MQueue *q = &m->q[j];
                unsigned n = 0;
                uint16_t head;
                uint32_t len;

                while (testvq_get_used(q->tvq, &head, &len)) {
                    int k = q->slot_of_head[head];
                    uint64_t t = now_ns(), lat = t - q->slots[k].t0;
                    uint8_t s = testdrv_readb(m->d, q->slots[k].status);

                    if (s != VIRTIO_BLK_S_OK) {
                        fprintf(stderr, "bench-dataplane: request failed (status %u len %u)\n", s,
                                len);
                        return 1;
                    }
                    if (t <= end) {
                        if (m->measured) {
                            lat_sum += lat;
                            hist[lat / 1000 < HIST_US ? lat / 1000 : HIST_US]++;
                            done++;
                        } else {
                            busy_done++;
                        }
                    }
                    n++;
                    if (!past) {
                        mdev_submit(m, q, (unsigned)k);
                    }
                }
                if (n) {
                    testvq_kick(q->tvq);
                }
                reaped += n;
                if (testvq_free_descs(q->tvq) != MQ_SIZE) {
                    idle = false;
                }
            }
        }
        if (past && idle) {
            break;
        }
        if (reaped) {
            continue;
        }
        /* Nothing to reap: wait for any interrupt, as a guest's idle vCPU. */
        if (poll(pfd, nfd, 1000) > 0) {
            for (unsigned i = 0; i < nfd; i++) {
                uint64_t cnt;

                if ((pfd[i].revents & POLLIN) && read(pfd[i].fd, &cnt, sizeof(cnt)) < 0 &&
                    errno != EAGAIN) {
                    return 1;
                }
            }
        }
    }
    if (!done) {
        fprintf(stderr, "bench-dataplane: no request completed\n");
        return 1;
    }
    {
        double secs = (double)(end - start) / 1e9;
        char cyc[32] = "na", cyct[32] = "na", bat[32] = "na", irq[32] = "na", kick[32] = "na";
        EventLoopStats ls;

        if (dataplane) {
            DataPlaneQueueStats sum = {0}, st;
            double own;

            for (unsigned j = 0; j < devs[0]->nq; j++) {
                dp_switch_get_queue_stats(devs[0]->sw, j, &st);
                sum.requests += st.requests;
                sum.completed += st.completed;
                sum.batches += st.batches;
                sum.irqs += st.irqs;
                sum.kicks += st.kicks;
                sum.cycles_pop += st.cycles_pop;
                sum.cycles_submit += st.cycles_submit;
                sum.cycles_complete += st.cycles_complete;
                sum.cycles_notify += st.cycles_notify;
            }
            own = (double)(sum.cycles_pop + sum.cycles_complete + sum.cycles_notify);
            snprintf(cyc, sizeof(cyc), "%.0f", own / (double)sum.requests);
            snprintf(cyct, sizeof(cyct), "%.0f",
                     (own + (double)sum.cycles_submit) / (double)sum.requests);
            snprintf(bat, sizeof(bat), "%.2f",
                     (double)sum.requests / (double)(sum.batches ? sum.batches : 1));
            snprintf(irq, sizeof(irq), "%.3f", (double)sum.irqs / (double)sum.completed);
            snprintf(kick, sizeof(kick), "%.3f", (double)sum.kicks / (double)sum.requests);
        }
        printf("RESULT iops=%.0f mean_us=%.1f p99_us=%u cycles_per_req=%s cycles_total_per_req=%s "
               "reqs_per_batch=%s irqs_per_req=%s kicks_per_req=%s requests=%" PRIu64
               " busy_iops=%.0f queues=%u qd=%u bs=%u rw=%s busy_devs=%u iothreads=%u\n",
               (double)done / secs, (double)lat_sum / (double)done / 1000.0, p99_us(hist, done),
               cyc, cyct, bat, irq, kick, done, (double)busy_done / secs, o->nq, o->qd, o->bs,
               o->write ? "randwrite" : "randread", o->busy_devs, nit);
        event_loop_get_stats(ml->loop, &ls);
        fprintf(stderr,
                "main loop per completed request (all devices): iterations %.2f blocking waits "
                "%.2f\n",
                (double)ls.iterations / (double)(done + busy_done),
                (double)ls.blocking_waits / (double)(done + busy_done));
    }
    __atomic_store_n(&ml->stop, true, __ATOMIC_RELEASE);
    event_loop_notify(ml->loop);
    g_thread_join(ml_thread);
    for (unsigned i = 0; i < ndev; i++) {
        mdev_free(devs[i]);
    }
    for (unsigned i = 0; i < nit; i++) {
        iothread_free(its[i]);
    }
    event_loop_free(ml->loop);
    g_free(devs);
    g_free(pfd);
    free(hist);
    return 0;
}

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
    long long poll_ns = 0, poll_shrink = 0;
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
    MultiOpts mo = {.nq = 1, .bs = 4096, .busy_qd = 32, .busy_bs = 4096, .busy_backend = "null"};
    bool multi = false;

    o.submit_early = IOTHREAD_SUBMIT_EARLY_DEFAULT; /* what a device's iothread does (--submit-early) */
    for (int i = 1; i < argc; i += 2) {
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h")) {
            printf("usage: bench-dataplane [--backend null|file] [--aio native|io_uring|threads] [--qd 1..64]\n"
                   "  [--seconds N] [--file PATH] [--path dataplane|block] [--poll-max-ns N] [--iothread-cpu N]\n"
                   "  [--submit-early N] [--aio-max-batch N] [--complete-batch N] [--halt-poll-us N]\n"
                   "  [--iothreads N] [--queues N] [--bs N] [--rw randread|randwrite]\n"
                   "  [--busy-devs N] [--busy-qd N] [--busy-bs N] [--busy-rw R] [--busy-backend B]\n"
                   "  [--main-loop glib|own] [--poll-shrink N] [--complete-hold NS] [--complete-hold-depth D]\n"
                   "scripts/bench-dataplane runs the standard cases and prints the tables.\n");
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "bench-dataplane: option %s needs a value (--help lists them)\n", argv[i]);
            return 1;
        }
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
        } else if (!strcmp(argv[i], "--poll-shrink")) {
            poll_shrink = atoll(argv[i + 1]);
        } else if (!strcmp(argv[i], "--complete-batch")) {
            o.complete_batch = (unsigned)strtoul(argv[i + 1], NULL, 0);
        } else if (!strcmp(argv[i], "--submit-early")) {
            o.submit_early = (unsigned)strtoul(argv[i + 1], NULL, 0);
        } else if (!strcmp(argv[i], "--complete-hold")) {
            o.complete_hold_ns = atoll(argv[i + 1]); /* x-complete-hold-ns (single queue) */
        } else if (!strcmp(argv[i], "--complete-hold-depth")) {
            o.complete_hold_depth = (unsigned)strtoul(argv[i + 1], NULL, 0);
        } else if (!strcmp(argv[i], "--aio-max-batch")) {
            o.max_batch = (unsigned)strtoul(argv[i + 1], NULL, 0);
        } else if (!strcmp(argv[i], "--halt-poll-us")) {
            halt_poll_ns = (uint64_t)atoll(argv[i + 1]) * 1000;
        } else if (!strcmp(argv[i], "--iothreads")) {
            mo.niothreads = (unsigned)atoi(argv[i + 1]);
            multi = true;
        } else if (!strcmp(argv[i], "--queues")) {
            mo.nq = (unsigned)atoi(argv[i + 1]);
            multi = true;
        } else if (!strcmp(argv[i], "--bs")) {
            mo.bs = (unsigned)atoi(argv[i + 1]);
            multi = true;
        } else if (!strcmp(argv[i], "--rw")) {
            mo.write = !strcmp(argv[i + 1], "randwrite");
            if (!mo.write && strcmp(argv[i + 1], "randread")) {
                fprintf(stderr, "bench-dataplane: --rw randread|randwrite\n");
                return 1;
            }
            multi = true;
        } else if (!strcmp(argv[i], "--busy-devs")) {
            mo.busy_devs = (unsigned)atoi(argv[i + 1]);
            multi = true;
        } else if (!strcmp(argv[i], "--busy-qd")) {
            mo.busy_qd = (unsigned)atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--busy-bs")) {
            mo.busy_bs = (unsigned)atoi(argv[i + 1]);
        } else if (!strcmp(argv[i], "--busy-rw")) {
            mo.busy_write = !strcmp(argv[i + 1], "randwrite");
        } else if (!strcmp(argv[i], "--busy-backend")) {
            mo.busy_backend = argv[i + 1];
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
    if (multi) {
        mo.backend = backend;
        mo.aio = aio;
        mo.file = file;
        mo.path = path;
        mo.qd = qd;
        mo.secs = secs;
        mo.poll_ns = poll_ns;
        if (mo.nq < 1 || mo.nq > DATAPLANE_MAX_QUEUES || mo.qd * mo.nq > 128 || mo.busy_qd < 1 ||
            mo.niothreads > mo.nq ||
            mo.busy_qd > 128 || mo.busy_devs > 16 || !mo.bs || mo.bs % 512 || mo.bs > (1u << 20) ||
            !mo.busy_bs || mo.busy_bs % 512 || mo.busy_bs > (1u << 20)) {
            fprintf(stderr,
                    "bench-dataplane: --queues 1..%d, --iothreads 1..--queues, --qd x --queues <= 128, --busy-qd "
                    "1..128, --busy-devs 0..16, --bs/--busy-bs multiples of 512 up to "
                    "1 MiB\n",
                    DATAPLANE_MAX_QUEUES);
            return 1;
        }
        if ((strcmp(backend, "null") && (strcmp(backend, "file") || !file)) ||
            (strcmp(mo.busy_backend, "null") && (strcmp(mo.busy_backend, "file") || !file))) {
            fprintf(stderr, "bench-dataplane: with --queues/--bs/--rw/--busy-devs the backends "
                            "are null or file (file needs --file)\n");
            return 1;
        }
        g_rand_free(rnd);
        free(hist);
        return run_multi(&mo, &ml);
    }
    if (!strcmp(backend, "null")) {
        o.engine = "null";
        o.disk_size = 1ull << 30;
    } else if (!strcmp(backend, "file") && file) {
        o.engine = strcmp(aio, "threads") ? aio : "io_uring"; /* the block path's own pool */
        o.path = file;
        o.direct = true;
    } else if ((!strcmp(backend, "nbd") || !strcmp(backend, "rbd")) && file) {
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
        o.engine = hi.rbd ? "rbd" : "nbd";
        o.path = file;
        o.disk_size = (uint64_t)blk_getlength(probe);
        o.nbd = (IOQNbdConfig){.host = hi.nbd_host,
                               .port = hi.nbd_port,
                               .socket = hi.nbd_socket,
                               .export_name = hi.nbd_export};
        o.rbd = (IOQRbdConfig){.pool = hi.rbd_pool,
                               .rbd_namespace = hi.rbd_namespace,
                               .image = hi.rbd_image,
                               .conf = hi.rbd_conf,
                               .user = hi.rbd_user,
                               .conf_kv = hi.rbd_conf_kv};
    } else {
        fprintf(stderr, "bench-dataplane: --backend null|file|nbd|rbd (file, nbd and rbd need --file)\n");
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
    event_loop_set_poll_params(iothread_get_loop(f->iothread), poll_ns, 0, poll_shrink);
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
        DataPlaneWakeStats holds;

        /*
         * Syscalls per request, from counters. Iothread: kick eventfd reads,
         * submits (io_submit / io_uring_enter), completion eventfd reads,
         * epoll_wait, irqfd writes. Driver: kick writes, sleeps in poll()
         * (each followed by a read of the interrupt eventfd).
         */
        dataplane_get_ioq_stats(f->dp, &is);
        dataplane_get_wake_stats(f->dp, &holds);
        event_loop_get_stats(iothread_get_loop(f->iothread), &ls);
        fprintf(stderr,
                "syscalls per request: iothread kick-reads %.3f submits %.3f completion-efd-reads "
                "%.3f epoll_waits %.3f (blocking %.3f) irq-writes %.3f = %.3f; driver kicks %.3f "
                "sleeps %.3f (halt-poll hits %.3f); used publishes %.3f; completion holds %.3f\n",
                (double)st.kick_reads / r, (double)is.batches / r, (double)is.efd_reads / r,
                (double)ls.epoll_waits / r, (double)ls.blocking_waits / r, (double)st.irqs / r,
                (double)(st.kick_reads + is.batches + is.efd_reads + ls.epoll_waits + st.irqs) / r,
                (double)drv_kicks / r, (double)drv_sleeps / r, (double)drv_halt_hits / r,
                (double)st.publishes / r, (double)holds.complete_holds / r);
        fprintf(stderr,
                "iothread cycles per request: pop+parse %.0f complete %.0f notify %.0f "
                "(submit syscall %.0f)\n",
                (double)st.cycles_pop / r, (double)st.cycles_complete / r,
                (double)st.cycles_notify / r, (double)st.cycles_submit / r);

        printf("RESULT iops=%.0f mean_us=%.1f p99_us=%u cycles_per_req=%.0f "
               "cycles_total_per_req=%.0f reqs_per_batch=%.2f irqs_per_req=%.3f "
               "kicks_per_req=%.3f requests=%" PRIu64 " sys_iothread_per_req=%.3f "
               "sys_driver_per_req=%.3f\n",
               (double)done * 1e9 / (double)(end - start), (double)lat_sum / (double)done / 1000.0,
               p99_us(hist, done), own / (double)st.requests,
               (own + (double)st.cycles_submit) / (double)st.requests,
               (double)st.requests / (double)(st.batches ? st.batches : 1),
               (double)st.irqs / (double)st.completed, (double)st.kicks / (double)st.requests,
               done, (double)(st.kick_reads + is.batches + is.efd_reads + ls.epoll_waits + st.irqs) / r,
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
