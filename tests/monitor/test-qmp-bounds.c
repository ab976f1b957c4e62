/*
 * Bounded resources of the QMP server (issue 12, item 6): a client cannot
 * make the monitor hold unbounded memory or file descriptors.
 *
 *   connections: at most 64 live clients per monitor (QMP_MAX_CLIENTS in
 *       src/monitor/qmp-internal.h); one more is accepted and closed at once,
 *       and closing a client frees its slot and its fd;
 *   unread output: a client that sends commands and never reads its replies
 *       is dropped once 16 MiB of replies are waiting (QMP_MAX_OUTBUF), and
 *       the monitor keeps serving the others;
 *   input: while a command of a client is deferred, the monitor stops reading
 *       that client (it holds at most one 64 KiB read), so a client that
 *       pipelines without end fills the socket's buffers and then blocks;
 *       every command it sent is answered, in order, once the reply comes.
 * (One JSON input is limited to 8 MiB: test-qmp-fuzz, "input size limit".)
 */
#include <dirent.h>
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "qmp-test-util.h"

#define MAX_CLIENTS 64
#define MAX_OUTBUF  (16u << 20)

static unsigned count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    unsigned n = 0;

    g_assert_nonnull(d);
    while (readdir(d)) {
        n++;
    }
    closedir(d);
    return n;
}

/* True once the server has closed @c (EOF or reset). */
static bool tc_closed_by_server(TClient *c, int ms)
{
    gint64 end = g_get_monotonic_time() + (gint64)ms * 1000;
    char tmp[65536];

    while (g_get_monotonic_time() < end) {
        ssize_t n;

        test_pump(0);
        n = recv(c->fd, tmp, sizeof(tmp), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
            return true;
        }
        if (n < 0) {
            g_usleep(200);
        }
    }
    return false;
}

static void test_max_clients(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c[MAX_CLIENTS], *extra, *again;
    unsigned fds0 = count_fds();

    for (unsigned i = 0; i < MAX_CLIENTS; i++) {
        c[i] = tc_connect(path);
        tc_negotiate(c[i]);
    }
    /* One over the bound: accepted by the kernel, closed by the monitor, no greeting. */
    extra = tc_connect(path);
    g_assert_true(tc_closed_by_server(extra, 2000));
    tc_close(extra);
    /* Every live client still works. */
    for (unsigned i = 0; i < MAX_CLIENTS; i += 9) {
        g_autofree char *r = tc_cmd(c[i], "{\"execute\":\"query-status\"}");

        g_assert_nonnull(r);
        g_assert_nonnull(strstr(r, "\"return\""));
    }
    /* A closed client gives its slot back. */
    tc_close(c[0]);
    test_pump(50);
    again = tc_connect(path);
    tc_negotiate(again);
    tc_close(again);
    for (unsigned i = 1; i < MAX_CLIENTS; i++) {
        tc_close(c[i]);
    }
    test_pump(100);
    /* The monitor holds no fd of a closed client. */
    g_assert_cmpuint(count_fds(), ==, fds0);
    test_teardown(mon, path);
}

static void test_unread_output(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path), *other;
    const char *cmd = "{\"execute\":\"query-commands\"}";
    size_t cmdlen = strlen(cmd), reply_len, sent = 0, off = 0;
    int rcvbuf = 4096;
    bool dropped = false;
    g_autofree char *r = NULL;

    tc_negotiate(c);
    r = tc_cmd(c, cmd);
    g_assert_nonnull(r);
    reply_len = strlen(r) + 2;
    g_assert_cmpuint(reply_len, >, 100);
    g_assert_cmpint(setsockopt(c->fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf)), ==, 0);
    /*
     * Send commands and never read. Give up after enough commands for four
     * times the bound of replies (plus what the socket buffers can hold).
     */
    while (!dropped && sent < 4 * (MAX_OUTBUF / reply_len) + 4096) {
        ssize_t n = send(c->fd, cmd + off, cmdlen - off, MSG_NOSIGNAL);

        if (n > 0) {
            off += (size_t)n;
            if (off == cmdlen) {
                off = 0;
                if (++sent % 64 == 0) {
                    test_pump(0);
                }
            }
        } else if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            test_pump(1);
        } else {
            g_assert_true(n < 0 && (errno == EPIPE || errno == ECONNRESET));
            dropped = true;
        }
    }
    if (!dropped) {
        dropped = tc_closed_by_server(c, 5000);
    }
    g_test_message("dropped after %zu commands of %zu-byte replies", sent, reply_len);
    g_assert_true(dropped);
    /* Not before its replies reached the bound (minus what the kernel holds). */
    g_assert_cmpuint(sent * reply_len, >=, MAX_OUTBUF);
    tc_close(c);
    /* The monitor serves the next client. */
    other = tc_connect(path);
    tc_negotiate(other);
    g_free(r);
    r = tc_cmd(other, "{\"execute\":\"query-status\"}");
    g_assert_nonnull(r);
    g_assert_nonnull(strstr(r, "\"return\""));
    tc_close(other);
    test_teardown(mon, path);
}

static QmpDeferred *held;

static JsonNode *cmd_hold(QmpRequest *req, JsonObject *args, GError **errp)
{
    held = qmp_request_defer(req);
    return NULL;
}

static void test_input_while_deferred(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    const char *cmd = "{\"execute\":\"query-status\"}";
    size_t cmdlen = strlen(cmd), total = 0, off = 0, rem, ncmds;
    GString *big = g_string_new(NULL);
    gint64 stall = 0;

    qmp_register_command("x-hold", cmd_hold, NULL, 0, NULL);
    tc_negotiate(c);
    tc_send(c, "{\"execute\":\"x-hold\"}");
    test_pump(20);
    g_assert_nonnull(held);
    while (big->len < 64 * 1024) {
        g_string_append(big, cmd);
    }
    /* Pipeline until the monitor has stopped taking input for 300 ms. */
    for (;;) {
        ssize_t n = send(c->fd, big->str + off, big->len - off, MSG_NOSIGNAL);

        if (n > 0) {
            total += (size_t)n;
            off = (off + (size_t)n) % big->len;
            stall = 0;
            g_assert_cmpuint(total, <, 64u << 20); /* would mean reading without bound */
        } else {
            g_assert_true(n < 0 && (errno == EAGAIN || errno == EINTR));
            test_pump(1);
            if (!stall) {
                stall = g_get_monotonic_time();
            } else if (g_get_monotonic_time() - stall > 300 * 1000) {
                break;
            }
        }
    }
    g_test_message("the monitor stopped taking input after %zu bytes", total);
    /* Socket buffers plus one 64 KiB read of the monitor. */
    g_assert_cmpuint(total, <, 8u << 20);
    g_assert_cmpuint(qmp_monitor_client_count(mon), ==, 1);
    qmp_reply_deferred(held, NULL, NULL);
    held = NULL;
    rem = (cmdlen - total % cmdlen) % cmdlen; /* finish the last command */
    tc_send_len(c, big->str + off, rem);
    ncmds = (total + rem) / cmdlen;
    tc_expect(c, "{\"return\": {}}");
    for (size_t i = 0; i < ncmds; i++) {
        g_autofree char *r = tc_recv(c);

        g_assert_nonnull(r);
        g_assert_nonnull(strstr(r, "\"status\": \"running\""));
    }
    g_assert_true(tc_quiet(c, 50));
    g_string_free(big, TRUE);
    tc_close(c);
    test_teardown(mon, path);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qmp/bounds/max-clients", test_max_clients);
    g_test_add_func("/qmp/bounds/unread-output", test_unread_output);
    g_test_add_func("/qmp/bounds/input-while-deferred", test_input_while_deferred);
    return g_test_run();
}
