/*
 * Block layer policy tests: werror/rerror with the blkdebug node, option
 * parsing (-drive and -blockdev, including QEMU's error messages),
 * accounting counts, throttling validation and measured rates.
 */
#include <stdlib.h>

#include "blocktest.h"

/* ---- error policy ---- */

typedef struct HookLog {
    unsigned calls;
    char device[32], node[32], op[16], action[16], reason[64];
    bool nospace;
    unsigned parked_at_call;
} HookLog;

static void hook(void *opaque, BlockBackend *blk, const BlockIOErrorEvent *ev)
{
    HookLog *h = opaque;

    h->calls++;
    g_strlcpy(h->device, ev->device, sizeof(h->device));
    g_strlcpy(h->node, ev->node_name, sizeof(h->node));
    g_strlcpy(h->op, ev->operation, sizeof(h->op));
    g_strlcpy(h->action, ev->action, sizeof(h->action));
    g_strlcpy(h->reason, ev->reason, sizeof(h->reason));
    h->nospace = ev->nospace;
    h->parked_at_call = blk_parked_count(blk);
}

static BlockBackend *debug_drive(const char *policy)
{
    BlockBackend *blk = bt_blockdev("driver=blkdebug,node-name=dbg,image.driver=null-co,"
                                    "image.read-zeroes=on,image.size=1M");
    BlockErrorPolicy r, w;

    g_assert_true(blk_error_policy_parse(policy, &w, NULL));
    r = w == BLOCK_ERR_ENOSPC ? BLOCK_ERR_REPORT : w;
    blk_set_error_policy(blk, r, w);
    blk_set_device_name(blk, "virtio0");
    return blk;
}

static void add_rule(BlockBackend *blk, int op, uint64_t nth, int error, bool once)
{
    BlkdebugRule r = {.op = op, .nth = nth, .error = error, .once = once};
    GError *err = NULL;

    g_assert_true(blkdebug_add_rule(blk_find_node(blk, "dbg"), &r, &err));
    g_assert_no_error(err);
}

static void test_error_report(void)
{
    BlockBackend *blk = debug_drive("report");
    HookLog h = {0};
    uint8_t buf[512];
    BlockAcctStats st;

    blk_set_error_hook(blk, hook, &h);
    add_rule(blk, BLOCK_OP_WRITE, 2, EIO, false);
    g_assert_cmpint(bt_write(blk, 0, buf, 512), ==, 0);
    g_assert_cmpint(bt_write(blk, 0, buf, 512), ==, -EIO); /* the 2nd write */
    g_assert_cmpint(bt_write(blk, 0, buf, 512), ==, 0);
    g_assert_cmpuint(h.calls, ==, 1);
    g_assert_cmpstr(h.action, ==, "report");
    g_assert_cmpstr(h.op, ==, "write");
    g_assert_cmpstr(h.device, ==, "virtio0");
    g_assert_cmpstr(h.node, ==, "dbg");
    g_assert_false(h.nospace);
    g_assert_cmpuint(blkdebug_fired(blk_find_node(blk, "dbg")), ==, 1);
    blk_get_stats(blk, &st);
    g_assert_cmpuint(st.wr_operations, ==, 2);
    g_assert_cmpuint(st.failed_wr_operations, ==, 1);
    blk_unref(blk);
}

static void test_error_ignore(void)
{
    BlockBackend *blk = debug_drive("ignore");
    HookLog h = {0};
    uint8_t buf[512];

    blk_set_error_hook(blk, hook, &h);
    add_rule(blk, BLOCK_OP_READ, 0, EIO, false);
    g_assert_cmpint(bt_read(blk, 0, buf, 512), ==, 0);
    g_assert_cmpint(bt_read(blk, 512, buf, 512), ==, 0);
    g_assert_cmpuint(h.calls, ==, 2);
    g_assert_cmpstr(h.action, ==, "ignore");
    g_assert_cmpstr(h.op, ==, "read");
    blk_unref(blk);
}

static void test_error_stop(void)
{
    BlockBackend *blk = debug_drive("stop");
    HookLog h = {0};
    enum { N = 6 };
    uint8_t buf[N][512];
    struct iovec iov[N];
    BtDone d[N] = {{0}};

    blk_set_error_hook(blk, hook, &h);
    /* writes 2..4 fail once each with ENOSPC: once rules fire on the next match */
    add_rule(blk, BLOCK_OP_WRITE, 2, ENOSPC, true);
    add_rule(blk, BLOCK_OP_WRITE, 3, ENOSPC, true);
    add_rule(blk, BLOCK_OP_WRITE, 4, ENOSPC, true);
    for (int i = 0; i < N; i++) {
        iov[i] = (struct iovec){buf[i], 512};
        blk_aio_pwritev(blk, (uint64_t)i * 512, &iov[i], 1, 512, 0, bt_cb, &d[i]);
    }
    blk_drain(blk);
    g_assert_cmpuint(blk_in_flight(blk), ==, 0);
    g_assert_cmpuint(blk_parked_count(blk), ==, 3);
    g_assert_cmpuint(h.calls, ==, 3);
    g_assert_cmpstr(h.action, ==, "stop");
    g_assert_true(h.nospace);
    g_assert_cmpuint(h.parked_at_call, >=, 1); /* parked before the hook ran */
    g_assert_cmpstr(h.reason, ==, g_strerror(ENOSPC));
    for (int i = 0; i < N; i++) {
        bool failed = i >= 1 && i <= 3;

        g_assert_cmpint(d[i].done, ==, !failed);
    }
    blk_resume_parked(blk);
    bt_wait_all(d, N);
    g_assert_cmpuint(blk_parked_count(blk), ==, 0);
    for (int i = 0; i < N; i++) {
        g_assert_cmpint(d[i].ret, ==, 0);
    }
    /* the resubmitted ones completed in their submission order */
    g_assert_cmpint(d[1].order, <, d[2].order);
    g_assert_cmpint(d[2].order, <, d[3].order);
    blk_unref(blk);
}

static void test_error_enospc(void)
{
    BlockBackend *blk = debug_drive("enospc");
    HookLog h = {0};
    uint8_t buf[512];
    BtDone d = {0};
    struct iovec iov = {buf, 512};

    blk_set_error_hook(blk, hook, &h);
    add_rule(blk, BLOCK_OP_WRITE, 1, EIO, true);
    g_assert_cmpint(bt_write(blk, 0, buf, 512), ==, -EIO); /* EIO: report */
    g_assert_cmpstr(h.action, ==, "report");
    add_rule(blk, BLOCK_OP_FLUSH, 1, ENOSPC, true);
    blk_aio_flush(blk, bt_cb, &d); /* ENOSPC on a flush: stop */
    blk_drain(blk);
    g_assert_false(d.done);
    g_assert_cmpuint(blk_parked_count(blk), ==, 1);
    g_assert_cmpstr(h.action, ==, "stop");
    g_assert_cmpstr(h.op, ==, "write");
    blk_resume_parked(blk);
    bt_wait(&d);
    g_assert_cmpint(d.ret, ==, 0);
    /* reads with rerror=report: ENOSPC is just reported */
    add_rule(blk, BLOCK_OP_READ, 0, ENOSPC, true);
    d = (BtDone){0};
    blk_aio_preadv(blk, 0, &iov, 1, 512, 0, bt_cb, &d);
    bt_wait(&d);
    g_assert_cmpint(d.ret, ==, -ENOSPC);
    blk_unref(blk);
}

/* A parked request that fails again stays parked with those behind it. */
static void test_error_stop_again(void)
{
    BlockBackend *blk = debug_drive("stop");
    HookLog h = {0};
    uint8_t buf[2][512];
    struct iovec iov[2] = {{buf[0], 512}, {buf[1], 512}};
    BtDone d[2] = {{0}};
    BlockNode *dbg;

    blk_set_error_hook(blk, hook, &h);
    add_rule(blk, BLOCK_OP_WRITE, 0, EIO, false); /* every write fails */
    blk_aio_pwritev(blk, 0, &iov[0], 1, 512, 0, bt_cb, &d[0]);
    blk_aio_pwritev(blk, 512, &iov[1], 1, 512, 0, bt_cb, &d[1]);
    blk_drain(blk);
    g_assert_cmpuint(blk_parked_count(blk), ==, 2);
    blk_resume_parked(blk);
    blk_drain(blk);
    g_assert_cmpuint(blk_parked_count(blk), ==, 2);
    g_assert_cmpuint(h.calls, ==, 3);
    dbg = blk_find_node(blk, "dbg");
    blkdebug_clear_rules(dbg);
    blk_resume_parked(blk);
    bt_wait_all(d, 2);
    g_assert_cmpint(d[0].ret, ==, 0);
    g_assert_cmpint(d[1].ret, ==, 0);
    g_assert_cmpint(d[0].order, <, d[1].order);
    blk_unref(blk);
}

/* blkdebug rules from options: sector-scoped, once. */
static void test_blkdebug_opts(void)
{
    BlockBackend *blk = bt_blockdev("driver=blkdebug,image.driver=null-co,"
                                    "inject-error.0.event=read_aio,inject-error.0.sector=8,"
                                    "inject-error.0.errno=5,inject-error.0.once=on");
    uint8_t buf[4096];

    g_assert_cmpint(bt_read(blk, 0, buf, 4096), ==, 0);      /* sectors 0-7 */
    g_assert_cmpint(bt_read(blk, 4096, buf, 512), ==, -EIO); /* sector 8 */
    g_assert_cmpint(bt_read(blk, 4096, buf, 512), ==, 0);    /* once */
    blk_unref(blk);
}

/* ---- options ---- */

static void expect_drive_err(const char *opts, const char *msg)
{
    g_autofree char *e = bt_drive_err(opts);

    g_assert_cmpstr(e, ==, msg);
}

static void expect_blockdev_err(const char *opts, const char *msg)
{
    g_autofree char *e = bt_blockdev_err(opts);

    g_assert_cmpstr(e, ==, msg);
}

static void test_opts(void)
{
    BlockBackend *blk;
    BlockErrorPolicy r, w;
    ThrottleLimits tl;

    expect_drive_err("format=raw", "Parameter 'file' is missing");
    expect_drive_err("file=null-co://,cache=bogus", "invalid cache option");
    expect_drive_err("file=null-co://,format=qcow2", "'qcow2' invalid format");
    expect_drive_err("file=null-co://,werror=bogus", "'bogus' invalid write error action");
    expect_drive_err("file=null-co://,rerror=enospc", "'enospc' invalid read error action");
    expect_drive_err("file=null-co://,frobnicate=1", "Invalid parameter 'frobnicate'");
    expect_drive_err("file=/nonexistent/x", "file: Could not open '/nonexistent/x': No such file "
                                            "or directory");
    expect_drive_err("file=/etc/hostname,aio=native",
                     "file: aio=native was specified, but it requires cache.direct=on, which "
                     "was not specified.");
    expect_drive_err("file=/etc/hostname,aio=posix",
                     "file: Parameter 'aio' does not accept value 'posix'");
    expect_drive_err("file=null-co://,throttling.iops-total=10,throttling.iops-read=5",
                     "bps/iops/max total values and read/write values cannot be used at the "
                     "same time");
    expect_drive_err("file=null-co://,throttling.bps-total-max=10",
                     "bps_max/iops_max require corresponding bps/iops values");
    expect_drive_err("file=null-co://,cache.direct=maybe",
                     "Parameter 'cache.direct' expects 'on' or 'off'");
    expect_blockdev_err("size=1M", "Parameter 'driver' is missing");
    expect_blockdev_err("driver=qcow9", "Parameter 'driver' does not accept value 'qcow9'");
    expect_blockdev_err("driver=raw", "A block device must be specified for \"file\"");
    expect_blockdev_err("driver=null-co,node-name=1abc", "Invalid node-name: '1abc'");
    expect_blockdev_err("driver=null-co,size=lots",
                        "Parameter 'size' expects a non-negative number below 2^64");
    expect_blockdev_err("driver=file", "Parameter 'filename' is missing");
    expect_blockdev_err("driver=raw,file.driver=null-co,file.bogus=1",
                        "file: Invalid parameter 'bogus'");
    expect_blockdev_err("driver=null-co,detect-zeroes=on", "detect-zeroes=on is not supported");

    blk = bt_drive("file=null-co://,id=d0,if=none,werror=stop,rerror=ignore,cache=directsync,"
                   "throttling.iops-total=100,throttling.bps-read=1000,node-name=top");
    blk_get_error_policy(blk, &r, &w);
    g_assert_cmpint(r, ==, BLOCK_ERR_IGNORE);
    g_assert_cmpint(w, ==, BLOCK_ERR_STOP);
    g_assert_false(blk_enable_write_cache(blk));
    g_assert_cmpstr(blk_root_node_name(blk), ==, "top");
    blk_get_io_limits(blk, &tl);
    g_assert_cmpuint(tl.b[THROTTLE_OPS_TOTAL].avg, ==, 100);
    g_assert_cmpuint(tl.b[THROTTLE_BPS_READ].avg, ==, 1000);
    blk_unref(blk);

    blk = bt_blockdev("driver=raw,node-name=r0,read-only=on,file.driver=null-aio,file.size=64k,"
                      "file.node-name=n0");
    g_assert_true(blk_is_read_only(blk));
    g_assert_cmpint(blk_getlength(blk), ==, 65536);
    g_assert_cmpstr(blk_node_get_driver(blk_find_node(blk, "n0")), ==, "null-aio");
    blk_unref(blk);
}

/* ---- accounting ---- */

static void test_acct(void)
{
    BlockBackend *blk = bt_drive("file=null-co://,discard=unmap");
    uint8_t buf[4096];
    BlockAcctStats st;
    BtDone d = {0};
    uint64_t sum = 0;

    blk_get_stats(blk, &st);
    g_assert_cmpint(st.idle_time_ns, ==, -1);
    for (int i = 0; i < 5; i++) {
        g_assert_cmpint(bt_read(blk, 0, buf, 4096), ==, 0);
    }
    for (int i = 0; i < 3; i++) {
        g_assert_cmpint(bt_write(blk, 4096, buf, 1024), ==, 0);
    }
    g_assert_cmpint(bt_flush(blk), ==, 0);
    blk_aio_pdiscard(blk, 0, 65536, bt_cb, &d);
    bt_wait(&d);
    g_assert_cmpint(bt_read(blk, 1ull << 40, buf, 512), ==, -EIO); /* invalid */
    blk_get_stats(blk, &st);
    g_assert_cmpuint(st.rd_operations, ==, 5);
    g_assert_cmpuint(st.rd_bytes, ==, 5 * 4096);
    g_assert_cmpuint(st.wr_operations, ==, 3);
    g_assert_cmpuint(st.wr_bytes, ==, 3 * 1024);
    /* the end of the highest write; the later discard of 64 KiB does not count */
    g_assert_cmpuint(st.wr_highest_offset, ==, 4096 + 1024);
    g_assert_cmpuint(st.flush_operations, ==, 1);
    g_assert_cmpuint(st.unmap_operations, ==, 1);
    g_assert_cmpuint(st.unmap_bytes, ==, 65536);
    g_assert_cmpuint(st.invalid_rd_operations, ==, 1);
    g_assert_cmpuint(st.failed_rd_operations, ==, 0);
    g_assert_cmpuint(st.rd_total_time_ns, >, 0);
    g_assert_cmpint(st.idle_time_ns, >=, 0);
    for (unsigned i = 0; i <= st.hist[BLOCK_ACCT_READ].nbounds; i++) {
        sum += st.hist[BLOCK_ACCT_READ].bins[i];
    }
    g_assert_cmpuint(sum, ==, 5);
    {
        uint64_t bad[] = {100, 50};
        GError *err = NULL;

        g_assert_false(blk_set_latency_histogram(blk, BLOCK_ACCT_READ, bad, 2, &err));
        g_clear_error(&err);
    }
    /* a lower write leaves it; a dataplane shard's higher one raises it, also once folded in */
    g_assert_cmpint(bt_write(blk, 0, buf, 512), ==, 0);
    {
        BlockAcctShard sh[2];

        blk_acct_attach_shards(blk, sh, 2);
        block_acct_shard_write_end(&sh[1], 1 << 20);
        block_acct_shard_write_end(&sh[1], 8192); /* lower: no change */
        blk_get_stats(blk, &st);
        g_assert_cmpuint(st.wr_highest_offset, ==, 1 << 20);
        blk_acct_detach_shards(blk);
        blk_get_stats(blk, &st);
        g_assert_cmpuint(st.wr_highest_offset, ==, 1 << 20);
    }
    blk_unref(blk);
}

/* ---- throttling ---- */

static void test_throttle_validate(void)
{
    ThrottleLimits l;
    GError *err = NULL;
    BlockBackend *blk = bt_drive("file=null-co://");

    throttle_limits_init(&l);
    l.b[THROTTLE_OPS_TOTAL].avg = 100;
    l.b[THROTTLE_OPS_TOTAL].max = 50;
    g_assert_false(blk_set_io_limits(blk, &l, &err));
    g_assert_cmpstr(err->message, ==, "bps_max/iops_max cannot be lower than bps/iops");
    g_clear_error(&err);
    throttle_limits_init(&l);
    l.b[THROTTLE_BPS_READ].burst_length = 5;
    g_assert_false(blk_set_io_limits(blk, &l, &err));
    g_assert_cmpstr(err->message, ==, "burst length set without burst rate");
    g_clear_error(&err);
    throttle_limits_init(&l);
    l.b[THROTTLE_BPS_READ].burst_length = 0;
    g_assert_false(blk_set_io_limits(blk, &l, &err));
    g_assert_cmpstr(err->message, ==, "the burst length cannot be 0");
    g_clear_error(&err);
    throttle_limits_init(&l);
    l.b[THROTTLE_BPS_WRITE].avg = THROTTLE_VALUE_MAX + 1;
    g_assert_false(blk_set_io_limits(blk, &l, &err));
    g_assert_cmpstr(err->message, ==, "bps/iops/max values must be within [0, 1000000000000000]");
    g_clear_error(&err);
    throttle_limits_init(&l);
    l.iops_size = 4096;
    g_assert_false(blk_set_io_limits(blk, &l, &err));
    g_assert_cmpstr(err->message, ==, "iops size requires an iops value to be set");
    g_clear_error(&err);
    blk_unref(blk);
}

/* Keep @depth requests in flight for @secs; returns completed per second. */
typedef struct Pump {
    BlockBackend *blk;
    uint8_t *buf;
    struct iovec iov[64];
    uint64_t len;
    bool write;
    bool stop;
    unsigned inflight;
    uint64_t done;
    int order_last;
    int next_id;
    int ids[64];
    bool in_order;
} Pump;

static void pump_issue(Pump *p, int slot);

static void pump_cb(void *opaque, int ret)
{
    int *id = opaque;
    Pump *p = (Pump *)((char *)(id - *id) - offsetof(Pump, ids));

    g_assert_cmpint(ret, ==, 0);
    p->inflight--;
    p->done++;
    if (!p->stop) {
        pump_issue(p, *id);
    }
}

static void pump_issue(Pump *p, int slot)
{
    p->iov[slot] = (struct iovec){p->buf, p->len};
    p->inflight++;
    if (p->write) {
        blk_aio_pwritev(p->blk, 0, &p->iov[slot], 1, p->len, 0, pump_cb, &p->ids[slot]);
    } else {
        blk_aio_preadv(p->blk, 0, &p->iov[slot], 1, p->len, 0, pump_cb, &p->ids[slot]);
    }
}

static double pump_rate(BlockBackend *blk, uint64_t len, bool write, double secs, double *bps)
{
    Pump p = {.blk = blk, .len = len, .write = write};
    int64_t t0, t1;
    uint64_t done;

    p.buf = g_malloc0(len);
    for (int i = 0; i < 64; i++) {
        p.ids[i] = i;
    }
    /* warm-up: consume the initial burst allowance first */
    for (int i = 0; i < 16; i++) {
        pump_issue(&p, i);
    }
    t0 = event_clock_ns();
    while (event_clock_ns() - t0 < 300000000LL) {
        event_loop_run_once(bt_loop, true);
    }
    p.done = 0;
    t0 = event_clock_ns();
    while ((t1 = event_clock_ns()) - t0 < (int64_t)(secs * 1e9)) {
        event_loop_run_once(bt_loop, true);
    }
    done = p.done; /* before the drain releases the queued ones unthrottled */
    p.stop = true;
    blk_drain(blk);
    g_free(p.buf);
    *bps = (double)done * (double)len / ((double)(t1 - t0) / 1e9);
    return (double)done / ((double)(t1 - t0) / 1e9);
}

static void test_throttle_iops(void)
{
    BlockBackend *blk = bt_drive("file=null-co://,throttling.iops-total=200");
    double bps, iops = pump_rate(blk, 512, false, 3.0, &bps);

    g_test_message("iops-total=200: measured %.1f ops/s", iops);
    g_assert_cmpfloat(iops, >=, 180);
    g_assert_cmpfloat(iops, <=, 220);
    blk_unref(blk);
}

static void test_throttle_bps(void)
{
    BlockBackend *blk = bt_drive("file=null-co://,throttling.bps-write=4194304");
    double bps, iops = pump_rate(blk, 65536, true, 3.0, &bps);

    g_test_message("bps-write=4 MiB/s: measured %.0f B/s (%.1f ops/s)", bps, iops);
    g_assert_cmpfloat(bps, >=, 4194304 * 0.9);
    g_assert_cmpfloat(bps, <=, 4194304 * 1.1);
    /* reads are not limited by a write limit */
    iops = pump_rate(blk, 65536, false, 0.5, &bps);
    g_assert_cmpfloat(bps, >, 4194304 * 4);
    blk_unref(blk);
}

/* Burst: iops=50 with iops-max=500 for 1 s lets ~500 through quickly, then 50/s. */
static void test_throttle_burst_order(void)
{
    BlockBackend *blk = bt_drive("file=null-co://,throttling.iops-read=50,"
                                 "throttling.iops-read-max=500,"
                                 "throttling.iops-read-max-length=1");
    enum { N = 520 };
    BtDone *d = g_new0(BtDone, N);
    uint8_t buf[512];
    struct iovec iov = {buf, 512};
    int64_t t0 = event_clock_ns();
    unsigned early = 0;

    for (int i = 0; i < N; i++) {
        blk_aio_preadv(blk, 0, &iov, 1, 512, 0, bt_cb, &d[i]);
    }
    g_assert_cmpuint(blk_throttled_count(blk), >, 0);
    while (event_clock_ns() - t0 < 200000000LL) {
        event_loop_run_once(bt_loop, true);
    }
    for (int i = 0; i < N; i++) {
        early += d[i].done;
    }
    g_test_message("burst: %u of %d completed in 200 ms", early, N);
    g_assert_cmpuint(early, >=, 450);
    g_assert_cmpuint(early, <, N);
    bt_wait_all(d, N);
    for (int i = 1; i < N; i++) {
        g_assert_cmpint(d[i - 1].order, <, d[i].order); /* queued requests keep order */
    }
    g_free(d);
    blk_unref(blk);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    bt_init();
    g_test_add_func("/block/error/report", test_error_report);
    g_test_add_func("/block/error/ignore", test_error_ignore);
    g_test_add_func("/block/error/stop", test_error_stop);
    g_test_add_func("/block/error/enospc", test_error_enospc);
    g_test_add_func("/block/error/stop-again", test_error_stop_again);
    g_test_add_func("/block/blkdebug/opts", test_blkdebug_opts);
    g_test_add_func("/block/opts", test_opts);
    g_test_add_func("/block/acct", test_acct);
    g_test_add_func("/block/throttle/validate", test_throttle_validate);
    g_test_add_func("/block/throttle/iops", test_throttle_iops);
    g_test_add_func("/block/throttle/bps", test_throttle_bps);
    g_test_add_func("/block/throttle/burst-order", test_throttle_burst_order);
    return g_test_run();
}
