/*
 * vblk: the command line, in QEMU's syntax. options_parse() turns argv into
 * plain structs; nothing here touches KVM or files, so the device wiring code
 * and the tests can use it directly.
 *
 * Value syntax is QemuOpts': "[implied,]key=value,..." with ",," standing for a
 * literal comma inside a value, booleans as on/off/yes/no/true/false, sizes with
 * K/M/G/T suffixes (a plain -m number means MiB).
 */
#ifndef VBLK_OPTIONS_H
#define VBLK_OPTIONS_H

#include <glib.h>
#include <stdbool.h>
#include <stdint.h>

#include "block/block.h"
#include <json-glib/json-glib.h>

#include "event/iothread-registry.h"

#define VBLK_VERSION_STRING "0.1.0"
#define OPTIONS_DEFAULT_RAM (128ULL << 20) /* QEMU's default -m */

/* One "key=value" pair of an option argument, in order of appearance. */
typedef struct OptPair {
    char *key;
    char *value;
} OptPair;

typedef enum DriveInterface { DRIVE_IF_NONE, DRIVE_IF_VIRTIO } DriveInterface;

typedef struct DriveOptions {
    char *id; /* generated ("virtio0", ...) for if=virtio without id= */
    DriveInterface iface;
    /*
     * -drive: file, cache, aio, readonly, discard, parsed for the block layer,
     * which opens the drive from them as they are (blk_new_from_drive).
     * blk.file is owned here.
     */
    BlockDriveConf blk;
    GPtrArray *block_opts; /* OptPair*: werror, rerror, node-name, throttling.* (or NULL),
                              checked by the block layer when it opens the drive;
                              -blockdev: every key, flattened with dots */
    bool used;             /* claimed by a device */
    bool blockdev;         /* from -blockdev: id is the node-name, blk is unused */
    char *arg;             /* the option's argument, for error messages */
} DriveOptions;

/* One item of iothread-vq-mapping: an iothread and its queues (or round robin). */
typedef struct VqMappingItem {
    char *iothread;
    GArray *vqs; /* guint queue indices as given; NULL: round robin */
} VqMappingItem;

typedef struct DeviceOptions {
    char *driver; /* "virtio-blk-pci" */
    char *id;
    char *drive;                  /* DriveOptions.id */
    int slot;                     /* PCI slot from addr=, or -1 for automatic */
    bool config_wce;              /* default on */
    int write_cache;              /* write-cache: 1 on, 0 off, -1 auto (the drive's cache mode) */
    bool data_plane;              /* x-data-plane, default off */
    bool pio_notify;              /* modern-pio-notify, default off (QEMU's) */
    unsigned num_queues;          /* 0 = automatic (number of vCPUs) */
    unsigned queue_size;          /* default 256 */
    char *serial;                 /* may be NULL */
    unsigned logical_block_size;  /* default 512 */
    unsigned physical_block_size; /* default 512 */
    bool discard;                 /* default on */
    bool write_zeroes;            /* default on */
    char *iothread;               /* IothreadOptions.id or NULL */
    int bootindex;                /* accepted and ignored; -1 if absent */
    GPtrArray *vq_mapping;        /* VqMappingItem*: iothread-vq-mapping (JSON form), or NULL */
    char *arg;                    /* the option's argument, for error messages */
} DeviceOptions;

typedef struct IothreadOptions {
    char *id;
    IOThreadParams params; /* poll-*, aio-max-batch (QEMU's defaults), x-submit-early */
} IothreadOptions;

/* -object secret (QEMU's properties; registered with util/secret.h when the machine starts). */
typedef struct SecretOptions {
    char *id, *data, *file, *format;
    char *arg; /* the option's argument, for error messages */
} SecretOptions;

/* -chardev, -mon, -qmp, -monitor: stored for the monitor, not interpreted here. */
typedef struct RawOption {
    char *name; /* "-chardev", "-mon", "-qmp", "-monitor" */
    char *arg;
    GPtrArray *props; /* OptPair*, parsed with the option's implied key */
} RawOption;

typedef enum SerialBackend {
    SERIAL_DEFAULT, /* nothing given: stdio */
    SERIAL_STDIO,
    SERIAL_FILE,
    SERIAL_NULL,
    SERIAL_NONE,
} SerialBackend;

typedef struct VmmOptions {
    uint64_t ram_size;
    unsigned smp;
    char *kernel;
    char *initrd;
    char *append;
    char *name;
    char *machine;
    SerialBackend serial;
    char *serial_path;
    bool serial_mon; /* -serial mon:stdio: the monitor shares stdio (Ctrl-a c) */
    bool nographic;
    bool start_paused; /* -S */
    bool no_reboot;
    bool nodefaults;
    bool no_acpi; /* -no-acpi or -machine acpi=off: no ACPI tables, no PM1 device */
    bool help;
    bool version;
    GPtrArray *drives;    /* DriveOptions* */
    GPtrArray *devices;   /* DeviceOptions* (includes if=virtio drives' devices) */
    GPtrArray *iothreads; /* IothreadOptions* */
    GPtrArray *secrets;   /* SecretOptions* */
    GPtrArray *raw;       /* RawOption*: -chardev, -mon, -qmp, -monitor */
    GPtrArray *warnings;  /* char*: accepted-but-ignored notes, printed by main */
} VmmOptions;

/* Context: main thread. NULL with @errp set ("-option arg: message") on error. */
VmmOptions *options_parse(int argc, char **argv, GError **errp);
/* Context: main thread */
void options_free(VmmOptions *opts);
/*
 * Context: main thread. Register the -object secrets (util/secret.h) before
 * the block nodes open; false with @errp set ("-object secret,id=ID: ...").
 */
bool options_register_secrets(const VmmOptions *opts, GError **errp);
/* Context: main thread. The --help text. */
const char *options_usage(void);

/*
 * iothread-vq-mapping, as QEMU's QAPI type [{'iothread': 'str', '*vqs':
 * ['uint16']}]: parsed from JSON (@what names the value in errors, e.g.
 * "iothread-vq-mapping"). An empty list is no mapping (NULL, no error).
 * Context: any thread
 */
GPtrArray *vq_mapping_from_json(JsonNode *n, const char *what, GError **errp);
/* Context: any thread */
void vq_mapping_free(GPtrArray *map);
/* Does iothread @id exist? */
typedef bool VqMappingIothreadExists(const char *id, void *opaque);
/*
 * Validate @map for a device of @nq queues, with QEMU's rules and one-line
 * messages (the iothread exists, is listed once, either every item has vqs
 * or none, each vq < @nq and assigned once, every vq assigned), and give
 * each queue its iothread: ids[q] (borrowed from @map). Items without vqs
 * take queues round robin: item i gets i, i + n, i + 2n... of n items.
 * Context: any thread
 */
bool vq_mapping_resolve(const GPtrArray *map, unsigned nq, VqMappingIothreadExists *exists,
                        void *opaque, const char **ids, GError **errp);

/* Helpers, exported for tests. */
/* Context: any thread. QemuOpts splitting; @implied names a leading bare value. */
GPtrArray *opts_split(const char *arg, const char *implied, GError **errp);
/* Context: any thread. on/off/yes/no/true/false. */
bool opts_parse_bool(const char *s, bool *out);
/* Context: any thread. Size with optional K/M/G/T/P/E suffix; @default_unit for none. */
bool opts_parse_size(const char *s, uint64_t default_unit, uint64_t *out);

#endif /* VBLK_OPTIONS_H */
