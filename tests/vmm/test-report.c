/*
 * Why vblk ends, without KVM: the exit status of each VM exit reason
 * (docs/vmm.md) and the register lines vblk prints for a triple fault or a
 * KVM internal error (vm_cpu_state_format).
 */
#include <glib.h>
#include <string.h>

#include "vmm/vmm.h"

static void test_exit_status(void)
{
    g_assert_cmpint(vm_exit_status(VM_EXIT_NONE), ==, 0);
    g_assert_cmpint(vm_exit_status(VM_EXIT_RESET), ==, 0);
    g_assert_cmpint(vm_exit_status(VM_EXIT_POWEROFF), ==, 0);
    g_assert_cmpint(vm_exit_status(VM_EXIT_QUIT), ==, 0);
    g_assert_cmpint(vm_exit_status(VM_EXIT_ERROR), ==, 1);
    g_assert_cmpint(vm_exit_status(VM_EXIT_TRIPLE_FAULT), ==, 2);
}

/* A 64-bit kernel's state as KVM reports it after a fault. */
static void test_cpu_state_format(void)
{
    VmCpuState s = {
        .rip = 0xffffffff81000123ULL,
        .rsp = 0xffffc90000013f58ULL,
        .rflags = 0x10046,
        .rax = 1,
        .rbx = 2,
        .rcx = 3,
        .rdx = 4,
        .rsi = 5,
        .rdi = 6,
        .rbp = 7,
        .cr0 = 0x80050033,
        .cr2 = 0xdead000,
        .cr3 = 0x10a000,
        .cr4 = 0x3506f0,
        .efer = 0xd01,
    };
    g_autoptr(GString) out = g_string_new("before\n");

    s.cs.selector = 0x10;
    s.cs.limit = 0xffffffff;
    s.cs.type = 0xb;
    s.cs.present = 1;
    s.cs.l = 1;
    s.ss.selector = 0x18;
    s.ss.limit = 0xffffffff;
    s.ss.type = 3;
    s.ss.present = 1;
    vm_cpu_state_format(out, "vCPU 1: ", &s);
    g_assert_cmpstr(out->str, ==,
                    "before\n"
                    "vCPU 1: RIP=ffffffff81000123 RSP=ffffc90000013f58 RFLAGS=00010046\n"
                    "vCPU 1: CR0=80050033 CR2=000000000dead000 CR3=000000000010a000 CR4=003506f0 "
                    "EFER=00000d01\n"
                    "vCPU 1: CS=0010 base=0000000000000000 limit=ffffffff type=b dpl=0 p=1 l=1 "
                    "db=0 SS=0018 base=0000000000000000 limit=ffffffff type=3 dpl=0 p=1\n"
                    "vCPU 1: RAX=0000000000000001 RBX=0000000000000002 RCX=0000000000000003 "
                    "RDX=0000000000000004\n"
                    "vCPU 1: RSI=0000000000000005 RDI=0000000000000006 RBP=0000000000000007\n");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vmm/report/exit-status", test_exit_status);
    g_test_add_func("/vmm/report/cpu-state-format", test_cpu_state_format);
    return g_test_run();
}
