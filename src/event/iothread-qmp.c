/*
 * query-iothreads: the registry's iothreads, with QEMU's fields.
 *
 * Context: main thread, BQL held (QMP is dispatched from the main loop).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include "event/iothread-registry.h"
#include "iothread-qmp.h"
#include "monitor/qmp.h"

static void add_int(JsonBuilder *b, const char *k, int64_t v)
{
    json_builder_set_member_name(b, k);
    json_builder_add_int_value(b, v);
}

static void add_iothread(const char *id, IOThread *t, const IOThreadParams *p, void *opaque)
{
    JsonBuilder *b = opaque;

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "id");
    json_builder_add_string_value(b, id);
    add_int(b, "thread-id", iothread_get_thread_id(t));
    add_int(b, "poll-max-ns", p->poll_max_ns);
    add_int(b, "poll-grow", p->poll_grow);
    add_int(b, "poll-shrink", p->poll_shrink);
    add_int(b, "aio-max-batch", p->aio_max_batch);
    add_int(b, "x-submit-early", p->x_submit_early);
    add_int(b, "x-complete-hold-ns", p->x_complete_hold_ns);
    add_int(b, "x-complete-hold-depth", p->x_complete_hold_depth);
    {
        /* vblk's own, per iothread: what its loop did (docs/qmp.md). */
        EventLoopStats st;

        event_loop_get_stats(iothread_get_loop(t), &st);
        add_int(b, "x-loop-iterations", (int64_t)st.iterations);
        add_int(b, "x-blocking-waits", (int64_t)st.blocking_waits);
        add_int(b, "x-epoll-waits", (int64_t)st.epoll_waits);
        add_int(b, "x-poll-successes", (int64_t)st.poll_success);
        add_int(b, "x-bh-runs", (int64_t)st.bh_runs);
        add_int(b, "x-poll-ns", (int64_t)st.poll_ns);
    }
    json_builder_end_object(b);
}

static JsonNode *cmd_query_iothreads(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonBuilder *b = json_builder_new();
    JsonNode *n;

    json_builder_begin_array(b);
    iothread_registry_foreach(add_iothread, b);
    json_builder_end_array(b);
    n = json_builder_get_root(b);
    g_object_unref(b);
    return n;
}

/* Context: main thread */
void iothread_qmp_register(void)
{
    static const QmpArgSpec none[] = {QMP_ARGS_END};

    if (!qmp_command_exists("query-iothreads")) {
        qmp_register_command("query-iothreads", cmd_query_iothreads, none, 0, NULL);
        qmp_schema_describe(
            "query-iothreads", NULL,
            "[{'id': 'str', 'thread-id': 'int', 'poll-max-ns': 'int', "
            "'poll-grow': 'int', 'poll-shrink': 'int', 'aio-max-batch': 'int', 'x-submit-early': "
            "'int', 'x-complete-hold-ns': 'int', 'x-complete-hold-depth': 'int', "
            "'x-loop-iterations': 'int', 'x-blocking-waits': 'int', 'x-epoll-waits': 'int', "
            "'x-poll-successes': 'int', 'x-bh-runs': 'int', 'x-poll-ns': 'int'}]",
            NULL);
    }
}
