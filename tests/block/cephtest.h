/*
 * The RBD tests' link to the single-node test cluster of scripts/ceph-cluster:
 * find it, make and remove scratch images with the rbd tool, stop and start
 * its OSD for the fault tests.
 */
#ifndef VBLK_TESTS_CEPHTEST_H
#define VBLK_TESTS_CEPHTEST_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

/*
 * The cluster's ceph.conf ($VBLK_CEPH_CONF, else $VBLK_CEPH_DIR/ceph.conf,
 * else /tmp/vblk-ceph/ceph.conf) when the cluster answers; otherwise NULL
 * and a one-line reason in *@why (g_free both).
 */
char *ceph_test_conf(char **why);
/* Exit 77 (meson's skip) with the reason unless the cluster answers; returns its conf. */
char *ceph_test_conf_or_skip(void);
/* A new image of @size bytes (a multiple of 1 MiB) in pool "rbd"; returns its name (g_free). */
char *ceph_test_image_new(const char *conf, uint64_t size);
void ceph_test_image_remove(const char *conf, const char *image);
/*
 * The cephx key (base64) of client.@user of the cluster of @conf: from the
 * keyring scripts/ceph-cluster wrote next to the conf (client.USER.keyring),
 * or for "vblk-key" (no keyring file) from vblk-key.secret. NULL when there is
 * none (a cluster made without cephx users). g_free it.
 */
char *ceph_test_key(const char *conf, const char *user);
/* The path of @name in the directory of @conf (g_free). */
char *ceph_test_path(const char *conf, const char *name);
/* @key (base64, as ceph_test_key()) with one byte of its secret changed: a wrong key. */
char *ceph_test_wrong_key(const char *key);

/* Stop / start the OSD through scripts/ceph-cluster ($VBLK_CEPH_SCRIPT). */
bool ceph_test_osd(bool start);

#endif
