/*
 * Monitor transports as QEMU spells them on the command line: -qmp
 * unix:/tcp:/stdio, -chardev socket|stdio,id=... and -mon chardev=...,mode=control,
 * plus the listening sockets behind them.
 */
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "qmp-internal.h"

static GHashTable *qmp_chardevs; /* id -> QmpChardevOpts */

/* QEMU's option syntax: comma-separated, ",," is a literal comma. */
static GPtrArray *split_opts(const char *s)
{
    GPtrArray *parts = g_ptr_array_new_with_free_func(g_free);
    GString *cur = g_string_new(NULL);

    for (; *s; s++) {
        if (*s == ',' && s[1] == ',') {
            g_string_append_c(cur, ',');
            s++;
        } else if (*s == ',') {
            g_ptr_array_add(parts, g_string_free(cur, FALSE));
            cur = g_string_new(NULL);
        } else {
            g_string_append_c(cur, *s);
        }
    }
    g_ptr_array_add(parts, g_string_free(cur, FALSE));
    return parts;
}

static bool parse_bool(const char *key, const char *val, bool *out, GError **errp)
{
    if (!val || !strcmp(val, "on") || !strcmp(val, "yes") || !strcmp(val, "true")) {
        *out = true;
    } else if (!strcmp(val, "off") || !strcmp(val, "no") || !strcmp(val, "false")) {
        *out = false;
    } else {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Parameter '%s' expects 'on' or 'off'",
                    key);
        return false;
    }
    return true;
}

/* Options shared by -qmp and -chardev socket; false with errp on an unknown key. */
static bool parse_flag(QmpChardevOpts *o, const char *key, const char *val, bool *wait_set,
                       GError **errp)
{
    if (!strcmp(key, "server")) {
        return parse_bool(key, val, &o->server, errp);
    }
    if (!strcmp(key, "wait")) {
        *wait_set = true;
        return parse_bool(key, val, &o->wait, errp);
    }
    if (!strcmp(key, "nowait") && !val) {
        *wait_set = true;
        o->wait = false;
        return true;
    }
    if (!strcmp(key, "nodelay") || !strcmp(key, "ipv4") || !strcmp(key, "ipv6")) {
        return true; /* accepted for compatibility, no effect */
    }
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Invalid parameter '%s'", key);
    return false;
}

static bool parse_tcp_addr(const char *addr, QmpChardevOpts *o, GError **errp)
{
    const char *colon = strrchr(addr, ':');

    if (!colon || !colon[1]) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "error parsing address '%s'", addr);
        return false;
    }
    if (addr[0] == '[' && colon > addr && colon[-1] == ']') {
        o->host = g_strndup(addr + 1, colon - addr - 2);
    } else {
        o->host = g_strndup(addr, colon - addr);
    }
    o->port = g_strdup(colon + 1);
    return true;
}

static bool finish_opts(QmpChardevOpts *o, bool wait_set, GError **errp)
{
    if (o->kind == QMP_CHR_STDIO) {
        o->server = false;
        o->wait = false;
        return true;
    }
    if (!o->server) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "only server=on sockets are supported for monitors");
        return false;
    }
    if (!wait_set) {
        o->wait = true; /* QEMU's default for server sockets */
    }
    return true;
}

static bool parse_keyvals(GPtrArray *parts, guint first, QmpChardevOpts *o, bool chardev,
                          GError **errp)
{
    bool wait_set = false;

    for (guint i = first; i < parts->len; i++) {
        char *key = parts->pdata[i];
        char *eq = strchr(key, '=');
        g_autofree char *k = eq ? g_strndup(key, eq - key) : g_strdup(key);
        const char *val = eq ? eq + 1 : NULL;

        if (chardev && val &&
            (!strcmp(k, "id") || !strcmp(k, "path") || !strcmp(k, "host") || !strcmp(k, "port"))) {
            char **slot = !strcmp(k, "id")     ? &o->id
                          : !strcmp(k, "path") ? &o->path
                          : !strcmp(k, "host") ? &o->host
                                               : &o->port;
            g_free(*slot);
            *slot = g_strdup(val);
        } else if (chardev && !strcmp(k, "signal") && o->kind == QMP_CHR_STDIO) {
            continue;
        } else if (chardev && !strcmp(k, "telnet")) {
            if (!parse_bool(k, val, &o->telnet, errp)) {
                return false;
            }
        } else if (!parse_flag(o, k, val, &wait_set, errp)) {
            return false;
        }
    }
    return finish_opts(o, wait_set, errp);
}

/* Context: main thread (command line) */
bool qmp_parse_qmp_arg(const char *value, QmpChardevOpts *out, GError **errp)
{
    g_autoptr(GPtrArray) parts = split_opts(value);
    const char *be = parts->pdata[0];

    memset(out, 0, sizeof(*out));
    if (!strcmp(be, "stdio")) {
        out->kind = QMP_CHR_STDIO;
    } else if (g_str_has_prefix(be, "unix:") && be[5]) {
        out->kind = QMP_CHR_UNIX;
        out->path = g_strdup(be + 5);
    } else if (g_str_has_prefix(be, "tcp:") || g_str_has_prefix(be, "telnet:")) {
        out->kind = QMP_CHR_TCP;
        out->telnet = be[0] == 't' && be[1] == 'e';
        if (!parse_tcp_addr(be + (out->telnet ? 7 : 4), out, errp)) {
            return false;
        }
        if (out->telnet && !*out->host) {
            /* The human monitor runs every command: not on every interface by default. */
            g_free(out->host);
            out->host = g_strdup("127.0.0.1");
        }
    } else {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "'%s' is not a supported monitor backend (unix:PATH, tcp:HOST:PORT, stdio)",
                    be);
        return false;
    }
    if (!parse_keyvals(parts, 1, out, false, errp)) {
        qmp_chardev_opts_clear(out);
        return false;
    }
    return true;
}

/* Context: main thread (command line) */
bool qmp_parse_chardev_arg(const char *value, QmpChardevOpts *out, GError **errp)
{
    g_autoptr(GPtrArray) parts = split_opts(value);
    const char *be = parts->pdata[0];

    memset(out, 0, sizeof(*out));
    if (!strcmp(be, "stdio")) {
        out->kind = QMP_CHR_STDIO;
    } else if (!strcmp(be, "socket")) {
        out->kind = QMP_CHR_UNIX;
    } else {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "chardev backend '%s' is not supported (socket, stdio)", be);
        return false;
    }
    if (!parse_keyvals(parts, 1, out, true, errp)) {
        goto fail;
    }
    if (!out->id) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Parameter 'id' is missing");
        goto fail;
    }
    if (!strcmp(be, "socket") && !out->path) {
        if (!out->port) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "chardev: socket: no local address specified");
            goto fail;
        }
        out->kind = QMP_CHR_TCP;
        if (!out->host) {
            out->host = g_strdup("localhost");
        }
    }
    return true;
fail:
    qmp_chardev_opts_clear(out);
    return false;
}

/* Context: any thread */
void qmp_chardev_opts_clear(QmpChardevOpts *o)
{
    g_clear_pointer(&o->id, g_free);
    g_clear_pointer(&o->path, g_free);
    g_clear_pointer(&o->host, g_free);
    g_clear_pointer(&o->port, g_free);
}

static void chardev_free(gpointer p)
{
    qmp_chardev_opts_clear(p);
    g_free(p);
}

/* Context: main thread (command line) */
bool qmp_chardev_add(const char *value, GError **errp)
{
    QmpChardevOpts *o = g_new0(QmpChardevOpts, 1);

    if (!qmp_parse_chardev_arg(value, o, errp)) {
        g_free(o);
        return false;
    }
    if (!qmp_chardevs) {
        qmp_chardevs = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, chardev_free);
    }
    if (g_hash_table_contains(qmp_chardevs, o->id)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Duplicate ID '%s' for chardev", o->id);
        chardev_free(o);
        return false;
    }
    g_hash_table_insert(qmp_chardevs, o->id, o);
    return true;
}

/* Context: main thread (command line) */
QmpMonitor *qmp_monitor_add_mon(const char *value, GError **errp)
{
    g_autoptr(GPtrArray) parts = split_opts(value);
    const char *chr = NULL, *mode = "readline";
    QmpChardevOpts *o;

    for (guint i = 0; i < parts->len; i++) {
        const char *kv = parts->pdata[i];
        bool pretty = false;
        if (g_str_has_prefix(kv, "chardev=")) {
            chr = kv + 8;
        } else if (g_str_has_prefix(kv, "mode=")) {
            mode = kv + 5;
        } else if (g_str_has_prefix(kv, "pretty=")) {
            if (!parse_bool("pretty", kv + 7, &pretty, errp)) {
                return NULL;
            }
            if (pretty) {
                g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "pretty=on is not supported");
                return NULL;
            }
        } else {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Invalid parameter '%s'", kv);
            return NULL;
        }
    }
    if (strcmp(mode, "control") && strcmp(mode, "readline")) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "Parameter 'mode' does not accept value '%s'", mode);
        return NULL;
    }
    o = chr && qmp_chardevs ? g_hash_table_lookup(qmp_chardevs, chr) : NULL;
    if (!o) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "chardev \"%s\" not found", chr ? chr : "");
        return NULL;
    }
    return qmp_monitor_open_mode(o, !strcmp(mode, "readline"), errp);
}

/* Context: main thread (command line) */
QmpMonitor *qmp_monitor_add_qmp(const char *value, GError **errp)
{
    QmpChardevOpts o;
    QmpMonitor *mon;

    if (!qmp_parse_qmp_arg(value, &o, errp)) {
        return NULL;
    }
    mon = qmp_monitor_open(&o, errp);
    qmp_chardev_opts_clear(&o);
    return mon;
}

/* Context: main thread (command line) */
QmpMonitor *qmp_monitor_add_hmp(const char *value, GError **errp)
{
    QmpChardevOpts o;
    QmpMonitor *mon;

    if (!qmp_parse_qmp_arg(value, &o, errp)) {
        return NULL;
    }
    mon = qmp_monitor_open_mode(&o, true, errp);
    qmp_chardev_opts_clear(&o);
    return mon;
}

/* Context: monitor thread */
void qmp_chardevs_cleanup(void)
{
    g_clear_pointer(&qmp_chardevs, g_hash_table_destroy);
}

/* ---- listening sockets ------------------------------------------------ */

/* A leftover socket nobody listens on is removed; anything else is an error. */
static bool unix_clear_stale(const char *path, const struct sockaddr_un *sa, GError **errp)
{
    struct stat st;
    int fd, rc;

    if (lstat(path, &st) < 0) {
        return true;
    }
    if (!S_ISSOCK(st.st_mode)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "'%s' exists and is not a socket", path);
        return false;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    rc = fd < 0 ? -1 : connect(fd, (const struct sockaddr *)sa, sizeof(*sa));
    if (fd >= 0) {
        close(fd);
    }
    if (rc == 0) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "'%s' is in use by another process", path);
        return false;
    }
    unlink(path);
    return true;
}

static int unix_listen(const char *path, GError **errp)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "UNIX socket path '%s' is too long", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    if (!unix_clear_stale(path, &sa, errp)) {
        return -1;
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        goto fail;
    }
    /* Linux creates the socket inode with the fd's mode: never wider than 0600. */
    if (fchmod(fd, 0600) < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        goto fail;
    }
    if (chmod(path, 0600) < 0 || listen(fd, 16) < 0) {
        unlink(path);
        goto fail;
    }
    return fd;
fail:
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Failed to bind socket to %s: %s", path,
                g_strerror(errno));
    if (fd >= 0) {
        close(fd);
    }
    return -1;
}

static int tcp_listen(const char *host, const char *port, GError **errp)
{
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE};
    struct addrinfo *res = NULL;
    int rc, fd = -1, one = 1, saved = 0;

    rc = getaddrinfo(host && *host ? host : NULL, port, &hints, &res);
    if (rc) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "address resolution failed for %s:%s: %s",
                    host, port, gai_strerror(rc));
        return -1;
    }
    for (struct addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            saved = errno;
            continue;
        }
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 16) < 0) {
            saved = errno;
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Failed to listen on %s:%s: %s", host, port,
                    g_strerror(saved));
    }
    return fd;
}

/* Context: main thread */
int qmp_chardev_listen(const QmpChardevOpts *opts, GError **errp)
{
    if (opts->kind == QMP_CHR_UNIX) {
        return unix_listen(opts->path, errp);
    }
    return tcp_listen(opts->host, opts->port, errp);
}
