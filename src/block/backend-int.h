/*
 * BlockBackend internals shared by backend.c (I/O, drain, properties),
 * blk-error.c (werror/rerror, parking), blk-throttle.c and acct.c.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_BLOCK_BACKEND_INT_H
#define VBLK_BLOCK_BACKEND_INT_H

#include "block-int.h"

typedef struct BlkReq {
    BlockBackend *blk;
    BlockNodeReq nreq;
    BlockOp op;
    uint64_t offset;
    uint64_t bytes;
    struct iovec *iov;
    int niov;
    unsigned flags;
    BlockCompletionFunc *cb;
    void *opaque;
    uint64_t seq;     /* submission order, for parking */
    int64_t start_ns; /* accounting */
    bool invalid;     /* refused before reaching the graph */
    bool resumed;     /* resubmitted by blk_resume_parked() */
} BlkReq;

struct BlockBackend {
    BlockNode *root;
    EventLoop *loop;
    char *device;
    bool wce;
    unsigned in_flight;
    uint64_t next_seq;

    BlockErrorPolicy on_read_error, on_write_error;
    BlockErrorHook *err_hook;
    void *err_hook_opaque;
    GQueue parked; /* BlkReq*, sorted by seq */
    bool resuming;
    bool quiescing; /* device reset/teardown: "stop" becomes "report" */

    BlockAcctStats stats;
    int64_t last_access_ns; /* -1: never */

    ThrottleState ts;
    bool throttling;
    BlockAcctShard *shards; /* another path's counters (the dataplane's), summed by get_stats */
    unsigned nshards;
    GQueue tq[2]; /* throttled BlkReq*: [0] reads, [1] writes */
    EventTimer *ttimer[2];
};

/* backend.c: a backend over @root (owned from now on). Context: main loop */
BlockBackend *blk_new_with_root(BlockNode *root, EventLoop *loop, bool wce);
/* backend.c: send @req into the graph (after throttling). Context: loop thread */
void blk_dispatch(BlkReq *req);

/* blk-error.c: a failed request; true if it was parked (not completed). */
bool blk_handle_error(BlkReq *req, int *ret);
/* blk-error.c: a resumed request finished; continue with the next parked one. */
void blk_resume_next(BlockBackend *blk);

/* acct.c */
void blk_acct_init(BlockBackend *blk);
BlockAcctType blk_acct_type(BlockOp op);
void blk_acct_done(BlockBackend *blk, BlkReq *req, bool failed);
void blk_acct_invalid(BlockBackend *blk, BlockOp op);

/* blk-throttle.c */
void blk_throttle_init(BlockBackend *blk);
void blk_throttle_cleanup(BlockBackend *blk);
/* true: dispatch now (accounted); false: queued, dispatched by a timer. */
bool blk_throttle_intercept(BlkReq *req);
/* Release every queued request now (drain). */
void blk_throttle_release_all(BlockBackend *blk);
void blk_throttle_attach(BlockBackend *blk);
void blk_throttle_detach(BlockBackend *blk);

#endif /* VBLK_BLOCK_BACKEND_INT_H */
