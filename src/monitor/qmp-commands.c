/*
 * Generic QMP commands: negotiation, introspection, and the run-state
 * commands whose machine-specific work the VMM supplies as hooks.  State
 * transitions and event order follow QEMU 7.2 (e.g. a second "stop" is a
 * silent success, "cont" after shutdown needs a reset).
 */
#include <string.h>
#include "qmp-internal.h"

static QmpMachineHooks qmp_hooks;
static QmpRunState qmp_state = QMP_RUN_STATE_PRELAUNCH;

static JsonNode *empty_object(void)
{
    JsonObject *o = json_object_new();
    JsonNode *n = json_node_init_object(json_node_alloc(), o);

    json_object_unref(o); /* the node took its own reference */
    return n;
}

/* ---- negotiation and introspection ------------------------------------ */

static bool caps_check(QmpClient *c, JsonArray *enable, bool *oob, GError **errp)
{
    for (guint i = 0; enable && i < json_array_get_length(enable); i++) {
        JsonNode *v = json_array_get_element(enable, i);
        g_autofree char *name = g_strdup_printf("enable[%u]", i);

        if (!qmp_check_arg_type(name, v, QMP_ARG_STR, errp)) {
            return false;
        }
        if (strcmp(json_node_get_string(v), "oob")) {
            /* QEMU 7.2's visitor really names the list element 'null' here. */
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Parameter 'null' does not accept value '%s'", json_node_get_string(v));
            return false;
        }
        if (!qmp_client_oob_offered(c)) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Capability 'oob' not available");
            return false;
        }
        *oob = true;
    }
    return true;
}

static JsonNode *cmd_qmp_capabilities(QmpRequest *req, JsonObject *args, GError **errp)
{
    QmpClient *c = qmp_request_client(req);
    JsonArray *enable = json_object_has_member(args, "enable")
                            ? json_object_get_array_member(args, "enable")
                            : NULL;
    bool oob = false;

    if (qmp_client_negotiated(c)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_COMMAND_NOT_FOUND,
                    "Capabilities negotiation is already complete, command ignored");
        return NULL;
    }
    if (!caps_check(c, enable, &oob, errp)) {
        return NULL;
    }
    qmp_client_set_negotiated(c, oob);
    return NULL;
}

static JsonNode *cmd_query_version(QmpRequest *req, JsonObject *args, GError **errp)
{
    return qmp_version_node();
}

static JsonNode *cmd_query_commands(QmpRequest *req, JsonObject *args, GError **errp)
{
    GPtrArray *cmds = qmp_command_list();
    JsonArray *arr = json_array_new();
    JsonNode *n;

    for (guint i = 0; i < cmds->len; i++) {
        QmpCommand *cmd = cmds->pdata[i];
        JsonObject *o = json_object_new();
        json_object_set_string_member(o, "name", cmd->name);
        json_array_add_object_element(arr, o);
    }
    n = json_node_init_array(json_node_alloc(), arr);
    json_array_unref(arr);
    return n;
}

static JsonNode *cmd_query_qmp_schema(QmpRequest *req, JsonObject *args, GError **errp)
{
    return qmp_schema_build();
}

/* Context: any thread */
JsonNode *qmp_version_node(void)
{
    JsonObject *v = json_object_new(), *q = json_object_new();
    JsonNode *n;

    json_object_set_int_member(q, "micro", QMP_QEMU_MICRO);
    json_object_set_int_member(q, "minor", QMP_QEMU_MINOR);
    json_object_set_int_member(q, "major", QMP_QEMU_MAJOR);
    json_object_set_object_member(v, "qemu", q);
    json_object_set_string_member(v, "package", "vblk-" VBLK_VERSION);
    n = json_node_init_object(json_node_alloc(), v);
    json_object_unref(v);
    return n;
}

/* Context: any thread */
JsonNode *qmp_greeting(bool oob_offered)
{
    JsonObject *g = json_object_new(), *qmp = json_object_new();
    JsonArray *caps = json_array_new();
    JsonNode *n;

    if (oob_offered) {
        json_array_add_string_element(caps, "oob");
    }
    json_object_set_member(qmp, "version", qmp_version_node());
    json_object_set_array_member(qmp, "capabilities", caps);
    json_object_set_object_member(g, "QMP", qmp);
    n = json_node_init_object(json_node_alloc(), g);
    json_object_unref(g);
    return n;
}

/* ---- run state -------------------------------------------------------- */

/* Context: any thread */
static const char *qmp_run_state_name(QmpRunState state)
{
    static const char *const names[QMP_RUN_STATE__MAX] = {
        [QMP_RUN_STATE_PRELAUNCH] = "prelaunch",
        [QMP_RUN_STATE_RUNNING] = "running",
        [QMP_RUN_STATE_PAUSED] = "paused",
        [QMP_RUN_STATE_IO_ERROR] = "io-error",
        [QMP_RUN_STATE_INTERNAL_ERROR] = "internal-error",
        [QMP_RUN_STATE_SHUTDOWN] = "shutdown",
        [QMP_RUN_STATE_SUSPENDED] = "suspended",
        [QMP_RUN_STATE_GUEST_PANICKED] = "guest-panicked",
    };
    return (unsigned)state < QMP_RUN_STATE__MAX ? names[state] : "internal-error";
}

/* Context: monitor thread */
QmpRunState qmp_run_state_get(void)
{
    return __atomic_load_n(&qmp_state, __ATOMIC_RELAXED);
}

/* Context: monitor thread */
void qmp_run_state_set(QmpRunState state)
{
    __atomic_store_n(&qmp_state, state, __ATOMIC_RELAXED);
}

/* Context: any thread (a relaxed read, for diagnostics) */
const char *qmp_run_state_peek_name(void)
{
    return qmp_run_state_name(__atomic_load_n(&qmp_state, __ATOMIC_RELAXED));
}

/* Context: monitor thread */
void qmp_machine_set_hooks(const QmpMachineHooks *hooks)
{
    if (hooks) {
        qmp_hooks = *hooks;
    } else {
        memset(&qmp_hooks, 0, sizeof(qmp_hooks));
    }
}

/* Context: monitor thread */
bool qmp_vm_stop(QmpRunState state, GError **errp)
{
    if (qmp_state != QMP_RUN_STATE_RUNNING) {
        return true; /* as QEMU's do_vm_stop(): nothing to stop, no event */
    }
    if (qmp_hooks.stop && !qmp_hooks.stop(qmp_hooks.opaque, errp)) {
        return false;
    }
    qmp_state = state;
    qmp_event_emit("STOP", NULL);
    return true;
}

/* A stop asked for by qmp_vm_stop_request(), not yet done: its idle source. */
static guint stop_request_src;
static QmpRunState stop_request_state;

static gboolean stop_request_run(gpointer unused)
{
    GError *err = NULL;

    stop_request_src = 0;
    if (!qmp_vm_stop(stop_request_state, &err)) {
        g_printerr("vblk: stopping the VM (%s): %s\n", qmp_run_state_name(stop_request_state),
                   err->message);
        g_error_free(err);
    }
    return G_SOURCE_REMOVE;
}

/* Context: monitor thread */
void qmp_vm_stop_request(QmpRunState state)
{
    if (qmp_state != QMP_RUN_STATE_RUNNING || stop_request_src) {
        return;
    }
    stop_request_state = state;
    {
        /* the monitor's context; not at idle priority: a busy loop would starve it */
        GSource *src = g_idle_source_new();

        g_source_set_priority(src, G_PRIORITY_DEFAULT);
        g_source_set_callback(src, stop_request_run, NULL, NULL);
        stop_request_src = g_source_attach(src, qmp_context());
        g_source_unref(src);
    }
}

/* Context: monitor thread */
bool qmp_vm_cont(GError **errp)
{
    if (qmp_state == QMP_RUN_STATE_SHUTDOWN || qmp_state == QMP_RUN_STATE_INTERNAL_ERROR ||
        qmp_state == QMP_RUN_STATE_GUEST_PANICKED) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Resetting the Virtual Machine is required");
        return false;
    }
    if (qmp_state == QMP_RUN_STATE_RUNNING) {
        if (stop_request_src) {
            /*
             * As QEMU's vm_prepare_start(): `cont` cancels a stop that was
             * asked for and not yet done, with a STOP/RESUME pair of events;
             * unlike QEMU, what waits for `cont` (I/O parked by werror=stop)
             * is resumed too, instead of waiting for the next stop and cont.
             */
            g_source_destroy(g_main_context_find_source_by_id(qmp_context(), stop_request_src));
            stop_request_src = 0;
            if (qmp_hooks.cont && !qmp_hooks.cont(qmp_hooks.opaque, errp)) {
                return false;
            }
            qmp_event_emit("STOP", NULL);
            qmp_event_emit("RESUME", NULL);
        }
        return true;
    }
    if (qmp_hooks.cont && !qmp_hooks.cont(qmp_hooks.opaque, errp)) {
        return false;
    }
    qmp_state = QMP_RUN_STATE_RUNNING;
    qmp_event_emit("RESUME", NULL);
    return true;
}

static JsonNode *guest_reason_data(bool guest, const char *reason)
{
    JsonObject *o = json_object_new();
    JsonNode *n;

    json_object_set_boolean_member(o, "guest", guest);
    json_object_set_string_member(o, "reason", reason);
    n = json_node_init_object(json_node_alloc(), o);
    json_object_unref(o);
    return n;
}

/* Context: monitor thread */
void qmp_emit_shutdown(bool guest, const char *reason)
{
    qmp_event_emit("SHUTDOWN", guest_reason_data(guest, reason));
}

/* Context: monitor thread */
void qmp_emit_reset(bool guest, const char *reason)
{
    qmp_event_emit("RESET", guest_reason_data(guest, reason));
}

static JsonNode *cmd_query_status(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonObject *o = json_object_new();
    JsonNode *n;

    json_object_set_string_member(o, "status", qmp_run_state_name(qmp_state));
    json_object_set_boolean_member(o, "singlestep", false);
    json_object_set_boolean_member(o, "running", qmp_state == QMP_RUN_STATE_RUNNING);
    n = json_node_init_object(json_node_alloc(), o);
    json_object_unref(o);
    return n;
}

static JsonNode *cmd_stop(QmpRequest *req, JsonObject *args, GError **errp)
{
    return qmp_vm_stop(QMP_RUN_STATE_PAUSED, errp) ? empty_object() : NULL;
}

static JsonNode *cmd_cont(QmpRequest *req, JsonObject *args, GError **errp)
{
    return qmp_vm_cont(errp) ? empty_object() : NULL;
}

static JsonNode *cmd_system_powerdown(QmpRequest *req, JsonObject *args, GError **errp)
{
    qmp_event_emit("POWERDOWN", NULL);
    if (qmp_hooks.powerdown && !qmp_hooks.powerdown(qmp_hooks.opaque, errp)) {
        return NULL;
    }
    return empty_object();
}

static JsonNode *cmd_system_reset(QmpRequest *req, JsonObject *args, GError **errp)
{
    bool was_shutdown = qmp_state == QMP_RUN_STATE_SHUTDOWN;

    if (qmp_hooks.reset && !qmp_hooks.reset(qmp_hooks.opaque, errp)) {
        return NULL;
    }
    if (!was_shutdown && qmp_state == QMP_RUN_STATE_SHUTDOWN) {
        return empty_object(); /* -no-reboot: the hook shut down (SHUTDOWN sent) instead */
    }
    qmp_emit_reset(false, "host-qmp-system-reset");
    if (qmp_state != QMP_RUN_STATE_RUNNING) {
        qmp_state = QMP_RUN_STATE_PRELAUNCH; /* as QEMU's main loop after a reset */
    }
    return empty_object();
}

static gboolean quit_cb(gpointer opaque)
{
    /* Give the reply a chance to reach the client before the process goes. */
    qmp_flush(1000);
    if (qmp_hooks.quit) {
        qmp_hooks.quit(qmp_hooks.opaque);
    }
    return G_SOURCE_REMOVE;
}

static JsonNode *cmd_quit(QmpRequest *req, JsonObject *args, GError **errp)
{
    GSource *src = g_idle_source_new();

    qmp_state = QMP_RUN_STATE_SHUTDOWN;
    qmp_emit_shutdown(false, "host-qmp-quit");
    g_source_set_callback(src, quit_cb, NULL, NULL);
    g_source_attach(src, qmp_context());
    g_source_unref(src);
    return empty_object();
}

/* ---- registration ------------------------------------------------------ */

static void qmp_commands_describe(void);

/* Context: monitor thread */
void qmp_commands_register(void)
{
    static const QmpArgSpec caps_args[] = {
        {"enable", QMP_ARG_ARRAY, true},
        QMP_ARGS_END,
    };

    qmp_register_command("qmp_capabilities", cmd_qmp_capabilities, caps_args, 0, NULL);
    qmp_register_command("query-version", cmd_query_version, NULL, 0, NULL);
    qmp_register_command("query-commands", cmd_query_commands, NULL, 0, NULL);
    qmp_register_command("query-qmp-schema", cmd_query_qmp_schema, NULL, 0, NULL);
    qmp_register_command("query-status", cmd_query_status, NULL, 0, NULL);
    qmp_register_command("stop", cmd_stop, NULL, 0, NULL);
    qmp_register_command("cont", cmd_cont, NULL, 0, NULL);
    qmp_register_command("system_powerdown", cmd_system_powerdown, NULL, 0, NULL);
    qmp_register_command("system_reset", cmd_system_reset, NULL, 0, NULL);
    qmp_register_command("quit", cmd_quit, NULL, 0, NULL);
    qmp_commands_describe();
}

/* query-qmp-schema: QEMU 7.2's types for these commands and the library's events. */
static void qmp_commands_describe(void)
{
    static const char *const reason = "{'enum': ['none', 'host-error', 'host-qmp-quit', "
                                      "'host-qmp-system-reset', 'host-signal', 'host-ui', "
                                      "'guest-shutdown', 'guest-reset', 'guest-panic', "
                                      "'subsystem-reset', 'snapshot-load']}";
    g_autofree char *guest_reason = g_strdup_printf("{'guest': 'bool', 'reason': %s}", reason);
    static const char *const no_args[] = {"stop", "cont", "system_powerdown", "system_reset",
                                          "quit"};

    qmp_schema_describe("qmp_capabilities", "{'*enable': [{'enum': ['oob']}]}", "{}", NULL);
    qmp_schema_describe("query-version", NULL,
                        "{'qemu': {'major': 'int', 'minor': 'int', 'micro': 'int'}, "
                        "'package': 'str'}",
                        NULL);
    qmp_schema_describe("query-commands", NULL, "[{'name': 'str'}]", NULL);
    /* SchemaInfo's common members; QEMU's union variants are not expressed. */
    qmp_schema_describe("query-qmp-schema", NULL,
                        "[{'name': 'str', 'meta-type': {'enum': ['builtin', 'enum', 'array', "
                        "'object', 'alternate', 'command', 'event']}, '*features': ['str']}]",
                        NULL);
    qmp_schema_describe("query-status", NULL,
                        "{'running': 'bool', 'singlestep': 'bool', 'status': {'enum': ['debug', "
                        "'inmigrate', 'internal-error', 'io-error', 'paused', 'postmigrate', "
                        "'prelaunch', 'finish-migrate', 'restore-vm', 'running', 'save-vm', "
                        "'shutdown', 'suspended', 'watchdog', 'guest-panicked', 'colo']}}",
                        NULL);
    for (size_t i = 0; i < G_N_ELEMENTS(no_args); i++) {
        qmp_schema_describe(no_args[i], NULL, "{}", NULL);
    }
    qmp_schema_describe("qom-list", NULL,
                        "[{'name': 'str', 'type': 'str', '*description': 'str', "
                        "'*default-value': 'any'}]",
                        NULL);
    qmp_schema_describe("qom-get", NULL, "'any'", NULL);
    qmp_schema_describe("qom-set", NULL, "{}", NULL);
    qmp_schema_add_event("STOP", NULL, NULL);
    qmp_schema_add_event("RESUME", NULL, NULL);
    qmp_schema_add_event("POWERDOWN", NULL, NULL);
    qmp_schema_add_event("SHUTDOWN", guest_reason, NULL);
    qmp_schema_add_event("RESET", guest_reason, NULL);
}

/* Context: monitor thread */
void qmp_commands_cleanup(void)
{
    memset(&qmp_hooks, 0, sizeof(qmp_hooks));
    qmp_state = QMP_RUN_STATE_PRELAUNCH;
    qmp_schema_cleanup();
}
