/*
 * virtio-blk-pci: the virtio-blk request engine behind the virtio-pci
 * transport, served either by a dataplane iothread (x-data-plane=on, or
 * iothread=ID) or by the block layer in the main loop (x-data-plane=off),
 * switchable at runtime (QOM property x-data-plane; see dp-switch.h).
 * Kicks are KVM ioeventfds on both paths.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <linux/falloc.h>
#include <linux/fs.h>
#include <linux/virtio_ids.h>

#include "devices/dp-switch.h"
#include "event/iothread-registry.h"
#include "vmm/machine.h"
#include "devices/virtio-blk-pci.h"
#include "devices/virtio-pci.h"
#include "virtio-blk-pci-int.h"
#include "util/debug-state.h"
#include "util/error-report.h"
#include "util/thread-check.h"

/* The iothread of -object iothread,id=@id (already checked to exist by the command line). */
static IOThread *blk_pci_named_iothread(const VmmOptions *opts, const char *id, GError **errp)
{
    for (guint i = 0; i < opts->iothreads->len; i++) {
        const IothreadOptions *io = opts->iothreads->pdata[i];

        if (!strcmp(io->id, id)) {
            return iothread_registry_get(id, &io->params, errp);
        }
    }
    g_set_error(errp, VMM_ERROR, ENOENT, "iothread '%s' not found (add -object iothread,id=%s)", id,
                id);
    return NULL;
}

static bool blk_pci_iothread_exists(const char *id, void *opaque)
{
    const VmmOptions *opts = opaque;

    for (guint i = 0; i < opts->iothreads->len; i++) {
        if (!strcmp(((const IothreadOptions *)opts->iothreads->pdata[i])->id, id)) {
            return true;
        }
    }
    return false;
}

typedef struct RegistryLookup {
    const char *id;
    IOThread *found;
} RegistryLookup;

static void registry_match(const char *id, IOThread *t, const IOThreadParams *p, void *opaque)
{
    RegistryLookup *l = opaque;

    if (!strcmp(id, l->id)) {
        l->found = t;
    }
}

/* Without a machine (the QMP test helper): the iothreads already running. */
static bool blk_pci_registry_has(const char *id, void *opaque)
{
    RegistryLookup l = {.id = id};

    iothread_registry_foreach(registry_match, &l);
    return l.found != NULL;
}

/*
 * Resolve @map (nothing changes on error) to one iothread per queue, into
 * @t and @ids (borrowed from @map): the -object iothreads, as QEMU.
 */
static bool blk_pci_resolve_map(VirtIOBlkPCI *s, const GPtrArray *map, IOThread **t,
                                const char **ids, GError **errp)
{
    const VmmOptions *opts = s->m ? machine_options(s->m) : NULL;

    if (!vq_mapping_resolve(map, s->conf.num_queues,
                            opts ? blk_pci_iothread_exists : blk_pci_registry_has, (void *)opts,
                            ids, errp)) {
        return false;
    }
    for (unsigned q = 0; q < s->conf.num_queues; q++) {
        t[q] = opts ? blk_pci_named_iothread(opts, ids[q], errp)
                    : iothread_registry_get(ids[q], NULL, errp);
        if (!t[q]) {
            return false;
        }
    }
    return true;
}

static void blk_pci_set_map(VirtIOBlkPCI *s, IOThread *const *t, const char *const *ids)
{
    for (unsigned q = 0; q < s->conf.num_queues; q++) {
        s->vq_iothread[q] = t[q];
        g_free(s->vq_iothread_id[q]);
        s->vq_iothread_id[q] = g_strdup(ids[q]);
    }
}

/* Context: main loop, BQL held */
bool blk_pci_remap(VirtIOBlkPCI *s, const GPtrArray *map, GError **errp)
{
    IOThread *t[VIRTIO_BLK_MAX_QUEUES];
    const char *ids[VIRTIO_BLK_MAX_QUEUES];
    bool ok = true;

    THREAD_ASSERT_MAIN();
    if (!blk_pci_resolve_map(s, map, t, ids, errp)) {
        return false;
    }
    if (s->sw) {
        /* The dump must not look at dataplanes the remap frees. */
        pthread_mutex_lock(&s->debug_lock);
        s->debug_sw = NULL;
        pthread_mutex_unlock(&s->debug_lock);
        ok = dp_switch_remap(s->sw, t, s->nq, errp);
        pthread_mutex_lock(&s->debug_lock);
        s->debug_sw = s->sw;
        pthread_mutex_unlock(&s->debug_lock);
    }
    if (ok) {
        blk_pci_set_map(s, t, ids);
    }
    return ok;
}

static void blk_pci_iothreads_destroy(void *opaque)
{
    iothread_registry_clear();
}

/* ---- transport callbacks (device lock held) ---- */

static uint64_t blk_host_features(void *opaque)
{
    VirtIOBlkPCI *s = opaque;

    return virtio_blk_get_host_features(s->blk);
}

static bool blk_set_features(void *opaque, uint64_t features)
{
    VirtIOBlkPCI *s = opaque;
    GError *err = NULL;

    if (!virtio_blk_set_features(s->blk, features, &err)) {
        error_report_id(s->id, "%s", err->message);
        g_error_free(err);
        return false;
    }
    return true;
}

static void blk_config_read(void *opaque, uint32_t off, void *buf, uint32_t len)
{
    VirtIOBlkPCI *s = opaque;
    struct virtio_blk_config cfg;

    virtio_blk_get_config(s->blk, &cfg);
    if (off < sizeof(cfg) && len <= sizeof(cfg) - off) {
        memcpy(buf, (uint8_t *)&cfg + off, len);
    }
}

static void blk_config_write(void *opaque, uint32_t off, const void *buf, uint32_t len)
{
    VirtIOBlkPCI *s = opaque;

    virtio_blk_config_write(s->blk, off, buf, len);
}

/* Called in the queue's owner thread; must not wait for the device lock. */
static void blk_queue_broken(void *opaque, VirtQueue *vq, const char *reason)
{
    VirtIOBlkPCI *s = opaque;

    error_report_id(s->id, "virtqueue error: %s (device needs reset)", reason);
    virtio_pci_set_needs_reset(s->vp);
}

static void blk_free_queues(VirtIOBlkPCI *s)
{
    for (unsigned i = 0; i < VIRTIO_BLK_MAX_QUEUES; i++) {
        if (s->bq[i]) {
            virtio_blk_queue_free(s->bq[i]);
            s->bq[i] = NULL;
        }
        if (s->vq[i]) {
            virtqueue_free(s->vq[i]);
            s->vq[i] = NULL;
        }
    }
    s->nq = 0;
}

static bool blk_start_paths(VirtIOBlkPCI *s, GError **errp)
{
    DpSwitchConf sc = {
        .id = s->id,
        .blk = s->blk,
        .main_loop = machine_event_loop(s->m),
        .backend = s->backend,
        .iothread = s->vq_iothread[0],
        .num_queues = s->nq,
        .queue_size = s->conf.queue_size,
        .no_flush = s->no_flush,
        .ioq = {.engine = s->engine,
                .fd = s->fd,
                .direct = s->direct,
                .null_read_zeroes = s->null_read_zeroes,
                .logical_block_size = s->conf.logical_block_size,
                .bounce_pool_size = 8 << 20,
                .nbd = s->nbd,
                .rbd = s->rbd},
    };
    DataPlaneQueue dq[VIRTIO_BLK_MAX_QUEUES];

    for (unsigned i = 0; i < s->nq; i++) {
        sc.vq_iothread[i] = s->vq_iothread[i];
        dq[i] = (DataPlaneQueue){.q = s->bq[i],
                                 .host_notifier = virtio_pci_host_notifier(s->vp, i),
                                 .notifier = virtio_pci_guest_notifier(s->vp, i)};
    }
    s->sw = dp_switch_new(&sc, errp);
    if (!s->sw) {
        return false;
    }
    /* Kicks reach the host notifiers, then the path starts and kicks itself once. */
    if (!virtio_pci_set_host_notifiers(s->vp, true, errp) ||
        !dp_switch_start(s->sw, s->data_plane, dq, s->nq, errp)) {
        virtio_pci_set_host_notifiers(s->vp, false, NULL);
        dp_switch_free(s->sw);
        s->sw = NULL;
        return false;
    }
    pthread_mutex_lock(&s->debug_lock);
    s->debug_sw = s->sw;
    s->debug_nq = s->nq;
    pthread_mutex_unlock(&s->debug_lock);
    return true;
}

static bool blk_start(void *opaque, GError **errp)
{
    VirtIOBlkPCI *s = opaque;
    uint64_t features = virtio_blk_get_features(s->blk);

    /* Queues 0..n-1 that the driver enabled (Linux may use fewer than offered). */
    for (unsigned i = 0; i < s->conf.num_queues && virtio_pci_queue_enabled(s->vp, i); i++) {
        uint64_t desc, avail, used;

        virtio_pci_queue_addrs(s->vp, i, &desc, &avail, &used);
        s->vq[i] = virtqueue_new(s->gm, virtio_pci_queue_size(s->vp, i), desc, avail, used,
                                 features, errp);
        if (!s->vq[i]) {
            goto fail;
        }
        virtqueue_set_broken_notifier(s->vq[i], blk_queue_broken, s);
        s->bq[i] = virtio_blk_queue_new(s->blk, s->vq[i], NULL, NULL, errp);
        if (!s->bq[i]) {
            goto fail;
        }
        s->nq = i + 1;
    }
    if (!s->nq) {
        g_set_error(errp, VMM_ERROR, EINVAL, "no queue enabled");
        goto fail;
    }
    if (!blk_start_paths(s, errp)) {
        goto fail;
    }
    return true;

fail:
    blk_free_queues(s);
    return false;
}

static void blk_stop(void *opaque)
{
    VirtIOBlkPCI *s = opaque;

    if (s->sw) {
        /*
         * Requests parked by werror/rerror=stop never complete on their own,
         * and one that fails while the path drains must not be parked either
         * (nor stop the VM from inside a reset): quiescing fails the parked
         * ones and reports further failures, or the drain would wait forever
         * (reset, quit). The guest sees IOERR, as with QEMU's reset.
         */
        blk_set_quiescing(s->backend, true);
        /*
         * Whichever path runs is quiesced: in-flight requests complete first.
         * A state dump may still look while it drains (nothing it reads is
         * freed by the stop), so a reset or teardown stuck here shows the
         * queues; it stops looking before the free.
         */
        s->data_plane = dp_switch_is_dataplane(s->sw);
        dp_switch_stop(s->sw);
        pthread_mutex_lock(&s->debug_lock); /* no dump looks at it from here on */
        s->debug_sw = NULL;
        s->debug_nq = 0;
        pthread_mutex_unlock(&s->debug_lock);
        dp_switch_free(s->sw);
        g_warn_if_fail(blk_in_flight(s->backend) == 0 && blk_parked_count(s->backend) == 0);
        blk_set_quiescing(s->backend, false);
        s->sw = NULL;
    }
    virtio_pci_set_host_notifiers(s->vp, false, NULL);
    blk_free_queues(s);
    virtio_blk_reset(s->blk);
}

static void blk_queue_notify(void *opaque, unsigned qi)
{
    VirtIOBlkPCI *s = opaque;

    uint64_t one = 1;

    if (qi >= s->nq) {
        return; /* a queue the driver did not enable: nothing to do */
    }
    /* A kick KVM did not catch: ring the doorbell the running path watches. */
    if (write(virtio_pci_host_notifier(s->vp, qi), &one, sizeof(one)) < 0) {
        error_report_id(s->id, "host notifier: %s", g_strerror(errno));
    }
}

static const VirtIOPCIDeviceOps blk_pci_ops = {
    .host_features = blk_host_features,
    .set_features = blk_set_features,
    .config_read = blk_config_read,
    .config_write = blk_config_write,
    .start = blk_start,
    .stop = blk_stop,
    .queue_notify = blk_queue_notify,
};

/* ---- creation from -drive / -device ---- */

/*
 * The dataplane's own fd on the storage the BlockBackend's leaf node uses,
 * opened with the same flags; a null leaf needs no fd, an nbd leaf gives the
 * server the dataplane's IOQ connects to. A graph that does more
 * than pass offsets through (blkdebug, raw offset/size) keeps the device on
 * the block-layer path.
 */
static bool blk_open_host(VirtIOBlkPCI *s, const char *what, uint64_t *bytes, GError **errp)
{
    BlockHostInfo hi;
    int64_t len = blk_getlength(s->backend);

    if (len < 0) {
        g_set_error(errp, VMM_ERROR, (int)-len, "%s: Could not get the size: %s", what,
                    g_strerror((int)-len));
        return false;
    }
    *bytes = (uint64_t)len;
    blk_get_host_info(s->backend, &hi);
    s->readonly = hi.read_only;
    s->no_flush = hi.no_flush;
    if (hi.not_passthrough) {
        s->no_dataplane = g_strdup_printf("the drive has %s, which the dataplane cannot bypass",
                                          hi.not_passthrough);
        s->engine = "null"; /* created with the device, never started */
        return true;
    }
    if (hi.null) {
        s->engine = "null";
        s->null_read_zeroes = hi.null_read_zeroes;
        return true;
    }
    if (hi.nbd) {
        /* The dataplane's own connection to the same export, opened with the paths. */
        s->engine = "nbd";
        s->nbd_direct = hi.direct; /* query-block's cache.direct; no O_DIRECT for a socket */
        s->nbd = (IOQNbdConfig){.host = hi.nbd_host,
                                .port = hi.nbd_port,
                                .socket = hi.nbd_socket,
                                .export_name = hi.nbd_export,
                                .reconnect_delay_s = hi.nbd_reconnect_delay};
        return true;
    }
    if (hi.rbd) {
        /* The dataplane's own handle on the same image, opened with the paths. */
        s->engine = "rbd";
        s->nbd_direct = hi.direct;
        s->rbd = (IOQRbdConfig){.pool = hi.rbd_pool,
                                .rbd_namespace = hi.rbd_namespace,
                                .image = hi.rbd_image,
                                .conf = hi.rbd_conf,
                                .user = hi.rbd_user,
                                .conf_kv = hi.rbd_conf_kv};
        return true;
    }
    s->fd = open(hi.filename,
                 (hi.read_only ? O_RDONLY : O_RDWR) | O_CLOEXEC | (hi.direct ? O_DIRECT : 0));
    if (s->fd < 0) {
        g_set_error(errp, VMM_ERROR, errno, "%s: Could not open '%s': %s", what, hi.filename,
                    g_strerror(errno));
        return false;
    }
    s->direct = hi.direct;
    /* aio=threads: the dataplane has no thread pool; io_uring's io-wq plays that role. */
    s->engine = !strcmp(hi.aio, "native") ? "native" : "io_uring";
    return true;
}

static bool blk_set_prop(VirtIOBlkConf *conf, const char *name, const char *fmt, unsigned v,
                         GError **errp)
{
    char buf[32];

    snprintf(buf, sizeof(buf), fmt, v);
    return virtio_blk_conf_set_property(conf, name, buf, errp);
}

static bool blk_configure(VirtIOBlkPCI *s, const DeviceOptions *dev, uint64_t bytes, unsigned ncpus,
                          GError **errp)
{
    VirtIOBlkConf *c = &s->conf;
    unsigned nq = dev->num_queues ? dev->num_queues : MIN(ncpus, VIRTIO_BLK_MAX_QUEUES);

    virtio_blk_conf_init(c, bytes / VIRTIO_BLK_SECTOR_SIZE);
    c->readonly = s->readonly;
    /* write-cache=auto: -drive's cache mode; on for -blockdev (as QEMU) */
    if (dev->write_cache >= 0) {
        blk_set_enable_write_cache(s->backend, dev->write_cache);
    }
    c->writeback = blk_enable_write_cache(s->backend);
    c->config_wce = dev->config_wce;
    c->discard = dev->discard;
    c->write_zeroes = dev->write_zeroes;
    if (!blk_set_prop(c, "num-queues", "%u", nq, errp) ||
        !blk_set_prop(c, "queue-size", "%u", dev->queue_size, errp) ||
        !blk_set_prop(c, "logical_block_size", "%u", dev->logical_block_size, errp) ||
        !blk_set_prop(c, "physical_block_size", "%u", dev->physical_block_size, errp) ||
        (dev->serial && !virtio_blk_conf_set_property(c, "serial", dev->serial, errp)) ||
        !virtio_blk_conf_validate(c, errp)) {
        return false;
    }
    return true;
}

static GuestMem *blk_guestmem(Vm *vm, GError **errp)
{
    size_t n;
    const VmRamRegion *r = vm_ram_regions(vm, &n);
    GuestMemRegion regs[8];

    for (size_t i = 0; i < n && i < G_N_ELEMENTS(regs); i++) {
        regs[i] = (GuestMemRegion){.gpa = r[i].gpa, .size = r[i].size, .hva = r[i].hva};
    }
    return guestmem_new(regs, MIN(n, G_N_ELEMENTS(regs)), errp);
}

/* The keys the command line left to the block layer, as a table. */
static GHashTable *blk_pci_block_keys(const DriveOptions *d)
{
    GHashTable *t = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);

    for (guint i = 0; d->block_opts && i < d->block_opts->len; i++) {
        const OptPair *p = d->block_opts->pdata[i];

        g_hash_table_insert(t, g_strdup(p->key), g_strdup(p->value));
    }
    return t;
}

/*
 * The block-layer path's BlockBackend: a -drive from its parsed options as
 * they are, a -blockdev from its keys (the node graph they describe).
 */
static BlockBackend *blk_pci_open_backend(VirtIOBlkPCI *s, const DriveOptions *d, EventLoop *loop,
                                          GError **errp)
{
    GHashTable *t = blk_pci_block_keys(d);
    BlockBackend *b;

    b = d->blockdev ? blk_new_from_blockdev_opts(t, loop, errp)
                    : blk_new_from_drive(&d->blk, t, loop, errp);
    g_hash_table_unref(t);
    if (!b && errp && *errp) {
        g_prefix_error(errp, "%s %s: ", d->blockdev ? "-blockdev" : "-drive", d->arg);
    }
    if (b) {
        blk_set_device_name(b, d->id);
        blk_set_error_hook(b, blk_pci_io_error, s);
    }
    return b;
}

/* Everything but the transport (which must be gone first). */
static void blk_pci_free_resources(VirtIOBlkPCI *s)
{
    blk_unref(s->backend);
    if (s->blk) {
        virtio_blk_free(s->blk);
    }
    guestmem_free(s->gm);
    if (s->fd >= 0) {
        close(s->fd);
    }
    g_free(s->id);
    g_free(s->drive_id);
    g_free(s->iothread_id);
    g_free(s->no_dataplane);
    for (unsigned q = 0; q < VIRTIO_BLK_MAX_QUEUES; q++) {
        g_free(s->vq_iothread_id[q]);
    }
    pthread_mutex_destroy(&s->debug_lock);
    g_free(s);
}

/* Context: any thread (no BQL) */
/*
 * One queue's ring indices, device and driver side, and what they say: a
 * missed kick (the guest made requests available that were never popped),
 * completions the guest has not consumed (with EVENT_IDX it re-arms used_event
 * at what it has consumed), or a guest that simply stopped sending.
 */
static void blk_pci_debug_ring(GString *out, VirtIOBlkPCI *s, unsigned q)
{
    VirtQueueDebug d;
    const char *verdict;

    if (!s->vq[q]) {
        return;
    }
    virtqueue_debug_snapshot(s->vq[q], &d);
    if (d.broken) {
        verdict = "queue broken";
    } else if (d.avail_idx != d.last_avail_idx) {
        verdict = d.notify_enabled ? "requests available, not popped (kick missed?)"
                                   : "requests available, not popped (device polling)";
    } else if (d.inflight) {
        verdict = "requests in flight in the device";
    } else if (d.guest_used_idx != d.published_used) {
        verdict = "used idx in guest memory differs from the published one";
    } else if (d.event_idx && d.used_event != d.published_used) {
        /* The driver re-arms used_event at what it has consumed. */
        verdict = "the guest has not consumed every published completion (interrupt lost?)";
    } else {
        verdict = "idle: the guest consumed every completion and queued nothing";
    }
    g_string_append_printf(out,
                           "device %s queue %u ring: avail idx %u (popped to %u), used idx %u "
                           "(published %u, in guest memory %u), used_event %u, avail_event %u, "
                           "signalled at %u%s, avail flags %#x, notify %s, in flight %u: %s\n",
                           s->id, q, d.avail_idx, d.last_avail_idx, d.used_idx, d.published_used,
                           d.guest_used_idx, d.used_event, d.avail_event, d.signalled_used,
                           d.signalled_used_valid ? "" : " (stale)", d.avail_flags,
                           d.notify_enabled ? "enabled" : "disabled", d.inflight, verdict);
}

void blk_pci_debug_state(GString *out, void *opaque)
{
    VirtIOBlkPCI *s = opaque;

    pthread_mutex_lock(&s->debug_lock);
    if (!s->debug_sw) {
        g_string_append_printf(out, "device %s: not started by the guest driver\n", s->id);
    } else {
        DataPlane *dp = dp_switch_dataplane(s->debug_sw);
        DpSwitchStats sw;
        IOQStats io;

        dp_switch_get_stats(s->debug_sw, &sw);
        dataplane_get_ioq_stats(dp, &io);
        g_string_append_printf(out,
                               "device %s: path %s, dataplane %s, %" G_GUINT64_FORMAT
                               " switches (last stall %" G_GUINT64_FORMAT
                               " us), %" G_GUINT64_FORMAT " IOQ submit calls\n",
                               s->id, dp_switch_is_dataplane(s->debug_sw) ? "dataplane" : "block layer",
                               dataplane_is_started(dp) ? "started" : "stopped", sw.switches,
                               sw.last_stall_ns / 1000, io.batches);
        for (unsigned q = 0; q < s->debug_nq; q++) {
            DataPlaneQueueStats st;

            /* debug_lock keeps remaps (which clear debug_sw) out. */
            dp_switch_get_queue_stats(s->debug_sw, q, &st);
            g_string_append_printf(out,
                                   "device %s queue %u (dataplane counters): popped %" G_GUINT64_FORMAT
                                   ", completed %" G_GUINT64_FORMAT ", in flight %" G_GUINT64_FORMAT
                                   ", kicks %" G_GUINT64_FORMAT ", interrupts %" G_GUINT64_FORMAT
                                   ", suppressed %" G_GUINT64_FORMAT ", throttle waits %" G_GUINT64_FORMAT
                                   "\n",
                                   s->id, q, st.requests, st.completed, st.inflight, st.kicks, st.irqs,
                                   st.irqs_suppressed, st.throttle_waits);
            blk_pci_debug_ring(out, s, q);
        }
    }
    pthread_mutex_unlock(&s->debug_lock);
}

static void blk_pci_destroy(void *opaque)
{
    VirtIOBlkPCI *s = opaque;

    blk_pci_qmp_remove(s);
    virtio_pci_free(s->vp); /* resets the device: stops the dataplane (dumpable meanwhile) */
    debug_state_unregister(blk_pci_debug_state, s);
    blk_pci_free_resources(s);
}

static bool blk_pci_create(Machine *m, const DeviceOptions *dev, const DriveOptions *d,
                           GError **errp)
{
    VirtIOBlkPCI *s = g_new0(VirtIOBlkPCI, 1);
    Vm *vm = machine_vm(m);
    g_autofree char *what = NULL;
    uint64_t bytes = 0;
    VirtIOPCIConf pc;
    char name[64];

    s->fd = -1;
    pthread_mutex_init(&s->debug_lock, NULL);
    s->m = m;
    s->vm = vm;
    s->id = g_strdup(dev->id ? dev->id : d->id);
    s->drive_id = g_strdup(d->id);
    s->blockdev = d->blockdev;
    s->iothread_id = g_strdup(dev->iothread);
    s->slot = dev->slot;
    s->pio_notify = dev->pio_notify;
    s->write_cache = dev->write_cache;
    s->bootindex = -1;
    s->backend = blk_pci_open_backend(s, d, machine_event_loop(m), errp);
    if (!s->backend) {
        goto fail;
    }
    what = g_strdup_printf("%s %s", d->blockdev ? "-blockdev" : "-drive", d->arg);
    if (!blk_open_host(s, what, &bytes, errp) ||
        !blk_configure(s, dev, bytes, vm_ncpus(vm), errp)) {
        goto fail;
    }
    s->data_plane = dev->data_plane || dev->iothread || dev->vq_mapping;
    if (s->data_plane && s->no_dataplane) {
        g_set_error(errp, VMM_ERROR, ENOTSUP,
                    "-device virtio-blk-pci,drive=%s: x-data-plane=on: %s", d->id, s->no_dataplane);
        goto fail;
    }
    /* Every device can switch to the dataplane at runtime, so it has an iothread. */
    {
        g_autofree char *own = g_strdup_printf("%s-dataplane", s->id);

        if (!iothread_registry_count()) {
            machine_add_cleanup(m, blk_pci_iothreads_destroy, NULL);
        }
        if (dev->vq_mapping) {
            /* iothread-vq-mapping: the -object iothreads it names, one per queue. */
            IOThread *t[VIRTIO_BLK_MAX_QUEUES];
            const char *ids[VIRTIO_BLK_MAX_QUEUES];

            if (!blk_pci_resolve_map(s, dev->vq_mapping, t, ids, errp)) {
                g_prefix_error(errp, "-device %s: ", dev->arg ? dev->arg : s->id);
                goto fail;
            }
            blk_pci_set_map(s, t, ids);
            s->iothread = t[0];
        } else {
            if (dev->iothread) {
                s->iothread = blk_pci_named_iothread(machine_options(m), dev->iothread, errp);
            } else {
                /* x-data-plane=on without iothread=: a thread of the device's own. */
                s->iothread = iothread_registry_get(own, NULL, errp);
            }
            if (!s->iothread) {
                goto fail;
            }
            for (unsigned q = 0; q < s->conf.num_queues; q++) {
                s->vq_iothread[q] = s->iothread;
                s->vq_iothread_id[q] = g_strdup(dev->iothread ? dev->iothread : own);
            }
        }
    }
    s->blk = virtio_blk_new(&s->conf, errp);
    s->gm = s->blk ? blk_guestmem(vm, errp) : NULL;
    if (!s->gm) {
        goto fail;
    }
    snprintf(name, sizeof(name), "virtio-blk-pci(%s)", s->id);
    pc = (VirtIOPCIConf){.device_id = VIRTIO_ID_BLOCK,
                         .class_code = 0x010000, /* mass storage, as QEMU */
                         .num_queues = s->conf.num_queues,
                         .queue_size = s->conf.queue_size,
                         .config_size = sizeof(struct virtio_blk_config),
                         .slot = dev->slot,
                         .name = name,
                         .pio_notify = s->pio_notify};
    vm_lock(vm);
    s->vp = virtio_pci_new(vm, machine_pci_bus(m), &pc, &blk_pci_ops, s, errp);
    vm_unlock(vm);
    if (!s->vp) {
        goto fail;
    }
    machine_add_cleanup(m, blk_pci_destroy, s);
    blk_pci_qmp_add(s);
    debug_state_register(blk_pci_debug_state, s);
    return true;

fail:
    blk_pci_free_resources(s);
    return false;
}

/* Context: main thread, before machine_run() */
void virtio_blk_pci_register(void)
{
    machine_register_device("virtio-blk-pci", blk_pci_create);
}
