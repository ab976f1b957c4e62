/*
 * Per-drive I/O accounting, shaped after QMP query-blockstats (QEMU's
 * BlockDeviceStats field names). Kept by the BlockBackend.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_BLOCK_ACCT_H
#define VBLK_BLOCK_ACCT_H

#include <stdbool.h>
#include <stdint.h>

typedef enum BlockAcctType {
    BLOCK_ACCT_READ,
    BLOCK_ACCT_WRITE, /* writes and write-zeroes */
    BLOCK_ACCT_FLUSH,
    BLOCK_ACCT_UNMAP, /* discard */
    BLOCK_ACCT__MAX,
} BlockAcctType;

#define BLOCK_ACCT_HIST_MAX_BOUNDS 16

/* x-block-latency-histogram: bins[i] counts latencies in [bounds[i-1], bounds[i]). */
typedef struct BlockAcctHistogram {
    unsigned nbounds;
    uint64_t bounds[BLOCK_ACCT_HIST_MAX_BOUNDS]; /* ns */
    uint64_t bins[BLOCK_ACCT_HIST_MAX_BOUNDS + 1];
} BlockAcctHistogram;

typedef struct BlockAcctStats {
    uint64_t rd_bytes, wr_bytes, unmap_bytes;
    uint64_t rd_operations, wr_operations, flush_operations, unmap_operations;
    uint64_t rd_merged, wr_merged, unmap_merged; /* always 0: no merging here */
    uint64_t rd_total_time_ns, wr_total_time_ns, flush_total_time_ns, unmap_total_time_ns;
    uint64_t failed_rd_operations, failed_wr_operations, failed_flush_operations,
        failed_unmap_operations;
    uint64_t invalid_rd_operations, invalid_wr_operations, invalid_flush_operations,
        invalid_unmap_operations;
    int64_t idle_time_ns; /* since the last completed request; -1 if none yet */
    bool account_invalid, account_failed;
    BlockAcctHistogram hist[BLOCK_ACCT__MAX];
} BlockAcctStats;

#endif /* VBLK_BLOCK_ACCT_H */
