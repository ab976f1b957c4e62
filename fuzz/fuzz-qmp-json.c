/*
 * libFuzzer target: the QMP JSON front end (src/monitor, docs/qmp.md).
 *
 * Each input goes two ways:
 *  1. straight through the streaming splitter (json_stream_feed) and, for
 *     every complete text, the parser (qmp_json_parse); a parsed value must
 *     serialize to JSON that parses again, and serializing becomes a fixed
 *     point after the first pass (which may normalize numbers as QEMU does);
 *  2. as the byte stream of a fresh QMP client on a unix socket (the way
 *     tests/monitor/ connect): greeting, splitter, parser, dispatcher input
 *     validation and the built-in commands (no machine hooks installed). The
 *     client half-closes after the input; every line the monitor writes back
 *     must be one JSON object with "QMP", "return", "error" or "event".
 * The connection is new per input, so the negotiation state does not leak
 * from one input to the next (the run state is reset as well).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "qmp-internal.h"

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static GMainContext *ctx;
static QmpMonitor *mon;
static char *sock_path;

static void cleanup(void)
{
    g_autofree char *dir = sock_path ? g_path_get_dirname(sock_path) : NULL;

    qmp_cleanup(); /* closes the monitor and unlinks the socket */
    if (dir) {
        rmdir(dir);
    }
    g_free(sock_path);
}

/* Context: libFuzzer, once before any input */
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    g_autofree char *dir = g_dir_make_tmp("vblk-fuzz-qmp-XXXXXX", NULL);
    g_autofree char *arg = NULL;
    GError *err = NULL;

    if (!dir) {
        abort();
    }
    sock_path = g_build_filename(dir, "qmp.sock", NULL);
    arg = g_strdup_printf("unix:%s,server=on,wait=off", sock_path);
    ctx = g_main_context_new();
    qmp_init(ctx);
    mon = qmp_monitor_add_qmp(arg, &err);
    if (!mon) {
        fprintf(stderr, "fuzz-qmp-json: %s\n", err ? err->message : "monitor failed");
        abort();
    }
    atexit(cleanup);
    return 0;
}

/* ---- 1. splitter + parser ------------------------------------------------ */

/* Serialize @node and parse the result again: it must be valid JSON. */
static JsonNode *reparse(JsonNode *node, char **text)
{
    GError *err = NULL;
    JsonNode *again;

    *text = qmp_json_to_string(node);
    again = qmp_json_parse(*text, strlen(*text), &err);
    if (!again) {
        fprintf(stderr, "serialized value does not parse: %s\n%s\n", err->message, *text);
        abort();
    }
    return again;
}

/*
 * The first serialization may normalize numbers as QEMU does (-0.0 is
 * written "-0" and reads back as the integer 0); after that, serializing is
 * a fixed point.
 */
static void check_roundtrip(JsonNode *node)
{
    char *s1, *s2, *s3;
    JsonNode *n1 = reparse(node, &s1), *n2 = reparse(n1, &s2), *n3 = reparse(n2, &s3);

    if (strcmp(s2, s3) != 0) {
        fprintf(stderr, "serialization is not stable:\n%s\n%s\n%s\n", s1, s2, s3);
        abort();
    }
    json_node_unref(n1);
    json_node_unref(n2);
    json_node_unref(n3);
    g_free(s1);
    g_free(s2);
    g_free(s3);
}

static void split_and_parse(const char *data, size_t size)
{
    JsonStream js;
    size_t pos = 0;

    json_stream_init(&js);
    while (pos < size) {
        JsonStreamEvent ev;
        char *err = NULL;
        size_t n = json_stream_feed(&js, data + pos, size - pos, &ev, &err);

        if (n == 0 && ev == JSON_STREAM_NEED_MORE) {
            abort(); /* no progress: the client loop would spin */
        }
        pos += n;
        if (ev == JSON_STREAM_MESSAGE) {
            size_t len;
            const char *text = json_stream_text(&js, &len);
            GError *perr = NULL;
            JsonNode *node = qmp_json_parse(text, len, &perr);

            if (node) {
                check_roundtrip(node);
                json_node_unref(node);
            } else {
                g_error_free(perr);
            }
        } else if (ev == JSON_STREAM_ERROR) {
            if (!err) {
                abort();
            }
        }
        g_free(err);
    }
    json_stream_destroy(&js);
}

/* ---- 2. a QMP client ------------------------------------------------------ */

static void check_output_line(const char *line, size_t len)
{
    GError *err = NULL;
    JsonNode *node = qmp_json_parse(line, len, &err);
    JsonObject *o;

    if (!node || !JSON_NODE_HOLDS_OBJECT(node)) {
        fprintf(stderr, "monitor wrote a line that is not a JSON object: %.*s\n", (int)len, line);
        abort();
    }
    o = json_node_get_object(node);
    if (!json_object_has_member(o, "QMP") && !json_object_has_member(o, "return") &&
        !json_object_has_member(o, "error") && !json_object_has_member(o, "event")) {
        fprintf(stderr, "unexpected monitor line: %.*s\n", (int)len, line);
        abort();
    }
    json_node_unref(node);
}

/* Read what the monitor wrote; check complete lines. Returns false on EOF. */
static bool drain(int fd, GString *out)
{
    char buf[65536];
    ssize_t n;
    char *nl;

    while ((n = read(fd, buf, sizeof(buf))) > 0) {
        g_string_append_len(out, buf, n);
    }
    while ((nl = strstr(out->str, "\r\n")) != NULL) {
        check_output_line(out->str, nl - out->str);
        g_string_erase(out, 0, nl - out->str + 2);
    }
    return n != 0;
}

static void pump(void)
{
    while (g_main_context_iteration(ctx, FALSE)) {
    }
}

static void run_client(const char *data, size_t size)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    GString *out = g_string_new(NULL);
    size_t off = 0;
    bool open = true;

    if (fd < 0) {
        abort();
    }
    g_strlcpy(sa.sun_path, sock_path, sizeof(sa.sun_path));
    if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        abort();
    }
    qmp_run_state_set(QMP_RUN_STATE_RUNNING);
    /* Send everything, letting the monitor read (and us drain) as needed. */
    for (unsigned spins = 0; off < size && spins < 100000; spins++) {
        ssize_t n = send(fd, data + off, size - off, MSG_NOSIGNAL);

        if (n > 0) {
            off += (size_t)n;
        } else if (n < 0 && errno != EAGAIN && errno != EINTR) {
            break; /* the monitor dropped us */
        }
        pump();
        open = drain(fd, out);
        if (!open) {
            break;
        }
    }
    shutdown(fd, SHUT_WR);
    /* The monitor answers what it got, then closes on EOF. */
    for (unsigned spins = 0; open && spins < 10000; spins++) {
        struct pollfd p = {.fd = fd, .events = POLLIN};

        pump();
        open = drain(fd, out);
        if (open && qmp_monitor_client_count(mon) == 0) {
            poll(&p, 1, 0);
            open = drain(fd, out);
            break;
        }
    }
    close(fd);
    /* Let the monitor see the hang-up if it still had us. */
    for (unsigned spins = 0; qmp_monitor_client_count(mon) && spins < 1000; spins++) {
        pump();
        g_usleep(10);
    }
    if (qmp_monitor_client_count(mon)) {
        fprintf(stderr, "fuzz-qmp-json: the monitor kept a closed client\n");
        abort();
    }
    g_string_free(out, TRUE);
}

/* Context: libFuzzer */
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    split_and_parse((const char *)data, size);
    run_client((const char *)data, size);
    return 0;
}
