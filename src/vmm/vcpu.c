/*
 * vblk: vCPUs: CPUID, MSRs, LAPIC and FPU setup, the 64-bit boot state, one
 * thread per vCPU looping on KVM_RUN, exit dispatch, pause and stop.
 */
#include <asm/processor-flags.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <unistd.h>

#include "util/debug-state.h"
#include "util/error-report.h"
#include "vmm/boot.h"
#include "vm-internal.h"

/* Kicks a vCPU thread out of KVM_RUN; the handler only has to exist. */
#define VCPU_KICK_SIGNAL SIGUSR1

#define MSR_IA32_TSC            0x10
#define MSR_IA32_SYSENTER_CS    0x174
#define MSR_IA32_SYSENTER_ESP   0x175
#define MSR_IA32_SYSENTER_EIP   0x176
#define MSR_IA32_MISC_ENABLE    0x1a0
#define MSR_MTRR_DEF_TYPE       0x2ff
#define MSR_STAR                0xc0000081
#define MSR_LSTAR               0xc0000082
#define MSR_CSTAR               0xc0000083
#define MSR_SYSCALL_MASK        0xc0000084
#define MSR_KERNEL_GS_BASE      0xc0000102
#define MISC_ENABLE_FAST_STRING 1
/* MTRRs enabled (bit 11), default type write-back (6). */
#define MTRR_DEF_TYPE_WB_ENABLED 0x806

#define APIC_LVT0        0x350
#define APIC_LVT1        0x360
#define APIC_MODE_NMI    4
#define APIC_MODE_EXTINT 7

static bool vcpu_errno(GError **errp, unsigned id, const char *what)
{
    int err = errno;

    g_set_error(errp, VMM_ERROR, err, "vCPU %u: %s: %s", id, what, g_strerror(err));
    return false;
}

static void vcpu_patch_cpuid(Vm *vm, struct kvm_cpuid2 *c, unsigned id)
{
    for (unsigned i = 0; i < c->nent; i++) {
        struct kvm_cpuid_entry2 *e = &c->entries[i];

        switch (e->function) {
        case 1:
            e->ebx = (e->ebx & 0x0000ffff) | (id << 24);
            if (vm->cfg.ncpus > 1) {
                e->ebx |= (MIN(vm->cfg.ncpus, 255u)) << 16;
                e->edx |= 1u << 28; /* HTT: the logical count in EBX is valid */
            }
            e->ecx |= 1u << 31; /* running under a hypervisor */
            if (vm->tsc_deadline) {
                e->ecx |= 1u << 24;
            }
            break;
        case 0xa:
            /* Only architectural PMU version 2 is described faithfully by KVM. */
            if ((e->eax & 0xff) != 2) {
                e->eax = 0;
            }
            break;
        case 0xb:
        case 0x1f:
            e->edx = id; /* x2APIC ID */
            break;
        case 0x40000001:
            /*
             * No asynchronous page faults (KVM_FEATURE_ASYNC_PF, _VMEXIT, _INT):
             * a storage VMM gains nothing from them, and in the nested harness
             * the guest died at entry_SYSCALL_64 with an exception taken right
             * after SYSCALL (suspected async #PF injection; QEMU offers
             * kvm-asyncpf=off for the same reason).
             */
            e->eax &= ~((1u << 4) | (1u << 10) | (1u << 14));
            break;
        default:
            break;
        }
    }
}

static bool vcpu_set_cpuid(Vcpu *vcpu, GError **errp)
{
    struct kvm_cpuid2 *src = vcpu->vm->supported_cpuid;
    size_t size = sizeof(*src) + src->nent * sizeof(struct kvm_cpuid_entry2);
    struct kvm_cpuid2 *c = g_memdup2(src, size);
    bool ok = true;

    vcpu_patch_cpuid(vcpu->vm, c, vcpu->id);
    if (ioctl(vcpu->fd, KVM_SET_CPUID2, c) < 0) {
        ok = vcpu_errno(errp, vcpu->id, "KVM_SET_CPUID2");
    }
    g_free(c);
    return ok;
}

/* After KVM_SET_CPUID2: KVM validates MSRs against the CPUID it was given. */
static bool vcpu_set_msrs(Vcpu *vcpu, GError **errp)
{
    static const struct {
        uint32_t index;
        uint64_t value;
    } boot_msrs[] = {
        {MSR_IA32_SYSENTER_CS, 0},
        {MSR_IA32_SYSENTER_ESP, 0},
        {MSR_IA32_SYSENTER_EIP, 0},
        {MSR_STAR, 0},
        {MSR_CSTAR, 0},
        {MSR_KERNEL_GS_BASE, 0},
        {MSR_SYSCALL_MASK, 0},
        {MSR_LSTAR, 0},
        {MSR_IA32_TSC, 0},
        {MSR_IA32_MISC_ENABLE, MISC_ENABLE_FAST_STRING},
        {MSR_MTRR_DEF_TYPE, MTRR_DEF_TYPE_WB_ENABLED},
    };
    size_t n = G_N_ELEMENTS(boot_msrs);
    struct kvm_msrs *m = g_malloc0(sizeof(*m) + n * sizeof(struct kvm_msr_entry));
    int ret;

    m->nmsrs = n;
    for (size_t i = 0; i < n; i++) {
        m->entries[i].index = boot_msrs[i].index;
        m->entries[i].data = boot_msrs[i].value;
    }
    ret = ioctl(vcpu->fd, KVM_SET_MSRS, m);
    g_free(m);
    if (ret < 0) {
        return vcpu_errno(errp, vcpu->id, "KVM_SET_MSRS");
    }
    if ((size_t)ret != n) {
        g_set_error(errp, VMM_ERROR, EIO, "vCPU %u: KVM refused MSR 0x%x", vcpu->id,
                    boot_msrs[ret].index);
        return false;
    }
    return true;
}

static void lapic_set_mode(struct kvm_lapic_state *s, unsigned reg, uint32_t mode)
{
    uint32_t v;

    memcpy(&v, &s->regs[reg], sizeof(v));
    v = (v & ~0x700u) | (mode << 8);
    memcpy(&s->regs[reg], &v, sizeof(v));
}

/* No BIOS sets LINT0/1, and without ExtINT on LINT0 the 8259 (PIT) never gets through. */
static bool vcpu_set_lint(Vcpu *vcpu, GError **errp)
{
    struct kvm_lapic_state s;

    if (ioctl(vcpu->fd, KVM_GET_LAPIC, &s) < 0) {
        return vcpu_errno(errp, vcpu->id, "KVM_GET_LAPIC");
    }
    lapic_set_mode(&s, APIC_LVT0, APIC_MODE_EXTINT);
    lapic_set_mode(&s, APIC_LVT1, APIC_MODE_NMI);
    if (ioctl(vcpu->fd, KVM_SET_LAPIC, &s) < 0) {
        return vcpu_errno(errp, vcpu->id, "KVM_SET_LAPIC");
    }
    return true;
}

static bool vcpu_set_fpu(Vcpu *vcpu, GError **errp)
{
    struct kvm_fpu fpu = {.fcw = 0x37f, .mxcsr = 0x1f80};

    if (ioctl(vcpu->fd, KVM_SET_FPU, &fpu) < 0) {
        return vcpu_errno(errp, vcpu->id, "KVM_SET_FPU");
    }
    return true;
}

static bool vcpu_init(Vm *vm, Vcpu *vcpu, unsigned id, int run_size, GError **errp)
{
    vcpu->vm = vm;
    vcpu->id = id;
    vcpu->fd = ioctl(vm->vm_fd, KVM_CREATE_VCPU, id);
    if (vcpu->fd < 0) {
        return vcpu_errno(errp, id, "KVM_CREATE_VCPU");
    }
    vcpu->run = mmap(NULL, run_size, PROT_READ | PROT_WRITE, MAP_SHARED, vcpu->fd, 0);
    if (vcpu->run == MAP_FAILED) {
        vcpu->run = NULL;
        return vcpu_errno(errp, id, "mmap kvm_run");
    }
    vcpu->run_size = run_size;
    /* What this vCPU looks like at power-on is what a reset restores. */
    return vcpu_set_cpuid(vcpu, errp) && vcpu_set_msrs(vcpu, errp) && vcpu_set_lint(vcpu, errp) &&
           vcpu_set_fpu(vcpu, errp) && vcpu_snapshot(vcpu, errp);
}

/* Context: any thread */
int vm_vcpu_thread_id(Vm *vm, unsigned index)
{
    return vm->vcpus && index < vm->nvcpus ? atomic_load(&vm->vcpus[index].tid) : 0;
}

/* Context: main thread */
bool vm_create_vcpus(Vm *vm, GError **errp)
{
    int run_size = ioctl(vm->kvm_fd, KVM_GET_VCPU_MMAP_SIZE, 0);

    if (run_size <= 0) {
        return vcpu_errno(errp, 0, "KVM_GET_VCPU_MMAP_SIZE");
    }
    if (!vm_snapshot_chips(vm, errp)) {
        return false;
    }
    vm->vcpus = g_new0(Vcpu, vm->cfg.ncpus);
    for (unsigned i = 0; i < vm->cfg.ncpus; i++) {
        vm->vcpus[i].fd = -1;
    }
    for (unsigned i = 0; i < vm->cfg.ncpus; i++) {
        vm->nvcpus = i + 1;
        if (!vcpu_init(vm, &vm->vcpus[i], i, run_size, errp)) {
            return false;
        }
    }
    return true;
}

static void vcpu_segment(struct kvm_segment *s, uint16_t sel, uint8_t type, bool code)
{
    *s = (struct kvm_segment){
        .base = 0,
        .limit = 0xffffffff,
        .selector = sel,
        .type = type,
        .present = 1,
        .s = 1,
        .g = 1,
        .l = code,  /* 64-bit code segment ... */
        .db = !code /* ... which must not also be 32-bit */
    };
}

/* Context: main thread */
bool vm_setup_boot_cpu(Vm *vm, uint64_t entry, uint64_t zero_page, GError **errp)
{
    Vcpu *bsp = &vm->vcpus[0];
    struct kvm_sregs sregs;
    struct kvm_regs regs = {.rip = entry, .rsi = zero_page, .rflags = 2};

    /* Start from KVM's reset state: a zeroed sregs has an unusable TR. */
    if (ioctl(bsp->fd, KVM_GET_SREGS, &sregs) < 0) {
        return vcpu_errno(errp, 0, "KVM_GET_SREGS");
    }
    vcpu_segment(&sregs.cs, BOOT_CS_SELECTOR, 11, true);
    vcpu_segment(&sregs.ds, BOOT_DS_SELECTOR, 3, false);
    sregs.es = sregs.fs = sregs.gs = sregs.ss = sregs.ds;
    sregs.gdt.base = BOOT_GDT_ADDR;
    sregs.gdt.limit = BOOT_GDT_ENTRIES * 8 - 1;
    sregs.cr3 = BOOT_PML4_ADDR;
    sregs.cr4 |= X86_CR4_PAE;
    sregs.cr0 |= X86_CR0_PE | X86_CR0_PG | X86_CR0_ET;
    sregs.efer |= 0x100 /* LME */ | 0x400 /* LMA */;
    if (ioctl(bsp->fd, KVM_SET_SREGS, &sregs) < 0) {
        return vcpu_errno(errp, 0, "KVM_SET_SREGS");
    }
    if (ioctl(bsp->fd, KVM_SET_REGS, &regs) < 0) {
        return vcpu_errno(errp, 0, "KVM_SET_REGS");
    }
    return true;
}

/* VBLK_DEBUG_UNHANDLED=1 logs the first few unclaimed accesses, to find what a guest probes. */
static void vcpu_log_unhandled(const char *space, uint64_t addr, unsigned size, bool write)
{
    static atomic_int logged;

    if (g_getenv("VBLK_DEBUG_UNHANDLED") && atomic_fetch_add(&logged, 1) < 64) {
        error_report("unhandled %s %s 0x%" G_GINT64_MODIFIER "x size %u", space,
                     write ? "write" : "read", addr, size);
    }
}

static void vcpu_handle_io(Vcpu *vcpu)
{
    struct kvm_run *run = vcpu->run;
    uint8_t *data = (uint8_t *)run + run->io.data_offset;
    unsigned size = run->io.size;
    Vm *vm = vcpu->vm;

    atomic_fetch_add(&vm->exits_pio, 1);
    vm_lock(vm);
    for (uint32_t i = 0; i < run->io.count; i++, data += size) {
        uint64_t val = 0;
        bool handled;

        if (run->io.direction == KVM_EXIT_IO_OUT) {
            memcpy(&val, data, size);
            handled = iobus_write(vm->pio, run->io.port, size, val);
        } else {
            handled = iobus_read(vm->pio, run->io.port, size, &val);
            memcpy(data, &val, size);
        }
        if (!handled) {
            atomic_fetch_add(&vm->unhandled_pio, 1);
            vcpu_log_unhandled("port", run->io.port, size, run->io.direction == KVM_EXIT_IO_OUT);
        }
    }
    vm_unlock(vm);
}

static void vcpu_handle_mmio(Vcpu *vcpu)
{
    struct kvm_run *run = vcpu->run;
    unsigned len = run->mmio.len;
    Vm *vm = vcpu->vm;
    uint64_t val = 0;
    bool handled;

    atomic_fetch_add(&vm->exits_mmio, 1);
    if (len == 0 || len > 8) {
        atomic_fetch_add(&vm->unhandled_mmio, 1);
        return;
    }
    vm_lock(vm);
    if (run->mmio.is_write) {
        memcpy(&val, run->mmio.data, len);
        handled = iobus_write(vm->mmio, run->mmio.phys_addr, len, val);
    } else {
        handled = iobus_read(vm->mmio, run->mmio.phys_addr, len, &val);
        memcpy(run->mmio.data, &val, len);
    }
    vm_unlock(vm);
    if (!handled) {
        atomic_fetch_add(&vm->unhandled_mmio, 1);
        vcpu_log_unhandled("MMIO", run->mmio.phys_addr, len, run->mmio.is_write);
    }
}

static void vcpu_fill_state(VmCpuState *s, const struct kvm_regs *r, const struct kvm_sregs *sr)
{
    *s = (VmCpuState){.rip = r->rip,
                      .rsp = r->rsp,
                      .rflags = r->rflags,
                      .rax = r->rax,
                      .rbx = r->rbx,
                      .rcx = r->rcx,
                      .rdx = r->rdx,
                      .rsi = r->rsi,
                      .rdi = r->rdi,
                      .rbp = r->rbp,
                      .cr0 = sr->cr0,
                      .cr2 = sr->cr2,
                      .cr3 = sr->cr3,
                      .cr4 = sr->cr4,
                      .efer = sr->efer};
    s->cs.selector = sr->cs.selector;
    s->cs.base = sr->cs.base;
    s->cs.limit = sr->cs.limit;
    s->cs.type = sr->cs.type;
    s->cs.dpl = sr->cs.dpl;
    s->cs.present = sr->cs.present;
    s->cs.l = sr->cs.l;
    s->cs.db = sr->cs.db;
    s->ss.selector = sr->ss.selector;
    s->ss.base = sr->ss.base;
    s->ss.limit = sr->ss.limit;
    s->ss.type = sr->ss.type;
    s->ss.dpl = sr->ss.dpl;
    s->ss.present = sr->ss.present;
    s->ss.l = sr->ss.l;
    s->ss.db = sr->ss.db;
}

/* Context: the vCPU's thread, or any thread while it is paused */
bool vm_get_vcpu_state(Vm *vm, unsigned id, VmCpuState *s, GError **errp)
{
    struct kvm_regs regs;
    struct kvm_sregs sregs;

    if (id >= vm->nvcpus) {
        g_set_error(errp, VMM_ERROR, EINVAL, "vCPU %u does not exist", id);
        return false;
    }
    if (ioctl(vm->vcpus[id].fd, KVM_GET_REGS, &regs) < 0) {
        return vcpu_errno(errp, id, "KVM_GET_REGS");
    }
    if (ioctl(vm->vcpus[id].fd, KVM_GET_SREGS, &sregs) < 0) {
        return vcpu_errno(errp, id, "KVM_GET_SREGS");
    }
    vcpu_fill_state(s, &regs, &sregs);
    return true;
}

/* The vCPU's registers on stderr, one error_report() line each, after a headline. */
static void vcpu_report_state(Vcpu *vcpu, bool after_shutdown)
{
    g_autoptr(GString) text = g_string_new(NULL);
    g_autofree char *prefix = g_strdup_printf("vCPU %u: ", vcpu->id);
    GError *err = NULL;
    VmCpuState st;
    char *line;

    if (!vm_get_vcpu_state(vcpu->vm, vcpu->id, &st, &err)) {
        error_report("%s", err->message);
        g_error_free(err);
        return;
    }
    if (after_shutdown && st.rip == 0xfff0 && st.cs.selector == 0xf000) {
        /* AMD SVM: the VMCB is undefined after a shutdown intercept, so KVM resets the vCPU. */
        error_report("vCPU %u: KVM reset this vCPU at the shutdown (it does on AMD SVM): the "
                     "registers below are the reset state, not the faulting one",
                     vcpu->id);
    }
    vm_cpu_state_format(text, prefix, &st);
    for (line = text->str; *line;) {
        char *nl = strchr(line, '\n');

        *nl = '\0';
        error_report("%s", line);
        line = nl + 1;
    }
}

/*
 * A vCPU cannot go on (internal error, failed entry, unexpected exit): the
 * reason and the registers on stderr, then vblk ends with status 1.
 */
static void vcpu_report_error(Vcpu *vcpu, const char *what, uint64_t code)
{
    struct kvm_run *run = vcpu->run;

    error_report("vCPU %u: %s (reason 0x%llx); vblk ends with status 1", vcpu->id, what,
                 (unsigned long long)code);
    if (run && run->exit_reason == KVM_EXIT_INTERNAL_ERROR) {
        g_autoptr(GString) data = g_string_new(NULL);
        unsigned n = MIN(run->internal.ndata, (uint32_t)G_N_ELEMENTS(run->internal.data));

        for (unsigned i = 0; i < n; i++) {
            g_string_append_printf(data, " 0x%llx", (unsigned long long)run->internal.data[i]);
        }
        error_report("vCPU %u: suberror %u, %u data words:%s", vcpu->id, run->internal.suberror, n,
                     data->str);
    }
    vcpu_report_state(vcpu, false);
    vm_request_exit(vcpu->vm, VM_EXIT_ERROR, NULL);
}

/*
 * Triple fault: the CPU shut down (KVM_EXIT_SHUTDOWN). A PC resets then, and
 * so does vblk (RESET, reason guest-reset, as QEMU), but never silently: a
 * guest that meant to reboot uses port 0x64 or 0xcf9, so this is a crash.
 */
static void vcpu_report_triple_fault(Vcpu *vcpu)
{
    error_report("vCPU %u: triple fault (KVM_EXIT_SHUTDOWN) after %" G_GUINT64_FORMAT " exits: %s",
                 vcpu->id, (guint64)atomic_load_explicit(&vcpu->exits, memory_order_relaxed),
                 vcpu->vm->cfg.reset_in_place
                     ? "the guest is reset (QMP RESET, reason guest-reset)"
                     : "-no-reboot: vblk ends with status 2 (QMP SHUTDOWN, reason guest-reset)");
    vcpu_report_state(vcpu, true);
}

/* Returns false when the vCPU must stop running. */
static bool vcpu_handle_exit(Vcpu *vcpu)
{
    struct kvm_run *run = vcpu->run;

    switch (run->exit_reason) {
    case KVM_EXIT_IO:
        vcpu_handle_io(vcpu);
        vcpu->exit_pending = true;
        return true;
    case KVM_EXIT_MMIO:
        vcpu_handle_mmio(vcpu);
        vcpu->exit_pending = true;
        return true;
    case KVM_EXIT_HLT:
    case KVM_EXIT_INTR:
    case KVM_EXIT_IRQ_WINDOW_OPEN:
        return true;
    case KVM_EXIT_SHUTDOWN:
        /* Triple fault: what a PC does on reset, and what reboot=t asks for. */
        vcpu_report_triple_fault(vcpu);
        vm_request_exit(vcpu->vm, VM_EXIT_TRIPLE_FAULT, NULL);
        return true; /* held out of KVM_RUN until the reset is done */
    case KVM_EXIT_SYSTEM_EVENT:
        if (run->system_event.type == KVM_SYSTEM_EVENT_CRASH) {
            vcpu_report_error(vcpu, "guest crash event", run->system_event.type);
        } else if (run->system_event.type == KVM_SYSTEM_EVENT_SHUTDOWN) {
            vm_request_exit(vcpu->vm, VM_EXIT_POWEROFF, NULL);
        } else {
            vm_request_exit(vcpu->vm, VM_EXIT_RESET, NULL);
            return true;
        }
        return false;
    case KVM_EXIT_FAIL_ENTRY:
        vcpu_report_error(vcpu, "KVM_EXIT_FAIL_ENTRY: hardware refused the vCPU state",
                          run->fail_entry.hardware_entry_failure_reason);
        return false;
    case KVM_EXIT_INTERNAL_ERROR:
        vcpu_report_error(vcpu,
                          run->internal.suberror == KVM_INTERNAL_ERROR_EMULATION
                              ? "KVM_EXIT_INTERNAL_ERROR: instruction emulation failed"
                              : "KVM_EXIT_INTERNAL_ERROR",
                          run->internal.suberror);
        return false;
    default:
        vcpu_report_error(vcpu, "unexpected KVM exit reason", run->exit_reason);
        return false;
    }
}

/*
 * KVM finishes an IO or MMIO exit (stores an MMIO or port read's value, steps
 * a string PIO, advances RIP) only on the next KVM_RUN. Before a vCPU parks
 * for a pause or a reset, enter once more with immediate_exit set: KVM
 * completes the instruction and returns -EINTR without running guest code
 * (the KVM API's recipe, as QEMU does). Otherwise the completion of an old
 * instruction would land on top of the state a reset restores, or be missing
 * from the state a stopped VM shows. The completion may need another exit
 * (an MMIO access split across pages); that one is handled and completed too.
 */
static void vcpu_complete_pending_exit(Vcpu *vcpu)
{
    _Atomic uint8_t *immediate_exit = (_Atomic uint8_t *)&vcpu->run->immediate_exit;

    while (vcpu->exit_pending) {
        vcpu->exit_pending = false;
        atomic_store(immediate_exit, 1);
        if (ioctl(vcpu->fd, KVM_RUN, 0) < 0) {
            if (errno != EINTR && errno != EAGAIN) {
                warn_report("vCPU %u: completing an I/O exit: %s", vcpu->id, g_strerror(errno));
            }
        } else if (!vcpu_handle_exit(vcpu)) {
            break; /* only IO/MMIO can come back before the immediate exit */
        }
        atomic_store(immediate_exit, 0);
    }
}

static void vcpu_set_state(Vcpu *vcpu, VcpuRunState st)
{
    atomic_store_explicit(&vcpu->state, (int)st, memory_order_relaxed);
    atomic_store_explicit(&vcpu->state_since_us, g_get_monotonic_time(), memory_order_relaxed);
}

/* The highest vector set in one of the LAPIC's 256-bit registers (ISR, IRR), or -1. */
static int lapic_top_vector(const struct kvm_lapic_state *lapic, unsigned base)
{
    for (int w = 7; w >= 0; w--) {
        uint32_t v;

        memcpy(&v, &lapic->regs[base + w * 0x10], sizeof(v));
        if (v) {
            return w * 32 + 31 - __builtin_clz(v);
        }
    }
    return -1;
}

/*
 * The rest of a sample, for a guest that stopped making progress: halted or
 * running, IF, what KVM still has to inject, the LAPIC's highest vector in
 * service and requested (an IRR bit behind an ISR bit whose EOI never came,
 * or an IRR bit that is never delivered, tell a lost interrupt from a
 * spinning guest), and the code bytes at RIP.
 */
static void vcpu_sample_more(Vcpu *vcpu, const struct kvm_regs *regs, char *buf, size_t size)
{
    static const char *const mp_names[] = {"runnable", "uninitialized", "init-received", "halted",
                                           "sipi-received"};
    struct kvm_mp_state mp = {0};
    struct kvm_vcpu_events ev = {0};
    struct kvm_lapic_state lapic;
    struct kvm_translation tr = {.linear_address = regs->rip};
    const uint8_t *code = NULL;
    size_t off;
    int isr = -2, irr = -2;
    unsigned tpr = 0;

    if (ioctl(vcpu->fd, KVM_GET_MP_STATE, &mp) < 0) {
        mp.mp_state = UINT32_MAX;
    }
    if (ioctl(vcpu->fd, KVM_GET_LAPIC, &lapic) == 0) {
        isr = lapic_top_vector(&lapic, 0x100);
        irr = lapic_top_vector(&lapic, 0x200);
        tpr = (uint8_t)lapic.regs[0x80];
    }
    if (ioctl(vcpu->fd, KVM_GET_VCPU_EVENTS, &ev) < 0) {
        memset(&ev, 0, sizeof(ev));
    }
    if (ioctl(vcpu->fd, KVM_TRANSLATE, &tr) == 0 && tr.valid) {
        code = vm_gpa_to_hva(vcpu->vm, tr.physical_address, 16);
    }
    off = (size_t)snprintf(
        buf, size,
        " mp_state=%s IF=%u intr_shadow=%u exception=%s%d interrupt=%s%d nmi=%u/%u lapic: ISR top "
        "%d, IRR top %d, TPR 0x%x; code at RIP:",
        mp.mp_state < G_N_ELEMENTS(mp_names) ? mp_names[mp.mp_state] : "?",
        (unsigned)(regs->rflags >> 9) & 1, ev.interrupt.shadow,
        ev.exception.injected  ? "injected "
        : ev.exception.pending ? "pending "
                               : "",
        ev.exception.injected || ev.exception.pending ? ev.exception.nr : -1,
        ev.interrupt.injected ? "injected " : "", ev.interrupt.injected ? ev.interrupt.nr : -1,
        ev.nmi.pending, ev.nmi.injected, isr, irr, tpr);
    for (unsigned i = 0; code && i < 16 && off < size; i++) {
        off += (size_t)snprintf(buf + off, size - off, " %02x", code[i]);
    }
    if (!code && off < size) {
        snprintf(buf + off, size - off, " (not mapped)");
    }
}

/* A debug-state dump asked for this vCPU's RIP: read it here, where KVM allows it. */
static void vcpu_answer_dump(Vcpu *vcpu)
{
    struct kvm_regs regs;

    if (!atomic_exchange(&vcpu->dump_req, false)) {
        return;
    }
    if (ioctl(vcpu->fd, KVM_GET_REGS, &regs) < 0) {
        regs.rip = regs.rsp = UINT64_MAX;
        vcpu->dump_more[0] = '\0';
    } else {
        vcpu_sample_more(vcpu, &regs, vcpu->dump_more, sizeof(vcpu->dump_more));
    }
    atomic_store_explicit(&vcpu->dump_rip, regs.rip, memory_order_relaxed);
    atomic_store_explicit(&vcpu->dump_rsp, regs.rsp, memory_order_relaxed);
    atomic_fetch_add_explicit(&vcpu->dump_seq, 1, memory_order_release);
}

/* Blocks while a pause or a reset is requested; returns false when the VM is stopping. */
static bool vcpu_wait_runnable(Vcpu *vcpu)
{
    Vm *vm = vcpu->vm;

    vcpu_answer_dump(vcpu);
    if (!atomic_load(&vm->pause_req) && !atomic_load(&vm->reset_req) && !atomic_load(&vm->stop)) {
        return true;
    }
    vcpu_complete_pending_exit(vcpu);
    pthread_mutex_lock(&vm->run_lock);
    vm->paused_count++;
    vcpu_set_state(vcpu, VCPU_ST_PAUSED);
    pthread_cond_broadcast(&vm->run_cond);
    while ((atomic_load(&vm->pause_req) || atomic_load(&vm->reset_req)) &&
           !atomic_load(&vm->stop)) {
        vcpu_answer_dump(vcpu);
        pthread_cond_wait(&vm->run_cond, &vm->run_lock);
    }
    vm->paused_count--;
    pthread_mutex_unlock(&vm->run_lock);
    return !atomic_load(&vm->stop);
}

static void *vcpu_thread(void *arg)
{
    Vcpu *vcpu = arg;
    Vm *vm = vcpu->vm;
    sigset_t set;
    char name[16];

    snprintf(name, sizeof(name), "vcpu%u", vcpu->id);
    pthread_setname_np(pthread_self(), name);
    atomic_store(&vcpu->tid, (int)gettid());
    sigemptyset(&set);
    sigaddset(&set, VCPU_KICK_SIGNAL);
    pthread_sigmask(SIG_UNBLOCK, &set, NULL);

    while (vcpu_wait_runnable(vcpu)) {
        int r;

        vcpu_set_state(vcpu, VCPU_ST_IN_KVM_RUN);
        r = ioctl(vcpu->fd, KVM_RUN, 0);
        vcpu_set_state(vcpu, VCPU_ST_EXIT);

        /* Any entry completes the previous IO/MMIO exit, even one kicked out at once. */
        vcpu->exit_pending = false;
        if (r < 0) {
            if (errno == EINTR || errno == EAGAIN) {
                /* Kicked: clear the flag, then re-check stop/pause at the loop top. */
                atomic_store((_Atomic uint8_t *)&vcpu->run->immediate_exit, 0);
                continue;
            }
            vcpu_report_error(vcpu, "KVM_RUN failed", errno);
            break;
        }
        atomic_store_explicit(&vcpu->last_exit, vcpu->run->exit_reason, memory_order_relaxed);
        atomic_fetch_add_explicit(&vcpu->exits, 1, memory_order_relaxed);
        if (!vcpu_handle_exit(vcpu)) {
            break;
        }
    }
    vcpu_set_state(vcpu, VCPU_ST_ENDED);
    /* A vCPU that has left the loop counts as paused for vm_pause(). */
    pthread_mutex_lock(&vm->run_lock);
    vm->exited_count++;
    pthread_cond_broadcast(&vm->run_cond);
    pthread_mutex_unlock(&vm->run_lock);
    return NULL;
}

static void vcpu_kick_handler(int sig)
{
}

static void vcpu_kick(Vcpu *vcpu)
{
    if (!vcpu->thread_started) {
        return;
    }
    atomic_store((_Atomic uint8_t *)&vcpu->run->immediate_exit, 1);
    pthread_kill(vcpu->thread, VCPU_KICK_SIGNAL);
}

static const char *vcpu_exit_name(unsigned reason)
{
    switch (reason) {
    case KVM_EXIT_IO:
        return "IO";
    case KVM_EXIT_MMIO:
        return "MMIO";
    case KVM_EXIT_HLT:
        return "HLT";
    case KVM_EXIT_INTR:
        return "INTR";
    case KVM_EXIT_IRQ_WINDOW_OPEN:
        return "IRQ_WINDOW_OPEN";
    case KVM_EXIT_SHUTDOWN:
        return "SHUTDOWN";
    case KVM_EXIT_SYSTEM_EVENT:
        return "SYSTEM_EVENT";
    case KVM_EXIT_FAIL_ENTRY:
        return "FAIL_ENTRY";
    case KVM_EXIT_INTERNAL_ERROR:
        return "INTERNAL_ERROR";
    default:
        return "other";
    }
}

static const char *const vcpu_state_names[] = {
    [VCPU_ST_NOT_STARTED] = "not started",
    [VCPU_ST_IN_KVM_RUN] = "in KVM_RUN",
    [VCPU_ST_EXIT] = "handling an exit",
    [VCPU_ST_PAUSED] = "paused",
    [VCPU_ST_ENDED] = "ended",
};

/* Kicks @vcpu and waits up to @wait_ms for its answer; false if it did not answer. */
static bool vcpu_sample(Vcpu *vcpu, unsigned wait_ms, uint64_t *rip, uint64_t *rsp, char *more,
                        size_t more_size)
{
    Vm *vm = vcpu->vm;
    unsigned seq = atomic_load_explicit(&vcpu->dump_seq, memory_order_acquire);
    gint64 deadline = g_get_monotonic_time() + (gint64)wait_ms * 1000;

    atomic_store(&vcpu->dump_req, true);
    vcpu_kick(vcpu); /* out of KVM_RUN */
    pthread_mutex_lock(&vm->run_lock);
    pthread_cond_broadcast(&vm->run_cond); /* a paused one answers in its wait loop */
    pthread_mutex_unlock(&vm->run_lock);
    while (atomic_load_explicit(&vcpu->dump_seq, memory_order_acquire) == seq) {
        if (g_get_monotonic_time() >= deadline) {
            atomic_store(&vcpu->dump_req, false);
            return false;
        }
        g_usleep(1000);
    }
    *rip = atomic_load_explicit(&vcpu->dump_rip, memory_order_relaxed);
    *rsp = atomic_load_explicit(&vcpu->dump_rsp, memory_order_relaxed);
    g_strlcpy(more, vcpu->dump_more, more_size);
    return true;
}

/* Context: any thread but a vCPU's */
void vm_debug_state(Vm *vm, GString *out, unsigned wait_ms)
{
    gint64 now = g_get_monotonic_time();
    unsigned holder = atomic_load_explicit(&vm->dev_lock_holder, memory_order_relaxed);

    g_string_append_printf(
        out,
        "vm: pause requested %d, reset requested %d, stopping %d, exit reason %d, "
        "BQL %s",
        atomic_load(&vm->pause_req), atomic_load(&vm->reset_req), atomic_load(&vm->stop),
        atomic_load(&vm->exit_reason), holder ? "held by thread " : "free");
    if (holder) {
        g_string_append_printf(out, "%u", holder);
    }
    g_string_append_c(out, '\n');
    for (unsigned i = 0; i < vm->nvcpus; i++) {
        Vcpu *vcpu = &vm->vcpus[i];
        int st = atomic_load_explicit(&vcpu->state, memory_order_relaxed);
        gint64 since = atomic_load_explicit(&vcpu->state_since_us, memory_order_relaxed);
        unsigned last = atomic_load_explicit(&vcpu->last_exit, memory_order_relaxed);
        uint64_t exits = atomic_load_explicit(&vcpu->exits, memory_order_relaxed);
        uint64_t rip = 0, rsp = 0;
        char more[sizeof(vcpu->dump_more)];
        bool live = st != VCPU_ST_NOT_STARTED && st != VCPU_ST_ENDED;

        g_string_append_printf(
            out, "vCPU %u: %s for %" G_GINT64_FORMAT " ms, %" G_GUINT64_FORMAT " exits", i,
            (unsigned)st < G_N_ELEMENTS(vcpu_state_names) ? vcpu_state_names[st] : "?",
            since ? (now - since) / 1000 : 0, exits);
        if (exits) {
            g_string_append_printf(out, ", last exit %s (%u)", vcpu_exit_name(last), last);
        }
        if (live && vcpu_sample(vcpu, wait_ms, &rip, &rsp, more, sizeof(more))) {
            g_string_append_printf(
                out, ", RIP=%016" G_GINT64_MODIFIER "x RSP=%016" G_GINT64_MODIFIER "x%s", rip, rsp,
                more);
        } else if (live) {
            g_string_append_printf(out,
                                   ", RIP unknown: did not leave vblk's exit handling "
                                   "within %u ms (waiting for the BQL?)",
                                   wait_ms);
        }
        g_string_append_c(out, '\n');
    }
}

static void vm_debug_state_fn(GString *out, void *opaque)
{
    vm_debug_state(opaque, out, 200);
}

/* Context: main thread */
bool vm_start(Vm *vm, bool paused, GError **errp)
{
    struct sigaction sa = {.sa_handler = vcpu_kick_handler};
    sigset_t set, old;

    sigemptyset(&sa.sa_mask);
    sigaction(VCPU_KICK_SIGNAL, &sa, NULL);
    atomic_store(&vm->pause_req, paused);
    /* Only vCPU threads take the kick signal; they unblock it themselves. */
    sigemptyset(&set);
    sigaddset(&set, VCPU_KICK_SIGNAL);
    pthread_sigmask(SIG_BLOCK, &set, &old);
    for (unsigned i = 0; i < vm->nvcpus; i++) {
        Vcpu *vcpu = &vm->vcpus[i];
        int err = pthread_create(&vcpu->thread, NULL, vcpu_thread, vcpu);
        if (err) {
            pthread_sigmask(SIG_SETMASK, &old, NULL);
            errno = err;
            return vcpu_errno(errp, i, "pthread_create");
        }
        vcpu->thread_started = true;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    debug_state_register(vm_debug_state_fn, vm);
    return true;
}

/* Context: main thread */
void vm_pause(Vm *vm)
{
    unsigned running = 0;

    atomic_store(&vm->pause_req, true);
    for (unsigned i = 0; i < vm->nvcpus; i++) {
        running += vm->vcpus[i].thread_started;
        vcpu_kick(&vm->vcpus[i]);
    }
    pthread_mutex_lock(&vm->run_lock);
    while (vm->paused_count + vm->exited_count < running && !atomic_load(&vm->stop)) {
        pthread_cond_wait(&vm->run_cond, &vm->run_lock);
    }
    pthread_mutex_unlock(&vm->run_lock);
}

/* Context: main thread */
void vm_resume(Vm *vm)
{
    pthread_mutex_lock(&vm->run_lock);
    atomic_store(&vm->pause_req, false);
    pthread_cond_broadcast(&vm->run_cond);
    pthread_mutex_unlock(&vm->run_lock);
}

/* Context: main thread */
bool vm_is_running(Vm *vm)
{
    return !atomic_load(&vm->pause_req) && !atomic_load(&vm->stop);
}

/* Context: main thread, vCPUs paused */
bool vm_get_vcpu_rip_rax(Vm *vm, unsigned id, uint64_t *rip, uint64_t *rax, GError **errp)
{
    struct kvm_regs regs;

    if (id >= vm->nvcpus || ioctl(vm->vcpus[id].fd, KVM_GET_REGS, &regs) < 0) {
        return vcpu_errno(errp, id, "KVM_GET_REGS");
    }
    *rip = regs.rip;
    *rax = regs.rax;
    return true;
}

/* Context: main thread (vm_free) */
void vcpu_stop_all(Vm *vm)
{
    debug_state_unregister(vm_debug_state_fn, vm); /* waits for a dump that samples the vCPUs */
    pthread_mutex_lock(&vm->run_lock);
    atomic_store(&vm->stop, true);
    pthread_cond_broadcast(&vm->run_cond);
    pthread_mutex_unlock(&vm->run_lock);
    for (unsigned i = 0; i < vm->nvcpus; i++) {
        vcpu_kick(&vm->vcpus[i]);
    }
    for (unsigned i = 0; i < vm->nvcpus; i++) {
        if (vm->vcpus[i].thread_started) {
            pthread_join(vm->vcpus[i].thread, NULL);
            vm->vcpus[i].thread_started = false;
        }
    }
}

/* Context: main thread (vm_free), after vcpu_stop_all */
void vcpu_destroy_all(Vm *vm)
{
    for (unsigned i = 0; i < vm->nvcpus; i++) {
        Vcpu *vcpu = &vm->vcpus[i];
        if (vcpu->run) {
            munmap(vcpu->run, vcpu->run_size);
        }
        if (vcpu->fd >= 0) {
            close(vcpu->fd);
        }
        vcpu_snapshot_free(vcpu);
    }
    g_free(vm->vcpus);
    vm->vcpus = NULL;
    vm->nvcpus = 0;
}
