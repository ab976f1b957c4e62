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
    uint64_t wr_highest_offset; /* end of the highest write or write-zeroes, failed or not */
    int64_t idle_time_ns;       /* since the last completed request; -1 if none yet */
    bool account_invalid, account_failed;
    BlockAcctHistogram hist[BLOCK_ACCT__MAX];
} BlockAcctStats;

/*
 * Counters of one request path that is not the BlockBackend's own (the
 * dataplane: one shard per virtqueue, written by the iothread that owns the
 * queue). Single writer, relaxed atomic stores; any thread may read them with
 * block_acct_shard_sum() while they are written (each counter is exact, the
 * counters may be a request apart from each other). No lock, no allocation.
 * The BlockBackend sums its shards into blk_get_stats() and folds them into
 * its own counters when they are detached, so no total ever goes backwards.
 */
typedef struct BlockAcctShard {
    uint64_t ops[BLOCK_ACCT__MAX];
    uint64_t bytes[BLOCK_ACCT__MAX];
    uint64_t time_ns[BLOCK_ACCT__MAX];
    uint64_t failed[BLOCK_ACCT__MAX];
    uint64_t invalid[BLOCK_ACCT__MAX];
    int64_t last_access_ns;     /* -1: never */
    uint64_t wr_highest_offset; /* a relaxed max: single writer, no read-modify-write */
    /* Histogram bounds: copied in while no writer runs, read-only after. */
    unsigned nbounds[BLOCK_ACCT__MAX];
    uint64_t bounds[BLOCK_ACCT__MAX][BLOCK_ACCT_HIST_MAX_BOUNDS];
    uint64_t bins[BLOCK_ACCT__MAX][BLOCK_ACCT_HIST_MAX_BOUNDS + 1];
} BlockAcctShard;

/* Zero @sh and take the histogram bounds of @layout. Context: no writer running */
void block_acct_shard_init(BlockAcctShard *sh, const BlockAcctStats *layout);
/* A completed request: @failed counts only as failed (as the block layer). */
/* Context: the shard's writer thread (hot path) */
void block_acct_shard_done(BlockAcctShard *sh, BlockAcctType t, uint64_t bytes, uint64_t lat_ns,
                           bool failed, int64_t now);
/*
 * A write or write-zeroes ending at byte @end completed (failed or not):
 * query-blockstats' wr_highest_offset. Context: the shard's writer thread (hot path)
 */
void block_acct_shard_write_end(BlockAcctShard *sh, uint64_t end);
/* A request refused as invalid before any I/O. Context: the shard's writer thread */
void block_acct_shard_invalid(BlockAcctShard *sh, BlockAcctType t, int64_t now);
/*
 * Add @sh into @st; *@last_access becomes the later of the two, and
 * wr_highest_offset the higher. Histogram
 * bins are added only where the bounds are the same as @st's.
 * Context: any thread
 */
void block_acct_shard_sum(const BlockAcctShard *sh, BlockAcctStats *st, int64_t *last_access);

#endif /* VBLK_BLOCK_ACCT_H */
