/*
 * What the tests of the remote-disk drivers (test-block-nbd, test-block-rbd)
 * share: a data pattern, vectored I/O run to completion, the read-back
 * session on a node, one-line option errors and a BLOCK_IO_ERROR log.
 */
#ifndef VBLK_TESTS_REMOTEFIX_H
#define VBLK_TESTS_REMOTEFIX_H

#include <sys/uio.h>

#include "blocktest.h"

/* Fill @buf with a pattern of @seed. */
void rf_fill(uint8_t *buf, size_t len, uint8_t seed);
/* A read or write of @len bytes at @off through @niov iovecs, waited for; its result. */
int rf_rw_async(BlockBackend *blk, bool write, uint64_t off, struct iovec *iov, int niov,
                uint64_t len);
/*
 * The data session on a node of @size bytes (at least 4 MiB): writes of
 * one buffer and of three pieces, flush, reads back of one and of two
 * pieces, the last sector and a read past the end (fails), write-zeroes
 * read back as zeroes with the data around it intact, discard, flush.
 */
void rf_check_data(BlockBackend *blk, uint64_t size);
/* Creating @opts (-blockdev with @blockdev, else -drive) fails with one line containing @want. */
void rf_expect_err(bool blockdev, const char *opts, const char *want);

/* The last BLOCK_IO_ERROR of a backend (blk_set_error_hook(blk, rf_hook, &log)). */
typedef struct RfHookLog {
    unsigned calls;
    char action[16];
    int error;
} RfHookLog;

void rf_hook(void *opaque, BlockBackend *blk, const BlockIOErrorEvent *ev);

/* Run the loop for @ms (timers such as the nbd engine's reconnect run in it). */
void rf_spin(unsigned ms);
/*
 * A write @d of @len bytes of @w at @off is parked (werror=stop, @h its
 * hook's log) and the remote is back: 'cont' until it goes through (at most
 * @tries times, each after @pause_ms of the loop; a retry may fail and be
 * parked again), then nothing is parked and @w reads back.
 */
void rf_resume_until_written(BlockBackend *blk, BtDone *d, RfHookLog *h, unsigned tries,
                             unsigned pause_ms, uint64_t off, const uint8_t *w, size_t len);

#endif
