/*
 * IOQ tests on the real engines (libaio, io_uring; buffered and O_DIRECT)
 * against a file under /var/tmp, and on the null engine.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "ioq/ioq.h"

#define MAX_REQ_BYTES (64 * 1024)
#define SLOT_BUF      (MAX_REQ_BYTES + 8192)

typedef struct Mode {
    const char *engine;
    bool direct;
    bool force_helper;
} Mode;

typedef struct Harness Harness;

typedef struct TReq {
    IOQReq r;
    Harness *h;
    struct iovec iov[4];
    uint8_t *buf;
    bool busy;
    int64_t order; /* completion order, -1 while pending */
    int ret;
    IOQOp op_at_cb;       /* the op the callback saw */
    uint64_t fua_at_cb;   /* IOQStats.fua_flushes when the callback ran */
    uint64_t fua_done_cb; /* FUA callbacks run before this one, this one included */
} TReq;

struct Harness {
    IOQ *ioq;
    int fd;
    char *path;
    size_t size;
    uint8_t *shadow;
    TReq *slots;
    unsigned nslots;
    unsigned busy;
    int64_t ncompleted;
    uint64_t nfua_completed;
    unsigned mismatches;
    unsigned errors;
    GRand *rand;
};

/* ---- file and harness setup ---- */

static bool open_test_file(Harness *h, size_t size, bool direct)
{
    char tmpl[] = "/var/tmp/vblk-test-ioq-XXXXXX";
    int fd = mkstemp(tmpl);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, size), ==, 0);
    if (direct) {
        int dfd = open(tmpl, O_RDWR | O_DIRECT | O_CLOEXEC);
        if (dfd < 0) {
            g_autofree char *msg = g_strdup_printf(
                "O_DIRECT not supported on /var/tmp (%s): skipped", strerror(errno));
            printf("# SKIP %s\n", msg);
            g_test_skip(msg);
            close(fd);
            unlink(tmpl);
            return false;
        }
        close(fd);
        fd = dfd;
    }
    h->fd = fd;
    h->path = g_strdup(tmpl);
    h->size = size;
    return true;
}

/* Fill the file and the shadow with the same random bytes (via a buffered fd). */
static void fill_random(Harness *h)
{
    int bfd = open(h->path, O_RDWR | O_CLOEXEC);

    g_assert_cmpint(bfd, >=, 0);
    for (size_t i = 0; i < h->size; i += 4) {
        uint32_t v = g_rand_int(h->rand);
        memcpy(h->shadow + i, &v, MIN(4, h->size - i));
    }
    g_assert_cmpint(pwrite(bfd, h->shadow, h->size, 0), ==, (ssize_t)h->size);
    g_assert_cmpint(fsync(bfd), ==, 0);
    close(bfd);
}

static IOQ *new_ioq(const Mode *m, int fd, unsigned depth, IOQConfig *extra)
{
    IOQConfig cfg = extra ? *extra : (IOQConfig){0};
    GError *err = NULL;
    IOQ *ioq;

    cfg.engine = m->engine;
    cfg.fd = fd;
    cfg.queue_depth = depth;
    cfg.direct = m->direct;
    cfg.force_helper = m->force_helper;
    ioq = ioq_new(&cfg, &err);
    g_assert_no_error(err);
    g_assert_nonnull(ioq);
    return ioq;
}

static bool harness_init(Harness *h, const Mode *m, size_t size, unsigned depth, IOQConfig *extra)
{
    memset(h, 0, sizeof(*h));
    h->rand = g_rand_new_with_seed(g_test_rand_int());
    if (!open_test_file(h, size, m->direct)) {
        g_rand_free(h->rand);
        return false;
    }
    /* Zeroed slack past the end: reads past EOF must return zeroes. */
    h->shadow = g_malloc0(size + MAX_REQ_BYTES);
    h->ioq = new_ioq(m, h->fd, depth, extra);
    h->nslots = depth;
    h->slots = g_new0(TReq, depth);
    for (unsigned i = 0; i < depth; i++) {
        void *p = NULL;
        g_assert_cmpint(posix_memalign(&p, 4096, SLOT_BUF), ==, 0);
        h->slots[i].buf = p;
        h->slots[i].h = h;
    }
    return true;
}

static void harness_cleanup(Harness *h)
{
    ioq_free(h->ioq);
    for (unsigned i = 0; i < h->nslots; i++) {
        free(h->slots[i].buf);
    }
    g_free(h->slots);
    g_free(h->shadow);
    close(h->fd);
    unlink(h->path);
    g_free(h->path);
    g_rand_free(h->rand);
}

/* Wait for completions: poll the eventfd, clear it, reap.  Fails on a hang. */
static void harness_wait(Harness *h)
{
    struct pollfd pfd = {.fd = ioq_get_fd(h->ioq), .events = POLLIN};
    uint64_t cnt;

    if (ioq_process_completions(h->ioq)) {
        return;
    }
    g_assert_cmpint(poll(&pfd, 1, 10000), ==, 1);
    g_assert_cmpint(read(pfd.fd, &cnt, sizeof(cnt)), ==, sizeof(cnt));
    ioq_process_completions(h->ioq);
}

static void harness_wait_all(Harness *h)
{
    ioq_submit(h->ioq);
    while (ioq_inflight(h->ioq)) {
        harness_wait(h);
    }
}

static TReq *free_slot(Harness *h)
{
    for (unsigned i = 0; i < h->nslots; i++) {
        if (!h->slots[i].busy) {
            return &h->slots[i];
        }
    }
    return NULL;
}

static bool overlaps_busy(Harness *h, uint64_t off, uint64_t len)
{
    for (unsigned i = 0; i < h->nslots; i++) {
        TReq *t = &h->slots[i];
        if (t->busy && off < t->r.offset + t->r.len && t->r.offset < off + len) {
            return true;
        }
    }
    return false;
}

static void treq_done(IOQReq *r, int ret)
{
    TReq *t = (TReq *)r;
    Harness *h = t->h;
    uint8_t *p;

    IOQStats st;

    ioq_get_stats(h->ioq, &st);
    t->ret = ret;
    t->order = h->ncompleted++;
    t->op_at_cb = r->op;
    t->fua_at_cb = st.fua_flushes;
    if (r->flags & IOQ_REQ_FUA) {
        t->fua_done_cb = ++h->nfua_completed;
    }
    t->busy = false;
    h->busy--;
    if (ret < 0) {
        h->errors++;
        return;
    }
    if (r->op == IOQ_OP_READ) {
        uint64_t off = r->offset;
        for (int i = 0; i < r->niov; i++) {
            if (memcmp(r->iov[i].iov_base, h->shadow + off, r->iov[i].iov_len)) {
                h->mismatches++;
            }
            off += r->iov[i].iov_len;
        }
    } else if (r->op == IOQ_OP_WRITE) {
        p = h->shadow + r->offset;
        for (int i = 0; i < r->niov; i++) {
            memcpy(p, r->iov[i].iov_base, r->iov[i].iov_len);
            p += r->iov[i].iov_len;
        }
    } else if (r->op == IOQ_OP_DISCARD || r->op == IOQ_OP_WRITE_ZEROES) {
        memset(h->shadow + r->offset, 0, r->len);
    }
}

/* Split [buf, buf+len) into 1-3 iovecs at random points (@unit granularity). */
static int random_iov(Harness *h, struct iovec *iov, uint8_t *buf, size_t len, size_t unit)
{
    int n = g_rand_int_range(h->rand, 1, 4);
    size_t units = len / unit, used = 0;
    int k = 0;

    for (int i = 0; i < n - 1 && units - used > 1; i++) {
        size_t take = g_rand_int_range(h->rand, 1, units - used);
        iov[k].iov_base = buf + used * unit;
        iov[k].iov_len = take * unit;
        used += take;
        k++;
    }
    iov[k].iov_base = buf + used * unit;
    iov[k].iov_len = len - used * unit;
    return k + 1;
}

static void treq_start(Harness *h, TReq *t, IOQOp op, uint64_t off, uint64_t len, size_t shift,
                       size_t unit)
{
    t->r.op = op;
    t->r.offset = off;
    t->r.len = len;
    t->r.cb = treq_done;
    t->r.iov = t->iov;
    t->r.niov = 0;
    t->r.flags = 0;
    t->order = -1;
    if (op == IOQ_OP_READ || op == IOQ_OP_WRITE) {
        uint8_t *buf = t->buf + shift;
        if (op == IOQ_OP_WRITE) {
            for (size_t i = 0; i < len; i++) {
                buf[i] = g_rand_int(h->rand);
            }
        } else {
            memset(buf, 0xa5, len);
        }
        t->r.niov = random_iov(h, t->iov, buf, len, unit);
    }
    t->busy = true;
    h->busy++;
    g_assert_cmpint(ioq_enqueue(h->ioq, &t->r), ==, 0);
}

static void verify_file(Harness *h)
{
    uint8_t *data = g_malloc(h->size);
    int bfd = open(h->path, O_RDONLY | O_CLOEXEC);

    g_assert_cmpint(pread(bfd, data, h->size, 0), ==, (ssize_t)h->size);
    g_assert_true(memcmp(data, h->shadow, h->size) == 0);
    close(bfd);
    g_free(data);
}

/* ---- random read/write with byte verification ---- */

static void random_io(const Mode *m, size_t pool_size, unsigned nreq)
{
    const size_t size = 8 << 20;
    const unsigned depth = 32;
    IOQConfig extra = {.bounce_pool_size = pool_size};
    size_t unit = m->direct ? 512 : 1;
    unsigned issued = 0, max_busy = 0;
    IOQStats st;
    Harness h;

    if (!harness_init(&h, m, size, depth, &extra)) {
        return;
    }
    fill_random(&h);
    while (issued < nreq) {
        TReq *t;
        while (issued < nreq && (t = free_slot(&h))) {
            bool rd = g_rand_boolean(h.rand);
            uint64_t len = g_rand_int_range(h.rand, 1, MAX_REQ_BYTES / unit + 1) * unit;
            uint64_t off;
            size_t shift = 0;

            do {
                off = g_rand_int_range(h.rand, 0, (size - len) / unit + 1) * unit;
            } while (overlaps_busy(&h, off, len));
            /* A third of the buffers are misaligned in memory: those bounce. */
            if (g_rand_int_range(h.rand, 0, 3) == 0) {
                shift = g_rand_int_range(h.rand, 1, 4096);
            }
            treq_start(&h, t, rd ? IOQ_OP_READ : IOQ_OP_WRITE, off, len, shift, shift ? 1 : unit);
            issued++;
        }
        max_busy = MAX(max_busy, h.busy);
        ioq_submit(h.ioq);
        harness_wait(&h);
    }
    harness_wait_all(&h);
    ioq_get_stats(h.ioq, &st);
    g_assert_cmpuint(h.errors, ==, 0);
    g_assert_cmpuint(h.mismatches, ==, 0);
    g_assert_cmpuint(h.ncompleted, ==, nreq);
    g_assert_cmpuint(st.completed, ==, nreq);
    g_assert_cmpuint(st.inflight, ==, 0);
    g_assert_cmpuint(max_busy, ==, depth);
    g_assert_cmpuint(st.batches, <, nreq); /* batching happened */
    if (m->direct) {
        g_assert_cmpuint(st.bounces, >, nreq / 6);
    } else {
        g_assert_cmpuint(st.bounces, ==, 0);
    }
    verify_file(&h);
    if (g_test_verbose()) {
        printf("# %s direct=%d: %u req, %" G_GUINT64_FORMAT " batches, %" G_GUINT64_FORMAT
               " bounces, %" G_GUINT64_FORMAT " retries\n",
               m->engine, m->direct, nreq, st.batches, st.bounces, st.retries);
    }
    harness_cleanup(&h);
}

static void test_random(gconstpointer data)
{
    random_io(data, 0, 3000);
}

/* Two 64 KiB slots for 32 requests: most wait for the pool. */
static void test_bounce_pool_exhausted(gconstpointer data)
{
    random_io(data, 128 << 10, 600);
}

/* ---- FLUSH ordering ---- */

static void test_flush_order(gconstpointer data)
{
    const Mode *m = data;
    const unsigned nwrites = 48, depth = 64;
    IOQStats st;
    Harness h;
    TReq *flush;

    if (!harness_init(&h, m, 8 << 20, depth, NULL)) {
        return;
    }
    for (unsigned round = 0; round < 5; round++) {
        for (unsigned i = 0; i < nwrites; i++) {
            treq_start(&h, &h.slots[i], IOQ_OP_WRITE, (uint64_t)i * MAX_REQ_BYTES, MAX_REQ_BYTES, 0,
                       4096);
        }
        flush = &h.slots[nwrites];
        treq_start(&h, flush, IOQ_OP_FLUSH, 0, 0, 0, 1);
        /* Writes after the flush are not ordered by it, but must not be lost. */
        for (unsigned i = nwrites + 1; i < depth; i++) {
            treq_start(&h, &h.slots[i], IOQ_OP_WRITE, (uint64_t)i * MAX_REQ_BYTES, MAX_REQ_BYTES, 0,
                       4096);
        }
        harness_wait_all(&h);
        g_assert_cmpint(flush->ret, ==, 0);
        for (unsigned i = 0; i < nwrites; i++) {
            g_assert_cmpint(h.slots[i].order, <, flush->order);
        }
    }
    ioq_get_stats(h.ioq, &st);
    g_assert_cmpuint(st.held_flushes, ==, 5);
    g_assert_cmpuint(h.errors, ==, 0);
    if (m->force_helper || !strcmp(m->engine, "null")) {
        g_assert_cmpuint(st.helper_ops, ==, m->force_helper ? 5 : 0);
    }
    if (strcmp(m->engine, "null")) {
        verify_file(&h);
    }
    harness_cleanup(&h);
}

/* ---- IOQ_REQ_FUA: writethrough ---- */

/*
 * FUA writes and write-zeroes among plain writes: each FUA callback runs
 * only after its own flush was issued (at the k-th FUA callback at least k
 * flushes went out), sees its own op again, and the data is on disk.
 */
static void test_fua(gconstpointer data)
{
    const Mode *m = data;
    const unsigned depth = 24;
    IOQStats st;
    Harness h;

    if (!harness_init(&h, m, 8 << 20, depth, NULL)) {
        return;
    }
    for (unsigned round = 0; round < 3; round++) {
        unsigned nfua = 0;

        for (unsigned i = 0; i < depth; i++) {
            TReq *t = &h.slots[i];
            bool zeroes = i % 4 == 3;

            /* As treq_start(), with the flag set before the enqueue. */
            t->r.flags = 0;
            t->r.op = zeroes ? IOQ_OP_WRITE_ZEROES : IOQ_OP_WRITE;
            t->r.offset = (uint64_t)i * MAX_REQ_BYTES;
            t->r.len = MAX_REQ_BYTES;
            t->r.cb = treq_done;
            t->r.iov = t->iov;
            t->r.niov = 0;
            t->order = -1;
            if (!zeroes) {
                for (size_t b = 0; b < MAX_REQ_BYTES; b++) {
                    t->buf[b] = g_rand_int(h.rand);
                }
                t->r.niov = random_iov(&h, t->iov, t->buf, MAX_REQ_BYTES, 4096);
            }
            if (i % 2 == 0 || zeroes) {
                t->r.flags = IOQ_REQ_FUA;
                nfua++;
            }
            t->busy = true;
            h.busy++;
            g_assert_cmpint(ioq_enqueue(h.ioq, &t->r), ==, 0);
        }
        harness_wait_all(&h);
        g_assert_cmpuint(h.errors, ==, 0);
        ioq_get_stats(h.ioq, &st);
        g_assert_cmpuint(st.fua_flushes, ==, (uint64_t)nfua * (round + 1));
        g_assert_cmpuint(st.completed, ==, (uint64_t)depth * (round + 1));
        g_assert_cmpuint(st.inflight, ==, 0);
        for (unsigned i = 0; i < depth; i++) {
            TReq *t = &h.slots[i];

            g_assert_cmpint(t->op_at_cb, ==, t->r.op);
            g_assert_cmpint(t->op_at_cb, !=, IOQ_OP_FLUSH);
            if (t->r.flags & IOQ_REQ_FUA) {
                g_assert_cmpuint(t->fua_at_cb, >=, t->fua_done_cb);
            }
        }
    }
    if (strcmp(m->engine, "null")) {
        verify_file(&h);
    }
    harness_cleanup(&h);
}

typedef struct FuaCtx {
    int ret;
    int ncb;
} FuaCtx;

static void fua_cb(IOQReq *r, int ret)
{
    FuaCtx *c = r->opaque;

    c->ret = ret;
    c->ncb++;
}

/* One request on @fd; returns its result. */
static int fua_one(const Mode *m, int fd, uint32_t flags, uint64_t *fua_flushes)
{
    IOQ *ioq = new_ioq(m, fd, 4, NULL);
    uint8_t buf[4096];
    struct iovec iov = {buf, sizeof(buf)};
    FuaCtx c = {0};
    IOQReq r = {.op = IOQ_OP_WRITE,
                .len = sizeof(buf),
                .iov = &iov,
                .niov = 1,
                .flags = flags,
                .cb = fua_cb,
                .opaque = &c};
    IOQStats st;

    memset(buf, 0x5a, sizeof(buf));
    g_assert_cmpint(ioq_enqueue(ioq, &r), ==, 0);
    ioq_submit(ioq);
    ioq_drain(ioq);
    g_assert_cmpint(c.ncb, ==, 1);
    ioq_get_stats(ioq, &st);
    *fua_flushes = st.fua_flushes;
    ioq_free(ioq);
    return c.ret;
}

/*
 * /dev/null takes writes but refuses fdatasync (EINVAL): a FUA write there
 * fails with the flush's error, so its callback waited for the flush. A write
 * that fails (read-only fd) keeps its own error and issues no flush.
 */
static void test_fua_errors(gconstpointer data)
{
    const Mode *m = data;
    int null_fd = open("/dev/null", O_RDWR | O_CLOEXEC);
    char tmpl[] = "/var/tmp/vblk-test-ioq-ro-XXXXXX";
    int tmp_fd = mkstemp(tmpl), ro_fd;
    uint64_t flushes;

    g_assert_cmpint(null_fd, >=, 0);
    g_assert_cmpint(fdatasync(null_fd), ==, -1); /* the premise */
    g_assert_cmpint(fua_one(m, null_fd, 0, &flushes), ==, 0);
    g_assert_cmpuint(flushes, ==, 0);
    g_assert_cmpint(fua_one(m, null_fd, IOQ_REQ_FUA, &flushes), ==, -EINVAL);
    g_assert_cmpuint(flushes, ==, 1);

    g_assert_cmpint(tmp_fd, >=, 0);
    ro_fd = open(tmpl, O_RDONLY | O_CLOEXEC);
    g_assert_cmpint(ro_fd, >=, 0);
    g_assert_cmpint(fua_one(m, ro_fd, IOQ_REQ_FUA, &flushes), ==, -EBADF);
    g_assert_cmpuint(flushes, ==, 0);
    close(ro_fd);
    close(tmp_fd);
    unlink(tmpl);
    close(null_fd);
}

/* ---- error injection ---- */

typedef struct InjReq {
    IOQReq r;
    struct iovec iov;
    uint8_t *buf;
    int ret;
    int ncb;
    int order;
} InjReq;

static int inj_seq;

static void inj_cb(IOQReq *r, int ret)
{
    InjReq *q = r->opaque;

    q->ret = ret;
    q->ncb++;
    q->order = inj_seq++;
}

static void inj_prep(InjReq *q, IOQOp op, uint64_t off, uint8_t fill, uint32_t flags)
{
    memset(&q->r, 0, sizeof(q->r));
    q->r.op = op;
    q->r.offset = off;
    q->r.flags = flags;
    q->r.cb = inj_cb;
    q->r.opaque = q;
    q->ncb = 0;
    q->ret = 1;
    if (op == IOQ_OP_READ || op == IOQ_OP_WRITE) {
        memset(q->buf, fill, 4096);
        q->iov = (struct iovec){q->buf, 4096};
        q->r.iov = &q->iov;
        q->r.niov = 1;
        q->r.len = 4096;
    }
}

/*
 * ioq_inject_add(): blkdebug's rule semantics in the engines. A rule limited
 * to an offset range fails only the writes there (and their data never
 * reaches the file); an nth+once rule fails one flush; an IOQ_REQ_FUA
 * write's own flush is a FLUSH for the rules; injected requests complete
 * from ioq_submit(), in order, and a request the caller never submits still
 * wakes the completion fd; clearing the rules lets everything through.
 */
static void test_inject(gconstpointer data)
{
    const Mode *m = data;
    bool null = !strcmp(m->engine, "null");
    char tmpl[] = "/var/tmp/vblk-test-ioq-inj-XXXXXX";
    int fd = null ? -1 : mkstemp(tmpl);
    IOQ *ioq;
    InjReq q[5];
    IOQStats st;
    GError *err = NULL;
    IOQInjectRule wr = {.op = IOQ_OP_WRITE, .offset = 8192, .length = 4096, .error = ENOSPC};
    IOQInjectRule fl = {.op = IOQ_OP_FLUSH, .nth = 2, .once = true, .error = EIO};
    IOQInjectRule bad = {.op = 99, .error = EIO};

    if (!null) {
        g_assert_cmpint(fd, >=, 0);
        close(fd);
        fd = open(tmpl, O_RDWR | O_CLOEXEC | (m->direct ? O_DIRECT : 0));
        if (fd < 0) {
            g_test_skip("no O_DIRECT on /var/tmp");
            unlink(tmpl);
            return;
        }
        g_assert_cmpint(ftruncate(fd, 65536), ==, 0);
    }
    ioq = new_ioq(m, fd, 8, NULL);
    for (unsigned i = 0; i < G_N_ELEMENTS(q); i++) {
        g_assert_cmpint(posix_memalign((void **)&q[i].buf, 4096, 4096), ==, 0);
    }
    ioq_bind_thread(ioq);
    g_assert_true(ioq_inject_add(ioq, &wr, &err));
    g_assert_true(ioq_inject_add(ioq, &fl, &err));
    g_assert_false(ioq_inject_add(ioq, &bad, &err));
    g_clear_error(&err);

    /* One batch: ok write, failing write, flush #1 (ok), flush #2 (fails once), failing FUA write.
     */
    inj_seq = 0;
    inj_prep(&q[0], IOQ_OP_WRITE, 0, 0x11, 0);
    inj_prep(&q[1], IOQ_OP_WRITE, 8192, 0x22, 0);
    inj_prep(&q[2], IOQ_OP_FLUSH, 0, 0, 0);
    inj_prep(&q[3], IOQ_OP_FLUSH, 0, 0, 0);
    inj_prep(&q[4], IOQ_OP_WRITE, 8192, 0x33, IOQ_REQ_FUA);
    for (unsigned i = 0; i < 5; i++) {
        g_assert_cmpint(ioq_enqueue(ioq, &q[i].r), ==, 0);
    }
    ioq_submit(ioq);
    ioq_drain(ioq);
    for (unsigned i = 0; i < 5; i++) {
        g_assert_cmpint(q[i].ncb, ==, 1);
    }
    g_assert_cmpint(q[0].ret, ==, 0);
    g_assert_cmpint(q[1].ret, ==, -ENOSPC);
    g_assert_cmpint(q[2].ret, ==, 0);
    g_assert_cmpint(q[3].ret, ==, -EIO);
    g_assert_cmpint(q[4].ret, ==, -ENOSPC);
    g_assert_cmpint(q[1].order, <, q[4].order);
    ioq_get_stats(ioq, &st);
    g_assert_cmpuint(st.injected, ==, 3);

    /* A FUA write elsewhere: its flush is flush #3 for the rule, which is gone (once). */
    inj_prep(&q[0], IOQ_OP_WRITE, 0, 0x44, IOQ_REQ_FUA);
    g_assert_cmpint(ioq_enqueue(ioq, &q[0].r), ==, 0);
    ioq_submit(ioq);
    ioq_drain(ioq);
    g_assert_cmpint(q[0].ret, ==, 0);

    /* Not submitted by the caller: the completion fd still wakes its loop. */
    inj_prep(&q[1], IOQ_OP_WRITE, 8192, 0x55, 0);
    g_assert_cmpint(ioq_enqueue(ioq, &q[1].r), ==, 0);
    {
        struct pollfd pfd = {.fd = ioq_get_fd(ioq), .events = POLLIN};

        g_assert_cmpint(poll(&pfd, 1, 5000), ==, 1);
    }
    ioq_clear_fd(ioq);
    g_assert_cmpuint(ioq_process_completions(ioq), ==, 1);
    g_assert_cmpint(q[1].ncb, ==, 1);
    g_assert_cmpint(q[1].ret, ==, -ENOSPC);

    /* Cleared: the same write goes through. */
    ioq_inject_clear(ioq);
    inj_prep(&q[1], IOQ_OP_WRITE, 8192, 0x66, 0);
    g_assert_cmpint(ioq_enqueue(ioq, &q[1].r), ==, 0);
    ioq_submit(ioq);
    ioq_drain(ioq);
    g_assert_cmpint(q[1].ret, ==, 0);
    ioq_get_stats(ioq, &st);
    g_assert_cmpuint(st.injected, ==, 4);
    ioq_free(ioq);

    if (!null) {
        uint8_t *b = q[2].buf; /* aligned, for O_DIRECT */

        g_assert_cmpint(pread(fd, b, 4096, 0), ==, 4096);
        g_assert_cmpuint(b[0], ==, 0x44);
        g_assert_cmpint(pread(fd, b, 4096, 8192), ==, 4096);
        g_assert_cmpuint(b[0], ==, 0x66); /* 0x22, 0x33 and 0x55 never reached it */
        close(fd);
        unlink(tmpl);
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(q); i++) {
        free(q[i].buf);
    }
}

/* ---- DISCARD / WRITE_ZEROES ---- */

static void test_discard_zeroes(gconstpointer data)
{
    const Mode *m = data;
    const size_t MiB = 1 << 20;
    struct stat before, after;
    IOQStats st;
    Harness h;

    if (!harness_init(&h, m, 4 * MiB, 8, NULL)) {
        return;
    }
    fill_random(&h);
    g_assert_cmpint(fstat(h.fd, &before), ==, 0);

    treq_start(&h, &h.slots[0], IOQ_OP_DISCARD, MiB, MiB, 0, 1);
    treq_start(&h, &h.slots[1], IOQ_OP_WRITE_ZEROES, 2 * MiB + 256 * 1024, 256 * 1024, 0, 1);
    h.slots[2].r.may_unmap = true;
    treq_start(&h, &h.slots[2], IOQ_OP_WRITE_ZEROES, 3 * MiB, 512 * 1024, 0, 1);
    harness_wait_all(&h);
    g_assert_cmpuint(h.errors, ==, 0);

    /* Read back through the engine: zeroes where expected, data elsewhere. */
    for (unsigned i = 0; i < 4 * MiB / MAX_REQ_BYTES; i += 8) {
        for (unsigned j = 0; j < 8; j++) {
            treq_start(&h, &h.slots[j], IOQ_OP_READ, (uint64_t)(i + j) * MAX_REQ_BYTES,
                       MAX_REQ_BYTES, 0, 4096);
        }
        harness_wait_all(&h);
    }
    g_assert_cmpuint(h.mismatches, ==, 0);
    g_assert_cmpuint(h.errors, ==, 0);
    for (size_t i = MiB; i < 2 * MiB; i++) {
        g_assert_cmpint(h.shadow[i], ==, 0);
    }
    verify_file(&h);

    /* The punched megabyte no longer takes space (st_blocks is in 512 B). */
    g_assert_cmpint(fstat(h.fd, &after), ==, 0);
    g_assert_cmpint(after.st_size, ==, before.st_size);
    g_assert_cmpint(after.st_blocks, <=, before.st_blocks - (MiB - 64 * 1024) / 512);

    ioq_get_stats(h.ioq, &st);
    if (!strcmp(m->engine, "native") || m->force_helper) {
        g_assert_cmpuint(st.helper_ops, ==, 3);
    } else {
        g_assert_cmpuint(st.helper_ops, ==, 0);
    }
    harness_cleanup(&h);
}

/* ---- short read at EOF ---- */

static void test_eof_read(gconstpointer data)
{
    const Mode *m = data;
    IOQStats st;
    Harness h;
    TReq *t;

    if (!harness_init(&h, m, (1 << 20) + 100, 4, NULL)) {
        return;
    }
    fill_random(&h);
    /* 100 bytes of data, then 3996 past EOF that must read as zeroes. */
    t = &h.slots[0];
    treq_start(&h, t, IOQ_OP_READ, 1 << 20, 4096, 0, 4096);
    harness_wait_all(&h);
    g_assert_cmpint(t->ret, ==, 0);
    g_assert_cmpuint(h.mismatches, ==, 0);
    g_assert_true(memcmp(t->buf, h.shadow + (1 << 20), 100) == 0);
    for (int i = 100; i < 4096; i++) {
        g_assert_cmpint(t->buf[i], ==, 0);
    }
    /* io_uring resubmits the remainder of a short read (which then hits EOF);
     * libaio zero-fills at once. */
    ioq_get_stats(h.ioq, &st);
    g_assert_cmpuint(st.retries, ==, strcmp(m->engine, "io_uring") ? 0 : 1);
    harness_cleanup(&h);
}

/* ---- EAGAIN: a tiny AIO context ---- */

static void test_aio_eagain(void)
{
    const unsigned depth = 256;
    IOQConfig extra = {.aio_max_events = 1, .max_batch = 64};
    Mode m = {"native", false, false};
    IOQStats st;
    Harness h;

    if (!harness_init(&h, &m, 8 << 20, depth, &extra)) {
        return;
    }
    for (unsigned round = 0; round < 2; round++) {
        for (unsigned i = 0; i < depth; i++) {
            treq_start(&h, &h.slots[i], round ? IOQ_OP_READ : IOQ_OP_WRITE, (uint64_t)i * 8192,
                       8192, 0, 4096);
        }
        harness_wait_all(&h);
    }
    ioq_get_stats(h.ioq, &st);
    g_assert_cmpuint(h.errors, ==, 0);
    g_assert_cmpuint(h.mismatches, ==, 0);
    g_assert_cmpuint(st.completed, ==, 2 * depth);
    g_assert_cmpuint(st.submitted, ==, 2 * depth);
    g_assert_cmpuint(st.retries, >, 0);
    verify_file(&h);
    if (g_test_verbose()) {
        printf("# tiny AIO context: %" G_GUINT64_FORMAT " retries, %" G_GUINT64_FORMAT " batches\n",
               st.retries, st.batches);
    }
    harness_cleanup(&h);
}

/* ---- null engine ---- */

typedef struct NullCtx {
    IOQ *ioq;
    IOQReq reqs[8];
    uint8_t bufs[8][512];
    struct iovec iov[8];
    int ncb;
    int chained;
} NullCtx;

static void null_cb(IOQReq *r, int ret)
{
    NullCtx *c = r->opaque;

    g_assert_cmpint(ret, ==, 0);
    c->ncb++;
    /* Reentrancy: enqueue and submit from inside a completion. */
    if (c->chained < 3) {
        IOQReq *next = &c->reqs[4 + c->chained++];
        next->op = IOQ_OP_FLUSH;
        next->cb = null_cb;
        next->opaque = c;
        g_assert_cmpint(ioq_enqueue(c->ioq, next), ==, 0);
        ioq_submit(c->ioq);
    }
}

static void test_null(void)
{
    IOQConfig cfg = {.engine = "null", .fd = -1, .null_read_zeroes = true};
    NullCtx c = {0};
    GError *err = NULL;
    struct pollfd pfd;
    IOQStats st;

    c.ioq = ioq_new(&cfg, &err);
    g_assert_no_error(err);
    memset(c.bufs, 0xff, sizeof(c.bufs));
    for (int i = 0; i < 4; i++) {
        c.iov[i] = (struct iovec){c.bufs[i], 512};
        c.reqs[i] = (IOQReq){.op = i % 2 ? IOQ_OP_WRITE : IOQ_OP_READ,
                             .offset = i * 512,
                             .len = 512,
                             .iov = &c.iov[i],
                             .niov = 1,
                             .cb = null_cb,
                             .opaque = &c};
        g_assert_cmpint(ioq_enqueue(c.ioq, &c.reqs[i]), ==, 0);
    }
    /* Nothing completes before submit; everything (and the chain) during it. */
    g_assert_cmpint(c.ncb, ==, 0);
    ioq_submit(c.ioq);
    g_assert_cmpint(c.ncb, ==, 7);
    g_assert_cmpint(ioq_inflight(c.ioq), ==, 0);
    g_assert_cmpint(c.bufs[0][0], ==, 0); /* read: zeroes */
    g_assert_cmpint(c.bufs[2][511], ==, 0);
    g_assert_cmpint(c.bufs[1][0], ==, 0xff); /* write: untouched */
    g_assert_cmpuint(ioq_process_completions(c.ioq), ==, 0);
    pfd = (struct pollfd){.fd = ioq_get_fd(c.ioq), .events = POLLIN};
    g_assert_cmpint(poll(&pfd, 1, 0), ==, 0);
    ioq_get_stats(c.ioq, &st);
    g_assert_cmpuint(st.completed, ==, 7);
    g_assert_cmpuint(st.submitted, ==, 7);
    g_assert_cmpuint(st.batches, >=, 2);
    ioq_free(c.ioq);

    /* Without read_zeroes, reads leave the buffer alone. */
    cfg.null_read_zeroes = false;
    c = (NullCtx){.chained = 3};
    c.ioq = ioq_new(&cfg, &err);
    memset(c.bufs, 0xff, sizeof(c.bufs));
    c.iov[0] = (struct iovec){c.bufs[0], 512};
    c.reqs[0] = (IOQReq){
        .op = IOQ_OP_READ, .len = 512, .iov = c.iov, .niov = 1, .cb = null_cb, .opaque = &c};
    g_assert_cmpint(ioq_enqueue(c.ioq, &c.reqs[0]), ==, 0);
    ioq_submit(c.ioq);
    g_assert_cmpint(c.ncb, ==, 1);
    g_assert_cmpint(c.bufs[0][0], ==, 0xff);
    ioq_free(c.ioq);
}

/* ---- invalid input: errors, never crashes ---- */

static void test_invalid(void)
{
    Mode m = {"io_uring", true, false};
    IOQConfig cfg = {.engine = "bogus", .fd = -1};
    GError *err = NULL;
    uint8_t buf[1024] __attribute__((aligned(512)));
    struct iovec iov = {buf, 512};
    IOQReq r = {.op = IOQ_OP_READ, .len = 512, .iov = &iov, .niov = 1, .cb = treq_done};
    Harness h;

    g_assert_null(ioq_new(&cfg, &err));
    g_assert_nonnull(err);
    g_clear_error(&err);
    cfg.engine = "native";
    g_assert_null(ioq_new(&cfg, &err));
    g_assert_nonnull(err);
    g_clear_error(&err);
    cfg.engine = "io_uring";
    g_assert_null(ioq_new(&cfg, &err));
    g_clear_error(&err);

    if (!harness_init(&h, &m, 1 << 20, 4, NULL)) {
        return;
    }
    r.op = 77;
    g_assert_cmpint(ioq_enqueue(h.ioq, &r), ==, -EINVAL);
    r.op = IOQ_OP_READ;
    r.len = 1024; /* != iovec total */
    g_assert_cmpint(ioq_enqueue(h.ioq, &r), ==, -EINVAL);
    r.len = 512;
    r.offset = 100; /* O_DIRECT: not a multiple of the block size */
    g_assert_cmpint(ioq_enqueue(h.ioq, &r), ==, -EINVAL);
    r.offset = UINT64_MAX - 100;
    g_assert_cmpint(ioq_enqueue(h.ioq, &r), ==, -EINVAL);
    r.op = IOQ_OP_DISCARD;
    r.offset = 0;
    r.len = 0;
    g_assert_cmpint(ioq_enqueue(h.ioq, &r), ==, -EINVAL);
    r.op = IOQ_OP_READ;
    r.niov = -1;
    g_assert_cmpint(ioq_enqueue(h.ioq, &r), ==, -EINVAL);
    r.niov = 1;
    r.len = 512;
    r.flags = IOQ_REQ_FUA; /* FUA only on WRITE and WRITE_ZEROES */
    g_assert_cmpint(ioq_enqueue(h.ioq, &r), ==, -EINVAL);
    r.flags = 1u << 7; /* unknown flag */
    g_assert_cmpint(ioq_enqueue(h.ioq, &r), ==, -EINVAL);
    r.flags = 0;
    r.opaque = NULL;
    g_assert_cmpint(ioq_inflight(h.ioq), ==, 0);

    /* Accepted once; enqueuing the same request again while active fails. */
    h.slots[0].r = r;
    h.slots[0].busy = true;
    h.busy++;
    h.slots[0].r.iov = &iov;
    g_assert_cmpint(ioq_enqueue(h.ioq, &h.slots[0].r), ==, 0);
    g_assert_cmpint(ioq_enqueue(h.ioq, &h.slots[0].r), ==, -EBUSY);
    harness_wait_all(&h);
    g_assert_cmpuint(h.errors, ==, 0);
    harness_cleanup(&h);
}

/* ---- thread context: asserted ---- */

static gpointer bind_and_use(gpointer data)
{
    IOQ *ioq = data;

    ioq_bind_thread(ioq);
    ioq_submit(ioq); /* the IOQ thread: fine */
    g_assert_cmpuint(ioq_inflight(ioq), ==, 0);
    return NULL;
}

static gpointer bind_use_unbind(gpointer data)
{
    bind_and_use(data);
    ioq_unbind_thread(data);
    return NULL;
}

static IOQ *null_ioq(void)
{
    IOQConfig cfg = {.engine = "null", .fd = -1};
    GError *err = NULL;
    IOQ *ioq = ioq_new(&cfg, &err);

    g_assert_no_error(err);
    return ioq;
}

/*
 * An IOQ bound to one thread aborts when another thread calls an IOQ-thread
 * entry point (in a subprocess); after the hand-over (unbind) it does not.
 */
static void test_wrong_thread(void)
{
    IOQ *ioq;

#ifdef NDEBUG
    g_test_skip("thread checks are compiled out (NDEBUG)");
    return;
#endif
    if (g_test_subprocess()) {
        ioq = null_ioq();
        g_thread_join(g_thread_new("ioq-owner", bind_and_use, ioq));
        ioq_submit(ioq); /* not the IOQ thread: must abort */
        fprintf(stderr, "no assertion fired\n");
        return;
    }
    g_test_trap_subprocess(NULL, 0, G_TEST_SUBPROCESS_DEFAULT);
    g_test_trap_assert_failed();
    g_test_trap_assert_stderr("*thread_owner_ok*");
    g_test_trap_assert_stderr_unmatched("*no assertion fired*");

    /* Handed over: this thread may take it (and check it) now. */
    ioq = null_ioq();
    g_thread_join(g_thread_new("ioq-owner", bind_use_unbind, ioq));
    ioq_bind_thread(ioq);
    ioq_submit(ioq);
    ioq_free(ioq);
}

static const Mode modes[] = {
    {"native", false, false},  {"native", true, false},   {"io_uring", false, false},
    {"io_uring", true, false}, {"io_uring", false, true}, {"null", false, false},
};

static char *mode_name(const char *test, const Mode *m)
{
    return g_strdup_printf("/ioq/%s/%s%s/%s", m->engine, m->direct ? "direct" : "buffered",
                           m->force_helper ? "-helper" : "", test);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    for (size_t i = 0; i < G_N_ELEMENTS(modes); i++) {
        const Mode *m = &modes[i];
        g_autofree char *flush = mode_name("flush-order", m);

        g_autofree char *fua = mode_name("fua", m);

        g_autofree char *inj = mode_name("inject", m);

        g_test_add_data_func(flush, m, test_flush_order);
        g_test_add_data_func(fua, m, test_fua);
        g_test_add_data_func(inj, m, test_inject);
        if (!strcmp(m->engine, "null")) {
            continue;
        }
        if (!m->direct) {
            g_autofree char *fuae = mode_name("fua-errors", m);

            g_test_add_data_func(fuae, m, test_fua_errors);
        }
        g_autofree char *rnd = mode_name("random", m);
        g_autofree char *dz = mode_name("discard-write-zeroes", m);
        g_autofree char *eof = mode_name("eof-read", m);
        g_test_add_data_func(rnd, m, test_random);
        g_test_add_data_func(dz, m, test_discard_zeroes);
        if (!m->direct) {
            g_test_add_data_func(eof, m, test_eof_read);
        } else {
            g_autofree char *pool = mode_name("bounce-pool-exhausted", m);
            g_test_add_data_func(pool, m, test_bounce_pool_exhausted);
        }
    }
    g_test_add_func("/ioq/native/tiny-aio-context-eagain", test_aio_eagain);
    g_test_add_func("/ioq/null/semantics", test_null);
    g_test_add_func("/ioq/invalid", test_invalid);
    g_test_add_func("/ioq/wrong-thread-asserts", test_wrong_thread);
    return g_test_run();
}
