/*
 * I/O throttling limits, QEMU's throttling.* / block_set_io_throttle
 * parameters (without throttle groups).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_BLOCK_THROTTLE_H
#define VBLK_BLOCK_THROTTLE_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

/* Same domain as the block layer's BLOCK_ERROR: validation errors reach QMP unchanged. */
#define THROTTLE_ERROR g_quark_from_static_string("vblk-block-error")

typedef enum ThrottleBucketType {
    THROTTLE_BPS_TOTAL,
    THROTTLE_BPS_READ,
    THROTTLE_BPS_WRITE,
    THROTTLE_OPS_TOTAL,
    THROTTLE_OPS_READ,
    THROTTLE_OPS_WRITE,
    THROTTLE_BUCKET__MAX,
} ThrottleBucketType;

/* QEMU's THROTTLE_VALUE_MAX. */
#define THROTTLE_VALUE_MAX 1000000000000000ULL

typedef struct ThrottleBucketLimit {
    uint64_t avg;          /* units per second, 0 = unlimited */
    uint64_t max;          /* burst rate, 0 = none */
    uint64_t burst_length; /* seconds the burst may last (>= 1) */
} ThrottleBucketLimit;

typedef struct ThrottleLimits {
    ThrottleBucketLimit b[THROTTLE_BUCKET__MAX];
    uint64_t iops_size; /* bytes; bigger requests count as several ops */
} ThrottleLimits;

/* All limits off, burst lengths 1. Context: any thread. */
void throttle_limits_init(ThrottleLimits *l);
/* True if any avg limit is set. Context: any thread. */
bool throttle_limits_enabled(const ThrottleLimits *l);
/* QEMU's throttle_is_valid() checks and messages. Context: any thread. */
bool throttle_limits_validate(const ThrottleLimits *l, GError **errp);
/*
 * Apply one option: @key without the "throttling." prefix, e.g. "iops-total",
 * "bps-read-max", "iops-write-max-length", "iops-size". Returns false with
 * @errp on a bad value; sets *@known=false for an unknown key.
 * Context: any thread.
 */
bool throttle_limits_set_option(ThrottleLimits *l, const char *key, const char *value, bool *known,
                                GError **errp);

/*
 * The bucket state (throttle.c): pure arithmetic, no lock, no allocation.
 * One owner thread uses a ThrottleState at a time: the block layer's loop for
 * x-data-plane=off, the dataplane's iothread for x-data-plane=on. It moves
 * between them (levels included) with the queues at every path switch, so a
 * switch gives no free tokens.
 */
typedef struct ThrottleState {
    ThrottleLimits limits;
    double level[THROTTLE_BUCKET__MAX];
    double burst_level[THROTTLE_BUCKET__MAX];
    int64_t last_leak_ns;
} ThrottleState;

/* New limits, empty buckets (QEMU's throttle_config()). Context: owner thread */
void throttle_state_config(ThrottleState *ts, const ThrottleLimits *l, int64_t now);
/* ns to wait before a request of this direction may go (0 = now). Context: owner thread */
int64_t throttle_wait_ns(ThrottleState *ts, bool is_write, int64_t now);
/* Charge a dispatched request of @bytes. Context: owner thread */
void throttle_account(ThrottleState *ts, bool is_write, uint64_t bytes);

#endif /* VBLK_BLOCK_THROTTLE_H */
