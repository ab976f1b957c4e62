/*
 * Transports: option strings, unix socket hygiene (mode 0600, stale and
 * live sockets), TCP, -chardev/-mon, wait=on, several monitors, stdio.
 */
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include "qmp-test-util.h"

static void test_parse(void)
{
    static const struct {
        const char *arg;
        QmpChardevKind kind;
        const char *path, *host, *port;
        bool wait;
    } ok[] = {
        {"unix:/p,server=on,wait=off", QMP_CHR_UNIX, "/p", NULL, NULL, false},
        {"unix:/p,server,nowait", QMP_CHR_UNIX, "/p", NULL, NULL, false},
        {"unix:/p,server", QMP_CHR_UNIX, "/p", NULL, NULL, true},
        {"unix:/p,server=on,wait=on", QMP_CHR_UNIX, "/p", NULL, NULL, true},
        {"unix:/a,,b,server,nowait", QMP_CHR_UNIX, "/a,b", NULL, NULL, false},
        {"tcp:127.0.0.1:4444,server=on,wait=off", QMP_CHR_TCP, NULL, "127.0.0.1", "4444", false},
        {"tcp::4444,server,nowait", QMP_CHR_TCP, NULL, "", "4444", false},
        {"tcp:[::1]:4444,server,nowait", QMP_CHR_TCP, NULL, "::1", "4444", false},
        {"stdio", QMP_CHR_STDIO, NULL, NULL, NULL, false},
    };
    static const char *const bad[] = {
        "unix:/p", "unix:/p,server,bogus=1", "pty", "tcp:4444,server", "unix:/p,server=maybe",
    };
    QmpChardevOpts o;
    GError *err = NULL;

    for (size_t i = 0; i < G_N_ELEMENTS(ok); i++) {
        g_assert_true(qmp_parse_qmp_arg(ok[i].arg, &o, &err));
        g_assert_no_error(err);
        g_assert_cmpint(o.kind, ==, ok[i].kind);
        g_assert_cmpstr(o.path, ==, ok[i].path);
        g_assert_cmpstr(o.host, ==, ok[i].host);
        g_assert_cmpstr(o.port, ==, ok[i].port);
        g_assert_cmpint(o.wait, ==, ok[i].wait);
        qmp_chardev_opts_clear(&o);
    }
    for (size_t i = 0; i < G_N_ELEMENTS(bad); i++) {
        g_assert_false(qmp_parse_qmp_arg(bad[i], &o, &err));
        g_assert_nonnull(err);
        g_clear_error(&err);
    }
    g_assert_true(qmp_parse_chardev_arg("socket,id=m0,path=/s,server=on,wait=off", &o, &err));
    g_assert_cmpstr(o.id, ==, "m0");
    g_assert_cmpint(o.kind, ==, QMP_CHR_UNIX);
    qmp_chardev_opts_clear(&o);
    g_assert_true(qmp_parse_chardev_arg("socket,id=t,port=0,server,nowait", &o, &err));
    g_assert_cmpint(o.kind, ==, QMP_CHR_TCP);
    g_assert_cmpstr(o.host, ==, "localhost");
    qmp_chardev_opts_clear(&o);
    g_assert_true(qmp_parse_chardev_arg("stdio,id=s,signal=off", &o, &err));
    qmp_chardev_opts_clear(&o);
    g_assert_false(qmp_parse_chardev_arg("socket,path=/s,server", &o, &err));
    g_assert_cmpstr(err->message, ==, "Parameter 'id' is missing");
    g_clear_error(&err);
    g_assert_false(qmp_parse_chardev_arg("file,id=f,path=/x", &o, &err));
    g_clear_error(&err);
}

static void test_unix_hygiene(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    struct stat st;
    g_autofree char *dir = g_path_get_dirname(path);
    g_autofree char *p2 = g_build_filename(dir, "stale.sock", NULL);
    g_autofree char *p3 = g_build_filename(dir, "file", NULL);
    g_autofree char *a2 = g_strdup_printf("unix:%s,server,nowait", p2);
    g_autofree char *a3 = g_strdup_printf("unix:%s,server,nowait", p3);
    g_autofree char *a1 = g_strdup_printf("unix:%s,server,nowait", path);
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    GError *err = NULL;
    int fd;

    g_assert_cmpint(stat(path, &st), ==, 0);
    g_assert_cmpint(st.st_mode & 0777, ==, 0600);
    /* The path is in use by a live monitor: refuse, leave it alone. */
    g_assert_null(qmp_monitor_add_qmp(a1, &err));
    g_assert_nonnull(strstr(err->message, "in use"));
    g_clear_error(&err);
    /* A stale socket file (its listener died) is replaced. */
    fd = socket(AF_UNIX, SOCK_STREAM, 0);
    g_strlcpy(sa.sun_path, p2, sizeof(sa.sun_path));
    g_assert_cmpint(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), ==, 0);
    close(fd);
    QmpMonitor *m2 = qmp_monitor_add_qmp(a2, &err);
    g_assert_no_error(err);
    TClient *c = tc_connect(p2);
    tc_negotiate(c);
    tc_close(c);
    /* A regular file is never deleted. */
    g_assert_true(g_file_set_contents(p3, "keep", -1, NULL));
    g_assert_null(qmp_monitor_add_qmp(a3, &err));
    g_assert_nonnull(strstr(err->message, "not a socket"));
    g_clear_error(&err);
    g_assert_true(g_file_test(p3, G_FILE_TEST_IS_REGULAR));
    unlink(p3);
    qmp_monitor_close(m2);
    g_assert_false(g_file_test(p2, G_FILE_TEST_EXISTS));
    test_teardown(mon, path);
}

static void test_tcp_and_chardev(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    g_autofree char *dir = g_path_get_dirname(path);
    g_autofree char *p2 = g_build_filename(dir, "mon.sock", NULL);
    g_autofree char *chr = g_strdup_printf("socket,id=m0,path=%s,server=on,wait=off", p2);
    GError *err = NULL;
    QmpMonitor *tcp, *m2;
    TClient *t, *u, *v;
    g_autofree char *ev1 = NULL, *ev2 = NULL, *ev3 = NULL;

    tcp = qmp_monitor_add_qmp("tcp:127.0.0.1:0,server=on,wait=off", &err);
    g_assert_no_error(err);
    g_assert_cmpint(qmp_monitor_get_port(tcp), >, 0);
    g_assert_true(qmp_chardev_add(chr, &err));
    g_assert_false(qmp_chardev_add(chr, NULL));
    g_assert_null(qmp_monitor_add_mon("chardev=m0,mode=bogus", &err));
    g_assert_cmpstr(err->message, ==, "Parameter 'mode' does not accept value 'bogus'");
    g_clear_error(&err);
    g_assert_null(qmp_monitor_add_mon("chardev=nope,mode=control", &err));
    g_assert_cmpstr(err->message, ==, "chardev \"nope\" not found");
    g_clear_error(&err);
    m2 = qmp_monitor_add_mon("chardev=m0,mode=control,pretty=off", &err);
    g_assert_no_error(err);
    t = tc_connect_tcp(qmp_monitor_get_port(tcp));
    u = tc_connect(p2);
    v = tc_connect(path);
    tc_negotiate(t);
    tc_negotiate(u);
    tc_negotiate(v);
    qmp_event_emit("BLOCK_IO_ERROR", NULL);
    ev1 = tc_recv(t);
    ev2 = tc_recv(u);
    ev3 = tc_recv(v);
    g_assert_cmpstr(ev1, ==, ev2);
    g_assert_cmpstr(ev2, ==, ev3);
    g_assert_nonnull(strstr(ev1, "\"event\": \"BLOCK_IO_ERROR\""));
    tc_close(t);
    tc_close(u);
    tc_close(v);
    qmp_monitor_close(m2);
    qmp_monitor_close(tcp);
    test_teardown(mon, path);
}

static gpointer connect_later(gpointer path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);

    g_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
    for (int i = 0; i < 500; i++) {
        g_usleep(10000);
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            return GINT_TO_POINTER(fd);
        }
    }
    return GINT_TO_POINTER(-1);
}

static void test_wait_on(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    g_autofree char *dir = g_path_get_dirname(path);
    g_autofree char *p2 = g_build_filename(dir, "wait.sock", NULL);
    g_autofree char *arg = g_strdup_printf("unix:%s,server=on,wait=on", p2);
    GThread *th = g_thread_new("connect", connect_later, p2);
    QmpMonitor *m2 = qmp_monitor_add_qmp(arg, NULL);
    int fd = GPOINTER_TO_INT(g_thread_join(th));
    TClient *c;

    g_assert_nonnull(m2);
    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpuint(qmp_monitor_client_count(m2), ==, 1); /* accepted before returning */
    c = g_new0(TClient, 1);
    c->fd = fd;
    c->buf = g_string_new(NULL);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    tc_negotiate(c);
    tc_close(c);
    test_teardown(mon, path);
}

static char *read_line(int fd)
{
    GString *s = g_string_new(NULL);
    char ch;

    while (read(fd, &ch, 1) == 1) {
        if (ch == '\n') {
            break;
        }
        if (ch != '\r') {
            g_string_append_c(s, ch);
        }
    }
    return g_string_free(s, FALSE);
}

static void test_stdio(void)
{
    const char *helper = g_getenv("QMP_STDIO_HELPER");
    char *argv[] = {(char *)helper, NULL};
    GPid pid;
    int in, out, status;
    GError *err = NULL;
    static const char *const script[][2] = {
        {NULL, "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 0, \"minor\": 2, \"major\": 7}, "
               "\"package\": \"vblk-" VBLK_VERSION "\"}, \"capabilities\": [\"oob\"]}}"},
        {"{\"execute\":\"qmp_capabilities\",\"arguments\":{\"enable\":[\"oob\"]}}\n",
         "{\"return\": {}}"},
        {"{\"exec-oob\":\"query-status\",\"id\":9}\n",
         "{\"id\": 9, \"error\": {\"class\": \"GenericError\", \"desc\": \"The command "
         "query-status does not support OOB\"}}"},
        {"{\"execute\":\"query-status\"}\n",
         "{\"return\": {\"status\": \"running\", \"singlestep\": false, \"running\": true}}"},
        {"{\"execute\":\"quit\"}\n", NULL},
    };

    if (!helper) {
        g_test_skip("QMP_STDIO_HELPER not set");
        return;
    }
    g_assert_true(g_spawn_async_with_pipes(NULL, argv, NULL, G_SPAWN_DO_NOT_REAP_CHILD, NULL, NULL,
                                           &pid, &in, &out, NULL, &err));
    g_assert_no_error(err);
    for (size_t i = 0; i < G_N_ELEMENTS(script); i++) {
        if (script[i][0]) {
            g_assert_cmpint(write(in, script[i][0], strlen(script[i][0])), >, 0);
        }
        if (script[i][1]) {
            g_autofree char *line = read_line(out);
            g_assert_cmpstr(line, ==, script[i][1]);
        }
    }
    g_autofree char *shut = read_line(out);
    g_autofree char *ret = read_line(out);
    g_assert_nonnull(strstr(shut, "\"event\": \"SHUTDOWN\""));
    g_assert_cmpstr(ret, ==, "{\"return\": {}}");
    g_assert_cmpint(waitpid(pid, &status, 0), ==, pid);
    g_assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    g_spawn_close_pid(pid);
    close(in);
    close(out);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qmp/transport/parse", test_parse);
    g_test_add_func("/qmp/transport/unix-hygiene", test_unix_hygiene);
    g_test_add_func("/qmp/transport/tcp-chardev-mon", test_tcp_and_chardev);
    g_test_add_func("/qmp/transport/wait-on", test_wait_on);
    g_test_add_func("/qmp/transport/stdio", test_stdio);
    return g_test_run();
}
