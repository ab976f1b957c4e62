/*
 * vblk: the serial console: a 16550 at COM1 (0x3f8, IRQ 4) connected to a
 * host backend: stdio (raw tty input with a Ctrl-a escape), a file, or
 * nothing. "-serial none" means no UART at all, as in QEMU.
 */
#ifndef VBLK_CONSOLE_H
#define VBLK_CONSOLE_H

#include <glib.h>
#include <stdbool.h>

#include "vmm/vmm.h"

typedef enum ConsoleMode {
    CONSOLE_STDIO, /* output to stdout, input from stdin */
    CONSOLE_FILE,  /* output appended to a file, no input */
    CONSOLE_NULL,  /* UART present, output dropped */
    CONSOLE_NONE,  /* no UART: its ports read as all ones */
} ConsoleMode;

#define CONSOLE_ESCAPE_CHAR 0x01 /* Ctrl-a */

typedef struct Console Console;

/* Context: main thread. Opens the backend and registers the UART's ports. */
Console *console_new(Vm *vm, ConsoleMode mode, const char *path, GError **errp);
/* Context: main thread. Explicit fds (tests): @in_fd may be -1, @out_fd may be -1. */
Console *console_new_fds(Vm *vm, int in_fd, int out_fd, GError **errp);
/*
 * Context: main thread, before console_start(). Shares the console's stdin
 * with a monitor (QEMU's mux): Ctrl-a c moves the focus between the UART and
 * the monitor. Returns the read end of a pipe that carries the monitor's
 * keys, with NUL 'i' / NUL 'o' when it gets / loses the focus (the format
 * qmp_monitor_open_hmp_mux() reads); -1 with @errp on failure.
 */
int console_attach_monitor(Console *con, bool focused, GError **errp);
/* Context: main thread. Raw mode on a tty stdin, then the input thread. */
bool console_start(Console *con, GError **errp);
/* Context: device lock held. Machine reset: the UART back to power-on state, IRQ low. */
void console_reset(Console *con);
/* Context: main thread. Stops input, restores the terminal, unregisters nothing. */
void console_free(Console *con);

#endif /* VBLK_CONSOLE_H */
