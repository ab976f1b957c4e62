/*
 * The "file" and "host_device" protocol drivers: open the host file or block
 * device with the cache mode's flags, find the O_DIRECT alignment rules,
 * size and resize. The request paths are in file-io.c.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "file-int.h"

static bool parse_aio(const char *v, FileAio *out)
{
    if (!v || !strcmp(v, "threads")) {
        *out = FILE_AIO_THREADS;
    } else if (!strcmp(v, "native")) {
        *out = FILE_AIO_NATIVE;
    } else if (!strcmp(v, "io_uring")) {
        *out = FILE_AIO_IO_URING;
    } else {
        return false;
    }
    return true;
}

/* Try an O_DIRECT read of @len bytes at 0 into an aligned buffer. */
static bool probe_read(int fd, size_t len)
{
    void *buf = NULL;
    bool ok;

    if (posix_memalign(&buf, 4096, 4096) != 0) {
        return false;
    }
    ok = pread(fd, buf, len, 0) >= 0;
    free(buf);
    return ok;
}

/*
 * O_DIRECT rules: request alignment from the logical block size (block
 * devices) or statx's DIO offset alignment, else the smallest size a probe
 * read accepts (QEMU probes the same way), else 4096 to be safe. Memory:
 * statx's DIO memory alignment, else 4096; bounce buffers are allocated with
 * at least 4096 (page) alignment either way.
 */
static void probe_alignment(BlockNode *bs, FileState *s)
{
    uint32_t req = 0, mem = 0;

    if (!bs->direct) {
        return;
    }
    if (s->is_blockdev) {
        int lbs = 0;

        if (ioctl(s->fd, BLKSSZGET, &lbs) == 0 && lbs > 0) {
            req = (uint32_t)lbs;
        }
    }
#ifdef STATX_DIOALIGN
    {
        struct statx stx;

        if (statx(s->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &stx) == 0 &&
            (stx.stx_mask & STATX_DIOALIGN) && stx.stx_dio_offset_align) {
            req = MAX(req, stx.stx_dio_offset_align);
            mem = stx.stx_dio_mem_align;
        }
    }
#endif
    if (!req) {
        for (size_t len = 512; len <= 4096 && !req; len *= 2) {
            if (probe_read(s->fd, len)) {
                req = (uint32_t)len;
            }
        }
    }
    bs->request_alignment = req && !(req & (req - 1)) ? req : 4096;
    bs->min_mem_align = mem && !(mem & (mem - 1)) ? mem : 4096;
    bs->opt_mem_align = MAX(4096u, bs->min_mem_align);
}

static bool file_open_fd(BlockNode *bs, FileState *s, bool want_blockdev, GError **errp)
{
    int flags = (bs->read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | (bs->direct ? O_DIRECT : 0);
    struct stat st;

    s->fd = open(s->filename, flags);
    if (s->fd < 0) {
        g_set_error(errp, BLOCK_ERROR, errno, "Could not open '%s': %s", s->filename,
                    g_strerror(errno));
        return false;
    }
    if (fstat(s->fd, &st) < 0) {
        g_set_error(errp, BLOCK_ERROR, errno, "Could not stat '%s': %s", s->filename,
                    g_strerror(errno));
        return false;
    }
    s->is_blockdev = S_ISBLK(st.st_mode);
    if (want_blockdev && !s->is_blockdev) {
        g_set_error(errp, BLOCK_ERROR, EINVAL,
                    "'host_device' driver requires '%s' to be either a character or block "
                    "device",
                    s->filename);
        return false;
    }
    if (!want_blockdev && !s->is_blockdev && !S_ISREG(st.st_mode)) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "'file' driver requires '%s' to be a regular file",
                    s->filename);
        return false;
    }
    return true;
}

static bool file_open_common(BlockNode *bs, BlockOpts *opts, bool want_blockdev, GError **errp)
{
    FileState *s = g_new0(FileState, 1);
    const char *fn = block_opts_get(opts, "filename");
    const char *aio = block_opts_get(opts, "aio");
    const char *locking = block_opts_get(opts, "locking");

    s->bs = bs;
    s->fd = -1;
    bs->opaque = s;
    if (!fn) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'filename' is missing");
        goto fail;
    }
    s->filename = g_strdup(fn);
    if (!parse_aio(aio, &s->aio)) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'aio' does not accept value '%s'", aio);
        goto fail;
    }
    if (locking && strcmp(locking, "on") && strcmp(locking, "off") && strcmp(locking, "auto")) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter 'locking' does not accept value '%s'",
                    locking);
        goto fail;
    }
    if (s->aio == FILE_AIO_NATIVE && !bs->direct) {
        g_set_error(errp, BLOCK_ERROR, EINVAL,
                    "aio=native was specified, but it requires cache.direct=on, which was "
                    "not specified.");
        goto fail;
    }
    if (!file_open_fd(bs, s, want_blockdev, errp)) {
        goto fail;
    }
    probe_alignment(bs, s);
    if (!file_io_init(bs, errp)) {
        goto fail;
    }
    return true;

fail:
    if (s->fd >= 0) {
        close(s->fd);
    }
    g_free(s->filename);
    g_free(s);
    bs->opaque = NULL;
    return false;
}

static bool file_open(BlockNode *bs, BlockOpts *opts, GError **errp)
{
    return file_open_common(bs, opts, false, errp);
}

static bool host_device_open(BlockNode *bs, BlockOpts *opts, GError **errp)
{
    return file_open_common(bs, opts, true, errp);
}

static void file_close(BlockNode *bs)
{
    FileState *s = bs->opaque;

    if (!s) {
        return;
    }
    file_io_cleanup(bs);
    close(s->fd);
    g_free(s->filename);
    g_free(s);
    bs->opaque = NULL;
}

static int64_t file_getlength(BlockNode *bs)
{
    FileState *s = bs->opaque;
    struct stat st;

    if (s->is_blockdev) {
        uint64_t size;

        return ioctl(s->fd, BLKGETSIZE64, &size) < 0 ? -errno : (int64_t)size;
    }
    return fstat(s->fd, &st) < 0 ? -errno : (int64_t)st.st_size;
}

static bool file_truncate(BlockNode *bs, uint64_t size, GError **errp)
{
    FileState *s = bs->opaque;
    int64_t cur = file_getlength(bs);

    if (s->is_blockdev) {
        if (cur >= 0 && (uint64_t)cur == size) {
            return true;
        }
        g_set_error(errp, BLOCK_ERROR, ENOTSUP,
                    "Cannot grow device files"); /* a block device's size is fixed */
        return false;
    }
    if (size > INT64_MAX || ftruncate(s->fd, (off_t)size) < 0) {
        int err = size > INT64_MAX ? EFBIG : errno;

        g_set_error(errp, BLOCK_ERROR, err, "Failed to resize '%s': %s", s->filename,
                    g_strerror(err));
        return false;
    }
    return true;
}

static unsigned file_inflight(BlockNode *bs)
{
    FileState *s = bs->opaque;

    return s->inflight + s->io.inflight;
}

/* Context: loop thread */
const char *blk_file_node_filename(BlockNode *bs)
{
    return bs->drv == &bdrv_file || bs->drv == &bdrv_host_device
               ? ((FileState *)bs->opaque)->filename
               : NULL;
}

/* Context: loop thread */
bool blk_file_node_host_info(BlockNode *bs, BlockHostInfo *info)
{
    static const char *const aio[] = {"threads", "native", "io_uring"};
    const FileState *s = bs->opaque;

    if (bs->drv != &bdrv_file && bs->drv != &bdrv_host_device) {
        return false;
    }
    info->filename = s->filename;
    info->direct = bs->direct;
    info->aio = aio[s->aio];
    return true;
}

const BlockDriver bdrv_file = {
    .name = "file",
    .open = file_open,
    .close = file_close,
    .submit = file_io_submit,
    .getlength = file_getlength,
    .truncate = file_truncate,
    .attach_loop = file_io_attach,
    .detach_loop = file_io_detach,
    .inflight = file_inflight,
};

const BlockDriver bdrv_host_device = {
    .name = "host_device",
    .open = host_device_open,
    .close = file_close,
    .submit = file_io_submit,
    .getlength = file_getlength,
    .truncate = file_truncate,
    .attach_loop = file_io_attach,
    .detach_loop = file_io_detach,
    .inflight = file_inflight,
};
