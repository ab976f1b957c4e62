/*
 * vblk-storage-daemon exporting an NBD node over vhost-user-blk, on both
 * paths (x-data-plane=on: the export's dataplane with its own libnbd
 * connection; off: the block layer's nbd node) and across live switches,
 * driven by the in-process front end (vufront.h). Servers: nbdkit (memory,
 * unix socket) and qemu-nbd (file, 127.0.0.1), started by the test
 * (tests/block/nbdserver.h).
 *
 * Checked: data written through the export is read back through it, and
 * through a second daemon on the other path (vuexport.h, the session of
 * test-rbd-vhost-user); with one daemon switched between the paths over
 * QMP while the front end stays connected, every write made on either
 * path reads back on both, and what the export wrote is on the NBD server
 * (read back by a fresh daemon); status bytes checked; the daemons exit
 * cleanly (status 0). Skips, saying so, without nbdkit / qemu-nbd.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <linux/virtio_blk.h>
#include <string.h>
#include <unistd.h>

#include "nbdserver.h"
#include "vuexport.h"
#include "vufront.h"

#define DISK_SIZE (16u << 20)
#define ROUNDS    6

static char *tmpdir;

typedef struct Case {
    NbdServerKind kind;
    bool tcp;
} Case;

static char *nbd_blockdev(const NbdServer *srv)
{
    return g_strdup_printf("driver=nbd,node-name=n0,%s", srv->blockdev);
}

/* Two daemons, one per path, on the same export (vuexport.h). */
static void test_export(gconstpointer data)
{
    const Case *c = data;
    NbdServer srv;
    g_autofree char *bd = NULL;

    if (!nbd_server_need(c->kind)) {
        return;
    }
    nbd_server_start(&srv, c->kind, c->tcp, DISK_SIZE);
    bd = nbd_blockdev(&srv);
    vu_export_check_both_paths(tmpdir, bd, "n0", DISK_SIZE);
    nbd_server_free(&srv);
}

/* Round @k's 4 KiB at sector 64 + 8 * @k. */
static void round_data(uint8_t *b, unsigned k)
{
    vu_pattern(b, 4096, (uint8_t)(0x40 + k));
}

/*
 * One daemon switched dataplane -> block layer -> dataplane ... over QMP
 * with the front end connected: each round writes on the current path,
 * switches, and reads every round's data back on the new one.
 */
static void test_live_switch(gconstpointer data)
{
    const Case *c = data;
    NbdServer srv;
    g_autofree char *bd = NULL;
    uint8_t w[4096], r[4096];
    VuDaemon *dm;
    Fe *fe;

    if (!nbd_server_need(c->kind)) {
        return;
    }
    nbd_server_start(&srv, c->kind, c->tcp, DISK_SIZE);
    bd = nbd_blockdev(&srv);
    dm = vu_daemon_start(tmpdir, bd, "n0", true, true);
    fe = fe_open(dm->sock, 2);
    fe_start(fe, FE_NQ);
    for (unsigned round = 0; round < ROUNDS; round++) {
        bool on = round % 2 == 0; /* the path the write takes */

        round_data(w, round);
        g_assert_cmpuint(fe_io(fe, round % FE_NQ, VIRTIO_BLK_T_OUT, 64 + round * 8, w, 4096), ==,
                         VIRTIO_BLK_S_OK);
        g_assert_cmpuint(fe_io(fe, round % FE_NQ, VIRTIO_BLK_T_FLUSH, 0, NULL, 0), ==,
                         VIRTIO_BLK_S_OK);
        vu_daemon_set_dataplane(dm, !on);
        for (unsigned k = 0; k <= round; k++) {
            round_data(w, k);
            memset(r, 0, sizeof(r));
            g_assert_cmpuint(fe_io(fe, (round + k) % FE_NQ, VIRTIO_BLK_T_IN, 64 + k * 8, r, 4096),
                             ==, VIRTIO_BLK_S_OK);
            g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
        }
    }
    fe_close(fe);
    vu_daemon_stop(dm);

    /* On the server: a new daemon (block layer) reads every round's data. */
    dm = vu_daemon_start(tmpdir, bd, "n0", false, false);
    fe = fe_open(dm->sock, 2);
    fe_start(fe, FE_NQ);
    for (unsigned k = 0; k < ROUNDS; k++) {
        round_data(w, k);
        memset(r, 0, sizeof(r));
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 64 + k * 8, r, 4096), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    }
    fe_close(fe);
    vu_daemon_stop(dm);
    nbd_server_free(&srv);
}

int main(int argc, char **argv)
{
    static const Case nbdkit_unix = {NBD_SRV_NBDKIT, false};
    static const Case qemu_nbd_tcp = {NBD_SRV_QEMU_NBD, true};
    int ret;

    g_test_init(&argc, &argv, NULL);
    tmpdir = g_dir_make_tmp("vblk-nbd-vu-XXXXXX", NULL);
    g_assert_nonnull(tmpdir);
    g_test_add_data_func("/nbd-vhost-user/export-both-paths/nbdkit-unix", &nbdkit_unix,
                         test_export);
    g_test_add_data_func("/nbd-vhost-user/export-both-paths/qemu-nbd-tcp", &qemu_nbd_tcp,
                         test_export);
    g_test_add_data_func("/nbd-vhost-user/live-switch/nbdkit-unix", &nbdkit_unix,
                         test_live_switch);
    g_test_add_data_func("/nbd-vhost-user/live-switch/qemu-nbd-tcp", &qemu_nbd_tcp,
                         test_live_switch);
    ret = g_test_run();
    rmdir(tmpdir);
    g_free(tmpdir);
    return ret;
}
