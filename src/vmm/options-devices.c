/*
 * vblk: -drive, -device virtio-blk-pci and -object iothread, with QEMU's
 * property names, defaults and cross-checks (done after the whole command
 * line is read, since QEMU lets -device come before its -drive).
 */
#include <errno.h>
#include <inttypes.h>
#include <json-glib/json-glib.h>
#include <stdio.h>
#include <string.h>

#include "options-internal.h"
#include "util/secret.h"
#include "vmm/vmm.h"

#define VIRTIO_BLK_MAX_QUEUES 1024
#define VIRTQUEUE_MAX_SIZE    1024
#define DEFAULT_QUEUE_SIZE    256

/* Context: main thread */
void drive_options_free(gpointer p)
{
    DriveOptions *d = p;

    g_free(d->id);
    g_free((char *)d->blk.file);
    g_free(d->arg);
    if (d->block_opts) {
        g_ptr_array_free(d->block_opts, TRUE);
    }
    g_free(d);
}

static void opt_pair_free(gpointer p)
{
    OptPair *o = p;

    g_free(o->key);
    g_free(o->value);
    g_free(o);
}

static OptPair *opt_pair_new(const char *key, const char *value)
{
    OptPair *kv = g_new0(OptPair, 1);

    kv->key = g_strdup(key);
    kv->value = g_strdup(value);
    return kv;
}

static void drive_add_block_opt(DriveOptions *d, const char *key, const char *value)
{
    OptPair *kv = g_new0(OptPair, 1);

    kv->key = g_strdup(key);
    kv->value = g_strdup(value);
    if (!d->block_opts) {
        d->block_opts = g_ptr_array_new_with_free_func(opt_pair_free);
    }
    g_ptr_array_add(d->block_opts, kv);
}

/* Context: main thread */
void device_options_free(gpointer p)
{
    DeviceOptions *d = p;

    g_free(d->driver);
    g_free(d->id);
    g_free(d->drive);
    g_free(d->serial);
    g_free(d->iothread);
    g_free(d->arg);
    vq_mapping_free(d->vq_mapping);
    g_free(d);
}

/* Context: main thread */
void secret_options_free(gpointer p)
{
    SecretOptions *s = p;

    g_free(s->id);
    secret_free_string(s->data);
    g_free(s->file);
    g_free(s->format);
    secret_free_string(s->arg);
    g_free(s);
}

void iothread_options_free(gpointer p)
{
    IothreadOptions *t = p;

    g_free(t->id);
    g_free(t);
}

static DeviceOptions *device_options_new(const char *driver)
{
    DeviceOptions *d = g_new0(DeviceOptions, 1);

    d->driver = g_strdup(driver);
    d->slot = -1;
    d->config_wce = true;
    d->write_cache = -1;
    d->queue_size = DEFAULT_QUEUE_SIZE;
    d->logical_block_size = 512;
    d->physical_block_size = 512;
    d->discard = true;
    d->write_zeroes = true;
    d->bootindex = -1;
    return d;
}

/* cache=: the block layer's table of QEMU's modes. */
static bool drive_set_cache(DriveOptions *d, const char *mode)
{
    return blk_parse_cache_mode(mode, &d->blk.cache, NULL);
}

static bool drive_set_aio(DriveOptions *d, const char *v)
{
    if (!strcmp(v, "threads")) {
        d->blk.aio = BLOCK_AIO_THREADS;
    } else if (!strcmp(v, "native")) {
        d->blk.aio = BLOCK_AIO_NATIVE;
    } else if (!strcmp(v, "io_uring")) {
        d->blk.aio = BLOCK_AIO_IO_URING;
    } else {
        return false;
    }
    return true;
}

static bool drive_set_if(DriveOptions *d, const char *v, bool *ok_if)
{
    *ok_if = !strcmp(v, "none") || !strcmp(v, "virtio");
    d->iface = !strcmp(v, "virtio") ? DRIVE_IF_VIRTIO : DRIVE_IF_NONE;
    return *ok_if;
}

/* One -drive key; false = invalid (message built by the caller unless *handled). */
static bool drive_key(DriveOptions *d, const OptPair *p, const char *name, const char *arg,
                      bool *iface_given, GError **errp)
{
    bool b;

    if (!strcmp(p->key, "if")) {
        *iface_given = true;
        return drive_set_if(d, p->value, &b) ||
               opt_fail(errp, name, arg,
                        "if=%s is not supported (use if=none with -device "
                        "virtio-blk-pci, or if=virtio)",
                        p->value);
    } else if (!strcmp(p->key, "id")) {
        g_free(d->id);
        d->id = g_strdup(p->value);
    } else if (!strcmp(p->key, "file")) {
        g_free((char *)d->blk.file);
        d->blk.file = g_strdup(p->value);
    } else if (!strcmp(p->key, "format")) {
        return !strcmp(p->value, "raw") ||
               opt_fail(errp, name, arg, "format=%s is not supported (only raw)", p->value);
    } else if (!strcmp(p->key, "cache")) {
        return drive_set_cache(d, p->value) || opt_fail(errp, name, arg,
                                                        "invalid cache mode '%s' (none, writeback, "
                                                        "writethrough, directsync, unsafe)",
                                                        p->value);
    } else if (!strcmp(p->key, "cache.direct") || !strcmp(p->key, "cache.no-flush")) {
        if (!opts_parse_bool(p->value, &b)) {
            return opt_fail(errp, name, arg, "%s expects on or off", p->key);
        }
        *(!strcmp(p->key, "cache.direct") ? &d->blk.cache.direct : &d->blk.cache.no_flush) = b;
    } else if (!strcmp(p->key, "aio")) {
        return drive_set_aio(d, p->value) ||
               opt_fail(errp, name, arg, "invalid aio '%s' (threads, native, io_uring)", p->value);
    } else if (!strcmp(p->key, "readonly")) {
        return opts_parse_bool(p->value, &d->blk.read_only) ||
               opt_fail(errp, name, arg, "readonly expects on or off");
    } else if (!strcmp(p->key, "discard")) {
        d->blk.discard_unmap = !strcmp(p->value, "unmap") || !strcmp(p->value, "on");
        return d->blk.discard_unmap || !strcmp(p->value, "ignore") || !strcmp(p->value, "off") ||
               opt_fail(errp, name, arg, "invalid discard '%s' (unmap or ignore)", p->value);
    } else if (!strcmp(p->key, "detect-zeroes")) {
        return !strcmp(p->value, "off") ||
               opt_fail(errp, name, arg, "detect-zeroes=%s is not supported (only off)", p->value);
    } else if (!strcmp(p->key, "werror") || !strcmp(p->key, "rerror") ||
               !strcmp(p->key, "node-name") || g_str_has_prefix(p->key, "throttling.") ||
               !strcmp(p->key, "read-zeroes") || !strcmp(p->key, "latency-ns") ||
               !strcmp(p->key, "size") || !strcmp(p->key, "reconnect-delay") ||
               !strcmp(p->key, "file.reconnect-delay") || !strcmp(p->key, "file.key-secret") ||
               !strcmp(p->key, "file.password-secret")) {
        /* Block-layer keys: checked by the block layer when the drive is opened. */
        drive_add_block_opt(d, p->key, p->value);
    } else if (!strcmp(p->key, "media")) {
        return !strcmp(p->value, "disk") ||
               opt_fail(errp, name, arg, "media=%s is not supported", p->value);
    } else {
        return opt_fail(errp, name, arg, "invalid parameter '%s'", p->key);
    }
    return true;
}

/* Context: main thread */
bool opt_drive(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    g_autoptr(GPtrArray) kv = opts_split(arg, NULL, errp);
    DriveOptions *d;
    bool iface_given = false;

    if (!kv) {
        return opt_fail(errp, name, arg, "%s", "bad syntax");
    }
    d = g_new0(DriveOptions, 1);
    d->arg = g_strdup(arg);
    drive_set_cache(d, "writeback");
    g_ptr_array_add(o->drives, d);
    for (guint i = 0; i < kv->len; i++) {
        if (!drive_key(d, kv->pdata[i], name, arg, &iface_given, errp)) {
            return false;
        }
    }
    if (!iface_given) {
        return opt_fail(errp, name, arg, "%s",
                        "if=ide (QEMU's default) is not supported; "
                        "add if=none and a -device virtio-blk-pci, or if=virtio");
    }
    if (!d->blk.file || !*d->blk.file) {
        return opt_fail(errp, name, arg, "%s", "file= is required");
    }
    if (d->blk.aio == BLOCK_AIO_NATIVE && !d->blk.cache.direct) {
        return opt_fail(errp, name, arg, "%s",
                        "aio=native was specified, but it requires "
                        "cache.direct=on (cache=none or directsync)");
    }
    if (!d->id) {
        d->id = g_strdup_printf("%s%u", d->iface == DRIVE_IF_VIRTIO ? "virtio" : "none",
                                o->drives->len - 1);
    }
    if (d->iface == DRIVE_IF_VIRTIO) {
        DeviceOptions *dev = device_options_new("virtio-blk-pci");
        dev->drive = g_strdup(d->id);
        g_ptr_array_add(o->devices, dev);
    }
    return true;
}

/* QEMU's JSON -blockdev form, flattened to the dotted keys of the key=value form. */
static bool blockdev_flatten(DriveOptions *d, JsonNode *n, const char *prefix, GError **errp)
{
    char buf[32];

    switch (json_node_get_node_type(n)) {
    case JSON_NODE_OBJECT: {
        JsonObjectIter it;
        const char *k;
        JsonNode *v;

        json_object_iter_init(&it, json_node_get_object(n));
        while (json_object_iter_next(&it, &k, &v)) {
            g_autofree char *key = *prefix ? g_strdup_printf("%s.%s", prefix, k) : g_strdup(k);

            if (!blockdev_flatten(d, v, key, errp)) {
                return false;
            }
        }
        return true;
    }
    case JSON_NODE_ARRAY: {
        JsonArray *a = json_node_get_array(n);

        for (guint i = 0; i < json_array_get_length(a); i++) {
            g_autofree char *key = g_strdup_printf("%s.%u", prefix, i);

            if (!blockdev_flatten(d, json_array_get_element(a, i), key, errp)) {
                return false;
            }
        }
        return true;
    }
    case JSON_NODE_VALUE:
        if (!*prefix) {
            break;
        }
        switch (json_node_get_value_type(n)) {
        case G_TYPE_STRING:
            drive_add_block_opt(d, prefix, json_node_get_string(n));
            return true;
        case G_TYPE_BOOLEAN:
            drive_add_block_opt(d, prefix, json_node_get_boolean(n) ? "on" : "off");
            return true;
        case G_TYPE_INT64:
            snprintf(buf, sizeof(buf), "%" PRId64, json_node_get_int(n));
            drive_add_block_opt(d, prefix, buf);
            return true;
        default:
            g_set_error(errp, VMM_ERROR, EINVAL,
                        "Parameter '%s' expects a string, integer or boolean", prefix);
            return false;
        }
    default:
        break;
    }
    g_set_error(errp, VMM_ERROR, EINVAL, "Parameter '%s' must not be null",
                *prefix ? prefix : "(top)");
    return false;
}

static const char *drive_block_opt(const DriveOptions *d, const char *key)
{
    for (guint i = 0; d->block_opts && i < d->block_opts->len; i++) {
        const OptPair *p = d->block_opts->pdata[i];

        if (!strcmp(p->key, key)) {
            return p->value;
        }
    }
    return NULL;
}

/*
 * -blockdev: a node graph with QEMU's keys, in the dotted key=value form or
 * the JSON form. The block layer checks the keys when the device that uses
 * the node opens it; here only what names the node.
 * Context: main thread
 */
bool opt_blockdev(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    DriveOptions *d = g_new0(DriveOptions, 1);
    GError *err = NULL;
    const char *node;

    d->blockdev = true;
    d->arg = g_strdup(arg);
    g_ptr_array_add(o->drives, d);
    if (arg[0] == '{') {
        g_autoptr(JsonParser) parser = json_parser_new();
        JsonNode *root;

        if (!json_parser_load_from_data(parser, arg, -1, &err)) {
            opt_fail(errp, name, arg, "JSON parse error: %s", err->message);
            g_error_free(err);
            return false;
        }
        root = json_parser_get_root(parser);
        if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
            return opt_fail(errp, name, arg, "%s", "JSON must be an object");
        }
        if (!blockdev_flatten(d, root, "", &err)) {
            opt_fail(errp, name, arg, "%s", err->message);
            g_error_free(err);
            return false;
        }
    } else {
        g_autoptr(GPtrArray) kv = opts_split(arg, NULL, errp);

        if (!kv) {
            return opt_fail(errp, name, arg, "%s", "bad syntax");
        }
        for (guint i = 0; i < kv->len; i++) {
            const OptPair *p = kv->pdata[i];

            drive_add_block_opt(d, p->key, p->value);
        }
    }
    if (!drive_block_opt(d, "driver")) {
        return opt_fail(errp, name, arg, "%s", "Parameter 'driver' is missing");
    }
    node = drive_block_opt(d, "node-name");
    if (!node || !*node) {
        return opt_fail(errp, name, arg, "%s", "'node-name' must be specified for the root node");
    }
    d->id = g_strdup(node);
    return true;
}

/* QEMU's "addr" syntax: slot[.function], both hexadecimal. */
static bool device_parse_addr(const char *s, int *slot)
{
    uint64_t v, fn = 0;
    g_auto(GStrv) parts = g_strsplit(s, ".", 2);
    char *end;

    if (!parts[0] || !g_ascii_isxdigit(*parts[0])) {
        return false;
    }
    v = g_ascii_strtoull(parts[0], &end, 16);
    if (*end || v >= 32) {
        return false;
    }
    if (parts[1]) {
        fn = g_ascii_strtoull(parts[1], &end, 16);
        if (!*parts[1] || *end || fn != 0) {
            return false; /* no multifunction devices */
        }
    }
    *slot = v;
    return true;
}

static bool device_uint(const OptPair *p, uint64_t min, uint64_t max, unsigned *out)
{
    uint64_t v;

    if (!opt_uint(p->value, min, max, &v)) {
        return false;
    }
    *out = v;
    return true;
}

static bool device_pow2(unsigned v)
{
    return v && !(v & (v - 1));
}

static bool device_bool_prop(DeviceOptions *d, const OptPair *p, bool *known)
{
    static const char *const ignored[] = {"event_idx", "indirect_desc", "disable-legacy"};
    bool b;

    *known = true;
    if (!strcmp(p->key, "config-wce")) {
        return opts_parse_bool(p->value, &d->config_wce);
    } else if (!strcmp(p->key, "write-cache")) {
        if (!strcmp(p->value, "auto")) {
            d->write_cache = -1;
            return true;
        }
        if (!opts_parse_bool(p->value, &b)) {
            return false;
        }
        d->write_cache = b;
        return true;
    } else if (!strcmp(p->key, "x-data-plane")) {
        return opts_parse_bool(p->value, &d->data_plane);
    } else if (!strcmp(p->key, "modern-pio-notify")) {
        return opts_parse_bool(p->value, &d->pio_notify);
    } else if (!strcmp(p->key, "discard")) {
        return opts_parse_bool(p->value, &d->discard);
    } else if (!strcmp(p->key, "write-zeroes")) {
        return opts_parse_bool(p->value, &d->write_zeroes);
    } else if (!strcmp(p->key, "scsi") || !strcmp(p->key, "disable-modern")) {
        return opts_parse_bool(p->value, &b) && !b; /* legacy-only features */
    }
    for (size_t i = 0; i < G_N_ELEMENTS(ignored); i++) {
        if (!strcmp(p->key, ignored[i])) {
            return opts_parse_bool(p->value, &b) || !strcmp(p->value, "auto");
        }
    }
    *known = false;
    return false;
}

static bool device_prop(DeviceOptions *d, const OptPair *p, bool *known)
{
    uint64_t v;

    if (device_bool_prop(d, p, known) || *known) {
        return *known && device_bool_prop(d, p, known);
    }
    *known = true;
    if (!strcmp(p->key, "drive") || !strcmp(p->key, "id") || !strcmp(p->key, "serial") ||
        !strcmp(p->key, "iothread")) {
        char **dst = !strcmp(p->key, "drive")    ? &d->drive
                     : !strcmp(p->key, "id")     ? &d->id
                     : !strcmp(p->key, "serial") ? &d->serial
                                                 : &d->iothread;
        g_free(*dst);
        *dst = g_strdup(p->value);
        return true;
    } else if (!strcmp(p->key, "bus")) {
        return !strcmp(p->value, "pci.0");
    } else if (!strcmp(p->key, "addr")) {
        return device_parse_addr(p->value, &d->slot) && d->slot != 0;
    } else if (!strcmp(p->key, "num-queues")) {
        return device_uint(p, 1, VIRTIO_BLK_MAX_QUEUES, &d->num_queues);
    } else if (!strcmp(p->key, "queue-size")) {
        return device_uint(p, 4, VIRTQUEUE_MAX_SIZE, &d->queue_size) && device_pow2(d->queue_size);
    } else if (!strcmp(p->key, "logical_block_size")) {
        return device_uint(p, 512, 32768, &d->logical_block_size) &&
               device_pow2(d->logical_block_size);
    } else if (!strcmp(p->key, "physical_block_size")) {
        return device_uint(p, 512, 1 << 21, &d->physical_block_size) &&
               device_pow2(d->physical_block_size);
    } else if (!strcmp(p->key, "bootindex")) {
        if (!opt_uint(p->value[0] == '-' ? p->value + 1 : p->value, 0, 1000000, &v)) {
            return false;
        }
        d->bootindex = p->value[0] == '-' ? -(int)v : (int)v;
        return true;
    }
    *known = false;
    return false;
}

static void vq_item_free(gpointer p)
{
    VqMappingItem *it = p;

    g_free(it->iothread);
    if (it->vqs) {
        g_array_free(it->vqs, TRUE);
    }
    g_free(it);
}

/* Context: any thread */
void vq_mapping_free(GPtrArray *map)
{
    if (map) {
        g_ptr_array_free(map, TRUE);
    }
}

static bool json_is_int(JsonNode *n)
{
    return JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_INT64;
}

static bool json_is_str(JsonNode *n)
{
    return JSON_NODE_HOLDS_VALUE(n) && json_node_get_value_type(n) == G_TYPE_STRING;
}

/* Context: any thread */
GPtrArray *vq_mapping_from_json(JsonNode *n, const char *what, GError **errp)
{
    g_autoptr(GPtrArray) map = NULL;
    JsonArray *a;

    if (!n || !JSON_NODE_HOLDS_ARRAY(n)) {
        g_set_error(errp, VMM_ERROR, EINVAL, "Invalid parameter type for '%s', expected: array",
                    what);
        return NULL;
    }
    a = json_node_get_array(n);
    map = g_ptr_array_new_with_free_func(vq_item_free);
    for (guint i = 0; i < json_array_get_length(a); i++) {
        JsonNode *e = json_array_get_element(a, i);
        VqMappingItem *it;
        JsonObjectIter iter;
        const char *k;
        JsonNode *v;

        if (!JSON_NODE_HOLDS_OBJECT(e)) {
            g_set_error(errp, VMM_ERROR, EINVAL,
                        "Invalid parameter type for '%s[%u]', expected: object", what, i);
            return NULL;
        }
        it = g_new0(VqMappingItem, 1);
        g_ptr_array_add(map, it);
        json_object_iter_init(&iter, json_node_get_object(e));
        while (json_object_iter_next(&iter, &k, &v)) {
            if (!strcmp(k, "iothread")) {
                if (!json_is_str(v)) {
                    g_set_error(errp, VMM_ERROR, EINVAL,
                                "Invalid parameter type for '%s[%u].iothread', expected: string",
                                what, i);
                    return NULL;
                }
                it->iothread = g_strdup(json_node_get_string(v));
            } else if (!strcmp(k, "vqs")) {
                JsonArray *vqs;

                if (!JSON_NODE_HOLDS_ARRAY(v)) {
                    g_set_error(errp, VMM_ERROR, EINVAL,
                                "Invalid parameter type for '%s[%u].vqs', expected: array", what, i);
                    return NULL;
                }
                vqs = json_node_get_array(v);
                it->vqs = g_array_new(FALSE, FALSE, sizeof(guint));
                for (guint j = 0; j < json_array_get_length(vqs); j++) {
                    JsonNode *q = json_array_get_element(vqs, j);
                    gint64 x;
                    guint u;

                    if (!json_is_int(q)) {
                        g_set_error(errp, VMM_ERROR, EINVAL,
                                    "Invalid parameter type for '%s[%u].vqs[%u]', expected: integer",
                                    what, i, j);
                        return NULL;
                    }
                    x = json_node_get_int(q);
                    if (x < 0 || x > UINT16_MAX) {
                        g_set_error(errp, VMM_ERROR, ERANGE,
                                    "Parameter '%s[%u].vqs[%u]' expects uint16_t", what, i, j);
                        return NULL;
                    }
                    u = (guint)x;
                    g_array_append_val(it->vqs, u);
                }
            } else {
                g_set_error(errp, VMM_ERROR, EINVAL, "Parameter '%s[%u].%s' is unexpected", what, i,
                            k);
                return NULL;
            }
        }
        if (!it->iothread) {
            g_set_error(errp, VMM_ERROR, EINVAL, "Parameter '%s[%u].iothread' is missing", what, i);
            return NULL;
        }
    }
    if (map->len == 0) {
        return NULL; /* as QEMU: an empty list is no list */
    }
    return g_steal_pointer(&map);
}

/* Context: any thread */
bool vq_mapping_resolve(const GPtrArray *map, unsigned nq, VqMappingIothreadExists *exists,
                        void *opaque, const char **ids, GError **errp)
{
    const VqMappingItem *first = map && map->len ? map->pdata[0] : NULL;
    g_autofree bool *seen = g_new0(bool, MAX(nq, 1));

    if (!first) {
        g_set_error(errp, VMM_ERROR, EINVAL, "iothread-vq-mapping is empty");
        return false;
    }
    for (guint i = 0; i < map->len; i++) {
        const VqMappingItem *it = map->pdata[i];

        if (!exists(it->iothread, opaque)) {
            g_set_error(errp, VMM_ERROR, ENOENT, "IOThread \"%s\" object does not exist",
                        it->iothread);
            return false;
        }
        for (guint j = 0; j < i; j++) {
            if (!strcmp(((const VqMappingItem *)map->pdata[j])->iothread, it->iothread)) {
                g_set_error(errp, VMM_ERROR, EINVAL,
                            "duplicate IOThread name \"%s\" in iothread-vq-mapping", it->iothread);
                return false;
            }
        }
        if (!it->vqs != !first->vqs) {
            g_set_error(errp, VMM_ERROR, EINVAL,
                        "either all items in iothread-vq-mapping must have vqs or none of them "
                        "must have it");
            return false;
        }
        for (guint j = 0; it->vqs && j < it->vqs->len; j++) {
            guint q = g_array_index(it->vqs, guint, j);

            if (q >= nq) {
                g_set_error(errp, VMM_ERROR, EINVAL,
                            "vq index %u for IOThread \"%s\" must be less than num_queues %u in "
                            "iothread-vq-mapping",
                            q, it->iothread, nq);
                return false;
            }
            if (seen[q]) {
                g_set_error(errp, VMM_ERROR, EINVAL,
                            "cannot assign vq %u to IOThread \"%s\" because it is already assigned",
                            q, it->iothread);
                return false;
            }
            seen[q] = true;
            ids[q] = it->iothread;
        }
    }
    if (first->vqs) {
        for (unsigned q = 0; q < nq; q++) {
            if (!seen[q]) {
                g_set_error(errp, VMM_ERROR, EINVAL,
                            "missing vq %u IOThread assignment in iothread-vq-mapping", q);
                return false;
            }
        }
    } else {
        for (unsigned q = 0; q < nq; q++) {
            ids[q] = ((const VqMappingItem *)map->pdata[q % map->len])->iothread;
        }
    }
    return true;
}

/* The JSON form's members as the key=value form's pairs; iothread-vq-mapping apart. */
static GPtrArray *device_json_pairs(GPtrArray **mapping, const char *name, const char *arg,
                                    GError **errp)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    g_autoptr(GPtrArray) kv = g_ptr_array_new_with_free_func(opt_pair_free);
    GError *err = NULL;
    JsonObjectIter it;
    const char *k;
    JsonNode *root, *v;

    if (!json_parser_load_from_data(parser, arg, -1, &err)) {
        opt_fail(errp, name, arg, "JSON parse error: %s", err->message);
        g_error_free(err);
        return NULL;
    }
    root = json_parser_get_root(parser);
    if (!root || !JSON_NODE_HOLDS_OBJECT(root)) {
        opt_fail(errp, name, arg, "%s", "JSON must be an object");
        return NULL;
    }
    v = json_object_get_member(json_node_get_object(root), "driver");
    if (!v || !json_is_str(v)) {
        opt_fail(errp, name, arg, "%s", "Parameter 'driver' is missing");
        return NULL;
    }
    g_ptr_array_add(kv, opt_pair_new("driver", json_node_get_string(v)));
    json_object_iter_init(&it, json_node_get_object(root));
    while (json_object_iter_next(&it, &k, &v)) {
        char buf[32];

        if (!strcmp(k, "driver")) {
            continue;
        }
        if (!strcmp(k, "iothread-vq-mapping")) {
            vq_mapping_free(*mapping);
            *mapping = vq_mapping_from_json(v, k, &err);
            if (err) {
                opt_fail(errp, name, arg, "%s", err->message);
                g_error_free(err);
                return NULL;
            }
            continue;
        }
        if (json_is_str(v)) {
            g_ptr_array_add(kv, opt_pair_new(k, json_node_get_string(v)));
        } else if (json_is_int(v)) {
            snprintf(buf, sizeof(buf), "%" PRId64, json_node_get_int(v));
            g_ptr_array_add(kv, opt_pair_new(k, buf));
        } else if (JSON_NODE_HOLDS_VALUE(v) && json_node_get_value_type(v) == G_TYPE_BOOLEAN) {
            g_ptr_array_add(kv, opt_pair_new(k, json_node_get_boolean(v) ? "on" : "off"));
        } else {
            opt_fail(errp, name, arg, "Invalid parameter type for '%s', expected: scalar", k);
            return NULL;
        }
    }
    return g_steal_pointer(&kv);
}

/* Context: main thread */
bool opt_device(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    g_autoptr(GPtrArray) mapping = NULL; /* VqMappingItem* */
    g_autoptr(GPtrArray) kv = arg[0] == '{' ? device_json_pairs(&mapping, name, arg, errp)
                                            : opts_split(arg, "driver", errp);
    DeviceOptions *d;
    OptPair *first;

    if (arg[0] == '{' && !kv) {
        return false;
    }
    if (!kv || kv->len == 0) {
        return opt_fail(errp, name, arg, "%s", "bad syntax");
    }
    first = kv->pdata[0];
    if (strcmp(first->key, "driver")) {
        return opt_fail(errp, name, arg, "%s", "the device type must come first");
    }
    if (strcmp(first->value, "virtio-blk-pci") && strcmp(first->value, "virtio-blk")) {
        return opt_fail(errp, name, arg,
                        "device '%s' is not supported (vblk has only "
                        "virtio-blk-pci)",
                        first->value);
    }
    d = device_options_new("virtio-blk-pci");
    d->arg = g_strdup(arg);
    d->vq_mapping = g_steal_pointer(&mapping);
    g_ptr_array_add(o->devices, d);
    for (guint i = 1; i < kv->len; i++) {
        OptPair *p = kv->pdata[i];
        bool known;
        if (!strcmp(p->key, "iothread-vq-mapping")) {
            return opt_fail(errp, name, arg, "%s",
                            "iothread-vq-mapping is a list: use the JSON form, -device "
                            "'{\"driver\":\"virtio-blk-pci\",...,\"iothread-vq-mapping\":[...]}'");
        }
        if (!device_prop(d, p, &known)) {
            return known ? opt_fail(errp, name, arg, "invalid value '%s' for property '%s'",
                                    p->value, p->key)
                         : opt_fail(errp, name, arg, "property 'virtio-blk-pci.%s' not found",
                                    p->key);
        }
    }
    if (!d->drive) {
        return opt_fail(errp, name, arg, "%s", "drive property not set");
    }
    if (d->vq_mapping && d->iothread) {
        return opt_fail(errp, name, arg, "%s",
                        "iothread and iothread-vq-mapping properties cannot be set at the same "
                        "time");
    }
    if (d->physical_block_size < d->logical_block_size) {
        return opt_fail(errp, name, arg, "%s", "physical_block_size must be >= logical_block_size");
    }
    return true;
}

/* One property of -object iothread. */
static bool iothread_prop(IothreadOptions *t, const char *name, const char *arg, const OptPair *p,
                          GError **errp)
{
    int r;

    if (!strcmp(p->key, "id")) {
        g_free(t->id);
        t->id = g_strdup(p->value);
        return true;
    }
    r = iothread_param_set(&t->params, p->key, p->value, errp);
    if (r < 0) {
        return opt_fail(errp, name, arg, "Invalid parameter '%s'", p->key);
    }
    /* r == 0: @errp says what is wrong with the value; opt_fail names the option. */
    return r ? true : opt_fail(errp, name, arg, "Parameter '%s' has an invalid value", p->key);
}

/* Whether an -object (iothread or secret) has the id @id already. */
static bool options_object_id_taken(VmmOptions *o, const char *id)
{
    for (guint i = 0; i < o->iothreads->len; i++) {
        if (!strcmp(((IothreadOptions *)o->iothreads->pdata[i])->id, id)) {
            return true;
        }
    }
    for (guint i = 0; i < o->secrets->len; i++) {
        if (!strcmp(((SecretOptions *)o->secrets->pdata[i])->id, id)) {
            return true;
        }
    }
    return false;
}

/*
 * -object secret: its properties checked here (the secret itself is read
 * and registered when the machine starts: options_register_secrets()).
 */
static bool object_secret(VmmOptions *o, const char *name, GPtrArray *kv, GError **errp)
{
    SecretProps props = {0};
    g_autofree char *safe = NULL; /* the argument without data= in messages */
    SecretOptions *s;

    for (guint i = 1; i < kv->len; i++) {
        const OptPair *p = kv->pdata[i];
        GError *err = NULL;

        if (!secret_props_set(&props, p->key, p->value, &err)) {
            opt_fail(errp, name, "secret", "%s", err->message);
            g_error_free(err);
            return false;
        }
    }
    if (!props.id || !*props.id) {
        return opt_fail(errp, name, "secret", "%s", "id= is required");
    }
    safe = g_strdup_printf("secret,id=%s", props.id);
    if (!props.data == !props.file) {
        return opt_fail(errp, name, safe, "%s", "one of data= or file= is required, not both");
    }
    if (props.format && strcmp(props.format, "raw") && strcmp(props.format, "base64")) {
        return opt_fail(errp, name, safe, "Parameter 'format' does not accept value '%s'",
                        props.format);
    }
    if (options_object_id_taken(o, props.id)) {
        return opt_fail(errp, name, safe, "duplicate ID '%s' for object", props.id);
    }
    s = g_new0(SecretOptions, 1);
    s->id = g_strdup(props.id);
    s->data = g_strdup(props.data);
    s->file = g_strdup(props.file);
    s->format = g_strdup(props.format);
    s->arg = g_strdup_printf("-%s %s", name, safe);
    g_ptr_array_add(o->secrets, s);
    return true;
}

/* Context: main thread */
bool options_register_secrets(const VmmOptions *o, GError **errp)
{
    for (guint i = 0; i < o->secrets->len; i++) {
        const SecretOptions *s = o->secrets->pdata[i];
        SecretProps p = {.id = s->id, .data = s->data, .file = s->file, .format = s->format};

        if (!secret_add(&p, errp)) {
            g_prefix_error(errp, "%s: ", s->arg);
            return false;
        }
    }
    return true;
}

/* Context: main thread */
bool opt_object(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    g_autoptr(GPtrArray) kv = opts_split(arg, "qom-type", errp);
    IothreadOptions *t;

    if (!kv || kv->len == 0 || strcmp(((OptPair *)kv->pdata[0])->key, "qom-type")) {
        return opt_fail(errp, name, arg, "%s", "the object type must come first");
    }
    if (!strcmp(((OptPair *)kv->pdata[0])->value, "secret")) {
        return object_secret(o, name, kv, errp);
    }
    if (strcmp(((OptPair *)kv->pdata[0])->value, "iothread")) {
        return opt_fail(errp, name, arg,
                        "object type '%s' is not supported (only iothread and secret)",
                        ((OptPair *)kv->pdata[0])->value);
    }
    t = g_new0(IothreadOptions, 1);
    iothread_params_init(&t->params);
    g_ptr_array_add(o->iothreads, t);
    for (guint i = 1; i < kv->len; i++) {
        if (!iothread_prop(t, name, arg, kv->pdata[i], errp)) {
            return false;
        }
    }
    if (!t->id) {
        return opt_fail(errp, name, arg, "%s", "id= is required");
    }
    for (guint i = 0; i + 1 < o->iothreads->len; i++) {
        if (!strcmp(((IothreadOptions *)o->iothreads->pdata[i])->id, t->id)) {
            return opt_fail(errp, name, arg, "duplicate ID '%s' for object", t->id);
        }
    }
    for (guint i = 0; i < o->secrets->len; i++) {
        if (!strcmp(((SecretOptions *)o->secrets->pdata[i])->id, t->id)) {
            return opt_fail(errp, name, arg, "duplicate ID '%s' for object", t->id);
        }
    }
    return true;
}

static DriveOptions *options_find_drive(VmmOptions *o, const char *id)
{
    for (guint i = 0; i < o->drives->len; i++) {
        DriveOptions *d = o->drives->pdata[i];
        if (!strcmp(d->id, id)) {
            return d;
        }
    }
    return NULL;
}

static bool options_has_iothread(VmmOptions *o, const char *id)
{
    for (guint i = 0; i < o->iothreads->len; i++) {
        if (!strcmp(((IothreadOptions *)o->iothreads->pdata[i])->id, id)) {
            return true;
        }
    }
    return false;
}

static bool options_iothread_exists(const char *id, void *opaque)
{
    return options_has_iothread(opaque, id);
}

static bool options_check_drive_ids(VmmOptions *o, GError **errp)
{
    for (guint i = 0; i < o->drives->len; i++) {
        for (guint j = 0; j < i; j++) {
            if (!strcmp(((DriveOptions *)o->drives->pdata[i])->id,
                        ((DriveOptions *)o->drives->pdata[j])->id)) {
                return opt_fail(errp, "drive", NULL, "duplicate ID '%s' for drive",
                                ((DriveOptions *)o->drives->pdata[i])->id);
            }
        }
    }
    return true;
}

static bool options_check_device(VmmOptions *o, DeviceOptions *d, guint index, GError **errp)
{
    DriveOptions *drive = options_find_drive(o, d->drive);

    if (!drive) {
        return opt_fail(errp, "device", NULL,
                        "property 'virtio-blk-pci.drive' can't find value '%s'", d->drive);
    }
    if (drive->used) {
        return opt_fail(errp, "device", NULL, "drive '%s' is already in use by another device",
                        d->drive);
    }
    drive->used = true;
    if (d->iothread && !options_has_iothread(o, d->iothread)) {
        return opt_fail(errp, "device", NULL,
                        "iothread '%s' not found (add -object iothread,"
                        "id=%s)",
                        d->iothread, d->iothread);
    }
    if (d->vq_mapping) {
        unsigned nq = d->num_queues ? d->num_queues : MIN(MAX(o->smp, 1), VIRTIO_BLK_MAX_QUEUES);
        g_autofree const char **ids = g_new0(const char *, nq);
        GError *err = NULL;

        if (!vq_mapping_resolve(d->vq_mapping, nq, options_iothread_exists, o, ids, &err)) {
            opt_fail(errp, "device", d->arg, "%s", err->message);
            g_error_free(err);
            return false;
        }
    }
    for (guint j = 0; j < index; j++) {
        DeviceOptions *e = o->devices->pdata[j];
        if (d->slot >= 0 && e->slot == d->slot) {
            return opt_fail(errp, "device", NULL, "PCI slot 0x%x is already in use", d->slot);
        }
        if (d->id && e->id && !strcmp(d->id, e->id)) {
            return opt_fail(errp, "device", NULL, "duplicate ID '%s' for device", d->id);
        }
    }
    return true;
}

/* Context: main thread */
bool options_check_devices(VmmOptions *o, GError **errp)
{
    if (!options_check_drive_ids(o, errp)) {
        return false;
    }
    for (guint i = 0; i < o->devices->len; i++) {
        if (!options_check_device(o, o->devices->pdata[i], i, errp)) {
            return false;
        }
    }
    return true;
}
