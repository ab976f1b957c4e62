/*
 * The virtio-pci transport against its driver:
 *   - reset (status 0): the MSI-X vectors forget the eventfds the driver's
 *     queue/config vectors had attached, so a vector unmasked after the reset
 *     without being assigned is not bound to an old queue's call fd;
 *   - a hostile driver (issue 12's PCI-transport cases): config space written
 *     at every offset and width, the MSI-X BAR (table and read-only PBA)
 *     written at every offset and width, out-of-range vectors, a vector masked
 *     while its queue signals (the PBA shows it, unmasking delivers it),
 *     features changed after FEATURES_OK, queue sizes that are not a power of
 *     two or too large, queue fields changed after enable, DRIVER_OK without
 *     FEATURES_OK, a notify storm before and after DRIVER_OK, and the common,
 *     ISR, device and notify windows read and written at every offset; the
 *     config-space abuse again with modern-pio-notify's I/O BAR and the kick
 *     ioeventfds registered (both doorbells follow the BARs around);
 *   - modern-pio-notify: the port doorbells' capability first, port kicks.
 * Needs a KVM VM (the transport's INTx and ioeventfd paths); skipped visibly
 * without it. The system tests run this binary inside the nested harness's L1,
 * where /dev/kvm works (tests/system/inner.sh, the KVM unit tests section).
 */
#include <fcntl.h>
#include <glib.h>
#include <linux/pci_regs.h>
#include <linux/virtio_config.h>
#include <linux/virtio_pci.h>
#include <linux/virtio_ring.h>
#include <string.h>
#include <unistd.h>

#include "devices/virtio-pci.h"
#include "virtio/guest-notifier.h"
#include "pcifix.h"

/* What the device model saw: the transport's calls into it. */
typedef struct DevCounts {
    unsigned starts, stops, notifies, set_features;
    uint64_t features; /* last accepted */
} DevCounts;

static DevCounts counts;

#define DEV_FEATURES ((1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_RING_F_EVENT_IDX))

static uint64_t dev_features(void *opaque)
{
    return DEV_FEATURES;
}

/* Accepts a subset of what it offers, as a device must check. */
static bool dev_set_features(void *opaque, uint64_t features)
{
    counts.set_features++;
    if (features & ~DEV_FEATURES) {
        return false;
    }
    counts.features = features;
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
    counts.starts++;
    return true;
}

static void dev_stop(void *opaque)
{
    counts.stops++;
}

static void dev_queue_notify(void *opaque, unsigned q)
{
    g_assert_cmpuint(q, <, 2);
    counts.notifies++;
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

/* An MMIO read as the vCPU does it (0 where nothing answers). */
static uint64_t mmio_read(Fix *f, uint64_t addr, unsigned size)
{
    uint64_t v = 0;

    if (!iobus_read(f->pf.mmio, addr, size, &v)) {
        return 0;
    }
    return v;
}

/* ---- a hostile driver ---- */

#define NQ   2
#define NVEC (NQ + 1) /* the transport's vectors: one per queue and config */

typedef struct Tp {
    Fix f;
    Vm *vm;
    VirtIOPCI *vp;
    uint64_t table, common;
    uint32_t saved[64]; /* config space after setup */
} Tp;

static uint64_t bar4_addr(Fix *f)
{
    return (cfg_read(f, PCI_BASE_ADDRESS_4, 4) & ~0xfu) |
           ((uint64_t)cfg_read(f, PCI_BASE_ADDRESS_5, 4) << 32);
}

static bool tp_init_pio(Tp *t, bool pio_notify)
{
    VmConfig cfg = {.ram_size = 4 << 20, .ncpus = 1};
    VirtIOPCIConf conf = {.device_id = 2,
                          .class_code = 0x010000,
                          .num_queues = NQ,
                          .queue_size = 16,
                          .config_size = 8,
                          .name = "vp0",
                          .pio_notify = pio_notify};
    GError *err = NULL;
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

    if (fd < 0) {
        g_test_skip("/dev/kvm is not usable here");
        return false;
    }
    close(fd);
    memset(t, 0, sizeof(*t));
    memset(&counts, 0, sizeof(counts));
    t->vm = vm_new(&cfg, &err);
    g_assert_no_error(err);
    pcifix_init(&t->f.pf);
    conf.slot = pci_bus_free_slot(t->f.pf.bus);
    t->f.slot = (unsigned)conf.slot;
    t->vp = virtio_pci_new(t->vm, t->f.pf.bus, &conf, &dev_ops, NULL, &err);
    g_assert_no_error(err);
    t->table = cfg_read(&t->f, PCI_BASE_ADDRESS_1, 4) & ~0xfu;
    t->common = bar4_addr(&t->f);
    cfg_write(&t->f, PCI_COMMAND, 2,
              PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | (pio_notify ? PCI_COMMAND_IO : 0));
    for (unsigned i = 0; i < 64; i++) {
        t->saved[i] = cfg_read(&t->f, i * 4, 4);
    }
    return true;
}

static bool tp_init(Tp *t)
{
    return tp_init_pio(t, false);
}

static void tp_cleanup(Tp *t)
{
    virtio_pci_free(t->vp);
    pcifix_cleanup(&t->f.pf);
    vm_free(t->vm);
}

static uint64_t cc_read(Tp *t, unsigned off, unsigned size)
{
    return mmio_read(&t->f, t->common + off, size);
}

static void cc_write(Tp *t, unsigned off, unsigned size, uint64_t val)
{
    iobus_write(t->f.pf.mmio, t->common + off, size, val);
}

/* The driver's feature handshake: @lo/@hi as guest features, FEATURES_OK; returns status. */
static uint8_t negotiate(Tp *t, uint32_t lo, uint32_t hi)
{
    cc_write(t, VIRTIO_PCI_COMMON_STATUS, 1, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
    cc_write(t, VIRTIO_PCI_COMMON_GFSELECT, 4, 0);
    cc_write(t, VIRTIO_PCI_COMMON_GF, 4, lo);
    cc_write(t, VIRTIO_PCI_COMMON_GFSELECT, 4, 1);
    cc_write(t, VIRTIO_PCI_COMMON_GF, 4, hi);
    cc_write(t, VIRTIO_PCI_COMMON_STATUS, 1,
             VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | VIRTIO_CONFIG_S_FEATURES_OK);
    return (uint8_t)cc_read(t, VIRTIO_PCI_COMMON_STATUS, 1);
}

static void enable_queue(Tp *t, unsigned q)
{
    cc_write(t, VIRTIO_PCI_COMMON_Q_SELECT, 2, q);
    cc_write(t, VIRTIO_PCI_COMMON_Q_DESCLO, 4, 0x10000 + q * 0x1000);
    cc_write(t, VIRTIO_PCI_COMMON_Q_AVAILLO, 4, 0x10400 + q * 0x1000);
    cc_write(t, VIRTIO_PCI_COMMON_Q_USEDLO, 4, 0x10800 + q * 0x1000);
    cc_write(t, VIRTIO_PCI_COMMON_Q_ENABLE, 2, 1);
}

static void driver_ok(Tp *t)
{
    g_assert_cmphex(negotiate(t, 0, 1) & VIRTIO_CONFIG_S_FEATURES_OK, ==,
                    VIRTIO_CONFIG_S_FEATURES_OK);
    enable_queue(t, 0);
    cc_write(t, VIRTIO_PCI_COMMON_STATUS, 1,
             VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | VIRTIO_CONFIG_S_FEATURES_OK |
                 VIRTIO_CONFIG_S_DRIVER_OK);
}

/* The device still identifies and answers after the abuse (BARs restored by the caller). */
static void check_alive(Tp *t)
{
    g_assert_cmphex(cfg_read(&t->f, PCI_VENDOR_ID, 2), ==, 0x1af4);
    g_assert_cmphex(cfg_read(&t->f, PCI_DEVICE_ID, 2), ==, 0x1042);
    g_assert_cmphex(cfg_read(&t->f, PCI_CLASS_REVISION, 4) >> 8, ==, 0x010000);
    g_assert_cmpuint(pcifix_find_cap(&t->f.pf, t->f.slot, PCI_CAP_ID_MSIX), !=, 0);
    g_assert_cmpuint(pcifix_find_cap(&t->f.pf, t->f.slot, PCI_CAP_ID_VNDR), !=, 0);
    cc_write(t, VIRTIO_PCI_COMMON_STATUS, 1, 0);
    g_assert_cmpuint(cc_read(t, VIRTIO_PCI_COMMON_NUMQ, 2), ==, NQ);
    cc_write(t, VIRTIO_PCI_COMMON_Q_SELECT, 2, 0);
    g_assert_cmpuint(cc_read(t, VIRTIO_PCI_COMMON_Q_SIZE, 2), ==, 16);
    g_assert_cmphex(negotiate(t, 0, 1) & VIRTIO_CONFIG_S_FEATURES_OK, ==,
                    VIRTIO_CONFIG_S_FEATURES_OK);
    cc_write(t, VIRTIO_PCI_COMMON_STATUS, 1, 0);
}

/* Config space: every offset at every width, all ones then zero, then read back. */
static void abuse_config_space(bool pio_notify)
{
    static const unsigned widths[] = {1, 2, 4};
    static const uint32_t values[] = {0xffffffff, 0, 0xa5a5a5a5};
    GError *err = NULL;
    Tp t;

    if (!tp_init_pio(&t, pio_notify)) {
        return;
    }
    /* With the kick ioeventfds on: both doorbells follow every BAR move. */
    vm_lock(t.vm);
    g_assert_true(virtio_pci_set_host_notifiers(t.vp, true, &err));
    vm_unlock(t.vm);
    g_assert_no_error(err);
    for (unsigned w = 0; w < G_N_ELEMENTS(widths); w++) {
        for (unsigned v = 0; v < G_N_ELEMENTS(values); v++) {
            for (unsigned reg = 0; reg < 256; reg += widths[w]) {
                cfg_write(&t.f, reg, widths[w], values[v]);
                (void)cfg_read(&t.f, reg, widths[w]);
            }
        }
    }
    /* Read-only identity survived; the writable registers go back as the firmware set them. */
    g_assert_cmphex(cfg_read(&t.f, PCI_VENDOR_ID, 4), ==, t.saved[0]);
    for (unsigned reg = PCI_BASE_ADDRESS_0; reg <= PCI_BASE_ADDRESS_5; reg += 4) {
        cfg_write(&t.f, reg, 4, t.saved[reg / 4]);
    }
    cfg_write(&t.f, PCI_COMMAND, 2,
              PCI_COMMAND_MEMORY | PCI_COMMAND_MASTER | (pio_notify ? PCI_COMMAND_IO : 0));
    g_assert_cmphex(bar4_addr(&t.f), ==, t.common);
    g_assert_cmphex(cfg_read(&t.f, PCI_BASE_ADDRESS_2, 4), ==, t.saved[PCI_BASE_ADDRESS_2 / 4]);
    vm_lock(t.vm);
    g_assert_true(virtio_pci_set_host_notifiers(t.vp, false, &err));
    vm_unlock(t.vm);
    g_assert_no_error(err);
    if (pio_notify) {
        /* The port doorbell answers where the firmware put it. */
        driver_ok(&t);
        iobus_write(t.f.pf.pio, t.saved[PCI_BASE_ADDRESS_2 / 4] & ~3u, 2, 0);
        g_assert_cmpuint(counts.notifies, ==, 1);
    }
    check_alive(&t);
    tp_cleanup(&t);
}

static void test_abuse_config_space(void)
{
    abuse_config_space(false);
}

/* The same with modern-pio-notify's I/O BAR: it moves too, port space wraps at 64 KiB. */
static void test_abuse_config_space_pio(void)
{
    abuse_config_space(true);
}

/* The MSI-X BAR: every offset and width; the PBA is read-only; vectors out of range. */
static void test_abuse_msix_bar(void)
{
    static const unsigned widths[] = {1, 2, 4, 8};
    unsigned cap;
    Tp t;

    if (!tp_init(&t)) {
        return;
    }
    cap = pcifix_find_cap(&t.f.pf, t.f.slot, PCI_CAP_ID_MSIX);
    g_assert_cmpuint((cfg_read(&t.f, cap + PCI_MSIX_FLAGS, 2) & PCI_MSIX_FLAGS_QSIZE) + 1, ==, NVEC);
    cfg_write(&t.f, cap + PCI_MSIX_FLAGS, 2, PCI_MSIX_FLAGS_ENABLE);
    for (unsigned w = 0; w < G_N_ELEMENTS(widths); w++) {
        for (uint64_t off = 0; off < 0x1000; off += widths[w]) {
            iobus_write(t.f.pf.mmio, t.table + off, widths[w], ~0ull);
            (void)mmio_read(&t.f, t.table + off, widths[w]);
        }
    }
    /* Nothing signalled: no pending bit, whatever was written over the PBA. */
    g_assert_cmphex(mmio_read(&t.f, t.table + 0x800, 8), ==, 0);
    /* Every vector masked by the all-ones control words: nothing bound. */
    g_assert_cmpuint(pcifix_bound_irqfds(&t.f.pf), ==, 0);

    /* Vectors beyond the table read back as NO_VECTOR (spec 4.1.4.3), valid ones stick. */
    cc_write(&t, VIRTIO_PCI_COMMON_Q_SELECT, 2, 0);
    for (unsigned bad = NVEC; bad < 0x10000; bad = bad * 3 + 1) {
        cc_write(&t, VIRTIO_PCI_COMMON_Q_MSIX, 2, bad);
        g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_Q_MSIX, 2), ==, VIRTIO_MSI_NO_VECTOR);
        cc_write(&t, VIRTIO_PCI_COMMON_MSIX, 2, bad);
        g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_MSIX, 2), ==, VIRTIO_MSI_NO_VECTOR);
    }
    cc_write(&t, VIRTIO_PCI_COMMON_Q_MSIX, 2, NVEC - 1);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_Q_MSIX, 2), ==, NVEC - 1);
    check_alive(&t);
    tp_cleanup(&t);
}

static uint64_t pba(Tp *t)
{
    return mmio_read(&t->f, t->table + 0x800, 8);
}

/* A vector masked (per vector, then the whole function) while its queue signals. */
static void test_abuse_masked_signal(void)
{
    unsigned cap;
    GuestNotifier gn;
    uint64_t cnt;
    Tp t;

    if (!tp_init(&t)) {
        return;
    }
    cap = pcifix_find_cap(&t.f.pf, t.f.slot, PCI_CAP_ID_MSIX);
    msix_setup_vector0(&t.f, t.table);
    cc_write(&t, VIRTIO_PCI_COMMON_Q_SELECT, 2, 0);
    cc_write(&t, VIRTIO_PCI_COMMON_Q_MSIX, 2, 0);
    driver_ok(&t);
    g_assert_cmpuint(counts.starts, ==, 1);
    g_assert_cmpuint(pcifix_bound_irqfds(&t.f.pf), ==, 1);
    gn = virtio_pci_guest_notifier(t.vp, 0);
    g_assert_cmpint(gn.fd, >=, 0);

    for (int round = 0; round < 2; round++) {
        /* Round 0 masks vector 0; round 1 masks the function (MASKALL). */
        if (round == 0) {
            iobus_write(t.f.pf.mmio, t.table + PCI_MSIX_ENTRY_VECTOR_CTRL, 4, 1);
        } else {
            cfg_write(&t.f, cap + PCI_MSIX_FLAGS, 2, PCI_MSIX_FLAGS_ENABLE | PCI_MSIX_FLAGS_MASKALL);
        }
        g_assert_cmpuint(pcifix_bound_irqfds(&t.f.pf), ==, 0);
        g_assert_cmphex(pba(&t) & 1, ==, 0);
        guest_notifier_notify(&gn); /* a completion while masked */
        g_assert_cmphex(pba(&t) & 1, ==, 1);
        if (round == 0) {
            iobus_write(t.f.pf.mmio, t.table + PCI_MSIX_ENTRY_VECTOR_CTRL, 4, 0);
        } else {
            cfg_write(&t.f, cap + PCI_MSIX_FLAGS, 2, PCI_MSIX_FLAGS_ENABLE);
        }
        /* Rebound with the count still there: KVM injects it at assign. */
        g_assert_cmpuint(pcifix_bound_irqfds(&t.f.pf), ==, 1);
        g_assert_cmphex(pba(&t) & 1, ==, 0);
        g_assert_cmpint(read(gn.fd, &cnt, sizeof(cnt)), ==, sizeof(cnt));
        g_assert_cmpuint(cnt, ==, 1);
    }
    cc_write(&t, VIRTIO_PCI_COMMON_STATUS, 1, 0);
    g_assert_cmpuint(counts.stops, ==, 1);
    check_alive(&t);
    tp_cleanup(&t);
}

/* Features: only offered ones, fixed after FEATURES_OK; DRIVER_OK needs FEATURES_OK. */
static void test_abuse_features(void)
{
    uint8_t st;
    Tp t;

    if (!tp_init(&t)) {
        return;
    }
    /* Bit 50 was never offered: FEATURES_OK does not stick. */
    st = negotiate(&t, 0, 1u | (1u << 18));
    g_assert_cmphex(st & VIRTIO_CONFIG_S_FEATURES_OK, ==, 0);
    cc_write(&t, VIRTIO_PCI_COMMON_STATUS, 1, st | VIRTIO_CONFIG_S_DRIVER_OK);
    g_assert_cmpuint(counts.starts, ==, 0);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_STATUS, 1) & VIRTIO_CONFIG_S_NEEDS_RESET, ==,
                    VIRTIO_CONFIG_S_NEEDS_RESET);
    cc_write(&t, VIRTIO_PCI_COMMON_STATUS, 1, 0);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_STATUS, 1), ==, 0);

    /* VERSION_1 only; then the driver tries to change its mind. */
    st = negotiate(&t, 0, 1);
    g_assert_cmphex(st & VIRTIO_CONFIG_S_FEATURES_OK, ==, VIRTIO_CONFIG_S_FEATURES_OK);
    g_assert_cmphex(counts.features, ==, 1ull << VIRTIO_F_VERSION_1);
    cc_write(&t, VIRTIO_PCI_COMMON_GFSELECT, 4, 0);
    cc_write(&t, VIRTIO_PCI_COMMON_GF, 4, 1u << VIRTIO_RING_F_EVENT_IDX);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_GF, 4), ==, 0);
    cc_write(&t, VIRTIO_PCI_COMMON_GFSELECT, 4, 1);
    cc_write(&t, VIRTIO_PCI_COMMON_GF, 4, 0xffffffff);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_GF, 4), ==, 1);
    cc_write(&t, VIRTIO_PCI_COMMON_GFSELECT, 4, 0x80000000); /* no such word */
    cc_write(&t, VIRTIO_PCI_COMMON_GF, 4, 0xffffffff);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_GF, 4), ==, 0);
    cc_write(&t, VIRTIO_PCI_COMMON_DFSELECT, 4, 0x80000000);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_DF, 4), ==, 0);
    /* FEATURES_OK written again: not renegotiated. */
    cc_write(&t, VIRTIO_PCI_COMMON_STATUS, 1, st);
    g_assert_cmpuint(counts.set_features, ==, 2);
    enable_queue(&t, 0);
    cc_write(&t, VIRTIO_PCI_COMMON_STATUS, 1, st | VIRTIO_CONFIG_S_DRIVER_OK);
    g_assert_cmpuint(counts.starts, ==, 1);
    g_assert_cmphex(counts.features, ==, 1ull << VIRTIO_F_VERSION_1);
    check_alive(&t);
    g_assert_cmpuint(counts.stops, ==, 1);
    tp_cleanup(&t);
}

/*
 * DRIVER_OK taken away without a reset: the device is stopped once, marked
 * NEEDS_RESET, and not started again over the same rings until a reset; every
 * start is matched by one stop.
 */
static void test_abuse_driver_ok_cleared(void)
{
    const uint8_t feat = VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
                         VIRTIO_CONFIG_S_FEATURES_OK;
    Tp t;

    if (!tp_init(&t)) {
        return;
    }
    driver_ok(&t);
    g_assert_cmpuint(counts.starts, ==, 1);
    g_assert_cmpuint(counts.stops, ==, 0);
    cc_write(&t, VIRTIO_PCI_COMMON_STATUS, 1, feat);
    g_assert_cmpuint(counts.stops, ==, 1);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_STATUS, 1), ==,
                    feat | VIRTIO_CONFIG_S_NEEDS_RESET);
    /* Doorbells go nowhere now. */
    iobus_write(t.f.pf.mmio, t.common + 0x3000, 2, 0);
    g_assert_cmpuint(counts.notifies, ==, 0);
    /* Set again (and flipped a few times): no second start without a reset. */
    for (unsigned i = 0; i < 4; i++) {
        cc_write(&t, VIRTIO_PCI_COMMON_STATUS, 1, feat | VIRTIO_CONFIG_S_DRIVER_OK);
        cc_write(&t, VIRTIO_PCI_COMMON_STATUS, 1, feat);
    }
    g_assert_cmpuint(counts.starts, ==, 1);
    g_assert_cmpuint(counts.stops, ==, 1);
    /* A reset clears it, and the device starts again. */
    cc_write(&t, VIRTIO_PCI_COMMON_STATUS, 1, 0);
    g_assert_cmpuint(counts.stops, ==, 1);
    driver_ok(&t);
    g_assert_cmpuint(counts.starts, ==, 2);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_STATUS, 1) & VIRTIO_CONFIG_S_NEEDS_RESET, ==, 0);
    iobus_write(t.f.pf.mmio, t.common + 0x3000, 2, 0);
    g_assert_cmpuint(counts.notifies, ==, 1);
    check_alive(&t);
    g_assert_cmpuint(counts.stops, ==, 2);
    tp_cleanup(&t);
}

/* Queue sizes, fields after enable, disable, and queues that do not exist. */
static void test_abuse_queue_fields(void)
{
    static const uint64_t bad_sizes[] = {0, 3, 12, 17, 32, 0x8000, 0xffff};
    Tp t;

    if (!tp_init(&t)) {
        return;
    }
    cc_write(&t, VIRTIO_PCI_COMMON_Q_SELECT, 2, 1);
    for (unsigned i = 0; i < G_N_ELEMENTS(bad_sizes); i++) {
        cc_write(&t, VIRTIO_PCI_COMMON_Q_SIZE, 2, bad_sizes[i]);
        g_assert_cmpuint(cc_read(&t, VIRTIO_PCI_COMMON_Q_SIZE, 2), ==, 16);
    }
    cc_write(&t, VIRTIO_PCI_COMMON_Q_SIZE, 2, 8);
    g_assert_cmpuint(cc_read(&t, VIRTIO_PCI_COMMON_Q_SIZE, 2), ==, 8);
    enable_queue(&t, 1);
    /* Fixed once enabled (spec 4.1.4.3.2); disabling is not the driver's to do. */
    cc_write(&t, VIRTIO_PCI_COMMON_Q_SIZE, 2, 4);
    cc_write(&t, VIRTIO_PCI_COMMON_Q_DESCLO, 4, 0xdead000);
    cc_write(&t, VIRTIO_PCI_COMMON_Q_DESCHI, 4, 0xffffffff);
    cc_write(&t, VIRTIO_PCI_COMMON_Q_ENABLE, 2, 0);
    g_assert_cmpuint(cc_read(&t, VIRTIO_PCI_COMMON_Q_SIZE, 2), ==, 8);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_Q_DESCLO, 4), ==, 0x11000);
    g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_Q_DESCHI, 4), ==, 0);
    g_assert_cmpuint(cc_read(&t, VIRTIO_PCI_COMMON_Q_ENABLE, 2), ==, 1);
    /* A queue that does not exist: reads as absent, writes go nowhere. */
    for (unsigned q = NQ; q < 0x10000; q = q * 7 + 1) {
        cc_write(&t, VIRTIO_PCI_COMMON_Q_SELECT, 2, q);
        cc_write(&t, VIRTIO_PCI_COMMON_Q_SIZE, 2, 4);
        cc_write(&t, VIRTIO_PCI_COMMON_Q_ENABLE, 2, 1);
        cc_write(&t, VIRTIO_PCI_COMMON_Q_MSIX, 2, 0);
        g_assert_cmpuint(cc_read(&t, VIRTIO_PCI_COMMON_Q_SIZE, 2), ==, 0);
        g_assert_cmpuint(cc_read(&t, VIRTIO_PCI_COMMON_Q_ENABLE, 2), ==, 0);
        g_assert_cmphex(cc_read(&t, VIRTIO_PCI_COMMON_Q_MSIX, 2), ==, VIRTIO_MSI_NO_VECTOR);
    }
    /* Reset forgets it all. */
    cc_write(&t, VIRTIO_PCI_COMMON_STATUS, 1, 0);
    cc_write(&t, VIRTIO_PCI_COMMON_Q_SELECT, 2, 1);
    g_assert_cmpuint(cc_read(&t, VIRTIO_PCI_COMMON_Q_ENABLE, 2), ==, 0);
    g_assert_cmpuint(cc_read(&t, VIRTIO_PCI_COMMON_Q_SIZE, 2), ==, 16);
    check_alive(&t);
    tp_cleanup(&t);
}

/* Doorbells: ignored before DRIVER_OK, one call per kick after, none for absent queues. */
static void test_abuse_notify_storm(void)
{
    uint64_t notify = 0;
    Tp t;

    if (!tp_init(&t)) {
        return;
    }
    notify = t.common + 0x3000;
    for (unsigned i = 0; i < 20000; i++) {
        iobus_write(t.f.pf.mmio, notify + (i % 0x1000), 2, i);
    }
    g_assert_cmpuint(counts.notifies, ==, 0);
    driver_ok(&t);
    for (unsigned i = 0; i < 20000; i++) {
        iobus_write(t.f.pf.mmio, notify + (i % 2) * 4, 2, i % 2);
    }
    g_assert_cmpuint(counts.notifies, ==, 20000);
    /* Past the queues (dev_queue_notify asserts q < NQ): nothing. */
    for (uint64_t off = NQ * 4; off < 0x1000; off += 2) {
        iobus_write(t.f.pf.mmio, notify + off, 2, 0);
    }
    g_assert_cmpuint(counts.notifies, ==, 20000);
    check_alive(&t);
    tp_cleanup(&t);
}

/*
 * The virtio NOTIFY capabilities in chain order: their BAR and multiplier.
 * Returns how many there are (at most @max).
 */
static unsigned notify_caps(Tp *t, unsigned *bar, uint32_t *mult, unsigned max)
{
    unsigned n = 0;

    for (unsigned pos = cfg_read(&t->f, PCI_CAPABILITY_LIST, 1); pos && n < max;
         pos = cfg_read(&t->f, pos + 1, 1)) {
        if (cfg_read(&t->f, pos, 1) == PCI_CAP_ID_VNDR &&
            cfg_read(&t->f, pos + offsetof(struct virtio_pci_cap, cfg_type), 1) ==
                VIRTIO_PCI_CAP_NOTIFY_CFG) {
            bar[n] = cfg_read(&t->f, pos + offsetof(struct virtio_pci_cap, bar), 1);
            mult[n] = cfg_read(&t->f, pos + sizeof(struct virtio_pci_cap), 4);
            n++;
        }
    }
    return n;
}

/*
 * modern-pio-notify: an I/O BAR whose notify capability comes first (a
 * driver takes the first it can map); port kicks reach the queue like MMIO
 * ones, only after DRIVER_OK and only for queues that exist; KVM takes the
 * port's ioeventfd. Without the option: one notify capability, no I/O BAR.
 */
static void test_pio_notify(void)
{
    unsigned bar[4];
    uint32_t mult[4];
    uint64_t port, v;
    GError *err = NULL;
    Tp t;

    if (!tp_init(&t)) {
        return;
    }
    g_assert_cmpuint(notify_caps(&t, bar, mult, 4), ==, 1);
    g_assert_cmpuint(bar[0], ==, 4);
    g_assert_cmphex(cfg_read(&t.f, PCI_BASE_ADDRESS_2, 4), ==, 0);
    g_assert_false(cfg_read(&t.f, PCI_COMMAND, 2) & PCI_COMMAND_IO);
    tp_cleanup(&t);

    g_assert_true(tp_init_pio(&t, true));
    g_assert_cmpuint(notify_caps(&t, bar, mult, 4), ==, 2);
    g_assert_cmpuint(bar[0], ==, 2); /* the port doorbells first */
    g_assert_cmpuint(mult[0], ==, 2);
    g_assert_cmpuint(bar[1], ==, 4);
    g_assert_cmpuint(mult[1], ==, 4);
    port = cfg_read(&t.f, PCI_BASE_ADDRESS_2, 4);
    g_assert_cmphex(port & PCI_BASE_ADDRESS_SPACE, ==, PCI_BASE_ADDRESS_SPACE_IO);
    port &= ~3u;
    g_assert_cmphex(port, >=, VMM_PCI_PIO_START);
    /* Before DRIVER_OK a port kick does nothing; reads are 0. */
    iobus_write(t.f.pf.pio, port, 2, 0);
    g_assert_cmpuint(counts.notifies, ==, 0);
    g_assert_true(iobus_read(t.f.pf.pio, port, 2, &v));
    g_assert_cmphex(v, ==, 0);
    driver_ok(&t);
    for (unsigned i = 0; i < 1000; i++) {
        iobus_write(t.f.pf.pio, port + (i % NQ) * 2, 2, i % NQ);
    }
    g_assert_cmpuint(counts.notifies, ==, 1000);
    /* Past the queues, in the BAR's padding: nothing (dev_queue_notify asserts q < NQ). */
    iobus_write(t.f.pf.pio, port + NQ * 2, 2, 0);
    g_assert_cmpuint(counts.notifies, ==, 1000);
    /* KVM takes both doorbells' ioeventfds, and follows the I/O BAR when it moves. */
    vm_lock(t.vm);
    g_assert_true(virtio_pci_set_host_notifiers(t.vp, true, &err));
    g_assert_no_error(err);
    cfg_write(&t.f, PCI_BASE_ADDRESS_2, 4, 0xd000);
    g_assert_true(virtio_pci_set_host_notifiers(t.vp, false, &err));
    g_assert_true(virtio_pci_set_host_notifiers(t.vp, true, &err));
    g_assert_no_error(err);
    g_assert_true(virtio_pci_set_host_notifiers(t.vp, false, &err));
    vm_unlock(t.vm);
    iobus_write(t.f.pf.pio, 0xd000 + 2, 2, 1);
    g_assert_cmpuint(counts.notifies, ==, 1001);
    g_assert_false(iobus_write(t.f.pf.pio, port, 2, 0));
    check_alive(&t);
    tp_cleanup(&t);
}

/* BAR 4 read and written at every offset and width, DRIVER_OK reached first. */
static void test_abuse_bar4_windows(void)
{
    static const unsigned widths[] = {1, 2, 4, 8};
    Tp t;

    if (!tp_init(&t)) {
        return;
    }
    driver_ok(&t);
    for (unsigned w = 0; w < G_N_ELEMENTS(widths); w++) {
        for (uint64_t off = 0; off < 0x4000; off += widths[w]) {
            (void)mmio_read(&t.f, t.common + off, widths[w]);
        }
    }
    /* Writes everywhere but the common window's status and queue select (covered above). */
    for (unsigned w = 0; w < G_N_ELEMENTS(widths); w++) {
        for (uint64_t off = 0x1000; off < 0x3000; off += widths[w]) {
            iobus_write(t.f.pf.mmio, t.common + off, widths[w], ~0ull);
        }
    }
    g_assert_cmpuint(counts.starts, ==, 1);
    g_assert_cmpuint(counts.stops, ==, 0);
    /* The ISR reads 0 after the read above cleared it. */
    g_assert_cmphex(mmio_read(&t.f, t.common + 0x1000, 1), ==, 0);
    check_alive(&t);
    tp_cleanup(&t);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/virtio-pci/reset-clears-vectors", test_reset_clears_vectors);
    g_test_add_func("/virtio-pci/abuse/config-space", test_abuse_config_space);
    g_test_add_func("/virtio-pci/abuse/config-space-pio", test_abuse_config_space_pio);
    g_test_add_func("/virtio-pci/abuse/msix-bar", test_abuse_msix_bar);
    g_test_add_func("/virtio-pci/abuse/masked-signal", test_abuse_masked_signal);
    g_test_add_func("/virtio-pci/abuse/features", test_abuse_features);
    g_test_add_func("/virtio-pci/abuse/driver-ok-cleared", test_abuse_driver_ok_cleared);
    g_test_add_func("/virtio-pci/abuse/queue-fields", test_abuse_queue_fields);
    g_test_add_func("/virtio-pci/abuse/notify-storm", test_abuse_notify_storm);
    g_test_add_func("/virtio-pci/abuse/bar4-windows", test_abuse_bar4_windows);
    g_test_add_func("/virtio-pci/pio-notify", test_pio_notify);
    return g_test_run();
}
