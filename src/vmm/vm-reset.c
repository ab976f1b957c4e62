/*
 * vblk: machine reset for the KVM side. Right after creation (before any
 * vCPU runs) we save what KVM gives a fresh VM: the in-kernel PIC, IOAPIC
 * and PIT, and per vCPU its registers, segment state, LAPIC, every MSR KVM
 * lists for save/restore (plus the ones vcpu.c sets), FPU/XSAVE, XCRs,
 * debug registers, pending events and MP state. A reset writes all of it
 * back, which also switches off whatever the old guest enabled by MSR
 * (kvm-clock, steal time, async PF, PV EOI...) before the next kernel runs.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include "vm-internal.h"
#include "util/error-report.h"

#define MSR_KVM_WALL_CLOCK     0x11
#define MSR_KVM_WALL_CLOCK_NEW 0x4b564d00
#define MSR_IA32_TSC           0x10
#define MSR_MTRR_DEF           0x2ff
#define MSR_MISC_ENABLE        0x1a0
#define VCPU_MAX_MSRS          1024

struct VcpuSnapshot {
    struct kvm_regs regs;
    struct kvm_sregs sregs;
    struct kvm_lapic_state lapic;
    struct kvm_mp_state mp;
    struct kvm_vcpu_events events;
    struct kvm_debugregs dregs;
    struct kvm_fpu fpu;
    struct kvm_xsave *xsave; /* NULL without KVM_CAP_XSAVE */
    struct kvm_xcrs xcrs;
    bool have_xcrs;
    struct kvm_msrs *msrs;
};

static bool reset_errno(GError **errp, const char *who, unsigned id, const char *what)
{
    int err = errno;

    g_set_error(errp, VMM_ERROR, err, "%s %u: %s: %s", who, id, what, g_strerror(err));
    return false;
}

/* Context: main thread, before any vCPU runs */
bool vm_snapshot_chips(Vm *vm, GError **errp)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(vm->chips); i++) {
        vm->chips[i].chip_id = i; /* KVM_IRQCHIP_PIC_MASTER, _PIC_SLAVE, _IOAPIC */
        if (ioctl(vm->vm_fd, KVM_GET_IRQCHIP, &vm->chips[i]) < 0) {
            return reset_errno(errp, "irqchip", i, "KVM_GET_IRQCHIP");
        }
    }
    if (ioctl(vm->vm_fd, KVM_GET_PIT2, &vm->pit) < 0) {
        return reset_errno(errp, "PIT", 0, "KVM_GET_PIT2");
    }
    vm->chips_saved = true;
    return true;
}

/* KVM's save/restore list, then the MSRs vcpu.c sets that the list may lack. */
static GArray *vcpu_msr_candidates(Vm *vm)
{
    static const uint32_t extra[] = {MSR_MTRR_DEF, MSR_MISC_ENABLE, MSR_IA32_TSC};
    struct kvm_msr_list *list = g_malloc0(sizeof(*list) + VCPU_MAX_MSRS * sizeof(uint32_t));
    GArray *a = g_array_new(FALSE, FALSE, sizeof(uint32_t));

    list->nmsrs = VCPU_MAX_MSRS;
    if (ioctl(vm->kvm_fd, KVM_GET_MSR_INDEX_LIST, list) == 0) {
        for (uint32_t i = 0; i < list->nmsrs; i++) {
            /* Not state but a command: a write makes KVM store the wall clock at that GPA. */
            if (list->indices[i] != MSR_KVM_WALL_CLOCK &&
                list->indices[i] != MSR_KVM_WALL_CLOCK_NEW) {
                g_array_append_val(a, list->indices[i]);
            }
        }
    }
    for (size_t i = 0; i < G_N_ELEMENTS(extra); i++) {
        bool found = false;

        for (guint j = 0; j < a->len && !found; j++) {
            found = g_array_index(a, uint32_t, j) == extra[i];
        }
        if (!found) {
            g_array_append_val(a, extra[i]);
        }
    }
    g_free(list);
    return a;
}

/*
 * Runs KVM_GET_MSRS or KVM_SET_MSRS over @in; keeps in @out the entries KVM accepted
 * (KVM stops at the first one it refuses and returns how many it did).
 */
static void vcpu_msrs_filter(Vcpu *vcpu, unsigned long req, const struct kvm_msrs *in,
                             struct kvm_msrs *out)
{
    struct kvm_msrs *m = g_malloc0(sizeof(*m) + in->nmsrs * sizeof(struct kvm_msr_entry));
    uint32_t i = 0;

    out->nmsrs = 0;
    while (i < in->nmsrs) {
        int ret;

        m->nmsrs = in->nmsrs - i;
        memcpy(m->entries, &in->entries[i], m->nmsrs * sizeof(struct kvm_msr_entry));
        ret = ioctl(vcpu->fd, req, m);
        if (ret < 0) {
            ret = 0;
        }
        memcpy(&out->entries[out->nmsrs], m->entries, ret * sizeof(struct kvm_msr_entry));
        out->nmsrs += ret;
        i += (uint32_t)ret + 1; /* skip the refused one */
    }
    g_free(m);
}

/*
 * Reads every candidate KVM can read, then writes the values straight back (the
 * vCPU has not run: nothing changes) to drop the read-only ones, so that a reset
 * writes only what KVM takes.
 */
static struct kvm_msrs *vcpu_read_msrs(Vcpu *vcpu)
{
    g_autoptr(GArray) idx = vcpu_msr_candidates(vcpu->vm);
    size_t size = sizeof(struct kvm_msrs) + idx->len * sizeof(struct kvm_msr_entry);
    struct kvm_msrs *all = g_malloc0(size);
    struct kvm_msrs *readable = g_malloc0(size);
    struct kvm_msrs *m = g_malloc0(size);

    all->nmsrs = idx->len;
    for (guint j = 0; j < idx->len; j++) {
        all->entries[j] = (struct kvm_msr_entry){.index = g_array_index(idx, uint32_t, j)};
    }
    vcpu_msrs_filter(vcpu, KVM_GET_MSRS, all, readable);
    for (uint32_t j = 0; j < readable->nmsrs; j++) {
        /* A TSC write of 0 is KVM's "synchronize with the other vCPUs", as at creation. */
        if (readable->entries[j].index == MSR_IA32_TSC) {
            readable->entries[j].data = 0;
        }
    }
    vcpu_msrs_filter(vcpu, KVM_SET_MSRS, readable, m);
    g_free(all);
    g_free(readable);
    return m;
}

/* Context: main thread, right after vcpu_init(), before the vCPU runs */
bool vcpu_snapshot(Vcpu *vcpu, GError **errp)
{
    VcpuSnapshot *s = g_new0(VcpuSnapshot, 1);
    Vm *vm = vcpu->vm;

    vcpu->snap = s;
    if (ioctl(vcpu->fd, KVM_GET_REGS, &s->regs) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_GET_REGS");
    }
    if (ioctl(vcpu->fd, KVM_GET_SREGS, &s->sregs) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_GET_SREGS");
    }
    if (ioctl(vcpu->fd, KVM_GET_LAPIC, &s->lapic) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_GET_LAPIC");
    }
    if (ioctl(vcpu->fd, KVM_GET_MP_STATE, &s->mp) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_GET_MP_STATE");
    }
    if (ioctl(vcpu->fd, KVM_GET_VCPU_EVENTS, &s->events) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_GET_VCPU_EVENTS");
    }
    if (ioctl(vcpu->fd, KVM_GET_DEBUGREGS, &s->dregs) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_GET_DEBUGREGS");
    }
    if (ioctl(vcpu->fd, KVM_GET_FPU, &s->fpu) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_GET_FPU");
    }
    if (ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_XSAVE) > 0) {
        s->xsave = g_new0(struct kvm_xsave, 1);
        if (ioctl(vcpu->fd, KVM_GET_XSAVE, s->xsave) < 0) {
            return reset_errno(errp, "vCPU", vcpu->id, "KVM_GET_XSAVE");
        }
    }
    if (ioctl(vm->kvm_fd, KVM_CHECK_EXTENSION, KVM_CAP_XCRS) > 0) {
        if (ioctl(vcpu->fd, KVM_GET_XCRS, &s->xcrs) < 0) {
            return reset_errno(errp, "vCPU", vcpu->id, "KVM_GET_XCRS");
        }
        s->have_xcrs = true;
    }
    s->msrs = vcpu_read_msrs(vcpu);
    return true;
}

/* Context: main thread (teardown) */
void vcpu_snapshot_free(Vcpu *vcpu)
{
    if (vcpu->snap) {
        g_free(vcpu->snap->xsave);
        g_free(vcpu->snap->msrs);
        g_free(vcpu->snap);
        vcpu->snap = NULL;
    }
}

/* Writes the saved MSRs; one KVM refuses now (it took it at creation) is reported, not fatal. */
static void vcpu_restore_msrs(Vcpu *vcpu)
{
    struct kvm_msrs *s = vcpu->snap->msrs;
    struct kvm_msrs *done = g_malloc0(sizeof(*done) + s->nmsrs * sizeof(struct kvm_msr_entry));

    vcpu_msrs_filter(vcpu, KVM_SET_MSRS, s, done);
    if (done->nmsrs < s->nmsrs) {
        warn_report("reset: vCPU %u: KVM refused %u of %u MSRs (left as they were)", vcpu->id,
                    s->nmsrs - done->nmsrs, s->nmsrs);
    }
    g_free(done);
}

static bool vcpu_restore(Vcpu *vcpu, GError **errp)
{
    VcpuSnapshot *s = vcpu->snap;
    struct kvm_vcpu_events ev = s->events;

    /* Segment state and APIC base first: the LAPIC state is read in that mode. */
    if (ioctl(vcpu->fd, KVM_SET_SREGS, &s->sregs) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_SET_SREGS");
    }
    if (ioctl(vcpu->fd, KVM_SET_REGS, &s->regs) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_SET_REGS");
    }
    if (s->xsave ? ioctl(vcpu->fd, KVM_SET_XSAVE, s->xsave) < 0
                 : ioctl(vcpu->fd, KVM_SET_FPU, &s->fpu) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, s->xsave ? "KVM_SET_XSAVE" : "KVM_SET_FPU");
    }
    if (s->have_xcrs && ioctl(vcpu->fd, KVM_SET_XCRS, &s->xcrs) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_SET_XCRS");
    }
    vcpu_restore_msrs(vcpu);
    if (ioctl(vcpu->fd, KVM_SET_LAPIC, &s->lapic) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_SET_LAPIC");
    }
    /* BSP runnable, APs back to waiting for INIT/SIPI. */
    if (ioctl(vcpu->fd, KVM_SET_MP_STATE, &s->mp) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_SET_MP_STATE");
    }
    /* No pending exception, interrupt, NMI or latched INIT. */
    ev.flags &= KVM_VCPUEVENT_VALID_NMI_PENDING | KVM_VCPUEVENT_VALID_SIPI_VECTOR |
                KVM_VCPUEVENT_VALID_SHADOW | KVM_VCPUEVENT_VALID_SMM;
    if (ioctl(vcpu->fd, KVM_SET_VCPU_EVENTS, &ev) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_SET_VCPU_EVENTS");
    }
    if (ioctl(vcpu->fd, KVM_SET_DEBUGREGS, &s->dregs) < 0) {
        return reset_errno(errp, "vCPU", vcpu->id, "KVM_SET_DEBUGREGS");
    }
    return true;
}

/* Context: main thread, every vCPU paused */
bool vm_reset_cpus(Vm *vm, GError **errp)
{
    if (!vm->chips_saved) {
        g_set_error(errp, VMM_ERROR, ENOENT, "reset: no power-on state was saved");
        return false;
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(vm->chips); i++) {
        if (ioctl(vm->vm_fd, KVM_SET_IRQCHIP, &vm->chips[i]) < 0) {
            return reset_errno(errp, "irqchip", i, "KVM_SET_IRQCHIP");
        }
    }
    if (ioctl(vm->vm_fd, KVM_SET_PIT2, &vm->pit) < 0) {
        return reset_errno(errp, "PIT", 0, "KVM_SET_PIT2");
    }
    for (unsigned i = 0; i < vm->nvcpus; i++) {
        if (!vm->vcpus[i].snap) {
            g_set_error(errp, VMM_ERROR, ENOENT, "reset: vCPU %u has no saved state", i);
            return false;
        }
        if (!vcpu_restore(&vm->vcpus[i], errp)) {
            return false;
        }
    }
    return true;
}

/* Context: any thread */
void vm_reset_hold(Vm *vm, VmResetCause cause)
{
    int expected = VM_RESET_NONE;

    /* A host reset wins over a guest one still waiting: both end in the same reset. */
    if (!atomic_compare_exchange_strong(&vm->reset_req, &expected, (int)cause) &&
        cause == VM_RESET_HOST) {
        atomic_store(&vm->reset_req, (int)cause);
    }
}

/* Context: any thread */
void vm_request_reset(Vm *vm, VmResetCause cause)
{
    uint64_t one = 1;

    vm_reset_hold(vm, cause);
    if (write(vm->exit_fd, &one, sizeof(one)) < 0) {
        /* Cannot happen for an eventfd below its limit. */
    }
}

/* Context: any thread */
VmResetCause vm_reset_requested(Vm *vm)
{
    return (VmResetCause)atomic_load(&vm->reset_req);
}

/* Context: main thread */
void vm_reset_done(Vm *vm)
{
    pthread_mutex_lock(&vm->run_lock);
    atomic_store(&vm->reset_req, VM_RESET_NONE);
    pthread_cond_broadcast(&vm->run_cond);
    pthread_mutex_unlock(&vm->run_lock);
}
