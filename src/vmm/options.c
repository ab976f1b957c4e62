/*
 * vblk: the command-line option table and the machine-level options (-m,
 * -smp, -serial, -machine, ...). -drive, -device and -object live in
 * options-devices.c. Errors read "-option arg: what is wrong".
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "options-internal.h"
#include "vmm/vmm.h"

#define OPTIONS_MAX_RAM (1ULL << 40)

typedef bool (*OptHandler)(VmmOptions *o, const char *name, const char *arg, GError **errp);

typedef struct OptDef {
    const char *name;
    bool has_arg;
    OptHandler handler;
} OptDef;

static const char options_usage_text[] =
    "usage: vblk [options]\n"
    "QEMU-compatible options (a subset of qemu-system-x86_64):\n"
    "  -m [size=]N[K|M|G|T]    guest RAM (plain number = MiB; default 128M)\n"
    "  -smp [cpus=]N[,...]     number of vCPUs (default 1)\n"
    "  -kernel FILE            Linux bzImage to boot (64-bit boot protocol)\n"
    "  -initrd FILE            initial ramdisk\n"
    "  -append STRING          kernel command line\n"
    "  -drive if=none|virtio,id=ID,file=FILE[,format=raw][,cache=MODE][,aio=MODE]\n"
    "         [,readonly=on|off][,discard=unmap|ignore][,werror=..][,rerror=..][,throttling.*=..]\n"
    "  -blockdev driver=DRV,node-name=NAME[,...]  or  -blockdev '{JSON}'\n"
    "         QEMU's node graph: raw, file, host_device, null-co, null-aio, blkdebug, nbd\n"
    "  -device virtio-blk-pci,drive=ID[,id=..][,bus=pci.0][,addr=SLOT][,x-data-plane=on|off]\n"
    "         [,iothread=ID][,num-queues=N][,queue-size=N][,serial=S][,config-wce=on|off]\n"
    "         [,write-cache=on|off|auto]\n"
    "         [,logical_block_size=N][,physical_block_size=N][,discard=on|off]\n"
    "         [,write-zeroes=on|off][,scsi=off][,bootindex=N]\n"
    "         or  -device '{JSON}', which also takes \"iothread-vq-mapping\":\n"
    "         [{\"iothread\":ID[,\"vqs\":[N,...]]},...]  (queues per iothread; round robin\n"
    "         without vqs); num-queues defaults to the vCPU count\n"
    "  -object iothread,id=ID  a dedicated I/O thread for devices naming it\n"
    "  -object secret,id=ID,data=DATA|file=PATH[,format=raw|base64]\n"
    "                          a secret (the rbd driver's key-secret=ID)\n"
    "  -serial stdio|file:PATH|null|none   ttyS0 backend (default stdio)\n"
    "  -nographic              no display; serial on stdio (C-a x quits, C-a h help)\n"
    "  -qmp SPEC, -chardev ..., -mon ..., -monitor SPEC   QMP and the human monitor\n"
    "  -S                      do not start the vCPUs until told to\n"
    "  -machine acpi=off, -no-acpi  no ACPI tables and no power button (MP table only)\n"
    "  -name NAME, -machine/-M pc|q35, -accel kvm, -enable-kvm, -cpu MODEL,\n"
    "  -display none, -vga none, -nodefaults, -no-reboot, -boot ..., -L DIR\n"
    "  -h, --help, --version\n"
    "A guest reboot or QMP system_reset resets the machine in place and boots the same\n"
    "-kernel/-initrd/-append again; with -no-reboot it ends vblk with exit status 0.\n";

/* Context: main thread */
const char *options_usage(void)
{
    return options_usage_text;
}

/* Context: main thread */
bool opt_fail(GError **errp, const char *name, const char *arg, const char *fmt, ...)
{
    g_autofree char *msg = NULL;
    va_list ap;

    if (errp && *errp) {
        /* A helper (opts_split) already said what is wrong: keep its message,
         * name the option (setting a GError twice is a GLib warning and a leak). */
        g_prefix_error(errp, "-%s%s%s: ", name, arg ? " " : "", arg ? arg : "");
        return false;
    }
    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    g_set_error(errp, VMM_ERROR, EINVAL, "-%s%s%s: %s", name, arg ? " " : "", arg ? arg : "", msg);
    return false;
}

/* Context: main thread */
bool opt_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    guint64 v;

    if (!g_ascii_isdigit(*s)) {
        return false;
    }
    v = g_ascii_strtoull(s, &end, 0);
    if (*end || v < min || v > max) {
        return false;
    }
    *out = v;
    return true;
}

static bool opt_flag(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    if (!strcmp(name, "nographic")) {
        o->nographic = true;
    } else if (!strcmp(name, "S")) {
        o->start_paused = true;
    } else if (!strcmp(name, "no-reboot")) {
        o->no_reboot = true;
    } else if (!strcmp(name, "nodefaults")) {
        o->nodefaults = true;
    } else if (!strcmp(name, "h") || !strcmp(name, "help")) {
        o->help = true;
    } else if (!strcmp(name, "version")) {
        o->version = true;
    } else if (!strcmp(name, "no-acpi")) {
        o->no_acpi = true;
    }
    /* -enable-kvm, -no-hpet: KVM is the only accelerator; there is no HPET. */
    return true;
}

static bool opt_string(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    char **slot = !strcmp(name, "kernel")   ? &o->kernel
                  : !strcmp(name, "initrd") ? &o->initrd
                                            : &o->append;
    g_free(*slot);
    *slot = g_strdup(arg);
    return true;
}

static bool opt_ignored(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    g_ptr_array_add(o->warnings, g_strdup_printf("-%s %s: ignored", name, arg));
    return true;
}

static bool opt_memory(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    g_autoptr(GPtrArray) kv = opts_split(arg, "size", errp);
    uint64_t size = 0;
    bool have_size = false;

    if (!kv) {
        return opt_fail(errp, name, arg, "%s", "bad syntax");
    }
    for (guint i = 0; i < kv->len; i++) {
        OptPair *p = kv->pdata[i];
        uint64_t ignored;
        if (!strcmp(p->key, "size")) {
            if (!opts_parse_size(p->value, 1ULL << 20, &size)) {
                return opt_fail(errp, name, arg, "invalid size '%s' (use e.g. 512, 512M, 2G)",
                                p->value);
            }
            have_size = true;
        } else if (!strcmp(p->key, "maxmem")  ? !opts_parse_size(p->value, 1ULL << 20, &ignored)
                   : !strcmp(p->key, "slots") ? !opt_uint(p->value, 0, 256, &ignored)
                                              : true) {
            return opt_fail(errp, name, arg, "invalid parameter '%s'", p->key);
        }
    }
    if (!have_size) {
        return opt_fail(errp, name, arg, "%s", "missing size");
    }
    size = (size + 4095) & ~4095ULL; /* QEMU rounds up too */
    if (size < VMM_MIN_RAM || size > OPTIONS_MAX_RAM) {
        return opt_fail(errp, name, arg, "RAM size must be between 2 MiB and 1 TiB");
    }
    o->ram_size = size;
    return true;
}

static bool opt_smp(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    static const char *const topo[] = {"sockets", "dies", "clusters", "cores", "threads"};
    g_autoptr(GPtrArray) kv = opts_split(arg, "cpus", errp);
    uint64_t cpus = 0, maxcpus = 0, product = 1, v;

    if (!kv) {
        return opt_fail(errp, name, arg, "%s", "bad syntax");
    }
    for (guint i = 0; i < kv->len; i++) {
        OptPair *p = kv->pdata[i];
        bool known = !strcmp(p->key, "cpus") || !strcmp(p->key, "maxcpus");
        for (size_t t = 0; t < G_N_ELEMENTS(topo); t++) {
            known |= !strcmp(p->key, topo[t]);
        }
        if (!known) {
            return opt_fail(errp, name, arg, "invalid parameter '%s'", p->key);
        }
        if (!opt_uint(p->value, 1, VMM_MAX_VCPUS, &v)) {
            return opt_fail(errp, name, arg, "%s must be between 1 and %d", p->key, VMM_MAX_VCPUS);
        }
        if (!strcmp(p->key, "cpus")) {
            cpus = v;
        } else if (!strcmp(p->key, "maxcpus")) {
            maxcpus = v;
        } else {
            product *= v;
        }
    }
    if (!cpus) {
        cpus = maxcpus ? maxcpus : product;
    }
    if (cpus < 1 || cpus > VMM_MAX_VCPUS || (maxcpus && maxcpus < cpus)) {
        return opt_fail(errp, name, arg, "need 1 to %d vCPUs (and maxcpus >= cpus)", VMM_MAX_VCPUS);
    }
    o->smp = cpus;
    return true;
}

static bool opt_serial(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    SerialBackend b;

    if (!strcmp(arg, "stdio") || !strcmp(arg, "mon:stdio")) {
        b = SERIAL_STDIO;
    } else if (!strcmp(arg, "null")) {
        b = SERIAL_NULL;
    } else if (!strcmp(arg, "none")) {
        b = SERIAL_NONE;
    } else if (g_str_has_prefix(arg, "file:") && arg[5]) {
        b = SERIAL_FILE;
    } else {
        return opt_fail(errp, name, arg, "%s",
                        "unsupported backend (use stdio, file:PATH, null or none)");
    }
    if (o->serial != SERIAL_DEFAULT && b != SERIAL_NONE && o->serial != SERIAL_NONE) {
        return opt_fail(errp, name, arg, "%s", "only one serial port (ttyS0) is supported");
    }
    if (o->serial == SERIAL_DEFAULT || o->serial == SERIAL_NONE) {
        o->serial = b;
        o->serial_mon = !strcmp(arg, "mon:stdio");
        g_free(o->serial_path);
        o->serial_path = b == SERIAL_FILE ? g_strdup(arg + 5) : NULL;
    }
    return true;
}

/* -name, -machine, -accel, -display, -vga, -cpu: validated, mostly informational. */
static bool opt_name(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    g_autoptr(GPtrArray) kv = opts_split(arg, "guest", errp);

    if (!kv) {
        return opt_fail(errp, name, arg, "%s", "bad syntax");
    }
    for (guint i = 0; i < kv->len; i++) {
        OptPair *p = kv->pdata[i];
        if (!strcmp(p->key, "guest")) {
            g_free(o->name);
            o->name = g_strdup(p->value);
        } else if (strcmp(p->key, "process") && strcmp(p->key, "debug-threads")) {
            return opt_fail(errp, name, arg, "invalid parameter '%s'", p->key);
        }
    }
    return true;
}

static bool opt_accel_value(const char *name, const char *arg, const char *v, GError **errp)
{
    if (strcmp(v, "kvm")) {
        return opt_fail(errp, name, arg, "accelerator '%s' is not supported (only kvm)", v);
    }
    return true;
}

static bool opt_machine_type(const char *name, const char *arg, const char *t, GError **errp)
{
    /* Every PC flavour maps to vblk's one machine: i440fx-like, PCI bus 0, ACPI unless off. */
    if (!strcmp(t, "pc") || !strcmp(t, "q35") || g_str_has_prefix(t, "pc-")) {
        return true;
    }
    return opt_fail(errp, name, arg, "machine type '%s' is not supported (use pc or q35)", t);
}

static bool opt_machine(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    static const char *const bools[] = {"usb",       "vmport",   "smm",   "hpet", "dump-guest-core",
                                        "mem-merge", "graphics", "i8042", "sata", "pit"};
    g_autoptr(GPtrArray) kv = opts_split(arg, "type", errp);
    bool b;

    if (!kv) {
        return opt_fail(errp, name, arg, "%s", "bad syntax");
    }
    for (guint i = 0; i < kv->len; i++) {
        OptPair *p = kv->pdata[i];
        bool known = false;
        if (!strcmp(p->key, "type")) {
            if (!opt_machine_type(name, arg, p->value, errp)) {
                return false;
            }
            g_free(o->machine);
            o->machine = g_strdup(p->value);
            continue;
        }
        if (!strcmp(p->key, "accel")) {
            if (!opt_accel_value(name, arg, p->value, errp)) {
                return false;
            }
            continue;
        }
        if (!strcmp(p->key, "kernel-irqchip")) {
            known = opts_parse_bool(p->value, &b) && b;
        }
        if (!strcmp(p->key, "acpi")) {
            /* QEMU's OnOffAuto: auto and on both mean ACPI tables and the PM1 device. */
            known = !strcmp(p->value, "auto") || opts_parse_bool(p->value, &b);
            if (known) {
                o->no_acpi = strcmp(p->value, "auto") && !b;
            }
        }
        for (size_t k = 0; k < G_N_ELEMENTS(bools); k++) {
            known |= !strcmp(p->key, bools[k]) && opts_parse_bool(p->value, &b);
        }
        if (!known) {
            return opt_fail(errp, name, arg, "invalid or unsupported parameter '%s=%s'", p->key,
                            p->value);
        }
    }
    return true;
}

static bool opt_accel(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    g_autoptr(GPtrArray) kv = opts_split(arg, "accel", errp);
    bool b;

    if (!kv) {
        return opt_fail(errp, name, arg, "%s", "bad syntax");
    }
    for (guint i = 0; i < kv->len; i++) {
        OptPair *p = kv->pdata[i];
        if (!strcmp(p->key, "accel")) {
            if (!opt_accel_value(name, arg, p->value, errp)) {
                return false;
            }
        } else if (strcmp(p->key, "kernel-irqchip") || !opts_parse_bool(p->value, &b) || !b) {
            return opt_fail(errp, name, arg, "invalid or unsupported parameter '%s'", p->key);
        }
    }
    return true;
}

static bool opt_none_only(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    if (strcmp(arg, "none")) {
        return opt_fail(errp, name, arg, "%s", "vblk has no display; only 'none' is supported");
    }
    return true;
}

static bool opt_cpu(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    g_ptr_array_add(
        o->warnings,
        g_strdup_printf("-cpu %s: ignored; the guest sees the CPUID KVM supports", arg));
    return true;
}

static bool opt_raw(VmmOptions *o, const char *name, const char *arg, GError **errp)
{
    const char *implied = !strcmp(name, "chardev") ? "backend"
                          : !strcmp(name, "mon")   ? "chardev"
                                                   : "spec";
    RawOption *r = g_new0(RawOption, 1);

    r->props = opts_split(arg, implied, errp);
    if (!r->props) {
        g_free(r);
        return opt_fail(errp, name, arg, "%s", "bad syntax");
    }
    r->name = g_strdup_printf("-%s", name);
    r->arg = g_strdup(arg);
    g_ptr_array_add(o->raw, r);
    return true;
}

static const OptDef options_table[] = {
    {"m", true, opt_memory},         {"smp", true, opt_smp},           {"kernel", true, opt_string},
    {"initrd", true, opt_string},    {"append", true, opt_string},     {"drive", true, opt_drive},
    {"device", true, opt_device},    {"object", true, opt_object},     {"qmp", true, opt_raw},
    {"chardev", true, opt_raw},      {"mon", true, opt_raw},           {"monitor", true, opt_raw},
    {"serial", true, opt_serial},    {"nographic", false, opt_flag},   {"S", false, opt_flag},
    {"name", true, opt_name},        {"enable-kvm", false, opt_flag},  {"accel", true, opt_accel},
    {"no-reboot", false, opt_flag},  {"h", false, opt_flag},           {"help", false, opt_flag},
    {"version", false, opt_flag},    {"display", true, opt_none_only}, {"vga", true, opt_none_only},
    {"nodefaults", false, opt_flag}, {"machine", true, opt_machine},   {"M", true, opt_machine},
    {"cpu", true, opt_cpu},          {"boot", true, opt_ignored},      {"L", true, opt_ignored},
    {"vnc", true, opt_ignored},      {"rtc", true, opt_ignored},       {"no-hpet", false, opt_flag},
    {"no-acpi", false, opt_flag},    {"blockdev", true, opt_blockdev},
};

static const OptDef *options_lookup(const char *name)
{
    for (size_t i = 0; i < G_N_ELEMENTS(options_table); i++) {
        if (!strcmp(options_table[i].name, name)) {
            return &options_table[i];
        }
    }
    return NULL;
}

static void raw_option_free(gpointer p)
{
    RawOption *r = p;

    g_free(r->name);
    g_free(r->arg);
    g_ptr_array_free(r->props, TRUE);
    g_free(r);
}

static VmmOptions *options_new(void)
{
    VmmOptions *o = g_new0(VmmOptions, 1);

    o->ram_size = OPTIONS_DEFAULT_RAM;
    o->smp = 1;
    o->drives = g_ptr_array_new_with_free_func(drive_options_free);
    o->devices = g_ptr_array_new_with_free_func(device_options_free);
    o->iothreads = g_ptr_array_new_with_free_func(iothread_options_free);
    o->secrets = g_ptr_array_new_with_free_func(secret_options_free);
    o->raw = g_ptr_array_new_with_free_func(raw_option_free);
    o->warnings = g_ptr_array_new_with_free_func(g_free);
    return o;
}

/* Context: main thread */
void options_free(VmmOptions *o)
{
    if (!o) {
        return;
    }
    g_free(o->kernel);
    g_free(o->initrd);
    g_free(o->append);
    g_free(o->name);
    g_free(o->machine);
    g_free(o->serial_path);
    g_ptr_array_free(o->drives, TRUE);
    g_ptr_array_free(o->devices, TRUE);
    g_ptr_array_free(o->iothreads, TRUE);
    g_ptr_array_free(o->secrets, TRUE);
    g_ptr_array_free(o->raw, TRUE);
    g_ptr_array_free(o->warnings, TRUE);
    g_free(o);
}

static bool options_one(VmmOptions *o, int argc, char **argv, int *i, GError **errp)
{
    const char *name = argv[*i];
    const OptDef *def;

    if (name[0] != '-' || !name[1]) {
        g_set_error(errp, VMM_ERROR, EINVAL, "'%s': unexpected argument (disk images need -drive)",
                    name);
        return false;
    }
    name += name[1] == '-' ? 2 : 1; /* QEMU takes "--opt" as "-opt" */
    def = options_lookup(name);
    if (!def) {
        g_set_error(errp, VMM_ERROR, EINVAL, "-%s: invalid or unsupported option (see --help)",
                    name);
        return false;
    }
    if (!def->has_arg) {
        return def->handler(o, name, NULL, errp);
    }
    if (*i + 1 >= argc) {
        g_set_error(errp, VMM_ERROR, EINVAL, "-%s: requires an argument", name);
        return false;
    }
    (*i)++;
    return def->handler(o, name, argv[*i], errp);
}

/*
 * A command-line error is one line, but it may quote what the user typed, and
 * a JSON key or value can hold an escaped newline or other control character:
 * those become '?'. Found by fuzz-cmdline ("\n" in a -device JSON key).
 */
static void options_error_one_line(GError **errp)
{
    if (errp && *errp && (*errp)->message) {
        for (char *p = (*errp)->message; *p; p++) {
            if ((unsigned char)*p < 0x20 || *p == 0x7f) {
                *p = '?';
            }
        }
    }
}

/* Context: main thread */
VmmOptions *options_parse(int argc, char **argv, GError **errp)
{
    VmmOptions *o = options_new();

    for (int i = 1; i < argc; i++) {
        if (!options_one(o, argc, argv, &i, errp)) {
            options_error_one_line(errp);
            options_free(o);
            return NULL;
        }
    }
    if (o->help || o->version) {
        return o;
    }
    if (o->serial == SERIAL_DEFAULT) {
        /* QEMU: -nodefaults drops the default serial port unless -serial names one. */
        o->serial = o->nodefaults ? SERIAL_NONE : SERIAL_STDIO;
    }
    if (!options_check_devices(o, errp)) {
        options_error_one_line(errp);
        options_free(o);
        return NULL;
    }
    return o;
}
