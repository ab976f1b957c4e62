/*
 * Creating a BlockBackend from -drive or -blockdev options.
 *
 * -drive (a BlockDriveConf from the command line, or the string keys of
 * blk_new_from_drive_opts) is translated into the blockdev shape QEMU
 * builds for it:
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
#include "util/thread-check.h"

/* QEMU's cache= modes; the one table (the command line uses it too). */
static const struct {
    const char *name;
    BlockCacheFlags flags;
} cache_modes[] = {
    {"none", {.writeback = true, .direct = true}},
    {"writeback", {.writeback = true}},
    {"writethrough", {0}},
    {"directsync", {.direct = true}},
    {"unsafe", {.writeback = true, .no_flush = true}},
};

/* Context: any thread */
bool blk_parse_cache_mode(const char *mode, BlockCacheFlags *flags, GError **errp)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(cache_modes); i++) {
        if (!strcmp(mode, cache_modes[i].name)) {
            *flags = cache_modes[i].flags;
            return true;
        }
    }
    g_set_error(errp, BLOCK_ERROR, EINVAL, "invalid cache option");
    return false;
}

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

/* cache=, then cache.direct / cache.no-flush / cache.writeback on top of it. */
static bool drive_cache(BlockOpts *in, BlockCacheFlags *c, GError **errp)
{
    const char *mode = block_opts_get(in, "cache");
    BlockCacheFlags cm;

    blk_parse_cache_mode("writeback", &cm, NULL);
    if (mode && !blk_parse_cache_mode(mode, &cm, errp)) {
        return false;
    }
    return block_opts_get_bool(in, "cache.direct", cm.direct, &c->direct, errp) &&
           block_opts_get_bool(in, "cache.no-flush", cm.no_flush, &c->no_flush, errp) &&
           block_opts_get_bool(in, "cache.writeback", cm.writeback, &c->writeback, errp);
}

/* The string form of the keys that BlockDriveConf holds. */
static bool drive_conf_parse(BlockOpts *in, BlockDriveConf *c, GError **errp)
{
    static const char *const aio[] = {"threads", "native", "io_uring"};
    const char *fmt = block_opts_get(in, "format");
    const char *v;
    bool ro = false, ro2 = false;

    *c = (BlockDriveConf){.file = block_opts_get(in, "file")};
    if (!c->file || !*c->file) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'file' is missing");
        return false;
    }
    if (fmt && strcmp(fmt, "raw") != 0) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "'%s' invalid format", fmt);
        return false;
    }
    if (!drive_cache(in, &c->cache, errp)) {
        return false;
    }
    v = block_opts_get(in, "aio");
    for (unsigned i = 0; v && i < G_N_ELEMENTS(aio); i++) {
        if (!strcmp(v, aio[i])) {
            c->aio = (BlockAioMode)i;
            v = NULL;
        }
    }
    if (v) {
        /* the file node's message, as when it checked the key itself */
        g_set_error(errp, BLOCK_ERROR, EINVAL, "file: Parameter 'aio' does not accept value '%s'",
                    v);
        return false;
    }
    if (!block_opts_get_bool(in, "readonly", false, &ro, errp) ||
        !block_opts_get_bool(in, "read-only", false, &ro2, errp)) {
        return false;
    }
    c->read_only = ro || ro2;
    v = block_opts_get(in, "discard");
    c->discard_unmap = v && (!strcmp(v, "unmap") || !strcmp(v, "on"));
    if (v && !c->discard_unmap && strcmp(v, "ignore") && strcmp(v, "off")) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid discard option");
        return false;
    }
    return true;
}

/* Context: any thread */
bool blk_is_nbd_uri(const char *file)
{
    return g_str_has_prefix(file, "nbd://") || g_str_has_prefix(file, "nbd+tcp://") ||
           g_str_has_prefix(file, "nbd+unix://");
}

/* Context: any thread */
bool blk_is_rbd_filename(const char *file)
{
    return g_str_has_prefix(file, "rbd:");
}

/* The node graph of a -drive: raw over file/host_device/null/nbd/rbd. */
static void drive_nodes(const BlockDriveConf *c, BlockOpts *in, BlockOpts *out)
{
    static const char *const aio[] = {"threads", "native", "io_uring"};
    struct stat st;

    block_opts_set(out, "driver", "raw");
    block_opts_set(out, "cache.direct", c->cache.direct ? "on" : "off");
    block_opts_set(out, "cache.no-flush", c->cache.no_flush ? "on" : "off");
    block_opts_set(out, "read-only", c->read_only ? "on" : "off");
    block_opts_set(out, "discard", c->discard_unmap ? "unmap" : "ignore");
    if (g_str_has_prefix(c->file, "null-co://") || g_str_has_prefix(c->file, "null-aio://")) {
        static const char *const null_keys[] = {"read-zeroes", "size", "latency-ns"};

        block_opts_set(out, "file.driver",
                       g_str_has_prefix(c->file, "null-co") ? "null-co" : "null-aio");
        for (unsigned i = 0; i < G_N_ELEMENTS(null_keys); i++) {
            const char *v = block_opts_get(in, null_keys[i]);

            if (v) {
                g_autofree char *k = g_strdup_printf("file.%s", null_keys[i]);

                block_opts_set(out, k, v);
            }
        }
        return;
    }
    if (blk_is_nbd_uri(c->file)) {
        const char *delay = block_opts_get(in, "reconnect-delay");
        const char *delay2 = block_opts_get(in, "file.reconnect-delay");

        block_opts_set(out, "file.driver", "nbd");
        block_opts_set(out, "file.filename", c->file);
        if (delay2 || delay) {
            block_opts_set(out, "file.reconnect-delay", delay2 ? delay2 : delay);
        }
        return;
    }
    if (blk_is_rbd_filename(c->file)) {
        /* the cephx key's secret: file.key-secret, or QEMU's -drive name file.password-secret */
        const char *secret = block_opts_get(in, "file.key-secret");

        block_opts_set(out, "file.driver", "rbd");
        block_opts_set(out, "file.filename", c->file);
        if (!secret) {
            secret = block_opts_get(in, "file.password-secret");
        }
        if (secret) {
            block_opts_set(out, "file.key-secret", secret);
        }
        return;
    }
    block_opts_set(out, "file.driver",
                   stat(c->file, &st) == 0 && S_ISBLK(st.st_mode) ? "host_device" : "file");
    block_opts_set(out, "file.filename", c->file);
    block_opts_set(out, "file.aio", aio[c->aio]);
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
    static const char *const copy[] = {"node-name", "detect-zeroes"};
    GHashTableIter it;
    gpointer k, v;

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

/* @c opened, with @in the keys left (error policy, throttling, node-name...). */
static BlockBackend *drive_open(const BlockDriveConf *c, BlockOpts *in, EventLoop *loop,
                                GError **errp)
{
    BlockOpts *out = block_opts_new();
    BlockErrorPolicy rerr, werr;
    BlockBackend *blk = NULL;
    ThrottleLimits tl;
    BlockNode *root;

    drive_nodes(c, in, out);
    if (!drive_error_policy(in, &rerr, &werr, errp) || !drive_misc(in, out, &tl, errp)) {
        goto out;
    }
    root = bdrv_open(out, loop, false, errp);
    if (!root) {
        goto out;
    }
    blk = blk_new_with_root(root, loop, c->cache.writeback);
    blk_set_error_policy(blk, rerr, werr);
    if (throttle_limits_enabled(&tl)) {
        blk_set_io_limits(blk, &tl, NULL); /* validated above */
    }
out:
    block_opts_free(out);
    return blk;
}

/* Context: main loop */
BlockBackend *blk_new_from_drive(const BlockDriveConf *conf, GHashTable *extra, EventLoop *loop,
                                 GError **errp)
{
    THREAD_ASSERT_MAIN();
    BlockOpts *in = opts_from_table(extra);
    BlockBackend *blk = NULL;

    if (!conf->file || !*conf->file) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'file' is missing");
    } else {
        blk = drive_open(conf, in, loop, errp);
    }
    block_opts_free(in);
    return blk;
}

/* Context: main loop */
BlockBackend *blk_new_from_drive_opts(GHashTable *opts, EventLoop *loop, GError **errp)
{
    THREAD_ASSERT_MAIN();
    BlockOpts *in = opts_from_table(opts);
    BlockBackend *blk = NULL;
    BlockDriveConf c;

    if (drive_conf_parse(in, &c, errp)) {
        blk = drive_open(&c, in, loop, errp);
    }
    block_opts_free(in);
    return blk;
}

/* Context: main loop */
BlockBackend *blk_new_from_blockdev_opts(GHashTable *opts, EventLoop *loop, GError **errp)
{
    THREAD_ASSERT_MAIN();
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
