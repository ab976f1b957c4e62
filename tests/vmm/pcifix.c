/*
 * PCI bus fixture: see pcifix.h.
 */
#include <glib.h>
#include <linux/pci_regs.h>
#include <string.h>

#include "pcifix.h"

static void fk_set_irq(void *o, unsigned gsi, bool level)
{
    FakeKvm *k = o;

    g_assert_cmpuint(gsi, <, G_N_ELEMENTS(k->intx));
    k->intx[gsi] = level;
}

static int fk_route_add(void *o, uint64_t addr, uint32_t data)
{
    FakeKvm *k = o;

    k->routes_added++;
    k->last_addr = addr;
    k->last_data = data;
    return k->next_gsi++;
}

static bool fk_route_update(void *o, int gsi, uint64_t addr, uint32_t data)
{
    FakeKvm *k = o;

    k->routes_updated++;
    k->last_addr = addr;
    k->last_data = data;
    return true;
}

static void fk_route_remove(void *o, int gsi)
{
    ((FakeKvm *)o)->routes_removed++;
}

static bool fk_irqfd(void *o, int fd, int gsi, bool assign)
{
    FakeKvm *k = o;

    g_assert_cmpint(gsi, >=, 0);
    g_assert_cmpint(gsi, <, (int)G_N_ELEMENTS(k->irqfd));
    k->irqfd[gsi] = assign ? fd : -1;
    return true;
}

static void fk_signal(void *o, uint64_t addr, uint32_t data)
{
    ((FakeKvm *)o)->signalled++;
}

static void fk_reset(void *o)
{
    ((FakeKvm *)o)->resets++;
}

static const PciIrqOps fk_ops = {
    .set_irq = fk_set_irq,
    .msi_route_add = fk_route_add,
    .msi_route_update = fk_route_update,
    .msi_route_remove = fk_route_remove,
    .irqfd = fk_irqfd,
    .signal_msi = fk_signal,
    .reset = fk_reset,
};

void pcifix_init(PciFix *f)
{
    GError *err = NULL;

    memset(f, 0, sizeof(*f));
    f->kvm.next_gsi = PCIFIX_FIRST_GSI;
    for (unsigned i = 0; i < G_N_ELEMENTS(f->kvm.irqfd); i++) {
        f->kvm.irqfd[i] = -1;
    }
    f->pio = iobus_new("pio");
    f->mmio = iobus_new("mmio");
    f->bus = pci_bus_new(f->pio, f->mmio, &fk_ops, &f->kvm, &err);
    g_assert_no_error(err);
}

void pcifix_cleanup(PciFix *f)
{
    pci_bus_free(f->bus);
    iobus_free(f->pio);
    iobus_free(f->mmio);
}

static void cfg_address(PciFix *f, unsigned slot, unsigned reg)
{
    iobus_write(f->pio, 0xcf8, 4, 0x80000000u | (slot << 11) | (reg & 0xfc));
}

uint32_t pcifix_cfg_read(PciFix *f, unsigned slot, unsigned reg, unsigned size)
{
    uint64_t v;

    cfg_address(f, slot, reg);
    iobus_read(f->pio, 0xcfc + (reg & 3), size, &v);
    return (uint32_t)v;
}

void pcifix_cfg_write(PciFix *f, unsigned slot, unsigned reg, unsigned size, uint32_t val)
{
    cfg_address(f, slot, reg);
    iobus_write(f->pio, 0xcfc + (reg & 3), size, val);
}

unsigned pcifix_find_cap(PciFix *f, unsigned slot, uint8_t id)
{
    for (unsigned p = pcifix_cfg_read(f, slot, PCI_CAPABILITY_LIST, 1); p;
         p = pcifix_cfg_read(f, slot, p + 1, 1)) {
        if (pcifix_cfg_read(f, slot, p, 1) == id) {
            return p;
        }
    }
    g_assert_not_reached();
}

unsigned pcifix_bound_irqfds(PciFix *f)
{
    unsigned n = 0;

    for (unsigned i = 0; i < G_N_ELEMENTS(f->kvm.irqfd); i++) {
        n += f->kvm.irqfd[i] >= 0;
    }
    return n;
}
