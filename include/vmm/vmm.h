/*
 * vblk: the KVM virtual machine (guest RAM, irqchip, interrupt routing,
 * eventfds, vCPU threads).
 *
 * Guest physical layout (see docs/vmm.md):
 *   [0, min(ram, 3 GiB))         RAM, memory slot 0
 *   [3 GiB, 4 GiB)               MMIO hole: PCI BARs, IOAPIC, LAPIC, TSS
 *   [4 GiB, 4 GiB + ram - 3 GiB) RAM, memory slot 1 (only if ram > 3 GiB)
 * All RAM is one anonymous mapping, 2 MiB aligned and advised for THP.
 */
#ifndef VBLK_VMM_H
#define VBLK_VMM_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/iobus.h"

#define VMM_MMIO_HOLE_START 0xC0000000ULL /* 3 GiB */
#define VMM_MMIO_HOLE_END   0x100000000ULL
#define VMM_PCI_MMIO_START  0xE0000000ULL /* where BARs are pre-assigned */
#define VMM_PCI_MMIO_END    0xFEC00000ULL /* IOAPIC above */
#define VMM_PCI_PIO_START   0xC000u       /* where I/O BARs are pre-assigned (as SeaBIOS) */
#define VMM_PCI_PIO_END     0x10000u
#define VMM_IOAPIC_ADDR     0xFEC00000ULL
#define VMM_LAPIC_ADDR      0xFEE00000ULL
#define VMM_IDENTITY_MAP    0xFFFBC000ULL /* one page */
#define VMM_TSS_ADDR        0xFFFBD000ULL /* three pages */
#define VMM_MIN_RAM         (2ULL << 20)
#define VMM_MAX_VCPUS       128
/* GSIs 0..23 are the IOAPIC pins; MSI routes are allocated from here up. */
#define VMM_IOAPIC_PINS  24
#define VMM_MSI_GSI_BASE 24

/* One contiguous piece of guest RAM; same layout as GuestMemRegion. */
typedef struct VmRamRegion {
    uint64_t gpa;
    uint64_t size;
    void *hva;
} VmRamRegion;

/* GError domain for everything in src/vmm; codes are errno values (EINVAL: bad input, ENOSPC: does
 * not fit, ...). */
#define VMM_ERROR (vmm_error_quark())
/* Context: any thread */
GQuark vmm_error_quark(void);

typedef struct VmConfig {
    uint64_t ram_size; /* bytes, multiple of 4 KiB */
    unsigned ncpus;
    /*
     * A guest reset (VM_EXIT_RESET) becomes a reset request (vm_request_reset)
     * instead of an exit; false is QEMU's -no-reboot.
     */
    bool reset_in_place;
} VmConfig;

/* Why the VM stopped; the process exit status follows from it. */
typedef enum VmExitReason {
    VM_EXIT_NONE = 0,
    VM_EXIT_RESET,       /* port 0x64/0x92/0xcf9 reset, KVM_SYSTEM_EVENT_RESET: status 0 */
    VM_EXIT_POWEROFF,    /* KVM_SYSTEM_EVENT_SHUTDOWN, ACPI S5: status 0 */
    VM_EXIT_QUIT,        /* console escape or monitor: status 0 */
    VM_EXIT_ERROR,       /* internal error, failed entry: status 1 */
    VM_EXIT_TRIPLE_FAULT, /* a vCPU triple-faulted (KVM_EXIT_SHUTDOWN): a reset, status 2 */
} VmExitReason;

/* The process exit status vblk ends with for @reason (docs/vmm.md). Context: any thread */
int vm_exit_status(VmExitReason reason);

/* Who asked for an in-place reset. */
typedef enum VmResetCause {
    VM_RESET_NONE = 0,
    VM_RESET_GUEST, /* triple fault, port 0x64/0x92/0xcf9, KVM_SYSTEM_EVENT_RESET */
    VM_RESET_HOST,  /* QMP system_reset */
} VmResetCause;

typedef struct VmStats {
    uint64_t exits_pio;
    uint64_t exits_mmio;
    uint64_t unhandled_pio;
    uint64_t unhandled_mmio;
} VmStats;

/* What vblk shows of a vCPU when it reports a fault or an error. */
typedef struct VmCpuState {
    uint64_t rip, rsp, rflags;
    uint64_t rax, rbx, rcx, rdx, rsi, rdi, rbp;
    uint64_t cr0, cr2, cr3, cr4, efer;
    struct {
        uint16_t selector;
        uint64_t base;
        uint32_t limit;
        uint8_t type, dpl, present, l, db; /* attribute bits as KVM gives them */
    } cs, ss;
} VmCpuState;

/*
 * Appends the state as lines "<prefix>RIP=... RSP=... RFLAGS=...\n", the control
 * registers and EFER, CS/SS, then the general registers.
 * Context: any thread
 */
void vm_cpu_state_format(GString *out, const char *prefix, const VmCpuState *s);

typedef struct Vm Vm;

/* Context: main thread. Opens /dev/kvm, checks caps, creates irqchip/PIT/RAM (no vCPUs yet). */
Vm *vm_new(const VmConfig *cfg, GError **errp);
/* Context: main thread. Stops and joins vCPU threads, then releases everything. */
void vm_free(Vm *vm);

/* Context: any thread */
int vm_fd(Vm *vm);
/* Context: any thread. RAM regions in ascending gpa order. */
const VmRamRegion *vm_ram_regions(Vm *vm, size_t *n);
/* Context: any thread. Host pointer for [gpa, gpa + len) if it lies in one region, else NULL. */
void *vm_gpa_to_hva(Vm *vm, uint64_t gpa, uint64_t len);
/* Context: any thread */
unsigned vm_ncpus(Vm *vm);
/* Context: any thread. The host thread id of vCPU @index, 0 before its thread runs. */
int vm_vcpu_thread_id(Vm *vm, unsigned index);

/* The device lock: serialises all device emulation (like QEMU's BQL). */
/* Context: any thread */
void vm_lock(Vm *vm);
/* Context: any thread */
void vm_unlock(Vm *vm);
/* Context: any thread */
IoBus *vm_pio_bus(Vm *vm);
/* Context: any thread */
IoBus *vm_mmio_bus(Vm *vm);

/* Interrupts. */
/* Context: any thread. Drives an IOAPIC/PIC input (GSI 0..23). */
bool vm_set_irq_line(Vm *vm, unsigned gsi, bool level);
/* Context: device lock held. New MSI route; returns the GSI or -1 (errp set). */
int vm_msi_route_add(Vm *vm, uint64_t addr, uint32_t data, GError **errp);
/* Context: device lock held */
bool vm_msi_route_update(Vm *vm, int gsi, uint64_t addr, uint32_t data, GError **errp);
/* Context: device lock held */
void vm_msi_route_remove(Vm *vm, int gsi);
/* Context: any thread. One-shot MSI injection (KVM_SIGNAL_MSI). */
bool vm_signal_msi(Vm *vm, uint64_t addr, uint32_t data);
/* Context: any thread. @resample_fd = -1 for edge/MSI. */
bool vm_irqfd_assign(Vm *vm, int fd, unsigned gsi, int resample_fd, GError **errp);
/* Context: any thread */
bool vm_irqfd_deassign(Vm *vm, int fd, unsigned gsi, GError **errp);
/* Context: any thread. @len 0 = any length (MMIO fast path); @pio for port I/O. */
bool vm_ioeventfd_add(Vm *vm, uint64_t addr, unsigned len, bool pio, int fd, GError **errp);
/* Context: any thread */
bool vm_ioeventfd_del(Vm *vm, uint64_t addr, unsigned len, bool pio, int fd, GError **errp);

/* vCPUs. */
/* Context: main thread. Creates vCPU fds; sets CPUID, MSRs, LAPIC LINT0/1, FPU. */
bool vm_create_vcpus(Vm *vm, GError **errp);
/* Context: main thread. 64-bit boot state for the BSP (boot.h layout). */
bool vm_setup_boot_cpu(Vm *vm, uint64_t entry, uint64_t zero_page, GError **errp);
/* Context: main thread. Starts one thread per vCPU; they run unless @paused. */
bool vm_start(Vm *vm, bool paused, GError **errp);
/* Context: main thread (not a vCPU). Returns once every vCPU is out of KVM_RUN. */
void vm_pause(Vm *vm);
/* Context: main thread */
void vm_resume(Vm *vm);
/* Context: main thread */
bool vm_is_running(Vm *vm);

/*
 * Context: any thread. First request wins; @msg may be NULL. VM_EXIT_RESET holds
 * every vCPU out of KVM_RUN; with VmConfig.reset_in_place it only requests a reset.
 */
void vm_request_exit(Vm *vm, VmExitReason reason, const char *msg);
/*
 * Context: any thread. Holds the vCPUs out of KVM_RUN until vm_reset_done() and
 * makes the exit fd readable; the main thread then performs the reset.
 */
void vm_request_reset(Vm *vm, VmResetCause cause);
/* Context: any thread. The pending reset request, or VM_RESET_NONE. */
VmResetCause vm_reset_requested(Vm *vm);
/*
 * Context: main thread, every vCPU paused (vm_pause). Puts the in-kernel PIC,
 * IOAPIC and PIT and every vCPU (registers, LAPIC, MSRs, FPU/XSAVE, events,
 * MP state) back in the state they had right after vm_create_vcpus(); the BSP
 * then needs vm_setup_boot_cpu() again.
 */
bool vm_reset_cpus(Vm *vm, GError **errp);
/* Context: main thread. Clears the reset request and releases the vCPUs it held. */
void vm_reset_done(Vm *vm);
/* Context: main thread. Blocks until vm_request_exit; returns the process exit status. */
int vm_wait_exit(Vm *vm);
/* Context: any thread; the fd becomes readable once an exit or a reset was requested. */
int vm_exit_fd(Vm *vm);
/* Context: any thread */
VmExitReason vm_exit_reason(Vm *vm);
/* Context: any thread */
void vm_get_stats(Vm *vm, VmStats *stats);
/*
 * A vCPU's registers. Context: the vCPU's own thread, or any thread while that
 * vCPU is paused (KVM would wait for it to leave KVM_RUN).
 */
bool vm_get_vcpu_state(Vm *vm, unsigned id, VmCpuState *s, GError **errp);
/*
 * Lines describing the run control and each vCPU (state, time in it, exits,
 * last exit reason, RIP sampled by kicking it out of KVM_RUN, waiting at most
 * @wait_ms for each). Registered as a debug-state dumper by vm_start().
 * Context: any thread but a vCPU's
 */
void vm_debug_state(Vm *vm, GString *out, unsigned wait_ms);
/* A paused vCPU's RIP and RAX (tests, debugging). Context: main thread, vCPUs paused. */
bool vm_get_vcpu_rip_rax(Vm *vm, unsigned id, uint64_t *rip, uint64_t *rax, GError **errp);

#endif /* VBLK_VMM_H */
