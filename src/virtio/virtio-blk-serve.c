/*
 * Serving a virtio-blk queue after a kick, for every request path: pop
 * everything and hand it to the executor, then publish the used ring and
 * interrupt the guest when it asks for it. The dataplane (iothread) and the
 * block layer (main loop, devices/dp-switch.c) both use these two; only
 * their executors differ.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "virtio/virtio-blk.h"

/* Context: owner thread (hot path) */
unsigned virtio_blk_queue_process(VirtIOBlkQueue *q, unsigned *passes)
{
    unsigned popped, total = 0, n = 0;

    do {
        popped = virtio_blk_handle_queue(q);
        total += popped;
        n += popped != 0;
        /* A pass stops at the queue size; continue while it makes progress. */
    } while (popped && virtio_blk_queue_pending(q));
    if (passes) {
        *passes = n;
    }
    return total;
}

/* Context: owner thread (hot path) */
bool virtio_blk_queue_notify(VirtIOBlkQueue *q, const GuestNotifier *gn)
{
    if (!virtio_blk_queue_flush(q)) {
        return false;
    }
    guest_notifier_notify(gn);
    return true;
}
