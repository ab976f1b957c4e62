/*
 * libFuzzer target: a hostile vhost-user front end against the protocol half
 * of the export (src/devices/vhost-user.c: framing, fd counts, memory table,
 * ring state, config, the inflight region, SET/GET_STATUS and RESET_DEVICE),
 * over a real socketpair, with a stub device model that runs the inflight
 * recovery on the rings it is given and reports a broken ring (NEEDS_RESET)
 * whenever ring 0 starts at an odd base.
 *
 * Input: a list of records
 *   [0]      fd spec: bits 0-1 number of fds (0..3), bit 2 eventfd (else a
 *            1 MiB memfd), bit 3 the memfd sealed against shrinking (as
 *            GET_INFLIGHT_FD's), bit 7 reconnect (drop the connection first)
 *   [1..3)   length N of the bytes to send (LE, at most 1024)
 *   [3..3+N) bytes sent as they are (headers included: any framing)
 * After each record the back end reads what it can; a dropped connection is
 * re-attached on a new socketpair. At the end no fd may have leaked.
 */
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "vhost-user-int.h"
#include "util/error-report.h"

static unsigned running;
static VhostUser *stub_vu; /* the back end the stub device belongs to */

static uint64_t st_features(void *opaque)
{
    return (1ull << 32) | (1ull << 29) | (1ull << 28) | (1ull << 9) | (1ull << 6) | (1ull << 12);
}

static bool st_set_features(void *opaque, uint64_t f, GError **errp)
{
    if (!(f & (1ull << 32))) {
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID, "VERSION_1 missing");
        return false;
    }
    return true;
}

static uint32_t st_config_size(void *opaque)
{
    return 60;
}

static void st_get_config(void *opaque, uint8_t *buf)
{
    memset(buf, 0xab, 60);
}

static bool st_set_config(void *opaque, uint32_t off, const uint8_t *d, uint32_t len, GError **errp)
{
    if (off != 32 || len != 1) {
        g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID, "read-only field");
        return false;
    }
    return true;
}

static bool st_start(void *opaque, const GuestMem *gm, const VhostUserRing *rings, unsigned n,
                     GError **errp)
{
    /* Touch the rings through the map, as the device would. */
    for (unsigned i = 0; i < n; i++) {
        volatile uint8_t *p = guestmem_ptr(gm, rings[i].used_gpa, 6 + 8ull * rings[i].num);

        if (!p) {
            g_set_error(errp, VIRTIO_ERROR, VIRTIO_ERROR_INVALID, "ring %u not in RAM", i);
            return false;
        }
        (void)p[0];
        if (rings[i].kick_fd < 0) {
            abort(); /* a started ring always has its kick fd */
        }
        if (rings[i].inflight) {
            uint16_t heads[VHOST_USER_MAX_RING_SIZE];
            unsigned nh;
            VhostUserInflightTracker *t;

            if (rings[i].num > rings[i].inflight_desc_num) {
                abort(); /* the protocol half checks the region covers the ring */
            }
            t = vhost_user_inflight_tracker_new(rings[i].inflight, rings[i].inflight_desc_num,
                                                rings[i].num, 0, heads, &nh);
            if (nh > rings[i].num) {
                abort();
            }
            vhost_user_inflight_tracker_free(t);
        }
    }
    /* A ring that breaks at once: GET_STATUS shows NEEDS_RESET until a reset. */
    if (n && (rings[0].last_avail_idx & 1)) {
        vhost_user_set_needs_reset(stub_vu);
    }
    running = n;
    return true;
}

static void st_stop(void *opaque, uint16_t *last, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        last[i] = (uint16_t)(i * 3);
    }
    running = 0;
}

static void st_reset(void *opaque)
{
}

static const VhostUserDevOps st_ops = {
    .features = st_features,
    .set_features = st_set_features,
    .config_size = st_config_size,
    .get_config = st_get_config,
    .set_config = st_set_config,
    .start = st_start,
    .stop = st_stop,
    .reset = st_reset,
};

static int count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int n = 0;

    while ((e = readdir(d))) {
        n++;
    }
    closedir(d);
    return n;
}

static void drain(int fd)
{
    char buf[4096];

    while (recv(fd, buf, sizeof(buf), MSG_DONTWAIT) > 0) {
    }
}

static bool connect_pair(VhostUser *vu, int *front)
{
    int sv[2];

    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) < 0) {
        return false;
    }
    vhost_user_attach(vu, sv[1]);
    *front = sv[0];
    return true;
}

static void send_record(int s, const uint8_t *buf, size_t len, uint8_t spec)
{
    union {
        char b[CMSG_SPACE(3 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
    int fds[3];
    unsigned n = spec & 3;

    if (len == 0) {
        return; /* fds need at least one byte to travel with */
    }
    for (unsigned i = 0; i < n; i++) {
        if (spec & 4) {
            fds[i] = eventfd(0, EFD_CLOEXEC);
        } else {
            fds[i] = memfd_create("fuzz-ram", MFD_CLOEXEC | MFD_ALLOW_SEALING);
            if (fds[i] >= 0 && ftruncate(fds[i], 1 << 20) < 0) {
                abort();
            }
            if (fds[i] >= 0 && (spec & 8) && fcntl(fds[i], F_ADD_SEALS, F_SEAL_SHRINK) < 0) {
                abort();
            }
        }
        if (fds[i] < 0) {
            abort();
        }
    }
    if (n) {
        struct cmsghdr *c;

        memset(&ctl, 0, sizeof(ctl));
        mh.msg_control = ctl.b;
        mh.msg_controllen = CMSG_SPACE(n * sizeof(int));
        c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(n * sizeof(int));
        memcpy(CMSG_DATA(c), fds, n * sizeof(int));
    }
    if (sendmsg(s, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
        /* peer gone or buffer full: the record is lost, like a dead front end's */
    }
    for (unsigned i = 0; i < n; i++) {
        close(fds[i]);
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    FILE *null = fopen("/dev/null", "w");

    if (null) {
        error_report_set_stream(null);
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int before = count_fds();
    VhostUser *vu = vhost_user_new("fuzz", 2, &st_ops, NULL);
    size_t off = 0;
    int front;

    stub_vu = vu;

    if (!connect_pair(vu, &front)) {
        abort();
    }
    while (off + 3 <= size) {
        uint8_t spec = data[off];
        size_t len = data[off + 1] | (size_t)data[off + 2] << 8;

        off += 3;
        len = len > 1024 ? 1024 : len;
        len = len > size - off ? size - off : len;
        if (spec & 0x80) {
            vhost_user_detach(vu);
            close(front);
            if (!connect_pair(vu, &front)) {
                abort();
            }
        }
        send_record(front, data + off, len, spec);
        off += len;
        if (!vhost_user_conn_read(vu)) {
            vhost_user_detach(vu);
            close(front);
            if (!connect_pair(vu, &front)) {
                abort();
            }
        }
        drain(front);
    }
    /* The front end goes away. */
    close(front);
    vhost_user_conn_read(vu);
    vhost_user_free(vu);
    stub_vu = NULL;
    if (running) {
        abort(); /* detach must stop the device */
    }
    if (count_fds() != before) {
        fprintf(stderr, "fd leak: %d before, %d after\n", before, count_fds());
        abort();
    }
    return 0;
}
