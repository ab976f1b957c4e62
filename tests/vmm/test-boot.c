/* Unit tests: bzImage header parsing, zero page, e820, initrd placement, boot tables. */
#include <asm/e820.h>
#include <glib.h>
#include <glib/gstdio.h>
#include <string.h>
#include <sys/mman.h>

#include "vmm/boot.h"

/* A synthetic bzImage: setup header as Debian 6.1's (protocol 2.15), tiny payload. */
static uint8_t *make_bzimage(size_t *len, uint16_t version, uint16_t xloadflags)
{
    size_t setup = 2 * 512, payload = 0x1000;
    uint8_t *img = g_malloc0(setup + payload);

    img[0x1f1] = 1; /* setup_sects */
    img[0x1fe] = 0x55;
    img[0x1ff] = 0xaa;
    img[0x200] = 0xeb;
    img[0x201] = 0x66; /* header ends at 0x268 */
    memcpy(img + 0x202, "HdrS", 4);
    img[0x206] = version & 0xff;
    img[0x207] = version >> 8;
    *(uint32_t *)(img + 0x22c) = 0x7fffffff; /* initrd_addr_max */
    *(uint32_t *)(img + 0x230) = 0x200000;   /* kernel_alignment */
    img[0x234] = 1;                          /* relocatable */
    *(uint16_t *)(img + 0x236) = xloadflags;
    *(uint32_t *)(img + 0x238) = 2047;      /* cmdline_size */
    *(uint64_t *)(img + 0x258) = 0x1000000; /* pref_address */
    *(uint32_t *)(img + 0x260) = 0x3f98000; /* init_size */
    memset(img + setup, 0x90, payload);
    *len = setup + payload;
    return img;
}

static void test_bzimage_parse(void)
{
    size_t len;
    g_autofree uint8_t *img = make_bzimage(&len, 0x020f, 0x7f);
    BzImageInfo info;
    GError *err = NULL;

    g_assert_true(bzimage_parse(img, len, &info, &err));
    g_assert_no_error(err);
    g_assert_cmphex(info.version, ==, 0x020f);
    g_assert_cmpuint(info.setup_size, ==, 1024);
    g_assert_cmpuint(info.payload_size, ==, 0x1000);
    g_assert_cmphex(info.initrd_addr_max, ==, 0x7fffffff);
    g_assert_cmpuint(info.cmdline_size, ==, 2047);
    g_assert_cmphex(info.pref_address, ==, 0x1000000);
    g_assert_cmphex(info.init_size, ==, 0x3f98000);
}

static void test_bzimage_reject(void)
{
    size_t len;
    BzImageInfo info;
    GError *err = NULL;
    g_autofree uint8_t *old = make_bzimage(&len, 0x020b, 0x7f);
    g_autofree uint8_t *no64 = make_bzimage(&len, 0x020f, 0x7e);
    g_autofree uint8_t *nohdrs = make_bzimage(&len, 0x020f, 0x7f);

    g_assert_false(bzimage_parse(old, len, &info, &err));
    g_assert_nonnull(strstr(err->message, "-kernel"));
    g_clear_error(&err);
    g_assert_false(bzimage_parse(no64, len, &info, &err));
    g_assert_nonnull(strstr(err->message, "64-bit"));
    g_clear_error(&err);
    nohdrs[0x202] = 'X';
    g_assert_false(bzimage_parse(nohdrs, len, &info, &err));
    g_clear_error(&err);
    g_assert_false(bzimage_parse(nohdrs, 100, &info, &err)); /* truncated */
    g_clear_error(&err);
    g_assert_false(bzimage_parse(old, 1024, &info, &err) && false);
    g_clear_error(&err);
}

static void test_e820_small(void)
{
    struct boot_e820_entry t[8];
    unsigned n = e820_build(t, 8, 128ULL << 20);

    g_assert_cmpuint(n, ==, 3);
    g_assert_cmphex(t[0].addr, ==, 0);
    g_assert_cmphex(t[0].size, ==, 0x9fc00);
    g_assert_cmpuint(t[0].type, ==, E820_RAM);
    g_assert_cmphex(t[1].addr, ==, 0x9fc00);
    g_assert_cmphex(t[1].addr + t[1].size, ==, 0x100000);
    g_assert_cmpuint(t[1].type, ==, E820_RESERVED);
    g_assert_cmphex(t[2].addr, ==, 0x100000);
    g_assert_cmphex(t[2].addr + t[2].size, ==, 128ULL << 20);
    g_assert_cmpuint(t[2].type, ==, E820_RAM);
}

static void test_e820_above_4g(void)
{
    struct boot_e820_entry t[8];
    uint64_t ram = 5ULL << 30;
    unsigned n = e820_build(t, 8, ram);

    g_assert_cmpuint(n, ==, 4);
    /* Low RAM stops at the hole; the rest continues at 4 GiB. */
    g_assert_cmphex(t[2].addr + t[2].size, ==, VMM_MMIO_HOLE_START);
    g_assert_cmphex(t[3].addr, ==, VMM_MMIO_HOLE_END);
    g_assert_cmphex(t[3].size, ==, ram - VMM_MMIO_HOLE_START);
    g_assert_cmpuint(t[3].type, ==, E820_RAM);
    /* No entry touches the hole. */
    for (unsigned i = 0; i < n; i++) {
        g_assert_true(t[i].addr + t[i].size <= VMM_MMIO_HOLE_START ||
                      t[i].addr >= VMM_MMIO_HOLE_END);
    }
    /* Exactly 3 GiB: no high entry. */
    g_assert_cmpuint(e820_build(t, 8, 3ULL << 30), ==, 3);
    /* A short table is honoured. */
    g_assert_cmpuint(e820_build(t, 2, ram), ==, 2);
}

static void test_initrd_place(void)
{
    size_t len;
    g_autofree uint8_t *img = make_bzimage(&len, 0x020f, 0x7f);
    BzImageInfo info;
    GError *err = NULL;
    uint64_t gpa;

    g_assert_true(bzimage_parse(img, len, &info, NULL));
    /* Top of RAM, page aligned. */
    g_assert_true(initrd_place(&info, 512ULL << 20, 10000000, &gpa, &err));
    g_assert_cmphex(gpa % 4096, ==, 0);
    g_assert_cmphex(gpa + 10000000, <=, 512ULL << 20);
    g_assert_cmphex(gpa, >=, (512ULL << 20) - 10000000 - 4096);
    /* Above the decompressor's window. */
    g_assert_cmphex(gpa, >=, info.pref_address + info.init_size);
    /* With more RAM than initrd_addr_max allows, it stays below the limit. */
    info.initrd_addr_max = 0x37ffffff;
    g_assert_true(initrd_place(&info, 2ULL << 30, 1 << 20, &gpa, &err));
    g_assert_cmphex(gpa + (1 << 20), <=, 0x38000000);
    /* Low RAM ends at the hole even with 8 GiB. */
    info.initrd_addr_max = 0xffffffff;
    g_assert_true(initrd_place(&info, 8ULL << 30, 1 << 20, &gpa, &err));
    g_assert_cmphex(gpa + (1 << 20), <=, VMM_MMIO_HOLE_START);
    /* Too little RAM: a clear error naming -initrd. */
    g_assert_false(initrd_place(&info, 96ULL << 20, 64ULL << 20, &gpa, &err));
    g_assert_nonnull(strstr(err->message, "-initrd"));
    g_clear_error(&err);
}

static void test_zeropage(void)
{
    size_t len;
    g_autofree uint8_t *img = make_bzimage(&len, 0x020f, 0x7f);
    struct boot_params *zp = g_malloc0(sizeof(*zp));
    BzImageInfo info;

    g_assert_true(bzimage_parse(img, len, &info, NULL));
    memset(zp, 0xcc, sizeof(*zp)); /* everything not set must be zeroed */
    zeropage_build(zp, img, &info, 1ULL << 30, 0x3f000000, 0x123456);
    g_assert_cmphex(zp->hdr.header, ==, 0x53726448);
    g_assert_cmphex(zp->hdr.version, ==, 0x020f);
    g_assert_cmphex(zp->hdr.boot_flag, ==, 0xaa55);
    g_assert_cmphex(zp->hdr.init_size, ==, 0x3f98000); /* copied from the image */
    g_assert_cmphex(zp->hdr.type_of_loader, ==, 0xff);
    g_assert_true(zp->hdr.loadflags & LOADED_HIGH);
    g_assert_cmphex(zp->hdr.cmd_line_ptr, ==, BOOT_CMDLINE_ADDR);
    g_assert_cmphex(zp->ext_cmd_line_ptr, ==, 0);
    g_assert_cmphex(zp->hdr.ramdisk_image, ==, 0x3f000000);
    g_assert_cmphex(zp->hdr.ramdisk_size, ==, 0x123456);
    g_assert_cmphex(zp->acpi_rsdp_addr, ==, 0);
    g_assert_cmpuint(zp->e820_entries, ==, 3);
    g_assert_cmphex(zp->e820_table[2].addr + zp->e820_table[2].size, ==, 1ULL << 30);
    g_assert_cmphex(zp->screen_info.orig_video_isVGA, ==, 0);
    g_assert_cmphex(((uint8_t *)zp)[0x1e9], ==, 0); /* past e820_entries: zeroed */
    g_free(zp);
}

typedef struct FakeRam {
    uint8_t *mem;
    size_t size;
    VmRamRegion r;
} FakeRam;

static void fake_ram_init(FakeRam *f, size_t size)
{
    f->mem = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                  -1, 0);
    g_assert_true(f->mem != MAP_FAILED);
    f->size = size;
    f->r = (VmRamRegion){.gpa = 0, .size = size, .hva = f->mem};
}

static void test_cpu_tables(void)
{
    FakeRam f;
    uint64_t *gdt, *pml4, *pdpt, *pd;

    fake_ram_init(&f, 2 << 20);
    g_assert_true(boot_setup_cpu_tables(&f.r, 1, NULL));
    gdt = (uint64_t *)(f.mem + BOOT_GDT_ADDR);
    g_assert_cmphex(gdt[BOOT_CS_SELECTOR / 8], ==, 0x00af9b000000ffffULL);
    g_assert_cmphex(gdt[BOOT_DS_SELECTOR / 8], ==, 0x00cf93000000ffffULL);
    pml4 = (uint64_t *)(f.mem + BOOT_PML4_ADDR);
    pdpt = (uint64_t *)(f.mem + BOOT_PDPT_ADDR);
    pd = (uint64_t *)(f.mem + BOOT_PD_ADDR);
    g_assert_cmphex(pml4[0], ==, BOOT_PDPT_ADDR | 3);
    for (int i = 0; i < 4; i++) {
        g_assert_cmphex(pdpt[i], ==, (BOOT_PD_ADDR + i * 4096) | 3);
    }
    g_assert_cmphex(pd[0], ==, 0x83);
    g_assert_cmphex(pd[2047], ==, (2047ULL << 21) | 0x83); /* the last 2 MiB below 4 GiB */
    munmap(f.mem, f.size);
    fake_ram_init(&f, 0x8000);
    g_assert_false(boot_setup_cpu_tables(&f.r, 1, NULL));
    munmap(f.mem, f.size);
}

static void test_load_linux(void)
{
    size_t len;
    g_autofree uint8_t *img = make_bzimage(&len, 0x020f, 0x7f);
    g_autofree char *dir = g_dir_make_tmp("vblk-boot-XXXXXX", NULL);
    g_autofree char *kpath = g_build_filename(dir, "bzImage", NULL);
    g_autofree char *ipath = g_build_filename(dir, "initrd", NULL);
    char initrd[5000];
    GError *err = NULL;
    BootConfig cfg = {.kernel = kpath, .initrd = ipath, .cmdline = "console=ttyS0 quiet"};
    struct boot_params *zp;
    uint64_t entry, ram = 256ULL << 20;
    FakeRam f;

    memset(initrd, 'I', sizeof(initrd));
    g_assert_true(g_file_set_contents(kpath, (char *)img, len, NULL));
    g_assert_true(g_file_set_contents(ipath, initrd, sizeof(initrd), NULL));
    fake_ram_init(&f, ram);
    g_assert_true(boot_load_linux(&f.r, 1, ram, &cfg, &entry, &err));
    g_assert_no_error(err);
    g_assert_cmphex(entry, ==, BOOT_KERNEL_ADDR + 0x200);
    g_assert_cmpmem(f.mem + BOOT_KERNEL_ADDR, 0x1000, img + 1024, 0x1000);
    g_assert_cmpstr((char *)f.mem + BOOT_CMDLINE_ADDR, ==, "console=ttyS0 quiet");
    zp = (struct boot_params *)(f.mem + BOOT_ZERO_PAGE);
    g_assert_cmpuint(zp->hdr.ramdisk_size, ==, sizeof(initrd));
    g_assert_cmpmem(f.mem + zp->hdr.ramdisk_image, sizeof(initrd), initrd, sizeof(initrd));

    /* Images read once (what a reset boots): the files are not needed any more. */
    {
        GBytes *kimg, *iimg;
        BootConfig cached = cfg;

        g_assert_true(boot_read_images(kpath, ipath, &kimg, &iimg, &err));
        g_assert_no_error(err);
        g_assert_true(g_file_set_contents(ipath, "other", 5, NULL));
        g_assert_cmpint(g_unlink(kpath), ==, 0);
        g_assert_false(boot_read_images(kpath, ipath, &(GBytes *){NULL}, &(GBytes *){NULL}, NULL));
        cached.kernel_image = kimg;
        cached.initrd_image = iimg;
        memset(f.mem + BOOT_KERNEL_ADDR, 0, 0x1000);
        memset(f.mem + zp->hdr.ramdisk_image, 0, sizeof(initrd));
        g_assert_true(boot_load_linux(&f.r, 1, ram, &cached, &entry, &err));
        g_assert_no_error(err);
        g_assert_cmpmem(f.mem + BOOT_KERNEL_ADDR, 0x1000, img + 1024, 0x1000);
        g_assert_cmpuint(zp->hdr.ramdisk_size, ==, sizeof(initrd));
        g_assert_cmpmem(f.mem + zp->hdr.ramdisk_image, sizeof(initrd), initrd, sizeof(initrd));
        g_bytes_unref(kimg);
        g_bytes_unref(iimg);
        g_assert_true(g_file_set_contents(kpath, (char *)img, len, NULL));
        g_assert_true(g_file_set_contents(ipath, initrd, sizeof(initrd), NULL));
    }

    /* Errors name the option. */
    cfg.cmdline = NULL;
    g_assert_true(boot_load_linux(&f.r, 1, ram, &cfg, &entry, NULL));
    g_assert_cmpstr((char *)f.mem + BOOT_CMDLINE_ADDR, ==, "");
    g_autofree char *longline = g_strnfill(3000, 'x');
    cfg.cmdline = longline;
    g_assert_false(boot_load_linux(&f.r, 1, ram, &cfg, &entry, &err));
    g_assert_nonnull(strstr(err->message, "-append"));
    g_clear_error(&err);
    cfg.cmdline = NULL;
    g_assert_false(boot_load_linux(&f.r, 1, 64ULL << 20, &cfg, &entry, &err));
    g_assert_nonnull(strstr(err->message, "-m"));
    g_clear_error(&err);
    cfg.initrd = "/nonexistent/initrd";
    g_assert_false(boot_load_linux(&f.r, 1, ram, &cfg, &entry, &err));
    g_assert_nonnull(strstr(err->message, "-initrd"));
    g_clear_error(&err);
    cfg.kernel = ipath; /* not a bzImage */
    g_assert_false(boot_load_linux(&f.r, 1, ram, &cfg, &entry, &err));
    g_assert_nonnull(strstr(err->message, "-kernel"));
    g_clear_error(&err);
    munmap(f.mem, f.size);
    g_unlink(kpath);
    g_unlink(ipath);
    g_rmdir(dir);
}

/* A real Debian kernel, when one has been unpacked on this machine. */
static void test_real_bzimage(void)
{
    const char *path = g_getenv("VBLK_TEST_BZIMAGE");
    g_autofree uint8_t *img = NULL;
    BzImageInfo info;
    gsize len;

    if (!path || !g_file_get_contents(path, (char **)&img, &len, NULL)) {
        g_test_skip("set VBLK_TEST_BZIMAGE to a bzImage to check a real header");
        return;
    }
    g_assert_true(bzimage_parse(img, len, &info, NULL));
    g_assert_cmphex(info.version, >=, 0x020c);
    g_assert_true(info.xloadflags & XLF_KERNEL_64);
    g_test_message("bzImage %s: protocol %x, setup_sects %u, init_size 0x%x", path, info.version,
                   info.setup_sects, info.init_size);
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vmm/boot/bzimage-parse", test_bzimage_parse);
    g_test_add_func("/vmm/boot/bzimage-reject", test_bzimage_reject);
    g_test_add_func("/vmm/boot/e820-small", test_e820_small);
    g_test_add_func("/vmm/boot/e820-above-4g", test_e820_above_4g);
    g_test_add_func("/vmm/boot/initrd-place", test_initrd_place);
    g_test_add_func("/vmm/boot/zeropage", test_zeropage);
    g_test_add_func("/vmm/boot/cpu-tables", test_cpu_tables);
    g_test_add_func("/vmm/boot/load-linux", test_load_linux);
    g_test_add_func("/vmm/boot/real-bzimage", test_real_bzimage);
    return g_test_run();
}
