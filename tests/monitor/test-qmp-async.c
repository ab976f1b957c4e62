/*
 * Deferred replies, the QOM front-end, run-state hooks and clients that
 * disconnect at awkward moments.
 */
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "qmp-test-util.h"

#define GENERIC(desc) "{\"error\": {\"class\": \"GenericError\", \"desc\": \"" desc "\"}}"

/* ---- deferred replies -------------------------------------------------- */

static gpointer complete_later(gpointer opaque)
{
    g_usleep(30000);
    qmp_reply_deferred(opaque, json_node_init_int(json_node_alloc(), 42), NULL);
    return NULL;
}

static JsonNode *cmd_slow(QmpRequest *req, JsonObject *args, GError **errp)
{
    QmpDeferred *d = qmp_request_defer(req);

    if (json_object_has_member(args, "fail")) {
        /* Completing from inside the handler must still order correctly. */
        qmp_reply_deferred(d, NULL, g_error_new(QMP_ERROR, QMP_ERROR_DEVICE_NOT_FOUND, "nope"));
        return NULL;
    }
    g_thread_unref(g_thread_new("slow", complete_later, d));
    return NULL;
}

static const QmpArgSpec slow_args[] = {
    {"fail", QMP_ARG_BOOL, true},
    QMP_ARGS_END,
};

static void test_deferred(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *a, *b;

    qmp_register_command("x-slow", cmd_slow, slow_args, 0, NULL);
    a = tc_connect(path);
    b = tc_connect(path);
    tc_negotiate(a);
    tc_negotiate(b);
    /* Pipelined behind a deferred command: replies stay in order. */
    tc_send(a, "{\"execute\":\"x-slow\",\"id\":1}{\"execute\":\"query-status\",\"id\":2}"
               "{\"execute\":\"x-slow\",\"id\":3,\"arguments\":{\"fail\":true}}");
    /* Another client is not held up meanwhile. */
    tc_send(b, "{\"execute\":\"query-status\",\"id\":\"b\"}");
    tc_expect(b, "{\"return\": {\"status\": \"running\", \"singlestep\": false, \"running\": "
                 "true}, \"id\": \"b\"}");
    tc_expect(a, "{\"return\": 42, \"id\": 1}");
    tc_expect(a, "{\"return\": {\"status\": \"running\", \"singlestep\": false, \"running\": "
                 "true}, \"id\": 2}");
    tc_expect(a, "{\"id\": 3, \"error\": {\"class\": \"DeviceNotFound\", \"desc\": \"nope\"}}");
    /* The client leaves before its deferred reply: the token stays valid. */
    tc_send(a, "{\"execute\":\"x-slow\",\"id\":4}");
    test_pump(5);
    tc_close(a);
    test_pump(300); /* generous: the completing thread sleeps 30 ms */
    g_assert_cmpuint(qmp_monitor_client_count(mon), ==, 1);
    tc_close(b);
    test_pump(10);
    g_assert_cmpuint(qmp_monitor_client_count(mon), ==, 0);
    test_teardown(mon, path);
}

/* ---- QOM ---------------------------------------------------------------- */

static bool dp_value;
static QmpDeferred *dp_pending;

static JsonNode *get_dp(const char *path, const char *name, void *opaque, GError **errp)
{
    return json_node_init_boolean(json_node_alloc(), dp_value);
}

static bool set_dp(const char *path, const char *name, JsonNode *value, QmpRequest *req,
                   void *opaque, GError **errp)
{
    if (dp_pending) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "switch already in progress");
        return false;
    }
    dp_value = json_node_get_boolean(value);
    dp_pending = qmp_request_defer(req); /* completes "later in another thread" */
    return true;
}

static JsonNode *get_num(const char *path, const char *name, void *opaque, GError **errp)
{
    return json_node_init_int(json_node_alloc(), GPOINTER_TO_INT(opaque));
}

static void test_qom(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    GError *err = NULL;
    static const struct {
        const char *in, *out;
    } ex[] = {
        {"{\"execute\":\"qom-list\",\"arguments\":{\"path\":\"/machine/peripheral/disk0\"}}",
         "{\"return\": [{\"name\": \"type\", \"type\": \"string\"}, {\"name\": \"x-data-plane\", "
         "\"type\": \"bool\"}, {\"name\": \"num\", \"type\": \"int\"}]}"},
        {"{\"execute\":\"qom-list\",\"arguments\":{\"path\":\"/machine\"}}",
         "{\"return\": [{\"name\": \"type\", \"type\": \"string\"}, {\"name\": \"peripheral\", "
         "\"type\": \"child<container>\"}]}"},
        {"{\"execute\":\"qom-get\",\"arguments\":{\"path\":\"/"
         "machine\",\"property\":\"peripheral\"}}",
         "{\"return\": \"/machine/peripheral\"}"},
        {"{\"execute\":\"qom-get\",\"arguments\":{\"path\":\"disk0\",\"property\":\"type\"}}",
         "{\"return\": \"virtio-blk-pci\"}"},
        {"{\"execute\":\"qom-get\",\"arguments\":{\"path\":\"/machine/peripheral/disk0\","
         "\"property\":\"num\"}}",
         "{\"return\": 7}"},
        {"{\"execute\":\"qom-get\",\"arguments\":{\"path\":\"/machine/peripheral/x\","
         "\"property\":\"num\"}}",
         "{\"error\": {\"class\": \"DeviceNotFound\", \"desc\": \"Device "
         "'/machine/peripheral/x' not found\"}}"},
        {"{\"execute\":\"qom-list\",\"arguments\":{\"path\":\"/machine/peripheral/x\"}}",
         "{\"error\": {\"class\": \"DeviceNotFound\", \"desc\": \"Device "
         "'/machine/peripheral/x' not found\"}}"},
        {"{\"execute\":\"qom-get\",\"arguments\":{\"path\":\"/machine/peripheral/disk0\","
         "\"property\":\"y\"}}",
         GENERIC("Property 'virtio-blk-pci.y' not found")},
        {"{\"execute\":\"qom-set\",\"arguments\":{\"path\":\"/machine/peripheral/disk0\","
         "\"property\":\"num\",\"value\":1}}",
         GENERIC("Property 'virtio-blk-pci.num' is not writable")},
        {"{\"execute\":\"qom-set\",\"arguments\":{\"path\":\"/machine/peripheral/disk0\","
         "\"property\":\"x-data-plane\",\"value\":\"on\"}}",
         GENERIC("Invalid parameter type for 'x-data-plane', expected: boolean")},
        {"{\"execute\":\"qom-set\",\"arguments\":{\"path\":\"/machine/peripheral/disk0\","
         "\"property\":\"x-data-plane\"}}",
         GENERIC("Parameter 'value' is missing")},
        {"{\"execute\":\"qom-get\",\"arguments\":{\"path\":\"peripheral\",\"property\":\"type\"}}",
         GENERIC("Path 'peripheral' does not uniquely identify an object")},
        {NULL, NULL},
    };

    g_assert_true(qom_add_object("/machine/peripheral/disk0", "virtio-blk-pci", &err));
    g_assert_true(qom_add_object("/other/peripheral", "container", &err));
    g_assert_false(qom_add_object("/machine/peripheral/disk0", "virtio-blk-pci", NULL));
    g_assert_true(qom_add_property("/machine/peripheral/disk0", "x-data-plane", "bool", get_dp,
                                   set_dp, NULL, &err));
    g_assert_true(qom_add_property("/machine/peripheral/disk0", "num", "int", get_num, NULL,
                                   GINT_TO_POINTER(7), &err));
    g_assert_false(
        qom_add_property("/machine/peripheral/disk0", "num", "int", NULL, NULL, NULL, NULL));
    g_assert_no_error(err);
    tc_negotiate(c);
    for (size_t i = 0; ex[i].in; i++) {
        g_autofree char *got = tc_cmd(c, ex[i].in);
        g_assert_cmpstr(got, ==, ex[i].out);
    }
    /* An asynchronous setter: the reply arrives when the switch completes. */
    tc_send(c, "{\"execute\":\"qom-set\",\"id\":9,\"arguments\":{\"path\":"
               "\"/machine/peripheral/disk0\",\"property\":\"x-data-plane\",\"value\":true}}");
    g_assert_true(tc_quiet(c, 30));
    g_assert_nonnull(dp_pending);
    qmp_reply_deferred(dp_pending, NULL, NULL);
    dp_pending = NULL;
    tc_expect(c, "{\"return\": {}, \"id\": 9}");
    g_free(tc_cmd(c, "{\"execute\":\"qom-get\",\"arguments\":{\"path\":"
                     "\"/machine/peripheral/disk0\",\"property\":\"x-data-plane\"}}"));
    g_assert_true(qom_del_object("/machine/peripheral"));
    tc_send(c, "{\"execute\":\"qom-list\",\"arguments\":{\"path\":\"/machine/peripheral/disk0\"}}");
    tc_expect(c, "{\"error\": {\"class\": \"DeviceNotFound\", \"desc\": \"Device "
                 "'/machine/peripheral/disk0' not found\"}}");
    tc_close(c);
    test_teardown(mon, path);
}

/* ---- the human monitor and deferred replies ---------------------------- */

/*
 * An HMP qom-set whose setter defers: the output and the next prompt come
 * when the setter completes, and the line typed meanwhile waits; the same
 * through human-monitor-command; a client that leaves while its command is
 * deferred.
 */
static void test_hmp_deferred(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    g_autofree char *dir = g_path_get_dirname(path);
    g_autofree char *hpath = g_build_filename(dir, "hmp.sock", NULL);
    g_autofree char *harg = g_strdup_printf("unix:%s,server=on,wait=off", hpath);
    GError *err = NULL;
    TClient *h, *c;

    g_assert_nonnull(qmp_monitor_add_hmp(harg, &err));
    g_assert_no_error(err);
    g_assert_true(qom_add_object("/machine/peripheral/disk0", "virtio-blk-pci", &err));
    g_assert_true(qom_add_property("/machine/peripheral/disk0", "x-data-plane", "bool", get_dp,
                                   set_dp, NULL, &err));
    g_assert_no_error(err);
    h = tc_connect(hpath);
    tc_expect(h, "QEMU 7.2.0 monitor - type 'help' for more information");
    tc_send(h, "qom-set /machine/peripheral/disk0 x-data-plane on\ninfo status\n");
    tc_expect(h, "(qemu) qom-set /machine/peripheral/disk0 x-data-plane on");
    g_assert_true(tc_quiet(h, 30)); /* the reply, and the next line, wait */
    g_assert_nonnull(dp_pending);
    g_assert_true(dp_value);
    qmp_reply_deferred(dp_pending, NULL,
                       g_error_new_literal(QMP_ERROR, QMP_ERROR_GENERIC, "switch failed"));
    dp_pending = NULL;
    tc_expect(h, "Error: switch failed");
    tc_expect(h, "(qemu) info status");
    tc_expect(h, "VM status: running");
    tc_send(h, "qom-set -j /machine/peripheral/disk0 x-data-plane false\n");
    tc_expect(h, "(qemu) qom-set -j /machine/peripheral/disk0 x-data-plane false");
    g_assert_true(tc_quiet(h, 30));
    g_assert_false(dp_value);
    qmp_reply_deferred(dp_pending, NULL, NULL);
    dp_pending = NULL;
    tc_send(h, "info status\n");
    tc_expect(h, "(qemu) info status"); /* no output line for a successful qom-set */
    tc_expect(h, "VM status: running");

    /* human-monitor-command: its QMP reply is deferred with the inner command */
    c = tc_connect(path);
    tc_negotiate(c);
    tc_send(c, "{\"execute\":\"human-monitor-command\",\"id\":3,\"arguments\":"
               "{\"command-line\":\"qom-set /machine/peripheral/disk0 x-data-plane yes\"}}");
    g_assert_true(tc_quiet(c, 30));
    g_assert_true(dp_value);
    qmp_reply_deferred(dp_pending, NULL, NULL);
    dp_pending = NULL;
    tc_expect(c, "{\"return\": \"\", \"id\": 3}");

    /* the HMP client goes away while its command is deferred */
    tc_send(h, "qom-set /machine/peripheral/disk0 x-data-plane off\n");
    tc_expect(h, "(qemu) qom-set /machine/peripheral/disk0 x-data-plane off");
    tc_close(h);
    test_pump(20);
    g_assert_nonnull(dp_pending);
    qmp_reply_deferred(dp_pending, NULL, NULL);
    dp_pending = NULL;
    test_pump(20);
    g_free(tc_cmd(c, "{\"execute\":\"query-status\"}"));
    tc_close(c);
    qom_del_object("/machine/peripheral");
    unlink(hpath);
    test_teardown(mon, path);
}

/*
 * Tab completion on an HMP connection: a unique command or info subcommand
 * is completed with a space; several candidates complete their common
 * prefix and are listed in columns (at least 10 characters wide) before the
 * prompt and the line are shown again, as QEMU's readline does.
 */
static void test_hmp_complete(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    g_autofree char *dir = g_path_get_dirname(path);
    g_autofree char *hpath = g_build_filename(dir, "hmp.sock", NULL);
    g_autofree char *harg = g_strdup_printf("unix:%s,server=on,wait=off", hpath);
    GError *err = NULL;
    TClient *h;

    g_assert_nonnull(qmp_monitor_add_hmp(harg, &err));
    g_assert_no_error(err);
    h = tc_connect(hpath);
    tc_expect(h, "QEMU 7.2.0 monitor - type 'help' for more information");
    /* unique: the word and a space */
    tc_send(h, "info stat\t\n");
    tc_expect(h, "(qemu) info status ");
    tc_expect(h, "VM status: running");
    /* several: their common prefix, the list, then the prompt and the line again */
    tc_send(h, "sys\t");
    tc_expect(h, "(qemu) system_");
    tc_expect(h, "system_powerdown  system_reset      ");
    tc_send(h, "\x15info status\n"); /* Ctrl-U redraws the prompt on the same line */
    tc_expect(h, "(qemu) system_\r(qemu) \033[Kinfo status");
    tc_expect(h, "VM status: running");
    tc_send(h, "info blo\t");
    tc_expect(h, "(qemu) info block");
    tc_expect(h, "block       blockstats  ");
    tc_send(h, "\x15"
               "q\t");
    tc_expect(h, "(qemu) info block\r(qemu) \033[Kq");
    tc_expect(h, "q         qom-get   qom-list  qom-set   quit      ");
    tc_send(h, "\x15help in\t\n");
    tc_expect(h, "(qemu) q\r(qemu) \033[Khelp info ");
    tc_expect(h, "info block [-n] [-v] [device] -- show the drives");
    /* nothing to complete: nothing happens */
    tc_send(h, "\x15"
               "foo\t\n");
    for (;;) {
        g_autofree char *l = tc_recv(h); /* the rest of help info, up to the echo */

        g_assert_nonnull(l);
        if (strstr(l, "foo")) {
            break;
        }
    }
    tc_expect(h, "unknown command: 'foo'");
    tc_close(h);
    test_pump(20);
    unlink(hpath);
    test_teardown(mon, path);
}

/*
 * info qtree over a machine's query-pci (as src/vmm/machine-qmp.c answers it:
 * the host bridge in slot 0, a virtio-blk-pci device in slot 2) and the
 * device's QOM properties: the tree, newest function first, QEMU's value
 * formats, the class and BAR lines.
 */
static JsonNode *cmd_fake_pci(QmpRequest *req, JsonObject *args, GError **errp)
{
    static const char reply[] =
        "[{\"bus\": 0, \"devices\": ["
        "{\"bus\": 0, \"slot\": 0, \"function\": 0, \"class_info\": {\"desc\": \"Host bridge\", "
        "\"class\": 1536}, \"id\": {\"vendor\": 32902, \"device\": 4663, \"subsystem-vendor\": 0, "
        "\"subsystem\": 0}, \"irq_pin\": 0, \"qdev_id\": \"\", \"regions\": []},"
        "{\"bus\": 0, \"slot\": 2, \"function\": 0, \"class_info\": {\"desc\": \"SCSI "
        "controller\", "
        "\"class\": 256}, \"id\": {\"vendor\": 6900, \"device\": 4162, \"subsystem-vendor\": 6900, "
        "\"subsystem\": 2}, \"irq_pin\": 1, \"irq\": 11, \"qdev_id\": \"vd0\", \"regions\": ["
        "{\"bar\": 1, \"type\": \"memory\", \"prefetch\": false, \"mem_type_64\": false, "
        "\"address\": -1, \"size\": 4096},"
        "{\"bar\": 4, \"type\": \"memory\", \"prefetch\": false, \"mem_type_64\": true, "
        "\"address\": 3758112768, \"size\": 16384}]}]}]";

    return json_from_string(reply, errp);
}

static JsonNode *get_fixed(const char *path, const char *name, void *opaque, GError **errp)
{
    return json_from_string(opaque, errp);
}

static void test_hmp_qtree(void)
{
    static const char *const props[][3] = {
        {"disable-legacy", "OnOffAuto", "\"off\""},
        {"vectors", "uint32", "2"},
        {"addr", "int32", "16"},
        {"romsize", "uint32", "4294967295"},
        {"drive", "str", "\"drive0\""},
        {"logical_block_size", "size", "512"},
        {"discard_granularity", "size", "4294967295"},
        {"config-wce", "bool", "true"},
        {"queue-size", "uint16", "256"},
        {"iothread", "link<iothread>", "\"\""},
        {"x-data-plane", "bool", "false"},
    };
    char *path;
    QmpMonitor *mon = test_setup(&path);
    GError *err = NULL;
    TClient *c;
    g_autofree char *reply = NULL;

    qmp_register_command("query-pci", cmd_fake_pci, NULL, 0, NULL);
    g_assert_true(qom_add_object("/machine/peripheral/vd0", "virtio-blk-pci", &err));
    for (size_t i = 0; i < G_N_ELEMENTS(props); i++) {
        g_assert_true(qom_add_property("/machine/peripheral/vd0", props[i][0], props[i][1],
                                       get_fixed, NULL, (void *)props[i][2], &err));
    }
    g_assert_no_error(err);
    c = tc_connect(path);
    tc_negotiate(c);
    reply = tc_cmd(c, "{\"execute\":\"human-monitor-command\","
                      "\"arguments\":{\"command-line\":\"info qtree\"}}");
    g_assert_cmpstr(reply, ==,
                    "{\"return\": \""
                    "bus: main-system-bus\\r\\n"
                    "  type System\\r\\n"
                    "  dev: i440FX-pcihost, id \\\"\\\"\\r\\n"
                    "    bus: pci.0\\r\\n"
                    "      type PCI\\r\\n"
                    "      dev: virtio-blk-pci, id \\\"vd0\\\"\\r\\n"
                    "        disable-legacy = \\\"off\\\"\\r\\n"
                    "        vectors = 2 (0x2)\\r\\n"
                    "        addr = 02.0\\r\\n"
                    "        romsize = 4294967295 (0xffffffff)\\r\\n"
                    "        class SCSI controller, addr 00:02.0, pci id 1af4:1042 (sub "
                    "1af4:0002)\\r\\n"
                    "        bar 1: mem at 0xffffffffffffffff [0xffe]\\r\\n"
                    "        bar 4: mem at 0xe0004000 [0xe0007fff]\\r\\n"
                    "        bus: virtio-bus\\r\\n"
                    "          type virtio-pci-bus\\r\\n"
                    "          dev: virtio-blk-device, id \\\"\\\"\\r\\n"
                    "            drive = \\\"drive0\\\"\\r\\n"
                    "            logical_block_size = 512 (512 B)\\r\\n"
                    "            discard_granularity = 4294967295 (4 GiB)\\r\\n"
                    "            config-wce = true\\r\\n"
                    "            queue-size = 256 (0x100)\\r\\n"
                    "      dev: i440FX, id \\\"\\\"\\r\\n"
                    "        addr = 00.0\\r\\n"
                    "        romfile = \\\"\\\"\\r\\n"
                    "        romsize = 4294967295 (0xffffffff)\\r\\n"
                    "        rombar = 1 (0x1)\\r\\n"
                    "        multifunction = false\\r\\n"
                    "        x-pcie-lnksta-dllla = true\\r\\n"
                    "        x-pcie-extcap-init = true\\r\\n"
                    "        failover_pair_id = \\\"\\\"\\r\\n"
                    "        acpi-index = 0 (0x0)\\r\\n"
                    "        class Host bridge, addr 00:00.0, pci id 8086:1237 (sub "
                    "0000:0000)\\r\\n"
                    "\"}");
    tc_close(c);
    qom_del_object("/machine/peripheral");
    test_teardown(mon, path);
}

/* ---- run state and machine hooks ------------------------------------- */

static int hook_calls[5];
static bool hook_stop(void *o, GError **e)
{
    hook_calls[0]++;
    return true;
}
static bool hook_cont(void *o, GError **e)
{
    hook_calls[1]++;
    return true;
}
static bool hook_powerdown(void *o, GError **e)
{
    hook_calls[2]++;
    return true;
}
static bool hook_reset(void *o, GError **e)
{
    hook_calls[3]++;
    return true;
}
static void hook_quit(void *o)
{
    hook_calls[4]++;
}

static void expect_event(TClient *c, const char *tail)
{
    g_autofree char *line = tc_recv(c);

    g_assert_nonnull(line);
    if (!g_str_has_suffix(line, tail)) {
        g_error("event %s does not end in %s", line, tail);
    }
}

static void test_machine(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    QmpMachineHooks hooks = {hook_stop, hook_cont, hook_powerdown, hook_reset, hook_quit, NULL};

    qmp_machine_set_hooks(&hooks);
    tc_negotiate(c);
    g_assert_true(qmp_vm_stop(QMP_RUN_STATE_IO_ERROR, NULL));
    expect_event(c, "\"event\": \"STOP\"}");
    tc_send(c, "{\"execute\":\"query-status\"}");
    tc_expect(c, "{\"return\": {\"status\": \"io-error\", \"singlestep\": false, \"running\": "
                 "false}}");
    tc_send(c, "{\"execute\":\"cont\"}");
    expect_event(c, "\"event\": \"RESUME\"}");
    tc_expect(c, "{\"return\": {}}");
    tc_send(c, "{\"execute\":\"system_powerdown\"}");
    expect_event(c, "\"event\": \"POWERDOWN\"}");
    tc_expect(c, "{\"return\": {}}");
    tc_send(c, "{\"execute\":\"system_reset\"}");
    expect_event(c, "\"event\": \"RESET\", \"data\": {\"guest\": false, \"reason\": "
                    "\"host-qmp-system-reset\"}}");
    tc_expect(c, "{\"return\": {}}");
    tc_send(c, "{\"execute\":\"quit\"}");
    expect_event(c, "\"event\": \"SHUTDOWN\", \"data\": {\"guest\": false, \"reason\": "
                    "\"host-qmp-quit\"}}");
    tc_expect(c, "{\"return\": {}}");
    test_pump(10);
    tc_send(c, "{\"execute\":\"cont\"}");
    tc_expect(c, GENERIC("Resetting the Virtual Machine is required"));
    g_assert_cmpint(hook_calls[0], ==, 1);
    g_assert_cmpint(hook_calls[1], ==, 1);
    g_assert_cmpint(hook_calls[2], ==, 1);
    g_assert_cmpint(hook_calls[3], ==, 1);
    g_assert_cmpint(hook_calls[4], ==, 1);
    tc_close(c);
    test_teardown(mon, path);
}

/*
 * qmp_vm_stop_request(): the stop happens in the main loop, once for any
 * number of requests, only from running, and `cont` before it cancels it
 * (STOP/RESUME, and the cont hook runs: parked I/O is resumed).
 */
static void test_stop_request(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c = tc_connect(path);
    QmpMachineHooks hooks = {hook_stop, hook_cont, hook_powerdown, hook_reset, hook_quit, NULL};

    memset(hook_calls, 0, sizeof(hook_calls));
    qmp_machine_set_hooks(&hooks);
    tc_negotiate(c);
    qmp_run_state_set(QMP_RUN_STATE_RUNNING);
    qmp_vm_stop_request(QMP_RUN_STATE_IO_ERROR);
    qmp_vm_stop_request(QMP_RUN_STATE_IO_ERROR);
    g_assert_cmpint(hook_calls[0], ==, 0); /* not from inside the caller */
    g_assert_cmpint(qmp_run_state_get(), ==, QMP_RUN_STATE_RUNNING);
    expect_event(c, "\"event\": \"STOP\"}");
    g_assert_cmpint(hook_calls[0], ==, 1);
    g_assert_cmpint(qmp_run_state_get(), ==, QMP_RUN_STATE_IO_ERROR);
    /* Stopped already: no request, so nothing follows the next cont. */
    qmp_vm_stop_request(QMP_RUN_STATE_IO_ERROR);
    g_assert_true(qmp_vm_cont(NULL));
    expect_event(c, "\"event\": \"RESUME\"}");
    test_pump(20);
    g_assert_cmpint(hook_calls[0], ==, 1);
    g_assert_cmpint(hook_calls[1], ==, 1);
    g_assert_cmpint(qmp_run_state_get(), ==, QMP_RUN_STATE_RUNNING);
    /* cont before the stop ran: cancelled, STOP then RESUME, the cont hook ran. */
    qmp_vm_stop_request(QMP_RUN_STATE_IO_ERROR);
    g_assert_true(qmp_vm_cont(NULL));
    expect_event(c, "\"event\": \"STOP\"}");
    expect_event(c, "\"event\": \"RESUME\"}");
    test_pump(20);
    g_assert_cmpint(hook_calls[0], ==, 1);
    g_assert_cmpint(hook_calls[1], ==, 2);
    g_assert_cmpint(qmp_run_state_get(), ==, QMP_RUN_STATE_RUNNING);
    tc_send(c, "{\"execute\":\"query-status\"}");
    tc_expect(c, "{\"return\": {\"status\": \"running\", \"singlestep\": false, \"running\": "
                 "true}}");
    tc_close(c);
    test_teardown(mon, path);
}

/* ---- disconnects ------------------------------------------------------- */

static JsonNode *cmd_big(QmpRequest *req, JsonObject *args, GError **errp)
{
    g_autofree char *s = g_malloc(4 << 20);
    JsonNode *n = json_node_new(JSON_NODE_VALUE);

    memset(s, 'x', (4 << 20) - 1);
    s[(4 << 20) - 1] = 0;
    json_node_set_string(n, s);
    return n;
}

static void test_disconnect(void)
{
    char *path;
    QmpMonitor *mon = test_setup(&path);
    TClient *c;
    g_autofree char *line = NULL;

    qmp_register_command("x-big", cmd_big, NULL, 0, NULL);
    for (int i = 0; i < 5; i++) {
        c = tc_connect(path);
        tc_negotiate(c);
        /* 4 MiB reply: the socket buffer fills, then the peer vanishes. */
        tc_send(c, "{\"execute\":\"x-big\"}{\"execute\":\"x-big\"}");
        test_pump(5);
        tc_close(c);
        qmp_event_emit("TEST_EVENT", NULL);
        test_pump(5);
    }
    /* Half-closed client: the reply still arrives, then the server closes. */
    c = tc_connect(path);
    tc_negotiate(c);
    tc_send(c, "{\"execute\":\"query-status\"}");
    shutdown(c->fd, SHUT_WR);
    line = tc_recv(c);
    g_assert_true(g_str_has_prefix(line, "{\"return\": {\"status\""));
    g_assert_null(tc_recv(c));
    tc_close(c);
    test_pump(5);
    g_assert_cmpuint(qmp_monitor_client_count(mon), ==, 0);
    /* A client that never reads is dropped once its backlog passes the limit. */
    c = tc_connect(path);
    tc_negotiate(c);
    for (int i = 0; i < 8; i++) {
        const char *cmd = "{\"execute\":\"x-big\"}";
        /* Fails with EPIPE once the server has given up on us. */
        (void)!send(c->fd, cmd, strlen(cmd), MSG_NOSIGNAL);
        test_pump(2);
    }
    test_pump(20);
    g_assert_cmpuint(qmp_monitor_client_count(mon), ==, 0);
    tc_close(c);
    test_teardown(mon, path);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/qmp/deferred", test_deferred);
    g_test_add_func("/qmp/qom", test_qom);
    g_test_add_func("/qmp/hmp-deferred", test_hmp_deferred);
    g_test_add_func("/qmp/hmp-complete", test_hmp_complete);
    g_test_add_func("/qmp/hmp-qtree", test_hmp_qtree);
    g_test_add_func("/qmp/machine", test_machine);
    g_test_add_func("/qmp/stop-request", test_stop_request);
    g_test_add_func("/qmp/disconnect", test_disconnect);
    return g_test_run();
}
