/*
 * Test helpers, see qmp-test-util.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include "qmp-test-util.h"

GMainContext *test_ctx;

/* Context: test thread (owns the monitor context) */
QmpMonitor *test_setup(char **path_out)
{
    g_autofree char *dir = g_dir_make_tmp("vblk-qmp-XXXXXX", NULL);
    char *path = g_build_filename(dir, "qmp.sock", NULL);
    g_autofree char *arg = g_strdup_printf("unix:%s,server=on,wait=off", path);
    GError *err = NULL;
    QmpMonitor *mon;

    test_ctx = g_main_context_new();
    qmp_init(test_ctx);
    qmp_run_state_set(QMP_RUN_STATE_RUNNING);
    mon = qmp_monitor_add_qmp(arg, &err);
    g_assert_no_error(err);
    g_assert_nonnull(mon);
    *path_out = path;
    return mon;
}

/* Context: test thread */
void test_teardown(QmpMonitor *mon, char *path)
{
    g_autofree char *dir = g_path_get_dirname(path);

    qmp_cleanup();
    test_pump(0); /* run idle callbacks that still hold client references */
    while (g_main_context_pending(test_ctx)) {
        g_main_context_iteration(test_ctx, FALSE);
    }
    g_main_context_unref(test_ctx);
    test_ctx = NULL;
    g_assert_false(g_file_test(path, G_FILE_TEST_EXISTS));
    rmdir(dir);
    g_free(path);
}

/* Context: test thread */
void test_pump(int ms)
{
    gint64 end = g_get_monotonic_time() + ms * 1000;

    do {
        while (g_main_context_iteration(test_ctx, FALSE)) {
        }
        if (ms) {
            g_usleep(200);
        }
    } while (g_get_monotonic_time() < end);
}

static TClient *tc_new(int fd)
{
    TClient *c = g_new0(TClient, 1);

    c->fd = fd;
    c->buf = g_string_new(NULL);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    return c;
}

/* Context: test thread */
TClient *tc_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_assert_cmpint(fd, >=, 0);
    g_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
    g_assert_cmpint(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    return tc_new(fd);
}

/* Context: test thread */
TClient *tc_connect_tcp(int port)
{
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    g_assert_cmpint(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    return tc_new(fd);
}

/* Context: test thread */
void tc_close(TClient *c)
{
    if (c) {
        close(c->fd);
        g_string_free(c->buf, TRUE);
        g_free(c);
    }
}

/* Context: test thread */
void tc_send_len(TClient *c, const char *s, size_t len)
{
    size_t off = 0;

    while (off < len) {
        ssize_t n = send(c->fd, s + off, len - off, MSG_NOSIGNAL);
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            test_pump(1); /* let the server drain its side */
            continue;
        }
        g_assert_cmpint(n, >, 0);
        off += n;
    }
}

/* Context: test thread */
void tc_send(TClient *c, const char *s)
{
    tc_send_len(c, s, strlen(s));
}

static char *take_line(TClient *c)
{
    char *nl = strstr(c->buf->str, "\r\n");
    char *line;

    if (!nl) {
        return NULL;
    }
    line = g_strndup(c->buf->str, nl - c->buf->str);
    g_string_erase(c->buf, 0, nl - c->buf->str + 2);
    return line;
}

static char *recv_until(TClient *c, int timeout_ms)
{
    gint64 end = g_get_monotonic_time() + (gint64)timeout_ms * 1000;
    char tmp[65536];

    for (;;) {
        char *line = take_line(c);
        if (line) {
            return line;
        }
        if (c->eof || g_get_monotonic_time() > end) {
            return NULL;
        }
        while (g_main_context_iteration(test_ctx, FALSE)) {
        }
        ssize_t n = recv(c->fd, tmp, sizeof(tmp), 0);
        if (n > 0) {
            g_string_append_len(c->buf, tmp, n);
        } else if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
            c->eof = true;
        } else {
            struct pollfd pfd = {.fd = c->fd, .events = POLLIN};
            poll(&pfd, 1, 0);
            g_usleep(50);
        }
    }
}

/* Context: test thread */
char *tc_recv(TClient *c)
{
    return recv_until(c, 5000);
}

/* Context: test thread */
bool tc_quiet(TClient *c, int ms)
{
    char *line = recv_until(c, ms);

    if (line) {
        g_test_message("unexpected line: %s", line);
        g_free(line);
        return false;
    }
    return true;
}

/* Context: test thread */
char *tc_cmd(TClient *c, const char *json)
{
    tc_send(c, json);
    return tc_recv(c);
}

/* Context: test thread */
void tc_expect(TClient *c, const char *expected)
{
    g_autofree char *line = tc_recv(c);

    g_assert_cmpstr(line, ==, expected);
}

/* Context: test thread */
void tc_negotiate(TClient *c)
{
    tc_expect(c, QMP_TEST_GREETING);
    tc_send(c, "{\"execute\": \"qmp_capabilities\"}");
    tc_expect(c, "{\"return\": {}}");
}
