/*
 * Scatter-gather lists (struct iovec arrays): sizes, copies to and from flat
 * buffers, filling, slicing and trimming the front. Names follow QEMU's
 * iov.h. No allocation, no locks: safe on every hot path.
 *
 * @offset is a byte position inside the list; @bytes may be SIZE_MAX for
 * "to the end". Every function stops at the end of the list and returns the
 * bytes it covered, so a short return means the list was shorter.
 *
 * Context: any thread (the caller owns the iovecs and the buffers).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_UTIL_IOV_H
#define VBLK_UTIL_IOV_H

#include <stdbool.h>
#include <stddef.h>
#include <sys/uio.h>

/* Total length of the list. */
size_t iov_size(const struct iovec *iov, unsigned iov_cnt);
/* Copy up to @bytes from @buf into the list at @offset; returns bytes copied. */
size_t iov_from_buf(const struct iovec *iov, unsigned iov_cnt, size_t offset, const void *buf,
                    size_t bytes);
/* Copy up to @bytes of the list at @offset into @buf; returns bytes copied. */
size_t iov_to_buf(const struct iovec *iov, unsigned iov_cnt, size_t offset, void *buf,
                  size_t bytes);
/* Fill up to @bytes of the list at @offset with @fillc; returns bytes filled. */
size_t iov_memset(const struct iovec *iov, unsigned iov_cnt, size_t offset, int fillc,
                  size_t bytes);
/*
 * Describe the slice [@offset, @offset + @bytes) of @iov in @dst (at most
 * @dst_cnt entries; no data is copied). Returns the entries used; the slice
 * is cut short when @dst is full.
 */
unsigned iov_copy(struct iovec *dst, unsigned dst_cnt, const struct iovec *iov, unsigned iov_cnt,
                  size_t offset, size_t bytes);

/* The one entry a front discard trimmed (@modified NULL if none), to put it back. */
typedef struct IOVDiscardUndo {
    struct iovec *modified;
    struct iovec orig;
} IOVDiscardUndo;

/*
 * Drop @bytes from the front: *@iov and *@iov_cnt move past whole entries and
 * the first remaining entry is trimmed in place. Returns the bytes dropped
 * (less than @bytes only when the list ran out).
 */
size_t iov_discard_front(struct iovec **iov, unsigned *iov_cnt, size_t bytes);
/* As iov_discard_front(), recording in @undo the entry it trimmed in place. */
size_t iov_discard_front_undoable(struct iovec **iov, unsigned *iov_cnt, size_t bytes,
                                  IOVDiscardUndo *undo);
/* Put the trimmed entry back as it was; then @undo records nothing. */
void iov_discard_undo(IOVDiscardUndo *undo);

#endif /* VBLK_UTIL_IOV_H */
