/*
 * vblk-storage-daemon exporting a Ceph RBD node over vhost-user-blk, on
 * both paths (x-data-plane=on: the export's dataplane with its own librbd
 * image handle; off: the block layer), driven by the in-process front end
 * (vufront.h). Data written through the export is read back through it
 * and through a second daemon run on the other path; status bytes checked;
 * the daemon exits cleanly (status 0). Uses scripts/ceph-cluster's cluster;
 * exits 77 with the reason without one (or without librbd).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <linux/virtio_blk.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cephtest.h"
#include "ioq/ioq.h"
#include "vufront.h"

#define DISK_SIZE (16u << 20)

static char *ceph_conf, *tmpdir;

typedef struct Daemon {
    GPid pid;
    char *sock, *pidfile, *log;
} Daemon;

static Daemon *daemon_start(const char *image, bool dataplane)
{
    Daemon *dm = g_new0(Daemon, 1);
    const char *exe = g_getenv("VBLK_STORAGE_DAEMON");
    g_autofree char *bd = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s",
                                          image, ceph_conf);
    g_autofree char *ex = NULL;
    GError *err = NULL;
    int logfd;

    dm->sock = g_build_filename(tmpdir, "vu.sock", NULL);
    dm->pidfile = g_build_filename(tmpdir, "pid", NULL);
    dm->log = g_build_filename(tmpdir, "stderr", NULL);
    unlink(dm->pidfile);
    ex = g_strdup_printf("type=vhost-user-blk,id=exp0,node-name=r0,addr.type=unix,addr.path=%s,"
                         "writable=on,num-queues=2,x-data-plane=%s",
                         dm->sock, dataplane ? "on" : "off");
    {
        const char *argv[] = {exe ? exe : "vblk-storage-daemon", "--blockdev", bd, "--export", ex,
                              "--pidfile", dm->pidfile, NULL};

        logfd = open(dm->log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
        g_assert_cmpint(logfd, >=, 0);
        g_assert_true(g_spawn_async_with_fds(NULL, (char **)argv, NULL,
                                             G_SPAWN_DO_NOT_REAP_CHILD | G_SPAWN_STDOUT_TO_DEV_NULL,
                                             NULL, NULL, &dm->pid, -1, -1, logfd, &err));
        g_assert_no_error(err);
        close(logfd);
    }
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

static void daemon_stop(Daemon *dm)
{
    g_autofree char *log = NULL;
    int status;

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
    g_free(dm->sock);
    g_free(dm->pidfile);
    g_free(dm->log);
    g_free(dm);
}

static void pattern(uint8_t *b, size_t len, uint8_t seed)
{
    for (size_t i = 0; i < len; i++) {
        b[i] = (uint8_t)(i * 29 + seed + (i >> 10));
    }
}

static void test_export(void)
{
    g_autofree char *img = ceph_test_image_new(ceph_conf, DISK_SIZE);
    static uint8_t w[65536], r[65536], zero[4096];

    for (int pass = 0; pass < 2; pass++) {
        bool dataplane = pass == 0;
        Daemon *dm = daemon_start(img, dataplane);
        Fe *fe = fe_open(dm->sock, 2);

        fe_start(fe, FE_NQ);
        if (pass == 1) {
            /* what the dataplane's daemon wrote, read by the block layer's */
            memset(r, 0, sizeof(r));
            g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 8, r, 65536), ==, VIRTIO_BLK_S_OK);
            pattern(w, sizeof(w), 1);
            g_assert_cmpmem(r, 65536, w, 65536);
        }
        pattern(w, sizeof(w), (uint8_t)(pass + 1));
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 8, w, 65536), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0), ==, VIRTIO_BLK_S_OK);
        memset(r, 0, sizeof(r));
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 8, r, 65536), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpmem(r, 65536, w, 65536);
        /* beyond the end: IOERR, no crash */
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, DISK_SIZE / 512, r, 512), ==,
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
            pattern(w, sizeof(w), 1);
            g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 8, w, 65536), ==, VIRTIO_BLK_S_OK);
        }
        fe_close(fe);
        daemon_stop(dm);
    }
    ceph_test_image_remove(ceph_conf, img);
}

int main(int argc, char **argv)
{
    int ret;

    g_test_init(&argc, &argv, NULL);
    if (!ioq_have_rbd()) {
        printf("1..0 # SKIP rbd support not compiled in\n");
        return 77;
    }
    ceph_conf = ceph_test_conf_or_skip();
    tmpdir = g_dir_make_tmp("vblk-rbd-vu-XXXXXX", NULL);
    g_assert_nonnull(tmpdir);
    g_test_add_func("/rbd-vhost-user/export-both-paths", test_export);
    ret = g_test_run();
    rmdir(tmpdir);
    return ret;
}
