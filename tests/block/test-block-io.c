/*
 * Block layer I/O tests: null nodes, byte-exact misaligned vectored I/O on
 * O_DIRECT files with every aio mode, RMW under concurrent overlapping
 * sub-block writes, a 4 KiB-sector loop device, cache-mode flush counts,
 * discard / write-zeroes, raw offset/size windows, truncate.
 */
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blocktest.h"

#define FILE_SIZE (1u << 20)

static BlockNode *file_node(BlockBackend *blk)
{
    BlockNode *bs = blk_find_node(blk, blk_root_node_name(blk));

    while (blk_node_get_child(bs)) {
        bs = blk_node_get_child(bs);
    }
    return bs;
}

static void read_host(const char *path, uint8_t *buf, size_t len)
{
    int fd = open(path, O_RDONLY);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(pread(fd, buf, len, 0), ==, (ssize_t)len);
    close(fd);
}

/* ---- null ---- */

static void test_null(void)
{
    BlockBackend *blk = bt_blockdev("driver=null-co,size=1M,read-zeroes=on,node-name=n0");
    uint8_t buf[4096];

    g_assert_cmpint(blk_getlength(blk), ==, 1 << 20);
    g_assert_cmpstr(blk_root_node_name(blk), ==, "n0");
    g_assert_cmpstr(blk_root_driver_name(blk), ==, "null-co");
    memset(buf, 0xaa, sizeof(buf));
    g_assert_cmpint(bt_read(blk, 4096, buf, sizeof(buf)), ==, 0);
    for (size_t i = 0; i < sizeof(buf); i++) {
        g_assert_cmpint(buf[i], ==, 0);
    }
    g_assert_cmpint(bt_write(blk, 0, buf, sizeof(buf)), ==, 0);
    g_assert_cmpint(bt_flush(blk), ==, 0);
    /* past the end: invalid, -EIO */
    g_assert_cmpint(bt_read(blk, (1 << 20) - 512, buf, 1024), ==, -EIO);
    blk_unref(blk);

    /* read-zeroes=off (the default) leaves the buffer as it was */
    blk = bt_drive("file=null-aio://,format=raw");
    g_assert_cmpint(blk_getlength(blk), ==, 1 << 30);
    memset(buf, 0x5a, sizeof(buf));
    g_assert_cmpint(bt_read(blk, 0, buf, 512), ==, 0);
    g_assert_cmpint(buf[0], ==, 0x5a);
    blk_unref(blk);

    /* latency-ns delays completion */
    blk = bt_blockdev("driver=null-aio,latency-ns=20000000");
    {
        int64_t t0 = event_clock_ns();

        g_assert_cmpint(bt_read(blk, 0, buf, 512), ==, 0);
        g_assert_cmpint(event_clock_ns() - t0, >=, 20000000);
    }
    blk_unref(blk);
}

/* ---- misaligned vectored I/O against a shadow copy ---- */

typedef struct RandIo {
    uint8_t *mem; /* backing memory for the iovecs, deliberately odd addresses */
    struct iovec iov[8];
    int niov;
    uint64_t off, len;
    BtDone d;
} RandIo;

static void randio_build(RandIo *r, GRand *rnd, uint64_t off, uint64_t len)
{
    uint64_t left = len;
    uint8_t *p;

    r->off = off;
    r->len = len;
    r->mem = g_malloc(len + 64);
    p = r->mem + g_rand_int_range(rnd, 0, 7); /* misaligned base */
    r->niov = 0;
    while (left) {
        uint64_t pick = (uint64_t)g_rand_int_range(rnd, 1, 3000); /* MIN() evaluates twice */
        uint64_t n = r->niov == 7 ? left : MIN(left, pick);

        r->iov[r->niov++] = (struct iovec){p, n};
        p += n;
        left -= n;
    }
}

static void misaligned_on(const char *path, const char *mode_opts, bool check_bounce)
{
    BlockBackend *blk = bt_drive("file=%s,format=raw,%s", path, mode_opts);
    uint8_t *shadow = g_malloc(FILE_SIZE);
    uint8_t *host = g_malloc(FILE_SIZE);
    GRand *rnd = g_rand_new_with_seed(42);
    BlockNodeStats st;
    enum { BATCH = 16 };

    read_host(path, shadow, FILE_SIZE);
    for (int round = 0; round < 40; round++) {
        RandIo io[BATCH];
        bool write = round % 2 == 0;

        /* each batch: disjoint ranges (one 64 KiB slot each), run concurrently */
        for (int i = 0; i < BATCH; i++) {
            uint64_t slot = (uint64_t)g_rand_int_range(rnd, 0, FILE_SIZE / 65536);
            uint64_t off = slot * 65536 + (uint64_t)g_rand_int_range(rnd, 0, 4096);
            uint64_t len = (uint64_t)g_rand_int_range(rnd, 1, 60000);

            randio_build(&io[i], rnd, off, len);
            io[i].d = (BtDone){0};
            for (int j = 0; j < i; j++) {
                if (io[j].off / 65536 == slot) {
                    io[i].len = 0; /* same slot: skip this one */
                }
            }
            if (!io[i].len) {
                io[i].d.done = true;
                continue;
            }
            if (write) {
                uint64_t k = 0;

                for (int v = 0; v < io[i].niov; v++) {
                    uint8_t *b = io[i].iov[v].iov_base;

                    for (size_t x = 0; x < io[i].iov[v].iov_len; x++, k++) {
                        b[x] = (uint8_t)g_rand_int(rnd);
                        shadow[off + k] = b[x];
                    }
                }
                blk_aio_pwritev(blk, off, io[i].iov, io[i].niov, len, 0, bt_cb, &io[i].d);
            } else {
                blk_aio_preadv(blk, off, io[i].iov, io[i].niov, len, 0, bt_cb, &io[i].d);
            }
        }
        for (int i = 0; i < BATCH; i++) {
            bt_wait(&io[i].d);
            g_assert_cmpint(io[i].d.ret, ==, 0);
            if (!write && io[i].len) {
                uint64_t k = 0;

                for (int v = 0; v < io[i].niov; v++) {
                    g_assert_cmpmem(io[i].iov[v].iov_base, io[i].iov[v].iov_len,
                                    shadow + io[i].off + k, io[i].iov[v].iov_len);
                    k += io[i].iov[v].iov_len;
                }
            }
            g_free(io[i].mem);
        }
    }
    g_assert_cmpint(bt_flush(blk), ==, 0);
    read_host(path, host, FILE_SIZE);
    g_assert_cmpmem(host, FILE_SIZE, shadow, FILE_SIZE);
    blk_node_get_stats(file_node(blk), &st);
    if (check_bounce) {
        /* O_DIRECT: odd addresses and sub-block ranges must have bounced */
        g_assert_cmpuint(blk_get_request_alignment(blk), >=, 512);
        g_assert_cmpuint(blk_get_opt_mem_alignment(blk), >=, 4096);
        blk_node_get_stats(blk_find_node(blk, blk_root_node_name(blk)), &st);
        g_assert_cmpuint(st.bounced, >, 0);
        g_assert_cmpuint(st.rmw, >, 0);
    }
    g_rand_free(rnd);
    g_free(shadow);
    g_free(host);
    blk_unref(blk);
}

static void misaligned_case(const char *mode_opts, bool check_bounce)
{
    char *path = bt_scratch_file(FILE_SIZE, 3);

    misaligned_on(path, mode_opts, check_bounce);
    bt_remove(path);
}

static void test_misaligned_threads(void)
{
    misaligned_case("cache=none,aio=threads", true);
}

static void test_misaligned_native(void)
{
    misaligned_case("cache=none,aio=native", true);
}

static void test_misaligned_uring(void)
{
    misaligned_case("cache=none,aio=io_uring", true);
}

static void test_misaligned_buffered(void)
{
    misaligned_case("cache=writeback,aio=threads", false);
}

/* blkdebug align=4096 over a buffered file: RMW without O_DIRECT. */
static void test_misaligned_blkdebug_align(void)
{
    char *path = bt_scratch_file(FILE_SIZE, 9);
    BlockBackend *blk = bt_blockdev("driver=blkdebug,align=4096,image.driver=file,"
                                    "image.filename=%s",
                                    path);
    uint8_t buf[700], host[8192], want[8192];

    g_assert_cmpuint(blk_get_request_alignment(blk), ==, 4096);
    read_host(path, want, sizeof(want));
    memset(buf, 0xc3, sizeof(buf));
    g_assert_cmpint(bt_write(blk, 4000, buf, sizeof(buf)), ==, 0); /* crosses a block */
    memcpy(want + 4000, buf, sizeof(buf));
    read_host(path, host, sizeof(host));
    g_assert_cmpmem(host, sizeof(host), want, sizeof(want));
    g_assert_cmpint(bt_read(blk, 3999, buf, sizeof(buf)), ==, 0);
    g_assert_cmpmem(buf, sizeof(buf), want + 3999, sizeof(buf));
    blk_unref(blk);
    bt_remove(path);
}

/* ---- RMW under concurrent overlapping sub-block writes ---- */

static void rmw_concurrent_case(const char *opts_fmt, const char *path, uint32_t expect_align)
{
    BlockBackend *blk = bt_drive(opts_fmt, path);
    enum { N = 64 };
    uint8_t *bufs = g_malloc(N * 512);
    uint8_t *rd = g_malloc(N * 512);
    BtDone d[N] = {{0}};
    struct iovec iov[N];
    BlockNodeStats st;

    g_assert_cmpuint(blk_get_request_alignment(blk), ==, expect_align);
    /* 64 writes of 512 bytes into the same 4 KiB blocks, interleaved, all at once */
    for (int i = 0; i < N; i++) {
        int sector = (i % 8) * 8 + i / 8; /* 8 blocks, each hit by 8 writes in turn */

        memset(bufs + i * 512, i + 1, 512);
        iov[i] = (struct iovec){bufs + i * 512, 512};
        blk_aio_pwritev(blk, (uint64_t)sector * 512, &iov[i], 1, 512, 0, bt_cb, &d[i]);
    }
    bt_wait_all(d, N);
    for (int i = 0; i < N; i++) {
        g_assert_cmpint(d[i].ret, ==, 0);
    }
    g_assert_cmpint(bt_read(blk, 0, rd, N * 512), ==, 0);
    for (int i = 0; i < N; i++) {
        int sector = (i % 8) * 8 + i / 8;

        for (int k = 0; k < 512; k++) {
            g_assert_cmpint(rd[sector * 512 + k], ==, i + 1);
        }
    }
    /* the top node pads (it inherits the file's alignment); the file sees aligned I/O */
    blk_node_get_stats(blk_find_node(blk, blk_root_node_name(blk)), &st);
    g_assert_cmpuint(st.rmw, >=, N);
    g_assert_cmpuint(st.serialised_waits, >, 0);
    blk_unref(blk);
    g_free(bufs);
    g_free(rd);
}

static void test_rmw_concurrent(void)
{
    char *path = bt_scratch_file(FILE_SIZE, 1);
    BlockBackend *probe = bt_drive("file=%s,cache=none", path);
    uint32_t align = blk_get_request_alignment(probe);

    blk_unref(probe);
    if (align < 4096) {
        /* the filesystem takes 512-byte O_DIRECT: force 4 KiB with blkdebug instead */
        GError *err = NULL;
        g_autofree char *o = g_strdup_printf("driver=blkdebug,align=4096,image.driver=file,"
                                             "image.filename=%s,cache.direct=on",
                                             path);
        GHashTable *t = blk_opts_parse(o);
        BlockBackend *blk = blk_new_from_blockdev_opts(t, bt_loop, &err);
        enum { N = 64 };
        uint8_t *bufs = g_malloc(N * 512), *rd = g_malloc(N * 512);
        BtDone d[N] = {{0}};
        struct iovec iov[N];
        BlockNodeStats st;

        g_hash_table_destroy(t);
        g_assert_no_error(err);
        for (int i = 0; i < N; i++) {
            int sector = (i % 8) * 8 + i / 8;

            memset(bufs + i * 512, i + 1, 512);
            iov[i] = (struct iovec){bufs + i * 512, 512};
            blk_aio_pwritev(blk, (uint64_t)sector * 512, &iov[i], 1, 512, 0, bt_cb, &d[i]);
        }
        bt_wait_all(d, N);
        g_assert_cmpint(bt_read(blk, 0, rd, N * 512), ==, 0);
        for (int i = 0; i < N; i++) {
            int sector = (i % 8) * 8 + i / 8;

            g_assert_cmpint(d[i].ret, ==, 0);
            g_assert_cmpint(rd[sector * 512], ==, i + 1);
            g_assert_cmpint(rd[sector * 512 + 511], ==, i + 1);
        }
        blk_node_get_stats(blk_find_node(blk, blk_root_node_name(blk)), &st);
        g_assert_cmpuint(st.rmw, >=, N);
        g_assert_cmpuint(st.serialised_waits, >, 0);
        blk_unref(blk);
        g_free(bufs);
        g_free(rd);
    } else {
        rmw_concurrent_case("file=%s,cache=none,aio=threads", path, align);
    }
    bt_remove(path);
}

/* ---- loop device with 4 KiB logical blocks ---- */

static char *losetup_4k(const char *path)
{
    g_autofree char *cmd =
        g_strdup_printf("losetup --sector-size 4096 -f --show %s 2>/dev/null", path);
    char *out = NULL;
    int status = -1;

    char *argv[] = {"sh", "-c", cmd, NULL};

    if (!g_spawn_sync(NULL, argv, NULL, G_SPAWN_SEARCH_PATH, NULL, NULL, &out, NULL, &status,
                      NULL) ||
        status != 0 || !out || !g_str_has_prefix(out, "/dev/loop")) {
        g_free(out);
        return NULL;
    }
    g_strchomp(out);
    return out;
}

static void test_loop4k(void)
{
    char *path = bt_scratch_file(FILE_SIZE, 5);
    char *dev = losetup_4k(path);
    g_autofree char *detach = NULL;

    if (!dev) {
        g_test_skip("losetup --sector-size 4096 unavailable (needs root and loop devices)");
        bt_remove(path);
        return;
    }
    detach = g_strdup_printf("losetup -d %s", dev);
    {
        BlockBackend *blk = bt_drive("file=%s,cache=none,aio=native", dev);

        g_assert_cmpstr(blk_node_get_driver(file_node(blk)), ==, "host_device");
        g_assert_cmpuint(blk_get_request_alignment(blk), ==, 4096);
        blk_unref(blk);
    }
    rmw_concurrent_case("file=%s,cache=none,aio=native", dev, 4096);
    misaligned_on(dev, "cache=none,aio=io_uring", true);
    misaligned_on(dev, "cache=none,aio=threads", true);
    g_spawn_command_line_sync(detach, NULL, NULL, NULL, NULL);
    g_free(dev);
    bt_remove(path);
}

/* ---- cache modes and flushes ---- */

static void flush_case(const char *cache, const char *aio, bool wce, uint64_t flushes,
                       uint64_t skipped)
{
    char *path = bt_scratch_file(65536, 2);
    BlockBackend *blk = bt_drive("file=%s,cache=%s,aio=%s", path, cache, aio);
    uint8_t *buf = aligned_alloc(4096, 4096);
    BlockNodeStats st;

    memset(buf, 0x11, 4096);
    g_assert_cmpint(blk_enable_write_cache(blk), ==, wce);
    for (int i = 0; i < 4; i++) {
        g_assert_cmpint(bt_write(blk, (uint64_t)i * 4096, buf, 4096), ==, 0);
    }
    g_assert_cmpint(bt_flush(blk), ==, 0);
    blk_node_get_stats(file_node(blk), &st);
    g_assert_cmpuint(st.writes, ==, 4);
    g_assert_cmpuint(st.flushes, ==, flushes);
    g_assert_cmpuint(st.flushes_skipped, ==, skipped);
    free(buf);
    blk_unref(blk);
    bt_remove(path);
}

static void test_cache_modes(void)
{
    static const char *const aios[] = {"threads", "io_uring"};

    for (unsigned i = 0; i < G_N_ELEMENTS(aios); i++) {
        flush_case("writeback", aios[i], true, 1, 0);
        flush_case("none", aios[i], true, 1, 0);
        flush_case("writethrough", aios[i], false, 5, 0); /* one per write + the flush */
        flush_case("directsync", aios[i], false, 5, 0);
        flush_case("unsafe", aios[i], true, 0, 1);
    }
    flush_case("none", "native", true, 1, 0);
    flush_case("directsync", "native", false, 5, 0);
}

/* ---- discard, write zeroes, raw window, truncate ---- */

static void test_discard_zeroes(void)
{
    char *path = bt_scratch_file(FILE_SIZE, 7);
    BlockBackend *blk = bt_drive("file=%s,discard=unmap", path);
    BlockBackend *ign;
    uint8_t buf[8192], host[8192];
    BtDone d = {0};

    blk_aio_pwrite_zeroes(blk, 4096, 8192, 0, bt_cb, &d);
    bt_wait(&d);
    g_assert_cmpint(d.ret, ==, 0);
    g_assert_cmpint(bt_read(blk, 4096, buf, sizeof(buf)), ==, 0);
    for (size_t i = 0; i < sizeof(buf); i++) {
        g_assert_cmpint(buf[i], ==, 0);
    }
    d = (BtDone){0};
    blk_aio_pdiscard(blk, 65536, 8192, bt_cb, &d);
    bt_wait(&d);
    g_assert_cmpint(d.ret, ==, 0);
    {
        int fd = open(path, O_RDONLY);

        g_assert_cmpint(pread(fd, host, sizeof(host), 65536), ==, sizeof(host));
        close(fd);
        for (size_t i = 0; i < sizeof(host); i++) {
            g_assert_cmpint(host[i], ==, 0); /* hole punched */
        }
    }
    blk_unref(blk);

    /* discard=ignore (default): data stays */
    ign = bt_drive("file=%s", path);
    d = (BtDone){0};
    blk_aio_pdiscard(ign, 131072, 8192, bt_cb, &d);
    bt_wait(&d);
    g_assert_cmpint(d.ret, ==, 0);
    g_assert_cmpint(bt_read(ign, 131072, buf, 4096), ==, 0);
    {
        bool nonzero = false;

        for (size_t i = 0; i < 4096; i++) {
            nonzero |= buf[i] != 0;
        }
        g_assert_true(nonzero);
    }
    blk_unref(ign);
    bt_remove(path);
}

static void test_raw_window(void)
{
    char *path = bt_scratch_file(65536, 4);
    BlockBackend *blk = bt_blockdev("driver=raw,offset=4096,size=8192,file.driver=file,"
                                    "file.filename=%s",
                                    path);
    uint8_t buf[512], host[65536];
    g_autofree char *e1 = NULL, *o1 = NULL;
    GError *err = NULL;

    read_host(path, host, sizeof(host));
    g_assert_cmpint(blk_getlength(blk), ==, 8192);
    g_assert_cmpint(bt_read(blk, 512, buf, sizeof(buf)), ==, 0);
    g_assert_cmpmem(buf, sizeof(buf), host + 4096 + 512, sizeof(buf));
    g_assert_cmpint(bt_read(blk, 8192 - 256, buf, sizeof(buf)), ==, -EIO);
    g_assert_false(blk_truncate(blk, 16384, &err));
    g_assert_cmpstr(err->message, ==, "Cannot resize fixed-size raw disks");
    g_clear_error(&err);
    blk_unref(blk);

    o1 = g_strdup_printf("driver=raw,offset=70000,file.driver=file,file.filename=%s", path);
    e1 = bt_blockdev_err(o1);
    g_assert_cmpstr(e1, ==, "The offset has to be smaller than the file size");

    /* truncate through a plain raw */
    blk = bt_drive("file=%s", path);
    g_assert_true(blk_truncate(blk, 131072, &err));
    g_assert_no_error(err);
    g_assert_cmpint(blk_getlength(blk), ==, 131072);
    g_assert_cmpint(bt_read(blk, 131072 - 512, buf, 512), ==, 0);
    /* QMP's size as given: negative or not a multiple of 512 is refused, size unchanged */
    g_assert_false(blk_truncate(blk, -512, &err));
    g_assert_cmpstr(err->message, ==, "Parameter 'size' expects a non-negative multiple of 512");
    g_clear_error(&err);
    g_assert_false(blk_truncate(blk, 131072 + 100, &err));
    g_assert_cmpstr(err->message, ==, "Parameter 'size' expects a non-negative multiple of 512");
    g_clear_error(&err);
    g_assert_cmpint(blk_getlength(blk), ==, 131072);
    blk_unref(blk);
    blk = bt_drive("file=%s,readonly=on", path);
    g_assert_cmpint(bt_write(blk, 0, buf, 512), ==, -EPERM);
    g_assert_false(blk_truncate(blk, 4096, &err));
    g_clear_error(&err);
    blk_unref(blk);
    bt_remove(path);
}

/* A callback that issues the next request at once must not starve the loop. */
typedef struct Chain {
    BlockBackend *blk;
    struct iovec iov;
    bool stop;
    uint64_t done;
} Chain;

static void chain_cb(void *opaque, int ret)
{
    Chain *c = opaque;

    g_assert_cmpint(ret, ==, 0);
    c->done++;
    if (!c->stop) {
        blk_aio_preadv(c->blk, 0, &c->iov, 1, 4096, 0, chain_cb, c);
    }
}

static void test_resubmit_from_callback(void)
{
    static const char *const aios[] = {"io_uring", "native", "threads"};
    char *path = bt_scratch_file(65536, 8);

    for (unsigned i = 0; i < G_N_ELEMENTS(aios); i++) {
        Chain c[8];
        BtDone tick = {0};
        BlockBackend *blk = bt_drive("file=%s,cache=none,aio=%s", path, aios[i]);
        BlockBackend *other = bt_blockdev("driver=null-aio,latency-ns=50000000");
        uint8_t tmp[512];
        struct iovec iov = {tmp, 512};
        void *mem = aligned_alloc(4096, 8 * 4096);

        for (int k = 0; k < 8; k++) {
            c[k] = (Chain){.blk = blk, .iov = {(uint8_t *)mem + k * 4096, 4096}};
            blk_aio_preadv(blk, 0, &c[k].iov, 1, 4096, 0, chain_cb, &c[k]);
        }
        /* a timer-driven request elsewhere still completes while the chain runs */
        blk_aio_preadv(other, 0, &iov, 1, 512, 0, bt_cb, &tick);
        bt_wait(&tick);
        /*
         * The tick completed while the chains kept resubmitting: the loop was
         * not starved. Each chain has made progress too, or makes it now (on a
         * loaded host its first read may take longer than the tick's 50 ms:
         * wait for it, bounded, rather than time it).
         */
        for (int k = 0; k < 8; k++) {
            int64_t deadline = event_clock_ns() + 10 * 1000000000LL;

            while (!c[k].done && event_clock_ns() < deadline) {
                event_loop_run_once(bt_loop, true);
            }
            g_assert_cmpuint(c[k].done, >, 0);
        }
        for (int k = 0; k < 8; k++) {
            c[k].stop = true;
        }
        blk_drain(blk);
        blk_unref(other);
        blk_unref(blk);
        free(mem);
    }
    bt_remove(path);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    bt_init();
    g_test_add_func("/block/null", test_null);
    g_test_add_func("/block/misaligned/threads", test_misaligned_threads);
    g_test_add_func("/block/misaligned/native", test_misaligned_native);
    g_test_add_func("/block/misaligned/io_uring", test_misaligned_uring);
    g_test_add_func("/block/misaligned/buffered", test_misaligned_buffered);
    g_test_add_func("/block/misaligned/blkdebug-align", test_misaligned_blkdebug_align);
    g_test_add_func("/block/rmw/concurrent", test_rmw_concurrent);
    g_test_add_func("/block/loop4k", test_loop4k);
    g_test_add_func("/block/cache-modes", test_cache_modes);
    g_test_add_func("/block/discard-zeroes", test_discard_zeroes);
    g_test_add_func("/block/raw-window", test_raw_window);
    g_test_add_func("/block/resubmit-from-callback", test_resubmit_from_callback);
    return g_test_run();
}
