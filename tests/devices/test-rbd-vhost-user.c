/*
 * vblk-storage-daemon exporting a Ceph RBD node over vhost-user-blk, on
 * both paths (x-data-plane=on: the export's dataplane with its own librbd
 * image handle; off: the block layer), driven by the in-process front end
 * (vufront.h). Data written through the export is read back through it
 * and through a second daemon run on the other path; status bytes checked;
 * the daemon exits cleanly (status 0): the session of vuexport.h, which
 * test-nbd-vhost-user runs on NBD. Uses scripts/ceph-cluster's cluster;
 * exits 77 with the reason without one (or without librbd).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <stdio.h>
#include <unistd.h>

#include "cephtest.h"
#include "ioq/ioq.h"
#include "vuexport.h"

#define DISK_SIZE (16u << 20)

static char *ceph_conf, *tmpdir;

static void test_export(void)
{
    g_autofree char *img = ceph_test_image_new(ceph_conf, DISK_SIZE);
    g_autofree char *bd = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s",
                                          img, ceph_conf);

    vu_export_check_both_paths(tmpdir, bd, "r0", DISK_SIZE);
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
