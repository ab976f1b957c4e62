/*
 * PCI bus fixture shared by tests/vmm/test-pci.c and
 * tests/devices/test-virtio-pci.c: a PCI bus on fresh port and MMIO buses,
 * whose interrupt side is a fake KVM that records what the bus asks of it
 * (MSI routes, irqfds, INTx levels, resets), and the guest's conf1 accesses.
 */
#ifndef VBLK_TESTS_PCIFIX_H
#define VBLK_TESTS_PCIFIX_H

#include <stdbool.h>
#include <stdint.h>

#include "vmm/pci.h"
#include "vmm/vmm.h"

#define PCIFIX_FIRST_GSI 24 /* the first MSI route the fake KVM hands out */

typedef struct FakeKvm {
    int next_gsi;
    int routes_added, routes_updated, routes_removed;
    uint64_t last_addr; /* message of the last route added or updated */
    uint32_t last_data;
    int irqfd[64]; /* by gsi: the eventfd bound as its irqfd, -1 if none */
    int signalled; /* MSIs injected without an irqfd */
    int resets;    /* machine resets asked for (0xcf9) */
    bool intx[32]; /* INTx level by gsi */
} FakeKvm;

typedef struct PciFix {
    IoBus *pio, *mmio;
    PciBus *bus;
    FakeKvm kvm;
} PciFix;

void pcifix_init(PciFix *f);
void pcifix_cleanup(PciFix *f);
/* conf1 (0xcf8/0xcfc) access to bus 0, function 0 of @slot. */
uint32_t pcifix_cfg_read(PciFix *f, unsigned slot, unsigned reg, unsigned size);
void pcifix_cfg_write(PciFix *f, unsigned slot, unsigned reg, unsigned size, uint32_t val);
/* Config-space offset of capability @id of @slot (asserts there is one). */
unsigned pcifix_find_cap(PciFix *f, unsigned slot, uint8_t id);
/* How many gsis have an irqfd bound. */
unsigned pcifix_bound_irqfds(PciFix *f);

#endif
