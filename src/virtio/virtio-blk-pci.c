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

#include "vblk/dp-switch.h"
#include "vblk/machine.h"
#include "vblk/virtio-blk-pci.h"
#include "vblk/virtio-pci.h"
#include "virtio-blk-pci-int.h"

/* ---- iothread registry: -object iothread,id=X shared by devices naming it ---- */

static GHashTable *iothreads; /* id -> IOThread* */

typedef struct IothreadParams {
    int64_t max_ns, grow, shrink;
} IothreadParams;
static GHashTable *iothread_params; /* id -> IothreadParams* */

/* Context: main thread */
void blk_pci_foreach_iothread(void (*fn)(const char *id, IOThread *t, int64_t poll_max_ns,
                                         int64_t poll_grow, int64_t poll_shrink, void *opaque),
                              void *opaque)
{
    GHashTableIter it;
    gpointer k, v;

    if (!iothreads) {
        return;
    }
    g_hash_table_iter_init(&it, iothreads);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        IothreadParams *p = g_hash_table_lookup(iothread_params, k);

        fn(k, v, p->max_ns, p->grow, p->shrink, opaque);
    }
}

#define IOTHREAD_POLL_MAX_NS_DEFAULT 32768

static IOThread *iothread_lookup(const VmmOptions *opts, const char *id, GError **errp)
{
    IOThread *t;
    /* QEMU's -object iothread defaults: adaptive polling up to 32 us, doubling, reset to 0. */
    int64_t max_ns = IOTHREAD_POLL_MAX_NS_DEFAULT, grow = 0, shrink = 0;

    if (!iothreads) {
        iothreads =
            g_hash_table_new_full(g_str_hash, g_str_equal, g_free, (GDestroyNotify)iothread_free);
    }
    t = g_hash_table_lookup(iothreads, id);
    if (t) {
        return t;
    }
    for (guint i = 0; i < opts->iothreads->len; i++) {
        const IothreadOptions *io = opts->iothreads->pdata[i];

        if (strcmp(io->id, id) != 0) {
            continue;
        }
        for (guint j = 0; io->props && j < io->props->len; j++) {
            /* "key=value" strings, as the command-line parser keeps them. */
            const char *kv = io->props->pdata[j];
            const char *eq = strchr(kv, '=');
            int64_t v = eq ? g_ascii_strtoll(eq + 1, NULL, 10) : 0;

            if (g_str_has_prefix(kv, "poll-max-ns=")) {
                max_ns = v;
            } else if (g_str_has_prefix(kv, "poll-grow=")) {
                grow = v;
            } else if (g_str_has_prefix(kv, "poll-shrink=")) {
                shrink = v;
            }
        }
        t = iothread_new(id, errp);
        if (!t) {
            return NULL;
        }
        event_loop_set_poll_params(iothread_get_loop(t), max_ns, grow, shrink);
        g_hash_table_insert(iothreads, g_strdup(id), t);
        if (!iothread_params) {
            iothread_params = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
        }
        {
            IothreadParams *p = g_new(IothreadParams, 1);

            *p = (IothreadParams){max_ns, grow, shrink};
            g_hash_table_insert(iothread_params, g_strdup(id), p);
        }
        return t;
    }
    g_set_error(errp, VMM_ERROR, ENOENT, "iothread '%s' not found (add -object iothread,id=%s)", id,
                id);
    return NULL;
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
        g_warning("%s: %s", s->id, err->message);
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

    fprintf(stderr, "vblk: %s: virtqueue error: %s (device needs reset)\n", s->id, reason);
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
        .blk = s->blk,
        .main_loop = machine_event_loop(s->m),
        .backend = s->backend,
        .iothread = s->iothread,
        .num_queues = s->nq,
        .queue_size = s->conf.queue_size,
        .ioq = {.engine = s->engine,
                .fd = s->fd,
                .direct = s->direct,
                .null_read_zeroes = s->null_read_zeroes,
                .logical_block_size = s->conf.logical_block_size,
                .bounce_pool_size = 8 << 20},
    };
    DataPlaneQueue dq[VIRTIO_BLK_MAX_QUEUES];

    for (unsigned i = 0; i < s->nq; i++) {
        dq[i] = (DataPlaneQueue){.q = s->bq[i],
                                 .host_notifier = virtio_pci_host_notifier(s->vp, i),
                                 .guest_notifier = virtio_pci_guest_notifier(s->vp, i),
                                 .isr = virtio_pci_isr(s->vp)};
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
        /* Whichever path runs is quiesced: in-flight requests complete first. */
        s->data_plane = dp_switch_is_dataplane(s->sw);
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
        g_warning("%s: host notifier: %s", s->id, g_strerror(errno));
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
 * opened with the same flags; a null leaf needs no fd. A graph that does more
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

static void table_add(GHashTable *t, const char *k, const char *v)
{
    g_hash_table_insert(t, g_strdup(k), g_strdup(v));
}

/* -blockdev: its keys as given, the node graph they describe. */
static BlockBackend *blk_pci_open_blockdev(const DriveOptions *d, EventLoop *loop, GError **errp)
{
    GHashTable *t = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    BlockBackend *b;

    for (guint i = 0; d->block_opts && i < d->block_opts->len; i++) {
        const OptPair *p = d->block_opts->pdata[i];

        table_add(t, p->key, p->value);
    }
    b = blk_new_from_blockdev_opts(t, loop, errp);
    g_hash_table_unref(t);
    return b;
}

/* The block-layer path's BlockBackend, from the -drive or -blockdev. */
static BlockBackend *blk_pci_open_backend(VirtIOBlkPCI *s, const DriveOptions *d, EventLoop *loop,
                                          GError **errp)
{
    static const char *const aio[] = {"threads", "native", "io_uring"};
    GHashTable *t;
    BlockBackend *b;

    if (d->blockdev) {
        b = blk_pci_open_blockdev(d, loop, errp);
        goto out;
    }
    t = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    table_add(t, "file", d->file);
    table_add(t, "format", "raw");
    table_add(t, "cache.direct", d->cache_direct ? "on" : "off");
    table_add(t, "cache.no-flush", d->cache_no_flush ? "on" : "off");
    table_add(t, "cache.writeback", d->cache_writeback ? "on" : "off");
    table_add(t, "aio", aio[d->aio]);
    table_add(t, "read-only", d->readonly ? "on" : "off");
    table_add(t, "discard", d->discard_unmap ? "unmap" : "ignore");
    for (guint i = 0; d->block_opts && i < d->block_opts->len; i++) {
        const OptPair *p = d->block_opts->pdata[i];

        table_add(t, p->key, p->value);
    }
    b = blk_new_from_drive_opts(t, loop, errp);
    g_hash_table_unref(t);
out:
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
    g_free(s->no_dataplane);
    g_free(s);
}

static void blk_pci_destroy(void *opaque)
{
    VirtIOBlkPCI *s = opaque;

    blk_pci_qmp_remove(s);
    virtio_pci_free(s->vp); /* resets the device: stops the dataplane */
    blk_pci_free_resources(s);
}

static void iothreads_destroy(void *opaque)
{
    if (iothreads) {
        g_hash_table_destroy(iothreads);
        iothreads = NULL;
    }
    if (iothread_params) {
        g_hash_table_destroy(iothread_params);
        iothread_params = NULL;
    }
}

/*
 * The dataplane completes a failed request with VIRTIO_BLK_S_IOERR whatever
 * the drive's werror/rerror say; only the block-layer path parks and stops
 * the VM. Say so once when the user asked for "stop" explicitly.
 */
static void blk_pci_warn_error_policy(VirtIOBlkPCI *s)
{
    BlockErrorPolicy r, w;

    blk_get_error_policy(s->backend, &r, &w);
    if (s->data_plane && (r == BLOCK_ERR_STOP || w == BLOCK_ERR_STOP)) {
        fprintf(stderr,
                "vblk: warning: drive '%s': werror/rerror=stop applies on the block-layer path "
                "only; with x-data-plane=on an I/O error is reported to the guest\n",
                s->drive_id);
    }
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
    s->m = m;
    s->vm = vm;
    s->id = g_strdup(dev->id ? dev->id : d->id);
    s->drive_id = g_strdup(d->id);
    s->backend = blk_pci_open_backend(s, d, machine_event_loop(m), errp);
    if (!s->backend) {
        goto fail;
    }
    what = g_strdup_printf("%s %s", d->blockdev ? "-blockdev" : "-drive", d->arg);
    if (!blk_open_host(s, what, &bytes, errp) ||
        !blk_configure(s, dev, bytes, vm_ncpus(vm), errp)) {
        goto fail;
    }
    s->data_plane = dev->data_plane || dev->iothread;
    if (s->data_plane && s->no_dataplane) {
        g_set_error(errp, VMM_ERROR, 0, "-device virtio-blk-pci,drive=%s: x-data-plane=on: %s",
                    d->id, s->no_dataplane);
        goto fail;
    }
    blk_pci_warn_error_policy(s);
    /* Every device can switch to the dataplane at runtime, so it has an iothread. */
    {
        if (!iothreads) {
            machine_add_cleanup(m, iothreads_destroy, NULL);
        }
        if (dev->iothread) {
            s->iothread = iothread_lookup(machine_options(m), dev->iothread, errp);
        } else {
            /* x-data-plane=on without iothread=: a thread of the device's own. */
            VmmOptions fake = {.iothreads = g_ptr_array_new()};
            IothreadOptions own = {.id = g_strdup_printf("%s-dataplane", s->id)};

            g_ptr_array_add(fake.iothreads, &own);
            s->iothread = iothread_lookup(&fake, own.id, errp);
            g_ptr_array_free(fake.iothreads, TRUE);
            g_free(own.id);
        }
        if (!s->iothread) {
            goto fail;
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
                         .name = name};
    vm_lock(vm);
    s->vp = virtio_pci_new(vm, machine_pci_bus(m), &pc, &blk_pci_ops, s, errp);
    vm_unlock(vm);
    if (!s->vp) {
        goto fail;
    }
    machine_add_cleanup(m, blk_pci_destroy, s);
    blk_pci_qmp_add(s);
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
