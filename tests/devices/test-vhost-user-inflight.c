/*
 * vhost-user inflight tracking (src/devices/vhost-user-inflight.c) on a real
 * VirtQueue over tests/driver's guest memory: what the region says at each
 * point where a back end can be killed, and what the next back end makes of
 * it (vhost_user_inflight_tracker_new's recovery), plus the virtqueue's
 * resubmit list (resubmitted heads first, in pop order, un-pop puts them
 * back, nothing popped twice).
 *
 * A kill is simulated by copying the region at that point: a SIGKILLed
 * process leaves exactly the stores it made, and this checks that those
 * stores are made in an order that recovery can rely on.
 */
#include <string.h>
#include <linux/virtio_ring.h>

#include "testdrv.h"
#include "vhost-user-int.h"

#define NUM 8

typedef struct {
    TestDrv *d;
    TestVq *tvq;
    VirtQueue *vq;
    VhostUserInflightQueue *q;
    VhostUserInflightTracker *t;
    uint64_t bytes;
} Fx;

static void fx_init(Fx *f)
{
    TestDrvOpts o = {.ram_size = 4 << 20, .nregions = 1};
    uint16_t heads[NUM];
    unsigned n = 99;

    f->d = testdrv_new(&o);
    f->tvq = testvq_new(f->d, NUM, 0);
    f->vq = virtqueue_new(testdrv_guestmem(f->d), NUM, testvq_desc_gpa(f->tvq),
                          testvq_avail_gpa(f->tvq), testvq_used_gpa(f->tvq), 0, NULL);
    g_assert_nonnull(f->vq);
    f->bytes = vhost_user_inflight_queue_bytes(NUM);
    g_assert_cmpuint(f->bytes, ==, 192); /* 16 + 8 * 16, 64-aligned */
    f->q = g_malloc0(f->bytes);
    f->t = vhost_user_inflight_tracker_new(f->q, NUM, NUM, 0, heads, &n);
    g_assert_cmpuint(n, ==, 0);
    virtqueue_set_tracker(f->vq, &vhost_user_inflight_tracker_ops, f->t);
}

static void fx_free(Fx *f)
{
    vhost_user_inflight_tracker_free(f->t);
    virtqueue_free(f->vq);
    g_free(f->q);
    testvq_free(f->tvq);
    testdrv_free(f->d);
}

/* A one-buffer chain published in the avail ring; returns its head. */
static uint16_t add(Fx *f)
{
    TestBuf b = {.gpa = testdrv_alloc(f->d, 512, 512), .len = 512, .write = true};
    int h = testvq_add_chain(f->tvq, &b, 1);

    g_assert_cmpint(h, >=, 0);
    testvq_publish(f->tvq, (uint16_t)h);
    return (uint16_t)h;
}

static uint16_t pop(Fx *f)
{
    struct iovec iov[VIRTQUEUE_ELEM_IOV(NUM)];
    VirtQueueElement e = {.iov = iov, .iov_cap = G_N_ELEMENTS(iov)};

    g_assert_cmpint(virtqueue_pop(f->vq, &e), ==, 1);
    return e.head;
}

/* Recovery on a copy of the region as a kill left it; heads in resubmit order. */
static unsigned recover(const Fx *f, const VhostUserInflightQueue *snap, uint16_t guest_used,
                        uint16_t *heads, VhostUserInflightQueue **out)
{
    VhostUserInflightQueue *c = g_memdup2(snap, f->bytes);
    VhostUserInflightTracker *t;
    unsigned n = 99;

    t = vhost_user_inflight_tracker_new(c, NUM, NUM, guest_used, heads, &n);
    vhost_user_inflight_tracker_free(t);
    if (out) {
        *out = c;
    } else {
        g_free(c);
    }
    return n;
}

/*
 * Pop 4, push 2 of them, then each kill point of the flush: before the used
 * index store (the batch is redone), after it (the batch is done), after the
 * region is updated (the same).
 */
static void test_torn_flush(void)
{
    Fx f;
    uint16_t h[4], heads[NUM];
    VhostUserInflightQueue *snap, *after;
    unsigned n;

    fx_init(&f);
    for (unsigned i = 0; i < 4; i++) {
        add(&f);
    }
    for (unsigned i = 0; i < 4; i++) {
        h[i] = pop(&f);
        g_assert_cmpuint(f.q->desc[h[i]].inflight, ==, 1);
    }
    g_assert_cmpuint(f.q->desc[h[0]].counter, <, f.q->desc[h[1]].counter);
    /* Completed out of order: the 3rd and the 1st. */
    g_assert_true(virtqueue_push(f.vq, h[2], 1));
    g_assert_true(virtqueue_push(f.vq, h[0], 1));
    /* Killed after the pushes, before the flush: all four again, in pop order. */
    n = recover(&f, f.q, 0, heads, NULL);
    g_assert_cmpuint(n, ==, 4);
    for (unsigned i = 0; i < 4; i++) {
        g_assert_cmpuint(heads[i], ==, h[i]);
    }
    /* Killed between the region's last_batch_head and used->idx: the same. */
    vhost_user_inflight_tracker_ops.flush_begin(f.t);
    g_assert_cmpuint(f.q->last_batch_head, ==, h[0]);
    n = recover(&f, f.q, 0, heads, NULL);
    g_assert_cmpuint(n, ==, 4);
    /* Killed after used->idx = 2 reached the guest, before the batch was cleared. */
    snap = g_memdup2(f.q, f.bytes);
    n = recover(&f, snap, 2, heads, &after);
    g_assert_cmpuint(n, ==, 2);
    g_assert_cmpuint(heads[0], ==, h[1]);
    g_assert_cmpuint(heads[1], ==, h[3]);
    g_assert_cmpuint(after->used_idx, ==, 2);
    g_assert_cmpuint(after->desc[h[0]].inflight, ==, 0);
    g_assert_cmpuint(after->desc[h[2]].inflight, ==, 0);
    g_free(after);
    g_free(snap);
    /* The real flush: the same result, and the region's used_idx follows. */
    vhost_user_inflight_tracker_ops.flush_begin(f.t); /* flush_begin again is harmless */
    virtqueue_flush(f.vq);
    g_assert_cmpuint(f.q->used_idx, ==, 2);
    g_assert_cmpuint(testvq_used_idx(f.tvq), ==, 2);
    g_assert_cmpuint(f.q->desc[h[0]].inflight + f.q->desc[h[2]].inflight, ==, 0);
    n = recover(&f, f.q, 2, heads, NULL);
    g_assert_cmpuint(n, ==, 2);
    g_assert_cmpuint(heads[0], ==, h[1]);
    g_assert_cmpuint(heads[1], ==, h[3]);
    /* Un-popped: back in the avail ring, no longer in flight. */
    add(&f);
    {
        struct iovec iov[VIRTQUEUE_ELEM_IOV(NUM)];
        VirtQueueElement e = {.iov = iov, .iov_cap = G_N_ELEMENTS(iov)};

        g_assert_cmpint(virtqueue_pop(f.vq, &e), ==, 1);
        g_assert_cmpuint(f.q->desc[e.head].inflight, ==, 1);
        virtqueue_unpop(f.vq, &e);
        g_assert_cmpuint(f.q->desc[e.head].inflight, ==, 0);
    }
    fx_free(&f);
}

/* The next back end: resubmitted heads first, in pop order, once; then the avail ring. */
static void test_resubmit(void)
{
    Fx f;
    uint16_t h[5], heads[NUM], fresh;
    VirtQueueState st;
    unsigned n;
    struct iovec iov[VIRTQUEUE_ELEM_IOV(NUM)];
    VirtQueueElement e = {.iov = iov, .iov_cap = G_N_ELEMENTS(iov)};

    fx_init(&f);
    for (unsigned i = 0; i < 5; i++) {
        add(&f);
    }
    for (unsigned i = 0; i < 5; i++) {
        h[i] = pop(&f);
    }
    g_assert_true(virtqueue_push(f.vq, h[1], 1));
    virtqueue_flush(f.vq);
    fresh = add(&f); /* queued by the guest while the back end was down */
    /* The "new back end": a fresh VirtQueue on the same rings and region. */
    vhost_user_inflight_tracker_free(f.t);
    virtqueue_free(f.vq);
    f.vq = virtqueue_new(testdrv_guestmem(f.d), NUM, testvq_desc_gpa(f.tvq),
                         testvq_avail_gpa(f.tvq), testvq_used_gpa(f.tvq), 0, NULL);
    f.t = vhost_user_inflight_tracker_new(f.q, NUM, NUM, 1, heads, &n);
    g_assert_cmpuint(n, ==, 4);
    virtqueue_get_state(f.vq, &st);
    g_assert_cmpuint(st.used_idx, ==, 1);
    st.last_avail_idx = (uint16_t)(st.used_idx + n);
    g_assert_true(virtqueue_set_state(f.vq, &st));
    g_assert_true(virtqueue_set_resubmit(f.vq, heads, n));
    virtqueue_set_tracker(f.vq, &vhost_user_inflight_tracker_ops, f.t);
    g_assert_true(virtqueue_has_avail(f.vq));
    /* h0, h2 popped; h2 un-popped (e.g. throttled) comes back next. */
    g_assert_cmpuint(pop(&f), ==, h[0]);
    g_assert_cmpint(virtqueue_pop(f.vq, &e), ==, 1);
    g_assert_cmpuint(e.head, ==, h[2]);
    virtqueue_unpop(f.vq, &e);
    g_assert_cmpuint(f.q->desc[h[2]].inflight, ==, 1); /* still owed to the guest */
    g_assert_cmpuint(virtqueue_resubmit_pending(f.vq), ==, 3);
    g_assert_cmpuint(pop(&f), ==, h[2]);
    g_assert_cmpuint(pop(&f), ==, h[3]);
    g_assert_cmpuint(pop(&f), ==, h[4]);
    /* Then the avail ring, from used + in flight: only the new chain. */
    g_assert_cmpuint(pop(&f), ==, fresh);
    g_assert_cmpint(virtqueue_pop(f.vq, &e), ==, 0);
    g_assert_cmpuint(virtqueue_inflight(f.vq), ==, 5);
    /* Bad lists are refused: duplicates, out of range, with elements in flight. */
    g_assert_false(virtqueue_set_resubmit(f.vq, heads, 1));
    fx_free(&f);
    {
        Fx g;
        uint16_t dup[2] = {3, 3}, big[1] = {NUM};

        fx_init(&g);
        g_assert_false(virtqueue_set_resubmit(g.vq, dup, 2));
        g_assert_false(virtqueue_set_resubmit(g.vq, big, 1));
        fx_free(&g);
    }
}

/* A front end's garbage in the region: bounded, no crash, only heads < num come back. */
static void test_garbage(void)
{
    Fx f;
    uint16_t heads[NUM];
    VhostUserInflightQueue *c;
    unsigned n;

    fx_init(&f);
    memset(f.q, 0xff, f.bytes);
    /* used_idx 0xffff vs guest 3: a batch of 4 from head 0xffff (out of range): nothing cleared. */
    n = recover(&f, f.q, 3, heads, &c);
    g_assert_cmpuint(n, ==, NUM);
    for (unsigned i = 0; i < NUM; i++) {
        g_assert_cmpuint(heads[i], ==, i); /* equal counters: by head */
        g_assert_cmpuint(c->desc[i].inflight, ==, 1);
    }
    g_free(c);
    /* A ring smaller than the region: marks beyond it are dropped. */
    {
        VhostUserInflightTracker *t;

        c = g_memdup2(f.q, f.bytes);
        t = vhost_user_inflight_tracker_new(c, NUM, 4, 0xffff, heads, &n);
        g_assert_cmpuint(n, ==, 4);
        g_assert_cmpuint(c->desc[5].inflight, ==, 0);
        vhost_user_inflight_tracker_free(t);
        g_free(c);
    }
    /* A distance larger than the ring is no torn batch: nothing cleared. */
    memset(f.q, 0, f.bytes);
    f.q->desc[2].inflight = 1;
    f.q->used_idx = 0;
    n = recover(&f, f.q, 100, heads, NULL);
    g_assert_cmpuint(n, ==, 1);
    g_assert_cmpuint(heads[0], ==, 2);
    fx_free(&f);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vhost-user-inflight/torn-flush", test_torn_flush);
    g_test_add_func("/vhost-user-inflight/resubmit", test_resubmit);
    g_test_add_func("/vhost-user-inflight/garbage", test_garbage);
    return g_test_run();
}
