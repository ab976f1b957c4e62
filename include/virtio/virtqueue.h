/*
 * Split virtqueue (virtio 1.x), device side.
 *
 * A VirtQueue is owned by exactly one thread at a time (the main loop, or a
 * dataplane iothread); every function below except virtqueue_is_broken()
 * must be called from that owner. Handing a queue to another thread goes
 * through virtqueue_get_state()/virtqueue_set_state() with no request in
 * flight, or through a full memory barrier published by the hand-over
 * mechanism (thread start/join, a mutex, an eventfd round trip).
 *
 * Every value read from the rings is validated where it is read. A violation
 * of the ring protocol is a *protocol error*: the queue is marked broken, the
 * broken notifier runs once (the transport sets DEVICE_NEEDS_RESET), and
 * every later pop/push/flush is refused until the queue is freed and set up
 * again. Nothing the guest writes can crash, hang or abort the process.
 */
#ifndef VBLK_VIRTQUEUE_H
#define VBLK_VIRTQUEUE_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "virtio/guestmem.h"

/* Largest queue size accepted by virtqueue_new() (virtio 1.x split ring). */
#define VIRTQUEUE_MAX_SIZE 32768

/*
 * iovec capacity an element needs so that no chain the queue accepts runs out
 * of iovecs: a chain holds at most @num descriptors (the loop bound), and each
 * region boundary a descriptor crosses costs one more iovec. The slack covers
 * a few crossings in one chain (a guest with a handful of RAM regions). A chain
 * needing more iovecs than the element holds is a protocol error (queue broken),
 * as in QEMU ("too many descriptors").
 */
#define VIRTQUEUE_ELEM_IOV_SLACK 8
#define VIRTQUEUE_ELEM_IOV(num)  ((unsigned)(num) + VIRTQUEUE_ELEM_IOV_SLACK)

/*
 * One popped descriptor chain. The caller owns the storage: set @iov and
 * @iov_cap before virtqueue_pop(); pop fills the rest and allocates nothing.
 * iov[0 .. out_num) are device-readable ("out"), iov[out_num .. out_num +
 * in_num) are device-writable ("in").
 */
typedef struct VirtQueueElement {
    struct iovec *iov; /* caller storage */
    unsigned iov_cap;  /* capacity of @iov */
    unsigned out_num;  /* readable iovecs */
    unsigned in_num;   /* writable iovecs, following the readable ones */
    uint64_t out_len;  /* total readable bytes */
    uint64_t in_len;   /* total writable bytes */
    unsigned ndesc;    /* descriptors in the chain (table entries if indirect) */
    uint16_t head;     /* head descriptor index, returned in the used ring */
} VirtQueueElement;

/* Hand-over state (QEMU's last_avail_idx and used index). */
typedef struct VirtQueueState {
    uint16_t last_avail_idx; /* next avail ring slot the device will read */
    uint16_t used_idx;       /* next used ring slot the device will write */
} VirtQueueState;

typedef struct VirtQueue VirtQueue;

/* Called once, from the owner thread, when the queue becomes broken. */
typedef void VirtQueueBrokenFn(void *opaque, VirtQueue *vq, const char *reason);

/*
 * Set up a queue of @num entries (power of two, 1..VIRTQUEUE_MAX_SIZE) whose
 * rings are at the given guest-physical addresses. Each ring must lie inside
 * one RAM region and be naturally aligned (desc 16, avail 2, used 4).
 * @features are the negotiated feature bits (VIRTIO_RING_F_EVENT_IDX and
 * VIRTIO_RING_F_INDIRECT_DESC matter here). The state starts at
 * last_avail_idx = 0 and used_idx = the used->idx currently in guest memory.
 * Context: owner thread (control path)
 */
VirtQueue *virtqueue_new(const GuestMem *mem, unsigned num, uint64_t desc_gpa, uint64_t avail_gpa,
                         uint64_t used_gpa, uint64_t features, GError **errp);

/* Context: owner thread (control path) */
void virtqueue_free(VirtQueue *vq);

/* Context: owner thread (control path) */
void virtqueue_set_broken_notifier(VirtQueue *vq, VirtQueueBrokenFn *fn, void *opaque);

/*
 * Pop the next available chain into @elem.
 * Returns 1 when a chain was popped, 0 when the ring is empty, -EIO when the
 * queue is (or just became) broken.
 * Context: owner thread (hot path: no allocation, no lock)
 */
int virtqueue_pop(VirtQueue *vq, VirtQueueElement *elem);

/*
 * Give back the most recently popped element without using it (e.g. no
 * submission slot); elements must be un-popped in reverse pop order.
 * Context: owner thread
 */
void virtqueue_unpop(VirtQueue *vq, const VirtQueueElement *elem);

/*
 * Write used element (@head, @len) to the used ring; not visible to the guest
 * until virtqueue_flush(). Returns false (and writes nothing) if the queue is
 * broken or @head is not in flight.
 * Context: owner thread (hot path)
 */
bool virtqueue_push(VirtQueue *vq, uint16_t head, uint32_t len);

/* Publish all pushed elements (store used->idx). Context: owner thread */
void virtqueue_flush(VirtQueue *vq);

/*
 * Whether the guest wants an interrupt for the elements flushed since the
 * last time this returned true (EVENT_IDX: vring_need_event on used_event;
 * otherwise VRING_AVAIL_F_NO_INTERRUPT). Call after virtqueue_flush().
 * Context: owner thread
 */
bool virtqueue_should_notify(VirtQueue *vq);

/* Ask the guest not to kick (VRING_USED_F_NO_NOTIFY / no avail_event update). */
/* Context: owner thread */
void virtqueue_disable_notification(VirtQueue *vq);

/*
 * Ask the guest to kick again, then re-check the avail ring after a full
 * barrier. Returns true if work arrived meanwhile: the caller must keep
 * processing (no wakeup is lost). Typical loop:
 *     do { virtqueue_disable_notification(vq); while (pop) ...; }
 *     while (virtqueue_enable_notification(vq));
 * Context: owner thread
 */
bool virtqueue_enable_notification(VirtQueue *vq);

/* Whether the avail ring holds unpopped entries. Context: owner thread */
bool virtqueue_has_avail(VirtQueue *vq);

/*
 * Hand-over. set_state requires no element in flight; it resets the in-flight
 * tracking and invalidates the signalled-used cache (the next flush notifies
 * unless the guest suppresses it).
 * Context: owner thread (control path)
 */
void virtqueue_get_state(const VirtQueue *vq, VirtQueueState *state);
/* Context: owner thread (control path); returns false if elements are in flight */
bool virtqueue_set_state(VirtQueue *vq, const VirtQueueState *state);

/* Forget the cached signalled used index (next notify decision is fresh). */
/* Context: owner thread */
void virtqueue_invalidate_signalled_used(VirtQueue *vq);

/*
 * Both sides' ring indices for a state dump: the device's own (what it popped,
 * pushed, published and last decided to signal) and the driver's, read from
 * guest memory now (avail->idx and flags, used_event). With them a stalled
 * queue tells a missed kick (avail_idx != last_avail_idx) from a guest that
 * waits for an interrupt (used_event at or before published_used).
 * Context: any thread. The device's fields are read without synchronization,
 * so a busy queue gives a torn but harmless picture.
 */
typedef struct VirtQueueDebug {
    uint16_t last_avail_idx, used_idx, published_used, signalled_used;
    bool signalled_used_valid, notify_enabled, event_idx, broken;
    uint16_t avail_idx, avail_flags, used_event; /* driver-written */
    uint16_t guest_used_idx, avail_event;        /* as stored in guest memory */
    unsigned inflight;
} VirtQueueDebug;
void virtqueue_debug_snapshot(const VirtQueue *vq, VirtQueueDebug *d);

/* Popped but not yet pushed elements. Context: owner thread */
unsigned virtqueue_inflight(const VirtQueue *vq);
/* The used index last published to the driver. Context: owner thread */
uint16_t virtqueue_published_used(const VirtQueue *vq);
/* Pushed elements the driver cannot see yet (not published). Context: owner thread */
bool virtqueue_has_unpublished(const VirtQueue *vq);
/* Context: any thread */
unsigned virtqueue_num(const VirtQueue *vq);

/*
 * Mark the queue broken (protocol error found by a higher layer, e.g. a
 * virtio-blk request without header). Idempotent; the notifier runs once.
 * Context: owner thread
 */
void virtqueue_set_broken(VirtQueue *vq, const char *reason);
/* Context: any thread (relaxed read) */
bool virtqueue_is_broken(const VirtQueue *vq);
/* Reason given when the queue broke, or NULL. Context: owner thread */
const char *virtqueue_broken_reason(const VirtQueue *vq);

/*
 * Optional per-queue tracker (vhost-user's inflight region): told about every
 * head the queue hands out or takes back. All hooks run in the owner thread.
 * @popped: a chain was popped, before the caller uses it; @unpopped: it went
 * back to the avail ring; @pushed: its used element was written (not yet
 * visible); @flush_begin/@flushed: just before / after used->idx is stored
 * (only when it moves; @flushed gets the new index).
 * A queue without a tracker or resubmit list (virtio-blk-pci) pays only
 * never-taken branches on a VirtQueue field: two each in pop, un-pop and flush,
 * one each in has_avail and push; no call, no store.
 */
typedef struct VirtQueueTrackerOps {
    void (*popped)(void *opaque, uint16_t head);
    void (*unpopped)(void *opaque, uint16_t head);
    void (*pushed)(void *opaque, uint16_t head);
    void (*flush_begin)(void *opaque);
    void (*flushed)(void *opaque, uint16_t used_idx);
} VirtQueueTrackerOps;

/* Context: owner thread (control path, nothing in flight); NULL ops remove it. */
void virtqueue_set_tracker(VirtQueue *vq, const VirtQueueTrackerOps *ops, void *opaque);

/*
 * Heads to hand out again before anything from the avail ring (requests
 * that were in flight in an earlier back end): virtqueue_pop() returns these
 * chains first, in the order given, without moving last_avail_idx. Each head
 * must be < num and appear once; false (nothing set) otherwise or when
 * elements are in flight. Replaces an earlier list. A resubmitted element may
 * be un-popped (it goes back to the front of the list) as long as no element
 * from the avail ring was popped after it.
 * Context: owner thread (control path)
 */
bool virtqueue_set_resubmit(VirtQueue *vq, const uint16_t *heads, unsigned n);
/* Heads of the resubmit list not popped yet. Context: owner thread */
unsigned virtqueue_resubmit_pending(const VirtQueue *vq);

#endif /* VBLK_VIRTQUEUE_H */
