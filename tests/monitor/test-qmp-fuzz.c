/*
 * Robustness: 10,000 random, mutated and garbage inputs on one connection
 * (and 1,000 lines on a human monitor connection).
 * Each must produce only well-formed error (or return/event) lines, and a
 * sync command after each must be answered: the connection survives and
 * the process neither crashes nor leaks (run in the sanitizer build).
 */
#include <string.h>
#include "qmp-test-util.h"

static const char *const templates[] = {
    "{\"execute\":\"qmp_capabilities\",\"arguments\":{\"enable\":[\"oob\"]}}",
    "{\"execute\":\"query-status\",\"id\":[1,{\"a\":null}]}",
    "{\"execute\":\"qom-get\",\"arguments\":{\"path\":\"/machine\",\"property\":\"type\"}}",
    "{\"execute\":\"qom-set\",\"arguments\":{\"path\":\"/m\",\"property\":\"p\",\"value\":1.5e3}}",
    "{\"execute\":\"qom-list\",\"arguments\":{\"path\":\"machine\"}}",
    "{'execute':'query-version','id':'\\u00e9\\ud83d\\ude00\\n'}",
    "{\"exec-oob\":\"query-commands\",\"id\":-0.0}",
    "{\"execute\":\"query-qmp-schema\",\"arguments\":{}}",
    "[{\"execute\":\"stop\"},\"\\\"\",true,false,null,-12e-3]",
};

static const char charset[] = "{}[]\"':,\\ \n\t0123456789-+.eEtrufalsn/u\x01\x7f\xc3\xa9\xff\xfe";

static void gen_bytes(GString *s)
{
    int n = g_test_rand_int_range(0, 64);

    for (int i = 0; i < n; i++) {
        if (g_test_rand_int_range(0, 8) == 0) {
            g_string_append_c(s, (char)g_test_rand_int_range(1, 256));
        } else {
            g_string_append_c(s, charset[g_test_rand_int_range(0, sizeof(charset) - 1)]);
        }
    }
}

static void gen_mutation(GString *s)
{
    int muts = g_test_rand_int_range(1, 5);

    g_string_append(s, templates[g_test_rand_int_range(0, G_N_ELEMENTS(templates))]);
    for (int i = 0; i < muts && s->len; i++) {
        int pos = g_test_rand_int_range(0, s->len);
        switch (g_test_rand_int_range(0, 4)) {
        case 0:
            g_string_erase(s, pos, 1);
            break;
        case 1:
            g_string_insert_c(s, pos, charset[g_test_rand_int_range(0, sizeof(charset) - 1)]);
            break;
        case 2:
            s->str[pos] = (char)g_test_rand_int_range(1, 256);
            break;
        default:
            g_string_truncate(s, pos);
            break;
        }
    }
}

static void gen_value(GString *s, int depth)
{
    int k = g_test_rand_int_range(0, depth > 3 ? 5 : 7);

    switch (k) {
    case 0:
        g_string_append_printf(s, "%d", g_test_rand_int());
        break;
    case 1:
        g_string_append(s, g_test_rand_bit() ? "true" : "null");
        break;
    case 2:
        g_string_append_printf(s, "%g", g_test_rand_double_range(-1e300, 1e300));
        break;
    case 3:
    case 4:
        g_string_append(s, g_test_rand_bit() ? "\"query-status\"" : "\"qom-list\"");
        break;
    case 5:
        g_string_append_c(s, '[');
        for (int i = g_test_rand_int_range(0, 3); i > 0; i--) {
            gen_value(s, depth + 1);
            g_string_append(s, i > 1 ? "," : "");
        }
        g_string_append_c(s, ']');
        break;
    default: {
        static const char *const keys[] = {"execute", "arguments", "id", "path", "value", "x"};
        g_string_append_c(s, '{');
        for (int i = g_test_rand_int_range(0, 4); i > 0; i--) {
            g_string_append_printf(s, "\"%s\":", keys[g_test_rand_int_range(0, 6)]);
            gen_value(s, depth + 1);
            g_string_append(s, i > 1 ? "," : "");
        }
        g_string_append_c(s, '}');
    }
    }
}

static bool line_ok(const char *line)
{
    JsonParser *p = json_parser_new();
    bool ok = json_parser_load_from_data(p, line, -1, NULL) &&
              JSON_NODE_HOLDS_OBJECT(json_parser_get_root(p));

    g_object_unref(p);
    return ok && (g_str_has_prefix(line, "{\"error\": {\"class\": ") ||
                  g_str_has_prefix(line, "{\"id\": ") || g_str_has_prefix(line, "{\"return\": ") ||
                  g_str_has_prefix(line, "{\"timestamp\": "));
}

/* Send @input, then a resync byte and a sync command; drain to the sync reply. */
static unsigned run_one(TClient *c, const char *input, size_t len, unsigned n)
{
    g_autofree char *sync = g_strdup_printf("\xff\n{\"execute\":\"query-version\",\"id\":%u}\n", n);
    g_autofree char *tail = g_strdup_printf(", \"id\": %u}", n);
    unsigned lines = 0;

    tc_send_len(c, input, len);
    tc_send(c, sync);
    for (;;) {
        g_autofree char *line = tc_recv(c);
        if (!line) {
            g_error("no sync reply after input #%u: %s", n, input);
        }
        if (g_str_has_prefix(line, "{\"return\": {\"qemu\"") && g_str_has_suffix(line, tail)) {
            return lines;
        }
        if (!line_ok(line)) {
            g_error("bad reply line for input #%u (%s): %s", n, input, line);
        }
        lines++;
    }
}

static void test_fuzz(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    unsigned replies = 0;

    tc_negotiate(c);
    for (unsigned i = 0; i < 10000; i++) {
        GString *s = g_string_new(NULL);
        switch (i % 3) {
        case 0:
            gen_bytes(s);
            break;
        case 1:
            gen_mutation(s);
            break;
        default:
            gen_value(s, 0);
            break;
        }
        replies += run_one(c, s->str, s->len, i);
        g_string_free(s, TRUE);
    }
    g_test_message("%u error/return lines for 10000 inputs", replies);
    g_assert_cmpuint(qmp_monitor_client_count(mon), ==, 1);
    tc_close(c);
    test_teardown(mon, path);
}

/* ---- the human monitor ------------------------------------------------ */

static const char *const hmp_templates[] = {
    "info block -n -v drive0",
    "info status",
    "qom-set -j /machine type {\"a\":[1,2,{\"b\":null}]}",
    "qom-set /machine x \"a b\\n\\\"c\"",
    "qom-get \"/machine\" \"type\"",
    "qom-list /machine",
    "block_set_io_throttle drive0 0x10 -1 +2 3 4 5",
    "block_resize drive0 1.5G",
    "help info status",
    "info virtio-blk-dataplane",
    "stop|s",
    "\x1b[A\x1b[3~\x1b[1;5D\x1bOB\x05\x0b\x7f\x08",
    "\xff\xfd\x01\xff\xfa\x18\xff\xf0",
};

/* One line for the human monitor: a template mutated, or random bytes. */
static void gen_hmp_line(GString *s)
{
    if (g_test_rand_int_range(0, 4) == 0) {
        int n = g_test_rand_int_range(0, 300);

        for (int i = 0; i < n; i++) {
            g_string_append_c(s, (char)g_test_rand_int_range(1, 256));
        }
    } else {
        g_string_append(s, hmp_templates[g_test_rand_int_range(0, G_N_ELEMENTS(hmp_templates))]);
        for (int m = g_test_rand_int_range(0, 4); m > 0 && s->len; m--) {
            guint pos = g_test_rand_int_range(0, s->len);

            switch (g_test_rand_int_range(0, 3)) {
            case 0:
                s->str[pos] = (char)g_test_rand_int_range(1, 256);
                break;
            case 1:
                g_string_erase(s, pos, 1);
                break;
            default:
                g_string_insert_c(s, pos, " \"\\-|?\x1b"[g_test_rand_int_range(0, 7)]);
                break;
            }
        }
    }
    /*
     * One line per input; and no 'q': junk such as Ctrl-U then 'q' would type
     * "q", which is quit, after which the monitor reads nothing more (QEMU's).
     */
    for (gsize i = 0; i < s->len; i++) {
        if (s->str[i] == '\r' || s->str[i] == '\n') {
            s->str[i] = ' ';
        } else if (s->str[i] == 'q' && !g_str_has_prefix(s->str + i, "qom-")) {
            s->str[i] = 'Q';
        }
    }
    g_string_append_c(s, '\n');
}

static char *hmp_last_input; /* for the failure message */

/* Reads lines until one contains @needle; fails after 5 s without it. */
static void hmp_wait(TClient *c, const char *needle, unsigned n)
{
    for (;;) {
        g_autofree char *line = tc_recv(c);

        if (!line) {
            g_autofree char *esc = g_strescape(hmp_last_input ?: "", NULL);

            g_error("HMP input #%u (%s): no \"%s\" (monitor gone or stuck)", n, esc, needle);
        }
        if (strstr(line, needle)) {
            return;
        }
    }
}

/* 1000 hostile lines on one HMP connection; after each a command must still be answered. */
static void test_hmp_fuzz(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    g_autofree char *dir = g_path_get_dirname(path);
    g_autofree char *hpath = g_build_filename(dir, "hmp.sock", NULL);
    g_autofree char *harg = g_strdup_printf("unix:%s,server=on,wait=off", hpath);
    QmpMonitor *hmon = qmp_monitor_add_hmp(harg, NULL);
    TClient *h;

    g_assert_nonnull(hmon);
    h = tc_connect(hpath);
    hmp_wait(h, "monitor - type 'help'", 0);
    for (unsigned i = 0; i < 1000; i++) {
        GString *s = g_string_new(NULL);

        gen_hmp_line(s);
        tc_send_len(h, s->str, s->len);
        g_free(hmp_last_input);
        hmp_last_input = g_string_free(s, FALSE);
        tc_send(h, "\x15info status\n");
        hmp_wait(h, "VM status: ", i);
    }
    g_assert_cmpuint(qmp_monitor_client_count(hmon), ==, 1);
    tc_send(h, "\x15info version\n");
    hmp_wait(h, "7.2.0vblk-", 1000);
    tc_close(h);
    g_clear_pointer(&hmp_last_input, g_free);
    unlink(hpath);
    test_teardown(mon, path);
}

static void test_limits(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    GString *s = g_string_new(NULL);

    tc_negotiate(c);
    for (int i = 0; i < 2000; i++) {
        g_string_append_c(s, '[');
    }
    tc_send(c, s->str);
    tc_expect(c, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"JSON parse error, nesting "
                 "depth limit exceeded\"}}");
    run_one(c, "", 0, 1);
    /* 1024 levels are fine (and a non-object, so an error of another kind). */
    g_string_truncate(s, 0);
    for (int i = 0; i < 1024; i++) {
        g_string_append_c(s, '[');
    }
    for (int i = 0; i < 1024; i++) {
        g_string_append_c(s, ']');
    }
    tc_send(c, s->str);
    tc_expect(c, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"QMP input must be a JSON "
                 "object\"}}");
    g_string_assign(s, "{\"execute\":\"");
    while (s->len < (9u << 20)) {
        g_string_append(s, "abcdefghijklmnopqrstuvwxyz");
    }
    tc_send(c, s->str);
    tc_expect(c, "{\"error\": {\"class\": \"GenericError\", \"desc\": \"JSON parse error, input "
                 "size limit exceeded\"}}");
    run_one(c, "\"}", 2, 2);
    g_string_free(s, TRUE);
    tc_close(c);
    test_teardown(mon, path);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qmp/fuzz-10000", test_fuzz);
    g_test_add_func("/qmp/limits", test_limits);
    g_test_add_func("/qmp/hmp-fuzz-1000", test_hmp_fuzz);
    return g_test_run();
}
