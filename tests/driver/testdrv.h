/*
 * In-process virtio guest driver for tests.
 *
 * A TestDrv owns a memfd-backed "guest RAM" (optionally split into several
 * regions separated by holes), a bump allocator for guest buffers, and the
 * guest side of split virtqueues: it places the rings, writes descriptor
 * chains (well-formed or deliberately broken), publishes them, kicks through
 * an eventfd (the device's host notifier) and reads completions from the used
 * ring and the call eventfd (the guest notifier).
 *
 * Threads: the driver side (everything on TestDrv/TestVq except the fd
 * getters and testdrv_guestmem) is used by one "guest" thread; the device
 * side runs anywhere else. Ring indices are published with release stores
 * and read with acquire loads, exactly as a real guest driver would.
 * Test code: failures to set up abort the test via g_assert.
 */
#ifndef VBLK_TESTDRV_H
#define VBLK_TESTDRV_H

#include <stdbool.h>
#include <stdint.h>
#include <stddef.h>

#include "virtio/guestmem.h"

typedef struct TestDrvOpts {
    uint64_t ram_size; /* total RAM bytes, split evenly across regions (default 16 MiB) */
    unsigned nregions; /* 1 (default) or more */
    uint64_t base_gpa; /* gpa of the first region (default 0x100000) */
    uint64_t gap;      /* hole between regions (default 1 MiB) */
    bool adjacent;     /* no hole between regions (overrides @gap) */
} TestDrvOpts;

typedef struct TestDrv TestDrv;

/* @opts may be NULL for the defaults. */
TestDrv *testdrv_new(const TestDrvOpts *opts);
void testdrv_free(TestDrv *d);

/* Device view of the RAM (valid until testdrv_free). */
const GuestMem *testdrv_guestmem(TestDrv *d);

/* Region layout (gpa of region @i and its size). */
unsigned testdrv_nregions(TestDrv *d);
uint64_t testdrv_region_gpa(TestDrv *d, unsigned i);
uint64_t testdrv_region_size(TestDrv *d, unsigned i);
/*
 * The memfd behind the RAM (for a vhost-user front end) and where region @i
 * starts inside it.
 */
int testdrv_memfd(TestDrv *d);
uint64_t testdrv_region_fd_offset(TestDrv *d, unsigned i);
/* First gpa past the end of the last region (not RAM). */
uint64_t testdrv_ram_end(TestDrv *d);

/*
 * Bump allocator: @size bytes aligned to @align (power of two, 0 = 16)
 * inside one region (moves to the next region if needed). Never freed
 * individually; testdrv_alloc_reset() rewinds to a mark (long-running tests
 * and benchmarks allocate their buffers once, or rewind per round). The last
 * TESTDRV_TAIL_RESERVE bytes of every region are left to
 * testdrv_alloc_at_region_end().
 */
#define TESTDRV_TAIL_RESERVE (64 * 1024)
uint64_t testdrv_alloc(TestDrv *d, uint64_t size, uint64_t align);
/*
 * Buffer of @size bytes (<= TESTDRV_TAIL_RESERVE) ending exactly at the end of
 * region @i (crossing tests). Always the same place: callers reuse it.
 */
uint64_t testdrv_alloc_at_region_end(TestDrv *d, unsigned i, uint64_t size);
uint64_t testdrv_alloc_mark(TestDrv *d);
void testdrv_alloc_reset(TestDrv *d, uint64_t mark);

/* Guest memory access by gpa; the range may span regions (asserts it is RAM). */
void testdrv_memwrite(TestDrv *d, uint64_t gpa, const void *buf, size_t len);
void testdrv_memread(TestDrv *d, uint64_t gpa, void *buf, size_t len);
void testdrv_memset(TestDrv *d, uint64_t gpa, int c, size_t len);
uint8_t testdrv_readb(TestDrv *d, uint64_t gpa);

/* Driver features = @host & @wanted, always with VIRTIO_F_VERSION_1 if offered. */
uint64_t testdrv_negotiate(uint64_t host, uint64_t wanted);

/* ---- split virtqueue, guest side ---- */

typedef struct TestVq TestVq;

/* A buffer of a chain: gpa/len, device-writable if @write. */
typedef struct TestBuf {
    uint64_t gpa;
    uint32_t len;
    bool write;
} TestBuf;

/*
 * Place a queue of @num entries in guest RAM with @features (driver
 * features). Creates the kick (host notifier) and call (guest notifier)
 * eventfds.
 */
TestVq *testvq_new(TestDrv *d, unsigned num, uint64_t features);
void testvq_free(TestVq *vq);

unsigned testvq_num(TestVq *vq);
uint64_t testvq_desc_gpa(TestVq *vq);
uint64_t testvq_avail_gpa(TestVq *vq);
uint64_t testvq_used_gpa(TestVq *vq);
/* Device side gets these: the device reads kick_fd and writes call_fd. */
int testvq_kick_fd(TestVq *vq);
int testvq_call_fd(TestVq *vq);

/* Descriptors still free in the driver's free list. */
unsigned testvq_free_descs(TestVq *vq);

/*
 * Write a direct chain of @n buffers to the descriptor table (taken from the
 * free list) and return its head; -1 if not enough free descriptors. Not yet
 * visible to the device: call testvq_publish().
 */
int testvq_add_chain(TestVq *vq, const TestBuf *bufs, unsigned n);
/*
 * Same, through one indirect table of @n entries in guest RAM. Each head owns
 * a table placed at testvq_new() for up to 16 entries; a longer chain grows
 * it with testdrv_alloc() (do that before taking an alloc mark you rewind to).
 */
int testvq_add_indirect(TestVq *vq, const TestBuf *bufs, unsigned n);

/* Raw access for broken chains: the driver's free list is not touched. */
void testvq_set_desc(TestVq *vq, unsigned i, uint64_t addr, uint32_t len, uint16_t flags,
                     uint16_t next);
/* Write an indirect table of @n raw entries at @gpa. */
void testdrv_write_table(TestDrv *d, uint64_t gpa, unsigned i, uint64_t addr, uint32_t len,
                         uint16_t flags, uint16_t next);

/* Put @head in the next avail slot and publish avail->idx (release). */
void testvq_publish(TestVq *vq, uint16_t head);
/* Put @head in avail slot @avail_idx % num without publishing. */
void testvq_set_avail_ring(TestVq *vq, uint16_t slot, uint16_t head);
/* Raw avail->idx store (release); also resets the driver's shadow index. */
void testvq_set_avail_idx(TestVq *vq, uint16_t idx);
uint16_t testvq_avail_idx(TestVq *vq);
void testvq_set_avail_flags(TestVq *vq, uint16_t flags);
/* EVENT_IDX: used_event (driver writes) and avail_event (device writes). */
void testvq_set_used_event(TestVq *vq, uint16_t idx);
uint16_t testvq_avail_event(TestVq *vq);
uint16_t testvq_used_flags(TestVq *vq);

/*
 * Kick the device if it asked for it (VRING_USED_F_NO_NOTIFY or, with
 * EVENT_IDX, vring_need_event(avail_event, ...)) since the last kick.
 * Returns true if the eventfd was written. testvq_kick_force always writes.
 */
bool testvq_kick(TestVq *vq);
void testvq_kick_force(TestVq *vq);

/* used->idx as published (acquire). */
uint16_t testvq_used_idx(TestVq *vq);
/*
 * Next used element the driver has not consumed: returns false if none.
 * Frees the chain's descriptors (and forgets indirect tables) when @head was
 * added with testvq_add_chain/_indirect.
 */
bool testvq_get_used(TestVq *vq, uint16_t *head, uint32_t *len);

/*
 * With EVENT_IDX, testvq_get_used() writes used_event = the next used index
 * it expects (as Linux's virtqueue_get_buf does), so every completion batch
 * interrupts. Turn off to drive used_event by hand (default on).
 */
void testvq_set_auto_used_event(TestVq *vq, bool on);

/* Interrupts: read the call eventfd; returns its counter (0 if not signalled). */
uint64_t testvq_take_calls(TestVq *vq);
/* Wait up to @timeout_ms for the call eventfd; true if signalled (and consumed). */
bool testvq_wait_call(TestVq *vq, int timeout_ms);
/* Wait up to @timeout_ms until a used element is available. */
bool testvq_wait_used(TestVq *vq, int timeout_ms);

/* ---- virtio-blk requests ---- */

typedef struct TestBlkReq {
    int head;          /* -1 if the chain could not be added */
    uint64_t hdr_gpa;  /* 16-byte struct virtio_blk_outhdr */
    uint64_t data_gpa; /* 0 if no data */
    uint32_t data_len;
    uint64_t status_gpa; /* initialised to 0xff */
} TestBlkReq;

/*
 * Build header (type, sector), data buffer (@len bytes, copied from @data for
 * writes if non-NULL, device-writable for IN and GET_ID), status byte; add a
 * direct (or @indirect) chain [hdr, data?, status] and publish it.
 */
TestBlkReq testblk_submit(TestVq *vq, uint32_t type, uint64_t sector, const void *data,
                          uint32_t len, bool indirect);
/* Build header/data/status buffers without adding a chain (for custom layouts). */
TestBlkReq testblk_prepare(TestVq *vq, uint32_t type, uint64_t sector, const void *data,
                           uint32_t len);
uint8_t testblk_status(TestVq *vq, const TestBlkReq *r);

TestDrv *testvq_drv(TestVq *vq);

#endif /* VBLK_TESTDRV_H */
