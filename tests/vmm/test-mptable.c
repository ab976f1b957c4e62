/* Unit tests: MP table structure and checksums. */
#include <glib.h>
#include <string.h>

#include "vmm/mptable.h"
#include "vmm/vmm.h"

static uint32_t le32(const uint8_t *p)
{
    return p[0] | (p[1] << 8) | (p[2] << 16) | ((uint32_t)p[3] << 24);
}

static uint16_t le16(const uint8_t *p)
{
    return p[0] | (p[1] << 8);
}

static void check_table(unsigned ncpus, const MpPciIrq *irqs, size_t nirqs)
{
    MpTableConfig cfg = {.ncpus = ncpus, .pci_irqs = irqs, .npci_irqs = nirqs};
    size_t size = mptable_size(&cfg);
    g_autofree uint8_t *buf = g_malloc0(size + 64);
    const uint32_t gpa = 0x9fc00;
    const uint8_t *hdr, *e;
    unsigned count[5] = {0}, pci_irqs = 0, isa_irqs = 0, bsp = 0;
    uint8_t ioapic_id = 0;

    g_assert_true(mptable_build(buf, size, gpa, &cfg, NULL));
    /* Floating pointer. */
    g_assert_cmpmem(buf, 4, "_MP_", 4);
    g_assert_cmphex(le32(buf + 4), ==, gpa + 16);
    g_assert_cmpuint(buf[8], ==, 1);
    g_assert_cmpuint(buf[9], ==, 4);
    g_assert_cmpuint(mptable_checksum(buf, 16), ==, 0);
    /* Configuration table. */
    hdr = buf + 16;
    g_assert_cmpmem(hdr, 4, "PCMP", 4);
    g_assert_cmpuint(le16(hdr + 4), ==, size - 16);
    g_assert_cmpuint(mptable_checksum(hdr, le16(hdr + 4)), ==, 0);
    g_assert_cmphex(le32(hdr + 36), ==, VMM_LAPIC_ADDR);
    e = hdr + 44;
    for (unsigned i = 0; i < le16(hdr + 34); i++) {
        g_assert_cmpuint(e[0], <, 5);
        count[e[0]]++;
        switch (e[0]) {
        case 0:
            g_assert_cmpuint(e[1], ==, count[0] - 1); /* APIC IDs 0..n-1 */
            g_assert_true(e[3] & 1);
            bsp += (e[3] & 2) != 0;
            e += 20;
            continue;
        case 2:
            ioapic_id = e[1];
            g_assert_cmphex(le32(e + 4), ==, VMM_IOAPIC_ADDR);
            break;
        case 3:
            g_assert_cmpuint(e[6], ==, ioapic_id);
            if (e[4] == MPTABLE_PCI_BUS_ID) {
                g_assert_cmpuint(e[5] >> 2, ==, irqs[pci_irqs].slot);
                g_assert_cmpuint(e[7], ==, irqs[pci_irqs].gsi);
                g_assert_cmphex(le16(e + 2), ==, 0xd); /* level, active high */
                pci_irqs++;
            } else {
                g_assert_cmpuint(e[5], ==, e[7]); /* ISA IRQ n -> pin n */
                isa_irqs++;
            }
            break;
        default:
            break;
        }
        e += 8;
    }
    g_assert_true(e == hdr + le16(hdr + 4)); /* oemcount matches the entries */
    g_assert_cmpuint(count[0], ==, ncpus);
    g_assert_cmpuint(bsp, ==, 1);
    g_assert_cmpuint(count[1], ==, 2);
    g_assert_cmpuint(count[2], ==, 1);
    g_assert_cmpuint(ioapic_id, >=, ncpus); /* differs from every LAPIC ID */
    g_assert_cmpuint(isa_irqs, ==, 16);
    g_assert_cmpuint(pci_irqs, ==, nirqs);
    g_assert_cmpuint(count[4], ==, 2);
}

static void test_one_cpu(void)
{
    check_table(1, NULL, 0);
}

static void test_smp_and_pci(void)
{
    const MpPciIrq irqs[] = {{.slot = 1, .pin = 1, .gsi = 17}, {.slot = 6, .pin = 1, .gsi = 22}};

    check_table(4, irqs, G_N_ELEMENTS(irqs));
    check_table(128, irqs, G_N_ELEMENTS(irqs));
}

static void test_errors(void)
{
    MpTableConfig cfg = {.ncpus = 2};
    uint8_t buf[64];
    GError *err = NULL;

    g_assert_false(mptable_build(buf, sizeof(buf), 0x9fc00, &cfg, &err));
    g_clear_error(&err);
    cfg.ncpus = 0;
    g_assert_false(mptable_build(buf, sizeof(buf), 0x9fc00, &cfg, &err));
    g_clear_error(&err);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vmm/mptable/one-cpu", test_one_cpu);
    g_test_add_func("/vmm/mptable/smp-and-pci", test_smp_and_pci);
    g_test_add_func("/vmm/mptable/errors", test_errors);
    return g_test_run();
}
