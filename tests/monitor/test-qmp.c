/*
 * QMP protocol tests through real unix sockets: greeting, negotiation,
 * QEMU's error replies, framing (fragmented, pipelined, malformed), id echo,
 * several clients, events, deferred replies, disconnects.
 */
#include <string.h>
#include <unistd.h>
#include "qmp-test-util.h"

typedef struct Exchange {
    const char *in;
    const char *out;
} Exchange;

static void run_exchanges(TClient *c, const Exchange *ex)
{
    for (; ex->in; ex++) {
        g_autofree char *line = tc_cmd(c, ex->in);
        g_assert_cmpstr(line, ==, ex->out);
    }
}

#define GENERIC(desc)   "{\"error\": {\"class\": \"GenericError\", \"desc\": \"" desc "\"}}"
#define NOT_FOUND(desc) "{\"error\": {\"class\": \"CommandNotFound\", \"desc\": \"" desc "\"}}"
#define VERSION_RET                                                                                \
    "{\"qemu\": {\"micro\": 0, \"minor\": 2, \"major\": 7}, \"package\": \"vblk-" VBLK_VERSION "\"}"

static JsonNode *cmd_echo(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonNode *n = json_node_new(JSON_NODE_OBJECT);

    json_node_set_object(n, args);
    return n;
}

static JsonNode *cmd_fail(QmpRequest *req, JsonObject *args, GError **errp)
{
    g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_ACTIVE, "Device 'x' has not been activated");
    return NULL;
}

static const QmpArgSpec echo_args[] = {
    {"s", QMP_ARG_STR, false},         {"i", QMP_ARG_INT, true},
    {"b", QMP_ARG_BOOL, true},         {"n", QMP_ARG_NUMBER, true},
    {"u", QMP_ARG_UINT, true},         {"o", QMP_ARG_OBJECT, true},
    {"a", QMP_ARG_ARRAY, true},        {"x", QMP_ARG_ANY, true},
    {"sn", QMP_ARG_STR_OR_NULL, true}, QMP_ARGS_END,
};

static void test_greeting(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    static const Exchange ex[] = {
        {"{\"execute\":\"query-version\"}",
         NOT_FOUND("Expecting capabilities negotiation with 'qmp_capabilities'")},
        {"{\"execute\":\"nonexistent\",\"id\":5}",
         "{\"id\": 5, \"error\": {\"class\": \"CommandNotFound\", \"desc\": \"Expecting "
         "capabilities negotiation with 'qmp_capabilities'\"}}"},
        {"{\"execute\":\"qmp_capabilities\",\"arguments\":{\"enable\":[\"foo\"]}}",
         GENERIC("Parameter 'null' does not accept value 'foo'")},
        {"{\"execute\":\"qmp_capabilities\",\"arguments\":{\"enable\":\"oob\"}}",
         GENERIC("Invalid parameter type for 'enable', expected: array")},
        {"{\"execute\":\"qmp_capabilities\",\"arguments\":{\"x\":1}}",
         GENERIC("Parameter 'x' is unexpected")},
        {"{\"execute\":\"qmp_capabilities\",\"arguments\":{\"enable\":[\"oob\"]},\"id\":{\"a\":[1]}"
         "}",
         "{\"return\": {}, \"id\": {\"a\": [1]}}"},
        {"{\"execute\":\"qmp_capabilities\"}",
         NOT_FOUND("Capabilities negotiation is already complete, command ignored")},
        {"{\"execute\":\"query-version\"}", "{\"return\": " VERSION_RET "}"},
        {"{\"exec-oob\":\"query-status\",\"id\":3}",
         "{\"id\": 3, \"error\": {\"class\": \"GenericError\", \"desc\": \"The command "
         "query-status does not support OOB\"}}"},
        {"{\"execute\":\"query-status\",\"exec-oob\":\"query-status\"}",
         GENERIC("QMP input member 'execute' clashes with 'exec-oob'")},
        {"{\"execute\":\"query-status\",\"id\":1,\"id\":2}",
         GENERIC("JSON parse error, duplicate key")},
        {"{\"execute\":\"nope\",\"id\":\"x\"}",
         "{\"id\": \"x\", \"error\": {\"class\": \"CommandNotFound\", \"desc\": \"The command nope "
         "has not been found\"}}"},
        {NULL, NULL},
    };

    tc_expect(c, QMP_TEST_GREETING);
    run_exchanges(c, ex);
    tc_close(c);
    test_teardown(mon, path);
}

static void test_arguments(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c;
    static const Exchange ex[] = {
        {"{\"execute\":\"echo\"}", GENERIC("Parameter 's' is missing")},
        {"{\"execute\":\"echo\",\"arguments\":{}}", GENERIC("Parameter 's' is missing")},
        {"{\"execute\":\"echo\",\"arguments\":{\"s\":1}}",
         GENERIC("Invalid parameter type for 's', expected: string")},
        {"{\"execute\":\"echo\",\"arguments\":{\"s\":\"a\",\"i\":1.0}}",
         GENERIC("Invalid parameter type for 'i', expected: integer")},
        {"{\"execute\":\"echo\",\"arguments\":{\"s\":\"a\",\"b\":1}}",
         GENERIC("Invalid parameter type for 'b', expected: boolean")},
        {"{\"execute\":\"echo\",\"arguments\":{\"s\":\"a\",\"n\":\"1\"}}",
         GENERIC("Invalid parameter type for 'n', expected: number")},
        {"{\"execute\":\"echo\",\"arguments\":{\"s\":\"a\",\"u\":-1}}",
         GENERIC("Invalid parameter type for 'u', expected: uint64")},
        {"{\"execute\":\"echo\",\"arguments\":{\"s\":\"a\",\"o\":[]}}",
         GENERIC("Invalid parameter type for 'o', expected: object")},
        {"{\"execute\":\"echo\",\"arguments\":{\"s\":\"a\",\"a\":{}}}",
         GENERIC("Invalid parameter type for 'a', expected: array")},
        {"{\"execute\":\"echo\",\"arguments\":{\"s\":\"a\",\"i\":null}}",
         GENERIC("Invalid parameter type for 'i', expected: integer")},
        {"{\"execute\":\"echo\",\"arguments\":{\"s\":\"a\",\"zz\":1}}",
         GENERIC("Parameter 'zz' is unexpected")},
        {"{\"execute\":\"echo\",\"arguments\":{\"zz\":1,\"s\":2}}",
         GENERIC("Invalid parameter type for 's', expected: string")},
        {"{\"execute\":\"echo\",\"arguments\":{\"x\":[null],\"s\":\"a\",\"n\":2,\"sn\":null,"
         "\"i\":-3,\"u\":4,\"b\":false,\"o\":{},\"a\":[]}}",
         "{\"return\": {\"s\": \"a\", \"i\": -3, \"b\": false, \"n\": 2, \"u\": 4, \"o\": {}, "
         "\"a\": [], \"x\": [null], \"sn\": null}}"},
        {"{\"execute\":\"fail\",\"id\":1}",
         "{\"id\": 1, \"error\": {\"class\": \"DeviceNotActive\", \"desc\": \"Device 'x' has not "
         "been activated\"}}"},
        {NULL, NULL},
    };

    g_assert_true(qmp_register_command("echo", cmd_echo, echo_args, 0, NULL));
    g_assert_false(qmp_register_command("echo", cmd_echo, echo_args, 0, NULL));
    g_assert_true(qmp_register_command("fail", cmd_fail, NULL, 0, NULL));
    c = tc_connect(path);
    tc_negotiate(c);
    run_exchanges(c, ex);
    tc_close(c);
    test_teardown(mon, path);
}

static void test_malformed(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    static const Exchange ex[] = {
        {"{\"a\":tru}", GENERIC("JSON parse error, invalid keyword 'tru'")},
        {"{\"a\" 1}", GENERIC("JSON parse error, missing : in object pair")},
        {"{\"a\":1,}", GENERIC("JSON parse error, expecting value")},
        {"}", GENERIC("JSON parse error, expecting value")},
        {"[1,2]", GENERIC("QMP input must be a JSON object")},
        {"\"abc\"", GENERIC("QMP input must be a JSON object")},
        {"42\n", GENERIC("QMP input must be a JSON object")},
        {"{\"execute\":1}", GENERIC("QMP input member 'execute' must be a string")},
        {"{\"id\":7}",
         "{\"id\": 7, \"error\": {\"class\": \"GenericError\", \"desc\": \"QMP input lacks member "
         "'execute'\"}}"},
        {"{\"execute\":\"query-version\",\"extra\":1}",
         GENERIC("QMP input member 'extra' is unexpected")},
        {"{\"execute\":\"query-version\",\"arguments\":[1]}",
         GENERIC("QMP input member 'arguments' must be an object")},
        {"{\"execute\":\"query-version\",\"arguments\":{\"a\":1}}",
         GENERIC("Parameter 'a' is unexpected")},
        {"{\"exec-oob\":\"query-version\"}", GENERIC("QMP input member 'exec-oob' is unexpected")},
        {"{\"execute\":\"query-version\",\"id\":\"\\ud800\"}",
         GENERIC("JSON parse error, \\\\ud800 is not a valid Unicode character")},
        {"{'execute':'query-version','id':'single'}",
         "{\"return\": " VERSION_RET ", \"id\": \"single\"}"},
        {"#", GENERIC("JSON parse error, stray '#'")},
        {"\n{\"execute\":\"query-version\"}", "{\"return\": " VERSION_RET "}"},
        {NULL, NULL},
    };

    tc_negotiate(c);
    run_exchanges(c, ex);
    tc_close(c);
    test_teardown(mon, path);
}

static void test_id_echo(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    static const char *const ids[] = {
        "1",
        "-5",
        "\"x\"",
        "null",
        "true",
        "[1, {\"b\": false}]",
        "{\"a\": \"b\"}",
        "1500",
        "\"\\u00E9\\u0007\\u0000\"",
        "\"\\uD83D\\uDE00\"",
        "\"a\\tb/\"",
        "0.10000000000000001",
    };

    tc_negotiate(c);
    for (size_t i = 0; i < G_N_ELEMENTS(ids); i++) {
        g_autofree char *in = g_strdup_printf("{\"execute\":\"query-status\",\"id\":%s}", ids[i]);
        g_autofree char *want = g_strdup_printf(
            "{\"return\": {\"status\": \"running\", \"singlestep\": false, \"running\": true}, "
            "\"id\": %s}",
            ids[i]);
        g_autofree char *got = tc_cmd(c, in);
        g_assert_cmpstr(got, ==, want);
    }
    /* Inputs QEMU normalises on the way back. */
    tc_send(c, "{\"execute\":\"query-status\",\"id\":1.5e3}");
    g_free(tc_recv(c));
    tc_send(c, "{\"execute\":\"query-status\",\"id\":\"\xc3\xa9\\/\"}");
    tc_expect(c, "{\"return\": {\"status\": \"running\", \"singlestep\": false, \"running\": "
                 "true}, \"id\": \"\\u00E9/\"}");
    tc_close(c);
    test_teardown(mon, path);
}

static void test_fragmented_pipelined(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    const char *cmd = "{ \"execute\" : \"query-status\", \"id\": \"a{b}[c]\\\"d\\\\\" }";
    GString *many = g_string_new(NULL);

    tc_negotiate(c);
    for (const char *p = cmd; *p; p++) {
        tc_send_len(c, p, 1);
        test_pump(0);
    }
    tc_expect(c, "{\"return\": {\"status\": \"running\", \"singlestep\": false, \"running\": "
                 "true}, \"id\": \"a{b}[c]\\\"d\\\\\"}");
    for (int i = 0; i < 50; i++) {
        g_string_append_printf(many, "{\"execute\":\"query-status\",\"id\":%d}%s", i,
                               i % 3 ? "" : "\n");
    }
    tc_send(c, many->str);
    for (int i = 0; i < 50; i++) {
        g_autofree char *want = g_strdup_printf(
            "{\"return\": {\"status\": \"running\", \"singlestep\": false, \"running\": true}, "
            "\"id\": %d}",
            i);
        tc_expect(c, want);
    }
    g_string_free(many, TRUE);
    tc_close(c);
    test_teardown(mon, path);
}

static gpointer emit_from_thread(gpointer opaque)
{
    qmp_emit_reset(true, "guest-reset");
    return NULL;
}

static void test_two_clients_events(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *a = tc_connect(path), *b = tc_connect(path);
    g_autofree char *line = NULL;
    JsonParser *p = json_parser_new();
    JsonObject *o, *ts;

    tc_negotiate(a);
    tc_expect(b, QMP_TEST_GREETING);
    /* b is not negotiated: no events, and its commands are refused. */
    tc_send(a, "{\"execute\":\"stop\"}");
    line = tc_recv(a);
    g_assert_true(g_str_has_prefix(line, "{\"timestamp\": {\"seconds\": "));
    g_assert_true(g_str_has_suffix(line, "}, \"event\": \"STOP\"}"));
    g_assert_true(json_parser_load_from_data(p, line, -1, NULL));
    o = json_node_get_object(json_parser_get_root(p));
    ts = json_object_get_object_member(o, "timestamp");
    g_assert_cmpint(json_object_get_int_member(ts, "seconds"), >, 1600000000);
    g_assert_cmpint(json_object_get_int_member(ts, "microseconds"), <, 1000000);
    tc_expect(a, "{\"return\": {}}");
    g_assert_true(tc_quiet(b, 50));
    tc_send(b, "{\"execute\":\"query-status\"}");
    tc_expect(b, NOT_FOUND("Expecting capabilities negotiation with 'qmp_capabilities'"));
    tc_send(b, "{\"execute\":\"qmp_capabilities\"}");
    tc_expect(b, "{\"return\": {}}");
    tc_send(a, "{\"execute\":\"stop\"}"); /* already paused: no event, as QEMU */
    tc_expect(a, "{\"return\": {}}");
    /* An event from another thread reaches both negotiated clients. */
    GThread *t = g_thread_new("ev", emit_from_thread, NULL);
    g_thread_join(t);
    g_free(line);
    line = tc_recv(a);
    g_assert_true(g_str_has_suffix(line, "\"event\": \"RESET\", \"data\": {\"guest\": true, "
                                         "\"reason\": \"guest-reset\"}}"));
    g_free(line);
    line = tc_recv(b);
    g_assert_nonnull(strstr(line, "\"event\": \"RESET\""));
    tc_send(b, "{\"execute\":\"cont\"}");
    g_free(line);
    line = tc_recv(b);
    g_assert_nonnull(strstr(line, "\"event\": \"RESUME\"}"));
    tc_expect(b, "{\"return\": {}}");
    g_free(line);
    line = tc_recv(a);
    g_assert_nonnull(strstr(line, "\"event\": \"RESUME\"}"));
    g_object_unref(p);
    tc_close(a);
    tc_close(b);
    test_teardown(mon, path);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qmp/greeting-negotiation", test_greeting);
    g_test_add_func("/qmp/arguments", test_arguments);
    g_test_add_func("/qmp/malformed", test_malformed);
    g_test_add_func("/qmp/id-echo", test_id_echo);
    g_test_add_func("/qmp/fragmented-pipelined", test_fragmented_pipelined);
    g_test_add_func("/qmp/two-clients-events", test_two_clients_events);
    return g_test_run();
}
