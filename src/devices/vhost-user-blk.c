/*
 * vhost-user-blk export: the virtio-blk request engine behind a vhost-user
 * socket (see devices/vhost-user-blk.h). The protocol is vhost-user.c's; this
 * file is the device model (features, config space) and the two request
 * paths, which it starts and stops exactly as virtio-blk-pci does: a
 * DpSwitch over the rings the front end set up, the front end's kick fds as
 * host notifiers and its call fds as GuestNotifiers.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "devices/dp-switch.h"
#include "devices/vhost-user-blk.h"
#include "vhost-user-int.h"
#include "util/error-report.h"
#include "util/thread-check.h"

#define VUB_ERROR vub_error_quark()
static GQuark vub_error_quark(void)
{
    return g_quark_from_static_string("vblk-vhost-user-blk-error");
}

struct VhostUserBlkExport {
    char *id;
    char *node_name;
    char *path; /* unlinked at free, when we created it */
    BlockBackend *backend;
    EventLoop *main_loop;
    IOThread *iothread;
    bool own_iothread;
    bool data_plane;
    char *no_dataplane; /* why the dataplane cannot serve this node, or NULL */

    VirtIOBlkConf conf;
    VirtIOBlk *blk;
    int fd; /* the dataplane's own fd on the image, or -1 */
    const char *engine;
    bool direct, no_flush, null_read_zeroes;
    IOQNbdConfig nbd; /* engine "nbd": the server (strings borrowed from the backend) */
    IOQRbdConfig rbd; /* engine "rbd": the image (strings borrowed from the backend) */

    int listen_fd;
    bool listening;
    VhostUser *vu;
    EventTimer *backend_timer; /* the back-end channel's reply deadline */

    DpSwitch *sw;
    unsigned nq;
    VirtQueue *vq[VHOST_USER_MAX_QUEUES];
    VirtIOBlkQueue *bq[VHOST_USER_MAX_QUEUES];
    VhostUserInflightTracker *tracker[VHOST_USER_MAX_QUEUES]; /* with SET_INFLIGHT_FD */
};

/* ---- device model (VhostUserDevOps) ---- */

static uint64_t vub_features(void *opaque)
{
    VhostUserBlkExport *e = opaque;

    return virtio_blk_get_host_features(e->blk);
}

static bool vub_set_features(void *opaque, uint64_t features, GError **errp)
{
    VhostUserBlkExport *e = opaque;

    return virtio_blk_set_features(e->blk, features, errp);
}

/*
 * QEMU 7.2's and qemu-storage-daemon's config space ends after unused1 (60
 * bytes); the secure-erase and zoned fields of newer headers are not offered.
 */
#define VUB_CONFIG_SIZE (offsetof(struct virtio_blk_config, unused1) + 3)

static uint32_t vub_config_size(void *opaque)
{
    return VUB_CONFIG_SIZE;
}

static void vub_get_config(void *opaque, uint8_t *buf)
{
    VhostUserBlkExport *e = opaque;
    struct virtio_blk_config cfg;

    virtio_blk_get_config(e->blk, &cfg);
    memcpy(buf, &cfg, VUB_CONFIG_SIZE);
}

static bool vub_set_config(void *opaque, uint32_t offset, const uint8_t *data, uint32_t len,
                           GError **errp)
{
    VhostUserBlkExport *e = opaque;

    /* Only `writeback` is writable, and only as 0 or 1. */
    if (offset != offsetof(struct virtio_blk_config, wce) || len != 1 || data[0] > 1) {
        g_set_error(errp, VUB_ERROR, EINVAL,
                    "only writeback (offset %zu, 1 byte, 0 or 1) is writable, not %u+%u",
                    offsetof(struct virtio_blk_config, wce), offset, len);
        return false;
    }
    virtio_blk_config_write(e->blk, offset, data, len);
    return true;
}

/*
 * Called once per queue in its owner thread: the iothread on the dataplane,
 * the main loop on the block layer. The broken ring is no longer served (the
 * virtqueue refuses it); the other rings run on. NEEDS_RESET is an atomic
 * store, read by GET_STATUS in the main loop.
 */
static void vub_queue_broken(void *opaque, VirtQueue *vq, const char *reason)
{
    VhostUserBlkExport *e = opaque;

    error_report_id(e->id, "virtqueue error: %s (device needs reset)", reason);
    vhost_user_set_needs_reset(e->vu);
}

static void vub_free_queues(VhostUserBlkExport *e)
{
    for (unsigned i = 0; i < VHOST_USER_MAX_QUEUES; i++) {
        if (e->bq[i]) {
            virtio_blk_queue_free(e->bq[i]);
            e->bq[i] = NULL;
        }
        if (e->vq[i]) {
            virtqueue_free(e->vq[i]);
            e->vq[i] = NULL;
        }
        vhost_user_inflight_tracker_free(e->tracker[i]);
        e->tracker[i] = NULL;
    }
    e->nq = 0;
}

static bool vub_start(void *opaque, const GuestMem *gm, const VhostUserRing *rings, unsigned n,
                      GError **errp)
{
    VhostUserBlkExport *e = opaque;
    uint64_t features = virtio_blk_get_features(e->blk);
    DataPlaneQueue dq[VHOST_USER_MAX_QUEUES];
    unsigned qsize = 0;
    DpSwitchConf sc;

    THREAD_ASSERT_MAIN();
    for (unsigned i = 0; i < n; i++) {
        VirtQueueState st;

        e->vq[i] = virtqueue_new(gm, rings[i].num, rings[i].desc_gpa, rings[i].avail_gpa,
                                 rings[i].used_gpa, features, errp);
        if (!e->vq[i]) {
            goto fail;
        }
        /* Continue at the front end's base; the used index is what guest memory says. */
        virtqueue_get_state(e->vq[i], &st);
        st.last_avail_idx = rings[i].last_avail_idx;
        if (rings[i].inflight) {
            uint16_t heads[VHOST_USER_MAX_RING_SIZE];
            unsigned nh;

            /*
             * With an inflight region the region knows better than the base:
             * every chain the ring took is either used or still marked, so the
             * next one to take is used_idx + the marked ones (which go first).
             */
            e->tracker[i] =
                vhost_user_inflight_tracker_new(rings[i].inflight, rings[i].inflight_desc_num,
                                                rings[i].num, st.used_idx, heads, &nh);
            st.last_avail_idx = (uint16_t)(st.used_idx + nh);
            virtqueue_set_state(e->vq[i], &st);
            if (!virtqueue_set_resubmit(e->vq[i], heads, nh)) {
                g_set_error(errp, VUB_ERROR, EINVAL, "ring %u: bad inflight heads", i);
                goto fail;
            }
            virtqueue_set_tracker(e->vq[i], &vhost_user_inflight_tracker_ops, e->tracker[i]);
            if (nh) {
                error_report_id(e->id, "ring %u: resubmitting %u requests that were in flight", i,
                                nh);
            }
        } else {
            virtqueue_set_state(e->vq[i], &st);
        }
        virtqueue_set_broken_notifier(e->vq[i], vub_queue_broken, e);
        e->bq[i] = virtio_blk_queue_new(e->blk, e->vq[i], NULL, NULL, errp);
        if (!e->bq[i]) {
            goto fail;
        }
        e->nq = i + 1;
        qsize = MAX(qsize, rings[i].num);
        dq[i] = (DataPlaneQueue){.q = e->bq[i],
                                 .host_notifier = rings[i].kick_fd,
                                 .notifier = {.fd = rings[i].call_fd, .id = e->id}};
    }
    sc = (DpSwitchConf){
        .id = e->id,
        .blk = e->blk,
        .main_loop = e->main_loop,
        .backend = e->backend,
        .iothread = e->iothread,
        .num_queues = n,
        .queue_size = qsize,
        .no_flush = e->no_flush,
        .ioq = {.engine = e->engine,
                .fd = e->fd,
                .direct = e->direct,
                .null_read_zeroes = e->null_read_zeroes,
                .logical_block_size = e->conf.logical_block_size,
                .bounce_pool_size = 8 << 20,
                .nbd = e->nbd,
                .rbd = e->rbd},
    };
    e->sw = dp_switch_new(&sc, errp);
    if (!e->sw) {
        goto fail;
    }
    if (!dp_switch_start(e->sw, e->data_plane && !e->no_dataplane, dq, n, errp)) {
        dp_switch_free(e->sw);
        e->sw = NULL;
        goto fail;
    }
    /* Requests to resubmit go first and need no guest kick: kick on its behalf. */
    for (unsigned i = 0; i < n; i++) {
        if (e->tracker[i]) {
            uint64_t one = 1;

            if (write(rings[i].kick_fd, &one, sizeof(one)) != sizeof(one)) {
                error_report_id(e->id, "ring %u: kick: %s", i, g_strerror(errno));
            }
        }
    }
    return true;

fail:
    vub_free_queues(e);
    return false;
}

static void vub_stop(void *opaque, uint16_t *last_avail, unsigned n)
{
    VhostUserBlkExport *e = opaque;

    THREAD_ASSERT_MAIN();
    if (e->sw) {
        /* Whichever path runs is quiesced: in-flight requests complete first. */
        blk_set_quiescing(e->backend, true);
        e->data_plane = e->no_dataplane ? e->data_plane : dp_switch_is_dataplane(e->sw);
        dp_switch_free(e->sw);
        blk_set_quiescing(e->backend, false);
        e->sw = NULL;
    }
    for (unsigned i = 0; i < n; i++) {
        VirtQueueState st = {0};

        if (i < e->nq && e->vq[i]) {
            virtqueue_get_state(e->vq[i], &st);
        }
        last_avail[i] = st.last_avail_idx;
    }
    vub_free_queues(e);
}

static void vub_reset(void *opaque)
{
    VhostUserBlkExport *e = opaque;

    virtio_blk_reset(e->blk);
}

static void vub_backend_read(void *opaque);

static void vub_backend_watch(void *opaque, int fd, bool on)
{
    static const EventFdOps backend_ops = {.read = vub_backend_read};
    VhostUserBlkExport *e = opaque;
    GError *err = NULL;

    if (!event_loop_set_fd_handler(e->main_loop, fd, on ? &backend_ops : NULL, e, &err)) {
        /* Unwatched, the channel still sends; answers are then not read (the timeout ends it). */
        error_report_id(e->id, "vhost-user back-end channel: %s", err->message);
        g_error_free(err);
    }
}

static void vub_backend_timer(void *opaque, int timeout_ms)
{
    VhostUserBlkExport *e = opaque;

    if (timeout_ms) {
        event_timer_mod(e->backend_timer, event_clock_ns() + (int64_t)timeout_ms * 1000000);
    } else {
        event_timer_del(e->backend_timer);
    }
}

static void vub_backend_timeout(void *opaque)
{
    VhostUserBlkExport *e = opaque;

    vhost_user_backend_timeout(e->vu);
}

static const VhostUserDevOps vub_ops = {
    .features = vub_features,
    .set_features = vub_set_features,
    .config_size = vub_config_size,
    .get_config = vub_get_config,
    .set_config = vub_set_config,
    .start = vub_start,
    .stop = vub_stop,
    .reset = vub_reset,
    .backend_watch = vub_backend_watch,
    .backend_timer = vub_backend_timer,
};

/* ---- socket ---- */

static void vub_listen_watch(VhostUserBlkExport *e, bool on);

/* End the connection after a bad message and listen for the next one. */
static void vub_drop(VhostUserBlkExport *e)
{
    event_loop_set_fd_handler(e->main_loop, vhost_user_conn_fd(e->vu), NULL, NULL, NULL);
    vhost_user_detach(e->vu);
    vub_listen_watch(e, true);
}

static void vub_conn_read(void *opaque)
{
    VhostUserBlkExport *e = opaque;

    if (!vhost_user_conn_read(e->vu)) {
        vub_drop(e);
    }
}

static void vub_backend_read(void *opaque)
{
    VhostUserBlkExport *e = opaque;

    if (!vhost_user_backend_read(e->vu)) {
        vub_drop(e);
    }
}

static void vub_accept(void *opaque)
{
    static const EventFdOps conn_ops = {.read = vub_conn_read};
    VhostUserBlkExport *e = opaque;
    GError *err = NULL;
    int fd = accept4(e->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);

    if (fd < 0) {
        if (errno != EAGAIN && errno != EINTR) {
            error_report_id(e->id, "accept: %s", g_strerror(errno));
        }
        return;
    }
    vub_listen_watch(e, false);
    vhost_user_attach(e->vu, fd);
    if (!event_loop_set_fd_handler(e->main_loop, fd, &conn_ops, e, &err)) {
        error_report_id(e->id, "%s", err->message);
        g_error_free(err);
        vhost_user_detach(e->vu);
        vub_listen_watch(e, true);
    }
}

static void vub_listen_watch(VhostUserBlkExport *e, bool on)
{
    static const EventFdOps listen_ops = {.read = vub_accept};

    if (on == e->listening) {
        return;
    }
    if (event_loop_set_fd_handler(e->main_loop, e->listen_fd, on ? &listen_ops : NULL, e, NULL)) {
        e->listening = on;
    }
}

static int vub_listen_path(const char *path, GError **errp)
{
    struct sockaddr_un sa = {.sun_family = AF_UNIX};
    struct stat st;
    int fd;

    if (strlen(path) >= sizeof(sa.sun_path)) {
        g_set_error(errp, VUB_ERROR, ENAMETOOLONG, "socket path '%s' is too long", path);
        return -1;
    }
    strcpy(sa.sun_path, path);
    /* A socket left behind by an earlier run is replaced; anything else is not touched. */
    if (lstat(path, &st) == 0 && S_ISSOCK(st.st_mode)) {
        unlink(path);
    }
    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 1) < 0) {
        g_set_error(errp, VUB_ERROR, errno, "Failed to bind socket to %s: %s", path,
                    g_strerror(errno));
        if (fd >= 0) {
            close(fd);
        }
        return -1;
    }
    return fd;
}

/* ---- creation ---- */

/* The dataplane's own fd on the node's storage, as virtio-blk-pci opens it. */
static bool vub_open_host(VhostUserBlkExport *e, bool readonly, GError **errp)
{
    BlockHostInfo hi;

    blk_get_host_info(e->backend, &hi);
    e->no_flush = hi.no_flush;
    if (hi.not_passthrough) {
        e->no_dataplane = g_strdup_printf("the node has %s, which the dataplane cannot bypass",
                                          hi.not_passthrough);
        e->engine = "null";
        return true;
    }
    if (hi.null) {
        e->engine = "null";
        e->null_read_zeroes = hi.null_read_zeroes;
        return true;
    }
    if (hi.nbd) {
        /* remote nodes: the dataplane's own connection / image handle, as virtio-blk-pci's */
        e->engine = "nbd";
        e->nbd = (IOQNbdConfig){.host = hi.nbd_host,
                                .port = hi.nbd_port,
                                .socket = hi.nbd_socket,
                                .export_name = hi.nbd_export,
                                .reconnect_delay_s = hi.nbd_reconnect_delay};
        return true;
    }
    if (hi.rbd) {
        e->engine = "rbd";
        e->rbd = (IOQRbdConfig){.pool = hi.rbd_pool,
                                .rbd_namespace = hi.rbd_namespace,
                                .image = hi.rbd_image,
                                .conf = hi.rbd_conf,
                                .user = hi.rbd_user,
                                .conf_kv = hi.rbd_conf_kv};
        return true;
    }
    e->fd =
        open(hi.filename, (readonly ? O_RDONLY : O_RDWR) | O_CLOEXEC | (hi.direct ? O_DIRECT : 0));
    if (e->fd < 0) {
        g_set_error(errp, VUB_ERROR, errno, "Could not open '%s': %s", hi.filename,
                    g_strerror(errno));
        return false;
    }
    e->direct = hi.direct;
    e->engine = !strcmp(hi.aio, "native") ? "native" : "io_uring";
    return true;
}

/* Context: main loop */
VhostUserBlkExport *vhost_user_blk_export_new(const VhostUserBlkExportConf *conf, GError **errp)
{
    VhostUserBlkExport *e;
    unsigned nq = conf->num_queues ? conf->num_queues : 1;
    uint32_t lbs = conf->logical_block_size ? conf->logical_block_size : 512;
    int64_t len;
    bool readonly;
    char buf[32];

    THREAD_ASSERT_MAIN();
    if (nq > VHOST_USER_MAX_QUEUES) {
        g_set_error(errp, VUB_ERROR, EINVAL, "num-queues must be 1..%d", VHOST_USER_MAX_QUEUES);
        return NULL;
    }
    if (lbs < 512 || lbs > 4096 || (lbs & (lbs - 1))) {
        /* qemu-storage-daemon's limits for this export */
        g_set_error(errp, VUB_ERROR, EINVAL,
                    "logical-block-size must be a power of two between 512 and 4096");
        return NULL;
    }
    len = blk_getlength(conf->backend);
    if (len < 0) {
        g_set_error(errp, VUB_ERROR, (int)-len, "Could not get the size: %s",
                    g_strerror((int)-len));
        return NULL;
    }
    readonly = !conf->writable || blk_is_read_only(conf->backend);
    if (conf->writable && blk_is_read_only(conf->backend)) {
        g_set_error(errp, VUB_ERROR, EACCES, "Block node is read-only");
        return NULL;
    }

    e = g_new0(VhostUserBlkExport, 1);
    e->id = g_strdup(conf->id);
    e->node_name = g_strdup(conf->node_name);
    e->backend = conf->backend;
    e->main_loop = conf->main_loop;
    e->data_plane = conf->data_plane;
    e->fd = -1;
    e->listen_fd = -1;

    virtio_blk_conf_init(&e->conf, (uint64_t)len / VIRTIO_BLK_SECTOR_SIZE);
    e->conf.writeback = blk_enable_write_cache(conf->backend);
    e->conf.readonly = readonly;
    e->conf.seg_max_adjust = false; /* 126, as qemu-storage-daemon offers */
    snprintf(buf, sizeof(buf), "%u", nq);
    if (!virtio_blk_conf_set_property(&e->conf, "num-queues", buf, errp)) {
        goto fail;
    }
    snprintf(buf, sizeof(buf), "%u", lbs);
    if (!virtio_blk_conf_set_property(&e->conf, "logical_block_size", buf, errp) ||
        !virtio_blk_conf_set_property(&e->conf, "physical_block_size", buf, errp) ||
        !virtio_blk_conf_set_property(&e->conf, "queue-size", "1024", errp) ||
        /* GET_ID answers what qemu-storage-daemon answers */
        !virtio_blk_conf_set_property(&e->conf, "serial", "vhost_user_blk", errp) ||
        /* qemu-storage-daemon's limits: 32768 sectors per discard / write-zeroes */
        !virtio_blk_conf_set_property(&e->conf, "max-discard-sectors", "32768", errp) ||
        !virtio_blk_conf_set_property(&e->conf, "max-write-zeroes-sectors", "32768", errp)) {
        goto fail;
    }
    e->blk = virtio_blk_new(&e->conf, errp);
    if (!e->blk || !vub_open_host(e, readonly, errp)) {
        goto fail;
    }
    if (conf->iothread) {
        e->iothread = conf->iothread;
    } else {
        g_autofree char *name = g_strdup_printf("vhost-user-blk-%s", conf->id);

        e->iothread = iothread_new(name, errp);
        if (!e->iothread) {
            goto fail;
        }
        e->own_iothread = true;
    }
    e->backend_timer = event_timer_new(e->main_loop, vub_backend_timeout, e);
    e->vu = vhost_user_new(e->id, nq, &vub_ops, e);
    if (conf->listen_fd >= 0) {
        e->listen_fd = conf->listen_fd;
        fcntl(e->listen_fd, F_SETFL, fcntl(e->listen_fd, F_GETFL) | O_NONBLOCK);
    } else {
        e->listen_fd = vub_listen_path(conf->path, errp);
        if (e->listen_fd < 0) {
            goto fail;
        }
        e->path = g_strdup(conf->path);
    }
    vub_listen_watch(e, true);
    if (!e->listening) {
        g_set_error(errp, VUB_ERROR, EIO, "cannot watch the listening socket");
        goto fail;
    }
    return e;

fail:
    vhost_user_blk_export_free(e);
    return NULL;
}

/* Context: main loop */
void vhost_user_blk_export_free(VhostUserBlkExport *e)
{
    if (!e) {
        return;
    }
    THREAD_ASSERT_MAIN();
    if (e->vu) {
        if (vhost_user_conn_fd(e->vu) >= 0) {
            event_loop_set_fd_handler(e->main_loop, vhost_user_conn_fd(e->vu), NULL, NULL, NULL);
        }
        vhost_user_free(e->vu);
    }
    if (e->backend_timer) {
        event_timer_free(e->backend_timer);
    }
    vub_listen_watch(e, false);
    if (e->listen_fd >= 0) {
        close(e->listen_fd);
    }
    if (e->path) {
        unlink(e->path);
    }
    if (e->own_iothread) {
        iothread_free(e->iothread);
    }
    if (e->fd >= 0) {
        close(e->fd);
    }
    if (e->blk) {
        virtio_blk_free(e->blk);
    }
    g_free(e->no_dataplane);
    g_free(e->path);
    g_free(e->node_name);
    g_free(e->id);
    g_free(e);
}

/* Context: main loop */
const char *vhost_user_blk_export_id(const VhostUserBlkExport *e)
{
    return e->id;
}

/* Context: main loop */
const char *vhost_user_blk_export_node_name(const VhostUserBlkExport *e)
{
    return e->node_name;
}

/* Context: main loop */
BlockBackend *vhost_user_blk_export_backend(const VhostUserBlkExport *e)
{
    return e->backend;
}

/* Context: main loop */
bool vhost_user_blk_export_connected(const VhostUserBlkExport *e)
{
    return vhost_user_conn_fd(e->vu) >= 0;
}

/* Context: main loop */
void vhost_user_blk_export_stats(const VhostUserBlkExport *e, unsigned *running,
                                 uint64_t *connections, uint64_t *bad)
{
    VhostUserStats st;

    vhost_user_get_stats(e->vu, &st);
    *running = st.running;
    *connections = st.connections;
    *bad = st.bad;
}

/* Context: main loop */
bool vhost_user_blk_export_resized(VhostUserBlkExport *e)
{
    int64_t len;

    THREAD_ASSERT_MAIN();
    len = blk_getlength(e->backend);
    if (len < 0) {
        error_report_id(e->id, "cannot get the new size: %s", g_strerror((int)-len));
        return false;
    }
    virtio_blk_set_capacity(e->blk, (uint64_t)len / VIRTIO_BLK_SECTOR_SIZE);
    return vhost_user_config_changed(e->vu);
}

/* Context: main loop */
bool vhost_user_blk_export_set_dataplane(VhostUserBlkExport *e, bool on, GError **errp)
{
    THREAD_ASSERT_MAIN();
    if (on && e->no_dataplane) {
        g_set_error(errp, VUB_ERROR, ENOTSUP, "%s", e->no_dataplane);
        return false;
    }
    if (e->sw && !dp_switch_set_dataplane(e->sw, on, errp)) {
        return false;
    }
    e->data_plane = on;
    return true;
}

/* Context: main loop */
bool vhost_user_blk_export_is_dataplane(const VhostUserBlkExport *e)
{
    return e->sw ? dp_switch_is_dataplane(e->sw) : e->data_plane && !e->no_dataplane;
}
