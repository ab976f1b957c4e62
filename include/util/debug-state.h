/*
 * Hang diagnosis: modules register "dumpers" that describe the live state of
 * what they own (vCPUs, iothreads, a device's queues) as text lines, and
 * debug_state_dump() runs them all. vblk runs it on SIGUSR2 and on QMP
 * x-debug-state, in a thread of its own (docs/vmm.md, "Why vblk ended, and
 * what it is doing"), so it must work while other threads are stuck: a dumper
 * only reads (relaxed atomics, fields that cannot be freed under it) and never
 * waits for the BQL, an iothread or a vCPU.
 *
 * Unregistering waits for a dump in progress, so after debug_state_unregister()
 * returns the dumper never runs again and its object may be freed.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_DEBUG_STATE_H
#define VBLK_DEBUG_STATE_H

#include <glib.h>

/* Appends one or more lines ('\n'-terminated) describing @opaque to @out. */
typedef void DebugStateFn(GString *out, void *opaque);

/* Context: any thread. Dumpers run in registration order. */
void debug_state_register(DebugStateFn *fn, void *opaque);
/* Context: any thread but a dumper's own. Removes every (@fn, @opaque) registration. */
void debug_state_unregister(DebugStateFn *fn, void *opaque);
/* Context: any thread. Runs every dumper; returns the text (caller frees). */
char *debug_state_collect(void);
/* Context: any thread. debug_state_collect(), each line reported with error_report(). */
void debug_state_dump(void);

#endif /* VBLK_DEBUG_STATE_H */
