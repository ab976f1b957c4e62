/*
 * vblk: tiny AML encoder (ACPI 6.5 sections 20.2 and 6.4). Only the encodings
 * vblk's DSDT needs; see include/vmm/aml.h.
 */
#include <stdlib.h>
#include <string.h>

#include "vmm/aml.h"

#define AML_ZERO_OP       0x00
#define AML_ONE_OP        0x01
#define AML_NAME_OP       0x08
#define AML_BYTE_PREFIX   0x0a
#define AML_WORD_PREFIX   0x0b
#define AML_DWORD_PREFIX  0x0c
#define AML_STRING_PREFIX 0x0d
#define AML_QWORD_PREFIX  0x0e
#define AML_SCOPE_OP      0x10
#define AML_BUFFER_OP     0x11
#define AML_PACKAGE_OP    0x12
#define AML_EXT_OP_PREFIX 0x5b
#define AML_DEVICE_OP     0x82
#define AML_ROOT_CHAR     '\\'
#define AML_DUAL_NAME     0x2e
#define AML_MULTI_NAME    0x2f
#define AML_NULL_NAME     0x00

/* Large resource items (6.4.3). */
#define RES_QWORD_ADDR 0x8a
#define RES_DWORD_ADDR 0x87
#define RES_WORD_ADDR  0x88
#define RES_IO         0x47 /* small item 0x08, length 7 */
#define RES_END_TAG    0x79 /* small item 0x0f, length 1 */

#define RES_TYPE_MEM 0
#define RES_TYPE_IO  1
#define RES_TYPE_BUS 2
/* General flags: MinFixed | MaxFixed, ResourceProducer (bit 0 clear), PosDecode. */
#define RES_GEN_FIXED 0x0c

static void put8(GByteArray *b, uint8_t v)
{
    g_byte_array_append(b, &v, 1);
}

static void put_le(GByteArray *b, uint64_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        put8(b, (uint8_t)(v >> (8 * i)));
    }
}

static void put_seg(GByteArray *b, const char *seg, size_t len)
{
    for (size_t i = 0; i < 4; i++) {
        put8(b, i < len ? (uint8_t)seg[i] : '_');
    }
}

/* Context: any thread */
void aml_name(GByteArray *b, const char *path)
{
    const char *segs[16];
    size_t lens[16];
    unsigned n = 0;

    while (*path == AML_ROOT_CHAR || *path == '^') {
        put8(b, (uint8_t)*path++);
    }
    while (*path && n < G_N_ELEMENTS(segs)) {
        const char *dot = strchr(path, '.');
        size_t len = dot ? (size_t)(dot - path) : strlen(path);

        segs[n] = path;
        lens[n++] = MIN(len, 4);
        path += len + (dot ? 1 : 0);
    }
    if (n == 0) {
        put8(b, AML_NULL_NAME);
        return;
    }
    if (n == 2) {
        put8(b, AML_DUAL_NAME);
    } else if (n > 2) {
        put8(b, AML_MULTI_NAME);
        put8(b, n);
    }
    for (unsigned i = 0; i < n; i++) {
        put_seg(b, segs[i], lens[i]);
    }
}

/* Context: any thread */
void aml_integer(GByteArray *b, uint64_t v)
{
    if (v == 0) {
        put8(b, AML_ZERO_OP);
    } else if (v == 1) {
        put8(b, AML_ONE_OP);
    } else if (v <= 0xff) {
        put8(b, AML_BYTE_PREFIX);
        put8(b, v);
    } else if (v <= 0xffff) {
        put8(b, AML_WORD_PREFIX);
        put_le(b, v, 2);
    } else if (v <= 0xffffffffULL) {
        put8(b, AML_DWORD_PREFIX);
        put_le(b, v, 4);
    } else {
        put8(b, AML_QWORD_PREFIX);
        put_le(b, v, 8);
    }
}

/* Context: any thread */
uint32_t aml_eisaid(const char *id)
{
    /* Three letters of 5 bits each (A = 1), then four hex digits; stored big-endian. */
    uint16_t vendor =
        ((id[0] - '@') & 0x1f) << 10 | ((id[1] - '@') & 0x1f) << 5 | ((id[2] - '@') & 0x1f);
    uint16_t product = (uint16_t)strtoul(id + 3, NULL, 16);

    return (uint32_t)(vendor >> 8) | (uint32_t)(vendor & 0xff) << 8 |
           (uint32_t)(product >> 8) << 16 | (uint32_t)(product & 0xff) << 24;
}

/* Context: any thread */
void aml_name_decl(GByteArray *b, const char *name)
{
    put8(b, AML_NAME_OP);
    aml_name(b, name);
}

/* Context: any thread */
size_t aml_scope_begin(GByteArray *b, const char *name)
{
    size_t mark;

    put8(b, AML_SCOPE_OP);
    mark = b->len;
    aml_name(b, name);
    return mark;
}

/* Context: any thread */
size_t aml_device_begin(GByteArray *b, const char *name)
{
    size_t mark;

    put8(b, AML_EXT_OP_PREFIX);
    put8(b, AML_DEVICE_OP);
    mark = b->len;
    aml_name(b, name);
    return mark;
}

/* Context: any thread */
size_t aml_package_begin(GByteArray *b, unsigned nelems)
{
    size_t mark;

    put8(b, AML_PACKAGE_OP);
    mark = b->len;
    put8(b, MIN(nelems, 255));
    return mark;
}

/* Context: any thread */
void aml_end(GByteArray *b, size_t mark)
{
    size_t body = b->len - mark;
    uint8_t enc[4];
    unsigned n;
    size_t total;

    /*
     * PkgLength counts itself. One byte holds up to 63; otherwise the lead byte
     * says how many bytes follow (bits 7-6) and carries the low nibble.
     */
    if (body + 1 <= 0x3f) {
        n = 1;
        enc[0] = body + 1;
    } else {
        n = body + 2 < (1u << 12) ? 2 : body + 3 < (1u << 20) ? 3 : 4;
        total = body + n;
        enc[0] = ((n - 1) << 6) | (total & 0xf);
        for (unsigned i = 1; i < n; i++) {
            enc[i] = (uint8_t)(total >> (4 + 8 * (i - 1)));
        }
    }
    g_byte_array_set_size(b, b->len + n);
    memmove(b->data + mark + n, b->data + mark, body);
    memcpy(b->data + mark, enc, n);
}

/* Context: any thread */
void aml_buffer(GByteArray *b, const uint8_t *data, size_t len)
{
    size_t mark;

    put8(b, AML_BUFFER_OP);
    mark = b->len;
    aml_integer(b, len);
    g_byte_array_append(b, data, len);
    aml_end(b, mark);
}

/* Word/DWord/QWord Address Space descriptors share one layout with @w-byte fields. */
static void res_addr(GByteArray *r, uint8_t tag, unsigned w, uint8_t type, uint8_t type_flags,
                     uint64_t min, uint64_t max)
{
    put8(r, tag);
    put_le(r, 3 + 5 * w, 2); /* length after the 3-byte header */
    put8(r, type);
    put8(r, RES_GEN_FIXED);
    put8(r, type_flags);
    put_le(r, 0, w);   /* granularity */
    put_le(r, min, w); /* range minimum */
    put_le(r, max, w); /* range maximum */
    put_le(r, 0, w);   /* translation offset */
    put_le(r, max - min + 1, w);
}

/* Context: any thread */
void aml_res_bus_numbers(GByteArray *r, uint16_t min, uint16_t max)
{
    res_addr(r, RES_WORD_ADDR, 2, RES_TYPE_BUS, 0, min, max);
}

/* Context: any thread */
void aml_res_io(GByteArray *r, uint16_t base, uint8_t len)
{
    put8(r, RES_IO);
    put8(r, 0x01); /* 16-bit decode */
    put_le(r, base, 2);
    put_le(r, base, 2);
    put8(r, 1); /* alignment */
    put8(r, len);
}

/* Context: any thread */
void aml_res_io_window(GByteArray *r, uint16_t min, uint16_t max)
{
    res_addr(r, RES_WORD_ADDR, 2, RES_TYPE_IO, 0x03 /* ISA and non-ISA ranges */, min, max);
}

/* Context: any thread */
void aml_res_mem32_window(GByteArray *r, uint32_t min, uint32_t max)
{
    res_addr(r, RES_DWORD_ADDR, 4, RES_TYPE_MEM, 0x01 /* read-write, non-cacheable */, min, max);
}

/* Context: any thread */
void aml_res_end(GByteArray *r)
{
    put8(r, RES_END_TAG);
    put8(r, 0);
}
