/*
 * werror= / rerror=: what a failed request turns into. report completes it
 * with the error, ignore completes it as a success, stop parks it (sorted by
 * submission order) and tells the VMM through the error hook; enospc stops
 * on ENOSPC and reports anything else. blk_resume_parked() (on `cont`)
 * resubmits the parked requests one at a time, so they also complete in
 * their original order; one that fails with "stop" again stays parked with
 * every request behind it. While the device is reset or torn down
 * (blk_set_quiescing()), "stop" becomes "report", so a drain always ends.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "backend-int.h"
#include "util/thread-check.h"

static const char *const action_names[] = {
    [BLOCK_ERR_ACTION_REPORT] = "report",
    [BLOCK_ERR_ACTION_IGNORE] = "ignore",
    [BLOCK_ERR_ACTION_STOP] = "stop",
};

/* Context: any thread */
bool blk_error_policy_parse(const char *s, BlockErrorPolicy *out, GError **errp)
{
    static const char *const names[] = {"report", "ignore", "stop", "enospc"};

    for (unsigned i = 0; i < G_N_ELEMENTS(names); i++) {
        if (!strcmp(s, names[i])) {
            *out = (BlockErrorPolicy)i;
            return true;
        }
    }
    g_set_error(errp, BLOCK_ERROR, EINVAL, "'%s' invalid %s error action", s, "read/write");
    return false;
}

/* Context: loop thread */
void blk_set_error_policy(BlockBackend *blk, BlockErrorPolicy rerror, BlockErrorPolicy werror)
{
    THREAD_ASSERT_MAIN();
    blk->on_read_error = rerror;
    blk->on_write_error = werror;
}

/* Context: loop thread */
void blk_get_error_policy(BlockBackend *blk, BlockErrorPolicy *rerror, BlockErrorPolicy *werror)
{
    THREAD_ASSERT_MAIN();
    *rerror = blk->on_read_error;
    *werror = blk->on_write_error;
}

/* Context: loop thread */
void blk_set_error_hook(BlockBackend *blk, BlockErrorHook *hook, void *opaque)
{
    THREAD_ASSERT_MAIN();
    blk->err_hook = hook;
    blk->err_hook_opaque = opaque;
}

/* Context: loop thread */
unsigned blk_parked_count(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    return g_queue_get_length(&blk->parked);
}

static BlockErrorAction error_action(BlockErrorPolicy p, int error)
{
    switch (p) {
    case BLOCK_ERR_IGNORE:
        return BLOCK_ERR_ACTION_IGNORE;
    case BLOCK_ERR_STOP:
        return BLOCK_ERR_ACTION_STOP;
    case BLOCK_ERR_ENOSPC:
        return error == ENOSPC ? BLOCK_ERR_ACTION_STOP : BLOCK_ERR_ACTION_REPORT;
    default:
        return BLOCK_ERR_ACTION_REPORT;
    }
}

static gint by_seq(gconstpointer a, gconstpointer b, gpointer unused)
{
    uint64_t x = ((const BlkReq *)a)->seq, y = ((const BlkReq *)b)->seq;

    return x < y ? -1 : x > y;
}

static void emit_event(BlockBackend *blk, bool is_read, BlockErrorAction action, int error)
{
    BlockIOErrorEvent ev = {
        .device = blk->device,
        .node_name = blk->root->node_name,
        .operation = is_read ? "read" : "write",
        .action = action_names[action],
        .action_id = action,
        .nospace = error == ENOSPC,
        .reason = g_strerror(error),
        .error = error,
    };

    if (blk->err_hook) {
        blk->err_hook(blk->err_hook_opaque, blk, &ev);
    }
}

/* Context: loop thread */
void blk_emit_io_error(BlockBackend *blk, bool is_read, BlockErrorAction action, int error)
{
    THREAD_ASSERT_MAIN();
    emit_event(blk, is_read, action, error);
}

/* Context: loop thread */
bool blk_handle_error(BlkReq *req, int *ret)
{
    BlockBackend *blk = req->blk;
    int error = -*ret;
    BlockErrorPolicy p = req->op == BLOCK_OP_READ ? blk->on_read_error : blk->on_write_error;
    BlockErrorAction action = error_action(p, error);

    if (action == BLOCK_ERR_ACTION_STOP && blk->quiescing) {
        /* The device is being reset: nobody would resume a parked request. */
        action = BLOCK_ERR_ACTION_REPORT;
    }
    if (action == BLOCK_ERR_ACTION_STOP) {
        g_queue_insert_sorted(&blk->parked, req, by_seq, NULL);
        blk->in_flight--;
        if (req->resumed) {
            /* failed again: stop resubmitting, the VM stops again */
            blk->resuming = false;
            req->resumed = false;
        }
    } else if (action == BLOCK_ERR_ACTION_IGNORE) {
        *ret = 0;
    }
    emit_event(blk, req->op == BLOCK_OP_READ, action, error);
    return action == BLOCK_ERR_ACTION_STOP;
}

/* Context: loop thread */
void blk_resume_next(BlockBackend *blk)
{
    BlkReq *req;

    if (!blk->resuming) {
        return;
    }
    req = g_queue_pop_head(&blk->parked);
    if (!req) {
        blk->resuming = false;
        return;
    }
    req->resumed = true;
    blk->in_flight++;
    blk_dispatch(req);
}

/* Context: loop thread */
void blk_resume_parked(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    if (blk->resuming) {
        return; /* already going through the list */
    }
    blk->resuming = true;
    blk_resume_next(blk);
}

/* Context: loop thread */
void blk_cancel_parked(BlockBackend *blk)
{
    THREAD_ASSERT_MAIN();
    blk->resuming = false;
    while (!g_queue_is_empty(&blk->parked)) {
        BlkReq *req = g_queue_pop_head(&blk->parked);

        req->cb(req->opaque, -ECANCELED);
        g_free(req);
    }
}

/* Context: loop thread */
void blk_set_quiescing(BlockBackend *blk, bool on)
{
    THREAD_ASSERT_MAIN();
    blk->quiescing = on;
    if (on) {
        blk_cancel_parked(blk);
    }
}
