/*
 * query-blockstats entries (QEMU's BlockStats) for a BlockBackend: the
 * backend's accounting (only BlockBackends account, as in QEMU) and its
 * protocol node as "parent" with the file driver's discard counters.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <string.h>

#include "devices/blockstats-qmp.h"
#include "qmp-json-int.h"
#include "util/thread-check.h"

/* BlockDeviceStats: @st NULL gives a node's own counters (all zero, as QEMU's). */
static void add_device_stats(JsonBuilder *b, const BlockAcctStats *st, uint64_t wr_highest)
{
    static const BlockAcctStats zero = {.idle_time_ns = -1};

    if (!st) {
        st = &zero;
    }
    json_builder_set_member_name(b, "stats");
    json_builder_begin_object(b);
#define STAT(name) add_int(b, #name, (int64_t)st->name)
    STAT(rd_bytes);
    STAT(wr_bytes);
    STAT(unmap_bytes);
    STAT(rd_operations);
    STAT(wr_operations);
    STAT(flush_operations);
    STAT(unmap_operations);
    STAT(rd_total_time_ns);
    STAT(wr_total_time_ns);
    STAT(flush_total_time_ns);
    STAT(unmap_total_time_ns);
    add_int(b, "wr_highest_offset", (int64_t)wr_highest);
    STAT(rd_merged);
    STAT(wr_merged);
    STAT(unmap_merged);
    if (st->idle_time_ns >= 0) {
        add_int(b, "idle_time_ns", st->idle_time_ns);
    }
    STAT(failed_rd_operations);
    STAT(failed_wr_operations);
    STAT(failed_flush_operations);
    STAT(failed_unmap_operations);
    STAT(invalid_rd_operations);
    STAT(invalid_wr_operations);
    STAT(invalid_flush_operations);
    STAT(invalid_unmap_operations);
#undef STAT
    add_bool(b, "account_invalid", st->account_invalid);
    add_bool(b, "account_failed", st->account_failed);
    json_builder_set_member_name(b, "timed_stats");
    json_builder_begin_array(b);
    json_builder_end_array(b);
    json_builder_end_object(b);
}

/*
 * The protocol node under the format node (QEMU's "parent"): its own
 * counters are zero as in QEMU, where only the BlockBackend accounts; raw
 * passes offsets through, so its highest write is the drive's.
 */
static void add_parent_stats(JsonBuilder *b, BlockNode *child, uint64_t wr_highest)
{
    BlockNodeStats ns;
    const char *drv = blk_node_get_driver(child);

    blk_node_get_stats(child, &ns);
    json_builder_set_member_name(b, "parent");
    json_builder_begin_object(b);
    add_str(b, "node-name", blk_node_get_name(child));
    add_device_stats(b, NULL, wr_highest);
    if (!strcmp(drv, "file") || !strcmp(drv, "host_device")) {
        json_builder_set_member_name(b, "driver-specific");
        json_builder_begin_object(b);
        add_str(b, "driver", drv);
        add_int(b, "discard-nb-ok", (int64_t)ns.discards);
        add_int(b, "discard-nb-failed", 0);
        add_int(b, "discard-bytes-ok", (int64_t)ns.discard_bytes);
        json_builder_end_object(b);
    }
    json_builder_end_object(b);
}

/* Context: main-loop context */
void blockstats_add(JsonBuilder *b, BlockBackend *blk, const char *device, const char *qdev)
{
    const char *root = blk_root_node_name(blk);
    BlockNode *child = blk_node_get_child(blk_find_node(blk, root));
    BlockAcctStats st;

    THREAD_ASSERT_MAIN();
    blk_get_stats(blk, &st);
    json_builder_begin_object(b);
    add_str(b, "device", device);
    add_str(b, "node-name", root);
    if (qdev) {
        add_str(b, "qdev", qdev);
    }
    add_device_stats(b, &st, st.wr_highest_offset);
    if (child) {
        add_parent_stats(b, child, st.wr_highest_offset);
    }
    json_builder_end_object(b);
}
