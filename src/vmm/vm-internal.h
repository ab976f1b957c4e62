/*
 * vblk: the Vm structure, shared by kvm.c (VM-wide state) and vcpu.c (vCPU
 * threads). Nothing outside src/vmm sees it.
 */
#ifndef VBLK_VM_INTERNAL_H
#define VBLK_VM_INTERNAL_H

#include <linux/kvm.h>
#include <pthread.h>
#include <stdatomic.h>

#include "vblk/vmm.h"

typedef struct VcpuSnapshot VcpuSnapshot;

typedef struct Vcpu {
    Vm *vm;
    unsigned id;
    int fd;
    struct kvm_run *run;
    size_t run_size;
    pthread_t thread;
    bool thread_started;
    bool exit_pending;  /* vCPU thread: an IO/MMIO exit KVM completes on the next KVM_RUN */
    VcpuSnapshot *snap; /* power-on state, for resets (vm-reset.c) */
} Vcpu;

struct Vm {
    VmConfig cfg;
    int kvm_fd;
    int vm_fd;
    int ram_fd;
    void *ram;
    size_t ram_map_size;
    VmRamRegion regions[2];
    size_t nregions;

    struct kvm_cpuid2 *supported_cpuid;
    bool tsc_deadline;

    pthread_mutex_t dev_lock;
    IoBus *pio;
    IoBus *mmio;

    /* GSI routing: the whole table is resent on each change. */
    pthread_mutex_t route_lock;
    struct kvm_irq_routing_entry *routes;
    size_t nroutes;
    size_t routes_cap;
    uint64_t *msi_gsi_used; /* bitmap over GSIs >= VMM_MSI_GSI_BASE */
    unsigned gsi_limit;

    Vcpu *vcpus;
    unsigned nvcpus;

    /* Run control: vCPU threads wait on run_cond while paused. */
    pthread_mutex_t run_lock;
    pthread_cond_t run_cond;
    atomic_bool stop;
    atomic_bool pause_req;
    unsigned paused_count;
    unsigned exited_count;

    atomic_int reset_req; /* VmResetCause; vCPUs stay out of KVM_RUN while set */
    /* In-kernel PIC master/slave, IOAPIC and PIT as created (vm-reset.c). */
    struct kvm_irqchip chips[3];
    struct kvm_pit_state2 pit;
    bool chips_saved;

    int exit_fd; /* eventfd */
    atomic_int exit_reason;

    atomic_uint_fast64_t exits_pio;
    atomic_uint_fast64_t exits_mmio;
    atomic_uint_fast64_t unhandled_pio;
    atomic_uint_fast64_t unhandled_mmio;
};

/* vcpu.c */
void vcpu_stop_all(Vm *vm);
void vcpu_destroy_all(Vm *vm);
/* vm-reset.c: snapshots taken before any vCPU runs. */
bool vm_snapshot_chips(Vm *vm, GError **errp);
bool vcpu_snapshot(Vcpu *vcpu, GError **errp);
void vcpu_snapshot_free(Vcpu *vcpu);
/* Sets the reset request (vCPUs stay out of KVM_RUN) without waking the main thread. */
void vm_reset_hold(Vm *vm, VmResetCause cause);

#endif /* VBLK_VM_INTERNAL_H */
