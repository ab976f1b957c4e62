/*
 * virtio-pci transport reset (status 0): the MSI-X vectors forget the eventfds
 * the driver's queue/config vectors had attached, so a vector unmasked after the
 * reset without being assigned is not bound to an old queue's call fd. Needs a
 * KVM VM (the transport's INTx and ioeventfd paths); skipped visibly without it.
 */
#include <fcntl.h>
#include <glib.h>
#include <linux/pci_regs.h>
#include <linux/virtio_config.h>
#include <linux/virtio_pci.h>
#include <string.h>
#include <unistd.h>

#include "devices/virtio-pci.h"
#include "pcifix.h"

static uint64_t dev_features(void *opaque)
{
    return 1ull << VIRTIO_F_VERSION_1;
}

static bool dev_set_features(void *opaque, uint64_t features)
{
    return true;
}

static void dev_config_read(void *opaque, uint32_t off, void *buf, uint32_t len)
{
    memset(buf, 0, len);
}

static void dev_config_write(void *opaque, uint32_t off, const void *buf, uint32_t len)
{
}

static bool dev_start(void *opaque, GError **errp)
{
    return true;
}

static void dev_stop(void *opaque)
{
}

static void dev_queue_notify(void *opaque, unsigned q)
{
}

static const VirtIOPCIDeviceOps dev_ops = {
    .host_features = dev_features,
    .set_features = dev_set_features,
    .config_read = dev_config_read,
    .config_write = dev_config_write,
    .start = dev_start,
    .stop = dev_stop,
    .queue_notify = dev_queue_notify,
};

typedef struct Fix {
    PciFix pf;
    unsigned slot; /* the transport's */
} Fix;

static uint32_t cfg_read(Fix *f, unsigned reg, unsigned size)
{
    return pcifix_cfg_read(&f->pf, f->slot, reg, size);
}

static void cfg_write(Fix *f, unsigned reg, unsigned size, uint32_t val)
{
    pcifix_cfg_write(&f->pf, f->slot, reg, size, val);
}

/* The driver's side of MSI-X: enable, and unmask vector 0 pointing at the LAPIC. */
static void msix_setup_vector0(Fix *f, uint64_t table)
{
    unsigned cap = pcifix_find_cap(&f->pf, f->slot, PCI_CAP_ID_MSIX);

    cfg_write(f, cap + PCI_MSIX_FLAGS, 2, PCI_MSIX_FLAGS_ENABLE);
    iobus_write(f->pf.mmio, table + PCI_MSIX_ENTRY_LOWER_ADDR, 4, 0xfee00000);
    iobus_write(f->pf.mmio, table + PCI_MSIX_ENTRY_UPPER_ADDR, 4, 0);
    iobus_write(f->pf.mmio, table + PCI_MSIX_ENTRY_DATA, 4, 0x31);
    iobus_write(f->pf.mmio, table + PCI_MSIX_ENTRY_VECTOR_CTRL, 4, 0);
}

static void test_reset_clears_vectors(void)
{
    VmConfig cfg = {.ram_size = 4 << 20, .ncpus = 1};
    VirtIOPCIConf conf = {.device_id = 2,
                          .class_code = 0x010000,
                          .num_queues = 2,
                          .queue_size = 16,
                          .config_size = 8,
                          .name = "vp0"};
    GError *err = NULL;
    VirtIOPCI *vp;
    Vm *vm;
    Fix f;
    uint64_t table, common;
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

    if (fd < 0) {
        g_test_skip("/dev/kvm is not usable here");
        return;
    }
    close(fd);
    vm = vm_new(&cfg, &err);
    g_assert_no_error(err);
    pcifix_init(&f.pf);
    conf.slot = pci_bus_free_slot(f.pf.bus);
    f.slot = (unsigned)conf.slot;
    vp = virtio_pci_new(vm, f.pf.bus, &conf, &dev_ops, NULL, &err);
    g_assert_no_error(err);
    /* BAR 1: MSI-X table at 0; BAR 4 (64-bit): common config at 0. */
    table = cfg_read(&f, PCI_BASE_ADDRESS_1, 4) & ~0xfu;
    common = (cfg_read(&f, PCI_BASE_ADDRESS_4, 4) & ~0xfu) |
             ((uint64_t)cfg_read(&f, PCI_BASE_ADDRESS_5, 4) << 32);
    g_assert_cmphex(table, !=, 0);
    g_assert_cmphex(common, !=, 0);
    cfg_write(&f, PCI_COMMAND, 2, PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER);

    /* Driver 1: queue 0 on vector 0; its call fd is bound as the vector's irqfd. */
    msix_setup_vector0(&f, table);
    iobus_write(f.pf.mmio, common + VIRTIO_PCI_COMMON_Q_SELECT, 2, 0);
    iobus_write(f.pf.mmio, common + VIRTIO_PCI_COMMON_Q_MSIX, 2, 0);
    g_assert_cmpuint(pcifix_bound_irqfds(&f.pf), ==, 1);

    /* Reset, then driver 2 unmasks vector 0 but assigns it to nothing. */
    iobus_write(f.pf.mmio, common + VIRTIO_PCI_COMMON_STATUS, 1, 0);
    g_assert_cmpuint(pcifix_bound_irqfds(&f.pf), ==, 0);
    msix_setup_vector0(&f, table);
    g_assert_cmpuint(pcifix_bound_irqfds(&f.pf), ==, 0); /* was 1: queue 0's old call fd */

    /* Assigning it again binds again. */
    iobus_write(f.pf.mmio, common + VIRTIO_PCI_COMMON_Q_SELECT, 2, 1);
    iobus_write(f.pf.mmio, common + VIRTIO_PCI_COMMON_Q_MSIX, 2, 0);
    g_assert_cmpuint(pcifix_bound_irqfds(&f.pf), ==, 1);

    virtio_pci_free(vp);
    pcifix_cleanup(&f.pf);
    vm_free(vm);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/virtio-pci/reset-clears-vectors", test_reset_clears_vectors);
    return g_test_run();
}
