/*
 * The in-process vhost-user front end (vufront.h): message framing, the
 * session in QEMU 7.2's order, one request at a time.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>

#include "vufront.h"

/* ---- front end: framing ---- */

int fe_connect(const char *path)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);

    g_assert_cmpint(s, >=, 0);
    g_strlcpy(sa.sun_path, path, sizeof(sa.sun_path));
    for (int i = 0; i < 500; i++) {
        if (connect(s, (struct sockaddr *)&sa, sizeof(sa)) == 0) {
            return s;
        }
        g_usleep(10000);
    }
    g_error("connect %s: %s", path, g_strerror(errno));
}

void fe_send_raw(int s, const void *buf, size_t len, const int *fds, unsigned nfds)
{
    union {
        char b[CMSG_SPACE(16 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n;

    g_assert_cmpuint(nfds, <=, 16);
    if (nfds) {
        struct cmsghdr *c;

        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.b;
        mh.msg_controllen = CMSG_SPACE(nfds * sizeof(int));
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(nfds * sizeof(int));
        memcpy(CMSG_DATA(c), fds, nfds * sizeof(int));
    }
    n = sendmsg(s, &mh, MSG_NOSIGNAL);
    /* The daemon may already have dropped us (hostile cases): EPIPE/ECONNRESET are fine. */
    g_assert_true(n == (ssize_t)len || (n < 0 && (errno == EPIPE || errno == ECONNRESET)));
}

void fe_send(Fe *fe, uint32_t req, uint32_t flags, const void *payload, uint32_t size,
                    const int *fds, unsigned nfds)
{
    uint8_t buf[12 + 512];
    uint32_t h[3] = {req, 1 | flags, size};

    g_assert_cmpuint(size, <=, 512);
    memcpy(buf, h, 12);
    if (size) {
        memcpy(buf + 12, payload, size); /* payload may be NULL when size is 0 */
    }
    fe_send_raw(fe->s, buf, 12 + size, fds, nfds);
}

bool fe_read_full(int s, void *buf, size_t len, int timeout_ms)
{
    size_t got = 0;

    while (got < len) {
        struct pollfd p = {.fd = s, .events = POLLIN};
        ssize_t n;

        if (poll(&p, 1, timeout_ms) != 1) {
            return false;
        }
        n = read(s, (uint8_t *)buf + got, len - got);
        if (n <= 0) {
            return false;
        }
        got += (size_t)n;
    }
    return true;
}

/* A reply with QEMU's checks: same request, flags exactly 0x5, exact size. */
void fe_reply(Fe *fe, uint32_t req, void *payload, uint32_t size)
{
    uint32_t h[3];

    g_assert_true(fe_read_full(fe->s, h, 12, 10000));
    g_assert_cmpuint(h[0], ==, req);
    g_assert_cmphex(h[1], ==, 0x5);
    g_assert_cmpuint(h[2], ==, size);
    g_assert_true(fe_read_full(fe->s, payload, size, 10000));
}

uint64_t fe_get_u64(Fe *fe, uint32_t req)
{
    uint64_t v;

    fe_send(fe, req, 0, NULL, 0, NULL, 0);
    fe_reply(fe, req, &v, 8);
    return v;
}

void fe_set_u64(Fe *fe, uint32_t req, uint64_t v)
{
    fe_send(fe, req, 0, &v, 8, NULL, 0);
}

void fe_ack(Fe *fe, uint32_t req)
{
    uint64_t v;

    fe_reply(fe, req, &v, 8);
    g_assert_cmpuint(v, ==, 0);
}

/* The daemon closed the connection (after a bad message). */
bool fe_dropped(Fe *fe)
{
    char c;

    for (;;) {
        struct pollfd p = {.fd = fe->s, .events = POLLIN};
        ssize_t n;

        if (poll(&p, 1, 10000) != 1) {
            return false;
        }
        n = read(fe->s, &c, 1);
        if (n == 0 || (n < 0 && errno == ECONNRESET)) {
            return true;
        }
        if (n < 0) {
            return false;
        }
        /* a reply to an earlier message: skip it */
    }
}

bool fe_backend_recv(Fe *fe, uint32_t hdr[3], int timeout_ms)
{
    uint8_t payload[64];

    g_assert_cmpint(fe->backend, >=, 0);
    if (!fe_read_full(fe->backend, hdr, 12, timeout_ms)) {
        return false;
    }
    g_assert_cmpuint(hdr[2], <=, sizeof(payload));
    return fe_read_full(fe->backend, payload, hdr[2], timeout_ms);
}

void fe_backend_ack(Fe *fe, uint32_t req, uint64_t v)
{
    uint32_t h[3] = {req, 0x5, 8};
    uint8_t buf[20];

    memcpy(buf, h, 12);
    memcpy(buf + 12, &v, 8);
    fe_send_raw(fe->backend, buf, sizeof(buf), NULL, 0);
}

/* ---- front end: session ---- */

uint64_t uva_of(Fe *fe, uint64_t gpa)
{
    for (unsigned i = 0; i < testdrv_nregions(fe->d); i++) {
        uint64_t g = testdrv_region_gpa(fe->d, i);

        if (gpa >= g && gpa - g < testdrv_region_size(fe->d, i)) {
            return FAKE_UVA + i * 0x40000000ull + (gpa - g);
        }
    }
    g_assert_not_reached();
}

void fe_mem_table(Fe *fe, uint32_t flags)
{
    uint8_t p[8 + 8 * 32] = {0};
    int fds[8];
    uint32_t n = testdrv_nregions(fe->d);

    memcpy(p, &n, 4);
    for (unsigned i = 0; i < n; i++) {
        uint64_t r[4] = {testdrv_region_gpa(fe->d, i), testdrv_region_size(fe->d, i),
                         FAKE_UVA + i * 0x40000000ull, testdrv_region_fd_offset(fe->d, i)};

        memcpy(p + 8 + 32 * i, r, 32);
        fds[i] = testdrv_memfd(fe->d);
    }
    fe_send(fe, SET_MEM_TABLE, flags, p, 8 + 32 * n, fds, n);
}

void fe_vring(Fe *fe, unsigned i, unsigned num)
{
    uint32_t st[2] = {i, num};
    struct {
        uint32_t index, flags;
        uint64_t desc, used, avail, log;
    } a = {i,
           0,
           uva_of(fe, testvq_desc_gpa(fe->vq[i])),
           uva_of(fe, testvq_used_gpa(fe->vq[i])),
           uva_of(fe, testvq_avail_gpa(fe->vq[i])),
           0};
    uint64_t v = i;
    int kick = testvq_kick_fd(fe->vq[i]), call = testvq_call_fd(fe->vq[i]);

    fe_send(fe, SET_VRING_NUM, 0, st, 8, NULL, 0);
    /* As QEMU after a back-end crash: continue at the used index (0 for a new ring). */
    st[1] = testvq_used_idx(fe->vq[i]);
    fe_send(fe, SET_VRING_BASE, 0, st, 8, NULL, 0);
    fe_send(fe, SET_VRING_ADDR, 0, &a, sizeof(a), NULL, 0);
    fe_send(fe, SET_VRING_KICK, 0, &v, 8, &kick, 1);
    fe_send(fe, SET_VRING_CALL, 0, &v, 8, &call, 1);
}

void fe_enable(Fe *fe, unsigned i, unsigned on)
{
    uint32_t st[2] = {i, on};

    fe_send(fe, SET_VRING_ENABLE, NEED_REPLY, st, 8, NULL, 0);
    fe_ack(fe, SET_VRING_ENABLE);
}

bool fe_want_inflight;
uint64_t fe_want_proto;
static bool fe_want_backend_req;

/* Connect and negotiate up to (not including) the memory table. */
Fe *fe_open_queues(const char *sock, unsigned nregions, unsigned min_queues)
{
    Fe *fe = g_new0(Fe, 1);
    TestDrvOpts o = {.ram_size = 32 << 20, .nregions = nregions};

    fe->min_queues = min_queues;
    fe->backend = -1;
    fe->s = fe_connect(sock);
    fe->d = testdrv_new(&o);
    fe_handshake(fe);
    return fe;
}

/* GET_FEATURES .. SET_OWNER, in QEMU 7.2's order. */
void fe_handshake(Fe *fe)
{
    fe->host_features = fe_get_u64(fe, GET_FEATURES);
    g_assert_true(fe->host_features & F_PROTOCOL_FEATURES);
    uint64_t want = P_MQ | P_REPLY_ACK | P_CONFIG | (fe_want_inflight ? P_INFLIGHT : 0) |
                    (fe_want_backend_req ? P_BACKEND_REQ : 0) | fe_want_proto;

    fe->proto = fe_get_u64(fe, GET_PROTOCOL_FEATURES);
    fe->proto &= want;
    g_assert_cmphex(fe->proto, ==, want);
    fe_set_u64(fe, SET_PROTOCOL_FEATURES, fe->proto);
    g_assert_cmpuint(fe_get_u64(fe, GET_QUEUE_NUM), >=, fe->min_queues);
    if (fe_want_backend_req) {
        /* QEMU 7.2: a socketpair, the back end's end sent (and closed here), before SET_OWNER. */
        int sv[2];

        g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), ==, 0);
        fe_send(fe, SET_BACKEND_REQ_FD, NEED_REPLY, NULL, 0, &sv[1], 1);
        close(sv[1]);
        fe_ack(fe, SET_BACKEND_REQ_FD);
        if (fe->backend >= 0) {
            close(fe->backend);
        }
        fe->backend = sv[0];
    }
    fe_send(fe, SET_OWNER, 0, NULL, 0, NULL, 0);
    fe->features = testdrv_negotiate(
        fe->host_features, (1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_RING_F_EVENT_IDX) |
                               (1ull << VIRTIO_RING_F_INDIRECT_DESC) |
                               (1ull << VIRTIO_BLK_F_SEG_MAX) | (1ull << VIRTIO_BLK_F_BLK_SIZE) |
                               (1ull << VIRTIO_BLK_F_FLUSH) | (1ull << VIRTIO_BLK_F_CONFIG_WCE) |
                               (1ull << VIRTIO_BLK_F_DISCARD) |
                               (1ull << VIRTIO_BLK_F_WRITE_ZEROES) | (1ull << VIRTIO_BLK_F_MQ));
}

/* The rest of QEMU 7.2's start sequence: features, memory, rings, enable. */
void fe_start(Fe *fe, unsigned nq)
{
    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    fe_mem_table(fe, NEED_REPLY);
    fe_ack(fe, SET_MEM_TABLE);
    fe->nq = nq;
    for (unsigned i = 0; i < nq; i++) {
        fe->vq[i] = testvq_new(fe->d, 128, fe->features);
        fe_vring(fe, i, 128);
    }
    for (unsigned i = 0; i < nq; i++) {
        fe_enable(fe, i, 1);
    }
}

void fe_close(Fe *fe)
{
    close(fe->s);
    if (fe->backend >= 0) {
        close(fe->backend);
    }
    for (unsigned i = 0; i < FE_NQ; i++) {
        if (fe->vq[i]) {
            testvq_free(fe->vq[i]);
        }
    }
    testdrv_free(fe->d);
    g_free(fe);
}

uint8_t fe_io(Fe *fe, unsigned q, uint32_t type, uint64_t sector, void *data, uint32_t len)
{
    TestBlkReq r = testblk_submit(fe->vq[q], type, sector, data, len, len > 4096);
    uint16_t head;
    uint32_t ulen;

    g_assert_cmpint(r.head, >=, 0);
    testvq_kick_force(fe->vq[q]);
    g_assert_true(testvq_wait_used(fe->vq[q], 10000));
    g_assert_true(testvq_get_used(fe->vq[q], &head, &ulen));
    g_assert_cmpuint(head, ==, (uint16_t)r.head);
    if (type == VIRTIO_BLK_T_IN && data) {
        testdrv_memread(fe->d, r.data_gpa, data, len);
    }
    return testblk_status(fe->vq[q], &r);
}

Fe *fe_open_backend_req(const char *sock, unsigned nregions)
{
    Fe *fe;

    fe_want_backend_req = true;
    fe = fe_open(sock, nregions);
    fe_want_backend_req = false;
    return fe;
}
