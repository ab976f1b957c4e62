/* Unit tests: split virtqueue (pop/push/flush, notifications, state, threads). */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <unistd.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "virtio/virtqueue.h"
#include "testdrv.h"

#define F_EVENT_IDX (1ull << VIRTIO_RING_F_EVENT_IDX)
#define F_INDIRECT  (1ull << VIRTIO_RING_F_INDIRECT_DESC)
#define F_V1        (1ull << VIRTIO_F_VERSION_1)

typedef struct Vqf {
    TestDrv *d;
    TestVq *tvq;
    VirtQueue *vq;
    struct iovec iov[64];
    VirtQueueElement elem;
} Vqf;

static void vqf_init(Vqf *f, unsigned num, uint64_t features, const TestDrvOpts *o)
{
    GError *err = NULL;

    memset(f, 0, sizeof(*f));
    f->d = testdrv_new(o);
    f->tvq = testvq_new(f->d, num, features);
    f->vq = virtqueue_new(testdrv_guestmem(f->d), num, testvq_desc_gpa(f->tvq),
                          testvq_avail_gpa(f->tvq), testvq_used_gpa(f->tvq), features, &err);
    g_assert_no_error(err);
    f->elem.iov = f->iov;
    f->elem.iov_cap = G_N_ELEMENTS(f->iov);
}

static void vqf_cleanup(Vqf *f)
{
    virtqueue_free(f->vq);
    testvq_free(f->tvq);
    testdrv_free(f->d);
}

static void test_pop_direct(void)
{
    Vqf f;
    uint64_t a, b, c;
    uint16_t head;
    uint32_t len;
    int h;

    vqf_init(&f, 8, F_V1, NULL);
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, 0);
    a = testdrv_alloc(f.d, 100, 0);
    b = testdrv_alloc(f.d, 200, 0);
    c = testdrv_alloc(f.d, 300, 0);
    h = testvq_add_chain(f.tvq, (TestBuf[]){{a, 100, false}, {b, 200, false}, {c, 300, true}}, 3);
    testvq_publish(f.tvq, h);
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, 1);
    g_assert_cmpuint(f.elem.head, ==, h);
    g_assert_cmpuint(f.elem.out_num, ==, 2);
    g_assert_cmpuint(f.elem.in_num, ==, 1);
    g_assert_cmpuint(f.elem.out_len, ==, 300);
    g_assert_cmpuint(f.elem.in_len, ==, 300);
    g_assert_cmpuint(f.elem.ndesc, ==, 3);
    g_assert(f.iov[0].iov_base == guestmem_ptr(testdrv_guestmem(f.d), a, 1));
    g_assert(f.iov[2].iov_base == guestmem_ptr(testdrv_guestmem(f.d), c, 1));
    g_assert_cmpuint(virtqueue_inflight(f.vq), ==, 1);
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, 0);

    /* Not visible before flush. */
    g_assert(virtqueue_push(f.vq, h, 42));
    g_assert_false(testvq_get_used(f.tvq, &head, &len));
    virtqueue_flush(f.vq);
    g_assert(testvq_get_used(f.tvq, &head, &len));
    g_assert_cmpuint(head, ==, h);
    g_assert_cmpuint(len, ==, 42);
    g_assert_cmpuint(virtqueue_inflight(f.vq), ==, 0);
    /* Pushing a head that is not in flight is refused (executor bug guard). */
    g_assert_false(virtqueue_push(f.vq, h, 1));
    g_assert_false(virtqueue_push(f.vq, 1000, 1));
    g_assert_false(virtqueue_is_broken(f.vq));
    g_assert_cmpuint(testvq_free_descs(f.tvq), ==, 8);
    vqf_cleanup(&f);
}

/* A protocol error publishes what was pushed before it, then refuses flushes. */
static void test_break_publishes_pushed(void)
{
    Vqf f;
    uint64_t a = 0, b;
    uint16_t head;
    uint32_t len;
    int h, bad;

    vqf_init(&f, 8, F_V1, NULL);
    a = testdrv_alloc(f.d, 512, 0);
    b = testdrv_alloc(f.d, 512, 0);
    h = testvq_add_chain(f.tvq, (TestBuf[]){{a, 512, true}}, 1);
    testvq_publish(f.tvq, h);
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, 1);
    g_assert(virtqueue_push(f.vq, h, 7));
    g_assert_true(virtqueue_has_unpublished(f.vq));               /* pushed, not flushed */
    bad = testvq_add_chain(f.tvq, (TestBuf[]){{b, 0, false}}, 1); /* zero length */
    testvq_publish(f.tvq, bad);
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), <, 0);
    g_assert_true(virtqueue_is_broken(f.vq));
    g_assert_false(virtqueue_has_unpublished(f.vq));
    g_assert(testvq_get_used(f.tvq, &head, &len));
    g_assert_cmpuint(head, ==, h);
    g_assert_cmpuint(len, ==, 7);
    g_assert_false(testvq_get_used(f.tvq, &head, &len));
    vqf_cleanup(&f);
}

static void test_pop_indirect(void)
{
    Vqf f;
    uint64_t a = 0, b;
    int h;

    vqf_init(&f, 8, F_V1 | F_INDIRECT, NULL);
    a = testdrv_alloc(f.d, 16, 0);
    b = testdrv_alloc(f.d, 4096, 0);
    h = testvq_add_indirect(
        f.tvq, (TestBuf[]){{a, 16, false}, {b, 2048, true}, {b + 2048, 2048, true}}, 3);
    testvq_publish(f.tvq, h);
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, 1);
    g_assert_cmpuint(f.elem.out_num, ==, 1);
    g_assert_cmpuint(f.elem.in_num, ==, 2);
    g_assert_cmpuint(f.elem.in_len, ==, 4096);
    g_assert_cmpuint(f.elem.ndesc, ==, 3);
    g_assert(virtqueue_push(f.vq, h, 4096));
    virtqueue_flush(f.vq);
    vqf_cleanup(&f);
}

static void test_region_crossing(void)
{
    TestDrvOpts o = {.ram_size = 4 << 20, .nregions = 2, .adjacent = true};
    Vqf f;
    uint64_t end0;
    int h;

    vqf_init(&f, 8, F_V1, &o);
    /* One descriptor spanning the boundary between two adjacent regions. */
    end0 = testdrv_region_gpa(f.d, 0) + testdrv_region_size(f.d, 0);
    g_assert_cmphex(end0, ==, testdrv_region_gpa(f.d, 1));
    h = testvq_add_chain(f.tvq, (TestBuf[]){{end0 - 100, 300, true}}, 1);
    testvq_publish(f.tvq, h);
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, 1);
    g_assert_cmpuint(f.elem.in_num, ==, 2);
    g_assert_cmpuint(f.iov[0].iov_len, ==, 100);
    g_assert_cmpuint(f.iov[1].iov_len, ==, 200);
    g_assert_cmpuint(f.elem.ndesc, ==, 1);
    vqf_cleanup(&f);
}

/* A chain that needs more iovecs than the element holds breaks the queue. */
static void test_iov_exhausted(void)
{
    TestDrvOpts o = {.ram_size = 4 << 20, .nregions = 4, .adjacent = true};
    Vqf f;
    uint64_t start;
    int h;

    vqf_init(&f, 8, F_V1, &o);
    f.elem.iov_cap = 2;
    /* One descriptor over three regions needs three iovecs. */
    start = testdrv_region_gpa(f.d, 1) - 100;
    h = testvq_add_chain(f.tvq, (TestBuf[]){{start, 100 + testdrv_region_size(f.d, 1) + 100, true}},
                         1);
    testvq_publish(f.tvq, h);
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, -EIO);
    g_assert_true(virtqueue_is_broken(f.vq));
    g_assert_cmpstr(virtqueue_broken_reason(f.vq), ==,
                    "descriptor chain needs more iovecs than the element holds");
    /* Everything is refused from now on. */
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, -EIO);
    g_assert_false(virtqueue_push(f.vq, h, 0));
    g_assert_false(virtqueue_has_avail(f.vq));
    vqf_cleanup(&f);
}

static void test_setup_rejects(void)
{
    TestDrv *d = testdrv_new(NULL);
    const GuestMem *gm = testdrv_guestmem(d);
    uint64_t base = testdrv_region_gpa(d, 0), end = testdrv_ram_end(d);
    GError *err = NULL;

    g_assert_null(virtqueue_new(gm, 0, base, base + 4096, base + 8192, 0, &err));
    g_assert_error(err, VIRTIO_ERROR, VIRTIO_ERROR_INVALID);
    g_clear_error(&err);
    g_assert_null(virtqueue_new(gm, 12, base, base + 4096, base + 8192, 0, &err));
    g_clear_error(&err);
    g_assert_null(virtqueue_new(gm, 65536, base, base + 4096, base + 8192, 0, &err));
    g_clear_error(&err);
    /* Rings outside RAM, straddling its end, or misaligned. */
    g_assert_null(virtqueue_new(gm, 16, 0, base + 4096, base + 8192, 0, &err));
    g_clear_error(&err);
    g_assert_null(virtqueue_new(gm, 16, base, end - 8, base + 8192, 0, &err));
    g_clear_error(&err);
    g_assert_null(virtqueue_new(gm, 16, base, base + 4096, end - 64, 0, &err));
    g_clear_error(&err);
    g_assert_null(virtqueue_new(gm, 16, base + 8, base + 4096, base + 8192, 0, &err));
    g_clear_error(&err);
    g_assert_null(virtqueue_new(gm, 16, base, base + 4097, base + 8192, 0, &err));
    g_clear_error(&err);
    g_assert_null(virtqueue_new(gm, 16, base, base + 4096, base + 8194, 0, &err));
    g_clear_error(&err);
    testdrv_free(d);
}

/* Post one single-descriptor writable buffer and publish it. */
static int post_one(Vqf *f)
{
    uint64_t b = testdrv_alloc(f->d, 64, 0);
    int h = testvq_add_chain(f->tvq, (TestBuf[]){{b, 64, true}}, 1);

    testvq_publish(f->tvq, h);
    return h;
}

static void complete_all(Vqf *f)
{
    while (virtqueue_pop(f->vq, &f->elem) == 1) {
        g_assert(virtqueue_push(f->vq, f->elem.head, 0));
    }
    virtqueue_flush(f->vq);
}

static void drain_used(Vqf *f)
{
    uint16_t h;
    uint32_t l;

    while (testvq_get_used(f->tvq, &h, &l)) {
    }
}

static void test_no_event_idx_flags(void)
{
    Vqf f;

    vqf_init(&f, 8, F_V1, NULL);
    virtqueue_disable_notification(f.vq);
    g_assert_cmpuint(testvq_used_flags(f.tvq) & VRING_USED_F_NO_NOTIFY, !=, 0);
    post_one(&f);
    g_assert_false(testvq_kick(f.tvq)); /* device asked not to be kicked */
    /* enable_notification re-checks and reports the sneaked-in buffer. */
    g_assert_true(virtqueue_enable_notification(f.vq));
    g_assert_cmpuint(testvq_used_flags(f.tvq) & VRING_USED_F_NO_NOTIFY, ==, 0);
    complete_all(&f);
    g_assert_false(virtqueue_enable_notification(f.vq));
    g_assert_true(virtqueue_should_notify(f.vq));
    g_assert_false(virtqueue_should_notify(f.vq)); /* nothing new since */
    drain_used(&f);
    post_one(&f);
    g_assert_true(testvq_kick(f.tvq));
    testvq_set_avail_flags(f.tvq, VRING_AVAIL_F_NO_INTERRUPT);
    complete_all(&f);
    g_assert_false(virtqueue_should_notify(f.vq));
    vqf_cleanup(&f);
}

static void test_event_idx(void)
{
    Vqf f;

    vqf_init(&f, 8, F_V1 | F_EVENT_IDX, NULL);
    testvq_set_auto_used_event(f.tvq, false);
    post_one(&f);
    g_assert_true(testvq_kick(f.tvq)); /* avail_event 0: kick for idx 0 -> 1 */
    complete_all(&f);
    /* pop wrote avail_event = last_avail_idx. */
    g_assert_cmpuint(testvq_avail_event(f.tvq), ==, 1);
    /* First decision after setup is always "notify" (signalled_used invalid). */
    g_assert_true(virtqueue_should_notify(f.vq));
    /* used_event = 0 stays behind: completions 2 and 3 interrupt nobody. */
    post_one(&f);
    g_assert_true(testvq_kick(f.tvq));
    complete_all(&f);
    g_assert_false(virtqueue_should_notify(f.vq));
    /* Driver asks for an interrupt when used idx passes 2 (i.e. reaches 3). */
    testvq_set_used_event(f.tvq, 2);
    post_one(&f);
    testvq_kick(f.tvq);
    complete_all(&f);
    g_assert_true(virtqueue_should_notify(f.vq));
    /*
     * While disabled, avail_event stays at 3: the driver kicks once when it
     * publishes slot 3, then no more (the device is known to be awake).
     */
    virtqueue_disable_notification(f.vq);
    post_one(&f);
    g_assert_true(testvq_kick(f.tvq));
    post_one(&f);
    g_assert_false(testvq_kick(f.tvq));
    g_assert_true(virtqueue_enable_notification(f.vq));
    g_assert_cmpuint(testvq_avail_event(f.tvq), ==, 3);
    complete_all(&f);
    g_assert_false(virtqueue_enable_notification(f.vq));
    g_assert_cmpuint(testvq_avail_event(f.tvq), ==, 5);
    vqf_cleanup(&f);
}

/* The state dump's snapshot shows both sides' indices as they are. */
static void test_debug_snapshot(void)
{
    VirtQueueDebug d;
    Vqf f;

    vqf_init(&f, 8, F_V1 | F_EVENT_IDX, NULL);
    testvq_set_auto_used_event(f.tvq, false);
    post_one(&f);
    post_one(&f);
    virtqueue_debug_snapshot(f.vq, &d);
    g_assert_true(d.event_idx);
    g_assert_cmpuint(d.avail_idx, ==, 2); /* the driver published two ... */
    g_assert_cmpuint(d.last_avail_idx, ==, 0); /* ... that the device has not popped */
    g_assert_cmpuint(d.inflight, ==, 0);
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, 1);
    virtqueue_debug_snapshot(f.vq, &d);
    g_assert_cmpuint(d.last_avail_idx, ==, 1);
    g_assert_cmpuint(d.inflight, ==, 1);
    g_assert(virtqueue_push(f.vq, f.elem.head, 0));
    virtqueue_debug_snapshot(f.vq, &d);
    g_assert_cmpuint(d.used_idx, ==, 1);
    g_assert_cmpuint(d.published_used, ==, 0); /* pushed, not yet flushed */
    g_assert_cmpuint(d.guest_used_idx, ==, 0);
    complete_all(&f);
    testvq_set_used_event(f.tvq, 1);
    g_assert_true(virtqueue_should_notify(f.vq));
    virtqueue_debug_snapshot(f.vq, &d);
    g_assert_cmpuint(d.published_used, ==, 2);
    g_assert_cmpuint(d.guest_used_idx, ==, 2);
    g_assert_cmpuint(d.signalled_used, ==, 2);
    g_assert_true(d.signalled_used_valid);
    g_assert_cmpuint(d.used_event, ==, 1); /* the driver has consumed less than published */
    g_assert_cmpuint(d.avail_event, ==, 2);
    g_assert_cmpuint(d.inflight, ==, 0);
    vqf_cleanup(&f);
}

static void test_state_handoff(void)
{
    Vqf f;
    VirtQueueState s;
    VirtQueue *vq2;
    int h;

    vqf_init(&f, 4, F_V1 | F_EVENT_IDX, NULL);
    for (int i = 0; i < 3; i++) {
        post_one(&f);
    }
    complete_all(&f);
    h = post_one(&f);
    g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, 1);
    virtqueue_get_state(f.vq, &s);
    g_assert_cmpuint(s.last_avail_idx, ==, 4);
    g_assert_cmpuint(s.used_idx, ==, 3);
    g_assert_cmpuint(virtqueue_inflight(f.vq), ==, 1);
    g_assert_false(virtqueue_set_state(f.vq, &s)); /* in flight: refused */
    /* Un-pop gives it back. */
    virtqueue_unpop(f.vq, &f.elem);
    g_assert_cmpuint(virtqueue_inflight(f.vq), ==, 0);
    virtqueue_get_state(f.vq, &s);
    g_assert_cmpuint(s.last_avail_idx, ==, 3);

    /* Hand over to a second queue object on the same rings. */
    vq2 = virtqueue_new(testdrv_guestmem(f.d), 4, testvq_desc_gpa(f.tvq), testvq_avail_gpa(f.tvq),
                        testvq_used_gpa(f.tvq), F_V1 | F_EVENT_IDX, NULL);
    g_assert(virtqueue_set_state(vq2, &s));
    g_assert_cmpint(virtqueue_pop(vq2, &f.elem), ==, 1);
    g_assert_cmpuint(f.elem.head, ==, h);
    g_assert(virtqueue_push(vq2, h, 7));
    virtqueue_flush(vq2);
    /* signalled_used is invalid after set_state: notify even though used_event is behind. */
    g_assert_true(virtqueue_should_notify(vq2));
    g_assert_cmpuint(testvq_used_idx(f.tvq), ==, 4);
    virtqueue_free(vq2);
    vqf_cleanup(&f);
}

/* 70000 round trips on a 4-entry queue: 16-bit indices wrap; accounting stays right. */
static void test_index_wrap(void)
{
    Vqf f;
    uint64_t b;
    unsigned notified = 0;

    vqf_init(&f, 4, F_V1 | F_EVENT_IDX, NULL);
    b = testdrv_alloc(f.d, 64, 0);
    for (unsigned i = 0; i < 70000; i++) {
        uint16_t h;
        uint32_t l;
        int head = testvq_add_chain(f.tvq, (TestBuf[]){{b, 64, true}}, 1);

        testvq_publish(f.tvq, head);
        g_assert_cmpint(virtqueue_pop(f.vq, &f.elem), ==, 1);
        g_assert(virtqueue_push(f.vq, f.elem.head, i));
        virtqueue_flush(f.vq);
        notified += virtqueue_should_notify(f.vq);
        g_assert(testvq_get_used(f.tvq, &h, &l));
        g_assert_cmpuint(l, ==, i);
    }
    /* The driver re-arms used_event after each completion: every one interrupts. */
    g_assert_cmpuint(notified, ==, 70000);
    g_assert_false(virtqueue_is_broken(f.vq));
    vqf_cleanup(&f);
}

/* ---- two threads: guest and device, notifications through eventfds ---- */

#define THREAD_REQS 200000

typedef struct ThreadCtx {
    Vqf f;
    unsigned done;
} ThreadCtx;

static gpointer device_thread(gpointer opaque)
{
    ThreadCtx *t = opaque;
    struct iovec iov[8];
    VirtQueueElement e = {.iov = iov, .iov_cap = 8};
    uint64_t cnt;

    while (t->done < THREAD_REQS) {
        struct pollfd p = {.fd = testvq_kick_fd(t->f.tvq), .events = POLLIN};

        /* A lost wakeup shows up as this timeout. */
        g_assert_cmpint(poll(&p, 1, 5000), ==, 1);
        g_assert(read(p.fd, &cnt, sizeof(cnt)) == sizeof(cnt));
        do {
            virtqueue_disable_notification(t->f.vq);
            while (virtqueue_pop(t->f.vq, &e) == 1) {
                g_assert(virtqueue_push(t->f.vq, e.head, e.head));
                t->done++;
            }
            virtqueue_flush(t->f.vq);
            if (virtqueue_should_notify(t->f.vq)) {
                uint64_t one = 1;
                g_assert(write(testvq_call_fd(t->f.tvq), &one, 8) == 8);
            }
        } while (virtqueue_enable_notification(t->f.vq));
        g_assert_false(virtqueue_is_broken(t->f.vq));
    }
    return NULL;
}

static void run_threads(uint64_t features)
{
    ThreadCtx t = {0};
    GThread *dev;
    unsigned posted = 0, completed = 0;
    uint64_t b;

    vqf_init(&t.f, 64, F_V1 | features, NULL);
    b = testdrv_alloc(t.f.d, 64, 0);
    dev = g_thread_new("device", device_thread, &t);
    while (completed < THREAD_REQS) {
        uint16_t h;
        uint32_t l;

        while (posted < THREAD_REQS && testvq_free_descs(t.f.tvq) > 0) {
            testvq_publish(t.f.tvq, testvq_add_chain(t.f.tvq, (TestBuf[]){{b, 64, true}}, 1));
            posted++;
        }
        testvq_kick(t.f.tvq);
        if (!testvq_get_used(t.f.tvq, &h, &l)) {
            /* Sleep on the interrupt; the re-check below covers the race. */
            testvq_wait_call(t.f.tvq, 1);
            continue;
        }
        g_assert_cmpuint(h, ==, l);
        completed++;
    }
    g_thread_join(dev);
    g_assert_cmpuint(t.done, ==, THREAD_REQS);
    vqf_cleanup(&t.f);
}

static void test_threads_event_idx(void)
{
    run_threads(F_EVENT_IDX);
}

static void test_threads_flags(void)
{
    run_threads(0);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/virtqueue/pop-direct", test_pop_direct);
    g_test_add_func("/virtqueue/pop-indirect", test_pop_indirect);
    g_test_add_func("/virtqueue/break-publishes-pushed", test_break_publishes_pushed);
    g_test_add_func("/virtqueue/region-crossing", test_region_crossing);
    g_test_add_func("/virtqueue/setup-rejects", test_setup_rejects);
    g_test_add_func("/virtqueue/iov-exhausted", test_iov_exhausted);
    g_test_add_func("/virtqueue/notify-flags", test_no_event_idx_flags);
    g_test_add_func("/virtqueue/event-idx", test_event_idx);
    g_test_add_func("/virtqueue/state-handoff", test_state_handoff);
    g_test_add_func("/virtqueue/debug-snapshot", test_debug_snapshot);
    g_test_add_func("/virtqueue/index-wrap", test_index_wrap);
    g_test_add_func("/virtqueue/threads-event-idx", test_threads_event_idx);
    g_test_add_func("/virtqueue/threads-flags", test_threads_flags);
    return g_test_run();
}
