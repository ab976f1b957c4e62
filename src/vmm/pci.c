/*
 * vblk: PCI bus 0: configuration mechanism #1, type-0 headers with per-byte
 * write masks, memory BAR sizing and placement, capability lists, INTx.
 */
#include <errno.h>
#include <linux/pci_regs.h>
#include <string.h>

#include "pci-internal.h"
#include "vmm/vmm.h"

#define CONF1_ADDR_PORT 0xcf8
#define CONF1_ENABLE    0x80000000u
#define RCR_OFFSET      1 /* 0xcf9: reset control register */
#define RCR_RESET       0x04

struct PciBus {
    IoBus *pio;
    IoBus *mmio;
    const PciIrqOps *irq;
    void *irq_opaque;
    PciDevice *slots[PCI_SLOTS];
    PciDevice host;
    uint32_t conf1_addr;
    uint64_t mmio_next;
    uint32_t pio_next;
    bool conf1_registered;
};

/* Context: any thread */
void pci_set_byte(PciDevice *dev, unsigned off, uint8_t v)
{
    dev->config[off] = v;
}

/* Context: any thread */
void pci_set_word(PciDevice *dev, unsigned off, uint16_t v)
{
    dev->config[off] = v;
    dev->config[off + 1] = v >> 8;
}

/* Context: any thread */
void pci_set_long(PciDevice *dev, unsigned off, uint32_t v)
{
    pci_set_word(dev, off, v);
    pci_set_word(dev, off + 2, v >> 16);
}

/* Context: any thread */
uint16_t pci_get_word(const PciDevice *dev, unsigned off)
{
    return dev->config[off] | (dev->config[off + 1] << 8);
}

/* Context: any thread */
static uint32_t pci_get_long(const PciDevice *dev, unsigned off)
{
    return pci_get_word(dev, off) | ((uint32_t)pci_get_word(dev, off + 2) << 16);
}

/* Context: main thread */
void pci_device_init(PciDevice *dev, const PciDeviceOps *ops, const PciDeviceInfo *info,
                     const char *name)
{
    memset(dev, 0, sizeof(*dev));
    dev->ops = ops;
    g_strlcpy(dev->name, name, sizeof(dev->name));
    pci_set_word(dev, PCI_VENDOR_ID, info->vendor_id);
    pci_set_word(dev, PCI_DEVICE_ID, info->device_id);
    pci_set_byte(dev, PCI_REVISION_ID, info->revision);
    pci_set_byte(dev, PCI_CLASS_PROG, info->class_code & 0xff);
    pci_set_word(dev, PCI_CLASS_DEVICE, info->class_code >> 8);
    pci_set_byte(dev, PCI_HEADER_TYPE, PCI_HEADER_TYPE_NORMAL);
    pci_set_word(dev, PCI_SUBSYSTEM_VENDOR_ID, info->subsystem_vendor_id);
    pci_set_word(dev, PCI_SUBSYSTEM_ID, info->subsystem_id);
    pci_set_byte(dev, PCI_INTERRUPT_PIN, info->interrupt_pin);
    /* Writable: IO/MEM/MASTER/PARITY enables, SERR, INTx disable. */
    pci_set_word(dev, PCI_COMMAND, 0);
    dev->wmask[PCI_COMMAND] =
        PCI_COMMAND_IO | PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | PCI_COMMAND_PARITY;
    dev->wmask[PCI_COMMAND + 1] = (PCI_COMMAND_SERR | PCI_COMMAND_INTX_DISABLE) >> 8;
    /* Error bits in STATUS are write-1-to-clear. */
    dev->w1cmask[PCI_STATUS + 1] = 0xf9;
    dev->wmask[PCI_CACHE_LINE_SIZE] = 0xff;
    dev->wmask[PCI_LATENCY_TIMER] = 0xff;
    dev->wmask[PCI_INTERRUPT_LINE] = 0xff;
    dev->cap_next = PCI_CAP_START;
}

static unsigned pci_bar_reg(unsigned bar)
{
    return PCI_BASE_ADDRESS_0 + 4 * bar;
}

/* BAR @bar becomes @b; its register starts as @flags and its low dword's
 * writable bits are @wmask_lo (the high dword of a 64-bit BAR is the caller's). */
static void pci_bar_init(PciDevice *dev, unsigned bar, PciBar b, uint32_t flags, uint32_t wmask_lo)
{
    unsigned reg = pci_bar_reg(bar);

    dev->bars[bar] = b;
    dev->bars[bar].ref.dev = dev;
    dev->bars[bar].ref.bar = bar;
    pci_set_long(dev, reg, flags);
    for (unsigned i = 0; i < 4; i++) {
        dev->wmask[reg + i] = (uint8_t)(wmask_lo >> (8 * i));
    }
}

/* Context: main thread, before registration */
bool pci_device_add_bar(PciDevice *dev, unsigned bar, uint64_t size, bool is_64bit, GError **errp)
{
    uint64_t mask = ~(size - 1);
    unsigned reg = pci_bar_reg(bar);

    if (bar >= PCI_NUM_BARS || (is_64bit && bar == PCI_NUM_BARS - 1) || size < 16 ||
        (size & (size - 1)) || (!is_64bit && size > (1ULL << 31)) || dev->bars[bar].size ||
        (bar > 0 && dev->bars[bar - 1].is_64bit) || (is_64bit && dev->bars[bar + 1].size)) {
        g_set_error(errp, VMM_ERROR, EINVAL,
                    "%s: invalid BAR %u of 0x%" G_GINT64_MODIFIER "x bytes", dev->name, bar, size);
        return false;
    }
    /* The low four bits (type flags) are read-only; so are the size bits. */
    pci_bar_init(dev, bar, (PciBar){.size = size, .is_64bit = is_64bit},
                 is_64bit ? PCI_BASE_ADDRESS_MEM_TYPE_64 : 0, (uint32_t)(mask & ~0xfULL));
    if (is_64bit) {
        for (unsigned i = 0; i < 4; i++) {
            dev->wmask[reg + 4 + i] = (uint8_t)(mask >> (32 + 8 * i));
        }
    }
    return true;
}

/* Context: main thread, before registration */
bool pci_device_add_io_bar(PciDevice *dev, unsigned bar, uint32_t size, GError **errp)
{
    uint32_t mask = ~(size - 1);

    if (bar >= PCI_NUM_BARS || size < 4 || size > 256 || (size & (size - 1)) ||
        dev->bars[bar].size || (bar > 0 && dev->bars[bar - 1].is_64bit)) {
        g_set_error(errp, VMM_ERROR, EINVAL, "%s: invalid I/O BAR %u of 0x%x bytes", dev->name, bar,
                    size);
        return false;
    }
    /* Bit 0 (I/O space) and bit 1 (reserved) are read-only; so are the size bits. */
    pci_bar_init(dev, bar, (PciBar){.size = size, .is_io = true}, PCI_BASE_ADDRESS_SPACE_IO,
                 mask & ~0x3u);
    return true;
}

/* Context: main thread, before registration */
uint8_t pci_device_add_cap(PciDevice *dev, uint8_t cap_id, uint8_t len, GError **errp)
{
    unsigned off = dev->cap_next;

    if (len < 2 || off + len > PCI_CONFIG_SIZE) {
        g_set_error(errp, VMM_ERROR, ENOSPC, "%s: no room for a %u-byte capability", dev->name,
                    len);
        return 0;
    }
    pci_set_byte(dev, off, cap_id);
    pci_set_byte(dev, off + 1, 0);
    if (dev->cap_last) {
        pci_set_byte(dev, dev->cap_last + 1, off);
    } else {
        pci_set_byte(dev, PCI_CAPABILITY_LIST, off);
        pci_set_word(dev, PCI_STATUS, pci_get_word(dev, PCI_STATUS) | PCI_STATUS_CAP_LIST);
    }
    dev->cap_last = off;
    dev->cap_next = (off + len + 3) & ~3u;
    return off;
}

/* Context: device lock held */
static bool pci_memory_enabled(PciDevice *dev)
{
    return pci_get_word(dev, PCI_COMMAND) & PCI_COMMAND_MEMORY;
}

static bool pci_io_enabled(PciDevice *dev)
{
    return pci_get_word(dev, PCI_COMMAND) & PCI_COMMAND_IO;
}

/* The address the BAR registers decode now, or 0 for "not decoded". */
static uint64_t pci_bar_decoded(PciDevice *dev, unsigned bar)
{
    PciBar *b = &dev->bars[bar];
    unsigned reg = pci_bar_reg(bar);
    uint64_t addr = pci_get_long(dev, reg) & ~0xfULL;

    if (b->is_io) {
        /* Port space is 64 KiB: a BAR reaching past it is not decoded. */
        addr = pci_get_long(dev, reg) & ~0x3ULL;
        return pci_io_enabled(dev) && addr && addr + b->size <= 0x10000 ? addr : 0;
    }
    if (b->is_64bit) {
        addr |= (uint64_t)pci_get_long(dev, reg + 4) << 32;
    }
    if (!pci_memory_enabled(dev) || addr == 0 || addr + b->size - 1 < addr) {
        return 0;
    }
    return addr;
}

/* Context: device lock held */
uint64_t pci_bar_address(PciDevice *dev, unsigned bar)
{
    return bar < PCI_NUM_BARS && dev->bars[bar].mapped ? dev->bars[bar].gpa : 0;
}

static uint64_t pci_bar_mmio_read(void *opaque, uint64_t off, unsigned size)
{
    struct PciBarRef *ref = opaque;
    PciDevice *dev = ref->dev;
    bool claimed = false;
    uint64_t val;

    if (dev->msix && ref->bar == msix_bar(dev)) {
        val = msix_bar_read(dev, off, size, &claimed);
        if (claimed) {
            return val;
        }
    }
    if (dev->ops && dev->ops->bar_read) {
        return dev->ops->bar_read(dev, ref->bar, off, size);
    }
    return size >= 8 ? UINT64_MAX : (1ULL << (8 * size)) - 1;
}

static void pci_bar_mmio_write(void *opaque, uint64_t off, uint64_t val, unsigned size)
{
    struct PciBarRef *ref = opaque;
    PciDevice *dev = ref->dev;

    if (dev->msix && ref->bar == msix_bar(dev) && msix_bar_write(dev, off, val, size)) {
        return;
    }
    if (dev->ops && dev->ops->bar_write) {
        dev->ops->bar_write(dev, ref->bar, off, val, size);
    }
}

static const IoRegionOps pci_bar_ops = {
    .read = pci_bar_mmio_read,
    .write = pci_bar_mmio_write,
};

static void pci_bar_unmap(PciDevice *dev, unsigned bar)
{
    PciBar *b = &dev->bars[bar];

    if (!b->mapped) {
        return;
    }
    iobus_remove(b->is_io ? dev->bus->pio : dev->bus->mmio, b->gpa);
    b->mapped = false;
    if (dev->ops && dev->ops->bar_mapped) {
        dev->ops->bar_mapped(dev, bar, b->gpa, false);
    }
}

/* Re-syncs the MMIO and port I/O buses with BAR registers and COMMAND.MEM/IO. */
static void pci_update_mappings(PciDevice *dev)
{
    for (unsigned i = 0; i < PCI_NUM_BARS; i++) {
        PciBar *b = &dev->bars[i];
        uint64_t addr;

        if (!b->size || !dev->bus) {
            continue;
        }
        addr = pci_bar_decoded(dev, i);
        if (b->mapped && b->gpa == addr) {
            continue;
        }
        pci_bar_unmap(dev, i);
        /* An address that collides with another region is simply not decoded. */
        if (addr && iobus_add(b->is_io ? dev->bus->pio : dev->bus->mmio, addr, b->size,
                              &pci_bar_ops, &b->ref, NULL)) {
            b->mapped = true;
            b->gpa = addr;
            if (dev->ops && dev->ops->bar_mapped) {
                dev->ops->bar_mapped(dev, i, addr, true);
            }
        }
    }
}

/* Context: any thread */
unsigned pci_intx_gsi(const PciDevice *dev)
{
    unsigned pin = dev->config[PCI_INTERRUPT_PIN];

    return PCI_INTX_GSI_BASE + ((dev->slot + (pin ? pin - 1 : 0)) % 8);
}

static void pci_update_intx(PciDevice *dev)
{
    bool disabled = pci_get_word(dev, PCI_COMMAND) & PCI_COMMAND_INTX_DISABLE;
    uint16_t status = pci_get_word(dev, PCI_STATUS) & ~PCI_STATUS_INTERRUPT;

    if (dev->intx_level) {
        status |= PCI_STATUS_INTERRUPT;
    }
    pci_set_word(dev, PCI_STATUS, status);
    if (dev->bus && dev->bus->irq && dev->bus->irq->set_irq && dev->config[PCI_INTERRUPT_PIN]) {
        dev->bus->irq->set_irq(dev->bus->irq_opaque, pci_intx_gsi(dev),
                               dev->intx_level && !disabled && !msix_enabled(dev));
    }
}

/* Context: device lock held */
void pci_set_irq(PciDevice *dev, bool level)
{
    dev->intx_level = level;
    pci_update_intx(dev);
}

/* Context: device lock held */
static uint32_t pci_config_read(PciDevice *dev, unsigned off, unsigned size)
{
    uint32_t val = 0;

    if (off >= PCI_CONFIG_SIZE || size > 4 || off + size > PCI_CONFIG_SIZE) {
        return UINT32_MAX;
    }
    if (dev->ops && dev->ops->config_read) {
        dev->ops->config_read(dev, off, size);
    }
    for (unsigned i = 0; i < size; i++) {
        val |= (uint32_t)dev->config[off + i] << (8 * i);
    }
    return val;
}

static bool ranges_overlap(unsigned a, unsigned alen, unsigned b, unsigned blen)
{
    return a < b + blen && b < a + alen;
}

/* Context: device lock held */
static void pci_config_write(PciDevice *dev, unsigned off, uint32_t val, unsigned size)
{
    if (off >= PCI_CONFIG_SIZE || size > 4 || off + size > PCI_CONFIG_SIZE) {
        return;
    }
    for (unsigned i = 0; i < size; i++) {
        uint8_t b = val >> (8 * i);
        uint8_t wm = dev->wmask[off + i];
        uint8_t old = dev->config[off + i];

        dev->config[off + i] = ((old & ~wm) | (b & wm)) & ~(b & dev->w1cmask[off + i]);
    }
    if (ranges_overlap(off, size, PCI_COMMAND, 2) ||
        ranges_overlap(off, size, PCI_BASE_ADDRESS_0, 24)) {
        pci_update_mappings(dev);
    }
    if (ranges_overlap(off, size, PCI_COMMAND, 2)) {
        pci_update_intx(dev);
    }
    if (dev->msix) {
        msix_config_write(dev, off, size);
    }
    if (dev->ops && dev->ops->config_write) {
        dev->ops->config_write(dev, off, val, size);
    }
}

static PciDevice *pci_conf1_target(PciBus *bus, unsigned *reg)
{
    uint32_t a = bus->conf1_addr;

    if (!(a & CONF1_ENABLE) || ((a >> 16) & 0xff) != 0 || ((a >> 8) & 7) != 0) {
        return NULL; /* only bus 0, function 0 exists */
    }
    *reg = a & 0xfc;
    return bus->slots[(a >> 11) & 0x1f];
}

static uint64_t pci_conf1_read(void *opaque, uint64_t off, unsigned size)
{
    PciBus *bus = opaque;
    PciDevice *dev;
    unsigned reg;

    if (off < 4) {
        if (off == 0 && size == 4) {
            return bus->conf1_addr;
        }
        return off == RCR_OFFSET && size == 1 ? 0 : (1ULL << (8 * size)) - 1;
    }
    dev = pci_conf1_target(bus, &reg);
    if (!dev || size > 4) {
        return size >= 4 ? UINT32_MAX : (1ULL << (8 * size)) - 1;
    }
    reg += off - 4;
    /* Clip at the dword boundary: the bytes past it read as ones. */
    if ((reg & 3) + size > 4) {
        unsigned n = 4 - (reg & 3);
        return pci_config_read(dev, reg, n) | (UINT32_MAX << (8 * n) & 0xffffffffu);
    }
    return pci_config_read(dev, reg, size);
}

static void pci_conf1_write(void *opaque, uint64_t off, uint64_t val, unsigned size)
{
    PciBus *bus = opaque;
    PciDevice *dev;
    unsigned reg;

    if (off < 4) {
        if (off == 0 && size == 4) {
            bus->conf1_addr = val; /* only dword accesses latch the address */
        } else if (off == RCR_OFFSET && size == 1 && (val & RCR_RESET) && bus->irq &&
                   bus->irq->reset) {
            bus->irq->reset(bus->irq_opaque);
        }
        return;
    }
    dev = pci_conf1_target(bus, &reg);
    if (!dev || size > 4) {
        return;
    }
    reg += off - 4;
    pci_config_write(dev, reg, val, MIN(size, 4 - (reg & 3)));
}

static const IoRegionOps pci_conf1_ops = {
    .read = pci_conf1_read,
    .write = pci_conf1_write,
};

/* Context: main thread */
PciBus *pci_bus_new(IoBus *pio, IoBus *mmio, const PciIrqOps *irq, void *irq_opaque, GError **errp)
{
    PciBus *bus = g_new0(PciBus, 1);
    const PciDeviceInfo host = {.vendor_id = PCI_HOST_VENDOR,
                                .device_id = PCI_HOST_DEVICE,
                                .class_code = 0x060000 /* bridge, host */};

    bus->pio = pio;
    bus->mmio = mmio;
    bus->irq = irq;
    bus->irq_opaque = irq_opaque;
    bus->mmio_next = VMM_PCI_MMIO_START;
    bus->pio_next = VMM_PCI_PIO_START;
    if (!iobus_add(pio, CONF1_ADDR_PORT, 8, &pci_conf1_ops, bus, errp)) {
        g_free(bus);
        return NULL;
    }
    bus->conf1_registered = true;
    pci_device_init(&bus->host, NULL, &host, "host-bridge");
    pci_bus_register(bus, &bus->host, 0, NULL);
    return bus;
}

/* Context: main thread */
void pci_bus_free(PciBus *bus)
{
    if (!bus) {
        return;
    }
    for (unsigned i = 0; i < PCI_SLOTS; i++) {
        if (bus->slots[i]) {
            pci_bus_unregister(bus, bus->slots[i]);
        }
    }
    if (bus->conf1_registered) {
        iobus_remove(bus->pio, CONF1_ADDR_PORT);
    }
    g_free(bus);
}

/* Context: any thread (no lock) */
PciDevice *pci_bus_device(PciBus *bus, unsigned slot)
{
    return slot < PCI_SLOTS ? bus->slots[slot] : NULL;
}

/* Context: main thread */
int pci_bus_free_slot(PciBus *bus)
{
    for (unsigned i = 1; i < PCI_SLOTS; i++) {
        if (!bus->slots[i]) {
            return i;
        }
    }
    return -1;
}

/* Like firmware: naturally aligned addresses from the BAR window, decode enabled. */
static bool pci_assign_bars(PciBus *bus, PciDevice *dev, GError **errp)
{
    for (unsigned i = 0; i < PCI_NUM_BARS; i++) {
        PciBar *b = &dev->bars[i];
        uint64_t addr;

        if (!b->size) {
            continue;
        }
        if (b->is_io) {
            addr = (bus->pio_next + b->size - 1) & ~(b->size - 1);
            if (addr + b->size > VMM_PCI_PIO_END) {
                g_set_error(errp, VMM_ERROR, ENOSPC, "%s: PCI I/O window is full", dev->name);
                return false;
            }
            bus->pio_next = (uint32_t)(addr + b->size);
            pci_set_long(dev, pci_bar_reg(i), (uint32_t)addr | PCI_BASE_ADDRESS_SPACE_IO);
            continue;
        }
        addr = (bus->mmio_next + b->size - 1) & ~(b->size - 1);
        if (addr + b->size > VMM_PCI_MMIO_END) {
            g_set_error(errp, VMM_ERROR, ENOSPC, "%s: PCI MMIO window is full", dev->name);
            return false;
        }
        bus->mmio_next = addr + b->size;
        pci_set_long(dev, pci_bar_reg(i),
                     (uint32_t)addr | (b->is_64bit ? PCI_BASE_ADDRESS_MEM_TYPE_64 : 0));
        if (b->is_64bit) {
            pci_set_long(dev, pci_bar_reg(i + 1), addr >> 32);
        }
    }
    return true;
}

/* Context: main thread */
bool pci_bus_register(PciBus *bus, PciDevice *dev, unsigned slot, GError **errp)
{
    if (slot >= PCI_SLOTS || bus->slots[slot]) {
        g_set_error(errp, VMM_ERROR, EBUSY, "PCI: slot %u is %s", slot,
                    slot >= PCI_SLOTS ? "out of range" : "already in use");
        return false;
    }
    if (!pci_assign_bars(bus, dev, errp)) {
        return false;
    }
    dev->bus = bus;
    dev->slot = slot;
    bus->slots[slot] = dev;
    pci_set_word(dev, PCI_COMMAND, pci_get_word(dev, PCI_COMMAND) | PCI_COMMAND_MEMORY);
    for (unsigned i = 0; i < PCI_NUM_BARS; i++) {
        if (dev->bars[i].is_io) {
            pci_set_word(dev, PCI_COMMAND, pci_get_word(dev, PCI_COMMAND) | PCI_COMMAND_IO);
        }
    }
    if (dev->config[PCI_INTERRUPT_PIN]) {
        pci_set_byte(dev, PCI_INTERRUPT_LINE, pci_intx_gsi(dev));
    }
    pci_update_mappings(dev);
    memcpy(dev->reset_config, dev->config, PCI_CONFIG_SIZE);
    return true;
}

static void pci_device_reset(PciDevice *dev)
{
    if (dev->ops && dev->ops->reset) {
        dev->ops->reset(dev);
    }
    memcpy(dev->config, dev->reset_config, PCI_CONFIG_SIZE);
    /* Masks every vector and unbinds its irqfd; then the routes go too. */
    msix_reset(dev);
    msix_release_routes(dev);
    dev->intx_level = false;
    pci_update_mappings(dev);
    pci_update_intx(dev);
}

/* Context: device lock held, vCPUs paused */
void pci_bus_reset(PciBus *bus)
{
    bus->conf1_addr = 0;
    for (unsigned i = 0; i < PCI_SLOTS; i++) {
        if (bus->slots[i]) {
            pci_device_reset(bus->slots[i]);
        }
    }
}

/* Context: main thread */
void pci_bus_unregister(PciBus *bus, PciDevice *dev)
{
    for (unsigned i = 0; i < PCI_NUM_BARS; i++) {
        pci_bar_unmap(dev, i);
    }
    /* Routes and irqfds belong to the bus's VM: give them back while we still can. */
    msix_release_routes(dev);
    if (dev->slot < PCI_SLOTS && bus->slots[dev->slot] == dev) {
        bus->slots[dev->slot] = NULL;
    }
    dev->bus = NULL;
}

/* Context: device lock held (msix.c) */
const PciIrqOps *pci_bus_irq_ops(PciBus *bus, void **opaque)
{
    *opaque = bus->irq_opaque;
    return bus->irq;
}
