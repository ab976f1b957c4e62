/*
 * A virtio-blk device on a Ceph RBD disk, both request paths and the switch,
 * in-process: the test driver plays the guest, the request engine runs on
 * the dataplane's "rbd" IOQ (its own image handle; librbd's completions
 * reach the iothread through the IOQ's eventfd) and on the block layer's
 * rbd node. The cluster is scripts/ceph-cluster's (scripts/test-rbd starts
 * it); without one the test exits 77 with the reason.
 *
 * Checked: what one path wrote the other reads back, with multi-descriptor
 * requests (handed to librbd as one readv/writev); FLUSH, WRITE_ZEROES and
 * DISCARD with their status bytes; writes in flight across twenty switches
 * all complete once and land; the OSD stopped under the dataplane gives
 * IOERR (werror=report, rados_osd_op_timeout=3 in the filename) and the
 * dataplane works again once it is back.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <stdio.h>

#include "cephtest.h"
#include "ioq/ioq.h"
#include "pathfix.h"

static char *ceph_conf;

typedef struct Fix {
    char *image;
    PathFix p;
} Fix;

static void fix_init(Fix *f, const char *extra, bool dataplane)
{
    g_autofree char *opts = g_strdup_printf(
        "file=rbd:rbd/%%s:conf=%s%s,format=raw,cache=writeback,discard=unmap", ceph_conf, extra);

    f->image = ceph_test_image_new(ceph_conf, PATHFIX_SIZE);
    pathfix_init(&f->p, opts, f->image, "rbd-io", dataplane, 1000000);
    g_assert_true(f->p.dev.hi.rbd);
    g_assert_cmpstr(f->p.dev.swconf.ioq.engine, ==, "rbd");
}

static void fix_free(Fix *f)
{
    pathfix_free(&f->p);
    ceph_test_image_remove(ceph_conf, f->image);
    g_free(f->image);
}

static void test_paths(void)
{
    Fix f;
    IOQStats is;

    fix_init(&f, "", true);
    pathfix_check_paths(&f.p, &is);
    g_assert_cmpuint(is.bounces, ==, 0); /* several iovecs go to librbd as they are */
    fix_free(&f);
}

/* Writes in flight while the device switches, twenty times. */
static void test_switch_inflight(void)
{
    Fix f;

    fix_init(&f, "", false);
    pathfix_check_switch_inflight(&f.p);
    fix_free(&f);
}

static void osd_stop_start(bool down, void *opaque)
{
    (void)opaque;
    g_assert_true(ceph_test_osd(!down));
}

/* The OSD stops under the dataplane: IOERR (werror=report), then it comes back. */
static void test_dataplane_osd_stop(void)
{
    Fix f;

    if (!g_getenv("VBLK_CEPH_SCRIPT")) {
        g_test_skip("VBLK_CEPH_SCRIPT is not set");
        return;
    }
    fix_init(&f, ":rados_osd_op_timeout=3,werror=report,rerror=report", true);
    pathfix_check_outage(&f.p, osd_stop_start, NULL, 30, 0);
    fix_free(&f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    if (!ioq_have_rbd()) {
        printf("1..0 # SKIP rbd support not compiled in\n");
        return 77;
    }
    ceph_conf = ceph_test_conf_or_skip();
    g_test_add_func("/rbd-paths/rw", test_paths);
    g_test_add_func("/rbd-paths/switch-inflight", test_switch_inflight);
    g_test_add_func("/rbd-paths/fault/dataplane-osd-stop", test_dataplane_osd_stop);
    return g_test_run();
}
