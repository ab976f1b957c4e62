/*
 * A vblk process for the KVM tests (test-kvm.c): $VBLK_BIN spawned with the
 * test's arguments and a QMP socket in a temp directory, connected and past
 * qmp_capabilities; QMP lines are read up to a needle; at the end vblk must
 * exit with status 0 and the directory goes away. Also the synthetic bzImage
 * those tests boot.
 */
#ifndef VBLK_TESTS_VBLKPROC_H
#define VBLK_TESTS_VBLKPROC_H

#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct VblkProc {
    char *dir;    /* temp directory: kernels, qmp.sock, serial.log */
    char *log;    /* <dir>/serial.log, for a -serial file: argument */
    GPid pid;     /* vblk */
    int fd;       /* QMP, capabilities negotiated */
    GString *acc; /* QMP text read but not yet returned */
    char *err_log; /* set before vblkproc_start(): vblk's stderr goes to this file */
} VblkProc;

/* /dev/kvm can be opened; skips the test (visibly) if not. */
bool vblkproc_kvm_usable(void);
/* $VBLK_BIN is set and /dev/kvm usable; skips the test (visibly) if not. */
bool vblkproc_usable(void);
/* A bzImage in @dir whose 64-bit entry is @code followed by @msg (NUL-terminated). */
char *vblkproc_bzimage(const char *dir, const char *name, const uint8_t *code, size_t clen,
                       const char *msg);
/* Removes the files in @dir, then @dir. */
void vblkproc_remove_dir(const char *dir);

/* Makes the temp directory (named after @tmpl, "...-XXXXXX") before vblk starts. */
void vblkproc_init(VblkProc *p, const char *tmpl);
/*
 * Spawns $VBLK_BIN with the NULL-terminated arguments and
 * -qmp unix:<dir>/qmp.sock,server=on,wait=off (stdin from /dev/null, stderr
 * too with @quiet), connects, reads the greeting and negotiates.
 */
void vblkproc_start(VblkProc *p, bool quiet, const char *arg, ...) G_GNUC_NULL_TERMINATED;
/* Sends {"execute": "@cmd"}. */
void vblkproc_send(VblkProc *p, const char *cmd);
/*
 * Reads QMP until a line contains @needle; returns everything up to the end of
 * that line (later lines stay for the next call). Fails the test on EOF.
 */
char *vblkproc_wait(VblkProc *p, const char *needle);
/* Sends @cmd and waits for @needle. */
void vblkproc_expect(VblkProc *p, const char *cmd, const char *needle);
/*
 * Closes QMP, waits for vblk (exit status 0 asserted), stores what the guest
 * wrote to <dir>/serial.log in *@serial if asked, removes the directory.
 */
void vblkproc_end(VblkProc *p, char **serial);
/*
 * The same, but returns vblk's exit status (or -1 if a signal ended it) instead of
 * asserting 0, and stores what vblk wrote to err_log in *@err if asked.
 */
int vblkproc_end_status(VblkProc *p, char **serial, char **err);

#endif
