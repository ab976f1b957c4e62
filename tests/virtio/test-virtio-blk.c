/*
 * Unit tests: virtio-blk engine (configuration, features, config space,
 * request handling) plus QEMU's qtest virtio-blk cases at this level.
 */
#include <errno.h>
#include <stddef.h>
#include <string.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "blkfix.h"

#define BIT(n) (1ull << (n))

static void test_conf_props(void)
{
    VirtIOBlkConf c;
    GError *err = NULL;

    virtio_blk_conf_init(&c, 2048);
    g_assert_cmpuint(c.queue_size, ==, 256);
    g_assert_cmpuint(virtio_blk_conf_seg_max(&c), ==, 254);
    g_assert(virtio_blk_conf_validate(&c, NULL));
    g_assert(virtio_blk_conf_set_property(&c, "queue-size", "1024", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "num-queues", "4", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "config-wce", "off", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "discard", "false", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "write-zeroes", "no", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "seg-max-adjust", "off", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "logical_block_size", "4096", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "physical_block_size", "4096", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "max-discard-sectors", "1024", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "max-write-zeroes-sectors", "2048", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "indirect_desc", "off", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "event_idx", "on", NULL));
    g_assert(virtio_blk_conf_set_property(&c, "serial", "12345678901234567890", NULL));
    g_assert_cmpuint(c.queue_size, ==, 1024);
    g_assert_cmpuint(c.num_queues, ==, 4);
    g_assert_false(c.config_wce || c.discard || c.write_zeroes || c.indirect_desc);
    g_assert_cmpuint(virtio_blk_conf_seg_max(&c), ==, 126);
    g_assert_cmpuint(c.logical_block_size, ==, 4096);
    g_assert_cmpuint(c.max_write_zeroes_sectors, ==, 2048);
    g_assert_cmpstr(c.serial, ==, "12345678901234567890");
    g_assert(virtio_blk_conf_validate(&c, NULL));

    g_assert_false(virtio_blk_conf_set_property(&c, "no-such-prop", "1", &err));
    g_assert_error(err, VIRTIO_ERROR, VIRTIO_ERROR_NOT_FOUND);
    g_assert_nonnull(strstr(err->message, "no-such-prop"));
    g_clear_error(&err);
    g_assert_false(virtio_blk_conf_set_property(&c, "discard", "maybe", &err));
    g_assert_error(err, VIRTIO_ERROR, VIRTIO_ERROR_INVALID);
    g_clear_error(&err);
    g_assert_false(virtio_blk_conf_set_property(&c, "queue-size", "70000", &err));
    g_clear_error(&err);
    g_assert_false(virtio_blk_conf_set_property(&c, "queue-size", "-1", &err));
    g_clear_error(&err);
    g_assert_false(virtio_blk_conf_set_property(&c, "serial", "123456789012345678901", &err));
    g_clear_error(&err);
    g_assert_cmpstr(c.serial, ==, "12345678901234567890"); /* unchanged on error */
}

static void expect_invalid(const char *prop, const char *val)
{
    VirtIOBlkConf c;
    GError *err = NULL;

    virtio_blk_conf_init(&c, 2048);
    g_assert(virtio_blk_conf_set_property(&c, prop, val, NULL));
    g_assert_false(virtio_blk_conf_validate(&c, &err));
    g_assert_error(err, VIRTIO_ERROR, VIRTIO_ERROR_INVALID);
    g_assert_null(virtio_blk_new(&c, NULL));
    g_error_free(err);
}

static void test_conf_validate(void)
{
    expect_invalid("queue-size", "100");
    expect_invalid("queue-size", "2");
    expect_invalid("queue-size", "2048");
    expect_invalid("num-queues", "0");
    expect_invalid("num-queues", "65");
    expect_invalid("logical_block_size", "1000");
    expect_invalid("logical_block_size", "256");
    expect_invalid("physical_block_size", "256");
    expect_invalid("max-discard-sectors", "0");
    expect_invalid("max-write-zeroes-sectors", "4194304");
    expect_invalid("seg-max", "255");
    expect_invalid("size-max", "100");
    expect_invalid("capacity", "36028797018963968"); /* 2^55 sectors: bytes overflow */
}

static void test_features(void)
{
    VirtIOBlkConf c;
    uint64_t f, want;
    VirtIOBlk *blk;
    GError *err = NULL;

    virtio_blk_conf_init(&c, 2048);
    f = virtio_blk_host_features(&c);
    want = BIT(VIRTIO_F_VERSION_1) | BIT(VIRTIO_RING_F_EVENT_IDX) |
           BIT(VIRTIO_RING_F_INDIRECT_DESC) | BIT(VIRTIO_BLK_F_SEG_MAX) |
           BIT(VIRTIO_BLK_F_BLK_SIZE) | BIT(VIRTIO_BLK_F_FLUSH) | BIT(VIRTIO_BLK_F_CONFIG_WCE) |
           BIT(VIRTIO_BLK_F_TOPOLOGY) | BIT(VIRTIO_BLK_F_DISCARD) | BIT(VIRTIO_BLK_F_WRITE_ZEROES);
    g_assert_cmphex(f, ==, want);
    c.readonly = true;
    c.num_queues = 2;
    c.size_max = 65536;
    c.event_idx = false;
    f = virtio_blk_host_features(&c);
    g_assert(f & BIT(VIRTIO_BLK_F_RO));
    g_assert(f & BIT(VIRTIO_BLK_F_MQ));
    g_assert(f & BIT(VIRTIO_BLK_F_SIZE_MAX));
    g_assert_false(f & (BIT(VIRTIO_BLK_F_DISCARD) | BIT(VIRTIO_BLK_F_WRITE_ZEROES) |
                        BIT(VIRTIO_RING_F_EVENT_IDX)));

    virtio_blk_conf_init(&c, 2048);
    blk = virtio_blk_new(&c, NULL);
    g_assert_false(virtio_blk_set_features(blk, BIT(VIRTIO_BLK_F_FLUSH), &err));
    g_assert_error(err, VIRTIO_ERROR, VIRTIO_ERROR_NOT_SUPPORTED);
    g_clear_error(&err);
    g_assert_false(
        virtio_blk_set_features(blk, BIT(VIRTIO_F_VERSION_1) | BIT(VIRTIO_BLK_F_RO), &err));
    g_clear_error(&err);
    g_assert(virtio_blk_set_features(blk, BIT(VIRTIO_F_VERSION_1), NULL));
    g_assert_cmphex(virtio_blk_get_features(blk), ==, BIT(VIRTIO_F_VERSION_1));
    /* No FLUSH, no CONFIG_WCE: writethrough. */
    g_assert_false(virtio_blk_get_writeback(blk));
    g_assert(virtio_blk_set_features(blk, BIT(VIRTIO_F_VERSION_1) | BIT(VIRTIO_BLK_F_FLUSH), NULL));
    g_assert_true(virtio_blk_get_writeback(blk));
    virtio_blk_free(blk);
}

static void test_config_space(void)
{
    VirtIOBlkConf c;
    struct virtio_blk_config cfg;
    VirtIOBlk *blk;
    uint8_t zero = 0, one = 1;

    virtio_blk_conf_init(&c, 123456);
    c.queue_size = 128;
    c.logical_block_size = 4096;
    c.physical_block_size = 16384;
    c.max_discard_sectors = 777;
    c.size_max = 1 << 20;
    blk = virtio_blk_new(&c, NULL);
    virtio_blk_get_config(blk, &cfg);
    g_assert_cmpuint(le64toh(cfg.capacity), ==, 123456);
    g_assert_cmpuint(le32toh(cfg.seg_max), ==, 126);
    g_assert_cmpuint(le32toh(cfg.size_max), ==, 1 << 20);
    g_assert_cmpuint(le32toh(cfg.blk_size), ==, 4096);
    g_assert_cmpuint(cfg.physical_block_exp, ==, 2);
    g_assert_cmpuint(le16toh(cfg.num_queues), ==, 1);
    g_assert_cmpuint(cfg.wce, ==, 1);
    g_assert_cmpuint(le32toh(cfg.max_discard_sectors), ==, 777);
    g_assert_cmpuint(le32toh(cfg.max_discard_seg), ==, 1);
    g_assert_cmpuint(le32toh(cfg.discard_sector_alignment), ==, 8);
    g_assert_cmpuint(le32toh(cfg.max_write_zeroes_seg), ==, 1);
    g_assert_cmpuint(cfg.write_zeroes_may_unmap, ==, 1);

    /* wce is writable only once CONFIG_WCE is negotiated. */
    virtio_blk_config_write(blk, offsetof(struct virtio_blk_config, wce), &zero, 1);
    g_assert_true(virtio_blk_get_writeback(blk));
    g_assert(virtio_blk_set_features(blk, virtio_blk_get_host_features(blk), NULL));
    virtio_blk_config_write(blk, offsetof(struct virtio_blk_config, wce), &zero, 1);
    g_assert_false(virtio_blk_get_writeback(blk));
    virtio_blk_get_config(blk, &cfg);
    g_assert_cmpuint(cfg.wce, ==, 0);
    /* Writes elsewhere, or overflowing offsets, change nothing. */
    virtio_blk_config_write(blk, 0, &one, 1);
    virtio_blk_config_write(blk, UINT32_MAX, &one, 1);
    g_assert_false(virtio_blk_get_writeback(blk));
    virtio_blk_config_write(blk, offsetof(struct virtio_blk_config, wce), &one, 1);
    g_assert_true(virtio_blk_get_writeback(blk));
    virtio_blk_config_write(blk, offsetof(struct virtio_blk_config, wce), &zero, 1);
    /* Reset restores the configured mode. */
    virtio_blk_reset(blk);
    g_assert_true(virtio_blk_get_writeback(blk));
    virtio_blk_free(blk);
}

static void fill(uint8_t *b, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++) {
        b[i] = (uint8_t)(i * 7 + seed);
    }
}

/* qtest "basic": write then read back, through the in-memory executor. */
static void test_write_read(void)
{
    BlkFix f;
    uint8_t w[2048], r[2048];
    uint32_t len;

    blkfix_init(&f, NULL);
    fill(w, sizeof(w), 3);
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_OUT, 10, w, sizeof(w), &len), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(len, ==, 1);
    g_assert_cmpuint(f.last_op, ==, VIRTIO_BLK_OP_WRITE);
    g_assert_cmpuint(f.last_offset, ==, 10 * 512);
    g_assert_cmpmem(f.disk + 5120, 2048, w, 2048);
    memset(r, 0, sizeof(r));
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_IN, 10, r, sizeof(r), &len), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(len, ==, 2049);
    g_assert_cmpmem(r, 2048, w, 2048);
    /* Last sector of the disk is reachable. */
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_IN, BLKFIX_SECTORS - 1, r, 512, &len), ==,
                     VIRTIO_BLK_S_OK);
    g_assert_cmpuint(f.submits, ==, 3);
    g_assert_cmpuint(f.batch_ends, ==, 3);
    blkfix_cleanup(&f);
}

/* qtest "indirect": the same through an indirect table. */
static void test_indirect(void)
{
    BlkFix f;
    uint8_t w[4096], r[4096];
    TestBlkReq q;

    blkfix_init(&f, NULL);
    fill(w, sizeof(w), 9);
    q = testblk_submit(f.tvq, VIRTIO_BLK_T_OUT, 64, w, sizeof(w), true);
    blkfix_run(&f);
    g_assert_cmpuint(blkfix_used_len(&f, q.head), ==, 1);
    g_assert_cmpuint(testblk_status(f.tvq, &q), ==, VIRTIO_BLK_S_OK);
    q = testblk_submit(f.tvq, VIRTIO_BLK_T_IN, 64, NULL, sizeof(r), true);
    blkfix_run(&f);
    g_assert_cmpuint(blkfix_used_len(&f, q.head), ==, 4097);
    g_assert_cmpuint(testblk_status(f.tvq, &q), ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f.drv, q.data_gpa, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    blkfix_cleanup(&f);
}

/* qtest "idx": used_event suppresses the 2nd interrupt; the 3rd covers both. */
static void test_event_idx(void)
{
    BlkFix f;
    uint8_t buf[512];
    TestBlkReq a, b, c;

    blkfix_init(&f, NULL);
    testvq_set_auto_used_event(f.tvq, false);
    a = testblk_submit(f.tvq, VIRTIO_BLK_T_OUT, 0, buf, 512, false);
    g_assert_true(testvq_kick(f.tvq));
    g_assert_true(blkfix_run(&f));
    blkfix_used_len(&f, a.head);
    /* Ask for an interrupt only once used idx moves past 2. */
    testvq_set_used_event(f.tvq, 2);
    b = testblk_submit(f.tvq, VIRTIO_BLK_T_OUT, 1, buf, 512, false);
    testvq_kick(f.tvq);
    g_assert_false(blkfix_run(&f));
    c = testblk_submit(f.tvq, VIRTIO_BLK_T_IN, 1, NULL, 512, false);
    testvq_kick(f.tvq);
    g_assert_true(blkfix_run(&f));
    /* One interrupt, both completions visible. */
    g_assert_cmpuint(testvq_used_idx(f.tvq), ==, 3);
    blkfix_used_len(&f, b.head);
    g_assert_cmpuint(blkfix_used_len(&f, c.head), ==, 513);
    blkfix_cleanup(&f);
}

/* qtest "nonexistent queue": a queue that was never set up cannot be used. */
static void test_nonexistent_queue(void)
{
    BlkFix f;
    VirtQueue *vq;
    GError *err = NULL;

    blkfix_init(&f, NULL);
    /* Queue 1 of a 1-queue device: its rings were never placed (all zero). */
    vq = virtqueue_new(testdrv_guestmem(f.drv), 16, 0, 0, 0, 0, &err);
    g_assert_null(vq);
    g_assert_error(err, VIRTIO_ERROR, VIRTIO_ERROR_INVALID);
    g_clear_error(&err);
    /* A ring larger than queue-size is refused by the engine. */
    vq = virtqueue_new(testdrv_guestmem(f.drv), 32, testvq_desc_gpa(f.tvq), testvq_avail_gpa(f.tvq),
                       testvq_used_gpa(f.tvq), 0, NULL);
    g_assert_nonnull(vq);
    g_assert_null(virtio_blk_queue_new(f.blk, vq, NULL, NULL, &err));
    g_assert_error(err, VIRTIO_ERROR, VIRTIO_ERROR_INVALID);
    g_clear_error(&err);
    virtqueue_free(vq);
    /* Running the real queue with nothing posted does nothing. */
    g_assert_cmpuint(virtio_blk_handle_queue(f.q), ==, 0);
    g_assert_false(virtio_blk_queue_flush(f.q));
    blkfix_cleanup(&f);
}

static void test_get_id(void)
{
    BlkFix f;
    char id[32];
    uint32_t len;

    blkfix_init(&f, NULL);
    memset(id, 'x', sizeof(id));
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_GET_ID, 0, id, 20, &len), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(len, ==, 21);
    /* "vblk-test-serial" is 16 bytes: NUL padded to 20. */
    g_assert_cmpmem(id, 20, "vblk-test-serial\0\0\0\0", 20);
    memset(id, 'x', sizeof(id));
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_GET_ID, 0, id, 8, &len), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(len, ==, 9);
    g_assert_cmpmem(id, 8, "vblk-tes", 8);
    g_assert_cmpuint(f.submits, ==, 0); /* inline */
    blkfix_cleanup(&f);
}

static void test_get_id_full_serial(void)
{
    VirtIOBlkConf c;
    BlkFix f;
    char id[20];

    blkfix_default_conf(&c);
    g_assert(virtio_blk_conf_set_property(&c, "serial", "ABCDEFGHIJKLMNOPQRST", NULL));
    blkfix_init(&f, &(BlkFixOpts){.conf = &c});
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_GET_ID, 0, id, 20, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(id, 20, "ABCDEFGHIJKLMNOPQRST", 20); /* no NUL when exactly 20 */
    blkfix_cleanup(&f);
}

static void test_flush_discard_wz(void)
{
    BlkFix f;
    struct virtio_blk_discard_write_zeroes seg = {.sector = htole64(8), .num_sectors = htole32(8)};
    uint8_t w[8192];
    uint32_t len;

    blkfix_init(&f, NULL);
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, &len), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(len, ==, 1);
    g_assert_cmpuint(f.flushes, ==, 1);
    memset(w, 0xaa, sizeof(w));
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_OUT, 0, w, sizeof(w), NULL), ==, 0);
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_DISCARD, 0, &seg, 16, &len), ==, 0);
    g_assert_cmpuint(len, ==, 1);
    g_assert_cmpuint(f.last_op, ==, VIRTIO_BLK_OP_DISCARD);
    g_assert_cmpuint(f.last_offset, ==, 4096);
    g_assert_cmpuint(f.last_len, ==, 4096);
    g_assert_cmpuint(f.disk[4096], ==, 0);
    g_assert_cmpuint(f.disk[4095], ==, 0xaa);
    seg.sector = htole64(0);
    seg.num_sectors = htole32(2);
    seg.flags = htole32(VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP);
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_WRITE_ZEROES, 0, &seg, 16, &len), ==, 0);
    g_assert_cmpuint(f.last_op, ==, VIRTIO_BLK_OP_WRITE_ZEROES);
    g_assert_true(f.last_unmap);
    g_assert_cmpuint(f.disk[1023], ==, 0);
    g_assert_cmpuint(f.disk[1024], ==, 0xaa);
    blkfix_cleanup(&f);
}

/* Header split 5 + 11 bytes at odd addresses, data and status in one descriptor. */
static void test_any_layout(void)
{
    BlkFix f;
    struct virtio_blk_outhdr h = {.type = htole32(VIRTIO_BLK_T_IN | VIRTIO_BLK_T_BARRIER),
                                  .sector = htole64(3)};
    uint64_t h1, h2, ds;
    uint8_t w[512], r[512];
    int head;

    blkfix_init(&f, NULL);
    fill(w, sizeof(w), 1);
    memcpy(f.disk + 3 * 512, w, 512);
    h1 = testdrv_alloc(f.drv, 8, 1) + 1;
    h2 = testdrv_alloc(f.drv, 16, 1) + 3;
    ds = testdrv_alloc(f.drv, 513, 1);
    testdrv_memwrite(f.drv, h1, &h, 5);
    testdrv_memwrite(f.drv, h2, (uint8_t *)&h + 5, 11);
    testdrv_memset(f.drv, ds, 0xff, 513);
    head =
        testvq_add_chain(f.tvq, (TestBuf[]){{h1, 5, false}, {h2, 11, false}, {ds, 513, true}}, 3);
    testvq_publish(f.tvq, head);
    blkfix_run(&f);
    g_assert_cmpuint(blkfix_used_len(&f, head), ==, 513);
    g_assert_cmpuint(testdrv_readb(f.drv, ds + 512), ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f.drv, ds, r, 512);
    g_assert_cmpmem(r, 512, w, 512);
    blkfix_cleanup(&f);
}

/* Data buffer crossing two adjacent RAM regions, end to end. */
static void test_region_crossing(void)
{
    BlkFix f;
    uint8_t w[4096], r[4096];
    uint64_t buf, hdr, st;
    struct virtio_blk_outhdr h = {.type = htole32(VIRTIO_BLK_T_OUT), .sector = htole64(100)};
    int head;

    blkfix_init(&f, &(BlkFixOpts){.nregions = 2, .adjacent = true});
    buf = testdrv_alloc_at_region_end(f.drv, 0, 2048); /* 2 KiB here, 2 KiB in region 1 */
    hdr = testdrv_alloc(f.drv, 16, 16);
    st = testdrv_alloc(f.drv, 1, 1);
    fill(w, sizeof(w), 5);
    testdrv_memwrite(f.drv, buf, w, sizeof(w));
    testdrv_memwrite(f.drv, hdr, &h, 16);
    head = testvq_add_chain(f.tvq, (TestBuf[]){{hdr, 16, false}, {buf, 4096, false}, {st, 1, true}},
                            3);
    testvq_publish(f.tvq, head);
    blkfix_run(&f);
    g_assert_cmpuint(blkfix_used_len(&f, head), ==, 1);
    g_assert_cmpuint(testdrv_readb(f.drv, st), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(f.disk + 100 * 512, 4096, w, 4096);
    /* Read it back into the crossing buffer. */
    testdrv_memset(f.drv, buf, 0, 4096);
    h.type = htole32(VIRTIO_BLK_T_IN);
    testdrv_memwrite(f.drv, hdr, &h, 16);
    head =
        testvq_add_chain(f.tvq, (TestBuf[]){{hdr, 16, false}, {buf, 4096, true}, {st, 1, true}}, 3);
    testvq_publish(f.tvq, head);
    blkfix_run(&f);
    g_assert_cmpuint(blkfix_used_len(&f, head), ==, 4097);
    testdrv_memread(f.drv, buf, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    blkfix_cleanup(&f);
}

static void test_deferred_errors(void)
{
    BlkFix f;
    uint8_t buf[512];
    TestBlkReq a, b, c;

    blkfix_init(&f, NULL);
    f.defer = true;
    a = testblk_submit(f.tvq, VIRTIO_BLK_T_IN, 0, NULL, 512, false);
    b = testblk_submit(f.tvq, VIRTIO_BLK_T_OUT, 0, buf, 512, false);
    c = testblk_submit(f.tvq, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, false);
    blkfix_run(&f);
    g_assert_cmpuint(f.ndeferred, ==, 3);
    g_assert_cmpuint(virtio_blk_queue_inflight(f.q), ==, 3);
    g_assert_cmpuint(testvq_used_idx(f.tvq), ==, 0);
    virtio_blk_req_complete(f.deferred[0], -EIO);
    virtio_blk_req_complete(f.deferred[1], -ENOTSUP);
    virtio_blk_req_complete(f.deferred[2], 0);
    virtio_blk_req_complete(f.deferred[2], 0); /* double completion is ignored */
    f.ndeferred = 0;
    g_assert_true(virtio_blk_queue_flush(f.q));
    g_assert_cmpuint(blkfix_used_len(&f, a.head), ==, 1); /* error: nothing written */
    g_assert_cmpuint(testblk_status(f.tvq, &a), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(blkfix_used_len(&f, b.head), ==, 1);
    g_assert_cmpuint(testblk_status(f.tvq, &b), ==, VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpuint(blkfix_used_len(&f, c.head), ==, 1);
    g_assert_cmpuint(testblk_status(f.tvq, &c), ==, VIRTIO_BLK_S_OK);
    g_assert_false(testvq_get_used(f.tvq, &(uint16_t){0}, &(uint32_t){0}));
    g_assert_cmpuint(virtio_blk_queue_inflight(f.q), ==, 0);
    blkfix_cleanup(&f);
}

/* Fill the whole queue with in-flight requests: slots are distinct, pool refills. */
static void test_pool_full(void)
{
    BlkFix f;
    bool seen[16] = {0};

    blkfix_init(&f, NULL);
    f.defer = true;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 16; i++) {
            g_assert_cmpint(testblk_submit(f.tvq, VIRTIO_BLK_T_IN, i, NULL, 512, true).head, >=, 0);
        }
        g_assert_cmpuint(virtio_blk_handle_queue(f.q), ==, 16);
        g_assert_cmpuint(f.ndeferred, ==, 16);
        memset(seen, 0, sizeof(seen));
        for (int i = 0; i < 16; i++) {
            g_assert_false(seen[f.deferred[i]->idx]);
            seen[f.deferred[i]->idx] = true;
        }
        blkfix_complete_deferred(&f, 0);
        virtio_blk_queue_flush(f.q);
        for (int i = 0; i < 16; i++) {
            uint16_t h;
            uint32_t l;
            g_assert(testvq_get_used(f.tvq, &h, &l));
            g_assert_cmpuint(l, ==, 513);
        }
        testdrv_alloc_reset(f.drv, testdrv_alloc_mark(f.drv));
    }
    g_assert_false(virtqueue_is_broken(f.vq));
    blkfix_cleanup(&f);
}

static void test_readonly_and_lbs(void)
{
    VirtIOBlkConf c;
    BlkFix f;
    uint8_t buf[4096] = {0};
    uint32_t len;

    blkfix_default_conf(&c);
    c.readonly = true;
    c.logical_block_size = 4096;
    c.physical_block_size = 4096;
    blkfix_init(&f, &(BlkFixOpts){.conf = &c});
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_OUT, 0, buf, 4096, &len), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(len, ==, 1);
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_IN, 8, buf, 4096, &len), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(len, ==, 4097);
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_IN, 4, buf, 4096, &len), ==, VIRTIO_BLK_S_IOERR);
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_IN, 8, buf, 512, &len), ==, VIRTIO_BLK_S_IOERR);
    /* Flush is fine on a read-only disk; discard is not offered. */
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_FLUSH, 0, NULL, 0, NULL), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_DISCARD, 0, buf, 16, NULL), ==,
                     VIRTIO_BLK_S_UNSUPP);
    g_assert_cmpuint(f.submits, ==, 2);
    blkfix_cleanup(&f);
}

static VirtIOBlkReq *held[16];
static unsigned nheld;

static void hold_submit(void *opaque, VirtIOBlkReq *req)
{
    held[nheld++] = req;
}

static const VirtIOBlkExecOps hold_ops = {.submit = hold_submit};

/*
 * The dataplane toggle at engine level: drain, hand the ring state to a new
 * VirtQueue + engine queue (another "thread"), carry on where it stopped.
 */
static void test_handoff(void)
{
    BlkFix f;
    uint8_t w[512];
    VirtQueueState st;
    VirtQueue *vq2;
    VirtIOBlkQueue *q2;
    TestBlkReq a, b;
    uint64_t feat;

    blkfix_init(&f, NULL);
    feat = virtio_blk_get_features(f.blk);
    fill(w, sizeof(w), 7);
    g_assert_cmpuint(blkfix_do(&f, VIRTIO_BLK_T_OUT, 5, w, 512, NULL), ==, VIRTIO_BLK_S_OK);
    /* One request in flight on the old owner: hand-over must wait for it. */
    f.defer = true;
    a = testblk_submit(f.tvq, VIRTIO_BLK_T_IN, 5, NULL, 512, false);
    blkfix_run(&f);
    virtqueue_get_state(f.vq, &st);
    vq2 = virtqueue_new(testdrv_guestmem(f.drv), 16, testvq_desc_gpa(f.tvq),
                        testvq_avail_gpa(f.tvq), testvq_used_gpa(f.tvq), feat, NULL);
    g_assert_cmpuint(virtqueue_inflight(f.vq), ==, 1);
    blkfix_complete_deferred(&f, 0); /* drain */
    g_assert_true(virtio_blk_queue_flush(f.q));
    g_assert_cmpuint(blkfix_used_len(&f, a.head), ==, 513);
    virtqueue_get_state(f.vq, &st);
    g_assert_cmpuint(st.last_avail_idx, ==, 2);
    g_assert_cmpuint(st.used_idx, ==, 2);
    g_assert(virtqueue_set_state(vq2, &st));
    q2 = virtio_blk_queue_new(f.blk, vq2, &hold_ops, NULL, NULL);
    /* Request queued "during the switch" is picked up by the new owner. */
    b = testblk_submit(f.tvq, VIRTIO_BLK_T_IN, 5, NULL, 512, false);
    nheld = 0;
    g_assert_cmpuint(virtio_blk_handle_queue(q2), ==, 1);
    g_assert_cmpuint(nheld, ==, 1);
    g_assert_cmpuint(held[0]->op, ==, VIRTIO_BLK_OP_READ);
    g_assert_cmpuint(held[0]->offset, ==, 5 * 512);
    memcpy(held[0]->iov[0].iov_base, w, 512); /* the new executor "reads" */
    virtio_blk_req_complete(held[0], 0);
    g_assert_true(virtio_blk_queue_flush(q2));
    g_assert_cmpuint(blkfix_used_len(&f, b.head), ==, 513);
    g_assert_cmpuint(testblk_status(f.tvq, &b), ==, VIRTIO_BLK_S_OK);
    virtio_blk_queue_free(q2);
    virtqueue_free(vq2);
    blkfix_cleanup(&f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/virtio-blk/conf/properties", test_conf_props);
    g_test_add_func("/virtio-blk/conf/validate", test_conf_validate);
    g_test_add_func("/virtio-blk/features", test_features);
    g_test_add_func("/virtio-blk/config-space", test_config_space);
    g_test_add_func("/virtio-blk/qtest/basic", test_write_read);
    g_test_add_func("/virtio-blk/qtest/indirect", test_indirect);
    g_test_add_func("/virtio-blk/qtest/idx", test_event_idx);
    g_test_add_func("/virtio-blk/qtest/nonexistent-queue", test_nonexistent_queue);
    g_test_add_func("/virtio-blk/get-id", test_get_id);
    g_test_add_func("/virtio-blk/get-id-20", test_get_id_full_serial);
    g_test_add_func("/virtio-blk/flush-discard-wz", test_flush_discard_wz);
    g_test_add_func("/virtio-blk/any-layout", test_any_layout);
    g_test_add_func("/virtio-blk/region-crossing", test_region_crossing);
    g_test_add_func("/virtio-blk/deferred-errors", test_deferred_errors);
    g_test_add_func("/virtio-blk/pool-full", test_pool_full);
    g_test_add_func("/virtio-blk/readonly-lbs", test_readonly_and_lbs);
    g_test_add_func("/virtio-blk/handoff", test_handoff);
    return g_test_run();
}
