/*
 * vhost-user-blk export: a virtio-blk device served over a vhost-user socket
 * (qemu-storage-daemon's `--export type=vhost-user-blk`). The front end
 * (QEMU, cloud-hypervisor, a test) owns the guest memory and the rings; the
 * export maps that memory, and serves the rings with the same request engine,
 * dataplane, block layer and dp-switch as virtio-blk-pci: the kick fd is the
 * dataplane's host notifier, the call fd its GuestNotifier.
 *
 * One front end at a time: the listening socket is watched only while no
 * connection exists. A bad message drops the connection (one error line that
 * names the export and the message) and the export listens again.
 *
 * Context: every function runs in the main loop thread (the thread that runs
 * @main_loop and the BlockBackend), like dp-switch's.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_VHOST_USER_BLK_H
#define VBLK_VHOST_USER_BLK_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "block/block.h"
#include "event/event.h"

typedef struct VhostUserBlkExportConf {
    const char *id;              /* export id (messages, query-block-exports) */
    const char *node_name;       /* the node's name (query-block-exports) */
    BlockBackend *backend;       /* borrowed: must outlive the export */
    EventLoop *main_loop;        /* borrowed: the loop the socket and the block layer run in */
    const char *path;            /* unix socket to listen on (replaced if it is a stale socket) */
    int listen_fd;               /* or an already listening socket (taken over); -1: use @path */
    bool writable;               /* qemu-storage-daemon's default: off */
    uint32_t logical_block_size; /* 0: 512 */
    unsigned num_queues;         /* 0: 1 */
    IOThread *iothread;          /* borrowed; NULL: the export starts its own */
    bool data_plane;             /* path at start: dataplane (true) or block layer */
} VhostUserBlkExportConf;

typedef struct VhostUserBlkExport VhostUserBlkExport;

/* Context: main loop */
VhostUserBlkExport *vhost_user_blk_export_new(const VhostUserBlkExportConf *conf, GError **errp);
/* Drop the connection (in-flight requests complete first), stop listening, free. NULL ok. */
/* Context: main loop */
void vhost_user_blk_export_free(VhostUserBlkExport *e);

/* Context: main loop */
const char *vhost_user_blk_export_id(const VhostUserBlkExport *e);
/* Context: main loop */
const char *vhost_user_blk_export_node_name(const VhostUserBlkExport *e);
/* Context: main loop */
BlockBackend *vhost_user_blk_export_backend(const VhostUserBlkExport *e);
/* Whether a front end is connected. Context: main loop */
bool vhost_user_blk_export_connected(const VhostUserBlkExport *e);
/* Rings served now, connections seen, connections dropped for bad messages. */
/* Context: main loop */
void vhost_user_blk_export_stats(const VhostUserBlkExport *e, unsigned *running,
                                 uint64_t *connections, uint64_t *bad);
/*
 * The node's size changed (block_resize): the capacity follows it and the
 * front end is told with VHOST_USER_BACKEND_CONFIG_CHANGE_MSG when it set up
 * the back-end channel. Returns true if that message was sent (or is queued
 * behind an awaited answer). Context: main loop
 */
bool vhost_user_blk_export_resized(VhostUserBlkExport *e);
/* Move the export to the dataplane or the block layer (now if rings run). Context: main loop */
bool vhost_user_blk_export_set_dataplane(VhostUserBlkExport *e, bool on, GError **errp);
/* Context: main loop */
bool vhost_user_blk_export_is_dataplane(const VhostUserBlkExport *e);

#endif /* VBLK_VHOST_USER_BLK_H */
