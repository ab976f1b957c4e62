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
#include <sys/stat.h>

#include "devices/blockstats-qmp.h"
#include "monitor/qmp.h"
#include "virtio-blk-pci-int.h"
#include "qmp-json-int.h"
#include "util/error-report.h"
#include "util/thread-check.h"

static GPtrArray *devices; /* VirtIOBlkPCI* */

static JsonNode *build(JsonBuilder *b)
{
    JsonNode *n = json_builder_get_root(b);

    g_object_unref(b);
    return n;
}

/* QEMU's qdev path of the device that has the drive: "<id>/virtio-backend", absolute or not. */
static bool is_backend_path(VirtIOBlkPCI *s, const char *name)
{
    g_autofree char *rel = g_strdup_printf("%s/virtio-backend", s->id);
    g_autofree char *abs = g_strdup_printf("/machine/peripheral/%s", rel);

    return !strcmp(name, rel) || !strcmp(name, abs);
}

/* A device by its id (vblk's shorthand), QEMU's backend path, drive id or root node-name. */
static VirtIOBlkPCI *find_device(const char *name)
{
    for (guint i = 0; devices && name && i < devices->len; i++) {
        VirtIOBlkPCI *s = devices->pdata[i];

        if (!strcmp(s->id, name) || !strcmp(s->drive_id, name) ||
            !strcmp(blk_root_node_name(s->backend), name) || is_backend_path(s, name)) {
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

/* ---- query-block ---- */

/* The throttle members of BlockDeviceInfo: the six rates always, the rest when set (QEMU). */
static void add_throttle(JsonBuilder *b, VirtIOBlkPCI *s)
{
    ThrottleLimits l;

    blk_get_io_limits(s->backend, &l);
    for (size_t i = 0; i < G_N_ELEMENTS(throttle_args); i++) {
        const ThrottleBucketLimit *bl = &l.b[throttle_args[i].bucket];
        uint64_t v = throttle_args[i].field == T_AVG   ? bl->avg
                     : throttle_args[i].field == T_MAX ? bl->max
                                                       : bl->burst_length;

        /* bps..iops_wr always; *_max and *_max_length only with a burst */
        if (throttle_args[i].field == T_AVG || bl->max) {
            add_int(b, throttle_args[i].arg, (int64_t)v);
        }
    }
    if (throttle_limits_enabled(&l)) {
        if (l.iops_size) {
            add_int(b, "iops_size", (int64_t)l.iops_size);
        }
        add_str(b, "group", s->blockdev ? s->id : s->drive_id);
    }
}

/* Is the drive's leaf an NBD export? */
static bool nbd_leaf(VirtIOBlkPCI *s)
{
    BlockHostInfo hi;

    blk_get_host_info(s->backend, &hi);
    return hi.nbd;
}

/* Allocated bytes of the image file (QEMU's actual-size), or -1 if there is no file. */
static int64_t actual_size(VirtIOBlkPCI *s)
{
    BlockHostInfo hi;
    struct stat st;

    blk_get_host_info(s->backend, &hi);
    if (!hi.filename || hi.nbd || hi.rbd || stat(hi.filename, &st) < 0) {
        return -1;
    }
    return (int64_t)st.st_blocks * 512;
}

/* One BlockInfo (QEMU's query-block element), members in QEMU's schema order. */
static void add_block_info(JsonBuilder *b, VirtIOBlkPCI *s)
{
    g_autofree char *qdev = g_strdup_printf("/machine/peripheral/%s/virtio-backend", s->id);
    int64_t len = blk_getlength(s->backend);
    int64_t used = actual_size(s);
    BlockHostInfo hi;

    json_builder_begin_object(b);
    add_str(b, "device", s->blockdev ? "" : s->drive_id);
    add_str(b, "qdev", qdev);
    add_str(b, "type", "unknown");
    add_bool(b, "removable", false);
    add_bool(b, "locked", false);
    json_builder_set_member_name(b, "inserted");
    json_builder_begin_object(b);
    add_str(b, "file", blk_get_filename(s->backend));
    add_str(b, "node-name", blk_root_node_name(s->backend));
    add_bool(b, "ro", blk_is_read_only(s->backend));
    add_str(b, "drv", blk_root_driver_name(s->backend));
    add_int(b, "backing_file_depth", 0);
    add_bool(b, "encrypted", false);
    add_str(b, "detect_zeroes", "off");
    json_builder_set_member_name(b, "image");
    json_builder_begin_object(b);
    add_str(b, "filename", blk_get_filename(s->backend));
    add_str(b, "format", blk_root_driver_name(s->backend));
    if (!nbd_leaf(s)) {
        add_bool(b, "dirty-flag", false); /* QEMU's nbd has no bdrv_get_info */
    }
    if (used >= 0) {
        add_int(b, "actual-size", used);
    }
    add_int(b, "virtual-size", len < 0 ? 0 : len);
    blk_get_host_info(s->backend, &hi);
    if (hi.rbd && hi.rbd_object_size) {
        add_int(b, "cluster-size", (int64_t)hi.rbd_object_size); /* QEMU's rbd getinfo */
    }
    if (hi.rbd && !strcmp(blk_root_driver_name(s->backend), "rbd")) {
        /* QEMU 7.2's rbd: {"type": "rbd", "data": {}} for an unencrypted image */
        json_builder_set_member_name(b, "format-specific");
        json_builder_begin_object(b);
        add_str(b, "type", "rbd");
        json_builder_set_member_name(b, "data");
        json_builder_begin_object(b);
        json_builder_end_object(b);
        json_builder_end_object(b);
    }
    json_builder_end_object(b);
    add_throttle(b, s);
    json_builder_set_member_name(b, "cache");
    json_builder_begin_object(b);
    add_bool(b, "writeback", virtio_blk_get_writeback(s->blk));
    add_bool(b, "direct", s->direct || s->nbd_direct);
    add_bool(b, "no-flush", s->no_flush);
    json_builder_end_object(b);
    add_int(b, "write_threshold", 0);
    json_builder_end_object(b);
    add_str(b, "io-status", "ok");
    add_bool(b, "x-data-plane", is_dataplane(s));
    json_builder_end_object(b);
}

static JsonNode *cmd_query_block(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonBuilder *b = json_builder_new();

    json_builder_begin_array(b);
    for (guint i = 0; devices && i < devices->len; i++) {
        add_block_info(b, devices->pdata[i]);
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
        g_autofree char *qdev = g_strdup_printf("/machine/peripheral/%s/virtio-backend", s->id);

        blockstats_add(b, s->backend, s->blockdev ? "" : s->drive_id, qdev);
    }
    json_builder_end_array(b);
    return build(b);
}

/* ---- x-query-virtio-blk-dataplane ---- */

static void add_queue_stats(JsonBuilder *b, DpSwitch *sw, unsigned q)
{
    DataPlaneQueueStats st;

    dp_switch_get_queue_stats(sw, q, &st);
    json_builder_begin_object(b);
    add_int(b, "index", q);
    add_int(b, "requests", (int64_t)st.requests);
    add_int(b, "completed", (int64_t)st.completed);
    add_int(b, "batches", (int64_t)st.batches);
    add_int(b, "kicks", (int64_t)st.kicks);
    add_int(b, "avail-polls", (int64_t)st.avail_polls);
    add_int(b, "interrupts", (int64_t)st.irqs);
    add_int(b, "interrupts-suppressed", (int64_t)st.irqs_suppressed);
    add_int(b, "used-publishes", (int64_t)st.publishes);
    add_int(b, "in-flight", (int64_t)st.inflight);
    add_int(b, "throttle-waits", (int64_t)st.throttle_waits);
    add_int(b, "cycles-pop", (int64_t)st.cycles_pop);
    add_int(b, "cycles-submit", (int64_t)st.cycles_submit);
    add_int(b, "cycles-complete", (int64_t)st.cycles_complete);
    add_int(b, "cycles-notify", (int64_t)st.cycles_notify);
    json_builder_end_object(b);
}

/* One dataplane: its iothread, its queues and their totals, and its IOQ's counters. */
static void add_iothread_stats(JsonBuilder *b, VirtIOBlkPCI *s, unsigned i)
{
    IOThread *t;
    const unsigned *qidx;
    unsigned n;
    DataPlane *dp = dp_switch_get_dataplane(s->sw, i, &t, &qidx, &n);
    DataPlaneQueueStats sum = {0};
    IOQStats io;
    DataPlaneWakeStats wk;

    dataplane_get_ioq_stats(dp, &io);
    dataplane_get_wake_stats(dp, &wk);
    json_builder_begin_object(b);
    add_str(b, "iothread", n ? s->vq_iothread_id[qidx[0]] : "");
    json_builder_set_member_name(b, "vqs");
    json_builder_begin_array(b);
    for (unsigned k = 0; k < n; k++) {
        DataPlaneQueueStats st;

        json_builder_add_int_value(b, qidx[k]);
        dataplane_get_queue_stats(dp, k, &st);
        sum.requests += st.requests;
        sum.completed += st.completed;
        sum.kicks += st.kicks;
        sum.irqs += st.irqs;
    }
    json_builder_end_array(b);
    add_bool(b, "started", dataplane_is_started(dp));
    add_int(b, "requests", (int64_t)sum.requests);
    add_int(b, "completed", (int64_t)sum.completed);
    add_int(b, "kicks", (int64_t)sum.kicks);
    add_int(b, "interrupts", (int64_t)sum.irqs);
    add_int(b, "submit-calls", (int64_t)io.batches);
    add_int(b, "ioq-in-flight", (int64_t)io.inflight);
    add_int(b, "completion-events", (int64_t)wk.completion_events);
    add_int(b, "completion-polls", (int64_t)wk.completion_polls);
    add_int(b, "complete-holds", (int64_t)wk.complete_holds);
    json_builder_end_object(b);
}

static void ioq_stats_add(IOQStats *to, const IOQStats *a)
{
    to->bounces += a->bounces;
    to->retries += a->retries;
    to->batches += a->batches;
    to->submitted += a->submitted;
    to->completed += a->completed;
    to->inflight += a->inflight;
    to->held_flushes += a->held_flushes;
    to->helper_ops += a->helper_ops;
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
            for (unsigned k = 0; k < dp_switch_num_dataplanes(s->sw); k++) {
                IOQStats one;

                dataplane_get_ioq_stats(dp_switch_get_dataplane(s->sw, k, NULL, NULL, NULL), &one);
                ioq_stats_add(&io, &one);
            }
        }
        add_int(b, "switches", (int64_t)sw.switches);
        add_int(b, "last-switch-stall-ns", (int64_t)sw.last_stall_ns);
        add_int(b, "max-switch-stall-ns", (int64_t)sw.max_stall_ns);
        add_int(b, "remaps", (int64_t)sw.remaps);
        add_str(b, "aio", s->engine);
        add_int(b, "bounces", (int64_t)io.bounces);
        add_int(b, "retries", (int64_t)io.retries);
        add_int(b, "submit-calls", (int64_t)io.batches);
        /* The IOQ's own view: what a stalled queue is waiting for. */
        add_int(b, "ioq-submitted", (int64_t)io.submitted);
        add_int(b, "ioq-completed", (int64_t)io.completed);
        add_int(b, "ioq-in-flight", (int64_t)io.inflight);
        add_int(b, "held-flushes", (int64_t)io.held_flushes);
        add_int(b, "helper-ops", (int64_t)io.helper_ops);
        json_builder_set_member_name(b, "queues");
        json_builder_begin_array(b);
        for (unsigned q = 0; s->sw && q < s->nq; q++) {
            add_queue_stats(b, s->sw, q);
        }
        json_builder_end_array(b);
        /* Per iothread of the mapping: one dataplane (IOQ) each. */
        json_builder_set_member_name(b, "iothreads");
        json_builder_begin_array(b);
        for (unsigned k = 0; s->sw && k < dp_switch_num_dataplanes(s->sw); k++) {
            add_iothread_stats(b, s, k);
        }
        json_builder_end_array(b);
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    return build(b);
}

/* ---- x-blockdev-remap-vqs ---- */

/*
 * Move a device's queues between iothreads, running or not: the mapping is
 * validated as -device's iothread-vq-mapping (every error a GenericError
 * with QEMU's one-line message) and applied by dp_switch_remap().
 */
static JsonNode *cmd_remap_vqs(QmpRequest *req, JsonObject *args, GError **errp)
{
    VirtIOBlkPCI *s = lookup_arg(args, "id", NULL, errp);
    g_autoptr(GPtrArray) map = NULL;
    GError *err = NULL;

    THREAD_ASSERT_MAIN();
    if (!s) {
        return NULL;
    }
    if (qmp_run_state_get() == QMP_RUN_STATE_IO_ERROR) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Cannot remap '%s' while the VM is stopped on an I/O error (use cont)", s->id);
        return NULL;
    }
    map = vq_mapping_from_json(json_object_get_member(args, "iothread-vq-mapping"),
                               "iothread-vq-mapping", &err);
    if (!map && !err) {
        g_set_error(&err, QMP_ERROR, QMP_ERROR_GENERIC, "iothread-vq-mapping is empty");
    }
    if (err || !blk_pci_remap(s, map, &err)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "%s", err->message);
        g_error_free(err);
        return NULL;
    }
    {
        JsonObject *o = json_object_new();
        JsonNode *n = json_node_init_object(json_node_alloc(), o);

        json_object_unref(o); /* the node took its own reference */
        return n;
    }
}

/* ---- block_resize, block_set_io_throttle ---- */

/* QEMU names what it was given; vblk accepts a -blockdev node-name for "device" too. */
static VirtIOBlkPCI *resize_target(JsonObject *args, GError **errp)
{
    const char *dev = json_object_has_member(args, "device")
                          ? json_object_get_string_member(args, "device")
                          : NULL;
    const char *node = json_object_has_member(args, "node-name")
                           ? json_object_get_string_member(args, "node-name")
                           : NULL;
    VirtIOBlkPCI *s = find_device(dev ? dev : node);

    if (!s) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Cannot find device='%s' nor node-name='%s'", dev ? dev : "", node ? node : "");
    }
    return s;
}

static JsonNode *cmd_block_resize(QmpRequest *req, JsonObject *args, GError **errp)
{
    VirtIOBlkPCI *s = resize_target(args, errp);
    int64_t size = json_object_get_int_member(args, "size");

    if (!s) {
        return NULL;
    }
    if (!blk_truncate(s->backend, size, errp)) {
        return NULL;
    }
    virtio_blk_set_capacity(s->blk, (uint64_t)size / 512);
    if (s->vp) {
        virtio_pci_notify_config(s->vp); /* QMP runs with the BQL held */
    }
    return NULL;
}

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

/*
 * query-qmp-schema: QEMU 7.2's types, restricted to what vblk can report
 * (no backing chain, snapshots, dirty bitmaps, timed stats or histograms in
 * query-blockstats, parent not recursive); vblk's own commands and events.
 */
static void describe_schema(void)
{
    static const char *const stats =
        "{'rd_bytes': 'int', 'wr_bytes': 'int', 'unmap_bytes': 'int', 'rd_operations': 'int', "
        "'wr_operations': 'int', 'flush_operations': 'int', 'unmap_operations': 'int', "
        "'rd_total_time_ns': 'int', 'wr_total_time_ns': 'int', 'flush_total_time_ns': 'int', "
        "'unmap_total_time_ns': 'int', 'wr_highest_offset': 'int', 'rd_merged': 'int', "
        "'wr_merged': 'int', 'unmap_merged': 'int', '*idle_time_ns': 'int', "
        "'failed_rd_operations': 'int', 'failed_wr_operations': 'int', "
        "'failed_flush_operations': 'int', 'failed_unmap_operations': 'int', "
        "'invalid_rd_operations': 'int', 'invalid_wr_operations': 'int', "
        "'invalid_flush_operations': 'int', 'invalid_unmap_operations': 'int', "
        "'account_invalid': 'bool', 'account_failed': 'bool', 'timed_stats': [{'interval_length': "
        "'int', 'min_rd_latency_ns': 'int', 'max_rd_latency_ns': 'int', 'avg_rd_latency_ns': "
        "'int', 'min_wr_latency_ns': 'int', 'max_wr_latency_ns': 'int', 'avg_wr_latency_ns': "
        "'int', 'min_flush_latency_ns': 'int', 'max_flush_latency_ns': 'int', "
        "'avg_flush_latency_ns': 'int', 'avg_rd_queue_depth': 'number', 'avg_wr_queue_depth': "
        "'number'}]}";
    static const char *const file_stats =
        "{'driver': {'enum': ['file', 'host_device']}, 'discard-nb-ok': 'int', "
        "'discard-nb-failed': 'int', 'discard-bytes-ok': 'int'}";
    static const char *const throttle =
        "'*bps_max': 'int', '*bps_rd_max': 'int', '*bps_wr_max': 'int', '*iops_max': 'int', "
        "'*iops_rd_max': 'int', '*iops_wr_max': 'int', '*bps_max_length': 'int', "
        "'*bps_rd_max_length': 'int', '*bps_wr_max_length': 'int', '*iops_max_length': 'int', "
        "'*iops_rd_max_length': 'int', '*iops_wr_max_length': 'int', '*iops_size': 'int', "
        "'*group': 'str'";
    g_autofree char *block = g_strdup_printf(
        "[{'device': 'str', '*qdev': 'str', 'type': 'str', 'removable': 'bool', 'locked': 'bool', "
        "'*inserted': {'file': 'str', '*node-name': 'str', 'ro': 'bool', 'drv': 'str', "
        "'backing_file_depth': 'int', 'encrypted': 'bool', 'detect_zeroes': {'enum': ['off', "
        "'on', 'unmap']}, 'bps': 'int', 'bps_rd': 'int', 'bps_wr': 'int', 'iops': 'int', "
        "'iops_rd': 'int', 'iops_wr': 'int', 'image': {'filename': 'str', 'format': 'str', "
        "'*dirty-flag': 'bool', '*actual-size': 'int', 'virtual-size': 'int'}, %s, 'cache': "
        "{'writeback': 'bool', 'direct': 'bool', 'no-flush': 'bool'}, 'write_threshold': 'int'}, "
        "'*io-status': {'enum': ['ok', 'failed', 'nospace']}, 'x-data-plane': 'bool'}]",
        throttle);
    g_autofree char *blockstats =
        g_strdup_printf("[{'*device': 'str', '*qdev': 'str', '*node-name': 'str', 'stats': %s, "
                        "'*driver-specific': %s, '*parent': {'*node-name': 'str', 'stats': %s, "
                        "'*driver-specific': %s}}]",
                        stats, file_stats, stats, file_stats);
    static const char *const queue =
        "{'index': 'int', 'requests': 'int', 'completed': 'int', 'batches': 'int', 'kicks': "
        "'int', 'avail-polls': 'int', 'interrupts': 'int', 'interrupts-suppressed': 'int', "
        "'used-publishes': 'int', 'in-flight': 'int', "
        "'throttle-waits': 'int', 'cycles-pop': 'int', 'cycles-submit': 'int', "
        "'cycles-complete': 'int', 'cycles-notify': 'int'}";
    g_autofree char *dataplane = g_strdup_printf(
        "[{'device': 'str', 'x-data-plane': 'bool', 'started': 'bool', 'num-queues': 'int', "
        "'switches': 'int', 'last-switch-stall-ns': 'int', 'max-switch-stall-ns': 'int', "
        "'aio': 'str', 'bounces': 'int', 'retries': 'int', 'submit-calls': 'int', "
        "'ioq-submitted': 'int', 'ioq-completed': 'int', 'ioq-in-flight': 'int', "
        "'held-flushes': 'int', 'helper-ops': 'int', 'remaps': 'int', "
        "'queues': [%s], 'iothreads': [{'iothread': 'str', 'vqs': ['int'], 'started': 'bool', "
        "'requests': 'int', 'completed': 'int', 'kicks': 'int', 'interrupts': 'int', "
        "'submit-calls': 'int', 'ioq-in-flight': 'int', 'completion-events': 'int', "
        "'completion-polls': 'int', 'complete-holds': 'int'}]}]",
        queue);

    qmp_schema_describe("query-block", NULL, block, NULL);
    qmp_schema_describe("query-blockstats", "{'*query-nodes': 'bool'}", blockstats, NULL);
    qmp_schema_describe("x-query-virtio-blk-dataplane", NULL, dataplane, NULL);
    qmp_schema_describe("block_resize", NULL, "{}", NULL);
    qmp_schema_describe("x-blockdev-remap-vqs",
                        "{'id': 'str', 'iothread-vq-mapping': [{'iothread': 'str', "
                        "'*vqs': ['int']}]}",
                        "{}", NULL);
    qmp_schema_describe("block_set_io_throttle", NULL, "{}", NULL);
    qmp_schema_add_event("BLOCK_IO_ERROR",
                         "{'device': 'str', '*node-name': 'str', 'operation': {'enum': ['read', "
                         "'write']}, 'action': {'enum': ['ignore', 'report', 'stop']}, "
                         "'*nospace': 'bool', 'reason': 'str'}",
                         NULL);
    qmp_schema_add_event("VBLK_DATAPLANE_SWITCH",
                         "{'device': 'str', 'path': {'enum': ['dataplane', 'block-layer']}, "
                         "'stall-ns': 'int'}",
                         NULL);
}

static void register_commands(void)
{
    static const QmpArgSpec none[] = {QMP_ARGS_END};
    static const QmpArgSpec resize[] = {{"device", QMP_ARG_STR, true},
                                        {"node-name", QMP_ARG_STR, true},
                                        {"size", QMP_ARG_INT, false},
                                        QMP_ARGS_END};
    static const QmpArgSpec remap[] = {{"id", QMP_ARG_STR, false},
                                       {"iothread-vq-mapping", QMP_ARG_ARRAY, false},
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
    qmp_register_command("query-blockstats", cmd_query_blockstats, none, QMP_CMD_EXTRA_ARGS, NULL);
    qmp_register_command("x-query-virtio-blk-dataplane", cmd_query_dataplane, none, 0, NULL);
    qmp_register_command("block_resize", cmd_block_resize, resize, 0, NULL);
    qmp_register_command("x-blockdev-remap-vqs", cmd_remap_vqs, remap, 0, NULL);
    qmp_register_command("block_set_io_throttle", cmd_block_set_io_throttle, throttle, 0, NULL);
    describe_schema();
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
    if (ev->action_id == BLOCK_ERR_ACTION_STOP) {
        /*
         * Not qmp_vm_stop() here: this hook runs inside a block-layer
         * completion callback or the dataplane's error BH, and pausing drops
         * the BQL, under which a vCPU could reset the device and free what
         * that caller still uses. The main loop stops the VM next.
         */
        qmp_vm_stop_request(QMP_RUN_STATE_IO_ERROR);
    }
}

static void blk_pci_cont(void *opaque)
{
    VirtIOBlkPCI *s = opaque;

    blk_resume_parked(s->backend);
    if (s->sw) {
        dp_switch_resume(s->sw); /* the dataplane's held requests */
    }
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
        !qom_add_property(path, "x-data-plane", "bool", prop_dp_get, prop_dp_set, s, &err)) {
        error_report_id(s->id, "QOM: %s", err->message);
        g_error_free(err);
        return;
    }
    blk_pci_qom_add_props(s, path);
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
