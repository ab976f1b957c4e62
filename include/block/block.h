/*
 * vblk block layer: a BlockBackend per drive on top of a small graph of
 * nodes (raw -> file, null-co/null-aio, blkdebug -> ...), used by the
 * virtio-blk device when x-data-plane=off.
 *
 * Threading: everything here runs in the thread that owns the backend's
 * EventLoop (the main loop, under the BQL). Completion callbacks run there
 * too, never from inside the blk_aio_*() call that started the request.
 * The dataplane never enters the block layer. See docs/block.md.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_BLOCK_H
#define VBLK_BLOCK_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/uio.h>

#include "event/event.h"
#include "util/block-acct.h"
#include "util/block-throttle.h"

#define BLOCK_ERROR g_quark_from_static_string("vblk-block-error")

typedef enum BlockOp {
    BLOCK_OP_READ,
    BLOCK_OP_WRITE,
    BLOCK_OP_FLUSH,
    BLOCK_OP_DISCARD,
    BLOCK_OP_WRITE_ZEROES,
    BLOCK_OP__MAX,
} BlockOp;

/* Request flags for blk_aio_*(). */
#define BLK_REQ_FUA       (1u << 0) /* write/write-zeroes: stable on completion */
#define BLK_REQ_MAY_UNMAP (1u << 1) /* write-zeroes: punching a hole is fine */

typedef struct BlockBackend BlockBackend;
typedef struct BlockNode BlockNode;

/* @ret: 0 on success or -errno. Runs in the backend's loop thread. */
typedef void BlockCompletionFunc(void *opaque, int ret);

/* ---- creation from already-split options ---- */

/* What a cache= mode sets (QEMU's table). */
typedef struct BlockCacheFlags {
    bool writeback; /* the guest sees a volatile write cache (WCE) */
    bool direct;    /* O_DIRECT */
    bool no_flush;  /* flushes complete at once without reaching the disk */
} BlockCacheFlags;

/*
 * QEMU's cache= modes: none, writeback, writethrough, directsync, unsafe.
 * false with "invalid cache option" for any other name.
 * Context: any thread.
 */
bool blk_parse_cache_mode(const char *mode, BlockCacheFlags *flags, GError **errp);

typedef enum BlockAioMode { BLOCK_AIO_THREADS, BLOCK_AIO_NATIVE, BLOCK_AIO_IO_URING } BlockAioMode;

/*
 * A -drive as the command line parsed it, handed over as is (nothing is
 * turned back into strings). The shape QEMU builds for it: a raw node over
 * a file, host_device or (for "null-co://" / "null-aio://") null node, an
 * nbd node for an NBD URI, or an rbd node for "rbd:POOL/IMAGE[:KEY=VALUE]...".
 */
typedef struct BlockDriveConf {
    const char *file;      /* required */
    BlockCacheFlags cache; /* cache= and cache.direct / cache.no-flush / cache.writeback */
    BlockAioMode aio;
    bool read_only;
    bool discard_unmap; /* discard=unmap (on) or ignore (off) */
} BlockDriveConf;

/*
 * Open a -drive from @conf. @extra (NULL: none) holds the -drive keys the
 * command line leaves to the block layer, as given: werror, rerror,
 * node-name, detect-zeroes, throttling.*, for a null file read-zeroes,
 * size, latency-ns, for an NBD URI reconnect-delay (or file.reconnect-delay);
 * any other key fails with "Invalid parameter 'KEY'".
 * Context: main loop, BQL held.
 */
BlockBackend *blk_new_from_drive(const BlockDriveConf *conf, GHashTable *extra, EventLoop *loop,
                                 GError **errp);

/*
 * Options are a GHashTable of char* key -> char* value (the VMM's QemuOpts
 * parser hands over the pairs; a later duplicate simply replaces the earlier
 * one). Every key must be understood, otherwise "Invalid parameter 'KEY'".
 *
 * -drive keys: file (required), format (raw only), cache (none, writeback,
 * writethrough, directsync, unsafe), cache.direct, cache.no-flush,
 * cache.writeback, aio (threads, native, io_uring), readonly / read-only,
 * discard (ignore/off, unmap/on), werror, rerror, node-name, throttling.*
 * (see block-throttle.h); id, if, index, media, bus, unit, serial are the
 * VMM's and are ignored here. A "file" starting with "null-co://" or
 * "null-aio://" selects the null driver, one starting with "nbd://",
 * "nbd+tcp://" or "nbd+unix://" the nbd driver (as QEMU does); reconnect-delay
 * (or file.reconnect-delay) goes to the nbd node; one starting with "rbd:"
 * the rbd driver (QEMU's legacy filename).
 *
 * -blockdev keys (QEMU's, nested with dots): driver (raw, file, host_device,
 * null-co, null-aio, blkdebug, nbd, rbd), node-name, read-only, discard, cache.direct,
 * cache.no-flush, detect-zeroes=off; per driver: file: filename, aio,
 * locking (ignored); raw: offset, size, file.* (child); null-*: size,
 * read-zeroes, latency-ns; blkdebug: image.* (child), align,
 * inject-error.N.{event,errno,once,sector,x-nth} (event: read_aio,
 * write_aio, flush_to_disk, discard, write_zeroes or any); nbd:
 * server.type (inet: server.host, server.port; unix: server.path), export,
 * reconnect-delay, or filename=URI; rbd: pool, image, namespace, conf, user,
 * or filename=rbd:... (refused without librbd: "rbd support not compiled in").
 *
 * @loop: the EventLoop the backend runs in (the main loop's); borrowed.
 * Context: main loop, BQL held.
 */
BlockBackend *blk_new_from_drive_opts(GHashTable *opts, EventLoop *loop, GError **errp);
/* Context: main loop, BQL held. */
BlockBackend *blk_new_from_blockdev_opts(GHashTable *opts, EventLoop *loop, GError **errp);
/*
 * Convenience for tests and the VMM: a table from "k=v,k=v" (no ",," escapes).
 * Context: any thread.
 */
GHashTable *blk_opts_parse(const char *str);

/* Whether a -drive file= is an NBD URI (nbd://, nbd+tcp://, nbd+unix://). Context: any thread */
bool blk_is_nbd_uri(const char *file);
/* Whether a -drive file= is an RBD filename (rbd:POOL/IMAGE...). Context: any thread */
bool blk_is_rbd_filename(const char *file);

/* Drains, then frees the backend and its nodes. NULL is ignored. Context: main loop. */
void blk_unref(BlockBackend *blk);

/* ---- I/O (asynchronous; @cb runs later in the loop thread, exactly once) ---- */

/* Context: backend's loop thread (all five). */
void blk_aio_preadv(BlockBackend *blk, uint64_t offset, struct iovec *iov, int niov, uint64_t bytes,
                    unsigned flags, BlockCompletionFunc *cb, void *opaque);
void blk_aio_pwritev(BlockBackend *blk, uint64_t offset, struct iovec *iov, int niov,
                     uint64_t bytes, unsigned flags, BlockCompletionFunc *cb, void *opaque);
void blk_aio_flush(BlockBackend *blk, BlockCompletionFunc *cb, void *opaque);
void blk_aio_pdiscard(BlockBackend *blk, uint64_t offset, uint64_t bytes, BlockCompletionFunc *cb,
                      void *opaque);
void blk_aio_pwrite_zeroes(BlockBackend *blk, uint64_t offset, uint64_t bytes, unsigned flags,
                           BlockCompletionFunc *cb, void *opaque);

/*
 * Run the loop until no request is in flight or throttled (throttled ones are
 * released at once). Parked requests (rerror/werror=stop) are not in flight.
 * Context: backend's loop thread.
 */
void blk_drain(BlockBackend *blk);
/* Requests accepted and not completed (parked ones excluded). Context: loop thread. */
unsigned blk_in_flight(BlockBackend *blk);

/* Size in bytes or -errno. Context: loop thread. */
int64_t blk_getlength(BlockBackend *blk);
/*
 * block_resize: grow or shrink (regular files). @size comes from QMP as is: a
 * negative size or one that is not a multiple of 512 is an error here, for every
 * caller (virtio-blk-pci's and vblk-storage-daemon's block_resize).
 * Context: loop thread.
 */
bool blk_truncate(BlockBackend *blk, int64_t size, GError **errp);

/*
 * Move the backend to @loop. The backend is drained first. The caller must own
 * both loops' threads at that moment (e.g. the main thread before the other
 * loop runs) or the old loop must no longer run.
 * Context: backend's loop thread.
 */
void blk_set_event_loop(BlockBackend *blk, EventLoop *loop);
/* Context: any thread. */
EventLoop *blk_get_event_loop(BlockBackend *blk);

/* ---- properties ---- */

/* Context: loop thread (all getters and setters below). */
bool blk_is_read_only(BlockBackend *blk);
/* Whether the guest should see a volatile write cache (cache mode's WCE). */
bool blk_enable_write_cache(BlockBackend *blk);
/* false: every write is followed by a flush before it completes (writethrough). */
void blk_set_enable_write_cache(BlockBackend *blk, bool wce);
/* Logical request alignment of the root node (1 for buffered files). */
uint32_t blk_get_request_alignment(BlockBackend *blk);
/* Memory alignment used for bounce buffers (qemu_blockalign): >= 4096 with O_DIRECT. */
uint32_t blk_get_opt_mem_alignment(BlockBackend *blk);
/* Root node's node-name (generated "#blockN" when none was given). */
const char *blk_root_node_name(BlockBackend *blk);
/* Driver name of the root node ("raw", "null-co", ...). */
const char *blk_root_driver_name(BlockBackend *blk);
/* The backing file name of the first file node (an nbd node's URI), or NULL. */
const char *blk_get_filename(BlockBackend *blk);
/* Device name used in events (e.g. the drive id or qdev id). Copied. */
void blk_set_device_name(BlockBackend *blk, const char *name);
const char *blk_get_device_name(BlockBackend *blk);
/* Find a node by node-name in this backend's graph. */
BlockNode *blk_find_node(BlockBackend *blk, const char *node_name);

/* ---- error policy (werror= / rerror=) ---- */

typedef enum BlockErrorPolicy {
    BLOCK_ERR_REPORT,
    BLOCK_ERR_IGNORE,
    BLOCK_ERR_STOP,
    BLOCK_ERR_ENOSPC, /* stop on ENOSPC, report otherwise */
} BlockErrorPolicy;

typedef enum BlockErrorAction {
    BLOCK_ERR_ACTION_REPORT,
    BLOCK_ERR_ACTION_IGNORE,
    BLOCK_ERR_ACTION_STOP,
} BlockErrorAction;

/* Payload of QEMU's BLOCK_IO_ERROR event. Strings are valid during the hook only. */
typedef struct BlockIOErrorEvent {
    const char *device;    /* blk_get_device_name(), "" if unset */
    const char *node_name; /* root node */
    const char *operation; /* "read" or "write" (flush/discard/write-zeroes are writes) */
    const char *action;    /* "report", "ignore" or "stop" */
    BlockErrorAction action_id;
    bool nospace;       /* the error was ENOSPC */
    const char *reason; /* strerror() of the error */
    int error;          /* positive errno */
} BlockIOErrorEvent;

/*
 * Called once per failed request, for every action (QEMU emits BLOCK_IO_ERROR
 * for report and ignore too). For action "stop" the request is already parked
 * when the hook runs: the VMM should pause the VM (emit BLOCK_IO_ERROR, then
 * STOP); later blk_resume_parked() (on `cont`) resubmits. Context: loop thread.
 */
typedef void BlockErrorHook(void *opaque, BlockBackend *blk, const BlockIOErrorEvent *ev);

/*
 * Announce a failure that another path of the same drive handled (the
 * dataplane applies werror/rerror itself): the error hook runs with this
 * backend's device and root node-name, exactly as for the block layer's own
 * requests. Context: loop thread.
 */
void blk_emit_io_error(BlockBackend *blk, bool is_read, BlockErrorAction action, int error);
/* Parse "report" / "ignore" / "stop" / "enospc". Context: any thread. */
bool blk_error_policy_parse(const char *s, BlockErrorPolicy *out, GError **errp);
/* Defaults as QEMU's -drive: werror=enospc, rerror=report. Context: loop thread. */
void blk_set_error_policy(BlockBackend *blk, BlockErrorPolicy rerror, BlockErrorPolicy werror);
void blk_get_error_policy(BlockBackend *blk, BlockErrorPolicy *rerror, BlockErrorPolicy *werror);
void blk_set_error_hook(BlockBackend *blk, BlockErrorHook *hook, void *opaque);
/* Number of parked requests. */
unsigned blk_parked_count(BlockBackend *blk);
/* Resubmit the parked requests in their original submission order. */
void blk_resume_parked(BlockBackend *blk);
/* Fail every parked request with -ECANCELED (device reset or teardown). Context: loop thread. */
void blk_cancel_parked(BlockBackend *blk);
/*
 * While @on, a failure whose policy says "stop" (werror/rerror=stop, enospc on
 * ENOSPC) is reported instead: the request completes with its error and the
 * hook sees action "report". For a device being reset or torn down, whose
 * requests must all complete (nobody will `cont` them). On: parked requests
 * are cancelled as by blk_cancel_parked(), so a drain that follows ends with
 * nothing in flight and nothing parked. Context: loop thread.
 */
void blk_set_quiescing(BlockBackend *blk, bool on);

/* ---- throttling ---- */

/* block_set_io_throttle. Validates as QEMU; queued requests are re-timed. */
bool blk_set_io_limits(BlockBackend *blk, const ThrottleLimits *limits, GError **errp);
void blk_get_io_limits(BlockBackend *blk, ThrottleLimits *limits);
/* Requests waiting in the throttle queues. */
unsigned blk_throttled_count(BlockBackend *blk);
/*
 * The bucket state, levels included: handed to the dataplane when it takes
 * the queues and taken back when it gives them up (dp-switch.c), so that the
 * drive has one throttle whatever path runs. set requires empty throttle
 * queues (after blk_drain()).
 * Context: loop thread
 */
void blk_get_throttle_state(BlockBackend *blk, ThrottleState *ts);
void blk_set_throttle_state(BlockBackend *blk, const ThrottleState *ts);

/* ---- accounting ---- */

/* Own counters plus the attached shards (the dataplane's). Context: loop thread */
void blk_get_stats(BlockBackend *blk, BlockAcctStats *stats);
/* A guest request refused before I/O (QEMU's block_acct_invalid). Context: loop thread */
void blk_account_invalid(BlockBackend *blk, BlockAcctType type);
/*
 * Count another path's I/O as this drive's: @shards (borrowed, @n of them)
 * are initialised with this backend's histogram bounds and summed by
 * blk_get_stats() from now on. Detach folds them into the backend's own
 * counters (and happens on attach of another set). Their writer must not run
 * during either call.
 * Context: loop thread
 */
void blk_acct_attach_shards(BlockBackend *blk, BlockAcctShard *shards, unsigned n);
void blk_acct_detach_shards(BlockBackend *blk);
/* Histogram boundaries (ns, ascending, <= BLOCK_ACCT_HIST_MAX_BOUNDS); NULL/0 resets. */
bool blk_set_latency_histogram(BlockBackend *blk, BlockAcctType type, const uint64_t *bounds,
                               unsigned n, GError **errp);

/* ---- node level: counters and error injection ---- */

/* Counters kept by every node (syscalls for file nodes). */
typedef struct BlockNodeStats {
    uint64_t reads, writes, flushes, discards, write_zeroes;
    uint64_t discard_bytes;
    uint64_t flushes_skipped; /* cache.no-flush */
    uint64_t bounced;         /* requests copied through an aligned bounce buffer */
    uint64_t rmw;             /* sub-block writes done as read-modify-write */
    uint64_t serialised_waits;
} BlockNodeStats;

/*
 * How a path that bypasses the block layer (the dataplane) reaches the same
 * storage: the leaf node's host file (or null disk) and its open flags.
 */
typedef struct BlockHostInfo {
    const char *filename;  /* file/host_device leaf, nbd's URI; NULL for a null leaf */
    bool null;             /* null-co / null-aio leaf */
    bool null_read_zeroes; /* null leaf with read-zeroes=on */
    bool direct;           /* leaf opened with O_DIRECT (nbd: cache.direct as given) */
    bool no_flush;         /* leaf has cache.no-flush: a flush must not reach the disk */
    bool read_only;
    const char *aio; /* file leaf: "threads", "native" or "io_uring" */
    /* nbd leaf: the server (filename is its URI); the dataplane connects on its own */
    bool nbd;
    const char *nbd_host, *nbd_port; /* TCP, or ... */
    const char *nbd_socket;          /* ... a unix socket */
    const char *nbd_export;          /* NULL: the default export */
    uint64_t nbd_reconnect_delay;    /* seconds */
    /* rbd leaf: the image (filename is QEMU's json:); the dataplane opens its own handle */
    bool rbd;
    const char *rbd_pool, *rbd_namespace, *rbd_image;
    const char *rbd_conf, *rbd_user;  /* NULL: librados' defaults */
    const char *const *rbd_conf_kv;   /* more Ceph options: key, value, ..., NULL */
    uint64_t rbd_object_size;         /* QEMU's cluster-size */
    /*
     * NULL when a request at offset X of the backend is a request at offset
     * X of the leaf; else why not (a blkdebug filter, a raw offset/size window).
     */
    const char *not_passthrough;
} BlockHostInfo;

/* Context: loop thread. Borrowed strings, valid while @blk lives. */
void blk_get_host_info(BlockBackend *blk, BlockHostInfo *info);

/* Context: loop thread. */
void blk_node_get_stats(BlockNode *bs, BlockNodeStats *stats);
const char *blk_node_get_name(BlockNode *bs);
const char *blk_node_get_driver(BlockNode *bs);
/* Child of a filter/format node (raw, blkdebug) or NULL. */
BlockNode *blk_node_get_child(BlockNode *bs);

/* blkdebug rule: fail matching requests with -@error. */
typedef struct BlkdebugRule {
    int op;          /* BlockOp, or -1 for any */
    uint64_t nth;    /* fire on the nth matching request (1-based); 0 = every one */
    uint64_t offset; /* with @length: only requests overlapping [offset, offset+length) */
    uint64_t length; /* 0 = any offset */
    int error;       /* positive errno, e.g. EIO, ENOSPC */
    bool once;       /* remove the rule after it fired once */
} BlkdebugRule;

/* Add a rule to a blkdebug node; returns false (and sets @errp) on another node. */
bool blkdebug_add_rule(BlockNode *bs, const BlkdebugRule *rule, GError **errp);
void blkdebug_clear_rules(BlockNode *bs);
/* How many requests a blkdebug node failed on purpose. */
uint64_t blkdebug_fired(BlockNode *bs);

#endif /* VBLK_BLOCK_H */
