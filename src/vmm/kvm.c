/*
 * vblk: VM-wide KVM state: /dev/kvm checks, irqchip and PIT, guest RAM
 * (anonymous, THP-advised), the GSI routing table, irqfds and ioeventfds, and
 * the exit request.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "vm-internal.h"
#include "util/thread-check.h"
#include "util/error-report.h"

#define KVM_API_VERSION_EXPECTED 12

static const struct {
    int cap;
    const char *name;
} vm_required_caps[] = {
    {KVM_CAP_IRQCHIP, "IRQCHIP"},
    {KVM_CAP_IRQ_ROUTING, "IRQ_ROUTING"},
    {KVM_CAP_IRQFD, "IRQFD"},
    {KVM_CAP_IRQFD_RESAMPLE, "IRQFD_RESAMPLE"},
    {KVM_CAP_IOEVENTFD, "IOEVENTFD"},
    {KVM_CAP_IOEVENTFD_ANY_LENGTH, "IOEVENTFD_ANY_LENGTH"},
    {KVM_CAP_SIGNAL_MSI, "SIGNAL_MSI"},
    {KVM_CAP_PIT2, "PIT2"},
    {KVM_CAP_EXT_CPUID, "EXT_CPUID"},
    {KVM_CAP_SET_TSS_ADDR, "SET_TSS_ADDR"},
    {KVM_CAP_SET_IDENTITY_MAP_ADDR, "SET_IDENTITY_MAP_ADDR"},
    {KVM_CAP_USER_MEMORY, "USER_MEMORY"},
    {KVM_CAP_IMMEDIATE_EXIT, "IMMEDIATE_EXIT"},
};

/* Context: any thread */
GQuark vmm_error_quark(void)
{
    return g_quark_from_static_string("vblk-vmm-error");
}

static bool vm_errno(GError **errp, const char *what)
{
    int err = errno;

    g_set_error(errp, VMM_ERROR, err, "%s: %s", what, g_strerror(err));
    return false;
}

static bool vm_open_kvm(Vm *vm, GError **errp)
{
    int version;

    vm->kvm_fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (vm->kvm_fd < 0) {
        return vm_errno(errp, "cannot open /dev/kvm");
    }
    version = ioctl(vm->kvm_fd, KVM_GET_API_VERSION, 0);
    if (version != KVM_API_VERSION_EXPECTED) {
        g_set_error(errp, VMM_ERROR, ENOTSUP, "/dev/kvm: API version %d, expected %d", version,
                    KVM_API_VERSION_EXPECTED);
        return false;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(vm_required_caps); i++) {
        if (ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, vm_required_caps[i].cap) <= 0) {
            g_set_error(errp, VMM_ERROR, ENOTSUP, "/dev/kvm: missing capability KVM_CAP_%s",
                        vm_required_caps[i].name);
            return false;
        }
    }
    vm->tsc_deadline = ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_TSC_DEADLINE_TIMER) > 0;
    return true;
}

/* Retries with a bigger buffer on E2BIG, as the KVM API asks. */
static bool vm_get_supported_cpuid(Vm *vm, GError **errp)
{
    for (unsigned nent = 128; nent <= 4096; nent *= 2) {
        struct kvm_cpuid2 *c = g_malloc0(sizeof(*c) + nent * sizeof(struct kvm_cpuid_entry2));
        c->nent = nent;
        if (ioctl(vm->kvm_fd, KVM_GET_SUPPORTED_CPUID, c) == 0) {
            vm->supported_cpuid = c;
            return true;
        }
        g_free(c);
        if (errno != E2BIG) {
            return vm_errno(errp, "KVM_GET_SUPPORTED_CPUID");
        }
    }
    g_set_error(errp, VMM_ERROR, E2BIG, "KVM_GET_SUPPORTED_CPUID: too many entries");
    return false;
}

static bool vm_create_chips(Vm *vm, GError **errp)
{
    struct kvm_pit_config pit = {.flags = KVM_PIT_SPEAKER_DUMMY};

    /* TSS and identity map sit in the hole, clear of RAM and of the BAR window. */
    if (ioctl(vm->vm_fd, KVM_SET_TSS_ADDR, (unsigned long)VMM_TSS_ADDR) < 0) {
        return vm_errno(errp, "KVM_SET_TSS_ADDR");
    }
    uint64_t idmap = VMM_IDENTITY_MAP;
    if (ioctl(vm->vm_fd, KVM_SET_IDENTITY_MAP_ADDR, &idmap) < 0) {
        return vm_errno(errp, "KVM_SET_IDENTITY_MAP_ADDR");
    }
    if (ioctl(vm->vm_fd, KVM_CREATE_IRQCHIP, 0) < 0) {
        return vm_errno(errp, "KVM_CREATE_IRQCHIP");
    }
    /* SPEAKER_DUMMY keeps port 0x61 in the kernel. */
    if (ioctl(vm->vm_fd, KVM_CREATE_PIT2, &pit) < 0) {
        return vm_errno(errp, "KVM_CREATE_PIT2");
    }
    return true;
}

static bool vm_add_slot(Vm *vm, uint32_t slot, uint64_t gpa, uint64_t size, void *hva,
                        GError **errp)
{
    struct kvm_userspace_memory_region r = {
        .slot = slot,
        .guest_phys_addr = gpa,
        .memory_size = size,
        .userspace_addr = (uintptr_t)hva,
    };

    if (ioctl(vm->vm_fd, KVM_SET_USER_MEMORY_REGION, &r) < 0) {
        return vm_errno(errp, "KVM_SET_USER_MEMORY_REGION");
    }
    vm->regions[vm->nregions++] = (VmRamRegion){.gpa = gpa, .size = size, .hva = hva};
    return true;
}

/*
 * Anonymous memory, mapped once, split into two slots around the MMIO hole,
 * and offered to transparent huge pages as QEMU offers its RAM: with THP the
 * host (or an L1 hypervisor) maps the guest with 2 MiB pages in its nested
 * page tables, so a guest walks and faults through far fewer entries. (A
 * shared memfd, used before 2026-12-03, gets no THP under Debian's default
 * shmem_enabled=never; nothing used its fd.)
 */
static bool vm_create_ram(Vm *vm, GError **errp)
{
    uint64_t size = vm->cfg.ram_size;
    uint64_t low = MIN(size, VMM_MMIO_HOLE_START);

    const size_t align = 2u << 20;
    uint8_t *map, *ram;
    size_t head, tail;

    /*
     * 2 MiB aligned: KVM maps a slot with large pages only where the host
     * address and the guest address agree modulo 2 MiB (slot 0 starts at
     * guest 0), and anonymous mmap() is only page aligned before Linux 6.7.
     * Map the slack too, then give back what lies outside the aligned range.
     */
    map = mmap(NULL, size + align, PROT_READ | PROT_WRITE,
               MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (map == MAP_FAILED) {
        return vm_errno(errp, "guest RAM: mmap");
    }
    ram = (uint8_t *)(((uintptr_t)map + align - 1) & ~(uintptr_t)(align - 1));
    head = (size_t)(ram - map);
    tail = align - head;
    if (head) {
        munmap(map, head);
    }
    if (tail) {
        munmap(ram + size, tail);
    }
    vm->ram = ram;
    vm->ram_map_size = size;
    /* Best effort, as QEMU's: without THP (or with it off) the guest runs on 4 KiB pages. */
    (void)madvise(vm->ram, size, MADV_HUGEPAGE);
    if (!vm_add_slot(vm, 0, 0, low, vm->ram, errp)) {
        return false;
    }
    if (size > low &&
        !vm_add_slot(vm, 1, VMM_MMIO_HOLE_END, size - low, (uint8_t *)vm->ram + low, errp)) {
        return false;
    }
    return true;
}

static void vm_route_push(Vm *vm, struct kvm_irq_routing_entry e)
{
    if (vm->nroutes == vm->routes_cap) {
        vm->routes_cap = vm->routes_cap ? vm->routes_cap * 2 : 64;
        vm->routes = g_renew(struct kvm_irq_routing_entry, vm->routes, vm->routes_cap);
    }
    vm->routes[vm->nroutes++] = e;
}

/* KVM's own defaults: GSI 0-15 to IOAPIC pin n and PIC pin n%8, 16-23 to IOAPIC. */
static void vm_routes_init_default(Vm *vm)
{
    for (unsigned gsi = 0; gsi < VMM_IOAPIC_PINS; gsi++) {
        struct kvm_irq_routing_entry e = {.gsi = gsi, .type = KVM_IRQ_ROUTING_IRQCHIP};
        e.u.irqchip.irqchip = KVM_IRQCHIP_IOAPIC;
        e.u.irqchip.pin = gsi;
        vm_route_push(vm, e);
        if (gsi < 16) {
            e.u.irqchip.irqchip = gsi < 8 ? KVM_IRQCHIP_PIC_MASTER : KVM_IRQCHIP_PIC_SLAVE;
            e.u.irqchip.pin = gsi % 8;
            vm_route_push(vm, e);
        }
    }
}

/* Context: route_lock held */
static bool vm_routes_commit(Vm *vm, GError **errp)
{
    struct kvm_irq_routing *r =
        g_malloc0(sizeof(*r) + vm->nroutes * sizeof(struct kvm_irq_routing_entry));
    int ret;

    r->nr = vm->nroutes;
    memcpy(r->entries, vm->routes, vm->nroutes * sizeof(struct kvm_irq_routing_entry));
    ret = ioctl(vm->vm_fd, KVM_SET_GSI_ROUTING, r);
    g_free(r);
    return ret < 0 ? vm_errno(errp, "KVM_SET_GSI_ROUTING") : true;
}

/* Context: main thread */
Vm *vm_new(const VmConfig *cfg, GError **errp)
{
    Vm *vm = g_new0(Vm, 1);
    int max_gsi;

    vm->cfg = *cfg;
    vm->kvm_fd = vm->vm_fd = vm->exit_fd = -1;
    pthread_mutex_init(&vm->dev_lock, NULL);
    pthread_mutex_init(&vm->route_lock, NULL);
    pthread_mutex_init(&vm->run_lock, NULL);
    pthread_cond_init(&vm->run_cond, NULL);
    vm->pio = iobus_new("port I/O");
    vm->mmio = iobus_new("MMIO");

    if (cfg->ram_size < VMM_MIN_RAM || cfg->ram_size % 4096) {
        g_set_error(errp, VMM_ERROR, EINVAL,
                    "RAM size must be a multiple of 4 KiB and at least 2 MiB");
        goto fail;
    }
    if (cfg->ncpus < 1 || cfg->ncpus > VMM_MAX_VCPUS) {
        g_set_error(errp, VMM_ERROR, EINVAL, "%u vCPUs: must be between 1 and %d", cfg->ncpus,
                    VMM_MAX_VCPUS);
        goto fail;
    }
    vm->exit_fd = eventfd(0, EFD_CLOEXEC);
    if (vm->exit_fd < 0) {
        vm_errno(errp, "eventfd");
        goto fail;
    }
    if (!vm_open_kvm(vm, errp) || !vm_get_supported_cpuid(vm, errp)) {
        goto fail;
    }
    vm->vm_fd = ioctl(vm->kvm_fd, KVM_CREATE_VM, 0);
    if (vm->vm_fd < 0) {
        vm_errno(errp, "KVM_CREATE_VM");
        goto fail;
    }
    if (!vm_create_chips(vm, errp) || !vm_create_ram(vm, errp)) {
        goto fail;
    }
    max_gsi = ioctl(vm->vm_fd, KVM_CHECK_EXTENSION, KVM_CAP_IRQ_ROUTING);
    vm->gsi_limit = max_gsi > VMM_MSI_GSI_BASE ? (unsigned)max_gsi : 1024;
    vm->msi_gsi_used = g_new0(uint64_t, (vm->gsi_limit + 63) / 64);
    vm_routes_init_default(vm);
    return vm;

fail:
    vm_free(vm);
    return NULL;
}

/* Context: main thread */
void vm_free(Vm *vm)
{
    if (!vm) {
        return;
    }
    vcpu_stop_all(vm);
    vcpu_destroy_all(vm);
    if (vm->ram) {
        munmap(vm->ram, vm->ram_map_size);
    }
    if (vm->vm_fd >= 0) {
        close(vm->vm_fd);
    }
    if (vm->kvm_fd >= 0) {
        close(vm->kvm_fd);
    }
    if (vm->exit_fd >= 0) {
        close(vm->exit_fd);
    }
    iobus_free(vm->pio);
    iobus_free(vm->mmio);
    g_free(vm->routes);
    g_free(vm->msi_gsi_used);
    g_free(vm->supported_cpuid);
    pthread_mutex_destroy(&vm->dev_lock);
    pthread_mutex_destroy(&vm->route_lock);
    pthread_mutex_destroy(&vm->run_lock);
    pthread_cond_destroy(&vm->run_cond);
    g_free(vm);
}

/* Context: any thread */
int vm_fd(Vm *vm)
{
    return vm->vm_fd;
}


/* Context: any thread */
const VmRamRegion *vm_ram_regions(Vm *vm, size_t *n)
{
    *n = vm->nregions;
    return vm->regions;
}

/* Context: any thread */
void *vm_gpa_to_hva(Vm *vm, uint64_t gpa, uint64_t len)
{
    for (size_t i = 0; i < vm->nregions; i++) {
        const VmRamRegion *r = &vm->regions[i];
        if (gpa >= r->gpa && gpa - r->gpa <= r->size && len <= r->size - (gpa - r->gpa)) {
            return (uint8_t *)r->hva + (gpa - r->gpa);
        }
    }
    return NULL;
}

/* Context: any thread */
unsigned vm_ncpus(Vm *vm)
{
    return vm->cfg.ncpus;
}

/* Context: any thread */
void vm_lock(Vm *vm)
{
    pthread_mutex_lock(&vm->dev_lock);
    bql_note_held(true);
    atomic_store_explicit(&vm->dev_lock_holder, thread_self_id(), memory_order_relaxed);
}

/* Context: any thread */
void vm_unlock(Vm *vm)
{
    atomic_store_explicit(&vm->dev_lock_holder, 0, memory_order_relaxed);
    bql_note_held(false);
    pthread_mutex_unlock(&vm->dev_lock);
}

/* Context: any thread */
IoBus *vm_pio_bus(Vm *vm)
{
    return vm->pio;
}

/* Context: any thread */
IoBus *vm_mmio_bus(Vm *vm)
{
    return vm->mmio;
}

/* Context: any thread */
bool vm_set_irq_line(Vm *vm, unsigned gsi, bool level)
{
    struct kvm_irq_level irq = {.irq = gsi, .level = level};

    return ioctl(vm->vm_fd, KVM_IRQ_LINE, &irq) == 0;
}

static void vm_msi_entry(struct kvm_irq_routing_entry *e, int gsi, uint64_t addr, uint32_t data)
{
    *e = (struct kvm_irq_routing_entry){.gsi = gsi, .type = KVM_IRQ_ROUTING_MSI};
    e->u.msi.address_lo = (uint32_t)addr;
    e->u.msi.address_hi = (uint32_t)(addr >> 32);
    e->u.msi.data = data;
}

/* Context: device lock held */
int vm_msi_route_add(Vm *vm, uint64_t addr, uint32_t data, GError **errp)
{
    struct kvm_irq_routing_entry e;
    int gsi = -1;

    pthread_mutex_lock(&vm->route_lock);
    for (unsigned g = VMM_MSI_GSI_BASE; g < vm->gsi_limit; g++) {
        if (!(vm->msi_gsi_used[g / 64] & (1ULL << (g % 64)))) {
            gsi = g;
            break;
        }
    }
    if (gsi < 0) {
        g_set_error(errp, VMM_ERROR, ENOSPC, "no free GSI for an MSI route");
        goto out;
    }
    vm_msi_entry(&e, gsi, addr, data);
    vm_route_push(vm, e);
    if (!vm_routes_commit(vm, errp)) {
        vm->nroutes--;
        gsi = -1;
        goto out;
    }
    vm->msi_gsi_used[gsi / 64] |= 1ULL << (gsi % 64);
out:
    pthread_mutex_unlock(&vm->route_lock);
    return gsi;
}

/* Context: device lock held */
bool vm_msi_route_update(Vm *vm, int gsi, uint64_t addr, uint32_t data, GError **errp)
{
    bool ok = false;

    pthread_mutex_lock(&vm->route_lock);
    for (size_t i = 0; i < vm->nroutes; i++) {
        if (vm->routes[i].gsi == (uint32_t)gsi && vm->routes[i].type == KVM_IRQ_ROUTING_MSI) {
            struct kvm_irq_routing_entry old = vm->routes[i];
            vm_msi_entry(&vm->routes[i], gsi, addr, data);
            ok = vm_routes_commit(vm, errp);
            if (!ok) {
                vm->routes[i] = old;
            }
            goto out;
        }
    }
    g_set_error(errp, VMM_ERROR, EINVAL, "GSI %d is not an MSI route", gsi);
out:
    pthread_mutex_unlock(&vm->route_lock);
    return ok;
}

/* Context: device lock held */
void vm_msi_route_remove(Vm *vm, int gsi)
{
    pthread_mutex_lock(&vm->route_lock);
    for (size_t i = 0; i < vm->nroutes; i++) {
        if (vm->routes[i].gsi == (uint32_t)gsi && vm->routes[i].type == KVM_IRQ_ROUTING_MSI) {
            vm->routes[i] = vm->routes[--vm->nroutes];
            vm->msi_gsi_used[gsi / 64] &= ~(1ULL << (gsi % 64));
            vm_routes_commit(vm, NULL);
            break;
        }
    }
    pthread_mutex_unlock(&vm->route_lock);
}

/* Context: any thread */
bool vm_signal_msi(Vm *vm, uint64_t addr, uint32_t data)
{
    struct kvm_msi msi = {
        .address_lo = (uint32_t)addr, .address_hi = (uint32_t)(addr >> 32), .data = data};

    return ioctl(vm->vm_fd, KVM_SIGNAL_MSI, &msi) >= 0;
}

/* Context: any thread */
bool vm_irqfd_assign(Vm *vm, int fd, unsigned gsi, int resample_fd, GError **errp)
{
    struct kvm_irqfd irqfd = {.fd = fd, .gsi = gsi};

    if (resample_fd >= 0) {
        irqfd.flags = KVM_IRQFD_FLAG_RESAMPLE;
        irqfd.resamplefd = resample_fd;
    }
    return ioctl(vm->vm_fd, KVM_IRQFD, &irqfd) < 0 ? vm_errno(errp, "KVM_IRQFD") : true;
}

/* Context: any thread */
bool vm_irqfd_deassign(Vm *vm, int fd, unsigned gsi, GError **errp)
{
    struct kvm_irqfd irqfd = {.fd = fd, .gsi = gsi, .flags = KVM_IRQFD_FLAG_DEASSIGN};

    return ioctl(vm->vm_fd, KVM_IRQFD, &irqfd) < 0 ? vm_errno(errp, "KVM_IRQFD deassign") : true;
}

static bool vm_ioeventfd(Vm *vm, uint64_t addr, unsigned len, bool pio, int fd, bool del,
                         GError **errp)
{
    struct kvm_ioeventfd io = {.addr = addr, .len = len, .fd = fd};

    if (pio) {
        io.flags |= KVM_IOEVENTFD_FLAG_PIO;
    }
    if (del) {
        io.flags |= KVM_IOEVENTFD_FLAG_DEASSIGN;
    }
    if (ioctl(vm->vm_fd, KVM_IOEVENTFD, &io) < 0) {
        return vm_errno(errp, del ? "KVM_IOEVENTFD deassign" : "KVM_IOEVENTFD");
    }
    return true;
}

/* Context: any thread */
bool vm_ioeventfd_add(Vm *vm, uint64_t addr, unsigned len, bool pio, int fd, GError **errp)
{
    return vm_ioeventfd(vm, addr, len, pio, fd, false, errp);
}

/* Context: any thread */
bool vm_ioeventfd_del(Vm *vm, uint64_t addr, unsigned len, bool pio, int fd, GError **errp)
{
    return vm_ioeventfd(vm, addr, len, pio, fd, true, errp);
}

/* Context: any thread */
void vm_request_exit(Vm *vm, VmExitReason reason, const char *msg)
{
    int expected = VM_EXIT_NONE;
    uint64_t one = 1;

    if (reason == VM_EXIT_RESET || reason == VM_EXIT_TRIPLE_FAULT) {
        /* The vCPU that asked must not run on (after a triple fault it cannot). */
        if (vm->cfg.reset_in_place) {
            vm_request_reset(vm, VM_RESET_GUEST);
            return;
        }
        vm_reset_hold(vm, VM_RESET_GUEST);
    }
    if (!atomic_compare_exchange_strong(&vm->exit_reason, &expected, (int)reason)) {
        return;
    }
    if (msg) {
        error_report("%s", msg);
    } else if (reason == VM_EXIT_RESET) {
        /*
         * QEMU ends here without a word; vblk says why it ends, so that a
         * guest that rebooted (after a panic, say) is not taken for a clean
         * poweroff. A triple fault has its own message (vcpu.c).
         */
        info_report("the guest reset the machine; -no-reboot: vblk exits (QMP SHUTDOWN, reason "
                    "guest-reset)");
    }
    if (write(vm->exit_fd, &one, sizeof(one)) < 0) {
        /* Cannot happen for an eventfd below its limit; nothing better to do. */
    }
}

/* Context: main thread */
int vm_wait_exit(Vm *vm)
{
    uint64_t v;

    while (read(vm->exit_fd, &v, sizeof(v)) < 0 && errno == EINTR) {
    }
    return vm_exit_status(vm_exit_reason(vm));
}

/*
 * 0 for the ways a guest or a user ends a VM on purpose; 1 when vblk or KVM
 * cannot go on; 2 when the guest crashed into a triple fault (under -no-reboot;
 * without it the guest is reset and runs on). QEMU exits 0 on that last one.
 * Context: any thread
 */
int vm_exit_status(VmExitReason reason)
{
    switch (reason) {
    case VM_EXIT_ERROR:
        return 1;
    case VM_EXIT_TRIPLE_FAULT:
        return 2;
    default:
        return 0;
    }
}

/* Context: any thread */
void vm_cpu_state_format(GString *out, const char *prefix, const VmCpuState *s)
{
    g_string_append_printf(out,
                           "%sRIP=%016" G_GINT64_MODIFIER "x RSP=%016" G_GINT64_MODIFIER
                           "x RFLAGS=%08" G_GINT64_MODIFIER "x\n",
                           prefix, s->rip, s->rsp, s->rflags);
    g_string_append_printf(out,
                           "%sCR0=%08" G_GINT64_MODIFIER "x CR2=%016" G_GINT64_MODIFIER
                           "x CR3=%016" G_GINT64_MODIFIER "x CR4=%08" G_GINT64_MODIFIER
                           "x EFER=%08" G_GINT64_MODIFIER "x\n",
                           prefix, s->cr0, s->cr2, s->cr3, s->cr4, s->efer);
    g_string_append_printf(out,
                           "%sCS=%04x base=%016" G_GINT64_MODIFIER
                           "x limit=%08x type=%x dpl=%u p=%u l=%u db=%u "
                           "SS=%04x base=%016" G_GINT64_MODIFIER "x limit=%08x type=%x dpl=%u p=%u\n",
                           prefix, s->cs.selector, s->cs.base, s->cs.limit, s->cs.type, s->cs.dpl,
                           s->cs.present, s->cs.l, s->cs.db, s->ss.selector, s->ss.base,
                           s->ss.limit, s->ss.type, s->ss.dpl, s->ss.present);
    g_string_append_printf(out,
                           "%sRAX=%016" G_GINT64_MODIFIER "x RBX=%016" G_GINT64_MODIFIER
                           "x RCX=%016" G_GINT64_MODIFIER "x RDX=%016" G_GINT64_MODIFIER "x\n",
                           prefix, s->rax, s->rbx, s->rcx, s->rdx);
    g_string_append_printf(out,
                           "%sRSI=%016" G_GINT64_MODIFIER "x RDI=%016" G_GINT64_MODIFIER
                           "x RBP=%016" G_GINT64_MODIFIER "x\n",
                           prefix, s->rsi, s->rdi, s->rbp);
}

/* Context: any thread */
int vm_exit_fd(Vm *vm)
{
    return vm->exit_fd;
}

/* Context: any thread */
VmExitReason vm_exit_reason(Vm *vm)
{
    return (VmExitReason)atomic_load(&vm->exit_reason);
}

/* Context: any thread */
void vm_get_stats(Vm *vm, VmStats *stats)
{
    stats->exits_pio = atomic_load(&vm->exits_pio);
    stats->exits_mmio = atomic_load(&vm->exits_mmio);
    stats->unhandled_pio = atomic_load(&vm->unhandled_pio);
    stats->unhandled_mmio = atomic_load(&vm->unhandled_mmio);
}
