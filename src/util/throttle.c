/*
 * Throttling arithmetic: six leaky buckets (bytes and operations; total,
 * read, write). A bucket's level rises by the size of each dispatched
 * request and drains continuously at `avg` units per second. A request may
 * go while every bucket of its direction is at or below its capacity:
 *   - without a burst rate, capacity is avg/10 (a tenth of a second of
 *     slack, so a guest doing steady I/O is not throttled on every request);
 *   - with `max`, capacity is max * max-length: a burst at up to `max`
 *     units/s lasting `max-length` seconds, enforced by a second level that
 *     drains at `max` with a capacity of max/10.
 * The wait is the time until the fullest bucket drains back to capacity.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "util/block-throttle.h"

static const char *const bucket_names[THROTTLE_BUCKET__MAX] = {
    [THROTTLE_BPS_TOTAL] = "bps-total", [THROTTLE_BPS_READ] = "bps-read",
    [THROTTLE_BPS_WRITE] = "bps-write", [THROTTLE_OPS_TOTAL] = "iops-total",
    [THROTTLE_OPS_READ] = "iops-read",  [THROTTLE_OPS_WRITE] = "iops-write",
};

/* Context: any thread */
void throttle_limits_init(ThrottleLimits *l)
{
    memset(l, 0, sizeof(*l));
    for (int i = 0; i < THROTTLE_BUCKET__MAX; i++) {
        l->b[i].burst_length = 1;
    }
}

/* Context: any thread */
bool throttle_limits_enabled(const ThrottleLimits *l)
{
    for (int i = 0; i < THROTTLE_BUCKET__MAX; i++) {
        if (l->b[i].avg) {
            return true;
        }
    }
    return false;
}

static bool total_and_rw(const ThrottleLimits *l, int total, bool use_max)
{
    const ThrottleBucketLimit *b = l->b;

    if (use_max) {
        return b[total].max && (b[total + 1].max || b[total + 2].max);
    }
    return b[total].avg && (b[total + 1].avg || b[total + 2].avg);
}

/* Context: any thread */
bool throttle_limits_validate(const ThrottleLimits *l, GError **errp)
{
    if (total_and_rw(l, THROTTLE_BPS_TOTAL, false) || total_and_rw(l, THROTTLE_OPS_TOTAL, false) ||
        total_and_rw(l, THROTTLE_BPS_TOTAL, true) || total_and_rw(l, THROTTLE_OPS_TOTAL, true)) {
        g_set_error(errp, THROTTLE_ERROR, EINVAL,
                    "bps/iops/max total values and read/write values cannot be used at the same "
                    "time");
        return false;
    }
    if (l->iops_size && !l->b[THROTTLE_OPS_TOTAL].avg && !l->b[THROTTLE_OPS_READ].avg &&
        !l->b[THROTTLE_OPS_WRITE].avg) {
        g_set_error(errp, THROTTLE_ERROR, EINVAL, "iops size requires an iops value to be set");
        return false;
    }
    for (int i = 0; i < THROTTLE_BUCKET__MAX; i++) {
        const ThrottleBucketLimit *b = &l->b[i];
        const char *msg = NULL;

        if (b->avg > THROTTLE_VALUE_MAX || b->max > THROTTLE_VALUE_MAX) {
            g_set_error(errp, THROTTLE_ERROR, EINVAL,
                        "bps/iops/max values must be within [0, %llu]", THROTTLE_VALUE_MAX);
            return false;
        }
        if (!b->burst_length) {
            msg = "the burst length cannot be 0";
        } else if (b->burst_length > 1 && !b->max) {
            msg = "burst length set without burst rate";
        } else if (b->max && b->burst_length > THROTTLE_VALUE_MAX / b->max) {
            msg = "burst length too high for this burst rate";
        } else if (b->max && !b->avg) {
            msg = "bps_max/iops_max require corresponding bps/iops values";
        } else if (b->max && b->max < b->avg) {
            msg = "bps_max/iops_max cannot be lower than bps/iops";
        }
        if (msg) {
            g_set_error(errp, THROTTLE_ERROR, EINVAL, "%s", msg);
            return false;
        }
    }
    return true;
}

static bool parse_u64(const char *v, uint64_t *out)
{
    char *end = NULL;

    if (!*v || *v == '-' || g_ascii_isspace(*v)) {
        return false;
    }
    errno = 0;
    *out = g_ascii_strtoull(v, &end, 10);
    return !errno && end && !*end;
}

/* Context: any thread */
bool throttle_limits_set_option(ThrottleLimits *l, const char *key, const char *value, bool *known,
                                GError **errp)
{
    uint64_t v;

    *known = true;
    if (!parse_u64(value, &v)) {
        g_set_error(errp, THROTTLE_ERROR, EINVAL, "Parameter 'throttling.%s' expects a number",
                    key);
        return false;
    }
    if (!strcmp(key, "iops-size")) {
        l->iops_size = v;
        return true;
    }
    for (int i = 0; i < THROTTLE_BUCKET__MAX; i++) {
        size_t n = strlen(bucket_names[i]);

        if (strncmp(key, bucket_names[i], n) != 0) {
            continue;
        }
        if (!key[n]) {
            l->b[i].avg = v;
            return true;
        }
        if (!strcmp(key + n, "-max")) {
            l->b[i].max = v;
            return true;
        }
        if (!strcmp(key + n, "-max-length")) {
            if (v > UINT32_MAX) {
                g_set_error(errp, THROTTLE_ERROR, EINVAL,
                            "%s-max-length value must be in the range [0, %u]", bucket_names[i],
                            UINT32_MAX);
                return false;
            }
            l->b[i].burst_length = v;
            return true;
        }
    }
    *known = false;
    return true;
}

/* ---- state ---- */

/* Context: owner thread */
void throttle_state_config(ThrottleState *ts, const ThrottleLimits *l, int64_t now)
{
    ThrottleLimits copy = *l; /* @l may point into @ts */

    memset(ts, 0, sizeof(*ts));
    ts->limits = copy;
    ts->last_leak_ns = now;
}

static void throttle_leak(ThrottleState *ts, int64_t now)
{
    double dt = (double)(now - ts->last_leak_ns) / 1e9;

    if (dt <= 0) {
        return;
    }
    ts->last_leak_ns = now;
    for (int i = 0; i < THROTTLE_BUCKET__MAX; i++) {
        const ThrottleBucketLimit *b = &ts->limits.b[i];

        ts->level[i] = MAX(0.0, ts->level[i] - (double)b->avg * dt);
        ts->burst_level[i] = MAX(0.0, ts->burst_level[i] - (double)b->max * dt);
    }
}

/* Seconds until bucket @i may accept a request, 0 if now. */
static double bucket_wait(ThrottleState *ts, int i)
{
    const ThrottleBucketLimit *b = &ts->limits.b[i];
    double cap, extra;

    if (!b->avg) {
        return 0;
    }
    cap = b->max ? (double)b->max * (double)b->burst_length : (double)b->avg / 10;
    extra = ts->level[i] - cap;
    if (extra > 0) {
        return extra / (double)b->avg;
    }
    if (b->burst_length > 1 && b->max) {
        extra = ts->burst_level[i] - (double)b->max / 10;
        if (extra > 0) {
            return extra / (double)b->max;
        }
    }
    return 0;
}

static void direction_buckets(bool is_write, int out[4])
{
    out[0] = THROTTLE_BPS_TOTAL;
    out[1] = is_write ? THROTTLE_BPS_WRITE : THROTTLE_BPS_READ;
    out[2] = THROTTLE_OPS_TOTAL;
    out[3] = is_write ? THROTTLE_OPS_WRITE : THROTTLE_OPS_READ;
}

/* Context: owner thread */
int64_t throttle_wait_ns(ThrottleState *ts, bool is_write, int64_t now)
{
    int idx[4];
    double wait = 0;

    throttle_leak(ts, now);
    direction_buckets(is_write, idx);
    for (int i = 0; i < 4; i++) {
        wait = MAX(wait, bucket_wait(ts, idx[i]));
    }
    return wait > 0 ? (int64_t)ceil(wait * 1e9) : 0;
}

/* Context: owner thread */
void throttle_account(ThrottleState *ts, bool is_write, uint64_t bytes)
{
    int idx[4];
    double units = 1;

    if (ts->limits.iops_size && bytes > ts->limits.iops_size) {
        units = (double)bytes / (double)ts->limits.iops_size;
    }
    direction_buckets(is_write, idx);
    for (int i = 0; i < 4; i++) {
        double add = i < 2 ? (double)bytes : units;

        ts->level[idx[i]] += add;
        if (ts->limits.b[idx[i]].burst_length > 1) {
            ts->burst_level[idx[i]] += add;
        }
    }
}
