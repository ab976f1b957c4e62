/*
 * vhost-user back end, protocol half: framing, validation, memory table,
 * ring state (see vhost-user-int.h and docs/vhost-user.md).
 *
 * Reading never blocks: the socket is non-blocking and a message is
 * assembled in a per-connection buffer across as many reads as it takes;
 * fds that arrive with its bytes are collected until it is complete. Each
 * read asks for at most the rest of the current message, so fds of the next
 * message are never mixed into this one.
 *
 * The back-end channel (SET_BACKEND_REQ_FD) carries CONFIG_CHANGE_MSG after
 * a resize. Sending never blocks, and with REPLY_ACK the answer is taken
 * from the main loop (vhost_user_backend_read), never waited for in place:
 * QEMU answers only after its own GET_CONFIG round trip on the main socket.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/virtio_config.h>

#include "vhost-user-int.h"
#include "util/barrier.h"
#include "util/error-report.h"

#define VU_ERROR vhost_user_error_quark()
static GQuark vhost_user_error_quark(void)
{
    return g_quark_from_static_string("vblk-vhost-user-error");
}

typedef struct VuRegion {
    VhostUserMemRegion r;
    void *map; /* mmap() result */
    size_t map_len;
    uint8_t *hva; /* host address of r.gpa */
} VuRegion;

typedef struct VuRing {
    unsigned num; /* 0: not set */
    uint16_t base;
    bool addr_set;
    uint64_t desc, avail, used; /* front-end virtual addresses */
    int kick_fd, call_fd;
    bool started; /* a kick fd was given (and no GET_VRING_BASE since) */
    bool enabled;
} VuRing;

struct VhostUser {
    const char *id;
    unsigned num_queues;
    const VhostUserDevOps *ops;
    void *opaque;

    int fd;
    /* message being assembled */
    uint8_t buf[sizeof(VhostUserHdr) + VHOST_USER_MAX_PAYLOAD];
    size_t have;
    int fds[VHOST_USER_MAX_FDS];
    unsigned nfds;

    /* session */
    bool owner;
    bool features_set;
    uint64_t features;       /* acked, bit 30 included */
    uint64_t proto_features; /* acked */
    VuRegion regions[VHOST_USER_MAX_MEM_SLOTS];
    unsigned nregions;
    GuestMem *gm;
    VuRing rings[VHOST_USER_MAX_QUEUES];
    /* SET_INFLIGHT_FD: the region's mapping, queues and ring size */
    void *inflight_map;
    size_t inflight_map_len;
    uint8_t *inflight; /* start of queue 0's part */
    unsigned inflight_nq, inflight_qsize;
    unsigned running; /* rings the device serves (0: stopped) */
    bool restart;     /* something the running device uses changed */
    uint8_t status;   /* virtio device status (SET_STATUS), 0 after a reset */
    /*
     * DEVICE_NEEDS_RESET, the device's own status bit: set by
     * vhost_user_set_needs_reset() in whichever thread a ring broke (atomic),
     * read and cleared here. It is cleared only with the device stopped, so
     * no ring can break again between the clear and the next start.
     */
    bool needs_reset;
    /* back-end channel (SET_BACKEND_REQ_FD) */
    int backend_fd;     /* -1: none */
    bool backend_wait;  /* a CONFIG_CHANGE_MSG awaits its answer */
    bool backend_again; /* the config changed again meanwhile: send once more */
    uint8_t backend_buf[sizeof(VhostUserHdr) + sizeof(uint64_t)];
    size_t backend_have;

    VhostUserStats stats;
};

static const char *const vu_names[VHOST_USER_REQ_MAX] = {
    [VHOST_USER_GET_FEATURES] = "GET_FEATURES",
    [VHOST_USER_SET_FEATURES] = "SET_FEATURES",
    [VHOST_USER_SET_OWNER] = "SET_OWNER",
    [VHOST_USER_RESET_OWNER] = "RESET_OWNER",
    [VHOST_USER_SET_MEM_TABLE] = "SET_MEM_TABLE",
    [VHOST_USER_SET_LOG_BASE] = "SET_LOG_BASE",
    [VHOST_USER_SET_LOG_FD] = "SET_LOG_FD",
    [VHOST_USER_SET_VRING_NUM] = "SET_VRING_NUM",
    [VHOST_USER_SET_VRING_ADDR] = "SET_VRING_ADDR",
    [VHOST_USER_SET_VRING_BASE] = "SET_VRING_BASE",
    [VHOST_USER_GET_VRING_BASE] = "GET_VRING_BASE",
    [VHOST_USER_SET_VRING_KICK] = "SET_VRING_KICK",
    [VHOST_USER_SET_VRING_CALL] = "SET_VRING_CALL",
    [VHOST_USER_SET_VRING_ERR] = "SET_VRING_ERR",
    [VHOST_USER_GET_PROTOCOL_FEATURES] = "GET_PROTOCOL_FEATURES",
    [VHOST_USER_SET_PROTOCOL_FEATURES] = "SET_PROTOCOL_FEATURES",
    [VHOST_USER_GET_QUEUE_NUM] = "GET_QUEUE_NUM",
    [VHOST_USER_SET_VRING_ENABLE] = "SET_VRING_ENABLE",
    [19] = "SEND_RARP",
    [20] = "NET_SET_MTU",
    [VHOST_USER_SET_BACKEND_REQ_FD] = "SET_BACKEND_REQ_FD",
    [22] = "IOTLB_MSG",
    [23] = "SET_VRING_ENDIAN",
    [VHOST_USER_GET_CONFIG] = "GET_CONFIG",
    [VHOST_USER_SET_CONFIG] = "SET_CONFIG",
    [26] = "CREATE_CRYPTO_SESSION",
    [27] = "CLOSE_CRYPTO_SESSION",
    [28] = "POSTCOPY_ADVISE",
    [29] = "POSTCOPY_LISTEN",
    [30] = "POSTCOPY_END",
    [VHOST_USER_GET_INFLIGHT_FD] = "GET_INFLIGHT_FD",
    [VHOST_USER_SET_INFLIGHT_FD] = "SET_INFLIGHT_FD",
    [33] = "GPU_SET_SOCKET",
    [VHOST_USER_RESET_DEVICE] = "RESET_DEVICE",
    [35] = "VRING_KICK",
    [VHOST_USER_GET_MAX_MEM_SLOTS] = "GET_MAX_MEM_SLOTS",
    [VHOST_USER_ADD_MEM_REG] = "ADD_MEM_REG",
    [VHOST_USER_REM_MEM_REG] = "REM_MEM_REG",
    [VHOST_USER_SET_STATUS] = "SET_STATUS",
    [VHOST_USER_GET_STATUS] = "GET_STATUS",
};

/* Context: any thread */
const char *vhost_user_request_name(uint32_t req)
{
    return req < VHOST_USER_REQ_MAX ? vu_names[req] : NULL;
}

static uint64_t vu_protocol_features_offered(void)
{
    return (1ull << VHOST_USER_PROTOCOL_F_MQ) | (1ull << VHOST_USER_PROTOCOL_F_REPLY_ACK) |
           (1ull << VHOST_USER_PROTOCOL_F_BACKEND_REQ) | (1ull << VHOST_USER_PROTOCOL_F_CONFIG) |
           (1ull << VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD) |
           (1ull << VHOST_USER_PROTOCOL_F_RESET_DEVICE) |
           (1ull << VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS) |
           (1ull << VHOST_USER_PROTOCOL_F_STATUS);
}

static bool vu_has_proto(const VhostUser *vu, unsigned bit)
{
    return vu->proto_features & (1ull << bit);
}

/* Context: control thread */
VhostUser *vhost_user_new(const char *id, unsigned num_queues, const VhostUserDevOps *ops,
                          void *opaque)
{
    VhostUser *vu = g_new0(VhostUser, 1);

    g_assert(num_queues >= 1 && num_queues <= VHOST_USER_MAX_QUEUES);
    vu->id = id;
    vu->num_queues = num_queues;
    vu->ops = ops;
    vu->opaque = opaque;
    vu->fd = -1;
    vu->backend_fd = -1;
    for (unsigned i = 0; i < VHOST_USER_MAX_QUEUES; i++) {
        vu->rings[i].kick_fd = vu->rings[i].call_fd = -1;
    }
    return vu;
}

/* Context: control thread */
void vhost_user_free(VhostUser *vu)
{
    if (!vu) {
        return;
    }
    vhost_user_detach(vu);
    g_free(vu);
}

/* Context: control thread */
void vhost_user_attach(VhostUser *vu, int fd)
{
    g_assert(vu->fd < 0);
    vu->fd = fd;
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    vu->stats.connections++;
}

/* Context: control thread */
int vhost_user_conn_fd(const VhostUser *vu)
{
    return vu->fd;
}

/* Context: any thread (relaxed snapshot) */
void vhost_user_get_stats(const VhostUser *vu, VhostUserStats *st)
{
    *st = vu->stats;
    st->running = vu->running;
}

static void vu_close_fd(int *fd)
{
    if (*fd >= 0) {
        close(*fd);
        *fd = -1;
    }
}

static void vu_drop_msg_fds(VhostUser *vu)
{
    for (unsigned i = 0; i < vu->nfds; i++) {
        vu_close_fd(&vu->fds[i]);
    }
    vu->nfds = 0;
}

/* ---- back-end channel ---- */

static void vu_backend_set_timer(VhostUser *vu, int timeout_ms)
{
    if (vu->ops->backend_timer) {
        vu->ops->backend_timer(vu->opaque, timeout_ms);
    }
}

/* Stop watching, close, forget an awaited answer. */
static void vu_backend_close(VhostUser *vu)
{
    if (vu->backend_fd >= 0 && vu->ops->backend_watch) {
        vu->ops->backend_watch(vu->opaque, vu->backend_fd, false);
    }
    vu_close_fd(&vu->backend_fd);
    if (vu->backend_wait) {
        vu_backend_set_timer(vu, 0);
    }
    vu->backend_wait = false;
    vu->backend_again = false;
    vu->backend_have = 0;
}

/* A channel fault that is not a protocol violation: one line, the channel is closed. */
static void G_GNUC_PRINTF(2, 3) vu_backend_fail(VhostUser *vu, const char *fmt, ...)
{
    g_autofree char *msg = NULL;
    va_list ap;

    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    error_report_id(vu->id, "vhost-user back-end channel: %s; closing the channel", msg);
    vu_backend_close(vu);
}

/* Send one CONFIG_CHANGE_MSG without blocking. */
static bool vu_backend_send_config_change(VhostUser *vu)
{
    bool ack = vu_has_proto(vu, VHOST_USER_PROTOCOL_F_REPLY_ACK);
    VhostUserHdr h = {.request = VHOST_USER_BACKEND_CONFIG_CHANGE_MSG,
                      .flags = VHOST_USER_VERSION | (ack ? VHOST_USER_FLAG_NEED_REPLY : 0),
                      .size = 0};
    ssize_t n;

    do {
        n = send(vu->backend_fd, &h, sizeof(h), MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)sizeof(h)) {
        /* A short write leaves half a message on the channel: it cannot be used again. */
        vu_backend_fail(vu, "cannot send VHOST_USER_BACKEND_CONFIG_CHANGE_MSG: %s",
                        n < 0 ? g_strerror(errno) : "short write");
        return false;
    }
    if (ack) {
        vu->backend_wait = true;
        vu->backend_have = 0;
        vu_backend_set_timer(vu, VHOST_USER_BACKEND_REPLY_TIMEOUT_MS);
    }
    return true;
}

/* Context: control thread */
bool vhost_user_config_changed(VhostUser *vu)
{
    if (vu->fd < 0 || vu->backend_fd < 0 || !vu_has_proto(vu, VHOST_USER_PROTOCOL_F_BACKEND_REQ) ||
        !vu_has_proto(vu, VHOST_USER_PROTOCOL_F_CONFIG)) {
        return false;
    }
    if (vu->backend_wait) {
        vu->backend_again = true; /* the front end reads the whole config space anyway */
        return true;
    }
    return vu_backend_send_config_change(vu);
}

/* Context: control thread */
bool vhost_user_backend_read(VhostUser *vu)
{
    union {
        char buf[CMSG_SPACE(VHOST_USER_MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov;
    struct msghdr mh;
    const char *bad = NULL;
    unsigned nfds = 0;
    VhostUserHdr h;
    uint64_t v;
    ssize_t n;

    if (vu->backend_fd < 0) {
        return true;
    }
    /* At most the rest of the awaited reply (1 byte when none is: anything is too much). */
    iov.iov_base = vu->backend_buf + vu->backend_have;
    iov.iov_len = vu->backend_wait ? sizeof(vu->backend_buf) - vu->backend_have : 1;
    mh = (struct msghdr){.msg_iov = &iov,
                         .msg_iovlen = 1,
                         .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf)};
    do {
        n = recvmsg(vu->backend_fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return true;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); n >= 0 && c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
                int fd;

                memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
                close(fd);
                nfds++;
            }
        }
    }
    if (n < 0) {
        vu_backend_fail(vu, "recvmsg: %s", g_strerror(errno));
        return true;
    }
    if (n == 0) {
        if (vu->backend_wait) {
            vu_backend_fail(vu, "the front end closed it before answering "
                                "VHOST_USER_BACKEND_CONFIG_CHANGE_MSG");
        } else {
            vu_backend_fail(vu, "the front end closed it");
        }
        return true;
    }
    if (nfds || (mh.msg_flags & MSG_CTRUNC)) {
        bad = "fds attached to the answer";
    } else if (!vu->backend_wait) {
        bad = "data while no answer is awaited";
    }
    vu->backend_have += (size_t)n;
    if (!bad && vu->backend_have >= sizeof(h)) {
        memcpy(&h, vu->backend_buf, sizeof(h));
        if (h.request != VHOST_USER_BACKEND_CONFIG_CHANGE_MSG ||
            h.flags != (VHOST_USER_VERSION | VHOST_USER_FLAG_REPLY) || h.size != sizeof(v)) {
            bad = "not the answer to VHOST_USER_BACKEND_CONFIG_CHANGE_MSG (request 2, flags "
                  "0x5, 8 bytes)";
        }
    }
    if (bad) {
        error_report_id(vu->id, "vhost-user back-end channel: %s; dropping the connection", bad);
        vu->stats.bad++;
        return false;
    }
    if (vu->backend_have < sizeof(vu->backend_buf)) {
        return true; /* the rest later */
    }
    memcpy(&v, vu->backend_buf + sizeof(h), sizeof(v));
    vu->backend_wait = false;
    vu->backend_have = 0;
    vu_backend_set_timer(vu, 0);
    if (v) {
        error_report_id(vu->id,
                        "vhost-user back-end channel: the front end answered "
                        "VHOST_USER_BACKEND_CONFIG_CHANGE_MSG with %" PRIu64 " (failure)",
                        v);
    }
    if (vu->backend_again) {
        vu->backend_again = false;
        vu_backend_send_config_change(vu);
    }
    return true;
}

/* Context: control thread */
void vhost_user_backend_timeout(VhostUser *vu)
{
    if (vu->backend_wait) {
        vu_backend_fail(vu, "no answer to VHOST_USER_BACKEND_CONFIG_CHANGE_MSG within %d ms",
                        VHOST_USER_BACKEND_REPLY_TIMEOUT_MS);
    }
}

/* ---- device start/stop ---- */

static void vu_device_stop(VhostUser *vu)
{
    uint16_t last[VHOST_USER_MAX_QUEUES];

    if (!vu->running) {
        return;
    }
    vu->ops->stop(vu->opaque, last, vu->running);
    for (unsigned i = 0; i < vu->running; i++) {
        vu->rings[i].base = last[i];
    }
    vu->running = 0;
}

/* Front-end virtual address range [uva, uva + len) -> guest-physical, inside one region. */
static bool vu_uva_to_gpa(VhostUser *vu, uint64_t uva, uint64_t len, uint64_t *gpa)
{
    for (unsigned i = 0; i < vu->nregions; i++) {
        const VhostUserMemRegion *r = &vu->regions[i].r;

        if (uva >= r->uva && uva - r->uva < r->size && len <= r->size - (uva - r->uva)) {
            *gpa = r->gpa + (uva - r->uva);
            return true;
        }
    }
    return false;
}

/*
 * With STATUS negotiated the front end says when the device may run: rings
 * are served only while DRIVER_OK is set and FAILED is not (QEMU 7.2 sends
 * DRIVER_OK after the last ring's kick and enable, and 0 when it stops).
 * Without STATUS the ring states alone decide.
 */
static bool vu_driver_ok(const VhostUser *vu)
{
    if (!vu_has_proto(vu, VHOST_USER_PROTOCOL_F_STATUS)) {
        return true;
    }
    return (vu->status & VIRTIO_CONFIG_S_DRIVER_OK) && !(vu->status & VIRTIO_CONFIG_S_FAILED);
}

static bool vu_ring_ready(const VhostUser *vu, unsigned i)
{
    const VuRing *r = &vu->rings[i];

    return r->started && r->enabled && r->addr_set && r->num;
}

/* Serve rings 0..n-1 that are ready (started, enabled, configured). */
static bool vu_device_update(VhostUser *vu, GError **errp)
{
    VhostUserRing rings[VHOST_USER_MAX_QUEUES];
    unsigned n = 0;

    while (n < vu->num_queues && vu_ring_ready(vu, n)) {
        n++;
    }
    if (!vu->features_set || !vu->gm || !vu_driver_ok(vu)) {
        n = 0;
    }
    if (vu->running == n && !vu->restart) {
        return true;
    }
    vu_device_stop(vu);
    vu->restart = false;
    if (!n) {
        return true;
    }
    for (unsigned i = 0; i < n; i++) {
        VuRing *r = &vu->rings[i];
        VhostUserRing *o = &rings[i];

        o->num = r->num;
        if (!vu_uva_to_gpa(vu, r->desc, 16ull * r->num, &o->desc_gpa) ||
            !vu_uva_to_gpa(vu, r->avail, 6 + 2ull * r->num, &o->avail_gpa) ||
            !vu_uva_to_gpa(vu, r->used, 6 + 8ull * r->num, &o->used_gpa)) {
            g_set_error(errp, VU_ERROR, EFAULT, "ring %u is not inside one memory region", i);
            return false;
        }
        o->last_avail_idx = r->base;
        o->kick_fd = r->kick_fd;
        o->call_fd = r->call_fd;
        o->inflight = NULL;
        o->inflight_desc_num = 0;
        if (vu->inflight) {
            /* Every served ring is tracked, or a kill could lose its requests. */
            if (i >= vu->inflight_nq || r->num > vu->inflight_qsize) {
                g_set_error(errp, VU_ERROR, EINVAL,
                            "ring %u (size %u) is not covered by the inflight region (%u queues "
                            "of %u)",
                            i, r->num, vu->inflight_nq, vu->inflight_qsize);
                return false;
            }
            o->inflight =
                (VhostUserInflightQueue *)(vu->inflight +
                                           i * vhost_user_inflight_queue_bytes(vu->inflight_qsize));
            o->inflight_desc_num = vu->inflight_qsize;
        }
    }
    if (!vu->ops->start(vu->opaque, vu->gm, rings, n, errp)) {
        return false;
    }
    vu->running = n;
    return true;
}

/* ---- memory ---- */

static void vu_region_unmap(VuRegion *reg)
{
    if (reg->map) {
        munmap(reg->map, reg->map_len);
        reg->map = NULL;
    }
}

/* Rebuild the GuestMem from the regions; the device must be stopped. */
static bool vu_mem_rebuild(VhostUser *vu, GError **errp)
{
    GuestMemRegion gr[VHOST_USER_MAX_MEM_SLOTS];

    g_assert(!vu->running);
    g_clear_pointer(&vu->gm, guestmem_free);
    if (!vu->nregions) {
        return true;
    }
    for (unsigned i = 0; i < vu->nregions; i++) {
        gr[i] = (GuestMemRegion){
            .gpa = vu->regions[i].r.gpa, .size = vu->regions[i].r.size, .hva = vu->regions[i].hva};
    }
    vu->gm = guestmem_new(gr, vu->nregions, errp);
    return vu->gm != NULL;
}

/* Check @r against itself and the regions in @others (GPA and UVA overlap, wrap). */
static bool vu_region_check(const VhostUserMemRegion *r, const VuRegion *others, unsigned n,
                            GError **errp)
{
    if (r->size == 0) {
        g_set_error(errp, VU_ERROR, EINVAL, "empty memory region");
        return false;
    }
    if (r->size - 1 > UINT64_MAX - r->gpa || r->size - 1 > UINT64_MAX - r->uva ||
        r->size - 1 > UINT64_MAX - r->mmap_offset || r->size > SIZE_MAX / 2) {
        g_set_error(errp, VU_ERROR, EINVAL, "memory region at 0x%" PRIx64 " wraps around", r->gpa);
        return false;
    }
    for (unsigned i = 0; i < n; i++) {
        const VhostUserMemRegion *o = &others[i].r;
        bool gpa_apart = r->gpa - o->gpa >= o->size && o->gpa - r->gpa >= r->size;
        bool uva_apart = r->uva - o->uva >= o->size && o->uva - r->uva >= r->size;

        if (!gpa_apart || !uva_apart) {
            g_set_error(errp, VU_ERROR, EINVAL,
                        "memory region at 0x%" PRIx64 " overlaps the one at 0x%" PRIx64, r->gpa,
                        o->gpa);
            return false;
        }
    }
    return true;
}

/* Map @fd for @r into @out (fd not consumed). */
static bool vu_region_map(const VhostUserMemRegion *r, int fd, VuRegion *out, GError **errp)
{
    long page = sysconf(_SC_PAGESIZE);
    uint64_t map_off = r->mmap_offset & ~((uint64_t)page - 1);
    uint64_t delta = r->mmap_offset - map_off;
    struct stat st;
    void *p;

    if (fstat(fd, &st) < 0 || st.st_size < 0) {
        g_set_error(errp, VU_ERROR, EINVAL, "memory fd: cannot stat: %s", g_strerror(errno));
        return false;
    }
    /* Mapping past the end of the file would fault on access: the file must cover it. */
    if (r->mmap_offset > (uint64_t)st.st_size || r->size > (uint64_t)st.st_size - r->mmap_offset) {
        g_set_error(errp, VU_ERROR, EINVAL,
                    "memory region at 0x%" PRIx64 ": offset 0x%" PRIx64 " + size 0x%" PRIx64
                    " is beyond the end of its fd (0x%" PRIx64 ")",
                    r->gpa, r->mmap_offset, r->size, (uint64_t)st.st_size);
        return false;
    }
    p = mmap(NULL, r->size + delta, PROT_READ | PROT_WRITE, MAP_SHARED, fd, (off_t)map_off);
    if (p == MAP_FAILED) {
        g_set_error(errp, VU_ERROR, errno, "memory region at 0x%" PRIx64 ": mmap: %s", r->gpa,
                    g_strerror(errno));
        return false;
    }
    out->r = *r;
    out->map = p;
    out->map_len = r->size + delta;
    out->hva = (uint8_t *)p + delta;
    return true;
}

static void vu_mem_clear(VhostUser *vu)
{
    for (unsigned i = 0; i < vu->nregions; i++) {
        vu_region_unmap(&vu->regions[i]);
    }
    vu->nregions = 0;
    g_clear_pointer(&vu->gm, guestmem_free);
}

/* ---- replies ---- */

/* Send a reply, with @fd attached when >= 0 (not consumed). */
static bool vu_send_fd(VhostUser *vu, uint32_t request, const void *payload, uint32_t size, int fd,
                       GError **errp)
{
    uint8_t out[sizeof(VhostUserHdr) + VHOST_USER_MAX_PAYLOAD];
    VhostUserHdr h = {
        .request = request, .flags = VHOST_USER_VERSION | VHOST_USER_FLAG_REPLY, .size = size};
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = out, .iov_len = sizeof(h) + size};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t n;

    g_assert(size <= VHOST_USER_MAX_PAYLOAD);
    memcpy(out, &h, sizeof(h));
    memcpy(out + sizeof(h), payload, size);
    if (fd >= 0) {
        struct cmsghdr *c;

        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.buf;
        mh.msg_controllen = sizeof(ctl.buf);
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    do {
        n = sendmsg(vu->fd, &mh, MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n != (ssize_t)(sizeof(h) + size)) {
        g_set_error(errp, VU_ERROR, EIO, "cannot send the reply: %s",
                    n < 0 ? g_strerror(errno) : "short write");
        return false;
    }
    return true;
}

static bool vu_send(VhostUser *vu, uint32_t request, const void *payload, uint32_t size,
                    GError **errp)
{
    return vu_send_fd(vu, request, payload, size, -1, errp);
}

static bool vu_reply_u64(VhostUser *vu, uint32_t request, uint64_t v, GError **errp)
{
    return vu_send(vu, request, &v, sizeof(v), errp);
}

/* ---- message handlers ---- */

typedef struct VuMsg {
    VhostUserHdr h;
    const uint8_t *p; /* payload, h.size bytes */
    bool replied;     /* the handler sent the request's own reply */
} VuMsg;

static bool vu_payload_size(const VuMsg *m, uint32_t want, GError **errp)
{
    if (m->h.size != want) {
        g_set_error(errp, VU_ERROR, EINVAL, "payload of %u bytes, expected %u", m->h.size, want);
        return false;
    }
    return true;
}

static bool vu_fd_count(VhostUser *vu, unsigned want, GError **errp)
{
    if (vu->nfds != want) {
        g_set_error(errp, VU_ERROR, EINVAL, "%u fds, expected %u", vu->nfds, want);
        return false;
    }
    return true;
}

static bool vu_need(bool cond, const char *what, GError **errp)
{
    if (!cond) {
        g_set_error(errp, VU_ERROR, EPROTO, "%s", what);
    }
    return cond;
}

static uint64_t vu_get_u64(const VuMsg *m)
{
    uint64_t v;

    memcpy(&v, m->p, sizeof(v));
    return v;
}

/* Validate the ring index of a state/addr message; no change while the ring is started. */
static VuRing *vu_ring(VhostUser *vu, uint32_t index, bool must_be_stopped, GError **errp)
{
    if (index >= vu->num_queues) {
        g_set_error(errp, VU_ERROR, EINVAL, "ring %u out of range (%u queues)", index,
                    vu->num_queues);
        return NULL;
    }
    if (must_be_stopped && vu->rings[index].started) {
        g_set_error(errp, VU_ERROR, EBUSY, "ring %u is started (stop it with GET_VRING_BASE)",
                    index);
        return NULL;
    }
    return &vu->rings[index];
}

static bool vu_set_mem_table(VhostUser *vu, const VuMsg *m, GError **errp)
{
    VuRegion nr[VHOST_USER_MEM_TABLE_MAX];
    uint32_t n;
    unsigned mapped = 0;

    memset(nr, 0, sizeof(nr));
    if (m->h.size < 8) {
        g_set_error(errp, VU_ERROR, EINVAL, "payload of %u bytes is too short", m->h.size);
        return false;
    }
    memcpy(&n, m->p, sizeof(n));
    if (n < 1 || n > VHOST_USER_MEM_TABLE_MAX) {
        g_set_error(errp, VU_ERROR, EINVAL, "%u regions (1..%d)", n, VHOST_USER_MEM_TABLE_MAX);
        return false;
    }
    if (!vu_payload_size(m, 8 + n * (uint32_t)sizeof(VhostUserMemRegion), errp) ||
        !vu_fd_count(vu, n, errp)) {
        return false;
    }
    for (uint32_t i = 0; i < n; i++) {
        VhostUserMemRegion r;

        memcpy(&r, m->p + 8 + i * sizeof(r), sizeof(r));
        if (!vu_region_check(&r, nr, i, errp) || !vu_region_map(&r, vu->fds[i], &nr[i], errp)) {
            goto fail;
        }
        mapped = i + 1;
    }
    /* Replace the whole table; the device continues on the new one. */
    vu_device_stop(vu);
    vu->restart = true;
    vu_mem_clear(vu);
    memcpy(vu->regions, nr, n * sizeof(nr[0]));
    vu->nregions = n;
    return vu_mem_rebuild(vu, errp);

fail:
    for (unsigned i = 0; i < mapped; i++) {
        vu_region_unmap(&nr[i]);
    }
    return false;
}

static bool vu_add_mem_reg(VhostUser *vu, const VuMsg *m, GError **errp)
{
    VhostUserMemRegion r;
    VuRegion nr;

    if (!vu_payload_size(m, 8 + sizeof(r), errp) || !vu_fd_count(vu, 1, errp)) {
        return false;
    }
    if (vu->nregions >= VHOST_USER_MAX_MEM_SLOTS) {
        g_set_error(errp, VU_ERROR, ENOSPC, "all %d memory slots are in use",
                    VHOST_USER_MAX_MEM_SLOTS);
        return false;
    }
    memcpy(&r, m->p + 8, sizeof(r));
    if (!vu_region_check(&r, vu->regions, vu->nregions, errp) ||
        !vu_region_map(&r, vu->fds[0], &nr, errp)) {
        return false;
    }
    vu_device_stop(vu);
    vu->restart = true;
    vu->regions[vu->nregions++] = nr;
    return vu_mem_rebuild(vu, errp);
}

static bool vu_rem_mem_reg(VhostUser *vu, const VuMsg *m, GError **errp)
{
    VhostUserMemRegion r;

    /* A front end may pass an fd here; it is closed with the message's others. */
    if (!vu_payload_size(m, 8 + sizeof(r), errp) || vu->nfds > 1) {
        if (vu->nfds > 1) {
            g_set_error(errp, VU_ERROR, EINVAL, "%u fds, expected at most 1", vu->nfds);
        }
        return false;
    }
    memcpy(&r, m->p + 8, sizeof(r));
    for (unsigned i = 0; i < vu->nregions; i++) {
        VuRegion *reg = &vu->regions[i];

        if (reg->r.gpa == r.gpa && reg->r.uva == r.uva && reg->r.size == r.size) {
            vu_device_stop(vu);
            vu->restart = true;
            vu_region_unmap(reg);
            vu->regions[i] = vu->regions[--vu->nregions];
            return vu_mem_rebuild(vu, errp);
        }
    }
    g_set_error(errp, VU_ERROR, ENOENT, "no memory region at 0x%" PRIx64 " size 0x%" PRIx64, r.gpa,
                r.size);
    return false;
}

/* Kick and call fds must be eventfds: the dataplane polls and reads/writes them as such. */
static bool vu_is_eventfd(int fd)
{
    char path[64], target[64];
    ssize_t n;

    snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    n = readlink(path, target, sizeof(target) - 1);
    if (n < 0) {
        return false;
    }
    target[n] = '\0';
    return !strcmp(target, "anon_inode:[eventfd]");
}

static bool vu_set_vring_fd(VhostUser *vu, const VuMsg *m, GError **errp)
{
    uint64_t v;
    unsigned idx;
    bool nofd;
    VuRing *ring;
    int fd;

    if (!vu_payload_size(m, 8, errp)) {
        return false;
    }
    v = vu_get_u64(m);
    idx = v & VHOST_USER_VRING_IDX_MASK;
    nofd = v & VHOST_USER_VRING_NOFD;
    if (v & ~(uint64_t)(VHOST_USER_VRING_IDX_MASK | VHOST_USER_VRING_NOFD)) {
        g_set_error(errp, VU_ERROR, EINVAL, "reserved bits set in 0x%" PRIx64, v);
        return false;
    }
    if (!vu_fd_count(vu, nofd ? 0 : 1, errp)) {
        return false;
    }
    ring = vu_ring(vu, idx, m->h.request == VHOST_USER_SET_VRING_KICK, errp);
    if (!ring) {
        return false;
    }
    fd = nofd ? -1 : vu->fds[0];
    if (fd >= 0 && m->h.request != VHOST_USER_SET_VRING_ERR && !vu_is_eventfd(fd)) {
        g_set_error(errp, VU_ERROR, EINVAL, "ring %u: the fd is not an eventfd", idx);
        return false;
    }
    switch (m->h.request) {
    case VHOST_USER_SET_VRING_KICK:
        if (nofd) {
            g_set_error(errp, VU_ERROR, ENOTSUP, "ring %u: polling without a kick fd", idx);
            return false;
        }
        if (!vu->gm || !ring->num || !ring->addr_set) {
            g_set_error(errp, VU_ERROR, EPROTO,
                        "ring %u: kick before the memory table, the ring size and its addresses",
                        idx);
            return false;
        }
        vu_close_fd(&ring->kick_fd);
        ring->kick_fd = fd;
        ring->started = true;
        break;
    case VHOST_USER_SET_VRING_CALL:
        /* The running device writes the old fd: stop it before closing that. */
        if (idx < vu->running) {
            vu_device_stop(vu);
            vu->restart = true;
        }
        vu_close_fd(&ring->call_fd);
        ring->call_fd = fd;
        break;
    default:         /* SET_VRING_ERR: vblk never reports ring errors there */
        return true; /* the fd is closed with the message */
    }
    vu->nfds = 0; /* taken */
    return true;
}

static bool vu_config(VhostUser *vu, VuMsg *m, GError **errp)
{
    VhostUserConfigHdr c;
    uint32_t off;
    uint8_t reply[VHOST_USER_MAX_PAYLOAD];
    uint32_t cfg_size = vu->ops->config_size(vu->opaque);

    if (m->h.size < sizeof(c)) {
        g_set_error(errp, VU_ERROR, EINVAL, "payload of %u bytes is too short", m->h.size);
        return false;
    }
    memcpy(&c, m->p, sizeof(c));
    /* cloud-hypervisor addresses the config space from 0x100 (its PCI offset), QEMU from 0. */
    off = c.offset >= VHOST_USER_CONFIG_ALT_BASE ? c.offset - VHOST_USER_CONFIG_ALT_BASE : c.offset;
    if (c.size == 0 || c.size > cfg_size || off > cfg_size - c.size) {
        g_set_error(errp, VU_ERROR, EINVAL, "config range %u+%u outside %u bytes", c.offset, c.size,
                    cfg_size);
        return false;
    }
    if (!vu_payload_size(m, (uint32_t)sizeof(c) + c.size, errp)) {
        return false;
    }
    if (m->h.request == VHOST_USER_SET_CONFIG) {
        /* flags: 0 front-end write; 1 is "writable"/"migration" depending on the front end. */
        if (c.flags > 1) {
            g_set_error(errp, VU_ERROR, EINVAL, "config flags 0x%x", c.flags);
            return false;
        }
        return vu->ops->set_config(vu->opaque, off, m->p + sizeof(c), c.size, errp);
    }
    {
        uint8_t cfg[VHOST_USER_MAX_CONFIG];

        vu->ops->get_config(vu->opaque, cfg);
        memcpy(reply, &c, sizeof(c));
        memcpy(reply + sizeof(c), cfg + off, c.size);
    }
    m->replied = true;
    return vu_send(vu, m->h.request, reply, (uint32_t)sizeof(c) + c.size, errp);
}

/* ---- inflight region (INFLIGHT_SHMFD) ---- */

static void vu_inflight_unmap(VhostUser *vu)
{
    g_assert(!vu->running);
    if (vu->inflight_map) {
        munmap(vu->inflight_map, vu->inflight_map_len);
    }
    vu->inflight_map = NULL;
    vu->inflight_map_len = 0;
    vu->inflight = NULL;
    vu->inflight_nq = vu->inflight_qsize = 0;
}

/* Common checks of GET/SET_INFLIGHT_FD; the region's size for that geometry into @size. */
static bool vu_inflight_msg(VhostUser *vu, const VuMsg *m, VhostUserInflight *in, uint64_t *size,
                            GError **errp)
{
    if (!vu_need(vu_has_proto(vu, VHOST_USER_PROTOCOL_F_INFLIGHT_SHMFD),
                 "INFLIGHT_SHMFD was not negotiated", errp) ||
        !vu_payload_size(m, sizeof(*in), errp)) {
        return false;
    }
    memcpy(in, m->p, sizeof(*in));
    if (in->num_queues == 0 || in->num_queues > vu->num_queues) {
        g_set_error(errp, VU_ERROR, EINVAL, "%u queues (1..%u)", in->num_queues, vu->num_queues);
        return false;
    }
    if (in->queue_size == 0 || in->queue_size > VHOST_USER_MAX_RING_SIZE ||
        (in->queue_size & (in->queue_size - 1))) {
        g_set_error(errp, VU_ERROR, EINVAL, "queue size %u is not a power of two in 1..%d",
                    in->queue_size, VHOST_USER_MAX_RING_SIZE);
        return false;
    }
    *size = in->num_queues * vhost_user_inflight_queue_bytes(in->queue_size);
    return true;
}

/* A new zeroed region (a memfd that cannot shrink) for the front end to keep. */
static bool vu_get_inflight_fd(VhostUser *vu, VuMsg *m, GError **errp)
{
    VhostUserInflight in;
    uint64_t size;
    uint8_t *p;
    int fd;
    bool ok;

    m->replied = true;
    if (!vu_inflight_msg(vu, m, &in, &size, errp)) {
        return false;
    }
    fd = memfd_create("vblk-inflight", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (fd < 0) {
        g_set_error(errp, VU_ERROR, errno, "memfd_create: %s", g_strerror(errno));
        return false;
    }
    if (ftruncate(fd, (off_t)size) < 0 ||
        fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
        g_set_error(errp, VU_ERROR, errno, "inflight region of %" PRIu64 " bytes: %s", size,
                    g_strerror(errno));
        close(fd);
        return false;
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
        g_set_error(errp, VU_ERROR, errno, "inflight region: mmap: %s", g_strerror(errno));
        close(fd);
        return false;
    }
    for (unsigned i = 0; i < in.num_queues; i++) {
        VhostUserInflightQueue *q =
            (VhostUserInflightQueue *)(p + i * vhost_user_inflight_queue_bytes(in.queue_size));

        q->version = VHOST_USER_INFLIGHT_VERSION;
        q->desc_num = in.queue_size;
    }
    munmap(p, size);
    in.mmap_size = size;
    in.mmap_offset = 0;
    ok = vu_send_fd(vu, m->h.request, &in, sizeof(in), fd, errp);
    close(fd);
    return ok;
}

/* Map the region the front end hands (back): tracking starts with the rings. */
static bool vu_set_inflight_fd(VhostUser *vu, const VuMsg *m, GError **errp)
{
    long page = sysconf(_SC_PAGESIZE);
    VhostUserInflight in;
    uint64_t size;
    struct stat st;
    int seals;
    void *p;

    if (!vu_inflight_msg(vu, m, &in, &size, errp) || !vu_fd_count(vu, 1, errp)) {
        return false;
    }
    for (unsigned i = 0; i < vu->num_queues; i++) {
        if (vu->rings[i].started) {
            g_set_error(errp, VU_ERROR, EBUSY, "ring %u is started (stop it with GET_VRING_BASE)",
                        i);
            return false;
        }
    }
    if (in.mmap_size != size) {
        g_set_error(errp, VU_ERROR, EINVAL,
                    "mmap_size %" PRIu64 ", expected %" PRIu64 " for %u queues of %u", in.mmap_size,
                    size, in.num_queues, in.queue_size);
        return false;
    }
    if (in.mmap_offset & ((uint64_t)page - 1)) {
        g_set_error(errp, VU_ERROR, EINVAL, "mmap_offset 0x%" PRIx64 " is not page-aligned",
                    in.mmap_offset);
        return false;
    }
    if (fstat(vu->fds[0], &st) < 0 || st.st_size < 0) {
        g_set_error(errp, VU_ERROR, EINVAL, "inflight fd: cannot stat: %s", g_strerror(errno));
        return false;
    }
    if (in.mmap_offset > (uint64_t)st.st_size || size > (uint64_t)st.st_size - in.mmap_offset) {
        g_set_error(errp, VU_ERROR, EINVAL,
                    "inflight region: offset 0x%" PRIx64 " + size 0x%" PRIx64
                    " is beyond the end of its fd (0x%" PRIx64 ")",
                    in.mmap_offset, size, (uint64_t)st.st_size);
        return false;
    }
    /* A file that can shrink under the mapping would SIGBUS the daemon: only our own memfds. */
    seals = fcntl(vu->fds[0], F_GET_SEALS);
    if (seals < 0 || !(seals & F_SEAL_SHRINK)) {
        g_set_error(
            errp, VU_ERROR, EINVAL,
            "the inflight fd is not a memfd sealed against shrinking (from GET_INFLIGHT_FD)");
        return false;
    }
    p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, vu->fds[0], (off_t)in.mmap_offset);
    if (p == MAP_FAILED) {
        g_set_error(errp, VU_ERROR, errno, "inflight region: mmap: %s", g_strerror(errno));
        return false;
    }
    vu_inflight_unmap(vu);
    vu->inflight_map = p;
    vu->inflight_map_len = size;
    vu->inflight = p;
    vu->inflight_nq = in.num_queues;
    vu->inflight_qsize = in.queue_size;
    return true; /* the fd is closed with the message: the mapping keeps the memory */
}

/* The channel for back-end requests: a socket, replacing (closing) an earlier one. */
static bool vu_set_backend_req_fd(VhostUser *vu, const VuMsg *m, GError **errp)
{
    struct stat st;

    if (!vu_need(vu_has_proto(vu, VHOST_USER_PROTOCOL_F_BACKEND_REQ),
                 "BACKEND_REQ was not negotiated", errp) ||
        !vu_payload_size(m, 0, errp) || !vu_fd_count(vu, 1, errp)) {
        return false;
    }
    if (fstat(vu->fds[0], &st) < 0 || !S_ISSOCK(st.st_mode)) {
        g_set_error(errp, VU_ERROR, EINVAL, "the fd is not a socket");
        return false;
    }
    vu_backend_close(vu);
    vu->backend_fd = vu->fds[0];
    vu->nfds = 0; /* taken */
    if (vu->ops->backend_watch) {
        vu->ops->backend_watch(vu->opaque, vu->backend_fd, true);
    }
    return true;
}

static void vu_rings_reset(VhostUser *vu)
{
    for (unsigned i = 0; i < VHOST_USER_MAX_QUEUES; i++) {
        VuRing *r = &vu->rings[i];

        vu_close_fd(&r->kick_fd);
        vu_close_fd(&r->call_fd);
        *r = (VuRing){.kick_fd = -1, .call_fd = -1};
    }
}

/* Context: any thread (a ring's owner). Lock-free, allocates nothing. */
void vhost_user_set_needs_reset(VhostUser *vu)
{
    qatomic_store_release(&vu->needs_reset, true);
}

static bool vu_needs_reset(const VhostUser *vu)
{
    return qatomic_load_acquire(&vu->needs_reset);
}

/* A reset with the device stopped: NEEDS_RESET goes (no ring runs that could set it again). */
static void vu_clear_needs_reset(VhostUser *vu)
{
    g_assert(!vu->running);
    qatomic_set(&vu->needs_reset, false);
}

/* GET_STATUS: what the front end set, plus NEEDS_RESET once a ring broke. */
static uint8_t vu_status(const VhostUser *vu)
{
    return vu->status | (vu_needs_reset(vu) ? VIRTIO_CONFIG_S_NEEDS_RESET : 0);
}

/* Status bits a front end may write: the virtio spec's, less NEEDS_RESET (the device's own). */
#define VU_STATUS_WRITABLE                                                                         \
    (VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | VIRTIO_CONFIG_S_DRIVER_OK |            \
     VIRTIO_CONFIG_S_FEATURES_OK | VIRTIO_CONFIG_S_FAILED)

/*
 * SET_STATUS: the virtio status byte. The rings follow DRIVER_OK (vu_driver_ok,
 * applied by vu_device_update after the message). 0 stops the device, which
 * completes its in-flight requests, but keeps the ring state: QEMU 7.2 sends
 * it before GET_VRING_BASE and then needs each ring's base. It is not a
 * device reset (the guest's writeback setting stays); RESET_DEVICE is. It
 * does clear NEEDS_RESET (virtio's reset is writing 0; QEMU 7.2 writes it
 * when the guest resets the device), once the rings have stopped.
 *
 * NEEDS_RESET is the device's bit. While it is set a front end may write it
 * back (QEMU 7.2's vhost_user_add_status writes GET_STATUS's value with its
 * own bits or-ed in); that changes nothing. Otherwise it is refused.
 */
static bool vu_set_status(VhostUser *vu, const VuMsg *m, GError **errp)
{
    uint64_t v;
    bool reset;

    if (!vu_need(vu_has_proto(vu, VHOST_USER_PROTOCOL_F_STATUS), "STATUS was not negotiated",
                 errp) ||
        !vu_payload_size(m, 8, errp)) {
        return false;
    }
    v = vu_get_u64(m);
    reset = v == 0;
    if ((v & VIRTIO_CONFIG_S_NEEDS_RESET) && vu_needs_reset(vu)) {
        v &= ~(uint64_t)VIRTIO_CONFIG_S_NEEDS_RESET;
    }
    if (v & ~(uint64_t)VU_STATUS_WRITABLE) {
        g_set_error(errp, VU_ERROR, EINVAL,
                    "status 0x%" PRIx64 " has bits other than 0x%x (ACKNOWLEDGE, DRIVER, "
                    "DRIVER_OK, FEATURES_OK, FAILED)",
                    v, VU_STATUS_WRITABLE);
        return false;
    }
    /* No features accepted yet: FEATURES_OK is not kept, as a virtio device refuses them. */
    if (!vu->features_set) {
        v &= ~(uint64_t)VIRTIO_CONFIG_S_FEATURES_OK;
    }
    vu->status = (uint8_t)v;
    if (reset) {
        /* vu_device_update would stop the rings after this message; stop them first. */
        vu_device_stop(vu);
        vu_clear_needs_reset(vu);
    }
    return true;
}

/*
 * RESET_DEVICE: the device as after SET_OWNER. The rings stop (in-flight
 * requests complete first) and are forgotten with their fds, the status is
 * 0 (NEEDS_RESET cleared too), the virtio features must be set again, the
 * device model is reset (writeback back to its initial value) and the
 * inflight region is dropped.
 * The session stays: owner, protocol features, memory table, back-end
 * channel.
 */
static void vu_reset_device(VhostUser *vu)
{
    vu_device_stop(vu);
    vu_clear_needs_reset(vu);
    vu_rings_reset(vu);
    vu_inflight_unmap(vu);
    vu->status = 0;
    vu->features_set = false;
    vu->features = 0;
    vu->restart = false;
    vu->ops->reset(vu->opaque);
}

/* Requests that only make sense once a front end owns the session. */
static bool vu_needs_owner(uint32_t req)
{
    switch (req) {
    case VHOST_USER_GET_FEATURES:
    case VHOST_USER_GET_PROTOCOL_FEATURES:
    case VHOST_USER_SET_PROTOCOL_FEATURES:
    case VHOST_USER_SET_OWNER:
    case VHOST_USER_GET_QUEUE_NUM:
    case VHOST_USER_GET_MAX_MEM_SLOTS:
    case VHOST_USER_GET_CONFIG:
    case VHOST_USER_SET_CONFIG:
    case VHOST_USER_SET_BACKEND_REQ_FD: /* QEMU 7.2 sends it before SET_OWNER */
    case VHOST_USER_GET_STATUS:
        return false;
    default:
        return true;
    }
}

static bool vu_dispatch(VhostUser *vu, VuMsg *m, GError **errp)
{
    uint32_t req = m->h.request;
    VhostUserVringState s;
    VhostUserVringAddr a;
    VuRing *ring;

    if (vu_needs_owner(req) && !vu->owner) {
        g_set_error(errp, VU_ERROR, EPROTO, "before SET_OWNER");
        return false;
    }
    /* Requests that carry fds check their count themselves; no other may carry any. */
    switch (req) {
    case VHOST_USER_SET_MEM_TABLE:
    case VHOST_USER_ADD_MEM_REG:
    case VHOST_USER_REM_MEM_REG:
    case VHOST_USER_SET_VRING_KICK:
    case VHOST_USER_SET_VRING_CALL:
    case VHOST_USER_SET_VRING_ERR:
    case VHOST_USER_SET_INFLIGHT_FD:
    case VHOST_USER_SET_BACKEND_REQ_FD:
        break;
    default:
        if (!vu_fd_count(vu, 0, errp)) {
            return false;
        }
    }

    switch (req) {
    case VHOST_USER_GET_FEATURES:
        m->replied = true;
        return vu_payload_size(m, 0, errp) &&
               vu_reply_u64(
                   vu, req,
                   vu->ops->features(vu->opaque) | (1ull << VHOST_USER_F_PROTOCOL_FEATURES), errp);
    case VHOST_USER_SET_FEATURES: {
        uint64_t f, offered = vu->ops->features(vu->opaque);

        if (!vu_payload_size(m, 8, errp)) {
            return false;
        }
        f = vu_get_u64(m);
        if (f & ~(offered | (1ull << VHOST_USER_F_PROTOCOL_FEATURES))) {
            g_set_error(errp, VU_ERROR, EINVAL, "features 0x%" PRIx64 " were not offered",
                        f & ~offered);
            return false;
        }
        if (vu->running && f != vu->features) {
            g_set_error(errp, VU_ERROR, EBUSY, "features change while rings run");
            return false;
        }
        if (!vu->ops->set_features(vu->opaque, f & ~(1ull << VHOST_USER_F_PROTOCOL_FEATURES),
                                   errp)) {
            return false;
        }
        vu->features = f;
        vu->features_set = true;
        if (!(f & (1ull << VHOST_USER_F_PROTOCOL_FEATURES))) {
            /* Without bit 30 the rings are enabled at once. */
            for (unsigned i = 0; i < vu->num_queues; i++) {
                vu->rings[i].enabled = true;
            }
        }
        return true;
    }
    case VHOST_USER_GET_PROTOCOL_FEATURES:
        m->replied = true;
        return vu_payload_size(m, 0, errp) &&
               vu_reply_u64(vu, req, vu_protocol_features_offered(), errp);
    case VHOST_USER_SET_PROTOCOL_FEATURES: {
        uint64_t f;

        if (!vu_payload_size(m, 8, errp)) {
            return false;
        }
        f = vu_get_u64(m);
        if (f & ~vu_protocol_features_offered()) {
            g_set_error(errp, VU_ERROR, EINVAL, "protocol features 0x%" PRIx64 " were not offered",
                        f & ~vu_protocol_features_offered());
            return false;
        }
        vu->proto_features = f;
        return true;
    }
    case VHOST_USER_SET_OWNER:
        if (!vu_payload_size(m, 0, errp)) {
            return false;
        }
        if (vu->owner) {
            g_set_error(errp, VU_ERROR, EPROTO, "the session already has an owner");
            return false;
        }
        vu->owner = true;
        return true;
    case VHOST_USER_RESET_OWNER:
        /* Deprecated: stop the rings (NEEDS_RESET goes); the memory table and features stay. */
        if (!vu_payload_size(m, 0, errp)) {
            return false;
        }
        vu_device_stop(vu);
        vu_clear_needs_reset(vu);
        vu_rings_reset(vu);
        return true;
    case VHOST_USER_SET_MEM_TABLE:
        return vu_set_mem_table(vu, m, errp);
    case VHOST_USER_GET_MAX_MEM_SLOTS:
        m->replied = true;
        return vu_need(vu_has_proto(vu, VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS),
                       "CONFIGURE_MEM_SLOTS was not negotiated", errp) &&
               vu_payload_size(m, 0, errp) && vu_reply_u64(vu, req, VHOST_USER_MAX_MEM_SLOTS, errp);
    case VHOST_USER_ADD_MEM_REG:
    case VHOST_USER_REM_MEM_REG:
        if (!vu_need(vu_has_proto(vu, VHOST_USER_PROTOCOL_F_CONFIGURE_MEM_SLOTS),
                     "CONFIGURE_MEM_SLOTS was not negotiated", errp)) {
            return false;
        }
        return req == VHOST_USER_ADD_MEM_REG ? vu_add_mem_reg(vu, m, errp)
                                             : vu_rem_mem_reg(vu, m, errp);
    case VHOST_USER_SET_VRING_NUM:
        if (!vu_payload_size(m, sizeof(s), errp)) {
            return false;
        }
        memcpy(&s, m->p, sizeof(s));
        ring = vu_ring(vu, s.index, true, errp);
        if (!ring) {
            return false;
        }
        if (s.num == 0 || s.num > VHOST_USER_MAX_RING_SIZE || (s.num & (s.num - 1))) {
            g_set_error(errp, VU_ERROR, EINVAL, "ring %u: size %u is not a power of two in 1..%d",
                        s.index, s.num, VHOST_USER_MAX_RING_SIZE);
            return false;
        }
        ring->num = s.num;
        return true;
    case VHOST_USER_SET_VRING_BASE:
        if (!vu_payload_size(m, sizeof(s), errp)) {
            return false;
        }
        memcpy(&s, m->p, sizeof(s));
        ring = vu_ring(vu, s.index, true, errp);
        if (!ring) {
            return false;
        }
        if (s.num > 0xffff) {
            g_set_error(errp, VU_ERROR, EINVAL, "ring %u: base %u beyond 16 bits", s.index, s.num);
            return false;
        }
        ring->base = (uint16_t)s.num;
        return true;
    case VHOST_USER_SET_VRING_ADDR:
        if (!vu_payload_size(m, sizeof(a), errp)) {
            return false;
        }
        memcpy(&a, m->p, sizeof(a));
        ring = vu_ring(vu, a.index, true, errp);
        if (!ring) {
            return false;
        }
        if (a.flags) {
            g_set_error(errp, VU_ERROR, EINVAL, "ring %u: flags 0x%x (no dirty logging)", a.index,
                        a.flags);
            return false;
        }
        if ((a.desc & 15) || (a.avail & 1) || (a.used & 3)) {
            g_set_error(errp, VU_ERROR, EINVAL, "ring %u: misaligned ring addresses", a.index);
            return false;
        }
        ring->desc = a.desc;
        ring->avail = a.avail;
        ring->used = a.used;
        ring->addr_set = true;
        return true;
    case VHOST_USER_GET_VRING_BASE:
        m->replied = true;
        if (!vu_payload_size(m, sizeof(s), errp)) {
            return false;
        }
        memcpy(&s, m->p, sizeof(s));
        ring = vu_ring(vu, s.index, false, errp);
        if (!ring) {
            return false;
        }
        /* Stop: in-flight requests of every ring complete before the reply. */
        vu_device_stop(vu);
        ring->started = false;
        vu_close_fd(&ring->kick_fd);
        vu_close_fd(&ring->call_fd);
        s.num = ring->base;
        return vu_send(vu, req, &s, sizeof(s), errp);
    case VHOST_USER_SET_VRING_KICK:
    case VHOST_USER_SET_VRING_CALL:
    case VHOST_USER_SET_VRING_ERR:
        return vu_set_vring_fd(vu, m, errp);
    case VHOST_USER_GET_QUEUE_NUM:
        m->replied = true;
        return vu_need(vu_has_proto(vu, VHOST_USER_PROTOCOL_F_MQ), "MQ was not negotiated", errp) &&
               vu_payload_size(m, 0, errp) && vu_reply_u64(vu, req, vu->num_queues, errp);
    case VHOST_USER_SET_VRING_ENABLE:
        if (!vu_payload_size(m, sizeof(s), errp)) {
            return false;
        }
        memcpy(&s, m->p, sizeof(s));
        if (!vu_need(vu->features_set && (vu->features & (1ull << VHOST_USER_F_PROTOCOL_FEATURES)),
                     "feature bit 30 was not acked", errp)) {
            return false;
        }
        ring = vu_ring(vu, s.index, false, errp);
        if (!ring) {
            return false;
        }
        if (s.num > 1) {
            g_set_error(errp, VU_ERROR, EINVAL, "ring %u: enable %u", s.index, s.num);
            return false;
        }
        ring->enabled = s.num;
        return true;
    case VHOST_USER_GET_CONFIG:
    case VHOST_USER_SET_CONFIG:
        if (!vu_need(vu_has_proto(vu, VHOST_USER_PROTOCOL_F_CONFIG), "CONFIG was not negotiated",
                     errp)) {
            return false;
        }
        return vu_config(vu, m, errp);
    case VHOST_USER_GET_INFLIGHT_FD:
        return vu_get_inflight_fd(vu, m, errp);
    case VHOST_USER_SET_INFLIGHT_FD:
        return vu_set_inflight_fd(vu, m, errp);
    case VHOST_USER_SET_BACKEND_REQ_FD:
        return vu_set_backend_req_fd(vu, m, errp);
    case VHOST_USER_SET_STATUS:
        return vu_set_status(vu, m, errp);
    case VHOST_USER_GET_STATUS:
        m->replied = true;
        return vu_need(vu_has_proto(vu, VHOST_USER_PROTOCOL_F_STATUS), "STATUS was not negotiated",
                       errp) &&
               vu_payload_size(m, 0, errp) && vu_reply_u64(vu, req, vu_status(vu), errp);
    case VHOST_USER_RESET_DEVICE:
        if (!vu_need(vu_has_proto(vu, VHOST_USER_PROTOCOL_F_RESET_DEVICE),
                     "RESET_DEVICE was not negotiated", errp) ||
            !vu_payload_size(m, 0, errp)) {
            return false;
        }
        vu_reset_device(vu);
        return true;
    default:
        g_set_error(errp, VU_ERROR, ENOTSUP, "not supported");
        return false;
    }
}

/* Handle the complete message in vu->buf. */
static bool vu_handle(VhostUser *vu, GError **errp)
{
    VuMsg m = {.p = vu->buf + sizeof(VhostUserHdr)};
    bool ok;

    memcpy(&m.h, vu->buf, sizeof(m.h));
    vu->stats.messages++;
    ok = vu_dispatch(vu, &m, errp) && vu_device_update(vu, errp);
    if (ok && (m.h.flags & VHOST_USER_FLAG_NEED_REPLY) && !m.replied &&
        vu_has_proto(vu, VHOST_USER_PROTOCOL_F_REPLY_ACK)) {
        ok = vu_reply_u64(vu, m.h.request, 0, errp);
    }
    vu_drop_msg_fds(vu);
    vu->have = 0;
    return ok;
}

/* Header checks, as soon as its 12 bytes are there. */
static bool vu_check_header(VhostUser *vu, GError **errp)
{
    VhostUserHdr h;

    memcpy(&h, vu->buf, sizeof(h));
    if (h.request == VHOST_USER_NONE || h.request >= VHOST_USER_REQ_MAX) {
        g_set_error(errp, VU_ERROR, EINVAL, "unknown request %u", h.request);
        return false;
    }
    if ((h.flags & VHOST_USER_VERSION_MASK) != VHOST_USER_VERSION ||
        (h.flags & ~(VHOST_USER_VERSION_MASK | VHOST_USER_FLAG_NEED_REPLY))) {
        g_set_error(errp, VU_ERROR, EINVAL, "flags 0x%x (version 1, no reply or reserved bits)",
                    h.flags);
        return false;
    }
    if (h.size > VHOST_USER_MAX_PAYLOAD) {
        g_set_error(errp, VU_ERROR, EINVAL, "payload of %u bytes (at most %zu)", h.size,
                    VHOST_USER_MAX_PAYLOAD);
        return false;
    }
    return true;
}

/* Read up to @want bytes into the message buffer, collecting fds. 0: EOF, -1: error/again. */
static ssize_t vu_recv(VhostUser *vu, size_t want, GError **errp)
{
    union {
        char buf[CMSG_SPACE(VHOST_USER_MAX_FDS * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = vu->buf + vu->have, .iov_len = want};
    struct msghdr mh = {.msg_iov = &iov,
                        .msg_iovlen = 1,
                        .msg_control = ctl.buf,
                        .msg_controllen = sizeof(ctl.buf)};
    bool too_many = false;
    ssize_t n;

    do {
        n = recvmsg(vu->fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            return -1;
        }
        g_set_error(errp, VU_ERROR, errno, "recvmsg: %s", g_strerror(errno));
        return -2;
    }
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
            int fd;

            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(fd));
            if (vu->nfds < VHOST_USER_MAX_FDS) {
                vu->fds[vu->nfds++] = fd;
            } else {
                close(fd);
                too_many = true;
            }
        }
    }
    if (too_many || (mh.msg_flags & MSG_CTRUNC)) {
        g_set_error(errp, VU_ERROR, EINVAL, "more than %d fds in one message", VHOST_USER_MAX_FDS);
        return -2;
    }
    if (n == 0) {
        return 0;
    }
    vu->have += (size_t)n;
    return n;
}

static void vu_report(VhostUser *vu, GError *err)
{
    const char *name = NULL;

    if (vu->have >= sizeof(VhostUserHdr)) {
        VhostUserHdr h;

        memcpy(&h, vu->buf, sizeof(h));
        name = vhost_user_request_name(h.request);
        error_report_id(vu->id, "vhost-user %s%s%s: %s; dropping the connection",
                        name ? "VHOST_USER_" : "request ", name ? name : "", name ? "" : "?",
                        err->message);
    } else {
        error_report_id(vu->id, "vhost-user: %s; dropping the connection", err->message);
    }
    vu->stats.bad++;
}

/* Context: control thread */
bool vhost_user_conn_read(VhostUser *vu)
{
    GError *err = NULL;

    if (vu->fd < 0) {
        return false;
    }
    for (;;) {
        size_t need = sizeof(VhostUserHdr);
        ssize_t n;

        if (vu->have >= sizeof(VhostUserHdr)) {
            VhostUserHdr h;

            memcpy(&h, vu->buf, sizeof(h));
            need += h.size; /* checked below before it grows past the buffer */
        }
        n = vu_recv(vu, need - vu->have, &err);
        if (n == -1) {
            return true; /* nothing more for now */
        }
        if (n == -2) {
            vu_report(vu, err);
            g_error_free(err);
            return false;
        }
        if (n == 0) {
            if (vu->have || vu->nfds) {
                g_set_error(&err, VU_ERROR, EPIPE, "connection closed inside a message");
                vu_report(vu, err);
                g_error_free(err);
            }
            return false; /* EOF */
        }
        if (vu->have == sizeof(VhostUserHdr) && !vu_check_header(vu, &err)) {
            vu_report(vu, err);
            g_error_free(err);
            return false;
        }
        if (vu->have >= sizeof(VhostUserHdr)) {
            VhostUserHdr h;

            memcpy(&h, vu->buf, sizeof(h));
            if (vu->have == sizeof(VhostUserHdr) + h.size) {
                if (!vu_handle(vu, &err)) {
                    vu->have = sizeof(VhostUserHdr); /* for the report: header only */
                    memcpy(vu->buf, &h, sizeof(h));
                    vu_report(vu, err);
                    g_error_free(err);
                    return false;
                }
            }
        }
    }
}

/* Context: control thread */
void vhost_user_detach(VhostUser *vu)
{
    /* The device as RESET_DEVICE leaves it, then the session goes too. */
    vu_reset_device(vu);
    vu_mem_clear(vu);
    vu_backend_close(vu);
    vu_drop_msg_fds(vu);
    vu_close_fd(&vu->fd);
    vu->have = 0;
    vu->owner = false;
    vu->proto_features = 0;
}
