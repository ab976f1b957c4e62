/*
 * The pop -> parse -> submit -> complete -> publish -> notify path allocates
 * nothing.
 *
 * This program is linked with -Wl,--wrap for malloc/calloc/realloc and the
 * glib allocators, so every call from our code (src/virtio, tests/driver,
 * this file) goes through the counters below. glib's own internal calls
 * are not seen, but the engine only reaches glib through these entry points.
 */
#include <stdlib.h>
#include <string.h>

#include "blkfix.h"

static volatile bool counting;
static volatile unsigned allocs;

#define WRAP(ret, name, params, args)                                                              \
    ret __real_##name params;                                                                      \
    ret __wrap_##name params;                                                                      \
    ret __wrap_##name params                                                                       \
    {                                                                                              \
        if (counting) {                                                                            \
            allocs++;                                                                              \
        }                                                                                          \
        return __real_##name args;                                                                 \
    }

WRAP(void *, malloc, (size_t n), (n))
WRAP(void *, calloc, (size_t n, size_t s), (n, s))
WRAP(void *, realloc, (void *p, size_t n), (p, n))
WRAP(gpointer, g_malloc, (gsize n), (n))
WRAP(gpointer, g_malloc0, (gsize n), (n))
WRAP(gpointer, g_malloc_n, (gsize n, gsize s), (n, s))
WRAP(gpointer, g_malloc0_n, (gsize n, gsize s), (n, s))
WRAP(gpointer, g_realloc, (gpointer p, gsize n), (p, n))
WRAP(gpointer, g_try_malloc, (gsize n), (n))

/* The counter itself must be able to fail the test. */
static void test_counter_works(void)
{
    void *p;

    counting = true;
    allocs = 0;
    p = g_malloc(16);
    counting = false;
    g_free(p);
    g_assert_cmpuint(allocs, ==, 1);
}

static void test_hot_path(void)
{
    BlkFix f;
    uint8_t w[4096];
    uint64_t mark;
    unsigned rounds = 20000;

    GuestNotifier gn;
    uint8_t isr = 0;

    blkfix_init(&f, NULL);
    gn = (GuestNotifier){.fd = testvq_call_fd(f.tvq), .isr = &isr};
    guest_notifier_set_nonblocking(&gn);
    memset(w, 0x5a, sizeof(w));
    mark = testdrv_alloc_mark(f.drv);
    counting = true;
    allocs = 0;
    for (unsigned i = 0; i < rounds; i++) {
        TestBlkReq a, b, c;
        uint16_t h;
        uint32_t l;

        testdrv_alloc_reset(f.drv, mark);
        a = testblk_submit(f.tvq, VIRTIO_BLK_T_OUT, i % 1000, w, sizeof(w), true);
        b = testblk_submit(f.tvq, VIRTIO_BLK_T_IN, i % 1000, NULL, sizeof(w), false);
        c = testblk_submit(f.tvq, VIRTIO_BLK_T_GET_ID, 0, NULL, 20, false);
        testvq_kick(f.tvq);
        /* The serving pair both request paths use, interrupt included. */
        virtio_blk_queue_process(f.q, NULL);
        virtio_blk_queue_notify(f.q, &gn);
        testvq_take_calls(f.tvq);
        while (testvq_get_used(f.tvq, &h, &l)) {
        }
        if (testblk_status(f.tvq, &a) | testblk_status(f.tvq, &b) | testblk_status(f.tvq, &c)) {
            break;
        }
    }
    counting = false;
    g_assert_cmpuint(allocs, ==, 0);
    g_assert_cmpuint(f.submits, ==, 2 * rounds);
    g_assert_cmphex(isr, ==, 1);
    blkfix_cleanup(&f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/noalloc/counter-works", test_counter_works);
    g_test_add_func("/noalloc/hot-path", test_hot_path);
    return g_test_run();
}
