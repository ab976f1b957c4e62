/*
 * The two request paths of a virtio-blk device and the switch between them.
 *
 *   dataplane (x-data-plane=on): the queues belong to an iothread, requests
 *       go straight to libaio/io_uring (dataplane/dataplane.h);
 *   block layer (x-data-plane=off): the host notifiers are watched by the
 *       main loop, requests go through a BlockBackend (devices/block-exec.h).
 *
 * dp_switch_set_dataplane() moves a running device from one path to the other
 * without losing, repeating or reordering a request: quiesce the current path
 * (notifiers detached in their own thread, test-and-clear, in-flight drained,
 * completions published), hand the queues over (their ring state lives in the
 * VirtQueue, so the next path continues at the same last_avail_idx and used
 * index), attach the other path and make one pass over every queue (the
 * "kick once" that picks up requests queued during the switch).
 *
 * One drive, one throttle, one set of counters: the dataplane's accounting
 * shards are attached to the BlockBackend (query-blockstats sums both and
 * keeps the dataplane's totals when the DpSwitch is freed), and the
 * throttle's bucket state moves with the queues at every switch.
 *
 * Context: every function runs in the main loop thread with the BQL held
 * (the thread that owns @main_loop and the BlockBackend), or a vCPU thread
 * holding the BQL at a virtio status write; the "any thread" getters
 * excepted. They assert (unless NDEBUG) that they are not in the iothread.
 */
#ifndef VBLK_DP_SWITCH_H
#define VBLK_DP_SWITCH_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "block/block.h"
#include "dataplane/dataplane.h"

typedef struct DpSwitch DpSwitch;

typedef struct DpSwitchConf {
    const char *id; /* device id for diagnostics (may be NULL; must outlive the DpSwitch) */
    VirtIOBlk *blk;
    EventLoop *main_loop;  /* block-layer path; owned by the calling thread */
    BlockBackend *backend; /* block-layer path; runs in main_loop */
    IOThread *iothread;    /* dataplane path: the queues' iothread, unless mapped below */
    /*
     * iothread-vq-mapping: queue i is served by vq_iothread[i] (NULL: by
     * @iothread). One dataplane (IOQ, request slots, counters) per distinct
     * iothread, serving only its queues; nothing is shared between them on
     * the request path. The iothreads are borrowed and must outlive the
     * DpSwitch.
     */
    IOThread *vq_iothread[DATAPLANE_MAX_QUEUES];
    IOQConfig ioq;         /* dataplane engine, fd, O_DIRECT */
    bool no_flush;         /* dataplane: cache.no-flush (the block layer has its own) */
    unsigned num_queues;
    unsigned queue_size;
} DpSwitchConf;

/* Counters of the switch itself. */
typedef struct DpSwitchStats {
    uint64_t switches;      /* completed path changes */
    uint64_t last_stall_ns; /* duration of the last change (no request is popped meanwhile) */
    uint64_t max_stall_ns;
    uint64_t total_stall_ns;
    uint64_t remaps;        /* completed dp_switch_remap() calls */
    uint64_t last_remap_ns; /* duration of the last remap (moving queues pop nothing meanwhile) */
    uint64_t max_remap_ns;
    uint64_t total_remap_ns;
} DpSwitchStats;

/* Context: main loop, BQL held */
DpSwitch *dp_switch_new(const DpSwitchConf *conf, GError **errp);
/*
 * Start serving @queues (conf.num_queues of them, nothing in flight) on the
 * dataplane (@dataplane) or the block layer.
 * Context: main loop, BQL held
 */
bool dp_switch_start(DpSwitch *sw, bool dataplane, const DataPlaneQueue *queues, unsigned n,
                     GError **errp);
/* Quiesce whichever path runs; afterwards the queues have no executor. Idempotent. */
/* Context: main loop, BQL held */
void dp_switch_stop(DpSwitch *sw);
/*
 * Move a started device to the other path (no-op if already there). Refused
 * (EBUSY, the device stays where it is, nothing lost) while requests wait
 * for 'cont' after werror/rerror=stop, on either path. Context: main loop, BQL
 */
bool dp_switch_set_dataplane(DpSwitch *sw, bool on, GError **errp);
/*
 * 'cont': resubmit the requests the dataplane holds for werror/rerror=stop
 * (the block layer's parked ones are the BlockBackend's:
 * blk_resume_parked()). The dataplane takes the drive's werror/rerror when
 * it starts and reports its failures through the BlockBackend's error hook
 * (blk_emit_io_error()), from the main loop. Context: main loop, BQL held
 */
void dp_switch_resume(DpSwitch *sw);
/*
 * block_set_io_throttle for the drive, whatever path runs: validated and set
 * on the BlockBackend, and on the running dataplane too. The limits stay in
 * force across switches (the bucket levels move with the queues).
 * Context: main loop, BQL
 */
bool dp_switch_set_io_limits(DpSwitch *sw, const ThrottleLimits *limits, GError **errp);
/*
 * Move queues between iothreads (@map: conf.num_queues entries, queue i to
 * map[i]) without losing, repeating or reordering a request. Only the
 * dataplanes whose queue set changes are touched: each is quiesced inside
 * its iothread (notifiers detached and test-and-cleared, in-flight I/O
 * drained, completions published), a dataplane is made for each new queue
 * set and started in its iothread, where it continues every ring at the
 * last_avail_idx and used index the old one left (the "kick once" picks up
 * what the guest queued meanwhile). Dataplanes that keep their queues run
 * on undisturbed. On the block-layer path only the mapping changes (it
 * takes effect at the next switch). Refused (nothing moved) while a moving
 * queue's dataplane holds requests for 'cont' after werror/rerror=stop.
 * Context: main loop, BQL held
 */
bool dp_switch_remap(DpSwitch *sw, IOThread *const *map, unsigned n, GError **errp);
/* The current mapping (conf.num_queues entries). Context: main loop, BQL held */
void dp_switch_get_map(DpSwitch *sw, IOThread **map);
/* Context: any thread */
bool dp_switch_is_dataplane(DpSwitch *sw);
/*
 * The first dataplane (the only one without a mapping), for its counters.
 * Its queue indices are local: use dp_switch_get_queue_stats() for a
 * device queue. Context: any thread
 */
DataPlane *dp_switch_dataplane(DpSwitch *sw);
/* The dataplanes, one per iothread of the mapping. Context: main loop, BQL held */
unsigned dp_switch_num_dataplanes(DpSwitch *sw);
/*
 * Dataplane @i (NULL past the end), its iothread and the device indices of
 * its queues (*qidx[0..*n-1], valid until the next remap).
 * Context: main loop, BQL held
 */
DataPlane *dp_switch_get_dataplane(DpSwitch *sw, unsigned i, IOThread **iothread,
                                   const unsigned **qidx, unsigned *n);
/*
 * Dataplane counters of device queue @q, summed over every dataplane that
 * served it (remaps included). Context: main loop, BQL held
 */
void dp_switch_get_queue_stats(DpSwitch *sw, unsigned q, DataPlaneQueueStats *st);
/* Requests held by werror/rerror=stop in all dataplanes. Context: main loop, BQL held */
unsigned dp_switch_held_count(DpSwitch *sw);
/* Context: any thread */
void dp_switch_get_stats(DpSwitch *sw, DpSwitchStats *st);
/* Stop, then free. NULL ok. Context: main loop, BQL held */
void dp_switch_free(DpSwitch *sw);

#endif /* VBLK_DP_SWITCH_H */
