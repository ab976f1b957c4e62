/*
 * Per-drive accounting (query-blockstats): operations, bytes, total latency
 * and a latency histogram per type; failed and invalid counts; idle time.
 * A request is counted when it completes; a request parked by werror=stop
 * is not counted until it finally completes after resume.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "backend-int.h"
#include "util/thread-check.h"

/* Default histogram bounds: 10us, 100us, 1ms, 10ms, 100ms, 1s. */
static const uint64_t default_bounds[] = {
    10000, 100000, 1000000, 10000000, 100000000, 1000000000,
};

/* Context: main loop */
void blk_acct_init(BlockBackend *blk)
{
    memset(&blk->stats, 0, sizeof(blk->stats));
    blk->stats.account_invalid = true;
    blk->stats.account_failed = true;
    blk->last_access_ns = -1;
    for (int t = 0; t < BLOCK_ACCT__MAX; t++) {
        BlockAcctHistogram *h = &blk->stats.hist[t];

        h->nbounds = G_N_ELEMENTS(default_bounds);
        memcpy(h->bounds, default_bounds, sizeof(default_bounds));
    }
}

/* Context: any thread */
BlockAcctType blk_acct_type(BlockOp op)
{
    switch (op) {
    case BLOCK_OP_READ:
        return BLOCK_ACCT_READ;
    case BLOCK_OP_FLUSH:
        return BLOCK_ACCT_FLUSH;
    case BLOCK_OP_DISCARD:
        return BLOCK_ACCT_UNMAP;
    default:
        return BLOCK_ACCT_WRITE;
    }
}

static void hist_add(BlockAcctHistogram *h, uint64_t ns)
{
    unsigned i = 0;

    while (i < h->nbounds && ns >= h->bounds[i]) {
        i++;
    }
    h->bins[i]++;
}

/* Context: loop thread */
void blk_acct_done(BlockBackend *blk, BlkReq *req, bool failed)
{
    BlockAcctStats *s = &blk->stats;
    int64_t now = event_clock_ns();
    uint64_t lat = (uint64_t)MAX(now - req->start_ns, 0);
    BlockAcctType t = blk_acct_type(req->op);
    uint64_t *ops[] = {&s->rd_operations, &s->wr_operations, &s->flush_operations,
                       &s->unmap_operations};
    uint64_t *fails[] = {&s->failed_rd_operations, &s->failed_wr_operations,
                         &s->failed_flush_operations, &s->failed_unmap_operations};
    uint64_t *bytes[] = {&s->rd_bytes, &s->wr_bytes, NULL, &s->unmap_bytes};
    uint64_t *times[] = {&s->rd_total_time_ns, &s->wr_total_time_ns, &s->flush_total_time_ns,
                         &s->unmap_total_time_ns};

    blk->last_access_ns = now;
    if (req->op == BLOCK_OP_WRITE || req->op == BLOCK_OP_WRITE_ZEROES) {
        s->wr_highest_offset = MAX(s->wr_highest_offset, req->offset + req->bytes);
    }
    if (failed) {
        (*fails[t])++;
        return;
    }
    (*ops[t])++;
    if (bytes[t]) {
        *bytes[t] += req->bytes;
    }
    *times[t] += lat;
    hist_add(&s->hist[t], lat);
}

/* Context: loop thread */
void blk_acct_invalid(BlockBackend *blk, BlockOp op)
{
    BlockAcctStats *s = &blk->stats;
    uint64_t *inv[] = {&s->invalid_rd_operations, &s->invalid_wr_operations,
                       &s->invalid_flush_operations, &s->invalid_unmap_operations};

    (*inv[blk_acct_type(op)])++;
    blk->last_access_ns = event_clock_ns();
}

/* Context: loop thread */
void blk_account_invalid(BlockBackend *blk, BlockAcctType type)
{
    THREAD_ASSERT_MAIN();
    uint64_t *inv[] = {&blk->stats.invalid_rd_operations, &blk->stats.invalid_wr_operations,
                       &blk->stats.invalid_flush_operations, &blk->stats.invalid_unmap_operations};

    if (type < BLOCK_ACCT__MAX) {
        (*inv[type])++;
        blk->last_access_ns = event_clock_ns();
    }
}

/* Context: loop thread */
void blk_get_stats(BlockBackend *blk, BlockAcctStats *stats)
{
    int64_t last = blk->last_access_ns;

    *stats = blk->stats;
    for (unsigned i = 0; i < blk->nshards; i++) {
        block_acct_shard_sum(&blk->shards[i], stats, &last);
    }
    stats->idle_time_ns = last < 0 ? -1 : MAX(event_clock_ns() - last, 0);
}

/* Context: loop thread; the shards' writer is not running */
void blk_acct_attach_shards(BlockBackend *blk, BlockAcctShard *shards, unsigned n)
{
    THREAD_ASSERT_MAIN();
    blk_acct_detach_shards(blk);
    for (unsigned i = 0; i < n; i++) {
        block_acct_shard_init(&shards[i], &blk->stats);
    }
    blk->shards = shards;
    blk->nshards = n;
}

/* Context: loop thread; the shards' writer is not running */
void blk_acct_detach_shards(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    /* Fold them in: the totals of query-blockstats never go backwards. */
    for (unsigned i = 0; i < blk->nshards; i++) {
        block_acct_shard_sum(&blk->shards[i], &blk->stats, &blk->last_access_ns);
    }
    blk->shards = NULL;
    blk->nshards = 0;
}

/* Context: loop thread */
bool blk_set_latency_histogram(BlockBackend *blk, BlockAcctType type, const uint64_t *bounds,
                               unsigned n, GError **errp)
{
    THREAD_ASSERT_MAIN();
    BlockAcctHistogram *h;

    if (type >= BLOCK_ACCT__MAX || n > BLOCK_ACCT_HIST_MAX_BOUNDS) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Too many histogram boundaries (max %d)",
                    BLOCK_ACCT_HIST_MAX_BOUNDS);
        return false;
    }
    for (unsigned i = 0; i < n; i++) {
        if (bounds[i] == 0 || (i && bounds[i] <= bounds[i - 1])) {
            g_set_error(errp, BLOCK_ERROR, EINVAL,
                        "Histogram boundaries must be positive and strictly ascending");
            return false;
        }
    }
    h = &blk->stats.hist[type];
    memset(h, 0, sizeof(*h));
    if (!bounds || !n) {
        h->nbounds = G_N_ELEMENTS(default_bounds);
        memcpy(h->bounds, default_bounds, sizeof(default_bounds));
        return true;
    }
    h->nbounds = n;
    memcpy(h->bounds, bounds, n * sizeof(*bounds));
    return true;
}
