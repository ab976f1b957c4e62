/* Unit tests: conf1, config-space semantics, BARs, capabilities, MSI-X, INTx (no KVM). */
#include <glib.h>
#include <linux/pci_regs.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "pcifix.h"

typedef struct TestDev {
    PciDevice pci;
    int mapped_calls;
    uint64_t last_gpa;
    bool last_mapped;
    uint64_t last_write_off, last_write_val;
} TestDev;

static void td_bar_mapped(PciDevice *dev, unsigned bar, uint64_t gpa, bool mapped)
{
    TestDev *t = (TestDev *)dev;

    t->mapped_calls++;
    t->last_gpa = gpa;
    t->last_mapped = mapped;
}

static uint64_t td_bar_read(PciDevice *dev, unsigned bar, uint64_t off, unsigned size)
{
    return 0x1000 * bar + off;
}

static void td_bar_write(PciDevice *dev, unsigned bar, uint64_t off, uint64_t val, unsigned size)
{
    TestDev *t = (TestDev *)dev;

    t->last_write_off = off;
    t->last_write_val = val;
}

static const PciDeviceOps td_ops = {
    .bar_read = td_bar_read, .bar_write = td_bar_write, .bar_mapped = td_bar_mapped};

typedef struct Fixture {
    PciFix pf;
    TestDev dev;
} Fixture;

static void fixture_setup(Fixture *f, gconstpointer data)
{
    const PciDeviceInfo info = {.vendor_id = 0x1af4,
                                .device_id = 0x1042,
                                .subsystem_vendor_id = 0x1af4,
                                .subsystem_id = 0x40,
                                .revision = 1,
                                .class_code = 0x018000,
                                .interrupt_pin = 1};
    GError *err = NULL;

    memset(&f->dev, 0, sizeof(f->dev));
    pcifix_init(&f->pf);
    pci_device_init(&f->dev.pci, &td_ops, &info, "test");
    g_assert_true(pci_device_add_bar(&f->dev.pci, 0, 0x4000, false, &err));
    g_assert_true(pci_device_add_bar(&f->dev.pci, 2, 0x1000, true, &err));
    g_assert_true(msix_init(&f->dev.pci, 3, 2, 0, 0x800, &err));
    g_assert_cmpuint(pci_device_add_cap(&f->dev.pci, PCI_CAP_ID_VNDR, 16, &err), !=, 0);
    g_assert_true(pci_bus_register(f->pf.bus, &f->dev.pci, 3, &err));
    g_assert_no_error(err);
}

static void fixture_teardown(Fixture *f, gconstpointer data)
{
    msix_free(&f->dev.pci);
    pcifix_cleanup(&f->pf);
}

static uint32_t cfg_read(Fixture *f, unsigned slot, unsigned reg, unsigned size)
{
    return pcifix_cfg_read(&f->pf, slot, reg, size);
}

static void cfg_write(Fixture *f, unsigned slot, unsigned reg, unsigned size, uint32_t val)
{
    pcifix_cfg_write(&f->pf, slot, reg, size, val);
}

static void test_conf1(Fixture *f, gconstpointer data)
{
    uint64_t v;

    /* Host bridge at 00:00.0. */
    g_assert_cmphex(cfg_read(f, 0, 0, 4), ==, (PCI_HOST_DEVICE << 16) | PCI_HOST_VENDOR);
    g_assert_cmphex(cfg_read(f, 0, PCI_CLASS_REVISION, 4) >> 8, ==, 0x060000);
    /* Our device; empty slots and other functions read all ones. */
    g_assert_cmphex(cfg_read(f, 3, 0, 4), ==, 0x10421af4);
    g_assert_cmphex(cfg_read(f, 3, 0, 2), ==, 0x1af4);
    g_assert_cmphex(cfg_read(f, 3, 2, 2), ==, 0x1042);
    g_assert_cmphex(cfg_read(f, 4, 0, 4), ==, 0xffffffff);
    iobus_write(f->pf.pio, 0xcf8, 4, 0x80000100u | (3 << 11)); /* function 1 */
    iobus_read(f->pf.pio, 0xcfc, 4, &v);
    g_assert_cmphex(v, ==, 0xffffffff);
    iobus_write(f->pf.pio, 0xcf8, 4, (3 << 11)); /* enable bit clear */
    iobus_read(f->pf.pio, 0xcfc, 4, &v);
    g_assert_cmphex(v, ==, 0xffffffff);
    /* The address latch reads back; byte writes to 0xcfb (pci_check_type1) are harmless. */
    iobus_write(f->pf.pio, 0xcf8, 4, 0x80001234);
    iobus_read(f->pf.pio, 0xcf8, 4, &v);
    g_assert_cmphex(v, ==, 0x80001234);
    iobus_write(f->pf.pio, 0xcfb, 1, 0x01);
    iobus_read(f->pf.pio, 0xcf8, 4, &v);
    g_assert_cmphex(v, ==, 0x80001234);
    /* 0xcf9 bit 2: reset. */
    iobus_write(f->pf.pio, 0xcf9, 1, 0x02);
    g_assert_cmpint(f->pf.kvm.resets, ==, 0);
    iobus_write(f->pf.pio, 0xcf9, 1, 0x06);
    g_assert_cmpint(f->pf.kvm.resets, ==, 1);
    /* A 4-byte access at offset 2 of the data window is clipped at the dword. */
    g_assert_cmphex(cfg_read(f, 3, 2, 4), ==, 0xffff1042);
}

static void test_readonly(Fixture *f, gconstpointer data)
{
    cfg_write(f, 3, PCI_VENDOR_ID, 4, 0);
    g_assert_cmphex(cfg_read(f, 3, 0, 4), ==, 0x10421af4);
    cfg_write(f, 3, PCI_CLASS_REVISION, 4, 0);
    g_assert_cmphex(cfg_read(f, 3, PCI_CLASS_REVISION, 4), ==, 0x01800001);
    cfg_write(f, 3, PCI_INTERRUPT_PIN, 1, 4);
    g_assert_cmpuint(cfg_read(f, 3, PCI_INTERRUPT_PIN, 1), ==, 1);
    cfg_write(f, 3, PCI_INTERRUPT_LINE, 1, 0x0b);
    g_assert_cmpuint(cfg_read(f, 3, PCI_INTERRUPT_LINE, 1), ==, 0x0b);
    cfg_write(f, 3, PCI_HEADER_TYPE, 1, 0x80);
    g_assert_cmpuint(cfg_read(f, 3, PCI_HEADER_TYPE, 1), ==, 0);
    /* COMMAND: only the defined enables stick. */
    cfg_write(f, 3, PCI_COMMAND, 2, 0xffff);
    g_assert_cmphex(cfg_read(f, 3, PCI_COMMAND, 2), ==, 0x0547);
    /* ROM BAR reads 0. */
    cfg_write(f, 3, PCI_ROM_ADDRESS, 4, 0xffffffff);
    g_assert_cmphex(cfg_read(f, 3, PCI_ROM_ADDRESS, 4), ==, 0);
    /* STATUS: CAP_LIST is read-only, error bits are write-1-to-clear. */
    f->dev.pci.config[PCI_STATUS + 1] |= 0x20; /* pretend: received master abort */
    cfg_write(f, 3, PCI_STATUS, 2, 0);
    g_assert_true(cfg_read(f, 3, PCI_STATUS, 2) & 0x2000);
    cfg_write(f, 3, PCI_STATUS, 2, 0xffff);
    g_assert_cmphex(cfg_read(f, 3, PCI_STATUS, 2), ==, PCI_STATUS_CAP_LIST);
}

static void test_bar_sizing(Fixture *f, gconstpointer data)
{
    uint32_t orig = cfg_read(f, 3, PCI_BASE_ADDRESS_0, 4);

    /* Pre-assigned in the MMIO hole, naturally aligned, decode on. */
    g_assert_cmphex(orig, >=, VMM_PCI_MMIO_START);
    g_assert_cmphex(orig % 0x4000, ==, 0);
    g_assert_true(cfg_read(f, 3, PCI_COMMAND, 2) & PCI_COMMAND_MEMORY);
    g_assert_cmphex(pci_bar_address(&f->dev.pci, 0), ==, orig);
    /* Linux's sequence: decode off, write ones, read size, restore. */
    cfg_write(f, 3, PCI_COMMAND, 2, 0);
    g_assert_cmphex(pci_bar_address(&f->dev.pci, 0), ==, 0);
    g_assert_false(f->dev.last_mapped);
    cfg_write(f, 3, PCI_BASE_ADDRESS_0, 4, 0xffffffff);
    g_assert_cmphex(cfg_read(f, 3, PCI_BASE_ADDRESS_0, 4), ==, 0xffffc000);
    cfg_write(f, 3, PCI_BASE_ADDRESS_0, 4, orig);
    /* BAR1 and BAR5 are unimplemented: they read 0 even after all ones. */
    cfg_write(f, 3, PCI_BASE_ADDRESS_1, 4, 0xffffffff);
    g_assert_cmphex(cfg_read(f, 3, PCI_BASE_ADDRESS_1, 4), ==, 0);
    /* 64-bit BAR: type bits read-only, high half sizes too. */
    g_assert_cmphex(cfg_read(f, 3, PCI_BASE_ADDRESS_2, 4) & 0xf, ==, 0x4);
    cfg_write(f, 3, PCI_BASE_ADDRESS_2, 4, 0xffffffff);
    cfg_write(f, 3, PCI_BASE_ADDRESS_3, 4, 0xffffffff);
    g_assert_cmphex(cfg_read(f, 3, PCI_BASE_ADDRESS_2, 4), ==, 0xfffff004);
    g_assert_cmphex(cfg_read(f, 3, PCI_BASE_ADDRESS_3, 4), ==, 0xffffffff);
    /* Move the 64-bit BAR above 4 GiB and turn decode back on. */
    cfg_write(f, 3, PCI_BASE_ADDRESS_2, 4, 0x00100000);
    cfg_write(f, 3, PCI_BASE_ADDRESS_3, 4, 0x1);
    f->dev.mapped_calls = 0;
    cfg_write(f, 3, PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
    g_assert_cmpint(f->dev.mapped_calls, ==, 2);
    g_assert_cmphex(pci_bar_address(&f->dev.pci, 2), ==, 0x100100000ULL);
    g_assert_cmphex(pci_bar_address(&f->dev.pci, 0), ==, orig);
}

static void test_bar_move_dispatch(Fixture *f, gconstpointer data)
{
    uint32_t orig = cfg_read(f, 3, PCI_BASE_ADDRESS_0, 4);
    uint64_t v;

    g_assert_true(iobus_read(f->pf.mmio, orig + 0x10, 4, &v));
    g_assert_cmphex(v, ==, 0x10);
    iobus_write(f->pf.mmio, orig + 0x3000, 2, 7);
    g_assert_cmphex(f->dev.last_write_off, ==, 0x3000);
    g_assert_cmphex(f->dev.last_write_val, ==, 7);
    /* Reprogramming with decode on moves the region and tells the device twice. */
    f->dev.mapped_calls = 0;
    cfg_write(f, 3, PCI_BASE_ADDRESS_0, 4, 0xd0000000);
    g_assert_cmpint(f->dev.mapped_calls, ==, 2);
    g_assert_true(f->dev.last_mapped);
    g_assert_cmphex(f->dev.last_gpa, ==, 0xd0000000);
    g_assert_false(iobus_read(f->pf.mmio, orig + 0x10, 4, &v));
    g_assert_true(iobus_read(f->pf.mmio, 0xd0000010, 4, &v));
    g_assert_cmphex(v, ==, 0x10);
}

static void test_cap_chain(Fixture *f, gconstpointer data)
{
    unsigned ptr = cfg_read(f, 3, PCI_CAPABILITY_LIST, 1);
    unsigned ids[4], n = 0;

    g_assert_true(cfg_read(f, 3, PCI_STATUS, 2) & PCI_STATUS_CAP_LIST);
    g_assert_cmphex(ptr, ==, PCI_CAP_START);
    while (ptr && n < 4) {
        g_assert_cmpuint(ptr % 4, ==, 0);
        ids[n++] = cfg_read(f, 3, ptr, 1);
        ptr = cfg_read(f, 3, ptr + 1, 1);
    }
    g_assert_cmpuint(n, ==, 2);
    g_assert_cmpuint(ids[0], ==, PCI_CAP_ID_MSIX);
    g_assert_cmpuint(ids[1], ==, PCI_CAP_ID_VNDR);
    /* The chain itself is read-only. */
    cfg_write(f, 3, PCI_CAP_START + 1, 1, 0);
    g_assert_cmpuint(cfg_read(f, 3, PCI_CAP_START + 1, 1), !=, 0);
    /* Host bridge has no capabilities. */
    g_assert_false(cfg_read(f, 0, PCI_STATUS, 2) & PCI_STATUS_CAP_LIST);
}

static void test_intx(Fixture *f, gconstpointer data)
{
    unsigned gsi = pci_intx_gsi(&f->dev.pci);

    g_assert_cmpuint(gsi, >=, 16);
    g_assert_cmpuint(gsi, <, 24);
    g_assert_cmpuint(cfg_read(f, 3, PCI_INTERRUPT_LINE, 1), ==, gsi);
    pci_set_irq(&f->dev.pci, true);
    g_assert_true(f->pf.kvm.intx[gsi]);
    g_assert_true(cfg_read(f, 3, PCI_STATUS, 2) & PCI_STATUS_INTERRUPT);
    cfg_write(f, 3, PCI_COMMAND, 2, PCI_COMMAND_MEMORY | PCI_COMMAND_INTX_DISABLE);
    g_assert_false(f->pf.kvm.intx[gsi]);
    g_assert_true(cfg_read(f, 3, PCI_STATUS, 2) & PCI_STATUS_INTERRUPT);
    cfg_write(f, 3, PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
    g_assert_true(f->pf.kvm.intx[gsi]);
    pci_set_irq(&f->dev.pci, false);
    g_assert_false(f->pf.kvm.intx[gsi]);
}

static uint64_t msix_base(Fixture *f)
{
    return pci_bar_address(&f->dev.pci, 2);
}

static uint32_t mmio_read32(Fixture *f, uint64_t addr)
{
    uint64_t v;

    iobus_read(f->pf.mmio, addr, 4, &v);
    return v;
}

static void mmio_write32(Fixture *f, uint64_t addr, uint32_t v)
{
    iobus_write(f->pf.mmio, addr, 4, v);
}

static void msix_enable(Fixture *f, bool enable, bool fmask)
{
    unsigned cap = PCI_CAP_START;
    uint16_t ctl = 2 | (enable ? PCI_MSIX_FLAGS_ENABLE : 0) | (fmask ? PCI_MSIX_FLAGS_MASKALL : 0);

    cfg_write(f, 3, cap + PCI_MSIX_FLAGS, 2, ctl);
}

static void test_msix_cap(Fixture *f, gconstpointer data)
{
    unsigned cap = PCI_CAP_START;

    g_assert_cmphex(cfg_read(f, 3, cap + PCI_MSIX_FLAGS, 2), ==, 2); /* 3 vectors */
    g_assert_cmphex(cfg_read(f, 3, cap + PCI_MSIX_TABLE, 4), ==, 0x000 | 2);
    g_assert_cmphex(cfg_read(f, 3, cap + PCI_MSIX_PBA, 4), ==, 0x800 | 2);
    cfg_write(f, 3, cap + PCI_MSIX_FLAGS, 2, 0xffff);
    g_assert_cmphex(cfg_read(f, 3, cap + PCI_MSIX_FLAGS, 2), ==, 0xc002);
    g_assert_true(msix_enabled(&f->dev.pci));
    cfg_write(f, 3, cap + PCI_MSIX_FLAGS, 2, 0);
    g_assert_false(msix_enabled(&f->dev.pci));
}

static void test_msix_table(Fixture *f, gconstpointer data)
{
    uint64_t t = msix_base(f);
    int efd = eventfd(0, EFD_NONBLOCK);
    uint64_t one = 1;

    /* Entries reset masked; the table reads back what was written. */
    for (unsigned i = 0; i < 3; i++) {
        g_assert_cmphex(mmio_read32(f, t + 16 * i + 12), ==, 1);
    }
    mmio_write32(f, t + 16 + 0, 0xfee00003);
    mmio_write32(f, t + 16 + 4, 0);
    mmio_write32(f, t + 16 + 8, 0x4041);
    g_assert_cmphex(mmio_read32(f, t + 16), ==, 0xfee00000); /* reserved bits drop */
    g_assert_cmphex(mmio_read32(f, t + 16 + 8), ==, 0x4041);
    msix_set_notifier(&f->dev.pci, 1, efd);
    /* Disabled MSI-X: nothing routed; events pend in the eventfd and show in the PBA. */
    g_assert_cmpint(f->pf.kvm.routes_added, ==, 0);
    g_assert_true(write(efd, &one, 8) == 8);
    g_assert_cmphex(mmio_read32(f, t + 0x800), ==, 0x2);
    /* Enable + unmask: route with the table's address/data and bind the irqfd. */
    msix_enable(f, true, false);
    g_assert_cmpint(f->pf.kvm.routes_added, ==, 0); /* still masked */
    mmio_write32(f, t + 16 + 12, 0);
    g_assert_cmpint(f->pf.kvm.routes_added, ==, 1);
    g_assert_cmphex(f->pf.kvm.last_addr, ==, 0xfee00000);
    g_assert_cmphex(f->pf.kvm.last_data, ==, 0x4041);
    g_assert_cmpint(f->pf.kvm.irqfd[PCIFIX_FIRST_GSI], ==, efd);
    g_assert_true(msix_vector_deliverable(&f->dev.pci, 1));
    g_assert_false(msix_vector_deliverable(&f->dev.pci, 0));
    /* Bound: KVM owns the counter, the PBA no longer reports it. */
    g_assert_cmphex(mmio_read32(f, t + 0x800), ==, 0);
    /* Function mask unbinds; unmask rebinds without a new route. */
    msix_enable(f, true, true);
    g_assert_cmpint(f->pf.kvm.irqfd[PCIFIX_FIRST_GSI], ==, -1);
    g_assert_false(msix_vector_deliverable(&f->dev.pci, 1));
    msix_enable(f, true, false);
    g_assert_cmpint(f->pf.kvm.irqfd[PCIFIX_FIRST_GSI], ==, efd);
    g_assert_cmpint(f->pf.kvm.routes_added, ==, 1);
    /* Changing the message while masked updates the route on unmask. */
    mmio_write32(f, t + 16 + 12, 1);
    g_assert_cmpint(f->pf.kvm.irqfd[PCIFIX_FIRST_GSI], ==, -1);
    mmio_write32(f, t + 16 + 8, 0x4042);
    g_assert_cmpint(f->pf.kvm.routes_updated, ==, 0);
    mmio_write32(f, t + 16 + 12, 0);
    g_assert_cmpint(f->pf.kvm.routes_updated, ==, 1);
    g_assert_cmphex(f->pf.kvm.last_data, ==, 0x4042);
    /* Odd-sized accesses are ignored; the PBA is read-only. */
    iobus_write(f->pf.mmio, t + 16 + 8, 1, 0xff);
    g_assert_cmphex(mmio_read32(f, t + 16 + 8), ==, 0x4042);
    mmio_write32(f, t + 0x800, 0xffffffff);
    g_assert_cmphex(mmio_read32(f, t + 0x800), ==, 0);
    /* Outside the table and PBA the device's own handler answers. */
    g_assert_cmphex(mmio_read32(f, t + 0x400), ==, 0x2400);
    /* Reset masks everything again and unbinds. */
    msix_reset(&f->dev.pci);
    g_assert_cmpint(f->pf.kvm.irqfd[PCIFIX_FIRST_GSI], ==, -1);
    g_assert_cmphex(mmio_read32(f, t + 16 + 12), ==, 1);
    g_assert_false(msix_enabled(&f->dev.pci));
    msix_set_notifier(&f->dev.pci, 1, -1);
    close(efd);
}

static void test_msix_soft_notify(Fixture *f, gconstpointer data)
{
    uint64_t t = msix_base(f);

    mmio_write32(f, t + 0, 0xfee00000);
    mmio_write32(f, t + 8, 0x30);
    msix_enable(f, true, false);
    /* No eventfd: a masked notify becomes a PBA bit, delivered on unmask. */
    msix_notify(&f->dev.pci, 0);
    g_assert_true(msix_is_pending(&f->dev.pci, 0));
    g_assert_cmphex(mmio_read32(f, t + 0x800), ==, 1);
    g_assert_cmpint(f->pf.kvm.signalled, ==, 0);
    mmio_write32(f, t + 12, 0);
    g_assert_cmpint(f->pf.kvm.signalled, ==, 1);
    g_assert_false(msix_is_pending(&f->dev.pci, 0));
    msix_notify(&f->dev.pci, 0);
    g_assert_cmpint(f->pf.kvm.signalled, ==, 2);
    /* With MSI-X on, INTx stays quiet. */
    pci_set_irq(&f->dev.pci, true);
    g_assert_false(f->pf.kvm.intx[pci_intx_gsi(&f->dev.pci)]);
}

/* A device leaving the bus gives its irqfds and routes back. */
static void test_msix_unregister(Fixture *f, gconstpointer data)
{
    uint64_t t = msix_base(f);
    int efd = eventfd(0, EFD_NONBLOCK);

    mmio_write32(f, t + 0, 0xfee00000);
    msix_set_notifier(&f->dev.pci, 0, efd);
    msix_enable(f, true, false);
    mmio_write32(f, t + 12, 0);
    g_assert_cmpint(f->pf.kvm.irqfd[PCIFIX_FIRST_GSI], ==, efd);
    pci_bus_unregister(f->pf.bus, &f->dev.pci);
    g_assert_cmpint(f->pf.kvm.irqfd[PCIFIX_FIRST_GSI], ==, -1);
    g_assert_cmpint(f->pf.kvm.routes_removed, ==, 1);
    g_assert_null(pci_bus_device(f->pf.bus, 3));
    g_assert_cmpint(pci_bus_free_slot(f->pf.bus), ==, 1);
    close(efd);
}

static int td_resets;
static bool td_reset_saw_msix;

static void td_reset(PciDevice *dev)
{
    td_resets++;
    td_reset_saw_msix = msix_enabled(dev);
}

/*
 * Machine reset: the guest moved a BAR, turned decode and bus mastering off, enabled
 * MSI-X with a bound vector and raised INTx. Afterwards the header is as registered,
 * MSI-X is off with every vector masked, the irqfd and the route are gone.
 */
static void test_bus_reset(Fixture *f, gconstpointer data)
{
    static const PciDeviceOps ops = {.bar_read = td_bar_read,
                                     .bar_write = td_bar_write,
                                     .bar_mapped = td_bar_mapped,
                                     .reset = td_reset};
    uint32_t bar0 = cfg_read(f, 3, PCI_BASE_ADDRESS_0, 4);
    uint32_t cmd = cfg_read(f, 3, PCI_COMMAND, 2);
    uint64_t t = msix_base(f);
    int efd = eventfd(0, EFD_NONBLOCK);
    uint64_t v;

    f->dev.pci.ops = &ops;
    mmio_write32(f, t + 0, 0xfee00000);
    msix_set_notifier(&f->dev.pci, 0, efd);
    msix_enable(f, true, false);
    mmio_write32(f, t + 12, 0);
    g_assert_cmpint(f->pf.kvm.irqfd[PCIFIX_FIRST_GSI], ==, efd);
    cfg_write(f, 3, PCI_BASE_ADDRESS_0, 4, 0xd0000000);
    cfg_write(f, 3, PCI_COMMAND, 2, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);
    cfg_write(f, 3, PCI_INTERRUPT_LINE, 1, 0x55);
    iobus_write(f->pf.pio, 0xcf8, 4, 0x80001800);
    td_resets = 0;
    pci_bus_reset(f->pf.bus);
    /* The conf1 address latch is cleared too. */
    iobus_read(f->pf.pio, 0xcf8, 4, &v);
    g_assert_cmphex(v, ==, 0);
    g_assert_cmpint(td_resets, ==, 1);
    /* The device's own reset ran while the guest's header was still in place. */
    g_assert_true(td_reset_saw_msix);
    g_assert_cmphex(cfg_read(f, 3, PCI_BASE_ADDRESS_0, 4), ==, bar0);
    g_assert_cmphex(cfg_read(f, 3, PCI_COMMAND, 2), ==, cmd);
    g_assert_cmphex(cfg_read(f, 3, PCI_INTERRUPT_LINE, 1), ==, pci_intx_gsi(&f->dev.pci));
    g_assert_true(iobus_read(f->pf.mmio, bar0 + 0x10, 4, &v));
    g_assert_false(iobus_read(f->pf.mmio, 0xd0000010, 4, &v));
    g_assert_false(msix_enabled(&f->dev.pci));
    g_assert_cmpint(f->pf.kvm.irqfd[PCIFIX_FIRST_GSI], ==, -1);
    g_assert_cmpint(f->pf.kvm.routes_removed, ==, 1);
    g_assert_cmphex(mmio_read32(f, t + 12), ==, 1);
    /* A second reset in a row is harmless; a later unmask builds a new route. */
    pci_bus_reset(f->pf.bus);
    mmio_write32(f, t + 0, 0xfee00000);
    msix_enable(f, true, false);
    mmio_write32(f, t + 12, 0);
    g_assert_cmpint(f->pf.kvm.irqfd[f->pf.kvm.next_gsi - 1], ==, efd);
    msix_set_notifier(&f->dev.pci, 0, -1);
    close(efd);
}

static void test_iobus(void)
{
    static const IoRegionOps ops = {0};
    IoBus *bus = iobus_new("t");
    uint64_t v;
    GError *err = NULL;

    g_assert_true(iobus_add(bus, 0x100, 0x10, &ops, NULL, NULL));
    g_assert_true(iobus_add(bus, 0x200, 0x10, &ops, NULL, NULL));
    g_assert_false(iobus_add(bus, 0x10f, 2, &ops, NULL, &err));
    g_clear_error(&err);
    g_assert_false(iobus_add(bus, 0xff, 2, &ops, NULL, &err));
    g_clear_error(&err);
    g_assert_false(iobus_add(bus, 0x300, 0, &ops, NULL, &err));
    g_clear_error(&err);
    g_assert_true(iobus_add(bus, 0x110, 0xf0, &ops, NULL, NULL)); /* exactly between */
    g_assert_cmpuint(iobus_count(bus), ==, 3);
    /* Unclaimed reads are all ones. */
    g_assert_false(iobus_read(bus, 0x50, 2, &v));
    g_assert_cmphex(v, ==, 0xffff);
    g_assert_false(iobus_write(bus, 0x50, 1, 0));
    g_assert_true(iobus_remove(bus, 0x110));
    g_assert_false(iobus_remove(bus, 0x111));
    g_assert_cmpuint(iobus_count(bus), ==, 2);
    iobus_free(bus);
}

/* An I/O BAR: pre-assigned in the port window, sized, decoded with COMMAND.IO only, moved. */
static void test_io_bar(void)
{
    const PciDeviceInfo info = {.vendor_id = 0x1af4, .device_id = 0x1042, .revision = 1};
    PciFix pf;
    TestDev dev;
    GError *err = NULL;
    uint32_t orig;
    uint64_t v;

    memset(&dev, 0, sizeof(dev));
    pcifix_init(&pf);
    pci_device_init(&dev.pci, &td_ops, &info, "io");
    /* Refused: not a power of two, too small, too large, a taken register. */
    g_assert_false(pci_device_add_io_bar(&dev.pci, 2, 24, &err));
    g_clear_error(&err);
    g_assert_false(pci_device_add_io_bar(&dev.pci, 2, 2, &err));
    g_clear_error(&err);
    g_assert_false(pci_device_add_io_bar(&dev.pci, 2, 512, &err));
    g_clear_error(&err);
    g_assert_true(pci_device_add_bar(&dev.pci, 0, 0x1000, false, &err));
    g_assert_true(pci_device_add_io_bar(&dev.pci, 2, 32, &err));
    g_assert_false(pci_device_add_io_bar(&dev.pci, 2, 32, &err));
    g_clear_error(&err);
    g_assert_true(pci_bus_register(pf.bus, &dev.pci, 4, &err));
    g_assert_no_error(err);

    orig = pcifix_cfg_read(&pf, 4, PCI_BASE_ADDRESS_2, 4);
    g_assert_cmphex(orig & PCI_BASE_ADDRESS_SPACE, ==, PCI_BASE_ADDRESS_SPACE_IO);
    g_assert_cmphex(orig & ~3u, >=, VMM_PCI_PIO_START);
    g_assert_cmphex((orig & ~3u) % 32, ==, 0);
    g_assert_true(pcifix_cfg_read(&pf, 4, PCI_COMMAND, 2) & PCI_COMMAND_IO);
    g_assert_cmphex(pci_bar_address(&dev.pci, 2), ==, orig & ~3u);
    /* Port accesses reach the device at BAR offsets; the MMIO bus has none of it. */
    g_assert_true(iobus_read(pf.pio, (orig & ~3u) + 6, 2, &v));
    g_assert_cmphex(v, ==, 0x2000 + 6);
    g_assert_true(iobus_write(pf.pio, (orig & ~3u) + 4, 2, 1));
    g_assert_cmphex(dev.last_write_off, ==, 4);
    g_assert_cmphex(dev.last_write_val, ==, 1);
    g_assert_false(iobus_read(pf.mmio, orig & ~3u, 2, &v));
    /* Sizing: ones read back as the size mask with the I/O bit. */
    pcifix_cfg_write(&pf, 4, PCI_COMMAND, 2, PCI_COMMAND_MEMORY);
    g_assert_cmphex(pci_bar_address(&dev.pci, 2), ==, 0); /* IO decode off */
    g_assert_cmphex(pci_bar_address(&dev.pci, 0), !=, 0); /* memory still on */
    pcifix_cfg_write(&pf, 4, PCI_BASE_ADDRESS_2, 4, 0xffffffff);
    g_assert_cmphex(pcifix_cfg_read(&pf, 4, PCI_BASE_ADDRESS_2, 4), ==, 0xffffffe1);
    /* Moved, decode on: the old ports go, the new ones answer. */
    dev.mapped_calls = 0;
    pcifix_cfg_write(&pf, 4, PCI_BASE_ADDRESS_2, 4, 0xd000);
    pcifix_cfg_write(&pf, 4, PCI_COMMAND, 2, PCI_COMMAND_MEMORY | PCI_COMMAND_IO);
    g_assert_cmpint(dev.mapped_calls, ==, 1);
    g_assert_cmphex(dev.last_gpa, ==, 0xd000);
    g_assert_false(iobus_read(pf.pio, orig & ~3u, 2, &v));
    g_assert_true(iobus_read(pf.pio, 0xd002, 2, &v));
    g_assert_cmphex(v, ==, 0x2002);
    /* The last 32 ports are the highest place; past port space is not decoded. */
    pcifix_cfg_write(&pf, 4, PCI_BASE_ADDRESS_2, 4, 0xfff0); /* aligned down by the mask */
    g_assert_cmphex(pci_bar_address(&dev.pci, 2), ==, 0xffe0);
    pcifix_cfg_write(&pf, 4, PCI_BASE_ADDRESS_2, 4, 0x10000);
    g_assert_cmphex(pci_bar_address(&dev.pci, 2), ==, 0);
    g_assert_false(iobus_read(pf.pio, 0xffe0, 2, &v));
    /* A bus reset restores the firmware's assignment. */
    pci_bus_reset(pf.bus);
    g_assert_cmphex(pci_bar_address(&dev.pci, 2), ==, orig & ~3u);
    pcifix_cleanup(&pf);
}

#define ADD(path, fn)                                                                              \
    g_test_add("/vmm/pci/" path, Fixture, NULL, fixture_setup, fn, fixture_teardown)

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vmm/iobus/ranges", test_iobus);
    g_test_add_func("/vmm/pci/io-bar", test_io_bar);
    ADD("conf1", test_conf1);
    ADD("readonly", test_readonly);
    ADD("bar-sizing", test_bar_sizing);
    ADD("bar-move-dispatch", test_bar_move_dispatch);
    ADD("cap-chain", test_cap_chain);
    ADD("intx", test_intx);
    ADD("msix-cap", test_msix_cap);
    ADD("msix-table", test_msix_table);
    ADD("msix-soft-notify", test_msix_soft_notify);
    ADD("msix-unregister", test_msix_unregister);
    ADD("bus-reset", test_bus_reset);
    return g_test_run();
}
