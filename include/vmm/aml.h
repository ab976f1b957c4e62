/*
 * vblk: a tiny AML (ACPI Machine Language) encoder, enough for a DSDT with
 * names, scopes, devices, packages, buffers and resource templates
 * (ACPI 6.5 chapter 20, "AML Specification"; chapter 6.4, "Resource Data Types").
 *
 * Everything appends to a GByteArray. Objects with a PkgLength (Scope, Device,
 * Package, Buffer) are opened with *_begin(), which returns a mark, and closed
 * with aml_end(), which inserts the PkgLength once the body's size is known.
 */
#ifndef VBLK_AML_H
#define VBLK_AML_H

#include <glib.h>
#include <stdint.h>

/* Context: any thread. "\\_SB_.PCI0", "_HID", "\\_S5": a NameString (segments padded with '_'). */
void aml_name(GByteArray *b, const char *path);
/* Context: any thread. The shortest integer encoding (ZeroOp, OneOp, Byte..QWord prefixes). */
void aml_integer(GByteArray *b, uint64_t v);
/* Context: any thread. The 32-bit compressed EISA ID of "PNP0A03" and the like. */
uint32_t aml_eisaid(const char *id);

/* Context: any thread. NameOp + @name; the caller appends the object. */
void aml_name_decl(GByteArray *b, const char *name);
/* Context: any thread. ScopeOp, its PkgLength (at aml_end) and @name. */
size_t aml_scope_begin(GByteArray *b, const char *name);
/* Context: any thread. DeviceOp (ExtOpPrefix 0x82), its PkgLength and @name. */
size_t aml_device_begin(GByteArray *b, const char *name);
/* Context: any thread. PackageOp, its PkgLength and NumElements (<= 255). */
size_t aml_package_begin(GByteArray *b, unsigned nelems);
/* Context: any thread. Closes what *_begin() opened at @mark: inserts its PkgLength. */
void aml_end(GByteArray *b, size_t mark);
/* Context: any thread. BufferOp holding @len bytes (e.g. a resource template). */
void aml_buffer(GByteArray *b, const uint8_t *data, size_t len);

/* Resource descriptors, appended to a template that becomes a Buffer. */
/* Context: any thread. Word Address Space, bus numbers [min, max] (producer, fixed). */
void aml_res_bus_numbers(GByteArray *r, uint16_t min, uint16_t max);
/* Context: any thread. I/O port descriptor, 16-bit decode, fixed @base, @len ports. */
void aml_res_io(GByteArray *r, uint16_t base, uint8_t len);
/* Context: any thread. Word Address Space, I/O window [min, max] (producer, fixed). */
void aml_res_io_window(GByteArray *r, uint16_t min, uint16_t max);
/* Context: any thread. DWord Address Space, memory window [min, max], read-write, non-cacheable. */
void aml_res_mem32_window(GByteArray *r, uint32_t min, uint32_t max);
/* Context: any thread. End Tag (checksum 0: "treated as valid"). */
void aml_res_end(GByteArray *r);

#endif /* VBLK_AML_H */
