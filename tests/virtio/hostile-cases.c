/*
 * The hostile-driver cases: malformed rings and requests, each a builder that
 * publishes the case's chains on the fixture's queue and the exact outcome the
 * device must give. See hostile-cases.h.
 */
#include <string.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "hostile-cases.h"

#define NEXT VRING_DESC_F_NEXT
#define WR   VRING_DESC_F_WRITE
#define IND  VRING_DESC_F_INDIRECT
#define QS   HOSTILE_QUEUE_SIZE

/* ---- builders ---- */

static uint64_t hdr(HostileFix *c, uint32_t type, uint64_t sector)
{
    struct virtio_blk_outhdr h = {.type = htole32(type), .sector = htole64(sector)};
    uint64_t gpa = testdrv_alloc(c->drv, 16, 16);

    testdrv_memwrite(c->drv, gpa, &h, 16);
    return gpa;
}

static uint64_t status(HostileFix *c)
{
    c->status_gpa = testdrv_alloc(c->drv, 1, 1);
    testdrv_memset(c->drv, c->status_gpa, 0xff, 1);
    return c->status_gpa;
}

static uint64_t buf(HostileFix *c, uint32_t len)
{
    return testdrv_alloc(c->drv, len, 512);
}

static void desc(HostileFix *c, unsigned i, uint64_t addr, uint32_t len, uint16_t flags,
                 uint16_t next)
{
    testvq_set_desc(c->tvq, i, addr, len, flags, next);
}

static void table(HostileFix *c, uint64_t t, unsigned i, uint64_t addr, uint32_t len,
                  uint16_t flags, uint16_t next)
{
    testdrv_write_table(c->drv, t, i, addr, len, flags, next);
}

static int publish(HostileFix *c, uint16_t head)
{
    testvq_publish(c->tvq, head);
    return head;
}

/* Standard 3-descriptor request at descriptors 0,1,2 with a data buffer. */
static int req3(HostileFix *c, uint32_t type, uint64_t sector, uint32_t len, bool dev_writes)
{
    desc(c, 0, hdr(c, type, sector), 16, NEXT, 1);
    desc(c, 1, buf(c, len), len, NEXT | (dev_writes ? WR : 0), 2);
    desc(c, 2, status(c), 1, WR, 0);
    return publish(c, 0);
}

/* Header + status only. */
static int req2(HostileFix *c, uint32_t type, uint64_t sector)
{
    desc(c, 0, hdr(c, type, sector), 16, NEXT, 1);
    desc(c, 1, status(c), 1, WR, 0);
    return publish(c, 0);
}

/* DISCARD / WRITE_ZEROES with @nseg segment bytes. */
static int dwz(HostileFix *c, uint32_t type, uint64_t sector, uint32_t n, uint32_t flags,
               uint32_t bytes)
{
    struct virtio_blk_discard_write_zeroes seg[2] = {
        {.sector = htole64(sector), .num_sectors = htole32(n), .flags = htole32(flags)},
        {.sector = htole64(sector), .num_sectors = htole32(n), .flags = htole32(flags)}};
    uint64_t s = buf(c, sizeof(seg));

    testdrv_memwrite(c->drv, s, seg, sizeof(seg));
    desc(c, 0, hdr(c, type, 0), 16, NEXT, 1);
    desc(c, 1, s, bytes, NEXT, 2);
    desc(c, 2, status(c), 1, WR, 0);
    return publish(c, 0);
}

/* ---- ring protocol violations: queue broken ---- */

static int avail_jump(HostileFix *c)
{
    req2(c, VIRTIO_BLK_T_FLUSH, 0);
    testvq_set_avail_idx(c->tvq, QS + 1);
    return -1;
}

static int avail_jump_huge(HostileFix *c)
{
    req2(c, VIRTIO_BLK_T_FLUSH, 0);
    testvq_set_avail_idx(c->tvq, 0x8000);
    return -1;
}

static int head_eq_num(HostileFix *c)
{
    return publish(c, QS);
}

static int head_ffff(HostileFix *c)
{
    return publish(c, 0xffff);
}

static int next_oob(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, NEXT, QS);
    return publish(c, 0);
}

static int loop2(HostileFix *c)
{
    uint64_t h = hdr(c, VIRTIO_BLK_T_FLUSH, 0);

    desc(c, 0, h, 16, NEXT, 1);
    desc(c, 1, h, 16, NEXT, 0);
    return publish(c, 0);
}

static int self_loop(HostileFix *c)
{
    desc(c, 5, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, NEXT, 5);
    return publish(c, 5);
}

static int loop_writable(HostileFix *c)
{
    uint64_t s = status(c);

    desc(c, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, NEXT, 1);
    desc(c, 1, s, 1, WR | NEXT, 2);
    desc(c, 2, s, 1, WR | NEXT, 1);
    return publish(c, 0);
}

static uint64_t ind_table(HostileFix *c, unsigned n)
{
    return testdrv_alloc(c->drv, 16ull * n, 16);
}

static int ind_loop(HostileFix *c)
{
    uint64_t t = ind_table(c, 3), h = hdr(c, VIRTIO_BLK_T_FLUSH, 0);

    table(c, t, 0, h, 16, NEXT, 1);
    table(c, t, 1, h, 16, NEXT, 2);
    table(c, t, 2, h, 16, NEXT, 0);
    desc(c, 0, t, 48, IND, 0);
    return publish(c, 0);
}

static int ind_len0(HostileFix *c)
{
    desc(c, 0, ind_table(c, 1), 0, IND, 0);
    return publish(c, 0);
}

static int ind_len24(HostileFix *c)
{
    uint64_t t = ind_table(c, 2);

    table(c, t, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, 0, 0);
    desc(c, 0, t, 24, IND, 0);
    return publish(c, 0);
}

static int ind_with_next(HostileFix *c)
{
    uint64_t t = ind_table(c, 2);

    table(c, t, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, NEXT, 1);
    table(c, t, 1, status(c), 1, WR, 0);
    desc(c, 0, t, 32, IND | NEXT, 1);
    desc(c, 1, c->status_gpa, 1, WR, 0);
    return publish(c, 0);
}

static int ind_nested(HostileFix *c)
{
    uint64_t t = ind_table(c, 2), t2 = ind_table(c, 2);

    table(c, t2, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, NEXT, 1);
    table(c, t2, 1, status(c), 1, WR, 0);
    table(c, t, 0, t2, 32, IND, 0);
    desc(c, 0, t, 16, IND, 0);
    return publish(c, 0);
}

static int ind_valid_chain(HostileFix *c)
{
    uint64_t t = ind_table(c, 2);

    table(c, t, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, NEXT, 1);
    table(c, t, 1, status(c), 1, WR, 0);
    desc(c, 0, t, 32, IND, 0);
    return publish(c, 0);
}

static void no_indirect(VirtIOBlkConf *conf)
{
    conf->indirect_desc = false;
}

static int ind_not_head(HostileFix *c)
{
    uint64_t t = ind_table(c, 1);

    table(c, t, 0, status(c), 1, WR, 0);
    desc(c, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, NEXT, 1);
    desc(c, 1, t, 16, IND, 0);
    return publish(c, 0);
}

static int ind_too_long(HostileFix *c)
{
    uint64_t t = ind_table(c, QS + 1), h = hdr(c, VIRTIO_BLK_T_FLUSH, 0);

    for (unsigned i = 0; i < QS + 1; i++) {
        table(c, t, i, h, 16, i < QS ? NEXT : 0, i + 1);
    }
    desc(c, 0, t, 16 * (QS + 1), IND, 0);
    return publish(c, 0);
}

static int ind_outside_ram(HostileFix *c)
{
    desc(c, 0, testdrv_ram_end(c->drv) + 4096, 32, IND, 0);
    return publish(c, 0);
}

static int ind_straddle_end(HostileFix *c)
{
    desc(c, 0, testdrv_ram_end(c->drv) - 16, 32, IND, 0);
    return publish(c, 0);
}

static int ind_next_oob(HostileFix *c)
{
    uint64_t t = ind_table(c, 2);

    table(c, t, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, NEXT, 2);
    table(c, t, 1, status(c), 1, WR, 0);
    desc(c, 0, t, 32, IND, 0);
    return publish(c, 0);
}

static int zero_len(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, NEXT, 1);
    desc(c, 1, buf(c, 512), 0, NEXT | WR, 2);
    desc(c, 2, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int zero_len_ind(HostileFix *c)
{
    uint64_t t = ind_table(c, 2);

    table(c, t, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 0, NEXT, 1);
    table(c, t, 1, status(c), 1, WR, 0);
    desc(c, 0, t, 32, IND, 0);
    return publish(c, 0);
}

static int out_after_in(HostileFix *c)
{
    desc(c, 0, status(c), 1, WR | NEXT, 1);
    desc(c, 1, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, 0, 0);
    return publish(c, 0);
}

static int out_after_in_ind(HostileFix *c)
{
    uint64_t t = ind_table(c, 3);

    table(c, t, 0, hdr(c, VIRTIO_BLK_T_OUT, 0), 16, NEXT, 1);
    table(c, t, 1, status(c), 1, WR | NEXT, 2);
    table(c, t, 2, buf(c, 512), 512, 0, 0);
    desc(c, 0, t, 48, IND, 0);
    return publish(c, 0);
}

static int gpa_outside(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, NEXT, 1);
    desc(c, 1, testdrv_ram_end(c->drv) + 0x100000, 512, NEXT | WR, 2);
    desc(c, 2, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int gpa_straddle_end(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, NEXT, 1);
    desc(c, 1, testdrv_ram_end(c->drv) - 256, 512, NEXT | WR, 2);
    desc(c, 2, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int gpa_wrap(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, NEXT, 1);
    desc(c, 1, UINT64_MAX - 100, 512, NEXT | WR, 2);
    desc(c, 2, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int gpa_huge_len(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, NEXT, 1);
    desc(c, 1, buf(c, 512), UINT32_MAX, NEXT | WR, 2);
    desc(c, 2, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int gpa_in_hole(HostileFix *c)
{
    uint64_t hole = testdrv_region_gpa(c->drv, 0) + testdrv_region_size(c->drv, 0);

    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, NEXT, 1);
    desc(c, 1, hole + 4096, 512, NEXT | WR, 2);
    desc(c, 2, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int gpa_across_hole(HostileFix *c)
{
    uint64_t end0 = testdrv_alloc_at_region_end(c->drv, 0, 256);

    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, NEXT, 1);
    desc(c, 1, end0, 512, NEXT | WR, 2);
    desc(c, 2, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int dup_head(HostileFix *c)
{
    c->ops->hold(c);
    desc(c, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, NEXT, 1);
    desc(c, 1, status(c), 1, WR, 0);
    publish(c, 0);
    g_assert_cmpuint(c->ops->pass(c), ==, 1); /* head 0 now in flight */
    publish(c, 0);
    return -1;
}

static int over_submit(HostileFix *c)
{
    /* Fill every slot with in-flight indirect requests, then one more. */
    c->ops->hold(c);
    for (unsigned i = 0; i < QS; i++) {
        g_assert_cmpint(testblk_submit(c->tvq, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, true).head, >=, 0);
    }
    g_assert_cmpuint(c->ops->pass(c), ==, QS);
    desc(c, 0, hdr(c, VIRTIO_BLK_T_FLUSH, 0), 16, 0, 0);
    publish(c, 0);
    return -1;
}

static int no_status(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_OUT, 0), 16, NEXT, 1);
    desc(c, 1, buf(c, 512), 512, 0, 0);
    return publish(c, 0);
}

static int status_only(HostileFix *c)
{
    desc(c, 0, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int short_header(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 15, NEXT, 1);
    desc(c, 1, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int header_writable(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, WR | NEXT, 1);
    desc(c, 1, status(c), 1, WR, 0);
    return publish(c, 0);
}

/* ---- request errors: status byte + used length ---- */

static int beyond_capacity(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_IN, BLKFIX_SECTORS, 512, true);
}

static int sector_overflow(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_IN, UINT64_MAX, 512, true);
}

static int sector_overflow2(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_OUT, UINT64_MAX - 1, 1024, false);
}

static int end_past_capacity(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_IN, BLKFIX_SECTORS - 1, 1024, true);
}

static int len_not_512(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_IN, 0, 100, true);
}

static int write_len_513(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_OUT, 0, 513, false);
}

static void lbs4k(VirtIOBlkConf *conf)
{
    conf->logical_block_size = conf->physical_block_size = 4096;
}

static int lbs_misaligned_sector(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_IN, 1, 4096, true);
}

static int lbs_short_len(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_OUT, 8, 2048, false);
}

static int unknown_type(HostileFix *c)
{
    return req2(c, 0x1234, 0);
}

static int scsi_type(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_SCSI_CMD, 0, 512, true);
}

static int secure_erase(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_SECURE_ERASE, 0, 8, 0, 16);
}

static int barrier_in(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_IN | VIRTIO_BLK_T_BARRIER, 0, 512, true);
}

static int barrier_unknown(HostileFix *c)
{
    return req2(c, VIRTIO_BLK_T_BARRIER | 0x77, 0);
}

static int discard_two_segs(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_DISCARD, 0, 8, 0, 32);
}

static int discard_short_seg(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_DISCARD, 0, 8, 0, 8);
}

static int discard_no_seg(HostileFix *c)
{
    return req2(c, VIRTIO_BLK_T_DISCARD, 0);
}

static int discard_unmap(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_DISCARD, 0, 8, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP, 16);
}

static int wz_bad_flags(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_WRITE_ZEROES, 0, 8, 0x2, 16);
}

static int wz_two_segs(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_WRITE_ZEROES, 0, 8, 0, 32);
}

static int discard_beyond(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_DISCARD, BLKFIX_SECTORS - 4, 8, 0, 16);
}

static int discard_wrap(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_DISCARD, UINT64_MAX - 3, 8, 0, 16);
}

static void small_limits(VirtIOBlkConf *conf)
{
    conf->max_discard_sectors = 64;
    conf->max_write_zeroes_sectors = 64;
    conf->seg_max = 4;
    conf->size_max = 4096;
}

static int discard_over_max(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_DISCARD, 0, 65, 0, 16);
}

static int wz_over_max(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_WRITE_ZEROES, 0, 128, 0, 16);
}

static int wz_misaligned(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_WRITE_ZEROES, 8, 4, 0, 16);
}

static int discard_not_negotiated(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_DISCARD, 0, 8, 0, 16);
}

static int too_many_segs(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, NEXT, 1);
    for (unsigned i = 1; i <= 5; i++) {
        desc(c, i, buf(c, 512), 512, NEXT | WR, i + 1);
    }
    desc(c, 6, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int seg_over_size_max(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_OUT, 0, 8192, false);
}

static void readonly(VirtIOBlkConf *conf)
{
    conf->readonly = true;
}

static int write_readonly(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_OUT, 0, 512, false);
}

static int wz_readonly(HostileFix *c)
{
    return dwz(c, VIRTIO_BLK_T_WRITE_ZEROES, 0, 8, 0, 16);
}

static int in_with_out_data(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, NEXT, 1);
    desc(c, 1, buf(c, 512), 512, NEXT, 2);
    desc(c, 2, buf(c, 512), 512, NEXT | WR, 3);
    desc(c, 3, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int out_with_in_data(HostileFix *c)
{
    desc(c, 0, hdr(c, VIRTIO_BLK_T_OUT, 0), 16, NEXT, 1);
    desc(c, 1, buf(c, 512), 512, NEXT, 2);
    desc(c, 2, buf(c, 512), 512, NEXT | WR, 3);
    desc(c, 3, status(c), 1, WR, 0);
    return publish(c, 0);
}

static int read_into_readonly_buf(HostileFix *c)
{
    /* IN whose data descriptor is device-readable: wrong direction. */
    return req3(c, VIRTIO_BLK_T_IN, 0, 512, false);
}

static int in_no_data(HostileFix *c)
{
    return req2(c, VIRTIO_BLK_T_IN, 0);
}

static int flush_with_data(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_FLUSH, 12345, 512, false);
}

static int get_id_short(HostileFix *c)
{
    return req3(c, VIRTIO_BLK_T_GET_ID, 0, 4, true);
}

static int status_in_data_desc(HostileFix *c)
{
    /* Status shares the data descriptor (ANY_LAYOUT): 512 + 1 bytes. */
    desc(c, 0, hdr(c, VIRTIO_BLK_T_IN, 0), 16, NEXT, 1);
    desc(c, 1, buf(c, 1024), 513, WR, 0);
    c->status_gpa = 0; /* checked below via used len only */
    return publish(c, 0);
}

#define B(n, fn, ...)                                                                              \
    {                                                                                              \
        .name = n, .build = fn, .status = HOSTILE_BROKEN, __VA_ARGS__                              \
    }
#define S(n, fn, st, l, ...)                                                                       \
    {                                                                                              \
        .name = n, .build = fn, .status = VIRTIO_BLK_S_##st, .used_len = l, __VA_ARGS__            \
    }

const HostileCase hostile_cases[] = {
    B("avail-jump", avail_jump, .reason = "avail index moved by more than the queue size"),
    B("avail-jump-huge", avail_jump_huge,
      .reason = "avail index moved by more than the queue size"),
    B("head-eq-size", head_eq_num, .reason = "avail ring head index out of range"),
    B("head-ffff", head_ffff, .reason = "avail ring head index out of range"),
    B("next-out-of-range", next_oob, .reason = "descriptor next index out of range"),
    B("loop-2", loop2, .reason = "descriptor chain loops (longer than its table)"),
    B("loop-self", self_loop, .reason = "descriptor chain loops (longer than its table)"),
    B("loop-writable", loop_writable, .reason = "descriptor chain loops (longer than its table)"),
    B("indirect-loop", ind_loop, .reason = "descriptor chain loops (longer than its table)"),
    B("indirect-len-0", ind_len0,
      .reason = "indirect table length is zero or not a multiple of 16"),
    B("indirect-len-24", ind_len24,
      .reason = "indirect table length is zero or not a multiple of 16"),
    B("indirect-with-next", ind_with_next, .reason = "indirect descriptor with NEXT set"),
    B("indirect-nested", ind_nested,
      .reason = "indirect descriptor that is not the head's only one"),
    B("indirect-not-negotiated", ind_valid_chain, .conf = no_indirect,
      .reason = "indirect descriptor without VIRTIO_RING_F_INDIRECT_DESC"),
    B("indirect-not-head", ind_not_head,
      .reason = "indirect descriptor that is not the head's only one"),
    B("indirect-longer-than-queue", ind_too_long,
      .reason = "indirect table longer than the queue size"),
    B("indirect-outside-ram", ind_outside_ram, .reason = "indirect table outside guest RAM"),
    B("indirect-straddles-ram-end", ind_straddle_end, .reason = "indirect table outside guest RAM"),
    B("indirect-next-out-of-range", ind_next_oob, .reason = "descriptor next index out of range"),
    B("zero-length", zero_len, .reason = "zero-length descriptor"),
    B("zero-length-indirect", zero_len_ind, .reason = "zero-length descriptor"),
    B("out-after-in", out_after_in,
      .reason = "device-readable descriptor after a device-writable one"),
    B("out-after-in-indirect", out_after_in_ind,
      .reason = "device-readable descriptor after a device-writable one"),
    B("gpa-outside-ram", gpa_outside, .reason = "descriptor buffer outside guest RAM"),
    B("gpa-straddles-ram-end", gpa_straddle_end, .reason = "descriptor buffer outside guest RAM"),
    B("gpa-wraps-2^64", gpa_wrap, .reason = "descriptor buffer outside guest RAM"),
    B("len-4g", gpa_huge_len, .reason = "descriptor buffer outside guest RAM"),
    B("gpa-in-hole", gpa_in_hole, .nregions = 2, .reason = "descriptor buffer outside guest RAM"),
    B("gpa-across-hole", gpa_across_hole, .nregions = 2,
      .reason = "descriptor buffer outside guest RAM"),
    B("duplicate-head", dup_head, .holds = true, .reason = "avail ring head is already in flight"),
    B("over-submit", over_submit, .holds = true,
      .reason = "more virtio-blk requests than the queue size"),
    B("no-status", no_status, .reason = "virtio-blk request without a status byte"),
    B("status-only-no-header", status_only,
      .reason = "virtio-blk request without a complete header"),
    B("header-15-bytes", short_header, .returns_chain = true,
      .reason = "virtio-blk request without a complete header"),
    B("header-device-writable", header_writable,
      .reason = "virtio-blk request without a complete header"),
    S("beyond-capacity", beyond_capacity, IOERR, 1, .conf = NULL),
    S("sector-overflow", sector_overflow, IOERR, 1, .conf = NULL),
    S("sector-overflow-write", sector_overflow2, IOERR, 1, .conf = NULL),
    S("end-past-capacity", end_past_capacity, IOERR, 1, .conf = NULL),
    S("len-not-512", len_not_512, IOERR, 1, .conf = NULL),
    S("write-len-513", write_len_513, IOERR, 1, .conf = NULL),
    S("lbs-misaligned-sector", lbs_misaligned_sector, IOERR, 1, .conf = lbs4k),
    S("lbs-short-len", lbs_short_len, IOERR, 1, .conf = lbs4k),
    S("unknown-type", unknown_type, UNSUPP, 1, .conf = NULL),
    S("scsi-cmd", scsi_type, UNSUPP, 1, .conf = NULL),
    S("secure-erase", secure_erase, UNSUPP, 1, .conf = NULL),
    S("barrier-masked-in", barrier_in, OK, 513, .conf = NULL),
    S("barrier-unknown", barrier_unknown, UNSUPP, 1, .conf = NULL),
    S("discard-2-segments", discard_two_segs, IOERR, 1, .conf = NULL),
    S("discard-short-segment", discard_short_seg, IOERR, 1, .conf = NULL),
    S("discard-no-segment", discard_no_seg, IOERR, 1, .conf = NULL),
    S("discard-unmap", discard_unmap, UNSUPP, 1, .conf = NULL),
    S("write-zeroes-bad-flags", wz_bad_flags, UNSUPP, 1, .conf = NULL),
    S("write-zeroes-2-segments", wz_two_segs, IOERR, 1, .conf = NULL),
    S("discard-beyond-capacity", discard_beyond, IOERR, 1, .conf = NULL),
    S("discard-wraps", discard_wrap, IOERR, 1, .conf = NULL),
    S("discard-over-max", discard_over_max, IOERR, 1, .conf = small_limits),
    S("write-zeroes-over-max", wz_over_max, IOERR, 1, .conf = small_limits),
    S("write-zeroes-misaligned", wz_misaligned, IOERR, 1, .conf = lbs4k),
    S("discard-not-negotiated", discard_not_negotiated, UNSUPP, 1,
      .features = ~(1ull << VIRTIO_BLK_F_DISCARD)),
    S("more-segments-than-seg-max", too_many_segs, IOERR, 1, .conf = small_limits),
    S("segment-over-size-max", seg_over_size_max, IOERR, 1, .conf = small_limits),
    S("write-readonly", write_readonly, IOERR, 1, .conf = readonly),
    S("write-zeroes-readonly", wz_readonly, UNSUPP, 1, .conf = readonly),
    S("in-with-readable-data", in_with_out_data, IOERR, 1, .conf = NULL),
    S("out-with-writable-data", out_with_in_data, IOERR, 1, .conf = NULL),
    S("in-into-readable-buffer", read_into_readonly_buf, IOERR, 1, .conf = NULL),
    S("in-without-data", in_no_data, OK, 1, .conf = NULL),
    S("flush-with-data", flush_with_data, OK, 1, .conf = NULL),
    S("get-id-4-bytes", get_id_short, OK, 5, .conf = NULL),
    S("status-inside-data-descriptor", status_in_data_desc, OK, 513, .conf = NULL),
};

const size_t hostile_ncases = G_N_ELEMENTS(hostile_cases);

const HostileCase *hostile_case_find(const char *name)
{
    for (size_t i = 0; i < hostile_ncases; i++) {
        if (!strcmp(hostile_cases[i].name, name)) {
            return &hostile_cases[i];
        }
    }
    g_error("no hostile case named %s", name);
}

void hostile_case_conf(const HostileCase *hc, VirtIOBlkConf *conf)
{
    blkfix_default_conf(conf);
    g_assert_cmpuint(conf->queue_size, ==, QS);
    if (hc->conf) {
        hc->conf(conf);
    }
}

uint32_t hostile_used_len(HostileFix *c, int head)
{
    uint16_t h;
    uint32_t len;

    g_assert_true(testvq_get_used(c->tvq, &h, &len));
    g_assert_cmpint(h, ==, head);
    return len;
}

void hostile_check_used(const HostileCase *hc, HostileFix *c, int head)
{
    if (hc->status != HOSTILE_BROKEN) {
        g_assert_cmpuint(hostile_used_len(c, head), ==, hc->used_len);
        if (c->status_gpa) {
            g_assert_cmpuint(testdrv_readb(c->drv, c->status_gpa), ==, hc->status);
        }
        return;
    }
    if (hc->returns_chain) {
        g_assert_cmpuint(testvq_used_idx(c->tvq), ==, 1);
    }
    /* A known status location still gets IOERR and the chain back. */
    if (head >= 0 && c->status_gpa && testvq_used_idx(c->tvq) > 0) {
        g_assert_cmpuint(hostile_used_len(c, head), ==, 1);
        g_assert_cmpuint(testdrv_readb(c->drv, c->status_gpa), ==, VIRTIO_BLK_S_IOERR);
    }
}
