/*
 * Guest physical memory map: an immutable, sorted table of RAM regions
 * (guest-physical address -> host-virtual address).
 *
 * The VMM builds the table once; after guestmem_new() returns, the table is
 * never modified, so any thread may translate addresses without a lock.
 * Replacing the map (memory hotplug) means building a new table and handing
 * it over while no translation is running against the old one.
 */
#ifndef VBLK_GUESTMEM_H
#define VBLK_GUESTMEM_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <inttypes.h>
#include <sys/uio.h>

/* GError domain of src/virtio (guest memory, virtqueue, virtio-blk). */
#define VIRTIO_ERROR virtio_error_quark()
typedef enum {
    VIRTIO_ERROR_INVALID,      /* invalid argument or configuration */
    VIRTIO_ERROR_NOT_FOUND,    /* unknown property */
    VIRTIO_ERROR_NOT_SUPPORTED /* feature combination refused */
} VirtIOErrorCode;
/* Context: any thread */
GQuark virtio_error_quark(void);

typedef struct GuestMemRegion {
    uint64_t gpa;  /* guest-physical start */
    uint64_t size; /* bytes, > 0 */
    void *hva;     /* host mapping of the whole region */
    bool readonly; /* device may not write (guestmem_map(write=true) fails) */
} GuestMemRegion;

typedef struct GuestMem GuestMem;

/*
 * Build a table from @n regions (any order). Fails with a GError if a region
 * is empty, has no host mapping, wraps past 2^64, or overlaps another one.
 * Context: any thread (control path)
 */
GuestMem *guestmem_new(const GuestMemRegion *regions, size_t n, GError **errp);

/* Context: any thread; no translation may be running concurrently */
void guestmem_free(GuestMem *gm);

/*
 * Translate [gpa, gpa + len) into host iovecs, one per region crossed.
 * Returns the number of iovecs written (0 when len == 0), -EFAULT unless the
 * whole range is RAM (and writable when @write), -ENOBUFS when more than
 * @max_iov iovecs would be needed. Allocates nothing.
 * Context: any thread
 */
int guestmem_map(const GuestMem *gm, uint64_t gpa, uint64_t len, bool write, struct iovec *iov,
                 unsigned max_iov);

/*
 * Host pointer for [gpa, gpa + len), or NULL unless that range lies inside a
 * single region (used for ring structures, which must be contiguous).
 * len == 0 is treated as 1.
 * Context: any thread
 */
void *guestmem_ptr(const GuestMem *gm, uint64_t gpa, uint64_t len);

/* Number of regions and read access to them (sorted by gpa). */
/* Context: any thread */
size_t guestmem_num_regions(const GuestMem *gm);
/* Context: any thread */
const GuestMemRegion *guestmem_region(const GuestMem *gm, size_t i);

#endif /* VBLK_GUESTMEM_H */
