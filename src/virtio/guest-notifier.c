/*
 * Interrupting the guest for one queue; see include/virtio/guest-notifier.h.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <glib.h>

#include "util/error-report.h"
#include "virtio/guest-notifier.h"

/* Context: control thread */
void guest_notifier_set_nonblocking(const GuestNotifier *gn)
{
    int flags;

    if (gn->fd < 0) {
        return;
    }
    flags = fcntl(gn->fd, F_GETFL);
    if (flags < 0 || fcntl(gn->fd, F_SETFL, flags | O_NONBLOCK) < 0) {
        warn_report_id(gn->id, "guest notifier: cannot make it non-blocking: %s",
                       g_strerror(errno));
    }
}

/* Context: the thread serving the queue (hot path) */
void guest_notifier_notify(const GuestNotifier *gn)
{
    static const uint64_t one = 1;

    if (gn->isr) {
        /* INTx guests read the reason from the ISR (virtio-pci 4.1.4.5). */
        __atomic_or_fetch(gn->isr, 1, __ATOMIC_SEQ_CST);
    }
    /* Best effort: a full eventfd counter still means "pending". */
    if (gn->fd >= 0 && write(gn->fd, &one, sizeof(one)) < 0 && errno != EAGAIN) {
        error_report_id(gn->id, "guest notifier write failed: %s", g_strerror(errno));
    }
}
