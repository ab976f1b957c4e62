/*
 * lwlog: our own reader, replayer and checker for the dm-log-writes log
 * format (Linux drivers/md/dm-log-writes.c; the format is summarised below),
 * and the L1 helper that turns the crash-test guest's acknowledgements into
 * dm-log-writes marks. Used by tests/system/crashtest.sh (scripts/crashtest).
 *
 * Log format (little-endian). Sector 0 of the log holds the super block
 * {u64 magic 0x6a736677736872, u64 version 1, u64 nr_entries, u32 sectorsize};
 * sectorsize is the logical block size of the data device. Entries start at
 * byte offset sectorsize. Each entry is one sectorsize block holding the header
 * {u64 sector, u64 nr_sectors, u64 flags, u64 data_len} (a mark's text follows
 * the header, data_len bytes), then nr_sectors * sectorsize bytes of data,
 * except for discards and marks, which carry none. sector and nr_sectors count
 * sectorsize units. Flags: FLUSH 1, FUA 2, DISCARD 4, MARK 8, METADATA 16.
 * dm-log-writes logs a write only once a FLUSH that was submitted after the
 * write completed has completed (FUA writes when they complete), so every
 * prefix of the log is a state a power cut could leave; a prefix that ends at
 * a FLUSH, FUA or mark entry is what this tool calls a crash point.
 *
 * Usage:
 *   lwlog dump LOG                    one line per entry
 *   lwlog points LOG                  the index of every crash point entry
 *   lwlog replay LOG TARGET [--to-entry N | --to-mark NAME]
 *                                     apply entries 0..N-1 (or up to and
 *                                     including mark NAME; default all) to
 *                                     TARGET (a copy of the base image)
 *   lwlog check LOG --threads T --slots S [--replay TARGET] [--exec CMD] [-v]
 *                                     one pass over the log; at every crash
 *                                     point check that each record of
 *                                     tests/system/crashw.c acknowledged by a
 *                                     mark "ack-THREAD-SEQ" logged before that
 *                                     point is present (the slot holds a valid
 *                                     record of that thread with that sequence
 *                                     number or a later one). With --replay the
 *                                     log is applied to TARGET as it goes
 *                                     (afterwards TARGET is the full replay);
 *                                     with --exec CMD, CMD runs (sh -c, env
 *                                     LW_ENTRY, LW_TARGET, LW_ACKED = the
 *                                     highest acknowledged sequence number of
 *                                     thread 0) at every crash point
 *                                     and a non-zero status counts as a failure.
 *                                     Prints one line "LWCHECK ..." (see below);
 *                                     status 0 when nothing was lost.
 *   lwlog checkfiles DIR N            files DIR/f1 .. DIR/fN each hold their
 *                                     record (crashw --fs); prints the bad ones
 *   lwlog ackmark PREFIX              copy stdin to stdout line by line
 *                                     (unbuffered) and, for each line holding
 *                                     "CRASHW-ACK TAG THREAD SEQ", send the
 *                                     message "mark ack-THREAD-SEQ" to the
 *                                     device-mapper device PREFIX+TAG.
 */
#include "crashrec.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/dm-ioctl.h>
#include <linux/falloc.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define LW_MAGIC 0x6a736677736872ull
#define LW_FLUSH 1u
#define LW_FUA 2u
#define LW_DISCARD 4u
#define LW_MARK 8u
#define LW_META 16u

struct lw_entry {
    uint64_t index;
    uint64_t sector;     /* in sectorsize units */
    uint64_t nr_sectors; /* in sectorsize units */
    uint64_t flags;
    const unsigned char *data; /* nr_sectors * sectorsize bytes, or NULL */
    char mark[512];
};

struct lw_log {
    const unsigned char *map;
    size_t size;
    uint64_t nr_entries;
    uint32_t sectorsize;
    size_t cursor;
    uint64_t next;
};

static uint64_t le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--) {
        v = (v << 8) | p[i];
    }
    return v;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void die(const char *fmt, const char *arg)
{
    fprintf(stderr, "lwlog: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n");
    exit(2);
}

static void lw_open(struct lw_log *l, const char *path)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0) {
        die("cannot open %s", path);
    }
    l->size = (size_t)st.st_size;
    if (l->size < 512) {
        die("%s: too small for a log", path);
    }
    l->map = mmap(NULL, l->size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (l->map == MAP_FAILED) {
        die("cannot map %s", path);
    }
    close(fd);
    if (le64(l->map) != LW_MAGIC) {
        die("%s: bad magic (not a dm-log-writes log)", path);
    }
    if (le64(l->map + 8) != 1) {
        die("%s: unknown log version", path);
    }
    l->nr_entries = le64(l->map + 16);
    l->sectorsize = le32(l->map + 24);
    if (l->sectorsize < 512 || (l->sectorsize & (l->sectorsize - 1)) || l->sectorsize > 65536) {
        die("%s: bad sectorsize", path);
    }
    l->cursor = l->sectorsize;
    l->next = 0;
}

/* The next entry, false at the end (nr_entries read) or on a malformed entry. */
static bool lw_next(struct lw_log *l, struct lw_entry *e)
{
    if (l->next >= l->nr_entries) {
        return false;
    }
    if (l->cursor + l->sectorsize > l->size) {
        fprintf(stderr, "lwlog: entry %" PRIu64 " lies beyond the end of the log\n", l->next);
        return false;
    }
    const unsigned char *h = l->map + l->cursor;
    e->index = l->next;
    e->sector = le64(h);
    e->nr_sectors = le64(h + 8);
    e->flags = le64(h + 16);
    uint64_t data_len = le64(h + 24);
    e->data = NULL;
    e->mark[0] = 0;
    if (e->flags & ~(uint64_t)(LW_FLUSH | LW_FUA | LW_DISCARD | LW_MARK | LW_META)) {
        fprintf(stderr, "lwlog: entry %" PRIu64 " has unknown flags %#" PRIx64 "\n", l->next, e->flags);
        return false;
    }
    l->cursor += l->sectorsize;
    if (e->flags & LW_MARK) {
        size_t n = data_len;
        if (n > l->sectorsize - 32 || n >= sizeof(e->mark)) {
            fprintf(stderr, "lwlog: entry %" PRIu64 ": mark too long\n", l->next);
            return false;
        }
        memcpy(e->mark, h + 32, n);
        e->mark[n] = 0;
    } else if (!(e->flags & LW_DISCARD) && e->nr_sectors) {
        uint64_t bytes = e->nr_sectors * l->sectorsize;
        if (bytes > l->size - l->cursor) {
            fprintf(stderr, "lwlog: entry %" PRIu64 ": data beyond the end of the log\n", l->next);
            return false;
        }
        e->data = l->map + l->cursor;
        l->cursor += bytes;
    }
    l->next++;
    return true;
}

static bool is_point(const struct lw_entry *e)
{
    return (e->flags & (LW_FLUSH | LW_FUA | LW_MARK)) != 0;
}

static void flag_str(uint64_t f, char *buf)
{
    buf[0] = 0;
    if (f & LW_FLUSH) strcat(buf, "FLUSH|");
    if (f & LW_FUA) strcat(buf, "FUA|");
    if (f & LW_DISCARD) strcat(buf, "DISCARD|");
    if (f & LW_MARK) strcat(buf, "MARK|");
    if (f & LW_META) strcat(buf, "META|");
    size_t n = strlen(buf);
    if (n) buf[n - 1] = 0; else strcpy(buf, "WRITE");
}

/* Apply one entry to an open target file. */
static int apply(int fd, const struct lw_log *l, const struct lw_entry *e)
{
    off_t off = (off_t)(e->sector * l->sectorsize);
    size_t len = (size_t)(e->nr_sectors * l->sectorsize);
    if (e->flags & LW_MARK || len == 0) {
        return 0;
    }
    if (e->flags & LW_DISCARD) {
        if (fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, off, (off_t)len) == 0) {
            return 0;
        }
        static const unsigned char zero[65536];
        while (len) {
            size_t n = len < sizeof(zero) ? len : sizeof(zero);
            if (pwrite(fd, zero, n, off) != (ssize_t)n) return -1;
            off += (off_t)n;
            len -= n;
        }
        return 0;
    }
    return pwrite(fd, e->data, len, off) == (ssize_t)len ? 0 : -1;
}

static int cmd_dump(const char *path, bool points_only)
{
    struct lw_log l;
    struct lw_entry e;
    char fs[64];
    lw_open(&l, path);
    if (!points_only) {
        printf("# log %s: sectorsize %u, %" PRIu64 " entries\n", path, l.sectorsize, l.nr_entries);
    }
    while (lw_next(&l, &e)) {
        if (points_only) {
            if (is_point(&e)) printf("%" PRIu64 "\n", e.index);
            continue;
        }
        flag_str(e.flags, fs);
        printf("%" PRIu64 " %s sector=%" PRIu64 " n=%" PRIu64 "%s%s\n", e.index, fs, e.sector, e.nr_sectors,
               e.mark[0] ? " mark=" : "", e.mark);
    }
    return l.next == l.nr_entries ? 0 : 1;
}

static int cmd_replay(const char *path, const char *target, uint64_t to_entry, const char *to_mark)
{
    struct lw_log l;
    struct lw_entry e;
    lw_open(&l, path);
    int fd = open(target, O_RDWR);
    if (fd < 0) die("cannot open %s", target);
    bool found = to_mark == NULL;
    while ((to_mark || l.next < to_entry) && lw_next(&l, &e)) {
        if (apply(fd, &l, &e) != 0) die("writing %s failed", target);
        if (to_mark && (e.flags & LW_MARK) && strcmp(e.mark, to_mark) == 0) {
            found = true;
            break;
        }
    }
    if (fsync(fd) != 0) die("fsync %s failed", target);
    close(fd);
    if (!found) die("mark %s not found", to_mark);
    printf("replayed %" PRIu64 " entries\n", l.next);
    return 0;
}

/* ---- check ---- */

struct slotstate {
    enum crashrec_state st;
    uint32_t thread;
    uint64_t seq;
    bool dirty;
};

static int cmd_check(const char *path, unsigned threads, unsigned slots, const char *target, const char *exec,
                     bool verbose)
{
    struct lw_log l;
    struct lw_entry e;
    lw_open(&l, path);
    size_t nslots = (size_t)threads * slots;
    size_t region = nslots * CRASHREC_SIZE;
    unsigned char *img = calloc(1, region + 1);
    struct slotstate *ss = calloc(nslots + 1, sizeof(*ss));
    uint64_t *acked = calloc(threads, sizeof(*acked));
    if (!img || !ss || !acked) die("%s", "out of memory");
    int tfd = -1;
    if (target) {
        tfd = open(target, O_RDWR);
        if (tfd < 0) die("cannot open %s", target);
    }
    uint64_t n_flush = 0, n_fua = 0, n_mark = 0, n_ack = 0, n_write = 0, n_discard = 0;
    uint64_t points = 0, lost_points = 0, missing = 0, exec_fail = 0, torn_seen = 0, bad_marks = 0;
    bool end_mark = false;
    int reported = 0;

    while (lw_next(&l, &e)) {
        uint64_t off = e.sector * l.sectorsize, len = e.nr_sectors * l.sectorsize;
        if (tfd >= 0 && apply(tfd, &l, &e) != 0) die("writing %s failed", target);
        if (e.flags & LW_DISCARD) n_discard++;
        else if (len) n_write++;
        if (len && !(e.flags & LW_MARK) && off < region) {
            uint64_t end = off + len < region ? off + len : region;
            if (e.flags & LW_DISCARD) memset(img + off, 0, end - off);
            else memcpy(img + off, e.data, end - off);
            for (uint64_t s = off / CRASHREC_SIZE; s * CRASHREC_SIZE < end; s++) ss[s].dirty = true;
        }
        if (e.flags & LW_FLUSH) n_flush++;
        if (e.flags & LW_FUA) n_fua++;
        if (e.flags & LW_MARK) {
            unsigned t;
            uint64_t seq;
            n_mark++;
            if (strcmp(e.mark, "dm-log-writes-end") == 0) end_mark = true;
            if (strncmp(e.mark, "ack-", 4) == 0) {
                if (sscanf(e.mark, "ack-%u-%" SCNu64, &t, &seq) == 2 && t < threads) {
                    n_ack++;
                    if (seq > acked[t]) acked[t] = seq;
                } else {
                    bad_marks++;
                }
            }
        }
        if (!is_point(&e)) continue;
        points++;
        for (size_t s = 0; s < nslots; s++) {
            if (!ss[s].dirty) continue;
            struct crashrec_hdr h;
            ss[s].st = crashrec_parse(img + s * CRASHREC_SIZE, &h);
            ss[s].thread = ss[s].st == CRASHREC_VALID ? h.thread : 0;
            ss[s].seq = ss[s].st == CRASHREC_VALID ? h.seq : 0;
            ss[s].dirty = false;
        }
        uint64_t miss_here = 0;
        for (unsigned t = 0; t < threads; t++) {
            uint64_t a = acked[t];
            for (unsigned j = 0; j < slots && a > 0; j++) {
                uint64_t m = a - 1;
                if (m < j) continue; /* this slot has no acknowledged record yet */
                uint64_t need = m - ((m - j) % slots) + 1;
                const struct slotstate *s = &ss[(size_t)t * slots + j];
                bool ok = s->st == CRASHREC_VALID && s->thread == t && s->seq >= need &&
                          (s->seq - 1) % slots == j;
                if (s->st == CRASHREC_TORN) torn_seen++;
                if (!ok) {
                    miss_here++;
                    if (reported < 8 || verbose) {
                        reported++;
                        printf("LWLOST entry=%" PRIu64 " thread=%u slot=%u need_seq>=%" PRIu64 " found=%s seq=%" PRIu64
                               " acked=%" PRIu64 "\n",
                               e.index, t, j, need,
                               s->st == CRASHREC_VALID ? "record" : s->st == CRASHREC_TORN ? "torn" : "empty", s->seq,
                               a);
                    }
                }
            }
        }
        if (miss_here) {
            lost_points++;
            missing += miss_here;
        }
        if (exec) {
            char ebuf[32];
            snprintf(ebuf, sizeof(ebuf), "%" PRIu64, e.index);
            setenv("LW_ENTRY", ebuf, 1);
            setenv("LW_TARGET", target ? target : "", 1);
            snprintf(ebuf, sizeof(ebuf), "%" PRIu64, acked[0]);
            setenv("LW_ACKED", ebuf, 1);
            if (tfd >= 0) fdatasync(tfd);
            int rc = system(exec);
            if (rc != 0) {
                exec_fail++;
                printf("LWEXECFAIL entry=%" PRIu64 " status=%d\n", e.index, rc);
            }
        }
    }
    bool complete = l.next == l.nr_entries;
    if (tfd >= 0) {
        fsync(tfd);
        close(tfd);
    }
    printf("LWCHECK entries=%" PRIu64 "/%" PRIu64 " writes=%" PRIu64 " discards=%" PRIu64 " flushes=%" PRIu64
           " fuas=%" PRIu64 " marks=%" PRIu64 " acks=%" PRIu64 " points=%" PRIu64 " lost_points=%" PRIu64
           " missing=%" PRIu64 " exec_fail=%" PRIu64 " end_mark=%d complete=%d\n",
           l.next, l.nr_entries, n_write, n_discard, n_flush, n_fua, n_mark, n_ack, points, lost_points, missing,
           exec_fail, end_mark, complete);
    (void)torn_seen;
    if (bad_marks) printf("LWWARN %" PRIu64 " ack marks not understood\n", bad_marks);
    free(img);
    free(ss);
    free(acked);
    return (lost_points || exec_fail || !complete || !end_mark || bad_marks) ? 1 : 0;
}

/* ---- checkfiles ---- */

static int cmd_checkfiles(const char *dir, unsigned long n)
{
    unsigned char blk[CRASHREC_SIZE];
    char path[512];
    unsigned long bad = 0;
    for (unsigned long i = 1; i <= n; i++) {
        struct crashrec_hdr h;
        snprintf(path, sizeof(path), "%s/f%lu", dir, i);
        int fd = open(path, O_RDONLY);
        ssize_t r = fd >= 0 ? read(fd, blk, sizeof(blk)) : -1;
        if (fd >= 0) close(fd);
        if (r != (ssize_t)sizeof(blk) || crashrec_parse(blk, &h) != CRASHREC_VALID || h.seq != i || h.thread != 0) {
            bad++;
            if (bad <= 5) printf("LWFILE-BAD %s (%s)\n", path, fd < 0 ? "missing" : r != (ssize_t)sizeof(blk) ? "short" : "content");
        }
    }
    printf("LWFILES checked=%lu bad=%lu\n", n, bad);
    return bad ? 1 : 0;
}

/* ---- ackmark ---- */

static int dm_message(int ctl, const char *name, const char *msg)
{
    union {
        struct dm_ioctl io;
        char raw[sizeof(struct dm_ioctl) + sizeof(struct dm_target_msg) + 256];
    } b;
    memset(&b, 0, sizeof(b));
    b.io.version[0] = DM_VERSION_MAJOR;
    b.io.version[1] = 0;
    b.io.version[2] = 0;
    b.io.data_size = sizeof(b);
    b.io.data_start = sizeof(struct dm_ioctl);
    snprintf(b.io.name, sizeof(b.io.name), "%s", name);
    struct dm_target_msg *m = (struct dm_target_msg *)(b.raw + sizeof(struct dm_ioctl));
    m->sector = 0;
    snprintf(m->message, 255, "%s", msg);
    return ioctl(ctl, DM_TARGET_MSG, &b);
}

static void put_all(const char *s, size_t n)
{
    while (n) {
        ssize_t w = write(1, s, n);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return;
        s += w;
        n -= (size_t)w;
    }
}

static int cmd_ackmark(const char *prefix)
{
    int ctl = open("/dev/mapper/control", O_RDWR);
    if (ctl < 0) die("%s", "cannot open /dev/mapper/control");
    char line[4096];
    size_t n = 0;
    int failures = 0;
    for (;;) {
        char c;
        ssize_t r = read(0, &c, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0 || c == '\n' || n == sizeof(line) - 1) {
            if (r > 0 && c == '\n') line[n++] = '\n';
            line[n] = 0;
            /* the mark first, then the echo: the log holds it as soon as possible */
            const char *p = strstr(line, "CRASHW-ACK ");
            char tag[64], name[128], msg[96];
            unsigned t;
            unsigned long seq;
            if (p && sscanf(p, "CRASHW-ACK %63s %u %lu", tag, &t, &seq) == 3) {
                snprintf(name, sizeof(name), "%s%s", prefix, tag);
                snprintf(msg, sizeof(msg), "mark ack-%u-%lu", t, seq);
                if (dm_message(ctl, name, msg) != 0) {
                    failures++;
                    char err[200];
                    int k = snprintf(err, sizeof(err), "LWMARK-FAIL %s %s: %s\n", name, msg, strerror(errno));
                    put_all(err, (size_t)k);
                }
            }
            put_all(line, n);
            n = 0;
            if (r <= 0) break;
            continue;
        }
        line[n++] = c;
    }
    return failures ? 1 : 0;
}

int main(int argc, char **argv)
{
    if (argc >= 3 && strcmp(argv[1], "dump") == 0) return cmd_dump(argv[2], false);
    if (argc >= 3 && strcmp(argv[1], "points") == 0) return cmd_dump(argv[2], true);
    if (argc >= 4 && strcmp(argv[1], "replay") == 0) {
        uint64_t to = UINT64_MAX;
        const char *mark = NULL;
        for (int i = 4; i + 1 < argc; i += 2) {
            if (strcmp(argv[i], "--to-entry") == 0) to = strtoull(argv[i + 1], NULL, 0);
            else if (strcmp(argv[i], "--to-mark") == 0) mark = argv[i + 1];
            else die("unknown option %s", argv[i]);
        }
        return cmd_replay(argv[2], argv[3], to, mark);
    }
    if (argc >= 3 && strcmp(argv[1], "check") == 0) {
        unsigned threads = 0, slots = 0;
        const char *target = NULL, *exec = NULL;
        bool verbose = false;
        for (int i = 3; i < argc; i++) {
            if (strcmp(argv[i], "-v") == 0) verbose = true;
            else if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) threads = (unsigned)atoi(argv[++i]);
            else if (i + 1 < argc && strcmp(argv[i], "--slots") == 0) slots = (unsigned)atoi(argv[++i]);
            else if (i + 1 < argc && strcmp(argv[i], "--replay") == 0) target = argv[++i];
            else if (i + 1 < argc && strcmp(argv[i], "--exec") == 0) exec = argv[++i];
            else die("unknown option %s", argv[i]);
        }
        /* --slots 0: no records on the raw disk (a file system workload checked by --exec) */
        if (threads == 0 || threads > 64) die("%s", "check needs --threads (and --slots)");
        return cmd_check(argv[2], threads, slots, target, exec, verbose);
    }
    if (argc >= 3 && strcmp(argv[1], "ackmark") == 0) return cmd_ackmark(argv[2]);
    if (argc >= 4 && strcmp(argv[1], "checkfiles") == 0) return cmd_checkfiles(argv[2], strtoul(argv[3], NULL, 0));
    fprintf(stderr, "usage: lwlog dump|points LOG | replay LOG TARGET [--to-entry N|--to-mark M] |\n"
                    "       check LOG --threads T --slots S [--replay TARGET] [--exec CMD] [-v] | ackmark PREFIX |\n"
                    "       checkfiles DIR N\n");
    return 2;
}
