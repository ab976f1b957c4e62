/*
 * One-line diagnostics on stderr; see util/error-report.h.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/error-report.h"

static const char *progname = "vblk";
static FILE *stream;

/* Context: main thread, before other threads start */
void error_set_progname(const char *name)
{
    const char *slash = name ? strrchr(name, '/') : NULL;

    progname = slash ? slash + 1 : (name && *name ? name : "vblk");
}

/* Context: any thread */
void error_report_set_stream(FILE *f)
{
    stream = f;
}

/* Context: any thread. Built in one buffer so that concurrent reports do not interleave. */
void error_vreport(const char *id, const char *prefix, const char *fmt, va_list ap)
{
    char msg[1024];
    FILE *out = stream ? stream : stderr;
    int n;

    n = vsnprintf(msg, sizeof(msg), fmt, ap);
    if (n < 0) {
        msg[0] = '\0';
    }
    fprintf(out, "%s: %s%s%s%s\n", progname, id ? id : "", id ? ": " : "", prefix ? prefix : "",
            msg);
    fflush(out);
}

/* Context: any thread */
void error_report_id(const char *id, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    error_vreport(id, NULL, fmt, ap);
    va_end(ap);
}

/* Context: any thread */
void warn_report_id(const char *id, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    error_vreport(id, "warning: ", fmt, ap);
    va_end(ap);
}

/* Context: any thread */
void info_report_id(const char *id, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    error_vreport(id, "info: ", fmt, ap);
    va_end(ap);
}
