/*
 * Block layer internals: nodes, drivers and the node-level request.
 *
 * A node request (BlockNodeReq) is owned by its submitter and handed to
 * bdrv_submit(), which applies the node's generic rules (discard policy,
 * request/memory alignment with bounce buffers and read-modify-write,
 * serialisation of overlapping RMW) and then calls the driver's submit.
 * Drivers never complete a request from inside submit: they use
 * bdrv_complete_later() for immediate results, so every completion runs
 * from a loop callback.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_BLOCK_INT_H
#define VBLK_BLOCK_INT_H

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <string.h>

#include "block/block.h"
#include "util/iov.h"

#ifndef container_of
#define container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))
#endif

typedef struct BlockNodeReq BlockNodeReq;
typedef void BlockNodeCompleteFunc(BlockNodeReq *req, int ret);

struct BlockNodeReq {
    BlockOp op;
    uint64_t offset;
    uint64_t bytes;
    struct iovec *iov;
    int niov;
    unsigned flags; /* BLK_REQ_* */
    BlockNodeCompleteFunc *cb;
    void *opaque;

    /* used by bdrv_complete_later() and by drivers for their queues */
    BlockNodeReq *next;
    int ret;
};

/* Options of one node: keys relative to the node ("filename", "file.driver"). */
typedef struct BlockOpts {
    GHashTable *kv;   /* char* -> char*, owned */
    GHashTable *used; /* keys consumed, for "Invalid parameter" checks */
} BlockOpts;

typedef struct BlockDriver {
    const char *name;
    /* Parse options, open; on success bs->opaque and limits are set. */
    bool (*open)(BlockNode *bs, BlockOpts *opts, GError **errp);
    void (*close)(BlockNode *bs);
    void (*submit)(BlockNode *bs, BlockNodeReq *req);
    int64_t (*getlength)(BlockNode *bs);
    bool (*truncate)(BlockNode *bs, uint64_t size, GError **errp);
    /* Register / unregister fd handlers, BHs... in bs->loop (optional). */
    void (*attach_loop)(BlockNode *bs);
    void (*detach_loop)(BlockNode *bs);
    /* Requests still inside the driver, for drain (optional). */
    unsigned (*inflight)(BlockNode *bs);
} BlockDriver;

struct BlockNode {
    const BlockDriver *drv;
    char *node_name;
    BlockNode *child; /* raw and blkdebug have one child */
    EventLoop *loop;
    void *opaque; /* driver state */
    bool read_only;
    bool discard_unmap;         /* discard=unmap: pass discards down; else ignore them */
    bool no_flush;              /* cache.no-flush: flushes succeed without I/O */
    bool direct;                /* O_DIRECT somewhere below (informational) */
    uint32_t request_alignment; /* bytes, power of two; 1 = byte granular */
    uint32_t min_mem_align;     /* checks: iov bases must be aligned to this */
    uint32_t opt_mem_align;     /* bounce buffer allocation alignment */
    unsigned inflight;          /* bdrv_submit'ted, not completed */
    BlockNodeStats stats;
    GQueue tracked; /* BdrvTracked: in-flight data requests (for serialisation) */
    GQueue waiting; /* BdrvTracked waiting for an overlapping serialising one */
    EventBH *done_bh;
    BlockNodeReq *done_head, **done_tail;
};

extern const BlockDriver bdrv_file;
extern const BlockDriver bdrv_host_device;
extern const BlockDriver bdrv_raw;
extern const BlockDriver bdrv_null_co;
extern const BlockDriver bdrv_null_aio;
extern const BlockDriver bdrv_blkdebug;
extern const BlockDriver bdrv_nbd;
extern const BlockDriver bdrv_rbd;

/* ---- node.c ---- */

/* Context (all): loop thread / main loop. */
const BlockDriver *bdrv_find_driver(const char *name);
/* Open a node from @opts (must contain "driver"), recursively for children. */
BlockNode *bdrv_open(BlockOpts *opts, EventLoop *loop, bool read_only, GError **errp);
/* Open a child from the "@prefix." keys of @opts (e.g. "file", "image"). */
BlockNode *bdrv_open_child(BlockNode *parent, BlockOpts *opts, const char *prefix,
                           const char *default_driver, GError **errp);
void bdrv_close(BlockNode *bs);
void bdrv_attach_loop(BlockNode *bs, EventLoop *loop);
void bdrv_detach_loop(BlockNode *bs);
int64_t bdrv_getlength(BlockNode *bs);
bool bdrv_drained(BlockNode *bs);
/* Complete @req with @ret from a bottom half of bs's loop. */
void bdrv_complete_later(BlockNode *bs, BlockNodeReq *req, int ret);
/* The host file name of a file/host_device node, else NULL. */
const char *blk_file_node_filename(BlockNode *bs);
/* Fill @info's leaf fields when @bs is a file/host_device (file-posix.c) or null node (null.c). */
bool blk_file_node_host_info(BlockNode *bs, BlockHostInfo *info);
bool blk_null_node_host_info(BlockNode *bs, BlockHostInfo *info);
/* An nbd node (nbd.c): its URI (QEMU's filename), and the server for the dataplane's connection. */
const char *blk_nbd_node_filename(BlockNode *bs);
bool blk_nbd_node_host_info(BlockNode *bs, BlockHostInfo *info);
/*
 * An rbd node (rbd.c): its json: filename (@under_raw: the one QEMU prints
 * for a raw node over it), and the image for the dataplane's handle.
 */
const char *blk_rbd_node_filename(BlockNode *bs, bool under_raw);
bool blk_rbd_node_host_info(BlockNode *bs, BlockHostInfo *info);
/* Whether a raw node maps offsets 1:1 onto its child (no offset/size window). */
bool blk_raw_node_is_identity(BlockNode *bs);
/* Inherit alignment limits from the child (filters and formats). */
void bdrv_inherit_limits(BlockNode *bs);

/* ---- io.c ---- */

/* Submit @req to @bs; @req->cb runs exactly once, later. */
void bdrv_submit(BlockNode *bs, BlockNodeReq *req);
/* Whether every iovec is aligned for @bs (base to min_mem_align, length to request_alignment). */
bool bdrv_iov_aligned(BlockNode *bs, const struct iovec *iov, int niov);
/* Aligned allocation for bounce buffers; free with free(). NULL on ENOMEM. */
void *bdrv_blockalign(BlockNode *bs, size_t size);

/* ---- opts.c ---- */

BlockOpts *block_opts_new(void);
void block_opts_free(BlockOpts *o);
void block_opts_set(BlockOpts *o, const char *key, const char *value);
/* Lookup marks the key used. */
const char *block_opts_get(BlockOpts *o, const char *key);
bool block_opts_get_bool(BlockOpts *o, const char *key, bool def, bool *out, GError **errp);
bool block_opts_get_size(BlockOpts *o, const char *key, uint64_t def, uint64_t *out, GError **errp);
/* The sub-options under "@prefix." (keys without the prefix); marks them used. */
BlockOpts *block_opts_extract(BlockOpts *o, const char *prefix);
/* Error on the first key never looked up. */
bool block_opts_check_unused(BlockOpts *o, GError **errp);
bool block_parse_bool(const char *s, bool *out);
bool block_parse_size(const char *s, uint64_t *out);

#endif /* VBLK_BLOCK_INT_H */
