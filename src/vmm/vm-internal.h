/*
 * vblk: the Vm structure, shared by kvm.c (VM-wide state) and vcpu.c (vCPU
 * threads). Nothing outside src/vmm sees it.
 */
#ifndef VBLK_VM_INTERNAL_H
#define VBLK_VM_INTERNAL_H

#include <linux/kvm.h>
#include <pthread.h>
#include <stdatomic.h>

#include "vmm/vmm.h"

typedef struct VcpuSnapshot VcpuSnapshot;

/* Where a vCPU thread is, for the debug-state dump (Vcpu.state). */
typedef enum VcpuRunState {
    VCPU_ST_NOT_STARTED = 0,
    VCPU_ST_IN_KVM_RUN, /* inside the KVM_RUN ioctl: the guest runs or halts */
    VCPU_ST_EXIT,       /* handling an exit in vblk (device emulation, maybe waiting for the BQL) */
    VCPU_ST_PAUSED,     /* parked: stop, -S, a reset in progress */
    VCPU_ST_ENDED,      /* left its loop (error, or the VM is being freed) */
} VcpuRunState;

typedef struct Vcpu {
    Vm *vm;
    unsigned id;
    int fd;
    struct kvm_run *run;
    size_t run_size;
    pthread_t thread;
    atomic_int tid; /* the thread's host id once it runs (query-cpus-fast) */
    bool thread_started;
    bool exit_pending;  /* vCPU thread: an IO/MMIO exit KVM completes on the next KVM_RUN */
    VcpuSnapshot *snap; /* power-on state, for resets (vm-reset.c) */

    /* Debug state: written by the vCPU thread, read by the dump (relaxed). */
    atomic_int state;              /* VcpuRunState */
    _Atomic int64_t state_since_us; /* g_get_monotonic_time() when it entered that state */
    atomic_uint last_exit;         /* kvm_run.exit_reason of the last exit */
    atomic_uint_fast64_t exits;
    /* A register sample on request: dump_req set, kicked; the thread answers with dump_seq. */
    atomic_bool dump_req;
    atomic_uint dump_seq;
    _Atomic uint64_t dump_rip;
    _Atomic uint64_t dump_rsp;
    /* What the guest is waiting for: run state, interrupt flag, pending events,
     * LAPIC vectors, the code at RIP (written before dump_seq is released). */
    char dump_more[320];
} Vcpu;

struct Vm {
    VmConfig cfg;
    int kvm_fd;
    int vm_fd;
    void *ram;
    size_t ram_map_size;
    VmRamRegion regions[2];
    size_t nregions;

    struct kvm_cpuid2 *supported_cpuid;
    bool tsc_deadline;

    pthread_mutex_t dev_lock;
    atomic_uint dev_lock_holder; /* thread id holding dev_lock (the BQL), 0: free */
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
