/*
 * libFuzzer target: vblk's command line (options_parse: -m, -smp, -drive,
 * -blockdev, -device in both its key=value and JSON forms, -object, -qmp,
 * -monitor, -chardev, ...). The input is the argument list, one argument per
 * line, after the program name. Whatever it is, parsing must return either
 * options or an error with a one-line message, and free everything (ASan's
 * leak check runs at exit).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/options.h"

#define MAX_ARGS 64

/* The parser's error domain lives in kvm.c, which this target does not link. */
GQuark vmm_error_quark(void)
{
    return g_quark_from_static_string("vblk-vmm-error");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    g_autofree char *text = g_strndup((const char *)data, size);
    char *argv[MAX_ARGS + 2];
    int argc = 0;
    GError *err = NULL;
    VmmOptions *o;

    argv[argc++] = (char *)"vblk";
    for (char *p = text, *nl; argc < MAX_ARGS + 1; p = nl + 1) {
        nl = strchr(p, '\n');
        if (nl) {
            *nl = '\0';
        }
        argv[argc++] = p;
        if (!nl) {
            break;
        }
    }
    argv[argc] = NULL;
    o = options_parse(argc, argv, &err);
    if (o) {
        g_assert_null(err);
        options_free(o);
    } else {
        g_assert_nonnull(err);
        g_assert_nonnull(err->message);
        /* The command line's errors are one line (the caller prefixes "vblk: "). */
        g_assert_null(strchr(err->message, '\n'));
        g_error_free(err);
    }
    return 0;
}
