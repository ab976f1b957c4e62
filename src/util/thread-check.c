/*
 * Thread identity for the context assertions of util/thread-check.h.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <sys/syscall.h>
#include <unistd.h>

#include "util/thread-check.h"

static __thread uint32_t self_tid;
static __thread bool bql_is_held;

/* Context: any thread */
uint32_t thread_self_id(void)
{
    if (__builtin_expect(self_tid == 0, 0)) {
        self_tid = (uint32_t)syscall(SYS_gettid);
    }
    return self_tid;
}

/* Context: any thread */
bool thread_is_main(void)
{
    return thread_self_id() == (uint32_t)getpid();
}

/* Context: the BQL's owner */
void bql_note_held(bool held)
{
    bql_is_held = held;
}

/* Context: any thread */
bool bql_held(void)
{
    return bql_is_held;
}
