/*
 * vblk: the main loop and the QMP monitors. The main thread runs a GMainLoop
 * that serves the monitors (-qmp, -chardev + -mon) and ends when the VM asks
 * to exit; QMP's stop/cont/quit act on the vCPUs through the machine hooks.
 */
#include <glib-unix.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "machine-internal.h"
#include "vblk/qmp.h"

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
        fprintf(stderr, "vblk: system_powerdown: ACPI is off (-machine acpi=off / -no-acpi): "
                        "the guest sees no power button\n");
    } else if (!acpi_pm_device_powerdown(machine_acpi)) {
        fprintf(stderr, "vblk: system_powerdown: the guest has not enabled the ACPI power "
                        "button (booted with acpi=off?): the press stays pending in PM1_STS\n");
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

static bool machine_open_one(const RawOption *r, GError **errp)
{
    GError *err = NULL;
    bool ok = true;

    if (!strcmp(r->name, "-chardev")) {
        ok = qmp_chardev_add(r->arg, &err);
    } else if (!strcmp(r->name, "-mon")) {
        ok = qmp_monitor_add_mon(r->arg, &err) != NULL;
    } else if (!strcmp(r->name, "-qmp")) {
        ok = qmp_monitor_add_qmp(r->arg, &err) != NULL;
    } else if (strcmp(r->arg, "none")) {
        g_set_error(&err, VMM_ERROR, 0, "the human monitor (HMP) is not supported; use -qmp");
        ok = false;
    }
    if (!ok) {
        g_set_error(errp, VMM_ERROR, 0, "%s %s: %s", r->name, r->arg, err->message);
        g_error_free(err);
    }
    return ok;
}

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

    *have_qmp = false;
    for (guint i = 0; i < o->raw->len; i++) {
        const RawOption *r = o->raw->pdata[i];
        any |= strcmp(r->name, "-monitor") || strcmp(r->arg, "none");
    }
    if (!any) {
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
    }
    for (guint i = 0; i < o->raw->len; i++) {
        if (!machine_open_one(o->raw->pdata[i], errp)) {
            qmp_cleanup();
            *have_qmp = false;
            return false;
        }
    }
    return true;
}

static void machine_emit_exit(VmExitReason reason)
{
    switch (reason) {
    case VM_EXIT_RESET:
        qmp_emit_shutdown(true, "guest-reset");
        break;
    case VM_EXIT_POWEROFF:
        qmp_emit_shutdown(true, "guest-shutdown");
        break;
    case VM_EXIT_ERROR:
        qmp_run_state_set(QMP_RUN_STATE_INTERNAL_ERROR);
        break;
    default:
        break; /* quit: the quit command or a signal; QMP already said so */
    }
}

static Vm *bql_vm;
static GPollFunc bql_orig_poll;

/*
 * The main thread holds the BQL (the device lock) whenever it runs anything,
 * as QEMU's main loop does, and drops it only while it sleeps in poll().
 */
static gint machine_bql_poll(GPollFD *fds, guint nfds, gint timeout)
{
    gint r;

    vm_unlock(bql_vm);
    r = bql_orig_poll(fds, nfds, timeout);
    vm_lock(bql_vm);
    return r;
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
    vm_lock(vm);
    g_main_loop_run(loop);
    vm_unlock(vm);
    g_main_context_set_poll_func(NULL, bql_orig_poll);
    status = vm_exit_reason(vm) == VM_EXIT_ERROR ? 1 : 0;
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
