/* vblk: glue between pci.c and msix.c; not a public interface. */
#ifndef VBLK_PCI_INTERNAL_H
#define VBLK_PCI_INTERNAL_H

#include "vmm/pci.h"

/* BAR index holding the MSI-X table and PBA. */
unsigned msix_bar(PciDevice *dev);
/* Called after any config write, to react to Message Control changes. */
void msix_config_write(PciDevice *dev, unsigned off, unsigned size);
/* Unbinds every vector's irqfd and removes its MSI route (device leaving the bus). */
void msix_release_routes(PciDevice *dev);
/* The bus's interrupt callbacks, or NULL when the device is not on a bus. */
const PciIrqOps *pci_bus_irq_ops(PciBus *bus, void **opaque);

#endif /* VBLK_PCI_INTERNAL_H */
