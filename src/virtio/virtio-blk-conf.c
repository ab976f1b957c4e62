/*
 * virtio-blk configuration: defaults, QEMU-named properties, validation,
 * feature bits, config space and feature negotiation.
 */
#include <endian.h>
#include <stddef.h>
#include <string.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "util/barrier.h"
#include "virtio-blk-int.h"

/* QEMU's BDRV_REQUEST_MAX_SECTORS: INT_MAX bytes in sectors. */
#define VIRTIO_BLK_MAX_RANGE_SECTORS (INT32_MAX >> 9)

/* Context: any thread */
void virtio_blk_conf_init(VirtIOBlkConf *conf, uint64_t capacity_sectors)
{
    memset(conf, 0, sizeof(*conf));
    conf->capacity = capacity_sectors;
    conf->logical_block_size = 512;
    conf->physical_block_size = 512;
    conf->seg_max_adjust = true;
    conf->num_queues = 1;
    conf->queue_size = 256;
    conf->config_wce = true;
    conf->writeback = true;
    conf->discard = true;
    conf->max_discard_sectors = VIRTIO_BLK_MAX_RANGE_SECTORS;
    conf->write_zeroes = true;
    conf->max_write_zeroes_sectors = VIRTIO_BLK_MAX_RANGE_SECTORS;
    conf->write_zeroes_may_unmap = true;
    conf->indirect_desc = true;
    conf->event_idx = true;
}

static bool parse_bool(const char *name, const char *v, bool *out, GError **errp)
{
    static const char *const yes[] = {"on", "true", "yes", "1"};
    static const char *const no[] = {"off", "false", "no", "0"};

    for (size_t i = 0; i < G_N_ELEMENTS(yes); i++) {
        if (!g_ascii_strcasecmp(v, yes[i]) || !g_ascii_strcasecmp(v, no[i])) {
            *out = !g_ascii_strcasecmp(v, yes[i]);
            return true;
        }
    }
    g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                "Parameter '%s' expects 'on' or 'off', got '%s'", name, v);
    return false;
}

static bool parse_uint(const char *name, const char *v, uint64_t max, uint64_t *out, GError **errp)
{
    GError *err = NULL;

    bool hex = v[0] == '0' && (v[1] == 'x' || v[1] == 'X');

    if (!g_ascii_string_to_unsigned(hex ? v + 2 : v, hex ? 16 : 10, 0, max, out, &err)) {
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                    "Parameter '%s' expects an integer in 0..%" PRIu64 ": %s", name, max,
                    err->message);
        g_error_free(err);
        return false;
    }
    return true;
}

typedef enum { PROP_BOOL, PROP_U16, PROP_U32, PROP_U64 } PropKind;

typedef struct BlkProp {
    const char *name;
    PropKind kind;
    size_t offset;
} BlkProp;

#define PROP(n, k, f)                                                                              \
    {                                                                                              \
        n, k, offsetof(VirtIOBlkConf, f)                                                           \
    }

static const BlkProp blk_props[] = {
    PROP("config-wce", PROP_BOOL, config_wce),
    PROP("discard", PROP_BOOL, discard),
    PROP("write-zeroes", PROP_BOOL, write_zeroes),
    PROP("num-queues", PROP_U16, num_queues),
    PROP("queue-size", PROP_U16, queue_size),
    PROP("seg-max-adjust", PROP_BOOL, seg_max_adjust),
    PROP("logical_block_size", PROP_U32, logical_block_size),
    PROP("physical_block_size", PROP_U32, physical_block_size),
    PROP("max-discard-sectors", PROP_U32, max_discard_sectors),
    PROP("max-write-zeroes-sectors", PROP_U32, max_write_zeroes_sectors),
    PROP("indirect_desc", PROP_BOOL, indirect_desc),
    PROP("event_idx", PROP_BOOL, event_idx),
    /* vblk extensions (QEMU takes these from the block backend) */
    PROP("readonly", PROP_BOOL, readonly),
    PROP("writeback", PROP_BOOL, writeback),
    PROP("size-max", PROP_U32, size_max),
    PROP("seg-max", PROP_U32, seg_max),
    PROP("capacity", PROP_U64, capacity),
};

static bool set_prop(VirtIOBlkConf *conf, const BlkProp *p, const char *value, GError **errp)
{
    uint8_t *field = (uint8_t *)conf + p->offset;
    static const uint64_t max[] = {
        [PROP_U16] = UINT16_MAX, [PROP_U32] = UINT32_MAX, [PROP_U64] = UINT64_MAX};
    uint64_t v;
    bool b;

    if (p->kind == PROP_BOOL) {
        if (!parse_bool(p->name, value, &b, errp)) {
            return false;
        }
        memcpy(field, &b, sizeof(b));
        return true;
    }
    if (!parse_uint(p->name, value, max[p->kind], &v, errp)) {
        return false;
    }
    if (p->kind == PROP_U16) {
        uint16_t v16 = v;
        memcpy(field, &v16, sizeof(v16));
    } else if (p->kind == PROP_U32) {
        uint32_t v32 = v;
        memcpy(field, &v32, sizeof(v32));
    } else {
        memcpy(field, &v, sizeof(v));
    }
    return true;
}

/* Context: main loop (control path) */
bool virtio_blk_conf_set_property(VirtIOBlkConf *conf, const char *name, const char *value,
                                  GError **errp)
{
    if (!strcmp(name, "serial")) {
        if (strlen(value) > VIRTIO_BLK_ID_BYTES) {
            g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                        "Parameter 'serial' is longer than %d bytes", VIRTIO_BLK_ID_BYTES);
            return false;
        }
        memset(conf->serial, 0, sizeof(conf->serial));
        memcpy(conf->serial, value, strlen(value));
        return true;
    }
    for (size_t i = 0; i < G_N_ELEMENTS(blk_props); i++) {
        if (!strcmp(name, blk_props[i].name)) {
            return set_prop(conf, &blk_props[i], value, errp);
        }
    }
    g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_NOT_FOUND,
                "Property 'virtio-blk-pci.%s' not found", name);
    return false;
}

static bool is_pow2(uint64_t v)
{
    return v && !(v & (v - 1));
}

/* Context: any thread */
uint32_t virtio_blk_conf_seg_max(const VirtIOBlkConf *conf)
{
    if (conf->seg_max) {
        return conf->seg_max;
    }
    /* QEMU: queue_size - 2 with seg-max-adjust, else the legacy 128 - 2. */
    return conf->seg_max_adjust ? conf->queue_size - 2u : 126u;
}

#define INVALID(...)                                                                               \
    do {                                                                                           \
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID, __VA_ARGS__);                        \
        return false;                                                                              \
    } while (0)

static bool conf_validate_ranges(const VirtIOBlkConf *conf, GError **errp)
{
    if (conf->discard && (conf->max_discard_sectors == 0 ||
                          conf->max_discard_sectors > VIRTIO_BLK_MAX_RANGE_SECTORS)) {
        INVALID("max-discard-sectors must be in 1..%d", VIRTIO_BLK_MAX_RANGE_SECTORS);
    }
    if (conf->write_zeroes && (conf->max_write_zeroes_sectors == 0 ||
                               conf->max_write_zeroes_sectors > VIRTIO_BLK_MAX_RANGE_SECTORS)) {
        INVALID("max-write-zeroes-sectors must be in 1..%d", VIRTIO_BLK_MAX_RANGE_SECTORS);
    }
    if (conf->size_max && conf->size_max < conf->logical_block_size) {
        INVALID("size-max %u is smaller than the logical block size", conf->size_max);
    }
    if (strnlen(conf->serial, sizeof(conf->serial)) > VIRTIO_BLK_ID_BYTES) {
        INVALID("serial is longer than %d bytes", VIRTIO_BLK_ID_BYTES);
    }
    return true;
}

/* Context: main loop */
bool virtio_blk_conf_validate(const VirtIOBlkConf *conf, GError **errp)
{
    uint32_t seg_max = virtio_blk_conf_seg_max(conf);

    if (!is_pow2(conf->queue_size) || conf->queue_size <= 2 ||
        conf->queue_size > VIRTIO_BLK_MAX_QUEUE_SIZE) {
        INVALID("queue-size property must be a power of 2 in 4..%d, got %u",
                VIRTIO_BLK_MAX_QUEUE_SIZE, conf->queue_size);
    }
    if (conf->num_queues == 0 || conf->num_queues > VIRTIO_BLK_MAX_QUEUES) {
        INVALID("num-queues property must be in 1..%d, got %u", VIRTIO_BLK_MAX_QUEUES,
                conf->num_queues);
    }
    if (seg_max == 0 || seg_max > conf->queue_size - 2u) {
        INVALID("seg-max %u must be in 1..queue-size - 2 (%u)", seg_max, conf->queue_size - 2u);
    }
    if (!is_pow2(conf->logical_block_size) || conf->logical_block_size < 512 ||
        conf->logical_block_size > (1u << 20)) {
        INVALID("logical_block_size must be a power of 2 in 512..1M, got %u",
                conf->logical_block_size);
    }
    if (!is_pow2(conf->physical_block_size) ||
        conf->physical_block_size < conf->logical_block_size ||
        conf->physical_block_size > (1u << 20)) {
        INVALID("physical_block_size must be a power of 2 in logical_block_size..1M, got %u",
                conf->physical_block_size);
    }
    if (conf->capacity > UINT64_MAX / VIRTIO_BLK_SECTOR_SIZE) {
        INVALID("capacity of %" PRIu64 " sectors overflows a byte offset", conf->capacity);
    }
    return conf_validate_ranges(conf, errp);
}

#define BIT(n) (1ull << (n))

/* Context: any thread */
uint64_t virtio_blk_host_features(const VirtIOBlkConf *conf)
{
    uint64_t f = BIT(VIRTIO_F_VERSION_1) | BIT(VIRTIO_BLK_F_SEG_MAX) | BIT(VIRTIO_BLK_F_BLK_SIZE) |
                 BIT(VIRTIO_BLK_F_FLUSH) | BIT(VIRTIO_BLK_F_TOPOLOGY);

    f |= conf->size_max ? BIT(VIRTIO_BLK_F_SIZE_MAX) : 0;
    f |= conf->config_wce ? BIT(VIRTIO_BLK_F_CONFIG_WCE) : 0;
    f |= conf->num_queues > 1 ? BIT(VIRTIO_BLK_F_MQ) : 0;
    f |= conf->readonly ? BIT(VIRTIO_BLK_F_RO) : 0;
    /* Discard and write-zeroes modify the disk: not offered read-only. */
    f |= conf->discard && !conf->readonly ? BIT(VIRTIO_BLK_F_DISCARD) : 0;
    f |= conf->write_zeroes && !conf->readonly ? BIT(VIRTIO_BLK_F_WRITE_ZEROES) : 0;
    f |= conf->indirect_desc ? BIT(VIRTIO_RING_F_INDIRECT_DESC) : 0;
    f |= conf->event_idx ? BIT(VIRTIO_RING_F_EVENT_IDX) : 0;
    return f;
}

/* Context: main loop */
VirtIOBlk *virtio_blk_new(const VirtIOBlkConf *conf, GError **errp)
{
    VirtIOBlk *blk;

    if (!virtio_blk_conf_validate(conf, errp)) {
        return NULL;
    }
    blk = g_new0(VirtIOBlk, 1);
    blk->conf = *conf;
    blk->host_features = virtio_blk_host_features(conf);
    memcpy(blk->id, conf->serial, strnlen(conf->serial, VIRTIO_BLK_ID_BYTES));
    virtio_blk_reset(blk);
    return blk;
}

/* Context: main loop; no queue may still exist */
void virtio_blk_free(VirtIOBlk *blk)
{
    g_free(blk);
}

/* Context: any thread */
uint64_t virtio_blk_get_host_features(const VirtIOBlk *blk)
{
    return blk->host_features;
}

/* Context: main loop */
bool virtio_blk_set_features(VirtIOBlk *blk, uint64_t driver_features, GError **errp)
{
    if (driver_features & ~blk->host_features) {
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                    "driver accepted features 0x%" PRIx64 " the device did not offer",
                    driver_features & ~blk->host_features);
        return false;
    }
    if (!(driver_features & BIT(VIRTIO_F_VERSION_1))) {
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_NOT_SUPPORTED,
                    "driver did not accept VIRTIO_F_VERSION_1 (legacy is not supported)");
        return false;
    }
    blk->features = driver_features;
    /*
     * Without CONFIG_WCE the cache mode follows FLUSH: a driver that cannot
     * flush gets writethrough (QEMU's virtio_blk_set_features rule).
     */
    if (!(driver_features & BIT(VIRTIO_BLK_F_CONFIG_WCE))) {
        qatomic_set(&blk->writeback, !!(driver_features & BIT(VIRTIO_BLK_F_FLUSH)));
    }
    return true;
}

/* Context: any thread (stable while queues run) */
uint64_t virtio_blk_get_features(const VirtIOBlk *blk)
{
    return blk->features;
}

/* Context: main loop, no queue running */
void virtio_blk_reset(VirtIOBlk *blk)
{
    blk->features = 0;
    qatomic_set(&blk->writeback, blk->conf.writeback);
}

/* Context: any thread */
bool virtio_blk_get_writeback(const VirtIOBlk *blk)
{
    return qatomic_read(&blk->writeback);
}

/* Context: main loop (block_resize); queue threads read it atomically */
void virtio_blk_set_capacity(VirtIOBlk *blk, uint64_t sectors)
{
    __atomic_store_n(&blk->conf.capacity, sectors, __ATOMIC_RELAXED);
}

/* Context: any thread */
void virtio_blk_get_config(const VirtIOBlk *blk, struct virtio_blk_config *cfg)
{
    const VirtIOBlkConf *c = &blk->conf;
    uint32_t lbs = c->logical_block_size;

    memset(cfg, 0, sizeof(*cfg));
    cfg->capacity = htole64(__atomic_load_n(&c->capacity, __ATOMIC_RELAXED));
    cfg->size_max = htole32(c->size_max);
    cfg->seg_max = htole32(virtio_blk_conf_seg_max(c));
    cfg->blk_size = htole32(lbs);
    cfg->physical_block_exp = __builtin_ctz(c->physical_block_size / lbs);
    cfg->wce = virtio_blk_get_writeback(blk);
    cfg->num_queues = htole16(c->num_queues);
    if (c->discard) {
        cfg->max_discard_sectors = htole32(c->max_discard_sectors);
        cfg->max_discard_seg = htole32(1);
        cfg->discard_sector_alignment =
            htole32(c->discard_sector_alignment ? c->discard_sector_alignment : lbs / 512);
    }
    if (c->write_zeroes) {
        cfg->max_write_zeroes_sectors = htole32(c->max_write_zeroes_sectors);
        cfg->max_write_zeroes_seg = htole32(1);
        cfg->write_zeroes_may_unmap = c->write_zeroes_may_unmap;
    }
}

/* Context: vCPU / main loop */
void virtio_blk_config_write(VirtIOBlk *blk, uint32_t offset, const void *data, uint32_t len)
{
    const uint32_t wce = offsetof(struct virtio_blk_config, wce);

    if (!(blk->features & BIT(VIRTIO_BLK_F_CONFIG_WCE))) {
        return;
    }
    /* Overflow-safe "offset <= wce < offset + len". */
    if (offset > wce || len == 0 || wce - offset >= len) {
        return;
    }
    qatomic_set(&blk->writeback, ((const uint8_t *)data)[wce - offset] != 0);
}
