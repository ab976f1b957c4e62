/*
 * vblk: MSI-X capability, vector table and PBA, and their mapping onto KVM:
 * one MSI route per vector (KVM_SET_GSI_ROUTING through the bus's ops) and
 * the device's eventfd bound with KVM_IRQFD while the vector is unmasked.
 */
#include <errno.h>
#include <linux/pci_regs.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>

#include "pci-internal.h"
#include "vmm/vmm.h"

#define MSIX_ENTRY_SIZE  16
#define MSIX_CAP_LEN     12
#define MSIX_MAX_VECTORS 2048

typedef struct MsixVector {
    uint32_t addr_lo, addr_hi, data, ctrl;
    int fd;              /* device's notifier, or -1 */
    int gsi;             /* MSI route, or -1 */
    uint64_t route_addr; /* what the route currently says */
    uint32_t route_data;
    bool bound;        /* fd attached to gsi with KVM_IRQFD */
    bool soft_pending; /* raised by msix_notify() while masked */
} MsixVector;

struct Msix {
    unsigned nvec;
    unsigned bar;
    uint32_t table_off;
    uint32_t pba_off;
    uint8_t cap;
    MsixVector *v;
};

/* Context: device lock held */
unsigned msix_bar(PciDevice *dev)
{
    return dev->msix->bar;
}

static uint16_t msix_control(PciDevice *dev)
{
    return pci_get_word(dev, dev->msix->cap + PCI_MSIX_FLAGS);
}

/* Context: device lock held */
bool msix_enabled(PciDevice *dev)
{
    return dev->msix && (msix_control(dev) & PCI_MSIX_FLAGS_ENABLE);
}

/* Context: device lock held */
bool msix_vector_deliverable(PciDevice *dev, unsigned vec)
{
    return msix_enabled(dev) && !(msix_control(dev) & PCI_MSIX_FLAGS_MASKALL) &&
           vec < dev->msix->nvec && !(dev->msix->v[vec].ctrl & PCI_MSIX_ENTRY_CTRL_MASKBIT);
}

static uint64_t msix_vector_addr(const MsixVector *v)
{
    return ((uint64_t)v->addr_hi << 32) | v->addr_lo;
}

static bool msix_fd_readable(int fd)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return poll(&p, 1, 0) > 0 && (p.revents & POLLIN);
}

static bool msix_route_sync(const PciIrqOps *ops, void *opaque, MsixVector *v)
{
    uint64_t addr = msix_vector_addr(v);

    if (v->gsi < 0) {
        v->gsi = ops->msi_route_add ? ops->msi_route_add(opaque, addr, v->data) : -1;
        if (v->gsi < 0) {
            return false;
        }
    } else if (v->route_addr != addr || v->route_data != v->data) {
        if (!ops->msi_route_update || !ops->msi_route_update(opaque, v->gsi, addr, v->data)) {
            return false;
        }
    }
    v->route_addr = addr;
    v->route_data = v->data;
    return true;
}

static void msix_unbind(const PciIrqOps *ops, void *opaque, MsixVector *v)
{
    if (v->bound) {
        if (ops->irqfd) {
            ops->irqfd(opaque, v->fd, v->gsi, false);
        }
        v->bound = false;
    }
}

/* Brings one vector's KVM state in line with its table entry and mask state. */
static void msix_update_vector(PciDevice *dev, unsigned vec)
{
    MsixVector *v = &dev->msix->v[vec];
    void *opaque;
    const PciIrqOps *ops = dev->bus ? pci_bus_irq_ops(dev->bus, &opaque) : NULL;
    uint64_t one = 1;

    if (!ops) {
        return;
    }
    if (!msix_vector_deliverable(dev, vec)) {
        msix_unbind(ops, opaque, v);
        return;
    }
    if (v->fd < 0) {
        if (v->soft_pending && ops->signal_msi) {
            v->soft_pending = false;
            ops->signal_msi(opaque, msix_vector_addr(v), v->data);
        }
        return;
    }
    if (!msix_route_sync(ops, opaque, v)) {
        return;
    }
    /* KVM injects at assign time if the counter is non-zero: masked events arrive now. */
    if (!v->bound && ops->irqfd && ops->irqfd(opaque, v->fd, v->gsi, true)) {
        v->bound = true;
    }
    if (v->soft_pending) {
        v->soft_pending = false;
        if (write(v->fd, &one, sizeof(one)) < 0) {
            /* counter overflow is impossible at this rate */
        }
    }
}

static void msix_update_all(PciDevice *dev)
{
    for (unsigned i = 0; i < dev->msix->nvec; i++) {
        msix_update_vector(dev, i);
    }
}

/* Context: main thread, before registration */
bool msix_init(PciDevice *dev, unsigned nvec, unsigned bar, uint32_t table_off, uint32_t pba_off,
               GError **errp)
{
    Msix *m;
    uint8_t cap;
    uint64_t bar_size = bar < PCI_NUM_BARS ? dev->bars[bar].size : 0;

    if (nvec == 0 || nvec > MSIX_MAX_VECTORS || (table_off & 7) || (pba_off & 7) ||
        table_off + nvec * MSIX_ENTRY_SIZE > bar_size ||
        pba_off + ((nvec + 63) / 64) * 8 > bar_size || dev->msix) {
        g_set_error(errp, VMM_ERROR, EINVAL, "%s: invalid MSI-X layout (%u vectors in BAR %u)",
                    dev->name, nvec, bar);
        return false;
    }
    cap = pci_device_add_cap(dev, PCI_CAP_ID_MSIX, MSIX_CAP_LEN, errp);
    if (!cap) {
        return false;
    }
    m = g_new0(Msix, 1);
    m->nvec = nvec;
    m->bar = bar;
    m->table_off = table_off;
    m->pba_off = pba_off;
    m->cap = cap;
    m->v = g_new0(MsixVector, nvec);
    for (unsigned i = 0; i < nvec; i++) {
        m->v[i] = (MsixVector){.fd = -1, .gsi = -1, .ctrl = PCI_MSIX_ENTRY_CTRL_MASKBIT};
    }
    pci_set_word(dev, cap + PCI_MSIX_FLAGS, nvec - 1);
    pci_set_long(dev, cap + PCI_MSIX_TABLE, table_off | bar);
    pci_set_long(dev, cap + PCI_MSIX_PBA, pba_off | bar);
    /* Only Enable and Function Mask are writable. */
    dev->wmask[cap + PCI_MSIX_FLAGS + 1] = (PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL) >> 8;
    dev->msix = m;
    return true;
}

/* Context: device lock held. Unbinds every irqfd and drops the MSI routes. */
void msix_release_routes(PciDevice *dev)
{
    Msix *m = dev->msix;
    void *opaque = NULL;
    const PciIrqOps *ops;

    if (!m || !dev->bus) {
        return;
    }
    ops = pci_bus_irq_ops(dev->bus, &opaque);
    for (unsigned i = 0; ops && i < m->nvec; i++) {
        msix_unbind(ops, opaque, &m->v[i]);
        if (m->v[i].gsi >= 0 && ops->msi_route_remove) {
            ops->msi_route_remove(opaque, m->v[i].gsi);
        }
        m->v[i].gsi = -1;
    }
}

/* Context: main thread */
void msix_free(PciDevice *dev)
{
    Msix *m = dev->msix;

    if (!m) {
        return;
    }
    msix_release_routes(dev);
    g_free(m->v);
    g_free(m);
    dev->msix = NULL;
}

/* Context: device lock held */
void msix_config_write(PciDevice *dev, unsigned off, unsigned size)
{
    unsigned ctl = dev->msix->cap + PCI_MSIX_FLAGS;

    if (off < ctl + 2 && ctl < off + size) {
        msix_update_all(dev);
    }
}

/* Context: device lock held */
void msix_set_notifier(PciDevice *dev, unsigned vec, int fd)
{
    MsixVector *v;
    void *opaque;
    const PciIrqOps *ops;

    if (!dev->msix || vec >= dev->msix->nvec) {
        return;
    }
    v = &dev->msix->v[vec];
    ops = dev->bus ? pci_bus_irq_ops(dev->bus, &opaque) : NULL;
    if (ops) {
        msix_unbind(ops, opaque, v);
    }
    v->fd = fd;
    msix_update_vector(dev, vec);
}

/* Context: device lock held */
bool msix_is_pending(PciDevice *dev, unsigned vec)
{
    MsixVector *v;

    if (!dev->msix || vec >= dev->msix->nvec) {
        return false;
    }
    v = &dev->msix->v[vec];
    /* While unbound, the eventfd counter is the pending bit. */
    return v->soft_pending || (v->fd >= 0 && !v->bound && msix_fd_readable(v->fd));
}

/* Context: device lock held */
void msix_notify(PciDevice *dev, unsigned vec)
{
    MsixVector *v;
    uint64_t one = 1;

    if (!dev->msix || vec >= dev->msix->nvec) {
        return;
    }
    v = &dev->msix->v[vec];
    if (!msix_vector_deliverable(dev, vec)) {
        v->soft_pending = true;
        return;
    }
    if (v->fd >= 0) {
        if (write(v->fd, &one, sizeof(one)) < 0) {
            v->soft_pending = true;
        }
        return;
    }
    v->soft_pending = true;
    msix_update_vector(dev, vec);
}

/* Context: device lock held */
void msix_reset(PciDevice *dev)
{
    Msix *m = dev->msix;
    uint64_t drained;

    if (!m) {
        return;
    }
    pci_set_word(dev, m->cap + PCI_MSIX_FLAGS, m->nvec - 1);
    for (unsigned i = 0; i < m->nvec; i++) {
        MsixVector *v = &m->v[i];
        v->addr_lo = v->addr_hi = v->data = 0;
        v->ctrl = PCI_MSIX_ENTRY_CTRL_MASKBIT;
        v->soft_pending = false;
    }
    msix_update_all(dev);
    for (unsigned i = 0; i < m->nvec; i++) {
        /* Stale events must not fire after the next unmask. */
        if (m->v[i].fd >= 0 && msix_fd_readable(m->v[i].fd) &&
            read(m->v[i].fd, &drained, sizeof(drained)) < 0) {
            continue;
        }
    }
}

static uint32_t msix_table_read32(Msix *m, uint32_t off)
{
    MsixVector *v = &m->v[off / MSIX_ENTRY_SIZE];

    switch (off % MSIX_ENTRY_SIZE) {
    case PCI_MSIX_ENTRY_LOWER_ADDR:
        return v->addr_lo;
    case PCI_MSIX_ENTRY_UPPER_ADDR:
        return v->addr_hi;
    case PCI_MSIX_ENTRY_DATA:
        return v->data;
    default:
        return v->ctrl;
    }
}

static uint32_t msix_pba_read32(PciDevice *dev, uint32_t off)
{
    uint32_t val = 0;

    for (unsigned bit = 0; bit < 32; bit++) {
        unsigned vec = off * 8 + bit;
        if (vec < dev->msix->nvec && msix_is_pending(dev, vec)) {
            val |= 1u << bit;
        }
    }
    return val;
}

static bool msix_in(uint64_t off, unsigned size, uint32_t start, uint32_t len)
{
    return off >= start && off - start < len && off - start + size <= len;
}

/* Context: device lock held */
uint64_t msix_bar_read(PciDevice *dev, uint64_t off, unsigned size, bool *claimed)
{
    Msix *m = dev->msix;
    uint32_t table_len = m->nvec * MSIX_ENTRY_SIZE;
    uint32_t pba_len = ((m->nvec + 63) / 64) * 8;
    uint64_t val;

    *claimed = true;
    if (msix_in(off, size, m->table_off, table_len)) {
        uint32_t rel = off - m->table_off;
        if ((size != 4 && size != 8) || (rel & (size - 1))) {
            return UINT64_MAX >> (64 - 8 * size); /* only aligned dword/qword accesses */
        }
        val = msix_table_read32(m, rel);
        return size == 8 ? val | ((uint64_t)msix_table_read32(m, rel + 4) << 32) : val;
    }
    if (msix_in(off, size, m->pba_off, pba_len)) {
        uint32_t rel = off - m->pba_off;
        if ((size != 4 && size != 8) || (rel & (size - 1))) {
            return UINT64_MAX >> (64 - 8 * size);
        }
        val = msix_pba_read32(dev, rel);
        return size == 8 ? val | ((uint64_t)msix_pba_read32(dev, rel + 4) << 32) : val;
    }
    *claimed = false;
    return 0;
}

static void msix_table_write32(PciDevice *dev, uint32_t off, uint32_t val)
{
    unsigned vec = off / MSIX_ENTRY_SIZE;
    MsixVector *v = &dev->msix->v[vec];

    switch (off % MSIX_ENTRY_SIZE) {
    case PCI_MSIX_ENTRY_LOWER_ADDR:
        v->addr_lo = val & ~3u; /* bits 1:0 are reserved */
        break;
    case PCI_MSIX_ENTRY_UPPER_ADDR:
        v->addr_hi = val;
        break;
    case PCI_MSIX_ENTRY_DATA:
        v->data = val;
        break;
    default:
        v->ctrl = val & PCI_MSIX_ENTRY_CTRL_MASKBIT;
        break;
    }
    msix_update_vector(dev, vec);
}

/* Context: device lock held */
bool msix_bar_write(PciDevice *dev, uint64_t off, uint64_t val, unsigned size)
{
    Msix *m = dev->msix;
    uint32_t table_len = m->nvec * MSIX_ENTRY_SIZE;
    uint32_t pba_len = ((m->nvec + 63) / 64) * 8;
    uint32_t rel;

    if (msix_in(off, size, m->pba_off, pba_len)) {
        return true; /* the PBA is read-only */
    }
    if (!msix_in(off, size, m->table_off, table_len)) {
        return false;
    }
    rel = off - m->table_off;
    if ((size != 4 && size != 8) || (rel & (size - 1))) {
        return true;
    }
    msix_table_write32(dev, rel, (uint32_t)val);
    if (size == 8) {
        msix_table_write32(dev, rel + 4, (uint32_t)(val >> 32));
    }
    return true;
}
