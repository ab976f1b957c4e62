/*
 * A vblk process for the KVM tests: see vblkproc.h.
 */
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <glib/gstdio.h>
#include <stdarg.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vblkproc.h"

bool vblkproc_kvm_usable(void)
{
    int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);

    if (fd < 0) {
        g_test_skip("/dev/kvm is not usable here; tiny-guest tests skipped");
        return false;
    }
    close(fd);
    return true;
}

bool vblkproc_usable(void)
{
    if (!g_getenv("VBLK_BIN")) {
        g_test_skip("VBLK_BIN not set");
        return false;
    }
    return vblkproc_kvm_usable();
}

char *vblkproc_bzimage(const char *dir, const char *name, const uint8_t *code, size_t clen,
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

void vblkproc_remove_dir(const char *dir)
{
    GDir *d = g_dir_open(dir, 0, NULL);
    const char *name;

    g_assert_nonnull(d);
    while ((name = g_dir_read_name(d))) {
        g_autofree char *path = g_build_filename(dir, name, NULL);

        g_assert_cmpint(g_unlink(path), ==, 0);
    }
    g_dir_close(d);
    g_assert_cmpint(g_rmdir(dir), ==, 0);
}

void vblkproc_init(VblkProc *p, const char *tmpl)
{
    memset(p, 0, sizeof(*p));
    p->dir = g_dir_make_tmp(tmpl, NULL);
    g_assert_nonnull(p->dir);
    p->log = g_build_filename(p->dir, "serial.log", NULL);
    p->fd = -1;
    p->pid = -1;
    p->acc = g_string_new(NULL);
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

/* g_spawn child setup: stderr into the file named by @opaque. */
static void stderr_to_file(gpointer opaque)
{
    int fd = open(opaque, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);

    if (fd >= 0) {
        dup2(fd, 2);
        close(fd);
    }
}

void vblkproc_start(VblkProc *p, bool quiet, const char *arg, ...)
{
    g_autofree char *sock = g_build_filename(p->dir, "qmp.sock", NULL);
    g_autofree char *qmp_arg = g_strdup_printf("unix:%s,server=on,wait=off", sock);
    g_autoptr(GPtrArray) argv = g_ptr_array_new();
    const char *bin = g_getenv("VBLK_BIN");
    GSpawnFlags flags = G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDIN_FROM_DEV_NULL;
    va_list ap;

    g_assert_nonnull(bin);
    g_ptr_array_add(argv, (char *)bin);
    va_start(ap, arg);
    for (const char *a = arg; a; a = va_arg(ap, const char *)) {
        g_ptr_array_add(argv, (char *)a);
    }
    va_end(ap);
    g_ptr_array_add(argv, "-qmp");
    g_ptr_array_add(argv, qmp_arg);
    g_ptr_array_add(argv, NULL);
    if (quiet) {
        flags |= G_SPAWN_STDERR_TO_DEV_NULL;
    }
    g_assert_true(g_spawn_async(NULL, (char **)argv->pdata, NULL, flags,
                                p->err_log ? stderr_to_file : NULL, p->err_log, &p->pid, NULL));
    p->fd = qmp_connect(sock);
    g_assert_cmpint(p->fd, >=, 0);
    g_free(vblkproc_wait(p, "QMP"));
    vblkproc_expect(p, "qmp_capabilities", "return");
}

void vblkproc_send(VblkProc *p, const char *cmd)
{
    g_autofree char *line = g_strdup_printf("{\"execute\": \"%s\"}\n", cmd);

    g_assert_cmpint(write(p->fd, line, strlen(line)), ==, (ssize_t)strlen(line));
}

char *vblkproc_wait(VblkProc *p, const char *needle)
{
    char buf[512];
    ssize_t r;

    for (;;) {
        char *hit = strstr(p->acc->str, needle);
        char *eol = hit ? strchr(hit, '\n') : NULL;

        if (eol) {
            gsize len = eol + 1 - p->acc->str;
            char *out = g_strndup(p->acc->str, len);

            g_string_erase(p->acc, 0, len);
            return out;
        }
        struct pollfd pfd = {.fd = p->fd, .events = POLLIN};

        if (poll(&pfd, 1, 60000) != 1) {
            g_error("no QMP \"%s\" within 60 s; got: %s", needle, p->acc->str);
        }
        r = read(p->fd, buf, sizeof(buf));
        if (r <= 0) {
            g_error("QMP closed before \"%s\"; got: %s", needle, p->acc->str);
        }
        g_string_append_len(p->acc, buf, r);
    }
}

void vblkproc_expect(VblkProc *p, const char *cmd, const char *needle)
{
    vblkproc_send(p, cmd);
    g_free(vblkproc_wait(p, needle));
}

void vblkproc_end(VblkProc *p, char **serial)
{
    g_assert_cmpint(vblkproc_end_status(p, serial, NULL), ==, 0);
}

/*
 * Wait for vblk to end, at most 90 s (a slow nested L1 included). One that
 * does not is a failure, never a hang of the suite: SIGUSR2 has it dump every
 * thread's state on its stderr first, then SIGKILL.
 */
static void vblkproc_reap(VblkProc *p, int *status)
{
    gint64 deadline = g_get_monotonic_time() + 90 * G_USEC_PER_SEC;
    pid_t r;

    while ((r = waitpid(p->pid, status, WNOHANG)) == 0 && g_get_monotonic_time() < deadline) {
        g_usleep(10000);
    }
    if (r == p->pid) {
        return;
    }
    kill(p->pid, SIGUSR2);
    g_usleep(3 * G_USEC_PER_SEC);
    kill(p->pid, SIGKILL);
    waitpid(p->pid, status, 0);
    g_error("vblk (pid %d) did not end within 90 s of its test's end; its state is above",
            (int)p->pid);
}

int vblkproc_end_status(VblkProc *p, char **serial, char **err)
{
    int status;

    close(p->fd);
    vblkproc_reap(p, &status);
    g_spawn_close_pid(p->pid);
    if (serial) {
        g_assert_true(g_file_get_contents(p->log, serial, NULL, NULL));
    }
    if (err) {
        g_assert_nonnull(p->err_log);
        g_assert_true(g_file_get_contents(p->err_log, err, NULL, NULL));
    }
    vblkproc_remove_dir(p->dir);
    g_free(p->dir);
    g_free(p->log);
    g_free(p->err_log);
    g_string_free(p->acc, TRUE);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}
