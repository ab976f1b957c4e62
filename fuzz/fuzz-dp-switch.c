/*
 * libFuzzer target: the runtime switch between a virtio-blk device's two
 * request paths (src/devices/dp-switch.c): the dataplane on its iothread and
 * the block layer (src/block, through src/devices/block-exec.c) in the main
 * loop, the fuzzer's thread. Each input is a device configuration and a
 * sequence of guest actions (well-formed and hostile request chains, kicks,
 * pokes into the rings) interleaved with path switches, stop/start and
 * settle points; invariants are checked after every action and at the end.
 *
 * The device is the tests' fixture (tests/devices/devfix.c, linked in: a
 * DpSwitch over a BlockBackend and an iothread, built as virtio-blk-pci
 * builds it), one per (backend, queue count), made on first use and kept for
 * the whole run. Per input, as a device reset would, the features are
 * negotiated again and new virtqueues are laid out in fresh guest RAM by the
 * tests' in-process driver (tests/driver/testdrv.c), handed to
 * dp_switch_start() and taken back by dp_switch_stop().
 *
 * Invariants (a violation aborts with a message; libFuzzer keeps the input):
 *   - every used element has an id below the queue size that the guest made
 *     available and has not had back yet (no completion twice, none
 *     invented), on every input, hostile or not (pokes into the avail ring
 *     excepted: then only the id's range);
 *   - on inputs of well-formed chains only: the status byte is OK, IOERR or
 *     UNSUPP and the used length exact (1, or the data + 1 for a successful
 *     read, min(len, 20) + 1 for GET_ID); every request the guest kicked
 *     completes without another kick, whatever switches, stops and starts
 *     came after the kick (their kick-once passes must find what a detached
 *     notifier swallowed); at every settle action and at the end every
 *     request published so far has completed exactly once; at a settle the
 *     guest reads the used ring only after an interrupt (as an
 *     interrupt-driven driver: with EVENT_IDX, used_event is the element
 *     after the last one it consumed), so an element published after it
 *     caught up must interrupt it; on the IOQ-backed file backends without
 *     throttling and with the write cache on, a FLUSH completes after every
 *     write published before it on its queue (docs/ioq.md);
 *   - query-blockstats (blk_get_stats(): the block layer's counters and the
 *     dataplanes' shards) grew over a well-formed input by exactly the
 *     reads, writes (WRITE_ZEROES counted as writes), flushes and bytes
 *     the guest saw succeed, whichever path served them;
 *   - the data: a successful read of a settled batch returns what a shadow
 *     of the disk holds (zeroes on null-co), for sectors no other request
 *     of the same batch writes; writes then update the shadow (the file
 *     keeps its content across inputs, so does the shadow);
 *   - a switch or a remap of the queues between the device's iothread and
 *     a second one (x-blockdev-remap-vqs) is refused only on a broken queue
 *     (werror=stop is not used here, so nothing may hold a request);
 *   - after every stop (mid-input and final): no request in the engine, held
 *     by the dataplane or parked by the block layer, and on a live queue
 *     every chain the device popped was returned; chains left in the avail
 *     ring at the final stop are served by one more start (on the path the
 *     input picks) and stop: nothing lost;
 *   - no hang: a watchdog thread aborts when an input runs for HANG_SECONDS.
 *
 * Input layout:
 *   [0] bits 0-1 backend (0 null-co read-zeroes, 1 file aio=io_uring,
 *       2 file aio=threads, 3 file cache=none aio=native: O_DIRECT, in
 *       TMPDIR or /tmp, skipped where refused), bits 2-3 queues - 1,
 *       bit 4 start on the dataplane, bits 5-6 throttle (none, iops 2000,
 *       bps 8 MiB/s, iops 500 with a burst), bit 7 the final restart on the
 *       block layer (else the dataplane)
 *   [1] bits 0-5 driver features accepted (EVENT_IDX, INDIRECT_DESC, FLUSH,
 *       CONFIG_WCE, DISCARD, WRITE_ZEROES), bits 6-7 queue size 8..64
 *   then 8-byte records (struct Rec).
 */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "devfix.h"
#include "event/iothread-registry.h"
#include "util/block-throttle.h"
#include "virtio/virtio-blk.h"
#include "virtio/virtqueue.h"

#define DISK_SECTORS 128
#define DISK_BYTES   (DISK_SECTORS * 512)
#define MAX_QSIZE    64
#define MAX_NQ       4
#define NBACKENDS    4
#define MAX_RECS     96
#define MAX_REQS     256 /* requests per input (heads are reused, requests are not) */
#define HANG_SECONDS 10
#define FUZZ_NAME    "fuzz-dp-switch"
#include "fuzz-watchdog.h"
#define SETTLE_NS (4 * 1000000000ll)
#define RAM_SIZE  (4u << 20)

#define BIT(n) (1ull << (n))

/*
 * One record. op & 7:
 *   0, 1  a well-formed request: type a & 7 (IN, OUT, FLUSH, GET_ID,
 *         DISCARD, WRITE_ZEROES, an unknown type, IN again), queue
 *         (a >> 3) & 3, sector b, sectors c & 15 (c & 0x10: a length not a
 *         multiple of 512), data segments 1 + ((c >> 5) & 3), d & 1
 *         indirect, d & 2 also kick; published at once (the device may see
 *         it at any pass: a start's, another queue's kick, polling)
 *   2     a hostile chain: mode a & 7, queue (a >> 3) & 3, parameters b-d
 *   3     a kick of queue a & 3 (a & 4: every queue; a & 8: only if the
 *         device asked for it)
 *   4     a switch to the other path (a & 1: to the same path, a no-op);
 *         a & 2: instead, a remap as x-blockdev-remap-vqs (queue i to a
 *         second iothread if bit i of b is set, else to the device's)
 *   5     dp_switch_stop(), checks, dp_switch_start() on the path of a & 1
 *   6     settle: (a & 1) first wait, without a kick, for every request
 *         the guest kicked to complete; then kick every queue, wait until
 *         everything published completed (well-formed inputs), check that
 *         each queue whose used ring moved interrupted the guest, and the
 *         batch's data
 *   7     a poke: 4 bytes (b..e) into queue (a & 3)'s descriptor table or
 *         avail ring (a & 4), at offset f
 */
typedef struct Rec {
    uint8_t op, a, b, c, d, e, f, g;
} Rec;

enum { BE_NULL, BE_URING, BE_THREADS, BE_NATIVE };

static const char *const drives[NBACKENDS] = {
    "driver=null-co,node-name=n0,size=65536,read-zeroes=on",
    "file=%s,format=raw,cache=writeback,aio=io_uring",
    "file=%s,format=raw,cache=writeback,aio=threads",
    "file=%s,format=raw,cache=none,aio=native", /* O_DIRECT: a real file system */
};

/* One long-lived device per (backend, queue count), and the shadow of its disk. */
typedef struct Dev {
    DevFix f;
    bool made, unusable;
    uint8_t shadow[DISK_BYTES];
    bool known[DISK_SECTORS];
} Dev;

static Dev devs[NBACKENDS][MAX_NQ];
static bool verbose;             /* FUZZ_DP_SWITCH_VERBOSE=1: every used element, every action */
static IOThread *extra_iothread; /* a second iothread, for iothread-vq-mapping remaps */

static struct {
    uint64_t inputs, clean, switches, refused, stopstarts, settles, restarts, requests, hostile,
        pokes, broken, throttled, backend[NBACKENDS], nq[MAX_NQ + 1], reads_checked, remaps;
} stats;

static void print_stats(void)
{
    fprintf(stderr,
            "fuzz-dp-switch modes: inputs %llu (well-formed %llu); backends null/io_uring/threads/"
            "native %llu/%llu/%llu/%llu; queues 1/2/3/4 %llu/%llu/%llu/%llu; throttled %llu; "
            "requests %llu, hostile chains %llu, pokes %llu, broken queues %llu; switches %llu "
            "(refused %llu), remaps %llu, stop/start %llu, settles %llu, final restarts %llu; "
            "reads checked against the shadow %llu\n",
            (unsigned long long)stats.inputs, (unsigned long long)stats.clean,
            (unsigned long long)stats.backend[0], (unsigned long long)stats.backend[1],
            (unsigned long long)stats.backend[2], (unsigned long long)stats.backend[3],
            (unsigned long long)stats.nq[1], (unsigned long long)stats.nq[2],
            (unsigned long long)stats.nq[3], (unsigned long long)stats.nq[4],
            (unsigned long long)stats.throttled, (unsigned long long)stats.requests,
            (unsigned long long)stats.hostile, (unsigned long long)stats.pokes,
            (unsigned long long)stats.broken, (unsigned long long)stats.switches,
            (unsigned long long)stats.refused, (unsigned long long)stats.remaps,
            (unsigned long long)stats.stopstarts, (unsigned long long)stats.settles,
            (unsigned long long)stats.restarts, (unsigned long long)stats.reads_checked);
}

/* ---- the long-lived devices ---- */

static void dev_conf(VirtIOBlkConf *c)
{
    virtio_blk_conf_init(c, DISK_SECTORS);
    c->max_discard_sectors = 16;
    c->max_write_zeroes_sectors = 16;
    c->write_zeroes_may_unmap = true;
    memcpy(c->serial, "fuzz-dp-switch-seria", 20); /* exactly 20: no NUL on the wire */
    c->serial[20] = 0;
}

static Dev *get_dev(unsigned be, unsigned nq)
{
    Dev *dv = &devs[be][nq - 1];
    /* tmpfs for the buffered files (no disk sync), TMPDIR or /tmp for O_DIRECT */
    const char *dir = be != BE_NATIVE && access("/dev/shm", W_OK) == 0 ? "/dev/shm" : NULL;
    VirtIOBlkConf conf;
    GError *err = NULL;
    char name[32];

    if (dv->made || dv->unusable) {
        return dv->made ? dv : NULL;
    }
    dev_conf(&conf);
    snprintf(name, sizeof(name), "fuzz-sw-%u-%u", be, nq);
    if (!devfix_init(&dv->f,
                     &(DevFixConf){.drive = drives[be],
                                   .image = be == BE_NULL ? "null" : NULL,
                                   .dir = dir,
                                   .bytes = DISK_BYTES,
                                   .ram_size = 1 << 20,
                                   .num_queues = nq,
                                   .queue_size = MAX_QSIZE,
                                   .iothread = name,
                                   /* as a device's iothread; the extra one keeps 0 */
                                   .submit_early = IOTHREAD_SUBMIT_EARLY_DEFAULT,
                                   .blk_conf = &conf},
                     &err)) {
        fprintf(stderr, "fuzz-dp-switch: backend %u unusable here: %s\n", be, err->message);
        g_error_free(err);
        devfix_fini(&dv->f);
        dv->unusable = true;
        return NULL;
    }
    dv->made = true;
    for (unsigned s = 0; s < DISK_SECTORS; s++) {
        dv->known[s] = true; /* a new sparse file, or null-co: zeroes */
    }
    return dv;
}

/* ---- one input ---- */

typedef struct Req {
    unsigned q;
    uint16_t head;
    uint32_t type;
    uint64_t sector;
    uint32_t dlen; /* data bytes (the segment for DISCARD/WRITE_ZEROES) */
    uint64_t data, status;
    uint32_t seg_sectors; /* DISCARD/WRITE_ZEROES */
    uint8_t pattern;
    unsigned batch;
    bool kicked; /* the guest kicked its queue after publishing it (or the device said not to) */
    unsigned returned;
    uint32_t used_len;
} Req;

typedef struct Input {
    Dev *dv;
    DevFix *f; /* &dv->f */
    unsigned be, nq, num;
    uint64_t features;
    TestDrv *d;
    TestVq *tvq[MAX_NQ];
    VirtQueue *vq[MAX_NQ];
    VirtIOBlkQueue *q[MAX_NQ];
    DataPlaneQueue dq[MAX_NQ];
    bool started, on_dp;
    bool clean;       /* well-formed chains only, no poke */
    bool avail_poked; /* the avail ring was written behind the driver's back */
    bool flush_order; /* an IOQ behind both paths, unthrottled: FLUSH after earlier writes */
    /* per queue: what the guest made available and has not had back, per head */
    unsigned outstanding[MAX_NQ][MAX_QSIZE];
    int req_of_head[MAX_NQ][MAX_QSIZE]; /* the well-formed request using the head, or -1 */
    uint64_t made_avail[MAX_NQ], consumed[MAX_NQ];
    Req reqs[MAX_REQS];
    unsigned nreq, batch;
} Input;

static bool any_broken(Input *in)
{
    for (unsigned q = 0; q < in->nq; q++) {
        if (virtqueue_is_broken(in->vq[q])) {
            return true;
        }
    }
    return false;
}

/* Take every used element the device published, and check it. */
static void collect(Input *in)
{
    for (unsigned q = 0; q < in->nq; q++) {
        uint16_t head;
        uint32_t len;

        while (testvq_get_used(in->tvq[q], &head, &len)) {
            int ri;

            if (head >= in->num) {
                FAIL("queue %u: used id %u >= queue size %u", q, head, in->num);
            }
            in->consumed[q]++;
            if (verbose) {
                fprintf(stderr, "queue %u used: id %u len %u request %d status 0x%02x on the %s\n",
                        q, head, len, in->req_of_head[q][head],
                        in->req_of_head[q][head] >= 0
                            ? testdrv_readb(in->d, in->reqs[in->req_of_head[q][head]].status)
                            : 0xff,
                        in->on_dp ? "dataplane" : "block layer");
            }
            if (!in->avail_poked) {
                if (!in->outstanding[q][head]) {
                    FAIL("queue %u: used id %u was not made available (or came back twice)", q,
                         head);
                }
                in->outstanding[q][head]--;
            }
            ri = in->req_of_head[q][head];
            if (ri < 0 || !in->clean) {
                continue;
            }
            {
                Req *r = &in->reqs[ri];
                uint8_t st = testdrv_readb(in->d, r->status);
                uint32_t want = 1;

                in->req_of_head[q][head] = -1;
                r->returned++;
                r->used_len = len;
                if (r->type == VIRTIO_BLK_T_FLUSH && in->flush_order &&
                    virtio_blk_get_writeback(in->f->blk)) {
                    /*
                     * The IOQ's promise (docs/ioq.md, FLUSH ordering): after every write
                     * before it. Not with the write cache off: a writethrough write completes
                     * after its own flush, which a guest FLUSH dispatched once the write part
                     * is done may overtake (docs/ioq.md, Writethrough); virtio allows it.
                     */
                    for (int k = 0; k < ri; k++) {
                        Req *w = &in->reqs[k];

                        if (w->q == q && !w->returned &&
                            (w->type == VIRTIO_BLK_T_OUT || w->type == VIRTIO_BLK_T_DISCARD ||
                             w->type == VIRTIO_BLK_T_WRITE_ZEROES)) {
                            FAIL("queue %u: FLUSH (request %d) completed before the write "
                                 "(request %d, type %u) published before it, on the %s",
                                 q, ri, k, w->type, in->on_dp ? "dataplane" : "block layer");
                        }
                    }
                }
                if (st != VIRTIO_BLK_S_OK && st != VIRTIO_BLK_S_IOERR &&
                    st != VIRTIO_BLK_S_UNSUPP) {
                    FAIL("queue %u head %u (request %d, type %u): status byte 0x%02x", q, head, ri,
                         r->type, st);
                }
                if (st == VIRTIO_BLK_S_OK && r->type == VIRTIO_BLK_T_IN) {
                    want += r->dlen;
                } else if (st == VIRTIO_BLK_S_OK && r->type == VIRTIO_BLK_T_GET_ID) {
                    want += MIN(r->dlen, 20u);
                }
                if (len != want) {
                    FAIL("queue %u head %u (request %d, type %u, status %u): used len %u, "
                         "expected %u",
                         q, head, ri, r->type, st, len, want);
                }
            }
        }
    }
}

/* Serve the block layer (main loop) once; on the dataplane just let the iothread run. */
static void pump(Input *in)
{
    event_loop_run_once(in->f->main_loop, false);
    if (in->on_dp) {
        usleep(20);
    }
    collect(in);
}

static bool all_returned(Input *in)
{
    for (unsigned i = 0; i < in->nreq; i++) {
        if (!in->reqs[i].returned) {
            return false;
        }
    }
    return true;
}

/* ---- the shadow of the disk ---- */

static bool req_range(Req *r, uint64_t *s0, uint64_t *n)
{
    if (r->type == VIRTIO_BLK_T_IN || r->type == VIRTIO_BLK_T_OUT) {
        *n = r->dlen / 512;
    } else if (r->type == VIRTIO_BLK_T_DISCARD || r->type == VIRTIO_BLK_T_WRITE_ZEROES) {
        *n = r->seg_sectors;
    } else {
        return false;
    }
    *s0 = r->sector;
    return *n && r->sector < DISK_SECTORS && *n <= DISK_SECTORS - r->sector;
}

/*
 * Batch @b has completed: its reads against the shadow (sectors no request
 * of the batch writes: those are unordered with the read), then its writes
 * into the shadow (two writes of one sector in one batch: unknown).
 */
static void check_batch(Input *in, unsigned b)
{
    static uint8_t writers[DISK_SECTORS];
    Dev *dv = in->dv;

    memset(writers, 0, sizeof(writers));
    for (unsigned i = 0; i < in->nreq; i++) {
        Req *r = &in->reqs[i];
        uint64_t s0, n;

        if (r->batch == b && r->type != VIRTIO_BLK_T_IN && req_range(r, &s0, &n)) {
            for (uint64_t s = s0; s < s0 + n; s++) {
                writers[s] += writers[s] < 2;
            }
        }
    }
    for (unsigned i = 0; i < in->nreq; i++) {
        Req *r = &in->reqs[i];
        uint64_t s0, n;
        uint8_t buf[16 * 512];

        if (r->batch != b || r->type != VIRTIO_BLK_T_IN || !req_range(r, &s0, &n) ||
            testdrv_readb(in->d, r->status) != VIRTIO_BLK_S_OK) {
            continue;
        }
        testdrv_memread(in->d, r->data, buf, r->dlen);
        for (uint64_t s = s0; s < s0 + n; s++) {
            const uint8_t *got = buf + (s - s0) * 512;

            if (writers[s] || !(in->be == BE_NULL || dv->known[s])) {
                continue;
            }
            for (unsigned o = 0; o < 512; o++) {
                uint8_t want = in->be == BE_NULL ? 0 : dv->shadow[s * 512 + o];

                if (got[o] != want) {
                    FAIL("read (request %u, queue %u, sector %llu, %llu sectors) got 0x%02x at "
                         "byte %llu, the disk holds 0x%02x",
                         i, r->q, (unsigned long long)s0, (unsigned long long)n, got[o],
                         (unsigned long long)((s - s0) * 512 + o), want);
                }
            }
            stats.reads_checked++;
        }
    }
    if (in->be == BE_NULL) {
        return;
    }
    for (unsigned i = 0; i < in->nreq; i++) {
        Req *r = &in->reqs[i];
        uint64_t s0, n;
        uint8_t st;

        if (r->batch != b || r->type == VIRTIO_BLK_T_IN || !req_range(r, &s0, &n)) {
            continue;
        }
        st = testdrv_readb(in->d, r->status);
        for (uint64_t s = s0; s < s0 + n; s++) {
            if (st != VIRTIO_BLK_S_OK || writers[s] != 1 || r->type == VIRTIO_BLK_T_DISCARD) {
                dv->known[s] = false; /* failed (maybe in part), unordered, or discarded */
            } else {
                memset(dv->shadow + s * 512, r->type == VIRTIO_BLK_T_OUT ? r->pattern : 0, 512);
                dv->known[s] = true;
            }
        }
    }
}

static void forget_all(Input *in)
{
    memset(in->dv->known, 0, sizeof(in->dv->known));
}

/* Every live queue has popped all the guest published and has nothing in flight. */
static bool quiet(Input *in)
{
    for (unsigned q = 0; q < in->nq; q++) {
        VirtQueueDebug dbg;

        virtqueue_debug_snapshot(in->vq[q], &dbg);
        if (!dbg.broken && (dbg.last_avail_idx != dbg.avail_idx || dbg.inflight)) {
            return false;
        }
    }
    return true;
}

/*
 * Without a kick of its own: every request the guest kicked (whatever
 * switches, stops and starts came between: their kick-once passes must find
 * what a detached notifier swallowed) completes.
 */
static void wait_kicked(Input *in)
{
    int64_t deadline = now_ns() + SETTLE_NS;

    if (!in->clean || any_broken(in)) {
        return;
    }
    stage("wait for kicked requests");
    for (;;) {
        int lost = -1;

        collect(in);
        for (unsigned i = 0; i < in->nreq && lost < 0; i++) {
            if (in->reqs[i].kicked && !in->reqs[i].returned) {
                lost = (int)i;
            }
        }
        if (lost < 0) {
            return;
        }
        if (now_ns() > deadline) {
            FAIL("request %d (queue %u head %u, type %u) published and kicked, not completed "
                 "after %lld ms on the %s, with no kick since",
                 lost, in->reqs[lost].q, in->reqs[lost].head, in->reqs[lost].type,
                 SETTLE_NS / 1000000, in->on_dp ? "dataplane" : "block layer");
        }
        pump(in);
    }
}

/*
 * Settle: kick every queue, serve until everything published came back
 * (well-formed inputs; a hostile one is given a bounded time), then check
 * the batch's data.
 */
static void settle(Input *in, bool final)
{
    int64_t deadline = now_ns() + SETTLE_NS;

    stage(final ? "final settle" : "settle");
    /*
     * Calls first, then what is used: an element published after this
     * collect is signalled after it (publish, then notify), and the guest
     * has consumed everything, so used_event (EVENT_IDX) asks for the next.
     */
    for (unsigned q = 0; q < in->nq; q++) {
        testvq_take_calls(in->tvq[q]);
    }
    collect(in);
    for (unsigned q = 0; q < in->nq; q++) {
        testvq_kick_force(in->tvq[q]);
    }
    if (in->clean && !any_broken(in)) {
        /*
         * As an interrupt-driven guest: the used ring is read only after an
         * interrupt. The guest caught up just now (used_event, with
         * EVENT_IDX, asks for the next element), so an element published
         * from now on must be followed by an interrupt on its queue. (A
         * guest that polls the ring meanwhile may legitimately get none:
         * it consumed the element before the device's decision.)
         */
        while (!all_returned(in)) {
            bool called = false;

            for (unsigned q = 0; q < in->nq; q++) {
                called |= testvq_take_calls(in->tvq[q]) != 0;
            }
            if (called) {
                collect(in);
                continue;
            }
            event_loop_run_once(in->f->main_loop, false);
            if (in->on_dp) {
                usleep(20);
            }
            if (now_ns() <= deadline) {
                continue;
            }
            for (unsigned q = 0; q < in->nq; q++) {
                if (testvq_used_idx(in->tvq[q]) != (uint16_t)in->consumed[q]) {
                    VirtQueueDebug dbg;

                    virtqueue_debug_snapshot(in->vq[q], &dbg);
                    FAIL("queue %u: used idx moved from %u to %u on the %s, no interrupt in %lld "
                         "ms (device: signalled %u%s, event_idx %d; guest: used_event %u)",
                         q, (uint16_t)in->consumed[q], testvq_used_idx(in->tvq[q]),
                         in->on_dp ? "dataplane" : "block layer", SETTLE_NS / 1000000,
                         dbg.signalled_used, dbg.signalled_used_valid ? "" : " (invalid)",
                         dbg.event_idx, dbg.used_event);
                }
            }
            for (unsigned i = 0; i < in->nreq; i++) {
                if (!in->reqs[i].returned) {
                    FAIL("request %u (queue %u head %u, type %u) published and kicked, not "
                         "completed after %lld ms on the %s",
                         i, in->reqs[i].q, in->reqs[i].head, in->reqs[i].type, SETTLE_NS / 1000000,
                         in->on_dp ? "dataplane" : "block layer");
                }
            }
        }
        check_batch(in, in->batch);
    } else {
        /* Hostile: a bounded wait until every live queue's ring is consumed, nothing in flight. */
        for (int i = 0; i < 200 && !quiet(in); i++) {
            pump(in);
        }
        if (in->be != BE_NULL) {
            forget_all(in);
        }
    }
    in->batch++;
    stats.settles++;
}

/* After a stop: nothing held anywhere, every popped chain returned on a live queue. */
static void check_stopped(Input *in, const char *when)
{
    DpSwitch *sw = in->f->sw;

    collect(in);
    if (dp_switch_held_count(sw)) {
        FAIL("%s: %u request(s) held by the dataplane", when, dp_switch_held_count(sw));
    }
    if (blk_parked_count(in->f->backend)) {
        FAIL("%s: %u request(s) parked in the block layer", when, blk_parked_count(in->f->backend));
    }
    for (unsigned q = 0; q < in->nq; q++) {
        VirtQueueState st;

        if (virtio_blk_queue_inflight(in->q[q])) {
            FAIL("%s: queue %u has %u request(s) in the engine", when, q,
                 virtio_blk_queue_inflight(in->q[q]));
        }
        virtqueue_get_state(in->vq[q], &st);
        if (!virtqueue_is_broken(in->vq[q]) && st.last_avail_idx != (uint16_t)in->consumed[q]) {
            FAIL("%s: queue %u: the device popped %u chain(s) and returned %llu", when, q,
                 st.last_avail_idx, (unsigned long long)in->consumed[q]);
        }
    }
}

static void do_stop(Input *in, const char *when)
{
    stage(when);
    dp_switch_stop(in->f->sw);
    in->started = false;
    check_stopped(in, when);
}

static void do_start(Input *in, bool dataplane)
{
    GError *err = NULL;

    stage("start");
    if (!dp_switch_start(in->f->sw, dataplane, in->dq, in->nq, &err)) {
        if (!any_broken(in)) {
            FAIL("dp_switch_start on the %s: %s", dataplane ? "dataplane" : "block layer",
                 err->message);
        }
        g_error_free(err);
        return;
    }
    in->started = true;
    in->on_dp = dp_switch_is_dataplane(in->f->sw);
    if (in->on_dp != dataplane) {
        FAIL("started on the %s, asked for the other path",
             in->on_dp ? "dataplane" : "block layer");
    }
}

static void do_switch(Input *in, bool to)
{
    GError *err = NULL;

    if (!in->started) {
        return;
    }
    stage(to ? "switch to the dataplane" : "switch to the block layer");
    if (!dp_switch_set_dataplane(in->f->sw, to, &err)) {
        if (!any_broken(in)) {
            FAIL("switch to the %s refused with no broken queue: %s",
                 to ? "dataplane" : "block layer", err ? err->message : "(no error)");
        }
        stats.refused++;
        g_clear_error(&err);
    } else {
        stats.switches += in->on_dp != to;
    }
    in->on_dp = dp_switch_is_dataplane(in->f->sw);
    collect(in);
}

/* The guest has kicked queue @q (or skipped a kick the device said it did not need). */
static void note_kick(Input *in, unsigned q)
{
    for (unsigned i = 0; i < in->nreq; i++) {
        in->reqs[i].kicked |= in->reqs[i].q == q;
    }
}

/*
 * x-blockdev-remap-vqs: queue i to the device's iothread or the extra one
 * (bit i of @bits). Refused only while requests are held (never here) or,
 * tolerated, on a broken queue.
 */
static void do_remap(Input *in, uint8_t bits)
{
    IOThread *map[MAX_NQ];
    GError *err = NULL;

    stage("remap");
    for (unsigned q = 0; q < in->nq; q++) {
        map[q] = (bits >> q) & 1 ? extra_iothread : in->f->iothread;
    }
    if (!dp_switch_remap(in->f->sw, map, in->nq, &err)) {
        if (!any_broken(in)) {
            FAIL("remap refused with no broken queue: %s", err ? err->message : "(no error)");
        }
        g_clear_error(&err);
    } else {
        stats.remaps++;
    }
    in->on_dp = dp_switch_is_dataplane(in->f->sw);
    collect(in);
}

/* Publish @head on queue @q and note it as made available. */
static void publish(Input *in, unsigned q, uint16_t head)
{
    testvq_publish(in->tvq[q], head);
    if (verbose) {
        fprintf(stderr, "queue %u avail: head %u\n", q, head);
    }
    in->made_avail[q]++;
    if (head < in->num) {
        in->outstanding[q][head]++;
    }
    /*
     * More entries out than the ring has slots: a hostile chain's head, which
     * the free list does not know, was handed out again, and this entry took
     * the slot of one the device may not have read yet. The device can then
     * see one head twice and another never, through no fault of its own
     * (from its side the avail index never moved by more than the ring), so
     * completions are checked for their range only, as after a poke.
     */
    if (in->made_avail[q] - in->consumed[q] > in->num) {
        in->avail_poked = true;
    }
}

static const uint32_t req_types[8] = {VIRTIO_BLK_T_IN,
                                      VIRTIO_BLK_T_OUT,
                                      VIRTIO_BLK_T_FLUSH,
                                      VIRTIO_BLK_T_GET_ID,
                                      VIRTIO_BLK_T_DISCARD,
                                      VIRTIO_BLK_T_WRITE_ZEROES,
                                      0x7f,
                                      VIRTIO_BLK_T_IN};

/* A well-formed request: header, data segments, status; published at once. */
static void well_formed(Input *in, const Rec *r)
{
    unsigned q = ((r->a >> 3) & 3) % in->nq;
    uint32_t type = req_types[r->a & 7];
    uint64_t sector = r->b % (DISK_SECTORS + 8);
    uint32_t dlen = 512u * (r->c & 15);
    unsigned nseg = 1 + ((r->c >> 5) & 3);
    struct virtio_blk_outhdr h = {.type = htole32(type), .sector = htole64(sector)};
    TestBuf bufs[8];
    unsigned n = 0;
    uint64_t hdr, data = 0, status;
    uint8_t ff = 0xff, pattern = (uint8_t)(r->d ^ (in->nreq * 37) ^ 0x5a);
    uint32_t seg_sectors = 0;
    bool dev_writes;
    Req *rq;
    int hd;

    if (in->nreq >= MAX_REQS) {
        return;
    }
    if (r->c & 0x10) {
        dlen = dlen ? dlen - 256 : 100; /* not a whole sector: refused */
    }
    if (type == VIRTIO_BLK_T_FLUSH) {
        dlen = 0;
    } else if (type == VIRTIO_BLK_T_GET_ID) {
        dlen = dlen ? MIN(dlen, 64u) : 20;
    } else if (type == VIRTIO_BLK_T_DISCARD || type == VIRTIO_BLK_T_WRITE_ZEROES) {
        dlen = 16;
        seg_sectors = 1 + (r->c & 15);
        nseg = 1;
    } else if (type == 0x7f) {
        dlen = 0;
    } else if (!dlen) {
        dlen = 512;
    }
    dev_writes = type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID;
    hdr = testdrv_alloc(in->d, 16, 16);
    status = testdrv_alloc(in->d, 1, 1);
    testdrv_memwrite(in->d, hdr, &h, sizeof(h));
    testdrv_memwrite(in->d, status, &ff, 1);
    bufs[n++] = (TestBuf){hdr, 16, false};
    if (dlen) {
        uint32_t off = 0;

        data = testdrv_alloc(in->d, dlen, 512);
        if (seg_sectors) {
            struct virtio_blk_discard_write_zeroes s = {.sector = htole64(sector),
                                                        .num_sectors = htole32(seg_sectors)};

            testdrv_memwrite(in->d, data, &s, sizeof(s));
        } else {
            testdrv_memset(in->d, data, dev_writes ? 0xee : pattern, dlen);
        }
        nseg = MIN(nseg, dlen / 512 ? dlen / 512 : 1);
        for (unsigned i = 0; i < nseg; i++) {
            uint32_t piece = i + 1 == nseg ? dlen - off : (dlen / nseg) & ~511u;

            bufs[n++] = (TestBuf){data + off, piece, dev_writes};
            off += piece;
        }
    }
    bufs[n++] = (TestBuf){status, 1, true};
    hd = (r->d & 1) && (in->features & BIT(VIRTIO_RING_F_INDIRECT_DESC))
             ? testvq_add_indirect(in->tvq[q], bufs, n)
             : testvq_add_chain(in->tvq[q], bufs, n);
    if (hd < 0) {
        return; /* the ring is full: the guest waits */
    }
    rq = &in->reqs[in->nreq];
    *rq = (Req){.q = q,
                .head = (uint16_t)hd,
                .type = type,
                .sector = sector,
                .dlen = dlen,
                .data = data,
                .status = status,
                .seg_sectors = seg_sectors,
                .pattern = pattern,
                .batch = in->batch};
    in->req_of_head[q][hd] = (int)in->nreq++;
    publish(in, q, (uint16_t)hd);
    stats.requests++;
    if (r->d & 2) {
        testvq_kick_force(in->tvq[q]);
        note_kick(in, q);
    }
}

/*
 * A hostile chain on a queue, by raw descriptors (the driver's free list
 * does not know them: they sit at the top of the table, where chains taken
 * from the free list are the last to go; a collision is one more hostile
 * thing). Modes: 0 a buffer outside RAM, 1 the status read-only, 2 a
 * descriptor loop, 3 an avail entry with any head, 4 a header of 8 bytes,
 * 5 a zero or huge length, 6 an indirect table of a bogus length,
 * 7 avail->idx moved on by up to 255.
 */
static void hostile(Input *in, const Rec *r)
{
    unsigned q = ((r->a >> 3) & 3) % in->nq, mode = r->a & 7;
    TestVq *tvq = in->tvq[q];
    unsigned top = in->num - 1 - (r->b % 3);
    uint64_t hdr = testdrv_alloc(in->d, 16, 16), buf = testdrv_alloc(in->d, 4096, 512);
    uint64_t status = testdrv_alloc(in->d, 1, 1);
    struct virtio_blk_outhdr h = {.type = htole32(r->c & 1 ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN),
                                  .sector = htole64(r->d % DISK_SECTORS)};
    uint16_t wflag = r->c & 1 ? 0 : VRING_DESC_F_WRITE;

    in->clean = false;
    stats.hostile++;
    if (in->num < 4) {
        return;
    }
    testdrv_memwrite(in->d, hdr, &h, sizeof(h));
    /* A three-descriptor chain at top-2..top, patched per mode below. */
    top = MAX(top, 2u);
    testvq_set_desc(tvq, top - 2, hdr, 16, VRING_DESC_F_NEXT, (uint16_t)(top - 1));
    testvq_set_desc(tvq, top - 1, buf, 512, VRING_DESC_F_NEXT | wflag, (uint16_t)top);
    testvq_set_desc(tvq, top, status, 1, VRING_DESC_F_WRITE, 0);
    switch (mode) {
    case 0:
        testvq_set_desc(tvq, top - 1, testdrv_ram_end(in->d) - (r->e & 1 ? 256 : 0), 512,
                        VRING_DESC_F_NEXT | wflag, (uint16_t)top);
        break;
    case 1:
        testvq_set_desc(tvq, top, status, 1, 0, 0);
        break;
    case 2:
        testvq_set_desc(tvq, top, status, 1, VRING_DESC_F_WRITE | VRING_DESC_F_NEXT,
                        (uint16_t)(top - 2 + r->e % 3));
        break;
    case 3:
        publish(in, q, (uint16_t)(r->e | (r->f & 1) << 8));
        return;
    case 4:
        testvq_set_desc(tvq, top - 2, hdr, 8, VRING_DESC_F_NEXT, (uint16_t)(top - 1));
        break;
    case 5:
        testvq_set_desc(tvq, top - 1, buf, r->e & 1 ? 0 : 0x80000000u, VRING_DESC_F_NEXT | wflag,
                        (uint16_t)top);
        break;
    case 6: {
        uint64_t t = testdrv_alloc(in->d, 64, 16);

        testdrv_write_table(in->d, t, 0, hdr, 16, VRING_DESC_F_NEXT, 1);
        testdrv_write_table(in->d, t, 1, status, 1, VRING_DESC_F_WRITE, 0);
        testvq_set_desc(tvq, top - 2, t, r->e & 1 ? 24 : 0, VRING_DESC_F_INDIRECT, 0);
        break;
    }
    default: {
        unsigned by = 1 + r->e;

        testvq_set_avail_idx(tvq, (uint16_t)(testvq_avail_idx(tvq) + by));
        in->avail_poked = true; /* the device may take whatever the slots hold */
        return;
    }
    }
    publish(in, q, (uint16_t)(top - 2));
}

static void poke(Input *in, const Rec *r)
{
    unsigned q = (r->a & 3) % in->nq;
    TestVq *tvq = in->tvq[q];
    uint64_t base = (r->a & 4) ? testvq_avail_gpa(tvq) : testvq_desc_gpa(tvq);
    uint64_t size = (r->a & 4) ? 6 + 2ull * in->num : 16ull * in->num;

    testdrv_memwrite(in->d, base + r->f % (size - 3), &r->b, 4);
    in->clean = false;
    in->avail_poked = true;
    stats.pokes++;
}

/*
 * One drive, one set of counters, whichever path served a request
 * (query-blockstats): what the guest saw complete with OK since @s0, exactly.
 */
static void check_stats(Input *in, const BlockAcctStats *s0)
{
    BlockAcctStats s1;
    uint64_t rd = 0, wr = 0, fl = 0, rdb = 0, wrb = 0;

    blk_get_stats(in->f->backend, &s1);
    for (unsigned i = 0; i < in->nreq; i++) {
        Req *r = &in->reqs[i];

        if (testdrv_readb(in->d, r->status) != VIRTIO_BLK_S_OK) {
            continue;
        }
        if (r->type == VIRTIO_BLK_T_IN) {
            rd++;
            rdb += r->dlen;
        } else if (r->type == VIRTIO_BLK_T_OUT) {
            wr++;
            wrb += r->dlen;
        } else if (r->type == VIRTIO_BLK_T_WRITE_ZEROES) {
            wr++; /* QEMU's accounting: a write of its length */
            wrb += (uint64_t)r->seg_sectors * 512;
        } else if (r->type == VIRTIO_BLK_T_FLUSH) {
            fl++;
        }
    }
    if (s1.rd_operations - s0->rd_operations != rd || s1.rd_bytes - s0->rd_bytes != rdb) {
        FAIL("blockstats: %llu reads of %llu bytes accounted, the guest completed %llu of %llu",
             (unsigned long long)(s1.rd_operations - s0->rd_operations),
             (unsigned long long)(s1.rd_bytes - s0->rd_bytes), (unsigned long long)rd,
             (unsigned long long)rdb);
    }
    if (s1.flush_operations - s0->flush_operations != fl) {
        FAIL("blockstats: %llu flushes accounted, the guest completed %llu",
             (unsigned long long)(s1.flush_operations - s0->flush_operations),
             (unsigned long long)fl);
    }
    if (s1.wr_operations - s0->wr_operations != wr || s1.wr_bytes - s0->wr_bytes != wrb) {
        FAIL("blockstats: %llu writes of %llu bytes accounted, the guest completed %llu of %llu",
             (unsigned long long)(s1.wr_operations - s0->wr_operations),
             (unsigned long long)(s1.wr_bytes - s0->wr_bytes), (unsigned long long)wr,
             (unsigned long long)wrb);
    }
}

static void throttle_for(ThrottleLimits *l, unsigned mode)
{
    throttle_limits_init(l);
    switch (mode) {
    case 1:
        l->b[THROTTLE_OPS_TOTAL].avg = 2000;
        break;
    case 2:
        l->b[THROTTLE_BPS_TOTAL].avg = 8 << 20;
        break;
    case 3:
        l->b[THROTTLE_OPS_TOTAL].avg = 500;
        l->b[THROTTLE_OPS_TOTAL].max = 1000;
        l->b[THROTTLE_OPS_TOTAL].burst_length = 1;
        break;
    }
}

static void run(const uint8_t *data, size_t size)
{
    static const uint64_t fbits[6] = {
        BIT(VIRTIO_RING_F_EVENT_IDX), BIT(VIRTIO_RING_F_INDIRECT_DESC),
        BIT(VIRTIO_BLK_F_FLUSH),      BIT(VIRTIO_BLK_F_CONFIG_WCE),
        BIT(VIRTIO_BLK_F_DISCARD),    BIT(VIRTIO_BLK_F_WRITE_ZEROES)};
    static Input inst;
    Input *in = &inst;
    const Rec *recs = (const Rec *)(data + 2);
    size_t nrec = MIN((size - 2) / sizeof(Rec), MAX_RECS);
    unsigned be = data[0] & 3, nq = 1 + ((data[0] >> 2) & 3);
    unsigned thr = (data[0] >> 5) & 3;
    ThrottleLimits limits;
    BlockAcctStats acct0;
    uint64_t wanted = 0;
    GError *err = NULL;
    Dev *dv = get_dev(be, nq);

    if (!dv) {
        return;
    }
    memset(in, 0, sizeof(*in));
    in->dv = dv;
    in->f = &dv->f;
    in->be = be;
    in->nq = nq;
    in->num = 8u << ((data[1] >> 6) & 3);
    in->clean = true;
    in->flush_order = (be == BE_URING || be == BE_NATIVE) && thr == 0;
    memset(in->req_of_head, 0xff, sizeof(in->req_of_head));

    /* Device reset and renegotiation; new rings in new guest RAM. */
    for (unsigned i = 0; i < 6; i++) {
        if (data[1] & (1u << i)) {
            wanted |= fbits[i];
        }
    }
    virtio_blk_reset(in->f->blk);
    in->features = testdrv_negotiate(virtio_blk_get_host_features(in->f->blk),
                                     wanted | BIT(VIRTIO_F_VERSION_1));
    if (!virtio_blk_set_features(in->f->blk, in->features, &err)) {
        FAIL("set_features: %s", err->message);
    }
    in->d = testdrv_new(&(TestDrvOpts){.ram_size = RAM_SIZE});
    for (unsigned q = 0; q < nq; q++) {
        in->tvq[q] = testvq_new(in->d, in->num, in->features);
        in->vq[q] = virtqueue_new(testdrv_guestmem(in->d), in->num, testvq_desc_gpa(in->tvq[q]),
                                  testvq_avail_gpa(in->tvq[q]), testvq_used_gpa(in->tvq[q]),
                                  in->features, &err);
        in->q[q] = in->vq[q] ? virtio_blk_queue_new(in->f->blk, in->vq[q], NULL, NULL, &err) : NULL;
        if (!in->q[q]) {
            FAIL("queue %u: %s", q, err->message);
        }
        in->dq[q] = (DataPlaneQueue){.q = in->q[q],
                                     .host_notifier = testvq_kick_fd(in->tvq[q]),
                                     .notifier = {.fd = testvq_call_fd(in->tvq[q])}};
    }

    fuzz_input_begin();
    blk_get_stats(in->f->backend, &acct0);
    do_start(in, data[0] & 0x10);
    throttle_for(&limits, thr);
    if (!dp_switch_set_io_limits(in->f->sw, &limits, &err)) {
        FAIL("limits: %s", err->message);
    }
    for (size_t i = 0; i < nrec; i++) {
        const Rec *r = &recs[i];

        if (verbose) {
            fprintf(stderr, "record %zu: op %u a 0x%02x (on the %s)\n", i, r->op & 7, r->a,
                    in->on_dp ? "dataplane" : "block layer");
        }
        switch (r->op & 7) {
        case 0:
        case 1:
            stage("request");
            well_formed(in, r);
            break;
        case 2:
            stage("hostile");
            hostile(in, r);
            break;
        case 3:
            stage("kick");
            for (unsigned q = 0; q < nq; q++) {
                if ((r->a & 4) || q == (r->a & 3) % nq) {
                    if (r->a & 8) {
                        testvq_kick(in->tvq[q]);
                    } else {
                        testvq_kick_force(in->tvq[q]);
                    }
                    note_kick(in, q);
                }
            }
            break;
        case 4:
            if (r->a & 2) {
                do_remap(in, r->b);
            } else {
                do_switch(in, (r->a & 1) ? in->on_dp : !in->on_dp);
            }
            break;
        case 5:
            if (in->started) {
                do_stop(in, "stop");
            }
            do_start(in, r->a & 1);
            stats.stopstarts++;
            break;
        case 6:
            if (in->started && (r->a & 1)) {
                wait_kicked(in);
            }
            if (in->started) {
                settle(in, false);
            }
            break;
        default:
            stage("poke");
            poke(in, r);
            break;
        }
        collect(in);
    }
    if (!in->started) {
        do_start(in, data[0] & 0x10);
    }
    if (in->started) {
        wait_kicked(in);
        settle(in, true);
        do_stop(in, "final stop");
    }
    if (in->clean && !any_broken(in)) {
        for (unsigned i = 0; i < in->nreq; i++) {
            if (in->reqs[i].returned != 1) {
                FAIL("request %u (queue %u head %u) returned %u times", i, in->reqs[i].q,
                     in->reqs[i].head, in->reqs[i].returned);
            }
        }
    }
    /* Chains still in an avail ring must be served by the next start: nothing lost. */
    if (!in->avail_poked) {
        bool left = false;

        for (unsigned q = 0; q < nq; q++) {
            VirtQueueState st;

            virtqueue_get_state(in->vq[q], &st);
            left |= !virtqueue_is_broken(in->vq[q]) &&
                    st.last_avail_idx != testvq_avail_idx(in->tvq[q]);
        }
        if (left) {
            bool on = !(data[0] & 0x80);
            int64_t deadline = now_ns() + SETTLE_NS;

            stats.restarts++;
            throttle_limits_init(&limits);
            dp_switch_set_io_limits(in->f->sw, &limits, NULL);
            do_start(in, on);
            stage("restart");
            for (;;) {
                bool more = false;

                pump(in);
                for (unsigned q = 0; q < nq; q++) {
                    VirtQueueDebug dbg;

                    virtqueue_debug_snapshot(in->vq[q], &dbg);
                    more |= !dbg.broken && dbg.last_avail_idx != testvq_avail_idx(in->tvq[q]);
                }
                if (!more) {
                    break;
                }
                if (now_ns() > deadline) {
                    FAIL("chains left in the avail ring are not served by a start on the %s",
                         on ? "dataplane" : "block layer");
                }
            }
            settle(in, true);
            do_stop(in, "stop after the restart");
        }
    }
    if (in->clean && !any_broken(in)) {
        check_stats(in, &acct0);
    }
    if (in->be != BE_NULL && (!in->clean || any_broken(in))) {
        forget_all(in);
    }
    fuzz_input_end();

    stats.inputs++;
    stats.clean += in->clean;
    stats.backend[be]++;
    stats.nq[nq]++;
    stats.throttled += thr != 0;
    stats.broken += any_broken(in);
    throttle_limits_init(&limits);
    dp_switch_set_io_limits(in->f->sw, &limits, NULL);
    for (unsigned q = 0; q < nq; q++) {
        virtio_blk_queue_free(in->q[q]);
        virtqueue_free(in->vq[q]);
        testvq_free(in->tvq[q]);
    }
    testdrv_free(in->d);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool inited;

    if (!inited) {
        inited = true;
        verbose = getenv("FUZZ_DP_SWITCH_VERBOSE") != NULL;
        extra_iothread = iothread_new("fuzz-sw-extra", NULL);
        if (!extra_iothread) {
            fprintf(stderr, "fuzz-dp-switch: no second iothread\n");
            abort();
        }
        atexit(print_stats);
        fuzz_watchdog_start();
    }
    if (size < 2) {
        return 0;
    }
    run(data, size);
    return 0;
}
