/*
 * virtio-blk-pci over QMP: the QOM object /machine/peripheral/<id> with its
 * runtime-switchable x-data-plane property, query-block, query-blockstats,
 * block_resize, block_set_io_throttle, x-query-virtio-blk-dataplane, and the
 * BLOCK_IO_ERROR / VBLK_DATAPLANE_SWITCH events.
 *
 * Context: everything runs in the main thread with the BQL held (QMP is
 * dispatched from the main loop, which holds it outside poll()).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <string.h>

#include "vblk/qmp.h"
#include "virtio-blk-pci-int.h"

static GPtrArray *devices; /* VirtIOBlkPCI* */

static JsonNode *build(JsonBuilder *b)
{
    JsonNode *n = json_builder_get_root(b);

    g_object_unref(b);
    return n;
}

static VirtIOBlkPCI *find_device(const char *name)
{
    for (guint i = 0; devices && name && i < devices->len; i++) {
        VirtIOBlkPCI *s = devices->pdata[i];

        if (!strcmp(s->id, name) || !strcmp(s->drive_id, name) ||
            !strcmp(blk_root_node_name(s->backend), name)) {
            return s;
        }
    }
    return NULL;
}

static VirtIOBlkPCI *lookup_arg(JsonObject *args, const char *key, const char *key2, GError **errp)
{
    const char *name = json_object_has_member(args, key) ? json_object_get_string_member(args, key)
                       : (key2 && json_object_has_member(args, key2))
                           ? json_object_get_string_member(args, key2)
                           : NULL;
    VirtIOBlkPCI *s = find_device(name);

    if (!name) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Parameter '%s' is missing", key);
    } else if (!s) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_FOUND, "Device '%s' not found", name);
    }
    return s;
}

static bool is_dataplane(VirtIOBlkPCI *s)
{
    return s->sw ? dp_switch_is_dataplane(s->sw) : s->data_plane;
}

/* ---- x-data-plane ---- */

static JsonNode *prop_dp_get(const char *path, const char *name, void *opaque, GError **errp)
{
    JsonNode *n = json_node_new(JSON_NODE_VALUE);

    json_node_set_boolean(n, is_dataplane(opaque));
    return n;
}

static void emit_switch(VirtIOBlkPCI *s, bool on)
{
    JsonBuilder *b = json_builder_new();
    DpSwitchStats st = {0};

    if (s->sw) {
        dp_switch_get_stats(s->sw, &st);
    }
    json_builder_begin_object(b);
    json_builder_set_member_name(b, "device");
    json_builder_add_string_value(b, s->id);
    json_builder_set_member_name(b, "path");
    json_builder_add_string_value(b, on ? "dataplane" : "block-layer");
    json_builder_set_member_name(b, "stall-ns");
    json_builder_add_int_value(b, (gint64)st.last_stall_ns);
    json_builder_end_object(b);
    qmp_event_emit("VBLK_DATAPLANE_SWITCH", build(b));
}

static bool prop_dp_set(const char *path, const char *name, JsonNode *value, QmpRequest *req,
                        void *opaque, GError **errp)
{
    VirtIOBlkPCI *s = opaque;
    bool on = json_node_get_boolean(value);
    bool was = is_dataplane(s);

    if (qmp_run_state_get() == QMP_RUN_STATE_IO_ERROR) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Cannot switch '%s' while the VM is stopped on an I/O error (use cont)", s->id);
        return false;
    }
    if (on && s->no_dataplane) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Cannot switch '%s' to the dataplane: %s",
                    s->id, s->no_dataplane);
        return false;
    }
    if (s->sw && !dp_switch_set_dataplane(s->sw, on, errp)) {
        return false;
    }
    s->data_plane = on;
    if (was != on) {
        emit_switch(s, on);
    }
    return true;
}

static JsonNode *prop_str_get(const char *path, const char *name, void *opaque, GError **errp)
{
    VirtIOBlkPCI *s = opaque;
    JsonNode *n = json_node_new(JSON_NODE_VALUE);

    json_node_set_string(n, !strcmp(name, "drive") ? s->drive_id : s->id);
    return n;
}

/* ---- query-block ---- */

static void add_bool(JsonBuilder *b, const char *k, bool v)
{
    json_builder_set_member_name(b, k);
    json_builder_add_boolean_value(b, v);
}

static void add_str(JsonBuilder *b, const char *k, const char *v)
{
    json_builder_set_member_name(b, k);
    json_builder_add_string_value(b, v);
}

static void add_int(JsonBuilder *b, const char *k, int64_t v)
{
    json_builder_set_member_name(b, k);
    json_builder_add_int_value(b, v);
}

static JsonNode *cmd_query_block(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonBuilder *b = json_builder_new();

    json_builder_begin_array(b);
    for (guint i = 0; devices && i < devices->len; i++) {
        VirtIOBlkPCI *s = devices->pdata[i];
        g_autofree char *qdev = g_strdup_printf("/machine/peripheral/%s/virtio-backend", s->id);
        int64_t len = blk_getlength(s->backend);

        json_builder_begin_object(b);
        add_str(b, "device", s->drive_id);
        add_str(b, "qdev", qdev);
        add_str(b, "type", "unknown");
        add_bool(b, "removable", false);
        add_bool(b, "locked", false);
        add_str(b, "io-status", "ok");
        add_bool(b, "x-data-plane", is_dataplane(s));
        json_builder_set_member_name(b, "inserted");
        json_builder_begin_object(b);
        add_str(b, "file", blk_get_filename(s->backend));
        add_str(b, "node-name", blk_root_node_name(s->backend));
        add_bool(b, "ro", blk_is_read_only(s->backend));
        add_str(b, "drv", blk_root_driver_name(s->backend));
        add_bool(b, "encrypted", false);
        add_str(b, "detect_zeroes", "off");
        json_builder_set_member_name(b, "cache");
        json_builder_begin_object(b);
        add_bool(b, "writeback", virtio_blk_get_writeback(s->blk));
        add_bool(b, "direct", s->direct);
        add_bool(b, "no-flush", false);
        json_builder_end_object(b);
        json_builder_set_member_name(b, "image");
        json_builder_begin_object(b);
        add_str(b, "filename", blk_get_filename(s->backend));
        add_str(b, "format", "raw");
        add_int(b, "virtual-size", len < 0 ? 0 : len);
        json_builder_end_object(b);
        json_builder_end_object(b);
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    return build(b);
}

/* ---- query-blockstats ---- */

static JsonNode *cmd_query_blockstats(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonBuilder *b = json_builder_new();

    json_builder_begin_array(b);
    for (guint i = 0; devices && i < devices->len; i++) {
        VirtIOBlkPCI *s = devices->pdata[i];
        BlockAcctStats st;

        blk_get_stats(s->backend, &st);
        json_builder_begin_object(b);
        add_str(b, "device", s->drive_id);
        add_str(b, "node-name", blk_root_node_name(s->backend));
        json_builder_set_member_name(b, "stats");
        json_builder_begin_object(b);
#define STAT(name) add_int(b, #name, (int64_t)st.name)
        STAT(rd_bytes);
        STAT(wr_bytes);
        STAT(unmap_bytes);
        STAT(rd_operations);
        STAT(wr_operations);
        STAT(flush_operations);
        STAT(unmap_operations);
        STAT(rd_merged);
        STAT(wr_merged);
        STAT(unmap_merged);
        STAT(rd_total_time_ns);
        STAT(wr_total_time_ns);
        STAT(flush_total_time_ns);
        STAT(unmap_total_time_ns);
        STAT(failed_rd_operations);
        STAT(failed_wr_operations);
        STAT(failed_flush_operations);
        STAT(failed_unmap_operations);
        STAT(invalid_rd_operations);
        STAT(invalid_wr_operations);
        STAT(invalid_flush_operations);
        STAT(invalid_unmap_operations);
#undef STAT
        if (st.idle_time_ns >= 0) {
            add_int(b, "idle_time_ns", st.idle_time_ns);
        }
        add_bool(b, "account_invalid", st.account_invalid);
        add_bool(b, "account_failed", st.account_failed);
        json_builder_set_member_name(b, "timed_stats");
        json_builder_begin_array(b);
        json_builder_end_array(b);
        json_builder_end_object(b);
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    return build(b);
}

/* ---- x-query-virtio-blk-dataplane ---- */

static void add_queue_stats(JsonBuilder *b, DataPlane *dp, unsigned q)
{
    DataPlaneQueueStats st;

    dataplane_get_queue_stats(dp, q, &st);
    json_builder_begin_object(b);
    add_int(b, "index", q);
    add_int(b, "requests", (int64_t)st.requests);
    add_int(b, "completed", (int64_t)st.completed);
    add_int(b, "batches", (int64_t)st.batches);
    add_int(b, "kicks", (int64_t)st.kicks);
    add_int(b, "interrupts", (int64_t)st.irqs);
    add_int(b, "interrupts-suppressed", (int64_t)st.irqs_suppressed);
    add_int(b, "in-flight", (int64_t)st.inflight);
    add_int(b, "throttle-waits", (int64_t)st.throttle_waits);
    add_int(b, "cycles-pop", (int64_t)st.cycles_pop);
    add_int(b, "cycles-submit", (int64_t)st.cycles_submit);
    add_int(b, "cycles-complete", (int64_t)st.cycles_complete);
    add_int(b, "cycles-notify", (int64_t)st.cycles_notify);
    json_builder_end_object(b);
}

static JsonNode *cmd_query_dataplane(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonBuilder *b = json_builder_new();

    json_builder_begin_array(b);
    for (guint i = 0; devices && i < devices->len; i++) {
        VirtIOBlkPCI *s = devices->pdata[i];
        DpSwitchStats sw = {0};
        IOQStats io = {0};

        json_builder_begin_object(b);
        add_str(b, "device", s->id);
        add_bool(b, "x-data-plane", is_dataplane(s));
        add_bool(b, "started", s->sw != NULL);
        add_int(b, "num-queues", s->nq);
        if (s->sw) {
            dp_switch_get_stats(s->sw, &sw);
            dataplane_get_ioq_stats(dp_switch_dataplane(s->sw), &io);
        }
        add_int(b, "switches", (int64_t)sw.switches);
        add_int(b, "last-switch-stall-ns", (int64_t)sw.last_stall_ns);
        add_int(b, "max-switch-stall-ns", (int64_t)sw.max_stall_ns);
        add_str(b, "aio", s->engine);
        add_int(b, "bounces", (int64_t)io.bounces);
        add_int(b, "retries", (int64_t)io.retries);
        add_int(b, "submit-calls", (int64_t)io.batches);
        json_builder_set_member_name(b, "queues");
        json_builder_begin_array(b);
        for (unsigned q = 0; s->sw && q < s->nq; q++) {
            add_queue_stats(b, dp_switch_dataplane(s->sw), q);
        }
        json_builder_end_array(b);
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    return build(b);
}

/* ---- block_resize, block_set_io_throttle ---- */

static JsonNode *cmd_block_resize(QmpRequest *req, JsonObject *args, GError **errp)
{
    VirtIOBlkPCI *s = lookup_arg(args, "device", "node-name", errp);
    int64_t size = json_object_get_int_member(args, "size");

    if (!s) {
        return NULL;
    }
    if (size < 0 || size % 512) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Parameter 'size' expects a non-negative multiple of 512");
        return NULL;
    }
    if (!blk_truncate(s->backend, (uint64_t)size, errp)) {
        return NULL;
    }
    virtio_blk_set_capacity(s->blk, (uint64_t)size / 512);
    virtio_pci_notify_config(s->vp); /* QMP runs with the BQL held */
    return NULL;
}

/* BlockIOThrottle members -> bucket fields, in QEMU's order. */
enum { T_AVG, T_MAX, T_LEN };
static const struct {
    const char *arg;
    ThrottleBucketType bucket;
    int field;
} throttle_args[] = {
    {"bps", THROTTLE_BPS_TOTAL, T_AVG},
    {"bps_rd", THROTTLE_BPS_READ, T_AVG},
    {"bps_wr", THROTTLE_BPS_WRITE, T_AVG},
    {"iops", THROTTLE_OPS_TOTAL, T_AVG},
    {"iops_rd", THROTTLE_OPS_READ, T_AVG},
    {"iops_wr", THROTTLE_OPS_WRITE, T_AVG},
    {"bps_max", THROTTLE_BPS_TOTAL, T_MAX},
    {"bps_rd_max", THROTTLE_BPS_READ, T_MAX},
    {"bps_wr_max", THROTTLE_BPS_WRITE, T_MAX},
    {"iops_max", THROTTLE_OPS_TOTAL, T_MAX},
    {"iops_rd_max", THROTTLE_OPS_READ, T_MAX},
    {"iops_wr_max", THROTTLE_OPS_WRITE, T_MAX},
    {"bps_max_length", THROTTLE_BPS_TOTAL, T_LEN},
    {"bps_rd_max_length", THROTTLE_BPS_READ, T_LEN},
    {"bps_wr_max_length", THROTTLE_BPS_WRITE, T_LEN},
    {"iops_max_length", THROTTLE_OPS_TOTAL, T_LEN},
    {"iops_rd_max_length", THROTTLE_OPS_READ, T_LEN},
    {"iops_wr_max_length", THROTTLE_OPS_WRITE, T_LEN},
};

static JsonNode *cmd_block_set_io_throttle(QmpRequest *req, JsonObject *args, GError **errp)
{
    bool has_dev = json_object_has_member(args, "device");
    bool has_id = json_object_has_member(args, "id");
    VirtIOBlkPCI *s;
    ThrottleLimits l;

    if (has_dev == has_id) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Need exactly one of 'device' and 'id'");
        return NULL;
    }
    s = lookup_arg(args, "device", "id", errp);
    if (!s) {
        return NULL;
    }
    if (json_object_has_member(args, "group")) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Throttle groups are not supported");
        return NULL;
    }
    /*
     * As QEMU, the int members land in unsigned fields: a negative value is
     * huge and throttle_limits_validate() refuses it with QEMU's message.
     */
    throttle_limits_init(&l);
    for (size_t i = 0; i < G_N_ELEMENTS(throttle_args); i++) {
        ThrottleBucketLimit *b = &l.b[throttle_args[i].bucket];
        uint64_t v;

        if (!json_object_has_member(args, throttle_args[i].arg)) {
            continue;
        }
        v = (uint64_t)json_object_get_int_member(args, throttle_args[i].arg);
        *(throttle_args[i].field == T_AVG   ? &b->avg
          : throttle_args[i].field == T_MAX ? &b->max
                                            : &b->burst_length) = v;
    }
    if (json_object_has_member(args, "iops_size")) {
        l.iops_size = (uint64_t)json_object_get_int_member(args, "iops_size");
    }
    /* The drive's limits, whatever path runs now or later (docs/qmp.md). */
    if (s->sw) {
        dp_switch_set_io_limits(s->sw, &l, errp);
    } else {
        blk_set_io_limits(s->backend, &l, errp);
    }
    return NULL;
}

/* ---- query-iothreads ---- */

static void add_iothread(const char *id, IOThread *t, int64_t max_ns, int64_t grow, int64_t shrink,
                         void *opaque)
{
    JsonBuilder *b = opaque;

    json_builder_begin_object(b);
    add_str(b, "id", id);
    add_int(b, "thread-id", iothread_get_thread_id(t));
    add_int(b, "poll-max-ns", max_ns);
    add_int(b, "poll-grow", grow);
    add_int(b, "poll-shrink", shrink);
    add_int(b, "aio-max-batch", 32);
    json_builder_end_object(b);
}

static JsonNode *cmd_query_iothreads(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonBuilder *b = json_builder_new();

    json_builder_begin_array(b);
    blk_pci_foreach_iothread(add_iothread, b);
    json_builder_end_array(b);
    return build(b);
}

static void register_commands(void)
{
    static const QmpArgSpec none[] = {QMP_ARGS_END};
    static const QmpArgSpec resize[] = {{"device", QMP_ARG_STR, true},
                                        {"node-name", QMP_ARG_STR, true},
                                        {"size", QMP_ARG_INT, false},
                                        QMP_ARGS_END};
    static const QmpArgSpec throttle[] = {{"device", QMP_ARG_STR, true},
                                          {"id", QMP_ARG_STR, true},
                                          {"bps", QMP_ARG_INT, false},
                                          {"bps_rd", QMP_ARG_INT, false},
                                          {"bps_wr", QMP_ARG_INT, false},
                                          {"iops", QMP_ARG_INT, false},
                                          {"iops_rd", QMP_ARG_INT, false},
                                          {"iops_wr", QMP_ARG_INT, false},
                                          {"bps_max", QMP_ARG_INT, true},
                                          {"bps_rd_max", QMP_ARG_INT, true},
                                          {"bps_wr_max", QMP_ARG_INT, true},
                                          {"iops_max", QMP_ARG_INT, true},
                                          {"iops_rd_max", QMP_ARG_INT, true},
                                          {"iops_wr_max", QMP_ARG_INT, true},
                                          {"bps_max_length", QMP_ARG_INT, true},
                                          {"bps_rd_max_length", QMP_ARG_INT, true},
                                          {"bps_wr_max_length", QMP_ARG_INT, true},
                                          {"iops_max_length", QMP_ARG_INT, true},
                                          {"iops_rd_max_length", QMP_ARG_INT, true},
                                          {"iops_wr_max_length", QMP_ARG_INT, true},
                                          {"iops_size", QMP_ARG_INT, true},
                                          {"group", QMP_ARG_STR, true},
                                          QMP_ARGS_END};

    qmp_register_command("query-block", cmd_query_block, none, 0, NULL);
    qmp_register_command("query-iothreads", cmd_query_iothreads, none, 0, NULL);
    qmp_register_command("query-blockstats", cmd_query_blockstats, none, QMP_CMD_EXTRA_ARGS, NULL);
    qmp_register_command("x-query-virtio-blk-dataplane", cmd_query_dataplane, none, 0, NULL);
    qmp_register_command("block_resize", cmd_block_resize, resize, 0, NULL);
    qmp_register_command("block_set_io_throttle", cmd_block_set_io_throttle, throttle, 0, NULL);
}

/* ---- werror/rerror and cont ---- */

/* Context: main loop, BQL held */
void blk_pci_io_error(void *opaque, BlockBackend *blk, const BlockIOErrorEvent *ev)
{
    JsonBuilder *b = json_builder_new();

    json_builder_begin_object(b);
    add_str(b, "device", ev->device);
    add_str(b, "node-name", ev->node_name);
    add_str(b, "operation", ev->operation);
    add_str(b, "action", ev->action);
    add_bool(b, "nospace", ev->nospace);
    add_str(b, "reason", ev->reason);
    json_builder_end_object(b);
    qmp_event_emit("BLOCK_IO_ERROR", build(b));
    if (ev->action_id == BLOCK_ERR_ACTION_STOP && qmp_run_state_get() != QMP_RUN_STATE_IO_ERROR) {
        GError *err = NULL;

        if (!qmp_vm_stop(QMP_RUN_STATE_IO_ERROR, &err)) {
            g_warning("werror=stop: %s", err->message);
            g_error_free(err);
        }
    }
}

static void blk_pci_cont(void *opaque)
{
    VirtIOBlkPCI *s = opaque;

    blk_resume_parked(s->backend);
}

/* Context: main thread */
void blk_pci_qmp_add(VirtIOBlkPCI *s)
{
    g_autofree char *path = g_strdup_printf("/machine/peripheral/%s", s->id);
    GError *err = NULL;

    if (!devices) {
        devices = g_ptr_array_new();
        register_commands();
    }
    g_ptr_array_add(devices, s);
    machine_add_cont_notifier(blk_pci_cont, s);
    if (!qom_add_object(path, "virtio-blk-pci", &err) ||
        !qom_add_property(path, "x-data-plane", "bool", prop_dp_get, prop_dp_set, s, &err) ||
        !qom_add_property(path, "drive", "string", prop_str_get, NULL, s, &err)) {
        g_warning("%s: QOM: %s", s->id, err->message);
        g_error_free(err);
    }
}

/* Context: main thread */
void blk_pci_qmp_remove(VirtIOBlkPCI *s)
{
    machine_del_cont_notifier(s);
    if (devices) {
        g_ptr_array_remove(devices, s);
        if (!devices->len) {
            g_ptr_array_free(devices, TRUE);
            devices = NULL;
        }
    }
}
