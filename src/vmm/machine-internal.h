/* vblk: machine.c <-> machine-qmp.c; not a public interface. */
#ifndef VBLK_MACHINE_INTERNAL_H
#define VBLK_MACHINE_INTERNAL_H

#include "vmm/acpi.h"
#include "vmm/console.h"
#include "vmm/machine.h"

/* Opens -chardev/-mon/-qmp monitors; with none, QMP is not started at all. */
bool machine_monitors_open(Machine *m, const VmmOptions *o, bool *have_qmp, GError **errp);
/* Serves the monitors until the VM asks to exit (guest resets in between); returns the status. */
int machine_main_loop(Machine *m, bool started_paused, bool have_qmp);
/*
 * Bound the exit: from now on, teardown that takes over 15 s ends the process
 * with status 1 and a message (SIGALRM). Context: main thread, main loop ended
 */
void machine_exit_watchdog_arm(void);
/* The signal (SIGINT, SIGTERM, SIGHUP) that ended the VM, or 0. Context: main thread */
int machine_exit_signal(void);
/*
 * The SIGUSR2 debug thread starts with the main loop and runs until the
 * teardown is over, so a stuck exit can still be dumped. Context: main thread
 */
void machine_debug_stop(void);
/* From the SIGALRM handler: have the debug thread dump the state, then exit 1. */
bool machine_debug_watchdog_fire(void);
/* Write @msg to stderr and _exit(1). Async-signal-safe. */
G_NORETURN void machine_exit_now(const char *msg);
/*
 * Machine reset minus the vCPU pause: every device to power-on state, boot images
 * reloaded, in-kernel chips and vCPUs restored, BSP at the kernel entry.
 * Context: main thread, BQL held, every vCPU paused
 */
bool machine_reset_devices_and_boot(Machine *m, GError **errp);
/* The serial console (HMP shares stdio with it). */
Console *machine_console(Machine *m);
/* The power button system_powerdown presses; NULL with acpi=off. */
void machine_qmp_set_acpi(AcpiPmDevice *acpi);

#endif /* VBLK_MACHINE_INTERNAL_H */
