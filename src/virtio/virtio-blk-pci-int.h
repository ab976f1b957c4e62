/* virtio-blk-pci.c <-> virtio-blk-pci-qmp.c; not a public interface. */
#ifndef VBLK_VIRTIO_BLK_PCI_INT_H
#define VBLK_VIRTIO_BLK_PCI_INT_H

#include "vblk/block.h"
#include "vblk/dp-switch.h"
#include "vblk/machine.h"
#include "vblk/virtio-blk-pci.h"
#include "vblk/virtio-pci.h"

struct VirtIOBlkPCI {
    Machine *m;
    Vm *vm;
    char *id;       /* device id (QOM /machine/peripheral/<id>) */
    char *drive_id; /* -drive id (query-block "device") */
    VirtIOPCI *vp;
    GuestMem *gm;
    VirtIOBlk *blk;
    VirtIOBlkConf conf;
    int fd; /* the dataplane's own fd on the image */
    bool direct;
    bool readonly;
    bool null_read_zeroes;
    const char *engine;
    char *no_dataplane;    /* why this drive cannot use the dataplane, or NULL */
    bool data_plane;       /* wanted path: x-data-plane / iothread= */
    IOThread *iothread;    /* borrowed from the registry */
    BlockBackend *backend; /* the block-layer path (main loop) */
    DpSwitch *sw;          /* both paths, while the driver runs (DRIVER_OK) */
    unsigned nq;           /* queues running (0 when stopped) */
    VirtQueue *vq[VIRTIO_BLK_MAX_QUEUES];
    VirtIOBlkQueue *bq[VIRTIO_BLK_MAX_QUEUES];
};

/* Register the device in QOM (/machine/peripheral/<id>) and the QMP commands. */
/* Context: main thread */
void blk_pci_qmp_add(VirtIOBlkPCI *s);
/* Context: main thread */
void blk_pci_qmp_remove(VirtIOBlkPCI *s);
/* BlockErrorHook: BLOCK_IO_ERROR event, and STOP for werror/rerror=stop. */
/* Context: main loop, BQL held */
void blk_pci_io_error(void *opaque, BlockBackend *blk, const BlockIOErrorEvent *ev);

/* Every iothread in use (query-iothreads). Context: main thread */
void blk_pci_foreach_iothread(void (*fn)(const char *id, IOThread *t, int64_t poll_max_ns,
                                         int64_t poll_grow, int64_t poll_shrink, void *opaque),
                              void *opaque);

#endif
