/*
 * Guest physical memory map: sorted, immutable region table with binary
 * search. All range arithmetic is written so that it cannot overflow:
 * "end" values are never formed from guest input; instead we compare
 * lengths against the room left in a region.
 */
#include <errno.h>
#include <string.h>

#include "virtio/guestmem.h"

/* Context: any thread */
GQuark virtio_error_quark(void)
{
    return g_quark_from_static_string("vblk-virtio-error");
}

struct GuestMem {
    size_t n;
    GuestMemRegion r[]; /* sorted by gpa, non-overlapping */
};

static int region_cmp(const void *a, const void *b)
{
    const GuestMemRegion *ra = a, *rb = b;

    return ra->gpa < rb->gpa ? -1 : ra->gpa > rb->gpa;
}

/* Context: any thread (control path) */
GuestMem *guestmem_new(const GuestMemRegion *regions, size_t n, GError **errp)
{
    GuestMem *gm;

    if (n == 0 || n > 1024) {
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                    "guest memory needs 1..1024 regions, got %zu", n);
        return NULL;
    }
    gm = g_malloc0(sizeof(*gm) + n * sizeof(gm->r[0]));
    gm->n = n;
    memcpy(gm->r, regions, n * sizeof(gm->r[0]));
    qsort(gm->r, n, sizeof(gm->r[0]), region_cmp);

    for (size_t i = 0; i < n; i++) {
        const GuestMemRegion *r = &gm->r[i];

        if (r->size == 0 || !r->hva) {
            g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                        "guest memory region at 0x%" PRIx64 " is empty or unmapped", r->gpa);
            goto fail;
        }
        /* The last byte, gpa + size - 1, must not wrap. */
        if (r->size - 1 > UINT64_MAX - r->gpa) {
            g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                        "guest memory region at 0x%" PRIx64 " wraps past 2^64", r->gpa);
            goto fail;
        }
        if (i > 0 && r->gpa - gm->r[i - 1].gpa < gm->r[i - 1].size) {
            g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID,
                        "guest memory regions at 0x%" PRIx64 " and 0x%" PRIx64 " overlap",
                        gm->r[i - 1].gpa, r->gpa);
            goto fail;
        }
    }
    return gm;

fail:
    g_free(gm);
    return NULL;
}

/* Context: any thread; no translation may be running concurrently */
void guestmem_free(GuestMem *gm)
{
    g_free(gm);
}

/* Region containing @gpa, or NULL. */
static const GuestMemRegion *guestmem_find(const GuestMem *gm, uint64_t gpa)
{
    size_t lo = 0, hi = gm->n;

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const GuestMemRegion *r = &gm->r[mid];

        if (gpa < r->gpa) {
            hi = mid;
        } else if (gpa - r->gpa >= r->size) {
            lo = mid + 1;
        } else {
            return r;
        }
    }
    return NULL;
}

/* Context: any thread */
int guestmem_map(const GuestMem *gm, uint64_t gpa, uint64_t len, bool write, struct iovec *iov,
                 unsigned max_iov)
{
    unsigned n = 0;

    /* Reject wrap-around up front: [gpa, gpa + len) must be representable. */
    if (len > 0 && len - 1 > UINT64_MAX - gpa) {
        return -EFAULT;
    }
    while (len > 0) {
        const GuestMemRegion *r = guestmem_find(gm, gpa);
        uint64_t off, chunk;

        if (!r || (write && r->readonly)) {
            return -EFAULT;
        }
        if (n == max_iov) {
            return -ENOBUFS;
        }
        off = gpa - r->gpa;
        chunk = MIN(len, r->size - off);
        /* An iovec length is size_t; on 64-bit hosts this is a no-op. */
        iov[n].iov_base = (uint8_t *)r->hva + off;
        iov[n].iov_len = chunk;
        n++;
        gpa += chunk;
        len -= chunk;
    }
    return (int)n;
}

/* Context: any thread */
void *guestmem_ptr(const GuestMem *gm, uint64_t gpa, uint64_t len)
{
    const GuestMemRegion *r = guestmem_find(gm, gpa);
    uint64_t off;

    if (!r) {
        return NULL;
    }
    off = gpa - r->gpa;
    if (MAX(len, 1) > r->size - off) {
        return NULL;
    }
    return (uint8_t *)r->hva + off;
}

/* Context: any thread */
size_t guestmem_num_regions(const GuestMem *gm)
{
    return gm->n;
}

/* Context: any thread */
const GuestMemRegion *guestmem_region(const GuestMem *gm, size_t i)
{
    return i < gm->n ? &gm->r[i] : NULL;
}
