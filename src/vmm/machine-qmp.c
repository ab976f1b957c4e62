/*
 * vblk: the main loop and the QMP monitors. The main thread runs a GMainLoop
 * that serves the monitors (-qmp, -chardev + -mon) and ends when the VM asks
 * to exit; QMP's stop/cont/quit act on the vCPUs through the machine hooks.
 */
#include <errno.h>
#include <glib-unix.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "machine-internal.h"
#include "vmm/pci.h"
#include "monitor/qmp.h"
#include "util/debug-state.h"
#include "util/error-report.h"

static Machine *qmp_machine; /* for the system_reset hook */

/*
 * The whole machine reset: pause every vCPU (the BQL is dropped meanwhile so
 * a vCPU can finish its exit), reset devices, reload, restore the CPUs, then
 * run again unless the VM was stopped (QMP stop, -S, io-error), as in QEMU.
 * Context: main thread, BQL held (never a vCPU thread: vm_pause would wait for itself)
 */
static bool machine_reset_now(Machine *m, GError **errp)
{
    Vm *vm = machine_vm(m);
    bool was_running = vm_is_running(vm);
    GError *err = NULL;

    vm_unlock(vm);
    vm_pause(vm);
    vm_lock(vm);
    if (!machine_reset_devices_and_boot(m, &err)) {
        /* Half reset is no state to run from: the vCPUs stay paused and vblk ends. */
        g_autofree char *msg = g_strdup_printf("reset failed: %s", err->message);

        vm_request_exit(vm, VM_EXIT_ERROR, msg);
        g_propagate_error(errp, err);
        return false;
    }
    vm_reset_done(vm);
    if (was_running) {
        vm_resume(vm);
    }
    return true;
}

typedef struct MainLoopCtx {
    Machine *m;
    GMainLoop *loop;
    bool have_qmp;
} MainLoopCtx;

/* A vCPU asked for a reset (reboot, triple fault): it waits, held, for this. */
static void machine_guest_reset(MainLoopCtx *c)
{
    Vm *vm = machine_vm(c->m);
    VmResetCause cause = vm_reset_requested(vm);
    GError *err = NULL;

    if (!machine_reset_now(c->m, &err)) {
        g_error_free(err); /* reported; vblk is ending */
        return;
    }
    if (c->have_qmp) {
        qmp_emit_reset(cause == VM_RESET_GUEST,
                       cause == VM_RESET_GUEST ? "guest-reset" : "host-qmp-system-reset");
        if (qmp_run_state_get() != QMP_RUN_STATE_RUNNING) {
            qmp_run_state_set(QMP_RUN_STATE_PRELAUNCH); /* as QEMU's main loop */
        }
    }
}

static gboolean machine_exit_ready(gint fd, GIOCondition cond, gpointer opaque)
{
    MainLoopCtx *c = opaque;
    Vm *vm = machine_vm(c->m);
    uint64_t cnt;

    if (read(fd, &cnt, sizeof(cnt)) < 0) {
        /* readable eventfd: cannot fail */
    }
    if (vm_exit_reason(vm) != VM_EXIT_NONE) {
        g_main_loop_quit(c->loop);
        return G_SOURCE_REMOVE;
    }
    if (vm_reset_requested(vm) != VM_RESET_NONE) {
        machine_guest_reset(c);
    }
    return G_SOURCE_CONTINUE;
}

/* QMP hooks; they run on the main thread, which owns vm_pause()/vm_resume(). */
static bool machine_qmp_stop(void *opaque, GError **errp)
{
    /*
     * Once vblk is ending, the vCPUs are stopping anyway, and the main thread
     * may be draining events without the BQL (machine_main_loop's end): a stop
     * then (a werror=stop failure completing late) must not drop a lock it
     * does not hold and take it into the teardown.
     */
    if (vm_exit_reason(opaque) != VM_EXIT_NONE) {
        return true;
    }
    /* A vCPU may be waiting for the BQL to finish its exit: let it, then pause. */
    vm_unlock(opaque);
    vm_pause(opaque);
    vm_lock(opaque);
    return true;
}

typedef struct ContNotifier {
    void (*fn)(void *opaque);
    void *opaque;
} ContNotifier;

static GArray *cont_notifiers; /* ContNotifier */

/* Context: main thread */
void machine_add_cont_notifier(void (*fn)(void *opaque), void *opaque)
{
    ContNotifier n = {fn, opaque};

    if (!cont_notifiers) {
        cont_notifiers = g_array_new(FALSE, FALSE, sizeof(ContNotifier));
    }
    g_array_append_val(cont_notifiers, n);
}

/* Context: main thread */
void machine_del_cont_notifier(void *opaque)
{
    for (guint i = 0; cont_notifiers && i < cont_notifiers->len; i++) {
        if (g_array_index(cont_notifiers, ContNotifier, i).opaque == opaque) {
            g_array_remove_index(cont_notifiers, i);
            return;
        }
    }
}

static bool machine_qmp_cont(void *opaque, GError **errp)
{
    vm_resume(opaque);
    /* Devices resubmit what werror/rerror=stop parked, in order. */
    for (guint i = 0; cont_notifiers && i < cont_notifiers->len; i++) {
        ContNotifier *n = &g_array_index(cont_notifiers, ContNotifier, i);

        n->fn(n->opaque);
    }
    return true;
}

static AcpiPmDevice *machine_acpi;

/* x-query-acpi: whether the guest listens to the power button, and the PM1 registers. */
static JsonNode *machine_qmp_query_acpi(QmpRequest *req, JsonObject *args, GError **errp)
{
    JsonBuilder *b = json_builder_new();
    const AcpiPm *pm = machine_acpi ? acpi_pm_device_state(machine_acpi) : NULL;
    JsonNode *n;

    json_builder_begin_object(b);
    json_builder_set_member_name(b, "enabled");
    json_builder_add_boolean_value(b, pm != NULL);
    if (pm) {
        json_builder_set_member_name(b, "power-button-enabled");
        json_builder_add_boolean_value(b, (pm->en & ACPI_PM1_PWRBTN) != 0);
        json_builder_set_member_name(b, "sci-level");
        json_builder_add_boolean_value(b, pm->sci);
        json_builder_set_member_name(b, "pm1-sts");
        json_builder_add_int_value(b, pm->sts);
        json_builder_set_member_name(b, "pm1-en");
        json_builder_add_int_value(b, pm->en);
        json_builder_set_member_name(b, "pm1-cnt");
        json_builder_add_int_value(b, pm->cnt | ACPI_PM1_CNT_SCI_EN);
        json_builder_set_member_name(b, "power-button-presses");
        json_builder_add_int_value(b, (gint64)pm->pwrbtn_presses);
        json_builder_set_member_name(b, "power-button-ignored");
        json_builder_add_int_value(b, (gint64)pm->pwrbtn_ignored);
    }
    json_builder_end_object(b);
    n = json_builder_get_root(b);
    g_object_unref(b);
    return n;
}

/* query-cpus-fast: QEMU's shape; one socket per vCPU (QEMU's default topology for -smp N). */
static JsonNode *machine_qmp_query_cpus(QmpRequest *req, JsonObject *args, GError **errp)
{
    Vm *vm = machine_vm(qmp_machine);
    JsonBuilder *b = json_builder_new();
    JsonNode *n;

    json_builder_begin_array(b);
    for (unsigned i = 0; i < vm_ncpus(vm); i++) {
        g_autofree char *path = g_strdup_printf("/machine/unattached/device[%u]", i);

        json_builder_begin_object(b);
        json_builder_set_member_name(b, "cpu-index");
        json_builder_add_int_value(b, i);
        json_builder_set_member_name(b, "qom-path");
        json_builder_add_string_value(b, path);
        json_builder_set_member_name(b, "thread-id");
        json_builder_add_int_value(b, vm_vcpu_thread_id(vm, i));
        json_builder_set_member_name(b, "props");
        json_builder_begin_object(b);
        json_builder_set_member_name(b, "core-id");
        json_builder_add_int_value(b, 0);
        json_builder_set_member_name(b, "thread-id");
        json_builder_add_int_value(b, 0);
        json_builder_set_member_name(b, "socket-id");
        json_builder_add_int_value(b, i);
        json_builder_end_object(b);
        json_builder_set_member_name(b, "target");
        json_builder_add_string_value(b, "x86_64");
        json_builder_end_object(b);
    }
    json_builder_end_array(b);
    n = json_builder_get_root(b);
    g_object_unref(b);
    return n;
}

/* QEMU's names of the PCI classes vblk's devices have. */
static const char *pci_class_desc(unsigned cls)
{
    switch (cls) {
    case 0x0100:
        return "SCSI controller";
    case 0x0600:
        return "Host bridge";
    case 0x0601:
        return "ISA bridge";
    case 0x0680:
        return "Bridge";
    default:
        return NULL;
    }
}

static void pci_add_int(JsonBuilder *b, const char *name, gint64 v)
{
    json_builder_set_member_name(b, name);
    json_builder_add_int_value(b, v);
}

static void pci_add_regions(JsonBuilder *b, PciDevice *d)
{
    json_builder_set_member_name(b, "regions");
    json_builder_begin_array(b);
    for (unsigned bar = 0; bar < PCI_NUM_BARS; bar++) {
        const PciBar *pb = &d->bars[bar];

        if (!pb->size) {
            continue;
        }
        json_builder_begin_object(b);
        pci_add_int(b, "bar", bar);
        json_builder_set_member_name(b, "type");
        json_builder_add_string_value(b, "memory");
        json_builder_set_member_name(b, "prefetch");
        json_builder_add_boolean_value(b, false);
        json_builder_set_member_name(b, "mem_type_64");
        json_builder_add_boolean_value(b, pb->is_64bit);
        /* QEMU reports an unmapped BAR at -1. */
        pci_add_int(b, "address", pb->mapped ? (gint64)pb->gpa : -1);
        pci_add_int(b, "size", (gint64)pb->size);
        json_builder_end_object(b);
        if (pb->is_64bit) {
            bar++;
        }
    }
    json_builder_end_array(b);
}

/* The qdev id from the device's name, "virtio-blk-pci(<id>)"; "" for the host bridge. */
static char *pci_qdev_id(const PciDevice *d)
{
    const char *open = strchr(d->name, '('), *close = strrchr(d->name, ')');

    return open && close > open ? g_strndup(open + 1, close - open - 1) : g_strdup("");
}

static void pci_add_device(JsonBuilder *b, PciDevice *d)
{
    unsigned cls = pci_get_word(d, 0x0a);
    const char *desc = pci_class_desc(cls);
    g_autofree char *qdev = pci_qdev_id(d);

    json_builder_begin_object(b);
    pci_add_int(b, "bus", 0);
    pci_add_int(b, "slot", d->slot);
    pci_add_int(b, "function", 0);
    json_builder_set_member_name(b, "class_info");
    json_builder_begin_object(b);
    if (desc) {
        json_builder_set_member_name(b, "desc");
        json_builder_add_string_value(b, desc);
    }
    pci_add_int(b, "class", cls);
    json_builder_end_object(b);
    json_builder_set_member_name(b, "id");
    json_builder_begin_object(b);
    pci_add_int(b, "vendor", pci_get_word(d, 0x00));
    pci_add_int(b, "device", pci_get_word(d, 0x02));
    pci_add_int(b, "subsystem-vendor", pci_get_word(d, 0x2c));
    pci_add_int(b, "subsystem", pci_get_word(d, 0x2e));
    json_builder_end_object(b);
    pci_add_int(b, "irq_pin", d->config[0x3d]);
    if (d->config[0x3d]) {
        pci_add_int(b, "irq", d->config[0x3c]);
    }
    json_builder_set_member_name(b, "qdev_id");
    json_builder_add_string_value(b, qdev);
    pci_add_regions(b, d);
    json_builder_end_object(b);
}

/* query-pci: bus 0 as the guest sees it (BAR addresses as it programmed them). */
static JsonNode *machine_qmp_query_pci(QmpRequest *req, JsonObject *args, GError **errp)
{
    PciBus *bus = machine_pci_bus(qmp_machine);
    JsonBuilder *b = json_builder_new();
    JsonNode *n;

    json_builder_begin_array(b);
    json_builder_begin_object(b);
    pci_add_int(b, "bus", 0);
    json_builder_set_member_name(b, "devices");
    json_builder_begin_array(b);
    for (unsigned slot = 0; slot < PCI_SLOTS; slot++) {
        PciDevice *d = pci_bus_device(bus, slot);

        if (d) {
            pci_add_device(b, d);
        }
    }
    json_builder_end_array(b);
    json_builder_end_object(b);
    json_builder_end_array(b);
    n = json_builder_get_root(b);
    g_object_unref(b);
    return n;
}

/* Context: main thread */
void machine_qmp_set_acpi(AcpiPmDevice *acpi)
{
    machine_acpi = acpi;
}

/*
 * QEMU's behaviour: POWERDOWN is emitted (by the caller) and the command succeeds even
 * when nobody listens; the guest's OS decides what a press means. vblk says on stderr
 * when the press goes nowhere, and x-query-acpi shows it.
 */
static bool machine_qmp_powerdown(void *opaque, GError **errp)
{
    if (!machine_acpi) {
        error_report("system_powerdown: ACPI is off (-machine acpi=off / -no-acpi): "
                     "the guest sees no power button");
    } else if (!acpi_pm_device_powerdown(machine_acpi)) {
        error_report("system_powerdown: the guest has not enabled the ACPI power "
                     "button (booted with acpi=off?): the press stays pending in PM1_STS");
    }
    return true;
}

/* Synchronous: the reply (and the RESET event qmp-commands.c sends) follow the reset. */
static bool machine_qmp_reset(void *opaque, GError **errp)
{
    Machine *m = qmp_machine;

    if (machine_options(m)->no_reboot) {
        /* QEMU: -no-reboot turns every reset, this one too, into a shutdown. */
        qmp_run_state_set(QMP_RUN_STATE_SHUTDOWN);
        qmp_emit_shutdown(false, "host-qmp-system-reset");
        vm_request_exit(machine_vm(m), VM_EXIT_QUIT, NULL);
        return true;
    }
    return machine_reset_now(m, errp);
}

static void machine_qmp_quit(void *opaque)
{
    vm_request_exit(opaque, VM_EXIT_QUIT, NULL);
}

/* The human monitor on stdio, sharing it with the serial console when that is there too. */
static bool machine_open_hmp_stdio(Machine *m, bool focused, GError **errp)
{
    const VmmOptions *o = machine_options(m);
    int rfd;

    if (o->serial != SERIAL_STDIO) {
        return qmp_monitor_add_hmp("stdio", errp) != NULL;
    }
    rfd = console_attach_monitor(machine_console(m), focused, errp);
    if (rfd < 0) {
        return false;
    }
    if (!qmp_monitor_open_hmp_mux(rfd, STDOUT_FILENO, errp)) {
        close(rfd);
        return false;
    }
    return true;
}

static bool machine_open_one(Machine *m, const RawOption *r, GError **errp)
{
    GError *err = NULL;
    bool ok = true;

    if (!strcmp(r->name, "-chardev")) {
        ok = qmp_chardev_add(r->arg, &err);
    } else if (!strcmp(r->name, "-mon")) {
        ok = qmp_monitor_add_mon(r->arg, &err) != NULL;
    } else if (!strcmp(r->name, "-qmp")) {
        ok = qmp_monitor_add_qmp(r->arg, &err) != NULL;
    } else if (!strcmp(r->arg, "stdio")) {
        ok = machine_open_hmp_stdio(m, true, &err); /* -monitor stdio: the monitor has the focus */
    } else if (strcmp(r->arg, "none")) {
        ok = qmp_monitor_add_hmp(r->arg, &err) != NULL;
    }
    if (!ok) {
        g_set_error(errp, VMM_ERROR, err->code, "%s %s: %s", r->name, r->arg, err->message);
        g_error_free(err);
    }
    return ok;
}

static JsonNode *machine_qmp_debug_state(QmpRequest *req, JsonObject *args, GError **errp);

/* Context: main thread */
bool machine_monitors_open(Machine *m, const VmmOptions *o, bool *have_qmp, GError **errp)
{
    Vm *vm = machine_vm(m);
    static QmpMachineHooks hooks = {
        .stop = machine_qmp_stop,
        .cont = machine_qmp_cont,
        .powerdown = machine_qmp_powerdown,
        .reset = machine_qmp_reset,
        .quit = machine_qmp_quit,
    };
    bool any = false;
    /*
     * QEMU's defaults: -serial mon:stdio, or -nographic without any monitor
     * option and without -nodefaults, put the human monitor behind the
     * console on stdio (Ctrl-a c); the console has the focus.
     */
    bool mux = o->serial == SERIAL_STDIO &&
               (o->serial_mon || (o->nographic && !o->nodefaults && !o->raw->len));

    *have_qmp = false;
    for (guint i = 0; i < o->raw->len; i++) {
        const RawOption *r = o->raw->pdata[i];
        any |= strcmp(r->name, "-monitor") || strcmp(r->arg, "none");
    }
    if (!any && !mux) {
        return true;
    }
    qmp_init(NULL);
    *have_qmp = true;
    hooks.opaque = vm;
    qmp_machine = m;
    qmp_machine_set_hooks(&hooks);
    if (!qmp_command_exists("x-query-acpi")) {
        static const QmpArgSpec none[] = {QMP_ARGS_END};

        qmp_register_command("x-query-acpi", machine_qmp_query_acpi, none, 0, NULL);
        qmp_schema_describe("x-query-acpi", NULL,
                            "{'enabled': 'bool', '*power-button-enabled': 'bool', "
                            "'*sci-level': 'bool', '*pm1-sts': 'int', '*pm1-en': 'int', "
                            "'*pm1-cnt': 'int', '*power-button-presses': 'int', "
                            "'*power-button-ignored': 'int'}",
                            NULL);
    }
    if (!qmp_command_exists("query-cpus-fast")) {
        static const QmpArgSpec none[] = {QMP_ARGS_END};

        qmp_register_command("query-cpus-fast", machine_qmp_query_cpus, none, 0, NULL);
        qmp_schema_describe("query-cpus-fast", NULL,
                            "[{'cpu-index': 'int', 'qom-path': 'str', 'thread-id': 'int', "
                            "'props': {'*core-id': 'int', '*thread-id': 'int', "
                            "'*socket-id': 'int'}, 'target': {'enum': ['x86_64']}}]",
                            NULL);
        qmp_register_command("query-pci", machine_qmp_query_pci, none, 0, NULL);
        qmp_schema_describe("query-pci", NULL,
                            "[{'bus': 'int', 'devices': [{'bus': 'int', 'slot': 'int', "
                            "'function': 'int', 'class_info': {'*desc': 'str', 'class': 'int'}, "
                            "'id': {'vendor': 'int', 'device': 'int', '*subsystem-vendor': 'int', "
                            "'*subsystem': 'int'}, '*irq': 'int', 'irq_pin': 'int', "
                            "'qdev_id': 'str', 'regions': [{'bar': 'int', 'type': 'str', "
                            "'address': 'int', 'size': 'int', '*prefetch': 'bool', "
                            "'*mem_type_64': 'bool'}]}]}]",
                            NULL);
    }
    if (!qmp_command_exists("x-debug-state")) {
        static const QmpArgSpec none[] = {QMP_ARGS_END};

        qmp_register_command("x-debug-state", machine_qmp_debug_state, none, 0, NULL);
        qmp_schema_describe("x-debug-state", NULL, "{}", NULL);
    }
    for (guint i = 0; i < o->raw->len; i++) {
        if (!machine_open_one(m, o->raw->pdata[i], errp)) {
            qmp_cleanup();
            *have_qmp = false;
            return false;
        }
    }
    if (mux && !machine_open_hmp_stdio(m, false, errp)) {
        qmp_cleanup();
        *have_qmp = false;
        return false;
    }
    return true;
}

/* QEMU's SHUTDOWN reasons; a triple fault is a guest reset there too (stderr says more). */
static void machine_emit_exit(VmExitReason reason)
{
    switch (reason) {
    case VM_EXIT_RESET:
    case VM_EXIT_TRIPLE_FAULT:
        qmp_run_state_set(QMP_RUN_STATE_SHUTDOWN);
        qmp_emit_shutdown(true, "guest-reset");
        break;
    case VM_EXIT_POWEROFF:
        qmp_run_state_set(QMP_RUN_STATE_SHUTDOWN);
        qmp_emit_shutdown(true, "guest-shutdown");
        break;
    case VM_EXIT_ERROR:
        /* QEMU stays in internal-error; vblk ends, and says why it can go no further. */
        qmp_run_state_set(QMP_RUN_STATE_INTERNAL_ERROR);
        qmp_emit_shutdown(false, "host-error");
        break;
    case VM_EXIT_QUIT:
        /* The quit command said so itself; a signal is reported here, as QEMU does. */
        if (machine_exit_signal()) {
            qmp_run_state_set(QMP_RUN_STATE_SHUTDOWN);
            qmp_emit_shutdown(false, "host-signal");
        }
        break;
    default:
        break;
    }
}

static Vm *bql_vm;
static GPollFunc bql_orig_poll;
/* When the main thread last entered / left poll() (g_get_monotonic_time), for the dump. */
static gint64 main_poll_enter_us;
static gint64 main_poll_leave_us;

/*
 * The main thread holds the BQL (the device lock) whenever it runs anything,
 * as QEMU's main loop does, and drops it only while it sleeps in poll().
 */
static gint machine_bql_poll(GPollFD *fds, guint nfds, gint timeout)
{
    gint r;

    __atomic_store_n(&main_poll_enter_us, g_get_monotonic_time(), __ATOMIC_RELAXED);
    vm_unlock(bql_vm);
    r = bql_orig_poll(fds, nfds, timeout);
    vm_lock(bql_vm);
    __atomic_store_n(&main_poll_leave_us, g_get_monotonic_time(), __ATOMIC_RELAXED);
    return r;
}

/* ---- debug state: SIGUSR2 or x-debug-state dumps what every thread is doing ---- */

static pthread_t debug_thread;
static bool debug_thread_started; /* main thread only */
static atomic_bool debug_thread_running; /* for the SIGALRM handler */
static atomic_bool debug_thread_stop;
static atomic_bool debug_watchdog_fired;

/* Context: main thread, before any other thread exists */
void machine_block_debug_signal(void)
{
    sigset_t set;

    /* Every thread inherits the block; only the debug thread takes it, with sigwait(). */
    sigemptyset(&set);
    sigaddset(&set, MACHINE_DEBUG_SIGNAL);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
}

static void machine_debug_state_fn(GString *out, void *opaque)
{
    gint64 now = g_get_monotonic_time();
    gint64 enter = __atomic_load_n(&main_poll_enter_us, __ATOMIC_RELAXED);
    gint64 leave = __atomic_load_n(&main_poll_leave_us, __ATOMIC_RELAXED);

    g_string_append_printf(out, "run state %s; main thread ", qmp_run_state_peek_name());
    if (enter > leave) {
        g_string_append_printf(out, "waiting in poll() for %" G_GINT64_FORMAT " ms\n",
                               (now - enter) / 1000);
    } else {
        g_string_append_printf(out,
                               "busy (out of poll() with the BQL) for %" G_GINT64_FORMAT " ms\n",
                               leave ? (now - leave) / 1000 : 0);
    }
}

/* Context: the debug thread. Waits for the signal; dumps without taking any lock of the VM. */
static void *machine_debug_thread(void *opaque)
{
    sigset_t set;
    int sig;

    pthread_setname_np(pthread_self(), "vblk-debug");
    sigemptyset(&set);
    sigaddset(&set, MACHINE_DEBUG_SIGNAL);
    for (;;) {
        if (sigwait(&set, &sig) != 0) {
            continue;
        }
        if (atomic_load(&debug_watchdog_fired)) {
            /* The exit watchdog: where the teardown is stuck, then out. */
            debug_state_dump();
            machine_exit_now("vblk: state dumped; exiting with status 1\n");
        }
        if (atomic_load(&debug_thread_stop)) {
            return NULL;
        }
        debug_state_dump();
    }
}

static void machine_debug_start(void)
{
    sigset_t old;

    /* Only where main() blocked the signal in every thread: otherwise it would kill vblk. */
    sigemptyset(&old);
    pthread_sigmask(SIG_BLOCK, NULL, &old);
    if (!sigismember(&old, MACHINE_DEBUG_SIGNAL)) {
        return;
    }
    atomic_store(&debug_thread_stop, false);
    debug_state_register(machine_debug_state_fn, NULL);
    debug_thread_started = pthread_create(&debug_thread, NULL, machine_debug_thread, NULL) == 0;
    atomic_store(&debug_thread_running, debug_thread_started);
    if (!debug_thread_started) {
        debug_state_unregister(machine_debug_state_fn, NULL);
    }
}

/*
 * Context: the SIGALRM handler (async-signal-safe: atomics and pthread_kill).
 * Asks the debug thread to dump the state and exit; false if there is none.
 */
bool machine_debug_watchdog_fire(void)
{
    if (!atomic_load(&debug_thread_running)) {
        return false;
    }
    atomic_store(&debug_watchdog_fired, true);
    return pthread_kill(debug_thread, MACHINE_DEBUG_SIGNAL) == 0;
}

/* Context: main thread, once the teardown is over (the thread runs through it). */
void machine_debug_stop(void)
{
    if (!debug_thread_started) {
        return;
    }
    atomic_store(&debug_thread_running, false);
    atomic_store(&debug_thread_stop, true);
    pthread_kill(debug_thread, MACHINE_DEBUG_SIGNAL);
    pthread_join(debug_thread, NULL);
    debug_thread_started = false;
    debug_state_unregister(machine_debug_state_fn, NULL);
}

/* x-debug-state: the SIGUSR2 dump, on stderr; the reply does not wait for it. */
static JsonNode *machine_qmp_debug_state(QmpRequest *req, JsonObject *args, GError **errp)
{
    if (!debug_thread_started) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "the debug-state thread is not running");
        return NULL;
    }
    pthread_kill(debug_thread, MACHINE_DEBUG_SIGNAL);
    return NULL;
}

/* Context: main thread */
int machine_main_loop(Machine *m, bool started_paused, bool have_qmp)
{
    Vm *vm = machine_vm(m);
    GMainLoop *loop = g_main_loop_new(NULL, FALSE);
    MainLoopCtx ctx = {.m = m, .loop = loop, .have_qmp = have_qmp};
    guint src = g_unix_fd_add(vm_exit_fd(vm), G_IO_IN, machine_exit_ready, &ctx);
    int status;

    if (have_qmp && !started_paused) {
        qmp_run_state_set(QMP_RUN_STATE_RUNNING);
    }
    bql_vm = vm;
    bql_orig_poll = g_main_context_get_poll_func(NULL);
    g_main_context_set_poll_func(NULL, machine_bql_poll);
    machine_debug_start();
    vm_lock(vm);
    g_main_loop_run(loop);
    machine_exit_watchdog_arm();
    vm_unlock(vm);
    /* The debug thread runs on through the teardown (machine_run stops it). */
    g_main_context_set_poll_func(NULL, bql_orig_poll);
    status = vm_exit_status(vm_exit_reason(vm));
    if (have_qmp) {
        machine_emit_exit(vm_exit_reason(vm));
        /* Events may travel through an idle source: let it run, then flush. */
        for (int i = 0; i < 100 && g_main_context_iteration(NULL, FALSE); i++) {
        }
        qmp_flush(1000);
        qmp_cleanup();
    }
    if (g_main_context_find_source_by_id(NULL, src)) {
        g_source_remove(src);
    }
    g_main_loop_unref(loop);
    return status;
}
