/*
 * src/event/iothread-registry.c and iothread-qmp.c: named iothreads are
 * started once with their polling parameters, shared by id, listed in start
 * order, and query-iothreads reports them over a real QMP socket.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <json-glib/json-glib.h>
#include <unistd.h>

#include "../monitor/qmp-test-util.h"
#include "event/iothread-registry.h"

typedef struct Seen {
    GPtrArray *ids;
    IOThreadParams params[4];
} Seen;

static void collect(const char *id, IOThread *t, const IOThreadParams *p, void *opaque)
{
    Seen *s = opaque;

    g_assert_nonnull(t);
    g_assert_cmpuint(s->ids->len, <, G_N_ELEMENTS(s->params));
    s->params[s->ids->len] = *p;
    g_ptr_array_add(s->ids, g_strdup(id));
}

/* query-iothreads' "return" array, parsed. */
static JsonArray *query_iothreads(TClient *c, JsonParser *parser)
{
    g_autofree char *line = tc_cmd(c, "{\"execute\": \"query-iothreads\"}");
    JsonObject *o;

    g_assert_nonnull(line);
    g_assert_true(json_parser_load_from_data(parser, line, -1, NULL));
    o = json_node_get_object(json_parser_get_root(parser));
    g_assert_true(json_object_has_member(o, "return"));
    return json_object_get_array_member(o, "return");
}

static void test_registry(void)
{
    g_autoptr(JsonParser) parser = json_parser_new();
    IOThreadParams p = {.poll_max_ns = 1000,
                        .poll_grow = 3,
                        .poll_shrink = 4,
                        .aio_max_batch = 8,
                        .x_submit_early = 2,
                        .x_complete_hold_ns = 50000,
                        .x_complete_hold_depth = 24};
    Seen seen = {.ids = g_ptr_array_new_with_free_func(g_free)};
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    IOThread *a, *b;
    JsonArray *arr;
    JsonObject *o;

    tc_negotiate(c);
    g_assert_cmpuint(iothread_registry_count(), ==, 0);

    a = iothread_registry_get("io0", &p, NULL);
    g_assert_nonnull(a);
    /* The same id is the same thread, its parameters those it started with. */
    g_assert_true(iothread_registry_get("io0", NULL, NULL) == a);
    b = iothread_registry_get("disk0-dataplane", NULL, NULL);
    g_assert_nonnull(b);
    g_assert_true(b != a);
    g_assert_cmpuint(iothread_registry_count(), ==, 2);

    iothread_registry_foreach(collect, &seen);
    g_assert_cmpuint(seen.ids->len, ==, 2);
    g_assert_cmpstr(seen.ids->pdata[0], ==, "io0");
    g_assert_cmpstr(seen.ids->pdata[1], ==, "disk0-dataplane");
    g_assert_cmpint(seen.params[0].poll_max_ns, ==, 1000);
    g_assert_cmpint(seen.params[0].poll_grow, ==, 3);
    g_assert_cmpint(seen.params[0].poll_shrink, ==, 4);
    g_assert_cmpint(seen.params[0].aio_max_batch, ==, 8);
    /* what a dataplane created on the thread submits per syscall (0: the engine's 32) */
    g_assert_cmpuint(iothread_get_aio_max_batch(a), ==, 8);
    g_assert_cmpuint(iothread_get_aio_max_batch(b), ==, 0);
    g_assert_cmpuint(iothread_get_submit_early(a), ==, 2);
    g_assert_cmpuint(iothread_get_submit_early(b), ==, IOTHREAD_SUBMIT_EARLY_DEFAULT);
    {
        /* the completion hold a dataplane created on it gets: off by default */
        unsigned depth;

        g_assert_cmpint(iothread_get_complete_hold(a, &depth), ==, 50000);
        g_assert_cmpuint(depth, ==, 24);
        g_assert_cmpint(iothread_get_complete_hold(b, &depth), ==, 0);
        g_assert_cmpuint(depth, ==, IOTHREAD_COMPLETE_HOLD_DEPTH_DEFAULT);
    }
    g_assert_cmpint(seen.params[1].poll_max_ns, ==, IOTHREAD_POLL_MAX_NS_DEFAULT);
    g_assert_cmpint(seen.params[1].poll_grow, ==, 0);
    g_assert_cmpint(seen.params[1].poll_shrink, ==, 0);

    /* query-iothreads, registered with the first iothread: QEMU's fields. */
    while (iothread_get_thread_id(a) == 0) {
        g_usleep(1000); /* the thread publishes its tid once it runs */
    }
    arr = query_iothreads(c, parser);
    g_assert_cmpuint(json_array_get_length(arr), ==, 2);
    o = json_array_get_object_element(arr, 0);
    g_assert_cmpstr(json_object_get_string_member(o, "id"), ==, "io0");
    g_assert_cmpint(json_object_get_int_member(o, "thread-id"), ==, iothread_get_thread_id(a));
    g_assert_cmpint(json_object_get_int_member(o, "thread-id"), !=, getpid());
    g_assert_cmpint(json_object_get_int_member(o, "poll-max-ns"), ==, 1000);
    g_assert_cmpint(json_object_get_int_member(o, "poll-grow"), ==, 3);
    g_assert_cmpint(json_object_get_int_member(o, "poll-shrink"), ==, 4);
    g_assert_cmpint(json_object_get_int_member(o, "aio-max-batch"), ==, 8);
    g_assert_cmpint(json_object_get_int_member(o, "x-submit-early"), ==, 2);
    g_assert_cmpint(json_object_get_int_member(o, "x-complete-hold-ns"), ==, 50000);
    g_assert_cmpint(json_object_get_int_member(o, "x-complete-hold-depth"), ==, 24);
    /* vblk's own per-iothread settings and figures, x- prefixed beside QEMU's six. */
    g_assert_cmpuint(json_object_get_size(o), ==, 15);
    g_assert_cmpint(json_object_get_int_member(o, "x-loop-iterations"), >, 0);
    g_assert_cmpint(json_object_get_int_member(o, "x-blocking-waits"), >=, 0);
    /* every blocking wait is an epoll_wait (read a moment apart: one may be in between) */
    g_assert_cmpint(json_object_get_int_member(o, "x-epoll-waits"), >=,
                    json_object_get_int_member(o, "x-blocking-waits") - 1);
    g_assert_true(json_object_has_member(o, "x-poll-successes"));
    g_assert_true(json_object_has_member(o, "x-bh-runs"));
    g_assert_true(json_object_has_member(o, "x-poll-ns"));
    o = json_array_get_object_element(arr, 1);
    g_assert_cmpstr(json_object_get_string_member(o, "id"), ==, "disk0-dataplane");
    g_assert_cmpint(json_object_get_int_member(o, "poll-max-ns"), ==, 32768);
    g_assert_cmpint(json_object_get_int_member(o, "aio-max-batch"), ==, 0); /* QEMU's default */
    g_assert_cmpint(json_object_get_int_member(o, "x-submit-early"), ==, IOTHREAD_SUBMIT_EARLY_DEFAULT);
    g_assert_cmpint(json_object_get_int_member(o, "x-complete-hold-ns"), ==, 0);
    g_assert_cmpint(json_object_get_int_member(o, "x-complete-hold-depth"), ==,
                    IOTHREAD_COMPLETE_HOLD_DEPTH_DEFAULT);

    /* Teardown stops them all; the command stays and lists nothing. */
    iothread_registry_clear();
    g_assert_cmpuint(iothread_registry_count(), ==, 0);
    arr = query_iothreads(c, parser);
    g_assert_cmpuint(json_array_get_length(arr), ==, 0);

    g_ptr_array_free(seen.ids, TRUE);
    tc_close(c);
    test_teardown(mon, path);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/event/iothread-registry", test_registry);
    return g_test_run();
}
