/*
 * vblk: machine assembly: VM, serial console, legacy ports, PCI bus and
 * devices, MP table, Linux boot, then run until the guest or the user ends it.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "util/secret.h"
#include "vmm/acpi.h"
#include "vmm/boot.h"
#include "vmm/console.h"
#include "machine-internal.h"
#include "vmm/mptable.h"
#include "vmm/ports.h"
#include "monitor/qmp.h"
#include "util/error-report.h"

typedef struct MachineCleanup {
    void (*fn)(void *opaque);
    void *opaque;
} MachineCleanup;

struct Machine {
    const VmmOptions *opts;
    Vm *vm;
    EventLoop *main_loop; /* fd handlers, BHs, timers of the main thread (block layer) */
    GSource *main_src;
    Console *console;
    LegacyPorts *ports;
    AcpiPmDevice *acpi; /* NULL with -machine acpi=off / -no-acpi */
    PciBus *pci;
    GArray *cleanups;     /* MachineCleanup */
    GBytes *kernel_image; /* -kernel and -initrd as read at startup: resets boot them again */
    GBytes *initrd_image;
};

typedef struct DeviceModel {
    const char *driver;
    MachineDeviceFn fn;
} DeviceModel;

static GArray *machine_models; /* DeviceModel */
static Vm *machine_signal_vm;

/* Context: main thread, before machine_run() */
void machine_register_device(const char *driver, MachineDeviceFn fn)
{
    DeviceModel m = {.driver = driver, .fn = fn};

    if (!machine_models) {
        machine_models = g_array_new(FALSE, FALSE, sizeof(DeviceModel));
    }
    g_array_append_val(machine_models, m);
}

/* Context: main thread */
Vm *machine_vm(Machine *m)
{
    return m->vm;
}

/* Context: main thread */
Console *machine_console(Machine *m)
{
    return m->console;
}

/* Context: main thread */
PciBus *machine_pci_bus(Machine *m)
{
    return m->pci;
}

/* Context: main thread */
const VmmOptions *machine_options(Machine *m)
{
    return m->opts;
}

/* Context: main thread */
void machine_add_cleanup(Machine *m, void (*fn)(void *opaque), void *opaque)
{
    MachineCleanup c = {.fn = fn, .opaque = opaque};

    g_array_append_val(m->cleanups, c);
}

/* PciIrqOps on top of the Vm. */
static void mach_set_irq(void *opaque, unsigned gsi, bool level)
{
    vm_set_irq_line(opaque, gsi, level);
}

static int mach_msi_route_add(void *opaque, uint64_t addr, uint32_t data)
{
    return vm_msi_route_add(opaque, addr, data, NULL);
}

static bool mach_msi_route_update(void *opaque, int gsi, uint64_t addr, uint32_t data)
{
    return vm_msi_route_update(opaque, gsi, addr, data, NULL);
}

static void mach_msi_route_remove(void *opaque, int gsi)
{
    vm_msi_route_remove(opaque, gsi);
}

static bool mach_irqfd(void *opaque, int fd, int gsi, bool assign)
{
    return assign ? vm_irqfd_assign(opaque, fd, gsi, -1, NULL)
                  : vm_irqfd_deassign(opaque, fd, gsi, NULL);
}

static void mach_signal_msi(void *opaque, uint64_t addr, uint32_t data)
{
    vm_signal_msi(opaque, addr, data);
}

static void mach_reset(void *opaque)
{
    vm_request_exit(opaque, VM_EXIT_RESET, NULL);
}

static const PciIrqOps machine_pci_irq_ops = {
    .set_irq = mach_set_irq,
    .msi_route_add = mach_msi_route_add,
    .msi_route_update = mach_msi_route_update,
    .msi_route_remove = mach_msi_route_remove,
    .irqfd = mach_irqfd,
    .signal_msi = mach_signal_msi,
    .reset = mach_reset,
};

static ConsoleMode machine_console_mode(SerialBackend b)
{
    switch (b) {
    case SERIAL_FILE:
        return CONSOLE_FILE;
    case SERIAL_NULL:
        return CONSOLE_NULL;
    case SERIAL_NONE:
        return CONSOLE_NONE;
    default:
        return CONSOLE_STDIO;
    }
}

static const DriveOptions *machine_find_drive(const VmmOptions *o, const char *id)
{
    for (guint i = 0; i < o->drives->len; i++) {
        const DriveOptions *d = o->drives->pdata[i];
        if (!strcmp(d->id, id)) {
            return d;
        }
    }
    return NULL;
}

static bool machine_add_devices(Machine *m, GError **errp)
{
    for (guint i = 0; i < m->opts->devices->len; i++) {
        const DeviceOptions *dev = m->opts->devices->pdata[i];
        const DriveOptions *drive = machine_find_drive(m->opts, dev->drive);
        MachineDeviceFn fn = NULL;

        for (guint j = 0; machine_models && j < machine_models->len; j++) {
            DeviceModel *model = &g_array_index(machine_models, DeviceModel, j);
            if (!strcmp(model->driver, dev->driver)) {
                fn = model->fn;
            }
        }
        if (!fn) {
            warn_report("-device %s,drive=%s: not wired yet (no virtio-pci transport in this "
                        "build); the guest will not see this disk",
                        dev->driver, dev->drive);
            continue;
        }
        /* No vCPU runs yet; the model takes the device lock where it needs it. */
        if (!fn(m, dev, drive, errp)) {
            return false;
        }
    }
    return true;
}

static bool machine_write_mptable(Machine *m, GError **errp)
{
    g_autoptr(GArray) irqs = g_array_new(FALSE, FALSE, sizeof(MpPciIrq));
    MpTableConfig cfg = {.ncpus = m->opts->smp};
    size_t n;
    const VmRamRegion *r = vm_ram_regions(m->vm, &n);
    uint8_t *buf;

    for (unsigned slot = 1; slot < PCI_SLOTS; slot++) {
        PciDevice *dev = pci_bus_device(m->pci, slot);
        if (dev && dev->config[0x3d]) {
            MpPciIrq q = {.slot = slot, .pin = dev->config[0x3d], .gsi = pci_intx_gsi(dev)};
            g_array_append_val(irqs, q);
        }
    }
    cfg.pci_irqs = (const MpPciIrq *)irqs->data;
    cfg.npci_irqs = irqs->len;
    buf = boot_gpa(r, n, BOOT_MPTABLE_ADDR, mptable_size(&cfg));
    if (!buf || BOOT_MPTABLE_ADDR + mptable_size(&cfg) > BOOT_HIMEM_START) {
        g_set_error(errp, VMM_ERROR, ENOSPC, "MP table does not fit below 1 MiB");
        return false;
    }
    return mptable_build(buf, mptable_size(&cfg), BOOT_MPTABLE_ADDR, &cfg, errp);
}

/* The ACPI tables at 0xE0000 (RSDP first); none with acpi=off. Rebuilt on every boot. */
static bool machine_write_acpi(Machine *m, GError **errp)
{
    AcpiConfig cfg = {.ncpus = m->opts->smp, .ram_size = m->opts->ram_size};
    g_autoptr(GByteArray) blob = NULL;
    size_t n;
    const VmRamRegion *r = vm_ram_regions(m->vm, &n);
    uint8_t *buf;

    if (!m->acpi) {
        return true;
    }
    blob = acpi_build_tables(&cfg, ACPI_TABLES_ADDR, errp);
    if (!blob) {
        return false;
    }
    buf = boot_gpa(r, n, ACPI_TABLES_ADDR, ACPI_TABLES_END - ACPI_TABLES_ADDR);
    if (!buf) {
        g_set_error(errp, VMM_ERROR, ENOMEM, "-m: too little RAM for the ACPI tables below 1 MiB");
        return false;
    }
    memset(buf, 0, ACPI_TABLES_END - ACPI_TABLES_ADDR);
    memcpy(buf, blob->data, blob->len);
    return true;
}

/*
 * What firmware leaves in RAM: MP table, ACPI tables, kernel, initrd, cmdline, zero page, GDT,
 * page tables.
 */
static bool machine_load(Machine *m, uint64_t *entry, GError **errp)
{
    const VmmOptions *o = m->opts;
    BootConfig boot = {.kernel = o->kernel,
                       .initrd = o->initrd,
                       .cmdline = o->append,
                       .kernel_image = m->kernel_image,
                       .initrd_image = m->initrd_image};
    size_t n;
    const VmRamRegion *r = vm_ram_regions(m->vm, &n);

    return machine_write_mptable(m, errp) && machine_write_acpi(m, errp) &&
           boot_load_linux(r, n, o->ram_size, &boot, entry, errp);
}

static bool machine_boot(Machine *m, GError **errp)
{
    const VmmOptions *o = m->opts;
    uint64_t entry;

    return boot_read_images(o->kernel, o->initrd, &m->kernel_image, &m->initrd_image, errp) &&
           machine_load(m, &entry, errp) && vm_create_vcpus(m->vm, errp) &&
           vm_setup_boot_cpu(m->vm, entry, BOOT_ZERO_PAGE, errp);
}

/* Context: main thread, BQL held, every vCPU paused */
bool machine_reset_devices_and_boot(Machine *m, GError **errp)
{
    uint64_t entry;

    /* Devices first: the virtio-blk device stops its path and drains its requests. */
    console_reset(m->console);
    legacy_ports_reset(m->ports);
    if (m->acpi) {
        acpi_pm_device_reset(m->acpi); /* SCI low, no pending press, SLP_TYP 0 */
    }
    pci_bus_reset(m->pci);
    /* Then the boot images, then the CPUs and in-kernel chips as at power-on. */
    return machine_load(m, &entry, errp) && vm_reset_cpus(m->vm, errp) &&
           vm_setup_boot_cpu(m->vm, entry, BOOT_ZERO_PAGE, errp);
}

static bool machine_build(Machine *m, GError **errp)
{
    const VmmOptions *o = m->opts;
    VmConfig cfg = {.ram_size = o->ram_size, .ncpus = o->smp, .reset_in_place = !o->no_reboot};

    m->vm = vm_new(&cfg, errp);
    if (!m->vm) {
        return false;
    }
    m->console = console_new(m->vm, machine_console_mode(o->serial), o->serial_path, errp);
    if (!m->console) {
        return false;
    }
    m->ports = legacy_ports_new(m->vm, errp);
    if (!m->ports) {
        return false;
    }
    if (!o->no_acpi) {
        m->acpi = acpi_pm_device_new(m->vm, errp);
        if (!m->acpi) {
            return false;
        }
    }
    machine_qmp_set_acpi(m->acpi);
    vm_lock(m->vm);
    m->pci = pci_bus_new(vm_pio_bus(m->vm), vm_mmio_bus(m->vm), &machine_pci_irq_ops, m->vm, errp);
    vm_unlock(m->vm);
    /* The QOM/command registry exists even without a monitor: devices register in it. */
    qmp_init(NULL);
    m->main_loop = event_loop_new(errp);
    if (!m->main_loop) {
        return false;
    }
    m->main_src = event_loop_create_gsource(m->main_loop);
    g_source_attach(m->main_src, NULL);
    return m->pci && machine_add_devices(m, errp) && machine_boot(m, errp);
}

static void machine_teardown(Machine *m)
{
    /*
     * Test hook (system test 17): a teardown that takes this many seconds,
     * to show that the exit watchdog dumps the state and ends vblk.
     */
    const char *stall = g_getenv("VBLK_TEST_TEARDOWN_STALL_S");

    if (stall && m->vm) {
        g_usleep((gulong)g_ascii_strtoull(stall, NULL, 10) * G_USEC_PER_SEC);
    }
    if (m->vm) {
        vm_pause(m->vm); /* no vCPU is inside a device from here on */
    }
    console_free(m->console);
    for (guint i = m->cleanups->len; i > 0; i--) {
        MachineCleanup *c = &g_array_index(m->cleanups, MachineCleanup, i - 1);
        c->fn(c->opaque);
    }
    if (m->pci) {
        vm_lock(m->vm);
        pci_bus_free(m->pci);
        vm_unlock(m->vm);
    }
    machine_qmp_set_acpi(NULL);
    acpi_pm_device_free(m->acpi);
    legacy_ports_free(m->ports);
    vm_free(m->vm);
    g_clear_pointer(&m->kernel_image, g_bytes_unref);
    g_clear_pointer(&m->initrd_image, g_bytes_unref);
    g_array_free(m->cleanups, TRUE);
    if (m->main_src) {
        g_source_destroy(m->main_src);
        g_source_unref(m->main_src);
    }
    if (m->main_loop) {
        event_loop_free(m->main_loop);
    }
    qmp_cleanup();
}

/* Context: main thread */
EventLoop *machine_event_loop(Machine *m)
{
    return m->main_loop;
}

/*
 * A signal asks for the orderly shutdown (as QEMU's SIGTERM does). That path
 * must not be able to keep the process alive: if it has not finished
 * MACHINE_SIGNAL_GRACE_S seconds later (a vCPU that never leaves KVM_RUN, a
 * backend that never completes), SIGALRM ends the process, and a second
 * signal ends it at once. Every other exit (quit, guest poweroff, a guest
 * reset under -no-reboot, an error) gets the same bound once the main loop
 * has ended (machine_exit_watchdog_arm): a guest whose kernel had crashed
 * once left vblk hanging after its SHUTDOWN event, still running 900 s later.
 * Only async-signal-safe calls below.
 */
#define MACHINE_SIGNAL_GRACE_S 15

static volatile sig_atomic_t machine_signals;
static volatile sig_atomic_t machine_first_signal; /* its number, for SHUTDOWN host-signal */

static void machine_signal_write(const char *s)
{
    size_t len = strlen(s);

    while (len > 0) {
        ssize_t n = write(STDERR_FILENO, s, len);

        if (n <= 0) {
            return;
        }
        s += n;
        len -= (size_t)n;
    }
}

/* Decimal of a non-negative value into buf (at least 12 bytes); returns buf. */
static char *machine_signal_itoa(long v, char *buf)
{
    char tmp[24];
    int i = 0, j = 0;

    if (v < 0) {
        v = 0;
    }
    do {
        tmp[i++] = (char)('0' + v % 10);
        v /= 10;
    } while (v > 0 && i < (int)sizeof(tmp));
    while (i > 0) {
        buf[j++] = tmp[--i];
    }
    buf[j] = '\0';
    return buf;
}

void machine_exit_now(const char *msg)
{
    machine_signal_write(msg);
    _exit(1);
}

/*
 * The exit watchdog fired. The first time, the debug thread (if any) dumps
 * where every thread is and exits; if it has not within 5 s, the second
 * alarm exits here.
 */
static void machine_on_alarm(int sig)
{
    static volatile sig_atomic_t fired;

    (void)sig;
    if (fired++ == 0) {
        machine_signal_write("vblk: exit did not finish within 15 s; dumping the state\n");
        if (machine_debug_watchdog_fire()) {
            alarm(5);
            return;
        }
    }
    machine_exit_now("vblk: exit did not finish within 15 s; exiting\n");
}

static void machine_on_signal(int sig, siginfo_t *si, void *uc)
{
    char num[24];

    (void)uc;
    if (machine_signals++ > 0) {
        machine_signal_write("vblk: second signal during shutdown; exiting now\n");
        _exit(1);
    }
    machine_first_signal = sig;
    machine_signal_write("vblk: terminating on signal ");
    machine_signal_write(machine_signal_itoa(sig, num));
    if (si && si->si_code == SI_USER) {
        machine_signal_write(" from pid ");
        machine_signal_write(machine_signal_itoa(si->si_pid, num));
    }
    machine_signal_write("\n");
    alarm(MACHINE_SIGNAL_GRACE_S);
    if (machine_signal_vm) {
        vm_request_exit(machine_signal_vm, VM_EXIT_QUIT, NULL);
    }
}

static void machine_print_stats(Vm *vm)
{
    VmStats s;

    if (!g_getenv("VBLK_STATS")) {
        return;
    }
    vm_get_stats(vm, &s);
    info_report("exits: pio %" G_GUINT64_FORMAT " (unhandled %" G_GUINT64_FORMAT
                "), mmio %" G_GUINT64_FORMAT " (unhandled %" G_GUINT64_FORMAT ")",
                s.exits_pio, s.unhandled_pio, s.exits_mmio, s.unhandled_mmio);
}

/* Context: main thread (after the main loop has ended) */
/* Context: main thread */
int machine_exit_signal(void)
{
    return machine_first_signal;
}

void machine_exit_watchdog_arm(void)
{
    unsigned left = alarm(MACHINE_SIGNAL_GRACE_S);

    if (left > 0 && left < MACHINE_SIGNAL_GRACE_S) {
        alarm(left); /* a signal's earlier deadline stands */
    }
}

/* Context: main thread */
int machine_run(const VmmOptions *opts)
{
    Machine m = {.opts = opts};
    struct sigaction sa = {.sa_sigaction = machine_on_signal, .sa_flags = SA_SIGINFO};
    struct sigaction alarm_sa = {.sa_handler = machine_on_alarm};
    GError *err = NULL;
    bool have_qmp = false;
    int status = 1;

    m.cleanups = g_array_new(FALSE, FALSE, sizeof(MachineCleanup));
    if (!opts->kernel) {
        error_report("-kernel: required (vblk boots Linux directly; it has no "
                     "firmware to boot a disk)");
        g_array_free(m.cleanups, TRUE);
        return 1;
    }
    if (options_register_secrets(opts, &err) && machine_build(&m, &err) &&
        machine_monitors_open(&m, opts, &have_qmp, &err)) {
        machine_signal_vm = m.vm;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGTERM, &sa, NULL);
        sigaction(SIGINT, &sa, NULL);
        sigaction(SIGHUP, &sa, NULL);
        sigemptyset(&alarm_sa.sa_mask);
        sigaction(SIGALRM, &alarm_sa, NULL);
        signal(SIGPIPE, SIG_IGN);
        if (console_start(m.console, &err) && vm_start(m.vm, opts->start_paused, &err)) {
            status = machine_main_loop(&m, opts->start_paused, have_qmp);
            machine_print_stats(m.vm);
        } else if (have_qmp) {
            qmp_cleanup();
        }
    }
    if (err) {
        error_report("%s", err->message);
        g_error_free(err);
        status = 1;
    }
    machine_signal_vm = NULL;
    machine_teardown(&m);
    machine_debug_stop();
    secret_clear_all();
    return status;
}
