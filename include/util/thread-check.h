/*
 * Thread context, asserted rather than only written down. Public entry
 * points say which thread they run in ("Context: iothread", "Context: main
 * thread, BQL held") and check it with these macros, as QEMU asserts an
 * AioContext. The checks compile to nothing with NDEBUG.
 *
 *   ThreadOwner: the thread an object currently belongs to (an IOQ, a
 *   dataplane's queues). thread_owner_set() binds it to the calling thread,
 *   thread_owner_clear() unbinds it; THREAD_OWNER_ASSERT() fails when the
 *   object is bound to another thread.
 *
 *   THREAD_ASSERT_MAIN(): main-loop context, as QEMU's "BQL held": the
 *   process's main thread (gettid() == getpid()), or any thread that holds
 *   the BQL (a vCPU thread handling a device register write). The BQL's
 *   owner (src/vmm's vm_lock) reports it with bql_note_held().
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_THREAD_CHECK_H
#define VBLK_THREAD_CHECK_H

#include <assert.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct ThreadOwner {
    _Atomic uint32_t tid; /* 0: not bound */
} ThreadOwner;

/* Context: any thread. The calling thread's kernel thread id (cached). */
uint32_t thread_self_id(void);
/* Context: any thread. True in the process's main thread. */
bool thread_is_main(void);

/* Context: the thread that just took (true) or is about to drop (false) the BQL. */
void bql_note_held(bool held);
/* Context: any thread. True while the calling thread holds the BQL. */
bool bql_held(void);

/* Context: the thread that takes ownership. */
static inline void thread_owner_set(ThreadOwner *o)
{
    __atomic_store_n((uint32_t *)&o->tid, thread_self_id(), __ATOMIC_RELAXED);
}

/* Context: the owning thread, or any thread when the object is quiescent. */
static inline void thread_owner_clear(ThreadOwner *o)
{
    __atomic_store_n((uint32_t *)&o->tid, 0, __ATOMIC_RELAXED);
}

/* Context: any thread. True when @o is unbound or bound to the caller. */
static inline bool thread_owner_ok(const ThreadOwner *o)
{
    uint32_t t = __atomic_load_n((const uint32_t *)&o->tid, __ATOMIC_RELAXED);

    return t == 0 || t == thread_self_id();
}

#define THREAD_OWNER_ASSERT(o) assert(thread_owner_ok(o))
#define THREAD_ASSERT_MAIN()   assert(thread_is_main() || bql_held())

#endif /* VBLK_THREAD_CHECK_H */
