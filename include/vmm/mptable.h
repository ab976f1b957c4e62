/*
 * vblk: Intel MultiProcessor Specification 1.4 table, the only way this
 * ACPI-less machine tells Linux about its CPUs, IOAPIC and interrupt wiring.
 */
#ifndef VBLK_MPTABLE_H
#define VBLK_MPTABLE_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define MPTABLE_PCI_BUS_ID 0
#define MPTABLE_ISA_BUS_ID 1

/* One PCI interrupt line: device @slot's INTx @pin (1 = INTA) wired to IOAPIC @gsi. */
typedef struct MpPciIrq {
    uint8_t slot;
    uint8_t pin;
    uint8_t gsi;
} MpPciIrq;

typedef struct MpTableConfig {
    unsigned ncpus;
    const MpPciIrq *pci_irqs;
    size_t npci_irqs;
} MpTableConfig;

/* Context: any thread. Bytes needed for the floating pointer plus the table. */
size_t mptable_size(const MpTableConfig *cfg);

/*
 * Context: any thread. Writes the floating pointer at @buf (guest address @gpa) and the
 * configuration table right behind it. @len must be at least mptable_size().
 */
bool mptable_build(uint8_t *buf, size_t len, uint32_t gpa, const MpTableConfig *cfg, GError **errp);

/* Context: any thread. Byte sum (mod 256) of @len bytes; 0 for a valid table. */
uint8_t mptable_checksum(const uint8_t *buf, size_t len);

#endif /* VBLK_MPTABLE_H */
