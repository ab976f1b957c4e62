/*
 * A minimal process with "-qmp stdio", driven by test-qmp-transport over
 * pipes: runs a GMainLoop until "quit".
 */
#include <stdio.h>
#include "monitor/qmp.h"

static void on_quit(void *opaque)
{
    g_main_loop_quit(opaque);
}

int main(int argc, char **argv)
{
    GMainLoop *loop = g_main_loop_new(NULL, FALSE);
    QmpMachineHooks hooks = {.quit = on_quit, .opaque = loop};
    GError *err = NULL;

    qmp_init(NULL);
    qmp_machine_set_hooks(&hooks);
    qmp_run_state_set(QMP_RUN_STATE_RUNNING);
    if (!qmp_monitor_add_qmp(argc > 1 ? argv[1] : "stdio", &err)) {
        fprintf(stderr, "%s\n", err->message);
        g_error_free(err);
        return 1;
    }
    g_main_loop_run(loop);
    qmp_cleanup();
    g_main_loop_unref(loop);
    return 0;
}
