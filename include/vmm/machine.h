/*
 * vblk: the machine: a Vm plus its devices (COM1, legacy ports, PCI bus,
 * MP table) booted from the parsed command line.
 *
 * Device models plug in by driver name: machine_register_device() before
 * machine_run(); the callback creates the device for one -device and adds a
 * cleanup with machine_add_cleanup(). It runs on the main thread before any
 * vCPU exists, without the device lock (take it with vm_lock() if needed). A -device with no
 * registered model is reported as "not wired yet" and skipped.
 */
#ifndef VBLK_MACHINE_H
#define VBLK_MACHINE_H

#include <glib.h>
#include <signal.h>
#include <stdbool.h>

#include "event/event.h"
#include "vmm/options.h"
#include "vmm/pci.h"
#include "vmm/vmm.h"

typedef struct Machine Machine;

typedef bool (*MachineDeviceFn)(Machine *m, const DeviceOptions *dev, const DriveOptions *drive,
                                GError **errp);

/* Context: main thread, before machine_run() */
void machine_register_device(const char *driver, MachineDeviceFn fn);
/* Context: main thread */
Vm *machine_vm(Machine *m);
/* Context: main thread */
PciBus *machine_pci_bus(Machine *m);
/*
 * The main thread's EventLoop (driven from the GMainLoop). Its handlers run
 * in the main thread with the device lock (the BQL) held; another thread may
 * change its fd handlers only while holding the device lock.
 * Context: main thread, or any thread holding the device lock
 */
EventLoop *machine_event_loop(Machine *m);
/* Context: main thread */
const VmmOptions *machine_options(Machine *m);
/* @fn runs after QMP "cont" resumed the vCPUs (BQL held). Context: main thread */
void machine_add_cont_notifier(void (*fn)(void *opaque), void *opaque);
/* Context: main thread */
void machine_del_cont_notifier(void *opaque);
/* Context: main thread. @fn runs at teardown (reverse order), with vCPUs paused. */
void machine_add_cleanup(Machine *m, void (*fn)(void *opaque), void *opaque);
/*
 * SIGUSR2 dumps every vCPU's, iothread's and device queue's state on stderr
 * (util/debug-state.h). main() blocks it before any thread starts, so that only
 * the machine's debug thread takes it.
 */
#define MACHINE_DEBUG_SIGNAL SIGUSR2
/* Context: main thread, before any other thread exists */
void machine_block_debug_signal(void);
/* Context: main thread. Builds, boots and runs the VM; returns the process exit status. */
int machine_run(const VmmOptions *opts);

#endif /* VBLK_MACHINE_H */
