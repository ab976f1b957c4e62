/*
 * vblk: Linux bzImage loader for the 64-bit boot protocol: zero page, e820,
 * command line, initrd placement, GDT and identity page tables.
 * The rules come from Documentation/arch/x86/boot.rst ("64-bit Boot Protocol").
 */
#include <asm/e820.h>
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "vmm/boot.h"

#define SETUP_HEADER_OFF 0x1f1
#define BOOT_FLAG_OFF    0x1fe
#define HDRS_OFF         0x202
#define JUMP_LEN_OFF     0x201
#define HDRS_MAGIC       0x53726448 /* "HdrS" */
#define PAGE_SIZE_4K     4096ULL
#define PDE_2M_FLAGS     0x83 /* present, writable, 2 MiB page */
#define PTE_TABLE_FLAGS  0x03 /* present, writable */

static uint64_t boot_low_ram_end(uint64_t ram_size)
{
    return MIN(ram_size, VMM_MMIO_HOLE_START);
}

/* Context: any thread */
void *boot_gpa(const VmRamRegion *regions, size_t n, uint64_t gpa, uint64_t len)
{
    for (size_t i = 0; i < n; i++) {
        const VmRamRegion *r = &regions[i];
        if (gpa >= r->gpa && gpa - r->gpa <= r->size && len <= r->size - (gpa - r->gpa)) {
            return (uint8_t *)r->hva + (gpa - r->gpa);
        }
    }
    return NULL;
}

static uint16_t get_le16(const uint8_t *p)
{
    return p[0] | (p[1] << 8);
}

static uint32_t get_le32(const uint8_t *p)
{
    return p[0] | (p[1] << 8) | (p[2] << 16) | ((uint32_t)p[3] << 24);
}

/* Context: any thread */
bool bzimage_parse(const uint8_t *image, size_t len, BzImageInfo *info, GError **errp)
{
    const struct setup_header *h;
    struct setup_header hdr;

    if (len < HDRS_OFF + 4 || get_le16(image + BOOT_FLAG_OFF) != 0xAA55 ||
        get_le32(image + HDRS_OFF) != HDRS_MAGIC) {
        g_set_error(errp, VMM_ERROR, ENOEXEC,
                    "-kernel: not a bzImage (no 0xAA55 boot flag / \"HdrS\" header)");
        return false;
    }
    memset(&hdr, 0, sizeof(hdr));
    memcpy(&hdr, image + SETUP_HEADER_OFF, MIN(sizeof(hdr), len - SETUP_HEADER_OFF));
    h = &hdr;
    if (h->version < 0x020c) {
        g_set_error(errp, VMM_ERROR, ENOEXEC,
                    "-kernel: boot protocol %u.%02u is too old (need 2.12 for the 64-bit entry)",
                    h->version >> 8, h->version & 0xff);
        return false;
    }
    if (!(h->xloadflags & XLF_KERNEL_64)) {
        g_set_error(errp, VMM_ERROR, ENOEXEC,
                    "-kernel: kernel has no 64-bit entry point (XLF_KERNEL_64 clear)");
        return false;
    }
    info->version = h->version;
    info->setup_sects = h->setup_sects ? h->setup_sects : 4;
    info->setup_size = (info->setup_sects + 1) * 512;
    if (info->setup_size >= len) {
        g_set_error(errp, VMM_ERROR, ENOEXEC,
                    "-kernel: truncated bzImage (setup is %zu bytes, file %zu)", info->setup_size,
                    len);
        return false;
    }
    info->payload_size = len - info->setup_size;
    info->initrd_addr_max = h->initrd_addr_max ? h->initrd_addr_max : 0x37ffffff;
    info->cmdline_size = h->cmdline_size ? h->cmdline_size : 255;
    info->pref_address = h->pref_address ? h->pref_address : BOOT_DEFAULT_PREF;
    info->init_size = h->init_size;
    info->xloadflags = h->xloadflags;
    return true;
}

static void e820_add(struct boot_e820_entry *t, unsigned max, unsigned *n, uint64_t addr,
                     uint64_t size, uint32_t type)
{
    if (*n < max && size > 0) {
        t[*n] = (struct boot_e820_entry){.addr = addr, .size = size, .type = type};
        (*n)++;
    }
}

/* Context: any thread */
unsigned e820_build(struct boot_e820_entry *table, unsigned max, uint64_t ram_size)
{
    uint64_t low_end = boot_low_ram_end(ram_size);
    unsigned n = 0;

    /* Base memory up to the MP table; 639 KiB-1 MiB stays reserved as on a PC. */
    e820_add(table, max, &n, 0, MIN(low_end, BOOT_EBDA_START), E820_RAM);
    e820_add(table, max, &n, BOOT_EBDA_START, BOOT_HIMEM_START - BOOT_EBDA_START, E820_RESERVED);
    if (low_end > BOOT_HIMEM_START) {
        e820_add(table, max, &n, BOOT_HIMEM_START, low_end - BOOT_HIMEM_START, E820_RAM);
    }
    /* The MMIO hole is left out: Linux finds the gap and puts PCI there. */
    if (ram_size > low_end) {
        e820_add(table, max, &n, VMM_MMIO_HOLE_END, ram_size - low_end, E820_RAM);
    }
    return n;
}

/* Context: any thread */
bool initrd_place(const BzImageInfo *info, uint64_t ram_size, uint64_t initrd_size, uint64_t *gpa,
                  GError **errp)
{
    uint64_t end = MIN(boot_low_ram_end(ram_size), (uint64_t)info->initrd_addr_max + 1);
    /* Above the kernel image and the window the decompressor writes into. */
    uint64_t floor =
        MAX(BOOT_KERNEL_ADDR + info->payload_size, info->pref_address + info->init_size);
    uint64_t start;

    floor = (floor + PAGE_SIZE_4K - 1) & ~(PAGE_SIZE_4K - 1);
    if (initrd_size > end || ((end - initrd_size) & ~(PAGE_SIZE_4K - 1)) < floor) {
        g_set_error(errp, VMM_ERROR, EFBIG,
                    "-initrd: %" G_GUINT64_FORMAT " MiB image does not fit below %" G_GUINT64_FORMAT
                    " MiB above the kernel (needs -m %" G_GUINT64_FORMAT "M or more)",
                    initrd_size >> 20, end >> 20, (floor + initrd_size + (2 << 20)) >> 20);
        return false;
    }
    start = (end - initrd_size) & ~(PAGE_SIZE_4K - 1);
    *gpa = start;
    return true;
}

/* Context: any thread */
void zeropage_build(struct boot_params *zp, const uint8_t *image, const BzImageInfo *info,
                    uint64_t ram_size, uint64_t initrd_gpa, uint64_t initrd_size)
{
    size_t hdr_end = HDRS_OFF + image[JUMP_LEN_OFF];
    size_t hdr_max = SETUP_HEADER_OFF + sizeof(struct setup_header);

    memset(zp, 0, sizeof(*zp));
    /* boot.rst: copy the header from 0x1f1 up to the end given by the jump at 0x200. */
    memcpy((uint8_t *)zp + SETUP_HEADER_OFF, image + SETUP_HEADER_OFF,
           MIN(hdr_end, hdr_max) - SETUP_HEADER_OFF);
    zp->hdr.type_of_loader = 0xff; /* undefined loader */
    zp->hdr.loadflags |= LOADED_HIGH | CAN_USE_HEAP;
    zp->hdr.heap_end_ptr = 0xfe00;
    zp->hdr.vid_mode = 0xffff; /* "normal" */
    zp->hdr.cmd_line_ptr = BOOT_CMDLINE_ADDR;
    zp->ext_cmd_line_ptr = 0;
    zp->hdr.ramdisk_image = (uint32_t)initrd_gpa;
    zp->hdr.ramdisk_size = (uint32_t)initrd_size;
    zp->ext_ramdisk_image = (uint32_t)(initrd_gpa >> 32);
    zp->ext_ramdisk_size = (uint32_t)(initrd_size >> 32);
    zp->acpi_rsdp_addr = 0;
    zp->e820_entries = e820_build(zp->e820_table, G_N_ELEMENTS(zp->e820_table), ram_size);
    (void)info;
}

/* Context: any thread */
bool boot_setup_cpu_tables(const VmRamRegion *regions, size_t n, GError **errp)
{
    static const uint64_t gdt[BOOT_GDT_ENTRIES] = {
        0, 0, 0x00af9b000000ffffULL, /* 0x10: 64-bit code, DPL0 */
        0x00cf93000000ffffULL,       /* 0x18: 32-bit flat data */
    };
    uint64_t *gdt_mem = boot_gpa(regions, n, BOOT_GDT_ADDR, sizeof(gdt));
    uint64_t *pml4 = boot_gpa(regions, n, BOOT_PML4_ADDR, PAGE_SIZE_4K);
    uint64_t *pdpt = boot_gpa(regions, n, BOOT_PDPT_ADDR, PAGE_SIZE_4K);
    uint64_t *pd = boot_gpa(regions, n, BOOT_PD_ADDR, 4 * PAGE_SIZE_4K);

    if (!gdt_mem || !pml4 || !pdpt || !pd) {
        g_set_error(errp, VMM_ERROR, ENOMEM, "-m: too little RAM for boot tables");
        return false;
    }
    memcpy(gdt_mem, gdt, sizeof(gdt));
    memset(pml4, 0, PAGE_SIZE_4K);
    memset(pdpt, 0, PAGE_SIZE_4K);
    /* boot.rst wants the kernel, zero page and command line identity-mapped: map 4 GiB. */
    pml4[0] = BOOT_PDPT_ADDR | PTE_TABLE_FLAGS;
    for (uint64_t i = 0; i < 4; i++) {
        pdpt[i] = (BOOT_PD_ADDR + i * PAGE_SIZE_4K) | PTE_TABLE_FLAGS;
    }
    for (uint64_t i = 0; i < 4 * 512; i++) {
        pd[i] = (i << 21) | PDE_2M_FLAGS;
    }
    return true;
}

static bool boot_read_file(const char *opt, const char *path, int *fd, uint64_t *size,
                           GError **errp)
{
    struct stat st;

    *fd = open(path, O_RDONLY | O_CLOEXEC);
    if (*fd < 0 || fstat(*fd, &st) < 0) {
        int err = errno;
        g_set_error(errp, VMM_ERROR, err, "%s: cannot open '%s': %s", opt, path, g_strerror(err));
        if (*fd >= 0) {
            close(*fd);
        }
        return false;
    }
    *size = st.st_size;
    return true;
}

static bool boot_pread_all(int fd, void *buf, size_t len, const char *opt, const char *path,
                           GError **errp)
{
    size_t done = 0;

    while (done < len) {
        ssize_t r = pread(fd, (uint8_t *)buf + done, len - done, done);
        if (r < 0 && errno == EINTR) {
            continue;
        }
        if (r <= 0) {
            g_set_error(errp, VMM_ERROR, EIO, "%s: cannot read '%s': %s", opt, path,
                        r < 0 ? g_strerror(errno) : "unexpected end of file");
            return false;
        }
        done += r;
    }
    return true;
}

static bool boot_load_initrd(const VmRamRegion *regions, size_t n, uint64_t ram_size,
                             const BzImageInfo *info, const BootConfig *cfg, uint64_t *gpa,
                             uint64_t *size, GError **errp)
{
    void *dst;
    int fd;
    bool ok;

    if (cfg->initrd_image) {
        gsize len;
        const void *data = g_bytes_get_data(cfg->initrd_image, &len);

        *size = len;
        if (!initrd_place(info, ram_size, *size, gpa, errp)) {
            return false;
        }
        dst = boot_gpa(regions, n, *gpa, *size);
        if (dst && len) {
            memcpy(dst, data, len);
        }
        return dst != NULL;
    }
    if (!boot_read_file("-initrd", cfg->initrd, &fd, size, errp)) {
        return false;
    }
    ok = initrd_place(info, ram_size, *size, gpa, errp);
    if (ok) {
        dst = boot_gpa(regions, n, *gpa, *size);
        ok = dst && boot_pread_all(fd, dst, *size, "-initrd", cfg->initrd, errp);
    }
    close(fd);
    return ok;
}

static GBytes *boot_read_kernel(const char *path, GError **errp)
{
    GError *err = NULL;
    gchar *data;
    gsize len;

    if (!g_file_get_contents(path, &data, &len, &err)) {
        g_set_error(errp, VMM_ERROR, EINVAL, "-kernel: %s", err->message);
        g_error_free(err);
        return NULL;
    }
    return g_bytes_new_take(data, len);
}

/* Context: main thread */
bool boot_read_images(const char *kernel, const char *initrd, GBytes **kernel_image,
                      GBytes **initrd_image, GError **errp)
{
    uint64_t size;
    void *buf;
    int fd;

    *kernel_image = *initrd_image = NULL;
    *kernel_image = boot_read_kernel(kernel, errp);
    if (!*kernel_image) {
        return false;
    }
    if (!initrd) {
        return true;
    }
    if (!boot_read_file("-initrd", initrd, &fd, &size, errp)) {
        goto fail;
    }
    buf = g_try_malloc(size ? size : 1);
    if (!buf) {
        g_set_error(errp, VMM_ERROR, ENOMEM, "-initrd: '%s' is too large to keep in memory",
                    initrd);
        close(fd);
        goto fail;
    }
    if (!boot_pread_all(fd, buf, size, "-initrd", initrd, errp)) {
        g_free(buf);
        close(fd);
        goto fail;
    }
    close(fd);
    *initrd_image = g_bytes_new_take(buf, size);
    return true;

fail:
    g_clear_pointer(kernel_image, g_bytes_unref);
    return false;
}

static bool boot_check_ram(const BzImageInfo *info, uint64_t ram_size, GError **errp)
{
    uint64_t need =
        MAX(BOOT_KERNEL_ADDR + info->payload_size, info->pref_address + info->init_size);

    if (boot_low_ram_end(ram_size) < need) {
        g_set_error(errp, VMM_ERROR, ENOMEM,
                    "-m: this kernel needs at least %" G_GUINT64_FORMAT " MiB of RAM",
                    (need + (1 << 20) - 1) >> 20);
        return false;
    }
    return true;
}

static bool boot_write_cmdline(const VmRamRegion *regions, size_t n, const BzImageInfo *info,
                               const char *cmdline, GError **errp)
{
    size_t len = cmdline ? strlen(cmdline) : 0;
    char *dst = boot_gpa(regions, n, BOOT_CMDLINE_ADDR, BOOT_CMDLINE_MAX);

    if (len > info->cmdline_size || len >= BOOT_CMDLINE_MAX) {
        g_set_error(errp, VMM_ERROR, E2BIG,
                    "-append: command line is %zu bytes, this kernel accepts at most %u", len,
                    info->cmdline_size);
        return false;
    }
    memset(dst, 0, len + 1);
    memcpy(dst, cmdline ? cmdline : "", len);
    return true;
}

/* Context: main thread */
bool boot_load_linux(const VmRamRegion *regions, size_t n, uint64_t ram_size, const BootConfig *cfg,
                     uint64_t *entry, GError **errp)
{
    g_autoptr(GBytes) kernel =
        cfg->kernel_image ? g_bytes_ref(cfg->kernel_image) : boot_read_kernel(cfg->kernel, errp);
    const uint8_t *image;
    uint64_t initrd_gpa = 0, initrd_size = 0;
    struct boot_params *zp;
    BzImageInfo info;
    gsize len;

    if (!kernel) {
        return false;
    }
    image = g_bytes_get_data(kernel, &len);
    if (!bzimage_parse(image, len, &info, errp) || !boot_check_ram(&info, ram_size, errp) ||
        !boot_write_cmdline(regions, n, &info, cfg->cmdline, errp)) {
        return false;
    }
    memcpy(boot_gpa(regions, n, BOOT_KERNEL_ADDR, info.payload_size), image + info.setup_size,
           info.payload_size);
    if ((cfg->initrd || cfg->initrd_image) &&
        !boot_load_initrd(regions, n, ram_size, &info, cfg, &initrd_gpa, &initrd_size, errp)) {
        return false;
    }
    zp = boot_gpa(regions, n, BOOT_ZERO_PAGE, sizeof(*zp));
    zeropage_build(zp, image, &info, ram_size, initrd_gpa, initrd_size);
    if (!boot_setup_cpu_tables(regions, n, errp)) {
        return false;
    }
    *entry = BOOT_KERNEL_ADDR + BOOT_ENTRY64_OFF;
    return true;
}
