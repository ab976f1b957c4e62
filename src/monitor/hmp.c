/*
 * The human monitor (HMP): a line editor per connection, QEMU's command-line
 * syntax and messages, and QEMU 7.2's output formats.  Every command is the
 * QMP command of the same job, run through qmp_run_internal() with the same
 * argument checks and handler, and its result formatted as text: there is
 * one implementation of each command.  human-monitor-command runs the same
 * lines from QMP.
 *
 * Input is hostile: lines are capped, unknown bytes ignored, and every
 * argument is checked before anything runs.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "qmp-internal.h"

#define HMP_PROMPT   "(qemu) "
#define HMP_LINE_MAX 4095 /* longer input is dropped, as QEMU's readline buffer */
#define HMP_HISTORY  64

/* ---- running one command line ------------------------------------------- */

typedef struct HmpRun HmpRun;
typedef void (*HmpDoneFn)(HmpRun *r, void *opaque);
/* Formats a successful QMP result into r->out. */
typedef void (*HmpFormatFn)(HmpRun *r, JsonNode *result);

struct HmpRun {
    QmpClient *client; /* referenced while the run lives */
    GString *out;      /* "\n"-terminated lines; sent with "\r\n" */
    HmpDoneFn done;
    void *done_opaque;
    HmpFormatFn format; /* for the deferred tail call */
    bool deferred;      /* the command's QMP handler deferred its reply */
    bool quit;          /* quit: no prompt and no more input, vblk is ending */
};

typedef struct HmpArgs {
    GPtrArray *v;   /* char*, NULL for an absent optional argument */
    bool flag_j;    /* qom-set -j */
    bool flag_v;    /* info block -v */
    int64_t num[8]; /* integer arguments, by position */
} HmpArgs;

typedef bool (*HmpFn)(HmpRun *r, HmpArgs *a); /* true: deferred */

typedef struct HmpCmd {
    const char *name; /* "stop|s": aliases after '|' */
    const char *args; /* argument types: s string, S rest of line, B block device, o size, l int */
    const char *params; /* for help */
    const char *help;
    HmpFn fn; /* NULL: the QMP command @qmp without arguments, its result @format'ed */
    const char *qmp;
    HmpFormatFn format; /* NULL: no output on success */
} HmpCmd;

static void hmp_printf(HmpRun *r, const char *fmt, ...) G_GNUC_PRINTF(2, 3);

static void hmp_printf(HmpRun *r, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    g_string_append_vprintf(r->out, fmt, ap);
    va_end(ap);
}

static void hmp_run_finish(HmpRun *r)
{
    r->done(r, r->done_opaque);
    qmp_client_unref(r->client);
    g_string_free(r->out, TRUE);
    g_free(r);
}

static void hmp_print_error(HmpRun *r, const GError *err)
{
    hmp_printf(r, "Error: %s\n", err->message);
}

/* The result of a command run synchronously inside another one. */
typedef struct SyncBox {
    bool abandoned;
    JsonNode *result;
    GError *err;
} SyncBox;

static void sync_done(JsonNode *result, GError *err, void *opaque)
{
    SyncBox *b = opaque;

    if (b->abandoned) {
        g_clear_pointer(&result, json_node_unref);
        g_clear_error(&err);
        g_free(b);
        return;
    }
    b->result = result;
    b->err = err;
}

/* A QMP command whose result the HMP command needs before it goes on. */
static JsonNode *hmp_qmp(HmpRun *r, const char *name, JsonObject *args, GError **errp)
{
    SyncBox *b = g_new0(SyncBox, 1);
    JsonNode *result;

    if (qmp_run_internal(r->client, name, args, sync_done, b)) {
        b->abandoned = true; /* sync_done frees it */
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "%s did not complete at once", name);
        return NULL;
    }
    result = b->result;
    if (b->err) {
        g_propagate_error(errp, b->err);
    }
    g_free(b);
    return result;
}

static void tail_done(JsonNode *result, GError *err, void *opaque)
{
    HmpRun *r = opaque;

    if (err) {
        hmp_print_error(r, err);
        g_error_free(err);
    } else if (r->format) {
        r->format(r, result);
    }
    g_clear_pointer(&result, json_node_unref);
    if (r->deferred) {
        hmp_run_finish(r);
    }
}

/*
 * The command's last QMP call, with @args (taken over; may be NULL); may
 * defer (returns true), then the run ends later.
 */
static bool hmp_qmp_tail(HmpRun *r, const char *name, JsonObject *args, HmpFormatFn format)
{
    r->format = format;
    r->deferred = qmp_run_internal(r->client, name, args, tail_done, r);
    if (args) {
        json_object_unref(args);
    }
    return r->deferred;
}

/* ---- JSON helpers -------------------------------------------------------- */

static JsonObject *obj_member(JsonObject *o, const char *name)
{
    JsonNode *n = o ? json_object_get_member(o, name) : NULL;

    return n && JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
}

static const char *str_member(JsonObject *o, const char *name, const char *dflt)
{
    JsonNode *n = o ? json_object_get_member(o, name) : NULL;

    return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING
               ? json_node_get_string(n)
               : dflt;
}

static gint64 int_member(JsonObject *o, const char *name)
{
    JsonNode *n = o ? json_object_get_member(o, name) : NULL;

    return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_INT64
               ? json_node_get_int(n)
               : 0;
}

static bool bool_member(JsonObject *o, const char *name)
{
    JsonNode *n = o ? json_object_get_member(o, name) : NULL;

    return n && JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_BOOLEAN &&
           json_node_get_boolean(n);
}

static JsonArray *as_array(JsonNode *n)
{
    return n && JSON_NODE_HOLDS_ARRAY(n) ? json_node_get_array(n) : NULL;
}

static JsonObject *array_obj(JsonArray *a, guint i)
{
    JsonNode *n = json_array_get_element(a, i);

    return JSON_NODE_HOLDS_OBJECT(n) ? json_node_get_object(n) : NULL;
}

/* ---- formatters ------------------------------------------------------------ */

static void fmt_status(HmpRun *r, JsonNode *res)
{
    JsonObject *o = JSON_NODE_HOLDS_OBJECT(res) ? json_node_get_object(res) : NULL;
    const char *st = str_member(o, "status", "");

    hmp_printf(r, "VM status: %s", bool_member(o, "running") ? "running" : "paused");
    if (strcmp(st, "running") && strcmp(st, "paused")) {
        hmp_printf(r, " (%s)", st);
    }
    hmp_printf(r, "\n");
}

static void fmt_version(HmpRun *r, JsonNode *res)
{
    JsonObject *o = JSON_NODE_HOLDS_OBJECT(res) ? json_node_get_object(res) : NULL;
    JsonObject *q = obj_member(o, "qemu");

    hmp_printf(r, "%" G_GINT64_FORMAT ".%" G_GINT64_FORMAT ".%" G_GINT64_FORMAT "%s\n",
               int_member(q, "major"), int_member(q, "minor"), int_member(q, "micro"),
               str_member(o, "package", ""));
}

static void fmt_iothreads(HmpRun *r, JsonNode *res)
{
    JsonArray *a = as_array(res);

    for (guint i = 0; a && i < json_array_get_length(a); i++) {
        JsonObject *t = array_obj(a, i);

        hmp_printf(r, "%s:\n", str_member(t, "id", ""));
        hmp_printf(r, "  thread_id=%" G_GINT64_FORMAT "\n", int_member(t, "thread-id"));
        hmp_printf(r, "  poll-max-ns=%" G_GINT64_FORMAT "\n", int_member(t, "poll-max-ns"));
        hmp_printf(r, "  poll-grow=%" G_GINT64_FORMAT "\n", int_member(t, "poll-grow"));
        hmp_printf(r, "  poll-shrink=%" G_GINT64_FORMAT "\n", int_member(t, "poll-shrink"));
        hmp_printf(r, "  aio-max-batch=%" G_GINT64_FORMAT "\n", int_member(t, "aio-max-batch"));
    }
}

static void fmt_cpus(HmpRun *r, JsonNode *res)
{
    JsonArray *a = as_array(res);

    for (guint i = 0; a && i < json_array_get_length(a); i++) {
        JsonObject *c = array_obj(a, i);

        /* The monitor's current CPU is the first one, as QEMU's default. */
        hmp_printf(r, "%c CPU #%" G_GINT64_FORMAT ": thread_id=%" G_GINT64_FORMAT "\n",
                   i == 0 ? '*' : ' ', int_member(c, "cpu-index"), int_member(c, "thread-id"));
    }
}

static void fmt_pci_region(HmpRun *r, JsonObject *reg)
{
    gint64 bar = int_member(reg, "bar"), addr = int_member(reg, "address");
    gint64 size = int_member(reg, "size");

    if (!strcmp(str_member(reg, "type", ""), "io")) {
        hmp_printf(r,
                   "      BAR%" G_GINT64_FORMAT ": I/O at 0x%04" G_GINT64_MODIFIER
                   "x [0x%04" G_GINT64_MODIFIER "x].\n",
                   bar, addr, addr + size - 1);
    } else {
        hmp_printf(r,
                   "      BAR%" G_GINT64_FORMAT ": %d bit%s memory at 0x%08" G_GINT64_MODIFIER
                   "x [0x%08" G_GINT64_MODIFIER "x].\n",
                   bar, bool_member(reg, "mem_type_64") ? 64 : 32,
                   bool_member(reg, "prefetch") ? " prefetchable" : "", addr, addr + size - 1);
    }
}

static void fmt_pci(HmpRun *r, JsonNode *res)
{
    JsonArray *buses = as_array(res);

    for (guint b = 0; buses && b < json_array_get_length(buses); b++) {
        JsonObject *bus = array_obj(buses, b);
        JsonArray *devs = as_array(bus ? json_object_get_member(bus, "devices") : NULL);

        for (guint i = 0; devs && i < json_array_get_length(devs); i++) {
            JsonObject *d = array_obj(devs, i);
            JsonObject *ci = obj_member(d, "class_info"), *id = obj_member(d, "id");
            JsonArray *regs = as_array(d ? json_object_get_member(d, "regions") : NULL);
            gint64 pin = int_member(d, "irq_pin");

            hmp_printf(r,
                       "  Bus %2" G_GINT64_FORMAT ", device %3" G_GINT64_FORMAT
                       ", function %" G_GINT64_FORMAT ":\n",
                       int_member(d, "bus"), int_member(d, "slot"), int_member(d, "function"));
            if (str_member(ci, "desc", NULL)) {
                hmp_printf(r, "    %s", str_member(ci, "desc", ""));
            } else {
                hmp_printf(r, "    Class %04" G_GINT64_MODIFIER "x", int_member(ci, "class"));
            }
            hmp_printf(r, ": PCI device %04" G_GINT64_MODIFIER "x:%04" G_GINT64_MODIFIER "x\n",
                       int_member(id, "vendor"), int_member(id, "device"));
            hmp_printf(r,
                       "      PCI subsystem %04" G_GINT64_MODIFIER "x:%04" G_GINT64_MODIFIER "x\n",
                       int_member(id, "subsystem-vendor"), int_member(id, "subsystem"));
            if (pin) {
                hmp_printf(r, "      IRQ %" G_GINT64_FORMAT ", pin %c\n", int_member(d, "irq"),
                           (char)('A' + pin - 1));
            }
            for (guint k = 0; regs && k < json_array_get_length(regs); k++) {
                fmt_pci_region(r, array_obj(regs, k));
            }
            hmp_printf(r, "      id \"%s\"\n", str_member(d, "qdev_id", ""));
        }
    }
}

static const char *const throttle_keys[] = {
    "bps",  "bps_rd",  "bps_wr",  "bps_max",  "bps_rd_max",  "bps_wr_max",
    "iops", "iops_rd", "iops_wr", "iops_max", "iops_rd_max", "iops_wr_max",
};

/*
 * A size as QEMU prints it for people: at most three significant digits and
 * a binary unit, moving to the next unit once the number would reach 1000.
 */
static char *human_size(guint64 v)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double scaled = (double)v;
    size_t i = 0;

    while (i + 1 < G_N_ELEMENTS(unit) && scaled >= 1000.0) {
        scaled /= 1024.0;
        i++;
    }
    return g_strdup_printf("%0.3g %s", scaled, unit[i]);
}

/* info block -v: the image (and its backing chain, if vblk ever reports one). */
static void fmt_block_image(HmpRun *r, JsonObject *img)
{
    for (; img; img = obj_member(img, "backing-image")) {
        g_autofree char *vs = human_size((guint64)int_member(img, "virtual-size"));
        JsonNode *as = json_object_get_member(img, "actual-size");

        hmp_printf(r, "image: %s\n", str_member(img, "filename", ""));
        hmp_printf(r, "file format: %s\n", str_member(img, "format", ""));
        hmp_printf(r, "virtual size: %s (%" G_GINT64_FORMAT " bytes)\n", vs,
                   int_member(img, "virtual-size"));
        if (as && JSON_NODE_HOLDS_VALUE(as)) {
            g_autofree char *ds = human_size((guint64)json_node_get_int(as));

            hmp_printf(r, "disk size: %s\n", ds);
        } else {
            hmp_printf(r, "disk size: unavailable\n");
        }
        if (int_member(img, "cluster-size")) {
            hmp_printf(r, "cluster_size: %" G_GINT64_FORMAT "\n", int_member(img, "cluster-size"));
        }
        if (bool_member(img, "dirty-flag")) {
            hmp_printf(r, "cleanly shut down: no\n");
        }
        if (str_member(img, "backing-filename", NULL)) {
            hmp_printf(r, "backing file: %s\n", str_member(img, "backing-filename", ""));
        }
    }
}

static void fmt_block_one(HmpRun *r, JsonObject *b, bool verbose)
{
    JsonObject *ins = obj_member(b, "inserted");
    JsonObject *cache = obj_member(ins, "cache");
    const char *dev = str_member(b, "device", "");
    const char *node = str_member(ins, "node-name", NULL);
    const char *dz = str_member(ins, "detect_zeroes", "off");

    hmp_printf(r, "%s", *dev ? dev : (node ? node : ""));
    if (*dev && node) {
        hmp_printf(r, " (%s)", node);
    }
    if (ins) {
        hmp_printf(r, ": %s (%s%s%s)\n", str_member(ins, "file", ""), str_member(ins, "drv", ""),
                   bool_member(ins, "ro") ? ", read-only" : "",
                   bool_member(ins, "encrypted") ? ", encrypted" : "");
    } else {
        hmp_printf(r, ": [not inserted]\n");
    }
    if (str_member(b, "qdev", NULL)) {
        hmp_printf(r, "    Attached to:      %s\n", str_member(b, "qdev", ""));
    }
    if (strcmp(str_member(b, "io-status", "ok"), "ok")) {
        hmp_printf(r, "    I/O status:       %s\n", str_member(b, "io-status", ""));
    }
    if (!ins) {
        return;
    }
    hmp_printf(r, "    Cache mode:       %s%s%s\n",
               bool_member(cache, "writeback") ? "writeback" : "writethrough",
               bool_member(cache, "direct") ? ", direct" : "",
               bool_member(cache, "no-flush") ? ", ignore flushes" : "");
    if (strcmp(dz, "off")) {
        hmp_printf(r, "    Detect zeroes:    %s\n", dz);
    }
    if (int_member(ins, "bps") || int_member(ins, "bps_rd") || int_member(ins, "bps_wr") ||
        int_member(ins, "iops") || int_member(ins, "iops_rd") || int_member(ins, "iops_wr")) {
        hmp_printf(r, "    I/O throttling:  ");
        for (size_t i = 0; i < G_N_ELEMENTS(throttle_keys); i++) {
            hmp_printf(r, " %s=%" G_GINT64_FORMAT, throttle_keys[i],
                       int_member(ins, throttle_keys[i]));
        }
        hmp_printf(r, " iops_size=%" G_GINT64_FORMAT " group=%s\n", int_member(ins, "iops_size"),
                   str_member(ins, "group", ""));
    }
    if (verbose && obj_member(ins, "image")) {
        hmp_printf(r, "\nImages:\n");
        fmt_block_image(r, obj_member(ins, "image"));
    }
}

static void fmt_blockstats(HmpRun *r, JsonNode *res)
{
    static const char *const keys[] = {
        "rd_bytes",         "wr_bytes",         "rd_operations",    "wr_operations",
        "flush_operations", "wr_total_time_ns", "rd_total_time_ns", "flush_total_time_ns",
        "rd_merged",        "wr_merged",        "idle_time_ns",
    };
    JsonArray *a = as_array(res);

    for (guint i = 0; a && i < json_array_get_length(a); i++) {
        JsonObject *s = array_obj(a, i), *st = obj_member(s, "stats");

        hmp_printf(r, "%s:", str_member(s, "device", ""));
        for (size_t k = 0; k < G_N_ELEMENTS(keys); k++) {
            hmp_printf(r, " %s=%" G_GINT64_FORMAT, keys[k], int_member(st, keys[k]));
        }
        hmp_printf(r, "\n");
    }
}

/* vblk's own: every scalar member as key=value, queues one per line. */
static void fmt_scalars(HmpRun *r, JsonObject *o, const char *skip)
{
    GList *members = json_object_get_members(o);

    for (GList *l = members; l; l = l->next) {
        JsonNode *n = json_object_get_member(o, l->data);

        if (!JSON_NODE_HOLDS_VALUE(n) || (skip && !strcmp(l->data, skip))) {
            continue;
        }
        if (json_node_get_value_type(n) == G_TYPE_BOOLEAN) {
            hmp_printf(r, " %s=%s", (char *)l->data, json_node_get_boolean(n) ? "on" : "off");
        } else if (json_node_get_value_type(n) == G_TYPE_INT64) {
            hmp_printf(r, " %s=%" G_GINT64_FORMAT, (char *)l->data, json_node_get_int(n));
        } else if (json_node_get_value_type(n) == G_TYPE_STRING) {
            hmp_printf(r, " %s=%s", (char *)l->data, json_node_get_string(n));
        }
    }
    g_list_free(members);
}

static void fmt_dataplane(HmpRun *r, JsonNode *res)
{
    JsonArray *a = as_array(res);

    for (guint i = 0; a && i < json_array_get_length(a); i++) {
        JsonObject *d = array_obj(a, i);
        JsonArray *qs = as_array(d ? json_object_get_member(d, "queues") : NULL);

        hmp_printf(r, "%s:", str_member(d, "device", ""));
        fmt_scalars(r, d, "device");
        hmp_printf(r, "\n");
        for (guint q = 0; qs && q < json_array_get_length(qs); q++) {
            JsonObject *qo = array_obj(qs, q);

            hmp_printf(r, "  queue %" G_GINT64_FORMAT ":", int_member(qo, "index"));
            fmt_scalars(r, qo, "index");
            hmp_printf(r, "\n");
        }
        /* One dataplane per iothread of iothread-vq-mapping. */
        qs = as_array(d ? json_object_get_member(d, "iothreads") : NULL);
        for (guint t = 0; qs && t < json_array_get_length(qs); t++) {
            JsonObject *to = array_obj(qs, t);
            JsonArray *vqs = as_array(to ? json_object_get_member(to, "vqs") : NULL);

            hmp_printf(r, "  iothread %s vqs", str_member(to, "iothread", ""));
            for (guint k = 0; vqs && k < json_array_get_length(vqs); k++) {
                hmp_printf(r, "%s%" G_GINT64_FORMAT, k ? "," : "=",
                           json_array_get_int_element(vqs, k));
            }
            hmp_printf(r, ":");
            fmt_scalars(r, to, "iothread");
            hmp_printf(r, "\n");
        }
    }
}

static void fmt_qom_list(HmpRun *r, JsonNode *res)
{
    JsonArray *a = as_array(res);

    for (guint i = 0; a && i < json_array_get_length(a); i++) {
        JsonObject *p = array_obj(a, i);

        hmp_printf(r, "%s (%s)\n", str_member(p, "name", ""), str_member(p, "type", ""));
    }
}

static void fmt_json(HmpRun *r, JsonNode *res)
{
    g_autofree char *s = qmp_json_to_string(res);

    hmp_printf(r, "%s\n", s);
}

/* ---- commands -------------------------------------------------------------- */

static const HmpCmd hmp_cmds[];
static const HmpCmd hmp_info_cmds[];
static void hmp_help(HmpRun *r, const char *what);

static JsonObject *args_new(void)
{
    return json_object_new();
}

/* The generic handler: a table row's QMP command, without arguments, and its formatter. */
static bool cmd_simple(HmpRun *r, const HmpCmd *c)
{
    return hmp_qmp_tail(r, c->qmp, NULL, c->format);
}

static bool info_block(HmpRun *r, HmpArgs *a)
{
    GError *err = NULL;
    JsonNode *res = hmp_qmp(r, "query-block", NULL, &err);
    JsonArray *arr = as_array(res);
    const char *want = a->v->len ? a->v->pdata[a->v->len - 1] : NULL;

    if (!res) {
        hmp_print_error(r, err);
        g_error_free(err);
        return false;
    }
    for (guint i = 0; arr && i < json_array_get_length(arr); i++) {
        JsonObject *b = array_obj(arr, i);

        if (want && strcmp(want, str_member(b, "device", "")) &&
            strcmp(want, str_member(obj_member(b, "inserted"), "node-name", ""))) {
            continue;
        }
        fmt_block_one(r, b, a->flag_v);
    }
    json_node_unref(res);
    return false;
}

/* ---- info qtree ------------------------------------------------------------ */

/*
 * The qdev properties QEMU 7.2's info qtree prints, in its order: those of
 * the virtio-blk-pci proxy (its own, virtio-pci's, then PCIDevice's), and
 * those of the virtio-blk-device behind it.  The values are the device's,
 * read with qom-get: the proxy carries the backend's properties as aliases.
 */
static const char qtree_pci_common[] = "addr romfile romsize rombar multifunction "
                                       "x-pcie-lnksta-dllla x-pcie-extcap-init "
                                       "failover_pair_id acpi-index";

static const char qtree_virtio_pci[] =
    "disable-legacy disable-modern class ioeventfd vectors virtio-pci-bus-master-bug-migration "
    "migrate-extra modern-pio-notify x-disable-pcie page-per-vq x-ignore-backend-features ats "
    "x-ats-page-aligned x-pcie-deverr-init x-pcie-lnkctl-init x-pcie-pm-init x-pcie-flr-init aer";

static const char qtree_virtio_blk[] =
    "drive backend_defaults logical_block_size physical_block_size min_io_size opt_io_size "
    "discard_granularity write-cache share-rw account-invalid account-failed rerror werror cyls "
    "heads secs lcyls lheads lsecs serial config-wce scsi request-merging num-queues queue-size "
    "seg-max-adjust discard report-discard-granularity write-zeroes max-discard-sectors "
    "max-write-zeroes-sectors x-enable-wce-if-config-wce indirect_desc event_idx notify_on_empty "
    "any_layout iommu_platform packed queue_reset use-started use-disabled-flag "
    "x-disable-legacy-check";

/* The values QEMU 7.2 shows for a PCI function that has no QOM object in vblk. */
static const char *const qtree_pci_defaults[][2] = {
    {"romfile", "\"\""},
    {"romsize", "4294967295 (0xffffffff)"},
    {"rombar", "1 (0x1)"},
    {"multifunction", "false"},
    {"x-pcie-lnksta-dllla", "true"},
    {"x-pcie-extcap-init", "true"},
    {"failover_pair_id", "\"\""},
    {"acpi-index", "0 (0x0)"},
};

/* One property line, the value formatted by its QOM type as QEMU's qdev printer does. */
static void qtree_value(HmpRun *r, int indent, const char *name, const char *type, JsonNode *v)
{
    GType vt = JSON_NODE_HOLDS_VALUE(v) ? json_node_get_value_type(v) : G_TYPE_INVALID;

    hmp_printf(r, "%*s%s = ", indent, "", name);
    if (vt == G_TYPE_BOOLEAN) {
        hmp_printf(r, "%s\n", json_node_get_boolean(v) ? "true" : "false");
    } else if (vt == G_TYPE_STRING) {
        hmp_printf(r, "\"%s\"\n", json_node_get_string(v));
    } else if (vt == G_TYPE_INT64 && !strcmp(name, "addr") && !strcmp(type, "int32")) {
        gint64 devfn = json_node_get_int(v);

        if (devfn < 0) {
            hmp_printf(r, "<unset>\n");
        } else {
            hmp_printf(r, "%02x.%x\n", (unsigned)(devfn >> 3), (unsigned)(devfn & 7));
        }
    } else if (vt == G_TYPE_INT64 && !strcmp(type, "size")) {
        g_autofree char *h = human_size((guint64)json_node_get_int(v));

        hmp_printf(r, "%" G_GUINT64_FORMAT " (%s)\n", (guint64)json_node_get_int(v), h);
    } else if (vt == G_TYPE_INT64) {
        gint64 n = json_node_get_int(v);

        hmp_printf(r, "%" G_GINT64_FORMAT " (0x%" G_GINT64_MODIFIER "x)\n", n, (guint64)n);
    } else {
        g_autofree char *j = qmp_json_to_string(v);

        hmp_printf(r, "%s\n", j);
    }
}

/* name -> type of the properties qom-list lists at @path; NULL if there is no such object. */
static GHashTable *qom_prop_types(HmpRun *r, const char *path)
{
    JsonObject *args = args_new();
    JsonNode *res;
    JsonArray *arr;
    GHashTable *t = NULL;

    json_object_set_string_member(args, "path", path);
    res = hmp_qmp(r, "qom-list", args, NULL);
    json_object_unref(args);
    arr = as_array(res);
    if (arr) {
        t = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        for (guint i = 0; i < json_array_get_length(arr); i++) {
            JsonObject *p = array_obj(arr, i);

            g_hash_table_insert(t, g_strdup(str_member(p, "name", "")),
                                g_strdup(str_member(p, "type", "")));
        }
    }
    if (res) {
        json_node_unref(res);
    }
    return t;
}

/* @list: the property names, separated by spaces. */
static void qtree_props(HmpRun *r, int indent, const char *path, GHashTable *types,
                        const char *list)
{
    g_auto(GStrv) all = g_strsplit(list, " ", -1);

    for (char **names = all; *names; names++) {
        const char *type = g_hash_table_lookup(types, *names);
        JsonObject *args;
        JsonNode *v;

        if (!type) {
            continue; /* a property this device does not have */
        }
        args = args_new();
        json_object_set_string_member(args, "path", path);
        json_object_set_string_member(args, "property", *names);
        v = hmp_qmp(r, "qom-get", args, NULL);
        json_object_unref(args);
        if (v) {
            qtree_value(r, indent, *names, type, v);
            json_node_unref(v);
        }
    }
}

/* The lines info qtree prints for a PCI function after its properties. */
static void qtree_pci_info(HmpRun *r, int indent, JsonObject *d)
{
    JsonObject *ci = obj_member(d, "class_info"), *id = obj_member(d, "id");
    JsonArray *regs = as_array(d ? json_object_get_member(d, "regions") : NULL);

    if (!d) {
        return;
    }
    if (str_member(ci, "desc", NULL)) {
        hmp_printf(r, "%*sclass %s", indent, "", str_member(ci, "desc", ""));
    } else {
        hmp_printf(r, "%*sclass Class %04" G_GINT64_MODIFIER "x", indent, "",
                   int_member(ci, "class"));
    }
    hmp_printf(r,
               ", addr %02" G_GINT64_MODIFIER "x:%02" G_GINT64_MODIFIER "x.%" G_GINT64_MODIFIER
               "x, pci id %04" G_GINT64_MODIFIER "x:%04" G_GINT64_MODIFIER
               "x (sub %04" G_GINT64_MODIFIER "x:%04" G_GINT64_MODIFIER "x)\n",
               int_member(d, "bus"), int_member(d, "slot"), int_member(d, "function"),
               int_member(id, "vendor"), int_member(id, "device"),
               int_member(id, "subsystem-vendor"), int_member(id, "subsystem"));
    for (guint k = 0; regs && k < json_array_get_length(regs); k++) {
        JsonObject *reg = array_obj(regs, k);
        guint64 addr = (guint64)int_member(reg, "address");

        hmp_printf(r,
                   "%*sbar %" G_GINT64_FORMAT ": %s at 0x%" G_GINT64_MODIFIER
                   "x [0x%" G_GINT64_MODIFIER "x]\n",
                   indent, "", int_member(reg, "bar"),
                   strcmp(str_member(reg, "type", ""), "io") ? "mem" : "i/o", addr,
                   addr + (guint64)int_member(reg, "size") - 1);
    }
}

/* A virtio-blk-pci device (its QOM object at /machine/peripheral/<id>) and its backend. */
static void qtree_blk_pci(HmpRun *r, int indent, const char *id, JsonObject *pci)
{
    g_autofree char *path = g_strdup_printf("/machine/peripheral/%s", id);
    GHashTable *types = qom_prop_types(r, path);

    hmp_printf(r, "%*sdev: virtio-blk-pci, id \"%s\"\n", indent, "", id);
    if (!types) {
        return;
    }
    qtree_props(r, indent + 2, path, types, qtree_virtio_pci);
    qtree_props(r, indent + 2, path, types, qtree_pci_common);
    qtree_pci_info(r, indent + 2, pci);
    hmp_printf(r, "%*sbus: virtio-bus\n", indent + 2, "");
    hmp_printf(r, "%*stype virtio-pci-bus\n", indent + 4, "");
    hmp_printf(r, "%*sdev: virtio-blk-device, id \"\"\n", indent + 4, "");
    qtree_props(r, indent + 6, path, types, qtree_virtio_blk);
    g_hash_table_destroy(types);
}

/* A PCI function vblk has no QOM object for (the host bridge, vhost-user-blk-pci). */
static void qtree_plain_pci(HmpRun *r, int indent, JsonObject *d)
{
    JsonObject *ci = obj_member(d, "class_info"), *id = obj_member(d, "id");
    const char *type = int_member(ci, "class") == 0x0600    ? "i440FX"
                       : int_member(id, "vendor") == 0x1af4 ? "vhost-user-blk-pci"
                                                            : "pci-device";

    hmp_printf(r, "%*sdev: %s, id \"%s\"\n", indent, "", type, str_member(d, "qdev_id", ""));
    hmp_printf(r, "%*saddr = %02" G_GINT64_MODIFIER "x.%" G_GINT64_MODIFIER "x\n", indent + 2, "",
               int_member(d, "slot"), int_member(d, "function"));
    for (size_t i = 0; i < G_N_ELEMENTS(qtree_pci_defaults); i++) {
        hmp_printf(r, "%*s%s = %s\n", indent + 2, "", qtree_pci_defaults[i][0],
                   qtree_pci_defaults[i][1]);
    }
    qtree_pci_info(r, indent + 2, d);
}

static bool qtree_is_blk_pci(HmpRun *r, const char *id)
{
    g_autofree char *path = g_strdup_printf("/machine/peripheral/%s", id);
    JsonObject *args = args_new();
    JsonNode *v;
    bool yes;

    json_object_set_string_member(args, "path", path);
    json_object_set_string_member(args, "property", "type");
    v = hmp_qmp(r, "qom-get", args, NULL);
    json_object_unref(args);
    yes = v && JSON_NODE_HOLDS_VALUE(v) && json_node_get_value_type(v) == G_TYPE_STRING &&
          !strcmp(json_node_get_string(v), "virtio-blk-pci");
    if (v) {
        json_node_unref(v);
    }
    return yes;
}

/*
 * info qtree: the PCI host bridge and bus 0 from query-pci, newest device
 * first as QEMU lists a bus; each virtio-blk-pci function with its
 * properties from qom-list/qom-get.  Without query-pci (no machine: the
 * device model alone) the devices come from /machine/peripheral.
 */
static bool info_qtree(HmpRun *r, HmpArgs *a)
{
    JsonNode *pci = NULL;
    JsonArray *buses, *devs = NULL;

    if (qmp_command_exists("query-pci")) {
        pci = hmp_qmp(r, "query-pci", NULL, NULL);
    }
    buses = as_array(pci);
    if (buses && json_array_get_length(buses)) {
        JsonObject *bus0 = array_obj(buses, 0);

        devs = as_array(bus0 ? json_object_get_member(bus0, "devices") : NULL);
    }
    hmp_printf(r, "bus: main-system-bus\n");
    hmp_printf(r, "  type System\n");
    hmp_printf(r, "  dev: i440FX-pcihost, id \"\"\n");
    hmp_printf(r, "    bus: pci.0\n");
    hmp_printf(r, "      type PCI\n");
    if (devs) {
        for (guint i = json_array_get_length(devs); i-- > 0;) {
            JsonObject *d = array_obj(devs, i);
            const char *id = str_member(d, "qdev_id", "");

            if (*id && qtree_is_blk_pci(r, id)) {
                qtree_blk_pci(r, 6, id, d);
            } else {
                qtree_plain_pci(r, 6, d);
            }
        }
    } else {
        GHashTable *ids = qom_prop_types(r, "/machine/peripheral");
        GList *keys = ids ? g_hash_table_get_keys(ids) : NULL;

        keys = g_list_sort(keys, (GCompareFunc)strcmp);
        for (GList *l = keys; l; l = l->next) {
            if (!strcmp(g_hash_table_lookup(ids, l->data), "child<virtio-blk-pci>")) {
                qtree_blk_pci(r, 6, l->data, NULL);
            }
        }
        g_list_free(keys);
        if (ids) {
            g_hash_table_destroy(ids);
        }
    }
    if (pci) {
        json_node_unref(pci);
    }
    return false;
}

static bool hmp_quit(HmpRun *r, HmpArgs *a)
{
    r->quit = true;
    return hmp_qmp_tail(r, "quit", NULL, NULL);
}

static bool hmp_qom_list(HmpRun *r, HmpArgs *a)
{
    JsonObject *args;

    if (!a->v->pdata[0]) {
        hmp_printf(r, "/\n"); /* QEMU's answer without a path */
        return false;
    }
    args = args_new();
    json_object_set_string_member(args, "path", a->v->pdata[0]);
    return hmp_qmp_tail(r, "qom-list", args, fmt_qom_list);
}

static bool hmp_qom_get(HmpRun *r, HmpArgs *a)
{
    JsonObject *args = args_new();

    json_object_set_string_member(args, "path", a->v->pdata[0]);
    json_object_set_string_member(args, "property", a->v->pdata[1]);
    return hmp_qmp_tail(r, "qom-get", args, fmt_json);
}

/* The QOM type of @prop at @path, from qom-list; NULL if unknown. */
static char *qom_prop_type(HmpRun *r, const char *path, const char *prop)
{
    GHashTable *types = qom_prop_types(r, path);
    char *type = types ? g_strdup(g_hash_table_lookup(types, prop)) : NULL;

    if (types) {
        g_hash_table_unref(types);
    }
    return type;
}

/* Text to a JSON value for a property of QOM type @type, as QEMU's string visitor. */
static JsonNode *qom_value_from_text(const char *prop, const char *type, const char *text,
                                     GError **errp)
{
    JsonNode *n = json_node_alloc();
    char *end;

    if (type && !strcmp(type, "bool")) {
        bool b;

        if (!strcmp(text, "on") || !strcmp(text, "yes") || !strcmp(text, "true")) {
            b = true;
        } else if (!strcmp(text, "off") || !strcmp(text, "no") || !strcmp(text, "false")) {
            b = false;
        } else {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Parameter '%s' expects 'on' or 'off'",
                        prop);
            json_node_free(n);
            return NULL;
        }
        return json_node_init_boolean(n, b);
    }
    if (type && (g_str_has_prefix(type, "int") || g_str_has_prefix(type, "uint"))) {
        bool is_unsigned = type[0] == 'u';
        gint64 v;

        errno = 0;
        v = is_unsigned ? (gint64)g_ascii_strtoull(text, &end, 0) : g_ascii_strtoll(text, &end, 0);
        if (errno || end == text || *end || (is_unsigned && (text[0] == '-' || v < 0))) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Parameter '%s' expects %s", prop,
                        is_unsigned ? "uint64" : "int64");
            json_node_free(n);
            return NULL;
        }
        return json_node_init_int(n, v);
    }
    return json_node_init_string(n, text);
}

static bool hmp_qom_set(HmpRun *r, HmpArgs *a)
{
    const char *path = a->v->pdata[0], *prop = a->v->pdata[1], *text = a->v->pdata[2];
    JsonObject *args;
    JsonNode *value;
    GError *err = NULL;

    if (a->flag_j) {
        value = qmp_json_parse(text, strlen(text), &err);
    } else {
        g_autofree char *type = qom_prop_type(r, path, prop);

        value = qom_value_from_text(prop, type, text, &err);
    }
    if (!value) {
        hmp_print_error(r, err);
        g_error_free(err);
        return false;
    }
    args = args_new();
    json_object_set_string_member(args, "path", path);
    json_object_set_string_member(args, "property", prop);
    json_object_set_member(args, "value", value);
    return hmp_qmp_tail(r, "qom-set", args, NULL);
}

static bool hmp_block_resize(HmpRun *r, HmpArgs *a)
{
    JsonObject *args = args_new();

    json_object_set_string_member(args, "device", a->v->pdata[0]);
    json_object_set_int_member(args, "size", a->num[1]);
    return hmp_qmp_tail(r, "block_resize", args, NULL);
}

static bool hmp_block_set_io_throttle(HmpRun *r, HmpArgs *a)
{
    static const char *const keys[] = {"bps", "bps_rd", "bps_wr", "iops", "iops_rd", "iops_wr"};
    JsonObject *args = args_new();

    json_object_set_string_member(args, "device", a->v->pdata[0]);
    for (size_t i = 0; i < G_N_ELEMENTS(keys); i++) {
        json_object_set_int_member(args, keys[i], a->num[i + 1]);
    }
    return hmp_qmp_tail(r, "block_set_io_throttle", args, NULL);
}

static bool hmp_help_cmd(HmpRun *r, HmpArgs *a)
{
    hmp_help(r, a->v->pdata[0]);
    return false;
}

static bool hmp_info(HmpRun *r, HmpArgs *a)
{
    hmp_help(r, "info"); /* "info" alone lists the subcommands, as QEMU */
    return false;
}

/* Help texts are vblk's own words; the layout ("name params -- text") is QEMU's. */
static const HmpCmd hmp_cmds[] = {
    {"help|?", "S?", "[cmd]", "show the help", hmp_help_cmd, NULL, NULL},
    {"info", "", "[subcommand]", "show various information about the system state", hmp_info, NULL,
     NULL},
    {"stop|s", "", "", "stop the virtual CPUs", NULL, "stop", NULL},
    {"cont|c", "", "", "resume the virtual CPUs", NULL, "cont", NULL},
    {"quit|q", "", "", "end vblk", hmp_quit, NULL, NULL},
    {"system_reset", "", "", "reset the machine", NULL, "system_reset", NULL},
    {"system_powerdown", "", "", "press the ACPI power button", NULL, "system_powerdown", NULL},
    {"qom-list", "s?", "path", "list the properties of a QOM object", hmp_qom_list, NULL, NULL},
    {"qom-get", "ss", "path property", "print a QOM property", hmp_qom_get, NULL, NULL},
    {"qom-set", "-jssS", "[-j] path property value", "set a QOM property (-j: the value is JSON)",
     hmp_qom_set, NULL, NULL},
    {"block_resize", "Bo", "device size", "resize a drive", hmp_block_resize, NULL, NULL},
    {"block_set_io_throttle", "Bllllll", "device bps bps_rd bps_wr iops iops_rd iops_wr",
     "set a drive's I/O limits", hmp_block_set_io_throttle, NULL, NULL},
    {0},
};

static const HmpCmd hmp_info_cmds[] = {
    {"block", "-n-vB?", "[-n] [-v] [device]", "show the drives", info_block, NULL, NULL},
    {"blockstats", "", "", "show the drives' statistics", NULL, "query-blockstats", fmt_blockstats},
    {"cpus", "", "", "show the virtual CPUs", NULL, "query-cpus-fast", fmt_cpus},
    {"iothreads", "", "", "show the I/O threads", NULL, "query-iothreads", fmt_iothreads},
    {"pci", "", "", "show the PCI devices", NULL, "query-pci", fmt_pci},
    {"qtree", "", "", "show the device tree", info_qtree, NULL, NULL},
    {"status", "", "", "show the run state", NULL, "query-status", fmt_status},
    {"version", "", "", "show the version", NULL, "query-version", fmt_version},
    {"virtio-blk-dataplane", "", "",
     "show the virtio-blk devices' paths, per-queue counters and stage cycles (vblk)", NULL,
     "x-query-virtio-blk-dataplane", fmt_dataplane},
    {0},
};

static bool name_matches(const char *names, const char *word)
{
    size_t n = strlen(word);

    for (const char *p = names; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);

        if (len == n && !strncmp(p, word, n)) {
            return true;
        }
        p += len + (bar ? 1 : 0);
    }
    return false;
}

static const HmpCmd *find_cmd(const HmpCmd *table, const char *word)
{
    for (const HmpCmd *c = table; c->name; c++) {
        if (name_matches(c->name, word)) {
            return c;
        }
    }
    return NULL;
}

static void help_line(HmpRun *r, const char *prefix, const HmpCmd *c)
{
    hmp_printf(r, "%s%s %s -- %s\n", prefix, c->name, c->params, c->help);
}

static void hmp_help(HmpRun *r, const char *what)
{
    g_auto(GStrv) words = what ? g_strsplit_set(what, " \t", -1) : NULL;
    const HmpCmd *c;

    if (!what) {
        for (c = hmp_cmds; c->name; c++) {
            help_line(r, "", c);
        }
        return;
    }
    if (!strcmp(words[0], "info")) {
        const char *sub = words[1] && *words[1] ? words[1] : NULL;

        for (c = hmp_info_cmds; c->name; c++) {
            if (!sub || name_matches(c->name, sub)) {
                help_line(r, "info ", c);
            }
        }
        if (sub && !find_cmd(hmp_info_cmds, sub)) {
            hmp_printf(r, "unknown command: 'info %s'\n", sub);
        }
        return;
    }
    c = find_cmd(hmp_cmds, words[0]);
    if (!c) {
        hmp_printf(r, "unknown command: '%s'\n", words[0]);
        return;
    }
    help_line(r, "", c);
}

/* ---- the command line ------------------------------------------------------ */

static const char *skip_space(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\r' || *p == '\n') {
        p++;
    }
    return p;
}

/* A word, or a "quoted string" with \n \r \\ \' \" escapes; NULL on a syntax error. */
static char *get_str(HmpRun *r, const char **pp)
{
    const char *p = skip_space(*pp);
    GString *s = g_string_new(NULL);

    if (*p == '"') {
        p++;
        while (*p && *p != '"') {
            if (*p == '\\' && p[1]) {
                p++;
                switch (*p) {
                case 'n':
                    g_string_append_c(s, '\n');
                    break;
                case 'r':
                    g_string_append_c(s, '\r');
                    break;
                case '\\':
                case '\'':
                case '"':
                    g_string_append_c(s, *p);
                    break;
                default:
                    hmp_printf(r, "unsupported escape code: '\\%c'\n", *p);
                    g_string_free(s, TRUE);
                    return NULL;
                }
                p++;
            } else {
                g_string_append_c(s, *p++);
            }
        }
        if (*p != '"') {
            hmp_printf(r, "unterminated string\n");
            g_string_free(s, TRUE);
            return NULL;
        }
        p++;
    } else {
        while (*p && *p != ' ' && *p != '\t') {
            g_string_append_c(s, *p++);
        }
    }
    *pp = p;
    return g_string_free(s, FALSE);
}

/* An integer: [+|-] then C syntax (0x.., 0..); QEMU's messages. */
static bool get_int(HmpRun *r, const char **pp, int64_t *out)
{
    const char *p = skip_space(*pp);
    bool neg = false;
    guint64 v;
    char *end;

    if (!*p) {
        hmp_printf(r, "unexpected end of expression\n");
        return false;
    }
    if (*p == '-' || *p == '+') {
        neg = *p++ == '-';
    }
    if (*p < '0' || *p > '9') {
        hmp_printf(r, "invalid char '%c' in expression\n", *p ? *p : ' ');
        return false;
    }
    errno = 0;
    v = g_ascii_strtoull(p, &end, 0);
    if (errno) {
        hmp_printf(r, "number too large\n");
        return false;
    }
    if (*end && *end != ' ' && *end != '\t') {
        hmp_printf(r, "invalid char '%c' in expression\n", *end);
        return false;
    }
    *out = (int64_t)(neg ? 0 - v : v); /* unsigned negation: no overflow for 2^63 */
    *pp = end;
    return true;
}

/* A size: a number with an optional B/K/M/G/T/P/E suffix, MiB without one (QEMU's 'o'). */
static bool get_size(HmpRun *r, const char **pp, int64_t *out)
{
    const char *p = skip_space(*pp);
    static const char units[] = "BKMGTPE";
    double v;
    char *end;
    int shift = 20;

    errno = 0;
    v = g_ascii_strtod(p, &end);
    if (end != p && *end) {
        const char *u = strchr(units, g_ascii_toupper(*end));

        if (u && *u) {
            shift = 10 * (int)(u - units);
            end++;
        }
    }
    if (end == p || errno || *p == '-' || !(v >= 0) /* NaN too */ ||
        (*end && *end != ' ' && *end != '\t') ||
        v * (double)(1ULL << shift) >= 9223372036854775807.0 || (shift == 0 && v != (int64_t)v)) {
        hmp_printf(r, "invalid size\n");
        return false;
    }
    *out = (int64_t)(v * (double)(1ULL << shift));
    *pp = end;
    return true;
}

/* Checks and collects @c's arguments; prints QEMU's message and returns false on an error. */
static bool parse_args(HmpRun *r, const HmpCmd *c, const char *cmdname, const char **pp, HmpArgs *a)
{
    const char *p = *pp;

    for (const char *t = c->args; *t; t++) {
        bool optional = t[1] == '?';
        const char *q = skip_space(p);
        char *s = NULL;
        int64_t n = 0;

        if (*t == '-') {
            /* a flag: "-j" */
            char flag = *++t;

            if (q[0] == '-' && q[1] == flag && (!q[2] || q[2] == ' ' || q[2] == '\t')) {
                a->flag_j |= flag == 'j';
                a->flag_v |= flag == 'v';
                p = q + 2;
            }
            continue;
        }
        char type = *t;

        if (optional) {
            t++;
        }
        switch (type) {
        case 's':
        case 'B':
        case 'S':
            if (!*q) {
                if (optional) {
                    g_ptr_array_add(a->v, NULL);
                    continue;
                }
                hmp_printf(
                    r, type == 'B' ? "%s: block device name expected\n" : "%s: string expected\n",
                    cmdname);
                return false;
            }
            if (type == 'S') {
                /* the rest of the line, as typed */
                s = g_strdup(q);
                g_strchomp(s);
                p = q + strlen(q);
            } else {
                s = get_str(r, &p);
                if (!s) {
                    hmp_printf(r, "%s: %s expected\n", cmdname,
                               type == 'B' ? "block device name" : "string");
                    return false;
                }
            }
            g_ptr_array_add(a->v, s);
            break;
        case 'o':
            if (!get_size(r, &p, &n)) {
                return false;
            }
            a->num[MIN(a->v->len, G_N_ELEMENTS(a->num) - 1)] = n;
            g_ptr_array_add(a->v, NULL);
            break;
        case 'l':
            if (!get_int(r, &p, &n)) {
                return false;
            }
            a->num[MIN(a->v->len, G_N_ELEMENTS(a->num) - 1)] = n;
            g_ptr_array_add(a->v, NULL);
            break;
        default:
            break;
        }
    }
    p = skip_space(p);
    if (*p) {
        hmp_printf(r, "%s: extraneous characters at the end of line\n", cmdname);
        return false;
    }
    *pp = p;
    return true;
}

/* The first word of @line (up to white space); "" for an empty line. */
static char *first_word(const char **pp)
{
    const char *p = skip_space(*pp), *start = p;

    while (*p && *p != ' ' && *p != '\t') {
        p++;
    }
    *pp = p;
    return g_strndup(start, p - start);
}

static void primary_name(const char *names, char *buf, size_t size)
{
    const char *bar = strchr(names, '|');
    size_t len = bar ? (size_t)(bar - names) : strlen(names);

    g_strlcpy(buf, names, MIN(size, len + 1));
}

/* Parses and runs one line; returns true if its QMP command deferred (r finishes later). */
static bool hmp_run_parsed(HmpRun *r, const char *line)
{
    const char *p = line;
    g_autofree char *word = first_word(&p);
    g_autofree char *sub = NULL;
    const HmpCmd *c;
    HmpArgs a = {.v = g_ptr_array_new_with_free_func(g_free)};
    char primary[64], tryname[80];
    const char *cmdname;
    bool deferred = false;

    if (!*word) {
        goto out;
    }
    c = find_cmd(hmp_cmds, word);
    if (!c) {
        hmp_printf(r, "unknown command: '%s'\n", word);
        goto out;
    }
    cmdname = c->name;
    primary_name(c->name, primary, sizeof(primary));
    g_strlcpy(tryname, primary, sizeof(tryname));
    if (c->fn == hmp_info && *skip_space(p)) {
        sub = first_word(&p);
        c = find_cmd(hmp_info_cmds, sub);
        if (!c) {
            hmp_printf(r, "unknown command: 'info %s'\n", sub);
            goto out;
        }
        cmdname = c->name;
        primary_name(c->name, primary, sizeof(primary));
        g_snprintf(tryname, sizeof(tryname), "info %s", primary);
    }
    if (!parse_args(r, c, cmdname, &p, &a)) {
        hmp_printf(r, "Try \"help %s\" for more information\n", tryname);
        goto out;
    }
    deferred = c->fn ? c->fn(r, &a) : cmd_simple(r, c);
out:
    g_ptr_array_free(a.v, TRUE);
    return deferred;
}

/*
 * Runs @line on behalf of @c.  @done is called exactly once with the output
 * in r->out: before this returns (false), or later from the loop (true).
 */
static bool hmp_run_line(QmpClient *c, const char *line, HmpDoneFn done, void *opaque)
{
    HmpRun *r = g_new0(HmpRun, 1);

    r->client = qmp_client_ref(c);
    r->out = g_string_new(NULL);
    r->done = done;
    r->done_opaque = opaque;
    if (hmp_run_parsed(r, line)) {
        return true;
    }
    hmp_run_finish(r);
    return false;
}

/* "\n" -> "\r\n", as QEMU's monitor writes every line. */
static char *crlf(const char *s, size_t *len)
{
    GString *o = g_string_sized_new(strlen(s) + 16);

    for (; *s; s++) {
        if (*s == '\n') {
            g_string_append_c(o, '\r');
        }
        g_string_append_c(o, *s);
    }
    *len = o->len;
    return g_string_free(o, FALSE);
}

/* ---- human-monitor-command ------------------------------------------------ */

typedef struct HmcState {
    QmpDeferred *token; /* set if the command deferred */
    char *output;
} HmcState;

static JsonNode *string_node(char *s)
{
    JsonNode *n = json_node_init_string(json_node_alloc(), s);

    g_free(s);
    return n;
}

static void hmc_done(HmpRun *r, void *opaque)
{
    HmcState *st = opaque;
    size_t len;
    char *out = crlf(r->out->str, &len);

    if (st->token) {
        qmp_reply_deferred(st->token, string_node(out), NULL);
        g_free(st);
    } else {
        st->output = out;
    }
}

static JsonNode *cmd_human_monitor_command(QmpRequest *req, JsonObject *args, GError **errp)
{
    HmcState *st = g_new0(HmcState, 1);
    const char *line = json_object_get_string_member(args, "command-line");
    JsonNode *res;

    if (hmp_run_line(qmp_request_client(req), line, hmc_done, st)) {
        st->token = qmp_request_defer(req);
        return NULL;
    }
    res = string_node(st->output);
    g_free(st);
    return res;
}

/* Context: monitor thread */
void hmp_commands_register(void)
{
    static const QmpArgSpec hmc_args[] = {
        {"command-line", QMP_ARG_STR, false},
        {"cpu-index", QMP_ARG_INT, true},
        QMP_ARGS_END,
    };

    qmp_register_command("human-monitor-command", cmd_human_monitor_command, hmc_args, 0, NULL);
    qmp_schema_describe("human-monitor-command", NULL, "'str'", NULL);
}

/* ---- the line editor ------------------------------------------------------- */

enum { ESC_NONE, ESC_ESC, ESC_CSI };
enum { IAC_NONE, IAC_CMD, IAC_OPT, IAC_SB, IAC_SB_IAC };

#define TELNET_IAC  255
#define TELNET_SB   250
#define TELNET_SE   240
#define TELNET_WILL 251
#define TELNET_DONT 254

struct HmpSession {
    QmpClient *client; /* not referenced: the client owns the session */
    GString *line;
    GPtrArray *history;
    guint hist_pos; /* == history->len: the line being typed */
    size_t cur;     /* cursor position in line */
    int esc;
    unsigned csi_param; /* the number in ESC [ n ~ */
    int iac;
    bool telnet;
    bool mux, focused, banner_done;
    bool last_cr;
    bool in_run;     /* inside hmp_run_line(): a synchronous finish must not resume */
    bool mux_marker; /* a NUL came in from the mux: the next byte is a focus change */
    bool busy;
};

static void out_str(HmpSession *s, const char *str)
{
    qmp_client_write(s->client, str, strlen(str));
}

static void session_banner(HmpSession *s)
{
    g_autofree char *b = g_strdup_printf("QEMU %d.%d.%d monitor - type 'help' for more "
                                         "information\r\n",
                                         QMP_QEMU_MAJOR, QMP_QEMU_MINOR, QMP_QEMU_MICRO);

    if (!s->banner_done) {
        out_str(s, b);
        s->banner_done = true;
    }
    out_str(s, HMP_PROMPT);
}

/* Context: monitor thread */
HmpSession *hmp_session_new(QmpClient *c, bool telnet, bool mux)
{
    HmpSession *s = g_new0(HmpSession, 1);

    s->client = c;
    s->line = g_string_new(NULL);
    s->history = g_ptr_array_new_with_free_func(g_free);
    s->telnet = telnet;
    s->mux = mux;
    if (telnet) {
        /* We echo and do without go-ahead; no line mode: a character at a time. */
        static const char neg[] = {(char)TELNET_IAC, (char)TELNET_WILL, 1,
                                   (char)TELNET_IAC, (char)TELNET_WILL, 3,
                                   (char)TELNET_IAC, (char)TELNET_DONT, 34};
        qmp_client_write(c, neg, sizeof(neg));
    }
    if (!mux) {
        s->focused = true;
        session_banner(s);
    }
    return s;
}

/* Context: monitor thread */
void hmp_session_free(HmpSession *s)
{
    if (!s) {
        return;
    }
    g_string_free(s->line, TRUE);
    g_ptr_array_free(s->history, TRUE);
    g_free(s);
}

static void session_done(HmpRun *r, void *opaque)
{
    HmpSession *s = opaque;
    size_t len;
    g_autofree char *out = crlf(r->out->str, &len);

    if (!qmp_client_alive(r->client)) {
        return; /* the session goes with its client */
    }
    qmp_client_write(s->client, out, len);
    if (r->quit) {
        return; /* stays busy: QEMU's monitor is suspended while it exits */
    }
    s->busy = false;
    if (s->focused) {
        out_str(s, HMP_PROMPT);
    }
    if (!s->in_run) {
        qmp_client_resume(s->client); /* a deferred command finished: read input again */
    }
}

static void history_add(HmpSession *s, const char *line)
{
    if (!*line ||
        (s->history->len && !strcmp(g_ptr_array_index(s->history, s->history->len - 1), line))) {
        return;
    }
    if (s->history->len >= HMP_HISTORY) {
        g_ptr_array_remove_index(s->history, 0);
    }
    g_ptr_array_add(s->history, g_strdup(line));
}

static void history_move(HmpSession *s, int dir)
{
    const char *text;

    if ((dir < 0 && s->hist_pos == 0) || (dir > 0 && s->hist_pos >= s->history->len)) {
        return;
    }
    s->hist_pos += dir;
    text = s->hist_pos < s->history->len ? g_ptr_array_index(s->history, s->hist_pos) : "";
    g_string_assign(s->line, text);
    s->cur = s->line->len;
    out_str(s, "\r" HMP_PROMPT);
    out_str(s, text);
    out_str(s, "\033[K");
}

static void session_enter(HmpSession *s)
{
    g_autofree char *line = g_strdup(s->line->str);

    out_str(s, "\r\n");
    g_string_truncate(s->line, 0);
    s->cur = 0;
    history_add(s, line);
    s->hist_pos = s->history->len;
    s->busy = true; /* until session_done(), now or after a deferred reply */
    s->in_run = true;
    hmp_run_line(s->client, line, session_done, s);
    s->in_run = false;
}

/* Redraws from the cursor to the end of the line, then puts the cursor back. */
static void line_redraw_tail(HmpSession *s, bool erased_one)
{
    size_t tail = s->line->len - s->cur;
    g_autofree char *back = NULL;

    if (!tail && erased_one) {
        out_str(s, " \b"); /* the usual "\b \b" for the last character */
        return;
    }
    qmp_client_write(s->client, s->line->str + s->cur, tail);
    if (erased_one) {
        out_str(s, " ");
        tail++;
    }
    if (tail) {
        back = g_strdup_printf("\033[%zuD", tail);
        out_str(s, back);
    }
}

static void cursor_move(HmpSession *s, size_t to)
{
    g_autofree char *seq = NULL;

    if (to < s->cur) {
        seq = g_strdup_printf("\033[%zuD", s->cur - to);
    } else if (to > s->cur) {
        seq = g_strdup_printf("\033[%zuC", to - s->cur);
    }
    if (seq) {
        out_str(s, seq);
    }
    s->cur = to;
}

static void line_delete_at(HmpSession *s, size_t pos)
{
    if (pos >= s->line->len) {
        return;
    }
    if (pos < s->cur) {
        out_str(s, "\b");
        s->cur--;
    }
    g_string_erase(s->line, pos, 1);
    line_redraw_tail(s, true);
}

/* The final byte of an escape sequence: arrows, Home/End, Delete. */
static void session_csi(HmpSession *s, uint8_t ch)
{
    switch (ch) {
    case 'A':
        history_move(s, -1);
        break;
    case 'B':
        history_move(s, 1);
        break;
    case 'C':
        cursor_move(s, MIN(s->cur + 1, s->line->len));
        break;
    case 'D':
        cursor_move(s, s->cur ? s->cur - 1 : 0);
        break;
    case 'H':
        cursor_move(s, 0);
        break;
    case 'F':
        cursor_move(s, s->line->len);
        break;
    case '~':
        if (s->csi_param == 1 || s->csi_param == 7) {
            cursor_move(s, 0);
        } else if (s->csi_param == 4 || s->csi_param == 8) {
            cursor_move(s, s->line->len);
        } else if (s->csi_param == 3) {
            line_delete_at(s, s->cur);
        }
        break;
    default:
        break;
    }
}

/* ---- tab completion ----------------------------------------------------------- */

/* Inserts @text at the cursor and shows it, as if typed. */
static void line_insert(HmpSession *s, const char *text, size_t len)
{
    len = MIN(len, HMP_LINE_MAX - MIN(s->line->len, HMP_LINE_MAX));
    if (!len) {
        return;
    }
    g_string_insert_len(s->line, s->cur, text, len);
    qmp_client_write(s->client, text, len);
    s->cur += len;
    if (s->cur < s->line->len) {
        line_redraw_tail(s, false);
    }
}

static void add_candidate(GPtrArray *out, const char *name, const char *prefix)
{
    if (g_str_has_prefix(name, prefix)) {
        for (guint i = 0; i < out->len; i++) {
            if (!strcmp(out->pdata[i], name)) {
                return;
            }
        }
        g_ptr_array_add(out, g_strdup(name));
    }
}

/* Every name and alias of @table that starts with @prefix. */
static void complete_cmd_names(const HmpCmd *table, const char *prefix, GPtrArray *out)
{
    for (const HmpCmd *c = table; c->name; c++) {
        g_auto(GStrv) names = g_strsplit(c->name, "|", -1);

        for (char **n = names; *n; n++) {
            add_candidate(out, *n, prefix);
        }
    }
}

/* The block devices, by the name the commands take (device, or node-name for -blockdev). */
static void complete_block_devices(HmpSession *s, const char *prefix, GPtrArray *out)
{
    HmpRun r = {.client = s->client};
    JsonNode *res = hmp_qmp(&r, "query-block", NULL, NULL);
    JsonArray *arr = as_array(res);

    for (guint i = 0; arr && i < json_array_get_length(arr); i++) {
        JsonObject *b = array_obj(arr, i);
        const char *dev = str_member(b, "device", "");

        add_candidate(out, *dev ? dev : str_member(obj_member(b, "inserted"), "node-name", ""),
                      prefix);
    }
    if (res) {
        json_node_unref(res);
    }
}

/*
 * The candidates for the word before the cursor: command names, info
 * subcommands, and block device names where a command takes one.
 * *word_start is where that word begins in the line.
 */
static GPtrArray *complete_candidates(HmpSession *s, size_t *word_start)
{
    g_autofree char *head = g_strndup(s->line->str, s->cur);
    g_auto(GStrv) words = NULL;
    GPtrArray *out = g_ptr_array_new_with_free_func(g_free);
    g_autofree char *word = NULL;
    guint n;
    size_t start = s->cur;

    while (start && head[start - 1] != ' ' && head[start - 1] != '\t') {
        start--;
    }
    *word_start = start;
    word = g_strdup(head + start);
    head[start] = '\0';
    words = g_strsplit_set(head, " \t", -1);
    /* the complete words before the current one */
    n = 0;
    for (char **w = words; *w; w++) {
        if (**w) {
            words[n++] = *w;
        } else {
            g_free(*w);
        }
    }
    words[n] = NULL;
    if (n == 0) {
        complete_cmd_names(hmp_cmds, word, out);
    } else if (n == 1 &&
               (!strcmp(words[0], "info") || !strcmp(words[0], "help") || !strcmp(words[0], "?"))) {
        if (!strcmp(words[0], "info")) {
            complete_cmd_names(hmp_info_cmds, word, out);
        } else {
            complete_cmd_names(hmp_cmds, word, out);
        }
    } else if ((n == 1 && (!strcmp(words[0], "block_resize") ||
                           !strcmp(words[0], "block_set_io_throttle"))) ||
               (n >= 2 && !strcmp(words[0], "info") && !strcmp(words[1], "block") &&
                word[0] != '-')) {
        complete_block_devices(s, word, out);
    }
    return out;
}

static int cmp_str(gconstpointer a, gconstpointer b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/*
 * Tab: one candidate completes the word and adds a space; several complete
 * their common prefix and are listed in columns under the line, which is
 * then shown again with the prompt, as QEMU's readline does.
 */
static void session_complete(HmpSession *s)
{
    size_t start, typed, common, width = 0, cols, col = 0;
    GPtrArray *c = complete_candidates(s, &start);
    GString *list;

    typed = s->cur - start;
    if (c->len == 1) {
        const char *w = c->pdata[0];

        line_insert(s, w + typed, strlen(w) - typed);
        line_insert(s, " ", 1);
    } else if (c->len > 1) {
        g_ptr_array_sort(c, cmp_str);
        common = strlen(c->pdata[0]);
        for (guint i = 1; i < c->len; i++) {
            const char *a = c->pdata[0], *b = c->pdata[i];
            size_t k = 0;

            while (k < common && a[k] == b[k]) {
                k++;
            }
            common = k;
        }
        if (common > typed) {
            line_insert(s, (char *)c->pdata[0] + typed, common - typed);
        }
        for (guint i = 0; i < c->len; i++) {
            width = MAX(width, strlen(c->pdata[i]));
        }
        width = CLAMP(width + 2, 10, 80);
        cols = 80 / width;
        list = g_string_new("\r\n");

        for (guint i = 0; i < c->len; i++) {
            g_string_append_printf(list, "%-*s", (int)width, (char *)c->pdata[i]);
            if (++col == cols || i + 1 == c->len) {
                g_string_append(list, "\r\n");
                col = 0;
            }
        }
        g_string_append(list, HMP_PROMPT);
        g_string_append_len(list, s->line->str, s->line->len);
        qmp_client_write(s->client, list->str, list->len);
        g_string_free(list, TRUE);
        if (s->cur < s->line->len) {
            g_autofree char *back = g_strdup_printf("\033[%zuD", s->line->len - s->cur);

            out_str(s, back);
        }
    }
    g_ptr_array_free(c, TRUE);
}

/* One byte typed (telnet and mux framing already removed). */
static void session_key(HmpSession *s, uint8_t ch)
{
    if (s->esc != ESC_NONE && (ch < 0x20 || ch == 0x7f)) {
        /* A control character ends an unfinished sequence and counts itself (Enter works). */
        s->esc = ESC_NONE;
    }
    if (s->esc == ESC_ESC) {
        s->esc = ch == '[' || ch == 'O' ? ESC_CSI : ESC_NONE;
        s->csi_param = 0;
        return;
    }
    if (s->esc == ESC_CSI) {
        if (ch >= '0' && ch <= '9') {
            s->csi_param = MIN(s->csi_param * 10 + (ch - '0'), 1000);
        } else if (ch >= 0x40 && ch <= 0x7e) {
            s->esc = ESC_NONE;
            session_csi(s, ch);
        }
        return;
    }
    if (ch == '\n' && s->last_cr) {
        s->last_cr = false;
        return;
    }
    s->last_cr = ch == '\r';
    switch (ch) {
    case '\r':
    case '\n':
        session_enter(s);
        return;
    case 0x1b:
        s->esc = ESC_ESC;
        return;
    case 0x7f:
    case '\b':
        if (s->cur) {
            line_delete_at(s, s->cur - 1);
        }
        return;
    case '\t':
        session_complete(s);
        return;
    case 0x05: /* Ctrl-E: end of line */
        cursor_move(s, s->line->len);
        return;
    case 0x0b: /* Ctrl-K: erase to the end of the line */
        g_string_truncate(s->line, s->cur);
        out_str(s, "\033[K");
        return;
    case 0x15: /* Ctrl-U: erase the line */
        g_string_truncate(s->line, 0);
        s->cur = 0;
        out_str(s, "\r" HMP_PROMPT "\033[K");
        return;
    default:
        break;
    }
    if (ch < 0x20 || s->line->len >= HMP_LINE_MAX) {
        return; /* other control characters, and input beyond the line limit */
    }
    g_string_insert_c(s->line, s->cur, (char)ch);
    qmp_client_write(s->client, (const char *)&ch, 1);
    s->cur++;
    if (s->cur < s->line->len) {
        line_redraw_tail(s, false);
    }
}

/* Strips telnet commands; returns true if @ch is data. */
static bool telnet_filter(HmpSession *s, uint8_t ch)
{
    switch (s->iac) {
    case IAC_CMD:
        if (ch == TELNET_IAC) {
            s->iac = IAC_NONE;
            return true; /* IAC IAC: a literal 255 */
        }
        s->iac = ch == TELNET_SB ? IAC_SB : (ch >= TELNET_WILL ? IAC_OPT : IAC_NONE);
        return false;
    case IAC_OPT:
        s->iac = IAC_NONE;
        return false;
    case IAC_SB:
        s->iac = ch == TELNET_IAC ? IAC_SB_IAC : IAC_SB;
        return false;
    case IAC_SB_IAC:
        s->iac = ch == TELNET_SE ? IAC_NONE : IAC_SB;
        return false;
    default:
        if (ch == TELNET_IAC) {
            s->iac = IAC_CMD;
            return false;
        }
        /* A telnet Enter is CR NUL or CR LF. */
        return ch != 0;
    }
}

/* Mux framing (machine console): NUL 'i' = the monitor has the focus, NUL 'o' = lost it. */
static bool mux_filter(HmpSession *s, uint8_t ch)
{
    if (s->mux_marker) {
        s->mux_marker = false;
        if (ch == 'i' && !s->focused) {
            s->focused = true;
            session_banner(s);
        } else if (ch == 'o') {
            s->focused = false;
        }
        return false;
    }
    if (ch == 0) {
        s->mux_marker = true;
        return false;
    }
    return s->focused;
}

/* Context: monitor thread */
size_t hmp_session_feed(HmpSession *s, const uint8_t *data, size_t len, bool *busy)
{
    size_t i = 0;

    while (i < len && !s->busy) {
        uint8_t ch = data[i++];

        if (s->telnet && !telnet_filter(s, ch)) {
            continue;
        }
        if (s->mux && !mux_filter(s, ch)) {
            continue;
        }
        session_key(s, ch);
        if (!qmp_client_alive(s->client)) {
            break;
        }
    }
    *busy = s->busy;
    return i;
}
