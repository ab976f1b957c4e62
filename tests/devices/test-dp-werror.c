/*
 * werror= / rerror= on the dataplane (issue 12), through the test driver,
 * with errors injected into the dataplane's IOQ (ioq_inject_add() rules,
 * reached through dataplane_inject_error()).
 *
 * Each case has three requests: A and C on a sector the rule fails, B on a
 * sector it does not. Checked, for every policy and for reads and writes:
 * the status byte the guest sees, the BLOCK_IO_ERROR data the drive's error
 * hook receives (one per failure), the VM stop requested through
 * virtio-blk-pci's hook and the QMP machine hooks (or not), and for "stop":
 * A and C stay in the iothread while B completes, the switch off the
 * dataplane is refused, and after resume A then C complete exactly once, in
 * that order, with the right data on disk (C's write last). Also: a held
 * request that fails again on resume stops the VM again and stays held; a
 * reset (dp_switch_stop) completes held requests with IOERR exactly once;
 * the "nth"/"once" rule semantics; the bound on failures waiting for the
 * main loop.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/virtio_blk.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "devfix.h"
#include "monitor/qmp.h"
#include "virtio-blk-pci-int.h"

#define QSIZE    64
#define SECT_BAD 8  /* sectors the rule fails (offset range) */
#define SECT_OK  16 /* a sector it does not */
#define WAIT_MS  5000

typedef struct Event {
    char *device, *node_name, *operation, *action, *reason;
    bool nospace;
} Event;

typedef struct Fix {
    DevFix dev;
    GArray *events; /* Event */
    unsigned stops; /* QMP machine stop hook calls */
} Fix;

typedef struct Req {
    TestBlkReq r;
    uint64_t sector;
    uint8_t fill; /* write: the byte written; read: what the disk holds */
} Req;

/* The drive's error hook: record the event, then virtio-blk-pci's own hook (event + VM stop). */
static void record_error(void *opaque, BlockBackend *blk, const BlockIOErrorEvent *ev)
{
    Fix *f = opaque;
    Event e = {
        .device = g_strdup(ev->device),
        .node_name = g_strdup(ev->node_name),
        .operation = g_strdup(ev->operation),
        .action = g_strdup(ev->action),
        .reason = g_strdup(ev->reason),
        .nospace = ev->nospace,
    };

    g_array_append_val(f->events, e);
    blk_pci_io_error(NULL, blk, ev);
}

static bool machine_stop(void *opaque, GError **errp)
{
    Fix *f = opaque;

    f->stops++;
    return true;
}

static void clear_event(gpointer p)
{
    Event *e = p;

    g_free(e->device);
    g_free(e->node_name);
    g_free(e->operation);
    g_free(e->action);
    g_free(e->reason);
}

/* Where fix_new() puts the image (NULL: the temporary directory). */
static const char *img_dir;

static Fix *fix_new(const char *policy, bool rerror_too)
{
    Fix *f = g_new0(Fix, 1);
    g_autofree char *opts = NULL;
    uint8_t sect[512];

    opts = g_strdup_printf("file=%%s,cache=writeback,werror=%s%s%s", policy,
                           rerror_too ? ",rerror=" : "", rerror_too ? policy : "");
    devfix_init(&f->dev,
                &(DevFixConf){.drive = opts,
                              .dir = img_dir,
                              .bytes = 1 << 20,
                              .ram_size = 16 << 20,
                              .queue_size = QSIZE,
                              .iothread = "werror-io",
                              .id = "disk0",
                              .ioq = {.logical_block_size = 512}},
                NULL);
    g_assert_cmpstr(f->dev.swconf.ioq.engine, ==, "io_uring");
    /* Known content: sector s holds the byte s. */
    for (unsigned s = 0; s < 64; s++) {
        memset(sect, (int)s, sizeof(sect));
        g_assert_cmpint(pwrite(f->dev.fd, sect, sizeof(sect), (off_t)s * 512), ==, 512);
    }
    blk_set_device_name(f->dev.backend, "disk0");
    f->events = g_array_new(FALSE, TRUE, sizeof(Event));
    g_array_set_clear_func(f->events, clear_event);
    blk_set_error_hook(f->dev.backend, record_error, f);
    qmp_machine_set_hooks(&(QmpMachineHooks){.stop = machine_stop, .opaque = f});
    qmp_run_state_set(QMP_RUN_STATE_RUNNING);
    devfix_start(&f->dev, true, NULL);
    return f;
}

static void fix_free(Fix *f)
{
    dp_switch_stop(f->dev.sw);
    dp_switch_free(f->dev.sw);
    f->dev.sw = NULL;
    qmp_machine_set_hooks(NULL);
    devfix_fini(&f->dev);
    g_array_free(f->events, TRUE);
    g_free(f);
}

/* Fail every request (of @op) that touches SECT_BAD with @error. */
static void inject(Fix *f, IOQOp op, int error)
{
    IOQInjectRule rule = {.op = (int)op, .offset = SECT_BAD * 512, .length = 512, .error = error};
    GError *err = NULL;

    g_assert_true(dataplane_inject_error(dp_switch_dataplane(f->dev.sw), &rule, &err));
    g_assert_no_error(err);
}

/* Publish (not kick) one request of @len bytes; a write fills them with @fill. */
static Req add_req_len(Fix *f, bool is_read, uint64_t sector, uint8_t fill, uint32_t len)
{
    Req r = {.sector = sector, .fill = fill};
    g_autofree uint8_t *buf = g_malloc(len);

    memset(buf, fill, len);
    r.r = testblk_prepare(f->dev.tvq[0], is_read ? VIRTIO_BLK_T_IN : VIRTIO_BLK_T_OUT, sector,
                          is_read ? NULL : buf, len);
    {
        TestBuf bufs[3] = {
            {r.r.hdr_gpa, 16, false}, {r.r.data_gpa, len, is_read}, {r.r.status_gpa, 1, true}};

        r.r.head = testvq_add_chain(f->dev.tvq[0], bufs, 3);
    }
    g_assert_cmpint(r.r.head, >=, 0);
    if (is_read) {
        testdrv_memset(f->dev.d, r.r.data_gpa, 0xee, len);
    }
    testvq_publish(f->dev.tvq[0], (uint16_t)r.r.head);
    return r;
}

static Req add_req(Fix *f, bool is_read, uint64_t sector, uint8_t fill)
{
    return add_req_len(f, is_read, sector, fill, 512);
}

/* Run the main loop (it gets the dataplane's error events) for about @ms. */
static void run_main(Fix *f, int ms)
{
    gint64 end = g_get_monotonic_time() + ms * 1000;

    while (g_get_monotonic_time() < end) {
        event_loop_run_once(f->dev.main_loop, false);
        g_main_context_iteration(NULL, FALSE); /* the werror=stop idle callback */
        g_usleep(200);
    }
}

/* The next used element, serving the main loop meanwhile; -1 if none within @ms. */
static int next_used(Fix *f, int ms)
{
    gint64 end = g_get_monotonic_time() + ms * 1000;
    uint16_t head;
    uint32_t len;

    do {
        event_loop_run_once(f->dev.main_loop, false);
        if (testvq_get_used(f->dev.tvq[0], &head, &len)) {
            return head;
        }
        g_usleep(100);
    } while (g_get_monotonic_time() < end);
    return -1;
}

static uint8_t disk_byte(Fix *f, uint64_t sector)
{
    uint8_t b[512];

    g_assert_cmpint(pread(f->dev.fd, b, sizeof(b), (off_t)sector * 512), ==, 512);
    for (unsigned i = 1; i < sizeof(b); i++) {
        g_assert_cmpuint(b[i], ==, b[0]);
    }
    return b[0];
}

static void check_read_data(Fix *f, const Req *r, uint8_t want)
{
    uint8_t b[512];

    testdrv_memread(f->dev.d, r->r.data_gpa, b, sizeof(b));
    for (unsigned i = 0; i < sizeof(b); i++) {
        g_assert_cmpuint(b[i], ==, want);
    }
}

static void wait_events(Fix *f, unsigned n)
{
    for (int i = 0; i < WAIT_MS / 10 && f->events->len < n; i++) {
        run_main(f, 10);
    }
    run_main(f, 20); /* and no more than @n */
    g_assert_cmpuint(f->events->len, ==, n);
}

static void check_event(Fix *f, unsigned i, bool is_read, const char *action, int error)
{
    Event *e = &g_array_index(f->events, Event, i);

    g_assert_cmpstr(e->device, ==, "disk0");
    g_assert_cmpstr(e->node_name, ==, blk_root_node_name(f->dev.backend));
    g_assert_cmpstr(e->operation, ==, is_read ? "read" : "write");
    g_assert_cmpstr(e->action, ==, action);
    g_assert_cmpint(e->nospace, ==, error == ENOSPC);
    g_assert_cmpstr(e->reason, ==, g_strerror(error));
}

/* The disk is fine again, `cont`: the held @a, then @c, complete once each, with OK. */
static void resume_a_then_c(Fix *f, const Req *a, const Req *c)
{
    dataplane_inject_clear(dp_switch_dataplane(f->dev.sw));
    qmp_run_state_set(QMP_RUN_STATE_RUNNING);
    dp_switch_resume(f->dev.sw);
    g_assert_cmpint(next_used(f, WAIT_MS), ==, a->r.head);
    g_assert_cmpint(next_used(f, WAIT_MS), ==, c->r.head);
    g_assert_cmpint(next_used(f, 100), ==, -1);
    g_assert_cmpuint(testblk_status(f->dev.tvq[0], &a->r), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(testblk_status(f->dev.tvq[0], &c->r), ==, VIRTIO_BLK_S_OK);
}

typedef struct Case {
    const char *policy; /* werror (and rerror for reads) */
    bool is_read;
    int error;          /* injected errno */
    const char *action; /* expected: report, ignore or stop */
} Case;

/* A, B, C as described at the top; the policy's outcome for each. */
static void test_policy(gconstpointer data)
{
    const Case *c = data;
    Fix *f = fix_new(c->policy, c->is_read);
    bool stop = !strcmp(c->action, "stop");
    uint8_t want = !strcmp(c->action, "ignore") ? VIRTIO_BLK_S_OK : VIRTIO_BLK_S_IOERR;
    Req a, b, cc;
    GError *err = NULL;
    int h;

    inject(f, c->is_read ? IOQ_OP_READ : IOQ_OP_WRITE, c->error);
    a = add_req(f, c->is_read, SECT_BAD, 0xa1);
    b = add_req(f, c->is_read, SECT_OK, 0xb2);
    cc = add_req(f, c->is_read, SECT_BAD, 0xc3);
    testvq_kick_force(f->dev.tvq[0]);

    if (!stop) {
        unsigned ok_b = 0, done = 0;

        for (int i = 0; i < 3; i++) {
            h = next_used(f, WAIT_MS);
            g_assert_cmpint(h, >=, 0);
            if (h == b.r.head) {
                ok_b++;
                g_assert_cmpuint(testblk_status(f->dev.tvq[0], &b.r), ==, VIRTIO_BLK_S_OK);
            } else {
                g_assert_true(h == a.r.head || h == cc.r.head);
                done++;
            }
        }
        g_assert_cmpuint(ok_b, ==, 1);
        g_assert_cmpuint(done, ==, 2);
        g_assert_cmpint(next_used(f, 50), ==, -1); /* each once */
        g_assert_cmpuint(testblk_status(f->dev.tvq[0], &a.r), ==, want);
        g_assert_cmpuint(testblk_status(f->dev.tvq[0], &cc.r), ==, want);
        wait_events(f, 2);
        check_event(f, 0, c->is_read, c->action, c->error);
        check_event(f, 1, c->is_read, c->action, c->error);
        g_assert_cmpuint(f->stops, ==, 0);
        g_assert_cmpint(qmp_run_state_get(), ==, QMP_RUN_STATE_RUNNING);
        g_assert_cmpuint(dataplane_held_count(dp_switch_dataplane(f->dev.sw)), ==, 0);
        if (c->is_read) {
            check_read_data(f, &b, SECT_OK);
        } else {
            /* The failed writes never reached the disk, whatever the guest was told. */
            g_assert_cmpuint(disk_byte(f, SECT_BAD), ==, SECT_BAD);
            g_assert_cmpuint(disk_byte(f, SECT_OK), ==, 0xb2);
        }
        fix_free(f);
        return;
    }

    /* stop: B completes, A and C stay in the iothread. */
    h = next_used(f, WAIT_MS);
    g_assert_cmpint(h, ==, b.r.head);
    g_assert_cmpuint(testblk_status(f->dev.tvq[0], &b.r), ==, VIRTIO_BLK_S_OK);
    wait_events(f, 2);
    check_event(f, 0, c->is_read, "stop", c->error);
    check_event(f, 1, c->is_read, "stop", c->error);
    g_assert_cmpuint(f->stops, ==, 1); /* one VM stop, through the machine's stop path */
    g_assert_cmpint(qmp_run_state_get(), ==, QMP_RUN_STATE_IO_ERROR);
    g_assert_cmpint(next_used(f, 200), ==, -1);
    g_assert_cmpuint(testblk_status(f->dev.tvq[0], &a.r), ==, 0xff);
    g_assert_cmpuint(testblk_status(f->dev.tvq[0], &cc.r), ==, 0xff);
    g_assert_cmpuint(dataplane_held_count(dp_switch_dataplane(f->dev.sw)), ==, 2);

    /* The switch does not take held requests anywhere: refused, still on the dataplane. */
    g_assert_false(dp_switch_set_dataplane(f->dev.sw, false, &err));
    g_assert_error(err, g_quark_from_static_string("vblk-dataplane-error"), EBUSY);
    g_assert_nonnull(strstr(err->message, "staying on the dataplane"));
    g_clear_error(&err);
    g_assert_true(dp_switch_is_dataplane(f->dev.sw));
    g_assert_cmpuint(dataplane_held_count(dp_switch_dataplane(f->dev.sw)), ==, 2);

    /* The disk is fine again; `cont`: A, then C, each once. */
    resume_a_then_c(f, &a, &cc);
    g_assert_cmpuint(dataplane_held_count(dp_switch_dataplane(f->dev.sw)), ==, 0);
    run_main(f, 20);
    g_assert_cmpuint(f->events->len, ==, 2);
    g_assert_cmpuint(f->stops, ==, 1);
    if (c->is_read) {
        check_read_data(f, &a, SECT_BAD);
        check_read_data(f, &cc, SECT_BAD);
        check_read_data(f, &b, SECT_OK);
    } else {
        g_assert_cmpuint(disk_byte(f, SECT_BAD), ==, 0xc3); /* C after A */
        g_assert_cmpuint(disk_byte(f, SECT_OK), ==, 0xb2);
    }
    /* Now the switch goes through. */
    g_assert_true(dp_switch_set_dataplane(f->dev.sw, false, &err));
    g_assert_no_error(err);
    fix_free(f);
}

/* A held write that fails again on `cont` stops the VM again and stays held, C behind it. */
static void test_stop_again(void)
{
    Fix *f = fix_new("stop", false);
    Req a, cc;

    inject(f, IOQ_OP_WRITE, EIO);
    a = add_req(f, false, SECT_BAD, 0xa1);
    cc = add_req(f, false, SECT_BAD, 0xc3);
    testvq_kick_force(f->dev.tvq[0]);
    wait_events(f, 2);
    g_assert_cmpuint(f->stops, ==, 1);
    g_assert_cmpuint(dataplane_held_count(dp_switch_dataplane(f->dev.sw)), ==, 2);

    /* `cont` with the disk still failing: A fails again, C is not even tried. */
    qmp_run_state_set(QMP_RUN_STATE_RUNNING);
    dp_switch_resume(f->dev.sw);
    wait_events(f, 3);
    check_event(f, 2, false, "stop", EIO);
    g_assert_cmpuint(f->stops, ==, 2);
    g_assert_cmpint(next_used(f, 100), ==, -1);
    g_assert_cmpuint(dataplane_held_count(dp_switch_dataplane(f->dev.sw)), ==, 2);
    {
        IOQStats st;

        dataplane_get_ioq_stats(dp_switch_dataplane(f->dev.sw), &st);
        g_assert_cmpuint(st.injected, ==, 3);
    }

    resume_a_then_c(f, &a, &cc);
    g_assert_cmpuint(disk_byte(f, SECT_BAD), ==, 0xc3);
    fix_free(f);
}

/* A reset while requests are held completes them with IOERR, exactly once. */
static void test_reset_while_held(void)
{
    Fix *f = fix_new("stop", true);
    Req a, r;

    inject(f, IOQ_OP_WRITE, EIO);
    inject(f, IOQ_OP_READ, EIO);
    a = add_req(f, false, SECT_BAD, 0xa1);
    r = add_req(f, true, SECT_BAD, 0);
    testvq_kick_force(f->dev.tvq[0]);
    wait_events(f, 2);
    g_assert_cmpuint(dataplane_held_count(dp_switch_dataplane(f->dev.sw)), ==, 2);

    dp_switch_stop(f->dev.sw);
    g_assert_cmpuint(dataplane_held_count(dp_switch_dataplane(f->dev.sw)), ==, 0);
    g_assert_cmpint(next_used(f, WAIT_MS), ==, a.r.head);
    g_assert_cmpint(next_used(f, WAIT_MS), ==, r.r.head);
    g_assert_cmpint(next_used(f, 100), ==, -1);
    g_assert_cmpuint(testblk_status(f->dev.tvq[0], &a.r), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(testblk_status(f->dev.tvq[0], &r.r), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(disk_byte(f, SECT_BAD), ==, SECT_BAD);
    run_main(f, 20);
    g_assert_cmpuint(f->events->len, ==, 2); /* no event for the reset itself */
    fix_free(f);
}

/* blkdebug's rule semantics in the IOQ: nth counts matching requests, once removes the rule. */
static void test_nth_once(void)
{
    Fix *f = fix_new("report", false);
    IOQInjectRule rule = {.op = IOQ_OP_WRITE, .nth = 2, .error = EIO, .once = true};
    GError *err = NULL;
    Req w[4];

    g_assert_true(dataplane_inject_error(dp_switch_dataplane(f->dev.sw), &rule, &err));
    rule.op = 42;
    g_assert_false(dataplane_inject_error(dp_switch_dataplane(f->dev.sw), &rule, &err));
    g_clear_error(&err);
    for (unsigned i = 0; i < 4; i++) {
        w[i] = add_req(f, false, SECT_OK + i, (uint8_t)(0x40 + i));
        testvq_kick_force(f->dev.tvq[0]);
        g_assert_cmpint(next_used(f, WAIT_MS), ==, w[i].r.head);
        g_assert_cmpuint(testblk_status(f->dev.tvq[0], &w[i].r), ==,
                         i == 1 ? VIRTIO_BLK_S_IOERR : VIRTIO_BLK_S_OK);
        g_assert_cmpuint(disk_byte(f, SECT_OK + i), ==, i == 1 ? SECT_OK + i : 0x40 + i);
    }
    wait_events(f, 1);
    check_event(f, 0, false, "report", EIO);
    fix_free(f);
}

/*
 * The events waiting for the main loop are bounded: with the main loop not
 * run, 112 reads fail (rerror=report, each completed with IOERR), then one
 * write fails under werror=stop. Once the main loop runs it gets the first
 * DATAPLANE_ERR_EVENTS_MAX reports and the stop (the VM stops once), and the
 * write stays held.
 */
static void test_bounded_events(void)
{
    Fix *f = fix_new("stop", false);
    unsigned failed = 0;
    Req w;

    inject(f, IOQ_OP_READ, EIO);
    inject(f, IOQ_OP_WRITE, EIO);
    while (failed < 112) { /* 48 beyond the bound */
        Req r[16];

        for (unsigned i = 0; i < G_N_ELEMENTS(r); i++) {
            r[i] = add_req(f, true, SECT_BAD, SECT_BAD);
        }
        testvq_kick_force(f->dev.tvq[0]);
        for (unsigned i = 0; i < G_N_ELEMENTS(r); i++) {
            gint64 end = g_get_monotonic_time() + WAIT_MS * 1000;
            uint16_t head;
            uint32_t len;

            while (!testvq_get_used(f->dev.tvq[0], &head, &len)) { /* main loop not run */
                g_assert_cmpint(g_get_monotonic_time(), <, end);
                g_usleep(100);
            }
            g_assert_cmpint(head, ==, r[i].r.head);
            g_assert_cmpuint(testblk_status(f->dev.tvq[0], &r[i].r), ==, VIRTIO_BLK_S_IOERR);
            failed++;
        }
    }
    w = add_req(f, false, SECT_BAD, 0x77);
    testvq_kick_force(f->dev.tvq[0]);
    g_usleep(50 * 1000);
    g_assert_cmpuint(f->events->len, ==, 0);
    g_test_expect_message(NULL, G_LOG_LEVEL_WARNING,
                          "dataplane: 48 more I/O error events than the 64 *not reported");
    wait_events(f, DATAPLANE_ERR_EVENTS_MAX + 1);
    g_test_assert_expected_messages();
    for (unsigned i = 0; i < DATAPLANE_ERR_EVENTS_MAX; i++) {
        check_event(f, i, true, "report", EIO);
    }
    check_event(f, DATAPLANE_ERR_EVENTS_MAX, false, "stop", EIO);
    g_assert_cmpuint(f->stops, ==, 1);
    g_assert_cmpint(next_used(f, 100), ==, -1); /* the write is held */
    g_assert_cmpuint(disk_byte(f, SECT_BAD), ==, SECT_BAD);
    (void)w;
    fix_free(f);
}

/*
 * A real full filesystem (opt-in: VBLK_TEST_SMALL_FS names a directory on a
 * small filesystem, e.g. a 2 MiB tmpfs): a filler file leaves 256 KiB free,
 * the guest writes 1 MiB in 16 requests of 64 KiB under the default
 * werror=enospc. The first ones complete, the rest fail with ENOSPC (a short
 * write is ENOSPC too) and are held, the VM stops once; after the filler is
 * deleted, resume completes every held write once, in submission order, and
 * the image holds all 16.
 */
static void test_enospc_full_fs(void)
{
    const char *dir = g_getenv("VBLK_TEST_SMALL_FS");
    g_autofree char *filler = NULL;
    struct statvfs sv;
    uint64_t avail;
    Req w[16];
    bool done[16] = {false};
    unsigned ok = 0, held, last = 0;
    int fd;
    Fix *f;

    if (!dir) {
        g_test_skip("VBLK_TEST_SMALL_FS (a directory on a small filesystem) is not set");
        return;
    }
    img_dir = dir;
    f = fix_new("enospc", false);
    img_dir = NULL;
    g_assert_cmpint(statvfs(dir, &sv), ==, 0);
    avail = (uint64_t)sv.f_bavail * sv.f_frsize;
    g_assert_cmpuint(avail, >, 512 * 1024);
    g_assert_cmpuint(avail, <, 64 << 20);
    filler = g_build_filename(dir, "vblk-werror-filler", NULL);
    fd = open(filler, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    g_assert_cmpint(fd, >=, 0);
    {
        g_autofree uint8_t *z = g_malloc0(64 * 1024);

        for (uint64_t left = avail - 256 * 1024; left;) {
            size_t n = MIN(left, 64 * 1024);
            ssize_t r = write(fd, z, n);

            g_assert_cmpint(r, >, 0);
            left -= (uint64_t)r;
        }
    }
    close(fd);

    for (unsigned i = 0; i < 16; i++) {
        w[i] = add_req_len(f, false, i * 128, (uint8_t)(0x10 + i), 64 * 1024);
    }
    testvq_kick_force(f->dev.tvq[0]);
    for (int i = 0; i < WAIT_MS / 10 && !f->events->len; i++) {
        run_main(f, 10); /* the first failure; more follow */
    }
    run_main(f, 300);
    for (int h; (h = next_used(f, 200)) >= 0;) {
        for (unsigned i = 0; i < 16; i++) {
            if (w[i].r.head == h) {
                g_assert_false(done[i]);
                done[i] = true;
                ok++;
                g_assert_cmpuint(testblk_status(f->dev.tvq[0], &w[i].r), ==, VIRTIO_BLK_S_OK);
            }
        }
    }
    held = dataplane_held_count(dp_switch_dataplane(f->dev.sw));
    g_test_message("full filesystem: %u writes completed, %u held, %u events", ok, held,
                   f->events->len);
    g_assert_cmpuint(held, >, 0);
    g_assert_cmpuint(ok + held, ==, 16);
    g_assert_cmpuint(f->events->len, ==, held);
    for (unsigned i = 0; i < f->events->len; i++) {
        check_event(f, i, false, "stop", ENOSPC);
    }
    g_assert_cmpuint(f->stops, ==, 1);
    g_assert_cmpint(qmp_run_state_get(), ==, QMP_RUN_STATE_IO_ERROR);

    /* Room again, `cont`: the held writes complete once each, in submission order. */
    g_assert_cmpint(unlink(filler), ==, 0);
    qmp_run_state_set(QMP_RUN_STATE_RUNNING);
    dp_switch_resume(f->dev.sw);
    for (unsigned k = 0; k < held; k++) {
        int h = next_used(f, WAIT_MS);
        unsigned i;

        g_assert_cmpint(h, >=, 0);
        for (i = 0; i < 16 && w[i].r.head != h; i++) {
        }
        g_assert_cmpuint(i, <, 16);
        g_assert_false(done[i]);
        g_assert_true(k == 0 || i > last);
        last = i;
        done[i] = true;
        g_assert_cmpuint(testblk_status(f->dev.tvq[0], &w[i].r), ==, VIRTIO_BLK_S_OK);
    }
    g_assert_cmpint(next_used(f, 100), ==, -1);
    g_assert_cmpuint(dataplane_held_count(dp_switch_dataplane(f->dev.sw)), ==, 0);
    for (unsigned i = 0; i < 16; i++) {
        g_autofree uint8_t *b = g_malloc(64 * 1024);

        g_assert_true(done[i]);
        g_assert_cmpint(pread(f->dev.fd, b, 64 * 1024, (off_t)i * 65536), ==, 64 * 1024);
        for (unsigned j = 0; j < 64 * 1024; j++) {
            g_assert_cmpuint(b[j], ==, 0x10 + i);
        }
    }
    fix_free(f);
}

int main(int argc, char **argv)
{
    static const Case cases[] = {
        {"report", false, EIO, "report"},  {"report", true, EIO, "report"},
        {"ignore", false, EIO, "ignore"},  {"ignore", true, EIO, "ignore"},
        {"stop", false, EIO, "stop"},      {"stop", true, EIO, "stop"},
        {"enospc", false, ENOSPC, "stop"}, {"enospc", false, EIO, "report"},
    };

    g_test_init(&argc, &argv, NULL);
    for (unsigned i = 0; i < G_N_ELEMENTS(cases); i++) {
        g_autofree char *p = g_strdup_printf("/dp-werror/%s/%s/%s", cases[i].policy,
                                             cases[i].is_read ? "read" : "write",
                                             cases[i].error == ENOSPC ? "ENOSPC" : "EIO");

        g_test_add_data_func(p, &cases[i], test_policy);
    }
    g_test_add_func("/dp-werror/stop-again", test_stop_again);
    g_test_add_func("/dp-werror/reset-while-held", test_reset_while_held);
    g_test_add_func("/dp-werror/nth-once", test_nth_once);
    g_test_add_func("/dp-werror/bounded-events", test_bounded_events);
    g_test_add_func("/dp-werror/enospc-full-fs", test_enospc_full_fs);
    return g_test_run();
}
