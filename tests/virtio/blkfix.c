/* Shared virtio-blk test fixture (see blkfix.h). */
#include <errno.h>
#include <string.h>
#include <linux/virtio_config.h>

#include "blkfix.h"

/* Reads/writes the in-memory disk; never allocates (used by the no-alloc test). */
static int mem_execute(BlkFix *f, VirtIOBlkReq *req)
{
    uint64_t off = req->offset;

    g_assert(req->offset <= f->disk_size && req->len <= f->disk_size - req->offset);
    switch (req->op) {
    case VIRTIO_BLK_OP_READ:
    case VIRTIO_BLK_OP_WRITE:
        for (unsigned i = 0; i < req->niov; i++) {
            if (req->op == VIRTIO_BLK_OP_READ) {
                memcpy(req->iov[i].iov_base, f->disk + off, req->iov[i].iov_len);
            } else {
                memcpy(f->disk + off, req->iov[i].iov_base, req->iov[i].iov_len);
            }
            off += req->iov[i].iov_len;
        }
        g_assert_cmpuint(off - req->offset, ==, req->len);
        return 0;
    case VIRTIO_BLK_OP_FLUSH:
        f->flushes++;
        return 0;
    case VIRTIO_BLK_OP_DISCARD:
    case VIRTIO_BLK_OP_WRITE_ZEROES:
        memset(f->disk + off, 0, req->len);
        return 0;
    }
    return -EINVAL;
}

static void mem_submit(void *opaque, VirtIOBlkReq *req)
{
    BlkFix *f = opaque;

    f->submits++;
    f->last_op = req->op;
    f->last_offset = req->offset;
    f->last_len = req->len;
    f->last_unmap = req->unmap;
    g_assert_cmpuint(req->idx, <, virtqueue_num(f->vq));
    if (f->defer) {
        g_assert(f->ndeferred < G_N_ELEMENTS(f->deferred));
        f->deferred[f->ndeferred++] = req;
        return;
    }
    virtio_blk_req_complete(req, mem_execute(f, req));
}

static void mem_batch_end(void *opaque)
{
    BlkFix *f = opaque;

    f->batch_ends++;
}

static const VirtIOBlkExecOps mem_ops = {.submit = mem_submit, .batch_end = mem_batch_end};

static void on_broken(void *opaque, VirtQueue *vq, const char *reason)
{
    BlkFix *f = opaque;

    g_assert(reason && *reason);
    f->broken_calls++;
}

void blkfix_default_conf(VirtIOBlkConf *conf)
{
    virtio_blk_conf_init(conf, BLKFIX_SECTORS);
    conf->queue_size = 16;
    g_assert(virtio_blk_conf_set_property(conf, "serial", "vblk-test-serial", NULL));
}

void blkfix_init(BlkFix *f, const BlkFixOpts *o)
{
    BlkFixOpts opts = o ? *o : (BlkFixOpts){0};
    TestDrvOpts dopts = {.nregions = opts.nregions, .adjacent = opts.adjacent};
    VirtIOBlkConf conf;
    uint64_t feat;
    GError *err = NULL;

    memset(f, 0, sizeof(*f));
    if (opts.conf) {
        conf = *opts.conf;
    } else {
        blkfix_default_conf(&conf);
    }
    f->blk = virtio_blk_new(&conf, &err);
    g_assert_no_error(err);
    feat = testdrv_negotiate(virtio_blk_get_host_features(f->blk),
                             opts.features ? opts.features : ~0ull);
    g_assert(virtio_blk_set_features(f->blk, feat, &err));
    g_assert_no_error(err);
    f->drv = testdrv_new(&dopts);
    f->tvq = testvq_new(f->drv, opts.num ? opts.num : conf.queue_size, feat);
    f->vq = virtqueue_new(testdrv_guestmem(f->drv), testvq_num(f->tvq), testvq_desc_gpa(f->tvq),
                          testvq_avail_gpa(f->tvq), testvq_used_gpa(f->tvq), feat, &err);
    g_assert_no_error(err);
    virtqueue_set_broken_notifier(f->vq, on_broken, f);
    f->q = virtio_blk_queue_new(f->blk, f->vq, &mem_ops, f, &err);
    g_assert_no_error(err);
    f->disk_size = conf.capacity * 512;
    f->disk = g_malloc0(f->disk_size);
}

void blkfix_cleanup(BlkFix *f)
{
    virtio_blk_queue_free(f->q);
    virtqueue_free(f->vq);
    virtio_blk_free(f->blk);
    testvq_free(f->tvq);
    testdrv_free(f->drv);
    g_free(f->disk);
}

bool blkfix_run(BlkFix *f)
{
    virtio_blk_handle_queue(f->q);
    return virtio_blk_queue_flush(f->q);
}

void blkfix_complete_deferred(BlkFix *f, int ret)
{
    for (unsigned i = 0; i < f->ndeferred; i++) {
        VirtIOBlkReq *req = f->deferred[i];

        virtio_blk_req_complete(req, ret < 0 ? ret : mem_execute(f, req));
    }
    f->ndeferred = 0;
}

uint32_t blkfix_used_len(BlkFix *f, int head)
{
    uint16_t h;
    uint32_t len;

    g_assert(testvq_get_used(f->tvq, &h, &len));
    g_assert_cmpint(h, ==, head);
    return len;
}

uint8_t blkfix_do(BlkFix *f, uint32_t type, uint64_t sector, void *data, uint32_t len,
                  uint32_t *used_len)
{
    TestBlkReq r = testblk_submit(f->tvq, type, sector, data, len, false);
    uint32_t ul;

    g_assert_cmpint(r.head, >=, 0);
    blkfix_run(f);
    ul = blkfix_used_len(f, r.head);
    if (used_len) {
        *used_len = ul;
    }
    if (data && len && (type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID)) {
        testdrv_memread(f->drv, r.data_gpa, data, len);
    }
    return testblk_status(f->tvq, &r);
}
