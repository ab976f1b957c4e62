/*
 * The registry of state dumpers for hang diagnosis; see util/debug-state.h.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <pthread.h>
#include <string.h>

#include "util/debug-state.h"
#include "util/error-report.h"

typedef struct Dumper {
    DebugStateFn *fn;
    void *opaque;
} Dumper;

static pthread_mutex_t dumpers_lock = PTHREAD_MUTEX_INITIALIZER;
static GArray *dumpers; /* Dumper, under dumpers_lock */

/* Context: any thread */
void debug_state_register(DebugStateFn *fn, void *opaque)
{
    Dumper d = {.fn = fn, .opaque = opaque};

    pthread_mutex_lock(&dumpers_lock);
    if (!dumpers) {
        dumpers = g_array_new(FALSE, FALSE, sizeof(Dumper));
    }
    g_array_append_val(dumpers, d);
    pthread_mutex_unlock(&dumpers_lock);
}

/* Context: any thread but a dumper's own */
void debug_state_unregister(DebugStateFn *fn, void *opaque)
{
    pthread_mutex_lock(&dumpers_lock);
    for (guint i = dumpers ? dumpers->len : 0; i > 0; i--) {
        Dumper *d = &g_array_index(dumpers, Dumper, i - 1);

        if (d->fn == fn && d->opaque == opaque) {
            g_array_remove_index(dumpers, i - 1);
        }
    }
    if (dumpers && dumpers->len == 0) {
        g_array_free(dumpers, TRUE);
        dumpers = NULL;
    }
    pthread_mutex_unlock(&dumpers_lock);
}

/* Context: any thread */
char *debug_state_collect(void)
{
    GString *out = g_string_new(NULL);

    /* Held while the dumpers run: unregistering waits, so no object is freed under one. */
    pthread_mutex_lock(&dumpers_lock);
    for (guint i = 0; dumpers && i < dumpers->len; i++) {
        Dumper *d = &g_array_index(dumpers, Dumper, i);

        d->fn(out, d->opaque);
        if (out->len && out->str[out->len - 1] != '\n') {
            g_string_append_c(out, '\n');
        }
    }
    pthread_mutex_unlock(&dumpers_lock);
    return g_string_free(out, FALSE);
}

/* Context: any thread */
void debug_state_dump(void)
{
    g_autofree char *text = debug_state_collect();
    char *line = text;

    error_report("debug-state: begin");
    while (line && *line) {
        char *nl = strchr(line, '\n');

        *nl = '\0';
        error_report("debug-state: %s", line);
        line = nl + 1;
    }
    error_report("debug-state: end");
}
