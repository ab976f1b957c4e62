/*
 * vblk: address-range dispatch for port I/O and MMIO exits.
 *
 * Regions are kept sorted by base in a plain array: a machine has a dozen of
 * them, and a binary search over a dozen entries beats anything fancier.
 */
#include "vmm/iobus.h"
#include "vmm/vmm.h"

#include <errno.h>
#include <string.h>

typedef struct IoRegion {
    uint64_t base;
    uint64_t len;
    const IoRegionOps *ops;
    void *opaque;
} IoRegion;

struct IoBus {
    char *name;
    IoRegion *regions;
    size_t n;
    size_t cap;
};

/* Context: any thread, at setup */
IoBus *iobus_new(const char *name)
{
    IoBus *bus = g_new0(IoBus, 1);

    bus->name = g_strdup(name);
    return bus;
}

/* Context: any thread, at teardown */
void iobus_free(IoBus *bus)
{
    if (!bus) {
        return;
    }
    g_free(bus->regions);
    g_free(bus->name);
    g_free(bus);
}

/* Index of the first region whose base is > addr. */
static size_t iobus_upper(const IoBus *bus, uint64_t addr)
{
    size_t lo = 0, hi = bus->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (bus->regions[mid].base <= addr) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    return lo;
}

static IoRegion *iobus_find(IoBus *bus, uint64_t addr)
{
    size_t i = iobus_upper(bus, addr);
    IoRegion *r;

    if (i == 0) {
        return NULL;
    }
    r = &bus->regions[i - 1];
    return addr - r->base < r->len ? r : NULL;
}

/* Context: device lock held */
bool iobus_add(IoBus *bus, uint64_t base, uint64_t len, const IoRegionOps *ops, void *opaque,
               GError **errp)
{
    size_t i;

    if (len == 0 || base + len - 1 < base) {
        g_set_error(errp, VMM_ERROR, EINVAL,
                    "%s: bad region 0x%" G_GINT64_MODIFIER "x+0x%" G_GINT64_MODIFIER "x", bus->name,
                    base, len);
        return false;
    }
    i = iobus_upper(bus, base);
    if ((i > 0 && base - bus->regions[i - 1].base < bus->regions[i - 1].len) ||
        (i < bus->n && bus->regions[i].base - base < len)) {
        g_set_error(errp, VMM_ERROR, EBUSY,
                    "%s: region 0x%" G_GINT64_MODIFIER "x+0x%" G_GINT64_MODIFIER
                    "x overlaps an existing one",
                    bus->name, base, len);
        return false;
    }
    if (bus->n == bus->cap) {
        bus->cap = bus->cap ? bus->cap * 2 : 16;
        bus->regions = g_renew(IoRegion, bus->regions, bus->cap);
    }
    memmove(&bus->regions[i + 1], &bus->regions[i], (bus->n - i) * sizeof(IoRegion));
    bus->regions[i] = (IoRegion){.base = base, .len = len, .ops = ops, .opaque = opaque};
    bus->n++;
    return true;
}

/* Context: device lock held */
bool iobus_remove(IoBus *bus, uint64_t base)
{
    size_t i = iobus_upper(bus, base);

    if (i == 0 || bus->regions[i - 1].base != base) {
        return false;
    }
    i--;
    memmove(&bus->regions[i], &bus->regions[i + 1], (bus->n - i - 1) * sizeof(IoRegion));
    bus->n--;
    return true;
}

/* Context: vCPU thread, device lock held */
bool iobus_read(IoBus *bus, uint64_t addr, unsigned size, uint64_t *val)
{
    IoRegion *r = iobus_find(bus, addr);

    if (!r || !r->ops->read) {
        *val = size >= 8 ? UINT64_MAX : (1ULL << (size * 8)) - 1;
        return r != NULL;
    }
    *val = r->ops->read(r->opaque, addr - r->base, size);
    return true;
}

/* Context: vCPU thread, device lock held */
bool iobus_write(IoBus *bus, uint64_t addr, unsigned size, uint64_t val)
{
    IoRegion *r = iobus_find(bus, addr);

    if (!r) {
        return false;
    }
    if (r->ops->write) {
        r->ops->write(r->opaque, addr - r->base, val, size);
    }
    return true;
}

/* Context: any thread */
size_t iobus_count(const IoBus *bus)
{
    return bus->n;
}
