/*
 * vblk-storage-daemon exporting a Ceph RBD node over vhost-user-blk, on
 * both paths (x-data-plane=on: the export's dataplane with its own librbd
 * image handle; off: the block layer), driven by the in-process front end
 * (vufront.h). Data written through the export is read back through it
 * and through a second daemon run on the other path; status bytes checked;
 * the daemon exits cleanly (status 0): the session of vuexport.h, which
 * test-nbd-vhost-user runs on NBD. The same session as the cephx user
 * client.vblk-key, whose key only --object secret gives (key-secret=): both
 * paths authenticate with it. A wrong key and a missing secret on the
 * command line: exit status 1 with one line, promptly. Uses
 * scripts/ceph-cluster's cluster;
 * exits 77 with the reason without one (or without librbd).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
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

/* Both paths as client.vblk-key, its key from --object secret,file=...,format=base64. */
static void test_export_key_secret(void)
{
    g_autofree char *key = ceph_test_key(ceph_conf, "vblk-key");
    g_autofree char *file = ceph_test_path(ceph_conf, "vblk-key.secret");
    g_autofree char *obj = NULL, *img = NULL, *bd = NULL;

    if (!key) {
        g_test_skip("the test cluster has no cephx users (an older scripts/ceph-cluster made it)");
        return;
    }
    obj = g_strdup_printf("secret,id=k0,file=%s,format=base64", file);
    img = ceph_test_image_new(ceph_conf, DISK_SIZE);
    bd = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,user=vblk-key,"
                         "key-secret=k0",
                         img, ceph_conf);
    vu_daemon_object = obj;
    vu_export_check_both_paths(tmpdir, bd, "r0", DISK_SIZE);
    vu_daemon_object = NULL;
    ceph_test_image_remove(ceph_conf, img);
}

/* The daemon with @object and @blockdev: exit 1, one line holding @want, in under 5 s. */
static void expect_cmdline_error(const char *object, const char *blockdev, const char *want)
{
    const char *exe = g_getenv("VBLK_STORAGE_DAEMON");
    /* timeout: a daemon that opened the node would serve on and never exit */
    const char *argv[] = {"timeout", "20", exe ? exe : "vblk-storage-daemon", "--object", object,
                          "--blockdev", blockdev, NULL};
    g_autofree char *out = NULL, *err_text = NULL;
    GError *err = NULL;
    int64_t t0 = g_get_monotonic_time();
    int status;

    g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out,
                               &err_text, &status, &err));
    g_assert_no_error(err);
    g_assert_cmpint(g_get_monotonic_time() - t0, <, 5 * G_USEC_PER_SEC);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 1);
    if (!strstr(err_text, want)) {
        g_error("got '%s', want '%s'", err_text, want);
    }
    g_assert_true(g_str_has_prefix(err_text, "vblk-storage-daemon: "));
    g_assert_nonnull(strchr(err_text, '\n'));
    g_assert_cmpuint(strlen(strchr(err_text, '\n')), ==, 1);
    g_assert_null(strstr(err_text, "Sanitizer"));
}

/* A wrong key (client.vblk's with one byte changed) and a secret that does not exist. */
static void test_cmdline_bad_secret(void)
{
    g_autofree char *key = ceph_test_key(ceph_conf, "vblk");
    g_autofree char *bad = NULL, *obj = NULL, *img = NULL, *bd = NULL, *bd2 = NULL;

    if (!key) {
        g_test_skip("the test cluster has no cephx users (an older scripts/ceph-cluster made it)");
        return;
    }
    bad = ceph_test_wrong_key(key);
    obj = g_strdup_printf("secret,id=k0,data=%s,format=base64", bad);
    img = ceph_test_image_new(ceph_conf, DISK_SIZE);
    bd = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,user=vblk,"
                         "key-secret=k0",
                         img, ceph_conf);
    bd2 = g_strdup_printf("driver=rbd,node-name=r0,pool=rbd,image=%s,conf=%s,user=vblk,"
                          "key-secret=k1",
                          img, ceph_conf);
    expect_cmdline_error(obj, bd, "error connecting to the cluster: Permission denied");
    expect_cmdline_error(obj, bd2, "No secret with id 'k1'");
    expect_cmdline_error("secret,id=k0,data=not-base64!,format=base64", bd, "not valid base64");
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
    g_test_add_func("/rbd-vhost-user/cephx/export-key-secret", test_export_key_secret);
    g_test_add_func("/rbd-vhost-user/cephx/cmdline-bad-secret", test_cmdline_bad_secret);
    ret = g_test_run();
    rmdir(tmpdir);
    return ret;
}
