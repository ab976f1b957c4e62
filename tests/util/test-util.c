/*
 * src/util: the diagnostics format and the thread-context checks.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/error-report.h"
#include "util/thread-check.h"

static char *capture(void (*fn)(void))
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);

    g_assert_nonnull(f);
    error_report_set_stream(f);
    fn();
    error_report_set_stream(NULL);
    fclose(f);
    return buf;
}

static void report_plain(void)
{
    error_report("cannot open %s", "disk.img");
}

static void report_dev_warning(void)
{
    warn_report_id("drive0", "flush failed: %s", "Input/output error");
}

static void test_format(void)
{
    char *s;

    error_set_progname("/usr/bin/vblk");
    s = capture(report_plain);
    g_assert_cmpstr(s, ==, "vblk: cannot open disk.img\n");
    free(s);
    s = capture(report_dev_warning);
    g_assert_cmpstr(s, ==, "vblk: drive0: warning: flush failed: Input/output error\n");
    free(s);
    error_set_progname("vblk-storage-daemon");
    s = capture(report_plain);
    g_assert_cmpstr(s, ==, "vblk-storage-daemon: cannot open disk.img\n");
    free(s);
    error_set_progname(NULL);
}

static ThreadOwner owner;

static void *other_thread(void *arg)
{
    bool *ok = arg;

    ok[0] = thread_is_main();
    ok[1] = thread_owner_ok(&owner);
    return NULL;
}

static void test_thread_owner(void)
{
    pthread_t t;
    bool ok[2];

    g_assert_true(thread_is_main());
    g_assert_true(thread_owner_ok(&owner)); /* unbound: anyone */
    thread_owner_set(&owner);
    g_assert_true(thread_owner_ok(&owner));
    g_assert_cmpint(pthread_create(&t, NULL, other_thread, ok), ==, 0);
    pthread_join(t, NULL);
    g_assert_false(ok[0]); /* not the main thread */
    g_assert_false(ok[1]); /* bound to us, not to it */
    thread_owner_clear(&owner);
    g_assert_cmpint(pthread_create(&t, NULL, other_thread, ok), ==, 0);
    pthread_join(t, NULL);
    g_assert_true(ok[1]);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/util/error-report/format", test_format);
    g_test_add_func("/util/thread-check/owner", test_thread_owner);
    return g_test_run();
}
