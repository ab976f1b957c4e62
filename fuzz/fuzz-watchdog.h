/*
 * What the fuzz targets that run a device on threads share: a monotonic
 * clock, a watchdog thread that aborts an input still running HANG_SECONDS
 * after it began (naming the stage it was in, which libFuzzer reports with
 * the input), and FAIL(), an invariant violation that aborts with a message.
 *
 * The including file defines FUZZ_NAME (its target's name, a string) and
 * HANG_SECONDS first; it calls fuzz_watchdog_start() once, arms the watchdog
 * with fuzz_input_begin() at the start of an input, disarms it with
 * fuzz_input_end(), and marks its steps with stage().
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_FUZZ_WATCHDOG_H
#define VBLK_FUZZ_WATCHDOG_H

#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

static int64_t wd_deadline;  /* monotonic ns, 0: no input running (atomic) */
static const char *wd_stage; /* atomic */

static inline int64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static void *fuzz_watchdog(void *arg)
{
    for (;;) {
        int64_t d = __atomic_load_n(&wd_deadline, __ATOMIC_ACQUIRE);

        if (d && now_ns() > d) {
            fprintf(stderr, FUZZ_NAME ": hang: input still running after %d s, in stage '%s'\n",
                    HANG_SECONDS, __atomic_load_n(&wd_stage, __ATOMIC_ACQUIRE));
            abort();
        }
        usleep(100 * 1000);
    }
    return arg;
}

static inline void fuzz_watchdog_start(void)
{
    pthread_t wd;

    pthread_create(&wd, NULL, fuzz_watchdog, NULL);
    pthread_detach(wd);
}

static inline void fuzz_input_begin(void)
{
    __atomic_store_n(&wd_deadline, now_ns() + (int64_t)HANG_SECONDS * 1000000000, __ATOMIC_RELEASE);
}

static inline void fuzz_input_end(void)
{
    __atomic_store_n(&wd_deadline, 0, __ATOMIC_RELEASE);
}

static inline void stage(const char *s)
{
    __atomic_store_n(&wd_stage, s, __ATOMIC_RELEASE);
}

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, FUZZ_NAME ": invariant violated: " __VA_ARGS__);                           \
        fputc('\n', stderr);                                                                       \
        abort();                                                                                   \
    } while (0)

#endif /* VBLK_FUZZ_WATCHDOG_H */
