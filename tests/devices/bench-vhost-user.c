/*
 * vhost-user-blk benchmark (not a test; scripts/bench-vhost-user runs it).
 *
 * Connects the in-process front end (vufront.c) to a vhost-user-blk back end
 * that is already listening on --socket (vblk-storage-daemon or
 * qemu-storage-daemon: the script starts them), starts one queue of 128
 * entries with EVENT_IDX, and plays the guest on the calling thread: it keeps
 * --qd requests of --bs bytes (--rw randread|randwrite, random aligned
 * offsets over the whole disk) in flight, kicks through the kick eventfd when
 * EVENT_IDX says the back end wants it, and sleeps in poll() on the call
 * eventfd (the "interrupt") when it has nothing to reap. Prints one line:
 *   RESULT iops=N mean_us=X p99_us=X kicks_per_req=X sleeps_per_req=X requests=N
 *
 * Usage: bench-vhost-user --socket PATH [--qd N] [--bs BYTES]
 *        [--rw randread|randwrite] [--seconds N] [--seed N]
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <endian.h>
#include <linux/virtio_blk.h>

#include "vufront.h"

#define QSIZE     128
#define BUCKET_NS 100ull     /* latency histogram: 0.1 us buckets ... */
#define NBUCKETS  1000000ull /* ... up to 100 ms */

typedef struct Slot {
    uint64_t hdr, data, status;
    uint64_t t0;
} Slot;

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Upper bound of the bucket holding the 99th percentile, in us. */
static double p99_us(const uint64_t *hist, uint64_t done)
{
    uint64_t target = done - done / 100, acc = 0;

    for (uint64_t i = 0; i < NBUCKETS; i++) {
        acc += hist[i];
        if (acc >= target) {
            return (double)((i + 1) * BUCKET_NS) / 1000.0;
        }
    }
    return (double)(NBUCKETS * BUCKET_NS) / 1000.0;
}

/* The disk's capacity in 512-byte sectors, from its config space (CONFIG). */
static uint64_t get_capacity(Fe *fe)
{
    uint8_t p[12 + 8] = {0};
    uint32_t c[3] = {0, 8, 0}; /* offset, size, flags */
    uint64_t cap;

    memcpy(p, c, 12);
    fe_send(fe, GET_CONFIG, 0, p, sizeof(p), NULL, 0);
    fe_reply(fe, GET_CONFIG, p, sizeof(p));
    memcpy(&cap, p + 12, 8);
    return le64toh(cap);
}

/* The guest: its queue, its request slots and the random offsets. */
typedef struct Guest {
    Fe *fe;
    TestVq *vq;
    Slot *slots;
    int slot_of_head[QSIZE];
    unsigned bs;
    bool write;
    uint64_t nblocks;
    GRand *rnd;
} Guest;

/* Build and publish (not kick) the request of slot @k: a random aligned read or write. */
static void submit(Guest *g, unsigned k)
{
    Slot *sl = &g->slots[k];
    struct virtio_blk_outhdr h = {
        .type = htole32(g->write ? VIRTIO_BLK_T_OUT : VIRTIO_BLK_T_IN),
        .sector = htole64((uint64_t)g_rand_int_range(g->rnd, 0, (gint32)g->nblocks) *
                          (g->bs / 512))};
    TestBuf b[3] = {{sl->hdr, 16, false}, {sl->data, g->bs, !g->write}, {sl->status, 1, true}};
    int hd;

    testdrv_memwrite(g->fe->d, sl->hdr, &h, sizeof(h));
    hd = testvq_add_chain(g->vq, b, 3);
    if (hd < 0) {
        fprintf(stderr, "bench-vhost-user: ring full\n");
        exit(1);
    }
    g->slot_of_head[hd] = (int)k;
    sl->t0 = now_ns();
    testvq_publish(g->vq, (uint16_t)hd);
}

static void usage(void)
{
    fprintf(stderr, "usage: bench-vhost-user --socket PATH [--qd N] [--bs BYTES] "
                    "[--rw randread|randwrite] [--seconds N] [--seed N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    const char *sock = NULL;
    unsigned qd = 1, secs = 3, seed = 1;
    Guest g = {.bs = 4096};
    uint64_t *hist, nsect, start, end, done = 0, lat_sum = 0, kicks = 0, sleeps = 0;
    struct pollfd pfd;

    for (int i = 1; i < argc; i += 2) {
        const char *o = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;

        if (!v) {
            usage();
        }
        if (!strcmp(o, "--socket")) {
            sock = v;
        } else if (!strcmp(o, "--qd")) {
            qd = (unsigned)strtoul(v, NULL, 0);
        } else if (!strcmp(o, "--bs")) {
            g.bs = (unsigned)strtoul(v, NULL, 0);
        } else if (!strcmp(o, "--seconds")) {
            secs = (unsigned)strtoul(v, NULL, 0);
        } else if (!strcmp(o, "--seed")) {
            seed = (unsigned)strtoul(v, NULL, 0);
        } else if (!strcmp(o, "--rw") && !strcmp(v, "randwrite")) {
            g.write = true;
        } else if (strcmp(o, "--rw") || strcmp(v, "randread")) {
            usage();
        }
    }
    /* Three descriptors a request, direct chains: at most 42 in a ring of 128. */
    if (!sock || qd < 1 || qd > QSIZE / 3 || g.bs < 512 || g.bs % 512 || g.bs > (1u << 20) ||
        !secs) {
        usage();
    }
    signal(SIGPIPE, SIG_IGN);

    g.fe = fe_open_queues(sock, 1, 1);
    nsect = get_capacity(g.fe);
    g.nblocks = nsect / (g.bs / 512);
    if (g.nblocks < 1 || g.nblocks > INT32_MAX) {
        fprintf(stderr, "bench-vhost-user: disk of %" PRIu64 " sectors\n", nsect);
        return 1;
    }
    fe_start(g.fe, 1);
    g.vq = g.fe->vq[0];
    g.slots = g_new0(Slot, qd);
    for (unsigned k = 0; k < qd; k++) {
        uint8_t ff = 0xff;

        g.slots[k].hdr = testdrv_alloc(g.fe->d, 16, 16);
        g.slots[k].data = testdrv_alloc(g.fe->d, g.bs, 4096);
        g.slots[k].status = testdrv_alloc(g.fe->d, 1, 1);
        testdrv_memset(g.fe->d, g.slots[k].data, 0x5a, g.bs);
        testdrv_memwrite(g.fe->d, g.slots[k].status, &ff, 1);
    }
    hist = g_new0(uint64_t, NBUCKETS);
    g.rnd = g_rand_new_with_seed(seed);
    pfd = (struct pollfd){.fd = testvq_call_fd(g.vq), .events = POLLIN};

    start = now_ns();
    end = start + (uint64_t)secs * 1000000000ull;
    for (unsigned k = 0; k < qd; k++) {
        submit(&g, k);
    }
    kicks += testvq_kick(g.vq);
    for (;;) {
        uint16_t head;
        uint32_t len;
        unsigned reaped = 0;
        uint64_t t = 0;

        /* Reap everything completed; each slot goes straight back in until the end. */
        while (testvq_get_used(g.vq, &head, &len)) {
            unsigned k = (unsigned)g.slot_of_head[head];
            uint8_t st = testdrv_readb(g.fe->d, g.slots[k].status);
            uint64_t lat;

            t = now_ns();
            lat = t - g.slots[k].t0;
            if (st != VIRTIO_BLK_S_OK) {
                fprintf(stderr, "bench-vhost-user: request failed (status %u)\n", st);
                return 1;
            }
            lat_sum += lat;
            hist[lat / BUCKET_NS < NBUCKETS ? lat / BUCKET_NS : NBUCKETS - 1]++;
            done++;
            reaped++;
            if (t < end) {
                submit(&g, k);
            }
        }
        if (reaped) {
            /* Kick only if the back end asked for it (EVENT_IDX avail_event). */
            kicks += testvq_kick(g.vq);
        }
        if (testvq_free_descs(g.vq) == QSIZE) {
            break; /* past the end and drained */
        }
        if (reaped) {
            continue;
        }
        /* Nothing to reap: sleep on the interrupt (used_event was set by get_used). */
        sleeps++;
        if (poll(&pfd, 1, 10000) > 0) {
            uint64_t cnt;

            if (read(pfd.fd, &cnt, sizeof(cnt)) < 0 && errno != EAGAIN) {
                perror("bench-vhost-user: read call eventfd");
                return 1;
            }
        } else if (testvq_used_idx(g.vq) == (uint16_t)done) {
            fprintf(stderr, "bench-vhost-user: no completion for 10 s\n");
            return 1;
        }
    }
    end = now_ns();
    printf("RESULT iops=%.0f mean_us=%.2f p99_us=%.1f kicks_per_req=%.3f sleeps_per_req=%.3f "
           "requests=%" PRIu64 "\n",
           (double)done * 1e9 / (double)(end - start), (double)lat_sum / (double)done / 1000.0,
           p99_us(hist, done), (double)kicks / (double)done, (double)sleeps / (double)done, done);
    fe_close(g.fe);
    g_rand_free(g.rnd);
    g_free(hist);
    g_free(g.slots);
    return 0;
}
