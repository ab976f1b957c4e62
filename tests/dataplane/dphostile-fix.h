/*
 * Fixture of the dataplane hostile-driver suite (test-dp-hostile.c): like
 * dpfix_new(), but with the device configuration, the driver's feature mask
 * and the guest RAM layout of a hostile case, over an O_DIRECT temp file.
 * The result is a DpFix: dpfix_start/stop/free apply.
 */
#ifndef VBLK_DPHOSTILE_FIX_H
#define VBLK_DPHOSTILE_FIX_H

#include "dpfix.h"

typedef struct DpHostileOpts {
    const char *engine;        /* "native" or "io_uring" */
    const VirtIOBlkConf *conf; /* device configuration (capacity = disk size) */
    uint64_t features;         /* driver wants (0 = everything offered) */
    unsigned nregions;         /* guest RAM regions (0 = 1) */
    unsigned *broken_calls;    /* incremented (atomically) by the broken notifier */
} DpHostileOpts;

/*
 * Returns NULL (with a message on stderr) if the engine or O_DIRECT cannot
 * be used here. The queue has conf->queue_size entries.
 */
DpFix *dphostile_fix_new(const DpHostileOpts *o);

#endif
