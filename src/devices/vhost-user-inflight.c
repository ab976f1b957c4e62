/*
 * vhost-user inflight I/O tracking for split rings (INFLIGHT_SHMFD): the
 * per-ring bookkeeping in the region the front end keeps across back-end
 * restarts (see vhost-user-int.h for the layout and docs/vhost-user.md).
 *
 * While a ring runs:
 *   pop          counter, then inflight = 1 (before the request is used);
 *   un-pop       inflight = 0 (the chain is back in the avail ring);
 *   push         the head joins the batch (desc.next links the batch);
 *   flush        last_batch_head = the batch's last head, then the device
 *                stores used->idx, then every head of the batch gets
 *                inflight = 0, then used_idx = used->idx.
 * A kill at any point leaves either used_idx == used->idx (the batch is
 * still marked: resubmitted, the guest never saw it) or used_idx !=
 * used->idx (the guest saw the batch: recovery clears it by walking
 * used->idx - used_idx heads from last_batch_head).
 *
 * The region is the front end's memory: it can change any byte at any time.
 * A hostile front end can only get its own requests repeated or dropped;
 * every index read from the region is bounded before it is used, and the
 * hot path never reads it.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <stdlib.h>
#include <string.h>

#include "util/barrier.h"
#include "vhost-user-int.h"

struct VhostUserInflightTracker {
    VhostUserInflightQueue *q;
    unsigned num;     /* ring size: heads are < num */
    uint64_t counter; /* next pop's counter */
    unsigned batch_len;
    uint16_t *batch; /* heads pushed since the last flush (room for num) */
};

typedef struct {
    uint64_t counter;
    uint16_t head;
} InflightHead;

static int inflight_head_cmp(const void *a, const void *b)
{
    const InflightHead *x = a, *y = b;

    if (x->counter != y->counter) {
        return x->counter < y->counter ? -1 : 1;
    }
    return x->head < y->head ? -1 : x->head > y->head;
}

/* Context: control thread, the ring not served */
VhostUserInflightTracker *vhost_user_inflight_tracker_new(VhostUserInflightQueue *q,
                                                          unsigned desc_num, unsigned num,
                                                          uint16_t guest_used_idx, uint16_t *heads,
                                                          unsigned *n)
{
    VhostUserInflightTracker *t;
    g_autofree InflightHead *found = NULL;
    uint16_t region_used = qatomic_read(&q->used_idx);
    uint64_t max_counter = 0;
    unsigned nfound = 0;

    g_assert(num >= 1 && num <= desc_num);
    /*
     * Killed between publishing a batch and clearing it: the guest saw those
     * used elements, so they are done. A batch is at most @num heads; a
     * larger distance is not a torn flush (a fresh or foreign region) and
     * clears nothing.
     */
    if (region_used != guest_used_idx) {
        unsigned d = (uint16_t)(guest_used_idx - region_used);
        uint16_t h = qatomic_read(&q->last_batch_head);

        for (unsigned i = 0; d <= num && i < d && h < num; i++) {
            qatomic_set(&q->desc[h].inflight, 0);
            h = qatomic_read(&q->desc[h].next);
        }
    }
    found = g_new(InflightHead, num);
    for (unsigned i = 0; i < desc_num; i++) {
        uint8_t f = qatomic_read(&q->desc[i].inflight);

        if (!f) {
            continue;
        }
        if (i >= num) {
            /* The ring shrank since: nothing there can be in flight. */
            qatomic_set(&q->desc[i].inflight, 0);
            continue;
        }
        found[nfound].head = (uint16_t)i;
        found[nfound].counter = qatomic_read(&q->desc[i].counter);
        max_counter = MAX(max_counter, found[nfound].counter);
        nfound++;
    }
    qsort(found, nfound, sizeof(found[0]), inflight_head_cmp);
    for (unsigned i = 0; i < nfound; i++) {
        heads[i] = found[i].head;
        qatomic_set(&q->desc[found[i].head].inflight, 1); /* normalize */
    }
    *n = nfound;
    qatomic_set(&q->version, VHOST_USER_INFLIGHT_VERSION);
    qatomic_set(&q->desc_num, (uint16_t)desc_num);
    qatomic_set(&q->used_idx, guest_used_idx);
    smp_wmb();

    t = g_new0(VhostUserInflightTracker, 1);
    t->q = q;
    t->num = num;
    t->counter = max_counter + 1;
    t->batch = g_new0(uint16_t, num);
    return t;
}

/* Context: control thread */
void vhost_user_inflight_tracker_free(VhostUserInflightTracker *t)
{
    if (t) {
        g_free(t->batch);
        g_free(t);
    }
}

/* The virtqueue checked head < num for all hooks. Context: owner thread (hot path) */
static void tr_popped(void *opaque, uint16_t head)
{
    VhostUserInflightTracker *t = opaque;

    qatomic_set(&t->q->desc[head].counter, t->counter++);
    /* The counter is in place before the flag that makes it count. */
    smp_wmb();
    qatomic_set(&t->q->desc[head].inflight, 1);
}

static void tr_unpopped(void *opaque, uint16_t head)
{
    VhostUserInflightTracker *t = opaque;

    qatomic_set(&t->q->desc[head].inflight, 0);
}

static void tr_pushed(void *opaque, uint16_t head)
{
    VhostUserInflightTracker *t = opaque;

    if (t->batch_len < t->num) { /* always: a head is pushed once per flush at most */
        qatomic_set(&t->q->desc[head].next, t->batch_len ? t->batch[t->batch_len - 1]
                                                         : qatomic_read(&t->q->last_batch_head));
        t->batch[t->batch_len++] = head;
    }
}

static void tr_flush_begin(void *opaque)
{
    VhostUserInflightTracker *t = opaque;

    if (t->batch_len) {
        /* The chain (desc.next) is complete before its head is recorded. */
        smp_wmb();
        qatomic_set(&t->q->last_batch_head, t->batch[t->batch_len - 1]);
    }
    /* The virtqueue orders this before its used->idx store. */
}

static void tr_flushed(void *opaque, uint16_t used_idx)
{
    VhostUserInflightTracker *t = opaque;

    for (unsigned i = 0; i < t->batch_len; i++) {
        qatomic_set(&t->q->desc[t->batch[i]].inflight, 0);
    }
    t->batch_len = 0;
    smp_wmb();
    qatomic_set(&t->q->used_idx, used_idx);
}

const VirtQueueTrackerOps vhost_user_inflight_tracker_ops = {
    .popped = tr_popped,
    .unpopped = tr_unpopped,
    .pushed = tr_pushed,
    .flush_begin = tr_flush_begin,
    .flushed = tr_flushed,
};
