/*
 * GuestNotifier (virtio/guest-notifier.h) and the queue-serving pair every
 * request path uses (virtio_blk_queue_process / virtio_blk_queue_notify).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "blkfix.h"
#include "util/error-report.h"

static uint64_t take(int fd)
{
    uint64_t v = 0;

    if (read(fd, &v, sizeof(v)) != sizeof(v)) {
        return 0;
    }
    return v;
}

/* Diagnostics go to a memory stream for the duration of a test. */
typedef struct Capture {
    char *buf;
    size_t len;
    FILE *f;
} Capture;

static void capture_start(Capture *c)
{
    memset(c, 0, sizeof(*c));
    c->f = open_memstream(&c->buf, &c->len);
    g_assert_nonnull(c->f);
    error_report_set_stream(c->f);
}

static void capture_stop(Capture *c)
{
    error_report_set_stream(NULL);
    fclose(c->f);
}

static void test_notify(void)
{
    uint8_t isr = 0x2; /* the config bit, left alone */
    int efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    GuestNotifier gn = {.fd = efd, .isr = &isr, .id = "disk0"};
    GuestNotifier no_fd = {.fd = -1, .isr = &isr};
    uint64_t full = UINT64_MAX - 1;
    int p[2];
    Capture c;

    g_assert_cmpint(efd, >=, 0);
    capture_start(&c);
    guest_notifier_notify(&gn);
    g_assert_cmphex(isr, ==, 0x3);
    g_assert_cmpuint(take(efd), ==, 1);

    guest_notifier_notify(&gn);
    guest_notifier_notify(&gn);
    g_assert_cmpuint(take(efd), ==, 2);

    /* No fd (e.g. no call fd yet): only the ISR. */
    isr = 0;
    guest_notifier_notify(&no_fd);
    g_assert_cmphex(isr, ==, 0x1);

    /* A saturated counter is still "pending": EAGAIN is not an error. */
    g_assert_cmpint(write(efd, &full, sizeof(full)), ==, sizeof(full));
    guest_notifier_notify(&gn);
    fflush(c.f);
    g_assert_cmpuint(c.len, ==, 0);

    /* A real failure is reported once per write, with the device id. */
    g_assert_cmpint(pipe(p), ==, 0);
    gn.fd = p[0]; /* the read end: EBADF on write */
    guest_notifier_notify(&gn);
    capture_stop(&c);
    g_assert_nonnull(strstr(c.buf, "disk0"));
    g_assert_nonnull(strstr(c.buf, "guest notifier write failed"));
    free(c.buf);
    close(p[0]);
    close(p[1]);
    close(efd);
}

static void test_serve(void)
{
    BlkFix f;
    uint8_t isr = 0;
    GuestNotifier gn;
    unsigned passes = 99;
    uint16_t head;
    uint32_t len;

    blkfix_init(&f, NULL);
    gn = (GuestNotifier){.fd = testvq_call_fd(f.tvq), .isr = &isr};
    guest_notifier_set_nonblocking(&gn);
    testvq_set_auto_used_event(f.tvq, false);

    /* Three requests completed inline: popped in one pass, one interrupt. */
    for (int i = 0; i < 3; i++) {
        testblk_submit(f.tvq, VIRTIO_BLK_T_GET_ID, 0, NULL, 20, false);
    }
    g_assert_cmpuint(virtio_blk_queue_process(f.q, &passes), ==, 3);
    g_assert_cmpuint(passes, ==, 1);
    g_assert_cmpuint(testvq_take_calls(f.tvq), ==, 0); /* not before the notify */
    g_assert_true(virtio_blk_queue_notify(f.q, &gn));
    g_assert_cmpuint(testvq_take_calls(f.tvq), ==, 1);
    g_assert_cmphex(isr, ==, 1);
    g_assert_cmpuint(testvq_used_idx(f.tvq), ==, 3);
    while (testvq_get_used(f.tvq, &head, &len)) {
    }

    /* EVENT_IDX: the driver asks for an interrupt only at used index 10. */
    isr = 0;
    testvq_set_used_event(f.tvq, 9);
    testblk_submit(f.tvq, VIRTIO_BLK_T_GET_ID, 0, NULL, 20, false);
    g_assert_cmpuint(virtio_blk_queue_process(f.q, NULL), ==, 1);
    g_assert_false(virtio_blk_queue_notify(f.q, &gn));
    g_assert_cmpuint(testvq_take_calls(f.tvq), ==, 0);
    g_assert_cmphex(isr, ==, 0);
    g_assert_cmpuint(testvq_used_idx(f.tvq), ==, 4); /* published all the same */

    /* Nothing new: no pass pops, no interrupt. */
    g_assert_cmpuint(virtio_blk_queue_process(f.q, &passes), ==, 0);
    g_assert_cmpuint(passes, ==, 0);
    g_assert_false(virtio_blk_queue_notify(f.q, &gn));
    blkfix_cleanup(&f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/guest-notifier/notify", test_notify);
    g_test_add_func("/guest-notifier/serve-queue", test_serve);
    return g_test_run();
}
