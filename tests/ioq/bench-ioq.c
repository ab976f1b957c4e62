/*
 * bench-ioq: ops/s of the IOQ engines alone (no virtio), 4 KiB random reads.
 *   null engine at QD32; native and io_uring at QD1 and QD32 on a file with
 *   O_DIRECT.  Not a test (timing depends on the machine); see docs/ioq.md.
 *
 * usage: bench-ioq [file (default /var/tmp/vblk-bench-ioq.img)] [MiB (256)] [seconds (3)]
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "ioq/ioq.h"

#define BS     4096
#define MAX_QD 32

typedef struct Bench {
    IOQ *ioq;
    IOQReq reqs[MAX_QD];
    struct iovec iov[MAX_QD];
    uint8_t *bufs;
    uint64_t nblocks;
    uint64_t done;
    uint64_t rng;
    IOQReq *idle[MAX_QD]; /* completed, to be re-enqueued by the main loop */
    unsigned nidle;
    int errors;
} Bench;

static double now_s(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec / 1e9;
}

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static uint64_t rng_next(Bench *b)
{
    /* xorshift64: cheap, good enough to spread offsets. */
    b->rng ^= b->rng << 13;
    b->rng ^= b->rng >> 7;
    b->rng ^= b->rng << 17;
    return b->rng;
}

static void bench_cb(IOQReq *r, int ret);

static void bench_start(Bench *b, IOQReq *r)
{
    r->op = IOQ_OP_READ;
    r->offset = (rng_next(b) % b->nblocks) * BS;
    r->len = BS;
    r->niov = 1;
    r->cb = bench_cb;
    r->opaque = b;
    if (ioq_enqueue(b->ioq, r) < 0) {
        b->errors++;
    }
}

static void bench_cb(IOQReq *r, int ret)
{
    Bench *b = r->opaque;

    b->done++;
    if (ret < 0) {
        b->errors++;
    }
    /* Re-enqueue from the main loop, as the dataplane does (pop, enqueue,
     * submit): with the null engine a callback that re-enqueued and
     * submitted would keep ioq_submit() busy forever. */
    b->idle[b->nidle++] = r;
}

static double bench_run(const char *engine, int fd, uint64_t nblocks, unsigned qd, double secs,
                        bool busy_poll)
{
    IOQConfig cfg = {.engine = engine, .fd = fd, .queue_depth = MAX_QD, .direct = fd >= 0};
    GError *err = NULL;
    Bench b = {.nblocks = nblocks, .rng = 0x9e3779b97f4a7c15ull};
    struct pollfd pfd;
    double t0, t1;
    uint64_t cnt, iters = 0;

    b.ioq = ioq_new(&cfg, &err);
    if (!b.ioq) {
        fprintf(stderr, "%s: %s\n", engine, err->message);
        g_error_free(err);
        return 0;
    }
    if (posix_memalign((void **)&b.bufs, 4096, MAX_QD * BS)) {
        abort();
    }
    memset(b.bufs, 0, MAX_QD * BS);
    for (unsigned i = 0; i < qd; i++) {
        b.iov[i] = (struct iovec){b.bufs + i * BS, BS};
        b.reqs[i].iov = &b.iov[i];
        bench_start(&b, &b.reqs[i]);
    }
    pfd = (struct pollfd){.fd = ioq_get_fd(b.ioq), .events = POLLIN};
    t0 = now_s();
    t1 = t0;
    while (t1 - t0 < secs) {
        while (b.nidle) {
            bench_start(&b, b.idle[--b.nidle]);
        }
        ioq_submit(b.ioq);
        if (fd >= 0 && busy_poll) {
            /* Like adaptive polling: spin on the completion ring, no syscall. */
            while (!ioq_completions_ready(b.ioq)) {
                cpu_relax();
            }
            ioq_process_completions(b.ioq);
        } else if (fd >= 0) {
            /* Like the iothread: sleep on the eventfd, clear it, reap. */
            if (poll(&pfd, 1, 1000) > 0 && read(pfd.fd, &cnt, sizeof(cnt)) < 0) {
                /* EAGAIN: nothing to clear */
            }
            ioq_process_completions(b.ioq);
        }
        if ((++iters & 1023) == 0 || fd >= 0) {
            t1 = now_s();
        }
    }
    ioq_free(b.ioq);
    free(b.bufs);
    if (b.errors) {
        fprintf(stderr, "%s: %d errors\n", engine, b.errors);
    }
    return b.done / (t1 - t0);
}

static int prepare_file(const char *path, uint64_t bytes)
{
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    uint8_t *chunk;

    if (fd < 0) {
        fprintf(stderr, "%s: %s\n", path, strerror(errno));
        return -1;
    }
    /* Written data, not holes: reading a hole costs the disk nothing. */
    if (lseek(fd, 0, SEEK_END) < (off_t)bytes) {
        chunk = g_malloc(1 << 20);
        memset(chunk, 0x5a, 1 << 20);
        for (uint64_t off = 0; off < bytes; off += 1 << 20) {
            if (pwrite(fd, chunk, 1 << 20, off) != 1 << 20) {
                fprintf(stderr, "%s: write failed\n", path);
                g_free(chunk);
                close(fd);
                return -1;
            }
        }
        fsync(fd);
        g_free(chunk);
    }
    close(fd);
    fd = open(path, O_RDWR | O_DIRECT | O_CLOEXEC);
    if (fd < 0) {
        fprintf(stderr, "%s: O_DIRECT: %s\n", path, strerror(errno));
    }
    return fd;
}

int main(int argc, char **argv)
{
    const char *path = argc > 1 ? argv[1] : "/var/tmp/vblk-bench-ioq.img";
    uint64_t mib = argc > 2 ? strtoull(argv[2], NULL, 0) : 256;
    double secs = argc > 3 ? strtod(argv[3], NULL) : 3;
    uint64_t nblocks = mib * (1 << 20) / BS;
    double null32, r[2][2] = {{0}};
    const char *engines[2] = {"native", "io_uring"};
    const unsigned qds[2] = {1, 32};
    int fd;

    if (!nblocks || secs <= 0) {
        fprintf(stderr, "usage: %s [file] [MiB] [seconds]\n", argv[0]);
        return 2;
    }
    null32 = bench_run("null", -1, nblocks, 32, secs, false);
    printf("null      qd32 4k randread: %12.0f ops/s\n", null32);
    fd = prepare_file(path, mib << 20);
    if (fd < 0) {
        return 1;
    }
    for (int e = 0; e < 2; e++) {
        for (int q = 0; q < 2; q++) {
            r[e][q] = bench_run(engines[e], fd, nblocks, qds[q], secs, false);
            printf("%-9s qd%-2u 4k randread O_DIRECT: %10.0f ops/s\n", engines[e], qds[q], r[e][q]);
        }
        printf("%-9s qd32 busy-polling completions: %10.0f ops/s\n", engines[e],
               bench_run(engines[e], fd, nblocks, 32, secs, true));
    }
    close(fd);
    printf("BENCH ioq null_qd32=%.0f native_qd1=%.0f native_qd32=%.0f io_uring_qd1=%.0f "
           "io_uring_qd32=%.0f\n",
           null32, r[0][0], r[0][1], r[1][0], r[1][1]);
    return 0;
}
