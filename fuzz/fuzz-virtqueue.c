/*
 * libFuzzer target: a hostile guest fully controls feature bits, the device
 * configuration knobs, the descriptor table, the avail ring and guest RAM.
 * Exercises virtqueue_pop -> virtio-blk parse -> executor -> complete ->
 * flush/notify, for two kicks.
 *
 * Input layout:
 *   [0..8)   driver features (LE; masked by the host features, VERSION_1 forced)
 *   [8]      log2 of the queue size - 2 (4..32 entries)
 *   [9]      device knobs: bit0 readonly, bit1 4K blocks, bit2 small limits,
 *            bit3 defer completions, bits4-5 completion result
 *   [10..12) avail->idx for the first kick, [12..14) for the second
 *   [14..)   guest RAM image, region 0 first (rings live at fixed addresses)
 * Guest RAM: two 32 KiB regions at 0x0 and 0x10000 (a hole between them),
 * each in its own heap block so ASan sees any access outside them.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "virtio/virtio-blk.h"

#define REGION_SIZE 0x8000
#define REGION1_GPA 0x10000
#define DESC_GPA    0x0000
#define AVAIL_GPA   0x1000
#define USED_GPA    0x2000

typedef struct FuzzExec {
    VirtIOBlkReq *deferred[64];
    unsigned n;
    bool defer;
    int result;
    bool throttle; /* admit() refuses every third request (un-pop path) */
    unsigned admits;
} FuzzExec;

static void touch_data(VirtIOBlkReq *req)
{
    /* Reads write the guest buffers; writes read them: ASan checks each byte. */
    for (unsigned i = 0; i < req->niov; i++) {
        if (req->op == VIRTIO_BLK_OP_READ) {
            memset(req->iov[i].iov_base, 0xa5, req->iov[i].iov_len);
        } else {
            volatile uint8_t sink = 0;
            const uint8_t *p = req->iov[i].iov_base;
            for (size_t k = 0; k < req->iov[i].iov_len; k++) {
                sink ^= p[k];
            }
            (void)sink;
        }
    }
}

static void fuzz_submit(void *opaque, VirtIOBlkReq *req)
{
    FuzzExec *x = opaque;

    touch_data(req);
    if (x->defer && x->n < 64) {
        x->deferred[x->n++] = req;
        return;
    }
    virtio_blk_req_complete(req, x->result);
}

static void fuzz_batch_end(void *opaque)
{
}

static bool fuzz_admit(void *opaque, const VirtIOBlkReq *req)
{
    FuzzExec *x = opaque;

    return !x->throttle || ++x->admits % 3 != 0;
}

static const VirtIOBlkExecOps fuzz_ops = {
    .submit = fuzz_submit, .batch_end = fuzz_batch_end, .admit = fuzz_admit};

static void kick(VirtIOBlkQueue *q, FuzzExec *x)
{
    virtio_blk_handle_queue(q);
    if (x->throttle) {
        virtio_blk_handle_queue(q); /* as the throttle timer would: re-pops the deferred one */
    }
    virtio_blk_queue_flush(q);
    for (unsigned i = 0; i < x->n; i++) {
        virtio_blk_req_complete(x->deferred[i], x->result);
    }
    x->n = 0;
    virtio_blk_queue_flush(q);
}

static void conf_from_knobs(VirtIOBlkConf *c, uint8_t knobs)
{
    virtio_blk_conf_init(c, 64); /* 32 KiB disk */
    c->queue_size = 32;
    c->readonly = knobs & 1;
    if (knobs & 2) {
        c->logical_block_size = c->physical_block_size = 4096;
    }
    if (knobs & 4) {
        c->seg_max = 3;
        c->size_max = 4096;
        c->max_discard_sectors = 16;
        c->max_write_zeroes_sectors = 16;
    }
    memcpy(c->serial, "fuzz", 5);
}

static void run(const uint8_t *data, size_t size, uint8_t *ram0, uint8_t *ram1)
{
    static const int results[] = {0, -EIO, -ENOTSUP, -ENOSPC};
    GuestMemRegion regions[] = {{.gpa = 0, .size = REGION_SIZE, .hva = ram0},
                                {.gpa = REGION1_GPA, .size = REGION_SIZE, .hva = ram1}};
    uint64_t features;
    unsigned num = 4u << (data[8] % 4);
    uint16_t idx1, idx2;
    FuzzExec x = {
        .defer = data[9] & 8, .result = results[(data[9] >> 4) & 3], .throttle = data[9] & 0x40};
    VirtIOBlkConf conf;
    GuestMem *gm;
    VirtIOBlk *blk;
    VirtQueue *vq;
    VirtIOBlkQueue *q;
    size_t img = size - 14;

    memcpy(&features, data, 8);
    memcpy(&idx1, data + 10, 2);
    memcpy(&idx2, data + 12, 2);
    memcpy(ram0, data + 14, MIN(img, REGION_SIZE));
    if (img > REGION_SIZE) {
        memcpy(ram1, data + 14 + REGION_SIZE, MIN(img - REGION_SIZE, REGION_SIZE));
    }
    conf_from_knobs(&conf, data[9]);
    gm = guestmem_new(regions, 2, NULL);
    blk = virtio_blk_new(&conf, NULL);
    features = (features & virtio_blk_get_host_features(blk)) | (1ull << VIRTIO_F_VERSION_1);
    if (!gm || !blk || !virtio_blk_set_features(blk, features, NULL)) {
        __builtin_trap();
    }
    vq = virtqueue_new(gm, num, DESC_GPA, AVAIL_GPA, USED_GPA, features, NULL);
    q = vq ? virtio_blk_queue_new(blk, vq, &fuzz_ops, &x, NULL) : NULL;
    if (q) {
        struct vring_avail *avail = guestmem_ptr(gm, AVAIL_GPA, 4);

        avail->idx = htole16(idx1);
        kick(q, &x);
        avail->idx = htole16(idx1 + idx2 % (num + 2));
        kick(q, &x);
        if (!virtqueue_is_broken(vq) && virtqueue_inflight(vq) != 0) {
            __builtin_trap(); /* every popped chain must have been returned */
        }
    }
    virtio_blk_queue_free(q);
    virtqueue_free(vq);
    virtio_blk_free(blk);
    guestmem_free(gm);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *ram0, *ram1;

    if (size < 14) {
        return 0;
    }
    ram0 = g_malloc0(REGION_SIZE);
    ram1 = g_malloc0(REGION_SIZE);
    run(data, size, ram0, ram1);
    g_free(ram0);
    g_free(ram1);
    return 0;
}
