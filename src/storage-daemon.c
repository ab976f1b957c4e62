/*
 * vblk-storage-daemon: vblk's block layer and dataplane without a VM,
 * exported over vhost-user-blk sockets, with qemu-storage-daemon's command
 * line (docs/vhost-user.md):
 *
 *   --blockdev driver=file,node-name=N,filename=F   (QEMU's keys, see block.h)
 *   --object iothread,id=T[,poll-max-ns=..,poll-grow=..,poll-shrink=..]
 *   --object secret,id=S,data=..|file=..[,format=raw|base64]
 *   --export [type=]vhost-user-blk,id=E,node-name=N,addr.type=unix,addr.path=P
 *            [,writable=on|off][,logical-block-size=B][,num-queues=Q][,iothread=T]
 *            [,x-data-plane=on|off]
 *   --chardev socket,id=C,path=P,server=on,wait=off  --monitor chardev=C
 *   --pidfile P  --daemonize  --help  --version
 *
 * Exit status: 0 after quit or a signal, 1 on a bad command line or a
 * failure to start.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <glib-unix.h>

#include "block/block.h"
#include "devices/blockstats-qmp.h"
#include "devices/vhost-user-blk.h"
#include "event/event.h"
#include "event/iothread-registry.h"
#include "monitor/qmp.h"
#include "util/error-report.h"
#include "util/secret.h"
#include "vmm/options.h"

typedef struct Node {
    char *name;
    BlockBackend *blk;
} Node;

static struct {
    EventLoop *loop;
    GMainLoop *main;
    GPtrArray *nodes;   /* Node* */
    GPtrArray *exports; /* VhostUserBlkExport* */
} sd;

static const char usage[] =
    "Usage: vblk-storage-daemon [options]\n"
    "vblk's block layer and dataplane as a vhost-user-blk back end\n"
    "(qemu-storage-daemon's command line)\n"
    "\n"
    "  -h, --help                display this help and exit\n"
    "  -V, --version             output version information and exit\n"
    "\n"
    "  --blockdev [driver=]<driver>[,node-name=<N>][,read-only=on|off]\n"
    "             [,cache.direct=on|off][,cache.no-flush=on|off][,<driver options>]\n"
    "                            configure a block backend (file, host_device, raw,\n"
    "                            null-co, null-aio, blkdebug)\n"
    "  --chardev <options>       configure a character device backend (socket)\n"
    "  --export [type=]vhost-user-blk,id=<id>,node-name=<node-name>,\n"
    "           addr.type=unix,addr.path=<socket-path>[,writable=on|off]\n"
    "           [,logical-block-size=<block-size>][,num-queues=<num-queues>]\n"
    "           [,iothread=<id>][,x-data-plane=on|off]\n"
    "                            export the specified block node as a\n"
    "                            vhost-user-blk device over a UNIX domain socket\n"
    "  --monitor [chardev=]name[,mode=control][,pretty=on|off]\n"
    "                            configure a QMP monitor\n"
    "  --object iothread,id=<id>[,poll-max-ns=<ns>][,poll-grow=<n>][,poll-shrink=<n>]\n"
    "                            create an iothread\n"
    "  --object secret,id=<id>,data=<data>|file=<path>[,format=raw|base64]\n"
    "                            a secret (an rbd node's key-secret=<id>)\n"
    "  --pidfile <path>          write process ID to a file after startup\n"
    "  --daemonize               daemonize the process, and have the parent exit\n"
    "                            once startup is complete\n";

static GQuark sd_error_quark(void)
{
    return g_quark_from_static_string("vblk-storage-daemon-error");
}
#define SD_ERROR sd_error_quark()

static Node *find_node(const char *name)
{
    for (guint i = 0; i < sd.nodes->len; i++) {
        Node *n = sd.nodes->pdata[i];

        if (!strcmp(n->name, name)) {
            return n;
        }
    }
    return NULL;
}

static VhostUserBlkExport *find_export(const char *id, guint *idx)
{
    for (guint i = 0; i < sd.exports->len; i++) {
        if (!strcmp(vhost_user_blk_export_id(sd.exports->pdata[i]), id)) {
            if (idx) {
                *idx = i;
            }
            return sd.exports->pdata[i];
        }
    }
    return NULL;
}

/* ---- --blockdev ---- */

static bool add_blockdev(const char *arg, GError **errp)
{
    g_autoptr(GPtrArray) pairs = opts_split(arg, "driver", errp);
    g_autoptr(GHashTable) t = NULL;
    const char *name;
    Node *n;

    if (!pairs) {
        return false;
    }
    t = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    for (guint i = 0; i < pairs->len; i++) {
        OptPair *p = pairs->pdata[i];

        g_hash_table_replace(t, g_strdup(p->key), g_strdup(p->value));
    }
    name = g_hash_table_lookup(t, "node-name");
    if (!name || !*name) {
        g_set_error(errp, SD_ERROR, EINVAL, "--blockdev: node-name is required");
        return false;
    }
    if (find_node(name)) {
        g_set_error(errp, SD_ERROR, EEXIST, "--blockdev: Duplicate nodes with node-name='%s'",
                    name);
        return false;
    }
    n = g_new0(Node, 1);
    n->name = g_strdup(name);
    n->blk = blk_new_from_blockdev_opts(t, sd.loop, errp);
    if (!n->blk) {
        g_free(n->name);
        g_free(n);
        g_prefix_error(errp, "--blockdev: ");
        return false;
    }
    g_ptr_array_add(sd.nodes, n);
    return true;
}

/* ---- --object iothread ---- */

/* A count or size of --export: a non-negative integer, decimal, hex or octal as QEMU takes it. */
static bool parse_int(const char *opt, const char *key, const char *v, int64_t *out, GError **errp)
{
    char *end;

    errno = 0;
    *out = g_ascii_strtoll(v, &end, 0);
    if (errno || end == v || *end || *out < 0) {
        g_set_error(errp, SD_ERROR, EINVAL, "%s: Parameter '%s' expects a non-negative integer",
                    opt, key);
        return false;
    }
    return true;
}

static void iothread_id_match(const char *id, IOThread *t, const IOThreadParams *params,
                              void *opaque)
{
    const char **want = opaque;

    if (*want && !strcmp(id, *want)) {
        *want = NULL;
    }
}

/* Whether an --object iothread has the id @id. */
static bool iothread_id_taken(const char *id)
{
    const char *want = id;

    iothread_registry_foreach(iothread_id_match, &want);
    return want == NULL;
}

/* --object secret (util/secret.h): registered at once, as --blockdev opens at once too. */
static bool add_secret(GPtrArray *pairs, GError **errp)
{
    SecretProps props = {0};
    GError *err = NULL;

    for (guint i = 1; i < pairs->len; i++) {
        OptPair *p = pairs->pdata[i];

        if (!secret_props_set(&props, p->key, p->value, &err)) {
            break;
        }
    }
    if (!err && props.id && iothread_id_taken(props.id)) {
        g_set_error(&err, SD_ERROR, EEXIST, "duplicate ID '%s' for object", props.id);
    }
    if (err || !secret_add(&props, &err)) {
        g_set_error(errp, SD_ERROR, EINVAL, "--object secret%s%s: %s", props.id ? ",id=" : "",
                    props.id ? props.id : "", err->message);
        g_error_free(err);
        return false;
    }
    return true;
}

static bool add_object(const char *arg, GError **errp)
{
    g_autoptr(GPtrArray) pairs = opts_split(arg, "qom-type", errp);
    IOThreadParams params;
    const char *type = NULL, *id = NULL;

    if (!pairs) {
        return false;
    }
    if (pairs->len && !strcmp(((OptPair *)pairs->pdata[0])->key, "qom-type") &&
        !strcmp(((OptPair *)pairs->pdata[0])->value, "secret")) {
        return add_secret(pairs, errp);
    }
    iothread_params_init(&params);
    for (guint i = 0; i < pairs->len; i++) {
        OptPair *p = pairs->pdata[i];
        int r;

        if (!strcmp(p->key, "qom-type")) {
            type = p->value;
            continue;
        } else if (!strcmp(p->key, "id")) {
            id = p->value;
            continue;
        }
        /* The same parse and range check as vblk's -object iothread. */
        r = iothread_param_set(&params, p->key, p->value, errp);
        if (r < 0) {
            g_set_error(errp, SD_ERROR, EINVAL, "--object: Invalid parameter '%s'", p->key);
            return false;
        }
        if (r == 0) {
            g_prefix_error(errp, "--object: ");
            return false;
        }
    }
    if (!type || strcmp(type, "iothread")) {
        g_set_error(errp, SD_ERROR, EINVAL,
                    "--object: only 'iothread' and 'secret' objects are supported, not '%s'",
                    type ? type : "");
        return false;
    }
    if (secret_exists(id ? id : "")) {
        g_set_error(errp, SD_ERROR, EEXIST, "--object: duplicate ID '%s' for object", id);
        return false;
    }
    if (!id || !*id) {
        g_set_error(errp, SD_ERROR, EINVAL, "--object: Parameter 'id' is missing");
        return false;
    }
    return iothread_registry_get(id, &params, errp) != NULL;
}

/* ---- exports ---- */

typedef struct ExportArgs {
    char *type, *id, *node_name, *addr_type, *addr_path, *iothread;
    int writable; /* -1 unset */
    int64_t lbs, nq;
    int data_plane; /* -1 unset */
} ExportArgs;

static void export_args_clear(ExportArgs *a)
{
    g_free(a->type);
    g_free(a->id);
    g_free(a->node_name);
    g_free(a->addr_type);
    g_free(a->addr_path);
    g_free(a->iothread);
}

/* ---- QOM: /exports/<id>, with the runtime path switch x-data-plane ---- */

static JsonNode *prop_dp_get(const char *path, const char *name, void *opaque, GError **errp)
{
    VhostUserBlkExport *e = find_export(opaque, NULL);
    JsonNode *n;

    if (!e) {
        g_set_error(errp, SD_ERROR, ENOENT, "export is gone");
        return NULL;
    }
    n = json_node_new(JSON_NODE_VALUE);
    json_node_set_boolean(n, vhost_user_blk_export_is_dataplane(e));
    return n;
}

static bool prop_dp_set(const char *path, const char *name, JsonNode *value, QmpRequest *req,
                        void *opaque, GError **errp)
{
    VhostUserBlkExport *e = find_export(opaque, NULL);

    if (!e) {
        g_set_error(errp, SD_ERROR, ENOENT, "export is gone");
        return false;
    }
    return vhost_user_blk_export_set_dataplane(e, json_node_get_boolean(value), errp);
}

static void export_qom_add(VhostUserBlkExport *e)
{
    g_autofree char *path = g_strdup_printf("/exports/%s", vhost_user_blk_export_id(e));

    /* The property's opaque is the export's id (an export is found by id, so a stale one fails). */
    if (qom_add_object(path, "vhost-user-blk-export", NULL)) {
        qom_add_property(path, "x-data-plane", "bool", prop_dp_get, prop_dp_set,
                         (void *)vhost_user_blk_export_id(e), NULL);
    }
}

static void export_qom_del(VhostUserBlkExport *e)
{
    g_autofree char *path = g_strdup_printf("/exports/%s", vhost_user_blk_export_id(e));

    qom_del_object(path);
}

static bool do_export_add(const ExportArgs *a, GError **errp)
{
    VhostUserBlkExportConf c = {.listen_fd = -1};
    VhostUserBlkExport *e;
    Node *n;

    if (!a->type || strcmp(a->type, "vhost-user-blk")) {
        g_set_error(errp, SD_ERROR, EINVAL,
                    "Parameter 'type' does not accept value '%s' (vblk exports vhost-user-blk)",
                    a->type ? a->type : "");
        return false;
    }
    if (!a->id || !a->node_name) {
        g_set_error(errp, SD_ERROR, EINVAL, "Parameter '%s' is missing",
                    !a->id ? "id" : "node-name");
        return false;
    }
    if (!a->addr_type || strcmp(a->addr_type, "unix") || !a->addr_path) {
        g_set_error(errp, SD_ERROR, EINVAL, "addr.type=unix and addr.path are required");
        return false;
    }
    if (find_export(a->id, NULL)) {
        g_set_error(errp, SD_ERROR, EEXIST, "Block export id '%s' is already in use", a->id);
        return false;
    }
    n = find_node(a->node_name);
    if (!n) {
        g_set_error(errp, SD_ERROR, ENOENT, "Cannot find device=%s nor node_name=%s", a->node_name,
                    a->node_name);
        return false;
    }
    for (guint i = 0; i < sd.exports->len; i++) {
        if (vhost_user_blk_export_backend(sd.exports->pdata[i]) == n->blk) {
            g_set_error(errp, SD_ERROR, EBUSY, "node '%s' is already exported", n->name);
            return false;
        }
    }
    if (a->lbs < 0 || a->nq < 0 || a->nq > 64) {
        g_set_error(errp, SD_ERROR, EINVAL, "%s out of range",
                    a->lbs < 0 ? "logical-block-size" : "num-queues");
        return false;
    }
    c.id = a->id;
    c.node_name = n->name;
    c.backend = n->blk;
    c.main_loop = sd.loop;
    c.path = a->addr_path;
    c.writable = a->writable == 1;
    c.logical_block_size = (uint32_t)a->lbs;
    c.num_queues = (unsigned)a->nq;
    c.data_plane = a->data_plane != 0;
    if (a->iothread) {
        c.iothread = iothread_registry_get(a->iothread, NULL, errp);
        if (!c.iothread) {
            return false;
        }
    }
    e = vhost_user_blk_export_new(&c, errp);
    if (!e) {
        return false;
    }
    g_ptr_array_add(sd.exports, e);
    export_qom_add(e);
    return true;
}

static bool add_export(const char *arg, GError **errp)
{
    g_autoptr(GPtrArray) pairs = opts_split(arg, "type", errp);
    ExportArgs a = {.writable = -1, .data_plane = -1};
    bool ok = false;

    if (!pairs) {
        return false;
    }
    for (guint i = 0; i < pairs->len; i++) {
        OptPair *p = pairs->pdata[i];
        char **str = NULL;
        bool b;

        if (!strcmp(p->key, "type")) {
            str = &a.type;
        } else if (!strcmp(p->key, "id")) {
            str = &a.id;
        } else if (!strcmp(p->key, "node-name")) {
            str = &a.node_name;
        } else if (!strcmp(p->key, "addr.type")) {
            str = &a.addr_type;
        } else if (!strcmp(p->key, "addr.path")) {
            str = &a.addr_path;
        } else if (!strcmp(p->key, "iothread")) {
            str = &a.iothread;
        } else if (!strcmp(p->key, "writable") || !strcmp(p->key, "x-data-plane")) {
            if (!opts_parse_bool(p->value, &b)) {
                g_set_error(errp, SD_ERROR, EINVAL,
                            "--export: Parameter '%s' expects 'on' or 'off'", p->key);
                goto out;
            }
            *(!strcmp(p->key, "writable") ? &a.writable : &a.data_plane) = b;
        } else if (!strcmp(p->key, "logical-block-size") || !strcmp(p->key, "num-queues")) {
            if (!parse_int("--export", p->key, p->value,
                           !strcmp(p->key, "num-queues") ? &a.nq : &a.lbs, errp)) {
                goto out;
            }
        } else {
            g_set_error(errp, SD_ERROR, EINVAL, "--export: Invalid parameter '%s'", p->key);
            goto out;
        }
        if (str) {
            g_free(*str);
            *str = g_strdup(p->value);
        }
    }
    ok = do_export_add(&a, errp);
    if (!ok) {
        g_prefix_error(errp, "--export: ");
    }
out:
    export_args_clear(&a);
    return ok;
}

/* ---- QMP ---- */

static JsonNode *build(JsonBuilder *b)
{
    JsonNode *n = json_builder_get_root(b);

    g_object_unref(b);
    return n;
}

static JsonNode *cmd_query_block_exports(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonBuilder *b = json_builder_new();

    json_builder_begin_array(b);
    for (guint i = 0; i < sd.exports->len; i++) {
        VhostUserBlkExport *e = sd.exports->pdata[i];

        json_builder_begin_object(b);
        json_builder_set_member_name(b, "type");
        json_builder_add_string_value(b, "vhost-user-blk");
        json_builder_set_member_name(b, "id");
        json_builder_add_string_value(b, vhost_user_blk_export_id(e));
        json_builder_set_member_name(b, "node-name");
        json_builder_add_string_value(b, vhost_user_blk_export_node_name(e));
        json_builder_set_member_name(b, "shutting-down");
        json_builder_add_boolean_value(b, FALSE);
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    return build(b);
}

/*
 * query-blockstats: one entry per export's BlockBackend (device "", the
 * export's node, no qdev), with both request paths' counters. Beyond
 * qemu-storage-daemon 7.2, which lists no export's backend here (its answer
 * is [] unless query-nodes is set, and then every node's counters are zero,
 * since only BlockBackends account). query-nodes is accepted and ignored.
 */
static JsonNode *cmd_query_blockstats(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonBuilder *b = json_builder_new();

    json_builder_begin_array(b);
    for (guint i = 0; i < sd.exports->len; i++) {
        blockstats_add(b, vhost_user_blk_export_backend(sd.exports->pdata[i]), "", NULL);
    }
    json_builder_end_array(b);
    return build(b);
}

/*
 * block_resize of a node (qemu-storage-daemon takes node-name; "device" is
 * looked up as a node name too). The export of that node, if any, follows:
 * its capacity changes and its front end gets VHOST_USER_BACKEND_CONFIG_CHANGE_MSG
 * (docs/vhost-user.md).
 */
static JsonNode *cmd_block_resize(QmpRequest *req, JsonObject *args, GError **errp)
{
    const char *dev = json_object_has_member(args, "device")
                          ? json_object_get_string_member(args, "device")
                          : NULL;
    const char *node = json_object_has_member(args, "node-name")
                           ? json_object_get_string_member(args, "node-name")
                           : NULL;
    int64_t size = json_object_get_int_member(args, "size");
    Node *n = find_node(dev ? dev : node ? node : "");

    if (!n) {
        g_set_error(errp, SD_ERROR, ENOENT, "Cannot find device='%s' nor node-name='%s'",
                    dev ? dev : "", node ? node : "");
        return NULL;
    }
    if (!blk_truncate(n->blk, size, errp)) {
        return NULL;
    }
    for (guint i = 0; i < sd.exports->len; i++) {
        if (vhost_user_blk_export_backend(sd.exports->pdata[i]) == n->blk) {
            vhost_user_blk_export_resized(sd.exports->pdata[i]);
        }
    }
    return NULL;
}

static JsonNode *cmd_block_export_add(QmpRequest *req, JsonObject *args, GError **errp)
{
    ExportArgs a = {.writable = -1, .data_plane = -1};
    JsonObject *addr =
        json_object_has_member(args, "addr") ? json_object_get_object_member(args, "addr") : NULL;
    bool ok G_GNUC_UNUSED;

    a.type = g_strdup(json_object_get_string_member(args, "type"));
    a.id = g_strdup(json_object_get_string_member(args, "id"));
    a.node_name = g_strdup(json_object_get_string_member(args, "node-name"));
    if (addr && json_object_has_member(addr, "type") && json_object_has_member(addr, "path") &&
        JSON_NODE_HOLDS_VALUE(json_object_get_member(addr, "type")) &&
        JSON_NODE_HOLDS_VALUE(json_object_get_member(addr, "path")) &&
        json_node_get_value_type(json_object_get_member(addr, "type")) == G_TYPE_STRING &&
        json_node_get_value_type(json_object_get_member(addr, "path")) == G_TYPE_STRING) {
        a.addr_type = g_strdup(json_object_get_string_member(addr, "type"));
        a.addr_path = g_strdup(json_object_get_string_member(addr, "path"));
    }
    if (json_object_has_member(args, "writable")) {
        a.writable = json_object_get_boolean_member(args, "writable");
    }
    if (json_object_has_member(args, "logical-block-size")) {
        a.lbs = json_object_get_int_member(args, "logical-block-size");
    }
    if (json_object_has_member(args, "num-queues")) {
        a.nq = json_object_get_int_member(args, "num-queues");
    }
    if (json_object_has_member(args, "iothread")) {
        a.iothread = g_strdup(json_object_get_string_member(args, "iothread"));
    }
    ok = do_export_add(&a, errp);
    export_args_clear(&a);
    return NULL; /* {} on success; @errp set on failure */
}

static JsonNode *cmd_block_export_del(QmpRequest *req, JsonObject *args, GError **errp)
{
    const char *id = json_object_get_string_member(args, "id");
    guint idx;
    VhostUserBlkExport *e = find_export(id, &idx);
    JsonBuilder *b;

    if (!e) {
        g_set_error(errp, SD_ERROR, ENOENT, "Export '%s' is not found", id);
        return NULL;
    }
    /* mode=safe and hard behave alike: the connection is dropped, in-flight I/O completes. */
    g_ptr_array_remove_index(sd.exports, idx);
    export_qom_del(e);
    vhost_user_blk_export_free(e);
    b = json_builder_new();
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "id");
    json_builder_add_string_value(b, id);
    json_builder_end_object(b);
    qmp_event_emit("BLOCK_EXPORT_DELETED", build(b));
    return NULL;
}

static void qmp_register_export_commands(void)
{
    static const QmpArgSpec add_args[] = {
        {"type", QMP_ARG_STR, false},
        {"id", QMP_ARG_STR, false},
        {"node-name", QMP_ARG_STR, false},
        {"addr", QMP_ARG_OBJECT, false},
        {"writable", QMP_ARG_BOOL, true},
        {"writethrough", QMP_ARG_BOOL, true},
        {"logical-block-size", QMP_ARG_UINT, true},
        {"num-queues", QMP_ARG_UINT, true},
        {"iothread", QMP_ARG_STR, true},
        {"fixed-iothread", QMP_ARG_BOOL, true},
        QMP_ARGS_END,
    };
    static const QmpArgSpec del_args[] = {
        {"id", QMP_ARG_STR, false},
        {"mode", QMP_ARG_STR, true},
        QMP_ARGS_END,
    };

    static const QmpArgSpec resize_args[] = {
        {"device", QMP_ARG_STR, true},
        {"node-name", QMP_ARG_STR, true},
        {"size", QMP_ARG_INT, false},
        QMP_ARGS_END,
    };
    static const QmpArgSpec blockstats_args[] = {
        {"query-nodes", QMP_ARG_BOOL, true},
        QMP_ARGS_END,
    };

    qmp_register_command("query-block-exports", cmd_query_block_exports, NULL, 0, NULL);
    qmp_register_command("query-blockstats", cmd_query_blockstats, blockstats_args, 0, NULL);
    qmp_register_command("block-export-add", cmd_block_export_add, add_args, 0, NULL);
    qmp_register_command("block-export-del", cmd_block_export_del, del_args, 0, NULL);
    qmp_register_command("block_resize", cmd_block_resize, resize_args, 0, NULL);
}

static void sd_quit(void *opaque)
{
    g_main_loop_quit(sd.main);
}

static gboolean sd_on_signal(gpointer opaque)
{
    g_main_loop_quit(sd.main);
    return G_SOURCE_CONTINUE;
}

/* ---- main ---- */

static bool write_pidfile(const char *path, GError **errp)
{
    g_autofree char *s = g_strdup_printf("%d\n", (int)getpid());

    return g_file_set_contents(path, s, -1, errp);
}

/* Fork; the parent exits once the child reports readiness (a byte) or failure (EOF). */
static int daemonize_start(void)
{
    int p[2];
    pid_t pid;

    if (pipe2(p, O_CLOEXEC) < 0) {
        return -1;
    }
    pid = fork();
    if (pid < 0) {
        return -1;
    }
    if (pid > 0) {
        char c;

        close(p[1]);
        _exit(read(p[0], &c, 1) == 1 ? 0 : 1);
    }
    close(p[0]);
    setsid();
    return p[1];
}

static void daemonize_done(int fd)
{
    int null = open("/dev/null", O_RDWR);

    if (null >= 0) {
        dup2(null, STDIN_FILENO);
        dup2(null, STDOUT_FILENO);
        dup2(null, STDERR_FILENO);
        close(null);
    }
    if (write(fd, "", 1) != 1) {
        /* the parent is gone: nothing to tell */
    }
    close(fd);
}

typedef struct Arg {
    const char *opt; /* "--blockdev", ... */
    const char *value;
} Arg;

static const char *const with_value[] = {"--blockdev", "--object",  "--export", "--chardev",
                                         "--monitor",  "--pidfile", NULL};

/* Context: main thread */
int main(int argc, char **argv)
{
    g_autoptr(GArray) args = g_array_new(FALSE, FALSE, sizeof(Arg));
    const char *pidfile = NULL;
    bool daemonize = false;
    GError *err = NULL;
    GSource *src = NULL;
    int ready_fd = -1;
    int status = 1;
    QmpMachineHooks hooks = {.quit = sd_quit};

    error_set_progname("vblk-storage-daemon");
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *eq = strchr(a, '=');
        g_autofree char *name = eq && !strncmp(a, "--", 2) ? g_strndup(a, eq - a) : g_strdup(a);
        bool known = false;

        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            fputs(usage, stdout);
            return 0;
        }
        if (!strcmp(a, "-V") || !strcmp(a, "--version")) {
            printf("vblk-storage-daemon version %s (qemu-storage-daemon's command line)\n",
                   VBLK_VERSION_STRING);
            return 0;
        }
        if (!strcmp(a, "--daemonize")) {
            daemonize = true;
            continue;
        }
        for (int k = 0; with_value[k]; k++) {
            if (!strcmp(name, with_value[k])) {
                Arg arg = {.opt = with_value[k],
                           .value = eq && !strncmp(a, "--", 2) ? eq + 1 : NULL};

                if (!arg.value) {
                    if (i + 1 >= argc) {
                        error_report("%s: requires an argument", a);
                        return 1;
                    }
                    arg.value = argv[++i];
                }
                if (!strcmp(arg.opt, "--pidfile")) {
                    pidfile = arg.value;
                } else {
                    g_array_append_val(args, arg);
                }
                known = true;
                break;
            }
        }
        if (!known) {
            error_report("%s: %s", a,
                         a[0] == '-' ? "invalid option" : "unexpected argument (options only)");
            return 1;
        }
    }

    if (daemonize) {
        ready_fd = daemonize_start();
        if (ready_fd < 0) {
            error_report("--daemonize: %s", g_strerror(errno));
            return 1;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    sd.nodes = g_ptr_array_new();
    sd.exports = g_ptr_array_new();
    qmp_init(NULL);
    qmp_machine_set_hooks(&hooks);
    qmp_run_state_set(QMP_RUN_STATE_RUNNING);
    qmp_register_export_commands();
    sd.loop = event_loop_new(&err);
    if (!sd.loop) {
        goto out;
    }
    src = event_loop_create_gsource(sd.loop);
    g_source_attach(src, NULL);

    /* In command-line order, as qemu-storage-daemon: a chardev before its monitor. */
    for (guint i = 0; i < args->len; i++) {
        Arg *a = &g_array_index(args, Arg, i);
        bool ok;

        if (!strcmp(a->opt, "--blockdev")) {
            ok = add_blockdev(a->value, &err);
        } else if (!strcmp(a->opt, "--object")) {
            ok = add_object(a->value, &err);
        } else if (!strcmp(a->opt, "--export")) {
            ok = add_export(a->value, &err);
        } else if (!strcmp(a->opt, "--chardev")) {
            ok = qmp_chardev_add(a->value, &err);
            if (!ok) {
                g_prefix_error(&err, "--chardev: ");
            }
        } else {
            /* qemu-storage-daemon's monitors are QMP unless told otherwise. */
            g_autofree char *v = strstr(a->value, "mode=")
                                     ? g_strdup(a->value)
                                     : g_strdup_printf("%s,mode=control", a->value);

            ok = qmp_monitor_add_mon(v, &err) != NULL;
            if (!ok) {
                g_prefix_error(&err, "--monitor: ");
            }
        }
        if (!ok) {
            goto out;
        }
    }
    if (pidfile && !write_pidfile(pidfile, &err)) {
        g_prefix_error(&err, "--pidfile: ");
        goto out;
    }
    if (ready_fd >= 0) {
        daemonize_done(ready_fd);
        ready_fd = -1;
    }
    sd.main = g_main_loop_new(NULL, FALSE);
    g_unix_signal_add(SIGTERM, sd_on_signal, NULL);
    g_unix_signal_add(SIGINT, sd_on_signal, NULL);
    g_unix_signal_add(SIGHUP, sd_on_signal, NULL);
    g_main_loop_run(sd.main);
    qmp_flush(1000);
    g_main_loop_unref(sd.main);
    status = 0;

out:
    if (err) {
        error_report("%s", err->message);
        g_error_free(err);
    }
    if (ready_fd >= 0) {
        close(ready_fd); /* the parent exits 1 */
    }
    while (sd.exports->len) {
        vhost_user_blk_export_free(g_ptr_array_steal_index(sd.exports, sd.exports->len - 1));
    }
    for (guint i = 0; i < sd.nodes->len; i++) {
        Node *n = sd.nodes->pdata[i];

        blk_unref(n->blk);
        g_free(n->name);
        g_free(n);
    }
    iothread_registry_clear();
    qmp_cleanup();
    if (src) {
        g_source_destroy(src);
        g_source_unref(src);
    }
    if (sd.loop) {
        event_loop_free(sd.loop);
    }
    if (pidfile && status == 0) {
        unlink(pidfile);
    }
    g_ptr_array_free(sd.nodes, TRUE);
    g_ptr_array_free(sd.exports, TRUE);
    return status;
}
