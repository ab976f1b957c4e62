/*
 * See cephtest.h.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cephtest.h"

static bool run(char **argv, char **out)
{
    g_autofree char *err = NULL;
    int status = -1;

    GSpawnFlags flags = G_SPAWN_SEARCH_PATH | (out ? 0 : G_SPAWN_STDOUT_TO_DEV_NULL);

    if (!g_spawn_sync(NULL, argv, NULL, flags, NULL, NULL, out, &err, &status, NULL)) {
        return false;
    }
    return g_spawn_check_wait_status(status, NULL);
}

char *ceph_test_conf(char **why)
{
    const char *dir = g_getenv("VBLK_CEPH_DIR");
    g_autofree char *conf = g_strdup(g_getenv("VBLK_CEPH_CONF"));
    g_autofree char *rbd = g_find_program_in_path("rbd");

    if (!conf) {
        conf = g_build_filename(dir ? dir : "/tmp/vblk-ceph", "ceph.conf", NULL);
    }
    if (!rbd) {
        *why = g_strdup("the rbd tool (ceph-common) is not installed");
        return NULL;
    }
    if (access(conf, R_OK) != 0) {
        *why = g_strdup_printf("no Ceph test cluster (%s missing; run scripts/ceph-cluster start)",
                               conf);
        return NULL;
    }
    {
        char *argv[] = {"timeout", "20", "rbd", "-c", conf, "--client_mount_timeout=8",
                        "ls", "rbd", NULL};

        if (!run(argv, NULL)) {
            *why = g_strdup_printf("the Ceph test cluster of %s does not answer", conf);
            return NULL;
        }
    }
    return g_steal_pointer(&conf);
}

char *ceph_test_conf_or_skip(void)
{
    g_autofree char *why = NULL;
    char *conf = ceph_test_conf(&why);

    if (!conf) {
        printf("1..0 # SKIP %s\n", why);
        exit(77);
    }
    return conf;
}

char *ceph_test_image_new(const char *conf, uint64_t size)
{
    static unsigned n;
    char *name = g_strdup_printf("vblk-test-%d-%u", (int)getpid(), n++);
    g_autofree char *spec = g_strdup_printf("rbd/%s", name);
    g_autofree char *sz = g_strdup_printf("%" G_GUINT64_FORMAT "M", size >> 20);
    char *argv[] = {"rbd", "-c", (char *)conf, "create", "--size", sz, spec, NULL};

    g_assert_true(run(argv, NULL));
    return name;
}

void ceph_test_image_remove(const char *conf, const char *image)
{
    g_autofree char *spec = g_strdup_printf("rbd/%s", image);
    char *argv[] = {"rbd", "-c", (char *)conf, "--no-progress", "rm", spec, NULL};

    run(argv, NULL);
}

char *ceph_test_path(const char *conf, const char *name)
{
    g_autofree char *dir = g_path_get_dirname(conf);

    return g_build_filename(dir, name, NULL);
}

char *ceph_test_key(const char *conf, const char *user)
{
    g_autofree char *name = g_strdup_printf("client.%s.keyring", user);
    g_autofree char *path = ceph_test_path(conf, name);
    g_autofree char *text = NULL;
    g_auto(GStrv) lines = NULL;

    if (g_file_get_contents(path, &text, NULL, NULL)) {
        lines = g_strsplit(text, "\n", -1);
        for (unsigned i = 0; lines[i]; i++) {
            const char *l = g_strstrip(lines[i]);

            if (g_str_has_prefix(l, "key")) {
                const char *eq = strchr(l, '=');

                if (eq) {
                    return g_strstrip(g_strdup(eq + 1));
                }
            }
        }
        return NULL;
    }
    if (!strcmp(user, "vblk-key")) {
        g_free(path);
        path = ceph_test_path(conf, "vblk-key.secret");
        if (g_file_get_contents(path, &text, NULL, NULL)) {
            return g_strstrip(g_steal_pointer(&text));
        }
    }
    return NULL;
}

char *ceph_test_wrong_key(const char *key)
{
    char *k = g_strdup(key);

    /* base64 position 24 is in the 16 secret bytes (after 12 bytes of header) */
    g_assert_cmpuint(strlen(k), >, 30);
    k[24] = k[24] == 'A' ? 'B' : 'A';
    return k;
}

bool ceph_test_osd(bool start)
{
    const char *script = g_getenv("VBLK_CEPH_SCRIPT");
    char *argv[] = {(char *)script, start ? "start-osd" : "stop-osd", NULL};

    return script && run(argv, NULL);
}
