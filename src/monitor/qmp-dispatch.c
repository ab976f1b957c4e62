/*
 * QMP dispatcher: validates one input object the way QEMU's qmp_dispatch()
 * does (same checks, same order, same error texts), checks arguments against
 * the command's declared spec, runs the handler and builds the reply.  Also
 * deferred replies and event broadcast.
 */
#include <string.h>
#include "qmp-internal.h"

struct QmpRequest {
    QmpCommand *cmd;
    QmpClient *client;
    JsonNode *id;
    QmpDeferred *deferred;
};

struct QmpDeferred {
    QmpClient *client;
    JsonNode *id;
    JsonNode *result;
    GError *error;
    QmpInternalDone done; /* qmp_run_internal(): the result goes here, not to the client */
    void *done_opaque;
};

static GMainContext *qmp_ctx;
static GHashTable *qmp_cmds;    /* name -> QmpCommand */
static GPtrArray *qmp_cmd_list; /* registration order */

/* Context: any thread */
GQuark qmp_error_quark(void)
{
    return g_quark_from_static_string("vblk-qmp-error-quark");
}

/* Context: any thread */
static const char *qmp_error_class_name(QmpErrorClass cls)
{
    static const char *const names[] = {
        [QMP_ERROR_GENERIC] = "GenericError",
        [QMP_ERROR_COMMAND_NOT_FOUND] = "CommandNotFound",
        [QMP_ERROR_DEVICE_NOT_ACTIVE] = "DeviceNotActive",
        [QMP_ERROR_DEVICE_NOT_FOUND] = "DeviceNotFound",
        [QMP_ERROR_KVM_MISSING_CAP] = "KVMMissingCap",
    };

    if ((unsigned)cls >= G_N_ELEMENTS(names)) {
        return "GenericError";
    }
    return names[cls];
}

/* Context: any thread */
GMainContext *qmp_context(void)
{
    return qmp_ctx;
}

/* Context: any thread */
bool qmp_in_monitor_thread(void)
{
    return qmp_ctx && g_main_context_is_owner(qmp_ctx);
}

static void command_free(gpointer p)
{
    QmpCommand *cmd = p;

    for (QmpArgSpec *a = cmd->args; a && a->name; a++) {
        g_free((char *)a->name);
    }
    g_free(cmd->args);
    g_free(cmd->name);
    g_free(cmd);
}

/* Context: monitor thread */
void qmp_dispatch_init(void)
{
    qmp_cmds = g_hash_table_new(g_str_hash, g_str_equal);
    qmp_cmd_list = g_ptr_array_new_with_free_func(command_free);
}

/* Context: monitor thread */
void qmp_dispatch_cleanup(void)
{
    g_clear_pointer(&qmp_cmds, g_hash_table_destroy);
    g_clear_pointer(&qmp_cmd_list, g_ptr_array_unref);
}

/* Context: monitor thread */
GPtrArray *qmp_command_list(void)
{
    return qmp_cmd_list;
}

/* Context: monitor thread */
bool qmp_register_command(const char *name, QmpCommandFunc fn, const QmpArgSpec *args,
                          QmpCommandFlags flags, void *opaque)
{
    QmpCommand *cmd;
    size_t n = 0;

    g_return_val_if_fail(qmp_cmds && name && fn, false);
    if (g_hash_table_contains(qmp_cmds, name)) {
        return false;
    }
    while (args && args[n].name) {
        n++;
    }
    cmd = g_new0(QmpCommand, 1);
    cmd->name = g_strdup(name);
    cmd->fn = fn;
    cmd->flags = flags;
    cmd->opaque = opaque;
    cmd->args = g_new0(QmpArgSpec, n + 1);
    for (size_t i = 0; i < n; i++) {
        cmd->args[i] = args[i];
        cmd->args[i].name = g_strdup(args[i].name);
    }
    g_hash_table_insert(qmp_cmds, cmd->name, cmd);
    g_ptr_array_add(qmp_cmd_list, cmd);
    return true;
}

/* Context: monitor thread */
bool qmp_command_exists(const char *name)
{
    return qmp_cmds && g_hash_table_contains(qmp_cmds, name);
}

/* Context: monitor thread */
QmpClient *qmp_request_client(QmpRequest *req)
{
    return req->client;
}

/* ---- replies ----------------------------------------------------------- */

/* QEMU puts "id" last on success and first on error; clients see both. */
static JsonNode *reply_new(JsonNode *id, JsonNode *result, const GError *err)
{
    JsonObject *o = json_object_new();
    JsonNode *node;

    if (err) {
        JsonObject *e = json_object_new();

        if (result) {
            json_node_unref(result);
        }
        QmpErrorClass cls = err->domain == QMP_ERROR ? err->code : QMP_ERROR_GENERIC;

        if (id) {
            json_object_set_member(o, "id", json_node_copy(id));
        }
        json_object_set_string_member(e, "class", qmp_error_class_name(cls));
        json_object_set_string_member(e, "desc", err->message);
        json_object_set_object_member(o, "error", e);
    } else {
        if (!result) {
            JsonObject *empty = json_object_new();

            result = json_node_init_object(json_node_alloc(), empty);
            json_object_unref(empty); /* the node took its own reference */
        }
        json_object_set_member(o, "return", result);
        if (id) {
            json_object_set_member(o, "id", json_node_copy(id));
        }
    }
    node = json_node_init_object(json_node_alloc(), o);
    json_object_unref(o);
    return node;
}

static void reply_send(QmpClient *c, JsonNode *id, JsonNode *result, GError *err)
{
    JsonNode *reply = reply_new(id, result, err);

    qmp_client_send(c, reply);
    json_node_unref(reply);
}

/* Context: monitor thread */
void qmp_dispatch_stream_error(QmpClient *c, const char *desc)
{
    GError *err = g_error_new_literal(QMP_ERROR, QMP_ERROR_GENERIC, desc);

    reply_send(c, NULL, NULL, err);
    g_error_free(err);
}

/* ---- argument checking ------------------------------------------------ */

static const char *arg_type_name(QmpArgType t)
{
    switch (t) {
    case QMP_ARG_STR:
        return "string";
    case QMP_ARG_INT:
        return "integer";
    case QMP_ARG_UINT:
        return "uint64";
    case QMP_ARG_BOOL:
        return "boolean";
    case QMP_ARG_NUMBER:
        return "number";
    case QMP_ARG_OBJECT:
        return "object";
    case QMP_ARG_ARRAY:
        return "array";
    case QMP_ARG_STR_OR_NULL:
        return "StrOrNull";
    default:
        return "any";
    }
}

static bool value_matches(JsonNode *v, QmpArgType t)
{
    GType vt = JSON_NODE_HOLDS_VALUE(v) ? json_node_get_value_type(v) : G_TYPE_INVALID;

    switch (t) {
    case QMP_ARG_STR:
        return vt == G_TYPE_STRING;
    case QMP_ARG_INT:
        return vt == G_TYPE_INT64;
    case QMP_ARG_UINT:
        return vt == G_TYPE_INT64 && json_node_get_int(v) >= 0;
    case QMP_ARG_BOOL:
        return vt == G_TYPE_BOOLEAN;
    case QMP_ARG_NUMBER:
        return vt == G_TYPE_INT64 || vt == G_TYPE_DOUBLE;
    case QMP_ARG_OBJECT:
        return JSON_NODE_HOLDS_OBJECT(v);
    case QMP_ARG_ARRAY:
        return JSON_NODE_HOLDS_ARRAY(v);
    case QMP_ARG_STR_OR_NULL:
        return vt == G_TYPE_STRING || JSON_NODE_HOLDS_NULL(v);
    default:
        return true;
    }
}

/* Context: monitor thread */
bool qmp_check_arg_type(const char *name, JsonNode *value, QmpArgType type, GError **errp)
{
    if (value_matches(value, type)) {
        return true;
    }
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Invalid parameter type for '%s', expected: %s",
                name, arg_type_name(type));
    return false;
}

/* Declared members first (missing, then type), then leftovers, like QEMU's visitor. */
static JsonObject *check_args(QmpCommand *cmd, JsonObject *in, GError **errp)
{
    JsonObject *out = json_object_new();
    GList *members;

    for (QmpArgSpec *a = cmd->args; a->name; a++) {
        JsonNode *v = in ? json_object_get_member(in, a->name) : NULL;
        if (!v) {
            if (a->optional) {
                continue;
            }
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Parameter '%s' is missing", a->name);
            goto fail;
        }
        if (!qmp_check_arg_type(a->name, v, a->type, errp)) {
            goto fail;
        }
        json_object_set_member(out, a->name, json_node_copy(v));
    }
    if (!in || (cmd->flags & QMP_CMD_EXTRA_ARGS)) {
        return out;
    }
    members = json_object_get_members(in);
    for (GList *l = members; l; l = l->next) {
        if (!json_object_has_member(out, l->data)) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Parameter '%s' is unexpected",
                        (char *)l->data);
            g_list_free(members);
            goto fail;
        }
    }
    g_list_free(members);
    return out;
fail:
    json_object_unref(out);
    return NULL;
}

/* ---- input validation ------------------------------------------------- */

typedef struct QmpInput {
    const char *execute;
    bool oob;
    JsonObject *args;
    JsonNode *id;
} QmpInput;

static bool check_member(QmpClient *c, const char *key, JsonNode *v, QmpInput *in, GError **errp)
{
    bool is_exec = !strcmp(key, "execute");

    if (is_exec || (!strcmp(key, "exec-oob") && qmp_client_oob_enabled(c))) {
        if (!JSON_NODE_HOLDS_VALUE(v) || json_node_get_value_type(v) != G_TYPE_STRING) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "QMP input member '%s' must be a string", key);
            return false;
        }
        in->execute = json_node_get_string(v);
        in->oob = !is_exec;
    } else if (!strcmp(key, "arguments")) {
        if (!JSON_NODE_HOLDS_OBJECT(v)) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "QMP input member 'arguments' must be an object");
            return false;
        }
        in->args = json_node_get_object(v);
    } else if (strcmp(key, "id")) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "QMP input member '%s' is unexpected", key);
        return false;
    }
    return true;
}

static bool check_input(QmpClient *c, JsonObject *obj, QmpInput *in, GError **errp)
{
    GList *members = json_object_get_members(obj);
    bool ok = true;

    for (GList *l = members; l && ok; l = l->next) {
        ok = check_member(c, l->data, json_object_get_member(obj, l->data), in, errp);
    }
    g_list_free(members);
    if (ok && json_object_has_member(obj, "execute") && json_object_has_member(obj, "exec-oob")) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "QMP input member 'execute' clashes with 'exec-oob'");
        return false;
    }
    if (ok && !in->execute) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "QMP input lacks member 'execute'");
        return false;
    }
    return ok;
}

static QmpCommand *lookup_command(QmpClient *c, const QmpInput *in, GError **errp)
{
    QmpCommand *cmd = g_hash_table_lookup(qmp_cmds, in->execute);

    if (!qmp_client_negotiated(c) && strcmp(in->execute, "qmp_capabilities")) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "Expecting capabilities negotiation with 'qmp_capabilities'");
        return NULL;
    }
    if (!cmd) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "The command %s has not been found", in->execute);
        return NULL;
    }
    if (in->oob && !(cmd->flags & QMP_CMD_ALLOW_OOB)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "The command %s does not support OOB",
                    in->execute);
        return NULL;
    }
    return cmd;
}

/* ---- execution -------------------------------------------------------- */

static bool run_command(QmpClient *c, QmpCommand *cmd, JsonObject *raw_args, JsonNode *id)
{
    QmpRequest req = {.cmd = cmd, .client = c, .id = id};
    GError *err = NULL;
    JsonObject *args = check_args(cmd, raw_args, &err);
    JsonNode *result = NULL;

    if (args) {
        result = cmd->fn(&req, args, &err);
        json_object_unref(args);
    }
    if (req.deferred) {
        /* The handler owns the reply now; a synchronous result is a bug. */
        g_warn_if_fail(!result && !err);
        g_clear_pointer(&result, json_node_unref);
        g_clear_error(&err);
        return true;
    }
    reply_send(c, id, result, err);
    g_clear_error(&err);
    return false;
}

/* Context: monitor thread */
bool qmp_run_internal(QmpClient *c, const char *name, JsonObject *args, QmpInternalDone done,
                      void *opaque)
{
    QmpCommand *cmd = g_hash_table_lookup(qmp_cmds, name);
    QmpRequest req = {.cmd = cmd, .client = c};
    GError *err = NULL;
    JsonObject *checked;
    JsonNode *result = NULL;

    if (!cmd) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "The command %s has not been found", name);
        done(NULL, err, opaque);
        return false;
    }
    checked = check_args(cmd, args, &err);
    if (checked) {
        result = cmd->fn(&req, checked, &err);
        json_object_unref(checked);
    }
    if (req.deferred) {
        g_warn_if_fail(!result && !err);
        g_clear_pointer(&result, json_node_unref);
        g_clear_error(&err);
        req.deferred->done = done;
        req.deferred->done_opaque = opaque;
        return true;
    }
    if (!err && !result) {
        JsonObject *empty = json_object_new();

        result = json_node_init_object(json_node_alloc(), empty);
        json_object_unref(empty);
    }
    done(result, err, opaque);
    return false;
}

/* Context: monitor thread */
bool qmp_dispatch_text(QmpClient *c, const char *text, size_t len)
{
    GError *err = NULL;
    JsonNode *root = qmp_json_parse(text, len, &err);
    QmpInput in = {0};
    QmpCommand *cmd;
    bool deferred = false;

    if (root && !JSON_NODE_HOLDS_OBJECT(root)) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC, "QMP input must be a JSON object");
    } else if (root) {
        in.id = json_object_get_member(json_node_get_object(root), "id");
        if (check_input(c, json_node_get_object(root), &in, &err)) {
            cmd = lookup_command(c, &in, &err);
            if (cmd) {
                deferred = run_command(c, cmd, in.args, in.id);
            }
        }
    }
    if (err) {
        reply_send(c, in.id, NULL, err);
        g_error_free(err);
    }
    if (root) {
        json_node_unref(root);
    }
    return deferred;
}

/* ---- deferred replies ------------------------------------------------- */

/* Context: monitor thread */
QmpDeferred *qmp_request_defer(QmpRequest *req)
{
    QmpDeferred *d;

    g_return_val_if_fail(!req->deferred, req->deferred);
    d = g_new0(QmpDeferred, 1);
    d->client = qmp_client_ref(req->client);
    d->id = req->id ? json_node_copy(req->id) : NULL;
    req->deferred = d;
    return d;
}

static gboolean deferred_complete(gpointer opaque)
{
    QmpDeferred *d = opaque;

    if (d->done) {
        d->done(d->result, d->error, d->done_opaque);
        d->result = NULL;
        d->error = NULL;
    } else if (qmp_client_alive(d->client)) {
        reply_send(d->client, d->id, d->result, d->error);
        d->result = NULL; /* reply_send took it */
        qmp_client_resume(d->client);
    }
    g_clear_pointer(&d->result, json_node_unref);
    g_clear_error(&d->error);
    g_clear_pointer(&d->id, json_node_unref);
    qmp_client_unref(d->client);
    g_free(d);
    return G_SOURCE_REMOVE;
}

/* Context: any thread */
void qmp_reply_deferred(QmpDeferred *token, JsonNode *result, GError *error)
{
    GSource *src;

    g_return_if_fail(token);
    if (error) {
        g_clear_pointer(&result, json_node_unref);
    }
    token->result = result;
    token->error = error;
    /*
     * Always go through the loop, even from the monitor thread: the handler
     * that deferred may still be on the stack, and the reply must follow it.
     */
    src = g_idle_source_new();
    g_source_set_priority(src, G_PRIORITY_DEFAULT);
    g_source_set_callback(src, deferred_complete, token, NULL);
    g_source_attach(src, qmp_ctx);
    g_source_unref(src);
}

/* ---- events ----------------------------------------------------------- */

static gboolean event_broadcast_cb(gpointer opaque)
{
    qmp_clients_broadcast(opaque);
    return G_SOURCE_REMOVE;
}

/* Context: any thread */
void qmp_event_emit(const char *name, JsonNode *data)
{
    gint64 now = g_get_real_time();
    JsonObject *o = json_object_new(), *ts = json_object_new();
    JsonNode *ev;
    GString *line = g_string_new(NULL);

    json_object_set_int_member(ts, "seconds", now / G_USEC_PER_SEC);
    json_object_set_int_member(ts, "microseconds", now % G_USEC_PER_SEC);
    json_object_set_object_member(o, "timestamp", ts);
    json_object_set_string_member(o, "event", name);
    if (data) {
        json_object_set_member(o, "data", data);
    }
    ev = json_node_init_object(json_node_alloc(), o);
    json_object_unref(o);
    qmp_json_write(line, ev);
    g_string_append(line, "\r\n");
    json_node_unref(ev);
    if (qmp_in_monitor_thread()) {
        qmp_clients_broadcast(line->str);
        g_string_free(line, TRUE);
    } else if (qmp_ctx) {
        /* Not g_main_context_invoke(): it could run the broadcast right here. */
        GSource *src = g_idle_source_new();
        g_source_set_priority(src, G_PRIORITY_DEFAULT);
        g_source_set_callback(src, event_broadcast_cb, g_string_free(line, FALSE), g_free);
        g_source_attach(src, qmp_ctx);
        g_source_unref(src);
    } else {
        g_string_free(line, TRUE);
    }
}

/* ---- lifecycle ------------------------------------------------------- */

/* Context: monitor thread (before the loop runs) */
void qmp_init(GMainContext *ctx)
{
    if (qmp_cmds) {
        return;
    }
    qmp_ctx = g_main_context_ref(ctx ?: g_main_context_default());
    qmp_dispatch_init();
    qom_init();
    qmp_commands_register();
    qom_commands_register();
    hmp_commands_register();
}

/* Context: monitor thread */
void qmp_cleanup(void)
{
    if (!qmp_cmds) {
        return;
    }
    qmp_monitors_close_all();
    qmp_chardevs_cleanup();
    qmp_commands_cleanup();
    qom_cleanup();
    qmp_dispatch_cleanup();
    g_clear_pointer(&qmp_ctx, g_main_context_unref);
}

/* Context: monitor thread */
void qmp_flush(int timeout_ms)
{
    qmp_monitors_flush(timeout_ms);
}
