/*
 * Accounting and I/O throttling of one drive across both request paths
 * (dataplane and block layer) and runtime switches between them, through the
 * test driver. The test thread is the guest and the main loop at once: it
 * keeps requests in flight on two queues and runs the main EventLoop (the
 * block-layer path) between waits; the dataplane runs in its iothread.
 *
 * Checked: query-blockstats' numbers (blk_get_stats) equal what the guest
 * submitted, on either path, across switches and after the DpSwitch is gone;
 * throttled rates within 10% of the limit over seconds, on the dataplane,
 * after a runtime change and while switching paths every 100 ms; edge limits
 * (1 iops, huge, 0 = off, bursts with max-length) and QEMU's validation.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <endian.h>
#include <linux/virtio_blk.h>

#include "devfix.h"

#define NQ         2
#define QSIZE      64
#define DEPTH      8 /* requests in flight per queue */
#define DISK_BYTES (16ull << 20)
#define MAX_LEN    (64 * 1024)

typedef struct Slot {
    uint64_t hdr, data, status;
    uint32_t type, len;
} Slot;

typedef struct GQ {
    TestVq *tvq; /* the fixture's */
    Slot slots[DEPTH];
    int slot_of_head[QSIZE];
    unsigned free_slots[DEPTH], nfree;
} GQ;

typedef struct Fx {
    DevFix dev; /* dataplane on the iothread (io_uring on dev.fd), block layer on dev.backend */
    GQ gq[NQ];
    uint64_t ok, err;  /* completions seen by the guest */
    uint64_t ok_bytes; /* data bytes of successful reads/writes */
    uint64_t next_sector;
} Fx;

static Fx *fx_new(bool dataplane, bool ioq_read_only)
{
    Fx *f = g_new0(Fx, 1);

    devfix_init(&f->dev,
                &(DevFixConf){.drive = "file=%s,cache=writeback,aio=io_uring",
                              .dir = "/var/tmp",
                              .bytes = DISK_BYTES,
                              .ram_size = 32 << 20,
                              .num_queues = NQ,
                              .queue_size = QSIZE,
                              .iothread = "throttle-io",
                              .dataplane_read_only = ioq_read_only},
                NULL);
    g_assert_cmpstr(f->dev.swconf.ioq.engine, ==, "io_uring");
    /* As the VMM's iothreads: adaptive polling (a throttled queue must not be polled). */
    event_loop_set_poll_params(iothread_get_loop(f->dev.iothread), 32768, 0, 0);
    for (unsigned i = 0; i < NQ; i++) {
        GQ *g = &f->gq[i];

        g->tvq = f->dev.tvq[i];
        for (unsigned k = 0; k < DEPTH; k++) {
            g->slots[k].hdr = testdrv_alloc(f->dev.d, 16, 16);
            g->slots[k].data = testdrv_alloc(f->dev.d, MAX_LEN, 4096);
            g->slots[k].status = testdrv_alloc(f->dev.d, 1, 1);
            g->free_slots[k] = k;
        }
        g->nfree = DEPTH;
        for (unsigned k = 0; k < QSIZE; k++) {
            g->slot_of_head[k] = -1;
        }
    }
    devfix_start(&f->dev, dataplane, NULL);
    return f;
}

static void fx_free(Fx *f)
{
    devfix_fini(&f->dev);
    g_free(f);
}

/* Publish one request on queue @qi; false if every slot is busy. */
static bool fx_submit(Fx *f, unsigned qi, uint32_t type, uint64_t sector, uint32_t len)
{
    GQ *g = &f->gq[qi];
    struct virtio_blk_outhdr h = {.type = htole32(type), .sector = htole64(sector)};
    uint8_t ff = 0xff;
    TestBuf bufs[3];
    unsigned n = 0, k;
    Slot *s;
    int hd;

    if (!g->nfree) {
        return false;
    }
    k = g->free_slots[--g->nfree];
    s = &g->slots[k];
    s->type = type;
    s->len = len;
    testdrv_memwrite(f->dev.d, s->hdr, &h, sizeof(h));
    testdrv_memwrite(f->dev.d, s->status, &ff, 1);
    bufs[n++] = (TestBuf){s->hdr, 16, false};
    if (type == VIRTIO_BLK_T_DISCARD) {
        struct virtio_blk_discard_write_zeroes seg = {.sector = htole64(sector),
                                                      .num_sectors = htole32(len / 512)};

        testdrv_memwrite(f->dev.d, s->data, &seg, sizeof(seg));
        bufs[n++] = (TestBuf){s->data, sizeof(seg), false};
    } else if (len) {
        bufs[n++] = (TestBuf){s->data, len, type == VIRTIO_BLK_T_IN};
    }
    bufs[n++] = (TestBuf){s->status, 1, true};
    hd = testvq_add_chain(g->tvq, bufs, n);
    g_assert_cmpint(hd, >=, 0);
    g_assert_cmpint(g->slot_of_head[hd], ==, -1);
    g->slot_of_head[hd] = (int)k;
    testvq_publish(g->tvq, (uint16_t)hd);
    return true;
}

static unsigned fx_inflight(Fx *f)
{
    unsigned n = 0;

    for (unsigned i = 0; i < NQ; i++) {
        n += DEPTH - f->gq[i].nfree;
    }
    return n;
}

/* Kick, wait up to @ms for an interrupt or main-loop work, run the main loop, reap. */
static unsigned fx_poll(Fx *f, int ms)
{
    struct pollfd pfd[NQ + 1];
    unsigned reaped = 0;

    for (unsigned i = 0; i < NQ; i++) {
        testvq_kick(f->gq[i].tvq);
        pfd[i] = (struct pollfd){.fd = testvq_call_fd(f->gq[i].tvq), .events = POLLIN};
    }
    pfd[NQ] = (struct pollfd){.fd = event_loop_get_fd(f->dev.main_loop), .events = POLLIN};
    poll(pfd, NQ + 1, ms);
    event_loop_run_once(f->dev.main_loop, false);
    for (unsigned i = 0; i < NQ; i++) {
        GQ *g = &f->gq[i];
        uint16_t head;
        uint32_t len;

        testvq_take_calls(g->tvq);
        while (testvq_get_used(g->tvq, &head, &len)) {
            int k = g->slot_of_head[head];
            Slot *s;

            g_assert_cmpint(k, >=, 0);
            s = &g->slots[k];
            if (testdrv_readb(f->dev.d, s->status) == VIRTIO_BLK_S_OK) {
                f->ok++;
                if (s->type == VIRTIO_BLK_T_IN || s->type == VIRTIO_BLK_T_OUT) {
                    f->ok_bytes += s->len;
                }
            } else {
                f->err++;
            }
            g->slot_of_head[head] = -1;
            g->free_slots[g->nfree++] = (unsigned)k;
            reaped++;
        }
    }
    return reaped;
}

static void fx_wait_idle(Fx *f)
{
    gint64 deadline = g_get_monotonic_time() + 20 * G_USEC_PER_SEC;

    while (fx_inflight(f)) {
        fx_poll(f, 5);
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
    }
}

/* @n requests of one kind, spread over the queues, all completed on return. */
static void fx_do(Fx *f, uint32_t type, unsigned n, uint32_t len)
{
    for (unsigned i = 0; i < n;) {
        uint64_t sector = f->next_sector;

        if (!fx_submit(f, i % NQ, type, sector, len)) {
            fx_poll(f, 5);
            continue;
        }
        f->next_sector = (sector + MAX_LEN / 512) % (DISK_BYTES / 512 - MAX_LEN / 512);
        i++;
    }
    fx_wait_idle(f);
}

/*
 * Keep every slot busy with @type requests of @len for @secs seconds after a
 * @warm-second warm-up (which drains the initial bucket allowance); returns
 * the request rate (or byte rate with @bytes) over the measured window.
 * @switch_ms > 0 flips the path that often.
 */
static double fx_rate(Fx *f, uint32_t type, uint32_t len, double warm, double secs, bool bytes,
                      int switch_ms)
{
    gint64 t0 = g_get_monotonic_time(), tm = t0 + (gint64)(warm * G_USEC_PER_SEC);
    gint64 end = tm + (gint64)(secs * G_USEC_PER_SEC), next_switch = t0 + switch_ms * 1000, now;
    uint64_t base = 0, got;
    bool measuring = false;
    GError *err = NULL;

    while ((now = g_get_monotonic_time()) < end) {
        if (!measuring && now >= tm) {
            measuring = true;
            tm = now;
            base = bytes ? f->ok_bytes : f->ok;
        }
        if (switch_ms > 0 && now >= next_switch) {
            g_assert_true(
                dp_switch_set_dataplane(f->dev.sw, !dp_switch_is_dataplane(f->dev.sw), &err));
            next_switch = now + switch_ms * 1000;
        }
        for (unsigned q = 0; q < NQ; q++) {
            while (fx_submit(f, q, type, f->next_sector, len)) {
                f->next_sector =
                    (f->next_sector + MAX_LEN / 512) % (DISK_BYTES / 512 - MAX_LEN / 512);
            }
        }
        fx_poll(f, 2);
    }
    got = (bytes ? f->ok_bytes : f->ok) - base;
    fx_wait_idle(f);
    return (double)got / ((double)(now - tm) / G_USEC_PER_SEC);
}

static void set_limits(Fx *f, const ThrottleLimits *l)
{
    GError *err = NULL;

    g_assert_true(dp_switch_set_io_limits(f->dev.sw, l, &err));
    g_assert_no_error(err);
}

static void check_rate(const char *what, double got, double want)
{
    g_test_message("%s: %.1f/s for a limit of %.0f/s (%+.1f%%)", what, got, want,
                   (got / want - 1) * 100);
    printf("# THROTTLE %s measured=%.1f limit=%.0f err=%+.2f%%\n", what, got, want,
           (got / want - 1) * 100);
    g_assert_cmpfloat(got, >=, want * 0.9);
    g_assert_cmpfloat(got, <=, want * 1.1);
}

/*
 * check_rate() on 4 KiB reads at @want/s (0.5 s warm-up, 3 s measured, the
 * path flipped every @switch_ms if > 0); every read the guest saw complete
 * meanwhile is counted in query-blockstats.
 */
static void check_read_rate_counted(Fx *f, const char *what, double want, int switch_ms)
{
    uint64_t ok0 = f->ok;
    BlockAcctStats a, b;

    blk_get_stats(f->dev.backend, &a);
    check_rate(what, fx_rate(f, VIRTIO_BLK_T_IN, 4096, 0.5, 3, false, switch_ms), want);
    blk_get_stats(f->dev.backend, &b);
    g_assert_cmpuint(b.rd_operations - a.rd_operations, ==, f->ok - ok0);
}

static uint64_t waits(Fx *f)
{
    uint64_t n = 0;

    for (unsigned i = 0; i < NQ; i++) {
        DataPlaneQueueStats st;

        dataplane_get_queue_stats(dp_switch_dataplane(f->dev.sw), i, &st);
        n += st.throttle_waits;
    }
    return n;
}

/* ---- accounting ---- */

static void assert_not_backwards(const BlockAcctStats *a, const BlockAcctStats *b)
{
    const uint64_t *x = &a->rd_bytes, *y = &b->rd_bytes;

    /* rd_bytes .. invalid_unmap_operations are consecutive uint64_t members. */
    for (size_t i = 0; i <= (size_t)(&a->invalid_unmap_operations - &a->rd_bytes); i++) {
        g_assert_cmpuint(y[i], >=, x[i]);
    }
}

static void test_acct_exact(void)
{
    Fx *f = fx_new(true, false);
    BlockAcctStats s0, s1, s2, s3;
    GError *err = NULL;
    uint64_t bins = 0;

    /* Dataplane. */
    fx_do(f, VIRTIO_BLK_T_IN, 300, 4096);
    fx_do(f, VIRTIO_BLK_T_OUT, 200, 8192);
    fx_do(f, VIRTIO_BLK_T_FLUSH, 10, 0);
    fx_do(f, VIRTIO_BLK_T_DISCARD, 5, 65536);
    fx_do(f, VIRTIO_BLK_T_IN, 3, 4096); /* placeholder sectors are valid */
    g_assert_cmpuint(f->err, ==, 0);
    /* Invalid: beyond the end, and a length that is not a block multiple. */
    g_assert_true(fx_submit(f, 0, VIRTIO_BLK_T_IN, DISK_BYTES / 512, 4096));
    g_assert_true(fx_submit(f, 1, VIRTIO_BLK_T_IN, DISK_BYTES / 512 - 1, 4096));
    g_assert_true(fx_submit(f, 0, VIRTIO_BLK_T_OUT, 0, 100));
    g_assert_true(fx_submit(f, 1, VIRTIO_BLK_T_DISCARD, DISK_BYTES / 512, 4096));
    fx_wait_idle(f);
    g_assert_cmpuint(f->err, ==, 4);
    blk_get_stats(f->dev.backend, &s0);
    g_assert_cmpuint(s0.rd_operations, ==, 303);
    g_assert_cmpuint(s0.rd_bytes, ==, 303 * 4096);
    g_assert_cmpuint(s0.wr_operations, ==, 200);
    g_assert_cmpuint(s0.wr_bytes, ==, 200 * 8192);
    g_assert_cmpuint(s0.flush_operations, ==, 10);
    g_assert_cmpuint(s0.unmap_operations, ==, 5);
    g_assert_cmpuint(s0.unmap_bytes, ==, 5 * 65536);
    g_assert_cmpuint(s0.invalid_rd_operations, ==, 2);
    g_assert_cmpuint(s0.invalid_wr_operations, ==, 1);
    g_assert_cmpuint(s0.invalid_unmap_operations, ==, 1);
    g_assert_cmpuint(s0.failed_rd_operations + s0.failed_wr_operations, ==, 0);
    g_assert_cmpuint(s0.rd_total_time_ns, >, 0);
    g_assert_cmpuint(s0.wr_total_time_ns, >, 0);
    g_assert_cmpint(s0.idle_time_ns, >=, 0);
    for (unsigned i = 0; i <= s0.hist[BLOCK_ACCT_READ].nbounds; i++) {
        bins += s0.hist[BLOCK_ACCT_READ].bins[i];
    }
    g_assert_cmpuint(bins, ==, 303);

    /* Block layer: totals continue from the dataplane's. */
    g_assert_true(dp_switch_set_dataplane(f->dev.sw, false, &err));
    blk_get_stats(f->dev.backend, &s1);
    assert_not_backwards(&s0, &s1);
    fx_do(f, VIRTIO_BLK_T_IN, 100, 4096);
    fx_do(f, VIRTIO_BLK_T_OUT, 50, 16384);
    fx_do(f, VIRTIO_BLK_T_FLUSH, 4, 0);
    g_assert_true(fx_submit(f, 0, VIRTIO_BLK_T_IN, DISK_BYTES / 512, 512));
    fx_wait_idle(f);
    blk_get_stats(f->dev.backend, &s2);
    assert_not_backwards(&s1, &s2);
    g_assert_cmpuint(s2.rd_operations, ==, 403);
    g_assert_cmpuint(s2.rd_bytes, ==, 403 * 4096);
    g_assert_cmpuint(s2.wr_operations, ==, 250);
    g_assert_cmpuint(s2.wr_bytes, ==, 200 * 8192 + 50 * 16384);
    g_assert_cmpuint(s2.flush_operations, ==, 14);
    g_assert_cmpuint(s2.invalid_rd_operations, ==, 3);

    /* And back; then the DpSwitch goes away (device reset): nothing is lost. */
    g_assert_true(dp_switch_set_dataplane(f->dev.sw, true, &err));
    fx_do(f, VIRTIO_BLK_T_IN, 17, 512);
    blk_get_stats(f->dev.backend, &s3);
    assert_not_backwards(&s2, &s3);
    g_assert_cmpuint(s3.rd_operations, ==, 420);
    g_assert_cmpuint(s3.rd_bytes, ==, 403 * 4096 + 17 * 512);
    dp_switch_free(f->dev.sw);
    f->dev.sw = NULL;
    blk_get_stats(f->dev.backend, &s2);
    assert_not_backwards(&s3, &s2);
    g_assert_cmpuint(s2.rd_operations, ==, 420);
    g_assert_cmpuint(s2.wr_operations, ==, 250);
    g_assert_cmpuint(s2.invalid_rd_operations, ==, 3);
    /* fx_free with the switch gone */
    f->dev.sw = dp_switch_new(&f->dev.swconf, &err);
    g_assert_no_error(err);
    blk_get_stats(f->dev.backend, &s3);
    g_assert_cmpuint(s3.rd_operations, ==, 420);
    fx_free(f);
}

/* query-blockstats' wr_highest_offset: raised by writes on both paths, kept across switches. */
static void test_acct_wr_highest(void)
{
    Fx *f = fx_new(true, false);
    GError *err = NULL;
    BlockAcctStats st;

    blk_get_stats(f->dev.backend, &st);
    g_assert_cmpuint(st.wr_highest_offset, ==, 0);
    /* Dataplane: a write at sector 1000, then a lower one and a read above it. */
    g_assert_true(fx_submit(f, 0, VIRTIO_BLK_T_OUT, 1000, 4096));
    fx_wait_idle(f);
    g_assert_true(fx_submit(f, 1, VIRTIO_BLK_T_OUT, 10, 8192));
    g_assert_true(fx_submit(f, 0, VIRTIO_BLK_T_IN, 5000, 4096));
    fx_wait_idle(f);
    g_assert_cmpuint(f->err, ==, 0);
    blk_get_stats(f->dev.backend, &st);
    g_assert_cmpuint(st.wr_highest_offset, ==, 1000 * 512 + 4096);
    /* Block layer: the dataplane's value is kept, a higher write raises it. */
    g_assert_true(dp_switch_set_dataplane(f->dev.sw, false, &err));
    g_assert_no_error(err);
    blk_get_stats(f->dev.backend, &st);
    g_assert_cmpuint(st.wr_highest_offset, ==, 1000 * 512 + 4096);
    g_assert_true(fx_submit(f, 0, VIRTIO_BLK_T_OUT, 3000, 4096));
    fx_wait_idle(f);
    blk_get_stats(f->dev.backend, &st);
    g_assert_cmpuint(st.wr_highest_offset, ==, 3000 * 512 + 4096);
    /* And back to the dataplane: a higher write raises it there too. */
    g_assert_true(dp_switch_set_dataplane(f->dev.sw, true, &err));
    g_assert_no_error(err);
    g_assert_true(fx_submit(f, 1, VIRTIO_BLK_T_OUT, 4000, 512));
    fx_wait_idle(f);
    blk_get_stats(f->dev.backend, &st);
    g_assert_cmpuint(st.wr_highest_offset, ==, 4000 * 512 + 512);
    g_assert_cmpuint(f->err, ==, 0);
    fx_free(f);
}

/* I/O errors on the dataplane count as failed, not as done. */
static void test_acct_failed(void)
{
    Fx *f = fx_new(true, true); /* the dataplane's fd is read-only: writes fail */
    BlockAcctStats st;

    fx_do(f, VIRTIO_BLK_T_OUT, 20, 4096);
    g_assert_cmpuint(f->err, ==, 20);
    fx_do(f, VIRTIO_BLK_T_IN, 10, 4096);
    blk_get_stats(f->dev.backend, &st);
    g_assert_cmpuint(st.failed_wr_operations, ==, 20);
    g_assert_cmpuint(st.wr_operations, ==, 0);
    g_assert_cmpuint(st.wr_bytes, ==, 0);
    g_assert_cmpuint(st.rd_operations, ==, 10);
    g_assert_cmpuint(st.failed_rd_operations, ==, 0);
    fx_free(f);
}

/* ---- throttling rates ---- */

static void test_iops(void)
{
    Fx *f = fx_new(true, false);
    ThrottleLimits l;

    throttle_limits_init(&l);
    l.b[THROTTLE_OPS_TOTAL].avg = 500;
    set_limits(f, &l);
    check_read_rate_counted(f, "dataplane iops-total=500", 500, 0);
    g_assert_cmpuint(waits(f), >, 0);
    fx_free(f);
}

static void test_bps(void)
{
    Fx *f = fx_new(true, false);
    ThrottleLimits l;

    throttle_limits_init(&l);
    l.b[THROTTLE_BPS_WRITE].avg = 2 << 20;
    set_limits(f, &l);
    check_rate("dataplane bps-write=2MiB", fx_rate(f, VIRTIO_BLK_T_OUT, 65536, 0.5, 3, true, 0),
               2 << 20);
    /* Reads are not limited by a write limit. */
    g_assert_cmpfloat(fx_rate(f, VIRTIO_BLK_T_IN, 65536, 0, 0.5, true, 0), >, 4 << 20);
    fx_free(f);
}

static void test_runtime_change(void)
{
    Fx *f = fx_new(true, false);
    ThrottleLimits l;

    throttle_limits_init(&l);
    l.b[THROTTLE_OPS_READ].avg = 1000;
    set_limits(f, &l);
    check_rate("dataplane iops-read=1000", fx_rate(f, VIRTIO_BLK_T_IN, 4096, 0.3, 1.5, false, 0),
               1000);
    /* Lowered while requests wait in the ring. */
    l.b[THROTTLE_OPS_READ].avg = 250;
    set_limits(f, &l);
    check_rate("dataplane iops-read 1000->250", fx_rate(f, VIRTIO_BLK_T_IN, 4096, 0.3, 2, false, 0),
               250);
    fx_free(f);
}

/* The limit holds while the path flips every 100 ms: no free tokens per switch. */
static void test_switching(void)
{
    Fx *f = fx_new(true, false);
    ThrottleLimits l;

    throttle_limits_init(&l);
    l.b[THROTTLE_OPS_TOTAL].avg = 400;
    set_limits(f, &l);
    check_read_rate_counted(f, "iops-total=400, switching every 100 ms", 400, 100);
    /* Starting on the block layer, switching on -> off -> on. */
    fx_free(f);
    f = fx_new(false, false);
    l.b[THROTTLE_OPS_TOTAL].avg = 0;
    l.b[THROTTLE_BPS_TOTAL].avg = 1 << 20;
    set_limits(f, &l);
    check_rate("bps-total=1MiB, switching every 250 ms",
               fx_rate(f, VIRTIO_BLK_T_IN, 16384, 0.5, 3, true, 250), 1 << 20);
    fx_free(f);
}

/* ---- edges ---- */

static void test_one_iops(void)
{
    Fx *f = fx_new(true, false);
    ThrottleLimits l;
    gint64 t0, t1 = 0;

    throttle_limits_init(&l);
    l.b[THROTTLE_OPS_TOTAL].avg = 1;
    set_limits(f, &l);
    t0 = g_get_monotonic_time();
    for (unsigned i = 0; i < 3; i++) {
        g_assert_true(fx_submit(f, 0, VIRTIO_BLK_T_IN, i * 8, 4096));
    }
    while (fx_inflight(f)) {
        fx_poll(f, 5);
        if (f->ok == 1 && !t1) {
            t1 = g_get_monotonic_time();
        }
        g_assert_cmpint(g_get_monotonic_time() - t0, <, 10 * G_USEC_PER_SEC);
    }
    /* Capacity avg/10: the first goes at once, then 0.9 s and 1.0 s waits. */
    g_assert_cmpint(t1 - t0, <, G_USEC_PER_SEC / 2);
    g_test_message("1 iops: 3 reads in %.2f s", (g_get_monotonic_time() - t0) / 1e6);
    g_assert_cmpint(g_get_monotonic_time() - t0, >, 17 * G_USEC_PER_SEC / 10);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, 27 * G_USEC_PER_SEC / 10);
    fx_free(f);
}

static void test_zero_and_huge(void)
{
    Fx *f = fx_new(true, false);
    ThrottleLimits l;
    gint64 t0;

    /* Huge limits never make a request wait. */
    throttle_limits_init(&l);
    l.b[THROTTLE_OPS_TOTAL].avg = THROTTLE_VALUE_MAX;
    l.b[THROTTLE_BPS_TOTAL].avg = THROTTLE_VALUE_MAX;
    l.b[THROTTLE_BPS_TOTAL].max = THROTTLE_VALUE_MAX;
    set_limits(f, &l);
    fx_do(f, VIRTIO_BLK_T_IN, 2000, 4096);
    g_assert_cmpuint(waits(f), ==, 0);

    /* 1 iops with requests waiting in the ring; then 0 = off releases them at once. */
    throttle_limits_init(&l);
    l.b[THROTTLE_OPS_TOTAL].avg = 1;
    set_limits(f, &l);
    f->ok = 0;
    for (unsigned i = 0; i < 5; i++) {
        g_assert_true(fx_submit(f, i % NQ, VIRTIO_BLK_T_IN, i * 8, 4096));
    }
    t0 = g_get_monotonic_time();
    while (g_get_monotonic_time() - t0 < G_USEC_PER_SEC / 4) {
        fx_poll(f, 5);
    }
    g_assert_cmpuint(f->ok, ==, 1);
    throttle_limits_init(&l);
    set_limits(f, &l);
    t0 = g_get_monotonic_time();
    fx_wait_idle(f);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, G_USEC_PER_SEC / 2);
    g_assert_cmpuint(f->ok, ==, 5);
    fx_free(f);
}

/* Bursts: iops-max for iops-max-length seconds, then the average. */
static void test_burst(void)
{
    Fx *f = fx_new(true, false);
    ThrottleLimits l;
    double r;

    /* max-length 1: a bucket of 500 tokens on top of 50/s. */
    throttle_limits_init(&l);
    l.b[THROTTLE_OPS_TOTAL].avg = 50;
    l.b[THROTTLE_OPS_TOTAL].max = 500;
    set_limits(f, &l);
    r = fx_rate(f, VIRTIO_BLK_T_IN, 4096, 0, 1, false, 0);
    g_test_message("burst 500 x 1 s over 50/s: %.0f in the first second", r);
    g_assert_cmpfloat(r, >=, 500);
    g_assert_cmpfloat(r, <=, 620);
    check_rate("iops-total=50 after its burst", fx_rate(f, VIRTIO_BLK_T_IN, 4096, 0, 2, false, 0),
               50);

    /* max-length 3: 1500 tokens, but no faster than 500/s while they last. */
    l.b[THROTTLE_OPS_TOTAL].burst_length = 3;
    set_limits(f, &l);
    check_rate("iops-total-max=500 for 3 s", fx_rate(f, VIRTIO_BLK_T_IN, 4096, 0.2, 1.5, false, 0),
               500);
    fx_free(f);
}

/* QEMU's throttle_is_valid() messages; a refused change keeps the old limits. */
static void test_validation(void)
{
    Fx *f = fx_new(true, false);
    static const struct {
        int bucket;
        uint64_t avg, max, len;
        int bucket2;
        uint64_t avg2;
        const char *msg;
    } cases[] = {
        {THROTTLE_OPS_TOTAL, 10, 0, 1, THROTTLE_OPS_READ, 5,
         "bps/iops/max total values and read/write values cannot be used at the same time"},
        {THROTTLE_BPS_READ, THROTTLE_VALUE_MAX + 1, 0, 1, -1, 0,
         "bps/iops/max values must be within [0, 1000000000000000]"},
        {THROTTLE_OPS_WRITE, 10, 0, 0, -1, 0, "the burst length cannot be 0"},
        {THROTTLE_OPS_WRITE, 10, 0, 2, -1, 0, "burst length set without burst rate"},
        {THROTTLE_OPS_WRITE, 10, 5, 1, -1, 0, "bps_max/iops_max cannot be lower than bps/iops"},
        {THROTTLE_OPS_WRITE, 0, 5, 1, -1, 0,
         "bps_max/iops_max require corresponding bps/iops values"},
        {THROTTLE_BPS_TOTAL, 10, THROTTLE_VALUE_MAX, 2, -1, 0,
         "burst length too high for this burst rate"},
    };
    ThrottleLimits l, cur;

    throttle_limits_init(&l);
    l.b[THROTTLE_OPS_TOTAL].avg = 777;
    set_limits(f, &l);
    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        GError *err = NULL;

        throttle_limits_init(&l);
        l.b[cases[i].bucket].avg = cases[i].avg;
        l.b[cases[i].bucket].max = cases[i].max;
        l.b[cases[i].bucket].burst_length = cases[i].len;
        if (cases[i].bucket2 >= 0) {
            l.b[cases[i].bucket2].avg = cases[i].avg2;
        }
        g_assert_false(dp_switch_set_io_limits(f->dev.sw, &l, &err));
        g_assert_nonnull(err);
        g_assert_cmpstr(err->message, ==, cases[i].msg);
        g_error_free(err);
    }
    blk_get_io_limits(f->dev.backend, &cur);
    g_assert_cmpuint(cur.b[THROTTLE_OPS_TOTAL].avg, ==, 777);
    fx_free(f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/dp-throttle/acct/exact-counts-across-switches", test_acct_exact);
    g_test_add_func("/dp-throttle/acct/failed", test_acct_failed);
    g_test_add_func("/dp-throttle/acct/wr-highest-offset", test_acct_wr_highest);
    g_test_add_func("/dp-throttle/rate/iops-500", test_iops);
    g_test_add_func("/dp-throttle/rate/bps-write", test_bps);
    g_test_add_func("/dp-throttle/rate/runtime-change", test_runtime_change);
    g_test_add_func("/dp-throttle/rate/switching", test_switching);
    g_test_add_func("/dp-throttle/edge/one-iops", test_one_iops);
    g_test_add_func("/dp-throttle/edge/zero-and-huge", test_zero_and_huge);
    g_test_add_func("/dp-throttle/edge/burst", test_burst);
    g_test_add_func("/dp-throttle/edge/validation", test_validation);
    return g_test_run();
}
