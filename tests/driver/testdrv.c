/*
 * In-process virtio guest driver (see testdrv.h).
 */
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "util/barrier.h"
#include "testdrv.h"

#define TESTDRV_MAX_REGIONS 8

struct TestDrv {
    int memfd;
    uint8_t *ram;
    uint64_t ram_size;
    unsigned nregions;
    GuestMemRegion regions[TESTDRV_MAX_REGIONS];
    GuestMem *gm;
    GMutex alloc_lock; /* guest threads of one driver allocate concurrently */
    uint64_t next_gpa; /* bump allocator cursor, under alloc_lock */
};

/* Context: test (guest) threads; the allocator is safe to call from several. */
TestDrv *testdrv_new(const TestDrvOpts *opts)
{
    TestDrvOpts o = {.ram_size = 16 << 20, .nregions = 1, .base_gpa = 0x100000, .gap = 1 << 20};
    TestDrv *d = g_new0(TestDrv, 1);
    uint64_t rsize;

    if (opts) {
        o.ram_size = opts->ram_size ? opts->ram_size : o.ram_size;
        o.nregions = opts->nregions ? opts->nregions : o.nregions;
        o.base_gpa = opts->base_gpa ? opts->base_gpa : o.base_gpa;
        o.gap = opts->adjacent ? 0 : opts->gap ? opts->gap : o.gap;
    }
    g_assert(o.nregions <= TESTDRV_MAX_REGIONS);
    rsize = (o.ram_size / o.nregions) & ~4095ull;
    g_assert(rsize > 2 * TESTDRV_TAIL_RESERVE);
    d->ram_size = rsize * o.nregions;
    d->memfd = memfd_create("vblk-guest-ram", MFD_CLOEXEC);
    g_assert(d->memfd >= 0);
    g_assert(ftruncate(d->memfd, d->ram_size) == 0);
    d->ram = mmap(NULL, d->ram_size, PROT_READ | PROT_WRITE, MAP_SHARED, d->memfd, 0);
    g_assert(d->ram != MAP_FAILED);
    d->nregions = o.nregions;
    for (unsigned i = 0; i < o.nregions; i++) {
        d->regions[i] = (GuestMemRegion){
            .gpa = o.base_gpa + i * (rsize + o.gap), .size = rsize, .hva = d->ram + i * rsize};
    }
    d->gm = guestmem_new(d->regions, d->nregions, NULL);
    g_assert(d->gm);
    g_mutex_init(&d->alloc_lock);
    d->next_gpa = o.base_gpa;
    return d;
}

void testdrv_free(TestDrv *d)
{
    if (!d) {
        return;
    }
    guestmem_free(d->gm);
    munmap(d->ram, d->ram_size);
    close(d->memfd);
    g_mutex_clear(&d->alloc_lock);
    g_free(d);
}

const GuestMem *testdrv_guestmem(TestDrv *d)
{
    return d->gm;
}

unsigned testdrv_nregions(TestDrv *d)
{
    return d->nregions;
}

uint64_t testdrv_region_gpa(TestDrv *d, unsigned i)
{
    g_assert(i < d->nregions);
    return d->regions[i].gpa;
}

uint64_t testdrv_region_size(TestDrv *d, unsigned i)
{
    g_assert(i < d->nregions);
    return d->regions[i].size;
}

int testdrv_memfd(TestDrv *d)
{
    return d->memfd;
}

uint64_t testdrv_region_fd_offset(TestDrv *d, unsigned i)
{
    g_assert(i < d->nregions);
    return (uint64_t)((uint8_t *)d->regions[i].hva - d->ram);
}

uint64_t testdrv_ram_end(TestDrv *d)
{
    const GuestMemRegion *r = &d->regions[d->nregions - 1];

    return r->gpa + r->size;
}

uint64_t testdrv_alloc(TestDrv *d, uint64_t size, uint64_t align)
{
    align = align ? align : 16;
    g_assert((align & (align - 1)) == 0);
    g_mutex_lock(&d->alloc_lock);
    for (unsigned i = 0; i < d->nregions; i++) {
        const GuestMemRegion *r = &d->regions[i];
        uint64_t limit = r->gpa + r->size - TESTDRV_TAIL_RESERVE;
        uint64_t start = MAX(d->next_gpa, r->gpa);

        start = (start + align - 1) & ~(align - 1);
        if (d->next_gpa < limit && start <= limit && size <= limit - start) {
            d->next_gpa = start + size;
            g_mutex_unlock(&d->alloc_lock);
            return start;
        }
    }
    g_error("testdrv: guest RAM exhausted allocating %" PRIu64 " bytes", size);
}

uint64_t testdrv_alloc_at_region_end(TestDrv *d, unsigned i, uint64_t size)
{
    g_assert(i < d->nregions && size <= TESTDRV_TAIL_RESERVE);
    return d->regions[i].gpa + d->regions[i].size - size;
}

uint64_t testdrv_alloc_mark(TestDrv *d)
{
    uint64_t mark;

    g_mutex_lock(&d->alloc_lock);
    mark = d->next_gpa;
    g_mutex_unlock(&d->alloc_lock);
    return mark;
}

void testdrv_alloc_reset(TestDrv *d, uint64_t mark)
{
    g_mutex_lock(&d->alloc_lock);
    d->next_gpa = mark;
    g_mutex_unlock(&d->alloc_lock);
}

/* Host iovecs for a RAM range; the test asserts it is RAM. */
static int testdrv_map(TestDrv *d, uint64_t gpa, size_t len, struct iovec *iov)
{
    int n = guestmem_map(d->gm, gpa, len, false, iov, TESTDRV_MAX_REGIONS);

    g_assert_cmpint(n, >=, 0);
    return n;
}

void testdrv_memwrite(TestDrv *d, uint64_t gpa, const void *buf, size_t len)
{
    struct iovec iov[TESTDRV_MAX_REGIONS];
    int n = testdrv_map(d, gpa, len, iov);
    const uint8_t *p = buf;

    for (int i = 0; i < n; i++) {
        memcpy(iov[i].iov_base, p, iov[i].iov_len);
        p += iov[i].iov_len;
    }
}

void testdrv_memread(TestDrv *d, uint64_t gpa, void *buf, size_t len)
{
    struct iovec iov[TESTDRV_MAX_REGIONS];
    int n = testdrv_map(d, gpa, len, iov);
    uint8_t *p = buf;

    for (int i = 0; i < n; i++) {
        memcpy(p, iov[i].iov_base, iov[i].iov_len);
        p += iov[i].iov_len;
    }
}

void testdrv_memset(TestDrv *d, uint64_t gpa, int c, size_t len)
{
    struct iovec iov[TESTDRV_MAX_REGIONS];
    int n = testdrv_map(d, gpa, len, iov);

    for (int i = 0; i < n; i++) {
        memset(iov[i].iov_base, c, iov[i].iov_len);
    }
}

uint8_t testdrv_readb(TestDrv *d, uint64_t gpa)
{
    uint8_t *p = guestmem_ptr(d->gm, gpa, 1);

    g_assert(p);
    return qatomic_read(p);
}

uint64_t testdrv_negotiate(uint64_t host, uint64_t wanted)
{
    return (host & wanted) | (host & (1ull << VIRTIO_F_VERSION_1));
}

/* ---- split virtqueue ---- */

struct TestVq {
    TestDrv *d;
    unsigned num;
    bool event_idx;
    bool auto_used_event;
    uint64_t desc_gpa, avail_gpa, used_gpa;
    struct vring_desc *desc;
    struct vring_avail *avail;
    struct vring_used *used;
    uint16_t avail_idx;  /* shadow of avail->idx */
    uint16_t kicked_idx; /* avail_idx at the last kick decision */
    uint16_t last_used;  /* next used slot to consume */
    uint16_t free_head;
    unsigned num_free;
    uint16_t *link;    /* free list and chain links, private to the driver */
    unsigned *chain_n; /* descriptors owned by a published head (0 = none) */
    uint64_t *ind_gpa; /* per-head indirect table, reused */
    unsigned *ind_cap;
    int kick_fd, call_fd;
};

TestVq *testvq_new(TestDrv *d, unsigned num, uint64_t features)
{
    TestVq *vq = g_new0(TestVq, 1);

    vq->d = d;
    vq->num = num;
    vq->event_idx = features & (1ull << VIRTIO_RING_F_EVENT_IDX);
    vq->auto_used_event = true;
    vq->desc_gpa = testdrv_alloc(d, 16ull * num, 4096);
    vq->avail_gpa = testdrv_alloc(d, 6 + 2ull * num, 2);
    vq->used_gpa = testdrv_alloc(d, 6 + 8ull * num, 4096);
    testdrv_memset(d, vq->desc_gpa, 0, 16ull * num);
    testdrv_memset(d, vq->avail_gpa, 0, 6 + 2ull * num);
    testdrv_memset(d, vq->used_gpa, 0, 6 + 8ull * num);
    vq->desc = guestmem_ptr(d->gm, vq->desc_gpa, 16ull * num);
    vq->avail = guestmem_ptr(d->gm, vq->avail_gpa, 6 + 2ull * num);
    vq->used = guestmem_ptr(d->gm, vq->used_gpa, 6 + 8ull * num);
    vq->link = g_new0(uint16_t, num);
    vq->chain_n = g_new0(unsigned, num);
    vq->ind_gpa = g_new0(uint64_t, num);
    vq->ind_cap = g_new0(unsigned, num);
    /*
     * Indirect tables for up to 16 entries are placed now, so that
     * testdrv_alloc_reset() by the test never recycles them.
     */
    for (unsigned i = 0; i < num; i++) {
        vq->link[i] = i + 1;
        vq->ind_cap[i] = MIN(num, 16u);
        vq->ind_gpa[i] = testdrv_alloc(d, 16ull * vq->ind_cap[i], 16);
    }
    vq->num_free = num;
    vq->kick_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    vq->call_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    g_assert(vq->kick_fd >= 0 && vq->call_fd >= 0);
    return vq;
}

void testvq_free(TestVq *vq)
{
    if (!vq) {
        return;
    }
    close(vq->kick_fd);
    close(vq->call_fd);
    g_free(vq->link);
    g_free(vq->chain_n);
    g_free(vq->ind_gpa);
    g_free(vq->ind_cap);
    g_free(vq);
}

TestDrv *testvq_drv(TestVq *vq)
{
    return vq->d;
}

unsigned testvq_num(TestVq *vq)
{
    return vq->num;
}

uint64_t testvq_desc_gpa(TestVq *vq)
{
    return vq->desc_gpa;
}

uint64_t testvq_avail_gpa(TestVq *vq)
{
    return vq->avail_gpa;
}

uint64_t testvq_used_gpa(TestVq *vq)
{
    return vq->used_gpa;
}

int testvq_kick_fd(TestVq *vq)
{
    return vq->kick_fd;
}

int testvq_call_fd(TestVq *vq)
{
    return vq->call_fd;
}

unsigned testvq_free_descs(TestVq *vq)
{
    return vq->num_free;
}

static void desc_store(struct vring_desc *table, unsigned i, uint64_t addr, uint32_t len,
                       uint16_t flags, uint16_t next)
{
    struct vring_desc d = {
        .addr = htole64(addr), .len = htole32(len), .flags = htole16(flags), .next = htole16(next)};

    memcpy(&table[i], &d, sizeof(d));
}

void testvq_set_desc(TestVq *vq, unsigned i, uint64_t addr, uint32_t len, uint16_t flags,
                     uint16_t next)
{
    g_assert(i < vq->num);
    desc_store(vq->desc, i, addr, len, flags, next);
}

void testdrv_write_table(TestDrv *d, uint64_t gpa, unsigned i, uint64_t addr, uint32_t len,
                         uint16_t flags, uint16_t next)
{
    struct vring_desc e = {
        .addr = htole64(addr), .len = htole32(len), .flags = htole16(flags), .next = htole16(next)};

    testdrv_memwrite(d, gpa + 16ull * i, &e, sizeof(e));
}

/* Take @n descriptors off the free list, linked through vq->link. */
static int take_descs(TestVq *vq, unsigned n)
{
    uint16_t head = vq->free_head, last = head;

    if (n == 0 || n > vq->num_free) {
        return -1;
    }
    for (unsigned i = 1; i < n; i++) {
        last = vq->link[last];
    }
    vq->free_head = vq->link[last];
    vq->num_free -= n;
    vq->chain_n[head] = n;
    return head;
}

int testvq_add_chain(TestVq *vq, const TestBuf *bufs, unsigned n)
{
    int head = take_descs(vq, n);
    uint16_t i;

    if (head < 0) {
        return -1;
    }
    i = head;
    for (unsigned k = 0; k < n; k++) {
        bool more = k + 1 < n;

        desc_store(vq->desc, i, bufs[k].gpa, bufs[k].len,
                   (bufs[k].write ? VRING_DESC_F_WRITE : 0) | (more ? VRING_DESC_F_NEXT : 0),
                   more ? vq->link[i] : 0);
        i = vq->link[i];
    }
    return head;
}

int testvq_add_indirect(TestVq *vq, const TestBuf *bufs, unsigned n)
{
    int head = take_descs(vq, 1);

    if (head < 0) {
        return -1;
    }
    if (vq->ind_cap[head] < n) {
        vq->ind_cap[head] = n;
        vq->ind_gpa[head] = testdrv_alloc(vq->d, 16ull * vq->ind_cap[head], 16);
    }
    for (unsigned k = 0; k < n; k++) {
        bool more = k + 1 < n;

        testdrv_write_table(vq->d, vq->ind_gpa[head], k, bufs[k].gpa, bufs[k].len,
                            (bufs[k].write ? VRING_DESC_F_WRITE : 0) |
                                (more ? VRING_DESC_F_NEXT : 0),
                            more ? k + 1 : 0);
    }
    desc_store(vq->desc, head, vq->ind_gpa[head], 16 * n, VRING_DESC_F_INDIRECT, 0);
    return head;
}

void testvq_set_avail_ring(TestVq *vq, uint16_t slot, uint16_t head)
{
    qatomic_set(&vq->avail->ring[slot & (vq->num - 1)], htole16(head));
}

void testvq_publish(TestVq *vq, uint16_t head)
{
    testvq_set_avail_ring(vq, vq->avail_idx, head);
    vq->avail_idx++;
    /*
     * Ring entry before the index. Pairs with smp_rmb() in virtqueue_pop()
     * between reading avail->idx and avail->ring[].
     */
    smp_wmb();
    qatomic_set(&vq->avail->idx, htole16(vq->avail_idx));
}

void testvq_set_avail_idx(TestVq *vq, uint16_t idx)
{
    vq->avail_idx = idx;
    /* Same pairing as testvq_publish(). */
    smp_wmb();
    qatomic_set(&vq->avail->idx, htole16(idx));
}

uint16_t testvq_avail_idx(TestVq *vq)
{
    return vq->avail_idx;
}

void testvq_set_avail_flags(TestVq *vq, uint16_t flags)
{
    qatomic_set(&vq->avail->flags, htole16(flags));
}

void testvq_set_used_event(TestVq *vq, uint16_t idx)
{
    qatomic_set(&vq->avail->ring[vq->num], htole16(idx));
}

uint16_t testvq_avail_event(TestVq *vq)
{
    return le16toh(qatomic_read((uint16_t *)&vq->used->ring[vq->num]));
}

uint16_t testvq_used_flags(TestVq *vq)
{
    return le16toh(qatomic_read(&vq->used->flags));
}

void testvq_set_auto_used_event(TestVq *vq, bool on)
{
    vq->auto_used_event = on;
}

static void kick_write(TestVq *vq)
{
    uint64_t one = 1;

    g_assert(write(vq->kick_fd, &one, sizeof(one)) == sizeof(one));
}

bool testvq_kick(TestVq *vq)
{
    uint16_t old = vq->kicked_idx, new = vq->avail_idx;
    bool need;

    /*
     * avail->idx store before reading the device's suppression state.
     * Pairs with smp_mb() in virtqueue_enable_notification().
     */
    smp_mb();
    vq->kicked_idx = new;
    if (vq->event_idx) {
        need = vring_need_event(testvq_avail_event(vq), new, old);
    } else {
        need = old != new && !(testvq_used_flags(vq) & VRING_USED_F_NO_NOTIFY);
    }
    if (need) {
        kick_write(vq);
    }
    return need;
}

void testvq_kick_force(TestVq *vq)
{
    vq->kicked_idx = vq->avail_idx;
    kick_write(vq);
}

uint16_t testvq_used_idx(TestVq *vq)
{
    return le16toh(qatomic_read(&vq->used->idx));
}

/* Return a published chain's descriptors to the free list. */
static void free_chain(TestVq *vq, uint16_t head)
{
    unsigned n = vq->chain_n[head];
    uint16_t last = head;

    if (n == 0) {
        return; /* raw chain: the test manages its descriptors */
    }
    for (unsigned i = 1; i < n; i++) {
        last = vq->link[last];
    }
    vq->link[last] = vq->free_head;
    vq->free_head = head;
    vq->num_free += n;
    vq->chain_n[head] = 0;
}

bool testvq_get_used(TestVq *vq, uint16_t *head, uint32_t *len)
{
    struct vring_used_elem e;

    if (testvq_used_idx(vq) == vq->last_used) {
        return false;
    }
    /*
     * Read the element only after the index that covers it. Pairs with
     * smp_wmb() in virtqueue_flush().
     */
    smp_rmb();
    e = vq->used->ring[vq->last_used & (vq->num - 1)];
    vq->last_used++;
    *head = le32toh(e.id);
    *len = le32toh(e.len);
    if (*head < vq->num) {
        free_chain(vq, *head);
    }
    if (vq->event_idx && vq->auto_used_event) {
        testvq_set_used_event(vq, vq->last_used);
        /*
         * used_event before re-reading used->idx (callers loop on
         * get_used). Pairs with smp_mb() in virtqueue_should_notify().
         */
        smp_mb();
    }
    return true;
}

uint64_t testvq_take_calls(TestVq *vq)
{
    uint64_t v;

    if (read(vq->call_fd, &v, sizeof(v)) != sizeof(v)) {
        return 0;
    }
    return v;
}

bool testvq_wait_call(TestVq *vq, int timeout_ms)
{
    struct pollfd p = {.fd = vq->call_fd, .events = POLLIN};

    if (poll(&p, 1, timeout_ms) != 1) {
        return false;
    }
    return testvq_take_calls(vq) > 0;
}

bool testvq_wait_used(TestVq *vq, int timeout_ms)
{
    gint64 deadline = g_get_monotonic_time() + (gint64)timeout_ms * 1000;

    while (testvq_used_idx(vq) == vq->last_used) {
        if (g_get_monotonic_time() > deadline) {
            return false;
        }
        g_usleep(20);
    }
    return true;
}

/* ---- virtio-blk ---- */

TestBlkReq testblk_prepare(TestVq *vq, uint32_t type, uint64_t sector, const void *data,
                           uint32_t len)
{
    struct virtio_blk_outhdr h = {.type = htole32(type), .ioprio = 0, .sector = htole64(sector)};
    TestBlkReq r = {.head = -1, .data_len = len};

    r.hdr_gpa = testdrv_alloc(vq->d, sizeof(h), 16);
    testdrv_memwrite(vq->d, r.hdr_gpa, &h, sizeof(h));
    if (len) {
        r.data_gpa = testdrv_alloc(vq->d, len, 512);
        if (data) {
            testdrv_memwrite(vq->d, r.data_gpa, data, len);
        } else {
            testdrv_memset(vq->d, r.data_gpa, 0, len);
        }
    }
    r.status_gpa = testdrv_alloc(vq->d, 1, 1);
    testdrv_memset(vq->d, r.status_gpa, 0xff, 1);
    return r;
}

TestBlkReq testblk_submit(TestVq *vq, uint32_t type, uint64_t sector, const void *data,
                          uint32_t len, bool indirect)
{
    TestBlkReq r = testblk_prepare(vq, type, sector, data, len);
    bool dev_writes = type == VIRTIO_BLK_T_IN || type == VIRTIO_BLK_T_GET_ID;
    TestBuf bufs[3];
    unsigned n = 0;

    bufs[n++] = (TestBuf){r.hdr_gpa, 16, false};
    if (len) {
        bufs[n++] = (TestBuf){r.data_gpa, len, dev_writes};
    }
    bufs[n++] = (TestBuf){r.status_gpa, 1, true};
    r.head = indirect ? testvq_add_indirect(vq, bufs, n) : testvq_add_chain(vq, bufs, n);
    if (r.head >= 0) {
        testvq_publish(vq, r.head);
    }
    return r;
}

uint8_t testblk_status(TestVq *vq, const TestBlkReq *r)
{
    return testdrv_readb(vq->d, r->status_gpa);
}
