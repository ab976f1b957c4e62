/*
 * Memory barriers and single-copy atomic accessors shared between a device
 * thread and the guest driver (which runs concurrently on a vCPU, or in the
 * test driver's thread).
 *
 * Guest RAM is shared memory written by another agent at any time, so every
 * ring index is read exactly once through these accessors (no compiler
 * re-load, no torn read) and ordering is made explicit with the fences
 * below. Every use of a fence in the tree names the fence it pairs with.
 */
#ifndef VBLK_BARRIER_H
#define VBLK_BARRIER_H

/* Full barrier: orders earlier loads/stores against later loads/stores. */
#define smp_mb() __atomic_thread_fence(__ATOMIC_SEQ_CST)
/* Orders earlier stores against later stores (publish data, then index). */
#define smp_wmb() __atomic_thread_fence(__ATOMIC_RELEASE)
/* Orders earlier loads against later loads (read index, then data). */
#define smp_rmb() __atomic_thread_fence(__ATOMIC_ACQUIRE)

/* Single-copy atomic load/store without ordering. */
#define qatomic_read(ptr)               __atomic_load_n(ptr, __ATOMIC_RELAXED)
#define qatomic_set(ptr, val)           __atomic_store_n(ptr, val, __ATOMIC_RELAXED)
#define qatomic_load_acquire(ptr)       __atomic_load_n(ptr, __ATOMIC_ACQUIRE)
#define qatomic_store_release(ptr, val) __atomic_store_n(ptr, val, __ATOMIC_RELEASE)
#define qatomic_fetch_add(ptr, n)       __atomic_fetch_add(ptr, n, __ATOMIC_SEQ_CST)

#endif /* VBLK_BARRIER_H */
