/*
 * A virtio-blk device on an NBD disk, both request paths and the switch,
 * in-process: the test driver plays the guest, the request engine runs on
 * the dataplane's "nbd" IOQ (its own connection, polled in the iothread)
 * and on the block layer's nbd node. Servers: nbdkit (memory, unix socket)
 * and qemu-nbd (file, 127.0.0.1), started by the test.
 *
 * Checked: what one path wrote the other reads back, with multi-descriptor
 * requests (bounced into one NBD command); FLUSH, WRITE_ZEROES and DISCARD;
 * writes in flight across twenty switches all complete once and land; a
 * server killed under the dataplane gives IOERR (werror=report, no
 * reconnect-delay) and the dataplane works again once it is back; with a
 * reconnect-delay the dataplane's requests wait for the server instead.
 * And (poison) that the device never writes to guest memory after it has
 * completed the request that lent it: QD32 of random reads and writes over a
 * pool of poisoned buffers, on the dataplane, across switches every 5 ms and
 * across server kills, each head used once.
 * Skips, saying so, without nbdkit / qemu-nbd.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <endian.h>
#include <inttypes.h>
#include <linux/virtio_blk.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nbdserver.h"
#include "pathfix.h"

typedef struct Fix {
    NbdServer srv;
    PathFix p;
} Fix;

/* @pool: the dataplane's bounce pool in bytes (0: pathfix_init's). */
static void fix_init_pool(Fix *f, NbdServerKind kind, bool tcp, const char *extra, bool dataplane,
                          size_t pool)
{
    g_autofree char *opts = g_strdup_printf("file=%%s,format=raw,cache=writeback%s", extra);

    nbd_server_start(&f->srv, kind, tcp, PATHFIX_SIZE);
    if (pool) {
        pathfix_init_pool(&f->p, opts, f->srv.uri, "nbd-io", dataplane, 400000, pool);
    } else {
        pathfix_init(&f->p, opts, f->srv.uri, "nbd-io", dataplane, 400000);
    }
    g_assert_true(f->p.dev.hi.nbd);
    g_assert_cmpstr(f->p.dev.swconf.ioq.engine, ==, "nbd");
}

static void fix_init(Fix *f, NbdServerKind kind, bool tcp, const char *extra, bool dataplane)
{
    fix_init_pool(f, kind, tcp, extra, dataplane, 0);
}

static void fix_free(Fix *f)
{
    pathfix_free(&f->p);
    nbd_server_free(&f->srv);
}

typedef struct Case {
    NbdServerKind kind;
    bool tcp;
} Case;

static void test_paths(gconstpointer data)
{
    const Case *c = data;
    Fix f;
    IOQStats is;

    if (!nbd_server_need(c->kind)) {
        return;
    }
    fix_init(&f, c->kind, c->tcp, "", true);
    pathfix_check_paths(&f.p, &is);
    g_assert_cmpuint(is.bounces, >, 0); /* the multi-descriptor requests */
    fix_free(&f);
}

/* Writes in flight while the device switches, twenty times. */
static void test_switch_inflight(gconstpointer data)
{
    const Case *c = data;
    Fix f;

    if (!nbd_server_need(c->kind)) {
        return;
    }
    fix_init(&f, c->kind, c->tcp, "", false);
    pathfix_check_switch_inflight(&f.p);
    fix_free(&f);
}

static void kill_or_restart(bool down, void *opaque)
{
    Fix *f = opaque;

    if (down) {
        nbd_server_kill(&f->srv);
    } else {
        nbd_server_restart(&f->srv, PATHFIX_SIZE);
    }
}

/* The server dies under the dataplane: IOERR (no reconnect-delay), then it comes back. */
static void test_dataplane_kill(void)
{
    Fix f;

    if (!nbd_server_need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    fix_init(&f, NBD_SRV_QEMU_NBD, false, ",werror=report", true);
    pathfix_check_outage(&f.p, kill_or_restart, &f, 50, 100000);
    fix_free(&f);
}

/* reconnect-delay: the dataplane's requests wait for the server, then succeed. */
static void test_dataplane_reconnect(void)
{
    uint8_t w[4096], r[4096];
    uint64_t wb, rb;
    int hd;
    Fix f;

    if (!nbd_server_need(NBD_SRV_QEMU_NBD)) {
        return;
    }
    fix_init(&f, NBD_SRV_QEMU_NBD, true, ",werror=report,reconnect-delay=10", true);
    wb = testdrv_alloc(f.p.dev.d, 4096, 4096);
    rb = testdrv_alloc(f.p.dev.d, 4096, 4096);
    pathfix_pattern(w, sizeof(w), 11);
    testdrv_memwrite(f.p.dev.d, wb, w, sizeof(w));
    nbd_server_kill(&f.srv);
    hd = pathfix_submit(&f.p, VIRTIO_BLK_T_OUT, 24, wb, 4096, 1);
    testvq_kick(f.p.dev.tvq[0]);
    g_usleep(500000);
    nbd_server_restart(&f.srv, PATHFIX_SIZE);
    g_assert_cmpuint(pathfix_wait(&f.p, hd), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(pathfix_req(&f.p, VIRTIO_BLK_T_IN, 24, rb, 4096, 1), ==, VIRTIO_BLK_S_OK);
    testdrv_memread(f.p.dev.d, rb, r, sizeof(r));
    g_assert_cmpmem(r, sizeof(r), w, sizeof(w));
    fix_free(&f);
}

/*
 * ---- poison: does the device write to guest memory it has given back? ----
 *
 * The guest keeps PZ_NBUF buffers (4 x the queue depth) in guest RAM and
 * takes them first in, first out. It keeps PZ_QD random reads and writes
 * of 4..64 KiB in flight (one data descriptor or two to four, direct or
 * indirect, the segments spread over the buffer with poisoned gaps) over a
 * disk whose every sector holds a pattern naming the sector and the write
 * that left it. A used request is checked (status; a read's data, and the
 * gaps and the tail of its buffer still poisoned), then its whole buffer and
 * status byte are filled with poison and the buffer goes to the back of the
 * pool; before the buffer is used again, and once more after the run, the
 * poison must be intact: a changed byte is a write the device made after
 * it completed the request (reported with the buffer offset and the request
 * that last used the buffer). Every head must be used exactly once.
 * Findings are counted and the first few described; the case fails at the
 * end if there were any.
 */
enum {
    PZ_QD = 32,
    PZ_NBUF = 4 * PZ_QD,
    PZ_MAXLEN = 64 * 1024,
    PZ_BUFSZ = PZ_MAXLEN + 4096, /* the segments plus gaps of up to 512 bytes each */
    PZ_SECTORS = PATHFIX_SIZE / 512,
    PZ_POISON = 0x5a,
    PZ_ST_POISON = 0xee,
    PZ_REPORT = 12, /* findings described */
};
#define PZ_UNKNOWN UINT32_MAX /* a sector whose last write failed */

typedef struct PzUse {
    uint64_t seq;
    uint32_t type;
    uint64_t sector;
    uint32_t len;
    uint32_t ver; /* a write's */
    unsigned nseg;
    uint32_t seg_off[4], seg_len[4];
    bool indirect;
    int head;
    uint8_t status;
    gint64 submit_us, done_us;
} PzUse;

typedef struct PzBuf {
    uint64_t gpa;  /* PZ_BUFSZ bytes */
    uint64_t meta; /* header (16 bytes), then the status byte */
    PzUse use;     /* the request using it now, or the last one */
    PzUse prev;    /* the one before */
} PzBuf;

typedef struct PzCase {
    NbdServerKind kind;
    bool tcp;
    const char *extra;  /* more -drive options */
    unsigned secs;      /* how long to run */
    unsigned switch_ms; /* switch paths this often (0: stay on the dataplane) */
    unsigned kill_ms;   /* kill the server this often (0: never) ... */
    unsigned down_ms;   /* ... and start it again this much later */
    bool ioerr_ok;      /* IOERR is an acceptable status (outage without reconnect-delay) */
    unsigned pool_kib;  /* the dataplane's bounce pool (0: 8 MiB) */
    bool block_layer;   /* start (and without switches stay) on the block layer */
} PzCase;

typedef struct Pz {
    Fix f;
    const PzCase *c;
    GRand *rng;
    gint64 t0;
    PzBuf buf[PZ_NBUF];
    unsigned freeq[PZ_NBUF], fq_head, fq_len;
    int by_head[PATHFIX_QSIZE]; /* the buffer of a head in flight, or -1 */
    uint32_t ver[PZ_SECTORS];
    uint8_t rd[PZ_SECTORS], wr[PZ_SECTORS]; /* requests in flight over a sector */
    uint32_t next_ver;
    unsigned inflight;
    uint64_t seq;
    uint8_t *tmp, *exp, *poison;
    uint64_t reads, writes, multi, ioerrs, switches, kills;
    uint64_t bad_data, bad_status, late, dup_used, findings;
} Pz;

static void pz_sector(uint8_t *p, uint64_t sector, uint32_t ver)
{
    for (unsigned j = 0; j < 512 / 8; j++) {
        uint64_t w = (sector << 40) ^ ((uint64_t)ver << 8) ^ j ^ 0x0101000000000000ull;

        memcpy(p + j * 8, &w, 8);
    }
}

static void G_GNUC_PRINTF(2, 3) pz_report(Pz *z, const char *fmt, ...)
{
    va_list ap;

    if (z->findings++ >= PZ_REPORT) {
        return;
    }
    va_start(ap, fmt);
    g_autofree char *msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_printerr("poison: %s\n", msg);
}

static const char *pz_describe(const PzUse *u, char *s, size_t n)
{
    int k =
        snprintf(s, n, "request #%" PRIu64 " (%s sector %" PRIu64 " len %u, head %d, %u seg%s%s",
                 u->seq, u->type == VIRTIO_BLK_T_IN ? "read" : "write", u->sector, u->len, u->head,
                 u->nseg, u->nseg > 1 ? "s" : "", u->indirect ? " indirect" : "");

    for (unsigned i = 0; i < u->nseg && k > 0 && (size_t)k < n; i++) {
        k += snprintf(s + k, n - k, "%s+%u/%u", i ? " " : " at ", u->seg_off[i], u->seg_len[i]);
    }
    if (k > 0 && (size_t)k < n) {
        snprintf(s + k, n - k, "; status %u, used %.3f s after submit, %.3f s ago)", u->status,
                 (u->done_us - u->submit_us) / 1e6, (g_get_monotonic_time() - u->done_us) / 1e6);
    }
    return s;
}

/* The buffer and its status byte still hold the poison the guest left there. */
static void pz_check_poison(Pz *z, unsigned bi, const char *when)
{
    PzBuf *b = &z->buf[bi];
    uint8_t st = testdrv_readb(z->f.p.dev.d, b->meta + 16);
    char d[512];

    testdrv_memread(z->f.p.dev.d, b->gpa, z->tmp, PZ_BUFSZ);
    if (memcmp(z->tmp, z->poison, PZ_BUFSZ)) {
        unsigned i = 0, j;

        while (z->tmp[i] == PZ_POISON) {
            i++;
        }
        for (j = i; j < PZ_BUFSZ && z->tmp[j] != PZ_POISON; j++) {
        }
        z->late++;
        pz_report(z,
                  "late write %s: buffer %u offset %u (%u bytes changed from there, "
                  "0x%02x...), last used by %s",
                  when, bi, i, j - i, z->tmp[i], pz_describe(&b->use, d, sizeof(d)));
    }
    if (st != PZ_ST_POISON) {
        z->late++;
        pz_report(z, "late status write %s: buffer %u status 0x%02x, last used by %s", when, bi, st,
                  pz_describe(&b->use, d, sizeof(d)));
    }
}

static void pz_poison(Pz *z, unsigned bi)
{
    testdrv_memset(z->f.p.dev.d, z->buf[bi].gpa, PZ_POISON, PZ_BUFSZ);
    testdrv_memset(z->f.p.dev.d, z->buf[bi].meta + 16, PZ_ST_POISON, 1);
}

static bool pz_range_free(Pz *z, uint64_t sector, unsigned n, bool write)
{
    for (unsigned s = 0; s < n; s++) {
        if (z->wr[sector + s] || (write && z->rd[sector + s])) {
            return false;
        }
    }
    return true;
}

/* Queue one random request from the front of the pool; false if none fits now. */
static bool pz_submit(Pz *z)
{
    TestVq *vq = z->f.p.dev.tvq[0];
    bool write = g_rand_int_range(z->rng, 0, 4) == 0;
    uint32_t len = 4096 * g_rand_int_range(z->rng, 1, PZ_MAXLEN / 4096 + 1);
    uint64_t sector = 0;
    bool ok = false;
    struct virtio_blk_outhdr h;
    TestBuf tb[6];
    unsigned bi, nb = 0, nsec = len / 512;
    PzUse *u;
    uint32_t off;
    int hd;

    for (int tries = 0; tries < 16 && !ok; tries++) {
        sector = 8ull * g_rand_int_range(z->rng, 0, (PZ_SECTORS - nsec) / 8 + 1);
        ok = pz_range_free(z, sector, nsec, write);
        if (!ok && write && tries >= 8) {
            write = false; /* reads only wait for writes */
        }
    }
    if (!ok || !z->fq_len || testvq_free_descs(vq) < 1) {
        return false;
    }
    bi = z->freeq[z->fq_head];
    pz_check_poison(z, bi, "before reuse");
    u = &z->buf[bi].use;
    z->buf[bi].prev = *u;
    *u = (PzUse){.seq = ++z->seq,
                 .type = write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN,
                 .sector = sector,
                 .len = len,
                 .nseg = g_rand_boolean(z->rng) ? 1 : g_rand_int_range(z->rng, 2, 5),
                 .submit_us = g_get_monotonic_time()};
    u->nseg = MIN(u->nseg, nsec);
    /* Split points at random sector boundaries, a gap of 0 or 512 bytes before each segment. */
    off = 0;
    for (unsigned i = 0, left = nsec; i < u->nseg; i++) {
        unsigned secs = i == u->nseg - 1
                            ? left
                            : (unsigned)g_rand_int_range(z->rng, 1, left - (u->nseg - 1 - i) + 1);

        off += 512 * g_rand_int_range(z->rng, 0, 2);
        u->seg_off[i] = off;
        u->seg_len[i] = secs * 512;
        off += secs * 512;
        left -= secs;
    }
    g_assert_cmpuint(off, <=, PZ_BUFSZ);
    if (write) {
        u->ver = ++z->next_ver;
        for (unsigned i = 0, s = 0; i < u->nseg; i++) {
            for (uint32_t o = 0; o < u->seg_len[i]; o += 512, s++) {
                pz_sector(z->exp + o, sector + s, u->ver);
            }
            testdrv_memwrite(z->f.p.dev.d, z->buf[bi].gpa + u->seg_off[i], z->exp, u->seg_len[i]);
        }
    }
    h = (struct virtio_blk_outhdr){.type = htole32(u->type), .sector = htole64(sector)};
    testdrv_memwrite(z->f.p.dev.d, z->buf[bi].meta, &h, sizeof(h));
    testdrv_memset(z->f.p.dev.d, z->buf[bi].meta + 16, 0xff, 1);
    tb[nb++] = (TestBuf){z->buf[bi].meta, 16, false};
    for (unsigned i = 0; i < u->nseg; i++) {
        tb[nb++] = (TestBuf){z->buf[bi].gpa + u->seg_off[i], u->seg_len[i], !write};
    }
    tb[nb++] = (TestBuf){z->buf[bi].meta + 16, 1, true};
    u->indirect = testvq_free_descs(vq) < nb + 8 || g_rand_int_range(z->rng, 0, 3) == 0;
    hd = u->indirect ? testvq_add_indirect(vq, tb, nb) : testvq_add_chain(vq, tb, nb);
    g_assert_cmpint(hd, >=, 0);
    g_assert_cmpint(hd, <, PATHFIX_QSIZE);
    g_assert_cmpint(z->by_head[hd], ==, -1); /* the driver's own bookkeeping */
    u->head = hd;
    z->by_head[hd] = (int)bi;
    for (unsigned s = 0; s < nsec; s++) {
        (write ? z->wr : z->rd)[sector + s]++;
    }
    z->fq_head = (z->fq_head + 1) % PZ_NBUF;
    z->fq_len--;
    z->inflight++;
    z->multi += u->nseg > 1;
    testvq_publish(vq, (uint16_t)hd);
    return true;
}

/* A used head: check what the device did, poison the buffer, back to the pool. */
static void pz_complete(Pz *z, uint16_t head, uint32_t used_len)
{
    PzBuf *b;
    PzUse *u;
    unsigned bi, nsec;
    bool write;
    char d[512], d2[512];

    if (head >= PATHFIX_QSIZE || z->by_head[head] < 0) {
        z->dup_used++;
        pz_report(z, "head %u used but not in flight (used twice?), len %u%s", head, used_len,
                  head < PATHFIX_QSIZE ? "" : " - out of range");
        return;
    }
    bi = (unsigned)z->by_head[head];
    z->by_head[head] = -1;
    b = &z->buf[bi];
    u = &b->use;
    u->done_us = g_get_monotonic_time();
    u->status = testdrv_readb(z->f.p.dev.d, b->meta + 16);
    write = u->type == VIRTIO_BLK_T_OUT;
    nsec = u->len / 512;
    if (u->status == VIRTIO_BLK_S_IOERR && z->c->ioerr_ok) {
        z->ioerrs++;
    } else if (u->status != VIRTIO_BLK_S_OK) {
        z->bad_status++;
        pz_report(z, "bad status: %s", pz_describe(u, d, sizeof(d)));
    }
    for (unsigned s = 0; s < nsec; s++) {
        if (write) {
            z->wr[u->sector + s]--;
            z->ver[u->sector + s] = u->status == VIRTIO_BLK_S_OK ? u->ver : PZ_UNKNOWN;
        } else {
            z->rd[u->sector + s]--;
        }
    }
    testdrv_memread(z->f.p.dev.d, b->gpa, z->tmp, PZ_BUFSZ);
    if (!write && u->status == VIRTIO_BLK_S_OK) {
        for (unsigned i = 0, s = 0; i < u->nseg; i++) {
            for (uint32_t o = 0; o < u->seg_len[i]; o += 512, s++) {
                uint32_t v = z->ver[u->sector + s];

                if (v == PZ_UNKNOWN) {
                    continue;
                }
                pz_sector(z->exp, u->sector + s, v);
                if (memcmp(z->tmp + u->seg_off[i] + o, z->exp, 512)) {
                    z->bad_data++;
                    pz_report(z,
                              "wrong data in sector %" PRIu64 " (segment %u +%u) of buffer %u: %s",
                              u->sector + s, i, o, bi, pz_describe(u, d, sizeof(d)));
                    i = u->nseg; /* one report a request */
                    break;
                }
            }
        }
    }
    if (!write) {
        /* Nothing outside the segments: the gaps and the tail keep their poison. */
        for (unsigned i = 0; i < u->nseg; i++) {
            memset(z->tmp + u->seg_off[i], PZ_POISON, u->seg_len[i]); /* checked above */
        }
        if (memcmp(z->tmp, z->poison, PZ_BUFSZ)) {
            unsigned i = 0;

            while (z->tmp[i] == PZ_POISON) {
                i++;
            }
            z->bad_data++;
            pz_report(z,
                      "write outside the segments at buffer %u offset %u: %s; "
                      "the buffer's previous user: %s",
                      bi, i, pz_describe(u, d, sizeof(d)), pz_describe(&b->prev, d2, sizeof(d2)));
        }
    }
    z->reads += !write;
    z->writes += write;
    pz_poison(z, bi);
    z->freeq[(z->fq_head + z->fq_len) % PZ_NBUF] = bi;
    z->fq_len++;
    z->inflight--;
}

static void pz_reap(Pz *z)
{
    uint16_t head;
    uint32_t len;

    while (testvq_get_used(z->f.p.dev.tvq[0], &head, &len)) {
        pz_complete(z, head, len);
    }
}

/* Serve the main loop (the block layer's path) for a moment and take what was used. */
static void pz_poll(Pz *z)
{
    testvq_kick(z->f.p.dev.tvq[0]);
    pz_reap(z);
    event_loop_run_once(z->f.p.dev.main_loop, false);
    g_usleep(20);
    pz_reap(z);
}

/* Every sector through the device: sector s holds pz_sector(s, 0). */
static void pz_fill_disk(Pz *z)
{
    uint64_t gpa = z->buf[0].gpa;

    for (uint64_t s = 0; s < PZ_SECTORS; s += PZ_MAXLEN / 512) {
        for (unsigned i = 0; i < PZ_MAXLEN / 512; i++) {
            pz_sector(z->exp + i * 512, s + i, 0);
        }
        testdrv_memwrite(z->f.p.dev.d, gpa, z->exp, PZ_MAXLEN);
        g_assert_cmpuint(pathfix_req(&z->f.p, VIRTIO_BLK_T_OUT, s, gpa, PZ_MAXLEN, 1), ==,
                         VIRTIO_BLK_S_OK);
    }
}

static void test_poison(gconstpointer data)
{
    const PzCase *c = data;
    g_autofree Pz *z = g_new0(Pz, 1);
    gint64 end, next_switch, next_kill, restart_at = 0, now, drain_end;
    GError *err = NULL;
    bool dataplane;
    guint32 seed;
    int secs;
    IOQStats is;

    if (!nbd_server_need(c->kind)) {
        return;
    }
    z->c = c;
    seed = g_test_rand_int(); /* from --seed; the run is timing-driven all the same */
    z->rng = g_rand_new_with_seed(seed);
    g_test_message("seed %u", seed);
    z->tmp = g_malloc(PZ_BUFSZ);
    z->exp = g_malloc(PZ_BUFSZ);
    z->poison = g_malloc(PZ_BUFSZ);
    memset(z->poison, PZ_POISON, PZ_BUFSZ);
    fix_init_pool(&z->f, c->kind, c->tcp, c->extra, !c->block_layer, (size_t)c->pool_kib << 10);
    for (unsigned i = 0; i < PZ_NBUF; i++) {
        z->buf[i].gpa = testdrv_alloc(z->f.p.dev.d, PZ_BUFSZ, 4096);
        z->buf[i].meta = testdrv_alloc(z->f.p.dev.d, 32, 16);
        z->buf[i].use.head = -1;
        z->freeq[i] = i;
    }
    z->fq_len = PZ_NBUF;
    for (unsigned i = 0; i < PATHFIX_QSIZE; i++) {
        z->by_head[i] = -1;
    }
    pz_fill_disk(z);
    for (unsigned i = 0; i < PZ_NBUF; i++) {
        pz_poison(z, i);
    }

    z->t0 = now = g_get_monotonic_time();
    /* VBLK_POISON_SECS=N: run each case N s instead (a soak by hand). */
    secs = g_getenv("VBLK_POISON_SECS") ? atoi(g_getenv("VBLK_POISON_SECS")) : 0;
    end = now + (gint64)(secs > 0 ? (unsigned)secs : c->secs) * G_USEC_PER_SEC;
    next_switch = c->switch_ms ? now + c->switch_ms * 1000 : G_MAXINT64;
    next_kill = c->kill_ms ? now + c->kill_ms * 1000 : G_MAXINT64;
    while ((now = g_get_monotonic_time()) < end) {
        while (z->inflight < PZ_QD && pz_submit(z)) {
        }
        pz_poll(z);
        if (now >= next_switch) {
            dataplane = dp_switch_is_dataplane(z->f.p.dev.sw);
            g_assert_true(dp_switch_set_dataplane(z->f.p.dev.sw, !dataplane, &err));
            g_assert_no_error(err);
            z->switches++;
            next_switch = now + c->switch_ms * 1000;
        }
        if (now >= next_kill) {
            nbd_server_kill(&z->f.srv);
            z->kills++;
            restart_at = now + c->down_ms * 1000;
            next_kill = now + c->kill_ms * 1000;
        }
        if (restart_at && now >= restart_at) {
            nbd_server_restart(&z->f.srv, PATHFIX_SIZE);
            restart_at = 0;
        }
    }
    if (restart_at) {
        nbd_server_restart(&z->f.srv, PATHFIX_SIZE);
    }
    /* Everything in flight comes back ... */
    drain_end = g_get_monotonic_time() + 15 * G_USEC_PER_SEC;
    while (z->inflight && g_get_monotonic_time() < drain_end) {
        pz_poll(z);
    }
    g_assert_cmpuint(z->inflight, ==, 0);
    /* ... and nothing more is used, nor written, a while later. */
    drain_end = g_get_monotonic_time() + 200 * 1000;
    while (g_get_monotonic_time() < drain_end) {
        pz_poll(z);
    }
    for (unsigned i = 0; i < PZ_NBUF; i++) {
        pz_check_poison(z, i, "after the run");
    }
    if (dp_switch_is_dataplane(z->f.p.dev.sw)) {
        dataplane_get_ioq_stats(dp_switch_dataplane(z->f.p.dev.sw), &is);
        g_test_message("the dataplane's IOQ: %" PRIu64 " submitted, %" PRIu64 " bounced",
                       is.submitted, is.bounces);
        if (!c->switch_ms && !c->kill_ms && !c->block_layer) {
            g_assert_cmpuint(is.bounces, >, 100); /* the multi-descriptor reads and writes */
        }
    }
    g_test_message("%.1f s: %" PRIu64 " reads, %" PRIu64 " writes (%" PRIu64
                   " multi-descriptor), %" PRIu64 " IOERR, %" PRIu64 " switches, %" PRIu64
                   " kills; findings: %" PRIu64 " late writes, %" PRIu64 " wrong data, %" PRIu64
                   " bad status, %" PRIu64 " heads used not in flight",
                   (g_get_monotonic_time() - z->t0) / 1e6, z->reads, z->writes, z->multi, z->ioerrs,
                   z->switches, z->kills, z->late, z->bad_data, z->bad_status, z->dup_used);
    if (z->findings) {
        g_printerr("poison: %" PRIu64 " late writes, %" PRIu64 " wrong data, %" PRIu64
                   " bad status, %" PRIu64 " heads used not in flight (%" PRIu64 " reads, %" PRIu64
                   " writes)\n",
                   z->late, z->bad_data, z->bad_status, z->dup_used, z->reads, z->writes);
    }
    g_assert_cmpuint(z->reads, >, 100);
    g_assert_cmpuint(z->late, ==, 0);
    g_assert_cmpuint(z->dup_used, ==, 0);
    g_assert_cmpuint(z->bad_data, ==, 0);
    g_assert_cmpuint(z->bad_status, ==, 0);
    if (c->switch_ms) {
        g_assert_cmpuint(z->switches, >, 10);
    }
    if (c->kill_ms) {
        g_assert_cmpuint(z->kills, >, 0);
    }
    fix_free(&z->f);
    g_rand_free(z->rng);
    g_free(z->tmp);
    g_free(z->exp);
    g_free(z->poison);
}

int main(int argc, char **argv)
{
    static const Case cases[] = {{NBD_SRV_NBDKIT, false}, {NBD_SRV_QEMU_NBD, true}};
    static const struct {
        const char *name;
        PzCase c;
    } pz[] = {
        {"/nbd-paths/poison/dataplane/nbdkit-unix", {NBD_SRV_NBDKIT, false, "", 3, .switch_ms = 0}},
        {"/nbd-paths/poison/dataplane/qemu-nbd-tcp",
         {NBD_SRV_QEMU_NBD, true, "", 3, .switch_ms = 0}},
        /* Two 64 KiB requests fill the pool: multi-descriptor ones wait for each other. */
        {"/nbd-paths/poison/small-pool/nbdkit-unix",
         {NBD_SRV_NBDKIT, false, "", 3, .pool_kib = 128}},
        /* The block layer's nbd node only: its reads land in guest memory too. */
        {"/nbd-paths/poison/block-layer/nbdkit-unix",
         {NBD_SRV_NBDKIT, false, "", 3, .block_layer = true}},
        {"/nbd-paths/poison/switch/nbdkit-unix", {NBD_SRV_NBDKIT, false, "", 3, .switch_ms = 5}},
        {"/nbd-paths/poison/switch/qemu-nbd-tcp", {NBD_SRV_QEMU_NBD, true, "", 3, .switch_ms = 5}},
        /* qemu-nbd keeps its file across a restart (nbdkit's memory would come back empty). */
        {"/nbd-paths/poison/kill/qemu-nbd-unix",
         {NBD_SRV_QEMU_NBD, false, ",werror=report,rerror=report", 4, .kill_ms = 700,
          .down_ms = 100, .ioerr_ok = true}},
        {"/nbd-paths/poison/kill-switch/qemu-nbd-unix",
         {NBD_SRV_QEMU_NBD, false, ",werror=report,rerror=report", 4, .switch_ms = 5,
          .kill_ms = 700, .down_ms = 100, .ioerr_ok = true}},
        {"/nbd-paths/poison/kill-reconnect/qemu-nbd-tcp",
         {NBD_SRV_QEMU_NBD, true, ",werror=report,rerror=report,reconnect-delay=10", 4,
          .kill_ms = 700, .down_ms = 100}},
    };

    g_test_init(&argc, &argv, NULL);
    g_test_add_data_func("/nbd-paths/rw/nbdkit-unix", &cases[0], test_paths);
    g_test_add_data_func("/nbd-paths/rw/qemu-nbd-tcp", &cases[1], test_paths);
    g_test_add_data_func("/nbd-paths/switch-inflight/nbdkit-unix", &cases[0], test_switch_inflight);
    g_test_add_data_func("/nbd-paths/switch-inflight/qemu-nbd-tcp", &cases[1],
                         test_switch_inflight);
    g_test_add_func("/nbd-paths/fault/dataplane-kill", test_dataplane_kill);
    g_test_add_func("/nbd-paths/fault/dataplane-reconnect", test_dataplane_reconnect);
    for (unsigned i = 0; i < G_N_ELEMENTS(pz); i++) {
        g_test_add_data_func(pz[i].name, &pz[i].c, test_poison);
    }
    return g_test_run();
}
