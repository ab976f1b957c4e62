/*
 * vblk-storage-daemon ($VBLK_STORAGE_DAEMON) exporting one --blockdev over
 * vhost-user-blk, for the tests of an export on a remote disk
 * (test-rbd-vhost-user, test-nbd-vhost-user): the daemon started and
 * stopped (a clean exit, no sanitizer report in its log), and the data
 * session they share, driven by the in-process front end (vufront.h).
 *
 * Test code: a failure aborts via g_assert.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_VUEXPORT_H
#define VBLK_VUEXPORT_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef struct VuDaemon {
    GPid pid;
    char *sock;    /* the export's socket */
    char *qmp;     /* the QMP monitor's socket (NULL: none) */
    int qmp_fd;    /* connected to it by the first vu_daemon_set_dataplane() (else -1) */
    char *pidfile;
    char *log;     /* the daemon's stderr */
} VuDaemon;

/*
 * Spawn @argv (a storage daemon) with stdout to /dev/null and stderr into
 * the file @log (truncated); returns its pid, to be reaped by the caller.
 */
GPid vu_spawn_logged(const char *const *argv, const char *log);

/* An --object argument vu_daemon_start() puts before --blockdev (NULL: none). */
extern const char *vu_daemon_object;

/*
 * Start the daemon with --blockdev @blockdev and export its node @node
 * (id exp0, writable, 2 queues, x-data-plane=on with @dataplane) on a
 * socket in @dir; with @qmp a QMP monitor too. Returns once it listens.
 */
VuDaemon *vu_daemon_start(const char *dir, const char *blockdev, const char *node, bool dataplane,
                          bool qmp);
/* SIGTERM; the daemon must exit with status 0. Removes its files. */
void vu_daemon_stop(VuDaemon *dm);

/*
 * Switch export exp0 of @dm (started with @qmp) to the dataplane (@on) or
 * the block layer over its QMP monitor (qom-set x-data-plane), and check
 * the switch took (qom-get).
 */
void vu_daemon_set_dataplane(VuDaemon *dm, bool on);

/* Fill @b with a pattern of @seed. */
void vu_pattern(uint8_t *b, size_t len, uint8_t seed);

/*
 * The export on both paths over a disk of @disk_size bytes: a daemon on the
 * dataplane writes, flushes and reads back 64 KiB at sector 8, gets IOERR
 * past the end, checks WRITE_ZEROES when offered and leaves its data; a
 * second daemon on the block layer reads that data, then does the same.
 */
void vu_export_check_both_paths(const char *dir, const char *blockdev, const char *node,
                                uint64_t disk_size);

#endif /* VBLK_VUEXPORT_H */
