/*
 * Dataplane tests through the in-process test driver: the test thread is the
 * guest, the DataPlane runs on its own iothread over a real file with libaio
 * or io_uring (O_DIRECT and buffered), or over the null engine.
 */
#include <errno.h>
#include <inttypes.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>
#include <linux/virtio_blk.h>

#include "dpfix.h"

#define TIMEOUT_MS 10000

typedef struct Param {
    const char *engine;
    bool direct;
    unsigned misalign;
    unsigned aio_max_events;
    bool writethrough;
    bool hold; /* the completion hold on: 200 us while 4 or more are in flight */
} Param;

/* Wait until every request in @byhead (n outstanding) completed; check status and len. */
static void wait_all(DpFix *f, DpReq **byhead, unsigned n, uint16_t *order)
{
    unsigned got = 0;

    while (got < n) {
        uint16_t head;
        uint32_t len;

        if (!testvq_get_used(f->tvq, &head, &len)) {
            g_assert_true(testvq_wait_used(f->tvq, TIMEOUT_MS));
            continue;
        }
        g_assert_cmpuint(head, <, f->o.queue_size);
        g_assert_nonnull(byhead[head]); /* completed once, and only if submitted */
        g_assert_cmpuint(dpfix_status(f, byhead[head]), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpuint(len, ==,
                         (byhead[head]->type == VIRTIO_BLK_T_IN ? byhead[head]->len : 0) + 1);
        if (order) {
            order[got] = head;
        }
        byhead[head] = NULL;
        got++;
    }
}

typedef struct Range {
    uint64_t sector;
    uint32_t nsec;
} Range;

static bool overlaps(const Range *rs, unsigned n, uint64_t s, uint32_t ns)
{
    for (unsigned i = 0; i < n; i++) {
        if (s < rs[i].sector + rs[i].nsec && rs[i].sector < s + ns) {
            return true;
        }
    }
    return false;
}

/*
 * Thousands of random reads and writes of random sizes, split into random
 * segments at random guest alignments, up to half the queue in flight at
 * once; every byte read is checked against a shadow copy of the disk.
 */
static void test_random_rw(gconstpointer data)
{
    const Param *p = data;
    DpFixOpts o = {.engine = p->engine,
                   .direct = p->direct,
                   .aio_max_events = p->aio_max_events,
                   .writethrough = p->writethrough,
                   .queue_size = 256,
                   .complete_hold_ns = p->hold ? 200000 : 0,
                   .complete_hold_depth = 4};
    DpFix *f = dpfix_new(&o);
    GRand *rnd = g_rand_new_with_seed(0x5eed);
    uint8_t *shadow, *buf = g_malloc(64 * 512);
    uint64_t nsect;
    DpReq reqs[40];
    DpReq *byhead[256] = {0};
    Range ranges[40];
    unsigned total = 0, nwrites = 0, rounds = g_test_quick() ? 150 : 400;
    IOQStats ist;

    if (!f) {
        g_test_skip("backend not usable here");
        g_rand_free(rnd);
        g_free(buf);
        return;
    }
    nsect = f->o.disk_size / 512;
    shadow = g_malloc0(f->o.disk_size);
    dpfix_start(f);
    for (unsigned round = 0; round < rounds; round++) {
        uint64_t mark = testdrv_alloc_mark(f->d);
        unsigned k = (unsigned)g_rand_int_range(rnd, 1, 41); /* x <= 6 descriptors */
        unsigned nr = 0;

        for (unsigned i = 0; i < k; i++) {
            uint32_t ns = (uint32_t)g_rand_int_range(rnd, 1, 65);
            uint64_t s = (uint64_t)g_rand_int_range(rnd, 0, (gint32)(nsect - ns));
            bool wr = g_rand_boolean(rnd);
            unsigned nseg = (unsigned)g_rand_int_range(rnd, 1, 5);

            if (overlaps(ranges, nr, s, ns)) {
                continue;
            }
            ranges[nr] = (Range){s, ns};
            if (wr) {
                nwrites++;
                for (uint32_t b = 0; b < ns * 512; b++) {
                    shadow[s * 512 + b] = (uint8_t)g_rand_int(rnd);
                }
            }
            g_assert_true(dpfix_add(f, &reqs[nr], wr ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN, s,
                                    wr ? shadow + s * 512 : NULL, ns * 512, nseg, p->misalign,
                                    rnd));
            byhead[reqs[nr].head] = &reqs[nr];
            nr++;
        }
        testvq_kick(f->tvq);
        wait_all(f, byhead, nr, NULL);
        for (unsigned i = 0; i < nr; i++) {
            if (reqs[i].type == VIRTIO_BLK_T_IN) {
                dpfix_read_data(f, &reqs[i], buf);
                g_assert_cmpmem(buf, reqs[i].len, shadow + reqs[i].sector * 512, reqs[i].len);
            }
        }
        total += nr;
        testdrv_alloc_reset(f->d, mark);
    }
    dataplane_get_ioq_stats(f->dp, &ist);
    {
        /* It learned of completions from the IOQ's fd or by polling its ring. */
        DataPlaneWakeStats wk;

        dataplane_get_wake_stats(f->dp, &wk);
        g_assert_cmpuint(wk.completion_events + wk.completion_polls, >=, 1);
        g_assert_cmpuint(wk.completion_polls, <=, ist.completed);
        g_test_message("completions learned: %" PRIu64 " from the fd, %" PRIu64
                       " by polling; %" PRIu64 " passes held them back",
                       wk.completion_events, wk.completion_polls, wk.complete_holds);
        if (!p->hold) {
            g_assert_cmpuint(wk.complete_holds, ==, 0);
        }
    }
    if (p->writethrough) {
        /* Every write was followed by its own flush before completing. */
        g_assert_false(virtio_blk_get_writeback(f->blk));
        g_assert_cmpuint(ist.submitted, >=, total + nwrites);
    }
    if (p->misalign && f->direct_ok) {
        g_assert_cmpuint(ist.bounces, >, 0);
    }
    dpfix_stop(f);
    /* The file itself holds what the guest wrote. */
    {
        uint8_t *disk = g_malloc(f->o.disk_size);
        int rfd = open(f->path, O_RDONLY);

        g_assert_cmpint(rfd, >=, 0);
        g_assert_cmpint(pread(rfd, disk, f->o.disk_size, 0), ==, (ssize_t)f->o.disk_size);
        g_assert_true(memcmp(disk, shadow, f->o.disk_size) == 0);
        close(rfd);
        g_free(disk);
    }
    g_test_message("%u requests, %" PRIu64 " bounces, %" PRIu64 " retries", total, ist.bounces,
                   ist.retries);
    g_assert_cmpuint(total, >=, 1000);
    g_free(shadow);
    g_free(buf);
    g_rand_free(rnd);
    dpfix_free(f);
}

/*
 * More requests in one batch than the AIO context holds (the kernel rounds a
 * tiny io_setup() up to about one page of events): io_submit() returns EAGAIN
 * or submits partially, the rest waits and is resubmitted on completion.
 */
static void test_eagain(gconstpointer data)
{
    const Param *p = data;
    DpFixOpts o = {.engine = p->engine,
                   .direct = p->direct,
                   .aio_max_events = p->aio_max_events,
                   .queue_size = 1024,
                   .ram_size = 128 << 20};
    DpFix *f = dpfix_new(&o);
    GRand *rnd = g_rand_new_with_seed(5);
    enum { N = 900 };
    DpReq *reqs = g_new0(DpReq, N);
    DpReq **byhead = g_new0(DpReq *, 1024);
    uint8_t *pat = g_malloc(N * 4096), *buf = g_malloc(4096);
    IOQStats ist;

    if (!f) {
        g_test_skip("backend not usable here");
        goto out;
    }
    f->indirect = true; /* one ring descriptor per request: N in flight at once */
    for (unsigned i = 0; i < N * 4096; i++) {
        pat[i] = (uint8_t)g_rand_int(rnd);
    }
    dpfix_start(f);
    for (int pass = 0; pass < 2; pass++) {
        for (unsigned i = 0; i < N; i++) {
            g_assert_true(dpfix_add(f, &reqs[i], pass ? VIRTIO_BLK_T_IN : VIRTIO_BLK_T_OUT,
                                    (uint64_t)i * 8, pass ? NULL : pat + i * 4096, 4096, 1, 0,
                                    rnd));
            byhead[reqs[i].head] = &reqs[i];
        }
        testvq_kick(f->tvq);
        wait_all(f, byhead, N, NULL);
    }
    for (unsigned i = 0; i < N; i++) {
        dpfix_read_data(f, &reqs[i], buf);
        g_assert_cmpmem(buf, 4096, pat + i * 4096, 4096);
    }
    dataplane_get_ioq_stats(f->dp, &ist);
    g_test_message("%" PRIu64 " EAGAIN/partial-submit retries", ist.retries);
    g_assert_cmpuint(ist.retries, >, 0); /* the EAGAIN path really ran */
out:
    g_free(pat);
    g_free(buf);
    g_free(reqs);
    g_free(byhead);
    g_rand_free(rnd);
    dpfix_free(f);
}

/* A FLUSH popped after a write completes after it. */
static void test_flush_order(gconstpointer data)
{
    const Param *p = data;
    DpFixOpts o = {.engine = p->engine, .direct = p->direct};
    DpFix *f = dpfix_new(&o);
    GRand *rnd = g_rand_new_with_seed(7);
    uint8_t *big;
    DpReq w[8], fl;
    DpReq *byhead[128] = {0};
    uint16_t order[9];

    if (!f) {
        g_test_skip("backend not usable here");
        g_rand_free(rnd);
        return;
    }
    big = g_malloc(256 * 1024);
    memset(big, 0x3c, 256 * 1024);
    dpfix_start(f);
    for (int round = 0; round < 20; round++) {
        uint64_t mark = testdrv_alloc_mark(f->d);

        for (int i = 0; i < 8; i++) {
            g_assert_true(dpfix_add(f, &w[i], VIRTIO_BLK_T_OUT, (uint64_t)i * 512, big, 256 * 1024,
                                    4, 0, rnd));
            byhead[w[i].head] = &w[i];
        }
        g_assert_true(dpfix_add(f, &fl, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, 0, 0, rnd));
        byhead[fl.head] = &fl;
        testvq_kick(f->tvq);
        wait_all(f, byhead, 9, order);
        g_assert_cmpuint(order[8], ==, fl.head); /* the flush is the last completion */
        testdrv_alloc_reset(f->d, mark);
    }
    g_free(big);
    g_rand_free(rnd);
    dpfix_free(f);
}

static void add_dwz(DpFix *f, DpReq *r, uint32_t type, uint64_t sector, uint32_t nsec,
                    uint32_t flags)
{
    struct virtio_blk_outhdr h = {.type = htole32(type), .sector = 0};
    struct virtio_blk_discard_write_zeroes seg = {
        .sector = htole64(sector), .num_sectors = htole32(nsec), .flags = htole32(flags)};
    TestBuf bufs[3];
    uint8_t ff = 0xff;

    memset(r, 0, sizeof(*r));
    r->type = type;
    r->hdr_gpa = testdrv_alloc(f->d, sizeof(h), 16);
    testdrv_memwrite(f->d, r->hdr_gpa, &h, sizeof(h));
    bufs[0] = (TestBuf){r->hdr_gpa, sizeof(h), false};
    bufs[1] = (TestBuf){testdrv_alloc(f->d, sizeof(seg), 16), sizeof(seg), false};
    testdrv_memwrite(f->d, bufs[1].gpa, &seg, sizeof(seg));
    r->status_gpa = testdrv_alloc(f->d, 1, 1);
    testdrv_memwrite(f->d, r->status_gpa, &ff, 1);
    bufs[2] = (TestBuf){r->status_gpa, 1, true};
    r->head = testvq_add_chain(f->tvq, bufs, 3);
    g_assert_cmpint(r->head, >=, 0);
    testvq_publish(f->tvq, (uint16_t)r->head);
}

static void one(DpFix *f, DpReq *r)
{
    DpReq *byhead[128] = {0};

    byhead[r->head] = r;
    testvq_kick(f->tvq);
    wait_all(f, byhead, 1, NULL);
}

/* DISCARD punches a hole (blocks freed, zeroes read back); WRITE_ZEROES zeroes. */
static void test_discard_wz(gconstpointer data)
{
    const Param *p = data;
    DpFixOpts o = {.engine = p->engine, .direct = p->direct};
    DpFix *f = dpfix_new(&o);
    GRand *rnd = g_rand_new_with_seed(9);
    uint8_t *pat, *buf;
    DpReq r;
    struct stat st1, st2;
    const uint32_t len = 1 << 20;

    if (!f) {
        g_test_skip("backend not usable here");
        g_rand_free(rnd);
        return;
    }
    pat = g_malloc(len);
    buf = g_malloc(len);
    memset(pat, 0x77, len);
    dpfix_start(f);
    /* 1 MiB of data at 1 MiB, flushed so the blocks are allocated. */
    g_assert_true(dpfix_add(f, &r, VIRTIO_BLK_T_OUT, 2048, pat, len, 2, 0, rnd));
    one(f, &r);
    g_assert_true(dpfix_add(f, &r, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, 0, 0, rnd));
    one(f, &r);
    g_assert_cmpint(fstat(f->fd, &st1), ==, 0);
    add_dwz(f, &r, VIRTIO_BLK_T_DISCARD, 2048, 1024, 0); /* the first half */
    one(f, &r);
    g_assert_cmpint(fstat(f->fd, &st2), ==, 0);
    g_assert_cmpint(st2.st_blocks, <, st1.st_blocks);
    add_dwz(f, &r, VIRTIO_BLK_T_WRITE_ZEROES, 3072 + 512, 256, 0); /* 128 KiB of the second */
    one(f, &r);
    g_assert_true(dpfix_add(f, &r, VIRTIO_BLK_T_IN, 2048, NULL, len, 3, 0, rnd));
    one(f, &r);
    dpfix_read_data(f, &r, buf);
    for (uint32_t i = 0; i < len; i++) {
        bool zero = i < len / 2 || (i >= len / 2 + 256 * 1024 && i < len / 2 + 384 * 1024);

        if (buf[i] != (zero ? 0 : 0x77)) {
            g_error("byte %u is %#x, expected %#x", i, buf[i], zero ? 0 : 0x77);
        }
    }
    g_free(pat);
    g_free(buf);
    g_rand_free(rnd);
    dpfix_free(f);
}

/* null engine: reads return zeroes, GET_ID answers inline, counters add up. */
static void test_null(void)
{
    DpFixOpts o = {.engine = "null", .null_read_zeroes = true, .disk_size = 1 << 30};
    DpFix *f = dpfix_new(&o);
    GRand *rnd = g_rand_new_with_seed(3);
    DpReq reqs[32];
    DpReq *byhead[128] = {0};
    uint8_t buf[4096];
    DataPlaneQueueStats st;

    g_assert_nonnull(f);
    dpfix_start(f);
    for (int round = 0; round < 100; round++) {
        uint64_t mark = testdrv_alloc_mark(f->d);

        for (int i = 0; i < 32; i++) {
            g_assert_true(
                dpfix_add(f, &reqs[i], VIRTIO_BLK_T_IN, (uint64_t)i * 8, NULL, 4096, 1, 0, rnd));
            byhead[reqs[i].head] = &reqs[i];
        }
        testvq_kick(f->tvq);
        wait_all(f, byhead, 32, NULL);
        for (int i = 0; i < 32; i++) {
            dpfix_read_data(f, &reqs[i], buf);
            for (int b = 0; b < 4096; b++) {
                g_assert_cmpuint(buf[b], ==, 0);
            }
        }
        testdrv_alloc_reset(f->d, mark);
    }
    /*
     * The guest can see the last completions before the iothread counts its
     * notification decision: the run_sync handshake of dataplane_drain()
     * waits for that handler to return.
     */
    dataplane_drain(f->dp);
    dataplane_get_queue_stats(f->dp, 0, &st);
    g_assert_cmpuint(st.requests, ==, 3200);
    g_assert_cmpuint(st.completed, ==, 3200);
    g_assert_cmpuint(st.inflight, ==, 0);
    g_assert_cmpuint(st.batches, >=, 100);
    /*
     * One decision per round at least, but not always an interrupt: the
     * guest polls the used ring, and when it has consumed a batch (and moved
     * used_event past it) before the device reads used_event, EVENT_IDX
     * rightly suppresses the interrupt.
     */
    g_assert_cmpuint(st.irqs + st.irqs_suppressed, >=, 100);
    g_assert_cmpuint(st.irqs, >, 0);
    /*
     * Each round waits for the last one's completions, so its chains are
     * found by a new pass: started by the kick's eventfd, or by the loop's
     * polling of the avail ring when the kick was suppressed.
     */
    g_assert_cmpuint(st.kicks + st.avail_polls, >=, 100);
    g_assert_cmpuint(st.avail_polls, <=, st.batches);
    g_rand_free(rnd);
    dpfix_free(f);
}

/*
 * Stop/start in the middle of a stream. A guest thread keeps up to 48 writes
 * in flight, each to its own sector with its sequence number as content; the
 * main thread stops the dataplane, serves the queue itself for a moment with
 * a synchronous executor (the other path), and starts the dataplane again.
 * Every request must complete exactly once, and the file must hold every
 * write.
 */
typedef struct Stream {
    DpFix *f;
    unsigned total;
    bool done;
    unsigned completed;
    GRand *rnd;
} Stream;

#define STREAM_DEPTH 40 /* x 3 descriptors <= queue size */

static gpointer stream_guest(gpointer opaque)
{
    Stream *s = opaque;
    DpFix *f = s->f;
    uint64_t hdr[STREAM_DEPTH], dat[STREAM_DEPTH], sts[STREAM_DEPTH];
    int slot_of_head[1024];
    unsigned free_slots[STREAM_DEPTH], nfree = STREAM_DEPTH;
    uint32_t seq_of_slot[STREAM_DEPTH];
    unsigned next = 0, inflight = 0;
    gint64 deadline = g_get_monotonic_time() + 120 * G_USEC_PER_SEC;

    for (unsigned i = 0; i < STREAM_DEPTH; i++) {
        hdr[i] = testdrv_alloc(f->d, 16, 16);
        dat[i] = testdrv_alloc(f->d, 512, 512);
        sts[i] = testdrv_alloc(f->d, 1, 1);
        free_slots[i] = i;
    }
    for (unsigned i = 0; i < 1024; i++) {
        slot_of_head[i] = -1;
    }
    while (next < s->total || inflight > 0) {
        uint16_t head;
        uint32_t len;

        while (next < s->total && nfree > 0) {
            unsigned k = free_slots[--nfree];
            struct virtio_blk_outhdr h = {.type = htole32(VIRTIO_BLK_T_OUT),
                                          .sector = htole64(next)};
            uint8_t blk[512] = {0}, ff = 0xff;
            TestBuf bufs[3] = {{hdr[k], 16, false}, {dat[k], 512, false}, {sts[k], 1, true}};
            int hd;

            memcpy(blk, &next, sizeof(next));
            testdrv_memwrite(f->d, hdr[k], &h, sizeof(h));
            testdrv_memwrite(f->d, dat[k], blk, sizeof(blk));
            testdrv_memwrite(f->d, sts[k], &ff, 1);
            hd = testvq_add_chain(f->tvq, bufs, 3);
            g_assert_cmpint(hd, >=, 0);
            g_assert_cmpint(slot_of_head[hd], ==, -1);
            slot_of_head[hd] = (int)k;
            seq_of_slot[k] = next;
            testvq_publish(f->tvq, (uint16_t)hd);
            next++;
            inflight++;
        }
        testvq_kick(f->tvq);
        while (testvq_get_used(f->tvq, &head, &len)) {
            int k;

            g_assert_cmpuint(head, <, f->o.queue_size);
            k = slot_of_head[head];
            g_assert_cmpint(k, >=, 0); /* never completed twice, never unknown */
            g_assert_cmpuint(len, ==, 1);
            g_assert_cmpuint(testdrv_readb(f->d, sts[k]), ==, VIRTIO_BLK_S_OK);
            (void)seq_of_slot[k];
            slot_of_head[head] = -1;
            free_slots[nfree++] = (unsigned)k;
            inflight--;
            __atomic_add_fetch(&s->completed, 1, __ATOMIC_RELAXED);
        }
        if (nfree == 0 || next == s->total) {
            testvq_wait_used(f->tvq, 100);
        }
        g_assert_cmpint(g_get_monotonic_time(), <, deadline); /* nothing lost */
    }
    __atomic_store_n(&s->done, true, __ATOMIC_RELEASE);
    return NULL;
}

static void sync_submit(void *opaque, VirtIOBlkReq *req)
{
    DpFix *f = opaque;
    ssize_t n = 0;

    switch (req->op) {
    case VIRTIO_BLK_OP_READ:
        n = preadv(f->fd, req->iov, (int)req->niov, (off_t)req->offset);
        break;
    case VIRTIO_BLK_OP_WRITE:
        n = pwritev(f->fd, req->iov, (int)req->niov, (off_t)req->offset);
        break;
    case VIRTIO_BLK_OP_FLUSH:
        n = fdatasync(f->fd);
        break;
    default:
        n = -1;
        errno = ENOTSUP;
    }
    virtio_blk_req_complete(req, n < 0 ? -errno : 0);
}

static const VirtIOBlkExecOps sync_ops = {.submit = sync_submit};

/* Serve the queue from this thread for @ms milliseconds (the "off" path). */
static void serve_sync(DpFix *f, int ms)
{
    gint64 end = g_get_monotonic_time() + ms * 1000;
    struct pollfd pfd = {.fd = testvq_kick_fd(f->tvq), .events = POLLIN};
    static const uint64_t one = 1;

    virtio_blk_queue_set_exec(f->q, &sync_ops, f);
    do {
        uint64_t cnt;

        /* First pass without waiting: the kick may have been consumed by the dataplane. */
        if (read(pfd.fd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN) {
            break;
        }
        virtio_blk_handle_queue(f->q);
        if (virtio_blk_queue_flush(f->q)) {
            g_assert_cmpint(write(testvq_call_fd(f->tvq), &one, sizeof(one)), ==, 8);
        }
        poll(&pfd, 1, 1);
    } while (g_get_monotonic_time() < end);
    virtio_blk_queue_set_exec(f->q, NULL, NULL);
}

static void test_stop_start_stream(gconstpointer data)
{
    const Param *p = data;
    DpFixOpts o = {.engine = p->engine, .direct = p->direct, .disk_size = 32 << 20};
    DpFix *f = dpfix_new(&o);
    Stream s = {.f = f, .total = g_test_quick() ? 20000 : 50000};
    GThread *th;
    unsigned toggles = 0;
    uint8_t blk[512];

    if (!f) {
        g_test_skip("backend not usable here");
        return;
    }
    s.rnd = g_rand_new_with_seed(11);
    dpfix_start(f);
    th = g_thread_new("guest", stream_guest, &s);
    while (!__atomic_load_n(&s.done, __ATOMIC_ACQUIRE)) {
        g_usleep(g_random_int_range(0, 2000));
        dpfix_stop(f);
        dpfix_stop(f); /* idempotent */
        if (toggles % 2) {
            serve_sync(f, 2);
        }
        dpfix_start(f);
        dpfix_start(f); /* idempotent */
        toggles++;
    }
    g_thread_join(th);
    dpfix_stop(f);
    g_assert_cmpuint(s.completed, ==, s.total);
    g_assert_cmpuint(toggles, >=, 5);
    {
        int rfd = open(f->path, O_RDONLY);

        for (uint32_t i = 0; i < s.total; i++) {
            uint32_t v;

            g_assert_cmpint(pread(rfd, blk, 512, (off_t)i * 512), ==, 512);
            memcpy(&v, blk, sizeof(v));
            g_assert_cmpuint(v, ==, i);
        }
        close(rfd);
    }
    g_test_message("%u requests across %u stop/start cycles", s.total, toggles);
    g_rand_free(s.rnd);
    dpfix_free(f);
}

/* Monotonic nanoseconds. */
static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Wait until the FIFO read is in the kernel (nothing to read yet), where it stays. */
static void wait_one_inflight(DpFix *f)
{
    IOQStats ist;

    for (int i = 0; i < TIMEOUT_MS; i++) {
        dataplane_get_ioq_stats(f->dp, &ist);
        if (ist.inflight == 1) {
            break;
        }
        g_usleep(1000);
    }
    g_assert_cmpuint(ist.inflight, ==, 1);
}

/* Feed the FIFO 512 bytes of @fill and check that the read completes with them. */
static void feed_fifo_read(DpFix *f, const char *fifo, DpReq *rd, uint8_t fill)
{
    DpReq *byhead[256] = {0};
    uint8_t pattern[512], buf[512];
    int wfd = open(fifo, O_WRONLY | O_CLOEXEC);

    memset(pattern, fill, sizeof(pattern));
    g_assert_cmpint(wfd, >=, 0);
    g_assert_cmpint(write(wfd, pattern, sizeof(pattern)), ==, (ssize_t)sizeof(pattern));
    close(wfd);
    byhead[rd->head] = rd;
    wait_all(f, byhead, 1, NULL);
    dpfix_read_data(f, rd, buf);
    g_assert_cmpmem(buf, sizeof(buf), pattern, sizeof(pattern));
}

/*
 * The completion hold (x-complete-hold-ns): a read from an empty FIFO stays
 * in flight in io_uring for as long as the test wants, so the depth the hold
 * looks at is under the test's control. @depth 1: with the read in flight, a
 * GET_ID's inline completion is held for the hold time, then the timer
 * publishes it (never earlier); the read's completion, with nothing left in
 * flight, is published at once. @depth 2: one in flight is a shallow queue,
 * so nothing is ever held.
 */
static void test_complete_hold(gconstpointer data)
{
    unsigned depth = GPOINTER_TO_UINT(data);
    const int64_t hold = 1000000; /* 1 ms, the most accepted */
    g_autofree char *dir = g_dir_make_tmp("vblk-hold-XXXXXX", NULL);
    g_autofree char *fifo = g_build_filename(dir, "fifo", NULL);
    DpFixOpts o = {.engine = "io_uring",
                   .path = fifo,
                   .stream = true,
                   .disk_size = 1 << 20,
                   .complete_hold_ns = hold,
                   .complete_hold_depth = depth};
    GRand *rnd = g_rand_new_with_seed(7);
    DpReq rd, id;
    DataPlaneWakeStats wk;
    uint16_t head;
    uint32_t len;
    int64_t t0, t1;
    DpFix *f;

    g_assert_nonnull(dir);
    g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
    f = dpfix_new(&o);
    if (!f) {
        g_test_skip("io_uring not usable here");
        goto out;
    }
    dpfix_start(f);
    g_assert_true(dpfix_add(f, &rd, VIRTIO_BLK_T_IN, 0, NULL, 512, 1, 0, rnd));
    testvq_kick(f->tvq);
    wait_one_inflight(f);
    g_assert_true(dpfix_add(f, &id, VIRTIO_BLK_T_GET_ID, 0, NULL, VIRTIO_BLK_ID_BYTES, 1, 0, rnd));
    t0 = now_ns();
    testvq_kick(f->tvq);
    while (!testvq_get_used(f->tvq, &head, &len)) {
        g_assert_true(testvq_wait_used(f->tvq, TIMEOUT_MS));
    }
    t1 = now_ns();
    g_assert_cmpuint(head, ==, id.head);
    g_assert_cmpuint(dpfix_status(f, &id), ==, VIRTIO_BLK_S_OK);
    dataplane_get_wake_stats(f->dp, &wk);
    if (depth <= 1) {
        /* Held: only the timer could publish it, hold ns after the pass. */
        g_assert_cmpint(t1 - t0, >=, hold);
        g_assert_cmpuint(wk.complete_holds, ==, 1);
    } else {
        g_assert_cmpuint(wk.complete_holds, ==, 0);
    }
    g_test_message("GET_ID published %" PRId64 " us after its kick (depth %u)", (t1 - t0) / 1000,
                   depth);
    /* Now the read: its data arrives, nothing is left in flight, no hold. */
    feed_fifo_read(f, fifo, &rd, 0xa5);
    dataplane_get_wake_stats(f->dp, &wk);
    g_assert_cmpuint(wk.complete_holds, ==, depth <= 1 ? 1 : 0);
    dpfix_stop(f);
    dpfix_free(f);
out:
    g_rand_free(rnd);
    unlink(fifo);
    rmdir(dir);
}

static void add(const char *name, GTestDataFunc fn, const Param *p)
{
    g_test_add_data_func(name, p, fn);
}

/* Reap the used GET_IDs among @ids[0..n): each one of ours, once, status OK. */
static unsigned reap_get_ids(DpFix *f, DpReq *ids, bool *done, unsigned n)
{
    unsigned got = 0;
    uint16_t head;
    uint32_t len;

    while (testvq_get_used(f->tvq, &head, &len)) {
        unsigned k;

        for (k = 0; k < n && (done[k] || ids[k].head != head); k++) {
        }
        g_assert_cmpuint(k, <, n); /* a GET_ID of ours, completed once */
        g_assert_cmpuint(dpfix_status(f, &ids[k]), ==, VIRTIO_BLK_S_OK);
        done[k] = true;
        got++;
    }
    return got;
}

/*
 * The hold's timer is armed once, not pushed back by every pass: with the
 * read from an empty FIFO keeping the queue "deep", the test kicks a GET_ID
 * every 150 us (spinning), far more often than the 1 ms hold, until one is
 * published. A timer re-armed at each pass would publish nothing while the
 * kicks go on (40 kicks, 6 hold times); the timer armed by the first held
 * pass publishes after about 7. A gap of a hold or more between two kicks
 * (the test thread preempted) would let even a pushed-back timer fire, so
 * such an attempt proves nothing and is tried again, up to 8 times.
 */
static void test_complete_hold_steady(void)
{
    enum { MAX_KICKS = 40, ATTEMPTS = 8 };
    const int64_t hold = 1000000; /* 1 ms */
    g_autofree char *dir = g_dir_make_tmp("vblk-hold-XXXXXX", NULL);
    g_autofree char *fifo = g_build_filename(dir, "fifo", NULL);
    DpFixOpts o = {.engine = "io_uring",
                   .path = fifo,
                   .stream = true,
                   .disk_size = 1 << 20,
                   .complete_hold_ns = hold,
                   .complete_hold_depth = 1};
    GRand *rnd = g_rand_new_with_seed(11);
    DpReq rd, ids[MAX_KICKS];
    DataPlaneWakeStats wk;
    unsigned conclusive = 0;
    DpFix *f;

    g_assert_nonnull(dir);
    g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
    f = dpfix_new(&o);
    if (!f) {
        g_test_skip("io_uring not usable here");
        goto out;
    }
    dpfix_start(f);
    g_assert_true(dpfix_add(f, &rd, VIRTIO_BLK_T_IN, 0, NULL, 512, 1, 0, rnd));
    testvq_kick(f->tvq);
    wait_one_inflight(f);
    for (unsigned a = 0; a < ATTEMPTS && !conclusive; a++) {
        bool done[MAX_KICKS] = {false};
        unsigned kicks = 0, got = 0;
        int64_t last = now_ns(), max_gap = 0;

        while (kicks < MAX_KICKS && !got) {
            int64_t t = now_ns();

            max_gap = MAX(max_gap, t - last);
            last = t;
            g_assert_true(dpfix_add(f, &ids[kicks], VIRTIO_BLK_T_GET_ID, 0, NULL,
                                    VIRTIO_BLK_ID_BYTES, 1, 0, rnd));
            kicks++;
            testvq_kick(f->tvq);
            while (!got && now_ns() - last < 150000) {
                got += reap_get_ids(f, ids, done, kicks);
            }
        }
        g_test_message("attempt %u: first publish after %u of %u kicks (%u GET_IDs), longest gap "
                       "%" PRId64 " us",
                       a + 1, kicks, MAX_KICKS, got, max_gap / 1000);
        if (max_gap < hold) {
            /* Published while the kicks went on: the deadline was not pushed back. */
            g_assert_cmpuint(got, >, 0);
            conclusive++;
        }
        /* Every held completion comes out, a hold after its pass at most. */
        while (got < kicks) {
            unsigned n = reap_get_ids(f, ids, done, kicks);

            if (!n) {
                g_assert_true(testvq_wait_used(f->tvq, TIMEOUT_MS));
            }
            got += n;
        }
    }
    if (!conclusive) {
        g_test_incomplete("the test thread was preempted for a hold or more in every attempt");
    }
    dataplane_get_wake_stats(f->dp, &wk);
    g_assert_cmpuint(wk.complete_holds, >=, 1);
    /* Then the read: its data arrives and it completes with its bytes. */
    feed_fifo_read(f, fifo, &rd, 0x3c);
    dpfix_stop(f);
    dpfix_free(f);
out:
    g_rand_free(rnd);
    unlink(fifo);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    static const Param aio_direct = {"native", true, 0, 0, false, false};
    static const Param aio_direct_mis = {"native", true, 64, 0, false, false};
    static const Param aio_buffered = {"native", false, 64, 0, false, false};
    static const Param aio_eagain = {"native", true, 0, 2, false, false};
    static const Param aio_wt = {"native", true, 0, 0, true, false};
    static const Param uring_direct = {"io_uring", true, 0, 0, false, false};
    static const Param uring_direct_mis = {"io_uring", true, 64, 0, false, false};
    static const Param uring_buffered = {"io_uring", false, 64, 0, false, false};
    static const Param aio_direct_hold = {"native", true, 0, 0, false, true};
    static const Param uring_direct_hold = {"io_uring", true, 0, 0, false, true};

    g_test_init(&argc, &argv, NULL);
    add("/dataplane/native/direct/random-rw", test_random_rw, &aio_direct);
    add("/dataplane/native/direct/random-rw-misaligned", test_random_rw, &aio_direct_mis);
    add("/dataplane/native/buffered/random-rw", test_random_rw, &aio_buffered);
    add("/dataplane/native/direct/eagain", test_eagain, &aio_eagain);
    add("/dataplane/native/direct/writethrough", test_random_rw, &aio_wt);
    add("/dataplane/io_uring/direct/random-rw", test_random_rw, &uring_direct);
    add("/dataplane/io_uring/direct/random-rw-misaligned", test_random_rw, &uring_direct_mis);
    add("/dataplane/io_uring/buffered/random-rw", test_random_rw, &uring_buffered);
    add("/dataplane/native/direct/random-rw-complete-hold", test_random_rw, &aio_direct_hold);
    add("/dataplane/io_uring/direct/random-rw-complete-hold", test_random_rw, &uring_direct_hold);
    add("/dataplane/native/flush-order", test_flush_order, &aio_direct);
    add("/dataplane/io_uring/flush-order", test_flush_order, &uring_direct);
    add("/dataplane/native/discard-write-zeroes", test_discard_wz, &aio_buffered);
    add("/dataplane/io_uring/discard-write-zeroes", test_discard_wz, &uring_buffered);
    add("/dataplane/native/stop-start-stream", test_stop_start_stream, &aio_direct);
    add("/dataplane/io_uring/stop-start-stream", test_stop_start_stream, &uring_direct);
    g_test_add_func("/dataplane/null/read-zeroes-counters", test_null);
    g_test_add_func("/dataplane/io_uring/complete-hold/steady", test_complete_hold_steady);
    g_test_add_data_func("/dataplane/io_uring/complete-hold/deep", GUINT_TO_POINTER(1),
                         test_complete_hold);
    g_test_add_data_func("/dataplane/io_uring/complete-hold/shallow", GUINT_TO_POINTER(2),
                         test_complete_hold);
    return g_test_run();
}
