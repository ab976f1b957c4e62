/*
 * The debug-state registry (util/debug-state.h): dumpers run in order, each
 * output ends in a newline, the dump goes through error_report() line by line,
 * and unregistering waits for a dump in progress.
 */
#include <glib.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/debug-state.h"
#include "util/error-report.h"

static void dump_text(GString *out, void *opaque)
{
    g_string_append(out, opaque);
}

static void test_order_and_dump(void)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    char *text;

    debug_state_register(dump_text, "first line\n");
    debug_state_register(dump_text, "second, no newline");
    debug_state_register(dump_text, "third a\nthird b\n");
    text = debug_state_collect();
    g_assert_cmpstr(text, ==, "first line\nsecond, no newline\nthird a\nthird b\n");
    g_free(text);

    error_report_set_stream(f);
    debug_state_dump();
    error_report_set_stream(NULL);
    fclose(f);
    g_assert_cmpstr(buf, ==,
                    "vblk: debug-state: begin\n"
                    "vblk: debug-state: first line\n"
                    "vblk: debug-state: second, no newline\n"
                    "vblk: debug-state: third a\n"
                    "vblk: debug-state: third b\n"
                    "vblk: debug-state: end\n");
    free(buf);

    debug_state_unregister(dump_text, "second, no newline");
    debug_state_unregister(dump_text, "never registered");
    text = debug_state_collect();
    g_assert_cmpstr(text, ==, "first line\nthird a\nthird b\n");
    g_free(text);
    debug_state_unregister(dump_text, "first line\n");
    debug_state_unregister(dump_text, "third a\nthird b\n");
    text = debug_state_collect();
    g_assert_cmpstr(text, ==, "");
    g_free(text);
}

typedef struct Slow {
    int state; /* 0 idle, 1 dumping, 2 dumped */
    bool freed;
} Slow;

static void dump_slow(GString *out, void *opaque)
{
    Slow *s = opaque;

    g_assert_false(__atomic_load_n(&s->freed, __ATOMIC_ACQUIRE));
    __atomic_store_n(&s->state, 1, __ATOMIC_RELEASE);
    g_usleep(200 * 1000);
    g_assert_false(__atomic_load_n(&s->freed, __ATOMIC_ACQUIRE));
    g_string_append(out, "slow\n");
    __atomic_store_n(&s->state, 2, __ATOMIC_RELEASE);
}

static gpointer collect_thread(gpointer opaque)
{
    return debug_state_collect();
}

/* An object may be freed once its dumper is unregistered, even with a dump under way. */
static void test_unregister_waits(void)
{
    Slow s = {0};
    GThread *th;
    char *text;

    debug_state_register(dump_slow, &s);
    th = g_thread_new("collect", collect_thread, NULL);
    while (__atomic_load_n(&s.state, __ATOMIC_ACQUIRE) == 0) {
        g_usleep(1000);
    }
    debug_state_unregister(dump_slow, &s);
    g_assert_cmpint(__atomic_load_n(&s.state, __ATOMIC_ACQUIRE), ==, 2);
    __atomic_store_n(&s.freed, true, __ATOMIC_RELEASE);
    text = g_thread_join(th);
    g_assert_cmpstr(text, ==, "slow\n");
    g_free(text);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/util/debug-state/order-and-dump", test_order_and_dump);
    g_test_add_func("/util/debug-state/unregister-waits", test_unregister_waits);
    return g_test_run();
}
