/*
 * A virtio-blk device on an NBD disk, both request paths and the switch,
 * in-process: the test driver plays the guest, the request engine runs on
 * the dataplane's "nbd" IOQ (its own connection, polled in the iothread)
 * and on the block layer's nbd node. Servers: nbdkit (memory, unix socket)
 * and qemu-nbd (file, 127.0.0.1), started by the test.
 *
 * Checked: what one path wrote the other reads back, with multi-descriptor
 * requests (bounced into one NBD command); FLUSH, WRITE_ZEROES and DISCARD;
 * writes in flight across twenty switches all complete once and land; a
 * server killed under the dataplane gives IOERR (werror=report, no
 * reconnect-delay) and the dataplane works again once it is back; with a
 * reconnect-delay the dataplane's requests wait for the server instead.
 * Skips, saying so, without nbdkit / qemu-nbd.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <linux/virtio_blk.h>

#include "nbdserver.h"
#include "pathfix.h"

typedef struct Fix {
    NbdServer srv;
    PathFix p;
} Fix;

static void fix_init(Fix *f, NbdServerKind kind, bool tcp, const char *extra, bool dataplane)
{
    g_autofree char *opts = g_strdup_printf("file=%%s,format=raw,cache=writeback%s", extra);

    nbd_server_start(&f->srv, kind, tcp, PATHFIX_SIZE);
    pathfix_init(&f->p, opts, f->srv.uri, "nbd-io", dataplane, 400000);
    g_assert_true(f->p.dev.hi.nbd);
    g_assert_cmpstr(f->p.dev.swconf.ioq.engine, ==, "nbd");
}

static void fix_free(Fix *f)
{
    pathfix_free(&f->p);
    nbd_server_free(&f->srv);
}

typedef struct Case {
    NbdServerKind kind;
    bool tcp;
} Case;

static void test_paths(gconstpointer data)
{
    const Case *c = data;
    Fix f;
    IOQStats is;

    if (!nbd_server_need(c->kind)) {
        return;
    }
    fix_init(&f, c->kind, c->tcp, "", true);
    pathfix_check_paths(&f.p, &is);
    g_assert_cmpuint(is.bounces, >, 0); /* the multi-descriptor requests */
    fix_free(&f);
}

/* Writes in flight while the device switches, twenty times. */
static void test_switch_inflight(gconstpointer data)
{
    const Case *c = data;
    Fix f;

    if (!nbd_server_need(c->kind)) {
        return;
    }
    fix_init(&f, c->kind, c->tcp, "", false);
    pathfix_check_switch_inflight(&f.p);
    fix_free(&f);
}

static void kill_or_restart(bool down, void *opaque)
{
    Fix *f = opaque;

    if (down) {
        nbd_server_kill(&f->srv);
    } else {
        nbd_server_restart(&f->srv, PATHFIX_SIZE);
    }
}

/* The server dies under the dataplane: IOERR (no reconnect-delay), then it comes back. */
static void test_dataplane_kill(void)
{
    Fix f;

    if (!nbd_server_need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    fix_init(&f, NBD_SRV_QEMU_NBD, false, ",werror=report", true);
    pathfix_check_outage(&f.p, kill_or_restart, &f, 50, 100000);
    fix_free(&f);
}

/* reconnect-delay: the dataplane's requests wait for the server, then succeed. */
static void test_dataplane_reconnect(void)
{
    uint8_t w[4096], r[4096];
    uint64_t wb, rb;
    int hd;
    Fix f;

    if (!nbd_server_need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    fix_init(&f, NBD_SRV_QEMU_NBD, true, ",werror=report,reconnect-delay=10", true);
    wb = testdrv_alloc(f.p.dev.d, 4096, 4096);
    rb = testdrv_alloc(f.p.dev.d, 4096, 4096);
    pathfix_pattern(w, sizeof(w), 11);
    testdrv_memwrite(f.p.dev.d, wb, w, sizeof(w));
    nbd_server_kill(&f.srv);
    hd = pathfix_submit(&f.p, VIRTIO_BLK_T_OUT, 24, wb, 4096, 1);
    testvq_kick(f.p.dev.tvq[0]);
    g_usleep(500000);
    nbd_server_restart(&f.srv, PATHFIX_SIZE);
    g_assert_cmpuint(pathfix_wait(&f.p, hd), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(pathfix_req(&f.p, VIRTIO_BLK_T_IN, 24, rb, 4096, 1), ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f.p.dev.d, rb, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    fix_free(&f);
}

int main(int argc, char **argv)
{
    static const Case cases[] = {{NBD_SRV_NBDKIT, false}, {NBD_SRV_QEMU_NBD, true}};

    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/nbd-paths/rw/nbdkit-unix", &cases[0], test_paths);
    g_test_add_data_func("/nbd-paths/rw/qemu-nbd-tcp", &cases[1], test_paths);
    g_test_add_data_func("/nbd-paths/switch-inflight/nbdkit-unix", &cases[0],
                         test_switch_inflight);
    g_test_add_data_func("/nbd-paths/switch-inflight/qemu-nbd-tcp", &cases[1],
                         test_switch_inflight);
    g_test_add_func("/nbd-paths/fault/dataplane-kill", test_dataplane_kill);
    g_test_add_func("/nbd-paths/fault/dataplane-reconnect", test_dataplane_reconnect);
    return g_test_run();
}
