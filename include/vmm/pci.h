/*
 * vblk: PCI bus 0 behind configuration mechanism #1 (ports 0xcf8/0xcfc),
 * a host bridge at 00:00.0, type-0 device headers with write masks, memory
 * BARs (32/64-bit) with sizing and moves, capability lists, MSI-X and INTx.
 *
 * A device model embeds a PciDevice, fills its header with pci_device_init(),
 * adds BARs and capabilities, then pci_bus_register(). The bus pre-assigns
 * BAR addresses in the MMIO hole (as firmware would), enables memory decode,
 * and from then on dispatches guest MMIO to the device's ops. Whenever a BAR
 * becomes mapped at an address or stops being mapped (guest reprogramming,
 * COMMAND.MEM toggles) the device's bar_mapped() callback runs, so it can
 * move its ioeventfds.
 *
 * Everything here runs under the VM's device lock, except where noted.
 */
#ifndef VBLK_PCI_H
#define VBLK_PCI_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmm/iobus.h"

#define PCI_SLOTS       32
#define PCI_NUM_BARS    6
#define PCI_CONFIG_SIZE 256
#define PCI_CAP_START   0x40
#define PCI_HOST_VENDOR 0x8086
#define PCI_HOST_DEVICE 0x0d57
/* INTx of slot s, pin p (1 = INTA) reaches IOAPIC pin 16 + ((s + p - 1) % 8). */
#define PCI_INTX_GSI_BASE 16

typedef struct PciBus PciBus;
typedef struct PciDevice PciDevice;
typedef struct Msix Msix;

/* What the bus needs from the machine: interrupts and resets. Tests fake it. */
typedef struct PciIrqOps {
    /* Level of an IOAPIC input (INTx without irqfd). */
    void (*set_irq)(void *opaque, unsigned gsi, bool level);
    /* MSI routes: add returns a GSI or -1. */
    int (*msi_route_add)(void *opaque, uint64_t addr, uint32_t data);
    bool (*msi_route_update)(void *opaque, int gsi, uint64_t addr, uint32_t data);
    void (*msi_route_remove)(void *opaque, int gsi);
    /* Bind (@assign) or unbind an eventfd to a GSI (KVM_IRQFD). */
    bool (*irqfd)(void *opaque, int fd, int gsi, bool assign);
    /* Inject one MSI now (KVM_SIGNAL_MSI). */
    void (*signal_msi)(void *opaque, uint64_t addr, uint32_t data);
    /* The guest wrote the reset control register (0xcf9). */
    void (*reset)(void *opaque);
} PciIrqOps;

typedef struct PciDeviceOps {
    /* BAR accesses not claimed by the MSI-X table/PBA. @size 1, 2, 4 or 8. */
    uint64_t (*bar_read)(PciDevice *dev, unsigned bar, uint64_t off, unsigned size);
    void (*bar_write)(PciDevice *dev, unsigned bar, uint64_t off, uint64_t val, unsigned size);
    /* BAR @bar is now decoded at @gpa (@mapped) or no longer decoded there. */
    void (*bar_mapped)(PciDevice *dev, unsigned bar, uint64_t gpa, bool mapped);
    /* After the generic handling of a config write (optional). */
    void (*config_write)(PciDevice *dev, unsigned off, uint32_t val, unsigned size);
    /* Before a config read returns, may patch dev->config (optional). */
    void (*config_read)(PciDevice *dev, unsigned off, unsigned size);
    /* Machine reset: back to power-on state, before the bus resets the header (optional). */
    void (*reset)(PciDevice *dev);
} PciDeviceOps;

typedef struct PciBar {
    uint64_t size; /* 0 = unused; power of two, >= 16 */
    bool is_64bit; /* occupies this and the next BAR register */
    bool is_io;    /* an I/O-space BAR (port I/O bus, COMMAND.IO) */
    bool mapped;   /* currently in the MMIO (or port I/O) bus */
    uint64_t gpa;  /* where it is mapped (valid when mapped) */
    struct PciBarRef {
        PciDevice *dev;
        unsigned bar;
    } ref;
} PciBar;

struct PciDevice {
    const PciDeviceOps *ops;
    PciBus *bus;
    char name[32];
    uint8_t slot; /* device number on bus 0 (function 0 only) */
    uint8_t config[PCI_CONFIG_SIZE];
    uint8_t wmask[PCI_CONFIG_SIZE];   /* bits the guest may write */
    uint8_t w1cmask[PCI_CONFIG_SIZE]; /* bits the guest clears by writing 1 */
    PciBar bars[PCI_NUM_BARS];
    uint8_t cap_next; /* next free config offset for a capability */
    uint8_t cap_last; /* offset of the last capability, 0 if none */
    Msix *msix;
    bool intx_level;
    uint8_t reset_config[PCI_CONFIG_SIZE]; /* config space as registered (firmware's work) */
};

typedef struct PciDeviceInfo {
    uint16_t vendor_id, device_id;
    uint16_t subsystem_vendor_id, subsystem_id;
    uint8_t revision;
    uint32_t class_code;   /* 24 bits: class, subclass, prog-if */
    uint8_t interrupt_pin; /* 0 = none, 1 = INTA ... */
} PciDeviceInfo;

/* Context: main thread. @iobus_pio/@iobus_mmio: where conf1 and BARs are registered. */
PciBus *pci_bus_new(IoBus *pio, IoBus *mmio, const PciIrqOps *irq, void *irq_opaque, GError **errp);
/* Context: main thread */
void pci_bus_free(PciBus *bus);
/* Context: any thread (no lock): the device in @slot, or NULL */
PciDevice *pci_bus_device(PciBus *bus, unsigned slot);
/* Context: main thread. First free slot >= 1, or -1. */
int pci_bus_free_slot(PciBus *bus);

/* Context: main thread. Zeroes @dev and writes a type-0 header. */
void pci_device_init(PciDevice *dev, const PciDeviceOps *ops, const PciDeviceInfo *info,
                     const char *name);
/* Context: main thread, before registration. Memory BAR; @size a power of two >= 16. */
bool pci_device_add_bar(PciDevice *dev, unsigned bar, uint64_t size, bool is_64bit, GError **errp);
/* Context: main thread, before registration. I/O BAR; @size a power of two in 4..256. */
bool pci_device_add_io_bar(PciDevice *dev, unsigned bar, uint32_t size, GError **errp);
/*
 * Context: main thread, before registration. Appends a capability of @len bytes
 * (header included) to the chain; returns its config offset, or 0 (errp set).
 */
uint8_t pci_device_add_cap(PciDevice *dev, uint8_t cap_id, uint8_t len, GError **errp);
/* Context: main thread. Places @dev in @slot, assigns BARs, enables memory (and I/O) decode. */
bool pci_bus_register(PciBus *bus, PciDevice *dev, unsigned slot, GError **errp);
/* Context: main thread. Unmaps BARs and frees the slot. */
void pci_bus_unregister(PciBus *bus, PciDevice *dev);
/*
 * Context: device lock held, vCPUs paused. Machine reset: each device's ops->reset,
 * then its config space as registered (COMMAND, BARs at their pre-assigned
 * addresses, MSI-X disabled), all vectors masked, MSI routes and irqfds released,
 * INTx low.
 */
void pci_bus_reset(PciBus *bus);

/* Context: device lock held. Current guest address of a BAR (0 if unmapped). */
uint64_t pci_bar_address(PciDevice *dev, unsigned bar);

/* INTx. */
/* Context: any thread. The IOAPIC GSI of the device's interrupt pin. */
unsigned pci_intx_gsi(const PciDevice *dev);
/* Context: device lock held. Drives INTx (honours COMMAND.INTX_DISABLE; sets STATUS.INT). */
void pci_set_irq(PciDevice *dev, bool level);

/* Little-endian helpers on dev->config. */
/* Context: any thread */
void pci_set_byte(PciDevice *dev, unsigned off, uint8_t v);
/* Context: any thread */
void pci_set_word(PciDevice *dev, unsigned off, uint16_t v);
/* Context: any thread */
void pci_set_long(PciDevice *dev, unsigned off, uint32_t v);
/* Context: any thread */
uint16_t pci_get_word(const PciDevice *dev, unsigned off);

/*
 * MSI-X (PCI 3.0 §6.8.2). The table and PBA live in BAR @bar at the given offsets;
 * the bus claims those ranges before the device's bar_read/bar_write see anything.
 * Entries reset masked. For each vector the device may attach an eventfd
 * ("notifier"): while the vector is deliverable (MSI-X enabled, function and entry
 * unmasked) the eventfd is bound to an MSI route with KVM_IRQFD, so signalling it
 * injects without a userspace exit; while masked it is unbound and the counter keeps
 * the event, which the PBA reports and unmasking delivers.
 */
/* Context: main thread, before registration. */
bool msix_init(PciDevice *dev, unsigned nvec, unsigned bar, uint32_t table_off, uint32_t pba_off,
               GError **errp);
/* Context: main thread */
void msix_free(PciDevice *dev);
/* Context: device lock held. Attach (@fd >= 0) or detach (-1) a vector's eventfd. */
void msix_set_notifier(PciDevice *dev, unsigned vec, int fd);
/* Context: device lock held. Is MSI-X enabled by the guest? */
bool msix_enabled(PciDevice *dev);
/* Context: device lock held. Would an interrupt on @vec reach the guest now? */
bool msix_vector_deliverable(PciDevice *dev, unsigned vec);
/* Context: device lock held. Is the PBA bit of @vec set? */
bool msix_is_pending(PciDevice *dev, unsigned vec);
/* Context: device lock held. Raise @vec from userspace (sets PBA if masked). */
void msix_notify(PciDevice *dev, unsigned vec);
/* Context: device lock held. Clears pending state, masks all vectors (device reset). */
void msix_reset(PciDevice *dev);
/* Context: device lock held. Table/PBA access, offset relative to the BAR (tests). */
uint64_t msix_bar_read(PciDevice *dev, uint64_t off, unsigned size, bool *claimed);
/* Context: device lock held */
bool msix_bar_write(PciDevice *dev, uint64_t off, uint64_t val, unsigned size);

#endif /* VBLK_PCI_H */
