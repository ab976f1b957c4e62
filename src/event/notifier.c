/*
 * EventNotifier: an eventfd used as a doorbell between threads (and, later,
 * as KVM ioeventfd/irqfd).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "event/event.h"

/* Context: any thread. */
bool event_notifier_init(EventNotifier *e, bool active, GError **errp)
{
    e->fd = eventfd(active ? 1 : 0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (e->fd < 0) {
        g_set_error(errp, G_FILE_ERROR, g_file_error_from_errno(errno), "cannot create eventfd: %s",
                    g_strerror(errno));
        return false;
    }
    return true;
}

/* Context: any thread, once no other thread uses @e. */
void event_notifier_cleanup(EventNotifier *e)
{
    if (e->fd > 0) {
        close(e->fd);
    }
    e->fd = -1;
}

/* Context: any thread. */
int event_notifier_set(EventNotifier *e)
{
    const uint64_t one = 1;
    ssize_t n;

    do {
        n = write(e->fd, &one, sizeof(one));
    } while (n < 0 && errno == EINTR);
    /* EAGAIN means the counter is saturated: it is set, which is all we want. */
    if (n < 0 && errno != EAGAIN) {
        return -errno;
    }
    return 0;
}

/* Context: any thread. */
bool event_notifier_test_and_clear(EventNotifier *e)
{
    uint64_t value;
    ssize_t n;

    do {
        n = read(e->fd, &value, sizeof(value));
    } while (n < 0 && errno == EINTR);
    return n == sizeof(value) && value != 0;
}

/* Context: any thread. */
int event_notifier_get_fd(const EventNotifier *e)
{
    return e->fd;
}
