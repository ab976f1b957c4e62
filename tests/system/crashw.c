/*
 * crashw: the guest side of the power-loss test (scripts/crashtest). Runs in
 * the L2 guest (static binary in an initramfs appended by
 * tests/system/crashtest.sh) on a raw virtio-blk disk.
 *
 * Usage: crashw DEV TAG THREADS SLOTS RECORDS BATCH
 *        crashw --fs DIR TAG FILES BATCH
 *
 * Each of THREADS threads writes RECORDS records (tests/system/crashrec.h),
 * 4 KiB each with O_DIRECT, round-robin over its own SLOTS slots, and after
 * every BATCH records (and after the last) calls fdatasync(); once that has
 * returned it prints, with a single write(2) to stdout,
 *     CRASHW-ACK TAG THREAD SEQ
 * meaning: records 1..SEQ of THREAD are acknowledged as durable (the guest
 * saw each write complete, then sent a FLUSH that completed). The host side
 * turns each such line into a dm-log-writes mark. At the end:
 *     CRASHW-DONE TAG rc=N acks=N
 *
 * With --fs (a mounted file system at DIR, one thread): file DIR/fN, N = 1 ..
 * FILES, gets record (thread 0, slot N, seq N) and is fsync()ed; after every
 * BATCH files (and the last) DIR is fsync()ed too and "CRASHW-ACK TAG 0 N"
 * printed: files f1..fN must survive. lwlog checkfiles checks a copy of them.
 */
#include "crashrec.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static const char *dev, *tag;
static unsigned threads, slots, batch;
static unsigned long records;

struct worker {
    pthread_t tid;
    unsigned t;
    int rc;
    unsigned long acks;
};

static void say(const char *s, size_t n)
{
    while (n > 0) {
        ssize_t w = write(1, s, n);
        if (w < 0 && errno == EINTR) {
            continue;
        }
        if (w <= 0) {
            return;
        }
        s += w;
        n -= (size_t)w;
    }
}

static void *work(void *arg)
{
    struct worker *w = arg;
    unsigned char *blk;
    char line[160];
    int fd = open(dev, O_RDWR | O_DIRECT);

    if (fd < 0 || posix_memalign((void **)&blk, 4096, CRASHREC_SIZE) != 0) {
        perror("crashw: open");
        w->rc = 1;
        return NULL;
    }
    for (unsigned long n = 1; n <= records; n++) {
        uint32_t slot = w->t * slots + (uint32_t)((n - 1) % slots);
        crashrec_fill(blk, w->t, slot, n);
        if (pwrite(fd, blk, CRASHREC_SIZE, (off_t)slot * CRASHREC_SIZE) != (ssize_t)CRASHREC_SIZE) {
            perror("crashw: pwrite");
            w->rc = 1;
            break;
        }
        if (n % batch == 0 || n == records) {
            if (fdatasync(fd) != 0) {
                perror("crashw: fdatasync");
                w->rc = 1;
                break;
            }
            int len = snprintf(line, sizeof(line), "CRASHW-ACK %s %u %lu\n", tag, w->t, n);
            say(line, (size_t)len);
            w->acks++;
        }
    }
    close(fd);
    free(blk);
    return NULL;
}

static int fs_mode(const char *dir, const char *t, unsigned long files, unsigned b)
{
    unsigned char blk[CRASHREC_SIZE];
    char path[512], line[160];
    unsigned long acks = 0;
    int rc = 0;
    int dfd = open(dir, O_RDONLY | O_DIRECTORY);
    if (dfd < 0 || b == 0) {
        perror("crashw: open dir");
        return 1;
    }
    for (unsigned long n = 1; n <= files; n++) {
        snprintf(path, sizeof(path), "%s/f%lu", dir, n);
        int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        crashrec_fill(blk, 0, (uint32_t)n, n);
        if (fd < 0 || write(fd, blk, sizeof(blk)) != (ssize_t)sizeof(blk) || fsync(fd) != 0) {
            perror("crashw: file");
            rc = 1;
            if (fd >= 0) {
                close(fd);
            }
            break;
        }
        close(fd);
        if (n % b == 0 || n == files) {
            if (fsync(dfd) != 0) {
                perror("crashw: fsync dir");
                rc = 1;
                break;
            }
            int len = snprintf(line, sizeof(line), "CRASHW-ACK %s 0 %lu\n", t, n);
            say(line, (size_t)len);
            acks++;
        }
    }
    close(dfd);
    int len = snprintf(line, sizeof(line), "CRASHW-DONE %s rc=%d acks=%lu\n", t, rc, acks);
    say(line, (size_t)len);
    return rc;
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "--fs") == 0) {
        return fs_mode(argv[2], argv[3], strtoul(argv[4], NULL, 0), (unsigned)strtoul(argv[5], NULL, 0));
    }
    if (argc != 7) {
        fprintf(stderr, "usage: crashw DEV TAG THREADS SLOTS RECORDS BATCH | --fs DIR TAG FILES BATCH\n");
        return 2;
    }
    dev = argv[1];
    tag = argv[2];
    threads = (unsigned)strtoul(argv[3], NULL, 0);
    slots = (unsigned)strtoul(argv[4], NULL, 0);
    records = strtoul(argv[5], NULL, 0);
    batch = (unsigned)strtoul(argv[6], NULL, 0);
    if (threads == 0 || threads > 64 || slots == 0 || batch == 0) {
        fprintf(stderr, "crashw: bad arguments\n");
        return 2;
    }
    struct worker *ws = calloc(threads, sizeof(*ws));
    if (!ws) {
        return 1;
    }
    for (unsigned t = 0; t < threads; t++) {
        ws[t].t = t;
        if (pthread_create(&ws[t].tid, NULL, work, &ws[t]) != 0) {
            fprintf(stderr, "crashw: pthread_create failed\n");
            return 1;
        }
    }
    int rc = 0;
    unsigned long acks = 0;
    for (unsigned t = 0; t < threads; t++) {
        pthread_join(ws[t].tid, NULL);
        rc |= ws[t].rc;
        acks += ws[t].acks;
    }
    char line[160];
    int len = snprintf(line, sizeof(line), "CRASHW-DONE %s rc=%d acks=%lu\n", tag, rc, acks);
    say(line, (size_t)len);
    free(ws);
    return rc;
}
