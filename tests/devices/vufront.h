/*
 * An in-process vhost-user front end for tests and benchmarks: the test
 * driver's memfd RAM and eventfds (tests/driver) handed to a vhost-user-blk
 * back end over its unix socket, the handshake in QEMU 7.2's order, and the
 * guest-side virtio-blk driver on the rings. test-vhost-user checks a back
 * end with it; bench-vhost-user measures one.
 *
 * Ring addresses are sent as front-end virtual addresses unrelated to this
 * process's mapping (and to the GPAs), so a back end that mixes up GPA and
 * UVA fails.
 *
 * Test code: a failure (short read, unexpected reply) aborts via g_assert.
 */
#ifndef VBLK_VUFRONT_H
#define VBLK_VUFRONT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "testdrv.h"

/* Protocol constants (the spec's numbers, kept local: this is the other side). */
enum {
    GET_FEATURES = 1,
    SET_FEATURES = 2,
    SET_OWNER = 3,
    RESET_OWNER = 4,
    SET_MEM_TABLE = 5,
    SET_LOG_BASE = 6,
    SET_VRING_NUM = 8,
    SET_VRING_ADDR = 9,
    SET_VRING_BASE = 10,
    GET_VRING_BASE = 11,
    SET_VRING_KICK = 12,
    SET_VRING_CALL = 13,
    GET_PROTOCOL_FEATURES = 15,
    SET_PROTOCOL_FEATURES = 16,
    GET_QUEUE_NUM = 17,
    SET_VRING_ENABLE = 18,
    SET_BACKEND_REQ_FD = 21,
    GET_CONFIG = 24,
    SET_CONFIG = 25,
    GET_INFLIGHT_FD = 31,
    SET_INFLIGHT_FD = 32,
    RESET_DEVICE = 34,
    GET_MAX_MEM_SLOTS = 36,
    ADD_MEM_REG = 37,
    REM_MEM_REG = 38,
    SET_STATUS = 39,
    GET_STATUS = 40,
};
#define F_PROTOCOL_FEATURES (1ull << 30)
#define P_MQ                (1ull << 0)
#define P_REPLY_ACK         (1ull << 3)
#define P_BACKEND_REQ       (1ull << 5)
#define P_CONFIG            (1ull << 9)
#define P_INFLIGHT          (1ull << 12)
#define P_RESET_DEVICE      (1ull << 13)
#define P_MEM_SLOTS         (1ull << 15)
#define P_STATUS            (1ull << 16)
#define NEED_REPLY          (1u << 3)
#define FAKE_UVA            0x7e0000000000ull /* front-end addresses: not ours, not GPAs */

/* Queues a front end drives at most (and the tests' exports offer). */
#define FE_NQ 2

typedef struct Fe {
    int s;
    TestDrv *d;
    TestVq *vq[FE_NQ];
    unsigned nq;
    unsigned min_queues; /* fe_handshake: GET_QUEUE_NUM must be at least this */
    uint64_t features, host_features, proto;
    int backend; /* our end of the back-end channel (fe_open_backend_req), or -1 */
} Fe;

/* Back-end requests (on Fe.backend). */
#define BACKEND_CONFIG_CHANGE_MSG 2

/* fe_handshake: negotiate INFLIGHT_SHMFD too. */
extern bool fe_want_inflight;
/* fe_handshake: these protocol features too (P_STATUS, P_RESET_DEVICE), which must be offered. */
extern uint64_t fe_want_proto;
/*
 * fe_open() that also negotiates BACKEND_REQ and hands the back end one end
 * of a socketpair with SET_BACKEND_REQ_FD (NEED_REPLY), before SET_OWNER, as
 * QEMU 7.2 does; Fe.backend is the other end.
 */
Fe *fe_open_backend_req(const char *sock, unsigned nregions);

/* ---- framing ---- */

/* Connect to a unix socket, retrying for 5 s while the back end starts. */
int fe_connect(const char *path);
void fe_send_raw(int s, const void *buf, size_t len, const int *fds, unsigned nfds);
/* One message: header (version 1 | @flags), @size bytes of payload, @nfds fds. */
void fe_send(Fe *fe, uint32_t req, uint32_t flags, const void *payload, uint32_t size,
             const int *fds, unsigned nfds);
bool fe_read_full(int s, void *buf, size_t len, int timeout_ms);
/* A reply with QEMU's checks: same request, flags exactly 0x5, exact size. */
void fe_reply(Fe *fe, uint32_t req, void *payload, uint32_t size);
uint64_t fe_get_u64(Fe *fe, uint32_t req);
void fe_set_u64(Fe *fe, uint32_t req, uint64_t v);
/* The REPLY_ACK of @req: must be 0. */
void fe_ack(Fe *fe, uint32_t req);
/* The back end closed the connection (after a bad message). */
bool fe_dropped(Fe *fe);
/*
 * Read one back-end request from Fe.backend within @timeout_ms: header into
 * @hdr (request, flags, size), up to 64 payload bytes discarded. False on
 * timeout or EOF.
 */
bool fe_backend_recv(Fe *fe, uint32_t hdr[3], int timeout_ms);
/* Answer back-end request @req with the u64 @v (flags 0x5, as QEMU 7.2's REPLY_ACK). */
void fe_backend_ack(Fe *fe, uint32_t req, uint64_t v);

/* ---- session ---- */

/* The front-end address (FAKE_UVA based) of guest address @gpa. */
uint64_t uva_of(Fe *fe, uint64_t gpa);
void fe_mem_table(Fe *fe, uint32_t flags);
/* SET_VRING_NUM/BASE (at the used index)/ADDR/KICK/CALL of queue @i. */
void fe_vring(Fe *fe, unsigned i, unsigned num);
void fe_enable(Fe *fe, unsigned i, unsigned on);
/*
 * Connect to @sock and negotiate up to (not including) the memory table;
 * guest RAM of 32 MiB in @nregions regions; the back end must offer at least
 * @min_queues queues.
 */
Fe *fe_open_queues(const char *sock, unsigned nregions, unsigned min_queues);
static inline Fe *fe_open(const char *sock, unsigned nregions)
{
    return fe_open_queues(sock, nregions, FE_NQ);
}
/* GET_FEATURES .. SET_OWNER, in QEMU 7.2's order. */
void fe_handshake(Fe *fe);
/* The rest of QEMU 7.2's start sequence: features, memory, @nq rings of 128, enable. */
void fe_start(Fe *fe, unsigned nq);
void fe_close(Fe *fe);
/* One request on queue @q, waited for (10 s); returns its status byte. */
uint8_t fe_io(Fe *fe, unsigned q, uint32_t type, uint64_t sector, void *data, uint32_t len);

#endif /* VBLK_VUFRONT_H */
