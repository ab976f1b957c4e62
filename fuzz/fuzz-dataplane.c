/*
 * libFuzzer target: the virtio-blk request engine with the dataplane started.
 * A hostile guest lays out one split virtqueue per input (descriptor table,
 * avail ring, request headers and data buffers, indirect tables, bogus
 * lengths, addresses, loops and head numbers, raw pokes into RAM); a
 * DataPlane serves it on its iothread over a real backend (the null engine,
 * io_uring or libaio on a small temp file, buffered or O_DIRECT); the fuzzer
 * thread is the guest: it publishes, kicks, waits (bounded) until the device
 * consumed what it will, and checks what the device returned.
 *
 * The dataplanes (one per engine and device configuration) and their
 * iothread live for the whole run. Per input, as a device reset would, the
 * feature bits are negotiated again and a new virtqueue and request engine
 * queue are made over fresh guest RAM, started, served, stopped and freed.
 *
 * Invariants checked (a violation aborts with a message, which libFuzzer
 * reports with the input):
 *   - used->idx never advances by more than the heads made available;
 *   - every used id is < the queue size and a head that was made available
 *     (as many times as it was);
 *   - after dataplane_stop() the engine holds no request;
 *   - for inputs of well-formed chains only (no poke, no bogus field) on a
 *     queue that did not break: every request is returned exactly once, its
 *     status byte is OK, IOERR or UNSUPP, and its used length is exact (and
 *     never beyond the chain's device-writable bytes);
 *   - for such batches without injected errors: a successful read returns
 *     what a shadow of the file says (zeroes on the null engine) wherever the
 *     shadow knows it, GET_ID the serial;
 *   - without EVENT_IDX and VRING_AVAIL_F_NO_INTERRUPT, a kick whose
 *     completions moved used->idx on a live queue interrupted the guest;
 *   - no hang: each input must finish within HANG_SECONDS (a watchdog thread
 *     aborts with the stage it was stuck in).
 * ASan/UBSan watch every access: guest RAM is two separate heap blocks.
 *
 * Input layout:
 *   [0]  bits 0-2 engine (null, io_uring, native, io_uring O_DIRECT, native
 *        O_DIRECT; 5-7 wrap), bits 3-4 device config (0/3 default, 1 4K
 *        blocks with small limits, 2 read-only writethrough)
 *   [1]  driver feature mask: bit0 EVENT_IDX, bit1 INDIRECT_DESC, bit2 FLUSH,
 *        bit3 CONFIG_WCE, bit4 DISCARD, bit5 WRITE_ZEROES (VERSION_1 forced,
 *        other offered bits kept)
 *   [2]  bits 0-2 log2 of the queue size (1..6: 2..64 entries; 6,7 wrap),
 *        bit 7 adaptive polling on the iothread (poll-max-ns 32768, QEMU's
 *        default: the avail ring and the completions are polled too)
 *   [3]  bits 0-1 rerror, bits 2-3 werror (report, ignore, stop, enospc);
 *        bit 4 an injected error on every IOQ request (bit 7: on every 2nd
 *        only), bits 5-6 its errno (EIO, ENOSPC, ENOTSUP, EINVAL)
 *   then 16-byte records (see struct Rec below): requests, pokes and kicks.
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>
#include <sys/eventfd.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "dataplane/dataplane.h"
#include "event/event.h"
#include "virtio/virtio-blk.h"

#define REGION_SIZE  0x10000
#define REGION1_GPA  0x20000 /* a hole of 64 KiB between the regions */
#define DESC_GPA     0x0000
#define AVAIL_GPA    0x0400
#define USED_GPA     0x0800
#define BUF_START    0x1000
#define MAX_QSIZE    64
#define DISK_BYTES   (64 * 1024)
#define HANG_SECONDS 10
#define MAX_SEG      8
#define MAX_RECS     64

#define BIT(n) (1ull << (n))

/* The file engines twice: buffered, and O_DIRECT (alignment checks, bounce pool). */
enum { ENGINE_NULL, ENGINE_URING, ENGINE_AIO, ENGINE_URING_DIRECT, ENGINE_AIO_DIRECT, NENGINES };
#define NCONFS 3

/*
 * One 16-byte record of the input. kind 0xf0-0xf7 is a kick: publish what the
 * records before it built (bit 0: and move avail->idx on by aux more, bit 1:
 * dataplane_resume() first; shape bit 1: VRING_AVAIL_F_NO_INTERRUPT, bit 2:
 * used_event = shape >> 3). kind 0xf8-0xff is a poke: 12 bytes (from
 * sector[0]) written at offset seg | aux << 8 of region shape & 1, before the
 * device starts. Any other kind is a request whose type is kind & 7.
 */
typedef struct Rec {
    uint8_t kind; /* bits 0-2 request type (table), 0xf0 kick, 0xf8.. poke */
    uint8_t shape;
    uint8_t seg;
    uint8_t aux;
    uint8_t sector[4];
    uint8_t len[4];
    uint8_t extra[4];
} Rec;

/* rec.shape */
#define SH_INDIRECT   0x01 /* through an indirect table */
#define SH_SPLIT_HDR  0x02 /* header over two descriptors */
#define SH_RO_STATUS  0x04 /* status descriptor not device-writable */
#define SH_FLIP_DIR   0x08 /* data in the wrong direction */
#define SH_LOOP       0x10 /* last descriptor chains back to the first */
#define SH_BAD_ADDR   0x20 /* one descriptor's address outside RAM / crossing */
#define SH_BAD_LEN    0x40 /* one descriptor's length bogus */
#define SH_RAW_HEAD   0x80 /* the avail entry is rec.aux, not the head */
/* rec.seg: bits 0-2 data segments, 3-4 misalignment, then: */
#define SEG_REGION1   0x20 /* data buffers in region 1 */
#define SEG_BAD_NEXT  0x40 /* a next field out of range */
#define SEG_NESTED    0x80 /* VRING_DESC_F_INDIRECT inside an indirect table */
#define SH_BOGUS (SH_RO_STATUS | SH_FLIP_DIR | SH_LOOP | SH_BAD_ADDR | SH_BAD_LEN | SH_RAW_HEAD)
#define SEG_BOGUS (SEG_BAD_NEXT | SEG_NESTED)

typedef struct Harness {
    IOThread *iothread;
    int kick_fd, call_fd;
    int disk_fd, direct_fd; /* direct_fd: -1 if O_DIRECT is refused here */
    VirtIOBlk *blk[NCONFS];
    DataPlane *dp[NENGINES][NCONFS];
    bool unusable[NENGINES][NCONFS];
} Harness;

static Harness H;
static bool verbose; /* FUZZ_DATAPLANE_VERBOSE=1: print every used element */

/* ---- watchdog ---- */

static int64_t wd_deadline; /* monotonic ns, 0 = idle (atomic) */
static const char *wd_stage; /* atomic */

static int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *watchdog(void *arg)
{
    for (;;) {
        int64_t d = __atomic_load_n(&wd_deadline, __ATOMIC_ACQUIRE);

        if (d && now_ns() > d) {
            fprintf(stderr, "fuzz-dataplane: hang: no progress for %d s in stage '%s'\n",
                    HANG_SECONDS, __atomic_load_n(&wd_stage, __ATOMIC_ACQUIRE));
            abort();
        }
        usleep(100 * 1000);
    }
    return arg;
}

static void stage(const char *s)
{
    __atomic_store_n(&wd_stage, s, __ATOMIC_RELEASE);
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "fuzz-dataplane: invariant violated: " __VA_ARGS__);                       \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

/* ---- long-lived setup ---- */

static void conf_for(VirtIOBlkConf *c, unsigned k)
{
    virtio_blk_conf_init(c, DISK_BYTES / 512);
    c->queue_size = MAX_QSIZE;
    c->max_discard_sectors = 64;
    c->max_write_zeroes_sectors = 64;
    memcpy(c->serial, "fuzz-dataplane-serial", 20); /* exactly 20: no NUL */
    c->serial[20] = 0;
    if (k == 1) {
        c->logical_block_size = c->physical_block_size = 4096;
        c->seg_max = 3;
        c->size_max = 4096;
        c->max_discard_sectors = 16;
        c->max_write_zeroes_sectors = 16;
        c->write_zeroes_may_unmap = true;
    } else if (k == 2) {
        c->readonly = true;
        c->writeback = false;
        c->config_wce = false;
    }
}

/* A zero-filled DISK_BYTES temp file in @dir, already unlinked; -1 if impossible. */
static int temp_disk(const char *dir, int oflags)
{
    char *path = g_build_filename(dir, "vblk-fuzzdp-XXXXXX", NULL);
    int fd = g_mkstemp_full(path, O_RDWR | O_CLOEXEC, 0600), dfd = fd;

    if (fd >= 0 && ftruncate(fd, DISK_BYTES) < 0) {
        close(fd);
        fd = dfd = -1;
    }
    if (fd >= 0 && oflags) {
        dfd = open(path, O_RDWR | O_CLOEXEC | oflags);
        close(fd);
    }
    if (fd >= 0) {
        unlink(path);
    }
    g_free(path);
    return dfd;
}

static void harness_init(void)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    GError *err = NULL;
    pthread_t wd;

    /*
     * Buffered engines on tmpfs when there is one (flushes and writethrough
     * writes cost no disk sync there), O_DIRECT ones on a real file system.
     */
    H.disk_fd = access("/dev/shm", W_OK) == 0 ? temp_disk("/dev/shm", 0) : -1;
    if (H.disk_fd < 0) {
        H.disk_fd = temp_disk(dir, 0);
    }
    if (H.disk_fd < 0) {
        fprintf(stderr, "fuzz-dataplane: no temp file in %s: %s\n", dir, strerror(errno));
        abort();
    }
    H.direct_fd = temp_disk(dir, O_DIRECT);
    H.kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    H.call_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    H.iothread = iothread_new("fuzz-dp", &err);
    if (!H.iothread || H.kick_fd < 0 || H.call_fd < 0) {
        fprintf(stderr, "fuzz-dataplane: setup failed\n");
        abort();
    }
    for (unsigned k = 0; k < NCONFS; k++) {
        VirtIOBlkConf c;

        conf_for(&c, k);
        H.blk[k] = virtio_blk_new(&c, &err);
        if (!H.blk[k]) {
            fprintf(stderr, "fuzz-dataplane: virtio_blk_new: %s\n", err->message);
            abort();
        }
    }
    verbose = getenv("FUZZ_DATAPLANE_VERBOSE") != NULL;
    pthread_create(&wd, NULL, watchdog, NULL);
    pthread_detach(wd);
}

/* The dataplane of (@engine, @k), made on first use; NULL if the engine is unusable here. */
static DataPlane *get_dp(unsigned engine, unsigned k)
{
    static const char *const names[NENGINES] = {"null", "io_uring", "native", "io_uring", "native"};
    bool direct = engine == ENGINE_URING_DIRECT || engine == ENGINE_AIO_DIRECT;
    DataPlaneConf dc = {0};
    GError *err = NULL;

    if (H.dp[engine][k] || H.unusable[engine][k]) {
        return H.dp[engine][k];
    }
    if (direct && H.direct_fd < 0) {
        fprintf(stderr, "fuzz-dataplane: O_DIRECT unusable here: %s engines skipped\n",
                names[engine]);
        H.unusable[engine][k] = true;
        return NULL;
    }
    dc.blk = H.blk[k];
    dc.iothread = H.iothread;
    dc.num_queues = 1;
    dc.queue_size = MAX_QSIZE;
    dc.complete_batch = k == 1 ? 1 : 0; /* publish per completion on one config */
    dc.ioq.engine = names[engine];
    dc.ioq.fd = engine == ENGINE_NULL ? -1 : direct ? H.direct_fd : H.disk_fd;
    dc.ioq.direct = direct;
    dc.ioq.logical_block_size = k == 1 ? 4096 : 512;
    dc.ioq.null_read_zeroes = true;
    dc.ioq.bounce_pool_size = 128 << 10; /* two 64 KiB slots: bounced requests queue up */
    H.dp[engine][k] = dataplane_create(&dc, &err);
    if (!H.dp[engine][k]) {
        fprintf(stderr, "fuzz-dataplane: engine %s unusable here: %s\n", names[engine],
                err->message);
        g_error_free(err);
        H.unusable[engine][k] = true;
    }
    return H.dp[engine][k];
}

/* ---- guest side ---- */

typedef struct Guest {
    uint8_t *ram[2];
    unsigned num;
    uint64_t bump[2];
    unsigned next_desc;
    /* avail entries written but not yet published */
    uint16_t pend[MAX_QSIZE * 2];
    unsigned npend;
    uint16_t avail_idx;
    uint16_t used0, used_seen;
    uint64_t made_avail; /* heads published so far */
    uint64_t consumed;   /* used elements checked */
    uint32_t avail_count[65536]; /* multiset of published heads */
    bool clean;          /* well-formed chains only, no poke */
    /* per head (clean inputs): what the chain offers */
    bool tracked[MAX_QSIZE];
    uint64_t status_gpa[MAX_QSIZE];
    uint64_t in_bytes[MAX_QSIZE];
    unsigned returned[MAX_QSIZE];
    /* per head (clean inputs): the request, for the data checks */
    uint32_t type[MAX_QSIZE];
    uint64_t sector[MAX_QSIZE];
    uint32_t dlen[MAX_QSIZE];
    uint64_t data_gpa[MAX_QSIZE];
    uint8_t pattern[MAX_QSIZE];
    unsigned batch[MAX_QSIZE];
    unsigned nbatch;      /* kicks so far */
    bool data_checks;     /* clean, no injected error: the disk's content is known */
    bool null_engine;     /* reads return zeroes, writes go nowhere */
    bool event_idx;       /* VIRTIO_RING_F_EVENT_IDX negotiated */
    VirtQueue *vq;
    uint32_t lbs;
} Guest;

/*
 * What the temp file holds, per byte, where known (sector granularity): the
 * file engines write it, every input ends drained, so it carries over
 * between inputs. A discard, a failed write or two overlapping requests of
 * one batch (unordered) make a sector unknown.
 */
static uint8_t shadow_data[2][DISK_BYTES]; /* [0] the buffered engines' file, [1] O_DIRECT's */
static bool shadow_known_s[2][DISK_BYTES / 512] = {{[0 ... DISK_BYTES / 512 - 1] = true},
                                                    {[0 ... DISK_BYTES / 512 - 1] = true}};
static uint8_t *shadow;     /* this input's file */
static bool *shadow_known;

static void *gpa_ptr(Guest *g, uint64_t gpa, uint64_t len)
{
    for (unsigned r = 0; r < 2; r++) {
        uint64_t base = r ? REGION1_GPA : 0;

        if (gpa >= base && gpa - base <= REGION_SIZE && len <= REGION_SIZE - (gpa - base)) {
            return g->ram[r] + (gpa - base);
        }
    }
    return NULL;
}

/* Bump allocation in region @r; 0 when full (0 is never a buffer address). */
static uint64_t galloc(Guest *g, unsigned r, uint64_t len, uint64_t align)
{
    uint64_t at = (g->bump[r] + align - 1) & ~(align - 1);

    if (at + len > REGION_SIZE) {
        return 0;
    }
    g->bump[r] = at + len;
    return (r ? REGION1_GPA : 0) + at;
}

static void put_desc(uint8_t *table, unsigned i, uint64_t addr, uint32_t len, uint16_t flags,
                     uint16_t next)
{
    struct vring_desc d = {.addr = htole64(addr), .len = htole32(len), .flags = htole16(flags),
                           .next = htole16(next)};

    memcpy(table + i * sizeof(d), &d, sizeof(d));
}

static uint32_t le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

typedef struct Buf {
    uint64_t gpa;
    uint32_t len;
    bool write;
} Buf;

static const uint32_t types[8] = {VIRTIO_BLK_T_IN,       VIRTIO_BLK_T_OUT,
                                  VIRTIO_BLK_T_FLUSH,    VIRTIO_BLK_T_GET_ID,
                                  VIRTIO_BLK_T_DISCARD,  VIRTIO_BLK_T_WRITE_ZEROES,
                                  0 /* raw, from extra */, VIRTIO_BLK_T_OUT | VIRTIO_BLK_T_BARRIER};

/* Build one request chain from @r; false when out of descriptors or RAM. */
static bool add_request(Guest *g, const Rec *r)
{
    uint32_t type = types[r->kind & 7];
    uint32_t lv = le32(r->len), sv = le32(r->sector);
    uint64_t sector = (sv & 0x80000000u) ? ~0ull - (sv & 0xff) : sv % 160;
    unsigned nseg = r->seg & 7, shift = ((r->seg >> 3) & 3) * 3;
    unsigned dr = (r->seg & SEG_REGION1) ? 1 : 0;
    bool write_data, indirect = r->shape & SH_INDIRECT;
    bool bogus = (r->shape & SH_BOGUS) || (r->seg & SEG_BOGUS);
    struct virtio_blk_outhdr h;
    Buf b[MAX_SEG + 4];
    unsigned n = 0;
    uint32_t dlen;
    uint64_t hdr, status, data = 0, in_bytes = 0;
    uint8_t ff = 0xff;
    uint16_t head;

    if ((r->kind & 7) == 6) {
        type = le32(r->extra);
    }
    write_data = type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID;
    if (type == VIRTIO_BLK_T_DISCARD || type == VIRTIO_BLK_T_WRITE_ZEROES) {
        dlen = (r->extra[1] & 1) ? 16u * (1 + (lv >> 28)) : 16;
    } else if (type == VIRTIO_BLK_T_FLUSH) {
        dlen = (lv & 0x8000) ? lv & 0x3ff : 0;
    } else if (lv & 0x4000) {
        dlen = (lv & 0x1f) * 512;
    } else {
        dlen = lv & 0x3fff;
    }
    if (r->shape & SH_FLIP_DIR) {
        write_data = !write_data;
    }
    if (!dlen) {
        nseg = 0;
    } else if (!nseg) {
        nseg = 1;
    }

    /* Header. */
    h.type = htole32(type);
    h.ioprio = htole32(r->extra[2]);
    h.sector = htole64(sector);
    hdr = galloc(g, 0, sizeof(h), 16);
    if (!hdr) {
        return false;
    }
    memcpy(gpa_ptr(g, hdr, sizeof(h)), &h, sizeof(h));
    if (r->shape & SH_SPLIT_HDR) {
        unsigned cut = 1 + r->aux % 15;

        b[n++] = (Buf){hdr, cut, false};
        b[n++] = (Buf){hdr + cut, sizeof(h) - cut, false};
    } else {
        b[n++] = (Buf){hdr, sizeof(h), false};
    }

    /* Data. */
    if (dlen) {
        data = galloc(g, dr, dlen + shift, 512);
        if (!data) {
            return false;
        }
        data += shift;
        if (type == VIRTIO_BLK_T_DISCARD || type == VIRTIO_BLK_T_WRITE_ZEROES) {
            struct virtio_blk_discard_write_zeroes s = {
                .sector = htole64(sector),
                .num_sectors = htole32(lv & 0x80000000u ? lv : lv & 0x7f),
                .flags = htole32(r->extra[0] & 0x80 ? r->extra[0] : r->extra[0] & 1)};

            for (uint32_t o = 0; o < dlen; o += 16) {
                memcpy(gpa_ptr(g, data + o, 16), &s, 16);
            }
        } else {
            memset(gpa_ptr(g, data, dlen), 0x5a ^ r->aux, dlen);
        }
        for (unsigned i = 0, off = 0; i < nseg && off < dlen; i++) {
            /* Sector-sized pieces when the length allows, the rest in the last. */
            uint32_t left = dlen - off, piece;

            if (i == nseg - 1) {
                piece = left;
            } else if (dlen % 512 == 0 && left > 512) {
                piece = 512 * (1 + (r->aux + i) % (left / 512));
                piece = piece >= left ? 512 : piece;
            } else {
                piece = 1 + (r->aux + 7 * i) % left;
                piece = piece >= left ? (left + 1) / 2 : piece;
            }
            b[n++] = (Buf){data + off, piece, write_data};
            off += piece;
        }
    }

    /* Status. */
    status = galloc(g, 0, 1, 1);
    if (!status) {
        return false;
    }
    memcpy(gpa_ptr(g, status, 1), &ff, 1);
    b[n++] = (Buf){status, 1, !(r->shape & SH_RO_STATUS)};

    if (r->shape & SH_BAD_ADDR) {
        static const uint64_t bad[4] = {REGION_SIZE - 4, REGION_SIZE + 0x800, REGION1_GPA + REGION_SIZE,
                                        ~0ull - 8};
        b[r->aux % n].gpa = bad[(r->aux >> 4) & 3];
    }
    if (r->shape & SH_BAD_LEN) {
        static const uint32_t badl[4] = {0, 0xffffffffu, REGION_SIZE + 1, 0x80000000u};
        b[(r->aux >> 2) % n].len = badl[(r->aux >> 6) & 3];
    }
    for (unsigned i = 0; i < n; i++) {
        in_bytes += b[i].write ? b[i].len : 0;
    }

    /* Descriptors: direct chain, or one descriptor pointing at a table. */
    if (indirect) {
        uint64_t tgpa = galloc(g, 0, n * 16, 16);
        uint8_t *t;
        uint32_t tlen = n * 16;

        if (!tgpa || g->next_desc >= g->num) {
            return false;
        }
        t = gpa_ptr(g, tgpa, n * 16);
        for (unsigned i = 0; i < n; i++) {
            uint16_t f = (b[i].write ? VRING_DESC_F_WRITE : 0) | (i + 1 < n ? VRING_DESC_F_NEXT : 0);

            put_desc(t, i, b[i].gpa, b[i].len, f, (uint16_t)(i + 1));
        }
        if (r->shape & SH_LOOP) {
            put_desc(t, n - 1, b[n - 1].gpa, b[n - 1].len,
                     VRING_DESC_F_NEXT | (b[n - 1].write ? VRING_DESC_F_WRITE : 0), 0);
        }
        if (r->seg & SEG_BAD_NEXT) {
            put_desc(t, 0, b[0].gpa, b[0].len, VRING_DESC_F_NEXT, (uint16_t)(n + r->aux));
        }
        if (r->seg & SEG_NESTED) {
            put_desc(t, 0, tgpa, tlen, VRING_DESC_F_INDIRECT | VRING_DESC_F_NEXT, 1);
        }
        if (r->extra[3] & 1) {
            tlen = (r->extra[3] & 2) ? tlen - 8 : 0; /* table length not a whole entry */
            bogus = true;
        }
        head = (uint16_t)g->next_desc++;
        put_desc(g->ram[0], head, tgpa, tlen,
                 VRING_DESC_F_INDIRECT | ((r->extra[3] & 4) ? VRING_DESC_F_NEXT : 0), head);
        bogus |= (r->extra[3] & 4) != 0;
    } else {
        if (g->next_desc + n > g->num) {
            return false;
        }
        head = (uint16_t)g->next_desc;
        for (unsigned i = 0; i < n; i++) {
            unsigned d = g->next_desc++;
            uint16_t f = (b[i].write ? VRING_DESC_F_WRITE : 0) | (i + 1 < n ? VRING_DESC_F_NEXT : 0);
            uint16_t next = (uint16_t)(d + 1);

            if (i + 1 == n && (r->shape & SH_LOOP)) {
                f |= VRING_DESC_F_NEXT;
                next = head;
            }
            if (i == 0 && (r->seg & SEG_BAD_NEXT) && n > 1) {
                next = (uint16_t)(g->num + r->aux);
            }
            put_desc(g->ram[0], d, b[i].gpa, b[i].len, f, next);
        }
    }

    g->pend[g->npend++] = (r->shape & SH_RAW_HEAD) ? r->aux : head;
    if (bogus) {
        g->clean = false;
    } else {
        g->tracked[head] = true;
        g->status_gpa[head] = status;
        g->in_bytes[head] = in_bytes;
        g->type[head] = type & ~VIRTIO_BLK_T_BARRIER; /* as the device reads it */
        g->sector[head] = sector;
        g->dlen[head] = dlen;
        g->data_gpa[head] = data;
        g->pattern[head] = 0x5a ^ r->aux;
        g->batch[head] = g->nbatch;
    }
    return true;
}

static void poke(Guest *g, const Rec *r)
{
    unsigned region = r->shape & 1;
    unsigned off = ((unsigned)r->seg | (unsigned)r->aux << 8) % (REGION_SIZE - 12);

    memcpy(g->ram[region] + off, &r->sector, 12);
    g->clean = false;
}

static struct vring_avail *avail_ring(Guest *g)
{
    return (struct vring_avail *)(g->ram[0] + AVAIL_GPA);
}

static struct vring_used *used_ring(Guest *g)
{
    return (struct vring_used *)(g->ram[0] + USED_GPA);
}

/* Check the used elements published since the last check. */
static void check_used(Guest *g)
{
    struct vring_used *u = used_ring(g);
    uint16_t idx = le16toh(__atomic_load_n(&u->idx, __ATOMIC_ACQUIRE));
    uint16_t adv = (uint16_t)(idx - g->used_seen);

    if (g->consumed + adv > g->made_avail) {
        FAIL("used idx advanced to %u (from %u at start): %llu element(s) used, only %llu "
             "head(s) made available",
             idx, g->used0, (unsigned long long)(g->consumed + adv),
             (unsigned long long)g->made_avail);
    }
    for (uint16_t i = 0; i < adv; i++) {
        struct vring_used_elem e = u->ring[(uint16_t)(g->used_seen + i) % g->num];
        uint32_t id = le32toh(e.id), len = le32toh(e.len);

        if (id >= g->num) {
            FAIL("used id %u >= queue size %u", id, g->num);
        }
        if (!g->avail_count[id]) {
            FAIL("used id %u was not made available (or is returned once too often)", id);
        }
        if (verbose) {
            fprintf(stderr, "used: id %u len %u status 0x%02x%s\n", id, len,
                    g->tracked[id] ? *(uint8_t *)gpa_ptr(g, g->status_gpa[id], 1) : 0xff,
                    g->tracked[id] ? "" : " (untracked)");
        }
        g->avail_count[id]--;
        g->returned[id]++;
        if (g->clean && g->tracked[id]) {
            uint8_t st = *(uint8_t *)gpa_ptr(g, g->status_gpa[id], 1);
            uint64_t want = 1;

            if (len > g->in_bytes[id]) {
                FAIL("used len %u of head %u exceeds its %llu device-writable bytes", len, id,
                     (unsigned long long)g->in_bytes[id]);
            }
            if (st == VIRTIO_BLK_S_OK && g->type[id] == VIRTIO_BLK_T_IN) {
                want += g->dlen[id];
            } else if (st == VIRTIO_BLK_S_OK && g->type[id] == VIRTIO_BLK_T_GET_ID) {
                want += MIN(g->dlen[id], 20);
            }
            if (g->returned[id] == 1 && len != want) {
                FAIL("used len %u of head %u (type %u, status %u), expected %llu", len, id,
                     g->type[id], st, (unsigned long long)want);
            }
        }
    }
    g->used_seen = idx;
    g->consumed += adv;
}

/* Byte range of a data request on the disk; false if outside it. */
static bool disk_range(Guest *g, unsigned h, uint64_t *off, uint64_t *len)
{
    struct virtio_blk_discard_write_zeroes seg;

    if (g->type[h] == VIRTIO_BLK_T_IN || g->type[h] == VIRTIO_BLK_T_OUT) {
        *len = g->dlen[h];
    } else if (g->type[h] == VIRTIO_BLK_T_DISCARD || g->type[h] == VIRTIO_BLK_T_WRITE_ZEROES) {
        if (g->dlen[h] != sizeof(seg)) {
            return false;
        }
        memcpy(&seg, gpa_ptr(g, g->data_gpa[h], sizeof(seg)), sizeof(seg));
        *len = (uint64_t)le32toh(seg.num_sectors) * 512;
    } else {
        return false;
    }
    *off = g->sector[h] * 512;
    return g->sector[h] < DISK_BYTES / 512 && *len <= DISK_BYTES - *off && *len;
}

static void forget(uint64_t off, uint64_t len)
{
    for (uint64_t s = off / 512; s < (off + len + 511) / 512; s++) {
        shadow_known[s] = false;
    }
}

/*
 * After batch @b was drained: exact used lengths, the data of reads (the
 * shadow, or zeroes from the null engine), GET_ID's serial, then the writes
 * of the batch into the shadow.
 */
static void check_batch(Guest *g, unsigned b)
{
    static uint8_t readers[DISK_BYTES / 512], writers[DISK_BYTES / 512];

    memset(readers, 0, sizeof(readers));
    memset(writers, 0, sizeof(writers));
    for (unsigned h = 0; h < g->num; h++) {
        uint64_t off, len;

        if (g->tracked[h] && g->batch[h] == b && disk_range(g, h, &off, &len)) {
            for (uint64_t s = off / 512; s < (off + len) / 512; s++) {
                if (g->type[h] == VIRTIO_BLK_T_IN) {
                    readers[s] = 1;
                } else {
                    writers[s] += writers[s] < 2;
                }
            }
        }
    }
    for (unsigned h = 0; h < g->num; h++) {
        uint64_t off, len;
        uint8_t st;
        const uint8_t *buf;
        bool ranged;

        if (!g->tracked[h] || g->batch[h] != b || g->returned[h] != 1) {
            continue;
        }
        st = *(uint8_t *)gpa_ptr(g, g->status_gpa[h], 1);
        ranged = disk_range(g, h, &off, &len);
        buf = g->dlen[h] ? gpa_ptr(g, g->data_gpa[h], g->dlen[h]) : NULL;
        if (g->type[h] == VIRTIO_BLK_T_GET_ID && st == VIRTIO_BLK_S_OK) {
            static const char serial[20] = "fuzz-dataplane-seria";

            if (g->dlen[h] && memcmp(buf, serial, MIN(g->dlen[h], 20)) != 0) {
                FAIL("GET_ID of head %u: wrong serial", h);
            }
        }
        if (st != VIRTIO_BLK_S_OK) {
            if (ranged && g->type[h] != VIRTIO_BLK_T_IN) {
                forget(off, len); /* a failed write may have written part */
            }
            continue;
        }
        if (g->type[h] != VIRTIO_BLK_T_IN || !ranged) {
            continue;
        }
        for (uint64_t o = 0; o < len; o++) {
            uint64_t s = (off + o) / 512;
            uint8_t want = g->null_engine ? 0 : shadow[off + o];

            if ((g->null_engine || (shadow_known[s] && !writers[s])) && buf[o] != want) {
                FAIL("read of head %u (sector %llu, %llu bytes) got 0x%02x at byte %llu, the disk "
                     "holds 0x%02x",
                     h, (unsigned long long)g->sector[h], (unsigned long long)len, buf[o],
                     (unsigned long long)o, want);
            }
        }
    }
    if (g->null_engine) {
        return;
    }
    for (unsigned h = 0; h < g->num; h++) {
        uint64_t off, len;
        bool overlap = false;

        if (!g->tracked[h] || g->batch[h] != b || g->type[h] == VIRTIO_BLK_T_IN ||
            g->returned[h] != 1 || !disk_range(g, h, &off, &len) ||
            *(uint8_t *)gpa_ptr(g, g->status_gpa[h], 1) != VIRTIO_BLK_S_OK) {
            continue;
        }
        for (uint64_t s = off / 512; s < (off + len) / 512; s++) {
            overlap |= writers[s] != 1 || readers[s];
        }
        if (overlap || g->type[h] == VIRTIO_BLK_T_DISCARD) {
            forget(off, len); /* unordered with another request, or discarded */
        } else if (g->type[h] == VIRTIO_BLK_T_WRITE_ZEROES) {
            memset(shadow + off, 0, len);
        } else {
            memset(shadow + off, g->pattern[h], len);
        }
    }
}

static uint64_t dp_kicks(DataPlane *dp)
{
    DataPlaneQueueStats st;

    dataplane_get_queue_stats(dp, 0, &st);
    return st.kicks;
}

static void noop(void *opaque)
{
}

/* Publish pending avail entries (+@extra on the index), kick, wait, check. */
static void kick(Guest *g, DataPlane *dp, uint16_t extra, uint8_t flags, bool resume)
{
    struct vring_avail *a = avail_ring(g);
    uint64_t before = dp_kicks(dp), one = 1, calls;
    uint16_t used_before;
    uint16_t newidx;

    for (unsigned i = 0; i < g->npend; i++) {
        a->ring[(uint16_t)(g->avail_idx + i) % g->num] = htole16(g->pend[i]);
    }
    newidx = (uint16_t)(g->avail_idx + g->npend + extra);
    /* What the device may legitimately take: the ring slots now published. */
    for (uint16_t i = g->avail_idx; i != newidx; i++) {
        g->avail_count[le16toh(a->ring[i % g->num])]++;
        g->made_avail++;
    }
    if (extra) {
        g->clean = false;
    }
    a->flags = htole16((flags & 2) ? VRING_AVAIL_F_NO_INTERRUPT : 0);
    if (flags & 4) {
        a->ring[g->num] = htole16(flags >> 3); /* used_event */
    }
    g->nbatch++; /* requests built from now on belong to the next batch */
    __atomic_store_n(&a->idx, htole16(newidx), __ATOMIC_RELEASE);
    g->avail_idx = newidx;
    g->npend = 0;

    if (resume) {
        stage("resume");
        dataplane_resume(dp); /* requests held by werror/rerror=stop go again */
    }
    stage("kick");
    if (write(H.kick_fd, &one, sizeof(one)) != sizeof(one)) {
        FAIL("kick eventfd write: %s", strerror(errno));
    }
    while (dp_kicks(dp) == before) {
        sched_yield();
    }
    stage("kick handler");
    iothread_run_sync(H.iothread, noop, NULL); /* the kick's pass ran to its end */
    stage("drain");
    dataplane_drain(dp); /* every request the pass submitted completed and published */
    used_before = g->used_seen;
    check_used(g);
    /*
     * Without EVENT_IDX and VRING_AVAIL_F_NO_INTERRUPT the guest wants an
     * interrupt for every publish: used->idx moved, so the call eventfd must
     * have been written (a live queue; a broken one is reset instead).
     */
    if (g->used_seen != used_before && !g->event_idx && !(flags & 2) &&
        !virtqueue_is_broken(g->vq) && read(H.call_fd, &calls, sizeof(calls)) != sizeof(calls)) {
        FAIL("used idx moved from %u to %u without an interrupt", used_before, g->used_seen);
    }
    if (g->data_checks && g->clean) {
        check_batch(g, g->nbatch - 1);
    } else if (!g->null_engine) {
        forget(0, DISK_BYTES); /* a hostile batch may have written anywhere */
    }
}

static void run(const uint8_t *data, size_t size)
{
    static const uint64_t fbits[6] = {
        BIT(VIRTIO_RING_F_EVENT_IDX), BIT(VIRTIO_RING_F_INDIRECT_DESC), BIT(VIRTIO_BLK_F_FLUSH),
        BIT(VIRTIO_BLK_F_CONFIG_WCE), BIT(VIRTIO_BLK_F_DISCARD),        BIT(VIRTIO_BLK_F_WRITE_ZEROES)};
    static const DataPlaneErrorPolicy policies[4] = {DATAPLANE_ERR_REPORT, DATAPLANE_ERR_IGNORE,
                                                     DATAPLANE_ERR_STOP, DATAPLANE_ERR_ENOSPC};
    unsigned engine = (data[0] & 7) % NENGINES, k = ((data[0] >> 3) & 3) % NCONFS;
    unsigned num = 1u << (1 + (data[2] & 7) % 6);
    Guest *g = g_new0(Guest, 1);
    DataPlane *dp = get_dp(engine, k);
    VirtIOBlk *blk = H.blk[k];
    uint64_t features = virtio_blk_get_host_features(blk);
    const Rec *recs = (const Rec *)(data + 4);
    size_t nrec = MIN((size - 4) / sizeof(Rec), MAX_RECS);
    GuestMemRegion regions[2];
    DataPlaneQueue dq;
    GuestMem *gm;
    VirtQueue *vq;
    VirtIOBlkQueue *q;
    GError *err = NULL;
    bool building = true;
    uint64_t cnt;

    if (!dp) {
        g_free(g);
        return;
    }
    for (unsigned i = 0; i < 6; i++) {
        if (!(data[1] & (1u << i))) {
            features &= ~fbits[i];
        }
    }
    features |= BIT(VIRTIO_F_VERSION_1);
    g->ram[0] = g_malloc0(REGION_SIZE);
    g->ram[1] = g_malloc0(REGION_SIZE);
    g->num = num;
    g->bump[0] = BUF_START;
    g->clean = true;
    g->data_checks = !(data[3] & 0x10);
    g->null_engine = engine == ENGINE_NULL;
    g->event_idx = features & BIT(VIRTIO_RING_F_EVENT_IDX);
    shadow = shadow_data[engine >= ENGINE_URING_DIRECT];
    shadow_known = shadow_known_s[engine >= ENGINE_URING_DIRECT];
    regions[0] = (GuestMemRegion){.gpa = 0, .size = REGION_SIZE, .hva = g->ram[0]};
    regions[1] = (GuestMemRegion){.gpa = REGION1_GPA, .size = REGION_SIZE, .hva = g->ram[1]};

    /* Device reset and renegotiation, then the queue as the driver set it up. */
    virtio_blk_reset(blk);
    if (!virtio_blk_set_features(blk, features, &err)) {
        FAIL("set_features: %s", err->message);
    }
    gm = guestmem_new(regions, 2, &err);
    vq = gm ? virtqueue_new(gm, num, DESC_GPA, AVAIL_GPA, USED_GPA, features, &err) : NULL;
    q = vq ? virtio_blk_queue_new(blk, vq, NULL, NULL, &err) : NULL;
    if (!q) {
        FAIL("queue setup: %s", err ? err->message : "?");
    }

    /* werror/rerror and error injection of this input (none left from the last one). */
    dataplane_inject_clear(dp);
    dataplane_set_error_policy(dp, policies[data[3] & 3], policies[(data[3] >> 2) & 3]);
    if (data[3] & 0x10) {
        static const int errs[4] = {EIO, ENOSPC, ENOTSUP, EINVAL};
        IOQInjectRule rule = {.op = -1, .nth = (data[3] & 0x80) ? 2 : 0,
                              .error = errs[(data[3] >> 5) & 3]};

        if (!dataplane_inject_error(dp, &rule, &err)) {
            FAIL("inject: %s", err->message);
        }
    }

    /* Pokes land in RAM before the device starts; requests after them. */
    for (size_t i = 0; i < nrec; i++) {
        if (recs[i].kind >= 0xf8) {
            poke(g, &recs[i]);
        }
    }
    /* The avail index is the driver's: a poked one does not count as published. */
    avail_ring(g)->idx = 0;
    g->used0 = g->used_seen = le16toh(used_ring(g)->idx);
    if (g->used0) {
        /* A device takes used->idx from RAM at setup: rebuild with the poked value. */
        virtio_blk_queue_free(q);
        virtqueue_free(vq);
        vq = virtqueue_new(gm, num, DESC_GPA, AVAIL_GPA, USED_GPA, features, &err);
        q = virtio_blk_queue_new(blk, vq, NULL, NULL, &err);
    }

    event_loop_set_poll_params(iothread_get_loop(H.iothread), (data[2] & 0x80) ? 32768 : 0, 0, 0);
    g->vq = vq;
    stage("start");
    __atomic_store_n(&wd_deadline, now_ns() + (int64_t)HANG_SECONDS * 1000000000,
                     __ATOMIC_RELEASE);
    dq = (DataPlaneQueue){.q = q, .host_notifier = H.kick_fd, .notifier = {.fd = H.call_fd}};
    if (!dataplane_start(dp, &dq, 1, &err)) {
        FAIL("dataplane_start: %s", err->message);
    }
    for (size_t i = 0; i < nrec; i++) {
        const Rec *r = &recs[i];

        if (r->kind >= 0xf8) {
            continue;
        }
        if (r->kind >= 0xf0) {
            kick(g, dp, (r->kind & 1) ? r->aux : 0, r->shape, r->kind & 2);
            continue;
        }
        if (building && g->npend < G_N_ELEMENTS(g->pend)) {
            building = add_request(g, r);
        }
    }
    kick(g, dp, 0, 0, false);
    stage("stop");
    dataplane_stop(dp);
    check_used(g);
    if (verbose) {
        fprintf(stderr, "engine %u conf %u num %u: %llu made available, %llu used%s%s\n", engine, k,
                num, (unsigned long long)g->made_avail, (unsigned long long)g->consumed,
                g->clean ? ", clean" : "", virtqueue_is_broken(vq) ? ", queue broken" : "");
    }
    if (dataplane_held_count(dp) != 0) {
        FAIL("%u request(s) still held after dataplane_stop", dataplane_held_count(dp));
    }
    if (virtio_blk_queue_inflight(q) != 0) {
        FAIL("%u request(s) still in the engine after dataplane_stop",
             virtio_blk_queue_inflight(q));
    }
    if (g->clean && !virtqueue_is_broken(vq)) {
        for (unsigned h = 0; h < num; h++) {
            uint8_t st;

            if (!g->tracked[h]) {
                continue;
            }
            if (g->returned[h] != 1) {
                FAIL("well-formed head %u returned %u times on a live queue", h, g->returned[h]);
            }
            st = *(uint8_t *)gpa_ptr(g, g->status_gpa[h], 1);
            if (st != VIRTIO_BLK_S_OK && st != VIRTIO_BLK_S_IOERR && st != VIRTIO_BLK_S_UNSUPP) {
                FAIL("status byte 0x%02x of head %u", st, h);
            }
        }
    }
    __atomic_store_n(&wd_deadline, 0, __ATOMIC_RELEASE);
    while (read(H.call_fd, &cnt, sizeof(cnt)) > 0) {
    }
    virtio_blk_queue_free(q);
    virtqueue_free(vq);
    guestmem_free(gm);
    g_free(g->ram[0]);
    g_free(g->ram[1]);
    g_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!H.iothread) {
        harness_init();
    }
    if (size < 4) {
        return 0;
    }
    run(data, size);
    return 0;
}
