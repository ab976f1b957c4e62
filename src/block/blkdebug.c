/*
 * "blkdebug": an error-injection filter over its "image" child. Rules fail
 * chosen requests (by operation, by ordinal among the matching requests, by
 * offset range) with a chosen errno, once or always; tests add and clear
 * rules at runtime with blkdebug_add_rule(). `align` raises the node's
 * request alignment, which makes the generic layer pad/RMW even on buffered
 * files (as QEMU's blkdebug align= does).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "block-int.h"
#include "util/thread-check.h"

typedef struct BlkdebugRuleState {
    BlkdebugRule rule;
    uint64_t seen; /* matching requests so far */
} BlkdebugRuleState;

typedef struct BlkdebugState {
    GPtrArray *rules; /* BlkdebugRuleState*, owned */
    uint64_t fired;
} BlkdebugState;

typedef struct BlkdebugReq {
    BlockNodeReq child_req;
    BlockNodeReq *parent;
} BlkdebugReq;

static const struct {
    const char *name;
    int op;
} events[] = {
    {"read_aio", BLOCK_OP_READ},
    {"write_aio", BLOCK_OP_WRITE},
    {"flush_to_disk", BLOCK_OP_FLUSH},
    {"discard", BLOCK_OP_DISCARD},
    {"write_zeroes", BLOCK_OP_WRITE_ZEROES},
    {"any", -1},
};

static bool parse_rule(BlockOpts *opts, unsigned idx, BlkdebugRule *r, GError **errp)
{
    g_autofree char *prefix = g_strdup_printf("inject-error.%u", idx);
    BlockOpts *sub = block_opts_extract(opts, prefix);
    const char *ev = block_opts_get(sub, "event");
    uint64_t err = EIO, sector = UINT64_MAX;
    bool ok = false;

    memset(r, 0, sizeof(*r));
    r->op = -1;
    if (!ev) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter '%s.event' is missing", prefix);
        goto out;
    }
    for (unsigned i = 0; i < G_N_ELEMENTS(events); i++) {
        if (!strcmp(ev, events[i].name)) {
            r->op = events[i].op;
            ok = true;
        }
    }
    if (!ok) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid parameter '%s.event'", prefix);
        goto out;
    }
    ok = block_opts_get_size(sub, "errno", EIO, &err, errp) &&
         block_opts_get_bool(sub, "once", false, &r->once, errp) &&
         block_opts_get_size(sub, "sector", UINT64_MAX, &sector, errp) &&
         block_opts_get_size(sub, "x-nth", 0, &r->nth, errp) &&
         block_opts_get_bool(sub, "immediately", false, &(bool){0}, errp) &&
         block_opts_check_unused(sub, errp);
    if (ok && (err == 0 || err > 4095)) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid errno %" PRIu64, err);
        ok = false;
    }
    if (ok && sector != UINT64_MAX) {
        if (sector > (UINT64_MAX >> 9) - 1) {
            g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid sector %" PRIu64, sector);
            ok = false;
        }
        r->offset = sector << 9;
        r->length = 512;
    }
    r->error = (int)err;
out:
    block_opts_free(sub);
    return ok;
}

static bool blkdebug_open(BlockNode *bs, BlockOpts *opts, GError **errp)
{
    BlkdebugState *s = g_new0(BlkdebugState, 1);
    uint64_t align;

    s->rules = g_ptr_array_new_with_free_func(g_free);
    bs->opaque = s;
    if (!block_opts_get_size(opts, "align", 1, &align, errp)) {
        goto fail;
    }
    if (!align || align > (1u << 30) || (align & (align - 1))) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Cannot meet constraints with align %" PRIu64,
                    align);
        goto fail;
    }
    for (unsigned i = 0;; i++) {
        g_autofree char *key = g_strdup_printf("inject-error.%u.event", i);
        BlkdebugRule r;

        if (!g_hash_table_contains(opts->kv, key)) {
            break;
        }
        if (!parse_rule(opts, i, &r, errp) || !blkdebug_add_rule(bs, &r, errp)) {
            goto fail;
        }
    }
    bs->child = bdrv_open_child(bs, opts, "image", NULL, errp);
    if (!bs->child) {
        goto fail;
    }
    bdrv_inherit_limits(bs);
    bs->request_alignment = MAX(bs->request_alignment, (uint32_t)align);
    return true;

fail:
    g_ptr_array_free(s->rules, TRUE);
    g_free(s);
    bs->opaque = NULL;
    return false;
}

static void blkdebug_close(BlockNode *bs)
{
    BlkdebugState *s = bs->opaque;

    if (s) {
        g_ptr_array_free(s->rules, TRUE);
        g_free(s);
        bs->opaque = NULL;
    }
}

static bool rule_matches(const BlkdebugRule *r, const BlockNodeReq *req)
{
    if (r->op >= 0 && r->op != (int)req->op) {
        return false;
    }
    if (r->length && req->op != BLOCK_OP_FLUSH) {
        return req->offset < r->offset + r->length && r->offset < req->offset + req->bytes;
    }
    return true;
}

/* The errno to fail @req with, or 0. Every matching rule counts the request. */
static int blkdebug_check(BlkdebugState *s, const BlockNodeReq *req)
{
    int fire = -1;
    int err;

    for (unsigned i = 0; i < s->rules->len; i++) {
        BlkdebugRuleState *rs = g_ptr_array_index(s->rules, i);

        if (!rule_matches(&rs->rule, req)) {
            continue;
        }
        rs->seen++;
        if (fire < 0 && (!rs->rule.nth || rs->seen == rs->rule.nth)) {
            fire = (int)i;
        }
    }
    if (fire < 0) {
        return 0;
    }
    err = ((BlkdebugRuleState *)g_ptr_array_index(s->rules, fire))->rule.error;
    if (((BlkdebugRuleState *)g_ptr_array_index(s->rules, fire))->rule.once) {
        g_ptr_array_remove_index(s->rules, (guint)fire);
    }
    s->fired++;
    return err;
}

static void blkdebug_child_done(BlockNodeReq *r, int ret)
{
    BlkdebugReq *br = container_of(r, BlkdebugReq, child_req);
    BlockNodeReq *parent = br->parent;

    g_free(br);
    parent->cb(parent, ret);
}

static void blkdebug_submit(BlockNode *bs, BlockNodeReq *req)
{
    BlkdebugState *s = bs->opaque;
    int err = blkdebug_check(s, req);
    BlkdebugReq *br;

    if (err) {
        bdrv_complete_later(bs, req, -err);
        return;
    }
    br = g_new0(BlkdebugReq, 1);
    br->parent = req;
    br->child_req = *req;
    br->child_req.cb = blkdebug_child_done;
    bdrv_submit(bs->child, &br->child_req);
}

static int64_t blkdebug_getlength(BlockNode *bs)
{
    return bdrv_getlength(bs->child);
}

static bool blkdebug_truncate(BlockNode *bs, uint64_t size, GError **errp)
{
    return bs->child->drv->truncate(bs->child, size, errp);
}

/* Context: loop thread */
bool blkdebug_add_rule(BlockNode *bs, const BlkdebugRule *rule, GError **errp)
{
    THREAD_ASSERT_MAIN();
    BlkdebugRuleState *rs;

    if (bs->drv != &bdrv_blkdebug) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Node '%s' is not a blkdebug node", bs->node_name);
        return false;
    }
    if (rule->error <= 0 || (rule->op >= BLOCK_OP__MAX) || rule->op < -1) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid blkdebug rule");
        return false;
    }
    rs = g_new0(BlkdebugRuleState, 1);
    rs->rule = *rule;
    g_ptr_array_add(((BlkdebugState *)bs->opaque)->rules, rs);
    return true;
}

/* Context: loop thread */
void blkdebug_clear_rules(BlockNode *bs)
{
    THREAD_ASSERT_MAIN();
    if (bs->drv == &bdrv_blkdebug) {
        g_ptr_array_set_size(((BlkdebugState *)bs->opaque)->rules, 0);
    }
}

/* Context: loop thread */
uint64_t blkdebug_fired(BlockNode *bs)
{
    return bs->drv == &bdrv_blkdebug ? ((BlkdebugState *)bs->opaque)->fired : 0;
}

const BlockDriver bdrv_blkdebug = {
    .name = "blkdebug",
    .open = blkdebug_open,
    .close = blkdebug_close,
    .submit = blkdebug_submit,
    .getlength = blkdebug_getlength,
    .truncate = blkdebug_truncate,
};
