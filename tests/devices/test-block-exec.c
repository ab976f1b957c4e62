/*
 * virtio-blk executor adapter: real virtio requests from the test driver,
 * parsed by the request engine, executed through a BlockBackend in the loop,
 * completed with one notify per batch; writethrough adds FUA; werror=stop
 * parks a request until blk_resume_parked().
 */
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include "blkfix.h"
#include "blocktest.h"
#include "devices/block-exec.h"

typedef struct ExecFix {
    BlkFix f;
    BlockBackend *blk;
    BlkExec *exec;
    unsigned notifies;
} ExecFix;

static void notify(void *opaque, VirtIOBlkQueue *q)
{
    ExecFix *x = opaque;

    g_assert_true(q == x->f.q);
    x->notifies++;
    virtio_blk_queue_flush(q);
}

/* The virtio test fixture's queue, executed through @blk. */
static void exec_attach(ExecFix *x, BlockBackend *blk)
{
    memset(x, 0, sizeof(*x));
    blkfix_init(&x->f, NULL);
    x->blk = blk;
    x->exec = blk_exec_new(x->blk, x->f.blk, notify, x);
    virtio_blk_queue_set_exec(x->f.q, blk_exec_ops(), x->exec);
}

static void exec_setup(ExecFix *x, const char *path, const char *extra)
{
    exec_attach(x, bt_drive("file=%s,format=raw%s", path, extra));
}

/* A blkdebug node "dbg" over @image (its options), werror=@werror, @rule armed. */
static void exec_setup_blkdebug(ExecFix *x, const char *image, BlockErrorPolicy werror,
                                const BlkdebugRule *rule)
{
    exec_attach(x, bt_blockdev("driver=blkdebug,node-name=dbg,%s", image));
    blk_set_error_policy(x->blk, BLOCK_ERR_REPORT, werror);
    g_assert_true(blkdebug_add_rule(blk_find_node(x->blk, "dbg"), rule, NULL));
}

/* werror=stop over null-co: a write that fails once with EIO, parked; the guest waits. */
static TestBlkReq exec_park_one_write(ExecFix *x)
{
    static const uint8_t data[512] = {7};
    const BlkdebugRule rule = {.op = BLOCK_OP_WRITE, .error = EIO, .once = true};
    TestBlkReq r;
    uint16_t head;
    uint32_t len;

    exec_setup_blkdebug(x, "image.driver=null-co,image.size=4M", BLOCK_ERR_STOP, &rule);
    r = testblk_submit(x->f.tvq, VIRTIO_BLK_T_OUT, 4, data, 512, false);
    virtio_blk_handle_queue(x->f.q);
    blk_drain(x->blk);
    g_assert_cmpuint(blk_parked_count(x->blk), ==, 1);
    g_assert_cmpuint(blk_exec_inflight(x->exec), ==, 1);
    g_assert_false(testvq_get_used(x->f.tvq, &head, &len));
    return r;
}

static void exec_teardown(ExecFix *x)
{
    blk_drain(x->blk);
    g_assert_cmpuint(blk_exec_inflight(x->exec), ==, 0);
    blkfix_cleanup(&x->f);
    blk_exec_free(x->exec);
    blk_unref(x->blk);
}

/* Wait until @n used elements are there (running the loop). */
static void wait_used(ExecFix *x, uint16_t want_idx)
{
    int64_t deadline = event_clock_ns() + 10000000000LL;

    while (testvq_used_idx(x->f.tvq) != want_idx) {
        g_assert_cmpint(event_clock_ns(), <, deadline);
        event_loop_run_once(bt_loop, true);
    }
}

static void test_exec_rw(void)
{
    char *path = bt_scratch_file(BLKFIX_SECTORS * 512, 6);
    ExecFix x;
    enum { N = 4 }; /* queue of 16 descriptors, 3 per request */
    TestBlkReq r[N];
    uint8_t data[4096], back[4096], host[4096];
    uint16_t head;
    uint32_t len;
    int fd;

    exec_setup(&x, path, ",cache=none,aio=io_uring");
    for (int i = 0; i < N; i++) {
        memset(data, 0x30 + i, sizeof(data));
        r[i] = testblk_submit(x.f.tvq, VIRTIO_BLK_T_OUT, (uint64_t)i * 8 + 1, data, 4096, false);
        g_assert_cmpint(r[i].head, >=, 0);
    }
    virtio_blk_handle_queue(x.f.q);
    g_assert_cmpuint(blk_exec_inflight(x.exec), ==, N);
    wait_used(&x, N);
    g_assert_cmpuint(x.notifies, >=, 1);
    /* At most one notify per loop iteration; how many iterations the four
     * completions spread over depends on timing, so only the bound is fixed. */
    g_assert_cmpuint(x.notifies, <=, N);
    for (int i = 0; i < N; i++) {
        g_assert_true(testvq_get_used(x.f.tvq, &head, &len));
        g_assert_cmpint(testblk_status(x.f.tvq, &r[i]), ==, VIRTIO_BLK_S_OK);
    }
    /* sector 1 is not 4 KiB aligned: it went through RMW on an O_DIRECT file */
    fd = open(path, O_RDONLY);
    g_assert_cmpint(pread(fd, host, 4096, 2 * 8 * 512 + 512), ==, 4096);
    close(fd);
    memset(data, 0x32, sizeof(data));
    g_assert_cmpmem(host, 4096, data, 4096);
    /* read back through the device */
    r[0] = testblk_submit(x.f.tvq, VIRTIO_BLK_T_IN, 2 * 8 + 1, NULL, 4096, false);
    virtio_blk_handle_queue(x.f.q);
    wait_used(&x, N + 1);
    g_assert_true(testvq_get_used(x.f.tvq, &head, &len));
    g_assert_cmpuint(len, ==, 4097);
    testdrv_memread(x.f.drv, r[0].data_gpa, back, 4096);
    g_assert_cmpmem(back, 4096, data, 4096);
    /* flush */
    r[0] = testblk_submit(x.f.tvq, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, false);
    virtio_blk_handle_queue(x.f.q);
    wait_used(&x, N + 2);
    g_assert_true(testvq_get_used(x.f.tvq, &head, &len));
    g_assert_cmpint(testblk_status(x.f.tvq, &r[0]), ==, VIRTIO_BLK_S_OK);
    exec_teardown(&x);
    bt_remove(path);
}

/* Guest turns the write cache off: each write gets its own flush (FUA). */
static void test_exec_writethrough(void)
{
    char *path = bt_scratch_file(BLKFIX_SECTORS * 512, 6);
    ExecFix x;
    uint8_t data[512] = {1}, wce = 0;
    BlockNode *bs;
    BlockNodeStats st;
    TestBlkReq r;
    uint16_t head;
    uint32_t len;

    exec_setup(&x, path, ",cache=writeback");
    virtio_blk_config_write(x.f.blk, offsetof(struct virtio_blk_config, wce), &wce, 1);
    g_assert_false(virtio_blk_get_writeback(x.f.blk));
    for (int i = 0; i < 3; i++) {
        r = testblk_submit(x.f.tvq, VIRTIO_BLK_T_OUT, (uint64_t)i, data, 512, false);
        virtio_blk_handle_queue(x.f.q);
        wait_used(&x, (uint16_t)(i + 1));
        g_assert_true(testvq_get_used(x.f.tvq, &head, &len));
        g_assert_cmpint(testblk_status(x.f.tvq, &r), ==, VIRTIO_BLK_S_OK);
    }
    bs = blk_find_node(x.blk, blk_root_node_name(x.blk));
    bs = blk_node_get_child(bs);
    blk_node_get_stats(bs, &st);
    g_assert_cmpuint(st.writes, ==, 3);
    g_assert_cmpuint(st.flushes, ==, 3);
    exec_teardown(&x);
    bt_remove(path);
}

static void test_exec_werror_stop(void)
{
    ExecFix x;
    TestBlkReq r = exec_park_one_write(&x);
    uint16_t head;
    uint32_t len;

    blk_resume_parked(x.blk);
    wait_used(&x, 1);
    g_assert_true(testvq_get_used(x.f.tvq, &head, &len));
    g_assert_cmpint(testblk_status(x.f.tvq, &r), ==, VIRTIO_BLK_S_OK);
    exec_teardown(&x);
}

/*
 * Device reset while a request is parked by werror=stop: blk_cancel_parked() fails
 * it, so the executor has nothing in flight and a stop/drain can finish.
 */
static void test_exec_cancel_parked(void)
{
    ExecFix x;
    TestBlkReq r = exec_park_one_write(&x);
    uint16_t head;
    uint32_t len;

    blk_cancel_parked(x.blk);
    g_assert_cmpuint(blk_parked_count(x.blk), ==, 0);
    g_assert_cmpuint(blk_exec_inflight(x.exec), ==, 0);
    wait_used(&x, 1);
    g_assert_true(testvq_get_used(x.f.tvq, &head, &len));
    g_assert_cmpint(testblk_status(x.f.tvq, &r), ==, VIRTIO_BLK_S_IOERR);
    /* Nothing left to resume. */
    blk_resume_parked(x.blk);
    g_assert_cmpuint(blk_parked_count(x.blk), ==, 0);
    exec_teardown(&x);
}

static void count_error(void *opaque, BlockBackend *blk, const BlockIOErrorEvent *ev)
{
    unsigned *stops_and_reports = opaque;

    stops_and_reports[ev->action_id == BLOCK_ERR_ACTION_STOP ? 0 : 1]++;
}

/*
 * Device reset while a write that will fail is still in flight (werror=stop):
 * quiescing reports the failure instead of parking it, so the drain the device
 * does (blk_drain, then wait for the executor, as dp-switch's bl_detach) ends,
 * the guest gets IOERR and the hook never asks for a VM stop. Before the fix
 * the request was parked during the drain and the wait never ended: the alarm
 * turns a regression into a failure instead of a hung test.
 */
static void test_exec_quiesce_inflight(gconstpointer data)
{
    const char *image = data;
    ExecFix x;
    uint8_t data_buf[512] = {7};
    TestBlkReq r;
    BlkdebugRule rule = {.op = BLOCK_OP_WRITE, .error = ENOSPC};
    unsigned actions[2] = {0, 0}; /* stop, report */
    uint16_t head;
    uint32_t len;

    exec_setup_blkdebug(&x, image, BLOCK_ERR_ENOSPC, &rule);
    blk_set_error_hook(x.blk, count_error, actions);
    r = testblk_submit(x.f.tvq, VIRTIO_BLK_T_OUT, 4, data_buf, 512, false);
    virtio_blk_handle_queue(x.f.q);
    g_assert_cmpuint(blk_in_flight(x.blk), ==, 1); /* it fails only in the drain */
    g_assert_cmpuint(blk_parked_count(x.blk), ==, 0);

    alarm(20);
    blk_set_quiescing(x.blk, true);
    blk_drain(x.blk);
    while (blk_exec_inflight(x.exec)) {
        event_loop_run_once(bt_loop, true);
    }
    alarm(0);
    g_assert_cmpuint(blk_parked_count(x.blk), ==, 0);
    g_assert_cmpuint(actions[0], ==, 0);
    g_assert_cmpuint(actions[1], ==, 1);
    wait_used(&x, 1);
    g_assert_true(testvq_get_used(x.f.tvq, &head, &len));
    g_assert_cmpint(testblk_status(x.f.tvq, &r), ==, VIRTIO_BLK_S_IOERR);

    /* Out of the reset, the policy applies again: the next failure parks. */
    blk_set_quiescing(x.blk, false);
    r = testblk_submit(x.f.tvq, VIRTIO_BLK_T_OUT, 5, data_buf, 512, false);
    virtio_blk_handle_queue(x.f.q);
    blk_drain(x.blk);
    g_assert_cmpuint(blk_parked_count(x.blk), ==, 1);
    g_assert_cmpuint(actions[0], ==, 1);
    /* A second reset: the parked one is cancelled, nothing waits. */
    blk_set_quiescing(x.blk, true);
    g_assert_cmpuint(blk_parked_count(x.blk), ==, 0);
    g_assert_cmpuint(blk_exec_inflight(x.exec), ==, 0);
    wait_used(&x, 2);
    g_assert_true(testvq_get_used(x.f.tvq, &head, &len));
    g_assert_cmpint(testblk_status(x.f.tvq, &r), ==, VIRTIO_BLK_S_IOERR);
    blkdebug_clear_rules(blk_find_node(x.blk, "dbg"));
    exec_teardown(&x);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    bt_init();
    g_test_add_func("/block/exec/rw", test_exec_rw);
    g_test_add_func("/block/exec/writethrough", test_exec_writethrough);
    g_test_add_func("/block/exec/werror-stop", test_exec_werror_stop);
    g_test_add_func("/block/exec/cancel-parked", test_exec_cancel_parked);
    g_test_add_data_func("/block/exec/quiesce-inflight/null", "image.driver=null-co,image.size=4M",
                         test_exec_quiesce_inflight);
    g_test_add_data_func("/block/exec/quiesce-inflight/null-latency",
                         "image.driver=null-co,image.size=4M,image.latency-ns=20000000",
                         test_exec_quiesce_inflight);
    return g_test_run();
}
