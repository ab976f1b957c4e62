/*
 * vblk: ACPI tables for a firmware-less PC (ACPI 6.5 chapter 5): RSDP, XSDT,
 * FADT, FACS, MADT and a DSDT with \_S5 and the PCI root bridge \_SB.PCI0.
 *
 * One blob, copied to 0xE0000 where Linux scans for the RSDP; e820 already
 * reserves [0x9FC00, 1 MiB). The interrupt model matches the MP table and
 * KVM's GSI routing (kvm.c): ISA IRQ n is IOAPIC pin n (no IRQ0 -> 2 override,
 * the in-kernel PIT raises GSI 0), the SCI is IRQ 9 level active high (an
 * override says so), PCI INTx go to GSIs 16-23 as pci_intx_gsi() computes.
 */
#include <errno.h>
#include <string.h>

#include "vmm/acpi.h"
#include "vmm/aml.h"
#include "vmm/pci.h"

#define ACPI_HDR_LEN   36
#define ACPI_OEM_ID    "VBLK  "
#define ACPI_OEM_TABLE "VBLKVMM "
#define ACPI_CREATOR   "VBLK"

#define RSDP_LEN    36
#define RSDP_V1_LEN 20
#define FACS_LEN    64
#define FADT_LEN    276 /* revision 6 (ACPI 6.5), with the hypervisor vendor field */
#define FADT_REV    6
#define FADT_MINOR  5

/* FADT field offsets (ACPI 6.5 table 5.9). */
#define FADT_FIRMWARE_CTRL   36
#define FADT_DSDT            40
#define FADT_SCI_INT         46
#define FADT_SMI_CMD         48
#define FADT_PM1A_EVT_BLK    56
#define FADT_PM1A_CNT_BLK    64
#define FADT_PM1_EVT_LEN     88
#define FADT_PM1_CNT_LEN     89
#define FADT_P_LVL2_LAT      96
#define FADT_P_LVL3_LAT      98
#define FADT_CENTURY         108
#define FADT_IAPC_BOOT_ARCH  109
#define FADT_FLAGS           112
#define FADT_RESET_REG       116
#define FADT_RESET_VALUE     128
#define FADT_MINOR_VERSION   131
#define FADT_X_FIRMWARE_CTRL 132
#define FADT_X_DSDT          140
#define FADT_X_PM1A_EVT_BLK  148
#define FADT_X_PM1A_CNT_BLK  172
#define FADT_HYPERVISOR_ID   268

/* FADT flags (table 5.10). PWR_BUTTON clear: the power button is the fixed feature. */
#define FADT_F_WBINVD        (1u << 0)
#define FADT_F_PROC_C1       (1u << 2)
#define FADT_F_SLP_BUTTON    (1u << 5) /* no fixed-feature sleep button */
#define FADT_F_FIX_RTC       (1u << 6) /* no RTC wake status in PM1 */
#define FADT_F_RESET_REG_SUP (1u << 10)
/* IAPC_BOOT_ARCH (table 5.11): legacy devices (COM1, CMOS), an i8042, no VGA. */
#define BOOT_ARCH_LEGACY_DEVICES  (1u << 0)
#define BOOT_ARCH_8042            (1u << 1)
#define BOOT_ARCH_VGA_NOT_PRESENT (1u << 2)

#define GAS_LEN       12
#define GAS_SYSTEM_IO 1
#define GAS_BYTE      1
#define GAS_WORD      2

#define RESET_PORT   0xcf9 /* pci.c: bit 2 resets */
#define RESET_VALUE  0x06
#define CMOS_CENTURY 0x32

/* MADT (5.2.12). */
#define MADT_PCAT_COMPAT  1
#define MADT_LAPIC        0
#define MADT_IOAPIC       1
#define MADT_INT_OVERRIDE 2
#define MADT_LAPIC_NMI    4
#define MADT_ENABLED      1
#define MPS_ACTIVE_HIGH   0x1
#define MPS_LEVEL         0xc

/* The conf1 ports and the PCI windows of _CRS. */
#define PCI_CONF1_PORT 0xcf8
#define PCI_CONF1_LEN  8

static void set_le(GByteArray *b, size_t off, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        b->data[off + i] = (uint8_t)(v >> (8 * i));
    }
}

static void align_to(GByteArray *b, size_t align)
{
    g_byte_array_set_size(b, (b->len + align - 1) / align * align);
}

static size_t zeros(GByteArray *b, size_t n)
{
    size_t off = b->len;

    g_byte_array_set_size(b, off + n);
    memset(b->data + off, 0, n);
    return off;
}

/* Context: any thread */
uint8_t acpi_checksum(const uint8_t *buf, size_t len)
{
    uint8_t sum = 0;

    for (size_t i = 0; i < len; i++) {
        sum += buf[i];
    }
    return sum;
}

/* A standard 36-byte header (5.2.6); length and checksum come in table_end(). */
static size_t table_begin(GByteArray *b, const char *sig, uint8_t rev)
{
    size_t off;

    align_to(b, 8);
    off = zeros(b, ACPI_HDR_LEN);
    memcpy(b->data + off, sig, 4);
    b->data[off + 8] = rev;
    memcpy(b->data + off + 10, ACPI_OEM_ID, 6);
    memcpy(b->data + off + 16, ACPI_OEM_TABLE, 8);
    set_le(b, off + 24, 1, 4); /* OEM revision */
    memcpy(b->data + off + 28, ACPI_CREATOR, 4);
    set_le(b, off + 32, 1, 4); /* creator revision */
    return off;
}

static void table_end(GByteArray *b, size_t off)
{
    set_le(b, off + 4, b->len - off, 4);
    b->data[off + 9] = 0;
    b->data[off + 9] = -acpi_checksum(b->data + off, b->len - off);
}

static void set_gas(GByteArray *b, size_t off, uint8_t bits, uint8_t access, uint64_t port)
{
    b->data[off] = GAS_SYSTEM_IO;
    b->data[off + 1] = bits;
    b->data[off + 2] = 0; /* bit offset */
    b->data[off + 3] = access;
    set_le(b, off + 4, port, 8);
}

static void put_bytes(GByteArray *b, const void *p, size_t n)
{
    g_byte_array_append(b, p, n);
}

static void put_le(GByteArray *b, uint64_t v, unsigned n)
{
    size_t off = zeros(b, n);

    set_le(b, off, v, n);
}

/* _CRS of the root bridge: everything the PCI bus decodes. */
static void dsdt_pci_crs(GByteArray *b, const AcpiConfig *cfg)
{
    g_autoptr(GByteArray) r = g_byte_array_new();
    uint64_t low_end = MIN(cfg->ram_size, VMM_MMIO_HOLE_START);

    aml_res_bus_numbers(r, 0, 0xff);
    aml_res_io(r, PCI_CONF1_PORT, PCI_CONF1_LEN);
    aml_res_io_window(r, 0x0000, PCI_CONF1_PORT - 1);
    aml_res_io_window(r, PCI_CONF1_PORT + PCI_CONF1_LEN, 0xffff);
    /* From the end of low RAM (where Linux re-assigns) through the pre-assigned BARs. */
    aml_res_mem32_window(r, (uint32_t)low_end, (uint32_t)(VMM_PCI_MMIO_END - 1));
    aml_res_end(r);
    aml_name_decl(b, "_CRS");
    aml_buffer(b, r->data, r->len);
}

/* _PRT: slot s pin p (0 = INTA) -> GSI; source Zero means "the index is a GSI". */
static void dsdt_pci_prt(GByteArray *b)
{
    size_t prt;

    aml_name_decl(b, "_PRT");
    prt = aml_package_begin(b, (PCI_SLOTS - 1) * 4);
    for (unsigned slot = 1; slot < PCI_SLOTS; slot++) {
        for (unsigned pin = 0; pin < 4; pin++) {
            size_t e = aml_package_begin(b, 4);

            aml_integer(b, ((uint64_t)slot << 16) | 0xffff);
            aml_integer(b, pin);
            aml_integer(b, 0);
            aml_integer(b, PCI_INTX_GSI_BASE + (slot + pin) % 8);
            aml_end(b, e);
        }
    }
    aml_end(b, prt);
}

static size_t build_dsdt(GByteArray *b, const AcpiConfig *cfg)
{
    size_t off = table_begin(b, "DSDT", 2); /* revision 2: 64-bit integers */
    size_t pkg, sb, dev;

    /* \_S5: SLP_TYPa, SLP_TYPb (both blocks would get the same value), reserved. */
    aml_name_decl(b, "\\_S5");
    pkg = aml_package_begin(b, 4);
    aml_integer(b, ACPI_S5_SLP_TYP);
    aml_integer(b, ACPI_S5_SLP_TYP);
    aml_integer(b, 0);
    aml_integer(b, 0);
    aml_end(b, pkg);

    sb = aml_scope_begin(b, "\\_SB");
    dev = aml_device_begin(b, "PCI0");
    aml_name_decl(b, "_HID");
    aml_integer(b, aml_eisaid("PNP0A03"));
    aml_name_decl(b, "_UID");
    aml_integer(b, 0);
    aml_name_decl(b, "_SEG");
    aml_integer(b, 0);
    aml_name_decl(b, "_BBN");
    aml_integer(b, 0);
    dsdt_pci_crs(b, cfg);
    dsdt_pci_prt(b);
    aml_end(b, dev);
    aml_end(b, sb);
    table_end(b, off);
    return off;
}

static size_t build_facs(GByteArray *b)
{
    size_t off;

    align_to(b, 64); /* the FACS must be 64-byte aligned */
    off = zeros(b, FACS_LEN);
    memcpy(b->data + off, "FACS", 4);
    set_le(b, off + 4, FACS_LEN, 4);
    b->data[off + 32] = 2; /* version */
    return off;
}

static size_t build_fadt(GByteArray *b, uint64_t gpa, size_t facs, size_t dsdt)
{
    size_t off = table_begin(b, "FACP", FADT_REV);

    zeros(b, FADT_LEN - ACPI_HDR_LEN);
    set_le(b, off + FADT_FIRMWARE_CTRL, gpa + facs, 4);
    set_le(b, off + FADT_DSDT, gpa + dsdt, 4);
    set_le(b, off + FADT_SCI_INT, ACPI_SCI_IRQ, 2);
    /* SMI_CMD = 0: no legacy mode, ACPI is always on (SCI_EN reads 1). */
    set_le(b, off + FADT_SMI_CMD, 0, 4);
    set_le(b, off + FADT_PM1A_EVT_BLK, ACPI_PM1_EVT, 4);
    set_le(b, off + FADT_PM1A_CNT_BLK, ACPI_PM1_CNT, 4);
    b->data[off + FADT_PM1_EVT_LEN] = ACPI_PM1_EVT_LEN;
    b->data[off + FADT_PM1_CNT_LEN] = ACPI_PM1_CNT_LEN;
    /* No PM timer, no GPE blocks, no C2/C3 (latencies above 100 / 1000 us). */
    set_le(b, off + FADT_P_LVL2_LAT, 101, 2);
    set_le(b, off + FADT_P_LVL3_LAT, 1001, 2);
    b->data[off + FADT_CENTURY] = CMOS_CENTURY;
    set_le(b, off + FADT_IAPC_BOOT_ARCH,
           BOOT_ARCH_LEGACY_DEVICES | BOOT_ARCH_8042 | BOOT_ARCH_VGA_NOT_PRESENT, 2);
    set_le(b, off + FADT_FLAGS,
           FADT_F_WBINVD | FADT_F_PROC_C1 | FADT_F_SLP_BUTTON | FADT_F_FIX_RTC |
               FADT_F_RESET_REG_SUP,
           4);
    set_gas(b, off + FADT_RESET_REG, 8, GAS_BYTE, RESET_PORT);
    b->data[off + FADT_RESET_VALUE] = RESET_VALUE;
    b->data[off + FADT_MINOR_VERSION] = FADT_MINOR;
    /* X_FIRMWARE_CTRL stays 0: the spec wants one of the two, and Linux lists both. */
    set_le(b, off + FADT_X_DSDT, gpa + dsdt, 8);
    set_gas(b, off + FADT_X_PM1A_EVT_BLK, ACPI_PM1_EVT_LEN * 8, GAS_WORD, ACPI_PM1_EVT);
    set_gas(b, off + FADT_X_PM1A_CNT_BLK, ACPI_PM1_CNT_LEN * 8, GAS_WORD, ACPI_PM1_CNT);
    memcpy(b->data + off + FADT_HYPERVISOR_ID, "VBLK\0\0\0\0", 8);
    table_end(b, off);
    return off;
}

static size_t build_madt(GByteArray *b, const AcpiConfig *cfg)
{
    size_t off = table_begin(b, "APIC", 5);
    /* The same IOAPIC ID as the MP table: above every LAPIC ID. */
    uint8_t ioapic_id = cfg->ncpus + 1;

    put_le(b, VMM_LAPIC_ADDR, 4);
    put_le(b, MADT_PCAT_COMPAT, 4); /* the 8259s exist (in KVM) and Linux masks them */
    for (unsigned i = 0; i < cfg->ncpus; i++) {
        uint8_t lapic[8] = {MADT_LAPIC, 8, (uint8_t)i, (uint8_t)i, MADT_ENABLED, 0, 0, 0};

        put_bytes(b, lapic, sizeof(lapic));
    }
    {
        uint8_t ioapic[4] = {MADT_IOAPIC, 12, ioapic_id, 0};

        put_bytes(b, ioapic, sizeof(ioapic));
        put_le(b, VMM_IOAPIC_ADDR, 4);
        put_le(b, 0, 4); /* GSI base */
    }
    {
        /* SCI: ISA IRQ 9 -> GSI 9, level, active high, as acpi_pm drives the KVM line. */
        uint8_t iso[4] = {MADT_INT_OVERRIDE, 10, 0 /* ISA */, ACPI_SCI_IRQ};

        put_bytes(b, iso, sizeof(iso));
        put_le(b, ACPI_SCI_IRQ, 4);
        put_le(b, MPS_ACTIVE_HIGH | MPS_LEVEL, 2);
    }
    {
        /* NMI on LINT1 of every processor (vcpu.c programs LVT1 = NMI). */
        uint8_t nmi[6] = {MADT_LAPIC_NMI, 6, 0xff, 0, 0, 1};

        put_bytes(b, nmi, sizeof(nmi));
    }
    table_end(b, off);
    return off;
}

static size_t build_xsdt(GByteArray *b, uint64_t gpa, const size_t *tables, size_t n)
{
    size_t off = table_begin(b, "XSDT", 1);

    for (size_t i = 0; i < n; i++) {
        put_le(b, gpa + tables[i], 8);
    }
    table_end(b, off);
    return off;
}

/* Context: any thread */
GByteArray *acpi_build_tables(const AcpiConfig *cfg, uint64_t gpa, GError **errp)
{
    GByteArray *b;
    size_t facs, dsdt, fadt, madt, xsdt, tables[2];

    if (cfg->ncpus == 0 || cfg->ncpus > VMM_MAX_VCPUS || (gpa & 15) || gpa > UINT32_MAX) {
        g_set_error(errp, VMM_ERROR, ENOSPC, "ACPI: %u CPUs / tables at 0x%" G_GINT64_MODIFIER "x",
                    cfg->ncpus, gpa);
        return NULL;
    }
    b = g_byte_array_new();
    zeros(b, RSDP_LEN);
    facs = build_facs(b);
    dsdt = build_dsdt(b, cfg);
    fadt = build_fadt(b, gpa, facs, dsdt);
    madt = build_madt(b, cfg);
    tables[0] = fadt;
    tables[1] = madt;
    xsdt = build_xsdt(b, gpa, tables, G_N_ELEMENTS(tables));

    /* RSDP (5.2.5.3): revision 2, no RSDT, both checksums. */
    memcpy(b->data, "RSD PTR ", 8);
    memcpy(b->data + 9, ACPI_OEM_ID, 6);
    b->data[15] = 2;
    set_le(b, 20, RSDP_LEN, 4);
    set_le(b, 24, gpa + xsdt, 8);
    b->data[8] = -acpi_checksum(b->data, RSDP_V1_LEN);
    b->data[32] = -acpi_checksum(b->data, RSDP_LEN);

    if (gpa + b->len > ACPI_TABLES_END) {
        g_set_error(errp, VMM_ERROR, ENOSPC, "ACPI tables (%u bytes) do not fit below 1 MiB",
                    b->len);
        g_byte_array_unref(b);
        return NULL;
    }
    return b;
}
