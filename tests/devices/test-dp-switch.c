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

#include "devfix.h"
#include "util/debug-state.h"
#include "virtio-blk-pci-int.h"

#define NQ      2
#define QSIZE   128
#define DEPTH   32   /* requests in flight per queue (3 descriptors each) */
#define REGION  4096 /* sectors per queue */
#define TIMEOUT (120 * G_USEC_PER_SEC)

typedef struct Guest {
    DevFix *fix;
    DevFixWriter w;
} Guest;

static bool guest_stopping(void *opaque)
{
    return devfix_guests_stopping(opaque);
}

static gpointer guest_thread(gpointer opaque)
{
    Guest *g = opaque;

    devfix_writer_run(&g->w, guest_stopping, g->fix);
    devfix_guest_done(g->fix);
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

/* Whether @dir takes O_DIRECT (tmpfs does not). */
static bool have_o_direct(const char *dir)
{
    g_autofree char *path = g_build_filename(dir, "vblk-switch-XXXXXX", NULL);
    int fd = g_mkstemp(path), dfd;

    g_assert_cmpint(fd, >=, 0);
    close(fd);
    dfd = open(path, O_RDWR | O_DIRECT);
    if (dfd >= 0) {
        close(dfd);
    }
    unlink(path);
    return dfd >= 0;
}

static void test_switch_stress(gconstpointer data)
{
    const char *engine = data;
    g_autofree char *drive = NULL;
    DevFix f;
    GError *err = NULL;
    DpSwitch *sw;
    DpSwitchStats st;
    Guest g[NQ];
    unsigned switches = 0, target = 10000;
    VirtIOBlkPCI *dev;
    bool dump_stop = false;
    GThread *dumper;
    char *text, *line;
    uint64_t popped[NQ];

    if (!have_o_direct("/var/tmp")) {
        g_test_skip("no O_DIRECT on /var/tmp");
        return;
    }
    drive = g_strdup_printf("file=%%s,cache=none,aio=%s",
                            strcmp(engine, "native") ? "io_uring" : "native");
    devfix_init(&f,
                &(DevFixConf){.drive = drive,
                              .dir = "/var/tmp",
                              .bytes = (uint64_t)NQ * REGION * 512,
                              .ram_size = 32 << 20,
                              .num_queues = NQ,
                              .queue_size = QSIZE,
                              .iothread = "switch-io",
                              .ioq = {.engine = engine, .logical_block_size = 512}},
                NULL);
    g_assert_true(f.swconf.ioq.direct);
    sw = f.sw;
    devfix_start(&f, true, NULL);

    /* The device model's dump, as virtio-blk-pci registers it, taken all along from a thread. */
    dev = g_new0(VirtIOBlkPCI, 1);
    dev->id = "disk-t";
    pthread_mutex_init(&dev->debug_lock, NULL);
    dev->debug_sw = sw;
    dev->debug_nq = NQ;
    debug_state_register(blk_pci_debug_state, dev);
    dumper = g_thread_new("dump", dump_thread, &dump_stop);

    for (unsigned i = 0; i < NQ; i++) {
        g[i].fix = &f;
        devfix_writer_init(&g[i].w, f.d, f.tvq[i], i, QSIZE, DEPTH, REGION, TIMEOUT);
        devfix_guest_start(&f, guest_thread, &g[i]);
    }
    while (switches < target) {
        /* The main loop serves the block-layer path between switches. */
        for (int k = 0; k < 3; k++) {
            event_loop_run_once(f.main_loop, false);
        }
        g_assert_true(dp_switch_set_dataplane(sw, !dp_switch_is_dataplane(sw), &err));
        g_assert_true(
            dp_switch_set_dataplane(sw, dp_switch_is_dataplane(sw), &err)); /* idempotent */
        switches++;
    }
    devfix_stop_guests(&f);
    dp_switch_get_stats(sw, &st);
    g_assert_cmpuint(st.switches, ==, target);
    g_test_message("%s: %u switches; %" PRIu64 " + %" PRIu64 " requests (%" PRIu64 " + %" PRIu64
                   " flushes); stall mean %.1f us, max %.1f us",
                   engine, switches, g[0].w.completed, g[1].w.completed, g[0].w.flushes,
                   g[1].w.flushes,
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
        g_assert_cmpuint(popped[i], <=, g[i].w.completed);
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
    f.sw = NULL;

    /* The file holds the last completed write of every sector. */
    for (unsigned i = 0; i < NQ; i++) {
        g_assert_cmpuint(g[i].w.completed, >, 1000);
        devfix_writer_check(&g[i].w, f.fd);
    }
    devfix_fini(&f);
}

/*
 * werror=stop on the block-layer path: a request parked before a switch to
 * the dataplane belongs to the block layer until 'cont'. The switch is
 * refused (it used to wait for it forever), the request completes after the
 * resume, and then the switch succeeds.
 */
static void test_switch_parked(void)
{
    DevFix f;
    GError *err = NULL;
    uint64_t buf;
    BlkdebugRule rule = {.op = BLOCK_OP_WRITE, .nth = 1, .error = EIO, .once = true};
    uint16_t head;
    uint32_t len;
    uint8_t got[512];
    int hd;

    alarm(60); /* a regression hangs in the switch: fail instead */
    devfix_init(&f,
                &(DevFixConf){.drive = "driver=raw,node-name=top,file.driver=blkdebug,"
                                       "file.node-name=dbg,file.image.driver=file,"
                                       "file.image.filename=%s",
                              .dir = "/var/tmp",
                              .bytes = 1 << 20,
                              .ram_size = 16 << 20,
                              .queue_size = QSIZE,
                              .iothread = "parked-io",
                              .ioq = {.engine = "io_uring", .logical_block_size = 512}},
                NULL);
    g_assert_false(f.swconf.ioq.direct);
    blk_set_error_policy(f.backend, BLOCK_ERR_REPORT, BLOCK_ERR_STOP);
    g_assert_true(blkdebug_add_rule(blk_find_node(f.backend, "dbg"), &rule, &err));
    devfix_start(&f, false, NULL);

    /* The first write fails once and is parked. */
    buf = testdrv_alloc(f.d, 2048, 512);
    hd = devfix_submit_write(f.d, f.tvq[0], buf, 8, 0xa5);
    for (int i = 0; i < 10000 && blk_parked_count(f.backend) == 0; i++) {
        event_loop_run_once(f.main_loop, false);
        g_usleep(100);
    }
    g_assert_cmpuint(blk_parked_count(f.backend), ==, 1);
    g_assert_false(testvq_get_used(f.tvq[0], &head, &len));

    g_assert_false(dp_switch_set_dataplane(f.sw, true, &err));
    g_assert_nonnull(err);
    g_assert_nonnull(strstr(err->message, "wait for 'cont'"));
    g_clear_error(&err);
    g_assert_false(dp_switch_is_dataplane(f.sw));

    /* 'cont': the request is resubmitted and completes on the block layer. */
    blk_resume_parked(f.backend);
    for (int i = 0; i < 10000 && !testvq_get_used(f.tvq[0], &head, &len); i++) {
        event_loop_run_once(f.main_loop, false);
        g_usleep(100);
    }
    g_assert_cmpint(head, ==, hd);
    g_assert_cmpuint(testdrv_readb(f.d, buf + 1024), ==, VIRTIO_BLK_S_OK);

    /* Nothing parked: the switch goes through, and the dataplane serves the next write. */
    g_assert_true(dp_switch_set_dataplane(f.sw, true, &err));
    g_assert_no_error(err);
    hd = devfix_submit_write(f.d, f.tvq[0], buf, 9, 0x5a);
    for (int i = 0; i < 200 && !testvq_get_used(f.tvq[0], &head, &len); i++) {
        testvq_wait_used(f.tvq[0], 50);
    }
    g_assert_cmpint(head, ==, hd);
    g_assert_cmpuint(testdrv_readb(f.d, buf + 1024), ==, VIRTIO_BLK_S_OK);
    dp_switch_stop(f.sw);
    dp_switch_free(f.sw);
    f.sw = NULL;

    g_assert_cmpint(pread(f.fd, got, 512, 8 * 512), ==, 512);
    for (int i = 0; i < 512; i++) {
        g_assert_cmpuint(got[i], ==, 0xa5);
    }
    g_assert_cmpint(pread(f.fd, got, 512, 9 * 512), ==, 512);
    for (int i = 0; i < 512; i++) {
        g_assert_cmpuint(got[i], ==, 0x5a);
    }
    alarm(0);
    devfix_fini(&f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/dp-switch/native/10000-switches", "native", test_switch_stress);
    g_test_add_data_func("/dp-switch/io_uring/10000-switches", "io_uring", test_switch_stress);
    g_test_add_func("/dp-switch/werror-stop-parked", test_switch_parked);
    return g_test_run();
}
