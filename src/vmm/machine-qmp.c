/*
 * vblk: the main loop and the QMP monitors. The main thread runs a GMainLoop
 * that serves the monitors (-qmp, -chardev + -mon) and ends when the VM asks
 * to exit; QMP's stop/cont/quit act on the vCPUs through the machine hooks.
 */
#include <glib-unix.h>
#include <stdio.h>
#include <string.h>

#include "machine-internal.h"
#include "vblk/qmp.h"

static gboolean machine_exit_ready(gint fd, GIOCondition cond, gpointer opaque)
{
    g_main_loop_quit(opaque);
    return G_SOURCE_REMOVE;
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

static bool machine_qmp_powerdown(void *opaque, GError **errp)
{
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                "system_powerdown needs ACPI, which this machine does not have");
    return false;
}

static bool machine_qmp_reset(void *opaque, GError **errp)
{
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                "system_reset is not supported: vblk cannot reboot in place");
    return false;
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
bool machine_monitors_open(Vm *vm, const VmmOptions *o, bool *have_qmp, GError **errp)
{
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
    qmp_machine_set_hooks(&hooks);
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
int machine_main_loop(Vm *vm, bool started_paused, bool have_qmp)
{
    GMainLoop *loop = g_main_loop_new(NULL, FALSE);
    guint src = g_unix_fd_add(vm_exit_fd(vm), G_IO_IN, machine_exit_ready, loop);
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
