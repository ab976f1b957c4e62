/*
 * vblk-storage-daemon exporting one remote disk over vhost-user-blk, for
 * the export tests (vuexport.h).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <fcntl.h>
#include <linux/virtio_blk.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "vuexport.h"
#include "vufront.h"

GPid vu_spawn_logged(const char *const *argv, const char *log)
{
    int logfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    GError *err = NULL;
    GPid pid = 0;

    g_assert_cmpint(logfd, >=, 0);
    g_assert_true(g_spawn_async_with_fds(NULL, (char **)argv, NULL,
                                         G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL,
                                         NULL, NULL, &pid, -1, -1, logfd, &err));
    g_assert_no_error(err);
    close(logfd);
    return pid;
}

const char *vu_daemon_object;

VuDaemon *vu_daemon_start(const char *dir, const char *blockdev, const char *node, bool dataplane,
                          bool qmp)
{
    VuDaemon *dm = g_new0(VuDaemon, 1);
    const char *exe = g_getenv("VBLK_STORAGE_DAEMON");
    g_autofree char *ex = NULL, *chardev = NULL;

    dm->qmp_fd = -1;
    dm->sock = g_build_filename(dir, "vu.sock", NULL);
    dm->pidfile = g_build_filename(dir, "pid", NULL);
    dm->log = g_build_filename(dir, "stderr", NULL);
    unlink(dm->pidfile);
    ex = g_strdup_printf("type=vhost-user-blk,id=exp0,node-name=%s,addr.type=unix,addr.path=%s,"
                         "writable=on,num-queues=2,x-data-plane=%s",
                         node, dm->sock, dataplane ? "on" : "off");
    if (qmp) {
        dm->qmp = g_build_filename(dir, "qmp.sock", NULL);
        unlink(dm->qmp);
        chardev = g_strdup_printf("socket,id=qmp0,path=%s,server=on,wait=off", dm->qmp);
    }
    {
        g_autoptr(GPtrArray) argv = g_ptr_array_new();

        g_ptr_array_add(argv, (char *)(exe ? exe : "vblk-storage-daemon"));
        if (vu_daemon_object) {
            g_ptr_array_add(argv, "--object");
            g_ptr_array_add(argv, (char *)vu_daemon_object);
        }
        g_ptr_array_add(argv, "--blockdev");
        g_ptr_array_add(argv, (char *)blockdev);
        g_ptr_array_add(argv, "--export");
        g_ptr_array_add(argv, ex);
        g_ptr_array_add(argv, "--pidfile");
        g_ptr_array_add(argv, dm->pidfile);
        if (qmp) {
            g_ptr_array_add(argv, "--chardev");
            g_ptr_array_add(argv, chardev);
            g_ptr_array_add(argv, "--monitor");
            g_ptr_array_add(argv, "chardev=qmp0");
        }
        g_ptr_array_add(argv, NULL);
        dm->pid = vu_spawn_logged((const char *const *)argv->pdata, dm->log);
    }
    /* The pidfile is written once the export listens. */
    for (int i = 0; i < 3000 && !g_file_test(dm->pidfile, G_FILE_TEST_EXISTS); i++) {
        g_usleep(10000);
    }
    if (!g_file_test(dm->pidfile, G_FILE_TEST_EXISTS)) {
        g_autofree char *log = NULL;

        g_file_get_contents(dm->log, &log, NULL, NULL);
        g_error("the daemon did not start: %s", log ? log : "");
    }
    return dm;
}

void vu_daemon_stop(VuDaemon *dm)
{
    g_autofree char *log = NULL;
    int status;

    if (dm->qmp_fd >= 0) {
        close(dm->qmp_fd);
    }
    kill(dm->pid, SIGTERM);
    g_assert_cmpint(waitpid(dm->pid, &status, 0), ==, dm->pid);
    g_spawn_close_pid(dm->pid);
    g_file_get_contents(dm->log, &log, NULL, NULL);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        g_printerr("daemon log:\n%s\n", log ? log : "");
    }
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    g_assert_null(strstr(log ? log : "", "Sanitizer"));
    g_assert_null(strstr(log ? log : "", "runtime error"));
    unlink(dm->sock);
    unlink(dm->pidfile);
    unlink(dm->log);
    if (dm->qmp) {
        unlink(dm->qmp);
    }
    g_free(dm->sock);
    g_free(dm->qmp);
    g_free(dm->pidfile);
    g_free(dm->log);
    g_free(dm);
}

/* The next QMP line that is not an event (events come and go with a switch). */
static char *qmp_reply(int fd)
{
    for (;;) {
        GString *line = g_string_new(NULL);
        char c;

        while (fe_read_full(fd, &c, 1, 10000) && c != '\n') {
            g_string_append_c(line, c);
        }
        g_assert_cmpuint(line->len, >, 0);
        if (!strstr(line->str, "\"event\"")) {
            return g_string_free(line, FALSE);
        }
        g_string_free(line, TRUE);
    }
}

/* Send @cmd on @fd; its reply must carry @want. */
static void qmp_expect(int fd, const char *cmd, const char *want)
{
    g_autofree char *reply = NULL;

    g_assert_cmpint(write(fd, cmd, strlen(cmd)), ==, (ssize_t)strlen(cmd));
    reply = qmp_reply(fd);
    if (!strstr(reply, want)) {
        g_error("QMP %s: got %s, want %s", cmd, reply, want);
    }
}

void vu_daemon_set_dataplane(VuDaemon *dm, bool on)
{
    g_autofree char *set = NULL;

    g_assert_nonnull(dm->qmp);
    if (dm->qmp_fd < 0) {
        g_autofree char *greeting = NULL;

        dm->qmp_fd = fe_connect(dm->qmp);
        greeting = qmp_reply(dm->qmp_fd);
        g_assert_nonnull(strstr(greeting, "\"QMP\""));
        qmp_expect(dm->qmp_fd, "{\"execute\": \"qmp_capabilities\"}\n", "\"return\"");
    }
    set = g_strdup_printf("{\"execute\": \"qom-set\", \"arguments\": {\"path\": "
                          "\"/exports/exp0\", \"property\": \"x-data-plane\", \"value\": %s}}\n",
                          on ? "true" : "false");
    qmp_expect(dm->qmp_fd, set, "\"return\"");
    qmp_expect(dm->qmp_fd,
               "{\"execute\": \"qom-get\", \"arguments\": {\"path\": \"/exports/exp0\", "
               "\"property\": \"x-data-plane\"}}\n",
               on ? "true" : "false");
}

void vu_pattern(uint8_t *b, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++) {
        b[i] = (uint8_t)(i * 29 + seed + (i >> 10));
    }
}

void vu_export_check_both_paths(const char *dir, const char *blockdev, const char *node,
                                uint64_t disk_size)
{
    static uint8_t w[65536], r[65536], zero[4096];

    for (int pass = 0; pass < 2; pass++) {
        bool dataplane = pass == 0;
        VuDaemon *dm = vu_daemon_start(dir, blockdev, node, dataplane, false);
        Fe *fe = fe_open(dm->sock, 2);

        fe_start(fe, FE_NQ);
        if (pass == 1) {
            /* what the dataplane's daemon wrote, read by the block layer's */
            memset(r, 0, sizeof(r));
            g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 8, r, 65536), ==, VIRTIO_BLK_S_OK);
            vu_pattern(w, sizeof(w), 1);
            g_assert_cmpmem(r, 65536, w, 65536);
        }
        vu_pattern(w, sizeof(w), (uint8_t)(pass + 1));
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 8, w, 65536), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0), ==, VIRTIO_BLK_S_OK);
        memset(r, 0, sizeof(r));
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 8, r, 65536), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpmem(r, 65536, w, 65536);
        /* beyond the end: IOERR, no crash */
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, disk_size / 512, r, 512), ==,
                         VIRTIO_BLK_S_IOERR);
        if (fe->features & (1ull << VIRTIO_BLK_F_WRITE_ZEROES)) {
            struct virtio_blk_discard_write_zeroes seg = {.sector = 4096, .num_sectors = 8};

            g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 4096, w, 4096), ==, VIRTIO_BLK_S_OK);
            g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0, &seg, sizeof(seg)), ==,
                             VIRTIO_BLK_S_OK);
            g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 4096, r, 4096), ==, VIRTIO_BLK_S_OK);
            g_assert_cmpmem(r, 4096, zero, 4096);
        }
        if (pass == 0) {
            /* leave pass 1 its data at sector 8 */
            vu_pattern(w, sizeof(w), 1);
            g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 8, w, 65536), ==, VIRTIO_BLK_S_OK);
        }
        fe_close(fe);
        vu_daemon_stop(dm);
    }
}
