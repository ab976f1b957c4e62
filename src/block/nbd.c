/*
 * The "nbd" protocol driver: a disk exported by an NBD server, through the
 * IOQ's "nbd" engine (libnbd's asynchronous API; include/ioq/ioq.h).
 *
 * Options, as QEMU's: server.type=inet with server.host and server.port, or
 * server.type=unix with server.path; export; reconnect-delay (seconds the
 * requests of a lost connection wait for a new one). "filename" takes the
 * URI forms instead: nbd://HOST[:PORT][/EXPORT], nbd+tcp://..., and
 * nbd+unix:///EXPORT?socket=PATH. query-block shows the URI QEMU prints.
 *
 * Requests go to the IOQ through ioq-drv.h, as file-io.c's do: from a
 * bottom half, with its epoll fd watched by the node's loop. The dataplane does not share this
 * connection: it opens its own from blk_get_host_info() (the server must
 * accept two clients; qemu-nbd needs --shared=2 or more).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <stdlib.h>
#include <unistd.h>

#include "ioq-drv.h"

#define NBD_DEFAULT_PORT "10809"
#define NBD_BOUNCE_POOL  (8u << 20)

typedef struct NbdState {
    IoqDrv io; /* first: the IOQ's request glue (ioq-drv.h) */
    BlockNode *bs;
    char *uri; /* QEMU's filename for the node */
    char *host, *port, *path, *export_name;
    uint64_t reconnect_delay;
    IOQ *ioq;
    IOQRemoteInfo info;
} NbdState;
/* the ioq_drv_bdrv_* callbacks take bs->opaque for its IoqDrv */
G_STATIC_ASSERT(offsetof(NbdState, io) == 0);

/* ---- options ---- */

/* nbd://, nbd+tcp://, nbd+unix:// into server.* and export, as QEMU reads them. */
static bool parse_uri(NbdState *s, const char *uri, GError **errp)
{
    g_autoptr(GError) err = NULL;
    g_autoptr(GUri) u = g_uri_parse(uri, G_URI_FLAGS_ENCODED_PATH, &err);
    g_autoptr(GHashTable) params = NULL;
    const char *scheme, *path, *query;
    bool is_unix;

    if (!u) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid URI '%s': %s", uri, err->message);
        return false;
    }
    scheme = g_uri_get_scheme(u);
    if (strcmp(scheme, "nbd") && strcmp(scheme, "nbd+tcp") && strcmp(scheme, "nbd+unix")) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid scheme '%s' in '%s'", scheme, uri);
        return false;
    }
    is_unix = !strcmp(scheme, "nbd+unix");
    path = g_uri_get_path(u);
    query = g_uri_get_query(u);
    if (query) {
        params = g_uri_parse_params(query, -1, "&", G_URI_PARAMS_NONE, NULL);
        if (!params) {
            g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid query in '%s'", uri);
            return false;
        }
    }
    if (path && path[0] == '/' && path[1]) {
        s->export_name = g_uri_unescape_string(path + 1, NULL);
        if (!s->export_name) {
            g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid export name in '%s'", uri);
            return false;
        }
    }
    if (is_unix) {
        const char *sock = params ? g_hash_table_lookup(params, "socket") : NULL;

        if (g_uri_get_host(u) && *g_uri_get_host(u)) {
            g_set_error(errp, BLOCK_ERROR, EINVAL, "nbd+unix URIs take no host: '%s'", uri);
            return false;
        }
        if (!sock || !*sock || g_hash_table_size(params) != 1) {
            g_set_error(errp, BLOCK_ERROR, EINVAL,
                        "nbd+unix URIs need exactly one parameter, socket=PATH: '%s'", uri);
            return false;
        }
        s->path = g_strdup(sock);
        return true;
    }
    if (params || !g_uri_get_host(u) || !*g_uri_get_host(u)) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "nbd URIs need a host and take no query: '%s'",
                    uri);
        return false;
    }
    s->host = g_strdup(g_uri_get_host(u));
    s->port = g_uri_get_port(u) > 0 ? g_strdup_printf("%d", g_uri_get_port(u))
                                     : g_strdup(NBD_DEFAULT_PORT);
    return true;
}

static bool parse_server(NbdState *s, BlockOpts *opts, GError **errp)
{
    const char *type = block_opts_get(opts, "server.type");
    const char *host = block_opts_get(opts, "server.host");
    const char *port = block_opts_get(opts, "server.port");
    const char *path = block_opts_get(opts, "server.path");
    const char *exp = block_opts_get(opts, "export");
    const char *fn = block_opts_get(opts, "filename");

    if (fn) {
        if (type || host || port || path || exp) {
            g_set_error(errp, BLOCK_ERROR, EINVAL,
                        "No server or export may be given with a URI filename");
            return false;
        }
        return parse_uri(s, fn, errp);
    }
    if (!type) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'server.type' is missing");
        return false;
    }
    s->export_name = g_strdup(exp);
    if (!strcmp(type, "unix")) {
        if (!path || !*path) {
            g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'server.path' is missing");
            return false;
        }
        if (host || port) {
            g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid parameter 'server.%s'",
                        host ? "host" : "port");
            return false;
        }
        s->path = g_strdup(path);
        return true;
    }
    if (strcmp(type, "inet")) {
        g_set_error(errp, BLOCK_ERROR, EINVAL,
                    "Parameter 'server.type' does not accept value '%s' (inet or unix)", type);
        return false;
    }
    if (!host || !*host) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'server.host' is missing");
        return false;
    }
    if (!port || !*port) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'server.port' is missing");
        return false;
    }
    if (path) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid parameter 'server.path'");
        return false;
    }
    s->host = g_strdup(host);
    s->port = g_strdup(port);
    return true;
}

/* QEMU's filename for the node: the URI that reaches the same export. */
static char *make_uri(const NbdState *s)
{
    g_autofree char *exp =
        s->export_name ? g_uri_escape_string(s->export_name, "/", false) : NULL;

    if (s->path) {
        return exp && *exp ? g_strdup_printf("nbd+unix:///%s?socket=%s", exp, s->path)
                           : g_strdup_printf("nbd+unix://?socket=%s", s->path);
    }
    if (strchr(s->host, ':')) {
        return exp && *exp ? g_strdup_printf("nbd://[%s]:%s/%s", s->host, s->port, exp)
                           : g_strdup_printf("nbd://[%s]:%s", s->host, s->port);
    }
    return exp && *exp ? g_strdup_printf("nbd://%s:%s/%s", s->host, s->port, exp)
                       : g_strdup_printf("nbd://%s:%s", s->host, s->port);
}

static void nbd_state_free(NbdState *s)
{
    if (s->ioq) {
        ioq_free(s->ioq);
    }
    g_free(s->uri);
    g_free(s->host);
    g_free(s->port);
    g_free(s->path);
    g_free(s->export_name);
    g_free(s);
}

static bool nbd_open(BlockNode *bs, BlockOpts *opts, GError **errp)
{
    NbdState *s = g_new0(NbdState, 1);
    IOQConfig cfg = {.engine = "nbd", .fd = -1, .bounce_pool_size = NBD_BOUNCE_POOL};

    s->bs = bs;
    if (block_opts_get(opts, "tls-creds") || block_opts_get(opts, "tls-hostname")) {
        g_set_error(errp, BLOCK_ERROR, ENOTSUP, "TLS is not supported by vblk's nbd driver");
        goto fail;
    }
    if (block_opts_get(opts, "x-dirty-bitmap")) {
        g_set_error(errp, BLOCK_ERROR, ENOTSUP, "x-dirty-bitmap is not supported");
        goto fail;
    }
    if (!parse_server(s, opts, errp) ||
        !block_opts_get_size(opts, "reconnect-delay", 0, &s->reconnect_delay, errp)) {
        goto fail;
    }
    if (s->reconnect_delay > 3600) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "reconnect-delay must be at most 3600 seconds");
        goto fail;
    }
    s->uri = make_uri(s);
    cfg.nbd = (IOQNbdConfig){.host = s->host,
                             .port = s->port,
                             .socket = s->path,
                             .export_name = s->export_name,
                             .reconnect_delay_s = s->reconnect_delay};
    if (!ioq_drv_open_finish(&s->io, bs, &cfg, &s->ioq, &s->info, "NBD export", s->uri, s->uri,
                             errp)) {
        goto fail;
    }
    return true;

fail:
    nbd_state_free(s);
    return false;
}

static void nbd_close_node(BlockNode *bs)
{
    NbdState *s = bs->opaque;

    if (s) {
        nbd_state_free(s);
        bs->opaque = NULL;
    }
}

static int64_t nbd_getlength(BlockNode *bs)
{
    return (int64_t)((NbdState *)bs->opaque)->info.size;
}

static bool nbd_truncate(BlockNode *bs, uint64_t size, GError **errp)
{
    NbdState *s = bs->opaque;

    if (size == s->info.size) {
        return true;
    }
    g_set_error(errp, BLOCK_ERROR, ENOTSUP,
                size > s->info.size ? "Cannot grow NBD nodes" : "Cannot resize NBD nodes");
    return false;
}

/* Context: loop thread */
const char *blk_nbd_node_filename(BlockNode *bs)
{
    return bs->drv == &bdrv_nbd ? ((NbdState *)bs->opaque)->uri : NULL;
}

/* Context: loop thread */
bool blk_nbd_node_host_info(BlockNode *bs, BlockHostInfo *info)
{
    const NbdState *s = bs->opaque;

    if (bs->drv != &bdrv_nbd) {
        return false;
    }
    info->nbd = true;
    info->filename = s->uri;
    info->direct = bs->direct;
    info->nbd_host = s->host;
    info->nbd_port = s->port;
    info->nbd_socket = s->path;
    info->nbd_export = s->export_name;
    info->nbd_reconnect_delay = s->reconnect_delay;
    if (s->info.min_block > 512) {
        info->not_passthrough = "an NBD export with blocks larger than 512 bytes";
    }
    return true;
}

const BlockDriver bdrv_nbd = {
    .name = "nbd",
    .open = nbd_open,
    .close = nbd_close_node,
    .submit = ioq_drv_bdrv_submit,
    .getlength = nbd_getlength,
    .truncate = nbd_truncate,
    .attach_loop = ioq_drv_bdrv_attach,
    .detach_loop = ioq_drv_bdrv_detach,
    .inflight = ioq_drv_bdrv_inflight,
};
