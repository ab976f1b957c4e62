/*
 * src/event/iothread-registry.c and iothread-qmp.c: named iothreads are
 * started once with their polling parameters, shared by id, listed in start
 * order, and query-iothreads reports them over a real QMP socket.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <json-glib/json-glib.h>
#include <stdint.h>
#include <string.h>
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

/* The field of @p that @key names (written out here, apart from the code's table). */
static int64_t param_field(const IOThreadParams *p, const char *key)
{
    if (!strcmp(key, "poll-max-ns")) {
        return p->poll_max_ns;
    } else if (!strcmp(key, "poll-grow")) {
        return p->poll_grow;
    } else if (!strcmp(key, "poll-shrink")) {
        return p->poll_shrink;
    } else if (!strcmp(key, "aio-max-batch")) {
        return p->aio_max_batch;
    } else if (!strcmp(key, "x-submit-early")) {
        return p->x_submit_early;
    } else if (!strcmp(key, "x-complete-hold-ns")) {
        return p->x_complete_hold_ns;
    }
    g_assert_cmpstr(key, ==, "x-complete-hold-depth");
    return p->x_complete_hold_depth;
}

/*
 * iothread_param_set(): the one text-to-property step of both command lines
 * (vblk's -object and vblk-storage-daemon's --object).
 */
static void test_param_set(void)
{
    static const struct {
        const char *key, *value;
        int ret;
        int64_t want;    /* ret 1: the field's new value */
        const char *msg; /* ret 0: the error */
    } cases[] = {
        {"poll-max-ns", "0", 1, 0, NULL},
        {"poll-max-ns", "0x8000", 1, 32768, NULL}, /* QEMU's bases */
        {"poll-grow", "010", 1, 8, NULL},
        {"aio-max-batch", "9223372036854775807", 1, INT64_MAX, NULL},
        {"x-complete-hold-depth", "4096", 1, 4096, NULL},
        {"poll-max-ns", "", 0, 0, "Parameter 'poll-max-ns' expects an int64 value"},
        {"poll-shrink", "1.5", 0, 0, "Parameter 'poll-shrink' expects an int64 value"},
        {"x-submit-early", "4k", 0, 0, "Parameter 'x-submit-early' expects an int64 value"},
        {"aio-max-batch", "9223372036854775808", 0, 0,
         "Parameter 'aio-max-batch' expects an int64 value"},
        {"poll-max-ns", "-1", 0, 0, "poll-max-ns value must be in range [0, 9223372036854775807]"},
        {"x-complete-hold-depth", "0", 0, 0,
         "x-complete-hold-depth value must be in range [1, 4096]"},
        {"x-complete-hold-ns", "1000001", 0, 0,
         "x-complete-hold-ns value must be in range [0, 1000000]"},
        {"id", "io0", -1, 0, NULL},
        {"poll_max_ns", "1", -1, 0, NULL},
    };

    for (size_t i = 0; i < G_N_ELEMENTS(cases); i++) {
        IOThreadParams p, before;
        g_autoptr(GError) err = NULL;
        int r;

        iothread_params_init(&p);
        before = p;
        r = iothread_param_set(&p, cases[i].key, cases[i].value, &err);
        g_assert_cmpint(r, ==, cases[i].ret);
        if (r == 1) {
            g_assert_no_error(err);
            g_assert_cmpint(param_field(&p, cases[i].key), ==, cases[i].want);
        } else if (r == 0) {
            g_assert_nonnull(err);
            g_assert_cmpstr(err->message, ==, cases[i].msg);
        } else {
            g_assert_no_error(err);
        }
        if (r != 1) {
            g_assert_cmpmem(&p, sizeof(p), &before, sizeof(before)); /* untouched */
        }
    }
    /* Each key lands in its own field. */
    {
        IOThreadParams p;

        iothread_params_init(&p);
        g_assert_cmpint(iothread_param_set(&p, "poll-max-ns", "1", NULL), ==, 1);
        g_assert_cmpint(iothread_param_set(&p, "poll-grow", "2", NULL), ==, 1);
        g_assert_cmpint(iothread_param_set(&p, "poll-shrink", "3", NULL), ==, 1);
        g_assert_cmpint(iothread_param_set(&p, "aio-max-batch", "4", NULL), ==, 1);
        g_assert_cmpint(iothread_param_set(&p, "x-submit-early", "5", NULL), ==, 1);
        g_assert_cmpint(iothread_param_set(&p, "x-complete-hold-ns", "6", NULL), ==, 1);
        g_assert_cmpint(iothread_param_set(&p, "x-complete-hold-depth", "7", NULL), ==, 1);
        g_assert_cmpint(p.poll_max_ns, ==, 1);
        g_assert_cmpint(p.poll_grow, ==, 2);
        g_assert_cmpint(p.poll_shrink, ==, 3);
        g_assert_cmpint(p.aio_max_batch, ==, 4);
        g_assert_cmpint(p.x_submit_early, ==, 5);
        g_assert_cmpint(p.x_complete_hold_ns, ==, 6);
        g_assert_cmpint(p.x_complete_hold_depth, ==, 7);
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/event/iothread-registry", test_registry);
    g_test_add_func("/event/iothread-param-set", test_param_set);
    return g_test_run();
}
