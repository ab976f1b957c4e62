/*
 * virtio-pci "modern" (virtio 1.x, non-transitional) transport.
 *
 * BAR 4 (64-bit, 16 KiB) holds the common configuration (0x0000), the ISR
 * byte (0x1000), the device-specific configuration (0x2000) and the notify
 * area (0x3000, one 4-byte slot per queue), each announced by a vendor
 * capability. BAR 1 holds the MSI-X table and PBA: vector 0..n are free for
 * the driver to assign to config changes and queues.
 *
 * Each queue has two eventfds that live as long as the device: the host
 * notifier (kick; registered as KVM_IOEVENTFD on the queue's notify address
 * while the device asks for it) and the guest notifier (call; bound to the
 * queue's MSI-X vector with KVM_IRQFD, or to the INTx line when MSI-X is off).
 *
 * All entry points run under the VM's device lock (vCPU MMIO exits, main
 * loop). The device model gets start/stop callbacks at DRIVER_OK and reset.
 */
#ifndef VBLK_VIRTIO_PCI_H
#define VBLK_VIRTIO_PCI_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "event/event.h"
#include "virtio/guest-notifier.h"
#include "vmm/pci.h"
#include "vmm/vmm.h"

#define VIRTIO_PCI_VENDOR_ID  0x1af4
#define VIRTIO_PCI_MAX_QUEUES 64

typedef struct VirtIOPCI VirtIOPCI;

typedef struct VirtIOPCIDeviceOps {
    uint64_t (*host_features)(void *opaque);
    /* FEATURES_OK: accept the driver's features (false: FEATURES_OK stays clear). */
    bool (*set_features)(void *opaque, uint64_t features);
    void (*config_read)(void *opaque, uint32_t off, void *buf, uint32_t len);
    void (*config_write)(void *opaque, uint32_t off, const void *buf, uint32_t len);
    /* DRIVER_OK: the enabled queues are configured. False sets DEVICE_NEEDS_RESET. */
    bool (*start)(void *opaque, GError **errp);
    /* Device reset (status 0) or teardown: stop using every queue. */
    void (*stop)(void *opaque);
    /* A notify write that reached userspace (no ioeventfd registered). */
    void (*queue_notify)(void *opaque, unsigned q);
} VirtIOPCIDeviceOps;

typedef struct VirtIOPCIConf {
    uint16_t device_id; /* virtio device type, e.g. 2 for block */
    uint32_t class_code;
    unsigned num_queues;
    uint16_t queue_size; /* maximum (and initial) size */
    uint32_t config_size;
    int slot; /* -1: first free */
    const char *name;
    /*
     * QEMU's modern-pio-notify: an I/O BAR with a second notify capability,
     * placed first in the capability list, so that a driver taking the first
     * one (Linux) kicks with a port write. On AMD SVM, and under nested
     * virtualization, a port write exits with its port and value decoded by
     * the CPU, where an MMIO kick costs KVM an instruction fetch and emulation.
     */
    bool pio_notify;
} VirtIOPCIConf;

/* Context: main thread (machine setup) */
VirtIOPCI *virtio_pci_new(Vm *vm, PciBus *bus, const VirtIOPCIConf *conf,
                          const VirtIOPCIDeviceOps *ops, void *opaque, GError **errp);
/* Context: main thread (teardown), vCPUs paused */
void virtio_pci_free(VirtIOPCI *vp);

/* Queue state as the driver configured it. Context: device lock held */
bool virtio_pci_queue_enabled(VirtIOPCI *vp, unsigned q);
/* Context: device lock held */
uint16_t virtio_pci_queue_size(VirtIOPCI *vp, unsigned q);
/* Context: device lock held */
void virtio_pci_queue_addrs(VirtIOPCI *vp, unsigned q, uint64_t *desc, uint64_t *avail,
                            uint64_t *used);
/* Context: any thread. The queue's kick eventfd. */
int virtio_pci_host_notifier(VirtIOPCI *vp, unsigned q);
/*
 * How queue @q interrupts the guest (virtio/guest-notifier.h), for the path
 * that serves it: the queue's call eventfd as bound now (queues sharing an
 * MSI-X vector share the eventfd of the first of them; with MSI-X off it
 * pulses INTx) and the ISR byte, whose bit 0 is set before each signal.
 * Take it when the queue starts (DRIVER_OK). fd is -1 for a bad @q.
 * Context: device lock held
 */
GuestNotifier virtio_pci_guest_notifier(VirtIOPCI *vp, unsigned q);

/*
 * Register (@on) or remove the queues' KVM ioeventfds. While registered,
 * kicks only set the host notifier; otherwise they reach queue_notify().
 * Context: device lock held
 */
bool virtio_pci_set_host_notifiers(VirtIOPCI *vp, bool on, GError **errp);

/* Raise the config-change interrupt (capacity changed...). Context: device lock held */
void virtio_pci_notify_config(VirtIOPCI *vp);
/* Set DEVICE_NEEDS_RESET and interrupt (protocol error). Context: device lock held */
void virtio_pci_set_needs_reset(VirtIOPCI *vp);

#endif /* VBLK_VIRTIO_PCI_H */
