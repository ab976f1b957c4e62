/*
 * vblk-storage-daemon's vhost-user-blk export, driven by an in-process
 * vhost-user front end: the test driver's memfd RAM and eventfds
 * (tests/driver), the handshake in QEMU 7.2's order, real virtio-blk I/O
 * checked against the backing file, hostile messages (each must drop the
 * connection with one error line naming the export and the message, and the
 * daemon must then serve a new connection), and the same session against
 * Debian's qemu-storage-daemon when it is installed (cross-check).
 *
 * The front end itself is vufront.c (shared with bench-vhost-user).
 *
 * Environment: VBLK_STORAGE_DAEMON (the binary; set by meson),
 * QEMU_STORAGE_DAEMON (default /usr/bin/qemu-storage-daemon).
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/virtio_blk.h>
#include <linux/virtio_config.h>
#include <linux/virtio_ring.h>
#include <json-glib/json-glib.h>

#include "vufront.h"
#include "vuexport.h"

#define DISK_SIZE           (16u << 20)
#define NQ                  FE_NQ
/* vhost-user-int.h's VHOST_USER_BACKEND_REPLY_TIMEOUT_MS */
#define BACKEND_REPLY_TIMEOUT_MS 2000
/* QEMU 7.2's virtio-blk config space: up to and including unused1 (60 bytes). */
#define CFG_SIZE (offsetof(struct virtio_blk_config, unused1) + 3)

typedef struct Daemon {
    GPid pid;
    char *dir, *sock, *img, *log, *pidfile;
    bool qsd;
} Daemon;

static char *tmpdir;

/* ---- daemon ---- */

static const char *daemon_path(bool qsd)
{
    const char *p = g_getenv(qsd ? "QEMU_STORAGE_DAEMON" : "VBLK_STORAGE_DAEMON");

    return p ? p : qsd ? "/usr/bin/qemu-storage-daemon" : "vblk-storage-daemon";
}

static const char *export_extra = ""; /* appended to --export (vblk only) */
static bool with_qmp;                 /* vblk only: a null node and a QMP monitor too */

static bool keep_image;               /* daemon_start: reuse the image (restart after a crash) */
static const char *blockdev_override; /* daemon_start: this --blockdev instead of the file */

static Daemon *daemon_start(bool qsd)
{
    Daemon *dm = g_new0(Daemon, 1);
    g_autofree char *bd = NULL, *ex = NULL;
    int imgfd;

    dm->qsd = qsd;
    dm->dir = g_build_filename(tmpdir, qsd ? "qsd" : "vblk", NULL);
    g_mkdir_with_parents(dm->dir, 0700);
    dm->sock = g_build_filename(dm->dir, "vu.sock", NULL);
    dm->img = g_build_filename(dm->dir, "disk.img", NULL);
    dm->log = g_build_filename(dm->dir, "stderr", NULL);
    dm->pidfile = g_build_filename(dm->dir, "pid", NULL);
    unlink(dm->pidfile);
    imgfd = open(dm->img, O_RDWR | O_CREAT | (keep_image ? 0 : O_TRUNC), 0600);
    g_assert_cmpint(imgfd, >=, 0);
    g_assert_cmpint(ftruncate(imgfd, DISK_SIZE), ==, 0);
    close(imgfd);
    bd = blockdev_override ? g_strdup(blockdev_override)
                           : g_strdup_printf("driver=file,node-name=disk,filename=%s", dm->img);
    ex = g_strdup_printf("type=vhost-user-blk,id=exp0,node-name=disk,addr.type=unix,"
                         "addr.path=%s,writable=on,num-queues=%d%s",
                         dm->sock, NQ, qsd ? "" : export_extra);
    {
        g_autofree char *qmp =
            g_strdup_printf("socket,id=qmp0,path=%s/qmp.sock,server=on,wait=off", dm->dir);
        const char *argv[] = {
            daemon_path(qsd), "--blockdev", bd,
            "--export",       ex,           "--pidfile",
            dm->pidfile,      "--blockdev", "driver=null-co,node-name=nul,size=1M,read-zeroes=on",
            "--chardev",      qmp,          "--monitor",
            "chardev=qmp0",   NULL};

        if (qsd || !with_qmp) {
            argv[7] = NULL;
        }
        dm->pid = vu_spawn_logged(argv, dm->log);
    }
    /* The pidfile is written once the export listens. */
    for (int i = 0; i < 1000 && !g_file_test(dm->pidfile, G_FILE_TEST_EXISTS); i++) {
        g_usleep(10000);
    }
    g_assert_true(g_file_test(dm->pidfile, G_FILE_TEST_EXISTS));
    return dm;
}

static char *daemon_log(Daemon *dm)
{
    char *s = NULL;

    g_file_get_contents(dm->log, &s, NULL, NULL);
    return s ? s : g_strdup("");
}

static void daemon_stop(Daemon *dm)
{
    int status;

    if (dm->pid) {
        kill(dm->pid, SIGTERM);
        g_assert_cmpint(waitpid(dm->pid, &status, 0), ==, dm->pid);
        g_spawn_close_pid(dm->pid);
    } else {
        status = 0; /* already reaped by the test */
    }
    if (!dm->qsd) {
        /* A clean exit: nothing leaked that ASan would report, status 0. */
        g_autofree char *log = daemon_log(dm);

        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            g_printerr("daemon log:\n%s\n", log);
        }
        g_assert_true(WIFEXITED(status));
        g_assert_cmpint(WEXITSTATUS(status), ==, 0);
        /* Sanitizer builds: no report of any kind from the daemon. */
        g_assert_null(strstr(log, "runtime error"));
        g_assert_null(strstr(log, "Sanitizer"));
    }
    unlink(dm->img);
    unlink(dm->log);
    unlink(dm->sock);
    {
        g_autofree char *q = g_build_filename(dm->dir, "qmp.sock", NULL);

        unlink(q);
    }
    rmdir(dm->dir);
    g_free(dm->dir);
    g_free(dm->sock);
    g_free(dm->img);
    g_free(dm->log);
    g_free(dm->pidfile);
    g_free(dm);
}


/* ---- tests ---- */

/* Real I/O on both queues, checked against the file; GET_VRING_BASE; a second session. */
static void test_io(void)
{
    Daemon *dm = daemon_start(false);
    Fe *fe = fe_open(dm->sock, 2);
    static uint8_t w[65536], r[65536], f[65536];
    uint32_t st[2] = {0, 0};
    int fd;

    fe_start(fe, NQ);
    for (unsigned i = 0; i < 65536; i++) {
        w[i] = (uint8_t)(i * 7 + 3);
    }
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 8, w, 65536), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_OUT, 1000, w, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_FLUSH, 0, NULL, 0), ==, VIRTIO_BLK_S_OK);
    memset(r, 0, 65536);
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_IN, 8, r, 65536), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 65536, w, 65536);
    /* On disk, at the right offsets. */
    fd = open(dm->img, O_RDONLY);
    g_assert_cmpint(pread(fd, f, 65536, 8 * 512), ==, 65536);
    g_assert_cmpmem(f, 65536, w, 65536);
    g_assert_cmpint(pread(fd, f, 4096, 1000 * 512), ==, 4096);
    g_assert_cmpmem(f, 4096, w, 4096);
    /* Beyond the end: IOERR, no crash. */
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, DISK_SIZE / 512, r, 512), ==,
                     VIRTIO_BLK_S_IOERR);
    /* Write zeroes, then read zeroes back. */
    if (fe->features & (1ull << VIRTIO_BLK_F_WRITE_ZEROES)) {
        struct virtio_blk_discard_write_zeroes seg = {.sector = 8, .num_sectors = 8, .flags = 0};

        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_WRITE_ZEROES, 0, &seg, sizeof(seg)), ==,
                         VIRTIO_BLK_S_OK);
        g_assert_cmpint(pread(fd, f, 4096, 8 * 512), ==, 4096);
        memset(r, 0, 4096);
        g_assert_cmpmem(f, 4096, r, 4096);
    }
    close(fd);
    /* Stop queue 0: the next avail index is the number of requests it took. */
    fe_send(fe, GET_VRING_BASE, 0, st, 8, NULL, 0);
    fe_reply(fe, GET_VRING_BASE, st, 8);
    g_assert_cmpuint(st[0], ==, 0);
    g_assert_cmpuint(st[1], ==, testvq_avail_idx(fe->vq[0]));
    fe_close(fe);

    /* A new front end on the same daemon: fresh session, data still there. */
    fe = fe_open(dm->sock, 1);
    fe_start(fe, 1);
    memset(r, 0, 65536);
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 1000, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    fe_close(fe);
    daemon_stop(dm);
}

/* The same on the block-layer path (x-data-plane=off: rings served by the main loop). */
static void test_io_block_layer(void)
{
    export_extra = ",x-data-plane=off";
    test_io();
    export_extra = "";
}

/*
 * kill -9 of the daemon between requests: a new daemon on the same (stale)
 * socket path, the front end reconnects with the same memory and rings and
 * continues at the used index; every acknowledged write is there.
 */
static void test_reconnect(void)
{
    Daemon *dm = daemon_start(false);
    Fe *fe = fe_open(dm->sock, 2);
    uint8_t buf[4096];
    int status;

    fe_start(fe, NQ);
    for (unsigned i = 0; i < 16; i++) {
        memset(buf, 0x40 + i, sizeof(buf));
        g_assert_cmpuint(fe_io(fe, i % NQ, VIRTIO_BLK_T_OUT, i * 8, buf, 4096), ==,
                         VIRTIO_BLK_S_OK);
    }
    kill(dm->pid, SIGKILL);
    g_assert_cmpint(waitpid(dm->pid, &status, 0), ==, dm->pid);
    g_spawn_close_pid(dm->pid);
    g_assert_true(fe_dropped(fe));
    close(fe->s);
    {
        /* Same directory, same image: only the process is new. */
        Daemon *old = dm;

        keep_image = true;
        dm = daemon_start(false);
        keep_image = false;
        g_free(old->dir);
        g_free(old->sock);
        g_free(old->img);
        g_free(old->log);
        g_free(old->pidfile);
        g_free(old);
    }
    fe->s = fe_connect(dm->sock);
    fe_handshake(fe);
    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    fe_mem_table(fe, NEED_REPLY);
    fe_ack(fe, SET_MEM_TABLE);
    for (unsigned i = 0; i < NQ; i++) {
        fe_vring(fe, i, 128);
    }
    for (unsigned i = 0; i < NQ; i++) {
        fe_enable(fe, i, 1);
    }
    for (unsigned i = 0; i < 16; i++) {
        g_assert_cmpuint(fe_io(fe, (i + 1) % NQ, VIRTIO_BLK_T_IN, i * 8, buf, 4096), ==,
                         VIRTIO_BLK_S_OK);
        g_assert_cmpuint(buf[0], ==, 0x40 + i);
        g_assert_cmpuint(buf[4095], ==, 0x40 + i);
    }
    fe_close(fe);
    daemon_stop(dm);
}

/* ---- inflight I/O tracking (INFLIGHT_SHMFD) ---- */

typedef struct {
    uint64_t mmap_size, mmap_offset;
    uint16_t num_queues, queue_size;
    uint32_t pad;
} FeInflight;

/* The back end's layout (docs/vhost-user.md): per queue 16 + 16 * size bytes, 64-aligned. */
typedef struct {
    uint8_t inflight;
    uint8_t padding[5];
    uint16_t next;
    uint64_t counter;
} FeInflightDesc;

typedef struct {
    uint64_t features;
    uint16_t version, desc_num, last_batch_head, used_idx;
    FeInflightDesc desc[];
} FeInflightQueue;

static uint64_t inflight_queue_bytes(unsigned qs)
{
    return (16 + 16ull * qs + 63) & ~63ull;
}

static void fe_negotiate_inflight(Fe *fe)
{
    fe->proto |= P_INFLIGHT;
    fe_set_u64(fe, SET_PROTOCOL_FEATURES, fe->proto);
}

/* GET_INFLIGHT_FD: the reply and its one fd. */
static int fe_get_inflight(Fe *fe, uint16_t nq, uint16_t qs, FeInflight *out)
{
    FeInflight in = {.num_queues = nq, .queue_size = qs};
    union {
        char b[CMSG_SPACE(4 * sizeof(int))];
        struct cmsghdr align;
    } ctl;
    uint8_t buf[12 + sizeof(FeInflight)];
    struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
    struct msghdr mh = {
        .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.b, .msg_controllen = sizeof(ctl.b)};
    struct pollfd p = {.fd = fe->s, .events = POLLIN};
    uint32_t h[3];
    struct cmsghdr *c;
    int fd = -1;

    g_assert_cmpuint(sizeof(FeInflight), ==, 24);
    fe_send(fe, GET_INFLIGHT_FD, 0, &in, sizeof(in), NULL, 0);
    g_assert_cmpint(poll(&p, 1, 10000), ==, 1);
    /* The whole reply arrives in one segment with its fd (the daemon sends it with one sendmsg). */
    g_assert_cmpint(recvmsg(fe->s, &mh, MSG_CMSG_CLOEXEC | MSG_WAITALL), ==, sizeof(buf));
    memcpy(h, buf, 12);
    g_assert_cmpuint(h[0], ==, GET_INFLIGHT_FD);
    g_assert_cmphex(h[1], ==, 0x5);
    g_assert_cmpuint(h[2], ==, sizeof(FeInflight));
    memcpy(out, buf + 12, sizeof(*out));
    for (c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c)) {
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            g_assert_cmpuint(c->cmsg_len, ==, CMSG_LEN(sizeof(int)));
            memcpy(&fd, CMSG_DATA(c), sizeof(int));
        }
    }
    g_assert_cmpint(fd, >=, 0);
    return fd;
}

static void fe_set_inflight(Fe *fe, int fd, const FeInflight *in)
{
    fe_send(fe, SET_INFLIGHT_FD, NEED_REPLY, in, sizeof(*in), &fd, 1);
    fe_ack(fe, SET_INFLIGHT_FD);
}

static FeInflightQueue *inflight_queue(void *map, unsigned qs, unsigned i)
{
    return (FeInflightQueue *)((uint8_t *)map + i * inflight_queue_bytes(qs));
}

static unsigned inflight_count(FeInflightQueue *q, unsigned qs)
{
    unsigned n = 0;

    for (unsigned i = 0; i < qs; i++) {
        n += __atomic_load_n(&q->desc[i].inflight, __ATOMIC_RELAXED) != 0;
    }
    return n;
}

/*
 * GET_INFLIGHT_FD: an fd (a sealed memfd) of exactly the advertised size,
 * initialised per queue; SET_INFLIGHT_FD takes it back; the region then
 * follows real I/O (nothing left in flight, used_idx = the ring's).
 */
static void test_inflight_fd(void)
{
    Daemon *dm = daemon_start(false);
    Fe *fe;
    FeInflight r;
    struct stat st;
    uint8_t buf[4096];
    void *map;
    int fd;

    fe_want_inflight = true;
    fe = fe_open(dm->sock, 2);
    fe_want_inflight = false;
    /* Two geometries: the largest ring, and the one used below. */
    fd = fe_get_inflight(fe, 1, 1024, &r);
    g_assert_cmpuint(r.num_queues, ==, 1);
    g_assert_cmpuint(r.queue_size, ==, 1024);
    g_assert_cmpuint(r.mmap_offset, ==, 0);
    g_assert_cmpuint(r.mmap_size, ==, inflight_queue_bytes(1024));
    g_assert_cmpint(fstat(fd, &st), ==, 0);
    g_assert_cmpint(st.st_size, ==, (off_t)r.mmap_size);
    close(fd);
    fd = fe_get_inflight(fe, NQ, 128, &r);
    g_assert_cmpuint(r.mmap_size, ==, NQ * inflight_queue_bytes(128));
    g_assert_cmpint(fstat(fd, &st), ==, 0);
    g_assert_cmpint(st.st_size, ==, (off_t)r.mmap_size);
    g_assert_cmpint(fcntl(fd, F_GET_SEALS) & F_SEAL_SHRINK, !=, 0);
    map = mmap(NULL, r.mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert_true(map != MAP_FAILED);
    for (unsigned i = 0; i < NQ; i++) {
        g_assert_cmpuint(inflight_queue(map, 128, i)->version, ==, 1);
        g_assert_cmpuint(inflight_queue(map, 128, i)->desc_num, ==, 128);
        g_assert_cmpuint(inflight_count(inflight_queue(map, 128, i), 128), ==, 0);
    }
    fe_set_inflight(fe, fd, &r);
    fe_start(fe, NQ);
    for (unsigned i = 0; i < 10; i++) {
        memset(buf, 0x11 + i, sizeof(buf));
        g_assert_cmpuint(fe_io(fe, i % NQ, VIRTIO_BLK_T_OUT, i * 8, buf, 4096), ==,
                         VIRTIO_BLK_S_OK);
    }
    for (unsigned i = 0; i < NQ; i++) {
        FeInflightQueue *q = inflight_queue(map, 128, i);

        g_assert_cmpuint(inflight_count(q, 128), ==, 0);
        g_assert_cmpuint(__atomic_load_n(&q->used_idx, __ATOMIC_ACQUIRE), ==,
                         testvq_used_idx(fe->vq[i]));
        g_assert_cmpuint(q->used_idx, ==, 5);
    }
    munmap(map, r.mmap_size);
    close(fd);
    fe_close(fe);
    daemon_stop(dm);
}

/* kill -9 and a new daemon on the same directory, image and socket. */
static Daemon *daemon_crash_restart(Daemon *dm, const char *blockdev, const char *extra)
{
    Daemon *old = dm;
    int status;

    kill(dm->pid, SIGKILL);
    g_assert_cmpint(waitpid(dm->pid, &status, 0), ==, dm->pid);
    g_assert_true(WIFSIGNALED(status));
    g_spawn_close_pid(dm->pid);
    keep_image = true;
    blockdev_override = blockdev;
    export_extra = extra;
    dm = daemon_start(false);
    keep_image = false;
    blockdev_override = NULL;
    export_extra = "";
    g_free(old->dir);
    g_free(old->sock);
    g_free(old->img);
    g_free(old->log);
    g_free(old->pidfile);
    g_free(old);
    return dm;
}

/* QEMU's reconnect: handshake, SET_INFLIGHT_FD with the kept fd, rings at the used index. */
static void fe_reconnect_inflight(Fe *fe, Daemon *dm, int fd, const FeInflight *r)
{
    g_assert_true(fe_dropped(fe));
    close(fe->s);
    fe->s = fe_connect(dm->sock);
    fe_want_inflight = true;
    fe_handshake(fe);
    fe_want_inflight = false;
    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    fe_set_inflight(fe, fd, r);
    fe_mem_table(fe, NEED_REPLY);
    fe_ack(fe, SET_MEM_TABLE);
    for (unsigned i = 0; i < NQ; i++) {
        fe_vring(fe, i, 128); /* SET_VRING_BASE = the used index */
    }
    for (unsigned i = 0; i < NQ; i++) {
        fe_enable(fe, i, 1);
    }
}

#define KILL_ACKED    16 /* writes acknowledged before the first kill */
#define KILL_INFLIGHT 32 /* writes in flight at the second kill */

/*
 * Requests in flight at kill -9 complete exactly once after a restart.
 * 1. daemon A (file node; @extra picks the path): inflight region set up,
 *    16 writes acknowledged; kill -9 between requests.
 * 2. daemon B on the same socket, a null node that answers after 60 s (the
 *    block layer's null driver; the dataplane's has no latency): the front
 *    end reconnects with the region, 32 writes (16 per queue) are popped and
 *    marked in flight (watched in the region); kill -9 with all 32 in flight
 *    and none completed.
 * 3. daemon C (file node again, same image, @extra's path): reconnect with
 *    SET_INFLIGHT_FD and SET_VRING_BASE = used index, no kick. Each of the
 *    32 heads must come back exactly once (one used element each, nothing
 *    more after a pause), status OK, the region clean, and all 48 writes on
 *    disk with their data. Then the rings go on with new I/O.
 */
static void inflight_kill(const char *extra)
{
    static const char *slow =
        "driver=null-co,node-name=disk,size=16M,read-zeroes=on,latency-ns=60000000000";
    Daemon *dm;
    Fe *fe;
    FeInflight r;
    TestBlkReq req[KILL_INFLIGHT], ids[KILL_INFLIGHT];
    unsigned nids = 0;
    uint8_t buf[4096], f[4096];
    unsigned seen[NQ][128];
    void *map;
    int fd, imgfd;
    g_autofree char *log = NULL;

    export_extra = extra;
    dm = daemon_start(false);
    export_extra = "";
    fe_want_inflight = true;
    fe = fe_open(dm->sock, 2);
    fe_want_inflight = false;
    /* QEMU 7.2's order: features, GET/SET_INFLIGHT_FD, then memory and rings. */
    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    fd = fe_get_inflight(fe, NQ, 128, &r);
    fe_set_inflight(fe, fd, &r);
    map = mmap(NULL, r.mmap_size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    g_assert_true(map != MAP_FAILED);
    fe_start(fe, NQ);
    memset(seen, 0, sizeof(seen));
    for (unsigned i = 0; i < KILL_ACKED; i++) {
        memset(buf, 0x40 + i, sizeof(buf));
        g_assert_cmpuint(fe_io(fe, i % NQ, VIRTIO_BLK_T_OUT, i * 8, buf, 4096), ==,
                         VIRTIO_BLK_S_OK);
    }

    /*
     * 2: a slow daemon takes 32 writes and is killed with all of them in
     * flight. Between them, GET_ID requests complete at once, so the used
     * ring runs ahead out of order: resuming at the used index alone would
     * repeat some of those and lose some writes.
     */
    dm = daemon_crash_restart(dm, slow, ",x-data-plane=off");
    fe_reconnect_inflight(fe, dm, fd, &r);
    for (unsigned i = 0; i < KILL_INFLIGHT; i++) {
        memset(buf, 0x80 + i, sizeof(buf));
        req[i] = testblk_submit(fe->vq[i % NQ], VIRTIO_BLK_T_OUT, 1000 + i * 8, buf, 4096, i & 2);
        g_assert_cmpint(req[i].head, >=, 0);
        if (i % 4 == 3) {
            /* after every second write of a queue */
            for (unsigned q = 0; q < NQ; q++) {
                ids[nids] = testblk_submit(fe->vq[q], VIRTIO_BLK_T_GET_ID, 0, NULL, 20, false);
                g_assert_cmpint(ids[nids].head, >=, 0);
                nids++;
            }
        }
    }
    for (unsigned q = 0; q < NQ; q++) {
        testvq_kick_force(fe->vq[q]);
    }
    for (unsigned t = 0; t < 1000; t++) {
        if (inflight_count(inflight_queue(map, 128, 0), 128) == KILL_INFLIGHT / NQ &&
            inflight_count(inflight_queue(map, 128, 1), 128) == KILL_INFLIGHT / NQ &&
            testvq_used_idx(fe->vq[0]) == (KILL_ACKED + nids) / NQ &&
            testvq_used_idx(fe->vq[1]) == (KILL_ACKED + nids) / NQ) {
            break;
        }
        g_usleep(10000);
    }
    for (unsigned q = 0; q < NQ; q++) {
        FeInflightQueue *iq = inflight_queue(map, 128, q);
        uint16_t head;
        uint32_t len;

        g_assert_cmpuint(inflight_count(iq, 128), ==, KILL_INFLIGHT / NQ);
        /* Only the GET_IDs completed, after the writes in the avail ring. */
        g_assert_cmpuint(testvq_used_idx(fe->vq[q]), ==, (KILL_ACKED + nids) / NQ);
        g_assert_cmpuint(iq->used_idx, ==, (KILL_ACKED + nids) / NQ);
        for (unsigned n = 0; n < nids / NQ; n++) {
            g_assert_true(testvq_get_used(fe->vq[q], &head, &len));
            seen[q][head]++;
        }
    }
    for (unsigned i = 0; i < nids; i++) {
        g_assert_cmpuint(seen[i % NQ][ids[i].head], ==, 1);
        g_assert_cmpuint(testblk_status(fe->vq[i % NQ], &ids[i]), ==, VIRTIO_BLK_S_OK);
    }
    for (unsigned i = 0; i < KILL_INFLIGHT; i++) {
        g_assert_cmpuint(inflight_queue(map, 128, i % NQ)->desc[req[i].head].inflight, ==, 1);
    }

    /* 3: the real disk again; the front end hands the region back and waits. */
    dm = daemon_crash_restart(dm, NULL, extra);
    fe_reconnect_inflight(fe, dm, fd, &r);
    memset(seen, 0, sizeof(seen));
    for (unsigned q = 0; q < NQ; q++) {
        unsigned want = (KILL_ACKED + nids + KILL_INFLIGHT) / NQ;
        uint16_t head;
        uint32_t len;

        for (unsigned t = 0; t < 1000 && testvq_used_idx(fe->vq[q]) != want; t++) {
            g_usleep(10000);
        }
        g_assert_cmpuint(testvq_used_idx(fe->vq[q]), ==, want);
        for (unsigned n = 0; n < KILL_INFLIGHT / NQ; n++) {
            g_assert_true(testvq_get_used(fe->vq[q], &head, &len));
            g_assert_cmpuint(head, <, 128);
            seen[q][head]++;
            g_assert_cmpuint(len, ==, 1); /* a write: only the status byte */
        }
        g_assert_false(testvq_get_used(fe->vq[q], &head, &len));
    }
    for (unsigned i = 0; i < KILL_INFLIGHT; i++) {
        g_assert_cmpuint(seen[i % NQ][req[i].head], ==, 1);
        g_assert_cmpuint(testblk_status(fe->vq[i % NQ], &req[i]), ==, VIRTIO_BLK_S_OK);
    }
    /* Exactly once: nothing more shows up later. */
    g_usleep(300000);
    for (unsigned q = 0; q < NQ; q++) {
        FeInflightQueue *iq = inflight_queue(map, 128, q);

        g_assert_cmpuint(testvq_used_idx(fe->vq[q]), ==, (KILL_ACKED + nids + KILL_INFLIGHT) / NQ);
        g_assert_cmpuint(inflight_count(iq, 128), ==, 0);
        g_assert_cmpuint(iq->used_idx, ==, (KILL_ACKED + nids + KILL_INFLIGHT) / NQ);
    }
    log = daemon_log(dm);
    g_assert_nonnull(strstr(log, "exp0: ring 0: resubmitting 16 requests that were in flight"));
    g_assert_nonnull(strstr(log, "exp0: ring 1: resubmitting 16 requests that were in flight"));
    /* Every write on disk: the acknowledged ones and the resubmitted ones. */
    imgfd = open(dm->img, O_RDONLY);
    g_assert_cmpint(imgfd, >=, 0);
    for (unsigned i = 0; i < KILL_ACKED + KILL_INFLIGHT; i++) {
        bool acked = i < KILL_ACKED;
        unsigned j = acked ? i : i - KILL_ACKED;

        memset(buf, acked ? 0x40 + j : 0x80 + j, sizeof(buf));
        g_assert_cmpint(pread(imgfd, f, 4096, (acked ? j * 8 : 1000 + j * 8) * 512), ==, 4096);
        g_assert_cmpmem(f, 4096, buf, 4096);
    }
    close(imgfd);
    /* The rings go on: the next request of each queue is new and served once. */
    for (unsigned q = 0; q < NQ; q++) {
        memset(buf, 0xc0 + q, sizeof(buf));
        g_assert_cmpuint(fe_io(fe, q, VIRTIO_BLK_T_OUT, 3000 + q * 8, buf, 4096), ==,
                         VIRTIO_BLK_S_OK);
        memset(f, 0, sizeof(f));
        g_assert_cmpuint(fe_io(fe, q, VIRTIO_BLK_T_IN, 3000 + q * 8, f, 4096), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpmem(f, 4096, buf, 4096);
        g_assert_cmpuint(testvq_used_idx(fe->vq[q]), ==,
                         (KILL_ACKED + nids + KILL_INFLIGHT) / NQ + 2);
    }
    munmap(map, r.mmap_size);
    close(fd);
    fe_close(fe);
    daemon_stop(dm);
}

static void test_inflight_kill(void)
{
    inflight_kill("");
}

static void test_inflight_kill_block_layer(void)
{
    inflight_kill(",x-data-plane=off");
}

/*
 * cloud-hypervisor's order: SET_OWNER first, NEED_REPLY on every request
 * (requests with their own reply get only that), GET_CONFIG at 0x100,
 * memory by ADD_MEM_REG (CONFIGURE_MEM_SLOTS), all SET_VRING_NUM first,
 * then per ring ADDR, BASE, CALL, KICK, then the enables; later a region
 * removed and added back with REM/ADD_MEM_REG while the rings run.
 */
static uint64_t ch_get_u64(Fe *fe, uint32_t req)
{
    uint64_t v;

    fe_send(fe, req, NEED_REPLY, NULL, 0, NULL, 0);
    fe_reply(fe, req, &v, 8);
    return v;
}

static void ch_send(Fe *fe, uint32_t req, const void *p, uint32_t size, const int *fds, unsigned n)
{
    fe_send(fe, req, NEED_REPLY, p, size, fds, n);
    fe_ack(fe, req);
}

static void ch_region(Fe *fe, uint32_t req, unsigned i)
{
    uint64_t r[5] = {0, testdrv_region_gpa(fe->d, i), testdrv_region_size(fe->d, i),
                     FAKE_UVA + i * 0x40000000ull, testdrv_region_fd_offset(fe->d, i)};
    int fd = testdrv_memfd(fe->d);

    ch_send(fe, req, r, sizeof(r), &fd, req == ADD_MEM_REG ? 1 : 0);
}

static void test_ch_order(void)
{
    Daemon *dm = daemon_start(false);
    Fe *fe = g_new0(Fe, 1);
    TestDrvOpts o = {.ram_size = 32 << 20, .nregions = 2};
    uint8_t p[12 + CFG_SIZE] = {0};
    uint32_t c[3] = {0x100, CFG_SIZE, 0};
    struct virtio_blk_config cfg;
    uint8_t w[4096], r[4096];

    fe->backend = -1;
    fe->s = fe_connect(dm->sock);
    fe->d = testdrv_new(&o);
    fe_send(fe, SET_OWNER, 0, NULL, 0, NULL, 0); /* REPLY_ACK is not agreed yet */
    fe->host_features = fe_get_u64(fe, GET_FEATURES);
    fe->proto = fe_get_u64(fe, GET_PROTOCOL_FEATURES);
    g_assert_true(fe->proto & P_MEM_SLOTS);
    fe_set_u64(fe, SET_PROTOCOL_FEATURES, P_MQ | P_REPLY_ACK | P_CONFIG | P_MEM_SLOTS);
    g_assert_cmpuint(ch_get_u64(fe, GET_QUEUE_NUM), ==, NQ);
    g_assert_cmpuint(ch_get_u64(fe, GET_MAX_MEM_SLOTS), >=, 8);
    memcpy(p, c, 12);
    fe_send(fe, GET_CONFIG, NEED_REPLY, p, sizeof(p), NULL, 0);
    fe_reply(fe, GET_CONFIG, p, sizeof(p));
    memset(&cfg, 0, sizeof(cfg));
    memcpy(&cfg, p + 12, CFG_SIZE);
    g_assert_cmpuint(le64toh(cfg.capacity), ==, DISK_SIZE / 512);
    fe->features = testdrv_negotiate(
        fe->host_features, (1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_RING_F_EVENT_IDX) |
                               (1ull << VIRTIO_BLK_F_FLUSH) | (1ull << VIRTIO_BLK_F_MQ));
    {
        uint64_t f = fe->features | F_PROTOCOL_FEATURES;

        ch_send(fe, SET_FEATURES, &f, 8, NULL, 0);
    }
    for (unsigned i = 0; i < testdrv_nregions(fe->d); i++) {
        ch_region(fe, ADD_MEM_REG, i);
    }
    fe->nq = NQ;
    for (unsigned i = 0; i < NQ; i++) {
        uint32_t st[2] = {i, 256};

        fe->vq[i] = testvq_new(fe->d, 256, fe->features);
        ch_send(fe, SET_VRING_NUM, st, 8, NULL, 0);
    }
    for (unsigned i = 0; i < NQ; i++) {
        struct {
            uint32_t index, flags;
            uint64_t desc, used, avail, log;
        } a = {i,
               0,
               uva_of(fe, testvq_desc_gpa(fe->vq[i])),
               uva_of(fe, testvq_used_gpa(fe->vq[i])),
               uva_of(fe, testvq_avail_gpa(fe->vq[i])),
               0};
        uint32_t st[2] = {i, 0};
        uint64_t v = i;
        int kick = testvq_kick_fd(fe->vq[i]), call = testvq_call_fd(fe->vq[i]);

        ch_send(fe, SET_VRING_ADDR, &a, sizeof(a), NULL, 0);
        ch_send(fe, SET_VRING_BASE, st, 8, NULL, 0);
        ch_send(fe, SET_VRING_CALL, &v, 8, &call, 1);
        ch_send(fe, SET_VRING_KICK, &v, 8, &kick, 1);
    }
    for (unsigned i = 0; i < NQ; i++) {
        fe_enable(fe, i, 1);
    }
    memset(w, 0x77, sizeof(w));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 24, w, 4096), ==, VIRTIO_BLK_S_OK);
    /* Region 1 out and back in while the rings run (the device restarts on each map). */
    ch_region(fe, REM_MEM_REG, 1);
    ch_region(fe, ADD_MEM_REG, 1);
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_IN, 24, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    /* writeback through SET_CONFIG at 0x100 + 32, as CH writes it */
    {
        uint32_t sc[3] = {0x100 + offsetof(struct virtio_blk_config, wce), 1, 1};
        uint8_t set[13];

        memcpy(set, sc, 12);
        set[12] = 0;
        ch_send(fe, SET_CONFIG, set, 13, NULL, 0);
    }
    fe_close(fe);
    daemon_stop(dm);
}

/*
 * GET_VRING_BASE with requests in flight (a null node answering after
 * 300 ms, on the block-layer path): the reply comes only after every request completed and was
 * published, and says how many were taken.
 */
static void test_stop_inflight(void)
{
    Daemon *dm;
    Fe *fe;
    uint32_t st[2] = {0, 0};
    TestBlkReq req[8];
    gint64 t0;

    /* The dataplane's null engine has no latency: the block layer's null driver does. */
    blockdev_override =
        "driver=null-co,node-name=disk,size=16M,read-zeroes=on,latency-ns=300000000";
    export_extra = ",x-data-plane=off";
    dm = daemon_start(false);
    blockdev_override = NULL;
    export_extra = "";
    fe = fe_open(dm->sock, 1);
    fe_start(fe, 1);
    for (unsigned i = 0; i < 8; i++) {
        req[i] = testblk_submit(fe->vq[0], VIRTIO_BLK_T_IN, i * 8, NULL, 4096, false);
        g_assert_cmpint(req[i].head, >=, 0);
    }
    t0 = g_get_monotonic_time();
    testvq_kick_force(fe->vq[0]);
    g_usleep(50000); /* popped and submitted, not completed */
    g_assert_cmpuint(testvq_used_idx(fe->vq[0]), ==, 0);
    fe_send(fe, GET_VRING_BASE, 0, st, 8, NULL, 0);
    fe_reply(fe, GET_VRING_BASE, st, 8);
    g_assert_cmpint(g_get_monotonic_time() - t0, >=, 250000);
    g_assert_cmpuint(st[1], ==, 8);
    g_assert_cmpuint(testvq_used_idx(fe->vq[0]), ==, 8);
    for (unsigned i = 0; i < 8; i++) {
        g_assert_cmpuint(testblk_status(fe->vq[0], &req[i]), ==, VIRTIO_BLK_S_OK);
    }
    fe_close(fe);
    daemon_stop(dm);
}

/* Config space: GET_CONFIG at offset 0, writeback toggled with SET_CONFIG. */
static void test_config(void)
{
    Daemon *dm = daemon_start(false);
    Fe *fe = fe_open(dm->sock, 1);
    uint8_t p[12 + CFG_SIZE] = {0};
    uint32_t c[3] = {0, CFG_SIZE, 0};
    struct virtio_blk_config cfg;
    uint8_t set[13];

    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    memcpy(p, c, 12);
    fe_send(fe, GET_CONFIG, 0, p, sizeof(p), NULL, 0);
    fe_reply(fe, GET_CONFIG, p, sizeof(p));
    memset(&cfg, 0, sizeof(cfg));
    memcpy(&cfg, p + 12, CFG_SIZE);
    g_assert_cmpuint(le64toh(cfg.capacity), ==, DISK_SIZE / 512);
    g_assert_cmpuint(le32toh(cfg.blk_size), ==, 512);
    g_assert_cmpuint(le16toh(cfg.num_queues), ==, NQ);
    g_assert_cmpuint(le32toh(cfg.seg_max), ==, 126);
    c[0] = offsetof(struct virtio_blk_config, wce);
    c[1] = 1;
    memcpy(set, c, 12);
    set[12] = !cfg.wce;
    fe_send(fe, SET_CONFIG, NEED_REPLY, set, 13, NULL, 0);
    fe_ack(fe, SET_CONFIG);
    c[0] = 0;
    c[1] = CFG_SIZE;
    memcpy(p, c, 12);
    fe_send(fe, GET_CONFIG, 0, p, sizeof(p), NULL, 0);
    fe_reply(fe, GET_CONFIG, p, sizeof(p));
    g_assert_cmpuint(p[12 + offsetof(struct virtio_blk_config, wce)], ==, !cfg.wce);
    fe_close(fe);
    daemon_stop(dm);
}

/* ---- STATUS and RESET_DEVICE ---- */

static uint64_t fe_status(Fe *fe)
{
    return fe_get_u64(fe, GET_STATUS);
}

static void fe_set_status(Fe *fe, uint64_t v)
{
    fe_send(fe, SET_STATUS, NEED_REPLY, &v, 8, NULL, 0);
    fe_ack(fe, SET_STATUS);
}

/* QEMU 7.2's vhost_user_add_status: GET_STATUS, then SET_STATUS with @bits or-ed in. */
static void fe_add_status(Fe *fe, uint8_t bits)
{
    uint64_t s = fe_status(fe);

    if ((s & bits) != bits) {
        fe_set_status(fe, s | bits);
    }
}

#define S_STARTED (VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER | VIRTIO_CONFIG_S_DRIVER_OK)

/*
 * QEMU 7.2's vhost_dev_start with STATUS: SET_FEATURES and FEATURES_OK, the
 * memory table (unless @keep_mem), @nq new rings of 128 (kick, call,
 * enable), then ACKNOWLEDGE | DRIVER | DRIVER_OK.
 */
static void fe_start_status(Fe *fe, unsigned nq, bool keep_mem, bool driver_ok)
{
    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    fe_add_status(fe, VIRTIO_CONFIG_S_FEATURES_OK);
    if (!keep_mem) {
        fe_mem_table(fe, NEED_REPLY);
        fe_ack(fe, SET_MEM_TABLE);
    }
    fe->nq = nq;
    for (unsigned i = 0; i < nq; i++) {
        if (fe->vq[i]) {
            testvq_free(fe->vq[i]);
        }
        fe->vq[i] = testvq_new(fe->d, 128, fe->features);
        fe_vring(fe, i, 128);
    }
    for (unsigned i = 0; i < nq; i++) {
        fe_enable(fe, i, 1);
    }
    if (driver_ok) {
        fe_add_status(fe, S_STARTED);
    }
}

/* Queue @q's used index is still @used after @ms: nothing was served. */
static bool vq_quiet(Fe *fe, unsigned q, uint16_t used, int ms)
{
    g_usleep(ms * 1000);
    return testvq_used_idx(fe->vq[q]) == used;
}

/* The next used element of queue @q is @r's, within 10 s, with status OK. */
static void vq_expect_done(Fe *fe, unsigned q, TestBlkReq *r)
{
    uint16_t head;
    uint32_t len;

    g_assert_true(testvq_wait_used(fe->vq[q], 10000));
    g_assert_true(testvq_get_used(fe->vq[q], &head, &len));
    g_assert_cmpuint(head, ==, (uint16_t)r->head);
    g_assert_cmpuint(testblk_status(fe->vq[q], r), ==, VIRTIO_BLK_S_OK);
}

static uint8_t fe_config_wce(Fe *fe)
{
    uint32_t c[3] = {offsetof(struct virtio_blk_config, wce), 1, 0};
    uint8_t p[13] = {0};

    memcpy(p, c, 12);
    fe_send(fe, GET_CONFIG, 0, p, sizeof(p), NULL, 0);
    fe_reply(fe, GET_CONFIG, p, sizeof(p));
    return p[12];
}

static void fe_set_config_wce(Fe *fe, uint8_t v)
{
    uint32_t c[3] = {offsetof(struct virtio_blk_config, wce), 1, 0};
    uint8_t p[13];

    memcpy(p, c, 12);
    p[12] = v;
    fe_send(fe, SET_CONFIG, NEED_REPLY, p, sizeof(p), NULL, 0);
    fe_ack(fe, SET_CONFIG);
}

/* The daemon logged no dropped connection. */
static void daemon_log_clean(Daemon *dm)
{
    g_autofree char *log = daemon_log(dm);

    if (strstr(log, "dropping the connection")) {
        g_printerr("daemon log:\n%s\n", log);
        g_assert_not_reached();
    }
}

/*
 * STATUS in QEMU 7.2's order: GET_STATUS returns what SET_STATUS set
 * (FEATURES_OK only once features are set); kicked and enabled rings wait
 * for DRIVER_OK, which starts them and serves the request kicked before it;
 * SET_STATUS 0 (QEMU 7.2 sends it before GET_VRING_BASE) stops them, and
 * GET_VRING_BASE then returns each ring's base; a restart at those bases
 * serves the request queued while stopped.
 */
static void test_status(void)
{
    Daemon *dm = daemon_start(false);
    uint8_t w[4096], r[4096];
    TestBlkReq req;
    Fe *fe;

    fe_want_proto = P_STATUS;
    fe = fe_open(dm->sock, 2);
    fe_want_proto = 0;
    g_assert_cmphex(fe_status(fe), ==, 0);
    /* FEATURES_OK before SET_FEATURES: not kept (the device refuses, as virtio says). */
    fe_set_status(fe, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
                          VIRTIO_CONFIG_S_FEATURES_OK);
    g_assert_cmphex(fe_status(fe), ==, VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER);
    fe_start_status(fe, NQ, false, false);
    g_assert_cmphex(fe_status(fe), ==,
                    VIRTIO_CONFIG_S_ACKNOWLEDGE | VIRTIO_CONFIG_S_DRIVER |
                        VIRTIO_CONFIG_S_FEATURES_OK);
    /* Rings kicked and enabled, no DRIVER_OK: a request waits. */
    memset(w, 0x3c, sizeof(w));
    req = testblk_submit(fe->vq[0], VIRTIO_BLK_T_OUT, 40, w, 4096, false);
    g_assert_cmpint(req.head, >=, 0);
    testvq_kick_force(fe->vq[0]);
    g_assert_true(vq_quiet(fe, 0, 0, 300));
    /* DRIVER_OK starts the rings: the waiting write is served, with no new kick. */
    fe_add_status(fe, S_STARTED);
    g_assert_cmphex(fe_status(fe), ==, S_STARTED | VIRTIO_CONFIG_S_FEATURES_OK);
    vq_expect_done(fe, 0, &req);
    memset(r, 0, sizeof(r));
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_IN, 40, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    /* QEMU 7.2's stop: SET_STATUS 0 first. The rings stop; a new request waits. */
    fe_set_status(fe, 0);
    g_assert_cmphex(fe_status(fe), ==, 0);
    memset(w, 0x4d, sizeof(w));
    req = testblk_submit(fe->vq[1], VIRTIO_BLK_T_OUT, 48, w, 4096, false);
    g_assert_cmpint(req.head, >=, 0);
    testvq_kick_force(fe->vq[1]);
    g_assert_true(vq_quiet(fe, 1, 1, 300));
    /* Then GET_VRING_BASE of each ring: the requests taken, not the one waiting. */
    for (unsigned i = 0; i < NQ; i++) {
        uint32_t st[2] = {i, 0};

        fe_send(fe, GET_VRING_BASE, 0, st, 8, NULL, 0);
        fe_reply(fe, GET_VRING_BASE, st, 8);
        g_assert_cmpuint(st[0], ==, i);
        g_assert_cmpuint(st[1], ==, 1);
        g_assert_cmpuint(st[1], ==, testvq_used_idx(fe->vq[i]));
    }
    g_assert_cmpuint(testvq_avail_idx(fe->vq[1]), ==, 2);
    /* Started again at those bases (same rings): the waiting write is served. */
    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    fe_add_status(fe, VIRTIO_CONFIG_S_FEATURES_OK);
    for (unsigned i = 0; i < NQ; i++) {
        fe_vring(fe, i, 128);
        fe_enable(fe, i, 1);
    }
    g_assert_true(vq_quiet(fe, 1, 1, 100));
    fe_add_status(fe, S_STARTED);
    vq_expect_done(fe, 1, &req);
    memset(r, 0, sizeof(r));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 48, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    /* FAILED stops the rings too. */
    fe_add_status(fe, VIRTIO_CONFIG_S_FAILED);
    req = testblk_submit(fe->vq[0], VIRTIO_BLK_T_IN, 48, NULL, 4096, false);
    testvq_kick_force(fe->vq[0]);
    g_assert_true(vq_quiet(fe, 0, 2, 300));
    fe_close(fe);
    /* A front end without STATUS: rings run as soon as they are ready (no DRIVER_OK). */
    fe = fe_open(dm->sock, 1);
    fe_start(fe, 1);
    memset(r, 0, sizeof(r));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 40, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(r[0], ==, 0x3c);
    fe_close(fe);
    daemon_log_clean(dm);
    daemon_stop(dm);
}

static void test_status_block_layer(void)
{
    export_extra = ",x-data-plane=off";
    test_status();
    export_extra = "";
}

/*
 * RESET_DEVICE: the rings stop (a request kicked afterwards waits), the
 * status is 0, writeback is back to its initial value; the front end sets
 * up new rings on the memory table it gave before (kept), and they serve
 * I/O, with the data written before the reset read back.
 */
static void test_reset_device(void)
{
    Daemon *dm = daemon_start(false);
    uint8_t w[4096], r[4096];
    TestBlkReq req;
    uint8_t wce;
    Fe *fe;

    fe_want_proto = P_STATUS | P_RESET_DEVICE;
    fe = fe_open(dm->sock, 2);
    fe_want_proto = 0;
    fe_start_status(fe, NQ, false, true);
    memset(w, 0x11, sizeof(w));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 8, w, 4096), ==, VIRTIO_BLK_S_OK);
    wce = fe_config_wce(fe);
    fe_set_config_wce(fe, !wce);
    g_assert_cmpuint(fe_config_wce(fe), ==, !wce);
    fe_send(fe, RESET_DEVICE, NEED_REPLY, NULL, 0, NULL, 0);
    fe_ack(fe, RESET_DEVICE);
    g_assert_cmphex(fe_status(fe), ==, 0);
    g_assert_cmpuint(fe_config_wce(fe), ==, wce);
    /* The old rings are no longer served. */
    req = testblk_submit(fe->vq[1], VIRTIO_BLK_T_IN, 8, NULL, 4096, false);
    g_assert_cmpint(req.head, >=, 0);
    testvq_kick_force(fe->vq[1]);
    g_assert_true(vq_quiet(fe, 1, 0, 300));
    /* New rings, the memory table not sent again. */
    fe_start_status(fe, NQ, true, true);
    memset(r, 0, sizeof(r));
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_IN, 8, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    memset(w, 0x22, sizeof(w));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 16, w, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_IN, 16, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    /* Without STATUS the rings restart without DRIVER_OK. */
    fe_send(fe, RESET_DEVICE, 0, NULL, 0, NULL, 0);
    fe->proto &= ~P_STATUS;
    fe_set_u64(fe, SET_PROTOCOL_FEATURES, fe->proto);
    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    for (unsigned i = 0; i < NQ; i++) {
        testvq_free(fe->vq[i]);
        fe->vq[i] = testvq_new(fe->d, 128, fe->features);
        fe_vring(fe, i, 128);
        fe_enable(fe, i, 1);
    }
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 16, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    fe_close(fe);
    daemon_log_clean(dm);
    daemon_stop(dm);
}

/*
 * RESET_DEVICE with 8 requests in flight on a node that answers after 300
 * ms (block-layer path): the reply waits until all 8 are completed and
 * published.
 */
static void test_reset_device_inflight(void)
{
    TestBlkReq req[8];
    Daemon *dm;
    gint64 t0;
    Fe *fe;

    blockdev_override =
        "driver=null-co,node-name=disk,size=16M,read-zeroes=on,latency-ns=300000000";
    export_extra = ",x-data-plane=off";
    dm = daemon_start(false);
    blockdev_override = NULL;
    export_extra = "";
    fe_want_proto = P_RESET_DEVICE;
    fe = fe_open(dm->sock, 1);
    fe_want_proto = 0;
    fe_start(fe, 1);
    for (unsigned i = 0; i < 8; i++) {
        req[i] = testblk_submit(fe->vq[0], VIRTIO_BLK_T_IN, i * 8, NULL, 4096, false);
        g_assert_cmpint(req[i].head, >=, 0);
    }
    t0 = g_get_monotonic_time();
    testvq_kick_force(fe->vq[0]);
    g_usleep(50000); /* popped and submitted, not completed */
    g_assert_cmpuint(testvq_used_idx(fe->vq[0]), ==, 0);
    fe_send(fe, RESET_DEVICE, NEED_REPLY, NULL, 0, NULL, 0);
    fe_ack(fe, RESET_DEVICE);
    g_assert_cmpint(g_get_monotonic_time() - t0, >=, 250000);
    g_assert_cmpuint(testvq_used_idx(fe->vq[0]), ==, 8);
    for (unsigned i = 0; i < 8; i++) {
        g_assert_cmpuint(testblk_status(fe->vq[0], &req[i]), ==, VIRTIO_BLK_S_OK);
    }
    fe_close(fe);
    daemon_log_clean(dm);
    daemon_stop(dm);
}

static unsigned count_lines(const char *log, const char *what);

/* GET_STATUS until it shows NEEDS_RESET (the ring breaks in its owner thread, after the kick). */
static uint64_t fe_wait_needs_reset(Fe *fe)
{
    uint64_t s = 0;

    for (unsigned i = 0; i < 500; i++) {
        s = fe_status(fe);
        if (s & VIRTIO_CONFIG_S_NEEDS_RESET) {
            break;
        }
        g_usleep(10000);
    }
    return s;
}

/* On a fresh ring @q: one chain the virtqueue refuses, published and kicked. */
static void vq_publish_bad_chain(Fe *fe, unsigned q, bool loop)
{
    if (loop) {
        /* 0 -> 1 -> 0 ...: readable descriptors inside RAM (the table itself). */
        uint64_t ram = testvq_desc_gpa(fe->vq[q]);

        testvq_set_desc(fe->vq[q], 0, ram, 16, VRING_DESC_F_NEXT, 1);
        testvq_set_desc(fe->vq[q], 1, ram, 16, VRING_DESC_F_NEXT, 0);
    } else {
        testvq_set_desc(fe->vq[q], 0, 1ull << 50, 16, 0, 0); /* outside guest RAM */
    }
    testvq_publish(fe->vq[q], 0);
    testvq_kick_force(fe->vq[q]);
}

/*
 * DEVICE_NEEDS_RESET (virtio 2.1.2): a chain the virtqueue refuses breaks its
 * ring, and GET_STATUS shows NEEDS_RESET with the front end's own bits. The
 * broken ring serves nothing more; the other ring runs on. The front end
 * may write the bit back (QEMU 7.2's read-modify-write) without effect. Each
 * reset clears it: SET_STATUS 0, RESET_DEVICE, RESET_OWNER and a new
 * connection; new rings then serve I/O and the data written before reads
 * back.
 */
static void test_needs_reset(void)
{
    const uint64_t started = S_STARTED | VIRTIO_CONFIG_S_FEATURES_OK;
    const uint64_t broken = started | VIRTIO_CONFIG_S_NEEDS_RESET;
    Daemon *dm = daemon_start(false);
    uint8_t w[4096], w2[4096], r[4096];
    TestBlkReq req;
    Fe *fe;

    fe_want_proto = P_STATUS | P_RESET_DEVICE;
    fe = fe_open(dm->sock, 2);
    fe_start_status(fe, NQ, false, true);
    g_assert_cmphex(fe_status(fe), ==, started);
    memset(w, 0x6e, sizeof(w));
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_OUT, 24, w, 4096), ==, VIRTIO_BLK_S_OK);

    /* A descriptor outside guest RAM on ring 0. */
    vq_publish_bad_chain(fe, 0, false);
    g_assert_cmphex(fe_wait_needs_reset(fe), ==, broken);
    /* Ring 0 serves nothing more; ring 1 runs on. */
    req = testblk_submit(fe->vq[0], VIRTIO_BLK_T_IN, 24, NULL, 4096, false);
    g_assert_cmpint(req.head, >=, 0);
    testvq_kick_force(fe->vq[0]);
    g_assert_true(vq_quiet(fe, 0, 0, 300));
    memset(r, 0, sizeof(r));
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_IN, 24, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    /* Written back with the front end's bits: accepted, still set (only a reset clears it). */
    fe_set_status(fe, broken);
    g_assert_cmphex(fe_status(fe), ==, broken);
    /*
     * SET_STATUS 0 (a guest reset through QEMU 7.2) clears it. Then QEMU's
     * GET_VRING_BASE of each ring, and new rings: both serve, ring 0 too.
     */
    fe_set_status(fe, 0);
    g_assert_cmphex(fe_status(fe), ==, 0);
    for (unsigned i = 0; i < NQ; i++) {
        uint32_t st[2] = {i, 0};

        fe_send(fe, GET_VRING_BASE, 0, st, 8, NULL, 0);
        fe_reply(fe, GET_VRING_BASE, st, 8);
    }
    g_assert_cmphex(fe_status(fe), ==, 0);
    fe_start_status(fe, NQ, true, true);
    g_assert_cmphex(fe_status(fe), ==, started);
    memset(r, 0, sizeof(r));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 24, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);

    /* A chain that loops, on ring 1; ring 0 runs on; RESET_DEVICE clears it. */
    vq_publish_bad_chain(fe, 1, true);
    g_assert_cmphex(fe_wait_needs_reset(fe), ==, broken);
    memset(w2, 0x7f, sizeof(w2));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 32, w2, 4096), ==, VIRTIO_BLK_S_OK);
    fe_send(fe, RESET_DEVICE, NEED_REPLY, NULL, 0, NULL, 0);
    fe_ack(fe, RESET_DEVICE);
    g_assert_cmphex(fe_status(fe), ==, 0);
    fe_start_status(fe, NQ, true, true);
    g_assert_cmphex(fe_status(fe), ==, started);
    memset(r, 0, sizeof(r));
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_IN, 24, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_IN, 32, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w2, 4096);

    /* RESET_OWNER clears it (the status the front end set stays, as before). */
    vq_publish_bad_chain(fe, 0, false);
    g_assert_cmphex(fe_wait_needs_reset(fe), ==, broken);
    fe_send(fe, RESET_OWNER, NEED_REPLY, NULL, 0, NULL, 0);
    fe_ack(fe, RESET_OWNER);
    g_assert_cmphex(fe_status(fe), ==, started);
    fe_start_status(fe, NQ, true, true);
    memset(r, 0, sizeof(r));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 32, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w2, 4096);

    /* A broken ring, then the connection ends: the next session starts without it. */
    vq_publish_bad_chain(fe, 1, false);
    g_assert_cmphex(fe_wait_needs_reset(fe), ==, broken);
    fe_close(fe);
    fe = fe_open(dm->sock, 2);
    fe_want_proto = 0;
    g_assert_cmphex(fe_status(fe), ==, 0);
    fe_start_status(fe, NQ, false, true);
    g_assert_cmphex(fe_status(fe), ==, started);
    memset(r, 0, sizeof(r));
    g_assert_cmpuint(fe_io(fe, 1, VIRTIO_BLK_T_IN, 24, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    fe_close(fe);
    daemon_log_clean(dm);
    {
        g_autofree char *log = daemon_log(dm);

        /* One line per broken ring, each naming the export and the reason. */
        g_assert_cmpuint(count_lines(log, "exp0: virtqueue error:"), ==, 4);
        g_assert_cmpuint(count_lines(log, "(device needs reset)"), ==, 4);
        g_assert_cmpuint(count_lines(log, "descriptor buffer outside guest RAM"), ==, 3);
        g_assert_cmpuint(count_lines(log, "descriptor chain loops"), ==, 1);
    }
    daemon_stop(dm);
}

static void test_needs_reset_block_layer(void)
{
    export_extra = ",x-data-plane=off";
    test_needs_reset();
    export_extra = "";
}

typedef void HostileFn(Fe *fe);

static void h_bad_version(Fe *fe)
{
    uint32_t h[3] = {GET_FEATURES, 2, 0};

    fe_send_raw(fe->s, h, 12, NULL, 0);
}

static void h_unknown_request(Fe *fe)
{
    fe_send(fe, 200, 0, NULL, 0, NULL, 0);
}

static void h_oversized(Fe *fe)
{
    uint32_t h[3] = {SET_MEM_TABLE, 1, 1 << 20};

    fe_send_raw(fe->s, h, 12, NULL, 0);
}

static void h_payload_mismatch(Fe *fe)
{
    uint32_t v = 1;

    fe_send(fe, SET_FEATURES, 0, &v, 4, NULL, 0);
}

static void h_fd_on_fdless(Fe *fe)
{
    int fd = testdrv_memfd(fe->d);

    fe_send(fe, GET_QUEUE_NUM, 0, NULL, 0, &fd, 1);
}

static void h_too_many_fds(Fe *fe)
{
    int fds[12];

    for (unsigned i = 0; i < 12; i++) {
        fds[i] = testdrv_memfd(fe->d);
    }
    fe_send(fe, GET_QUEUE_NUM, 0, NULL, 0, fds, 12);
}

static void h_mem_fd_count(Fe *fe)
{
    uint8_t p[8 + 64] = {2};
    uint64_t r[8] = {0x100000, 0x100000, FAKE_UVA, 0, 0x300000, 0x100000, FAKE_UVA + 0x200000, 0};
    int fd = testdrv_memfd(fe->d);

    memcpy(p + 8, r, 64);
    fe_send(fe, SET_MEM_TABLE, 0, p, sizeof(p), &fd, 1);
}

static void h_mem_overlap(Fe *fe)
{
    uint8_t p[8 + 64] = {2};
    uint64_t r[8] = {0x100000, 0x200000, FAKE_UVA, 0, 0x200000, 0x100000, FAKE_UVA + 0x800000, 0};
    int fds[2] = {testdrv_memfd(fe->d), testdrv_memfd(fe->d)};

    memcpy(p + 8, r, 64);
    fe_send(fe, SET_MEM_TABLE, 0, p, sizeof(p), fds, 2);
}

static void h_mem_uva_overlap(Fe *fe)
{
    uint8_t p[8 + 64] = {2};
    uint64_t r[8] = {0x100000, 0x100000, FAKE_UVA, 0, 0x400000, 0x100000, FAKE_UVA + 0x80000, 0};
    int fds[2] = {testdrv_memfd(fe->d), testdrv_memfd(fe->d)};

    memcpy(p + 8, r, 64);
    fe_send(fe, SET_MEM_TABLE, 0, p, sizeof(p), fds, 2);
}

static void h_mem_wrap(Fe *fe)
{
    uint8_t p[8 + 32] = {1};
    uint64_t r[4] = {UINT64_MAX - 0xfff, 0x2000, FAKE_UVA, 0};
    int fd = testdrv_memfd(fe->d);

    memcpy(p + 8, r, 32);
    fe_send(fe, SET_MEM_TABLE, 0, p, sizeof(p), &fd, 1);
}

static void h_mem_beyond_fd(Fe *fe)
{
    uint8_t p[8 + 32] = {1};
    uint64_t r[4] = {0x100000, 1ull << 40, FAKE_UVA, 0};
    int fd = testdrv_memfd(fe->d);

    memcpy(p + 8, r, 32);
    fe_send(fe, SET_MEM_TABLE, 0, p, sizeof(p), &fd, 1);
}

static void h_ring_size(Fe *fe)
{
    uint32_t st[2] = {0, 1000};

    fe_send(fe, SET_VRING_NUM, 0, st, 8, NULL, 0);
}

static void h_ring_size_big(Fe *fe)
{
    uint32_t st[2] = {0, 2048};

    fe_send(fe, SET_VRING_NUM, 0, st, 8, NULL, 0);
}

static void h_queue_index(Fe *fe)
{
    uint32_t st[2] = {NQ, 128};

    fe_send(fe, SET_VRING_NUM, 0, st, 8, NULL, 0);
}

static void h_kick_index(Fe *fe)
{
    uint64_t v = 77;
    int fd = testvq_kick_fd(fe->vq[0]);

    fe_send(fe, SET_VRING_KICK, 0, &v, 8, &fd, 1);
}

static void h_kick_before_mem(Fe *fe)
{
    uint64_t v = 0;
    int fd = testvq_kick_fd(fe->vq[0]);

    fe_send(fe, SET_VRING_KICK, 0, &v, 8, &fd, 1);
}

static void h_call_not_eventfd(Fe *fe)
{
    uint64_t v = 0;
    int fd = testdrv_memfd(fe->d);

    fe_send(fe, SET_VRING_CALL, 0, &v, 8, &fd, 1);
}

static void h_ring_outside(Fe *fe)
{
    /* Memory first, then a ring whose used ring lies outside every region. */
    struct {
        uint32_t index, flags;
        uint64_t desc, used, avail, log;
    } a = {0, 0, FAKE_UVA, FAKE_UVA + (1ull << 36), FAKE_UVA + 0x1000, 0};
    uint32_t st[2] = {0, 128};
    uint64_t v = 0;
    int fd = testvq_kick_fd(fe->vq[0]);

    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    fe_mem_table(fe, 0);
    fe_send(fe, SET_VRING_NUM, 0, st, 8, NULL, 0);
    fe_send(fe, SET_VRING_ADDR, 0, &a, sizeof(a), NULL, 0);
    fe_send(fe, SET_VRING_KICK, 0, &v, 8, &fd, 1);
    st[1] = 1;
    fe_send(fe, SET_VRING_ENABLE, 0, st, 8, NULL, 0);
}

static void h_unoffered_feature(Fe *fe)
{
    fe_set_u64(fe, SET_FEATURES, fe->features | (1ull << 34)); /* RING_PACKED */
}

static void h_log_base(Fe *fe)
{
    uint64_t v[2] = {4096, 0};
    int fd = testdrv_memfd(fe->d);

    fe_send(fe, SET_LOG_BASE, 0, v, 16, &fd, 1);
}

static void h_config_range(Fe *fe)
{
    uint32_t c[3] = {50, 100, 0};
    uint8_t p[12 + 100] = {0};

    memcpy(p, c, 12);
    fe_send(fe, GET_CONFIG, 0, p, sizeof(p), NULL, 0);
}

static void h_set_config_other(Fe *fe)
{
    uint32_t c[3] = {0, 8, 0};
    uint8_t p[12 + 8] = {0};

    memcpy(p, c, 12);
    fe_send(fe, SET_CONFIG, 0, p, sizeof(p), NULL, 0);
}

static void h_second_owner(Fe *fe)
{
    fe_send(fe, SET_OWNER, 0, NULL, 0, NULL, 0);
}

static void h_mem_slots_unnegotiated(Fe *fe)
{
    fe_send(fe, GET_MAX_MEM_SLOTS, 0, NULL, 0, NULL, 0);
}

static void h_truncated(Fe *fe)
{
    uint32_t h[3] = {SET_FEATURES, 1, 8};

    /* Half a message, then the front end goes away (socket shut for writing). */
    fe_send_raw(fe->s, h, 12, NULL, 0);
    shutdown(fe->s, SHUT_WR);
}

/* SET_BACKEND_REQ_FD: one end of a new socketpair (the other is closed: nothing reads it). */
static void h_backend_req(Fe *fe, bool negotiate, unsigned nfds, uint32_t size)
{
    int sv[2], sv2[2];
    int fds[2];
    uint64_t pad = 0;

    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), ==, 0);
    g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv2), ==, 0);
    fds[0] = sv[1];
    fds[1] = sv2[1];
    if (negotiate) {
        fe->proto |= P_BACKEND_REQ;
        fe_set_u64(fe, SET_PROTOCOL_FEATURES, fe->proto);
    }
    fe_send(fe, SET_BACKEND_REQ_FD, NEED_REPLY, &pad, size, fds, nfds);
    close(sv[0]);
    close(sv[1]);
    close(sv2[0]);
    close(sv2[1]);
}

static void h_backend_req_unnegotiated(Fe *fe)
{
    h_backend_req(fe, false, 1, 0);
}

static void h_backend_req_no_fd(Fe *fe)
{
    h_backend_req(fe, true, 0, 0);
}

static void h_backend_req_two_fds(Fe *fe)
{
    h_backend_req(fe, true, 2, 0);
}

static void h_backend_req_payload(Fe *fe)
{
    h_backend_req(fe, true, 1, 8);
}

static void h_backend_req_not_socket(Fe *fe)
{
    int fd = testvq_call_fd(fe->vq[0]);

    fe->proto |= P_BACKEND_REQ;
    fe_set_u64(fe, SET_PROTOCOL_FEATURES, fe->proto);
    fe_send(fe, SET_BACKEND_REQ_FD, 0, NULL, 0, &fd, 1);
}

static void h_inflight_unnegotiated(Fe *fe)
{
    FeInflight in = {.num_queues = 1, .queue_size = 128};

    fe_send(fe, GET_INFLIGHT_FD, 0, &in, sizeof(in), NULL, 0);
}

static void h_inflight_queues(Fe *fe)
{
    FeInflight in = {.num_queues = NQ + 1, .queue_size = 128};

    fe_negotiate_inflight(fe);
    fe_send(fe, GET_INFLIGHT_FD, 0, &in, sizeof(in), NULL, 0);
}

static void h_inflight_qsize(Fe *fe)
{
    FeInflight in = {.num_queues = 1, .queue_size = 100};

    fe_negotiate_inflight(fe);
    fe_send(fe, GET_INFLIGHT_FD, 0, &in, sizeof(in), NULL, 0);
}

static void h_inflight_qsize_big(Fe *fe)
{
    FeInflight in = {.num_queues = 1, .queue_size = 2048};

    fe_negotiate_inflight(fe);
    fe_send(fe, GET_INFLIGHT_FD, 0, &in, sizeof(in), NULL, 0);
}

static void h_inflight_payload(Fe *fe)
{
    FeInflight in = {.num_queues = 1, .queue_size = 128};

    fe_negotiate_inflight(fe);
    fe_send(fe, GET_INFLIGHT_FD, 0, &in, 20, NULL, 0);
}

/* A sealed memfd of @size bytes, as GET_INFLIGHT_FD would give (or not sealed). */
static int inflight_memfd(uint64_t size, bool seal)
{
    int fd = memfd_create("fake-inflight", MFD_CLOEXEC | MFD_ALLOW_SEALING);

    g_assert_cmpint(fd, >=, 0);
    g_assert_cmpint(ftruncate(fd, (off_t)size), ==, 0);
    if (seal) {
        g_assert_cmpint(fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW), ==, 0);
    }
    return fd;
}

static void h_inflight_small_fd(Fe *fe)
{
    FeInflight in = {
        .mmap_size = NQ * inflight_queue_bytes(128), .num_queues = NQ, .queue_size = 128};
    int fd = inflight_memfd(4096, true);

    fe_negotiate_inflight(fe);
    fe_send(fe, SET_INFLIGHT_FD, 0, &in, sizeof(in), &fd, 1);
    close(fd);
}

static void h_inflight_size_mismatch(Fe *fe)
{
    FeInflight in = {.mmap_size = 8192, .num_queues = NQ, .queue_size = 128};
    int fd = inflight_memfd(8192, true);

    fe_negotiate_inflight(fe);
    fe_send(fe, SET_INFLIGHT_FD, 0, &in, sizeof(in), &fd, 1);
    close(fd);
}

static void h_inflight_offset(Fe *fe)
{
    FeInflight in = {.mmap_size = inflight_queue_bytes(64),
                     .mmap_offset = 100,
                     .num_queues = 1,
                     .queue_size = 64};
    int fd = inflight_memfd(65536, true);

    fe_negotiate_inflight(fe);
    fe_send(fe, SET_INFLIGHT_FD, 0, &in, sizeof(in), &fd, 1);
    close(fd);
}

static void h_inflight_unsealed(Fe *fe)
{
    FeInflight in = {.mmap_size = inflight_queue_bytes(128), .num_queues = 1, .queue_size = 128};
    int fd = inflight_memfd(inflight_queue_bytes(128), false);

    fe_negotiate_inflight(fe);
    fe_send(fe, SET_INFLIGHT_FD, 0, &in, sizeof(in), &fd, 1);
    close(fd);
}

/* Sealed against writes too: the back end's shared writable mmap fails. */
static void h_inflight_mmap_fails(Fe *fe)
{
    FeInflight in = {.mmap_size = inflight_queue_bytes(128), .num_queues = 1, .queue_size = 128};
    int fd = inflight_memfd(inflight_queue_bytes(128), true);

    g_assert_cmpint(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), ==, 0);
    fe_negotiate_inflight(fe);
    fe_send(fe, SET_INFLIGHT_FD, 0, &in, sizeof(in), &fd, 1);
    close(fd);
}

static void h_inflight_no_fd(Fe *fe)
{
    FeInflight in = {.mmap_size = inflight_queue_bytes(128), .num_queues = 1, .queue_size = 128};

    fe_negotiate_inflight(fe);
    fe_send(fe, SET_INFLIGHT_FD, 0, &in, sizeof(in), NULL, 0);
}

static void h_inflight_fd_on_get(Fe *fe)
{
    FeInflight in = {.num_queues = 1, .queue_size = 128};
    int fd = inflight_memfd(4096, true);

    fe_negotiate_inflight(fe);
    fe_send(fe, GET_INFLIGHT_FD, 0, &in, sizeof(in), &fd, 1);
    close(fd);
}

/* SET_INFLIGHT_FD after the ring was kicked (started). */
static void h_inflight_started(Fe *fe)
{
    FeInflight r;
    int fd;

    fe_negotiate_inflight(fe);
    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    fe_mem_table(fe, NEED_REPLY);
    fe_ack(fe, SET_MEM_TABLE);
    fd = fe_get_inflight(fe, 1, 128, &r);
    fe_vring(fe, 0, 128);
    fe_send(fe, SET_INFLIGHT_FD, 0, &r, sizeof(r), &fd, 1);
    close(fd);
}

/* A region for rings of 64, then a ring of 128: refused when the ring would start. */
static void h_inflight_uncovered(Fe *fe)
{
    FeInflight r;
    int fd;

    fe_negotiate_inflight(fe);
    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    fd = fe_get_inflight(fe, 1, 64, &r);
    fe_set_inflight(fe, fd, &r);
    close(fd);
    fe_mem_table(fe, NEED_REPLY);
    fe_ack(fe, SET_MEM_TABLE);
    fe_vring(fe, 0, 128);
    fe_send(fe, SET_VRING_ENABLE, 0, (uint32_t[2]){0, 1}, 8, NULL, 0);
}

static void h_negotiate(Fe *fe, uint64_t proto)
{
    fe->proto |= proto;
    fe_set_u64(fe, SET_PROTOCOL_FEATURES, fe->proto);
}

static void h_status_unnegotiated(Fe *fe)
{
    fe_set_u64(fe, SET_STATUS, VIRTIO_CONFIG_S_ACKNOWLEDGE);
}

static void h_get_status_unnegotiated(Fe *fe)
{
    fe_send(fe, GET_STATUS, 0, NULL, 0, NULL, 0);
}

static void h_status_payload(Fe *fe)
{
    uint32_t v = VIRTIO_CONFIG_S_DRIVER_OK;

    h_negotiate(fe, P_STATUS);
    fe_send(fe, SET_STATUS, 0, &v, 4, NULL, 0);
}

static void h_status_value(Fe *fe)
{
    h_negotiate(fe, P_STATUS);
    fe_set_u64(fe, SET_STATUS, 0x10f);
}

static void h_status_reserved(Fe *fe)
{
    h_negotiate(fe, P_STATUS);
    fe_set_u64(fe, SET_STATUS, 0x20 | VIRTIO_CONFIG_S_ACKNOWLEDGE);
}

static void h_status_needs_reset(Fe *fe)
{
    h_negotiate(fe, P_STATUS);
    fe_set_u64(fe, SET_STATUS, VIRTIO_CONFIG_S_NEEDS_RESET);
}

static void h_status_fd(Fe *fe)
{
    uint64_t v = VIRTIO_CONFIG_S_ACKNOWLEDGE;
    int fd = testvq_kick_fd(fe->vq[0]);

    h_negotiate(fe, P_STATUS);
    fe_send(fe, SET_STATUS, 0, &v, 8, &fd, 1);
}

static void h_get_status_payload(Fe *fe)
{
    uint64_t v = 0;

    h_negotiate(fe, P_STATUS);
    fe_send(fe, GET_STATUS, 0, &v, 8, NULL, 0);
}

static void h_reset_device_unnegotiated(Fe *fe)
{
    fe_send(fe, RESET_DEVICE, 0, NULL, 0, NULL, 0);
}

static void h_reset_device_payload(Fe *fe)
{
    uint64_t v = 0;

    h_negotiate(fe, P_RESET_DEVICE);
    fe_send(fe, RESET_DEVICE, 0, &v, 8, NULL, 0);
}

static void h_reset_device_fd(Fe *fe)
{
    int fd = testvq_kick_fd(fe->vq[0]);

    h_negotiate(fe, P_RESET_DEVICE);
    fe_send(fe, RESET_DEVICE, 0, NULL, 0, &fd, 1);
}

/* A ring set up and running, RESET_DEVICE, then a kick: the ring's size and addresses are gone. */
static void h_reset_device_kick(Fe *fe)
{
    uint64_t v = 0;
    int fd = testvq_kick_fd(fe->vq[0]);

    h_negotiate(fe, P_RESET_DEVICE);
    fe_set_u64(fe, SET_FEATURES, fe->features | F_PROTOCOL_FEATURES);
    fe_mem_table(fe, NEED_REPLY);
    fe_ack(fe, SET_MEM_TABLE);
    fe_vring(fe, 0, 128);
    fe_enable(fe, 0, 1);
    fe_send(fe, RESET_DEVICE, NEED_REPLY, NULL, 0, NULL, 0);
    fe_ack(fe, RESET_DEVICE);
    fe_send(fe, SET_VRING_KICK, 0, &v, 8, &fd, 1);
}

typedef struct Hostile {
    const char *name;
    HostileFn *fn;
    const char *msg; /* in the error line */
} Hostile;

static const Hostile hostile[] = {
    {"bad-version", h_bad_version, " VHOST_USER_GET_FEATURES: flags"},
    {"unknown-request", h_unknown_request, " request ?: unknown request 200"},
    {"oversized", h_oversized, " VHOST_USER_SET_MEM_TABLE: payload of 1048576"},
    {"payload-mismatch", h_payload_mismatch, " VHOST_USER_SET_FEATURES: payload of 4 bytes"},
    {"fd-on-fdless", h_fd_on_fdless, " VHOST_USER_GET_QUEUE_NUM: 1 fds, expected 0"},
    {"too-many-fds", h_too_many_fds, ": more than 8 fds in one message"},
    {"mem-fd-count", h_mem_fd_count, " VHOST_USER_SET_MEM_TABLE: 1 fds, expected 2"},
    {"mem-overlap", h_mem_overlap, " VHOST_USER_SET_MEM_TABLE: memory region at 0x200000 overlaps"},
    {"mem-uva-overlap", h_mem_uva_overlap,
     " VHOST_USER_SET_MEM_TABLE: memory region at 0x400000 overlaps"},
    {"mem-wrap", h_mem_wrap,
     " VHOST_USER_SET_MEM_TABLE: memory region at 0xfffffffffffff000 wraps"},
    {"mem-beyond-fd", h_mem_beyond_fd,
     " VHOST_USER_SET_MEM_TABLE: memory region at 0x100000: offset 0x0 + size 0x10000000000 is "
     "beyond the end of its fd"},
    {"ring-size", h_ring_size, " VHOST_USER_SET_VRING_NUM: ring 0: size 1000"},
    {"ring-size-big", h_ring_size_big, " VHOST_USER_SET_VRING_NUM: ring 0: size 2048"},
    {"queue-index", h_queue_index, " VHOST_USER_SET_VRING_NUM: ring 2 out of range"},
    {"kick-index", h_kick_index, " VHOST_USER_SET_VRING_KICK: ring 77 out of range"},
    {"kick-before-mem", h_kick_before_mem, " VHOST_USER_SET_VRING_KICK: ring 0: kick before"},
    {"call-not-eventfd", h_call_not_eventfd,
     " VHOST_USER_SET_VRING_CALL: ring 0: the fd is not an eventfd"},
    {"ring-outside", h_ring_outside,
     " VHOST_USER_SET_VRING_ENABLE: ring 0 is not inside one memory region"},
    {"unoffered-feature", h_unoffered_feature,
     " VHOST_USER_SET_FEATURES: features 0x400000000 were not offered"},
    {"log-base", h_log_base, " VHOST_USER_SET_LOG_BASE"},
    {"config-range", h_config_range, " VHOST_USER_GET_CONFIG: config range 50+100"},
    {"set-config-other", h_set_config_other, " VHOST_USER_SET_CONFIG: only writeback"},
    {"second-owner", h_second_owner, " VHOST_USER_SET_OWNER: the session already has an owner"},
    {"mem-slots-unnegotiated", h_mem_slots_unnegotiated,
     " VHOST_USER_GET_MAX_MEM_SLOTS: CONFIGURE_MEM_SLOTS was not negotiated"},
    {"truncated", h_truncated, " VHOST_USER_SET_FEATURES: connection closed inside a message"},
    {"inflight-unnegotiated", h_inflight_unnegotiated,
     " VHOST_USER_GET_INFLIGHT_FD: INFLIGHT_SHMFD was not negotiated"},
    {"inflight-queues", h_inflight_queues, " VHOST_USER_GET_INFLIGHT_FD: 3 queues (1..2)"},
    {"inflight-qsize", h_inflight_qsize,
     " VHOST_USER_GET_INFLIGHT_FD: queue size 100 is not a power of two in 1..1024"},
    {"inflight-qsize-big", h_inflight_qsize_big,
     " VHOST_USER_GET_INFLIGHT_FD: queue size 2048 is not a power of two in 1..1024"},
    {"inflight-payload", h_inflight_payload,
     " VHOST_USER_GET_INFLIGHT_FD: payload of 20 bytes, expected 24"},
    {"inflight-fd-on-get", h_inflight_fd_on_get, " VHOST_USER_GET_INFLIGHT_FD: 1 fds, expected 0"},
    {"inflight-small-fd", h_inflight_small_fd,
     " VHOST_USER_SET_INFLIGHT_FD: inflight region: offset 0x0 + size 0x1080 is beyond the end of "
     "its fd (0x1000)"},
    {"inflight-size-mismatch", h_inflight_size_mismatch,
     " VHOST_USER_SET_INFLIGHT_FD: mmap_size 8192, expected 4224 for 2 queues of 128"},
    {"inflight-offset", h_inflight_offset,
     " VHOST_USER_SET_INFLIGHT_FD: mmap_offset 0x64 is not page-aligned"},
    {"inflight-unsealed", h_inflight_unsealed,
     " VHOST_USER_SET_INFLIGHT_FD: the inflight fd is not a memfd sealed against shrinking"},
    {"inflight-mmap-fails", h_inflight_mmap_fails,
     " VHOST_USER_SET_INFLIGHT_FD: inflight region: mmap: Operation not permitted"},
    {"inflight-no-fd", h_inflight_no_fd, " VHOST_USER_SET_INFLIGHT_FD: 0 fds, expected 1"},
    {"inflight-started", h_inflight_started,
     " VHOST_USER_SET_INFLIGHT_FD: ring 0 is started (stop it with GET_VRING_BASE)"},
    {"inflight-uncovered", h_inflight_uncovered,
     " VHOST_USER_SET_VRING_ENABLE: ring 0 (size 128) is not covered by the inflight region (1 "
     "queues of 64)"},
    {"backend-req-unnegotiated", h_backend_req_unnegotiated,
     " VHOST_USER_SET_BACKEND_REQ_FD: BACKEND_REQ was not negotiated"},
    {"backend-req-no-fd", h_backend_req_no_fd, " VHOST_USER_SET_BACKEND_REQ_FD: 0 fds, expected 1"},
    {"backend-req-two-fds", h_backend_req_two_fds,
     " VHOST_USER_SET_BACKEND_REQ_FD: 2 fds, expected 1"},
    {"backend-req-payload", h_backend_req_payload,
     " VHOST_USER_SET_BACKEND_REQ_FD: payload of 8 bytes, expected 0"},
    {"backend-req-not-socket", h_backend_req_not_socket,
     " VHOST_USER_SET_BACKEND_REQ_FD: the fd is not a socket"},
    {"status-unnegotiated", h_status_unnegotiated,
     " VHOST_USER_SET_STATUS: STATUS was not negotiated"},
    {"get-status-unnegotiated", h_get_status_unnegotiated,
     " VHOST_USER_GET_STATUS: STATUS was not negotiated"},
    {"status-payload", h_status_payload, " VHOST_USER_SET_STATUS: payload of 4 bytes, expected 8"},
    {"status-value", h_status_value,
     " VHOST_USER_SET_STATUS: status 0x10f has bits other than 0x8f"},
    {"status-reserved", h_status_reserved,
     " VHOST_USER_SET_STATUS: status 0x21 has bits other than 0x8f"},
    {"status-needs-reset", h_status_needs_reset,
     " VHOST_USER_SET_STATUS: status 0x40 has bits other than 0x8f"},
    {"status-fd", h_status_fd, " VHOST_USER_SET_STATUS: 1 fds, expected 0"},
    {"get-status-payload", h_get_status_payload,
     " VHOST_USER_GET_STATUS: payload of 8 bytes, expected 0"},
    {"reset-device-unnegotiated", h_reset_device_unnegotiated,
     " VHOST_USER_RESET_DEVICE: RESET_DEVICE was not negotiated"},
    {"reset-device-payload", h_reset_device_payload,
     " VHOST_USER_RESET_DEVICE: payload of 8 bytes, expected 0"},
    {"reset-device-fd", h_reset_device_fd, " VHOST_USER_RESET_DEVICE: 1 fds, expected 0"},
    {"reset-device-kick", h_reset_device_kick,
     " VHOST_USER_SET_VRING_KICK: ring 0: kick before the memory table, the ring size and its "
     "addresses"},
};

/* Each hostile message drops its connection with the right line; the daemon serves the next. */
static void test_hostile(void)
{
    Daemon *dm = daemon_start(false);
    uint8_t w[4096], r[4096];

    for (unsigned i = 0; i < G_N_ELEMENTS(hostile); i++) {
        const Hostile *h = &hostile[i];
        Fe *fe = fe_open(dm->sock, 1);
        g_autofree char *want = g_strdup_printf("exp0: vhost-user%s", h->msg);
        g_autofree char *log = NULL;

        fe->vq[0] = testvq_new(fe->d, 128, fe->features);
        h->fn(fe);
        g_assert_true(fe_dropped(fe));
        fe_close(fe);
        /* The line is written before the drop. */
        log = daemon_log(dm);
        if (!strstr(log, want)) {
            g_printerr("case %s: wanted \"%s\" in:\n%s\n", h->name, want, log);
            g_assert_not_reached();
        }
        if (g_test_verbose()) {
            g_printerr("hostile %s: ok\n", h->name);
        }
    }
    /* After all of them: a full session with real I/O. */
    {
        Fe *fe = fe_open(dm->sock, 2);

        fe_start(fe, 1);
        memset(w, 0x5a, sizeof(w));
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 16, w, 4096), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 16, r, 4096), ==, VIRTIO_BLK_S_OK);
        g_assert_cmpmem(r, 4096, w, 4096);
        fe_close(fe);
    }
    {
        /* Exactly one error line per hostile case, each naming the export. */
        g_autofree char *log = daemon_log(dm);
        g_auto(GStrv) lines = g_strsplit(log, "\n", -1);
        unsigned n = 0;

        for (unsigned i = 0; lines[i]; i++) {
            n += strstr(lines[i], "dropping the connection") != NULL;
        }
        g_assert_cmpuint(n, ==, G_N_ELEMENTS(hostile));
    }
    daemon_stop(dm);
}

/* A broken descriptor chain breaks the ring, not the daemon. */
static void test_bad_ring(void)
{
    Daemon *dm = daemon_start(false);
    Fe *fe = fe_open(dm->sock, 1);
    uint8_t w[4096], r[4096];

    fe_start(fe, 1);
    /* A descriptor pointing outside guest RAM. */
    testvq_set_desc(fe->vq[0], 0, 1ull << 50, 16, 0, 0);
    testvq_publish(fe->vq[0], 0);
    testvq_kick_force(fe->vq[0]);
    g_usleep(100000);
    fe_close(fe);
    fe = fe_open(dm->sock, 1);
    fe_start(fe, 1);
    memset(w, 0xa5, sizeof(w));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 0, w, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 0, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
    fe_close(fe);
    {
        g_autofree char *log = daemon_log(dm);

        g_assert_nonnull(strstr(log, "exp0: virtqueue error"));
    }
    daemon_stop(dm);
}

/* ---- QMP ---- */

static int qmp_fd;

static char *qmp_line(void)
{
    GString *g = g_string_new(NULL);
    char c;

    while (fe_read_full(qmp_fd, &c, 1, 10000) && c != '\n') {
        g_string_append_c(g, c);
    }
    return g_string_free(g, FALSE);
}

/* Send @cmd; return the reply line (events before it are skipped, one kept in *@event). */
static char *qmp_cmd(const char *cmd, char **event)
{
    g_assert_cmpint(write(qmp_fd, cmd, strlen(cmd)), ==, (ssize_t)strlen(cmd));
    for (;;) {
        char *l = qmp_line();

        g_assert_cmpuint(strlen(l), >, 0);
        if (strstr(l, "\"event\"")) {
            if (event) {
                g_free(*event);
                *event = l;
            } else {
                g_free(l);
            }
            continue;
        }
        return l;
    }
}

/* query-block-exports, block-export-add on a second node, I/O on it, block-export-del, quit. */
static void test_qmp(void)
{
    Daemon *dm;
    g_autofree char *path = NULL, *greet = NULL, *r = NULL, *ev = NULL, *add = NULL, *sock1 = NULL;
    Fe *fe;
    Daemon dm1 = {0};
    uint8_t buf[4096];
    int status;

    with_qmp = true;
    dm = daemon_start(false);
    with_qmp = false;
    path = g_build_filename(dm->dir, "qmp.sock", NULL);
    qmp_fd = fe_connect(path);
    greet = qmp_line();
    g_assert_nonnull(strstr(greet, "\"QMP\""));
    r = qmp_cmd("{\"execute\": \"qmp_capabilities\"}\n", NULL);
    g_assert_nonnull(strstr(r, "\"return\""));
    g_free(r);
    r = qmp_cmd("{\"execute\": \"query-block-exports\"}\n", NULL);
    g_assert_nonnull(strstr(r, "\"id\":\"exp0\"") ? r : strstr(r, "\"id\": \"exp0\""));
    g_assert_nonnull(strstr(r, "vhost-user-blk"));
    g_free(r);
    /* The path switch while a front end runs I/O on exp0: data stays right on both paths. */
    fe = fe_open(dm->sock, 1);
    fe_start(fe, NQ);
    for (unsigned round = 0; round < 4; round++) {
        bool on = round % 2;
        g_autofree char *set = g_strdup_printf(
            "{\"execute\": \"qom-set\", \"arguments\": {\"path\": \"/exports/exp0\", "
            "\"property\": \"x-data-plane\", \"value\": %s}}\n",
            on ? "true" : "false");

        memset(buf, 0x10 + round, sizeof(buf));
        g_assert_cmpuint(fe_io(fe, round % NQ, VIRTIO_BLK_T_OUT, 100 + round * 8, buf, 4096), ==,
                         VIRTIO_BLK_S_OK);
        r = qmp_cmd(set, NULL);
        g_assert_nonnull(strstr(r, "\"return\""));
        g_free(r);
        r = qmp_cmd("{\"execute\": \"qom-get\", \"arguments\": {\"path\": \"/exports/exp0\", "
                    "\"property\": \"x-data-plane\"}}\n",
                    NULL);
        g_assert_nonnull(strstr(r, on ? "true" : "false"));
        g_free(r);
        for (unsigned k = 0; k <= round; k++) {
            uint8_t back[4096];

            g_assert_cmpuint(fe_io(fe, (round + k) % NQ, VIRTIO_BLK_T_IN, 100 + k * 8, back, 4096),
                             ==, VIRTIO_BLK_S_OK);
            g_assert_cmpuint(back[0], ==, 0x10 + k);
            g_assert_cmpuint(back[4095], ==, 0x10 + k);
        }
    }
    fe_close(fe);
    /* Both paths' requests are counted on the export's backend: 4 writes, 1+2+3+4 reads. */
    r = qmp_cmd("{\"execute\": \"query-blockstats\"}\n", NULL);
    {
        g_autoptr(JsonParser) p = json_parser_new();
        JsonObject *st;

        g_assert_true(json_parser_load_from_data(p, r, -1, NULL));
        JsonArray *arr = json_object_get_array_member(json_node_get_object(json_parser_get_root(p)),
                                                      "return");
        g_assert_cmpuint(json_array_get_length(arr), ==, 1);
        st = json_array_get_object_element(arr, 0);
        g_assert_cmpstr(json_object_get_string_member(st, "device"), ==, "");
        g_assert_false(json_object_has_member(st, "qdev"));
        g_assert_cmpstr(json_object_get_string_member(st, "node-name"), ==, "disk");
        g_assert_false(json_object_has_member(st, "parent")); /* a file node has no child */
        st = json_object_get_object_member(st, "stats");
        g_assert_cmpint(json_object_get_int_member(st, "wr_operations"), ==, 4);
        g_assert_cmpint(json_object_get_int_member(st, "rd_operations"), ==, 10);
        g_assert_cmpint(json_object_get_int_member(st, "wr_bytes"), ==, 4 * 4096);
        g_assert_cmpint(json_object_get_int_member(st, "wr_highest_offset"), ==,
                        (100 + 3 * 8) * 512 + 4096);
    }
    g_free(r);
    sock1 = g_build_filename(dm->dir, "vu1.sock", NULL);
    add = g_strdup_printf("{\"execute\": \"block-export-add\", \"arguments\": {\"type\": "
                          "\"vhost-user-blk\", \"id\": \"exp1\", \"node-name\": \"nul\", "
                          "\"addr\": {\"type\": \"unix\", \"path\": \"%s\"}, "
                          "\"num-queues\": 2}}\n",
                          sock1);
    r = qmp_cmd(add, NULL);
    g_assert_nonnull(strstr(r, "\"return\""));
    g_free(r);
    /* Same id again: refused, the first stays. */
    r = qmp_cmd(add, NULL);
    g_assert_nonnull(strstr(r, "already in use"));
    g_free(r);
    /* A read-only null export: reads give zeroes, writes are refused. */
    dm1.sock = sock1;
    fe = fe_open(dm1.sock, 1);
    g_assert_false(fe->host_features & (1ull << VIRTIO_BLK_F_WRITE_ZEROES));
    g_assert_true(fe->host_features & (1ull << VIRTIO_BLK_F_RO));
    fe_start(fe, 1);
    memset(buf, 0xee, sizeof(buf));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, 0, buf, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(buf[0], ==, 0);
    g_assert_cmpuint(buf[4095], ==, 0);
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, 0, buf, 4096), !=, VIRTIO_BLK_S_OK);
    /* Deleted while connected: the connection is dropped, the event says so. */
    r = qmp_cmd("{\"execute\": \"block-export-del\", \"arguments\": {\"id\": \"exp1\"}}\n", &ev);
    g_assert_nonnull(strstr(r, "\"return\""));
    g_free(r);
    if (!ev) {
        ev = qmp_line();
    }
    g_assert_nonnull(strstr(ev, "BLOCK_EXPORT_DELETED"));
    g_assert_true(fe_dropped(fe));
    fe_close(fe);
    g_assert_false(g_file_test(sock1, G_FILE_TEST_EXISTS));
    r = qmp_cmd("{\"execute\": \"query-block-exports\"}\n", NULL);
    g_assert_null(strstr(r, "exp1"));
    g_free(r);
    r = qmp_cmd("{\"execute\": \"quit\"}\n", NULL);
    g_assert_nonnull(strstr(r, "\"return\""));
    g_clear_pointer(&r, g_free);
    g_assert_cmpint(waitpid(dm->pid, &status, 0), ==, dm->pid);
    g_assert_true(WIFEXITED(status));
    g_assert_cmpint(WEXITSTATUS(status), ==, 0);
    close(qmp_fd);
    dm->pid = 0;
    daemon_stop(dm);
}

/* ---- back-end channel (BACKEND_REQ): block_resize -> CONFIG_CHANGE_MSG ---- */

/* A daemon with QMP (qmp_fd connected, capabilities negotiated). */
static Daemon *daemon_start_qmp(void)
{
    Daemon *dm;
    g_autofree char *path = NULL, *greet = NULL, *r = NULL;

    with_qmp = true;
    dm = daemon_start(false);
    with_qmp = false;
    path = g_build_filename(dm->dir, "qmp.sock", NULL);
    qmp_fd = fe_connect(path);
    greet = qmp_line();
    g_assert_nonnull(strstr(greet, "\"QMP\""));
    r = qmp_cmd("{\"execute\": \"qmp_capabilities\"}\n", NULL);
    g_assert_nonnull(strstr(r, "\"return\""));
    return dm;
}

static void qmp_resize(uint64_t bytes)
{
    g_autofree char *cmd =
        g_strdup_printf("{\"execute\": \"block_resize\", \"arguments\": {\"node-name\": \"disk\", "
                        "\"size\": %" PRIu64 "}}\n",
                        bytes);
    g_autofree char *r = qmp_cmd(cmd, NULL);

    if (!strstr(r, "\"return\"")) {
        g_printerr("block_resize: %s\n", r);
        g_assert_not_reached();
    }
}

static uint64_t fe_capacity(Fe *fe)
{
    uint8_t p[12 + CFG_SIZE] = {0};
    uint32_t c[3] = {0, CFG_SIZE, 0};
    struct virtio_blk_config cfg;

    memcpy(p, c, 12);
    fe_send(fe, GET_CONFIG, 0, p, sizeof(p), NULL, 0);
    fe_reply(fe, GET_CONFIG, p, sizeof(p));
    memset(&cfg, 0, sizeof(cfg));
    memcpy(&cfg, p + 12, CFG_SIZE);
    return le64toh(cfg.capacity);
}

/* Nothing readable on @fd for @ms. */
static bool fd_quiet(int fd, int ms)
{
    struct pollfd p = {.fd = fd, .events = POLLIN};

    return poll(&p, 1, ms) == 0;
}

/* The peer closed @fd (EOF) within 5 s. */
static bool fd_eof(int fd)
{
    char c;

    return !fd_quiet(fd, 5000) && read(fd, &c, 1) == 0;
}

static unsigned count_lines(const char *log, const char *what)
{
    g_auto(GStrv) lines = g_strsplit(log, "\n", -1);
    unsigned n = 0;

    for (unsigned i = 0; lines[i]; i++) {
        n += strstr(lines[i], what) != NULL;
    }
    return n;
}

static void fe_write_read(Fe *fe, uint64_t sector, uint8_t v)
{
    uint8_t w[4096], r[4096];

    memset(w, v, sizeof(w));
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_OUT, sector, w, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, sector, r, 4096), ==, VIRTIO_BLK_S_OK);
    g_assert_cmpmem(r, 4096, w, 4096);
}

/*
 * QEMU 7.2's sequence: SET_BACKEND_REQ_FD before SET_OWNER; block_resize on
 * the daemon's QMP -> CONFIG_CHANGE_MSG with NEED_REPLY; the front end reads
 * the config (GET_CONFIG) before it answers, as QEMU does, and sees the new
 * capacity; I/O past the old end works. Two resizes while an answer is
 * awaited give exactly one more message. A second SET_BACKEND_REQ_FD
 * replaces (closes) the first channel.
 */
static void test_backend_req_config_change(void)
{
    Daemon *dm = daemon_start_qmp();
    uint32_t h[3];
    Fe *fe;
    int old;

    fe = fe_open_backend_req(dm->sock, 1);
    fe_start(fe, 1);
    g_assert_cmpuint(fe_capacity(fe), ==, DISK_SIZE / 512);
    /* Replace the channel: the old one is closed by the daemon. */
    old = fe->backend;
    fe->backend = -1;
    {
        int sv[2];

        g_assert_cmpint(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), ==, 0);
        fe_send(fe, SET_BACKEND_REQ_FD, NEED_REPLY, NULL, 0, &sv[1], 1);
        close(sv[1]);
        fe_ack(fe, SET_BACKEND_REQ_FD);
        fe->backend = sv[0];
    }
    g_assert_true(fd_eof(old));
    close(old);

    qmp_resize(2 * DISK_SIZE);
    g_assert_true(fe_backend_recv(fe, h, 5000));
    g_assert_cmpuint(h[0], ==, BACKEND_CONFIG_CHANGE_MSG);
    g_assert_cmphex(h[1], ==, 1 | NEED_REPLY);
    g_assert_cmpuint(h[2], ==, 0);
    /* The daemon serves the main channel while it waits for the answer. */
    g_assert_cmpuint(fe_capacity(fe), ==, 2 * DISK_SIZE / 512);
    fe_backend_ack(fe, BACKEND_CONFIG_CHANGE_MSG, 0);
    fe_write_read(fe, 2 * DISK_SIZE / 512 - 8, 0x3c);
    g_assert_true(fd_quiet(fe->backend, 300));

    /* Two changes while the answer to the first is awaited: one more message after it. */
    qmp_resize(3 * DISK_SIZE);
    qmp_resize(4 * DISK_SIZE);
    g_assert_true(fe_backend_recv(fe, h, 5000));
    g_assert_cmphex(h[1], ==, 1 | NEED_REPLY);
    g_assert_true(fd_quiet(fe->backend, 300));
    fe_backend_ack(fe, BACKEND_CONFIG_CHANGE_MSG, 0);
    g_assert_true(fe_backend_recv(fe, h, 5000));
    g_assert_cmpuint(h[0], ==, BACKEND_CONFIG_CHANGE_MSG);
    g_assert_cmpuint(fe_capacity(fe), ==, 4 * DISK_SIZE / 512);
    fe_backend_ack(fe, BACKEND_CONFIG_CHANGE_MSG, 0);
    g_assert_true(fd_quiet(fe->backend, 300));
    fe_write_read(fe, 4 * DISK_SIZE / 512 - 8, 0x4d);

    /* Shrink: the new capacity, and I/O past it fails. */
    qmp_resize(DISK_SIZE);
    g_assert_true(fe_backend_recv(fe, h, 5000));
    g_assert_cmpuint(fe_capacity(fe), ==, DISK_SIZE / 512);
    fe_backend_ack(fe, BACKEND_CONFIG_CHANGE_MSG, 0);
    {
        uint8_t r[4096];

        g_assert_cmpuint(fe_io(fe, 0, VIRTIO_BLK_T_IN, DISK_SIZE / 512, r, 4096), ==,
                         VIRTIO_BLK_S_IOERR);
    }
    fe_close(fe);
    {
        g_autofree char *log = daemon_log(dm);

        g_assert_cmpuint(count_lines(log, "back-end channel"), ==, 0);
        g_assert_cmpuint(count_lines(log, "dropping the connection"), ==, 0);
    }
    close(qmp_fd);
    daemon_stop(dm);
}

/*
 * Without the feature nothing is sent: a front end that did not negotiate
 * BACKEND_REQ still reads the new capacity; one that gave a channel and then
 * renegotiated without BACKEND_REQ gets nothing on it. Without REPLY_ACK
 * the message has no NEED_REPLY and no answer is awaited (no timeout line).
 */
static void test_backend_req_unnegotiated(void)
{
    Daemon *dm = daemon_start_qmp();
    uint32_t h[3];
    Fe *fe;

    fe = fe_open(dm->sock, 1);
    fe_start(fe, 1);
    qmp_resize(2 * DISK_SIZE);
    g_assert_cmpuint(fe_capacity(fe), ==, 2 * DISK_SIZE / 512);
    fe_write_read(fe, 2 * DISK_SIZE / 512 - 8, 0x11);
    fe_close(fe);

    fe = fe_open_backend_req(dm->sock, 1);
    fe->proto &= ~P_BACKEND_REQ;
    fe_set_u64(fe, SET_PROTOCOL_FEATURES, fe->proto);
    fe_start(fe, 1);
    qmp_resize(3 * DISK_SIZE);
    g_assert_true(fd_quiet(fe->backend, 500));
    g_assert_cmpuint(fe_capacity(fe), ==, 3 * DISK_SIZE / 512);
    fe_close(fe);

    /* BACKEND_REQ without REPLY_ACK: no NEED_REPLY, nothing awaited. */
    fe = fe_open_backend_req(dm->sock, 1);
    fe->proto &= ~P_REPLY_ACK;
    fe_set_u64(fe, SET_PROTOCOL_FEATURES, fe->proto);
    qmp_resize(DISK_SIZE);
    g_assert_true(fe_backend_recv(fe, h, 5000));
    g_assert_cmpuint(h[0], ==, BACKEND_CONFIG_CHANGE_MSG);
    g_assert_cmphex(h[1], ==, 1);
    g_assert_cmpuint(fe_capacity(fe), ==, DISK_SIZE / 512);
    /* Past the reply timeout: the channel is still open (nothing readable, not even EOF). */
    g_usleep((BACKEND_REPLY_TIMEOUT_MS + 500) * 1000);
    g_assert_true(fd_quiet(fe->backend, 0));
    fe_close(fe);
    {
        g_autofree char *log = daemon_log(dm);

        g_assert_cmpuint(count_lines(log, "back-end channel"), ==, 0);
    }
    close(qmp_fd);
    daemon_stop(dm);
}

/*
 * Hostile front ends on the channel: one that never answers (the daemon
 * serves on, and closes the channel after the timeout with one line; the
 * connection stays), one that closed its end (one line, the connection
 * stays), one that answers garbage and one that writes unasked (each drops
 * the connection with one line). Then a normal session.
 */
static void test_backend_req_hostile(void)
{
    Daemon *dm = daemon_start_qmp();
    uint32_t h[3];
    Fe *fe;

    /* Never answers. */
    fe = fe_open_backend_req(dm->sock, 1);
    fe_start(fe, 1);
    qmp_resize(2 * DISK_SIZE);
    g_assert_true(fe_backend_recv(fe, h, 5000));
    g_assert_cmphex(h[1], ==, 1 | NEED_REPLY);
    g_assert_cmpuint(fe_capacity(fe), ==, 2 * DISK_SIZE / 512);
    fe_write_read(fe, 8, 0x21);
    g_assert_true(fd_eof(fe->backend));
    {
        g_autofree char *log = daemon_log(dm);

        g_assert_cmpuint(count_lines(log, "exp0: vhost-user back-end channel: no answer to "
                                          "VHOST_USER_BACKEND_CONFIG_CHANGE_MSG within"),
                         ==, 1);
    }
    /* The connection stays; later changes are not sent (the channel is gone). */
    fe_write_read(fe, 16, 0x22);
    qmp_resize(DISK_SIZE);
    g_assert_cmpuint(fe_capacity(fe), ==, DISK_SIZE / 512);
    fe_close(fe);

    /* Closed its end. */
    fe = fe_open_backend_req(dm->sock, 1);
    fe_start(fe, 1);
    close(fe->backend);
    fe->backend = -1;
    /* A round trip after the close: the daemon has seen the EOF before the resize. */
    g_assert_cmpuint(fe_capacity(fe), ==, DISK_SIZE / 512);
    qmp_resize(2 * DISK_SIZE);
    g_assert_cmpuint(fe_capacity(fe), ==, 2 * DISK_SIZE / 512);
    fe_write_read(fe, 24, 0x23);
    fe_close(fe);

    /* Garbage answer: the connection is dropped. */
    fe = fe_open_backend_req(dm->sock, 1);
    fe_start(fe, 1);
    qmp_resize(DISK_SIZE);
    g_assert_true(fe_backend_recv(fe, h, 5000));
    fe_backend_ack(fe, 7, 0);
    g_assert_true(fe_dropped(fe));
    fe_close(fe);

    /* Unasked bytes: the connection is dropped. */
    fe = fe_open_backend_req(dm->sock, 1);
    fe_start(fe, 1);
    fe_send_raw(fe->backend, "junk", 4, NULL, 0);
    g_assert_true(fe_dropped(fe));
    fe_close(fe);

    {
        g_autofree char *log = daemon_log(dm);

        g_assert_cmpuint(count_lines(log, "exp0: vhost-user back-end channel: the front end "
                                          "closed it; closing the channel"),
                         ==, 1);
        g_assert_cmpuint(count_lines(log, "exp0: vhost-user back-end channel: not the answer to "
                                          "VHOST_USER_BACKEND_CONFIG_CHANGE_MSG"),
                         ==, 1);
        g_assert_cmpuint(count_lines(log, "exp0: vhost-user back-end channel: data while no "
                                          "answer is awaited; dropping the connection"),
                         ==, 1);
        g_assert_cmpuint(count_lines(log, "back-end channel"), ==, 4);
    }
    /* A normal session follows. */
    fe = fe_open(dm->sock, 1);
    fe_start(fe, 1);
    fe_write_read(fe, 32, 0x24);
    fe_close(fe);
    close(qmp_fd);
    daemon_stop(dm);
}

/* A bad command line: one line on stderr, exit 1 (and its words, where given). */
static void test_bad_cmdline(void)
{
    static const struct {
        const char *args[3];
        const char *want;
    } bad[] = {
        {{"--export", "type=vhost-user-blk,id=e,node-name=missing,addr.type=unix,addr.path=/tmp/x"},
         NULL},
        {{"--export", "type=nbd,id=e"}, NULL},
        {{"--blockdev", "driver=file,filename=/nonexistent/x,node-name=n"}, NULL},
        {{"--object", "memory-backend-ram,id=m"}, NULL},
        {{"--bogus"}, NULL},
        {{"--blockdev"}, NULL},
        /* the same words and ranges as vblk's -object iothread */
        {{"--object", "iothread,id=t,x-complete-hold-depth=-1"},
         "--object: x-complete-hold-depth value must be in range [1, 4096]"},
        {{"--object", "iothread,id=t,poll-max-ns=-5"},
         "--object: poll-max-ns value must be in range [0, 9223372036854775807]"},
        {{"--object", "iothread,id=t,poll-grow=x"},
         "--object: Parameter 'poll-grow' expects an int64 value"},
    };

    for (unsigned i = 0; i < G_N_ELEMENTS(bad); i++) {
        const char *argv[5] = {daemon_path(false)};
        g_autofree char *out = NULL, *err_text = NULL;
        GError *err = NULL;
        int status;

        for (unsigned k = 0; k < 3 && bad[i].args[k]; k++) {
            argv[k + 1] = bad[i].args[k];
        }
        g_assert_true(g_spawn_sync(NULL, (char **)argv, NULL, G_SPAWN_DEFAULT, NULL, NULL, &out,
                                   &err_text, &status, &err));
        g_assert_no_error(err);
        g_assert_true(WIFEXITED(status));
        g_assert_cmpint(WEXITSTATUS(status), ==, 1);
        g_assert_true(g_str_has_prefix(err_text, "vblk-storage-daemon: "));
        /* exactly one line */
        g_assert_nonnull(strchr(err_text, '\n'));
        g_assert_cmpuint(strlen(strchr(err_text, '\n')), ==, 1);
        if (bad[i].want) {
            g_autofree char *line = g_strndup(err_text, strcspn(err_text, "\n"));

            g_assert_cmpstr(line + strlen("vblk-storage-daemon: "), ==, bad[i].want);
        }
    }
}

/* The hostile messages with the export on the block-layer path. */
static void test_hostile_block_layer(void)
{
    export_extra = ",x-data-plane=off";
    test_hostile();
    export_extra = "";
}

/* The broken ring on the block-layer path. */
static void test_bad_ring_block_layer(void)
{
    export_extra = ",x-data-plane=off";
    test_bad_ring();
    export_extra = "";
}

/* The same session against qemu-storage-daemon: features, config, I/O results. */
typedef struct Session {
    uint64_t features, proto, queues;
    struct virtio_blk_config cfg;
    uint8_t status[5];
    char id[21];
    bool data_ok;
} Session;

static void run_session(bool qsd, Session *s)
{
    Daemon *dm = daemon_start(qsd);
    Fe *fe;
    uint8_t p[12 + CFG_SIZE] = {0};
    uint32_t c[3] = {0, CFG_SIZE, 0};
    uint8_t w[8192], r[8192];

    fe = fe_open(dm->sock, 2);
    s->features = fe->host_features;
    s->queues = NQ;
    memcpy(p, c, 12);
    fe_send(fe, GET_CONFIG, 0, p, sizeof(p), NULL, 0);
    fe_reply(fe, GET_CONFIG, p, sizeof(p));
    memcpy(&s->cfg, p + 12, CFG_SIZE);
    fe_start(fe, NQ);
    for (unsigned i = 0; i < sizeof(w); i++) {
        w[i] = (uint8_t)(i ^ 0x3c);
    }
    s->status[0] = fe_io(fe, 0, VIRTIO_BLK_T_OUT, 64, w, sizeof(w));
    s->status[1] = fe_io(fe, 1, VIRTIO_BLK_T_IN, 64, r, sizeof(r));
    s->status[2] = fe_io(fe, 0, VIRTIO_BLK_T_IN, DISK_SIZE / 512, r, 512);
    s->status[3] = fe_io(fe, 1, VIRTIO_BLK_T_FLUSH, 0, NULL, 0);
    memset(s->id, 0, sizeof(s->id));
    s->status[4] = fe_io(fe, 0, VIRTIO_BLK_T_GET_ID, 0, s->id, 20);
    s->data_ok = !memcmp(w, r, sizeof(w));
    fe_close(fe);
    daemon_stop(dm);
}

static void test_crosscheck(void)
{
    Session v = {0}, q = {0};
    /* Bits both should offer (docs/vhost-user.md lists the others). */
    uint64_t common = (1ull << VIRTIO_F_VERSION_1) | (1ull << VIRTIO_RING_F_EVENT_IDX) |
                      (1ull << VIRTIO_RING_F_INDIRECT_DESC) | (1ull << VIRTIO_BLK_F_SEG_MAX) |
                      (1ull << VIRTIO_BLK_F_BLK_SIZE) | (1ull << VIRTIO_BLK_F_FLUSH) |
                      (1ull << VIRTIO_BLK_F_CONFIG_WCE) | (1ull << VIRTIO_BLK_F_DISCARD) |
                      (1ull << VIRTIO_BLK_F_WRITE_ZEROES) | (1ull << VIRTIO_BLK_F_MQ) |
                      (1ull << VIRTIO_BLK_F_TOPOLOGY) | F_PROTOCOL_FEATURES;

    if (access(daemon_path(true), X_OK) != 0) {
        g_test_skip("qemu-storage-daemon is not installed");
        return;
    }
    run_session(false, &v);
    run_session(true, &q);
    if (g_test_verbose()) {
        g_printerr("features vblk 0x%" G_GINT64_MODIFIER "x qsd 0x%" G_GINT64_MODIFIER "x\n",
                   v.features, q.features);
    }
    g_assert_cmphex(v.features & common, ==, common);
    g_assert_cmphex(q.features & common, ==, common);
    g_assert_cmpuint(v.cfg.capacity, ==, q.cfg.capacity);
    g_assert_cmpuint(v.cfg.blk_size, ==, q.cfg.blk_size);
    g_assert_cmpuint(v.cfg.seg_max, ==, q.cfg.seg_max);
    g_assert_cmpuint(v.cfg.num_queues, ==, q.cfg.num_queues);
    g_assert_cmpuint(v.cfg.max_discard_sectors, ==, q.cfg.max_discard_sectors);
    g_assert_cmpuint(v.cfg.max_write_zeroes_sectors, ==, q.cfg.max_write_zeroes_sectors);
    g_assert_cmpmem(v.status, 5, q.status, 5);
    g_assert_cmpstr(v.id, ==, q.id);
    g_assert_true(v.data_ok);
    g_assert_true(q.data_ok);
}

int main(int argc, char **argv)
{
    int ret;

    g_test_init(&argc, &argv, NULL);
    signal(SIGPIPE, SIG_IGN);
    tmpdir = g_dir_make_tmp("vblk-vu-XXXXXX", NULL);
    g_assert_nonnull(tmpdir);
    g_test_add_func("/vhost-user/io", test_io);
    g_test_add_func("/vhost-user/io-block-layer", test_io_block_layer);
    g_test_add_func("/vhost-user/reconnect", test_reconnect);
    g_test_add_func("/vhost-user/inflight-fd", test_inflight_fd);
    g_test_add_func("/vhost-user/inflight-kill", test_inflight_kill);
    g_test_add_func("/vhost-user/inflight-kill-block-layer", test_inflight_kill_block_layer);
    g_test_add_func("/vhost-user/ch-order", test_ch_order);
    g_test_add_func("/vhost-user/stop-inflight", test_stop_inflight);
    g_test_add_func("/vhost-user/config", test_config);
    g_test_add_func("/vhost-user/status", test_status);
    g_test_add_func("/vhost-user/status-block-layer", test_status_block_layer);
    g_test_add_func("/vhost-user/reset-device", test_reset_device);
    g_test_add_func("/vhost-user/reset-device-inflight", test_reset_device_inflight);
    g_test_add_func("/vhost-user/needs-reset", test_needs_reset);
    g_test_add_func("/vhost-user/needs-reset-block-layer", test_needs_reset_block_layer);
    g_test_add_func("/vhost-user/hostile", test_hostile);
    g_test_add_func("/vhost-user/hostile-block-layer", test_hostile_block_layer);
    g_test_add_func("/vhost-user/bad-ring", test_bad_ring);
    g_test_add_func("/vhost-user/bad-ring-block-layer", test_bad_ring_block_layer);
    g_test_add_func("/vhost-user/qmp", test_qmp);
    g_test_add_func("/vhost-user/backend-req/config-change", test_backend_req_config_change);
    g_test_add_func("/vhost-user/backend-req/unnegotiated", test_backend_req_unnegotiated);
    g_test_add_func("/vhost-user/backend-req/hostile", test_backend_req_hostile);
    g_test_add_func("/vhost-user/bad-cmdline", test_bad_cmdline);
    g_test_add_func("/vhost-user/crosscheck-qsd", test_crosscheck);
    ret = g_test_run();
    rmdir(tmpdir);
    g_free(tmpdir);
    return ret;
}
