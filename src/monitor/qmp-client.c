/*
 * Monitors and their client connections: non-blocking I/O on the monitor
 * GMainContext, per-client negotiation state, output buffering with partial
 * writes, and orderly teardown when a peer vanishes at any point.
 *
 * A client is reference counted because a reply, an event broadcast or a
 * deferred completion may find it closed under its feet; "closed" only
 * means the fd is gone, the struct lives until the last reference drops.
 */
#include <errno.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <termios.h>
#include <unistd.h>
#include <glib-unix.h>
#include "qmp-internal.h"
#include "util/error-report.h"

struct QmpMonitor {
    QmpChardevOpts opts;
    bool hmp;     /* the human monitor (mode=readline) instead of QMP */
    bool mux;     /* HMP behind the machine console's Ctrl-a c (focus markers in the input) */
    bool raw_tty; /* stdio HMP on a terminal: put in raw mode, restored at close */
    int listen_fd;
    GSource *listen_src;
    GList *clients;
    bool oob_offered;
    int port;
};

typedef struct ClientSource {
    GSource base;
    QmpClient *client;
} ClientSource;

struct QmpClient {
    int refcnt;
    QmpMonitor *mon;
    int rfd, wfd;
    bool is_socket;
    bool closed, eof, busy, negotiated, oob_enabled;
    bool wdead; /* the peer stopped reading: output is dropped, input still runs */
    GSource *src;
    gpointer rtag, wtag;
    JsonStream js;
    GByteArray *in;
    GString *out;
    size_t out_pos;
    HmpSession *hmp; /* HMP connection: its line editor */
};

static GList *qmp_monitors;

static void client_close(QmpClient *c);
static void client_process(QmpClient *c);

/* ---- small accessors ---------------------------------------------------- */

/* Context: monitor thread */
QmpClient *qmp_client_ref(QmpClient *c)
{
    c->refcnt++;
    return c;
}

/* Context: monitor thread */
void qmp_client_unref(QmpClient *c)
{
    if (--c->refcnt) {
        return;
    }
    json_stream_destroy(&c->js);
    hmp_session_free(c->hmp);
    g_byte_array_free(c->in, TRUE);
    g_string_free(c->out, TRUE);
    g_free(c);
}

/* Context: monitor thread */
bool qmp_client_alive(QmpClient *c)
{
    return !c->closed;
}

/* Context: monitor thread */
bool qmp_client_negotiated(QmpClient *c)
{
    return c->negotiated;
}

/* Context: monitor thread */
bool qmp_client_oob_offered(QmpClient *c)
{
    return c->mon && c->mon->oob_offered;
}

/* Context: monitor thread */
bool qmp_client_oob_enabled(QmpClient *c)
{
    return c->oob_enabled;
}

/* Context: monitor thread */
void qmp_client_set_negotiated(QmpClient *c, bool oob)
{
    c->negotiated = true;
    c->oob_enabled = oob;
}

/* ---- polling ------------------------------------------------------------ */

static bool out_pending(QmpClient *c)
{
    return c->out_pos < c->out->len;
}

/* Poll exactly for what we can act on: a level-triggered HUP must not spin. */
static void client_update_poll(QmpClient *c)
{
    GIOCondition rc = (!c->busy && !c->eof) ? G_IO_IN : 0;
    GIOCondition wc = out_pending(c) ? G_IO_OUT : 0;

    if (c->closed) {
        return;
    }
    if (c->rfd == c->wfd) {
        rc |= wc;
        wc = 0;
    }
    if (!rc && c->eof) {
        /* After EOF, HUP would be reported forever even with no events asked. */
        if (c->rtag) {
            g_source_remove_unix_fd(c->src, c->rtag);
            c->rtag = NULL;
        }
    } else if (!c->rtag) {
        c->rtag = g_source_add_unix_fd(c->src, c->rfd, rc);
    } else {
        g_source_modify_unix_fd(c->src, c->rtag, rc);
    }
    if (c->wtag) {
        g_source_modify_unix_fd(c->src, c->wtag, wc);
    }
}

static ssize_t client_write(QmpClient *c, const char *buf, size_t len)
{
    if (c->is_socket) {
        return send(c->wfd, buf, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    return write(c->wfd, buf, len);
}

/* Write what the peer will take now; a peer that stopped reading gets nothing more. */
static void client_flush(QmpClient *c)
{
    while (out_pending(c)) {
        ssize_t n = client_write(c, c->out->str + c->out_pos, c->out->len - c->out_pos);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            break;
        }
        if (n <= 0) {
            /*
             * EPIPE, ECONNRESET: the peer stopped reading (it may have
             * closed right after writing). What it sent before is still
             * read and run, as QEMU does (`echo quit | socat - UNIX:...`
             * quits: the first echoed character used to fail here and
             * drop the rest of the line); what we would answer is dropped.
             * The client closes at EOF, as always.
             */
            c->wdead = true;
            g_string_truncate(c->out, 0);
            c->out_pos = 0;
            break;
        }
        c->out_pos += n;
    }
    if (!out_pending(c)) {
        g_string_truncate(c->out, 0);
        c->out_pos = 0;
    } else if (c->out_pos > 65536) {
        g_string_erase(c->out, 0, c->out_pos);
        c->out_pos = 0;
    }
    client_update_poll(c);
}

static void client_send_line(QmpClient *c, const char *line, size_t len)
{
    if (c->closed || c->wdead) {
        return;
    }
    if (c->out->len - c->out_pos + len > QMP_MAX_OUTBUF) {
        /* A client that never reads must not make us buffer without bound. */
        warn_report_id("qmp", "dropping client with %zu bytes of unread output",
                       c->out->len - c->out_pos);
        client_close(c);
        return;
    }
    g_string_append_len(c->out, line, len);
    client_flush(c);
}

/* Context: monitor thread */
void qmp_client_send(QmpClient *c, JsonNode *msg)
{
    GString *line = g_string_new(NULL);

    qmp_json_write(line, msg);
    g_string_append(line, "\r\n");
    client_send_line(c, line->str, line->len);
    g_string_free(line, TRUE);
}

/* Context: monitor thread */
void qmp_client_write(QmpClient *c, const char *buf, size_t len)
{
    client_send_line(c, buf, len);
}

/* Context: monitor thread */
void qmp_clients_broadcast(const char *line)
{
    size_t len = strlen(line);

    for (GList *m = qmp_monitors; m; m = m->next) {
        QmpMonitor *mon = m->data;
        /* Copy: a failed write unlinks the client from mon->clients. */
        GList *snapshot = g_list_copy(mon->clients);
        for (GList *l = snapshot; l; l = l->next) {
            QmpClient *c = l->data;
            if (c->negotiated) {
                client_send_line(c, line, len);
            }
        }
        g_list_free(snapshot);
    }
}

/* ---- input -------------------------------------------------------------- */

static void client_handle_event(QmpClient *c, JsonStreamEvent ev, char *err)
{
    size_t len;
    const char *text;

    if (ev == JSON_STREAM_ERROR) {
        qmp_dispatch_stream_error(c, err);
    } else if (ev == JSON_STREAM_MESSAGE) {
        text = json_stream_text(&c->js, &len);
        c->busy = qmp_dispatch_text(c, text, len);
    }
}

/* Run every complete input we have, stopping while a command is deferred. */
static void client_process(QmpClient *c)
{
    size_t pos = 0;

    qmp_client_ref(c);
    while (c->hmp && !c->closed && !c->busy && pos < c->in->len) {
        bool busy = false;

        pos += hmp_session_feed(c->hmp, c->in->data + pos, c->in->len - pos, &busy);
        c->busy = busy;
    }
    while (!c->hmp && !c->closed && !c->busy && pos < c->in->len) {
        JsonStreamEvent ev;
        char *err = NULL;

        pos +=
            json_stream_feed(&c->js, (const char *)c->in->data + pos, c->in->len - pos, &ev, &err);
        client_handle_event(c, ev, err);
        g_free(err);
    }
    if (!c->closed) {
        g_byte_array_remove_range(c->in, 0, pos);
        if (c->eof && !c->busy && !out_pending(c)) {
            client_close(c);
        } else {
            client_update_poll(c);
        }
    }
    qmp_client_unref(c);
}

static void client_read(QmpClient *c)
{
    char buf[65536];
    ssize_t n = read(c->rfd, buf, sizeof(buf));

    if (n < 0 && (errno == EINTR || errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
    }
    if (n <= 0) {
        c->eof = true; /* answer what was already sent, then close */
    } else {
        g_byte_array_append(c->in, (const guint8 *)buf, n);
    }
    client_process(c);
}

/* Context: monitor thread */
void qmp_client_resume(QmpClient *c)
{
    c->busy = false;
    client_process(c);
}

static gboolean client_dispatch(GSource *src, GSourceFunc cb, gpointer data)
{
    QmpClient *c = ((ClientSource *)src)->client;
    GIOCondition rev = c->rtag ? g_source_query_unix_fd(src, c->rtag) : 0;
    GIOCondition wev = c->wtag ? g_source_query_unix_fd(src, c->wtag) : 0;

    qmp_client_ref(c);
    if ((rev | wev) & G_IO_OUT || ((rev | wev) & (G_IO_HUP | G_IO_ERR) && out_pending(c))) {
        client_flush(c);
    }
    if (!c->closed && (rev & (G_IO_IN | G_IO_HUP | G_IO_ERR))) {
        client_read(c);
    }
    if (!c->closed && c->eof && !c->busy && !out_pending(c)) {
        client_close(c);
    }
    qmp_client_unref(c);
    return G_SOURCE_CONTINUE;
}

static GSourceFuncs client_source_funcs = {
    .dispatch = client_dispatch,
};

/* ---- client lifecycle --------------------------------------------------- */

/* The greeting may already fail and close the client: callers keep no pointer. */
static void client_new(QmpMonitor *mon, int rfd, int wfd, bool is_socket)
{
    QmpClient *c = g_new0(QmpClient, 1);
    JsonNode *greeting;

    c->refcnt = 1;
    c->mon = mon;
    c->rfd = rfd;
    c->wfd = wfd;
    c->is_socket = is_socket;
    json_stream_init(&c->js);
    c->in = g_byte_array_new();
    c->out = g_string_new(NULL);
    c->src = g_source_new(&client_source_funcs, sizeof(ClientSource));
    ((ClientSource *)c->src)->client = c;
    c->rtag = g_source_add_unix_fd(c->src, rfd, G_IO_IN);
    if (wfd != rfd) {
        c->wtag = g_source_add_unix_fd(c->src, wfd, 0);
    }
    g_source_attach(c->src, qmp_context());
    mon->clients = g_list_append(mon->clients, c);
    if (mon->hmp) {
        c->hmp = hmp_session_new(c, mon->opts.telnet, mon->mux);
        return;
    }
    greeting = qmp_greeting(mon->oob_offered);
    qmp_client_send(c, greeting);
    json_node_unref(greeting);
}

static void client_close(QmpClient *c)
{
    if (c->closed) {
        return;
    }
    c->closed = true;
    g_source_destroy(c->src);
    g_source_unref(c->src);
    c->src = NULL;
    if (c->is_socket || (c->mon && c->mon->mux)) {
        close(c->rfd); /* a socket, or the console's pipe */
    }
    if (c->mon) {
        c->mon->clients = g_list_remove(c->mon->clients, c);
        c->mon = NULL;
    }
    qmp_client_unref(c); /* the monitor's reference */
}

static void set_nonblock(int fd)
{
    int fl = fcntl(fd, F_GETFL);

    if (fl >= 0) {
        fcntl(fd, F_SETFL, fl | O_NONBLOCK);
    }
}

static void monitor_accept_one(QmpMonitor *mon, int fd)
{
    if (g_list_length(mon->clients) >= QMP_MAX_CLIENTS) {
        close(fd);
        return;
    }
    client_new(mon, fd, fd, true);
}

static gboolean monitor_accept(gint lfd, GIOCondition cond, gpointer opaque)
{
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            break; /* EAGAIN, or a transient error: the source stays armed */
        }
        monitor_accept_one(opaque, fd);
    }
    return G_SOURCE_CONTINUE;
}

/* wait=on: QEMU blocks startup until a client is there. */
static void monitor_wait_first(QmpMonitor *mon)
{
    struct pollfd pfd = {.fd = mon->listen_fd, .events = POLLIN};
    int fd = -1;

    info_report("%s waiting for connection on %s%s", mon->hmp ? "HMP" : "QMP",
                mon->opts.kind == QMP_CHR_UNIX ? "unix:"
                : mon->opts.telnet             ? "telnet:"
                                               : "tcp:",
                mon->opts.kind == QMP_CHR_UNIX ? mon->opts.path : mon->opts.port);
    while (fd < 0) {
        if (poll(&pfd, 1, -1) < 0 && errno != EINTR) {
            return;
        }
        fd = accept4(mon->listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    }
    monitor_accept_one(mon, fd);
}

static int socket_port(int fd)
{
    struct sockaddr_storage ss;
    socklen_t len = sizeof(ss);

    if (getsockname(fd, (struct sockaddr *)&ss, &len) < 0) {
        return -1;
    }
    if (ss.ss_family == AF_INET) {
        return ntohs(((struct sockaddr_in *)&ss)->sin_port);
    }
    if (ss.ss_family == AF_INET6) {
        return ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
    }
    return -1;
}

static void copy_opts(QmpChardevOpts *dst, const QmpChardevOpts *src)
{
    *dst = *src;
    dst->id = g_strdup(src->id);
    dst->path = g_strdup(src->path);
    dst->host = g_strdup(src->host);
    dst->port = g_strdup(src->port);
}

static struct termios hmp_saved_tty;
static bool hmp_tty_raw;

/* Context: monitor thread, or exit() */
static void stdin_restore_tty(void)
{
    if (hmp_tty_raw) {
        hmp_tty_raw = false;
        tcsetattr(0, TCSANOW, &hmp_saved_tty);
    }
}

/* A terminal on stdin: raw, so that the line editor sees every key (QEMU does the same). */
static bool stdin_make_raw(void)
{
    static bool atexit_done;
    struct termios tty;

    if (hmp_tty_raw || !isatty(0) || tcgetattr(0, &hmp_saved_tty) < 0) {
        return false;
    }
    tty = hmp_saved_tty;
    tty.c_iflag &= ~(IGNBRK | BRKINT | PARMRK | ISTRIP | INLCR | IGNCR | ICRNL | IXON);
    tty.c_lflag &= ~(ECHO | ECHONL | ICANON | IEXTEN);
    tty.c_cc[VMIN] = 1;
    tty.c_cc[VTIME] = 0;
    if (tcsetattr(0, TCSANOW, &tty) < 0) {
        return false;
    }
    hmp_tty_raw = true;
    if (!atexit_done) {
        atexit_done = true;
        atexit(stdin_restore_tty); /* an exit() that skips qmp_cleanup() */
    }
    return true;
}

static QmpMonitor *monitor_open(const QmpChardevOpts *opts, bool hmp, int rfd, int wfd,
                                GError **errp)
{
    QmpMonitor *mon = g_new0(QmpMonitor, 1);

    g_return_val_if_fail(qmp_context(), NULL);
    copy_opts(&mon->opts, opts);
    mon->hmp = hmp;
    mon->listen_fd = -1;
    mon->port = -1;
    qmp_monitors = g_list_append(qmp_monitors, mon);
    /* QEMU 7.2 offers oob on every QMP monitor, stdio included (checked). */
    mon->oob_offered = true;
    if (rfd >= 0) {
        /* The machine console's mux: input from its pipe, output to the terminal. */
        mon->mux = true;
        set_nonblock(rfd);
        client_new(mon, rfd, wfd, false);
        return mon;
    }
    if (opts->kind == QMP_CHR_STDIO) {
        set_nonblock(0);
        set_nonblock(1);
        /* Sockets use MSG_NOSIGNAL; a closed stdout pipe must not kill us either. */
        struct sigaction sa;
        if (sigaction(SIGPIPE, NULL, &sa) == 0 && sa.sa_handler == SIG_DFL) {
            signal(SIGPIPE, SIG_IGN);
        }
        mon->raw_tty = hmp && stdin_make_raw();
        client_new(mon, 0, 1, false);
        return mon;
    }
    mon->listen_fd = qmp_chardev_listen(opts, errp);
    if (mon->listen_fd < 0) {
        qmp_monitor_close(mon);
        return NULL;
    }
    mon->port = socket_port(mon->listen_fd);
    mon->listen_src = g_unix_fd_source_new(mon->listen_fd, G_IO_IN);
    g_source_set_callback(mon->listen_src, G_SOURCE_FUNC(monitor_accept), mon, NULL);
    g_source_attach(mon->listen_src, qmp_context());
    if (opts->wait) {
        monitor_wait_first(mon);
    }
    return mon;
}

/* Context: monitor thread */
QmpMonitor *qmp_monitor_open(const QmpChardevOpts *opts, GError **errp)
{
    return monitor_open(opts, false, -1, -1, errp);
}

/* Context: monitor thread */
QmpMonitor *qmp_monitor_open_mode(const QmpChardevOpts *opts, bool hmp, GError **errp)
{
    return monitor_open(opts, hmp, -1, -1, errp);
}

/* Context: monitor thread */
QmpMonitor *qmp_monitor_open_hmp_mux(int rfd, int wfd, GError **errp)
{
    QmpChardevOpts opts = {.kind = QMP_CHR_STDIO};

    return monitor_open(&opts, true, rfd, wfd, errp);
}

/* Context: monitor thread */
void qmp_monitor_close(QmpMonitor *mon)
{
    if (!mon) {
        return;
    }
    while (mon->clients) {
        client_close(mon->clients->data);
    }
    if (mon->listen_src) {
        g_source_destroy(mon->listen_src);
        g_source_unref(mon->listen_src);
    }
    if (mon->listen_fd >= 0) {
        close(mon->listen_fd);
        if (mon->opts.kind == QMP_CHR_UNIX) {
            unlink(mon->opts.path);
        }
    }
    if (mon->raw_tty) {
        stdin_restore_tty();
    }
    qmp_monitors = g_list_remove(qmp_monitors, mon);
    qmp_chardev_opts_clear(&mon->opts);
    g_free(mon);
}

/* Context: monitor thread */
int qmp_monitor_get_port(QmpMonitor *mon)
{
    return mon->port;
}

/* Context: monitor thread */
unsigned qmp_monitor_client_count(QmpMonitor *mon)
{
    return g_list_length(mon->clients);
}

/* Context: monitor thread */
void qmp_monitors_close_all(void)
{
    while (qmp_monitors) {
        qmp_monitor_close(qmp_monitors->data);
    }
}

/* Context: monitor thread */
void qmp_monitors_flush(int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

    for (GList *m = qmp_monitors; m; m = m->next) {
        GList *snapshot = g_list_copy(((QmpMonitor *)m->data)->clients);
        for (GList *l = snapshot; l; l = l->next) {
            QmpClient *c = qmp_client_ref(l->data);
            while (!c->closed && out_pending(c) && g_get_monotonic_time() < deadline) {
                struct pollfd pfd = {.fd = c->wfd, .events = POLLOUT};
                poll(&pfd, 1, 10);
                client_flush(c);
            }
            qmp_client_unref(c);
        }
        g_list_free(snapshot);
    }
}
