/*
 * Diagnostics, in QEMU's error_report() style: one line on stderr,
 * "<prog>: [<id>: ][warning: |info: ]<message>". The id names the device or drive
 * the message is about (its -device id= or -drive id=), so a user with
 * several disks knows which one is meant. Every module reports through here
 * rather than g_warning() or fprintf(stderr).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_ERROR_REPORT_H
#define VBLK_ERROR_REPORT_H

#include <stdarg.h>
#include <stdio.h>

/* Context: main thread, before other threads start. Default "vblk". */
void error_set_progname(const char *name);
/* Context: any thread. Tests point it at a memstream; NULL restores stderr. */
void error_report_set_stream(FILE *f);

/* Context: any thread. @id may be NULL. */
void error_report_id(const char *id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void warn_report_id(const char *id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void info_report_id(const char *id, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void error_vreport(const char *id, const char *prefix, const char *fmt, va_list ap)
    __attribute__((format(printf, 3, 0)));

#define error_report(...) error_report_id(NULL, __VA_ARGS__)
#define warn_report(...)  warn_report_id(NULL, __VA_ARGS__)
#define info_report(...)  info_report_id(NULL, __VA_ARGS__)

#endif /* VBLK_ERROR_REPORT_H */
