/*
 * Block nodes: the driver table, opening a node (and its children) from
 * options, options every node understands (node-name, read-only, discard,
 * cache.*, detect-zeroes), attaching to an event loop, deferred completion.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block-int.h"

static const BlockDriver *const drivers[] = {
    &bdrv_file, &bdrv_host_device, &bdrv_raw, &bdrv_null_co, &bdrv_null_aio, &bdrv_blkdebug,
    &bdrv_nbd, &bdrv_rbd,
};

/* What a child inherits from its parent unless its own options override it. */
typedef struct BdrvInherit {
    bool read_only;
    bool discard_unmap;
    bool direct;
    bool no_flush;
} BdrvInherit;

static unsigned node_counter;

/* Context: any thread */
const BlockDriver *bdrv_find_driver(const char *name)
{
    for (unsigned i = 0; i < G_N_ELEMENTS(drivers); i++) {
        if (!strcmp(drivers[i]->name, name)) {
            return drivers[i];
        }
    }
    return NULL;
}

/* QEMU's id_wellformed(): a letter, then letters, digits, '-', '.', '_'. */
static bool node_name_valid(const char *s)
{
    if (!g_ascii_isalpha(*s) || strlen(s) > 31) {
        return false;
    }
    for (; *s; s++) {
        if (!g_ascii_isalnum(*s) && !strchr("-._", *s)) {
            return false;
        }
    }
    return true;
}

static bool parse_discard(const char *v, bool *unmap)
{
    if (!strcmp(v, "ignore") || !strcmp(v, "off")) {
        *unmap = false;
    } else if (!strcmp(v, "unmap") || !strcmp(v, "on")) {
        *unmap = true;
    } else {
        return false;
    }
    return true;
}

/* Options every node understands. */
static bool node_common_opts(BlockNode *bs, BlockOpts *opts, const BdrvInherit *inh, GError **errp)
{
    const char *name = block_opts_get(opts, "node-name");
    const char *v;

    if (name && !node_name_valid(name)) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid node-name: '%s'", name);
        return false;
    }
    bs->node_name = name ? g_strdup(name) : g_strdup_printf("#block%u", node_counter++);
    if (!block_opts_get_bool(opts, "read-only", inh->read_only, &bs->read_only, errp) ||
        !block_opts_get_bool(opts, "cache.direct", inh->direct, &bs->direct, errp) ||
        !block_opts_get_bool(opts, "cache.no-flush", inh->no_flush, &bs->no_flush, errp)) {
        return false;
    }
    bs->discard_unmap = inh->discard_unmap;
    v = block_opts_get(opts, "discard");
    if (v && !parse_discard(v, &bs->discard_unmap)) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid discard option");
        return false;
    }
    v = block_opts_get(opts, "detect-zeroes");
    if (v && strcmp(v, "off") != 0) {
        g_set_error(errp, BLOCK_ERROR, ENOTSUP, "detect-zeroes=%s is not supported", v);
        return false;
    }
    (void)block_opts_get(opts, "auto-read-only");
    return true;
}

static void done_bh_cb(void *opaque)
{
    BlockNode *bs = opaque;
    BlockNodeReq *list = bs->done_head;

    bs->done_head = NULL;
    bs->done_tail = &bs->done_head;
    while (list) {
        BlockNodeReq *r = list;

        list = r->next;
        r->cb(r, r->ret);
    }
}

static BlockNode *bdrv_open_inherit(BlockOpts *opts, EventLoop *loop, const BdrvInherit *inh,
                                    GError **errp)
{
    const char *drvname = block_opts_get(opts, "driver");
    const BlockDriver *drv;
    BlockNode *bs;

    if (!drvname) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'driver' is missing");
        return NULL;
    }
    drv = bdrv_find_driver(drvname);
    if (!drv) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'driver' does not accept value '%s'",
                    drvname);
        return NULL;
    }
    bs = g_new0(BlockNode, 1);
    bs->drv = drv;
    bs->loop = loop;
    bs->request_alignment = 1;
    bs->min_mem_align = 1;
    bs->opt_mem_align = 4096;
    bs->done_tail = &bs->done_head;
    g_queue_init(&bs->tracked);
    g_queue_init(&bs->waiting);
    if (!node_common_opts(bs, opts, inh, errp) || !drv->open(bs, opts, errp)) {
        bs->drv = NULL; /* not opened: bdrv_close must not call drv->close */
        bdrv_close(bs);
        return NULL;
    }
    bs->drv = drv;
    if (!block_opts_check_unused(opts, errp)) {
        bdrv_close(bs);
        return NULL;
    }
    bs->done_bh = event_bh_new(loop, done_bh_cb, bs);
    if (drv->attach_loop) {
        drv->attach_loop(bs);
    }
    return bs;
}

/* Context: main loop */
BlockNode *bdrv_open(BlockOpts *opts, EventLoop *loop, bool read_only, GError **errp)
{
    BdrvInherit inh = {.read_only = read_only};

    return bdrv_open_inherit(opts, loop, &inh, errp);
}

/* Context: main loop */
BlockNode *bdrv_open_child(BlockNode *parent, BlockOpts *opts, const char *prefix,
                           const char *default_driver, GError **errp)
{
    BdrvInherit inh = {
        .read_only = parent->read_only,
        .discard_unmap = parent->discard_unmap,
        .direct = parent->direct,
        .no_flush = parent->no_flush,
    };
    BlockOpts *sub = block_opts_extract(opts, prefix);
    BlockNode *child;

    if (block_opts_get(opts, prefix)) {
        g_set_error(errp, BLOCK_ERROR, ENOTSUP,
                    "'%s' as a reference to another node is not supported; use %s.driver=...",
                    prefix, prefix);
        block_opts_free(sub);
        return NULL;
    }
    if (g_hash_table_size(sub->kv) == 0) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "A block device must be specified for \"%s\"",
                    prefix);
        block_opts_free(sub);
        return NULL;
    }
    if (!g_hash_table_contains(sub->kv, "driver") && default_driver) {
        block_opts_set(sub, "driver", default_driver);
    }
    child = bdrv_open_inherit(sub, parent->loop, &inh, errp);
    if (!child && errp && *errp) {
        g_prefix_error(errp, "%s: ", prefix);
    }
    block_opts_free(sub);
    return child;
}

/* Context: main loop; the node must be drained. NULL is ignored. */
void bdrv_close(BlockNode *bs)
{
    if (!bs) {
        return;
    }
    if (bs->drv) {
        if (bs->drv->detach_loop) {
            bs->drv->detach_loop(bs);
        }
        if (bs->drv->close) {
            bs->drv->close(bs);
        }
    }
    if (bs->done_bh) {
        event_bh_delete(bs->done_bh);
    }
    bdrv_close(bs->child);
    g_free(bs->node_name);
    g_free(bs);
}

/* Context: main loop; drained */
void bdrv_detach_loop(BlockNode *bs)
{
    for (; bs; bs = bs->child) {
        if (bs->drv->detach_loop) {
            bs->drv->detach_loop(bs);
        }
        event_bh_delete(bs->done_bh);
        bs->done_bh = NULL;
    }
}

/* Context: main loop; drained */
void bdrv_attach_loop(BlockNode *bs, EventLoop *loop)
{
    for (; bs; bs = bs->child) {
        bs->loop = loop;
        bs->done_bh = event_bh_new(loop, done_bh_cb, bs);
        if (bs->drv->attach_loop) {
            bs->drv->attach_loop(bs);
        }
    }
}

/* Context: loop thread */
int64_t bdrv_getlength(BlockNode *bs)
{
    return bs->drv->getlength(bs);
}

/* Context: loop thread */
void bdrv_complete_later(BlockNode *bs, BlockNodeReq *req, int ret)
{
    req->ret = ret;
    req->next = NULL;
    *bs->done_tail = req;
    bs->done_tail = &req->next;
    event_bh_schedule(bs->done_bh);
}

/* Context: main loop */
void bdrv_inherit_limits(BlockNode *bs)
{
    BlockNode *c = bs->child;

    bs->request_alignment = MAX(bs->request_alignment, c->request_alignment);
    bs->min_mem_align = MAX(bs->min_mem_align, c->min_mem_align);
    bs->opt_mem_align = MAX(bs->opt_mem_align, c->opt_mem_align);
    bs->direct = c->direct;
}

/* Context: loop thread */
void blk_node_get_stats(BlockNode *bs, BlockNodeStats *stats)
{
    *stats = bs->stats;
}

/* Context: loop thread */
const char *blk_node_get_name(BlockNode *bs)
{
    return bs->node_name;
}

/* Context: loop thread */
const char *blk_node_get_driver(BlockNode *bs)
{
    return bs->drv->name;
}

/* Context: loop thread */
BlockNode *blk_node_get_child(BlockNode *bs)
{
    return bs->child;
}
