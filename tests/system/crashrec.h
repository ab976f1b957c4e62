/*
 * The record written by the crash-test guest writer (tests/system/crashw.c)
 * and checked by the dm-log-writes replayer (tests/system/lwlog.c).
 *
 * One record fills one 4 KiB block. Thread t of the writer owns slots
 * [t * slots, (t + 1) * slots) of the disk; its record n (n = 1, 2, ...)
 * goes to slot t * slots + (n - 1) % slots. A record carries its thread, its
 * sequence number and a hash over the whole block, so a replayed image tells,
 * per block, which acknowledged write it holds (or that it is torn or empty).
 */
#ifndef VBLK_TESTS_SYSTEM_CRASHREC_H
#define VBLK_TESTS_SYSTEM_CRASHREC_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define CRASHREC_SIZE 4096u
#define CRASHREC_MAGIC 0x7672636b72656331ull /* "vrckrec1" */

struct crashrec_hdr {
    uint64_t magic;
    uint64_t seq;
    uint64_t hash; /* FNV-1a over the block with this field zero */
    uint32_t thread;
    uint32_t slot;
};

static inline uint64_t crashrec_fnv(const unsigned char *p, size_t n)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static inline uint64_t crashrec_hash(const unsigned char *blk)
{
    unsigned char tmp[CRASHREC_SIZE];
    memcpy(tmp, blk, CRASHREC_SIZE);
    memset(tmp + offsetof(struct crashrec_hdr, hash), 0, sizeof(uint64_t));
    return crashrec_fnv(tmp, CRASHREC_SIZE);
}

/* Fill blk with record (thread, slot, seq): header, a payload derived from
 * (thread, seq), then the hash. */
static inline void crashrec_fill(unsigned char *blk, uint32_t thread, uint32_t slot, uint64_t seq)
{
    struct crashrec_hdr h = {.magic = CRASHREC_MAGIC, .seq = seq, .hash = 0, .thread = thread, .slot = slot};
    uint64_t x = (seq << 8) ^ thread ^ 0x9e3779b97f4a7c15ull;
    memset(blk, 0, CRASHREC_SIZE);
    memcpy(blk, &h, sizeof(h));
    for (size_t i = sizeof(h); i + 8 <= CRASHREC_SIZE; i += 8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        memcpy(blk + i, &x, 8);
    }
    h.hash = crashrec_hash(blk);
    memcpy(blk, &h, sizeof(h));
}

enum crashrec_state { CRASHREC_EMPTY, CRASHREC_VALID, CRASHREC_TORN };

/* Classify a block: all zero, a valid record (header returned), or anything
 * else (torn: a mix of two records, or garbage). */
static inline enum crashrec_state crashrec_parse(const unsigned char *blk, struct crashrec_hdr *out)
{
    struct crashrec_hdr h;
    memcpy(&h, blk, sizeof(h));
    if (h.magic == CRASHREC_MAGIC && crashrec_hash(blk) == h.hash) {
        *out = h;
        return CRASHREC_VALID;
    }
    for (size_t i = 0; i < CRASHREC_SIZE; i++) {
        if (blk[i]) {
            return CRASHREC_TORN;
        }
    }
    return CRASHREC_EMPTY;
}

#endif
