/*
 * The QOM properties of a virtio-blk-pci device as QEMU 7.2 lists them
 * (qom-list /machine/peripheral/<id>): names and types, values for the ones
 * vblk implements, QEMU's defaults for the others, and QEMU's refusal of a
 * change after the device is realized. The table was taken from QEMU 7.2 by
 * running it (docs/qmp.md, "qom-list of a virtio-blk-pci device").
 *
 * Context: main thread, BQL held (QMP runs from the main loop).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <string.h>

#include "monitor/qmp.h"
#include "virtio-blk-pci-int.h"
#include "util/error-report.h"

typedef enum {
    P_READONLY, /* no setter: qom-set says "not writable" */
    P_PROXY,    /* a property of the PCI proxy: refused after realize */
    P_BACKEND,  /* an alias of the virtio-blk-device's: refused after realize, anonymous */
    P_LINK,     /* the iothread link of the virtio-blk-device */
    P_DRIVE,    /* drive: QEMU looks the new value up as a node */
    P_REALIZED, /* realized: true is a no-op */
    P_BOOTINDEX,
} PropKind;

typedef struct BlkPciProp {
    const char *name;
    const char *type;
    PropKind kind;
    const char *qemu_default; /* JSON, QEMU 7.2's value for one 64 MiB -drive on pc */
} BlkPciProp;

/* In QEMU 7.2's qom-list order (children apart, below). */
static const BlkPciProp props[] = {
    {"parent_bus", "link<bus>", P_READONLY, "\"/machine/i440fx/pci.0\""},
    {"realized", "bool", P_REALIZED, "true"},
    {"hotplugged", "bool", P_READONLY, "false"},
    {"hotpluggable", "bool", P_READONLY, "true"},
    {"failover_pair_id", "str", P_PROXY, "\"\""},
    {"romfile", "str", P_PROXY, "\"\""},
    {"addr", "int32", P_PROXY, "-1"},
    {"romsize", "uint32", P_PROXY, "4294967295"},
    {"x-pcie-lnksta-dllla", "bool", P_PROXY, "true"},
    {"rombar", "uint32", P_PROXY, "1"},
    {"x-pcie-extcap-init", "bool", P_PROXY, "true"},
    {"acpi-index", "uint32", P_PROXY, "0"},
    {"multifunction", "bool", P_PROXY, "false"},
    {"legacy-addr", "str", P_READONLY, "\"\""},
    {"migrate-extra", "bool", P_PROXY, "true"},
    {"ats", "bool", P_PROXY, "false"},
    {"x-ignore-backend-features", "bool", P_PROXY, "false"},
    {"x-pcie-pm-init", "bool", P_PROXY, "true"},
    {"aer", "bool", P_PROXY, "false"},
    {"x-pcie-flr-init", "bool", P_PROXY, "true"},
    {"x-pcie-lnkctl-init", "bool", P_PROXY, "true"},
    {"x-ats-page-aligned", "bool", P_PROXY, "true"},
    {"page-per-vq", "bool", P_PROXY, "false"},
    {"x-pcie-deverr-init", "bool", P_PROXY, "true"},
    {"virtio-pci-bus-master-bug-migration", "bool", P_PROXY, "false"},
    {"modern-pio-notify", "bool", P_PROXY, "false"},
    {"x-disable-pcie", "bool", P_PROXY, "false"},
    {"vectors", "uint32", P_PROXY, NULL},
    {"ioeventfd", "bool", P_PROXY, "true"},
    {"class", "uint32", P_PROXY, "0"},
    {"disable-legacy", "OnOffAuto", P_PROXY, "\"off\""},
    {"disable-modern", "bool", P_PROXY, "false"},
    {"notify_on_empty", "bool", P_BACKEND, "true"},
    {"share-rw", "bool", P_BACKEND, "false"},
    {"lcyls", "uint32", P_BACKEND, "0"},
    {"queue-size", "uint16", P_BACKEND, NULL},
    {"lsecs", "uint32", P_BACKEND, "0"},
    {"heads", "uint32", P_BACKEND, "16"},
    {"account-invalid", "OnOffAuto", P_BACKEND, "\"auto\""},
    {"iothread", "link<iothread>", P_LINK, NULL},
    {"lheads", "uint32", P_BACKEND, "0"},
    {"num-queues", "uint16", P_BACKEND, NULL},
    {"cyls", "uint32", P_BACKEND, "130"},
    {"secs", "uint32", P_BACKEND, "63"},
    {"min_io_size", "size", P_BACKEND, "0"},
    {"bootindex", "int32", P_BOOTINDEX, NULL},
    {"config-wce", "bool", P_BACKEND, NULL},
    {"seg-max-adjust", "bool", P_BACKEND, NULL},
    {"drive", "str", P_DRIVE, NULL},
    {"werror", "BlockdevOnError", P_BACKEND, "\"auto\""},
    {"report-discard-granularity", "bool", P_BACKEND, "true"},
    {"rerror", "BlockdevOnError", P_BACKEND, "\"auto\""},
    {"write-cache", "OnOffAuto", P_BACKEND, NULL},
    {"use-disabled-flag", "bool", P_BACKEND, "true"},
    {"x-disable-legacy-check", "bool", P_BACKEND, "false"},
    {"use-started", "bool", P_BACKEND, "true"},
    {"iommu_platform", "bool", P_BACKEND, "false"},
    {"physical_block_size", "size", P_BACKEND, NULL},
    {"scsi", "bool", P_BACKEND, "false"},
    {"any_layout", "bool", P_BACKEND, "true"},
    {"opt_io_size", "size", P_BACKEND, "0"},
    {"logical_block_size", "size", P_BACKEND, NULL},
    {"max-discard-sectors", "uint32", P_BACKEND, NULL},
    {"discard", "bool", P_BACKEND, NULL},
    {"discard_granularity", "size", P_BACKEND, "4294967295"},
    {"request-merging", "bool", P_BACKEND, "true"},
    {"queue_reset", "bool", P_BACKEND, "true"},
    {"write-zeroes", "bool", P_BACKEND, NULL},
    {"max-write-zeroes-sectors", "uint32", P_BACKEND, NULL},
    {"packed", "bool", P_BACKEND, "false"},
    {"account-failed", "OnOffAuto", P_BACKEND, "\"auto\""},
    {"indirect_desc", "bool", P_BACKEND, NULL},
    {"event_idx", "bool", P_BACKEND, NULL},
    {"x-enable-wce-if-config-wce", "bool", P_BACKEND, "true"},
    {"backend_defaults", "OnOffAuto", P_BACKEND, "\"auto\""},
    {"serial", "str", P_BACKEND, NULL},
};

/* QEMU's child objects of the proxy: the device, its bus, the BARs' memory regions. */
static const char *const children[][2] = {
    {"msix-pba[0]", "memory-region"},
    {"bus master container[0]", "memory-region"},
    {"virtio-backend", "virtio-blk-device"},
    {"virtio-pci-notify-virtio-blk[0]", "memory-region"},
    {"msix-table[0]", "memory-region"},
    {"virtio-pci-isr-virtio-blk[0]", "memory-region"},
    {"virtio-pci-common-virtio-blk[0]", "memory-region"},
    {"virtio-pci-device-virtio-blk[0]", "memory-region"},
    {"bus master[0]", "memory-region"},
    {"virtio-bus", "virtio-pci-bus"},
    {"virtio-blk-pci-msix[0]", "memory-region"},
    {"virtio-pci[0]", "memory-region"},
    {"virtio-pci-notify-pio-virtio-blk[0]", "memory-region"},
    {"virtio-pci[1]", "memory-region"},
};

static const BlkPciProp *find(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(props); i++) {
        if (!strcmp(props[i].name, name)) {
            return &props[i];
        }
    }
    return NULL;
}

static JsonNode *int_node(int64_t v)
{
    JsonNode *n = json_node_new(JSON_NODE_VALUE);

    json_node_set_int(n, v);
    return n;
}

static JsonNode *bool_node(bool v)
{
    JsonNode *n = json_node_new(JSON_NODE_VALUE);

    json_node_set_boolean(n, v);
    return n;
}

static JsonNode *str_node(const char *v)
{
    JsonNode *n = json_node_new(JSON_NODE_VALUE);

    json_node_set_string(n, v);
    return n;
}

/* The value of a property vblk implements, or NULL for QEMU's default. */
static JsonNode *real_value(VirtIOBlkPCI *s, const char *name)
{
    const VirtIOBlkConf *c = &s->conf;

    if (!strcmp(name, "num-queues")) {
        return int_node(c->num_queues);
    } else if (!strcmp(name, "queue-size")) {
        return int_node(c->queue_size);
    } else if (!strcmp(name, "vectors")) {
        return int_node(c->num_queues + 1); /* one per queue and the config vector */
    } else if (!strcmp(name, "logical_block_size")) {
        return int_node(c->logical_block_size);
    } else if (!strcmp(name, "physical_block_size")) {
        return int_node(c->physical_block_size);
    } else if (!strcmp(name, "max-discard-sectors")) {
        return int_node(c->max_discard_sectors);
    } else if (!strcmp(name, "max-write-zeroes-sectors")) {
        return int_node(c->max_write_zeroes_sectors);
    } else if (!strcmp(name, "config-wce")) {
        return bool_node(c->config_wce);
    } else if (!strcmp(name, "seg-max-adjust")) {
        return bool_node(c->seg_max_adjust);
    } else if (!strcmp(name, "discard")) {
        return bool_node(c->discard);
    } else if (!strcmp(name, "write-zeroes")) {
        return bool_node(c->write_zeroes);
    } else if (!strcmp(name, "indirect_desc")) {
        return bool_node(c->indirect_desc);
    } else if (!strcmp(name, "event_idx")) {
        return bool_node(c->event_idx);
    } else if (!strcmp(name, "serial")) {
        return str_node(c->serial);
    } else if (!strcmp(name, "drive")) {
        return str_node(s->drive_id);
    } else if (!strcmp(name, "write-cache")) {
        return str_node(s->write_cache < 0 ? "auto" : s->write_cache ? "on" : "off");
    } else if (!strcmp(name, "addr") && s->slot >= 0) {
        return int_node((int64_t)s->slot << 3); /* devfn, function 0 */
    } else if (!strcmp(name, "legacy-addr") && s->slot >= 0) {
        g_autofree char *a = g_strdup_printf("%02x.0", s->slot);

        return str_node(a);
    } else if (!strcmp(name, "bootindex")) {
        return int_node(s->bootindex);
    } else if (!strcmp(name, "modern-pio-notify")) {
        return bool_node(s->pio_notify);
    } else if (!strcmp(name, "cyls") && s->backend) {
        /*
         * QEMU's guess for a disk without a partition table: 16 heads, 63
         * sectors, the cylinders the size holds (2..16383).  vblk reads no
         * MBR, and follows a block_resize (QEMU keeps the value it realized with).
         */
        int64_t len = blk_getlength(s->backend);

        return int_node(len < 0 ? 130 : CLAMP(len / 512 / (16 * 63), 2, 16383));
    } else if (!strcmp(name, "iothread")) {
        g_autofree char *path =
            s->iothread_id ? g_strdup_printf("/objects/%s", s->iothread_id) : g_strdup("");

        return str_node(path);
    }
    return NULL;
}

static JsonNode *prop_get(const char *path, const char *name, void *opaque, GError **errp)
{
    const BlkPciProp *p = find(name);
    JsonNode *n = real_value(opaque, name);

    if (!n) {
        n = json_from_string(p->qemu_default, NULL);
    }
    return n;
}

static bool prop_set(const char *path, const char *name, JsonNode *value, QmpRequest *req,
                     void *opaque, GError **errp)
{
    VirtIOBlkPCI *s = opaque;
    const BlkPciProp *p = find(name);

    switch (p->kind) {
    case P_REALIZED:
        if (json_node_get_boolean(value)) {
            return true; /* already realized: nothing to do, as QEMU */
        }
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Device '%s' cannot be unrealized: vblk has no hot-unplug", s->id);
        return false;
    case P_BOOTINDEX:
        s->bootindex = (int)json_node_get_int(value);
        return true;
    case P_DRIVE:
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Cannot find device='' nor node-name='%s'",
                    json_node_get_string(value));
        return false;
    case P_LINK:
        /* QEMU 7.2 prints the anonymous backend's NULL id this way. */
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Attempt to set link property '%s' on device '(null)' (type "
                    "'virtio-blk-device') after it was realized",
                    name);
        return false;
    case P_BACKEND:
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Attempt to set property '%s' on anonymous device (type 'virtio-blk-device') "
                    "after it was realized",
                    name);
        return false;
    default:
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Attempt to set property '%s' on device '%s' (type 'virtio-blk-pci') after it "
                    "was realized",
                    name, s->id);
        return false;
    }
}

/* Context: main thread */
void blk_pci_qom_add_props(VirtIOBlkPCI *s, const char *path)
{
    GError *err = NULL;

    for (size_t i = 0; i < G_N_ELEMENTS(props) && !err; i++) {
        qom_add_property(path, props[i].name, props[i].type, prop_get,
                         props[i].kind == P_READONLY ? NULL : prop_set, s, &err);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(children) && !err; i++) {
        g_autofree char *child = g_strdup_printf("%s/%s", path, children[i][0]);

        qom_add_object(child, children[i][1], &err);
    }
    if (err) {
        error_report_id(s->id, "QOM: %s", err->message);
        g_error_free(err);
    }
}
