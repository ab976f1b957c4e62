/* Unit tests: ACPI tables (checksums, lengths, layout read back) and the PM1 registers. */
#include <glib.h>
#include <string.h>

#include "vmm/acpi.h"
#include "vmm/aml.h"
#include "vmm/pci.h"

#define GPA 0xE0000ULL

static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;

    for (unsigned i = 0; i < n; i++) {
        v |= (uint64_t)p[i] << (8 * i);
    }
    return v;
}

/* A table by guest address inside the blob; checks signature, length, checksum. */
static const uint8_t *table_at(GByteArray *b, uint64_t gpa, const char *sig)
{
    const uint8_t *t;
    uint32_t len;

    g_assert_cmpuint(gpa, >=, GPA);
    g_assert_cmpuint(gpa - GPA + 36, <=, b->len);
    t = b->data + (gpa - GPA);
    g_assert_cmpmem(t, 4, sig, 4);
    len = le(t + 4, 4);
    g_assert_cmpuint(len, >=, 36);
    g_assert_cmpuint(gpa - GPA + len, <=, b->len);
    g_assert_cmpuint(acpi_checksum(t, len), ==, 0);
    g_assert_cmpmem(t + 10, 6, "VBLK  ", 6);
    return t;
}

/* PkgLength decoding (ACPI 20.2.4): returns the length, *n = its bytes. */
static size_t pkglen(const uint8_t *p, unsigned *n)
{
    size_t len;

    *n = (p[0] >> 6) + 1;
    if (*n == 1) {
        return p[0] & 0x3f;
    }
    len = p[0] & 0xf;
    for (unsigned i = 1; i < *n; i++) {
        len |= (size_t)p[i] << (4 + 8 * (i - 1));
    }
    return len;
}

static const uint8_t *find(const uint8_t *hay, size_t len, const void *needle, size_t nlen)
{
    for (size_t i = 0; i + nlen <= len; i++) {
        if (!memcmp(hay + i, needle, nlen)) {
            return hay + i;
        }
    }
    return NULL;
}

/* Decodes one AML integer (Zero/One/Byte/Word/DWord/QWord); returns bytes used. */
static unsigned aml_int(const uint8_t *p, uint64_t *v)
{
    switch (p[0]) {
    case 0x00:
        *v = 0;
        return 1;
    case 0x01:
        *v = 1;
        return 1;
    case 0x0a:
        *v = p[1];
        return 2;
    case 0x0b:
        *v = le(p + 1, 2);
        return 3;
    case 0x0c:
        *v = le(p + 1, 4);
        return 5;
    case 0x0e:
        *v = le(p + 1, 8);
        return 9;
    }
    g_assert_not_reached();
}

static void check_dsdt(const uint8_t *dsdt, const AcpiConfig *cfg)
{
    uint32_t len = le(dsdt + 4, 4);
    const uint8_t *p, *end;
    unsigned n, nelems;
    uint64_t v, low_end = MIN(cfg->ram_size, VMM_MMIO_HOLE_START);
    bool saw_bus = false, saw_conf1 = false, saw_mem = false, saw_end = false;
    unsigned prt = 0;

    g_assert_cmpuint(dsdt[8], ==, 2);
    /* Name(\_S5, Package(4){5, 5, 0, 0}) */
    p = find(dsdt, len, "\x08\\_S5_\x12", 7);
    g_assert_nonnull(p);
    p += 7;
    pkglen(p, &n);
    p += n;
    g_assert_cmpuint(*p++, ==, 4);
    p += aml_int(p, &v);
    g_assert_cmpuint(v, ==, ACPI_S5_SLP_TYP);
    p += aml_int(p, &v);
    g_assert_cmpuint(v, ==, ACPI_S5_SLP_TYP);

    /* Scope(\_SB) { Device(PCI0) {...} } spans to the end of the table. */
    p = find(dsdt, len, "\\_SB_", 5);
    g_assert_nonnull(p);
    p = find(dsdt, len, "\x5b\x82", 2);
    g_assert_nonnull(p);
    g_assert_cmpuint(pkglen(p + 2, &n) + (p + 2 - dsdt), ==, len);
    g_assert_cmpmem(p + 2 + n, 4, "PCI0", 4);
    /* _HID EisaId("PNP0A03") = DWord 0x030AD041 */
    g_assert_nonnull(find(dsdt, len, "\x08_HID\x0c\x41\xd0\x0a\x03", 10));
    g_assert_cmphex(aml_eisaid("PNP0A03"), ==, 0x030AD041);

    /* _CRS: Buffer(n) { descriptors, EndTag } */
    p = find(dsdt, len, "\x08_CRS\x11", 6);
    g_assert_nonnull(p);
    p += 6;
    end = p + pkglen(p, &n);
    p += n;
    p += aml_int(p, &v);
    g_assert_cmpuint(end - p, ==, v);
    while (p < end && !saw_end) {
        if (p[0] == 0x79) {
            saw_end = true;
            p += 2;
        } else if (p[0] == 0x47) {
            saw_conf1 |= le(p + 2, 2) == 0xcf8 && p[7] == 8;
            p += 8;
        } else {
            unsigned w = p[0] == 0x88 ? 2 : p[0] == 0x87 ? 4 : 8;
            uint64_t min = le(p + 6 + w, w), max = le(p + 6 + 2 * w, w);

            g_assert_true(p[0] == 0x88 || p[0] == 0x87 || p[0] == 0x8a);
            g_assert_cmpuint(le(p + 1, 2), ==, 3 + 5 * w);
            g_assert_cmpuint(le(p + 6 + 4 * w, w), ==, max - min + 1);
            if (p[3] == 2) {
                saw_bus = min == 0 && max == 0xff;
            } else if (p[3] == 0) {
                saw_mem = min == low_end && max == VMM_PCI_MMIO_END - 1;
            }
            p += 3 + le(p + 1, 2);
        }
    }
    g_assert_true(saw_end && saw_bus && saw_conf1 && saw_mem);
    g_assert_true(p == end);

    /* _PRT: Package(124) { Package(4) {0xSSSSFFFF, pin, 0, gsi} ... } */
    p = find(dsdt, len, "\x08_PRT\x12", 6);
    g_assert_nonnull(p);
    p += 6;
    end = p + pkglen(p, &n);
    p += n;
    nelems = *p++;
    g_assert_cmpuint(nelems, ==, (PCI_SLOTS - 1) * 4);
    while (p < end) {
        uint64_t addr, pin, src, gsi;

        g_assert_cmpuint(*p++, ==, 0x12);
        pkglen(p, &n);
        p += n;
        g_assert_cmpuint(*p++, ==, 4);
        p += aml_int(p, &addr);
        p += aml_int(p, &pin);
        p += aml_int(p, &src);
        p += aml_int(p, &gsi);
        g_assert_cmphex(addr & 0xffff, ==, 0xffff);
        g_assert_cmpuint(src, ==, 0);
        /* pci_intx_gsi(): 16 + (slot + pin - 1) % 8, with pin 1 = INTA */
        g_assert_cmpuint(gsi, ==, PCI_INTX_GSI_BASE + ((addr >> 16) + pin) % 8);
        prt++;
    }
    g_assert_true(p == end);
    g_assert_cmpuint(prt, ==, nelems);
}

static void check_tables(unsigned ncpus, uint64_t ram)
{
    AcpiConfig cfg = {.ncpus = ncpus, .ram_size = ram};
    GError *err = NULL;
    g_autoptr(GByteArray) b = acpi_build_tables(&cfg, GPA, &err);
    const uint8_t *xsdt, *fadt, *madt, *dsdt, *facs, *e, *end;
    unsigned lapics = 0, ioapics = 0, isos = 0, nmis = 0;
    uint64_t facs_gpa;

    g_assert_no_error(err);
    g_assert_cmpuint(GPA + b->len, <=, ACPI_TABLES_END);
    /* RSDP: revision 2, both checksums, no RSDT. */
    g_assert_cmpmem(b->data, 8, "RSD PTR ", 8);
    g_assert_cmpuint(acpi_checksum(b->data, 20), ==, 0);
    g_assert_cmpuint(acpi_checksum(b->data, 36), ==, 0);
    g_assert_cmpuint(b->data[15], ==, 2);
    g_assert_cmpuint(le(b->data + 20, 4), ==, 36);

    xsdt = table_at(b, le(b->data + 24, 8), "XSDT");
    g_assert_cmpuint(le(xsdt + 4, 4), ==, 36 + 2 * 8);
    fadt = table_at(b, le(xsdt + 36, 8), "FACP");
    madt = table_at(b, le(xsdt + 44, 8), "APIC");

    /* FADT */
    g_assert_cmpuint(le(fadt + 4, 4), ==, 276);
    g_assert_cmpuint(fadt[8], ==, 6);
    g_assert_cmpuint(le(fadt + 40, 4), ==, le(fadt + 140, 8)); /* DSDT == X_DSDT */
    g_assert_cmpuint(le(fadt + 132, 8), ==, 0);                /* FACS only in FIRMWARE_CTRL */
    dsdt = table_at(b, le(fadt + 140, 8), "DSDT");
    facs_gpa = le(fadt + 36, 4);
    g_assert_cmpuint(facs_gpa % 64, ==, 0);
    facs = b->data + (facs_gpa - GPA);
    g_assert_cmpmem(facs, 4, "FACS", 4);
    g_assert_cmpuint(le(facs + 4, 4), ==, 64);
    g_assert_cmpuint(le(fadt + 46, 2), ==, ACPI_SCI_IRQ);
    g_assert_cmpuint(le(fadt + 48, 4), ==, 0); /* SMI_CMD: ACPI always on */
    g_assert_cmphex(le(fadt + 56, 4), ==, ACPI_PM1_EVT);
    g_assert_cmphex(le(fadt + 64, 4), ==, ACPI_PM1_CNT);
    g_assert_cmpuint(le(fadt + 76, 4), ==, 0); /* no PM timer */
    g_assert_cmpuint(le(fadt + 80, 4), ==, 0); /* no GPE0 */
    g_assert_cmpuint(fadt[88], ==, 4);
    g_assert_cmpuint(fadt[89], ==, 2);
    g_assert_cmphex(le(fadt + 109, 2), ==, 0x7);            /* legacy devices, 8042, no VGA */
    g_assert_cmphex(le(fadt + 112, 4) & (1u << 4), ==, 0);  /* fixed power button */
    g_assert_cmphex(le(fadt + 112, 4) & (1u << 5), !=, 0);  /* no fixed sleep button */
    g_assert_cmphex(le(fadt + 112, 4) & (1u << 20), ==, 0); /* not hardware-reduced */
    g_assert_cmphex(le(fadt + 112, 4) & (1u << 10), !=, 0); /* RESET_REG_SUP */
    g_assert_cmpuint(fadt[116], ==, 1);                     /* RESET_REG in I/O space */
    g_assert_cmphex(le(fadt + 120, 8), ==, 0xcf9);
    g_assert_cmpuint(fadt[128], ==, 6);
    /* X_PM1a blocks: I/O, bit widths matching the 32-bit lengths. */
    g_assert_cmpuint(fadt[148], ==, 1);
    g_assert_cmpuint(fadt[149], ==, 32);
    g_assert_cmphex(le(fadt + 152, 8), ==, ACPI_PM1_EVT);
    g_assert_cmpuint(fadt[172], ==, 1);
    g_assert_cmpuint(fadt[173], ==, 16);
    g_assert_cmphex(le(fadt + 176, 8), ==, ACPI_PM1_CNT);

    /* MADT */
    g_assert_cmphex(le(madt + 36, 4), ==, VMM_LAPIC_ADDR);
    g_assert_cmpuint(le(madt + 40, 4), ==, 1);
    end = madt + le(madt + 4, 4);
    for (e = madt + 44; e < end; e += e[1]) {
        g_assert_cmpuint(e[1], >=, 2);
        g_assert_cmpuint(e + e[1] - madt, <=, end - madt);
        switch (e[0]) {
        case 0:
            g_assert_cmpuint(e[1], ==, 8);
            g_assert_cmpuint(e[3], ==, lapics); /* APIC IDs 0..n-1 as vcpu.c */
            g_assert_cmpuint(le(e + 4, 4), ==, 1);
            lapics++;
            break;
        case 1:
            g_assert_cmpuint(e[1], ==, 12);
            g_assert_cmpuint(e[2], ==, ncpus + 1); /* as the MP table */
            g_assert_cmphex(le(e + 4, 4), ==, VMM_IOAPIC_ADDR);
            g_assert_cmpuint(le(e + 8, 4), ==, 0);
            ioapics++;
            break;
        case 2:
            g_assert_cmpuint(e[1], ==, 10);
            g_assert_cmpuint(e[3], ==, ACPI_SCI_IRQ);
            g_assert_cmpuint(le(e + 4, 4), ==, ACPI_SCI_IRQ);
            g_assert_cmphex(le(e + 8, 2), ==, 0xd); /* level, active high */
            isos++;
            break;
        case 4:
            g_assert_cmpuint(e[1], ==, 6);
            g_assert_cmpuint(e[5], ==, 1); /* LINT1 */
            nmis++;
            break;
        default:
            g_assert_not_reached();
        }
    }
    g_assert_true(e == end);
    g_assert_cmpuint(lapics, ==, ncpus);
    g_assert_cmpuint(ioapics, ==, 1);
    g_assert_cmpuint(isos, ==, 1);
    g_assert_cmpuint(nmis, ==, 1);

    check_dsdt(dsdt, &cfg);
}

static void test_tables(void)
{
    check_tables(1, 512ULL << 20);
    check_tables(4, 3584ULL << 20);
    check_tables(VMM_MAX_VCPUS, 8ULL << 30);
}

static void test_tables_bad(void)
{
    AcpiConfig cfg = {.ncpus = 0, .ram_size = 512ULL << 20};
    GError *err = NULL;

    g_assert_null(acpi_build_tables(&cfg, GPA, &err));
    g_clear_error(&err);
    cfg.ncpus = 1;
    g_assert_null(acpi_build_tables(&cfg, 0xFFFF0, &err)); /* would cross 1 MiB */
    g_assert_nonnull(err);
    g_clear_error(&err);
}

static void test_pkglength(void)
{
    static const size_t bodies[] = {0, 1, 61, 62, 63, 100, 4000, 4093, 4094, 5000, 70000, 1100000};

    for (size_t i = 0; i < G_N_ELEMENTS(bodies); i++) {
        g_autoptr(GByteArray) b = g_byte_array_new();
        size_t mark = aml_scope_begin(b, "\\");
        unsigned n;

        g_byte_array_set_size(b, mark + 1 + bodies[i]); /* the NullName plus a body */
        aml_end(b, mark);
        g_assert_cmpuint(pkglen(b->data + mark, &n), ==, b->len - mark);
        g_assert_cmpuint(b->len, ==, 1 + n + 1 + bodies[i]);
    }
}

static void test_names(void)
{
    g_autoptr(GByteArray) b = g_byte_array_new();

    aml_name(b, "\\_SB.PCI0");
    g_assert_cmpmem(b->data, b->len, "\\\x2e_SB_PCI0", 10);
    g_byte_array_set_size(b, 0);
    aml_name(b, "\\_SB.PCI0.S08");
    g_assert_cmpmem(b->data, b->len, "\\\x2f\x03_SB_PCI0S08_", 15);
    g_byte_array_set_size(b, 0);
    aml_integer(b, 0x1234567890ULL);
    g_assert_cmpmem(b->data, b->len, "\x0e\x90\x78\x56\x34\x12\0\0\0", 9);
}

/* ---- PM1 ---- */

typedef struct PmFake {
    unsigned sci_changes;
    bool sci;
    unsigned poweroffs;
} PmFake;

static void fake_sci(void *opaque, bool level)
{
    PmFake *f = opaque;

    g_assert_true(level != f->sci); /* only edges are reported */
    f->sci = level;
    f->sci_changes++;
}

static void fake_poweroff(void *opaque)
{
    ((PmFake *)opaque)->poweroffs++;
}

static void test_pm1_button(void)
{
    PmFake f = {0};
    AcpiPm pm;

    acpi_pm_init(&pm, fake_sci, fake_poweroff, &f);
    g_assert_cmphex(acpi_pm_read(&pm, 4, 2), ==, ACPI_PM1_CNT_SCI_EN); /* SCI_EN always 1 */
    g_assert_cmphex(acpi_pm_read(&pm, 0, 4), ==, 0);

    /* Nobody listens: the status is latched, no SCI. */
    g_assert_false(acpi_pm_press_power_button(&pm));
    g_assert_cmphex(acpi_pm_read(&pm, 0, 2), ==, ACPI_PM1_PWRBTN);
    g_assert_false(f.sci);
    g_assert_cmpuint(pm.pwrbtn_ignored, ==, 1);

    /* Enabling it raises the SCI for the pending press. */
    acpi_pm_write(&pm, 2, ACPI_PM1_PWRBTN, 2);
    g_assert_true(f.sci);
    g_assert_cmphex(acpi_pm_read(&pm, 0, 4), ==, ACPI_PM1_PWRBTN | (ACPI_PM1_PWRBTN << 16));
    /* Writing 0 to STS clears nothing; writing 1 to another bit neither. */
    acpi_pm_write(&pm, 0, 0, 2);
    acpi_pm_write(&pm, 0, ACPI_PM1_WAK | ACPI_PM1_TMR, 2);
    g_assert_true(f.sci);
    /* W1C through the high byte alone lowers the SCI. */
    acpi_pm_write(&pm, 1, ACPI_PM1_PWRBTN >> 8, 1);
    g_assert_false(f.sci);
    g_assert_cmphex(acpi_pm_read(&pm, 0, 2), ==, 0);
    g_assert_cmpuint(f.sci_changes, ==, 2);

    /* Enabled: a press raises the SCI at once; a 32-bit W1C+EN write clears it. */
    g_assert_true(acpi_pm_press_power_button(&pm));
    g_assert_true(f.sci);
    acpi_pm_write(&pm, 0, 0xffff | ((uint32_t)ACPI_PM1_PWRBTN << 16), 4);
    g_assert_false(f.sci);
    /* Disabling EN with the status pending lowers the line too. */
    acpi_pm_press_power_button(&pm);
    g_assert_true(f.sci);
    acpi_pm_write(&pm, 2, 0, 2);
    g_assert_false(f.sci);
    g_assert_cmphex(acpi_pm_read(&pm, 0, 2), ==, ACPI_PM1_PWRBTN);

    /* EN keeps the enables ACPICA checks (GBL_EN must stick), drops the rest. */
    acpi_pm_write(&pm, 2, 0xffff, 2);
    g_assert_cmphex(acpi_pm_read(&pm, 2, 2), ==, ACPI_PM1_EN_MASK);
    g_assert_true(f.sci);

    /* Reset: back to power-on, SCI low. */
    acpi_pm_reset(&pm);
    g_assert_false(f.sci);
    g_assert_cmphex(acpi_pm_read(&pm, 0, 4), ==, 0);
    g_assert_cmpuint(f.poweroffs, ==, 0);
}

static void test_pm1_sleep(void)
{
    PmFake f = {0};
    AcpiPm pm;
    uint16_t s5 = ACPI_S5_SLP_TYP << ACPI_PM1_CNT_SLP_SHIFT;

    acpi_pm_init(&pm, fake_sci, fake_poweroff, &f);
    /* SLP_TYP alone is stored; SLP_EN reads 0. */
    acpi_pm_write(&pm, 4, s5 | ACPI_PM1_CNT_SCI_EN, 2);
    g_assert_cmphex(acpi_pm_read(&pm, 4, 2), ==, s5 | ACPI_PM1_CNT_SCI_EN);
    g_assert_cmpuint(f.poweroffs, ==, 0);
    /* SLP_EN with a type that has no \_Sx package: ignored. */
    acpi_pm_write(&pm, 4, (3 << ACPI_PM1_CNT_SLP_SHIFT) | ACPI_PM1_CNT_SLP_EN, 2);
    g_assert_cmpuint(f.poweroffs, ==, 0);
    g_assert_cmphex(acpi_pm_read(&pm, 4, 2), ==, (3 << ACPI_PM1_CNT_SLP_SHIFT) | 1);
    /* ACPICA's sequence: SLP_TYP first, then SLP_TYP | SLP_EN. */
    acpi_pm_write(&pm, 4, s5 | 1, 2);
    acpi_pm_write(&pm, 4, s5 | ACPI_PM1_CNT_SLP_EN | 1, 2);
    g_assert_cmpuint(f.poweroffs, ==, 1);
    g_assert_cmphex(acpi_pm_read(&pm, 4, 2) & ACPI_PM1_CNT_SLP_EN, ==, 0);
    /* The high byte alone carries both SLP_TYP and SLP_EN. */
    acpi_pm_write(&pm, 5, (s5 | ACPI_PM1_CNT_SLP_EN) >> 8, 1);
    g_assert_cmpuint(f.poweroffs, ==, 2);
    /* A 32-bit write at 0x602 reaches EN and CNT. */
    acpi_pm_write(&pm, 2, (uint64_t)(s5 | ACPI_PM1_CNT_SLP_EN) << 16, 4);
    g_assert_cmpuint(f.poweroffs, ==, 3);
}

/* Hostile accesses: every offset and size, values of all ones; nothing breaks out. */
static void test_pm1_hostile(void)
{
    static const unsigned sizes[] = {1, 2, 3, 4, 8};
    PmFake f = {0};
    AcpiPm pm;

    acpi_pm_init(&pm, fake_sci, fake_poweroff, &f);
    for (uint64_t off = 0; off < 16; off++) {
        for (size_t s = 0; s < G_N_ELEMENTS(sizes); s++) {
            uint64_t v = acpi_pm_read(&pm, off, sizes[s]);

            if (off >= ACPI_PM_LEN) {
                g_assert_cmphex(v, ==, sizes[s] == 8 ? UINT64_MAX : (1ULL << (8 * sizes[s])) - 1);
            }
            acpi_pm_write(&pm, off, 0, sizes[s]);
        }
    }
    /* Bytes beyond the block read 0xff: a 4-byte read at 0x604 = CNT, then 0xffff. */
    g_assert_cmphex(acpi_pm_read(&pm, 4, 4), ==, 0xffff0000 | ACPI_PM1_CNT_SCI_EN);
    acpi_pm_write(&pm, 6, UINT64_MAX, 8); /* past the end: dropped */
    g_assert_cmpuint(f.poweroffs, ==, 0);
    g_assert_cmphex(acpi_pm_read(&pm, 0, 4), ==, 0);
    /* All ones everywhere: SLP_TYP 7 is no \_S5, so no poweroff. */
    acpi_pm_write(&pm, 0, UINT64_MAX, 8);
    g_assert_cmpuint(f.poweroffs, ==, 0);
    g_assert_cmphex(acpi_pm_read(&pm, 4, 2), ==, ACPI_PM1_CNT_SLP_TYP | ACPI_PM1_CNT_BM_RLD | 1);
    g_assert_cmphex(acpi_pm_read(&pm, 2, 2), ==, ACPI_PM1_EN_MASK);
    g_assert_false(f.sci); /* no status bit was set by the write */
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vmm/acpi/tables", test_tables);
    g_test_add_func("/vmm/acpi/tables-bad", test_tables_bad);
    g_test_add_func("/vmm/acpi/aml-pkglength", test_pkglength);
    g_test_add_func("/vmm/acpi/aml-names", test_names);
    g_test_add_func("/vmm/acpi/pm1-power-button", test_pm1_button);
    g_test_add_func("/vmm/acpi/pm1-s5", test_pm1_sleep);
    g_test_add_func("/vmm/acpi/pm1-hostile", test_pm1_hostile);
    return g_test_run();
}
