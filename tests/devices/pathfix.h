/*
 * What the tests of a virtio-blk device on a remote disk share
 * (test-nbd-paths, test-rbd-paths): the device (devfix.h) with one queue on
 * the remote drive, started on one path; requests queued and waited for
 * with their status; and the checks both run: data written on one path
 * read back on the other, WRITE_ZEROES and DISCARD, writes in flight
 * across switches, and the remote going away under the dataplane.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_TESTS_PATHFIX_H
#define VBLK_TESTS_PATHFIX_H

#include "devfix.h"

#define PATHFIX_QSIZE 64
#define PATHFIX_SIZE  (4u << 20) /* the disk's size */

typedef struct PathFix {
    DevFix dev;
    unsigned wait_polls; /* polls of the used ring before a request counts as lost */
    bool used[PATHFIX_QSIZE];
    uint8_t status_of[PATHFIX_QSIZE];
    uint64_t status_gpa[PATHFIX_QSIZE];
} PathFix;

/*
 * The device on the -drive options @drive ("%s": @image), its dataplane's
 * IOQ picked as virtio-blk-pci picks it, on iothread @iothread; started on
 * the dataplane (@dataplane) or the block layer.
 */
void pathfix_init(PathFix *f, const char *drive, const char *image, const char *iothread,
                  bool dataplane, unsigned wait_polls);
/* The same with the dataplane IOQ's bounce pool of @bounce_pool_size bytes (8 MiB above). */
void pathfix_init_pool(PathFix *f, const char *drive, const char *image, const char *iothread,
                       bool dataplane, unsigned wait_polls, size_t bounce_pool_size);
void pathfix_free(PathFix *f);

/*
 * Queue one request: header, @nbuf data buffers of @len/@nbuf bytes at @data
 * (device-writable for reads), status. Returns the head.
 */
int pathfix_submit(PathFix *f, uint32_t type, uint64_t sector, uint64_t data, uint32_t len,
                   unsigned nbuf);
/* Serve the block layer (main loop) until @hd is used; returns its status. */
uint8_t pathfix_wait(PathFix *f, int hd);
/* Submit and wait. */
uint8_t pathfix_req(PathFix *f, uint32_t type, uint64_t sector, uint64_t data, uint32_t len,
                    unsigned nbuf);
void pathfix_pattern(uint8_t *b, size_t len, uint8_t seed);

/*
 * Started on the dataplane: what each path writes the other reads back
 * (several buffers a request), WRITE_ZEROES and DISCARD on both; the
 * dataplane's IOQ statistics into *@is.
 */
void pathfix_check_paths(PathFix *f, IOQStats *is);
/* Started on the block layer: 8 writes in flight across each of 20 switches land. */
void pathfix_check_switch_inflight(PathFix *f);
/*
 * Started on the dataplane with werror=report: @outage(true, @opaque) takes
 * the remote away (requests then give IOERR), @outage(false) brings it
 * back; a read succeeds again within @tries (each after @pause_us) and
 * returns the data written before, and both paths work.
 */
void pathfix_check_outage(PathFix *f, void (*outage)(bool down, void *opaque), void *opaque,
                          unsigned tries, unsigned pause_us);

#endif
