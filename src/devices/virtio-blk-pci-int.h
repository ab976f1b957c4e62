/* virtio-blk-pci.c <-> virtio-blk-pci-qmp.c; not a public interface. */
#ifndef VBLK_VIRTIO_BLK_PCI_INT_H
#define VBLK_VIRTIO_BLK_PCI_INT_H

#include <pthread.h>
#include "block/block.h"
#include "devices/dp-switch.h"
#include "vmm/machine.h"
#include "devices/virtio-blk-pci.h"
#include "devices/virtio-pci.h"

struct VirtIOBlkPCI {
    Machine *m;
    Vm *vm;
    char *id;          /* device id (QOM /machine/peripheral/<id>) */
    char *drive_id;    /* -drive id (query-block "device"), or the -blockdev node-name */
    bool blockdev;     /* on a -blockdev node: no BlockBackend name, as QEMU's "device": "" */
    char *iothread_id; /* iothread= (QOM link /objects/<id>), or NULL */
    int slot;          /* addr= slot, -1 automatic */
    bool pio_notify;   /* modern-pio-notify: kicks through an I/O BAR too */
    int write_cache;   /* write-cache: 1 on, 0 off, -1 auto */
    int bootindex;     /* stored only: vblk has no firmware boot order */
    VirtIOPCI *vp;
    GuestMem *gm;
    VirtIOBlk *blk;
    VirtIOBlkConf conf;
    int fd; /* the dataplane's own fd on the image */
    bool direct;
    bool no_flush; /* cache.no-flush: both paths complete flushes at once */
    bool readonly;
    bool null_read_zeroes;
    const char *engine;
    IOQNbdConfig nbd; /* engine "nbd": the server (strings borrowed from the backend) */
    IOQRbdConfig rbd; /* engine "rbd": the image (strings borrowed from the backend) */
    bool nbd_direct;  /* engine "nbd" or "rbd": cache.direct as given (query-block) */
    char *no_dataplane;    /* why this drive cannot use the dataplane, or NULL */
    bool data_plane;       /* wanted path: x-data-plane / iothread= */
    IOThread *iothread;    /* borrowed from the registry: queue 0's */
    /*
     * Each queue's iothread (iothread-vq-mapping, or @iothread for all) and
     * its id, for conf.num_queues queues; changed by x-blockdev-remap-vqs.
     */
    IOThread *vq_iothread[VIRTIO_BLK_MAX_QUEUES];
    char *vq_iothread_id[VIRTIO_BLK_MAX_QUEUES];
    BlockBackend *backend; /* the block-layer path (main loop) */
    DpSwitch *sw;          /* both paths, while the driver runs (DRIVER_OK) */
    unsigned nq;           /* queues running (0 when stopped) */
    VirtQueue *vq[VIRTIO_BLK_MAX_QUEUES];
    VirtIOBlkQueue *bq[VIRTIO_BLK_MAX_QUEUES];
    /*
     * What the debug-state dump (any thread, no BQL) may look at: the running
     * DpSwitch and its queue count, set after start and cleared before the
     * DpSwitch is freed, both under debug_lock, which the dump holds.
     */
    pthread_mutex_t debug_lock;
    DpSwitch *debug_sw;
    unsigned debug_nq;
};

/*
 * The device's lines of a debug-state dump (util/debug-state.h): path,
 * switches, per-queue dataplane counters. Registered while the device exists.
 * Context: any thread (takes only debug_lock)
 */
void blk_pci_debug_state(GString *out, void *opaque);
/* Register the device in QOM (/machine/peripheral/<id>) and the QMP commands. */
/* Context: main thread */
void blk_pci_qmp_add(VirtIOBlkPCI *s);
/* Context: main thread */
void blk_pci_qmp_remove(VirtIOBlkPCI *s);
/*
 * QEMU 7.2's virtio-blk-pci properties on /machine/peripheral/<id> (the ones
 * vblk does not implement read QEMU's default and refuse a change as QEMU
 * does after realize), and its child objects.
 */
/* Context: main thread */
void blk_pci_qom_add_props(VirtIOBlkPCI *s, const char *path);
/*
 * x-blockdev-remap-vqs: give the queues the iothreads of @map (validated as
 * iothread-vq-mapping, against the -object iothreads) on the running device
 * (dp_switch_remap), or for its next start. Context: main loop, BQL held
 */
bool blk_pci_remap(VirtIOBlkPCI *s, const GPtrArray *map, GError **errp);
/* BlockErrorHook: BLOCK_IO_ERROR event, and STOP for werror/rerror=stop. */
/* Context: main loop, BQL held */
void blk_pci_io_error(void *opaque, BlockBackend *blk, const BlockIOErrorEvent *ev);

#endif
