/*
 * The process's named iothreads: each `-object iothread,id=X` that a device
 * uses, and the thread of its own that a device without iothread= gets.
 * Devices naming the same id share one IOThread. query-iothreads lists them
 * (src/event/iothread-qmp.c).
 *
 * Context: main thread (BQL held) for all of it.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_EVENT_IOTHREAD_REGISTRY_H
#define VBLK_EVENT_IOTHREAD_REGISTRY_H

#include <glib.h>
#include <stdint.h>

#include "event/event.h"

/* QEMU's -object iothread default: adaptive polling up to 32 us. */
#define IOTHREAD_POLL_MAX_NS_DEFAULT 32768
/*
 * vblk's x-submit-early default: while fewer than 4 requests are in the
 * kernel, a dataplane submits each request as it pops it, so that an idle
 * disk starts on a pass before the rest of it is popped (docs/benchmarks.md,
 * 2026-12-05: +15% at QD32 on a file, the Xeon host).
 */
#define IOTHREAD_SUBMIT_EARLY_DEFAULT 4
/*
 * vblk's completion hold: off by default (x-complete-hold-ns=0); with it on,
 * it applies while at least 16 requests are in flight.
 */
#define IOTHREAD_COMPLETE_HOLD_NS_DEFAULT    0
#define IOTHREAD_COMPLETE_HOLD_DEPTH_DEFAULT 16
#define IOTHREAD_COMPLETE_HOLD_NS_MAX        1000000
#define IOTHREAD_COMPLETE_HOLD_DEPTH_MAX     4096

/* -object iothread's properties: QEMU's names and meaning, and vblk's x-submit-early. */
typedef struct IOThreadParams {
    int64_t poll_max_ns; /* 0: no polling */
    int64_t poll_grow;   /* 0: the default factor (2) */
    int64_t poll_shrink; /* 0: back to 0 at once */
    int64_t aio_max_batch; /* requests per submit syscall of the dataplanes it runs; 0: the engine's (32) */
    int64_t x_submit_early; /* vblk's: submit at once while fewer are in the kernel (0: off) */
    int64_t x_complete_hold_ns;    /* vblk's: completion hold (0: off), at most 1 ms */
    int64_t x_complete_hold_depth; /* vblk's: ... while this many are in flight (1..4096) */
} IOThreadParams;

/*
 * QEMU's defaults: poll-max-ns=32768, poll-grow=0, poll-shrink=0,
 * aio-max-batch=0; vblk's x-submit-early=4, x-complete-hold-ns=0,
 * x-complete-hold-depth=16.
 */
void iothread_params_init(IOThreadParams *p);
/*
 * The range check of one parsed -object iothread value, for every front end
 * (vblk's -object, vblk-storage-daemon's --object): false and @errp
 * ("<key> value must be in range [min, max]") when @v is outside its
 * property's range; true for keys without one.
 */
bool iothread_param_check(const char *key, int64_t v, GError **errp);
/*
 * One integer property of -object iothread as text, for every front end:
 * sets the field of @p that @key names from @value (an integer in any of
 * QEMU's bases, then iothread_param_check()). Returns 1 when set; 0 with
 * @errp ("Parameter '<key>' expects an int64 value" or the range message)
 * when @value is not a valid value; -1 when @key is no integer property of
 * an iothread (the caller's "id", or its invalid-parameter error).
 */
int iothread_param_set(IOThreadParams *p, const char *key, const char *value, GError **errp);

/*
 * The iothread named @id: started with @params (NULL: the defaults) on the
 * first call, the same thread (its parameters unchanged) afterwards. The
 * first iothread also registers query-iothreads (QMP must be set up).
 * NULL with @errp set if the thread cannot start.
 */
IOThread *iothread_registry_get(const char *id, const IOThreadParams *params, GError **errp);

typedef void IOThreadRegistryFn(const char *id, IOThread *t, const IOThreadParams *params,
                                void *opaque);
/* Every iothread started so far, in the order they started. */
void iothread_registry_foreach(IOThreadRegistryFn *fn, void *opaque);
/* How many there are. */
unsigned iothread_registry_count(void);
/* Stop and free them all (machine teardown); the registry is empty again. */
void iothread_registry_clear(void);

#endif /* VBLK_EVENT_IOTHREAD_REGISTRY_H */
