/* Unit tests: guest memory table. */
#include <errno.h>

#include "virtio/guestmem.h"

static uint8_t ram_a[0x4000], ram_b[0x2000], ram_c[0x1000];

static GuestMem *three_regions(void)
{
    /* Given out of order: a=[0x10000,+0x4000) b=[0x14000,+0x2000) adjacent, c after a hole. */
    GuestMemRegion r[] = {
        {.gpa = 0x20000, .size = sizeof(ram_c), .hva = ram_c},
        {.gpa = 0x10000, .size = sizeof(ram_a), .hva = ram_a},
        {.gpa = 0x14000, .size = sizeof(ram_b), .hva = ram_b, .readonly = false},
    };
    GError *err = NULL;
    GuestMem *gm = guestmem_new(r, 3, &err);

    g_assert_no_error(err);
    return gm;
}

static void test_sorted_lookup(void)
{
    GuestMem *gm = three_regions();

    g_assert_cmpuint(guestmem_num_regions(gm), ==, 3);
    g_assert_cmphex(guestmem_region(gm, 0)->gpa, ==, 0x10000);
    g_assert_cmphex(guestmem_region(gm, 2)->gpa, ==, 0x20000);
    g_assert_null(guestmem_region(gm, 3));
    g_assert(guestmem_ptr(gm, 0x10000, 16) == ram_a);
    g_assert(guestmem_ptr(gm, 0x14010, 16) == ram_b + 0x10);
    g_assert(guestmem_ptr(gm, 0x20fff, 1) == ram_c + 0xfff);
    g_assert_null(guestmem_ptr(gm, 0x20fff, 2));  /* past the end */
    g_assert_null(guestmem_ptr(gm, 0x13ff8, 16)); /* crosses a->b: not one region */
    g_assert_null(guestmem_ptr(gm, 0x16000, 1));  /* hole */
    g_assert_null(guestmem_ptr(gm, 0xffff, 1));   /* below */
    g_assert_null(guestmem_ptr(gm, UINT64_MAX, 1));
    guestmem_free(gm);
}

static void test_map_split(void)
{
    GuestMem *gm = three_regions();
    struct iovec iov[4];

    /* Crossing adjacent regions a->b: two iovecs. */
    g_assert_cmpint(guestmem_map(gm, 0x13ff0, 0x20, false, iov, 4), ==, 2);
    g_assert(iov[0].iov_base == ram_a + 0x3ff0 && iov[0].iov_len == 0x10);
    g_assert(iov[1].iov_base == ram_b && iov[1].iov_len == 0x10);
    /* Whole a+b. */
    g_assert_cmpint(guestmem_map(gm, 0x10000, 0x6000, true, iov, 4), ==, 2);
    /* Into the hole after b: not RAM. */
    g_assert_cmpint(guestmem_map(gm, 0x15ff0, 0x20, false, iov, 4), ==, -EFAULT);
    /* iovecs exhausted. */
    g_assert_cmpint(guestmem_map(gm, 0x13ff0, 0x20, false, iov, 1), ==, -ENOBUFS);
    /* Zero length: no iovec, even outside RAM. */
    g_assert_cmpint(guestmem_map(gm, 0x10000, 0, false, iov, 4), ==, 0);
    /* Wrap-around and huge lengths. */
    g_assert_cmpint(guestmem_map(gm, 0x10000, UINT64_MAX, false, iov, 4), ==, -EFAULT);
    g_assert_cmpint(guestmem_map(gm, UINT64_MAX, 2, false, iov, 4), ==, -EFAULT);
    g_assert_cmpint(guestmem_map(gm, 0x20000, 0x1001, false, iov, 4), ==, -EFAULT);
    g_assert_cmpint(guestmem_map(gm, 0x20000, 0x1000, false, iov, 4), ==, 1);
    guestmem_free(gm);
}

static void test_readonly(void)
{
    GuestMemRegion r[] = {{.gpa = 0, .size = sizeof(ram_c), .hva = ram_c, .readonly = true}};
    GuestMem *gm = guestmem_new(r, 1, NULL);
    struct iovec iov;

    g_assert_cmpint(guestmem_map(gm, 0, 16, false, &iov, 1), ==, 1);
    g_assert_cmpint(guestmem_map(gm, 0, 16, true, &iov, 1), ==, -EFAULT);
    guestmem_free(gm);
}

static void expect_reject(const GuestMemRegion *r, size_t n)
{
    GError *err = NULL;

    g_assert_null(guestmem_new(r, n, &err));
    g_assert_error(err, VIRTIO_ERROR, VIRTIO_ERROR_INVALID);
    g_error_free(err);
}

static void test_reject(void)
{
    GuestMemRegion overlap[] = {{.gpa = 0x1000, .size = 0x2000, .hva = ram_a},
                                {.gpa = 0x2fff, .size = 0x10, .hva = ram_b}};
    GuestMemRegion empty[] = {{.gpa = 0x1000, .size = 0, .hva = ram_a}};
    GuestMemRegion nohva[] = {{.gpa = 0x1000, .size = 0x10, .hva = NULL}};
    GuestMemRegion wrap[] = {{.gpa = UINT64_MAX - 0xf, .size = 0x11, .hva = ram_a}};
    GuestMemRegion top[] = {{.gpa = UINT64_MAX - 0xf, .size = 0x10, .hva = ram_a}};
    GuestMem *gm;
    struct iovec iov;

    expect_reject(overlap, 2);
    expect_reject(empty, 1);
    expect_reject(nohva, 1);
    expect_reject(wrap, 1);
    expect_reject(overlap, 0);
    /* A region ending exactly at 2^64 is fine and maps without overflow. */
    gm = guestmem_new(top, 1, NULL);
    g_assert_nonnull(gm);
    g_assert_cmpint(guestmem_map(gm, UINT64_MAX - 0xf, 0x10, false, &iov, 1), ==, 1);
    g_assert_cmpint(guestmem_map(gm, UINT64_MAX - 0xf, 0x11, false, &iov, 1), ==, -EFAULT);
    g_assert_nonnull(guestmem_ptr(gm, UINT64_MAX, 1));
    guestmem_free(gm);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/guestmem/sorted-lookup", test_sorted_lookup);
    g_test_add_func("/guestmem/map-split", test_map_split);
    g_test_add_func("/guestmem/readonly", test_readonly);
    g_test_add_func("/guestmem/reject", test_reject);
    return g_test_run();
}
