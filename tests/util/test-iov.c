/*
 * src/util/iov.c: sizes, copies, fills, slices and front discards over
 * uneven scatter-gather lists, including the ends and short lists.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <glib.h>
#include <stdint.h>
#include <string.h>

#include "util/iov.h"

/* Three uneven pieces of one 16-byte backing store: [0,3) [3,3) [3,10) [10,16). */
typedef struct Fix {
    uint8_t mem[16];
    struct iovec iov[4];
} Fix;

static void fix_init(Fix *f)
{
    for (unsigned i = 0; i < sizeof(f->mem); i++) {
        f->mem[i] = (uint8_t)i;
    }
    f->iov[0] = (struct iovec){f->mem, 3};
    f->iov[1] = (struct iovec){f->mem + 3, 0}; /* an empty entry is legal */
    f->iov[2] = (struct iovec){f->mem + 3, 7};
    f->iov[3] = (struct iovec){f->mem + 10, 6};
}

static void test_size(void)
{
    Fix f;

    fix_init(&f);
    g_assert_cmpuint(iov_size(f.iov, 4), ==, 16);
    g_assert_cmpuint(iov_size(f.iov, 2), ==, 3);
    g_assert_cmpuint(iov_size(f.iov, 0), ==, 0);
}

static void test_to_buf(void)
{
    uint8_t buf[32];
    Fix f;

    fix_init(&f);
    /* Every (offset, length) pair, across entry boundaries. */
    for (size_t off = 0; off <= 16; off++) {
        for (size_t len = 0; len <= 20; len++) {
            size_t want = off + len > 16 ? 16 - off : len;

            memset(buf, 0xee, sizeof(buf));
            g_assert_cmpuint(iov_to_buf(f.iov, 4, off, buf, len), ==, want);
            for (size_t i = 0; i < want; i++) {
                g_assert_cmpuint(buf[i], ==, off + i);
            }
            g_assert_cmpuint(buf[want], ==, 0xee); /* nothing past the copy */
        }
    }
    /* Offset past the end, SIZE_MAX for "the rest". */
    g_assert_cmpuint(iov_to_buf(f.iov, 4, 17, buf, 4), ==, 0);
    g_assert_cmpuint(iov_to_buf(f.iov, 4, 5, buf, SIZE_MAX), ==, 11);
    g_assert_cmpuint(buf[0], ==, 5);
    g_assert_cmpuint(buf[10], ==, 15);
}

static void test_from_buf(void)
{
    uint8_t src[20];
    Fix f;

    for (unsigned i = 0; i < sizeof(src); i++) {
        src[i] = (uint8_t)(100 + i);
    }
    for (size_t off = 0; off <= 16; off++) {
        for (size_t len = 0; len <= 20; len++) {
            size_t want = off + len > 16 ? 16 - off : len;

            fix_init(&f);
            g_assert_cmpuint(iov_from_buf(f.iov, 4, off, src, len), ==, want);
            for (size_t i = 0; i < 16; i++) {
                bool inside = i >= off && i < off + want;

                g_assert_cmpuint(f.mem[i], ==, inside ? 100 + (i - off) : i);
            }
        }
    }
}

static void test_memset(void)
{
    Fix f;

    fix_init(&f);
    g_assert_cmpuint(iov_memset(f.iov, 4, 2, 0xab, 9), ==, 9);
    for (size_t i = 0; i < 16; i++) {
        g_assert_cmpuint(f.mem[i], ==, i >= 2 && i < 11 ? 0xab : i);
    }
    /* To the end, and clipped at the end. */
    g_assert_cmpuint(iov_memset(f.iov, 4, 12, 0, SIZE_MAX), ==, 4);
    g_assert_cmpuint(iov_memset(f.iov, 4, 14, 0x11, 100), ==, 2);
    g_assert_cmpuint(f.mem[12], ==, 0);
    g_assert_cmpuint(f.mem[13], ==, 0);
    g_assert_cmpuint(f.mem[14], ==, 0x11);
    g_assert_cmpuint(f.mem[15], ==, 0x11);
    g_assert_cmpuint(f.mem[11], ==, 11);
}

static void test_copy(void)
{
    struct iovec dst[4];
    unsigned n;
    Fix f;

    fix_init(&f);
    /* [2, 12): tail of entry 0, all of entry 2, head of entry 3; the empty entry is skipped. */
    n = iov_copy(dst, 4, f.iov, 4, 2, 10);
    g_assert_cmpuint(n, ==, 3);
    g_assert_true(dst[0].iov_base == f.mem + 2 && dst[0].iov_len == 1);
    g_assert_true(dst[1].iov_base == f.mem + 3 && dst[1].iov_len == 7);
    g_assert_true(dst[2].iov_base == f.mem + 10 && dst[2].iov_len == 2);
    /* The rest from 5, and a destination that is too small. */
    n = iov_copy(dst, 4, f.iov, 4, 5, SIZE_MAX);
    g_assert_cmpuint(n, ==, 2);
    g_assert_cmpuint(iov_size(dst, n), ==, 11);
    n = iov_copy(dst, 1, f.iov, 4, 0, SIZE_MAX);
    g_assert_cmpuint(n, ==, 1);
    g_assert_cmpuint(dst[0].iov_len, ==, 3);
    /* Nothing left. */
    g_assert_cmpuint(iov_copy(dst, 4, f.iov, 4, 16, 5), ==, 0);
    g_assert_cmpuint(iov_copy(dst, 4, f.iov, 4, 0, 0), ==, 0);
    /* The source is untouched. */
    g_assert_cmpuint(iov_size(f.iov, 4), ==, 16);
}

static void test_discard_front(void)
{
    struct iovec *v;
    unsigned cnt;
    Fix f;

    /* Exactly the first entry: the pointer moves past it and the empty one after it. */
    fix_init(&f);
    v = f.iov;
    cnt = 4;
    g_assert_cmpuint(iov_discard_front(&v, &cnt, 3), ==, 3);
    g_assert_true(v == &f.iov[2]); /* the empty entry counts as consumed too */
    g_assert_cmpuint(cnt, ==, 2);
    /* Into the middle of an entry: trimmed in place. */
    g_assert_cmpuint(iov_discard_front(&v, &cnt, 4), ==, 4);
    g_assert_true(v == &f.iov[2] && cnt == 2);
    g_assert_true(v->iov_base == f.mem + 7 && v->iov_len == 3);
    g_assert_cmpuint(iov_size(v, cnt), ==, 9);
    /* More than is left: everything, and the short count says so. */
    g_assert_cmpuint(iov_discard_front(&v, &cnt, 100), ==, 9);
    g_assert_cmpuint(cnt, ==, 0);
    g_assert_cmpuint(iov_discard_front(&v, &cnt, 1), ==, 0);
}

static void test_discard_undo(void)
{
    IOVDiscardUndo u;
    struct iovec *v;
    unsigned cnt;
    Fix f;

    fix_init(&f);
    v = f.iov;
    cnt = 4;
    /* Whole entries only: nothing trimmed, nothing to undo. */
    g_assert_cmpuint(iov_discard_front_undoable(&v, &cnt, 3, &u), ==, 3);
    g_assert_null(u.modified);
    /* A trim records the entry's original value, and undo restores it. */
    g_assert_cmpuint(iov_discard_front_undoable(&v, &cnt, 5, &u), ==, 5);
    g_assert_true(u.modified == &f.iov[2]);
    g_assert_true(f.iov[2].iov_base == f.mem + 8 && f.iov[2].iov_len == 2);
    iov_discard_undo(&u);
    g_assert_true(f.iov[2].iov_base == f.mem + 3 && f.iov[2].iov_len == 7);
    g_assert_null(u.modified);
    iov_discard_undo(&u); /* a second undo does nothing */
    g_assert_true(f.iov[2].iov_base == f.mem + 3 && f.iov[2].iov_len == 7);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/util/iov/size", test_size);
    g_test_add_func("/util/iov/to-buf", test_to_buf);
    g_test_add_func("/util/iov/from-buf", test_from_buf);
    g_test_add_func("/util/iov/memset", test_memset);
    g_test_add_func("/util/iov/copy", test_copy);
    g_test_add_func("/util/iov/discard-front", test_discard_front);
    g_test_add_func("/util/iov/discard-undo", test_discard_undo);
    return g_test_run();
}
