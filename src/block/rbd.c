/*
 * The "rbd" protocol driver: a Ceph RBD image, through the IOQ's "rbd"
 * engine (librbd's aio calls; include/ioq/ioq.h). Built always; without
 * librbd the open fails with "rbd support not compiled in".
 *
 * Options, as QEMU's: pool, image (both required), namespace, conf (a
 * ceph.conf; librados' default search without it), user (the client id),
 * key-secret (the id of a `-object secret` holding the user's cephx key;
 * QEMU's -drive name password-secret is taken too). The key goes to
 * librados as its "key" option, which wins over a keyring from the conf.
 * "filename" takes QEMU's legacy form instead, which -drive file= uses:
 *
 *   rbd:POOL[/NAMESPACE]/IMAGE[@SNAP][:KEY=VALUE]...
 *
 * where KEY is "id" (the user), "conf", or any Ceph option (handed to
 * rados_conf_set); a backslash escapes ':', '/', '@', '=' and itself.
 * Snapshots, mon hosts (server.*), keys in the filename and encryption are
 * refused.
 * query-block shows QEMU's json: filename of the strong options (nested in
 * the raw node's for -drive), cluster-size and, for an rbd root, QEMU's
 * empty format-specific block.
 *
 * Requests go to the IOQ through ioq-drv.h, as file-io.c's and nbd.c's do.
 * The dataplane opens its own image handle from blk_get_host_info().
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <stdlib.h>

#include "ioq-drv.h"
#include "util/secret.h"

#define RBD_BOUNCE_POOL (1u << 20) /* unused by the engine (iovecs go to librbd) */

typedef struct RbdState {
    IoqDrv io; /* first: the IOQ's request glue (ioq-drv.h) */
    BlockNode *bs;
    char *pool, *ns, *image, *conf, *user;
    GPtrArray *kv; /* key, value, ..., NULL: more Ceph options from the filename, and
                      "key" with the cephx key of key-secret= (wiped when freed) */
    bool legacy;    /* opened from an "rbd:" filename */
    char *filename; /* QEMU's json: filename of the node */
    char *raw_filename; /* ... and of a raw node over it (-drive) */
    IOQ *ioq;
    IOQRemoteInfo info;
} RbdState;
/* the ioq_drv_bdrv_* callbacks take bs->opaque for its IoqDrv */
G_STATIC_ASSERT(offsetof(RbdState, io) == 0);

/* ---- options ---- */

/* The next field of @p up to one of @stops (unescaped); *@p moves past it. */
static char *next_field(const char **p, const char *stops, char *stopped)
{
    GString *out = g_string_new(NULL);
    const char *s = *p;

    *stopped = 0;
    while (*s) {
        if (*s == '\\' && s[1]) {
            g_string_append_c(out, s[1]);
            s += 2;
            continue;
        }
        if (strchr(stops, *s)) {
            *stopped = *s++;
            break;
        }
        g_string_append_c(out, *s++);
    }
    *p = s;
    return g_string_free(out, FALSE);
}

static bool parse_legacy(RbdState *s, const char *fn, GError **errp)
{
    const char *p = fn;
    char stop;
    g_autofree char *first = NULL;

    if (!g_str_has_prefix(fn, "rbd:")) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid rbd filename '%s': it must start with 'rbd:'",
                    fn);
        return false;
    }
    p += 4;
    first = next_field(&p, "/@:", &stop);
    if (stop != '/' || !*first) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Pool name is required in '%s'", fn);
        return false;
    }
    s->pool = g_steal_pointer(&first);
    s->image = next_field(&p, "/@:", &stop);
    if (stop == '/') {
        s->ns = s->image;
        s->image = next_field(&p, "@:", &stop);
    }
    if (!*s->image) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Image name is required in '%s'", fn);
        return false;
    }
    if (stop == '@') {
        g_set_error(errp, BLOCK_ERROR, ENOTSUP, "RBD snapshots are not supported by vblk");
        return false;
    }
    while (stop == ':') {
        g_autofree char *key = next_field(&p, "=:", &stop);
        g_autofree char *val = NULL;

        if (stop != '=' || !*key) {
            g_set_error(errp, BLOCK_ERROR, EINVAL, "conf option '%s' has no value", key);
            return false;
        }
        val = next_field(&p, ":", &stop);
        if (!strcmp(key, "id")) {
            g_free(s->user);
            s->user = g_steal_pointer(&val);
        } else if (!strcmp(key, "conf")) {
            g_free(s->conf);
            s->conf = g_steal_pointer(&val);
        } else if (!strcmp(key, "keyring") || !strcmp(key, "key")) {
            g_set_error(errp, BLOCK_ERROR, ENOTSUP,
                        "rbd option '%s' is not supported (name the keyring in the conf, or "
                        "give the key with key-secret=)", key);
            return false;
        } else {
            g_ptr_array_add(s->kv, g_steal_pointer(&key));
            g_ptr_array_add(s->kv, g_steal_pointer(&val));
        }
    }
    return true;
}

static bool parse_opts(RbdState *s, BlockOpts *opts, GError **errp)
{
    static const char *const refused[] = {"snapshot", "server.0.host", "encrypt.format",
                                          "auth-client-required"};
    const char *fn = block_opts_get(opts, "filename");
    const char *pool = block_opts_get(opts, "pool");
    const char *image = block_opts_get(opts, "image");
    const char *ns = block_opts_get(opts, "namespace");
    const char *conf = block_opts_get(opts, "conf");
    const char *user = block_opts_get(opts, "user");
    const char *secret = block_opts_get(opts, "key-secret");

    for (unsigned i = 0; i < G_N_ELEMENTS(refused); i++) {
        if (block_opts_get(opts, refused[i])) {
            g_set_error(errp, BLOCK_ERROR, ENOTSUP, "rbd option '%s' is not supported by vblk",
                        refused[i]);
            return false;
        }
    }
    if (fn) {
        s->legacy = true;
        if (pool || image || ns) {
            g_set_error(errp, BLOCK_ERROR, EINVAL,
                        "No pool, namespace or image may be given with a filename");
            return false;
        }
        if (!parse_legacy(s, fn, errp)) {
            return false;
        }
    } else {
        if (!pool || !*pool) {
            g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'pool' is missing");
            return false;
        }
        if (!image || !*image) {
            g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'image' is missing");
            return false;
        }
        s->pool = g_strdup(pool);
        s->image = g_strdup(image);
        s->ns = g_strdup(ns);
    }
    /* explicit options win over the filename's */
    if (conf) {
        g_free(s->conf);
        s->conf = g_strdup(conf);
    }
    if (user) {
        g_free(s->user);
        s->user = g_strdup(user);
    }
    if (!secret) {
        secret = block_opts_get(opts, "password-secret"); /* QEMU's -drive name of it */
    }
    if (secret) {
        char *key = secret_lookup_base64(secret, errp);

        if (!key) {
            return false;
        }
        g_ptr_array_add(s->kv, g_strdup("key"));
        g_ptr_array_add(s->kv, key);
    }
    return true;
}

static void json_str(GString *g, bool *first, const char *key, const char *val)
{
    g_autofree char *k = g_strescape(key, NULL);
    g_autofree char *v = g_strescape(val, NULL);

    g_string_append_printf(g, "%s\"%s\": \"%s\"", *first ? "" : ", ", k, v);
    *first = false;
}

/*
 * QEMU's filename for a node without one of its own: a JSON object of the
 * strong options, in the order QEMU 7.2 prints them for rbd (its dictionary
 * order, checked against qemu-system-x86_64 7.2): pool, image, conf, driver,
 * namespace, user. QEMU's legacy-filename parser always sets a namespace.
 */
static char *make_json(const RbdState *s)
{
    GString *g = g_string_new("{");
    bool first = true;

    json_str(g, &first, "pool", s->pool);
    json_str(g, &first, "image", s->image);
    if (s->conf) {
        json_str(g, &first, "conf", s->conf);
    }
    json_str(g, &first, "driver", "rbd");
    if (s->ns || s->legacy) {
        json_str(g, &first, "namespace", s->ns ? s->ns : "");
    }
    if (s->user) {
        json_str(g, &first, "user", s->user);
    }
    g_string_append_c(g, '}');
    return g_string_free(g, FALSE);
}

static void rbd_state_free(RbdState *s)
{
    if (s->ioq) {
        ioq_free(s->ioq);
    }
    g_free(s->pool);
    g_free(s->ns);
    g_free(s->image);
    g_free(s->conf);
    g_free(s->user);
    g_free(s->filename);
    g_free(s->raw_filename);
    g_ptr_array_free(s->kv, TRUE);
    g_free(s);
}

static bool rbd_open(BlockNode *bs, BlockOpts *opts, GError **errp)
{
    RbdState *s = g_new0(RbdState, 1);
    IOQConfig cfg = {.engine = "rbd", .fd = -1, .bounce_pool_size = RBD_BOUNCE_POOL};

    s->bs = bs;
    s->kv = g_ptr_array_new_with_free_func((GDestroyNotify)secret_free_string);
    if (!ioq_have_rbd()) {
        g_set_error(errp, BLOCK_ERROR, ENOTSUP, "rbd support not compiled in");
        goto fail;
    }
    if (!parse_opts(s, opts, errp)) {
        goto fail;
    }
    g_ptr_array_add(s->kv, NULL);
    {
        g_autofree char *json = make_json(s);

        s->filename = g_strdup_printf("json:%s", json);
        s->raw_filename = g_strdup_printf("json:{\"driver\": \"raw\", \"file\": %s}", json);
    }
    cfg.rbd = (IOQRbdConfig){.pool = s->pool,
                             .rbd_namespace = s->ns,
                             .image = s->image,
                             .conf = s->conf,
                             .user = s->user,
                             .conf_kv = (const char *const *)s->kv->pdata};
    if (!ioq_drv_open_finish(&s->io, bs, &cfg, &s->ioq, &s->info, "RBD image", s->image,
                             s->filename, errp)) {
        goto fail;
    }
    return true;

fail:
    rbd_state_free(s);
    return false;
}

static void rbd_close_node(BlockNode *bs)
{
    RbdState *s = bs->opaque;

    if (s) {
        rbd_state_free(s);
        bs->opaque = NULL;
    }
}

static int64_t rbd_getlength(BlockNode *bs)
{
    return (int64_t)((RbdState *)bs->opaque)->info.size;
}

/* Context: main loop; drained (blk_truncate) */
static bool rbd_truncate(BlockNode *bs, uint64_t size, GError **errp)
{
    RbdState *s = bs->opaque;
    GError *err = NULL;

    if (size == s->info.size) {
        return true;
    }
    if (size > INT64_MAX) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid size %" PRIu64, size);
        return false;
    }
    if (!ioq_remote_resize(s->ioq, size, &err)) {
        g_set_error(errp, BLOCK_ERROR, EIO, "%s", err->message);
        g_error_free(err);
        return false;
    }
    ioq_get_remote_info(s->ioq, &s->info);
    return true;
}

/* Context: loop thread */
const char *blk_rbd_node_filename(BlockNode *bs, bool under_raw)
{
    if (bs->drv != &bdrv_rbd) {
        return NULL;
    }
    return under_raw ? ((RbdState *)bs->opaque)->raw_filename : ((RbdState *)bs->opaque)->filename;
}

/* Context: loop thread */
bool blk_rbd_node_host_info(BlockNode *bs, BlockHostInfo *info)
{
    const RbdState *s = bs->opaque;

    if (bs->drv != &bdrv_rbd) {
        return false;
    }
    info->rbd = true;
    info->filename = s->filename;
    info->direct = bs->direct;
    info->rbd_pool = s->pool;
    info->rbd_namespace = s->ns;
    info->rbd_image = s->image;
    info->rbd_conf = s->conf;
    info->rbd_user = s->user;
    info->rbd_conf_kv = (const char *const *)s->kv->pdata;
    info->rbd_object_size = s->info.object_size;
    return true;
}

const BlockDriver bdrv_rbd = {
    .name = "rbd",
    .open = rbd_open,
    .close = rbd_close_node,
    .submit = ioq_drv_bdrv_submit,
    .getlength = rbd_getlength,
    .truncate = rbd_truncate,
    .attach_loop = ioq_drv_bdrv_attach,
    .detach_loop = ioq_drv_bdrv_detach,
    .inflight = ioq_drv_bdrv_inflight,
};
