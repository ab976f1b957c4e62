/*
 * Fixture for dataplane tests and the dataplane benchmark: a test-driver
 * guest with one virtio-blk queue, served by a DataPlane on its own iothread
 * over a backing file (or the null engine).
 */
#ifndef VBLK_DPFIX_H
#define VBLK_DPFIX_H

#include <stdbool.h>
#include <stdint.h>

#include "testdrv.h"
#include "dataplane/dataplane.h"

typedef struct DpFixOpts {
    const char *engine;      /* "native", "io_uring", "null", "nbd", "rbd" (no file; disk_size given) */
    bool direct;             /* O_DIRECT backing file */
    uint64_t disk_size;      /* bytes (default 16 MiB) */
    unsigned queue_size;     /* default 128 */
    unsigned aio_max_events; /* 0 = default */
    const char *path;        /* existing backing file to use instead of a temp file */
    bool null_read_zeroes;
    bool writethrough; /* negotiate without FLUSH/CONFIG_WCE: writethrough */
    uint64_t ram_size; /* guest RAM (default 64 MiB) */
    IOQNbdConfig nbd;  /* engine "nbd": the server */
    IOQRbdConfig rbd;  /* engine "rbd": the image */
    unsigned complete_batch; /* DataPlaneConf.complete_batch (0: default) */
    unsigned max_batch;      /* IOQConfig.max_batch: requests per submit syscall (0: default) */
    unsigned submit_early;   /* IOQConfig.submit_early (0: off) */
    bool stream;             /* @path is a FIFO: its size is @disk_size, not its length */
    int64_t complete_hold_ns;     /* DataPlaneConf.complete_hold_ns (0: off) */
    unsigned complete_hold_depth; /* DataPlaneConf.complete_hold_depth */
} DpFixOpts;

typedef struct DpFix {
    DpFixOpts o;
    TestDrv *d;
    TestVq *tvq;
    VirtIOBlk *blk;
    VirtQueue *vq;
    VirtIOBlkQueue *q;
    IOThread *iothread;
    DataPlane *dp;
    int fd;
    char *path; /* temp file to unlink, or NULL */
    uint64_t features;
    bool direct_ok; /* O_DIRECT was requested and the filesystem accepted it */
    bool indirect;  /* dpfix_add() writes indirect chains */
} DpFix;

/* Returns NULL (with a message on stderr) if the backend cannot be used here. */
DpFix *dpfix_new(const DpFixOpts *o);
void dpfix_start(DpFix *f);
void dpfix_stop(DpFix *f);
void dpfix_free(DpFix *f);

/* A request with its data split into segments at chosen alignments. */
#define DPFIX_MAX_SEG 8
typedef struct DpReq {
    int head;
    uint32_t type;
    uint64_t sector;
    uint32_t len;
    uint64_t hdr_gpa;
    uint64_t status_gpa;
    unsigned nseg;
    uint64_t seg_gpa[DPFIX_MAX_SEG];
    uint32_t seg_len[DPFIX_MAX_SEG];
} DpReq;

/*
 * Build and publish (not kick) a request. @data (for OUT) is copied into the
 * segments. @nseg segments of random length; @misalign > 0 offsets each
 * segment's address by a random amount below @misalign bytes.
 */
bool dpfix_add(DpFix *f, DpReq *r, uint32_t type, uint64_t sector, const void *data, uint32_t len,
               unsigned nseg, unsigned misalign, GRand *rnd);
/* Gather the data of a completed IN request. */
void dpfix_read_data(DpFix *f, const DpReq *r, void *buf);
uint8_t dpfix_status(DpFix *f, const DpReq *r);

#endif
