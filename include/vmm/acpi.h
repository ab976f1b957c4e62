/*
 * vblk: ACPI for a firmware-less PC: the tables (RSDP, XSDT, FADT, FACS, MADT,
 * DSDT) written into the BIOS area Linux scans, and the PM1 fixed-hardware
 * registers (power button, SCI, S5 soft-off) on port I/O. docs/vmm.md, "ACPI".
 *
 * Guest view:
 *   0xE0000            RSDP (revision 2), then XSDT, FADT, FACS, MADT, DSDT
 *   ports 0x600-0x603  PM1a_EVT_BLK: PM1_STS (0x600), PM1_EN (0x602)
 *   ports 0x604-0x605  PM1a_CNT_BLK: SCI_EN always 1, SLP_TYP, SLP_EN
 *   SCI                ISA IRQ 9 = GSI 9, level, active high (MADT override)
 */
#ifndef VBLK_ACPI_H
#define VBLK_ACPI_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "vmm/vmm.h"

#define ACPI_TABLES_ADDR 0xE0000ULL  /* RSDP here: Linux scans 0xE0000-0xFFFFF */
#define ACPI_TABLES_END  0x100000ULL /* e820 reserves [0x9FC00, 1 MiB) */
#define ACPI_PM_BASE     0x600
#define ACPI_PM1_EVT     ACPI_PM_BASE
#define ACPI_PM1_EVT_LEN 4
#define ACPI_PM1_CNT     (ACPI_PM_BASE + ACPI_PM1_EVT_LEN)
#define ACPI_PM1_CNT_LEN 2
#define ACPI_PM_LEN      (ACPI_PM1_EVT_LEN + ACPI_PM1_CNT_LEN)
#define ACPI_SCI_IRQ     9
#define ACPI_S5_SLP_TYP  5 /* \_S5 = {5, 5}: any 3-bit value; 0 would be too easy to hit */

/* PM1 status/enable bits (ACPI 6.5 4.8.3.1) that this machine has. */
#define ACPI_PM1_TMR    (1u << 0)
#define ACPI_PM1_GBL    (1u << 5)
#define ACPI_PM1_PWRBTN (1u << 8)
#define ACPI_PM1_SLPBTN (1u << 9)
#define ACPI_PM1_RTC    (1u << 10)
#define ACPI_PM1_WAK    (1u << 15)
#define ACPI_PM1_EN_MASK                                                                           \
    (ACPI_PM1_TMR | ACPI_PM1_GBL | ACPI_PM1_PWRBTN | ACPI_PM1_SLPBTN | ACPI_PM1_RTC)
/* PM1 control bits (4.8.3.2). */
#define ACPI_PM1_CNT_SCI_EN    (1u << 0)
#define ACPI_PM1_CNT_BM_RLD    (1u << 1)
#define ACPI_PM1_CNT_GBL_RLS   (1u << 2)
#define ACPI_PM1_CNT_SLP_SHIFT 10
#define ACPI_PM1_CNT_SLP_TYP   (7u << ACPI_PM1_CNT_SLP_SHIFT)
#define ACPI_PM1_CNT_SLP_EN    (1u << 13)

/* ---- tables ------------------------------------------------------------ */

typedef struct AcpiConfig {
    unsigned ncpus;    /* LAPIC IDs 0..ncpus-1, as vcpu.c gives them */
    uint64_t ram_size; /* the PCI memory window starts where low RAM ends */
} AcpiConfig;

/*
 * Context: any thread. All tables as one blob to be copied to guest address @gpa
 * (the RSDP first, 16-byte aligned); NULL with @errp set when it would not fit
 * below ACPI_TABLES_END. Free with g_byte_array_unref().
 */
GByteArray *acpi_build_tables(const AcpiConfig *cfg, uint64_t gpa, GError **errp);
/* Context: any thread. Byte sum (mod 256); 0 for a valid table. */
uint8_t acpi_checksum(const uint8_t *buf, size_t len);

/* ---- PM1 registers ----------------------------------------------------- */

/* The register model, testable without a VM. */
typedef struct AcpiPm {
    uint16_t sts; /* PM1_STS; write 1 to clear */
    uint16_t en;  /* PM1_EN */
    uint16_t cnt; /* PM1_CNT bits that are stored (BM_RLD, SLP_TYP) */
    bool sci;     /* current SCI level: (sts & en) != 0 */
    uint64_t pwrbtn_presses;
    uint64_t pwrbtn_ignored; /* presses while the guest had PWRBTN_EN clear */
    void (*set_sci)(void *opaque, bool level);
    void (*poweroff)(void *opaque); /* SLP_EN with the \_S5 SLP_TYP */
    void *opaque;
} AcpiPm;

/* Context: any thread. Power-on state: everything clear, SCI low. */
void acpi_pm_init(AcpiPm *pm, void (*set_sci)(void *, bool), void (*poweroff)(void *),
                  void *opaque);
/* Context: device lock held. Back to the power-on state; lowers SCI if it was high. */
void acpi_pm_reset(AcpiPm *pm);
/* Context: device lock held. @off into the 6-byte block, any size; bytes past it read 0xff. */
uint64_t acpi_pm_read(AcpiPm *pm, uint64_t off, unsigned size);
/* Context: device lock held. Bytes past the block are dropped. */
void acpi_pm_write(AcpiPm *pm, uint64_t off, uint64_t val, unsigned size);
/*
 * Context: device lock held. Sets PWRBTN_STS (SCI if the guest enabled it). Returns false
 * when the guest has not enabled the power button: it does not listen (acpi=off, or no
 * ACPI driver yet).
 */
bool acpi_pm_press_power_button(AcpiPm *pm);

/* The device on a VM: ports ACPI_PM_BASE.., SCI on GSI 9, S5 -> VM_EXIT_POWEROFF. */
typedef struct AcpiPmDevice AcpiPmDevice;

/* Context: main thread */
AcpiPmDevice *acpi_pm_device_new(Vm *vm, GError **errp);
/* Context: main thread */
void acpi_pm_device_free(AcpiPmDevice *dev);
/* Context: device lock held (the main thread's BQL). See acpi_pm_press_power_button(). */
bool acpi_pm_device_powerdown(AcpiPmDevice *dev);
/* Context: device lock held. For an in-place system_reset. */
void acpi_pm_device_reset(AcpiPmDevice *dev);
/* Context: device lock held. The register model (QMP queries, tests). */
const AcpiPm *acpi_pm_device_state(AcpiPmDevice *dev);

#endif /* VBLK_ACPI_H */
