/*
 * The hostile-driver cases, shared by the suites that run them against a
 * device (tests/virtio/test-hostile.c: the request engine with an in-memory
 * executor; tests/dataplane/test-dp-hostile.c: a DataPlane on its iothread).
 *
 * A case is a builder that writes malformed rings or requests into the
 * guest of a HostileFix and publishes them, plus the exact outcome: either
 * the queue is broken with a known reason (and refuses all later work), or
 * the request completes with the expected status byte and used length. The suite owns the device:
 * it builds it with hostile_case_conf(), fills in a HostileFix, runs the builder, lets the device
 * see the kick, and checks with hostile_check_used().
 */
#ifndef VBLK_TESTS_HOSTILE_CASES_H
#define VBLK_TESTS_HOSTILE_CASES_H

#include "blkfix.h"

#define HOSTILE_BROKEN     0xee /* HostileCase.status: the queue must end up broken */
#define HOSTILE_QUEUE_SIZE 16   /* every case runs on a queue of this size */

typedef struct HostileFix HostileFix;

/* What the few cases that keep requests in flight need from the suite. */
typedef struct HostileOps {
    /* From now on the executor holds requests in flight instead of completing them. */
    void (*hold)(HostileFix *c);
    /*
     * One pass of the device over the queue, as a kick makes (nothing is
     * completed meanwhile); returns how many requests are in flight after it.
     */
    unsigned (*pass)(HostileFix *c);
} HostileOps;

struct HostileFix {
    TestDrv *drv;          /* the guest */
    TestVq *tvq;           /* its view of the queue (HOSTILE_QUEUE_SIZE entries) */
    VirtIOBlkQueue *q;     /* the device's queue */
    const HostileOps *ops; /* used by the cases with .holds set */
    void *opaque;          /* the suite's */
    uint64_t status_gpa;   /* set by the builder: where the status byte must land (0: unknown) */
};

typedef struct HostileCase {
    const char *name;
    int (*build)(HostileFix *c); /* returns the head that must complete, or -1 */
    uint8_t status;              /* HOSTILE_BROKEN or VIRTIO_BLK_S_* */
    uint32_t used_len;
    void (*conf)(VirtIOBlkConf *conf); /* changes to the default device configuration */
    uint64_t features;                 /* driver feature mask, 0 = all */
    unsigned nregions;                 /* guest RAM regions, 0 = 1 */
    const char *reason;                /* broken reason expected (HOSTILE_BROKEN cases) */
    bool holds;         /* the builder holds requests in flight and republishes (ops) */
    bool returns_chain; /* broken, and the chain must still come back with IOERR */
} HostileCase;

extern const HostileCase hostile_cases[];
extern const size_t hostile_ncases;

/* The case called @name (aborts if there is none). */
const HostileCase *hostile_case_find(const char *name);
/* The device configuration of @hc: blkfix_default_conf() with the case's changes. */
void hostile_case_conf(const HostileCase *hc, VirtIOBlkConf *conf);
/* Next used element: asserts there is one and that it is @head; returns its length. */
uint32_t hostile_used_len(HostileFix *c, int head);
/*
 * What the guest sees once the device has handled the case: the exact used
 * length and status byte; for a broken queue, IOERR and the chain back where
 * the status location is known (required with .returns_chain).
 */
void hostile_check_used(const HostileCase *hc, HostileFix *c, int head);

#endif
