/*
 * NBD servers for the tests: nbdkit's memory plugin or qemu-nbd over a
 * scratch file, on a unix socket or on 127.0.0.1, started as child
 * processes and killed (SIGKILL, as a crash would) or restarted at the same
 * address; and a fake server that answers with garbage.
 */
#ifndef VBLK_TESTS_NBDSERVER_H
#define VBLK_TESTS_NBDSERVER_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

typedef enum NbdServerKind { NBD_SRV_NBDKIT, NBD_SRV_QEMU_NBD } NbdServerKind;

typedef struct NbdServer {
    NbdServerKind kind;
    bool tcp;
    uint64_t size;
    GPid pid;     /* 0 when not running */
    char *dir;    /* scratch directory (socket, image) */
    char *sock;   /* unix socket path */
    int port;     /* TCP port on 127.0.0.1 */
    char *image;  /* qemu-nbd's file */
    char *uri;    /* nbd://127.0.0.1:PORT/exp or nbd+unix:///exp?socket=PATH */
    char *blockdev; /* "server.type=...,export=exp" keys for -blockdev */
} NbdServer;

/* Whether the server program is installed (else the test skips, saying so). */
bool nbd_server_available(NbdServerKind kind);
/* The same, for a test: false after g_test_skip() saying which program is missing. */
bool nbd_server_need(NbdServerKind kind);
/* Start a server of @size bytes; asserts it comes up. Export name "exp". */
void nbd_server_start(NbdServer *s, NbdServerKind kind, bool tcp, uint64_t size);
/* SIGKILL and reap; the address and the image stay. */
void nbd_server_kill(NbdServer *s);
/* Start again at the same address (qemu-nbd: same image; nbdkit: empty), @size bytes. */
void nbd_server_restart(NbdServer *s, uint64_t size);
/* Kill and remove everything. */
void nbd_server_free(NbdServer *s);

/* A unix socket whose server sends @nbytes of garbage to each client, then closes. */
typedef struct NbdGarbage NbdGarbage;
NbdGarbage *nbd_garbage_new(const char *tag, size_t nbytes);
const char *nbd_garbage_path(NbdGarbage *g);
void nbd_garbage_free(NbdGarbage *g);

#endif
