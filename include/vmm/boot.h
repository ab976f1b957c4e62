/*
 * vblk: loading a Linux bzImage through the 64-bit boot protocol
 * (Documentation/arch/x86/boot.rst), with no BIOS and no real mode.
 *
 * Low guest memory as the loader lays it out:
 *   0x00500  GDT (null, null, __BOOT_CS 0x10 code64, __BOOT_DS 0x18 data)
 *   0x07000  zero page (struct boot_params)
 *   0x09000  PML4, 0x0A000 PDPT, 0x0B000-0x0EFFF four PDs: 0-4 GiB identity, 2 MiB pages
 *   0x20000  kernel command line
 *   0x9FC00  MP table (reserved in e820 up to 1 MiB)
 *   0x100000 protected-mode kernel (bzImage from (setup_sects + 1) * 512)
 *   initrd   page-aligned, as high as allowed in low RAM, above the decompressor window
 */
#ifndef VBLK_BOOT_H
#define VBLK_BOOT_H

#include <asm/bootparam.h>
#include <glib.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "vmm/vmm.h"

#define BOOT_GDT_ADDR     0x500ULL
#define BOOT_GDT_ENTRIES  4
#define BOOT_CS_SELECTOR  0x10
#define BOOT_DS_SELECTOR  0x18
#define BOOT_ZERO_PAGE    0x7000ULL
#define BOOT_PML4_ADDR    0x9000ULL
#define BOOT_PDPT_ADDR    0xA000ULL
#define BOOT_PD_ADDR      0xB000ULL /* four pages */
#define BOOT_CMDLINE_ADDR 0x20000ULL
#define BOOT_CMDLINE_MAX  0x10000ULL /* space reserved for it */
#define BOOT_EBDA_START   0x9FC00ULL
#define BOOT_MPTABLE_ADDR BOOT_EBDA_START
#define BOOT_HIMEM_START  0x100000ULL
#define BOOT_KERNEL_ADDR  BOOT_HIMEM_START
#define BOOT_ENTRY64_OFF  0x200
/* Where the relocatable kernel decompresses to when nothing else is asked. */
#define BOOT_DEFAULT_PREF 0x1000000ULL

/* What the loader learned from a bzImage's setup header. */
typedef struct BzImageInfo {
    uint16_t version;
    uint8_t setup_sects;
    size_t setup_size;   /* (setup_sects + 1) * 512 */
    size_t payload_size; /* protected-mode part */
    uint32_t initrd_addr_max;
    uint32_t cmdline_size; /* max length without the NUL */
    uint64_t pref_address;
    uint32_t init_size;
    uint16_t xloadflags;
} BzImageInfo;

/* Context: any thread. Validates the header (HdrS, >= 2.12, 64-bit entry). */
bool bzimage_parse(const uint8_t *image, size_t len, BzImageInfo *info, GError **errp);

/* Context: any thread. Fills @table from the RAM layout; returns the entry count. */
unsigned e820_build(struct boot_e820_entry *table, unsigned max, uint64_t ram_size);

/*
 * Context: any thread. Chooses the initrd's guest address: page aligned, ending at or
 * below min(low RAM end, initrd_addr_max + 1), starting above the decompressor's window.
 */
bool initrd_place(const BzImageInfo *info, uint64_t ram_size, uint64_t initrd_size, uint64_t *gpa,
                  GError **errp);

/*
 * Context: any thread. Builds the zero page: setup header copied from @image, loader
 * fields, command line pointer, initrd, e820.
 */
void zeropage_build(struct boot_params *zp, const uint8_t *image, const BzImageInfo *info,
                    uint64_t ram_size, uint64_t initrd_gpa, uint64_t initrd_size);

/* Context: any thread. GDT at 0x500 and 4 GiB of identity page tables at 0x9000. */
bool boot_setup_cpu_tables(const VmRamRegion *regions, size_t n, GError **errp);

typedef struct BootConfig {
    const char *kernel;  /* bzImage path */
    const char *initrd;  /* NULL for none */
    const char *cmdline; /* NULL for empty */
    /*
     * Optional: the files' contents as boot_read_images() read them; when set, the
     * paths only name the images in messages. A reset boots what was read at startup,
     * whatever happened to the files since (QEMU keeps them in memory too).
     */
    GBytes *kernel_image;
    GBytes *initrd_image;
} BootConfig;

/*
 * Context: main thread. Reads -kernel and -initrd (NULL: none) into memory for
 * BootConfig.kernel_image/initrd_image. Errors name the option at fault.
 */
bool boot_read_images(const char *kernel, const char *initrd, GBytes **kernel_image,
                      GBytes **initrd_image, GError **errp);

/*
 * Context: main thread. Loads kernel, initrd and command line into guest RAM and builds
 * the zero page, GDT and page tables. *@entry receives the 64-bit entry point.
 * Errors name the option at fault (-kernel, -initrd, -append, -m).
 */
bool boot_load_linux(const VmRamRegion *regions, size_t n, uint64_t ram_size, const BootConfig *cfg,
                     uint64_t *entry, GError **errp);

/* Context: any thread. Host pointer for guest [gpa, gpa + len), or NULL. */
void *boot_gpa(const VmRamRegion *regions, size_t n, uint64_t gpa, uint64_t len);

#endif /* VBLK_BOOT_H */
