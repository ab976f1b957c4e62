/*
 * Accounting shards: query-blockstats counters kept by a request path that
 * does not run in the block layer's thread (the dataplane). One writer per
 * shard, relaxed atomics, summed by readers; see include/util/block-acct.h.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <string.h>

#include "util/block-acct.h"

/*
 * Single writer: a relaxed load and a relaxed store (no read-modify-write
 * instruction needed). Readers use relaxed loads: each counter is read
 * untorn, no ordering between counters is promised, so no barrier pairs here.
 */
static inline void shard_add(uint64_t *p, uint64_t v)
{
    __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

static inline uint64_t shard_get(const uint64_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

/* Context: no writer running */
void block_acct_shard_init(BlockAcctShard *sh, const BlockAcctStats *layout)
{
    memset(sh, 0, sizeof(*sh));
    sh->last_access_ns = -1;
    for (int t = 0; t < BLOCK_ACCT__MAX; t++) {
        const BlockAcctHistogram *h = &layout->hist[t];

        sh->nbounds[t] = h->nbounds;
        memcpy(sh->bounds[t], h->bounds, sizeof(sh->bounds[t]));
    }
}

/* Context: the shard's writer thread (hot path) */
void block_acct_shard_done(BlockAcctShard *sh, BlockAcctType t, uint64_t bytes, uint64_t lat_ns,
                           bool failed, int64_t now)
{
    unsigned i = 0;

    __atomic_store_n(&sh->last_access_ns, now, __ATOMIC_RELAXED);
    if (failed) {
        shard_add(&sh->failed[t], 1);
        return;
    }
    shard_add(&sh->ops[t], 1);
    if (t != BLOCK_ACCT_FLUSH) {
        shard_add(&sh->bytes[t], bytes);
    }
    shard_add(&sh->time_ns[t], lat_ns);
    while (i < sh->nbounds[t] && lat_ns >= sh->bounds[t][i]) {
        i++;
    }
    shard_add(&sh->bins[t][i], 1);
}

/* Context: the shard's writer thread (hot path) */
void block_acct_shard_write_end(BlockAcctShard *sh, uint64_t end)
{
    if (end > __atomic_load_n(&sh->wr_highest_offset, __ATOMIC_RELAXED)) {
        __atomic_store_n(&sh->wr_highest_offset, end, __ATOMIC_RELAXED);
    }
}

/* Context: the shard's writer thread */
void block_acct_shard_invalid(BlockAcctShard *sh, BlockAcctType t, int64_t now)
{
    __atomic_store_n(&sh->last_access_ns, now, __ATOMIC_RELAXED);
    shard_add(&sh->invalid[t], 1);
}

/* Context: any thread */
void block_acct_shard_sum(const BlockAcctShard *sh, BlockAcctStats *st, int64_t *last_access)
{
    uint64_t *ops[] = {&st->rd_operations, &st->wr_operations, &st->flush_operations,
                       &st->unmap_operations};
    uint64_t *bytes[] = {&st->rd_bytes, &st->wr_bytes, NULL, &st->unmap_bytes};
    uint64_t *times[] = {&st->rd_total_time_ns, &st->wr_total_time_ns, &st->flush_total_time_ns,
                         &st->unmap_total_time_ns};
    uint64_t *fails[] = {&st->failed_rd_operations, &st->failed_wr_operations,
                         &st->failed_flush_operations, &st->failed_unmap_operations};
    uint64_t *inv[] = {&st->invalid_rd_operations, &st->invalid_wr_operations,
                       &st->invalid_flush_operations, &st->invalid_unmap_operations};
    int64_t la = __atomic_load_n(&sh->last_access_ns, __ATOMIC_RELAXED);
    uint64_t wr_end = shard_get(&sh->wr_highest_offset);

    for (int t = 0; t < BLOCK_ACCT__MAX; t++) {
        BlockAcctHistogram *h = &st->hist[t];

        *ops[t] += shard_get(&sh->ops[t]);
        if (bytes[t]) {
            *bytes[t] += shard_get(&sh->bytes[t]);
        }
        *times[t] += shard_get(&sh->time_ns[t]);
        *fails[t] += shard_get(&sh->failed[t]);
        *inv[t] += shard_get(&sh->invalid[t]);
        if (h->nbounds != sh->nbounds[t] ||
            memcmp(h->bounds, sh->bounds[t], h->nbounds * sizeof(uint64_t)) != 0) {
            continue; /* x-block-latency-histogram changed since: the old bins do not fit */
        }
        for (unsigned i = 0; i <= h->nbounds; i++) {
            h->bins[i] += shard_get(&sh->bins[t][i]);
        }
    }
    if (la > *last_access) {
        *last_access = la;
    }
    if (wr_end > st->wr_highest_offset) {
        st->wr_highest_offset = wr_end;
    }
}
