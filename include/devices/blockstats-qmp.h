/*
 * query-blockstats entries (QEMU's BlockStats) for a BlockBackend, shared by
 * the devices that report them: virtio-blk-pci and the vhost-user-blk export.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_DEVICES_BLOCKSTATS_QMP_H
#define VBLK_DEVICES_BLOCKSTATS_QMP_H

#include <json-glib/json-glib.h>

#include "block/block.h"

/*
 * Append one BlockStats object for @blk to the array being built in @b:
 * "device" (@device; "" for a backend without a drive name), "node-name" (the
 * root node), "qdev" (omitted when @qdev is NULL), the backend's "stats" (both
 * request paths' counters folded in) and its protocol node as "parent".
 * Context: main-loop context
 */
void blockstats_add(JsonBuilder *b, BlockBackend *blk, const char *device, const char *qdev);

#endif
