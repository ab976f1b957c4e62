/*
 * Creating a BlockBackend from -drive or -blockdev options.
 *
 * -drive is translated into the blockdev shape QEMU builds for it:
 *   driver=raw (format), file.driver=file|host_device|null-co|null-aio,
 *   file.filename=..., file.aio=..., plus cache.direct / cache.no-flush /
 *   read-only / discard on the top node, which its child inherits.
 * The guest-visible write cache (WCE) comes from the cache mode:
 *   none/writeback/unsafe -> on, writethrough/directsync -> off.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <sys/stat.h>

#include "backend-int.h"

typedef struct CacheMode {
    const char *name;
    bool direct, no_flush, wce;
} CacheMode;

static const CacheMode cache_modes[] = {
    {"none", true, false, true},           {"writeback", false, false, true},
    {"writethrough", false, false, false}, {"directsync", true, false, false},
    {"unsafe", false, true, true},
};

/* Keys of -drive that belong to the VMM (device wiring), not to the block layer. */
static const char *const vmm_keys[] = {"id", "if", "index", "media", "bus", "unit", "serial"};

/* Context: any thread */
GHashTable *blk_opts_parse(const char *str)
{
    GHashTable *t = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    g_auto(GStrv) parts = g_strsplit(str ? str : "", ",", -1);

    for (int i = 0; parts[i]; i++) {
        char *eq = strchr(parts[i], '=');

        if (!*parts[i]) {
            continue;
        }
        if (eq) {
            g_hash_table_replace(t, g_strndup(parts[i], eq - parts[i]), g_strdup(eq + 1));
        } else {
            g_hash_table_replace(t, g_strdup(parts[i]), g_strdup("on"));
        }
    }
    return t;
}

static BlockOpts *opts_from_table(GHashTable *t)
{
    BlockOpts *o = block_opts_new();
    GHashTableIter it;
    gpointer k, v;

    if (t) {
        g_hash_table_iter_init(&it, t);
        while (g_hash_table_iter_next(&it, &k, &v)) {
            block_opts_set(o, k, v ? v : "");
        }
    }
    return o;
}

static bool drive_cache(BlockOpts *in, BlockOpts *out, bool *wce, GError **errp)
{
    const char *mode = block_opts_get(in, "cache");
    const CacheMode *cm = &cache_modes[1]; /* writeback */
    bool direct, no_flush;

    if (mode) {
        cm = NULL;
        for (unsigned i = 0; i < G_N_ELEMENTS(cache_modes); i++) {
            if (!strcmp(mode, cache_modes[i].name)) {
                cm = &cache_modes[i];
            }
        }
        if (!cm) {
            g_set_error(errp, BLOCK_ERROR, EINVAL, "invalid cache option");
            return false;
        }
    }
    if (!block_opts_get_bool(in, "cache.direct", cm->direct, &direct, errp) ||
        !block_opts_get_bool(in, "cache.no-flush", cm->no_flush, &no_flush, errp) ||
        !block_opts_get_bool(in, "cache.writeback", cm->wce, wce, errp)) {
        return false;
    }
    block_opts_set(out, "cache.direct", direct ? "on" : "off");
    block_opts_set(out, "cache.no-flush", no_flush ? "on" : "off");
    return true;
}

static bool drive_file(BlockOpts *in, BlockOpts *out, GError **errp)
{
    const char *file = block_opts_get(in, "file");
    const char *fmt = block_opts_get(in, "format");
    const char *aio = block_opts_get(in, "aio");
    struct stat st;

    if (!file || !*file) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'file' is missing");
        return false;
    }
    if (fmt && strcmp(fmt, "raw") != 0) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "'%s' invalid format", fmt);
        return false;
    }
    block_opts_set(out, "driver", "raw");
    if (g_str_has_prefix(file, "null-co://") || g_str_has_prefix(file, "null-aio://")) {
        static const char *const null_keys[] = {"read-zeroes", "size", "latency-ns"};

        block_opts_set(out, "file.driver",
                       g_str_has_prefix(file, "null-co") ? "null-co" : "null-aio");
        for (unsigned i = 0; i < G_N_ELEMENTS(null_keys); i++) {
            const char *v = block_opts_get(in, null_keys[i]);

            if (v) {
                g_autofree char *k = g_strdup_printf("file.%s", null_keys[i]);

                block_opts_set(out, k, v);
            }
        }
        return true;
    }
    block_opts_set(out, "file.driver",
                   stat(file, &st) == 0 && S_ISBLK(st.st_mode) ? "host_device" : "file");
    block_opts_set(out, "file.filename", file);
    if (aio) {
        block_opts_set(out, "file.aio", aio);
    }
    return true;
}

static bool drive_error_policy(BlockOpts *in, BlockErrorPolicy *r, BlockErrorPolicy *w,
                               GError **errp)
{
    const char *re = block_opts_get(in, "rerror");
    const char *we = block_opts_get(in, "werror");

    *r = BLOCK_ERR_REPORT;
    *w = BLOCK_ERR_ENOSPC;
    if (re && (!blk_error_policy_parse(re, r, NULL) || *r == BLOCK_ERR_ENOSPC)) {
        /* QEMU accepts enospc for werror only */
        g_set_error(errp, BLOCK_ERROR, EINVAL, "'%s' invalid read error action", re);
        return false;
    }
    if (we && !blk_error_policy_parse(we, w, NULL)) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "'%s' invalid write error action", we);
        return false;
    }
    return true;
}

/* throttling.* keys, and the generic flags copied to the top node. */
static bool drive_misc(BlockOpts *in, BlockOpts *out, ThrottleLimits *tl, GError **errp)
{
    static const char *const copy[] = {"node-name", "discard", "detect-zeroes"};
    GHashTableIter it;
    gpointer k, v;
    bool ro = false, ro2 = false;

    if (!block_opts_get_bool(in, "readonly", false, &ro, errp) ||
        !block_opts_get_bool(in, "read-only", false, &ro2, errp)) {
        return false;
    }
    block_opts_set(out, "read-only", ro || ro2 ? "on" : "off");
    for (unsigned i = 0; i < G_N_ELEMENTS(copy); i++) {
        const char *val = block_opts_get(in, copy[i]);

        if (val) {
            block_opts_set(out, copy[i], val);
        }
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(vmm_keys); i++) {
        (void)block_opts_get(in, vmm_keys[i]);
    }
    throttle_limits_init(tl);
    g_hash_table_iter_init(&it, in->kv);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        bool known;

        if (!g_str_has_prefix(k, "throttling.")) {
            continue;
        }
        if (!throttle_limits_set_option(tl, (char *)k + strlen("throttling."), v, &known, errp)) {
            return false;
        }
        if (known) {
            g_hash_table_add(in->used, g_strdup(k));
        }
    }
    return block_opts_check_unused(in, errp) && throttle_limits_validate(tl, errp);
}

/* Context: main loop */
BlockBackend *blk_new_from_drive_opts(GHashTable *opts, EventLoop *loop, GError **errp)
{
    BlockOpts *in = opts_from_table(opts);
    BlockOpts *out = block_opts_new();
    BlockErrorPolicy rerr, werr;
    BlockBackend *blk = NULL;
    ThrottleLimits tl;
    BlockNode *root;
    bool wce = true;

    if (!drive_file(in, out, errp) || !drive_cache(in, out, &wce, errp) ||
        !drive_error_policy(in, &rerr, &werr, errp) || !drive_misc(in, out, &tl, errp)) {
        goto out;
    }
    root = bdrv_open(out, loop, false, errp);
    if (!root) {
        goto out;
    }
    blk = blk_new_with_root(root, loop, wce);
    blk_set_error_policy(blk, rerr, werr);
    if (throttle_limits_enabled(&tl)) {
        blk_set_io_limits(blk, &tl, NULL); /* validated above */
    }
out:
    block_opts_free(in);
    block_opts_free(out);
    return blk;
}

/* Context: main loop */
BlockBackend *blk_new_from_blockdev_opts(GHashTable *opts, EventLoop *loop, GError **errp)
{
    BlockOpts *in = opts_from_table(opts);
    BlockNode *root = bdrv_open(in, loop, false, errp);
    BlockBackend *blk = NULL;

    if (root) {
        /* -blockdev has no cache mode: the device's write-cache property decides */
        blk = blk_new_with_root(root, loop, true);
    }
    block_opts_free(in);
    return blk;
}
