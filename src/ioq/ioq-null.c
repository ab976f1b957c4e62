/*
 * The null engine: completes requests without I/O (reads optionally return
 * zeroes, like QEMU's null-co read-zeroes=on), so the dataplane's own cost can
 * be measured.  No eventfd and no syscall: ioq_submit() completes the batch.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <string.h>

#include "ioq-internal.h"

typedef struct NullEngine {
    IOQList queued;
    bool in_submit; /* a callback called ioq_submit(): the outer loop continues */
} NullEngine;

static bool null_init(IOQ *ioq, GError **errp)
{
    ioq->engine_state = g_new0(NullEngine, 1);
    return true;
}

static void null_cleanup(IOQ *ioq)
{
    g_free(ioq->engine_state);
}

static bool null_supports(IOQ *ioq, IOQOp op)
{
    return true;
}

static void null_queue(IOQ *ioq, IOQReq *req)
{
    NullEngine *e = ioq->engine_state;

    ioq_list_push(&e->queued, req);
}

static void null_complete_one(IOQ *ioq, IOQReq *req)
{
    if (req->op == IOQ_OP_READ && ioq->read_zeroes) {
        for (int i = 0; i < req->niov; i++) {
            memset(req->iov[i].iov_base, 0, req->iov[i].iov_len);
        }
    }
    ioq_complete(ioq, req, 0);
}

static void null_submit(IOQ *ioq)
{
    NullEngine *e = ioq->engine_state;

    if (e->in_submit) {
        return;
    }
    e->in_submit = true;
    /* Callbacks may enqueue more: keep going until nothing is queued. */
    while (e->queued.head) {
        IOQList batch = e->queued;
        IOQReq *req;

        e->queued = (IOQList){0};
        ioq_stat_add(&ioq->stats.submitted, batch.len);
        ioq_stat_add(&ioq->stats.batches, 1);
        while ((req = ioq_list_pop(&batch))) {
            null_complete_one(ioq, req);
        }
    }
    e->in_submit = false;
}

static unsigned null_reap(IOQ *ioq)
{
    return 0;
}

static bool null_ready(IOQ *ioq)
{
    return false; /* completions happen inside ioq_submit() */
}

const IOQEngine ioq_engine_null = {
    .name = "null",
    .init = null_init,
    .cleanup = null_cleanup,
    .supports = null_supports,
    .queue = null_queue,
    .submit = null_submit,
    .reap = null_reap,
    .ready = null_ready,
};
