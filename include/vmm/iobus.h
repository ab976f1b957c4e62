/*
 * vblk: address-range dispatch for port I/O and MMIO exits.
 *
 * A bus is a sorted set of non-overlapping [base, base + len) regions, each
 * with read/write callbacks. The vCPU exit handler looks the address up and
 * calls the region; an address nobody claims is "unhandled" (reads return all
 * ones, writes are dropped) and the caller counts it.
 *
 * Locking: a bus does no locking itself. Lookups and changes both happen
 * under the VM's device lock (vm_lock()), QEMU's BQL in miniature.
 */
#ifndef VBLK_IOBUS_H
#define VBLK_IOBUS_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct IoRegionOps {
    /* @off is relative to the region base; @size is 1, 2, 4 or 8. */
    uint64_t (*read)(void *opaque, uint64_t off, unsigned size);
    void (*write)(void *opaque, uint64_t off, uint64_t val, unsigned size);
} IoRegionOps;

typedef struct IoBus IoBus;

/* Context: any thread, at setup */
IoBus *iobus_new(const char *name);
/* Context: any thread, at teardown */
void iobus_free(IoBus *bus);
/* Context: device lock held; fails (with @errp) on overlap or empty range */
bool iobus_add(IoBus *bus, uint64_t base, uint64_t len, const IoRegionOps *ops, void *opaque,
               GError **errp);
/* Context: device lock held; returns false if no region starts at @base */
bool iobus_remove(IoBus *bus, uint64_t base);
/* Context: vCPU thread, device lock held; false = unhandled (*val = all ones) */
bool iobus_read(IoBus *bus, uint64_t addr, unsigned size, uint64_t *val);
/* Context: vCPU thread, device lock held; false = unhandled (dropped) */
bool iobus_write(IoBus *bus, uint64_t addr, unsigned size, uint64_t val);
/* Context: any thread; number of regions (for tests and diagnostics) */
size_t iobus_count(const IoBus *bus);

#endif /* VBLK_IOBUS_H */
