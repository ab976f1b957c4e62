/*
 * Tiny-guest KVM tests: a few bytes of 64-bit code, entered through the same
 * boot state vblk gives Linux, write to the UART and reset through port 0x64.
 * Skipped (visibly) when /dev/kvm is not usable.
 */
#include <errno.h>
#include <fcntl.h>
#include <glib.h>
#include <glib-unix.h>
#include <glib/gstdio.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <signal.h>
#include <sys/wait.h>
#include <string.h>
#include <unistd.h>

#include "vmm/boot.h"
#include "vmm/console.h"
#include "vmm/ports.h"
#include "vmm/vmm.h"
#include "vblkproc.h"

/* Prints the NUL-terminated string that follows the code, then resets. */
static const uint8_t hello_code[] = {
    0x66, 0xba, 0xf8, 0x03,                   /* mov dx, 0x3f8 */
    0x48, 0x8d, 0x35, 0x0f, 0x00, 0x00, 0x00, /* lea rsi, [rip + 15] */
    0xac,                                     /* 1: lodsb */
    0x84, 0xc0,                               /* test al, al */
    0x74, 0x03,                               /* jz 2f */
    0xee,                                     /* out dx, al */
    0xeb, 0xf8,                               /* jmp 1b */
    0xb0, 0xfe,                               /* 2: mov al, 0xfe */
    0xe6, 0x64,                               /* out 0x64, al */
    0xf4,                                     /* 3: hlt */
    0xeb, 0xfd,                               /* jmp 3b */
};

/* Reads an unclaimed port and unclaimed MMIO, echoes both to the UART, resets. */
static const uint8_t probe_code[] = {
    0x66, 0xba, 0xf8, 0x02,                      /* mov dx, 0x2f8 (no UART there) */
    0xec,                                        /* in al, dx */
    0x66, 0xba, 0xf8, 0x03,                      /* mov dx, 0x3f8 */
    0xee,                                        /* out dx, al */
    0x48, 0xbb, 0,    0,    0, 0xd0, 0, 0, 0, 0, /* mov rbx, 0xd0000000 (hole) */
    0x8b, 0x03,                                  /* mov eax, [rbx] */
    0xee,                                        /* out dx, al */
    0xb0, 0xfe, 0xe6, 0x64,                      /* mov al, 0xfe; out 0x64, al */
    0xf4, 0xeb, 0xfd,                            /* hlt; jmp hlt */
};

typedef struct Guest {
    Vm *vm;
    Console *con;
    LegacyPorts *ports;
    int out[2];
} Guest;

static void guest_create(Guest *g, unsigned ncpus, const uint8_t *code, size_t len, const char *msg)
{
    VmConfig cfg = {.ram_size = 4 << 20, .ncpus = ncpus};
    GError *err = NULL;
    size_t n;
    const VmRamRegion *r;
    uint8_t *dst;

    g->vm = vm_new(&cfg, &err);
    g_assert_no_error(err);
    g_assert_true(g_unix_open_pipe(g->out, FD_CLOEXEC, NULL));
    g->con = console_new_fds(g->vm, -1, g->out[1], &err);
    g_assert_no_error(err);
    g->ports = legacy_ports_new(g->vm, &err);
    g_assert_no_error(err);
    r = vm_ram_regions(g->vm, &n);
    g_assert_cmpuint(n, ==, 1);
    g_assert_true(boot_setup_cpu_tables(r, n, &err));
    dst = vm_gpa_to_hva(g->vm, BOOT_KERNEL_ADDR, len + 64);
    memcpy(dst, code, len);
    if (msg) {
        memcpy(dst + len, msg, strlen(msg) + 1);
    }
    g_assert_true(vm_create_vcpus(g->vm, &err));
    g_assert_no_error(err);
    g_assert_true(vm_setup_boot_cpu(g->vm, BOOT_KERNEL_ADDR, BOOT_ZERO_PAGE, &err));
    g_assert_no_error(err);
}

static char *guest_finish(Guest *g)
{
    GString *s = g_string_new(NULL);
    char buf[256];
    ssize_t r;

    vm_pause(g->vm);
    console_free(g->con);
    legacy_ports_free(g->ports);
    vm_free(g->vm);
    close(g->out[1]);
    while ((r = read(g->out[0], buf, sizeof(buf))) > 0) {
        g_string_append_len(s, buf, r);
    }
    close(g->out[0]);
    return g_string_free(s, FALSE);
}

static void test_hello(void)
{
    Guest g;
    g_autofree char *out = NULL;
    GError *err = NULL;
    VmStats st;

    if (!vblkproc_kvm_usable()) {
        return;
    }
    guest_create(&g, 1, hello_code, sizeof(hello_code), "hello, vblk\n");
    g_assert_true(vm_start(g.vm, false, &err));
    g_assert_cmpint(vm_wait_exit(g.vm), ==, 0);
    g_assert_cmpint(vm_exit_reason(g.vm), ==, VM_EXIT_RESET);
    vm_get_stats(g.vm, &st);
    g_assert_cmpuint(st.exits_pio, ==, strlen("hello, vblk\n") + 1);
    g_assert_cmpuint(st.unhandled_pio, ==, 0);
    out = guest_finish(&g);
    g_assert_cmpstr(out, ==, "hello, vblk\n");
}

static void test_unhandled_accesses(void)
{
    Guest g;
    g_autofree char *out = NULL;
    VmStats st;

    if (!vblkproc_kvm_usable()) {
        return;
    }
    guest_create(&g, 1, probe_code, sizeof(probe_code), NULL);
    g_assert_true(vm_start(g.vm, false, NULL));
    g_assert_cmpint(vm_wait_exit(g.vm), ==, 0);
    vm_get_stats(g.vm, &st);
    g_assert_cmpuint(st.unhandled_pio, ==, 1);
    g_assert_cmpuint(st.unhandled_mmio, ==, 1);
    g_assert_cmpuint(st.exits_mmio, ==, 1);
    out = guest_finish(&g);
    g_assert_cmpmem(out, strlen(out), "\xff\xff", 2); /* all ones, and the VM lived on */
}

/* -S: nothing runs until resumed; a second vCPU waits for SIPI without trouble. */
static void test_paused_start_smp(void)
{
    Guest g;
    g_autofree char *out = NULL;
    char buf[8];

    if (!vblkproc_kvm_usable()) {
        return;
    }
    guest_create(&g, 2, hello_code, sizeof(hello_code), "smp\n");
    g_assert_true(vm_start(g.vm, true, NULL));
    g_usleep(50000);
    g_assert_false(vm_is_running(g.vm));
    g_assert_true(g_unix_set_fd_nonblocking(g.out[0], TRUE, NULL));
    g_assert_cmpint(read(g.out[0], buf, sizeof(buf)), ==, -1);
    g_assert_cmpint(errno, ==, EAGAIN);
    g_assert_true(g_unix_set_fd_nonblocking(g.out[0], FALSE, NULL));
    vm_resume(g.vm);
    g_assert_cmpint(vm_wait_exit(g.vm), ==, 0);
    out = guest_finish(&g);
    g_assert_cmpstr(out, ==, "smp\n");
}

/* Says 'B' once per boot, then reads unclaimed MMIO forever (an MMIO exit per loop). */
static const uint8_t mmio_loop_code[] = {
    0x66, 0xba, 0xf8, 0x03,                      /* mov dx, 0x3f8 */
    0x88, 0xe0,                                  /* mov al, ah (0 at power-on) */
    0xee,                                        /* out dx, al */
    0xb0, 'B',                                   /* mov al, 'B' */
    0xee,                                        /* out dx, al */
    0x48, 0xbb, 0,    0,    0, 0xd0, 0, 0, 0, 0, /* mov rbx, 0xd0000000 (hole) */
    0x8b, 0x03,                                  /* 1: mov eax, [rbx] */
    0xeb, 0xfc,                                  /* jmp 1b */
};

/* Same with a string PIO: rep insb from an unclaimed port. */
static const uint8_t pio_loop_code[] = {
    0x66, 0xba, 0xf8, 0x03,                   /* mov dx, 0x3f8 */
    0x88, 0xe0,                               /* mov al, ah (0 at power-on) */
    0xee,                                     /* out dx, al */
    0xb0, 'B',                                /* mov al, 'B' */
    0xee,                                     /* out dx, al */
    0x66, 0xba, 0xf8, 0x02,                   /* mov dx, 0x2f8 (no UART there) */
    0x48, 0xc7, 0xc7, 0x00, 0x00, 0x20, 0x00, /* 1: mov rdi, 0x200000 */
    0xb9, 0x04, 0,    0,    0,                /* mov ecx, 4 */
    0xf3, 0x6c,                               /* rep insb */
    0xeb, 0xf0,                               /* jmp 1b */
};

/*
 * Resets while the vCPU keeps taking MMIO or string-PIO exits: KVM completes such
 * an exit (value into EAX or memory, RIP past the instruction) only on the next
 * KVM_RUN; a vCPU parked straight from its exit handler could have that completion
 * applied on top of the restored power-on state. Each reset waits until the guest
 * is in its loop, then lands at a varying moment; every boot must start at the
 * entry with AH = 0 and print 'B'. (The 6.18 host kernel this was written on
 * dropped the stale completion itself, so this passed without the fix too; the
 * deterministic check is /vmm/kvm/pause-completes-mmio.)
 */
static void test_reset_io_pending(gconstpointer code)
{
    enum { RESETS = 300 };
    Guest g;
    g_autofree char *out = NULL;
    GError *err = NULL;
    uint64_t base = 0;

    if (!vblkproc_kvm_usable()) {
        return;
    }
    guest_create(&g, 1, code,
                 code == mmio_loop_code ? sizeof(mmio_loop_code) : sizeof(pio_loop_code), NULL);
    g_assert_true(vm_start(g.vm, false, &err));
    for (unsigned i = 0; i <= RESETS; i++) {
        gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
        VmStats st;

        /* This boot is in its loop (it said 'B' first). */
        do {
            g_assert_cmpint(g_get_monotonic_time(), <, deadline);
            g_usleep(20);
            vm_get_stats(g.vm, &st);
        } while (st.exits_mmio + st.exits_pio < base + 4);
        if (i == RESETS) {
            break;
        }
        g_usleep(g_random_int_range(0, 50));
        vm_pause(g.vm);
        vm_get_stats(g.vm, &st);
        base = st.exits_mmio + st.exits_pio;
        g_assert_true(vm_reset_cpus(g.vm, &err));
        g_assert_no_error(err);
        g_assert_true(vm_setup_boot_cpu(g.vm, BOOT_KERNEL_ADDR, BOOT_ZERO_PAGE, &err));
        vm_reset_done(g.vm);
        vm_resume(g.vm);
    }
    out = guest_finish(&g);
    /* Each boot: AH as at power-on (0), then 'B'. */
    for (unsigned i = 0; i <= RESETS; i++) {
        g_assert_cmpint(out[2 * i], ==, 0);
        g_assert_cmpint(out[2 * i + 1], ==, 'B');
    }
    g_assert_cmpint(out[2 * RESETS + 2], ==, 0);
}

/* One MMIO read, then halt (IF clear: forever). */
static const uint8_t mmio_once_code[] = {
    0x48, 0xbb, 0, 0, 0, 0xd0, 0, 0, 0, 0, /* mov rbx, 0xd0000000 (hole) */
    0x8b, 0x03,                            /* mov eax, [rbx] */
    0xf4,                                  /* 1: hlt */
    0xeb, 0xfd,                            /* jmp 1b */
};

static gpointer pause_thread(gpointer vm)
{
    vm_pause(vm);
    return NULL;
}

/*
 * A pause that lands while the vCPU handles an MMIO read (it waits for the device
 * lock the test holds): the vCPU completes the read in KVM before it parks, so the
 * paused state has the value in EAX and RIP past the instruction (what a reset
 * overwrites, or `stop` shows), and nothing is left for a later KVM_RUN to apply.
 */
static void test_pause_completes_mmio(void)
{
    Guest g;
    GThread *th;
    GError *err = NULL;
    gint64 deadline = g_get_monotonic_time() + 5 * G_USEC_PER_SEC;
    uint64_t rip, rax;
    VmStats st;

    if (!vblkproc_kvm_usable()) {
        return;
    }
    guest_create(&g, 1, mmio_once_code, sizeof(mmio_once_code), NULL);
    vm_lock(g.vm);
    g_assert_true(vm_start(g.vm, false, &err));
    do {
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        g_usleep(100);
        vm_get_stats(g.vm, &st);
    } while (st.exits_mmio < 1); /* the vCPU now waits for the lock in its MMIO exit */
    th = g_thread_new("pause", pause_thread, g.vm);
    while (vm_is_running(g.vm)) {
        g_assert_cmpint(g_get_monotonic_time(), <, deadline);
        g_usleep(100);
    }
    vm_unlock(g.vm);
    g_thread_join(th);
    g_assert_true(vm_get_vcpu_rip_rax(g.vm, 0, &rip, &rax, &err));
    g_assert_no_error(err);
    g_assert_cmphex(rip, ==, BOOT_KERNEL_ADDR + 12);
    g_assert_cmphex(rax, ==, 0xffffffff);
    g_free(guest_finish(&g));
}

static const uint8_t halt_code[] = {0xf4, 0xeb, 0xfd}; /* hlt; jmp hlt (IF clear: forever) */
static const uint8_t trap_code[] = {0xcc, 0xf4};       /* int3 with no IDT: triple fault */

static int run_vblk(const char *args, char **out, char **err)
{
    const char *bin = g_getenv("VBLK_BIN");
    g_autofree char *cmd = g_strdup_printf("%s %s", bin, args);
    g_auto(GStrv) argv = NULL;
    int status = -1;

    g_assert_true(g_shell_parse_argv(cmd, NULL, &argv, NULL));
    g_assert_true(g_spawn_sync(NULL, argv, NULL, G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL, out, err,
                               &status, NULL));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static int run_sh(const char *args)
{
    g_autofree char *cmd = g_strdup_printf("sh %s", args);
    g_auto(GStrv) argv = NULL;
    int status = -1;

    g_assert_true(g_shell_parse_argv(cmd, NULL, &argv, NULL));
    g_assert_true(
        g_spawn_sync(NULL, argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, NULL, NULL, &status, NULL));
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_cli(void)
{
    g_autofree char *dir = g_dir_make_tmp("vblk-kvm-XXXXXX", NULL);
    g_autofree char *kernel =
        vblkproc_bzimage(dir, "tiny", hello_code, sizeof(hello_code), "Hello from tiny guest\n");
    g_autofree char *halt = vblkproc_bzimage(dir, "halt", halt_code, sizeof(halt_code), "");
    g_autofree char *trap = vblkproc_bzimage(dir, "trap", trap_code, sizeof(trap_code), "");
    int status;
    g_autofree char *log = g_build_filename(dir, "serial.log", NULL);
    g_autofree char *args = NULL;
    g_autofree char *logged = NULL;
    char *out, *err;

    if (!g_getenv("VBLK_BIN")) {
        g_test_skip("VBLK_BIN not set");
        vblkproc_remove_dir(dir);
        return;
    }
    /* Bad command lines never need KVM. */
    g_assert_cmpint(run_vblk("-m 64 -bogus", &out, &err), ==, 1);
    g_assert_cmpstr(err, ==, "vblk: -bogus: invalid or unsupported option (see --help)\n");
    g_free(out);
    g_free(err);
    if (!vblkproc_kvm_usable()) {
        vblkproc_remove_dir(dir);
        return;
    }
    args = g_strdup_printf("-m 32 -smp 2 -kernel %s -nographic -no-reboot -append 'console=ttyS0'",
                           kernel);
    g_assert_cmpint(run_vblk(args, &out, &err), ==, 0);
    g_assert_cmpstr(out, ==, "Hello from tiny guest\n");
    g_free(out);
    g_free(err);
    g_free(args);
    args =
        g_strdup_printf("-m 32M -kernel %s -serial file:%s -display none -no-reboot", kernel, log);
    g_assert_cmpint(run_vblk(args, &out, &err), ==, 0);
    g_assert_cmpstr(out, ==, "");
    g_assert_true(g_file_get_contents(log, &logged, NULL, NULL));
    g_assert_cmpstr(logged, ==, "Hello from tiny guest\n");
    g_free(out);
    g_free(err);
    g_free(args);
    /* A kernel that needs more RAM than given: one line, status 1. */
    args = g_strdup_printf("-m 8 -kernel %s -nographic", kernel);
    g_assert_cmpint(run_vblk(args, &out, &err), ==, 1);
    g_assert_nonnull(strstr(err, "-m: "));
    g_free(out);
    g_free(err);
    g_free(args);
    /*
     * A guest that faults with no IDT: a triple fault, reported with the registers
     * and status 2 under -no-reboot; or, where KVM emulates CPL0 code (kvm-pvm), an
     * emulation failure: status 1, the KVM_EXIT line and the registers.
     */
    args = g_strdup_printf("-m 32 -kernel %s -nographic -no-reboot", trap);
    status = run_vblk(args, &out, &err);
    if (status == 2) {
        g_assert_nonnull(strstr(err, "vblk: vCPU 0: triple fault (KVM_EXIT_SHUTDOWN) after "));
        g_assert_nonnull(strstr(err, " exits: -no-reboot: vblk ends with status 2"));
    } else {
        g_assert_cmpint(status, ==, 1);
        g_assert_nonnull(strstr(err, "KVM_EXIT_"));
    }
    g_assert_nonnull(strstr(err, "vblk: vCPU 0: RIP="));
    g_assert_nonnull(strstr(err, "vblk: vCPU 0: CR0="));
    g_assert_nonnull(strstr(err, " EFER="));
    g_assert_nonnull(strstr(err, "vblk: vCPU 0: CS="));
    g_free(out);
    g_free(err);
    g_free(args);
    /* A guest that never ends: the console escape C-a x quits with status 0. */
    args = g_strdup_printf("-c \"printf 'ab\\001x' | %s -m 32 -kernel %s -nographic\"",
                           g_getenv("VBLK_BIN"), halt);
    g_assert_cmpint(run_sh(args), ==, 0);
    g_free(args);
    /*
     * -nographic's console/monitor mux: C-a c gives the monitor the focus (banner
     * and prompt), a command runs, C-a c gives the console back, C-a x quits.
     */
    args = g_strdup_printf("-c \"(printf '\\001c'; sleep 1; printf 'info status\\r'; sleep 1; "
                           "printf '\\001cx\\001x') | %s -m 32 -kernel %s -nographic "
                           ">%s/mux.out\"",
                           g_getenv("VBLK_BIN"), halt, dir);
    g_assert_cmpint(run_sh(args), ==, 0);
    {
        g_autofree char *mux_path = g_build_filename(dir, "mux.out", NULL);
        g_autofree char *mux = NULL;

        g_assert_true(g_file_get_contents(mux_path, &mux, NULL, NULL));
        g_assert_nonnull(strstr(mux, "QEMU 7.2.0 monitor - type 'help' for more information\r\n"
                                     "(qemu) info status\r\nVM status: running\r\n(qemu) "));
    }
    vblkproc_remove_dir(dir);
}

/* -S plus -qmp: prelaunch until "cont", then the guest runs and its reset ends vblk. */
static void test_qmp_cont(void)
{
    VblkProc p;
    g_autofree char *kernel = NULL, *serial = NULL, *out = NULL, *logged = NULL;

    if (!vblkproc_usable()) {
        return;
    }
    vblkproc_init(&p, "vblk-qmp-XXXXXX");
    kernel = vblkproc_bzimage(p.dir, "tiny", hello_code, sizeof(hello_code), "qmp says go\n");
    serial = g_strdup_printf("file:%s", p.log);
    vblkproc_start(&p, false, "-m", "32", "-kernel", kernel, "-S", "-serial", serial, "-no-reboot",
                   NULL);
    vblkproc_send(&p, "query-status");
    out = vblkproc_wait(&p, "return");
    g_assert_nonnull(strstr(out, "prelaunch"));
    g_free(out);
    vblkproc_send(&p, "cont");
    out = vblkproc_wait(&p, "guest-reset");
    g_assert_nonnull(strstr(out, "RESUME"));
    g_assert_nonnull(strstr(out, "\"SHUTDOWN\""));
    vblkproc_end(&p, &logged);
    g_assert_cmpstr(logged, ==, "qmp says go\n");
}

/* Reads @fd into @acc until @needle; returns what came before and including it. */
static char *hmp_until(int fd, GString *acc, const char *needle)
{
    char buf[512];

    for (;;) {
        char *hit = strstr(acc->str, needle);

        if (hit) {
            gsize len = hit + strlen(needle) - acc->str;
            char *out = g_strndup(acc->str, len);

            g_string_erase(acc, 0, len);
            return out;
        }
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        g_assert_cmpint(poll(&pfd, 1, 10000), ==, 1);
        ssize_t r = read(fd, buf, sizeof(buf));
        if (r <= 0) {
            g_error("HMP closed before \"%s\"; got: %s", needle, acc->str);
        }
        g_string_append_len(acc, buf, r);
    }
}

/* Sends @line and returns its output (the echoed line, the output, the next prompt). */
static char *hmp_cmd(int fd, GString *acc, const char *line)
{
    g_autofree char *l = g_strdup_printf("%s\n", line);

    g_assert_cmpint(write(fd, l, strlen(l)), ==, (ssize_t)strlen(l));
    return hmp_until(fd, acc, "\r\n(qemu) ");
}

/* The human monitor on a unix socket of a real vblk (-S): status, vCPUs, PCI, quit. */
static void test_hmp_socket(void)
{
    VblkProc p;
    g_autofree char *kernel = NULL, *sock = NULL, *arg = NULL, *out = NULL;
    g_autoptr(GString) acc = g_string_new(NULL);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = -1;

    if (!vblkproc_usable()) {
        return;
    }
    vblkproc_init(&p, "vblk-hmp-XXXXXX");
    kernel = vblkproc_bzimage(p.dir, "tiny", hello_code, sizeof(hello_code), "hmp\n");
    sock = g_build_filename(p.dir, "hmp.sock", NULL);
    arg = g_strdup_printf("unix:%s,server=on,wait=off", sock);
    vblkproc_start(&p, false, "-m", "32", "-smp", "2", "-kernel", kernel, "-S", "-serial", "null",
                   "-no-reboot", "-monitor", arg, NULL);
    g_strlcpy(sa.sun_path, sock, sizeof(sa.sun_path));
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    g_assert_cmpint(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    out = hmp_until(fd, acc, "(qemu) ");
    g_assert_cmpstr(out, ==, "QEMU 7.2.0 monitor - type 'help' for more information\r\n(qemu) ");
    g_free(out);
    out = hmp_cmd(fd, acc, "info status");
    g_assert_cmpstr(out, ==, "info status\r\nVM status: paused (prelaunch)\r\n(qemu) ");
    g_free(out);
    out = hmp_cmd(fd, acc, "info cpus");
    g_assert_true(g_str_has_prefix(out, "info cpus\r\n* CPU #0: thread_id="));
    g_assert_nonnull(strstr(out, "\r\n  CPU #1: thread_id="));
    g_free(out);
    out = hmp_cmd(fd, acc, "info pci");
    g_assert_nonnull(
        strstr(out, "  Bus  0, device   0, function 0:\r\n    Host bridge: PCI device"));
    g_free(out);
    out = hmp_cmd(fd, acc, "stop now");
    g_assert_nonnull(strstr(out, "stop|s: extraneous characters at the end of line\r\n"));
    g_clear_pointer(&out, g_free); /* g_autofree: freed once more at the end otherwise */
    g_assert_cmpint(write(fd, "quit\n", 5), ==, 5);
    close(fd);
    vblkproc_end(&p, NULL);
}

/*
 * Counts its boots in RAM (0x6000, which no reload touches) and prints
 * "<count><l><i><a><k>\n": lower case when LSTAR, the IDT limit, the LAPIC TPR
 * and the kvm-clock MSR have their power-on values, upper case when something
 * of the last boot survived. Then it dirties all four; boot 1 reboots itself
 * (port 0x64), later boots halt and wait for the host.
 */
static const uint8_t reset_code[] = {
    0xbf, 0x00, 0x60, 0x00, 0x00,                   /* mov edi, 0x6000 */
    0x8b, 0x07, 0xff, 0xc0, 0x89, 0x07,             /* mov eax, [rdi]; inc eax; mov [rdi], eax */
    0x89, 0xc3,                                     /* mov ebx, eax */
    0x66, 0xba, 0xf8, 0x03, 0x04, 0x30, 0xee,       /* mov dx, 0x3f8; add al, '0'; out dx, al */
    0xb9, 0x82, 0x00, 0x00, 0xc0, 0x0f, 0x32,       /* mov ecx, LSTAR; rdmsr */
    0x09, 0xd0, 0xb0, 0x6c, 0x74, 0x02, 0xb0, 0x4c, /* or eax, edx; al = zero ? 'l' : 'L' */
    0x66, 0xba, 0xf8, 0x03, 0xee,                   /* mov dx, 0x3f8; out dx, al */
    0x0f, 0x01, 0x4f, 0x10,                         /* sidt [rdi + 0x10] */
    0x66, 0x83, 0x7f, 0x10, 0xff,                   /* cmp word [rdi + 0x10], 0xffff */
    0xb0, 0x69, 0x74, 0x02, 0xb0, 0x49, 0xee,       /* al = equal ? 'i' : 'I'; out dx, al */
    0xbe, 0x80, 0x00, 0xe0, 0xfe,                   /* mov esi, 0xfee00080 (LAPIC TPR) */
    0x8b, 0x06, 0x85, 0xc0,                         /* mov eax, [rsi]; test eax, eax */
    0xb0, 0x61, 0x74, 0x02, 0xb0, 0x41, 0xee,       /* al = zero ? 'a' : 'A'; out dx, al */
    0xb9, 0x01, 0x4d, 0x56, 0x4b, 0x0f, 0x32,       /* mov ecx, MSR_KVM_SYSTEM_TIME_NEW; rdmsr */
    0x09, 0xd0, 0xb0, 0x6b, 0x74, 0x02, 0xb0, 0x4b, /* or eax, edx; al = zero ? 'k' : 'K' */
    0x66, 0xba, 0xf8, 0x03, 0xee,                   /* mov dx, 0x3f8; out dx, al */
    0xb0, 0x0a, 0xee,                               /* mov al, '\n'; out dx, al */
    0xb9, 0x82, 0x00, 0x00, 0xc0,                   /* mov ecx, LSTAR */
    0xb8, 0x78, 0x56, 0x34, 0x12, 0x31, 0xd2,       /* mov eax, 0x12345678; xor edx, edx */
    0x0f, 0x30,                                     /* wrmsr */
    0xb9, 0x01, 0x4d, 0x56, 0x4b,                   /* mov ecx, MSR_KVM_SYSTEM_TIME_NEW */
    0xb8, 0x01, 0x61, 0x00, 0x00, 0x31, 0xd2,       /* mov eax, 0x6101 (enabled); xor edx, edx */
    0x0f, 0x30,                                     /* wrmsr */
    0xc7, 0x06, 0x20, 0x00, 0x00, 0x00,             /* mov dword [rsi], 0x20 (TPR) */
    0x66, 0xc7, 0x47, 0x10, 0x07, 0x00,             /* mov word [rdi + 0x10], 7 */
    0x0f, 0x01, 0x5f, 0x10,                         /* lidt [rdi + 0x10] */
    0x83, 0xfb, 0x01, 0x75, 0x04,                   /* cmp ebx, 1; jne 1f */
    0xb0, 0xfe, 0xe6, 0x64,                         /* mov al, 0xfe; out 0x64, al (reboot) */
    0xf4, 0xeb, 0xfd,                               /* 1: hlt; jmp 1b */
};

/* Waits (up to 20 s) until the file holds exactly @want. */
static void wait_file(const char *path, const char *want)
{
    g_autofree char *got = NULL;

    for (int i = 0; i < 2000; i++) {
        g_free(got);
        got = NULL;
        if (g_file_get_contents(path, &got, NULL, NULL) && !strcmp(got, want)) {
            return;
        }
        g_usleep(10000);
    }
    g_assert_cmpstr(got, ==, want);
}

/*
 * In-place reset without -no-reboot: the guest's own reboot and QMP system_reset
 * both run the payload again from scratch, on fresh CPU state, with the RESET event;
 * a reset while stopped stays stopped (prelaunch) until cont.
 */
static void test_reset_in_place(void)
{
    VblkProc p;
    g_autofree char *kernel = NULL, *serial = NULL, *out = NULL, *logged = NULL;
    g_autoptr(GString) want = g_string_new("1liak\n2liak\n");

    if (!vblkproc_usable()) {
        return;
    }
    vblkproc_init(&p, "vblk-reset-XXXXXX");
    kernel = vblkproc_bzimage(p.dir, "tiny", reset_code, sizeof(reset_code), "");
    serial = g_strdup_printf("file:%s", p.log);
    vblkproc_start(&p, false, "-m", "32", "-smp", "2", "-kernel", kernel, "-S", "-serial", serial,
                   NULL);
    vblkproc_expect(&p, "cont", "return");
    /* Boot 1 rebooted by itself: boot 2 found nothing of boot 1's CPU state. */
    out = vblkproc_wait(&p, "\"RESET\"");
    g_assert_nonnull(strstr(out, "{\"guest\": true, \"reason\": \"guest-reset\"}"));
    wait_file(p.log, want->str);
    /* Host resets, five in a row; each boot starts clean. */
    for (int i = 3; i <= 7; i++) {
        g_free(out);
        vblkproc_send(&p, "system_reset");
        out = vblkproc_wait(&p, "return");
        g_assert_nonnull(strstr(out, "\"event\": \"RESET\", \"data\": {\"guest\": false, "
                                     "\"reason\": \"host-qmp-system-reset\"}"));
        g_string_append_printf(want, "%dliak\n", i);
        wait_file(p.log, want->str);
    }
    vblkproc_expect(&p, "query-status", "\"status\": \"running\"");
    /* Reset while stopped: nothing runs until cont, then boot 8 runs. */
    vblkproc_expect(&p, "stop", "return");
    vblkproc_expect(&p, "system_reset", "return");
    vblkproc_expect(&p, "query-status", "\"prelaunch\"");
    g_usleep(200000);
    g_assert_true(g_file_get_contents(p.log, &logged, NULL, NULL));
    g_assert_cmpstr(logged, ==, want->str);
    vblkproc_expect(&p, "cont", "return");
    g_string_append(want, "8liak\n");
    wait_file(p.log, want->str);
    vblkproc_expect(&p, "query-status", "\"status\": \"running\"");
    vblkproc_expect(&p, "quit", "return");
    vblkproc_end(&p, NULL);
}

/* -no-reboot: the guest's reboot and system_reset both end vblk (status 0), as in QEMU. */
static void test_reset_no_reboot(void)
{
    VblkProc p;
    g_autofree char *kernel = NULL, *out = NULL;

    if (!vblkproc_usable()) {
        return;
    }
    vblkproc_init(&p, "vblk-reset-XXXXXX");
    kernel = vblkproc_bzimage(p.dir, "halt", halt_code, sizeof(halt_code), "");
    vblkproc_start(&p, false, "-m", "32", "-kernel", kernel, "-serial", "null", "-no-reboot", NULL);
    vblkproc_send(&p, "system_reset");
    out = vblkproc_wait(&p, "host-qmp-system-reset");
    g_assert_nonnull(strstr(out, "\"event\": \"SHUTDOWN\", \"data\": {\"guest\": false, "
                                 "\"reason\": \"host-qmp-system-reset\"}"));
    g_assert_null(strstr(out, "RESET\""));
    vblkproc_end(&p, NULL);
}

/*
 * A tiny guest of @code under -no-reboot, started paused and let go: returns
 * the QMP output up to its SHUTDOWN (@p left to vblkproc_end_status()).
 */
static char *run_to_shutdown(VblkProc *p, const char *name, const char *img, const uint8_t *code,
                             size_t len)
{
    g_autofree char *kernel = NULL;

    vblkproc_init(p, name);
    p->err_log = g_build_filename(p->dir, "stderr.log", NULL);
    kernel = vblkproc_bzimage(p->dir, img, code, len, "");
    vblkproc_start(p, false, "-m", "32", "-kernel", kernel, "-serial", "null", "-no-reboot", "-S",
                   NULL);
    vblkproc_send(p, "cont");
    return vblkproc_wait(p, "\"SHUTDOWN\"");
}

/* The guest resets the machine through the keyboard controller (reboot=k). */
static const uint8_t kbd_reset_code[] = {
    0xb0, 0xfe, /* mov al, 0xfe (pulse the reset line) */
    0xe6, 0x64, /* out 0x64, al */
    0xf4,       /* hlt */
    0xeb, 0xfd, /* jmp hlt */
};

/*
 * A guest's own reset under -no-reboot ends vblk with status 0 and SHUTDOWN
 * guest-reset, as QEMU; unlike QEMU vblk also says so on stderr, so that a
 * guest that panicked and rebooted is not taken for a clean poweroff.
 */
static void test_guest_reset_no_reboot(void)
{
    VblkProc p;
    g_autofree char *out = NULL, *err = NULL;

    if (!vblkproc_usable()) {
        return;
    }
    out = run_to_shutdown(&p, "vblk-greset-XXXXXX", "kbdreset", kbd_reset_code,
                          sizeof(kbd_reset_code));
    g_assert_nonnull(strstr(out, "\"event\": \"SHUTDOWN\", \"data\": {\"guest\": true, "
                                 "\"reason\": \"guest-reset\"}"));
    g_assert_cmpint(vblkproc_end_status(&p, NULL, &err), ==, 0);
    g_assert_nonnull(strstr(err, "vblk: info: the guest reset the machine; -no-reboot: vblk exits"));
    g_assert_null(strstr(err, "triple fault"));
}

/* Prints the NUL-terminated string that follows the code, then halts (IF clear: forever). */
static const uint8_t say_halt_code[] = {
    0x66, 0xba, 0xf8, 0x03,                   /* mov dx, 0x3f8 */
    0x48, 0x8d, 0x35, 0x0b, 0x00, 0x00, 0x00, /* lea rsi, [rip + 11] */
    0xac,                                     /* 1: lodsb */
    0x84, 0xc0,                               /* test al, al */
    0x74, 0x03,                               /* jz 2f */
    0xee,                                     /* out dx, al */
    0xeb, 0xf8,                               /* jmp 1b */
    0xf4,                                     /* 2: hlt */
    0xeb, 0xfd,                               /* jmp 2b */
};

/*
 * The -kernel file replaced, then deleted, after startup: each reset boots the
 * image read at startup again (QEMU keeps it in memory too), and vblk ends normally.
 */
static void test_reset_kernel_gone(void)
{
    VblkProc p;
    g_autofree char *kernel = NULL, *other = NULL, *serial = NULL;

    if (!vblkproc_usable()) {
        return;
    }
    vblkproc_init(&p, "vblk-reset-XXXXXX");
    kernel = vblkproc_bzimage(p.dir, "say", say_halt_code, sizeof(say_halt_code), "one\n");
    serial = g_strdup_printf("file:%s", p.log);
    vblkproc_start(&p, true, "-m", "32", "-kernel", kernel, "-serial", serial, NULL);
    wait_file(p.log, "one\n");
    /* Replaced by another kernel: the reset still boots the first one. */
    other = vblkproc_bzimage(p.dir, "say", say_halt_code, sizeof(say_halt_code), "two\n");
    g_assert_cmpstr(other, ==, kernel);
    vblkproc_expect(&p, "system_reset", "return");
    wait_file(p.log, "one\none\n");
    /* Deleted: the same. */
    g_assert_cmpint(g_unlink(kernel), ==, 0);
    vblkproc_expect(&p, "system_reset", "return");
    wait_file(p.log, "one\none\none\n");
    vblkproc_expect(&p, "query-status", "\"status\": \"running\"");
    vblkproc_expect(&p, "quit", "return");
    vblkproc_end(&p, NULL);
}

/*
 * Acts as an OS with an ACPI power button driver: enables PWRBTN_EN, polls PM1_STS until
 * the button is pressed, acknowledges it (W1C) and enters S5 (SLP_TYP 5 | SLP_EN).
 */
static const uint8_t acpi_button_code[] = {
    0x66, 0xba, 0x02, 0x06, /* mov dx, 0x602 (PM1_EN) */
    0x66, 0xb8, 0x00, 0x01, /* mov ax, 0x100 (PWRBTN_EN) */
    0x66, 0xef,             /* out dx, ax */
    0x66, 0xba, 0x00, 0x06, /* mov dx, 0x600 (PM1_STS) */
    0x66, 0xed,             /* 1: in ax, dx */
    0xf6, 0xc4, 0x01,       /* test ah, 1 (PWRBTN_STS) */
    0x74, 0xf9,             /* jz 1b */
    0x66, 0xef,             /* out dx, ax (write 1 to clear) */
    0x66, 0xba, 0x04, 0x06, /* mov dx, 0x604 (PM1_CNT) */
    0x66, 0xb8, 0x01, 0x34, /* mov ax, SLP_EN | 5 << 10 | SCI_EN */
    0x66, 0xef,             /* out dx, ax */
    0xf4, 0xeb, 0xfd,       /* hlt; jmp hlt */
};

/*
 * system_powerdown end to end: POWERDOWN, the guest sees PWRBTN_STS and powers off
 * through S5 (SHUTDOWN guest-shutdown, status 0). With -machine acpi=off the command
 * still succeeds, x-query-acpi says nobody hears it, and quit ends vblk.
 */
static void run_powerdown(bool acpi)
{
    VblkProc p;
    g_autofree char *kernel = NULL;
    char *out = NULL;

    vblkproc_init(&p, "vblk-acpi-XXXXXX");
    kernel = acpi
                 ? vblkproc_bzimage(p.dir, "button", acpi_button_code, sizeof(acpi_button_code), "")
                 : vblkproc_bzimage(p.dir, "halt", halt_code, sizeof(halt_code), "");
    vblkproc_start(&p, true, "-m", "32", "-kernel", kernel, "-serial", "null", "-machine",
                   acpi ? "pc" : "pc,acpi=off", NULL);
    if (acpi) {
        /* Wait until the guest has enabled the button: it listens from then on. */
        for (int i = 0; i < 250; i++) {
            vblkproc_send(&p, "x-query-acpi");
            out = vblkproc_wait(&p, "return");
            if (strstr(out, "\"power-button-enabled\": true")) {
                break;
            }
            g_clear_pointer(&out, g_free);
            g_usleep(20000);
        }
        g_assert_nonnull(out);
        g_clear_pointer(&out, g_free);
        vblkproc_send(&p, "system_powerdown");
        out = vblkproc_wait(&p, "guest-shutdown");
        g_assert_nonnull(strstr(out, "\"POWERDOWN\""));
        g_assert_nonnull(strstr(out, "\"return\": {}"));
        g_assert_nonnull(strstr(out, "\"SHUTDOWN\""));
        g_assert_nonnull(strstr(out, "\"guest\": true"));
    } else {
        vblkproc_send(&p, "system_powerdown");
        out = vblkproc_wait(&p, "\"return\"");
        g_assert_nonnull(strstr(out, "\"POWERDOWN\""));
        g_assert_null(strstr(out, "\"error\""));
        g_clear_pointer(&out, g_free);
        vblkproc_send(&p, "x-query-acpi");
        out = vblkproc_wait(&p, "return");
        g_assert_nonnull(strstr(out, "\"enabled\": false"));
        g_clear_pointer(&out, g_free);
        vblkproc_send(&p, "quit");
        out = vblkproc_wait(&p, "host-qmp-quit");
    }
    g_free(out);
    vblkproc_end(&p, NULL);
}

static void test_acpi_powerdown(void)
{
    if (!vblkproc_usable()) {
        return;
    }
    run_powerdown(true);
    run_powerdown(false);
}

/* Where the code of a vblkproc_bzimage() kernel runs: its 64-bit entry. */
#define BZ_ENTRY (BOOT_KERNEL_ADDR + 0x200)

/* The RIP that vblk's "vCPU N: RIP=" line shows. */
static uint64_t logged_rip(const char *err, unsigned id)
{
    g_autofree char *needle = g_strdup_printf("vCPU %u: RIP=", id);
    const char *p = strstr(err, needle);

    g_assert_nonnull(p);
    return g_ascii_strtoull(p + strlen(needle), NULL, 16);
}

/*
 * A triple fault under -no-reboot ends vblk with status 2, SHUTDOWN reason
 * guest-reset (as QEMU) and the registers on stderr; without -no-reboot it is a
 * reset (RESET guest-reset), logged each time. On kvm-pvm the fault may come
 * back as an emulation failure instead: status 1, SHUTDOWN host-error.
 */
static void test_triple_fault(void)
{
    VblkProc p;
    g_autofree char *kernel = NULL, *out = NULL, *err = NULL;
    int status;

    if (!vblkproc_usable()) {
        return;
    }
    out = run_to_shutdown(&p, "vblk-tf-XXXXXX", "trap", trap_code, sizeof(trap_code));
    status = vblkproc_end_status(&p, NULL, &err);
    if (status == 2) {
        g_assert_nonnull(strstr(out, "{\"guest\": true, \"reason\": \"guest-reset\"}"));
        g_assert_nonnull(strstr(err, "vblk: vCPU 0: triple fault (KVM_EXIT_SHUTDOWN)"));
        /* Intel keeps the faulting state (the int3); AMD SVM resets the vCPU first, and vblk says so. */
        if (strstr(err, "KVM reset this vCPU at the shutdown")) {
            g_assert_cmphex(logged_rip(err, 0), ==, 0xfff0);
            g_assert_nonnull(strstr(err, "vblk: vCPU 0: CS=f000 "));
        } else {
            g_assert_cmphex(logged_rip(err, 0) - BZ_ENTRY, <=, 1);
        }
    } else {
        g_assert_cmpint(status, ==, 1);
        g_assert_nonnull(strstr(out, "{\"guest\": false, \"reason\": \"host-error\"}"));
        g_assert_nonnull(strstr(err, "KVM_EXIT_"));
        g_assert_nonnull(strstr(err, "vblk: vCPU 0: RIP="));
        return; /* no triple faults on this host: the in-place case cannot be shown */
    }
    g_clear_pointer(&out, g_free);
    g_clear_pointer(&err, g_free);

    /* Without -no-reboot: reset, fault again, reset... each one logged; quit ends it (0). */
    vblkproc_init(&p, "vblk-tf-XXXXXX");
    p.err_log = g_build_filename(p.dir, "stderr.log", NULL);
    kernel = vblkproc_bzimage(p.dir, "trap", trap_code, sizeof(trap_code), "");
    vblkproc_start(&p, false, "-m", "32", "-kernel", kernel, "-serial", "null", NULL);
    for (int i = 0; i < 2; i++) {
        g_free(out);
        out = vblkproc_wait(&p, "\"RESET\"");
        g_assert_nonnull(strstr(out, "{\"guest\": true, \"reason\": \"guest-reset\"}"));
    }
    vblkproc_expect(&p, "quit", "return");
    g_assert_cmpint(vblkproc_end_status(&p, NULL, &err), ==, 0);
    g_assert_nonnull(strstr(err, "vblk: vCPU 0: triple fault (KVM_EXIT_SHUTDOWN) after "));
    g_assert_nonnull(strstr(strstr(err, "the guest is reset") + 1, "the guest is reset"));
}

/* The RIP on vCPU @id's debug-state line. */
static uint64_t dump_rip(const char *dump, unsigned id)
{
    g_autofree char *needle = g_strdup_printf("debug-state: vCPU %u: ", id);
    const char *p = strstr(dump, needle);
    const char *eol = p ? strchr(p, '\n') : NULL;
    const char *rip = p ? strstr(p, ", RIP=") : NULL;

    g_assert_nonnull(rip);
    g_assert_true(rip < eol);
    return g_ascii_strtoull(rip + strlen(", RIP="), NULL, 16);
}

/* Waits (up to 10 s) until the file holds @n complete debug-state dumps; returns it. */
static char *wait_dumps(const char *path, unsigned n)
{
    char *got = NULL;

    for (int i = 0; i < 1000; i++) {
        unsigned found = 0;

        g_free(got);
        got = NULL;
        if (g_file_get_contents(path, &got, NULL, NULL)) {
            for (const char *p = got; (p = strstr(p, "vblk: debug-state: end\n")); p++) {
                found++;
            }
            if (found >= n) {
                return got;
            }
        }
        g_usleep(10000);
    }
    g_error("no %u debug-state dumps in %s: %s", n, path, got ? got : "(nothing)");
}

/*
 * x-debug-state and SIGUSR2: each vCPU's state, time in it and RIP, the run
 * state and the main thread; a running halted guest is "in KVM_RUN", a stopped
 * one "paused", both with the RIP of its hlt loop.
 */
static void test_debug_state(void)
{
    VblkProc p;
    g_autofree char *kernel = NULL, *err = NULL, *err_path = NULL;
    char *dump;
    uint64_t rip;

    if (!vblkproc_usable()) {
        return;
    }
    vblkproc_init(&p, "vblk-dbg-XXXXXX");
    p.err_log = g_build_filename(p.dir, "stderr.log", NULL);
    err_path = g_strdup(p.err_log);
    kernel = vblkproc_bzimage(p.dir, "halt", halt_code, sizeof(halt_code), "");
    vblkproc_start(&p, false, "-m", "32", "-smp", "2", "-kernel", kernel, "-serial", "null", NULL);
    g_usleep(200000);
    vblkproc_expect(&p, "x-debug-state", "\"return\": {}");
    dump = wait_dumps(err_path, 1);
    g_test_message("%s", dump);
    g_assert_nonnull(strstr(dump, "vblk: debug-state: run state running; main thread "));
    g_assert_nonnull(strstr(dump, "vblk: debug-state: vCPU 0: in KVM_RUN for "));
    g_assert_nonnull(strstr(dump, "vblk: debug-state: vCPU 1: in KVM_RUN for "));
    g_assert_nonnull(strstr(dump, ", BQL "));
    rip = dump_rip(dump, 0);
    g_assert_cmphex(rip - BZ_ENTRY, <=, sizeof(halt_code));
    /* What a hung guest waits for: halted with IF clear, nothing pending, the hlt loop's code. */
    g_assert_nonnull(strstr(dump, " IF=0 intr_shadow=0 exception=-1 interrupt=-1 "));
    g_assert_nonnull(strstr(dump, " nmi=0/0 lapic: ISR top -1, IRR top -1, TPR 0x0; code at RIP:"));
    /* RIP is at the hlt or, once the vCPU halted there, past it (hosts differ): its bytes either way */
    g_assert_true(strstr(dump, "code at RIP: f4 eb fd") || strstr(dump, "code at RIP: eb fd"));
    g_free(dump);

    vblkproc_expect(&p, "stop", "return");
    kill(p.pid, SIGUSR2);
    dump = wait_dumps(err_path, 2);
    g_assert_nonnull(strstr(strstr(dump, "debug-state: end") + 1,
                            "vblk: debug-state: run state paused; main thread "));
    g_assert_nonnull(strstr(strstr(dump, "debug-state: end") + 1, "vblk: debug-state: vCPU 0: paused for "));
    g_test_message("%s", strstr(dump, "debug-state: end") + 1);
    rip = dump_rip(strstr(dump, "debug-state: end") + 1, 0);
    g_assert_cmphex(rip - BZ_ENTRY, <=, sizeof(halt_code));
    g_free(dump);
    vblkproc_expect(&p, "quit", "return");
    g_assert_cmpint(vblkproc_end_status(&p, NULL, &err), ==, 0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vmm/kvm/triple-fault", test_triple_fault);
    g_test_add_func("/vmm/kvm/debug-state", test_debug_state);
    g_test_add_func("/vmm/kvm/hello", test_hello);
    g_test_add_func("/vmm/kvm/unhandled-accesses", test_unhandled_accesses);
    g_test_add_func("/vmm/kvm/paused-start-smp", test_paused_start_smp);
    g_test_add_func("/vmm/kvm/cli", test_cli);
    g_test_add_func("/vmm/kvm/qmp-cont", test_qmp_cont);
    g_test_add_func("/vmm/kvm/hmp-socket", test_hmp_socket);
    g_test_add_func("/vmm/kvm/reset-in-place", test_reset_in_place);
    g_test_add_func("/vmm/kvm/pause-completes-mmio", test_pause_completes_mmio);
    g_test_add_data_func("/vmm/kvm/reset-mmio-pending", mmio_loop_code, test_reset_io_pending);
    g_test_add_data_func("/vmm/kvm/reset-pio-pending", pio_loop_code, test_reset_io_pending);
    g_test_add_func("/vmm/kvm/reset-no-reboot", test_reset_no_reboot);
    g_test_add_func("/vmm/kvm/guest-reset-no-reboot", test_guest_reset_no_reboot);
    g_test_add_func("/vmm/kvm/reset-kernel-gone", test_reset_kernel_gone);
    g_test_add_func("/vmm/kvm/acpi-powerdown", test_acpi_powerdown);
    return g_test_run();
}
