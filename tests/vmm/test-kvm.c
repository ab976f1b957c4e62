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
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <string.h>
#include <unistd.h>

#include "vblk/boot.h"
#include "vblk/console.h"
#include "vblk/ports.h"
#include "vblk/vmm.h"

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

static bool kvm_usable(void)
{
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

    if (fd < 0) {
        g_test_skip("/dev/kvm is not usable here; tiny-guest tests skipped");
        return false;
    }
    close(fd);
    return true;
}

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

    if (!kvm_usable()) {
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

    if (!kvm_usable()) {
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

    if (!kvm_usable()) {
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

    if (!kvm_usable()) {
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

    if (!kvm_usable()) {
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

/* A synthetic bzImage whose 64-bit entry is @code followed by @msg, for the vblk binary. */
static char *write_bzimage(const char *dir, const char *name, const uint8_t *code, size_t clen,
                           const char *msg)
{
    size_t setup = 1024, len = setup + 0x200 + clen + strlen(msg) + 1;
    g_autofree uint8_t *img = g_malloc0(len);
    char *path = g_build_filename(dir, name, NULL);

    img[0x1f1] = 1;
    img[0x1fe] = 0x55;
    img[0x1ff] = 0xaa;
    img[0x201] = 0x66;
    memcpy(img + 0x202, "HdrS", 4);
    img[0x206] = 0x0f;
    img[0x207] = 0x02;
    *(uint32_t *)(img + 0x22c) = 0x7fffffff;
    *(uint16_t *)(img + 0x236) = 0x7f;
    *(uint32_t *)(img + 0x238) = 2047;
    *(uint64_t *)(img + 0x258) = 0x1000000;
    *(uint32_t *)(img + 0x260) = 0x100000;
    memcpy(img + setup + 0x200, code, clen);
    memcpy(img + setup + 0x200 + clen, msg, strlen(msg) + 1);
    g_assert_true(g_file_set_contents(path, (char *)img, len, NULL));
    return path;
}

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
        write_bzimage(dir, "tiny", hello_code, sizeof(hello_code), "Hello from tiny guest\n");
    g_autofree char *halt = write_bzimage(dir, "halt", halt_code, sizeof(halt_code), "");
    static const uint8_t trap_code[] = {0xcc, 0xf4}; /* int3 */
    g_autofree char *trap = write_bzimage(dir, "trap", trap_code, sizeof(trap_code), "");
    int status;
    g_autofree char *log = g_build_filename(dir, "serial.log", NULL);
    g_autofree char *args = NULL;
    g_autofree char *logged = NULL;
    char *out, *err;

    if (!g_getenv("VBLK_BIN")) {
        g_test_skip("VBLK_BIN not set");
        return;
    }
    /* Bad command lines never need KVM. */
    g_assert_cmpint(run_vblk("-m 64 -bogus", &out, &err), ==, 1);
    g_assert_cmpstr(err, ==, "vblk: -bogus: invalid or unsupported option (see --help)\n");
    g_free(out);
    g_free(err);
    if (!kvm_usable()) {
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
    /* A guest that faults with no IDT: triple fault (status 0) or, where KVM emulates
     * CPL0 code (kvm-pvm), an emulation failure (status 1 with a KVM_EXIT line). */
    args = g_strdup_printf("-m 32 -kernel %s -nographic -no-reboot", trap);
    status = run_vblk(args, &out, &err);
    g_assert_true(status == 0 || (status == 1 && strstr(err, "KVM_EXIT_") &&
                                  strchr(err, '\n') == err + strlen(err) - 1));
    g_free(out);
    g_free(err);
    g_free(args);
    /* A guest that never ends: the console escape C-a x quits with status 0. */
    args = g_strdup_printf("-c \"printf 'ab\\001x' | %s -m 32 -kernel %s -nographic\"",
                           g_getenv("VBLK_BIN"), halt);
    g_assert_cmpint(run_sh(args), ==, 0);
    g_unlink(kernel);
    g_unlink(halt);
    g_unlink(trap);
    g_unlink(log);
    g_rmdir(dir);
}

/* Reads from @fd until @needle shows up (or EOF); returns everything read. */
static char *read_until(int fd, const char *needle)
{
    GString *s = g_string_new(NULL);
    char buf[512];
    ssize_t r;

    while (!strstr(s->str, needle) && (r = read(fd, buf, sizeof(buf))) > 0) {
        g_string_append_len(s, buf, r);
    }
    return g_string_free(s, FALSE);
}

static int qmp_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
    for (int i = 0; i < 100; i++) {
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            return fd;
        }
        g_usleep(20000);
    }
    close(fd);
    return -1;
}

static void qmp_send(int fd, const char *cmd)
{
    g_autofree char *line = g_strdup_printf("{\"execute\": \"%s\"}\n", cmd);

    g_assert_cmpint(write(fd, line, strlen(line)), ==, (ssize_t)strlen(line));
}

/* -S plus -qmp: prelaunch until "cont", then the guest runs and its reset ends vblk. */
static void test_qmp_cont(void)
{
    g_autofree char *dir = g_dir_make_tmp("vblk-qmp-XXXXXX", NULL);
    g_autofree char *kernel =
        write_bzimage(dir, "tiny", hello_code, sizeof(hello_code), "qmp says go\n");
    g_autofree char *sock = g_build_filename(dir, "qmp.sock", NULL);
    g_autofree char *log = g_build_filename(dir, "serial.log", NULL);
    g_autofree char *qmp_arg = g_strdup_printf("unix:%s,server=on,wait=off", sock);
    g_autofree char *serial_arg = g_strdup_printf("file:%s", log);
    g_autofree char *out = NULL, *logged = NULL;
    const char *bin = g_getenv("VBLK_BIN");
    char *argv[] = {(char *)bin, "-m",    "32",      "-kernel",  kernel,       "-S",
                    "-qmp",      qmp_arg, "-serial", serial_arg, "-no-reboot", NULL};
    GPid pid;
    int fd, status;

    if (!bin || !kvm_usable()) {
        if (!bin) {
            g_test_skip("VBLK_BIN not set");
        }
        return;
    }
    g_assert_true(g_spawn_async(NULL, argv, NULL,
                                G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL,
                                &pid, NULL));
    fd = qmp_connect(sock);
    g_assert_cmpint(fd, >=, 0);
    g_free(read_until(fd, "\n"));
    qmp_send(fd, "qmp_capabilities");
    g_free(read_until(fd, "\n"));
    qmp_send(fd, "query-status");
    out = read_until(fd, "\n");
    g_assert_nonnull(strstr(out, "prelaunch"));
    g_free(out);
    qmp_send(fd, "cont");
    out = read_until(fd, "guest-reset");
    g_assert_nonnull(strstr(out, "RESUME"));
    g_assert_nonnull(strstr(out, "\"SHUTDOWN\""));
    close(fd);
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    g_assert_true(g_file_get_contents(log, &logged, NULL, NULL));
    g_assert_cmpstr(logged, ==, "qmp says go\n");
    g_unlink(kernel);
    g_unlink(log);
    g_rmdir(dir);
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
 * Reads QMP lines into @acc until one contains @needle; returns (and drops from
 * @acc) everything up to the end of that line, so later lines stay for the next call.
 */
static char *qmp_wait(int fd, GString *acc, const char *needle)
{
    char buf[512];
    ssize_t r;

    for (;;) {
        char *hit = strstr(acc->str, needle);
        char *eol = hit ? strchr(hit, '\n') : NULL;

        if (eol) {
            gsize len = eol + 1 - acc->str;
            char *out = g_strndup(acc->str, len);

            g_string_erase(acc, 0, len);
            return out;
        }
        r = read(fd, buf, sizeof(buf));
        if (r <= 0) {
            g_error("QMP closed before \"%s\"; got: %s", needle, acc->str);
        }
        g_string_append_len(acc, buf, r);
    }
}

static void expect_reply(int fd, GString *acc, const char *cmd, const char *needle)
{
    qmp_send(fd, cmd);
    g_free(qmp_wait(fd, acc, needle));
}

/*
 * In-place reset without -no-reboot: the guest's own reboot and QMP system_reset
 * both run the payload again from scratch, on fresh CPU state, with the RESET event;
 * a reset while stopped stays stopped (prelaunch) until cont.
 */
static void test_reset_in_place(void)
{
    g_autofree char *dir = g_dir_make_tmp("vblk-reset-XXXXXX", NULL);
    g_autofree char *kernel = write_bzimage(dir, "tiny", reset_code, sizeof(reset_code), "");
    g_autofree char *sock = g_build_filename(dir, "qmp.sock", NULL);
    g_autofree char *log = g_build_filename(dir, "serial.log", NULL);
    g_autofree char *qmp_arg = g_strdup_printf("unix:%s,server=on,wait=off", sock);
    g_autofree char *serial_arg = g_strdup_printf("file:%s", log);
    g_autofree char *out = NULL, *logged = NULL;
    const char *bin = g_getenv("VBLK_BIN");
    char *argv[] = {(char *)bin, "-m",   "32",    "-smp",    "2",        "-kernel", kernel,
                    "-S",        "-qmp", qmp_arg, "-serial", serial_arg, NULL};
    GString *want = g_string_new("1liak\n2liak\n");
    g_autoptr(GString) acc = g_string_new(NULL);
    GPid pid;
    int fd, status;

    if (!bin || !kvm_usable()) {
        if (!bin) {
            g_test_skip("VBLK_BIN not set");
        }
        g_string_free(want, TRUE);
        return;
    }
    g_assert_true(g_spawn_async(NULL, argv, NULL,
                                G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL,
                                &pid, NULL));
    fd = qmp_connect(sock);
    g_assert_cmpint(fd, >=, 0);
    g_free(qmp_wait(fd, acc, "QMP"));
    expect_reply(fd, acc, "qmp_capabilities", "return");
    expect_reply(fd, acc, "cont", "return");
    /* Boot 1 rebooted by itself: boot 2 found nothing of boot 1's CPU state. */
    out = qmp_wait(fd, acc, "\"RESET\"");
    g_assert_nonnull(strstr(out, "{\"guest\": true, \"reason\": \"guest-reset\"}"));
    wait_file(log, want->str);
    /* Host resets, five in a row; each boot starts clean. */
    for (int i = 3; i <= 7; i++) {
        g_free(out);
        qmp_send(fd, "system_reset");
        out = qmp_wait(fd, acc, "return");
        g_assert_nonnull(strstr(out, "\"event\": \"RESET\", \"data\": {\"guest\": false, "
                                     "\"reason\": \"host-qmp-system-reset\"}"));
        g_string_append_printf(want, "%dliak\n", i);
        wait_file(log, want->str);
    }
    expect_reply(fd, acc, "query-status", "\"status\": \"running\"");
    /* Reset while stopped: nothing runs until cont, then boot 8 runs. */
    expect_reply(fd, acc, "stop", "return");
    expect_reply(fd, acc, "system_reset", "return");
    expect_reply(fd, acc, "query-status", "\"prelaunch\"");
    g_usleep(200000);
    g_assert_true(g_file_get_contents(log, &logged, NULL, NULL));
    g_assert_cmpstr(logged, ==, want->str);
    expect_reply(fd, acc, "cont", "return");
    g_string_append(want, "8liak\n");
    wait_file(log, want->str);
    expect_reply(fd, acc, "query-status", "\"status\": \"running\"");
    expect_reply(fd, acc, "quit", "return");
    close(fd);
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    g_string_free(want, TRUE);
    g_unlink(kernel);
    g_unlink(log);
    g_rmdir(dir);
}

/* -no-reboot: the guest's reboot and system_reset both end vblk (status 0), as in QEMU. */
static void test_reset_no_reboot(void)
{
    g_autofree char *dir = g_dir_make_tmp("vblk-reset-XXXXXX", NULL);
    g_autofree char *kernel = write_bzimage(dir, "halt", halt_code, sizeof(halt_code), "");
    g_autofree char *sock = g_build_filename(dir, "qmp.sock", NULL);
    g_autofree char *qmp_arg = g_strdup_printf("unix:%s,server=on,wait=off", sock);
    g_autofree char *out = NULL;
    const char *bin = g_getenv("VBLK_BIN");
    char *argv[] = {(char *)bin, "-m",      "32",   "-kernel",    kernel, "-qmp",
                    qmp_arg,     "-serial", "null", "-no-reboot", NULL};
    g_autoptr(GString) acc = g_string_new(NULL);
    GPid pid;
    int fd, status;

    if (!bin || !kvm_usable()) {
        if (!bin) {
            g_test_skip("VBLK_BIN not set");
        }
        return;
    }
    g_assert_true(g_spawn_async(NULL, argv, NULL,
                                G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDIN_FROM_DEV_NULL, NULL, NULL,
                                &pid, NULL));
    fd = qmp_connect(sock);
    g_assert_cmpint(fd, >=, 0);
    g_free(qmp_wait(fd, acc, "QMP"));
    expect_reply(fd, acc, "qmp_capabilities", "return");
    qmp_send(fd, "system_reset");
    out = qmp_wait(fd, acc, "host-qmp-system-reset");
    g_assert_nonnull(strstr(out, "\"event\": \"SHUTDOWN\", \"data\": {\"guest\": false, "
                                 "\"reason\": \"host-qmp-system-reset\"}"));
    g_assert_null(strstr(out, "RESET\""));
    close(fd);
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    g_unlink(kernel);
    g_rmdir(dir);
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
    g_autofree char *dir = g_dir_make_tmp("vblk-reset-XXXXXX", NULL);
    g_autofree char *kernel =
        write_bzimage(dir, "say", say_halt_code, sizeof(say_halt_code), "one\n");
    g_autofree char *other = NULL;
    g_autofree char *sock = g_build_filename(dir, "qmp.sock", NULL);
    g_autofree char *log = g_build_filename(dir, "serial.log", NULL);
    g_autofree char *qmp_arg = g_strdup_printf("unix:%s,server=on,wait=off", sock);
    g_autofree char *serial_arg = g_strdup_printf("file:%s", log);
    g_autoptr(GString) acc = g_string_new(NULL);
    const char *bin = g_getenv("VBLK_BIN");
    char *argv[] = {(char *)bin, "-m",    "32",      "-kernel",  kernel,
                    "-qmp",      qmp_arg, "-serial", serial_arg, NULL};
    GPid pid;
    int fd, status;

    if (!bin || !kvm_usable()) {
        if (!bin) {
            g_test_skip("VBLK_BIN not set");
        }
        return;
    }
    g_assert_true(g_spawn_async(NULL, argv, NULL,
                                G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDIN_FROM_DEV_NULL |
                                    G_SPAWN_STDERR_TO_DEV_NULL,
                                NULL, NULL, &pid, NULL));
    fd = qmp_connect(sock);
    g_assert_cmpint(fd, >=, 0);
    g_free(qmp_wait(fd, acc, "QMP"));
    expect_reply(fd, acc, "qmp_capabilities", "return");
    wait_file(log, "one\n");
    /* Replaced by another kernel: the reset still boots the first one. */
    other = write_bzimage(dir, "say", say_halt_code, sizeof(say_halt_code), "two\n");
    g_assert_cmpstr(other, ==, kernel);
    expect_reply(fd, acc, "system_reset", "return");
    wait_file(log, "one\none\n");
    /* Deleted: the same. */
    g_unlink(kernel);
    expect_reply(fd, acc, "system_reset", "return");
    wait_file(log, "one\none\none\n");
    expect_reply(fd, acc, "query-status", "\"status\": \"running\"");
    expect_reply(fd, acc, "quit", "return");
    close(fd);
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    g_unlink(log);
    g_rmdir(dir);
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

static void qmp_send_raw(int fd, const char *json)
{
    g_assert_cmpint(write(fd, json, strlen(json)), ==, (ssize_t)strlen(json));
}

/*
 * system_powerdown end to end: POWERDOWN, the guest sees PWRBTN_STS and powers off
 * through S5 (SHUTDOWN guest-shutdown, status 0). With -machine acpi=off the command
 * still succeeds, x-query-acpi says nobody hears it, and quit ends vblk.
 */
static void run_powerdown(bool acpi)
{
    g_autofree char *dir = g_dir_make_tmp("vblk-acpi-XXXXXX", NULL);
    g_autofree char *kernel =
        acpi ? write_bzimage(dir, "button", acpi_button_code, sizeof(acpi_button_code), "")
             : write_bzimage(dir, "halt", halt_code, sizeof(halt_code), "");
    g_autofree char *sock = g_build_filename(dir, "qmp.sock", NULL);
    g_autofree char *qmp_arg = g_strdup_printf("unix:%s,server=on,wait=off", sock);
    g_autofree char *out = NULL;
    const char *bin = g_getenv("VBLK_BIN");
    char *argv[] = {(char *)bin,
                    "-m",
                    "32",
                    "-kernel",
                    kernel,
                    "-qmp",
                    qmp_arg,
                    "-serial",
                    "null",
                    "-machine",
                    acpi ? "pc" : "pc,acpi=off",
                    NULL};
    GPid pid;
    int fd, status;

    g_assert_true(g_spawn_async(NULL, argv, NULL,
                                G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDIN_FROM_DEV_NULL |
                                    G_SPAWN_STDERR_TO_DEV_NULL,
                                NULL, NULL, &pid, NULL));
    fd = qmp_connect(sock);
    g_assert_cmpint(fd, >=, 0);
    g_free(read_until(fd, "\n"));
    qmp_send(fd, "qmp_capabilities");
    g_free(read_until(fd, "\n"));
    if (acpi) {
        /* Wait until the guest has enabled the button: it listens from then on. */
        for (int i = 0; i < 250; i++) {
            qmp_send(fd, "x-query-acpi");
            out = read_until(fd, "\n");
            if (strstr(out, "\"power-button-enabled\": true")) {
                break;
            }
            g_clear_pointer(&out, g_free);
            g_usleep(20000);
        }
        g_assert_nonnull(out);
        g_clear_pointer(&out, g_free);
        qmp_send(fd, "system_powerdown");
        out = read_until(fd, "guest-shutdown");
        g_assert_nonnull(strstr(out, "\"POWERDOWN\""));
        g_assert_nonnull(strstr(out, "\"return\": {}"));
        g_assert_nonnull(strstr(out, "\"SHUTDOWN\""));
        g_assert_nonnull(strstr(out, "\"guest\": true"));
    } else {
        qmp_send(fd, "system_powerdown");
        out = read_until(fd, "\"return\"");
        g_assert_nonnull(strstr(out, "\"POWERDOWN\""));
        g_assert_null(strstr(out, "\"error\""));
        g_clear_pointer(&out, g_free);
        qmp_send(fd, "x-query-acpi");
        out = read_until(fd, "\n");
        g_assert_nonnull(strstr(out, "\"enabled\": false"));
        g_clear_pointer(&out, g_free);
        qmp_send_raw(fd, "{\"execute\": \"quit\"}\n");
        out = read_until(fd, "host-qmp-quit");
    }
    close(fd);
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    g_unlink(kernel);
    g_unlink(sock);
    g_rmdir(dir);
}

static void test_acpi_powerdown(void)
{
    if (!g_getenv("VBLK_BIN")) {
        g_test_skip("VBLK_BIN not set");
        return;
    }
    if (!kvm_usable()) {
        return;
    }
    run_powerdown(true);
    run_powerdown(false);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vmm/kvm/hello", test_hello);
    g_test_add_func("/vmm/kvm/unhandled-accesses", test_unhandled_accesses);
    g_test_add_func("/vmm/kvm/paused-start-smp", test_paused_start_smp);
    g_test_add_func("/vmm/kvm/cli", test_cli);
    g_test_add_func("/vmm/kvm/qmp-cont", test_qmp_cont);
    g_test_add_func("/vmm/kvm/reset-in-place", test_reset_in_place);
    g_test_add_func("/vmm/kvm/pause-completes-mmio", test_pause_completes_mmio);
    g_test_add_data_func("/vmm/kvm/reset-mmio-pending", mmio_loop_code, test_reset_io_pending);
    g_test_add_data_func("/vmm/kvm/reset-pio-pending", pio_loop_code, test_reset_io_pending);
    g_test_add_func("/vmm/kvm/reset-no-reboot", test_reset_no_reboot);
    g_test_add_func("/vmm/kvm/reset-kernel-gone", test_reset_kernel_gone);
    g_test_add_func("/vmm/kvm/acpi-powerdown", test_acpi_powerdown);
    return g_test_run();
}
