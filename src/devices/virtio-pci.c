/*
 * virtio-pci modern transport: capabilities, common configuration, ISR,
 * notify area, MSI-X vectors and the per-queue eventfds. See
 * include/devices/virtio-pci.h for the layout.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <string.h>
#include <unistd.h>
#include <linux/pci_regs.h>
#include <linux/virtio_config.h>
#include <linux/virtio_pci.h>

#include "devices/virtio-pci.h"
#include "util/error-report.h"

#define VP_BAR_MSIX     1
#define VP_BAR_MODERN   4
#define VP_BAR_SIZE     0x4000
#define VP_COMMON_OFF   0x0000
#define VP_ISR_OFF      0x1000
#define VP_DEVICE_OFF   0x2000
#define VP_NOTIFY_OFF   0x3000
#define VP_NOTIFY_MULT  4
#define VP_BAR_PIO      2 /* modern-pio-notify's I/O BAR (QEMU's index too) */
#define VP_PIO_MULT     2 /* a 16-bit port per queue */
#define VP_MSIX_BAR_SZ  0x1000
#define VP_MSIX_PBA_OFF 0x800

typedef struct VPQueue {
    uint16_t size;
    uint16_t vector;
    bool enabled;
    uint64_t desc, avail, used;
    EventNotifier host;  /* kick */
    EventNotifier guest; /* call */
    bool ioeventfd;      /* host notifier registered with KVM (MMIO notify) */
    bool ioeventfd_pio;  /* ... and on the I/O BAR's port (pio_notify) */
    int guest_fd;        /* fd attached to the vector (may be another queue's) */
    bool intx_irqfd;     /* guest notifier bound to the INTx GSI */
} VPQueue;

struct VirtIOPCI {
    PciDevice pci; /* first: PciDevice callbacks cast back */
    Vm *vm;
    VirtIOPCIConf conf;
    const VirtIOPCIDeviceOps *ops;
    void *opaque;
    uint32_t dfselect, gfselect;
    uint64_t guest_features;
    uint16_t config_vector;
    uint8_t status;
    uint8_t generation;
    uint16_t queue_select;
    uint8_t isr;          /* atomic: GuestNotifiers set bit 0 (any thread) */
    EventNotifier config; /* config-change interrupt, bound to the config vector */
    bool want_ioeventfd;
    uint64_t bar_gpa; /* modern BAR address while mapped, else 0 */
    uint64_t pio_base; /* I/O BAR's first port while decoded, else 0 */
    VPQueue q[];
};

static VirtIOPCI *to_vp(PciDevice *dev)
{
    return (VirtIOPCI *)dev;
}

static VPQueue *selected(VirtIOPCI *vp)
{
    return vp->queue_select < vp->conf.num_queues ? &vp->q[vp->queue_select] : NULL;
}

/* ---- interrupts ---- */

/* Attach each queue's call eventfd to its MSI-X vector, or INTx when MSI-X is off. */
static void vp_update_guest_notifiers(VirtIOPCI *vp)
{
    GError *err = NULL;
    unsigned gsi = pci_intx_gsi(&vp->pci);
    bool msix = msix_enabled(&vp->pci);

    for (unsigned i = 0; i < vp->conf.num_queues; i++) {
        VPQueue *q = &vp->q[i];

        q->guest_fd = q->guest.fd;
        if (q->vector == VIRTIO_MSI_NO_VECTOR) {
            continue;
        }
        if (q->vector == vp->config_vector) {
            q->guest_fd = vp->config.fd;
            continue;
        }
        /* Queues sharing a vector share the first queue's eventfd. */
        for (unsigned j = 0; j < i; j++) {
            if (vp->q[j].vector == q->vector) {
                q->guest_fd = vp->q[j].guest_fd;
                break;
            }
        }
    }
    for (unsigned i = 0; i < vp->conf.num_queues; i++) {
        VPQueue *q = &vp->q[i];
        bool want_intx = !msix && q->enabled;

        if (q->intx_irqfd && !want_intx) {
            vm_irqfd_deassign(vp->vm, q->guest.fd, gsi, NULL);
            q->intx_irqfd = false;
        } else if (!q->intx_irqfd && want_intx) {
            /*
             * INTx without a resample fd: each signal pulses the line, which
             * the guest sees as one interrupt; the ISR byte tells it why.
             */
            q->intx_irqfd = vm_irqfd_assign(vp->vm, q->guest.fd, gsi, -1, &err);
            if (!q->intx_irqfd) {
                error_report_id(vp->conf.name, "INTx irqfd: %s", err->message);
                g_clear_error(&err);
            }
        }
        if (q->vector != VIRTIO_MSI_NO_VECTOR && q->guest_fd == q->guest.fd) {
            msix_set_notifier(&vp->pci, q->vector, q->guest.fd);
        }
    }
    if (vp->config_vector != VIRTIO_MSI_NO_VECTOR) {
        msix_set_notifier(&vp->pci, vp->config_vector, vp->config.fd);
    }
}

static void vp_set_vector(VirtIOPCI *vp, uint16_t *slot, uint16_t vec)
{
    unsigned nvec = vp->conf.num_queues + 1;

    if (*slot != VIRTIO_MSI_NO_VECTOR) {
        msix_set_notifier(&vp->pci, *slot, -1);
    }
    /* Spec: an out-of-range vector reads back as NO_VECTOR. */
    *slot = vec < nvec ? vec : VIRTIO_MSI_NO_VECTOR;
    vp_update_guest_notifiers(vp);
}

/* Context: device lock held */
void virtio_pci_notify_config(VirtIOPCI *vp)
{
    __atomic_or_fetch(&vp->isr, VIRTIO_PCI_ISR_CONFIG, __ATOMIC_SEQ_CST);
    __atomic_add_fetch(&vp->generation, 1, __ATOMIC_SEQ_CST);
    if (msix_enabled(&vp->pci)) {
        if (vp->config_vector != VIRTIO_MSI_NO_VECTOR) {
            event_notifier_set(&vp->config);
        }
    } else {
        pci_set_irq(&vp->pci, true);
    }
}

/*
 * Context: any thread, lock or not (a queue breaks in the iothread, which must
 * not wait for the device lock). Only atomics and an eventfd write: with MSI-X
 * the config eventfd is bound to the config vector; with INTx the guest sees
 * the status bit at its next config access.
 */
void virtio_pci_set_needs_reset(VirtIOPCI *vp)
{
    uint8_t old = __atomic_fetch_or(&vp->status, VIRTIO_CONFIG_S_NEEDS_RESET, __ATOMIC_SEQ_CST);

    if (!(old & VIRTIO_CONFIG_S_NEEDS_RESET)) {
        __atomic_or_fetch(&vp->isr, VIRTIO_PCI_ISR_CONFIG, __ATOMIC_SEQ_CST);
        __atomic_add_fetch(&vp->generation, 1, __ATOMIC_SEQ_CST);
        if (__atomic_load_n(&vp->config_vector, __ATOMIC_RELAXED) != VIRTIO_MSI_NO_VECTOR) {
            event_notifier_set(&vp->config);
        }
    }
}

/* ---- host notifiers ---- */

static uint64_t notify_gpa(VirtIOPCI *vp, unsigned i)
{
    return vp->bar_gpa + VP_NOTIFY_OFF + (uint64_t)i * VP_NOTIFY_MULT;
}

static uint64_t notify_port(VirtIOPCI *vp, unsigned i)
{
    return vp->pio_base + (uint64_t)i * VP_PIO_MULT;
}

/* One doorbell's ioeventfd: registered when @on and the BAR is decoded (@addr valid). */
static bool vp_ioeventfd_sync(VirtIOPCI *vp, bool *registered, bool on, bool decoded, uint64_t addr,
                              bool pio, int fd, GError **errp)
{
    if (on && !*registered && decoded) {
        *registered = vm_ioeventfd_add(vp->vm, addr, 0, pio, fd, errp);
        return *registered;
    }
    if (!on && *registered) {
        vm_ioeventfd_del(vp->vm, addr, 0, pio, fd, NULL);
        *registered = false;
    }
    return true;
}

/* Both doorbells of each queue (MMIO, and the port with pio_notify) on its kick eventfd. */
static bool vp_ioeventfds(VirtIOPCI *vp, bool on, GError **errp)
{
    bool ok = true;

    for (unsigned i = 0; i < vp->conf.num_queues; i++) {
        VPQueue *q = &vp->q[i];

        ok &= vp_ioeventfd_sync(vp, &q->ioeventfd, on, vp->bar_gpa != 0, notify_gpa(vp, i), false,
                                q->host.fd, ok ? errp : NULL);
        ok &= vp_ioeventfd_sync(vp, &q->ioeventfd_pio, on, vp->pio_base != 0, notify_port(vp, i),
                                true, q->host.fd, ok ? errp : NULL);
    }
    return ok;
}

/* Context: device lock held */
bool virtio_pci_set_host_notifiers(VirtIOPCI *vp, bool on, GError **errp)
{
    vp->want_ioeventfd = on;
    return vp_ioeventfds(vp, on, errp);
}

static void vp_bar_mapped(PciDevice *dev, unsigned bar, uint64_t gpa, bool mapped)
{
    VirtIOPCI *vp = to_vp(dev);

    if (bar != VP_BAR_MODERN && bar != VP_BAR_PIO) {
        return;
    }
    /* KVM matches notify writes by address: follow the BAR. */
    vp_ioeventfds(vp, false, NULL);
    if (bar == VP_BAR_PIO) {
        vp->pio_base = mapped ? gpa : 0;
    } else {
        vp->bar_gpa = mapped ? gpa : 0;
    }
    if (vp->want_ioeventfd && mapped) {
        GError *err = NULL;

        if (!vp_ioeventfds(vp, true, &err)) {
            error_report_id(vp->conf.name, "ioeventfd: %s", err->message);
            g_error_free(err);
        }
    }
}

/* ---- status and reset ---- */

static void vp_reset(VirtIOPCI *vp)
{
    if (vp->status & VIRTIO_CONFIG_S_DRIVER_OK) {
        vp->ops->stop(vp->opaque);
    }
    __atomic_store_n(&vp->status, 0, __ATOMIC_SEQ_CST);
    vp->dfselect = vp->gfselect = 0;
    vp->guest_features = 0;
    vp->queue_select = 0;
    /*
     * Every vector loses its eventfd with the queue/config vectors going back
     * to NO_VECTOR: a vector the next driver unmasks without assigning it must
     * not be bound to an old queue's call fd.
     */
    for (unsigned v = 0; v <= vp->conf.num_queues; v++) {
        msix_set_notifier(&vp->pci, v, -1);
    }
    vp->config_vector = VIRTIO_MSI_NO_VECTOR;
    __atomic_store_n(&vp->isr, 0, __ATOMIC_SEQ_CST);
    for (unsigned i = 0; i < vp->conf.num_queues; i++) {
        VPQueue *q = &vp->q[i];

        q->size = vp->conf.queue_size;
        q->vector = VIRTIO_MSI_NO_VECTOR;
        q->enabled = false;
        q->desc = q->avail = q->used = 0;
        event_notifier_test_and_clear(&q->host);
        event_notifier_test_and_clear(&q->guest);
    }
    event_notifier_test_and_clear(&vp->config);
    msix_reset(&vp->pci);
    vp_update_guest_notifiers(vp);
    pci_set_irq(&vp->pci, false);
}

static void vp_write_status(VirtIOPCI *vp, uint8_t val)
{
    uint8_t old = __atomic_load_n(&vp->status, __ATOMIC_SEQ_CST);

    if (val == 0) {
        vp_reset(vp);
        return;
    }
    if ((val & VIRTIO_CONFIG_S_FEATURES_OK) && !(old & VIRTIO_CONFIG_S_FEATURES_OK)) {
        /* Spec 3.1.1: the driver re-reads FEATURES_OK to learn whether we agreed. */
        if (!vp->ops->set_features(vp->opaque, vp->guest_features)) {
            val &= ~VIRTIO_CONFIG_S_FEATURES_OK;
        }
    }
    if ((old & VIRTIO_CONFIG_S_DRIVER_OK) && !(val & VIRTIO_CONFIG_S_DRIVER_OK)) {
        /*
         * Only a reset may take DRIVER_OK away (spec 2.1.2). A driver that
         * clears it otherwise gets the device stopped (as QEMU does) and
         * marked NEEDS_RESET: the queues' state is the device's until a
         * reset, so it is not started again over the same rings without one.
         */
        vp->ops->stop(vp->opaque);
        __atomic_store_n(&vp->status, val | (old & VIRTIO_CONFIG_S_NEEDS_RESET), __ATOMIC_SEQ_CST);
        virtio_pci_set_needs_reset(vp);
        return;
    }
    __atomic_store_n(&vp->status, val | (old & VIRTIO_CONFIG_S_NEEDS_RESET), __ATOMIC_SEQ_CST);
    if ((val & VIRTIO_CONFIG_S_DRIVER_OK) && !(old & VIRTIO_CONFIG_S_DRIVER_OK)) {
        GError *err = NULL;

        vp_update_guest_notifiers(vp);
        if (!(val & VIRTIO_CONFIG_S_FEATURES_OK) || (old & VIRTIO_CONFIG_S_NEEDS_RESET) ||
            !vp->ops->start(vp->opaque, &err)) {
            error_report_id(vp->conf.name, "cannot start: %s",
                            err                                    ? err->message
                            : !(val & VIRTIO_CONFIG_S_FEATURES_OK) ? "DRIVER_OK without FEATURES_OK"
                                                                   : "the device needs a reset");
            g_clear_error(&err);
            __atomic_and_fetch(&vp->status, (uint8_t)~VIRTIO_CONFIG_S_DRIVER_OK, __ATOMIC_SEQ_CST);
            virtio_pci_set_needs_reset(vp);
        }
    }
}

/* ---- common configuration ---- */

static uint64_t vp_common_read(VirtIOPCI *vp, uint64_t off, unsigned size)
{
    VPQueue *q = selected(vp);
    uint64_t host = vp->ops->host_features(vp->opaque) | (1ull << VIRTIO_F_VERSION_1);

    switch (off) {
    case VIRTIO_PCI_COMMON_DFSELECT:
        return vp->dfselect;
    case VIRTIO_PCI_COMMON_DF:
        return vp->dfselect < 2 ? (uint32_t)(host >> (32 * vp->dfselect)) : 0;
    case VIRTIO_PCI_COMMON_GFSELECT:
        return vp->gfselect;
    case VIRTIO_PCI_COMMON_GF:
        return vp->gfselect < 2 ? (uint32_t)(vp->guest_features >> (32 * vp->gfselect)) : 0;
    case VIRTIO_PCI_COMMON_MSIX:
        return vp->config_vector;
    case VIRTIO_PCI_COMMON_NUMQ:
        return vp->conf.num_queues;
    case VIRTIO_PCI_COMMON_STATUS:
        return __atomic_load_n(&vp->status, __ATOMIC_SEQ_CST);
    case VIRTIO_PCI_COMMON_CFGGENERATION:
        return __atomic_load_n(&vp->generation, __ATOMIC_SEQ_CST);
    case VIRTIO_PCI_COMMON_Q_SELECT:
        return vp->queue_select;
    case VIRTIO_PCI_COMMON_Q_SIZE:
        return q ? q->size : 0; /* 0: no such queue */
    case VIRTIO_PCI_COMMON_Q_MSIX:
        return q ? q->vector : VIRTIO_MSI_NO_VECTOR;
    case VIRTIO_PCI_COMMON_Q_ENABLE:
        return q ? q->enabled : 0;
    case VIRTIO_PCI_COMMON_Q_NOFF:
        return q ? vp->queue_select : 0;
    case VIRTIO_PCI_COMMON_Q_DESCLO:
        return q ? (uint32_t)q->desc : 0;
    case VIRTIO_PCI_COMMON_Q_DESCHI:
        return q ? (uint32_t)(q->desc >> 32) : 0;
    case VIRTIO_PCI_COMMON_Q_AVAILLO:
        return q ? (uint32_t)q->avail : 0;
    case VIRTIO_PCI_COMMON_Q_AVAILHI:
        return q ? (uint32_t)(q->avail >> 32) : 0;
    case VIRTIO_PCI_COMMON_Q_USEDLO:
        return q ? (uint32_t)q->used : 0;
    case VIRTIO_PCI_COMMON_Q_USEDHI:
        return q ? (uint32_t)(q->used >> 32) : 0;
    }
    (void)size;
    return 0;
}

static void set_lo(uint64_t *p, uint64_t v)
{
    *p = (*p & ~0xffffffffull) | (uint32_t)v;
}

static void set_hi(uint64_t *p, uint64_t v)
{
    *p = (*p & 0xffffffffull) | ((uint64_t)(uint32_t)v << 32);
}

static void vp_queue_write(VirtIOPCI *vp, VPQueue *q, uint64_t off, uint64_t val)
{
    /* Spec 4.1.4.3.2: queue fields are fixed once the queue is enabled. */
    if (q->enabled && off != VIRTIO_PCI_COMMON_Q_MSIX) {
        return;
    }
    switch (off) {
    case VIRTIO_PCI_COMMON_Q_SIZE:
        if (val && val <= vp->conf.queue_size && !(val & (val - 1))) {
            q->size = (uint16_t)val;
        }
        break;
    case VIRTIO_PCI_COMMON_Q_MSIX:
        vp_set_vector(vp, &q->vector, (uint16_t)val);
        break;
    case VIRTIO_PCI_COMMON_Q_ENABLE:
        if (val == 1) {
            q->enabled = true;
            vp_update_guest_notifiers(vp);
        }
        break;
    case VIRTIO_PCI_COMMON_Q_DESCLO:
        set_lo(&q->desc, val);
        break;
    case VIRTIO_PCI_COMMON_Q_DESCHI:
        set_hi(&q->desc, val);
        break;
    case VIRTIO_PCI_COMMON_Q_AVAILLO:
        set_lo(&q->avail, val);
        break;
    case VIRTIO_PCI_COMMON_Q_AVAILHI:
        set_hi(&q->avail, val);
        break;
    case VIRTIO_PCI_COMMON_Q_USEDLO:
        set_lo(&q->used, val);
        break;
    case VIRTIO_PCI_COMMON_Q_USEDHI:
        set_hi(&q->used, val);
        break;
    }
}

static void vp_common_write(VirtIOPCI *vp, uint64_t off, uint64_t val, unsigned size)
{
    switch (off) {
    case VIRTIO_PCI_COMMON_DFSELECT:
        vp->dfselect = (uint32_t)val;
        return;
    case VIRTIO_PCI_COMMON_GFSELECT:
        vp->gfselect = (uint32_t)val;
        return;
    case VIRTIO_PCI_COMMON_GF:
        /* Features are fixed once FEATURES_OK is set. */
        if (vp->gfselect < 2 && !(vp->status & VIRTIO_CONFIG_S_FEATURES_OK)) {
            if (vp->gfselect == 0) {
                set_lo(&vp->guest_features, val);
            } else {
                set_hi(&vp->guest_features, val);
            }
        }
        return;
    case VIRTIO_PCI_COMMON_MSIX:
        vp_set_vector(vp, &vp->config_vector, (uint16_t)val);
        return;
    case VIRTIO_PCI_COMMON_STATUS:
        vp_write_status(vp, (uint8_t)val);
        return;
    case VIRTIO_PCI_COMMON_Q_SELECT:
        vp->queue_select = (uint16_t)val;
        return;
    }
    if (off >= VIRTIO_PCI_COMMON_Q_SIZE && selected(vp)) {
        vp_queue_write(vp, selected(vp), off, val);
    }
    (void)size;
}

/* ---- BAR dispatch ---- */

static uint64_t vp_bar_read(PciDevice *dev, unsigned bar, uint64_t off, unsigned size)
{
    VirtIOPCI *vp = to_vp(dev);
    uint64_t val = 0;

    if (bar != VP_BAR_MODERN) {
        return 0; /* the I/O BAR's doorbells read 0, as the MMIO ones */
    }
    if (off < VP_ISR_OFF) {
        return vp_common_read(vp, off, size);
    }
    if (off < VP_DEVICE_OFF) {
        if (off != VP_ISR_OFF) {
            return 0;
        }
        /* Reading the ISR clears it and lowers INTx (spec 4.1.4.5). */
        val = __atomic_exchange_n(&vp->isr, 0, __ATOMIC_SEQ_CST);
        pci_set_irq(dev, false);
        return val;
    }
    if (off < VP_NOTIFY_OFF) {
        uint64_t coff = off - VP_DEVICE_OFF;

        if (coff < vp->conf.config_size && size <= vp->conf.config_size - coff) {
            vp->ops->config_read(vp->opaque, (uint32_t)coff, &val, size);
        }
        return val;
    }
    return 0;
}

static void vp_bar_write(PciDevice *dev, unsigned bar, uint64_t off, uint64_t val, unsigned size)
{
    VirtIOPCI *vp = to_vp(dev);

    if (bar == VP_BAR_PIO) {
        uint64_t qi = off / VP_PIO_MULT;

        /* A port kick that KVM did not catch (no ioeventfd): the same doorbell. */
        if (qi < vp->conf.num_queues && (vp->status & VIRTIO_CONFIG_S_DRIVER_OK)) {
            vp->ops->queue_notify(vp->opaque, (unsigned)qi);
        }
        return;
    }
    if (bar != VP_BAR_MODERN) {
        return;
    }
    if (off < VP_ISR_OFF) {
        vp_common_write(vp, off, val, size);
    } else if (off >= VP_DEVICE_OFF && off < VP_NOTIFY_OFF) {
        uint64_t coff = off - VP_DEVICE_OFF;

        if (coff < vp->conf.config_size && size <= vp->conf.config_size - coff) {
            vp->ops->config_write(vp->opaque, (uint32_t)coff, &val, size);
        }
    } else if (off >= VP_NOTIFY_OFF) {
        uint64_t qi = (off - VP_NOTIFY_OFF) / VP_NOTIFY_MULT;

        /* A kick that KVM did not catch (no ioeventfd): same doorbell. */
        if (qi < vp->conf.num_queues && (vp->status & VIRTIO_CONFIG_S_DRIVER_OK)) {
            vp->ops->queue_notify(vp->opaque, (unsigned)qi);
        }
    }
}

/* Machine reset: what the driver gets by writing status 0 (the device stops and drains). */
static void vp_pci_reset(PciDevice *dev)
{
    vp_reset(to_vp(dev));
}

static const PciDeviceOps vp_pci_ops = {
    .bar_read = vp_bar_read,
    .bar_write = vp_bar_write,
    .bar_mapped = vp_bar_mapped,
    .reset = vp_pci_reset,
};

/* ---- construction ---- */

static bool vp_add_cap_bar(VirtIOPCI *vp, uint8_t type, uint8_t bar, uint32_t off, uint32_t len,
                           uint8_t caplen, uint32_t notify_mult, GError **errp)
{
    uint8_t c = pci_device_add_cap(&vp->pci, PCI_CAP_ID_VNDR, caplen, errp);

    if (!c) {
        return false;
    }
    pci_set_byte(&vp->pci, c + VIRTIO_PCI_CAP_LEN, caplen);
    pci_set_byte(&vp->pci, c + VIRTIO_PCI_CAP_CFG_TYPE, type);
    pci_set_byte(&vp->pci, c + VIRTIO_PCI_CAP_BAR, bar);
    pci_set_long(&vp->pci, c + VIRTIO_PCI_CAP_OFFSET, off);
    pci_set_long(&vp->pci, c + VIRTIO_PCI_CAP_LENGTH, len);
    if (type == VIRTIO_PCI_CAP_NOTIFY_CFG) {
        pci_set_long(&vp->pci, c + sizeof(struct virtio_pci_cap), notify_mult);
    }
    return true;
}

static bool vp_add_cap(VirtIOPCI *vp, uint8_t type, uint32_t off, uint32_t len, uint8_t caplen,
                       GError **errp)
{
    return vp_add_cap_bar(vp, type, VP_BAR_MODERN, off, len, caplen, VP_NOTIFY_MULT, errp);
}

/* The I/O BAR: one 16-bit doorbell per queue, a power of two of at least 4 ports. */
static uint32_t vp_pio_bar_size(unsigned num_queues)
{
    uint32_t size = 4;

    while (size < num_queues * VP_PIO_MULT) {
        size <<= 1;
    }
    return size;
}

/* Context: main thread (machine setup) */
VirtIOPCI *virtio_pci_new(Vm *vm, PciBus *bus, const VirtIOPCIConf *conf,
                          const VirtIOPCIDeviceOps *ops, void *opaque, GError **errp)
{
    VirtIOPCI *vp;
    PciDeviceInfo info = {
        .vendor_id = VIRTIO_PCI_VENDOR_ID,
        .device_id = (uint16_t)(0x1040 + conf->device_id),
        .subsystem_vendor_id = VIRTIO_PCI_VENDOR_ID,
        .subsystem_id = 0x1100, /* modern devices: >= 0x40 */
        .revision = 1,          /* non-transitional */
        .class_code = conf->class_code,
        .interrupt_pin = 1,
    };
    int slot = conf->slot;

    if (conf->num_queues == 0 || conf->num_queues > VIRTIO_PCI_MAX_QUEUES ||
        (VP_NOTIFY_OFF + conf->num_queues * VP_NOTIFY_MULT) > VP_BAR_SIZE ||
        conf->config_size > VP_NOTIFY_OFF - VP_DEVICE_OFF) {
        g_set_error(errp, VMM_ERROR, EINVAL, "%s: unsupported queue or config layout", conf->name);
        return NULL;
    }
    vp = g_malloc0(sizeof(*vp) + conf->num_queues * sizeof(VPQueue));
    vp->vm = vm;
    vp->conf = *conf;
    vp->conf.name = g_strdup(conf->name);
    vp->ops = ops;
    vp->opaque = opaque;
    vp->config.fd = -1;
    if (!event_notifier_init(&vp->config, false, errp)) {
        goto fail;
    }
    for (unsigned i = 0; i < conf->num_queues; i++) {
        vp->q[i].host.fd = vp->q[i].guest.fd = -1;
        if (!event_notifier_init(&vp->q[i].host, false, errp) ||
            !event_notifier_init(&vp->q[i].guest, false, errp)) {
            goto fail;
        }
    }
    pci_device_init(&vp->pci, &vp_pci_ops, &info, conf->name);
    if (!pci_device_add_bar(&vp->pci, VP_BAR_MSIX, VP_MSIX_BAR_SZ, false, errp) ||
        !pci_device_add_bar(&vp->pci, VP_BAR_MODERN, VP_BAR_SIZE, true, errp) ||
        !msix_init(&vp->pci, conf->num_queues + 1, VP_BAR_MSIX, 0, VP_MSIX_PBA_OFF, errp) ||
        !vp_add_cap(vp, VIRTIO_PCI_CAP_COMMON_CFG, VP_COMMON_OFF,
                    sizeof(struct virtio_pci_common_cfg), sizeof(struct virtio_pci_cap), errp) ||
        !vp_add_cap(vp, VIRTIO_PCI_CAP_ISR_CFG, VP_ISR_OFF, 1, sizeof(struct virtio_pci_cap),
                    errp) ||
        !vp_add_cap(vp, VIRTIO_PCI_CAP_DEVICE_CFG, VP_DEVICE_OFF, conf->config_size,
                    sizeof(struct virtio_pci_cap), errp) ||
        /* Before the MMIO notify capability: a driver takes the first it can use. */
        (conf->pio_notify &&
         (!pci_device_add_io_bar(&vp->pci, VP_BAR_PIO, vp_pio_bar_size(conf->num_queues), errp) ||
          !vp_add_cap_bar(vp, VIRTIO_PCI_CAP_NOTIFY_CFG, VP_BAR_PIO, 0,
                          conf->num_queues * VP_PIO_MULT, sizeof(struct virtio_pci_notify_cap),
                          VP_PIO_MULT, errp))) ||
        !vp_add_cap(vp, VIRTIO_PCI_CAP_NOTIFY_CFG, VP_NOTIFY_OFF, conf->num_queues * VP_NOTIFY_MULT,
                    sizeof(struct virtio_pci_notify_cap), errp)) {
        goto fail;
    }
    if (slot < 0) {
        slot = pci_bus_free_slot(bus);
    }
    vp_reset(vp);
    if (slot < 0 || !pci_bus_register(bus, &vp->pci, (unsigned)slot, errp)) {
        if (slot < 0) {
            g_set_error(errp, VMM_ERROR, ENOSPC, "%s: no free PCI slot", conf->name);
        }
        goto fail;
    }
    return vp;

fail:
    if (vp->pci.msix) {
        msix_free(&vp->pci);
    }
    event_notifier_cleanup(&vp->config);
    for (unsigned i = 0; i < conf->num_queues; i++) {
        event_notifier_cleanup(&vp->q[i].host);
        event_notifier_cleanup(&vp->q[i].guest);
    }
    g_free((char *)vp->conf.name);
    g_free(vp);
    return NULL;
}

/* Context: main thread (teardown), vCPUs paused */
void virtio_pci_free(VirtIOPCI *vp)
{
    if (!vp) {
        return;
    }
    vm_lock(vp->vm);
    vp_reset(vp);
    vp_ioeventfds(vp, false, NULL);
    for (unsigned i = 0; i < vp->conf.num_queues; i++) {
        vp->q[i].enabled = false;
    }
    msix_reset(&vp->pci);
    vp_update_guest_notifiers(vp);
    pci_bus_unregister(vp->pci.bus, &vp->pci);
    msix_free(&vp->pci);
    vm_unlock(vp->vm);
    event_notifier_cleanup(&vp->config);
    for (unsigned i = 0; i < vp->conf.num_queues; i++) {
        event_notifier_cleanup(&vp->q[i].host);
        event_notifier_cleanup(&vp->q[i].guest);
    }
    g_free((char *)vp->conf.name);
    g_free(vp);
}

/* Context: device lock held */
bool virtio_pci_queue_enabled(VirtIOPCI *vp, unsigned q)
{
    return q < vp->conf.num_queues && vp->q[q].enabled;
}

/* Context: device lock held */
uint16_t virtio_pci_queue_size(VirtIOPCI *vp, unsigned q)
{
    return q < vp->conf.num_queues ? vp->q[q].size : 0;
}

/* Context: device lock held */
void virtio_pci_queue_addrs(VirtIOPCI *vp, unsigned q, uint64_t *desc, uint64_t *avail,
                            uint64_t *used)
{
    *desc = vp->q[q].desc;
    *avail = vp->q[q].avail;
    *used = vp->q[q].used;
}

/* Context: any thread */
int virtio_pci_host_notifier(VirtIOPCI *vp, unsigned q)
{
    return q < vp->conf.num_queues ? vp->q[q].host.fd : -1;
}

/* Context: device lock held */
GuestNotifier virtio_pci_guest_notifier(VirtIOPCI *vp, unsigned q)
{
    return (GuestNotifier){
        .fd = q < vp->conf.num_queues ? vp->q[q].guest_fd : -1,
        .isr = &vp->isr,
        .id = vp->conf.name,
    };
}
