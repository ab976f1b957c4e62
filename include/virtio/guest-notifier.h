/*
 * GuestNotifier: how one virtqueue interrupts its guest, as the transport
 * gives it. The request path (dataplane iothread, block layer in the main
 * loop) only calls guest_notifier_notify(); it knows nothing of KVM, PCI or
 * vhost-user.
 *
 *   virtio-pci: the queue's call eventfd (bound to its MSI-X vector with
 *       KVM_IRQFD, or to the INTx line) and the device's ISR byte, whose
 *       bit 0 is set before each signal (INTx guests read the reason there,
 *       virtio 1.2 section 4.1.4.5);
 *   vhost-user: the call fd the front-end gave for the queue, no ISR.
 *
 * The struct is a value: the transport fills one in when the queue starts,
 * and the request path keeps its own copy while it serves the queue.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_GUEST_NOTIFIER_H
#define VBLK_GUEST_NOTIFIER_H

#include <stdint.h>

typedef struct GuestNotifier {
    int fd;         /* eventfd written once per interrupt; -1: none */
    uint8_t *isr;   /* optional: ISR byte, bit 0 ORed in atomically before the write */
    const char *id; /* device id for diagnostics (may be NULL); must outlive the notifier */
} GuestNotifier;

/*
 * Make the eventfd write never block (a full counter still means "pending").
 * Context: control thread, before the queue is served
 */
void guest_notifier_set_nonblocking(const GuestNotifier *gn);

/*
 * Interrupt the guest: set ISR bit 0 (if any), then write the eventfd.
 * Lock-free and allocation-free; a failed write is reported (error_report_id)
 * and otherwise ignored.
 * Context: the thread serving the queue (hot path)
 */
void guest_notifier_notify(const GuestNotifier *gn);

#endif /* VBLK_GUEST_NOTIFIER_H */
