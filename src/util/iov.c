/*
 * Scatter-gather list helpers (include/util/iov.h).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <string.h>

#include "util/iov.h"

static size_t min_size(size_t a, size_t b)
{
    return a < b ? a : b;
}

/* Context: any thread */
size_t iov_size(const struct iovec *iov, unsigned iov_cnt)
{
    size_t n = 0;

    for (unsigned i = 0; i < iov_cnt; i++) {
        n += iov[i].iov_len;
    }
    return n;
}

typedef enum IovOp { IOV_OP_FROM_BUF, IOV_OP_TO_BUF, IOV_OP_FILL } IovOp;

/*
 * The part of the list covered by [@offset, @offset + @bytes), piece by
 * piece: copied from or to @buf, or filled with @fillc. Inlined with a
 * constant @op, so each caller is a plain loop. Returns bytes covered.
 */
static inline size_t iov_walk(const struct iovec *iov, unsigned iov_cnt, size_t offset,
                              size_t bytes, IovOp op, char *buf, int fillc)
{
    size_t done = 0;

    for (unsigned i = 0; i < iov_cnt && done < bytes; i++) {
        char *base = iov[i].iov_base;
        size_t len = iov[i].iov_len;

        if (offset >= len) {
            offset -= len;
            continue;
        }
        len = min_size(len - offset, bytes - done);
        switch (op) {
        case IOV_OP_FROM_BUF:
            memcpy(base + offset, buf + done, len);
            break;
        case IOV_OP_TO_BUF:
            memcpy(buf + done, base + offset, len);
            break;
        case IOV_OP_FILL:
            memset(base + offset, fillc, len);
            break;
        }
        done += len;
        offset = 0;
    }
    return done;
}

/* Context: any thread */
size_t iov_from_buf(const struct iovec *iov, unsigned iov_cnt, size_t offset, const void *buf,
                    size_t bytes)
{
    return iov_walk(iov, iov_cnt, offset, bytes, IOV_OP_FROM_BUF, (char *)buf, 0);
}

/* Context: any thread */
size_t iov_to_buf(const struct iovec *iov, unsigned iov_cnt, size_t offset, void *buf, size_t bytes)
{
    return iov_walk(iov, iov_cnt, offset, bytes, IOV_OP_TO_BUF, buf, 0);
}

/* Context: any thread */
size_t iov_memset(const struct iovec *iov, unsigned iov_cnt, size_t offset, int fillc, size_t bytes)
{
    return iov_walk(iov, iov_cnt, offset, bytes, IOV_OP_FILL, NULL, fillc);
}

/* Context: any thread */
unsigned iov_copy(struct iovec *dst, unsigned dst_cnt, const struct iovec *iov, unsigned iov_cnt,
                  size_t offset, size_t bytes)
{
    unsigned n = 0;

    for (unsigned i = 0; i < iov_cnt && n < dst_cnt && bytes; i++) {
        size_t len = iov[i].iov_len;

        if (offset >= len) {
            offset -= len;
            continue;
        }
        len = min_size(len - offset, bytes);
        dst[n].iov_base = (char *)iov[i].iov_base + offset;
        dst[n++].iov_len = len;
        bytes -= len;
        offset = 0;
    }
    return n;
}

/* Context: any thread */
size_t iov_discard_front_undoable(struct iovec **iov, unsigned *iov_cnt, size_t bytes,
                                  IOVDiscardUndo *undo)
{
    size_t done = 0;

    if (undo) {
        undo->modified = NULL;
    }
    while (*iov_cnt && bytes - done >= (*iov)->iov_len) {
        done += (*iov)->iov_len;
        (*iov)++;
        (*iov_cnt)--;
    }
    if (*iov_cnt && bytes > done) {
        size_t cut = bytes - done;

        if (undo) {
            undo->modified = *iov;
            undo->orig = **iov;
        }
        (*iov)->iov_base = (char *)(*iov)->iov_base + cut;
        (*iov)->iov_len -= cut;
        done = bytes;
    }
    return done;
}

/* Context: any thread */
size_t iov_discard_front(struct iovec **iov, unsigned *iov_cnt, size_t bytes)
{
    return iov_discard_front_undoable(iov, iov_cnt, bytes, NULL);
}

/* Context: any thread */
void iov_discard_undo(IOVDiscardUndo *undo)
{
    if (undo->modified) {
        *undo->modified = undo->orig;
        undo->modified = NULL;
    }
}
