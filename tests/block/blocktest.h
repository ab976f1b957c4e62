/*
 * Helpers shared by the block-layer tests: a loop, scratch files under
 * /var/tmp (O_DIRECT needs a real filesystem, not tmpfs), backend creation
 * from "k=v,..." strings, and synchronous wrappers that run the loop until
 * the callback came.
 */
#ifndef VBLK_TESTS_BLOCKTEST_H
#define VBLK_TESTS_BLOCKTEST_H

#include "block/block.h"

typedef struct BtDone {
    int ret;
    bool done;
    int order; /* completion sequence number */
} BtDone;

extern EventLoop *bt_loop;

void bt_init(void);
/* Scratch file of @size bytes filled with a pattern; returns a g_free()able path. */
char *bt_scratch_file(uint64_t size, uint8_t seed);
void bt_remove(char *path);
/* Backend from "-drive" or "-blockdev" style strings; asserts success. */
BlockBackend *bt_drive(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
BlockBackend *bt_blockdev(const char *fmt, ...) G_GNUC_PRINTF(1, 2);
/* The error message of a failing creation (g_free it). */
char *bt_drive_err(const char *opts);
char *bt_blockdev_err(const char *opts);

/* Completion callback filling a BtDone. */
void bt_cb(void *opaque, int ret);
/* Run the loop until @d->done (10 s cap). */
void bt_wait(BtDone *d);
void bt_wait_all(BtDone *d, unsigned n);

int bt_read(BlockBackend *blk, uint64_t off, void *buf, uint64_t len);
int bt_write(BlockBackend *blk, uint64_t off, const void *buf, uint64_t len);
int bt_flush(BlockBackend *blk);

#endif
