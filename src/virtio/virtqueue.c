/*
 * Split virtqueue, device side (virtio 1.x, little-endian rings).
 *
 * Layout reminder: desc[num] (16 bytes each); avail {flags, idx, ring[num],
 * used_event}; used {flags, idx, ring[num] {id, len}, avail_event}.
 *
 * The guest may rewrite any ring byte at any time, so each guest value is
 * read exactly once into a local, validated there, and never re-read.
 */
#include <endian.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <linux/virtio_ring.h>

#include "util/barrier.h"
#include "virtio/virtqueue.h"

struct VirtQueue {
    const GuestMem *mem;
    unsigned num;
    uint64_t features;
    bool event_idx;
    bool indirect;

    /* Host pointers to the rings (validated inside RAM at setup). */
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    uint16_t *used_event;  /* avail->ring[num], written by the driver */
    uint16_t *avail_event; /* used->ring[num], written by us */

    uint16_t last_avail_idx;   /* next avail slot to pop */
    uint16_t shadow_avail_idx; /* last avail->idx value read and validated */
    uint16_t used_idx;         /* next used slot to push */
    uint16_t published_used;   /* used->idx as last stored by flush */
    uint16_t signalled_used;   /* used idx at the last interrupt decision */
    bool signalled_used_valid;
    bool flushed; /* used->idx moved since the last notify decision */
    bool notify_enabled;
    uint16_t used_flags; /* our copy: never read back from guest memory */

    unsigned inflight;
    uint64_t *inflight_map; /* bit per head: popped, not yet pushed */

    /* Optional tracker and resubmit list (vhost-user inflight); NULL/0 otherwise. */
    const VirtQueueTrackerOps *tracker;
    void *tracker_opaque;
    uint16_t *resubmit;
    unsigned resubmit_n, resubmit_next;
    bool last_pop_resubmit;

    bool broken;
    char broken_reason[128];
    VirtQueueBrokenFn *broken_fn;
    void *broken_opaque;
};

static inline bool inflight_test(const VirtQueue *vq, unsigned head)
{
    return vq->inflight_map[head / 64] & (1ull << (head % 64));
}

static inline void inflight_flip(VirtQueue *vq, unsigned head)
{
    vq->inflight_map[head / 64] ^= 1ull << (head % 64);
}

static bool ring_check(const GuestMem *mem, uint64_t gpa, uint64_t len, uint64_t align, bool write,
                       const char *what, GError **errp)
{
    struct iovec iov;

    if (gpa & (align - 1)) {
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                    "virtqueue %s ring at 0x%" PRIx64 " is not %" PRIu64 "-byte aligned", what, gpa,
                    align);
        return false;
    }
    if (guestmem_map(mem, gpa, len, write, &iov, 1) != 1) {
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                    "virtqueue %s ring [0x%" PRIx64 ", +0x%" PRIx64
                    ") is not inside one RAM region",
                    what, gpa, len);
        return false;
    }
    return true;
}

/* Context: owner thread (control path) */
VirtQueue *virtqueue_new(const GuestMem *mem, unsigned num, uint64_t desc_gpa, uint64_t avail_gpa,
                         uint64_t used_gpa, uint64_t features, GError **errp)
{
    VirtQueue *vq;

    if (num == 0 || num > VIRTQUEUE_MAX_SIZE || (num & (num - 1))) {
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                    "virtqueue size %u is not a power of two in 1..%u", num, VIRTQUEUE_MAX_SIZE);
        return NULL;
    }
    /* The event fields are always mapped: harmless when EVENT_IDX is off. */
    if (!ring_check(mem, desc_gpa, 16ull * num, 16, false, "descriptor", errp) ||
        !ring_check(mem, avail_gpa, 6 + 2ull * num, 2, false, "available", errp) ||
        !ring_check(mem, used_gpa, 6 + 8ull * num, 4, true, "used", errp)) {
        return NULL;
    }
    vq = g_new0(VirtQueue, 1);
    vq->mem = mem;
    vq->num = num;
    vq->features = features;
    vq->event_idx = features & (1ull << VIRTIO_RING_F_EVENT_IDX);
    vq->indirect = features & (1ull << VIRTIO_RING_F_INDIRECT_DESC);
    vq->desc = guestmem_ptr(mem, desc_gpa, 16ull * num);
    vq->avail = guestmem_ptr(mem, avail_gpa, 6 + 2ull * num);
    vq->used = guestmem_ptr(mem, used_gpa, 6 + 8ull * num);
    vq->used_event = &vq->avail->ring[num];
    vq->avail_event = (uint16_t *)&vq->used->ring[num];
    vq->inflight_map = g_new0(uint64_t, (num + 63) / 64);
    vq->used_idx = le16toh(qatomic_read(&vq->used->idx));
    vq->published_used = vq->used_idx;
    vq->notify_enabled = true;
    return vq;
}

/* Context: owner thread (control path) */
void virtqueue_free(VirtQueue *vq)
{
    if (vq) {
        g_free(vq->resubmit);
        g_free(vq->inflight_map);
        g_free(vq);
    }
}

/* Context: owner thread (control path) */
void virtqueue_set_broken_notifier(VirtQueue *vq, VirtQueueBrokenFn *fn, void *opaque)
{
    vq->broken_fn = fn;
    vq->broken_opaque = opaque;
}

/* Context: owner thread */
void virtqueue_set_broken(VirtQueue *vq, const char *reason)
{
    if (vq->broken) {
        return;
    }
    /*
     * What completed before the protocol error is still the driver's: publish
     * it (a flush is refused once broken). A caller that held back its used
     * entries (the dataplane's completion hold) loses none of them.
     */
    virtqueue_flush(vq);
    snprintf(vq->broken_reason, sizeof(vq->broken_reason), "%s", reason);
    qatomic_set(&vq->broken, true);
    if (vq->broken_fn) {
        vq->broken_fn(vq->broken_opaque, vq, vq->broken_reason);
    }
}

/* Context: any thread (relaxed read) */
bool virtqueue_is_broken(const VirtQueue *vq)
{
    return qatomic_read(&vq->broken);
}

/* Context: owner thread */
const char *virtqueue_broken_reason(const VirtQueue *vq)
{
    return vq->broken ? vq->broken_reason : NULL;
}

/*
 * Read avail->idx once and validate it. Returns false (queue broken) if the
 * driver claims more than num entries beyond what we popped.
 */
static bool vq_read_avail_idx(VirtQueue *vq)
{
    uint16_t idx = le16toh(qatomic_read(&vq->avail->idx));

    /* "The driver MUST NOT ... make more than Queue Size buffers available". */
    if ((uint16_t)(idx - vq->last_avail_idx) > vq->num) {
        virtqueue_set_broken(vq, "avail index moved by more than the queue size");
        return false;
    }
    vq->shadow_avail_idx = idx;
    /*
     * Ring entries covered by this index are read only after it (whoever
     * pops next). Pairs with the driver's smp_wmb() between writing
     * avail->ring[] and publishing avail->idx.
     */
    smp_rmb();
    return true;
}

/* Context: owner thread */
bool virtqueue_has_avail(VirtQueue *vq)
{
    if (vq->broken) {
        return false;
    }
    if (G_UNLIKELY(vq->resubmit_next < vq->resubmit_n)) {
        return true;
    }
    if (vq->shadow_avail_idx != vq->last_avail_idx) {
        return true;
    }
    return vq_read_avail_idx(vq) && vq->shadow_avail_idx != vq->last_avail_idx;
}

/* One descriptor, copied out of guest memory in one go (possibly unaligned). */
static inline void vq_read_desc(const struct vring_desc *table, unsigned i, struct vring_desc *d)
{
    memcpy(d, &table[i], sizeof(*d));
    d->addr = le64toh(d->addr);
    d->len = le32toh(d->len);
    d->flags = le16toh(d->flags);
    d->next = le16toh(d->next);
}

/* Map one data descriptor into elem->iov. Returns false after breaking the queue. */
static bool vq_map_desc(VirtQueue *vq, VirtQueueElement *elem, const struct vring_desc *d)
{
    bool write = d->flags & VRING_DESC_F_WRITE;
    unsigned used = elem->out_num + elem->in_num;
    int n;

    if (d->len == 0) {
        virtqueue_set_broken(vq, "zero-length descriptor");
        return false;
    }
    if (!write && elem->in_num > 0) {
        virtqueue_set_broken(vq, "device-readable descriptor after a device-writable one");
        return false;
    }
    n = guestmem_map(vq->mem, d->addr, d->len, write, elem->iov + used, elem->iov_cap - used);
    if (n == -ENOBUFS) {
        virtqueue_set_broken(vq, "descriptor chain needs more iovecs than the element holds");
        return false;
    }
    if (n < 0) {
        virtqueue_set_broken(vq, "descriptor buffer outside guest RAM");
        return false;
    }
    if (write) {
        elem->in_num += n;
        elem->in_len += d->len;
    } else {
        elem->out_num += n;
        elem->out_len += d->len;
    }
    return true;
}

/*
 * Switch to the indirect table described by @d (the head). Checks: feature
 * negotiated, INDIRECT not combined with NEXT, length non-zero and a
 * multiple of 16, at most num entries, table inside one RAM region.
 */
static const struct vring_desc *vq_indirect_table(VirtQueue *vq, const struct vring_desc *d,
                                                  unsigned *max)
{
    const struct vring_desc *table;

    if (!vq->indirect) {
        virtqueue_set_broken(vq, "indirect descriptor without VIRTIO_RING_F_INDIRECT_DESC");
        return NULL;
    }
    if (d->flags & VRING_DESC_F_NEXT) {
        virtqueue_set_broken(vq, "indirect descriptor with NEXT set");
        return NULL;
    }
    if (d->len == 0 || d->len % sizeof(struct vring_desc)) {
        virtqueue_set_broken(vq, "indirect table length is zero or not a multiple of 16");
        return NULL;
    }
    /* A chain, indirect or not, is never longer than the queue. */
    if (d->len / sizeof(struct vring_desc) > vq->num) {
        virtqueue_set_broken(vq, "indirect table longer than the queue size");
        return NULL;
    }
    table = guestmem_ptr(vq->mem, d->addr, d->len);
    if (!table) {
        virtqueue_set_broken(vq, "indirect table outside guest RAM");
        return NULL;
    }
    *max = d->len / sizeof(struct vring_desc);
    return table;
}

/* Walk the chain starting at @head into @elem. Returns false after breaking the queue. */
static bool vq_map_chain(VirtQueue *vq, VirtQueueElement *elem, uint16_t head)
{
    const struct vring_desc *table = vq->desc;
    unsigned max = vq->num, found = 0, i = head;
    struct vring_desc d;

    vq_read_desc(table, i, &d);
    if (d.flags & VRING_DESC_F_INDIRECT) {
        table = vq_indirect_table(vq, &d, &max);
        if (!table) {
            return false;
        }
        i = 0;
        vq_read_desc(table, i, &d);
    }
    for (;;) {
        /* More descriptors than the table holds means the chain loops. */
        if (++found > max) {
            virtqueue_set_broken(vq, "descriptor chain loops (longer than its table)");
            return false;
        }
        if (d.flags & VRING_DESC_F_INDIRECT) {
            virtqueue_set_broken(vq, "indirect descriptor that is not the head's only one");
            return false;
        }
        if (!vq_map_desc(vq, elem, &d)) {
            return false;
        }
        if (!(d.flags & VRING_DESC_F_NEXT)) {
            break;
        }
        if (d.next >= max) {
            virtqueue_set_broken(vq, "descriptor next index out of range");
            return false;
        }
        vq_read_desc(table, d.next, &d);
    }
    elem->ndesc = found;
    return true;
}

/* Map the chain at @head (< num) into @elem; @busy is the error if it is in flight. */
static bool vq_map_head(VirtQueue *vq, VirtQueueElement *elem, uint16_t head, const char *busy)
{
    if (inflight_test(vq, head)) {
        virtqueue_set_broken(vq, busy);
        return false;
    }
    elem->out_num = elem->in_num = 0;
    elem->out_len = elem->in_len = 0;
    elem->head = head;
    return vq_map_chain(vq, elem, head);
}

/* The next head of the resubmit list (checked < num and unique when set). */
static int vq_pop_resubmit(VirtQueue *vq, VirtQueueElement *elem)
{
    uint16_t head = vq->resubmit[vq->resubmit_next];

    if (!vq_map_head(vq, elem, head, "resubmitted head is already in flight")) {
        return -EIO;
    }
    vq->resubmit_next++;
    vq->last_pop_resubmit = true;
    inflight_flip(vq, head);
    vq->inflight++;
    if (vq->tracker) {
        vq->tracker->popped(vq->tracker_opaque, head);
    }
    return 1;
}

/* Context: owner thread (hot path: no allocation, no lock) */
int virtqueue_pop(VirtQueue *vq, VirtQueueElement *elem)
{
    uint16_t head;

    if (vq->broken) {
        return -EIO;
    }
    if (G_UNLIKELY(vq->resubmit_next < vq->resubmit_n)) {
        return vq_pop_resubmit(vq, elem);
    }
    if (vq->last_avail_idx == vq->shadow_avail_idx) {
        if (!vq_read_avail_idx(vq)) {
            return -EIO;
        }
        if (vq->last_avail_idx == vq->shadow_avail_idx) {
            return 0;
        }
    }
    if (vq->inflight >= vq->num) {
        virtqueue_set_broken(vq, "more buffers in flight than the queue size");
        return -EIO;
    }
    head = le16toh(qatomic_read(&vq->avail->ring[vq->last_avail_idx & (vq->num - 1)]));
    if (head >= vq->num) {
        virtqueue_set_broken(vq, "avail ring head index out of range");
        return -EIO;
    }
    if (!vq_map_head(vq, elem, head, "avail ring head is already in flight")) {
        return -EIO;
    }
    vq->last_avail_idx++;
    inflight_flip(vq, head);
    vq->inflight++;
    if (vq->event_idx && vq->notify_enabled) {
        /* Kick me when you publish past what I have consumed. */
        qatomic_set(vq->avail_event, htole16(vq->last_avail_idx));
    }
    if (G_UNLIKELY(vq->tracker || vq->resubmit_n)) {
        vq->last_pop_resubmit = false;
        if (vq->tracker) {
            vq->tracker->popped(vq->tracker_opaque, head);
        }
    }
    return 1;
}

/* Context: owner thread */
void virtqueue_unpop(VirtQueue *vq, const VirtQueueElement *elem)
{
    if (elem->head >= vq->num || !inflight_test(vq, elem->head)) {
        return;
    }
    inflight_flip(vq, elem->head);
    vq->inflight--;
    if (G_UNLIKELY(vq->last_pop_resubmit)) {
        /*
         * Back onto the resubmit list; it stays in flight for the tracker.
         * Resubmitted heads are the first pops after set_resubmit, one after
         * another, so the pop before this one was a resubmit too, if any.
         */
        vq->resubmit_next--;
        vq->last_pop_resubmit = vq->resubmit_next > 0;
        return;
    }
    if (G_UNLIKELY(vq->tracker)) {
        vq->tracker->unpopped(vq->tracker_opaque, elem->head);
    }
    vq->last_avail_idx--;
}

/* Context: owner thread (hot path) */
bool virtqueue_push(VirtQueue *vq, uint16_t head, uint32_t len)
{
    struct vring_used_elem *e;

    if (vq->broken || head >= vq->num || !inflight_test(vq, head)) {
        return false;
    }
    e = &vq->used->ring[vq->used_idx & (vq->num - 1)];
    qatomic_set(&e->id, htole32(head));
    qatomic_set(&e->len, htole32(len));
    vq->used_idx++;
    inflight_flip(vq, head);
    vq->inflight--;
    if (G_UNLIKELY(vq->tracker)) {
        vq->tracker->pushed(vq->tracker_opaque, head);
    }
    return true;
}

/* Context: owner thread */
void virtqueue_flush(VirtQueue *vq)
{
    uint16_t old = vq->published_used, new = vq->used_idx;

    if (vq->broken || old == new) {
        return;
    }
    if (G_UNLIKELY(vq->tracker)) {
        vq->tracker->flush_begin(vq->tracker_opaque); /* ordered before used->idx too */
    }
    /*
     * Used elements before the index that publishes them. Pairs with the
     * driver's smp_rmb() between reading used->idx and reading used->ring[].
     */
    smp_wmb();
    qatomic_set(&vq->used->idx, htole16(new));
    vq->published_used = new;
    if (G_UNLIKELY(vq->tracker)) {
        smp_wmb();
        vq->tracker->flushed(vq->tracker_opaque, new);
    }
    vq->flushed = true;
    /* If used idx wrapped past signalled_used, the cached value means nothing. */
    if ((uint16_t)(new - vq->signalled_used) < (uint16_t)(new - old)) {
        vq->signalled_used_valid = false;
    }
}

/* Context: owner thread */
bool virtqueue_should_notify(VirtQueue *vq)
{
    uint16_t old = vq->signalled_used, new = vq->published_used;
    bool valid = vq->signalled_used_valid;

    if (vq->broken || !vq->flushed) {
        return false; /* nothing completed since the last decision */
    }
    vq->flushed = false;
    /*
     * Our used->idx store must be visible before we read the driver's
     * suppression state. Pairs with the driver's smp_mb() between writing
     * used_event (or clearing NO_INTERRUPT) and re-reading used->idx.
     */
    smp_mb();
    vq->signalled_used = new;
    vq->signalled_used_valid = true;
    if (!vq->event_idx) {
        return !(le16toh(qatomic_read(&vq->avail->flags)) & VRING_AVAIL_F_NO_INTERRUPT);
    }
    return !valid || vring_need_event(le16toh(qatomic_read(vq->used_event)), new, old);
}

/* Context: owner thread */
void virtqueue_disable_notification(VirtQueue *vq)
{
    vq->notify_enabled = false;
    if (!vq->event_idx) {
        vq->used_flags |= VRING_USED_F_NO_NOTIFY;
        qatomic_set(&vq->used->flags, htole16(vq->used_flags));
    }
    /* With EVENT_IDX, a stale avail_event already suppresses kicks. */
}

/* Context: owner thread */
bool virtqueue_enable_notification(VirtQueue *vq)
{
    vq->notify_enabled = true;
    if (vq->event_idx) {
        qatomic_set(vq->avail_event, htole16(vq->last_avail_idx));
    } else {
        vq->used_flags &= ~VRING_USED_F_NO_NOTIFY;
        qatomic_set(&vq->used->flags, htole16(vq->used_flags));
    }
    /*
     * Publish "kick me" before re-reading avail->idx. Pairs with the
     * driver's smp_mb() between publishing avail->idx and reading
     * avail_event / used->flags: either it sees our request and kicks,
     * or we see its new entry here.
     */
    smp_mb();
    return virtqueue_has_avail(vq);
}

/* Context: owner thread (control path) */
void virtqueue_get_state(const VirtQueue *vq, VirtQueueState *state)
{
    state->last_avail_idx = vq->last_avail_idx;
    state->used_idx = vq->used_idx;
}

/* Context: owner thread (control path) */
bool virtqueue_set_state(VirtQueue *vq, const VirtQueueState *state)
{
    if (vq->inflight) {
        return false;
    }
    memset(vq->inflight_map, 0, (vq->num + 63) / 64 * sizeof(uint64_t));
    vq->last_avail_idx = state->last_avail_idx;
    vq->shadow_avail_idx = state->last_avail_idx;
    vq->used_idx = state->used_idx;
    vq->published_used = state->used_idx;
    vq->signalled_used_valid = false;
    return true;
}

/* Context: owner thread */
void virtqueue_invalidate_signalled_used(VirtQueue *vq)
{
    vq->signalled_used_valid = false;
}

/* Context: owner thread */
unsigned virtqueue_inflight(const VirtQueue *vq)
{
    return vq->inflight;
}

/* Context: owner thread */
uint16_t virtqueue_published_used(const VirtQueue *vq)
{
    return vq->published_used;
}

/* Context: owner thread */
bool virtqueue_has_unpublished(const VirtQueue *vq)
{
    return vq->used_idx != vq->published_used;
}

/* Context: any thread */
unsigned virtqueue_num(const VirtQueue *vq)
{
    return vq->num;
}

/* Context: owner thread (control path) */
void virtqueue_set_tracker(VirtQueue *vq, const VirtQueueTrackerOps *ops, void *opaque)
{
    vq->tracker = ops;
    vq->tracker_opaque = opaque;
}

/* Context: owner thread (control path) */
bool virtqueue_set_resubmit(VirtQueue *vq, const uint16_t *heads, unsigned n)
{
    g_autofree uint64_t *seen = g_new0(uint64_t, (vq->num + 63) / 64);

    if (vq->inflight || n > vq->num) {
        return false;
    }
    for (unsigned i = 0; i < n; i++) {
        if (heads[i] >= vq->num || (seen[heads[i] / 64] & (1ull << (heads[i] % 64)))) {
            return false;
        }
        seen[heads[i] / 64] |= 1ull << (heads[i] % 64);
    }
    g_free(vq->resubmit);
    vq->resubmit = n ? g_memdup2(heads, n * sizeof(heads[0])) : NULL;
    vq->resubmit_n = n;
    vq->resubmit_next = 0;
    vq->last_pop_resubmit = false;
    return true;
}

/* Context: owner thread */
unsigned virtqueue_resubmit_pending(const VirtQueue *vq)
{
    return vq->resubmit_n - vq->resubmit_next;
}

/* Context: any thread (see the header: unsynchronized reads) */
void virtqueue_debug_snapshot(const VirtQueue *vq, VirtQueueDebug *d)
{
    *d = (VirtQueueDebug){
        .last_avail_idx = qatomic_read(&vq->last_avail_idx),
        .used_idx = qatomic_read(&vq->used_idx),
        .published_used = qatomic_read(&vq->published_used),
        .signalled_used = qatomic_read(&vq->signalled_used),
        .signalled_used_valid = qatomic_read(&vq->signalled_used_valid),
        .notify_enabled = qatomic_read(&vq->notify_enabled),
        .event_idx = vq->event_idx,
        .broken = qatomic_read(&vq->broken),
        .avail_idx = le16toh(qatomic_read(&vq->avail->idx)),
        .avail_flags = le16toh(qatomic_read(&vq->avail->flags)),
        .used_event = vq->event_idx ? le16toh(qatomic_read(vq->used_event)) : 0,
        .guest_used_idx = le16toh(qatomic_read(&vq->used->idx)),
        .avail_event = vq->event_idx ? le16toh(qatomic_read(vq->avail_event)) : 0,
        .inflight = qatomic_read(&vq->inflight),
    };
}
