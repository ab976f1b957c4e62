/* vblk: machine.c <-> machine-qmp.c; not a public interface. */
#ifndef VBLK_MACHINE_INTERNAL_H
#define VBLK_MACHINE_INTERNAL_H

#include "vblk/machine.h"

/* Opens -chardev/-mon/-qmp monitors; with none, QMP is not started at all. */
bool machine_monitors_open(Vm *vm, const VmmOptions *o, bool *have_qmp, GError **errp);
/* Serves the monitors until the VM asks to exit; returns the exit status. */
int machine_main_loop(Vm *vm, bool started_paused, bool have_qmp);

#endif /* VBLK_MACHINE_INTERNAL_H */
