/*
 * NBD servers for the tests; see nbdserver.h.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "nbdserver.h"

static const char *prog(NbdServerKind kind)
{
    return kind == NBD_SRV_NBDKIT ? "nbdkit" : "qemu-nbd";
}

bool nbd_server_available(NbdServerKind kind)
{
    g_autofree char *p = g_find_program_in_path(prog(kind));

    return p != NULL;
}

bool nbd_server_need(NbdServerKind kind)
{
    if (!nbd_server_available(kind)) {
        g_test_skip(kind == NBD_SRV_NBDKIT ? "nbdkit is not installed"
                                           : "qemu-nbd is not installed");
        return false;
    }
    return true;
}

/* A free TCP port on 127.0.0.1 (bound and released: good enough for a test). */
static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(bind(fd, (struct sockaddr *)&a, sizeof(a)), ==, 0);
    g_assert_cmpint(getsockname(fd, (struct sockaddr *)&a, &len), ==, 0);
    close(fd);
    return ntohs(a.sin_port);
}

/* Can we connect yet? */
static bool server_up(NbdServer *s)
{
    int fd;
    int r;

    if (s->tcp) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)s->port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};

        fd = socket(AF_INET, SOCK_STREAM, 0);
        r = connect(fd, (struct sockaddr *)&a, sizeof(a));
    } else {
        struct sockaddr_un a = {.sun_family = AF_UNIX};

        g_strlcpy(a.sun_path, s->sock, sizeof(a.sun_path));
        fd = socket(AF_UNIX, SOCK_STREAM, 0);
        r = connect(fd, (struct sockaddr *)&a, sizeof(a));
    }
    close(fd);
    return r == 0;
}

static void spawn(NbdServer *s)
{
    g_autofree char *size = g_strdup_printf("%" G_GUINT64_FORMAT, s->size);
    g_autofree char *port = g_strdup_printf("%d", s->port);
    GPtrArray *argv = g_ptr_array_new();
    GError *err = NULL;

    g_ptr_array_add(argv, (char *)prog(s->kind));
    if (s->kind == NBD_SRV_NBDKIT) {
        /*
         * foreground, the export name is ignored by nbdkit (any name works);
         * gone with us if we crash (a test or fuzz target that aborts)
         */
        g_ptr_array_add(argv, "-f");
        g_ptr_array_add(argv, "--exit-with-parent");
        if (s->tcp) {
            g_ptr_array_add(argv, "-i");
            g_ptr_array_add(argv, "127.0.0.1");
            g_ptr_array_add(argv, "-p");
            g_ptr_array_add(argv, port);
        } else {
            g_ptr_array_add(argv, "-U");
            g_ptr_array_add(argv, s->sock);
        }
        g_ptr_array_add(argv, "memory");
        g_ptr_array_add(argv, size);
    } else {
        /* persistent, several clients (the dataplane has its own connection) */
        g_ptr_array_add(argv, "-t");
        g_ptr_array_add(argv, "-e");
        g_ptr_array_add(argv, "8");
        g_ptr_array_add(argv, "-f");
        g_ptr_array_add(argv, "raw");
        g_ptr_array_add(argv, "-x");
        g_ptr_array_add(argv, "exp");
        if (s->tcp) {
            g_ptr_array_add(argv, "-b");
            g_ptr_array_add(argv, "127.0.0.1");
            g_ptr_array_add(argv, "-p");
            g_ptr_array_add(argv, port);
        } else {
            g_ptr_array_add(argv, "-k");
            g_ptr_array_add(argv, s->sock);
        }
        g_ptr_array_add(argv, s->image);
    }
    g_ptr_array_add(argv, NULL);
    g_assert_true(g_spawn_async(NULL, (char **)argv->pdata, NULL,
                                G_SPAWN_SEARCH_PATH | G_SPAWN_DO_NOT_REAP_CHILD |
                                    G_SPAWN_STDOUT_TO_DEV_NULL | G_SPAWN_STDERR_TO_DEV_NULL,
                                NULL, NULL, &s->pid, &err));
    g_assert_no_error(err);
    g_ptr_array_free(argv, true);
    for (int i = 0; i < 500 && !server_up(s); i++) {
        g_usleep(10000);
    }
    g_assert_true(server_up(s));
}

void nbd_server_start(NbdServer *s, NbdServerKind kind, bool tcp, uint64_t size)
{
    *s = (NbdServer){.kind = kind, .tcp = tcp, .size = size};
    s->dir = g_dir_make_tmp("vblk-nbd-XXXXXX", NULL);
    g_assert_nonnull(s->dir);
    s->sock = g_build_filename(s->dir, "sock", NULL);
    if (kind == NBD_SRV_QEMU_NBD) {
        int fd;

        s->image = g_build_filename(s->dir, "disk.img", NULL);
        fd = open(s->image, O_RDWR | O_CREAT, 0600);
        g_assert_cmpint(fd, >=, 0);
        g_assert_cmpint(ftruncate(fd, (off_t)size), ==, 0);
        close(fd);
    }
    if (tcp) {
        s->port = free_port();
        s->uri = g_strdup_printf("nbd://127.0.0.1:%d/exp", s->port);
        s->blockdev = g_strdup_printf("server.type=inet,server.host=127.0.0.1,server.port=%d,"
                                      "export=exp",
                                      s->port);
    } else {
        s->uri = g_strdup_printf("nbd+unix:///exp?socket=%s", s->sock);
        s->blockdev = g_strdup_printf("server.type=unix,server.path=%s,export=exp", s->sock);
    }
    spawn(s);
}

void nbd_server_kill(NbdServer *s)
{
    if (s->pid) {
        kill(s->pid, SIGKILL);
        waitpid(s->pid, NULL, 0);
        g_spawn_close_pid(s->pid);
        s->pid = 0;
    }
    if (!s->tcp) {
        unlink(s->sock);
    }
}

void nbd_server_restart(NbdServer *s, uint64_t size)
{
    nbd_server_kill(s);
    s->size = size;
    spawn(s);
}

void nbd_server_free(NbdServer *s)
{
    nbd_server_kill(s);
    if (s->image) {
        unlink(s->image);
    }
    if (s->dir) {
        rmdir(s->dir);
    }
    g_free(s->dir);
    g_free(s->sock);
    g_free(s->image);
    g_free(s->uri);
    g_free(s->blockdev);
    *s = (NbdServer){0};
}

/* ---- garbage ---- */

struct NbdGarbage {
    int lfd;
    int stop[2];
    char *dir;
    char *path;
    size_t nbytes;
    GThread *thread;
};

static gpointer garbage_thread(gpointer opaque)
{
    NbdGarbage *g = opaque;
    GRand *r = g_rand_new_with_seed(42);
    uint8_t *buf = g_malloc(g->nbytes + 16);

    /* A valid greeting first, so the client gets further than the magic. */
    memcpy(buf, "NBDMAGICIHAVEOPT", 16);
    for (size_t i = 16; i < g->nbytes + 16; i++) {
        buf[i] = (uint8_t)g_rand_int(r);
    }
    for (;;) {
        fd_set fds;
        int c;

        FD_ZERO(&fds);
        FD_SET(g->lfd, &fds);
        FD_SET(g->stop[0], &fds);
        if (select(MAX(g->lfd, g->stop[0]) + 1, &fds, NULL, NULL, NULL) < 0 ||
            FD_ISSET(g->stop[0], &fds)) {
            break;
        }
        c = accept(g->lfd, NULL, NULL);
        if (c >= 0) {
            if (send(c, buf, g->nbytes + 16, MSG_NOSIGNAL) < 0) {
                /* the client went away first: fine */
            }
            g_usleep(20000);
            close(c);
        }
    }
    g_free(buf);
    g_rand_free(r);
    return NULL;
}

NbdGarbage *nbd_garbage_new(const char *tag, size_t nbytes)
{
    NbdGarbage *g = g_new0(NbdGarbage, 1);
    struct sockaddr_un a = {.sun_family = AF_UNIX};

    g->dir = g_dir_make_tmp("vblk-nbdg-XXXXXX", NULL);
    g->path = g_build_filename(g->dir, tag, NULL);
    g->nbytes = nbytes;
    g_strlcpy(a.sun_path, g->path, sizeof(a.sun_path));
    g->lfd = socket(AF_UNIX, SOCK_STREAM, 0);
    g_assert_cmpint(bind(g->lfd, (struct sockaddr *)&a, sizeof(a)), ==, 0);
    g_assert_cmpint(listen(g->lfd, 4), ==, 0);
    g_assert_cmpint(pipe(g->stop), ==, 0);
    g->thread = g_thread_new("nbd-garbage", garbage_thread, g);
    return g;
}

const char *nbd_garbage_path(NbdGarbage *g)
{
    return g->path;
}

void nbd_garbage_free(NbdGarbage *g)
{
    if (write(g->stop[1], "x", 1) < 0) {
        g_assert_not_reached();
    }
    g_thread_join(g->thread);
    close(g->lfd);
    close(g->stop[0]);
    close(g->stop[1]);
    unlink(g->path);
    rmdir(g->dir);
    g_free(g->path);
    g_free(g->dir);
    g_free(g);
}
