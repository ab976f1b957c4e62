/*
 * The named iothreads (include/event/iothread-registry.h).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stddef.h>
#include <string.h>

#include <gio/gio.h>

#include "event/iothread-registry.h"
#include "iothread-qmp.h"

typedef struct RegisteredIOThread {
    char *id;
    IOThread *thread;
    IOThreadParams params;
} RegisteredIOThread;

static GPtrArray *registry; /* RegisteredIOThread*, in start order */

static void registered_free(gpointer p)
{
    RegisteredIOThread *r = p;

    iothread_free(r->thread);
    g_free(r->id);
    g_free(r);
}

/* Context: main thread */
void iothread_params_init(IOThreadParams *p)
{
    *p = (IOThreadParams){.poll_max_ns = IOTHREAD_POLL_MAX_NS_DEFAULT,
                          .x_submit_early = IOTHREAD_SUBMIT_EARLY_DEFAULT,
                          .x_complete_hold_ns = IOTHREAD_COMPLETE_HOLD_NS_DEFAULT,
                          .x_complete_hold_depth = IOTHREAD_COMPLETE_HOLD_DEPTH_DEFAULT};
}

/* Context: any thread */
bool iothread_param_check(const char *key, int64_t v, GError **errp)
{
    int64_t min = 0, max = INT64_MAX;

    if (!strcmp(key, "x-complete-hold-ns")) {
        max = IOTHREAD_COMPLETE_HOLD_NS_MAX;
    } else if (!strcmp(key, "x-complete-hold-depth")) {
        min = 1;
        max = IOTHREAD_COMPLETE_HOLD_DEPTH_MAX;
    }
    if (v < min || v > max) {
        g_set_error(errp, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                    "%s value must be in range [%" PRId64 ", %" PRId64 "]", key, min, max);
        return false;
    }
    return true;
}

static const struct {
    const char *key;
    size_t offset;
} iothread_int_props[] = {
    {"poll-max-ns", offsetof(IOThreadParams, poll_max_ns)},
    {"poll-grow", offsetof(IOThreadParams, poll_grow)},
    {"poll-shrink", offsetof(IOThreadParams, poll_shrink)},
    {"aio-max-batch", offsetof(IOThreadParams, aio_max_batch)},
    {"x-submit-early", offsetof(IOThreadParams, x_submit_early)},
    {"x-complete-hold-ns", offsetof(IOThreadParams, x_complete_hold_ns)},
    {"x-complete-hold-depth", offsetof(IOThreadParams, x_complete_hold_depth)},
};

/* Context: any thread (the command-line parsers) */
int iothread_param_set(IOThreadParams *p, const char *key, const char *value, GError **errp)
{
    for (size_t i = 0; i < G_N_ELEMENTS(iothread_int_props); i++) {
        char *end;
        int64_t v;

        if (strcmp(key, iothread_int_props[i].key)) {
            continue;
        }
        errno = 0;
        v = g_ascii_strtoll(value, &end, 0);
        if (!*value || *end || errno) {
            g_set_error(errp, G_IO_ERROR, G_IO_ERROR_INVALID_ARGUMENT,
                        "Parameter '%s' expects an int64 value", key);
            return 0;
        }
        if (!iothread_param_check(key, v, errp)) {
            return 0;
        }
        *(int64_t *)(void *)((char *)p + iothread_int_props[i].offset) = v;
        return 1;
    }
    return -1;
}

/* Context: main thread */
IOThread *iothread_registry_get(const char *id, const IOThreadParams *params, GError **errp)
{
    RegisteredIOThread *r;
    IOThread *t;

    for (guint i = 0; registry && i < registry->len; i++) {
        r = registry->pdata[i];
        if (!strcmp(r->id, id)) {
            return r->thread;
        }
    }
    t = iothread_new(id, errp);
    if (!t) {
        return NULL;
    }
    r = g_new0(RegisteredIOThread, 1);
    r->id = g_strdup(id);
    r->thread = t;
    if (params) {
        r->params = *params;
    } else {
        iothread_params_init(&r->params);
    }
    event_loop_set_poll_params(iothread_get_loop(t), r->params.poll_max_ns, r->params.poll_grow,
                               r->params.poll_shrink);
    iothread_set_aio_max_batch(t, (unsigned)MIN(r->params.aio_max_batch, (int64_t)UINT_MAX));
    iothread_set_submit_early(t, (unsigned)MIN(r->params.x_submit_early, (int64_t)UINT_MAX));
    /* Checked by the parsers (iothread_param_check); the dataplane clamps again. */
    iothread_set_complete_hold(t, r->params.x_complete_hold_ns,
                               (unsigned)MIN(r->params.x_complete_hold_depth, (int64_t)UINT_MAX));
    if (!registry) {
        registry = g_ptr_array_new_with_free_func(registered_free);
    }
    g_ptr_array_add(registry, r);
    iothread_qmp_register();
    return t;
}

/* Context: main thread */
void iothread_registry_foreach(IOThreadRegistryFn *fn, void *opaque)
{
    for (guint i = 0; registry && i < registry->len; i++) {
        RegisteredIOThread *r = registry->pdata[i];

        fn(r->id, r->thread, &r->params, opaque);
    }
}

/* Context: main thread */
unsigned iothread_registry_count(void)
{
    return registry ? registry->len : 0;
}

/* Context: main thread */
void iothread_registry_clear(void)
{
    g_clear_pointer(&registry, g_ptr_array_unref);
}
