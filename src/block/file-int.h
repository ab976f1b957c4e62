/*
 * The file protocol node's state, shared by file-posix.c (open, probe,
 * size) and file-io.c (the thread pool and IOQ request paths).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_BLOCK_FILE_INT_H
#define VBLK_BLOCK_FILE_INT_H

#include "block-int.h"
#include "thread-pool.h"
#include "ioq-drv.h"

typedef enum FileAio { FILE_AIO_THREADS, FILE_AIO_NATIVE, FILE_AIO_IO_URING } FileAio;

typedef struct FileState {
    BlockNode *bs;
    int fd;
    char *filename;
    bool is_blockdev;
    FileAio aio;
    ThreadPool *pool;   /* aio=threads */
    IOQ *ioq;           /* aio=native / io_uring */
    IoqDrv io;          /* the IOQ's request glue (ioq-drv.h) */
    unsigned inflight;  /* aio=threads: requests in the pool */
} FileState;

#define FILE_POOL_WORKERS 8

/* Context: loop thread (file-io.c) */
void file_io_submit(BlockNode *bs, BlockNodeReq *req);
void file_io_attach(BlockNode *bs);
void file_io_detach(BlockNode *bs);
bool file_io_init(BlockNode *bs, GError **errp);
void file_io_cleanup(BlockNode *bs);

#endif /* VBLK_BLOCK_FILE_INT_H */
