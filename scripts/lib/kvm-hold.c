/*
 * kvm-hold: keep one idle KVM VM open in the nested harness's L1 for the
 * whole run (scripts/nested builds it statically into L1's image and
 * /init starts it before the command).
 *
 * Why: L1's kernel flips static keys when the number of VMs (or of vCPUs
 * with a software-disabled LAPIC) goes between 0 and 1. kvm_create_vm()
 * increments preempt_notifier_key and kvm_destroy_vm() decrements it; a
 * new in-kernel LAPIC increments apic_sw_disabled until the guest enables
 * it. With one VM at a time, every L2 start and end rewrites those jump
 * sites (int3, new bytes, int3 removed, IPIs in between) while the other
 * L1 vCPU executes them, and under QEMU's multi-threaded TCG a vCPU has
 * been seen to run into an int3 the patcher no longer claims: L1 wedges in
 * __schedule (docs/reliability.md, "The L1 wedges have a name").
 *
 * Holding a VM with an in-kernel irqchip and one vCPU that never runs
 * keeps both counts at 1 or more, so a later VM only moves them 1->2->1
 * and the kernel never patches those sites again. It also keeps SVM
 * enabled on every L1 CPU (hardware_enable_all() runs for the first VM
 * only), another cross-CPU step taken at every L2 start and end otherwise.
 *
 * Usage: kvm-hold            prints "kvm-hold: holding vm" and sleeps
 *        kvm-hold --check    creates the VM and vCPU, prints the same, exits 0
 * Exit status 1 with a one-line message if /dev/kvm or an ioctl fails.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/kvm.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

static int fail(const char *what)
{
    fprintf(stderr, "kvm-hold: %s: %s\n", what, strerror(errno));
    return 1;
}

int main(int argc, char **argv)
{
    int check = argc > 1 && strcmp(argv[1], "--check") == 0;
    int kvm = open("/dev/kvm", O_RDWR | O_CLOEXEC);
    if (kvm < 0) {
        return fail("/dev/kvm");
    }
    int vm = ioctl(kvm, KVM_CREATE_VM, 0);
    if (vm < 0) {
        return fail("KVM_CREATE_VM");
    }
    if (ioctl(vm, KVM_CREATE_IRQCHIP, 0) < 0) {
        return fail("KVM_CREATE_IRQCHIP");
    }
    int vcpu = ioctl(vm, KVM_CREATE_VCPU, 0);
    if (vcpu < 0) {
        return fail("KVM_CREATE_VCPU");
    }
    printf("kvm-hold: holding vm (fd %d, vcpu fd %d)\n", vm, vcpu);
    fflush(stdout);
    if (check) {
        return 0;
    }
    /* SIGTERM or SIGKILL ends it; the kernel then destroys the VM. */
    for (;;) {
        pause();
    }
}
