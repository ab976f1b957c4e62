/*
 * libFuzzer target: the virtio-blk request engine with the dataplane started.
 * A hostile guest lays out one to four split virtqueues per input (descriptor
 * tables, avail rings, request headers and data buffers, indirect tables,
 * bogus lengths, addresses, loops and head numbers, raw pokes into RAM); one
 * or two DataPlanes serve them, each on its own iothread (as
 * iothread-vq-mapping does), over a real backend (the null engine, io_uring
 * or libaio on a small temp file, buffered or O_DIRECT, or the nbd engine
 * against an nbdkit memory disk), optionally throttled, and the queues may
 * move between the dataplanes while the guest runs (x-blockdev-remap-vqs);
 * the fuzzer thread is the guest: it publishes, kicks, waits (bounded) until
 * the device consumed what it will, and checks what the device returned on
 * each queue.
 *
 * The dataplanes (per engine and device configuration: one for the plain
 * single-queue mode, two for the multiqueue modes, remapped per input with
 * dataplane_set_queues()) and their iothreads live for the whole run. Per
 * input, as a device reset would, the feature bits are negotiated again and
 * new virtqueues and request engine queues are made over fresh guest RAM,
 * started, served, stopped and freed.
 *
 * Invariants checked, per queue (a violation aborts with a message, which
 * libFuzzer reports with the input):
 *   - used->idx never advances by more than the heads made available on that
 *     queue;
 *   - every used id is < the queue size and a head that was made available
 *     on that queue (as many times as it was): a completion on another
 *     queue, or a second one, is caught;
 *   - after dataplane_stop() (at the end, and at each remap) the engine
 *     holds no request, and on a queue that did not break every chain the
 *     device popped was returned (used elements = last_avail_idx);
 *   - dataplane_try_stop() refuses a remap only while a request is held;
 *   - throttled requests still in the avail ring at the stop are served by a
 *     restart without limits (nothing lost at a stop while throttled);
 *   - for inputs of well-formed chains only (no poke, no bogus field) on a
 *     queue that did not break: every request is returned exactly once, its
 *     status byte is OK, IOERR or UNSUPP, and its used length is exact (and
 *     never beyond the chain's device-writable bytes);
 *   - for such batches without injected errors and not deferred by the
 *     throttle: a successful read returns what a shadow of the disk says
 *     (zeroes on the null engine) wherever the shadow knows it, GET_ID the
 *     serial; requests of one batch (one kick, possibly of every queue and
 *     both iothreads) are unordered with each other;
 *   - without EVENT_IDX and VRING_AVAIL_F_NO_INTERRUPT, a kick whose
 *     completions moved used->idx on a live queue interrupted the guest on
 *     that queue's call eventfd (publishes the device made under an earlier
 *     kick's NO_INTERRUPT flag are not asked to);
 *   - no hang: each input must finish within HANG_SECONDS (a watchdog thread
 *     aborts with the stage it was stuck in).
 * ASan/UBSan watch every access: guest RAM is two separate heap blocks.
 *
 * Input layout (all new fields 0 = the single-queue target of before):
 *   [0]  bits 0-2 engine (null, io_uring, native, io_uring O_DIRECT, native
 *        O_DIRECT, nbd; 6-7 wrap), bits 3-4 device config (0/3 default, 1
 *        4K blocks with small limits, 2 read-only writethrough), bits 5-6
 *        queues - 1 (1..4), bit 7 two dataplanes (iothreads)
 *   [1]  driver feature mask: bit0 EVENT_IDX, bit1 INDIRECT_DESC, bit2 FLUSH,
 *        bit3 CONFIG_WCE, bit4 DISCARD, bit5 WRITE_ZEROES (VERSION_1 forced,
 *        other offered bits kept); bits 6-7 with two dataplanes, the
 *        queue -> iothread mapping (0 interleaved, 1 halves, 2 the last queue
 *        alone, 3 interleaved the other way; an iothread left without a queue
 *        is not used)
 *   [2]  bits 0-2 log2 of the queue size (1..6: 2..64 entries; 6,7 wrap),
 *        bits 3-4 throttling (0 none, 1 iops-total, 2 bps-total, 3
 *        iops-write with a burst rate and length 2 plus bps-read), bits 5-6
 *        the rate (level 0 the slowest), bit 7 adaptive polling on the
 *        iothreads (poll-max-ns 32768, QEMU's default: the avail ring and the
 *        completions are polled too)
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
#include "nbdserver.h"
#include "virtio/virtio-blk.h"

#define REGION_SIZE  0x10000
#define REGION1_GPA  0x20000 /* a hole of 64 KiB between the regions */
#define RING_STRIDE  0x1000  /* queue q's rings at q * RING_STRIDE: */
#define DESC_OFF     0x0000
#define AVAIL_OFF    0x0400
#define USED_OFF     0x0800 /* buffers from nq * RING_STRIDE */
#define MAX_QSIZE    64
#define MAX_NQ       4
#define NDPS         2 /* dataplanes (iothreads) of the multiqueue modes */
#define DISK_BYTES   (64 * 1024)
#define HANG_SECONDS 10
#define FUZZ_NAME    "fuzz-dataplane"
#include "fuzz-watchdog.h"
#define MAX_SEG  8
#define MAX_RECS 64
/* A kick waits this long at most for its throttled requests, once per input. */
#define THROTTLE_WAIT_NS (40 * 1000000ll)

#define BIT(n) (1ull << (n))

/* The file engines twice: buffered, and O_DIRECT (alignment checks, bounce pool). */
enum {
    ENGINE_NULL,
    ENGINE_URING,
    ENGINE_AIO,
    ENGINE_URING_DIRECT,
    ENGINE_AIO_DIRECT,
    ENGINE_NBD,
    NENGINES
};
#define NCONFS 3

/* Disks the shadow follows: the buffered file, the O_DIRECT file, the NBD server's. */
enum { DISK_FILE, DISK_DIRECT, DISK_NBD, NDISKS };

/*
 * One 16-byte record of the input. kind 0xf0-0xf7 is a kick: publish what the
 * records before it built on the kicked queue(s) (seg & 3: the queue, modulo
 * the queue count; seg bit 7: every queue at once, one batch), bit 0: and
 * move avail->idx on by aux more, bit 1: dataplane_resume() first, bit 2:
 * toggle the throttle of the kicked queues' dataplanes (limits off if on,
 * else this input's limits with empty buckets); seg bit 6: before all that,
 * remap as x-blockdev-remap-vqs does on a running guest (every dataplane
 * stopped and checked, the queues moved from one dataplane to two or back,
 * mapping seg bits 4-5, the first dataplane's throttle state and levels and
 * the input's error policy handed to the new ones, started again); shape bit 1:
 * VRING_AVAIL_F_NO_INTERRUPT, bit 2: used_event = shape >> 3. kind 0xf8-0xff
 * is a poke: 12 bytes (from sector[0]) written at offset seg | aux << 8 of
 * region shape & 1, before the device starts. Any other kind is a request
 * whose type is kind & 7, on queue (kind >> 3) & 3 (modulo the queue count).
 */
typedef struct Rec {
    uint8_t kind; /* bits 0-2 request type (table), 3-4 queue, 0xf0 kick, 0xf8.. poke */
    uint8_t shape;
    uint8_t seg;
    uint8_t aux;
    uint8_t sector[4];
    uint8_t len[4];
    uint8_t extra[4];
} Rec;

/* rec.shape */
#define SH_INDIRECT  0x01 /* through an indirect table */
#define SH_SPLIT_HDR 0x02 /* header over two descriptors */
#define SH_RO_STATUS 0x04 /* status descriptor not device-writable */
#define SH_FLIP_DIR  0x08 /* data in the wrong direction */
#define SH_LOOP      0x10 /* last descriptor chains back to the first */
#define SH_BAD_ADDR  0x20 /* one descriptor's address outside RAM / crossing */
#define SH_BAD_LEN   0x40 /* one descriptor's length bogus */
#define SH_RAW_HEAD  0x80 /* the avail entry is rec.aux, not the head */
/* rec.seg: bits 0-2 data segments, 3-4 misalignment, then: */
#define SEG_REGION1  0x20 /* data buffers in region 1 */
#define SEG_BAD_NEXT 0x40 /* a next field out of range */
#define SEG_NESTED   0x80 /* VRING_DESC_F_INDIRECT inside an indirect table */
#define SH_BOGUS     (SH_RO_STATUS | SH_FLIP_DIR | SH_LOOP | SH_BAD_ADDR | SH_BAD_LEN | SH_RAW_HEAD)
#define SEG_BOGUS    (SEG_BAD_NEXT | SEG_NESTED)
/* kick record: seg */
#define KICK_ALL   0x80
#define KICK_REMAP 0x40 /* first move the queues to other dataplanes (bits 4-5: the mapping) */

typedef struct Harness {
    IOThread *iothread[NDPS];
    int kick_fd[MAX_NQ], call_fd[MAX_NQ];
    int disk_fd, direct_fd; /* direct_fd: -1 if O_DIRECT is refused here */
    NbdServer nbd;          /* nbdkit's memory plugin on a unix socket, started on first use */
    bool nbd_tried;
    VirtIOBlk *blk[NCONFS];
    /* the single-queue mode: one dataplane on iothread 0, its own accounting */
    DataPlane *dp[NENGINES][NCONFS];
    bool unusable[NENGINES][NCONFS];
    /* the multiqueue modes: one per iothread, queues given by dataplane_set_queues() */
    DataPlane *mdp[NENGINES][NCONFS][NDPS];
    bool munusable[NENGINES][NCONFS];
    BlockAcctShard acct[NENGINES][NCONFS][MAX_NQ]; /* the device's shards */
} Harness;

static Harness H;
static bool verbose; /* FUZZ_DATAPLANE_VERBOSE=1: print every used element */

/*
 * What the run reached, printed at exit (and read by scripts: one line
 * "fuzz-dataplane modes: ..."), to show the modes are exercised.
 */
static struct {
    uint64_t inputs, nq[MAX_NQ + 1], two_dps, both_dps_completed, engine[NENGINES];
    uint64_t throttled_inputs, throttle_waits, deferred, restarted, toggles, kick_all;
    uint64_t nbd_requests, mq_requests, remaps, remaps_refused;
} stats;

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

static void print_stats(void)
{
    fprintf(stderr,
            "fuzz-dataplane modes: inputs %llu; queues 1/2/3/4: %llu/%llu/%llu/%llu; two "
            "iothreads %llu (both completed requests %llu); engines null %llu io_uring %llu "
            "native %llu io_uring-direct %llu native-direct %llu nbd %llu; throttled inputs %llu, "
            "throttle waits %llu, deferred %llu, restarted after stop %llu, toggles %llu; "
            "kick-all %llu; remaps %llu (refused, requests held: %llu); requests on queues > 0 "
            "%llu, on nbd %llu\n",
            (unsigned long long)stats.inputs, (unsigned long long)stats.nq[1],
            (unsigned long long)stats.nq[2], (unsigned long long)stats.nq[3],
            (unsigned long long)stats.nq[4], (unsigned long long)stats.two_dps,
            (unsigned long long)stats.both_dps_completed, (unsigned long long)stats.engine[0],
            (unsigned long long)stats.engine[1], (unsigned long long)stats.engine[2],
            (unsigned long long)stats.engine[3], (unsigned long long)stats.engine[4],
            (unsigned long long)stats.engine[5], (unsigned long long)stats.throttled_inputs,
            (unsigned long long)stats.throttle_waits, (unsigned long long)stats.deferred,
            (unsigned long long)stats.restarted, (unsigned long long)stats.toggles,
            (unsigned long long)stats.kick_all, (unsigned long long)stats.remaps,
            (unsigned long long)stats.remaps_refused, (unsigned long long)stats.mq_requests,
            (unsigned long long)stats.nbd_requests);
}

static void harness_exit(void)
{
    print_stats();
    if (H.nbd.pid) {
        nbd_server_free(&H.nbd);
    }
}

static void harness_init(void)
{
    const char *dir = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    GError *err = NULL;

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
    for (unsigned q = 0; q < MAX_NQ; q++) {
        H.kick_fd[q] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        H.call_fd[q] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (H.kick_fd[q] < 0 || H.call_fd[q] < 0) {
            fprintf(stderr, "fuzz-dataplane: eventfd: %s\n", strerror(errno));
            abort();
        }
    }
    H.iothread[0] = iothread_new("fuzz-dp", &err);
    H.iothread[1] = H.iothread[0] ? iothread_new("fuzz-dp1", &err) : NULL;
    if (!H.iothread[1]) {
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
    atexit(harness_exit);
    fuzz_watchdog_start();
}

/*
 * The NBD server, started on first use: nbdkit's memory plugin (DISK_BYTES,
 * zeroes at start, like the temp files) on a unix socket, through the tests'
 * helper (tests/block/nbdserver.c). False if nbdkit is not installed.
 */
static bool nbd_ready(void)
{
    if (!H.nbd_tried) {
        H.nbd_tried = true;
        if (nbd_server_available(NBD_SRV_NBDKIT)) {
            nbd_server_start(&H.nbd, NBD_SRV_NBDKIT, false, DISK_BYTES);
        } else {
            fprintf(stderr, "fuzz-dataplane: nbdkit is not installed: nbd engine skipped\n");
        }
    }
    return H.nbd.pid != 0;
}

static const char *const engine_names[NENGINES] = {"null",     "io_uring", "native",
                                                   "io_uring", "native",   "nbd"};

/*
 * The backend of @engine on config @k; false (said once by the caller) when
 * the engine cannot run here.
 */
static bool dp_conf_for(DataPlaneConf *dc, unsigned engine, unsigned k, GError **errp)
{
    bool direct = engine == ENGINE_URING_DIRECT || engine == ENGINE_AIO_DIRECT;

    if (direct && H.direct_fd < 0) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_INVAL, "O_DIRECT refused here");
        return false;
    }
    if (engine == ENGINE_NBD && !nbd_ready()) {
        g_set_error(errp, G_FILE_ERROR, G_FILE_ERROR_NOENT, "no NBD server");
        return false;
    }
    *dc = (DataPlaneConf){0};
    dc->blk = H.blk[k];
    dc->iothread = H.iothread[0];
    dc->num_queues = 1;
    dc->queue_size = MAX_QSIZE;
    dc->complete_batch = k == 1 ? 1 : 0; /* publish per completion on one config */
    if (k == 0) {
        /* the completion hold on the other: 20 us while 2 or more are in flight */
        dc->complete_hold_ns = 20000;
        dc->complete_hold_depth = 2;
    }
    dc->ioq.engine = engine_names[engine];
    dc->ioq.fd = engine == ENGINE_NULL || engine == ENGINE_NBD ? -1
                 : direct                                      ? H.direct_fd
                                                               : H.disk_fd;
    dc->ioq.direct = direct;
    dc->ioq.logical_block_size = k == 1 ? 4096 : 512;
    dc->ioq.null_read_zeroes = true;
    dc->ioq.bounce_pool_size = 128 << 10; /* two 64 KiB slots: bounced requests queue up */
    dc->ioq.submit_early = k == 1 ? 0 : 4; /* x-submit-early: a device's default, and off */
    if (engine == ENGINE_NBD) {
        dc->ioq.nbd.socket = H.nbd.sock;
        dc->ioq.nbd.export_name = "exp";
        dc->ioq.nbd.connect_timeout_ms = 5000;
    }
    return true;
}

/* The single-queue dataplane of (@engine, @k), made on first use; NULL if unusable here. */
static DataPlane *get_dp(unsigned engine, unsigned k)
{
    DataPlaneConf dc;
    GError *err = NULL;

    if (H.dp[engine][k] || H.unusable[engine][k]) {
        return H.dp[engine][k];
    }
    H.dp[engine][k] = dp_conf_for(&dc, engine, k, &err) ? dataplane_create(&dc, &err) : NULL;
    if (!H.dp[engine][k]) {
        fprintf(stderr, "fuzz-dataplane: engine %s unusable here: %s\n", engine_names[engine],
                err->message);
        g_error_free(err);
        H.unusable[engine][k] = true;
    }
    return H.dp[engine][k];
}

/*
 * The multiqueue dataplanes of (@engine, @k), one per iothread, made on
 * first use as a device with iothread-vq-mapping makes them (the device's
 * accounting shards, room for every queue); false if unusable here.
 */
static bool get_mdps(unsigned engine, unsigned k, DataPlane **out)
{
    static const unsigned first[1] = {0};
    static const BlockAcctStats no_histogram;
    DataPlaneConf dc;
    GError *err = NULL;

    if (H.munusable[engine][k]) {
        return false;
    }
    for (unsigned i = 0; i < NDPS && !H.mdp[engine][k][i]; i++) {
        if (!dp_conf_for(&dc, engine, k, &err)) {
            break;
        }
        if (i == 0) {
            for (unsigned q = 0; q < MAX_NQ; q++) {
                block_acct_shard_init(&H.acct[engine][k][q], &no_histogram);
            }
        }
        dc.iothread = H.iothread[i];
        dc.acct = H.acct[engine][k];
        dc.queue_index = first;
        dc.max_queues = MAX_NQ;
        H.mdp[engine][k][i] = dataplane_create(&dc, &err);
        if (!H.mdp[engine][k][i]) {
            break;
        }
    }
    if (err) {
        fprintf(stderr, "fuzz-dataplane: engine %s (multiqueue) unusable here: %s\n",
                engine_names[engine], err->message);
        g_error_free(err);
        H.munusable[engine][k] = true;
        return false;
    }
    memcpy(out, H.mdp[engine][k], sizeof(DataPlane *) * NDPS);
    return true;
}

/* ---- guest side ---- */

/* One virtqueue of the guest, and what the checks know about it. */
typedef struct GVq {
    unsigned idx;  /* device queue index */
    uint64_t base; /* its rings' guest-physical base */
    unsigned num;
    unsigned next_desc;
    /* avail entries written but not yet published */
    uint16_t pend[MAX_QSIZE * 2];
    unsigned npend;
    uint16_t avail_idx;
    uint16_t used0, used_seen;
    uint64_t made_avail;             /* heads published so far */
    uint64_t consumed;               /* used elements checked */
    uint32_t avail_count[MAX_QSIZE]; /* multiset of published heads (those < num: a used id
                                        at or above num fails before it is looked up) */
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
    unsigned batch[MAX_QSIZE]; /* the kick that published it */
    VirtQueue *vq;
    VirtIOBlkQueue *q;
    unsigned dpi;    /* the dataplane serving it (index into Guest.dps) */
    unsigned local;  /* its index among that dataplane's queues */
    uint64_t st0[3]; /* its dataplane's counters when it took the queue */
} GVq;

typedef struct Guest {
    uint8_t *ram[2];
    uint64_t bump[2];
    bool clean;       /* well-formed chains only, no poke */
    unsigned nbatch;  /* kicks so far */
    bool data_checks; /* clean, no injected error: the disk's content is known */
    bool null_engine; /* reads return zeroes, writes go nowhere */
    bool event_idx;   /* VIRTIO_RING_F_EVENT_IDX negotiated */
    bool deferred;    /* a kick gave up waiting for throttled requests */
    uint32_t lbs;
    unsigned nq, ndp;
    DataPlane *dps[NDPS];            /* the dataplanes in use (ndp of them) */
    IOThread *iot[NDPS];             /* and their iothreads */
    DataPlaneQueue dq[NDPS][MAX_NQ]; /* what each one is started with */
    unsigned ndq[NDPS];
    bool two;            /* the multiqueue dataplanes, spread by @pattern */
    bool ever_two;       /* two iothreads served it at some point */
    uint64_t done[NDPS]; /* requests completed, per iothread (H.iothread index) */
    const uint8_t *hdr;  /* the input's header */
    unsigned engine, k;
    ThrottleLimits limits; /* this input's (none: all off) */
    bool throttle_on[NDPS];
    GVq *vqs[MAX_NQ];
} Guest;

/*
 * What the disk holds, per byte, where known (sector granularity): the
 * file engines and the NBD server write it, every input ends drained, so it
 * carries over between inputs. A discard, a failed write or two overlapping
 * requests of one batch (unordered) make a sector unknown.
 */
static uint8_t shadow_data[NDISKS][DISK_BYTES];
static bool shadow_known_s[NDISKS][DISK_BYTES / 512] = {{[0 ... DISK_BYTES / 512 - 1] = true},
                                                        {[0 ... DISK_BYTES / 512 - 1] = true},
                                                        {[0 ... DISK_BYTES / 512 - 1] = true}};
static uint8_t *shadow; /* this input's disk */
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
    struct vring_desc d = {
        .addr = htole64(addr), .len = htole32(len), .flags = htole16(flags), .next = htole16(next)};

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

static const uint32_t types[8] = {VIRTIO_BLK_T_IN,         VIRTIO_BLK_T_OUT,
                                  VIRTIO_BLK_T_FLUSH,      VIRTIO_BLK_T_GET_ID,
                                  VIRTIO_BLK_T_DISCARD,    VIRTIO_BLK_T_WRITE_ZEROES,
                                  0 /* raw, from extra */, VIRTIO_BLK_T_OUT | VIRTIO_BLK_T_BARRIER};

/* Build one request chain from @r on @v; false when out of descriptors or RAM. */
static bool add_request(Guest *g, GVq *v, const Rec *r)
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
        static const uint64_t bad[4] = {REGION_SIZE - 4, REGION_SIZE + 0x800,
                                        REGION1_GPA + REGION_SIZE, ~0ull - 8};
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

        if (!tgpa || v->next_desc >= v->num) {
            return false;
        }
        t = gpa_ptr(g, tgpa, n * 16);
        for (unsigned i = 0; i < n; i++) {
            uint16_t f =
                (b[i].write ? VRING_DESC_F_WRITE : 0) | (i + 1 < n ? VRING_DESC_F_NEXT : 0);

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
        head = (uint16_t)v->next_desc++;
        put_desc(g->ram[0] + v->base + DESC_OFF, head, tgpa, tlen,
                 VRING_DESC_F_INDIRECT | ((r->extra[3] & 4) ? VRING_DESC_F_NEXT : 0), head);
        bogus |= (r->extra[3] & 4) != 0;
    } else {
        if (v->next_desc + n > v->num) {
            return false;
        }
        head = (uint16_t)v->next_desc;
        for (unsigned i = 0; i < n; i++) {
            unsigned d = v->next_desc++;
            uint16_t f =
                (b[i].write ? VRING_DESC_F_WRITE : 0) | (i + 1 < n ? VRING_DESC_F_NEXT : 0);
            uint16_t next = (uint16_t)(d + 1);

            if (i + 1 == n && (r->shape & SH_LOOP)) {
                f |= VRING_DESC_F_NEXT;
                next = head;
            }
            if (i == 0 && (r->seg & SEG_BAD_NEXT) && n > 1) {
                next = (uint16_t)(v->num + r->aux);
            }
            put_desc(g->ram[0] + v->base + DESC_OFF, d, b[i].gpa, b[i].len, f, next);
        }
    }

    v->pend[v->npend++] = (r->shape & SH_RAW_HEAD) ? r->aux : head;
    if (bogus) {
        g->clean = false;
    } else {
        v->tracked[head] = true;
        v->status_gpa[head] = status;
        v->in_bytes[head] = in_bytes;
        v->type[head] = type & ~VIRTIO_BLK_T_BARRIER; /* as the device reads it */
        v->sector[head] = sector;
        v->dlen[head] = dlen;
        v->data_gpa[head] = data;
        v->pattern[head] = 0x5a ^ r->aux;
        v->batch[head] = ~0u; /* set when published */
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

static struct vring_avail *avail_ring(Guest *g, GVq *v)
{
    return (struct vring_avail *)(g->ram[0] + v->base + AVAIL_OFF);
}

static struct vring_used *used_ring(Guest *g, GVq *v)
{
    return (struct vring_used *)(g->ram[0] + v->base + USED_OFF);
}

/* Check the used elements of @v published since the last check. */
static void check_used(Guest *g, GVq *v)
{
    struct vring_used *u = used_ring(g, v);
    uint16_t idx = le16toh(__atomic_load_n(&u->idx, __ATOMIC_ACQUIRE));
    uint16_t adv = (uint16_t)(idx - v->used_seen);

    if (v->consumed + adv > v->made_avail) {
        FAIL("queue %u: used idx advanced to %u (from %u at start): %llu element(s) used, only "
             "%llu head(s) made available",
             v->idx, idx, v->used0, (unsigned long long)(v->consumed + adv),
             (unsigned long long)v->made_avail);
    }
    for (uint16_t i = 0; i < adv; i++) {
        struct vring_used_elem e = u->ring[(uint16_t)(v->used_seen + i) % v->num];
        uint32_t id = le32toh(e.id), len = le32toh(e.len);

        if (id >= v->num) {
            FAIL("queue %u: used id %u >= queue size %u", v->idx, id, v->num);
        }
        if (!v->avail_count[id]) {
            FAIL("queue %u: used id %u was not made available on it (or is returned once too "
                 "often)",
                 v->idx, id);
        }
        if (verbose) {
            fprintf(stderr, "queue %u used: id %u len %u status 0x%02x%s\n", v->idx, id, len,
                    v->tracked[id] ? *(uint8_t *)gpa_ptr(g, v->status_gpa[id], 1) : 0xff,
                    v->tracked[id] ? "" : " (untracked)");
        }
        v->avail_count[id]--;
        v->returned[id]++;
        if (g->clean && v->tracked[id]) {
            uint8_t st = *(uint8_t *)gpa_ptr(g, v->status_gpa[id], 1);
            uint64_t want = 1;

            if (len > v->in_bytes[id]) {
                FAIL("queue %u: used len %u of head %u exceeds its %llu device-writable bytes",
                     v->idx, len, id, (unsigned long long)v->in_bytes[id]);
            }
            if (st == VIRTIO_BLK_S_OK && v->type[id] == VIRTIO_BLK_T_IN) {
                want += v->dlen[id];
            } else if (st == VIRTIO_BLK_S_OK && v->type[id] == VIRTIO_BLK_T_GET_ID) {
                want += MIN(v->dlen[id], 20);
            }
            if (v->returned[id] == 1 && len != want) {
                FAIL("queue %u: used len %u of head %u (type %u, status %u), expected %llu", v->idx,
                     len, id, v->type[id], st, (unsigned long long)want);
            }
        }
    }
    v->used_seen = idx;
    v->consumed += adv;
}

/* Byte range of a data request on the disk; false if outside it. */
static bool disk_range(Guest *g, GVq *v, unsigned h, uint64_t *off, uint64_t *len)
{
    struct virtio_blk_discard_write_zeroes seg;

    if (v->type[h] == VIRTIO_BLK_T_IN || v->type[h] == VIRTIO_BLK_T_OUT) {
        *len = v->dlen[h];
    } else if (v->type[h] == VIRTIO_BLK_T_DISCARD || v->type[h] == VIRTIO_BLK_T_WRITE_ZEROES) {
        if (v->dlen[h] != sizeof(seg)) {
            return false;
        }
        memcpy(&seg, gpa_ptr(g, v->data_gpa[h], sizeof(seg)), sizeof(seg));
        *len = (uint64_t)le32toh(seg.num_sectors) * 512;
    } else {
        return false;
    }
    *off = v->sector[h] * 512;
    return v->sector[h] < DISK_BYTES / 512 && *len <= DISK_BYTES - *off && *len;
}

static void forget(uint64_t off, uint64_t len)
{
    for (uint64_t s = off / 512; s < (off + len + 511) / 512; s++) {
        shadow_known[s] = false;
    }
}

/* Every tracked head of every queue that batch @b published. */
#define FOR_BATCH(g, b, v, h)                                                                      \
    for (unsigned qi_ = 0; qi_ < (g)->nq; qi_++)                                                   \
        for (GVq *v = (g)->vqs[qi_]; v; v = NULL)                                                  \
            for (unsigned h = 0; h < v->num; h++)                                                  \
                if (v->tracked[h] && v->batch[h] == (b))

/*
 * After batch @b was drained: the data of reads (the shadow, or zeroes from
 * the null engine), GET_ID's serial, then the writes of the batch into the
 * shadow. A batch is one kick, of one queue or of all: its requests, on
 * whatever queue and iothread, are unordered with each other.
 */
static void check_batch(Guest *g, unsigned b)
{
    static uint8_t readers[DISK_BYTES / 512], writers[DISK_BYTES / 512];

    memset(readers, 0, sizeof(readers));
    memset(writers, 0, sizeof(writers));
    FOR_BATCH(g, b, v, h)
    {
        uint64_t off, len;

        if (disk_range(g, v, h, &off, &len)) {
            for (uint64_t s = off / 512; s < (off + len) / 512; s++) {
                if (v->type[h] == VIRTIO_BLK_T_IN) {
                    readers[s] = 1;
                } else {
                    writers[s] += writers[s] < 2;
                }
            }
        }
    }
    FOR_BATCH(g, b, v, h)
    {
        uint64_t off, len;
        uint8_t st;
        const uint8_t *buf;
        bool ranged;

        if (v->returned[h] != 1) {
            continue;
        }
        st = *(uint8_t *)gpa_ptr(g, v->status_gpa[h], 1);
        ranged = disk_range(g, v, h, &off, &len);
        buf = v->dlen[h] ? gpa_ptr(g, v->data_gpa[h], v->dlen[h]) : NULL;
        if (v->type[h] == VIRTIO_BLK_T_GET_ID && st == VIRTIO_BLK_S_OK) {
            static const char serial[20] = "fuzz-dataplane-seria";

            if (v->dlen[h] && memcmp(buf, serial, MIN(v->dlen[h], 20)) != 0) {
                FAIL("GET_ID of head %u on queue %u: wrong serial", h, v->idx);
            }
        }
        if (st != VIRTIO_BLK_S_OK) {
            if (ranged && v->type[h] != VIRTIO_BLK_T_IN) {
                forget(off, len); /* a failed write may have written part */
            }
            continue;
        }
        if (v->type[h] != VIRTIO_BLK_T_IN || !ranged) {
            continue;
        }
        for (uint64_t o = 0; o < len; o++) {
            uint64_t s = (off + o) / 512;
            uint8_t want = g->null_engine ? 0 : shadow[off + o];

            if ((g->null_engine || (shadow_known[s] && !writers[s])) && buf[o] != want) {
                FAIL("read of head %u on queue %u (sector %llu, %llu bytes) got 0x%02x at byte "
                     "%llu, the disk holds 0x%02x",
                     h, v->idx, (unsigned long long)v->sector[h], (unsigned long long)len, buf[o],
                     (unsigned long long)o, want);
            }
        }
    }
    if (g->null_engine) {
        return;
    }
    FOR_BATCH(g, b, v, h)
    {
        uint64_t off, len;
        bool overlap = false;

        if (v->type[h] == VIRTIO_BLK_T_IN || v->returned[h] != 1 ||
            !disk_range(g, v, h, &off, &len) ||
            *(uint8_t *)gpa_ptr(g, v->status_gpa[h], 1) != VIRTIO_BLK_S_OK) {
            continue;
        }
        for (uint64_t s = off / 512; s < (off + len) / 512; s++) {
            overlap |= writers[s] != 1 || readers[s];
        }
        if (overlap || v->type[h] == VIRTIO_BLK_T_DISCARD) {
            forget(off, len); /* unordered with another request, or discarded */
        } else if (v->type[h] == VIRTIO_BLK_T_WRITE_ZEROES) {
            memset(shadow + off, 0, len);
        } else {
            memset(shadow + off, v->pattern[h], len);
        }
    }
}

static DataPlane *vq_dp(Guest *g, GVq *v)
{
    return g->dps[v->dpi];
}

static uint64_t dp_kicks(Guest *g, GVq *v)
{
    DataPlaneQueueStats st;

    dataplane_get_queue_stats(vq_dp(g, v), v->local, &st);
    return st.kicks;
}

static void noop(void *opaque)
{
}

/* The bucket state for this input's limits (or none), empty. */
static void throttle_set(Guest *g, unsigned dpi, bool on)
{
    ThrottleState ts;
    ThrottleLimits none;

    throttle_limits_init(&none);
    throttle_state_config(&ts, on ? &g->limits : &none, event_clock_ns());
    dataplane_set_throttle_state(g->dps[dpi], &ts);
    g->throttle_on[dpi] = on;
}

/* The throttling of the input: a few small limits, so that requests really wait. */
static void throttle_limits_for(ThrottleLimits *l, uint8_t b)
{
    static const uint64_t iops[4] = {100, 200, 500, 1000};
    static const uint64_t bps[4] = {256 << 10, 512 << 10, 1 << 20, 4 << 20};
    unsigned level = (b >> 5) & 3;

    throttle_limits_init(l);
    switch ((b >> 3) & 3) {
    case 1:
        l->b[THROTTLE_OPS_TOTAL].avg = iops[level];
        break;
    case 2:
        l->b[THROTTLE_BPS_TOTAL].avg = bps[level];
        break;
    case 3:
        /* the burst path: a second level that drains at max, capacity max/10 */
        l->b[THROTTLE_OPS_WRITE].avg = iops[level];
        l->b[THROTTLE_OPS_WRITE].max = 2 * iops[level];
        l->b[THROTTLE_OPS_WRITE].burst_length = 2;
        l->b[THROTTLE_BPS_READ].avg = bps[level];
        l->iops_size = 4096;
        break;
    }
}

/*
 * Throttled queues of @mask may still have requests in the avail ring after
 * the kick's drain: wait for them (bounded, once per input). Past the bound
 * the input is "deferred": its remaining requests complete whenever their
 * timers say, so the data checks end for this input.
 */
static void wait_throttled(Guest *g, unsigned mask)
{
    int64_t deadline = now_ns() + THROTTLE_WAIT_NS;

    for (;;) {
        bool left = false;

        for (unsigned q = 0; q < g->nq; q++) {
            GVq *v = g->vqs[q];
            VirtQueueDebug d;

            if (!(mask & (1u << q)) || !g->throttle_on[v->dpi]) {
                continue;
            }
            virtqueue_debug_snapshot(v->vq, &d);
            left |= !d.broken && d.last_avail_idx != v->avail_idx;
        }
        for (unsigned i = 0; i < g->ndp; i++) {
            dataplane_drain(g->dps[i]); /* what a timer popped has completed */
        }
        if (!left) {
            return;
        }
        if (now_ns() > deadline) {
            g->deferred = true;
            stats.deferred++;
            return;
        }
        usleep(500);
    }
}

/* Publish @v's pending avail entries (+@extra on the index) as batch g->nbatch. */
static void publish(Guest *g, GVq *v, uint16_t extra, uint8_t flags)
{
    struct vring_avail *a = avail_ring(g, v);
    uint16_t newidx;

    for (unsigned i = 0; i < v->npend; i++) {
        a->ring[(uint16_t)(v->avail_idx + i) % v->num] = htole16(v->pend[i]);
        if (v->pend[i] < v->num && v->tracked[v->pend[i]]) {
            v->batch[v->pend[i]] = g->nbatch;
        }
    }
    newidx = (uint16_t)(v->avail_idx + v->npend + extra);
    /* What the device may legitimately take: the ring slots now published. */
    for (uint16_t i = v->avail_idx; i != newidx; i++) {
        uint16_t head = le16toh(a->ring[i % v->num]);

        if (head < v->num) {
            v->avail_count[head]++;
        }
        v->made_avail++;
    }
    if (extra) {
        g->clean = false;
    }
    a->flags = htole16((flags & 2) ? VRING_AVAIL_F_NO_INTERRUPT : 0);
    if (flags & 4) {
        a->ring[v->num] = htole16(flags >> 3); /* used_event */
    }
    __atomic_store_n(&a->idx, htole16(newidx), __ATOMIC_RELEASE);
    v->avail_idx = newidx;
    v->npend = 0;
}

/*
 * Publish the pending avail entries of the queues in @mask (+@extra on each
 * index), kick them, wait until each kick's pass ran and its dataplane
 * drained (and, throttled, until the requests left the avail ring), check.
 */
static void kick(Guest *g, unsigned mask, uint16_t extra, uint8_t flags, bool resume, bool toggle)
{
    uint64_t before[MAX_NQ], one = 1, calls;
    uint16_t used_before[MAX_NQ];
    unsigned dpmask = 0;

    for (unsigned q = 0; q < g->nq; q++) {
        if (mask & (1u << q)) {
            before[q] = dp_kicks(g, g->vqs[q]);
            publish(g, g->vqs[q], extra, flags);
            dpmask |= 1u << g->vqs[q]->dpi;
        }
    }
    /*
     * From here on the device sees this kick's avail flags. A publish it made
     * earlier, under the last kick's flags (VRING_AVAIL_F_NO_INTERRUPT), may
     * still be unseen: a throttle timer's pass of a deferred input, or the
     * pass a remap's start made. As a driver does, take the used index after
     * a full barrier: the device publishes, then (after its own barrier)
     * reads the flags, so a publish missing from this index saw the new
     * flags, and only those must have interrupted.
     */
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    for (unsigned q = 0; q < g->nq; q++) {
        if (mask & (1u << q)) {
            used_before[q] =
                le16toh(__atomic_load_n(&used_ring(g, g->vqs[q])->idx, __ATOMIC_RELAXED));
        }
    }
    g->nbatch++; /* requests published from now on belong to the next batch */

    if (toggle) {
        stage("throttle toggle");
        for (unsigned i = 0; i < g->ndp; i++) {
            if (dpmask & (1u << i)) {
                throttle_set(g, i, !g->throttle_on[i] && throttle_limits_enabled(&g->limits));
                stats.toggles += throttle_limits_enabled(&g->limits);
            }
        }
    }
    if (resume) {
        stage("resume");
        for (unsigned i = 0; i < g->ndp; i++) {
            if (dpmask & (1u << i)) {
                dataplane_resume(g->dps[i]); /* requests held by werror/rerror=stop go again */
            }
        }
    }
    stage("kick");
    for (unsigned q = 0; q < g->nq; q++) {
        if ((mask & (1u << q)) && write(H.kick_fd[q], &one, sizeof(one)) != sizeof(one)) {
            FAIL("kick eventfd write: %s", strerror(errno));
        }
    }
    for (unsigned q = 0; q < g->nq; q++) {
        while ((mask & (1u << q)) && dp_kicks(g, g->vqs[q]) == before[q]) {
            sched_yield();
        }
    }
    stage("kick handler");
    for (unsigned i = 0; i < g->ndp; i++) {
        if (dpmask & (1u << i)) {
            iothread_run_sync(g->iot[i], noop, NULL); /* the kick's pass ran to its end */
        }
    }
    stage("drain");
    for (unsigned i = 0; i < g->ndp; i++) {
        if (dpmask & (1u << i)) {
            dataplane_drain(g->dps[i]); /* every request the pass submitted completed, published */
        }
    }
    if (!g->deferred) {
        stage("throttled");
        wait_throttled(g, mask);
    }
    for (unsigned q = 0; q < g->nq; q++) {
        GVq *v = g->vqs[q];

        if (!(mask & (1u << q))) {
            continue;
        }
        check_used(g, v);
        /*
         * Without EVENT_IDX and VRING_AVAIL_F_NO_INTERRUPT the guest wants an
         * interrupt for every publish: used->idx moved, so the queue's call
         * eventfd must have been written (a live queue; a broken one is reset
         * instead). A throttle timer may publish at any time: let the pass
         * that published finish first (publish and interrupt are one pass).
         */
        if (v->used_seen != used_before[q] && !g->event_idx && !(flags & 2) &&
            !virtqueue_is_broken(v->vq)) {
            dataplane_drain(vq_dp(g, v));
            if (read(H.call_fd[q], &calls, sizeof(calls)) != sizeof(calls)) {
                FAIL("queue %u: used idx moved from %u to %u without an interrupt", q,
                     used_before[q], v->used_seen);
            }
        }
    }
    if (g->data_checks && g->clean && !g->deferred) {
        check_batch(g, g->nbatch - 1);
    } else if (!g->null_engine) {
        forget(0, DISK_BYTES); /* a hostile or deferred batch may have written anywhere */
    }
}

/* Stop every dataplane of the input, then check what each queue holds. */
static void stop_all(Guest *g)
{
    stage("stop");
    for (unsigned i = 0; i < g->ndp; i++) {
        dataplane_stop(g->dps[i]);
    }
    for (unsigned i = 0; i < g->ndp; i++) {
        if (dataplane_held_count(g->dps[i]) != 0) {
            FAIL("%u request(s) still held after dataplane_stop", dataplane_held_count(g->dps[i]));
        }
    }
    for (unsigned q = 0; q < g->nq; q++) {
        GVq *v = g->vqs[q];
        VirtQueueState st;

        check_used(g, v);
        if (virtio_blk_queue_inflight(v->q) != 0) {
            FAIL("queue %u: %u request(s) still in the engine after dataplane_stop", q,
                 virtio_blk_queue_inflight(v->q));
        }
        virtqueue_get_state(v->vq, &st);
        if (!virtqueue_is_broken(v->vq) && st.last_avail_idx != (uint16_t)v->consumed) {
            FAIL("queue %u: the device popped %u chain(s) and returned %llu", q, st.last_avail_idx,
                 (unsigned long long)v->consumed);
        }
    }
}

/* Requests a throttled queue left in its avail ring: all popped? */
static bool ring_left(Guest *g)
{
    for (unsigned q = 0; q < g->nq; q++) {
        VirtQueueState st;

        virtqueue_get_state(g->vqs[q]->vq, &st);
        if (!virtqueue_is_broken(g->vqs[q]->vq) && st.last_avail_idx != g->vqs[q]->avail_idx) {
            return true;
        }
    }
    return false;
}

/* The queue -> iothread mapping of the two-dataplane mode (input byte 1, bits 6-7). */
static unsigned map_queue(unsigned pattern, unsigned q, unsigned nq)
{
    switch (pattern & 3) {
    case 0:
        return q & 1;
    case 1:
        return q >= nq / 2;
    case 2:
        return q == nq - 1;
    default:
        return !(q & 1);
    }
}

/*
 * Which dataplane serves each queue: the single-queue one (one queue, not
 * @two), or the multiqueue ones, all queues on the first or spread over
 * both by @pattern (an iothread left without a queue is not used). False if
 * the engine cannot run here.
 */
static bool assign(Guest *g, bool two, unsigned pattern)
{
    DataPlane *m[NDPS];
    unsigned qidx[NDPS][MAX_NQ], n[NDPS] = {0};
    GError *err = NULL;

    if (g->nq == 1 && !two) {
        DataPlane *dp = get_dp(g->engine, g->k);

        if (!dp) {
            return false;
        }
        g->dps[0] = dp;
        g->iot[0] = H.iothread[0];
        g->ndp = 1;
        g->vqs[0]->dpi = g->vqs[0]->local = 0;
        g->two = false;
        return true;
    }
    if (!get_mdps(g->engine, g->k, m)) {
        return false;
    }
    for (unsigned q = 0; q < g->nq; q++) {
        unsigned i = two ? map_queue(pattern, q, g->nq) : 0;

        qidx[i][n[i]++] = q;
    }
    g->ndp = 0;
    for (unsigned i = 0; i < NDPS; i++) {
        if (!n[i]) {
            continue;
        }
        if (!dataplane_set_queues(m[i], qidx[i], n[i], &err)) {
            FAIL("dataplane_set_queues: %s", err->message);
        }
        for (unsigned j = 0; j < n[i]; j++) {
            g->vqs[qidx[i][j]]->dpi = g->ndp;
            g->vqs[qidx[i][j]]->local = j;
        }
        g->dps[g->ndp] = m[i];
        g->iot[g->ndp++] = H.iothread[i];
    }
    g->two = two;
    g->ever_two |= g->ndp == 2;
    return true;
}

/* The DataPlaneQueues each dataplane is started with, and the counters it starts from. */
static void fill_dq(Guest *g)
{
    memset(g->ndq, 0, sizeof(g->ndq));
    for (unsigned q = 0; q < g->nq; q++) {
        GVq *v = g->vqs[q];
        DataPlaneQueueStats s;

        g->dq[v->dpi][v->local] = (DataPlaneQueue){
            .q = v->q, .host_notifier = H.kick_fd[q], .notifier = {.fd = H.call_fd[q]}};
        g->ndq[v->dpi]++;
        dataplane_get_queue_stats(vq_dp(g, v), v->local, &s);
        v->st0[0] = s.requests;
        v->st0[1] = s.completed;
        v->st0[2] = s.throttle_waits;
    }
}

/* What the queues' dataplanes did since fill_dq(), into the run's counters. */
static void account(Guest *g)
{
    for (unsigned q = 0; q < g->nq; q++) {
        GVq *v = g->vqs[q];
        DataPlaneQueueStats s;

        dataplane_get_queue_stats(vq_dp(g, v), v->local, &s);
        g->done[g->iot[v->dpi] == H.iothread[1]] += s.completed - v->st0[1];
        stats.throttle_waits += s.throttle_waits - v->st0[2];
        stats.mq_requests += q > 0 ? s.requests - v->st0[0] : 0;
        stats.nbd_requests += g->engine == ENGINE_NBD ? s.requests - v->st0[0] : 0;
    }
}

/* werror/rerror and error injection of this input (none left from the last one). */
static void configure(Guest *g)
{
    static const DataPlaneErrorPolicy policies[4] = {DATAPLANE_ERR_REPORT, DATAPLANE_ERR_IGNORE,
                                                     DATAPLANE_ERR_STOP, DATAPLANE_ERR_ENOSPC};
    uint8_t b = g->hdr[3];
    GError *err = NULL;

    for (unsigned i = 0; i < g->ndp; i++) {
        DataPlane *dp = g->dps[i];

        dataplane_inject_clear(dp);
        dataplane_set_error_policy(dp, policies[b & 3], policies[(b >> 2) & 3]);
        if (b & 0x10) {
            static const int errs[4] = {EIO, ENOSPC, ENOTSUP, EINVAL};
            IOQInjectRule rule = {.op = -1, .nth = (b & 0x80) ? 2 : 0, .error = errs[(b >> 5) & 3]};

            if (!dataplane_inject_error(dp, &rule, &err)) {
                FAIL("inject: %s", err->message);
            }
        }
    }
}

static void start_all(Guest *g)
{
    GError *err = NULL;

    for (unsigned i = 0; i < g->ndp; i++) {
        if (!dataplane_start(g->dps[i], g->dq[i], g->ndq[i], &err)) {
            FAIL("dataplane_start: %s", err->message);
        }
    }
}

/*
 * x-blockdev-remap-vqs on a running guest, as dp_switch_remap() does it:
 * dataplane_try_stop() every dataplane (requests held by werror=stop refuse
 * the move: the ones already stopped start again, nothing moves), check,
 * move the queues (ring state and all) from one dataplane to two or back,
 * hand the first dataplane's throttle state, its levels included, and the
 * error policy to the new ones, start them.
 */
static void remap(Guest *g, unsigned pattern)
{
    bool two = g->two, thr = g->throttle_on[0];
    ThrottleState ts;

    stage("remap stop");
    dataplane_get_throttle_state(g->dps[0], &ts); /* running: read in its iothread */
    for (unsigned i = 0; i < g->ndp; i++) {
        GError *err = NULL;

        if (!dataplane_try_stop(g->dps[i], &err)) {
            g_error_free(err);
            if (!dataplane_held_count(g->dps[i])) {
                FAIL("dataplane_try_stop refused with no request held");
            }
            while (i-- > 0) {
                if (!dataplane_start(g->dps[i], g->dq[i], g->ndq[i], &err)) {
                    FAIL("dataplane_start after a refused remap: %s", err->message);
                }
            }
            stats.remaps_refused++;
            return;
        }
    }
    stop_all(g);
    account(g);
    dataplane_get_throttle_state(g->dps[0], &ts); /* stopped: the levels it ended with */
    if (!assign(g, !two, pattern) && !assign(g, two, pattern)) {
        FAIL("remap: the dataplanes of before are gone");
    }
    stats.remaps += g->two != two;
    fill_dq(g);
    configure(g);
    for (unsigned i = 0; i < g->ndp; i++) {
        dataplane_set_throttle_state(g->dps[i], &ts);
        g->throttle_on[i] = thr;
    }
    stage("remap start");
    start_all(g);
}

static void run(const uint8_t *data, size_t size)
{
    static const uint64_t fbits[6] = {
        BIT(VIRTIO_RING_F_EVENT_IDX), BIT(VIRTIO_RING_F_INDIRECT_DESC),
        BIT(VIRTIO_BLK_F_FLUSH),      BIT(VIRTIO_BLK_F_CONFIG_WCE),
        BIT(VIRTIO_BLK_F_DISCARD),    BIT(VIRTIO_BLK_F_WRITE_ZEROES)};
    unsigned engine = (data[0] & 7) % NENGINES, k = ((data[0] >> 3) & 3) % NCONFS;
    unsigned num = 1u << (1 + (data[2] & 7) % 6);
    unsigned nq = 1 + ((data[0] >> 5) & 3);
    Guest *g = g_new0(Guest, 1);
    VirtIOBlk *blk = H.blk[k];
    uint64_t features = virtio_blk_get_host_features(blk);
    const Rec *recs = (const Rec *)(data + 4);
    size_t nrec = MIN((size - 4) / sizeof(Rec), MAX_RECS);
    GuestMemRegion regions[2];
    unsigned all = (1u << nq) - 1;
    GuestMem *gm;
    GError *err = NULL;
    bool building[MAX_NQ];
    uint64_t cnt;

    g->nq = nq;
    g->engine = engine;
    g->k = k;
    g->hdr = data;
    for (unsigned q = 0; q < nq; q++) {
        GVq *v = g->vqs[q] = g_new0(GVq, 1);

        v->idx = q;
        v->base = q * RING_STRIDE;
        v->num = num;
        building[q] = true;
    }
    /* The dataplanes and the queues each one serves. */
    if (!assign(g, data[0] & 0x80, data[1] >> 6)) {
        for (unsigned q = 0; q < nq; q++) {
            g_free(g->vqs[q]);
        }
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
    g->bump[0] = nq * RING_STRIDE;
    g->clean = true;
    g->data_checks = !(data[3] & 0x10);
    g->null_engine = engine == ENGINE_NULL;
    g->event_idx = features & BIT(VIRTIO_RING_F_EVENT_IDX);
    {
        unsigned disk = engine == ENGINE_NBD            ? DISK_NBD
                        : engine >= ENGINE_URING_DIRECT ? DISK_DIRECT
                                                        : DISK_FILE;

        shadow = shadow_data[disk];
        shadow_known = shadow_known_s[disk];
    }
    regions[0] = (GuestMemRegion){.gpa = 0, .size = REGION_SIZE, .hva = g->ram[0]};
    regions[1] = (GuestMemRegion){.gpa = REGION1_GPA, .size = REGION_SIZE, .hva = g->ram[1]};

    /* Device reset and renegotiation, then the queues as the driver set them up. */
    virtio_blk_reset(blk);
    if (!virtio_blk_set_features(blk, features, &err)) {
        FAIL("set_features: %s", err->message);
    }
    gm = guestmem_new(regions, 2, &err);
    if (!gm) {
        FAIL("guestmem: %s", err->message);
    }

    configure(g);
    /* The throttle: fresh buckets, this input's limits or none. */
    throttle_limits_for(&g->limits, data[2]);
    for (unsigned i = 0; i < g->ndp; i++) {
        throttle_set(g, i, throttle_limits_enabled(&g->limits));
    }

    /* Pokes land in RAM before the device starts; requests after them. */
    for (size_t i = 0; i < nrec; i++) {
        if (recs[i].kind >= 0xf8) {
            poke(g, &recs[i]);
        }
    }
    for (unsigned q = 0; q < nq; q++) {
        GVq *v = g->vqs[q];

        /* The avail index is the driver's: a poked one does not count as published. */
        avail_ring(g, v)->idx = 0;
        /* A device takes used->idx from RAM at setup (a poked one too). */
        v->used0 = v->used_seen = le16toh(used_ring(g, v)->idx);
        v->vq = virtqueue_new(gm, num, v->base + DESC_OFF, v->base + AVAIL_OFF, v->base + USED_OFF,
                              features, &err);
        v->q = v->vq ? virtio_blk_queue_new(blk, v->vq, NULL, NULL, &err) : NULL;
        if (!v->q) {
            FAIL("queue %u setup: %s", q, err ? err->message : "?");
        }
    }
    fill_dq(g);

    for (unsigned i = 0; i < NDPS; i++) {
        event_loop_set_poll_params(iothread_get_loop(H.iothread[i]), (data[2] & 0x80) ? 32768 : 0,
                                   0, 0);
    }
    stage("start");
    fuzz_input_begin();
    start_all(g);
    for (size_t i = 0; i < nrec; i++) {
        const Rec *r = &recs[i];

        if (r->kind >= 0xf8) {
            continue;
        }
        if (r->kind >= 0xf0) {
            unsigned mask = (r->seg & KICK_ALL) ? all : 1u << ((r->seg & 3) % nq);

            if (r->seg & KICK_REMAP) {
                remap(g, r->seg >> 4);
            }
            stats.kick_all += (r->seg & KICK_ALL) && nq > 1;
            kick(g, mask, (r->kind & 1) ? r->aux : 0, r->shape, r->kind & 2, r->kind & 4);
            continue;
        }
        {
            unsigned q = ((r->kind >> 3) & 3) % nq;
            GVq *v = g->vqs[q];

            if (building[q] && v->npend < G_N_ELEMENTS(v->pend)) {
                building[q] = add_request(g, v, r);
            }
        }
    }
    kick(g, all, 0, 0, false, false);
    stop_all(g);
    if (ring_left(g)) {
        /*
         * Throttled requests were left in the avail ring at the stop: the
         * next owner must serve them. Start again without limits (start
         * makes one pass over each queue), drain, stop, check again.
         */
        stats.restarted++;
        stage("restart");
        for (unsigned i = 0; i < g->ndp; i++) {
            throttle_set(g, i, false);
        }
        start_all(g);
        for (unsigned i = 0; i < g->ndp; i++) {
            dataplane_drain(g->dps[i]);
        }
        stop_all(g);
        if (ring_left(g)) {
            FAIL("requests left in the avail ring of a live queue after an unthrottled start");
        }
        if (!g->null_engine) {
            forget(0, DISK_BYTES);
        }
    }
    if (verbose) {
        fprintf(stderr, "engine %u conf %u num %u queues %u dataplanes %u%s%s\n", engine, k, num,
                nq, g->ndp, g->clean ? ", clean" : "", g->deferred ? ", deferred" : "");
    }
    if (g->clean) {
        for (unsigned q = 0; q < nq; q++) {
            GVq *v = g->vqs[q];

            if (virtqueue_is_broken(v->vq)) {
                continue;
            }
            for (unsigned h = 0; h < num; h++) {
                uint8_t st;

                if (!v->tracked[h]) {
                    continue;
                }
                if (v->returned[h] != 1) {
                    FAIL("queue %u: well-formed head %u returned %u times on a live queue", q, h,
                         v->returned[h]);
                }
                st = *(uint8_t *)gpa_ptr(g, v->status_gpa[h], 1);
                if (st != VIRTIO_BLK_S_OK && st != VIRTIO_BLK_S_IOERR &&
                    st != VIRTIO_BLK_S_UNSUPP) {
                    FAIL("queue %u: status byte 0x%02x of head %u", q, st, h);
                }
            }
        }
    }
    fuzz_input_end();

    /* What this input reached. */
    account(g);
    stats.inputs++;
    stats.nq[nq]++;
    stats.engine[engine]++;
    stats.two_dps += g->ever_two;
    stats.throttled_inputs += throttle_limits_enabled(&g->limits);
    stats.both_dps_completed += g->done[0] && g->done[1];

    for (unsigned q = 0; q < nq; q++) {
        while (read(H.call_fd[q], &cnt, sizeof(cnt)) > 0) {
        }
        virtio_blk_queue_free(g->vqs[q]->q);
        virtqueue_free(g->vqs[q]->vq);
        g_free(g->vqs[q]);
    }
    guestmem_free(gm);
    g_free(g->ram[0]);
    g_free(g->ram[1]);
    g_free(g);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!H.iothread[0]) {
        harness_init();
    }
    if (size < 4) {
        return 0;
    }
    run(data, size);
    return 0;
}
