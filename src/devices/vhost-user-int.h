/*
 * vhost-user back end: the protocol half of a vhost-user device export
 * (docs/vhost-user.md). One VhostUser serves one connection at a time: it
 * frames and validates every message of the front end (which is as
 * untrusted as a guest), keeps the memory table (regions mmapped from the
 * front end's fds) and the ring state, and tells the device model when to
 * start and stop serving rings. It knows nothing of virtio-blk, the
 * dataplane or sockets' origin (listen/accept is the export's job).
 *
 * A bad message ends the connection: vhost_user_conn_read() reports one line
 * naming the export and the message and returns false; the caller then
 * calls vhost_user_detach(), which stops the device and releases every fd
 * and mapping, and may accept the next connection.
 *
 * Context: every function runs in the export's control thread (the main
 * loop); the device's queues run wherever the device puts them.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_VHOST_USER_INT_H
#define VBLK_VHOST_USER_INT_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "virtio/guestmem.h"
#include "virtio/virtqueue.h"

#define VHOST_USER_MAX_QUEUES    64
#define VHOST_USER_MAX_RING_SIZE 1024
#define VHOST_USER_MAX_MEM_SLOTS 32 /* GET_MAX_MEM_SLOTS; SET_MEM_TABLE carries at most 8 */
#define VHOST_USER_MAX_CONFIG    256
/* GET/SET_CONFIG offsets from here on are taken relative to it (cloud-hypervisor's). */
#define VHOST_USER_CONFIG_ALT_BASE 0x100

/* Requests (front end to back end). */
enum {
    VHOST_USER_NONE = 0,
    VHOST_USER_GET_FEATURES = 1,
    VHOST_USER_SET_FEATURES = 2,
    VHOST_USER_SET_OWNER = 3,
    VHOST_USER_RESET_OWNER = 4,
    VHOST_USER_SET_MEM_TABLE = 5,
    VHOST_USER_SET_LOG_BASE = 6,
    VHOST_USER_SET_LOG_FD = 7,
    VHOST_USER_SET_VRING_NUM = 8,
    VHOST_USER_SET_VRING_ADDR = 9,
    VHOST_USER_SET_VRING_BASE = 10,
    VHOST_USER_GET_VRING_BASE = 11,
    VHOST_USER_SET_VRING_KICK = 12,
    VHOST_USER_SET_VRING_CALL = 13,
    VHOST_USER_SET_VRING_ERR = 14,
    VHOST_USER_GET_PROTOCOL_FEATURES = 15,
    VHOST_USER_SET_PROTOCOL_FEATURES = 16,
    VHOST_USER_GET_QUEUE_NUM = 17,
    VHOST_USER_SET_VRING_ENABLE = 18,
    VHOST_USER_SET_BACKEND_REQ_FD = 21, /* SET_SLAVE_REQ_FD in QEMU 7.2 */
    VHOST_USER_GET_CONFIG = 24,
    VHOST_USER_SET_CONFIG = 25,
    VHOST_USER_GET_INFLIGHT_FD = 31,
    VHOST_USER_SET_INFLIGHT_FD = 32,
    VHOST_USER_RESET_DEVICE = 34,
    VHOST_USER_GET_MAX_MEM_SLOTS = 36,
    VHOST_USER_ADD_MEM_REG = 37,
    VHOST_USER_REM_MEM_REG = 38,
    VHOST_USER_SET_STATUS = 39,
    VHOST_USER_GET_STATUS = 40,
    VHOST_USER_REQ_MAX = 41,
};

/* Back-end requests (back end to front end, on the SET_BACKEND_REQ_FD channel). */
enum {
    VHOST_USER_BACKEND_CONFIG_CHANGE_MSG = 2,
};

/*
 * How long a CONFIG_CHANGE_MSG sent with NEED_REPLY waits for the front
 * end's answer before the back-end channel is closed (the main loop runs on
 * meanwhile: QEMU answers only after its GET_CONFIG round trip).
 */
#define VHOST_USER_BACKEND_REPLY_TIMEOUT_MS 2000

/* Header flags. */
#define VHOST_USER_VERSION         1u
#define VHOST_USER_VERSION_MASK    3u
#define VHOST_USER_FLAG_REPLY      (1u << 2)
#define VHOST_USER_FLAG_NEED_REPLY (1u << 3)

/* Virtio feature bit 30: GET/SET_PROTOCOL_FEATURES exist; rings wait for SET_VRING_ENABLE. */
#define VHOST_USER_F_PROTOCOL_FEATURES 30

/* Protocol features. */
#define VHOST_USER_PROTOCOL_F_MQ                  0
#define VHOST_USER_PROTOCOL_F_REPLY_ACK           3
#define VHOST_USER_PROTOCOL_F_BACKEND_REQ         5 /* SLAVE_REQ in QEMU 7.2 */
#define VHOST_USER_PROTOCOL_F_CONFIG              9
#define VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD      12
#define VHOST_USER_PROTOCOL_F_RESET_DEVICE        13
#define VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS 15
#define VHOST_USER_PROTOCOL_F_STATUS              16

/* u64 payload of SET_VRING_KICK/CALL/ERR: ring index and "no fd". */
#define VHOST_USER_VRING_IDX_MASK 0xffu
#define VHOST_USER_VRING_NOFD     (1u << 8)

typedef struct VhostUserHdr {
    uint32_t request;
    uint32_t flags;
    uint32_t size;
} __attribute__((packed)) VhostUserHdr;

typedef struct VhostUserVringState {
    uint32_t index;
    uint32_t num;
} VhostUserVringState;

typedef struct VhostUserVringAddr {
    uint32_t index;
    uint32_t flags;
    uint64_t desc;
    uint64_t used;
    uint64_t avail;
    uint64_t log;
} VhostUserVringAddr;

typedef struct VhostUserMemRegion {
    uint64_t gpa;
    uint64_t size;
    uint64_t uva;
    uint64_t mmap_offset;
} VhostUserMemRegion;

typedef struct VhostUserConfigHdr {
    uint32_t offset;
    uint32_t size;
    uint32_t flags;
} VhostUserConfigHdr;

/* GET/SET_INFLIGHT_FD payload (24 bytes with the tail padding, as front ends send it). */
typedef struct VhostUserInflight {
    uint64_t mmap_size;
    uint64_t mmap_offset;
    uint16_t num_queues;
    uint16_t queue_size;
} VhostUserInflight;

/*
 * The shared inflight region for split rings (the vhost-user spec's "Inflight
 * I/O tracking"): per queue a header and one state per descriptor, each queue
 * rounded up to 64 bytes. The back end defines the layout (the front end only
 * keeps the fd and hands it back), but the front end can write it at any
 * time: every value read from it is bounded where it is used.
 */
typedef struct VhostUserInflightDesc {
    uint8_t inflight; /* 1: popped, its used element not yet published */
    uint8_t padding[5];
    uint16_t next;    /* the batch chain: previous head pushed before the flush */
    uint64_t counter; /* pop order */
} VhostUserInflightDesc;

typedef struct VhostUserInflightQueue {
    uint64_t features;
    uint16_t version;
    uint16_t desc_num;
    uint16_t last_batch_head; /* last head of the batch being published */
    uint16_t used_idx;        /* used->idx once the batch is cleared */
    VhostUserInflightDesc desc[];
} VhostUserInflightQueue;

#define VHOST_USER_INFLIGHT_ALIGN   64
#define VHOST_USER_INFLIGHT_VERSION 1

/* Bytes of one queue's part of the region for rings of @queue_size descriptors. */
static inline uint64_t vhost_user_inflight_queue_bytes(unsigned queue_size)
{
    uint64_t n =
        sizeof(VhostUserInflightQueue) + (uint64_t)queue_size * sizeof(VhostUserInflightDesc);

    return (n + VHOST_USER_INFLIGHT_ALIGN - 1) & ~(uint64_t)(VHOST_USER_INFLIGHT_ALIGN - 1);
}

/*
 * One ring's inflight tracking (vhost-user-inflight.c): installed on the
 * VirtQueue as its tracker; the hooks run in the queue's owner thread.
 */
typedef struct VhostUserInflightTracker VhostUserInflightTracker;

/*
 * Recover ring state from @q (@desc_num descriptors; the ring has @num <=
 * desc_num): a batch whose used index reached the guest (@guest_used_idx)
 * but was not yet cleared is cleared; the heads still in flight are returned
 * in @heads (room for @num) in pop order, *@n of them. Then track the ring.
 * Context: control thread, the ring not served
 */
VhostUserInflightTracker *vhost_user_inflight_tracker_new(VhostUserInflightQueue *q,
                                                          unsigned desc_num, unsigned num,
                                                          uint16_t guest_used_idx, uint16_t *heads,
                                                          unsigned *n);
void vhost_user_inflight_tracker_free(VhostUserInflightTracker *t);
/* The VirtQueue hooks; opaque = the tracker. */
extern const VirtQueueTrackerOps vhost_user_inflight_tracker_ops;

#define VHOST_USER_MEM_TABLE_MAX 8
#define VHOST_USER_MAX_FDS       8
/* Largest payload of any request we handle (GET/SET_CONFIG). */
#define VHOST_USER_MAX_PAYLOAD (sizeof(VhostUserConfigHdr) + VHOST_USER_MAX_CONFIG)

/* One ring as the device serves it (guest-physical ring addresses). */
typedef struct VhostUserRing {
    unsigned num;
    uint64_t desc_gpa, avail_gpa, used_gpa;
    uint16_t last_avail_idx; /* where to continue (SET_VRING_BASE or the last stop) */
    int kick_fd;             /* the front end's kick eventfd (the device reads it) */
    int call_fd;             /* the front end's call eventfd, or -1 (no interrupts) */
    /* This ring's part of the inflight region (SET_INFLIGHT_FD), or NULL. */
    VhostUserInflightQueue *inflight;
    unsigned inflight_desc_num; /* descriptors it has room for (>= num) */
} VhostUserRing;

/* What the device model provides. Context: the control thread. */
typedef struct VhostUserDevOps {
    /* Virtio feature bits offered (bit 30 is added by the protocol layer). */
    uint64_t (*features)(void *opaque);
    /* The front end's choice (a subset of features(), bit 30 removed). */
    bool (*set_features)(void *opaque, uint64_t features, GError **errp);
    /* Bytes of config space (<= VHOST_USER_MAX_CONFIG); fill @buf with all of it. */
    uint32_t (*config_size)(void *opaque);
    void (*get_config)(void *opaque, uint8_t *buf);
    /* A config write the protocol layer found in range; the device decides. */
    bool (*set_config)(void *opaque, uint32_t offset, const uint8_t *data, uint32_t len,
                       GError **errp);
    /* Serve rings 0..n-1 (fds borrowed until stop). */
    bool (*start)(void *opaque, const GuestMem *gm, const VhostUserRing *rings, unsigned n,
                  GError **errp);
    /* Stop serving and wait for in-flight requests; next avail index of each ring into @last_avail.
     */
    void (*stop)(void *opaque, uint16_t *last_avail, unsigned n);
    /* The connection ended: forget negotiated state (device reset). */
    void (*reset)(void *opaque);
    /*
     * Optional: the back-end channel (SET_BACKEND_REQ_FD). With @on, call
     * vhost_user_backend_read() whenever @fd is readable; without, stop
     * (called before @fd is closed). NULL: replies are never read.
     */
    void (*backend_watch)(void *opaque, int fd, bool on);
    /* Optional: call vhost_user_backend_timeout() in @timeout_ms (re-arms); 0 cancels. */
    void (*backend_timer)(void *opaque, int timeout_ms);
} VhostUserDevOps;

typedef struct VhostUser VhostUser;

/* @id names the export in messages (borrowed, must outlive the VhostUser). */
VhostUser *vhost_user_new(const char *id, unsigned num_queues, const VhostUserDevOps *ops,
                          void *opaque);
/* Detach (if connected), then free. NULL is ignored. */
void vhost_user_free(VhostUser *vu);

/* Serve the connected socket @fd (taken over; closed at detach). */
void vhost_user_attach(VhostUser *vu, int fd);
/* The connection's fd, or -1. */
int vhost_user_conn_fd(const VhostUser *vu);
/*
 * Read what the socket has without blocking and handle every complete
 * message. Returns false when the connection must end (EOF, socket error, or
 * a bad message, which is reported).
 */
bool vhost_user_conn_read(VhostUser *vu);
/* End the connection: stop the device, unmap memory, close every fd, reset. */
void vhost_user_detach(VhostUser *vu);

/*
 * The device's config space changed (block_resize): send
 * VHOST_USER_BACKEND_CONFIG_CHANGE_MSG on the back-end channel if the front
 * end negotiated BACKEND_REQ and CONFIG and gave the channel; with
 * REPLY_ACK, with NEED_REPLY, and the answer is awaited without blocking
 * (vhost_user_backend_read/timeout). A change while an answer is awaited is
 * sent once that answer is in. Never blocks: a channel the front end does
 * not read, closed or broken is closed with one line, the connection stays.
 * Returns true if a message was sent (or will be, after the awaited answer).
 */
bool vhost_user_config_changed(VhostUser *vu);
/*
 * The back-end channel is readable: take the awaited answer. Returns false
 * when the connection must end (anything but the one awaited reply arrived,
 * which is reported); the caller then calls vhost_user_detach().
 */
bool vhost_user_backend_read(VhostUser *vu);
/* No answer in time: reported, and the back-end channel is closed. */
void vhost_user_backend_timeout(VhostUser *vu);

/*
 * A ring broke (the virtqueue refused a descriptor chain): the device now
 * needs a reset. GET_STATUS reports DEVICE_NEEDS_RESET with the front end's
 * status until the front end resets the device (SET_STATUS 0, RESET_DEVICE,
 * RESET_OWNER, or the connection ends). Nothing is sent to the front end.
 * Context: any thread (the broken ring's owner); lock-free, no allocation.
 */
void vhost_user_set_needs_reset(VhostUser *vu);

/* Counters (tests, query-block-exports). */
typedef struct VhostUserStats {
    uint64_t messages;    /* handled */
    uint64_t connections; /* attached */
    uint64_t bad;         /* connections dropped for a bad message */
    unsigned running;     /* rings the device serves now */
} VhostUserStats;
void vhost_user_get_stats(const VhostUser *vu, VhostUserStats *st);

/* Name of request @req for messages ("VHOST_USER_SET_MEM_TABLE"), or NULL. */
const char *vhost_user_request_name(uint32_t req);

#endif /* VBLK_VHOST_USER_INT_H */
