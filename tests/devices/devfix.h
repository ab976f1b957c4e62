/*
 * The device fixture of the tests of src/devices: one virtio-blk device with
 * both request paths (a DpSwitch over a BlockBackend and an iothread), its
 * queues attached to the in-process test driver (tests/driver/testdrv.h),
 * built the way virtio-blk-pci builds it (blk_open_host, blk_configure,
 * blk_start_paths) but without PCI or KVM.
 *
 * devfix_init() builds everything and creates the DpSwitch without starting
 * it, so a test can set hooks, error policies or injection rules first;
 * devfix_start() starts it on one path; devfix_fini() stops and frees it
 * all (a test may free f->sw itself first and set it to NULL).
 *
 * Context: the test's main thread, which is the main loop's.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_TESTS_DEVFIX_H
#define VBLK_TESTS_DEVFIX_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "dataplane/dataplane.h"
#include "devices/dp-switch.h"
#include "testdrv.h"

#define DEVFIX_MAX_QUEUES 4

typedef struct DevFixConf {
    /* -drive options, or -blockdev ones if they have "driver="; "%s" is the image. */
    const char *drive;
    const char *image;   /* a path, an NBD URI or an RBD image; NULL: a new file, see @dir */
    const char *dir;     /* where the new file goes (NULL: g_get_tmp_dir()); unlinked at fini */
    uint64_t bytes;      /* the disk's size: the new file's and the device's capacity */
    uint64_t ram_size;   /* the test driver's guest RAM */
    unsigned num_queues; /* 0: 1 */
    unsigned queue_size;
    const char *iothread; /* its name */
    unsigned aio_max_batch; /* the iothread's aio-max-batch (0: the engine's) */
    unsigned submit_early;  /* the iothread's x-submit-early (0: off) */
    const char *id;       /* the DpSwitch's device id (NULL: none) */
    /* The dataplane's fd is opened as virtio-blk-pci does (the drive's mode, O_DIRECT with
     * cache.direct), or read-only with @dataplane_read_only (its writes fail). */
    bool dataplane_read_only;
    /* The dataplane's IOQ: engine NULL picks it as virtio-blk-pci does (nbd, rbd, native
     * or io_uring); fd, direct, nbd and rbd are filled in. */
    IOQConfig ioq;
    /* The device's configuration (NULL: the defaults for @bytes); its num_queues,
     * queue_size and writeback are the fixture's. */
    const VirtIOBlkConf *blk_conf;
    uint64_t driver_features; /* what the driver accepts of the offer (0: everything) */
    unsigned nregions;        /* guest RAM regions (0: 1) */
} DevFixConf;

typedef struct DevFix {
    char *path; /* the file devfix_init() created (NULL if conf.image was given) */
    int fd;     /* the dataplane's (-1 for nbd) */
    TestDrv *d;
    VirtIOBlk *blk;
    EventLoop *main_loop;
    IOThread *iothread;
    BlockBackend *backend;
    BlockHostInfo hi; /* the backend's, as virtio-blk-pci reads it */
    DpSwitchConf swconf;
    DpSwitch *sw;
    uint64_t features;
    unsigned nq;
    TestVq *tvq[DEVFIX_MAX_QUEUES];
    VirtQueue *vq[DEVFIX_MAX_QUEUES];
    VirtIOBlkQueue *q[DEVFIX_MAX_QUEUES];
    DataPlaneQueue dq[DEVFIX_MAX_QUEUES];
    /* Guest threads (devfix_guest_start), one per queue at most. */
    GThread *guest[DEVFIX_MAX_QUEUES];
    unsigned nguests;
    bool guests_stop;     /* main -> guests */
    unsigned guests_done; /* guests -> main */
} DevFix;

/*
 * Build the device of @c into @f (not started). With @errp NULL a failure
 * fails the test; otherwise it is returned there (with what failed) and @f
 * is left as far as it got, for devfix_fini().
 */
bool devfix_init(DevFix *f, const DevFixConf *c, GError **errp);
/* Start serving the queues on the dataplane (@dataplane) or the block layer; @errp as above. */
bool devfix_start(DevFix *f, bool dataplane, GError **errp);
/*
 * Guest threads: @fn(@opaque) drives queues from its own thread until
 * devfix_guests_stopping() (then it finishes what it has in flight and calls
 * devfix_guest_done()). devfix_stop_guests() tells them, serves the main
 * loop (the block-layer path needs it to drain) until every one is done, and
 * joins them.
 */
void devfix_guest_start(DevFix *f, GThreadFunc fn, void *opaque);
/* Context: a guest thread */
bool devfix_guests_stopping(DevFix *f);
/* Context: a guest thread, last */
void devfix_guest_done(DevFix *f);
void devfix_stop_guests(DevFix *f);
/* Stop and free everything devfix_init() built; closes the fd, unlinks a file it created. */
void devfix_fini(DevFix *f);

/*
 * One 512-byte write of bytes @fill at @sector on @tvq, its header, data and
 * status at @base, +512 and +1024 (1 KiB + 1 byte of guest RAM from @base),
 * published and kicked. Returns the head.
 */
int devfix_submit_write(TestDrv *d, TestVq *tvq, uint64_t base, uint64_t sector, uint8_t fill);

/*
 * The seq-tagged writer of the stress tests (path switches, queue remaps):
 * one guest thread on one queue keeps @depth requests in flight, 512-byte
 * writes to the queue's own @region sectors (from qidx * region; writes to
 * one sector are @region requests apart) whose data starts with the
 * request's sequence number and the queue index, and every 16th request a
 * FLUSH. Checked as they complete: each head completes once and only if
 * submitted, with status OK, a FLUSH only after every write submitted
 * before it; nothing may stay in flight past @timeout_us.
 */
typedef struct DevFixWriter {
    TestDrv *d;
    TestVq *tvq;
    unsigned qidx;
    unsigned queue_size;
    unsigned depth;     /* requests in flight (3 descriptors each) */
    unsigned region;    /* sectors of the queue's region */
    gint64 timeout_us;  /* the whole run's deadline */
    uint64_t completed; /* requests completed (atomic: read while it runs) */
    uint64_t flushes;
    uint32_t *last_seq; /* per sector of the region: the last completed write's seq, or UINT32_MAX */
} DevFixWriter;

/* Set @w up for queue @qidx (last_seq all UINT32_MAX). */
void devfix_writer_init(DevFixWriter *w, TestDrv *d, TestVq *tvq, unsigned qidx,
                        unsigned queue_size, unsigned depth, unsigned region, gint64 timeout_us);
/*
 * Run the workload until @stopping(@opaque) is true, then complete what is
 * in flight and return. Context: the guest thread
 */
void devfix_writer_run(DevFixWriter *w, bool (*stopping)(void *opaque), void *opaque);
/*
 * With the device stopped: @fd (the disk) holds the last completed write
 * of every sector of the region @w wrote, tagged with its queue. Frees last_seq.
 */
void devfix_writer_check(DevFixWriter *w, int fd);

#endif /* VBLK_TESTS_DEVFIX_H */
