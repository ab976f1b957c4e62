/* Unit tests: QEMU command-line parsing (good lines, bad lines, the seeds' lines). */
#include <glib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/secret.h"
#include "vmm/options.h"

/* Parses a space-separated command line (single quotes group words). */
static VmmOptions *parse_line(const char *line, GError **errp)
{
    g_auto(GStrv) argv = NULL;
    g_autofree char *full = g_strconcat("vblk ", line, NULL);
    int argc;

    g_assert_true(g_shell_parse_argv(full, &argc, &argv, NULL));
    return options_parse(argc, argv, errp);
}

static VmmOptions *parse_ok(const char *line)
{
    GError *err = NULL;
    VmmOptions *o = parse_line(line, &err);

    if (!o) {
        g_test_message("unexpected error for '%s': %s", line, err->message);
    }
    g_assert_no_error(err);
    return o;
}

/* The error must be one line that names the option. */
static void parse_bad(const char *line, const char *expect_in_msg)
{
    GError *err = NULL;
    VmmOptions *o = parse_line(line, &err);

    g_assert_null(o);
    g_assert_nonnull(err);
    g_assert_null(strchr(err->message, '\n'));
    if (!strstr(err->message, expect_in_msg)) {
        g_test_message("'%s' gave '%s', expected '%s'", line, err->message, expect_in_msg);
        g_test_fail();
    }
    g_error_free(err);
}

static void test_split(void)
{
    GError *err = NULL;
    GPtrArray *kv = opts_split("virtio-blk-pci,serial=a,,b,,,x-data-plane,drive=d", "driver", &err);
    OptPair *p;

    g_assert_no_error(err);
    g_assert_cmpuint(kv->len, ==, 4);
    p = kv->pdata[0];
    g_assert_cmpstr(p->key, ==, "driver");
    g_assert_cmpstr(p->value, ==, "virtio-blk-pci");
    p = kv->pdata[1];
    g_assert_cmpstr(p->key, ==, "serial");
    g_assert_cmpstr(p->value, ==, "a,b,");
    p = kv->pdata[2];
    g_assert_cmpstr(p->key, ==, "x-data-plane");
    g_assert_cmpstr(p->value, ==, "on");
    g_ptr_array_free(kv, TRUE);
    g_assert_null(opts_split("a=1,,=2", NULL, &err) ? NULL : NULL);
    g_clear_error(&err);
}

static void test_bool_and_size(void)
{
    bool b;
    uint64_t v;

    g_assert_true(opts_parse_bool("on", &b) && b);
    g_assert_true(opts_parse_bool("yes", &b) && b);
    g_assert_true(opts_parse_bool("true", &b) && b);
    g_assert_true(opts_parse_bool("off", &b) && !b);
    g_assert_true(opts_parse_bool("no", &b) && !b);
    g_assert_true(opts_parse_bool("false", &b) && !b);
    g_assert_false(opts_parse_bool("maybe", &b));
    g_assert_true(opts_parse_size("512", 1 << 20, &v) && v == 512ULL << 20);
    g_assert_true(opts_parse_size("1G", 1 << 20, &v) && v == 1ULL << 30);
    g_assert_true(opts_parse_size("1g", 1 << 20, &v) && v == 1ULL << 30);
    g_assert_true(opts_parse_size("1.5G", 1 << 20, &v) && v == 3ULL << 29);
    g_assert_true(opts_parse_size("2T", 1 << 20, &v) && v == 2ULL << 40);
    g_assert_true(opts_parse_size("4096K", 1 << 20, &v) && v == 4ULL << 20);
    g_assert_true(opts_parse_size("100B", 1 << 20, &v) && v == 100);
    g_assert_false(opts_parse_size("", 1, &v));
    g_assert_false(opts_parse_size("-1", 1, &v));
    g_assert_false(opts_parse_size("12X", 1, &v));
    g_assert_false(opts_parse_size("1GG", 1, &v));
    g_assert_false(opts_parse_size("99999999E", 1, &v));
}

static void test_machine_options(void)
{
    VmmOptions *o = parse_ok("-m 1G -smp 4 -kernel /k -initrd /i -append 'console=ttyS0 quiet' "
                             "-nographic -name guest1 -enable-kvm -S -no-reboot");

    g_assert_cmpuint(o->ram_size, ==, 1ULL << 30);
    g_assert_cmpuint(o->smp, ==, 4);
    g_assert_cmpstr(o->kernel, ==, "/k");
    g_assert_cmpstr(o->initrd, ==, "/i");
    g_assert_cmpstr(o->append, ==, "console=ttyS0 quiet");
    g_assert_cmpstr(o->name, ==, "guest1");
    g_assert_true(o->nographic && o->start_paused && o->no_reboot);
    g_assert_cmpint(o->serial, ==, SERIAL_STDIO);
    options_free(o);

    o = parse_ok("-m size=2048 -smp cpus=2,maxcpus=4 --machine q35,accel=kvm -accel kvm");
    g_assert_cmpuint(o->ram_size, ==, 2ULL << 30);
    g_assert_cmpuint(o->smp, ==, 2);
    options_free(o);

    o = parse_ok("-smp sockets=2,cores=2,threads=1 -M pc-i440fx-7.2 -display none -vga none");
    g_assert_cmpuint(o->smp, ==, 4);
    options_free(o);

    o = parse_ok("");
    g_assert_cmpuint(o->ram_size, ==, OPTIONS_DEFAULT_RAM);
    g_assert_cmpuint(o->smp, ==, 1);
    options_free(o);

    o = parse_ok("-m 3001k"); /* rounded up to 4 KiB */
    g_assert_cmpuint(o->ram_size % 4096, ==, 0);
    options_free(o);
    /* ACPI: on by default; -no-acpi and -machine acpi=off turn it off, auto/on keep it. */
    o = parse_ok("-kernel k");
    g_assert_false(o->no_acpi);
    options_free(o);
    o = parse_ok("-kernel k -no-acpi");
    g_assert_true(o->no_acpi);
    options_free(o);
    o = parse_ok("-kernel k -machine pc,acpi=off");
    g_assert_true(o->no_acpi);
    options_free(o);
    o = parse_ok("-kernel k -machine acpi=auto");
    g_assert_false(o->no_acpi);
    options_free(o);
    o = parse_ok("-kernel k -no-acpi -M q35,acpi=on");
    g_assert_false(o->no_acpi);
    options_free(o);
    parse_bad("-kernel k -machine acpi=maybe", "acpi=maybe");
}

static void test_serial_options(void)
{
    VmmOptions *o = parse_ok("-serial file:/tmp/x.log");

    g_assert_cmpint(o->serial, ==, SERIAL_FILE);
    g_assert_cmpstr(o->serial_path, ==, "/tmp/x.log");
    options_free(o);
    o = parse_ok("-serial none");
    g_assert_cmpint(o->serial, ==, SERIAL_NONE);
    options_free(o);
    o = parse_ok("-nodefaults");
    g_assert_cmpint(o->serial, ==, SERIAL_NONE);
    options_free(o);
    o = parse_ok("-nodefaults -serial stdio");
    g_assert_cmpint(o->serial, ==, SERIAL_STDIO);
    g_assert_false(o->serial_mon);
    options_free(o);
    o = parse_ok("-serial mon:stdio");
    g_assert_cmpint(o->serial, ==, SERIAL_STDIO);
    g_assert_true(o->serial_mon); /* the monitor shares stdio (Ctrl-a c) */
    options_free(o);
}

static void test_drive_and_device(void)
{
    VmmOptions *o = parse_ok(
        "-object iothread,id=io0 "
        "-drive if=none,id=d0,file=/a,,b.img,format=raw,cache=none,aio=native,"
        "readonly=on,discard=unmap,detect-zeroes=off "
        "-device virtio-blk-pci,drive=d0,id=disk0,bus=pci.0,addr=0x6,scsi=off,config-wce=off,"
        "x-data-plane=on,num-queues=2,queue-size=128,serial=SN1,logical_block_size=4096,"
        "physical_block_size=4096,discard=off,write-zeroes=off,iothread=io0,bootindex=1 "
        "-drive file=/b.img,if=virtio,cache=writethrough,aio=io_uring");
    DriveOptions *d = o->drives->pdata[0];
    DeviceOptions *dev = o->devices->pdata[0];

    g_assert_cmpstr(d->blk.file, ==, "/a,b.img");
    g_assert_true(d->blk.cache.direct && d->blk.cache.writeback && !d->blk.cache.no_flush);
    g_assert_cmpint(d->blk.aio, ==, BLOCK_AIO_NATIVE);
    g_assert_true(d->blk.read_only && d->blk.discard_unmap);
    g_assert_cmpstr(dev->id, ==, "disk0");
    g_assert_cmpint(dev->slot, ==, 6);
    g_assert_false(dev->config_wce);
    g_assert_true(dev->data_plane);
    g_assert_cmpuint(dev->num_queues, ==, 2);
    g_assert_cmpuint(dev->queue_size, ==, 128);
    g_assert_cmpstr(dev->serial, ==, "SN1");
    g_assert_cmpuint(dev->logical_block_size, ==, 4096);
    g_assert_false(dev->discard || dev->write_zeroes);
    g_assert_cmpstr(dev->iothread, ==, "io0");
    {
        const IothreadOptions *io = o->iothreads->pdata[0];

        /* Typed, with QEMU's defaults for what is not given. */
        g_assert_cmpstr(io->id, ==, "io0");
        g_assert_cmpint(io->params.poll_max_ns, ==, IOTHREAD_POLL_MAX_NS_DEFAULT);
        g_assert_cmpint(io->params.poll_grow, ==, 0);
        g_assert_cmpint(io->params.poll_shrink, ==, 0);
    }
    /* if=virtio makes its own device with QEMU's defaults. */
    g_assert_cmpuint(o->devices->len, ==, 2);
    dev = o->devices->pdata[1];
    d = o->drives->pdata[1];
    g_assert_cmpstr(dev->drive, ==, d->id);
    g_assert_false(dev->data_plane);
    g_assert_true(dev->config_wce && dev->discard && dev->write_zeroes);
    g_assert_cmpuint(dev->queue_size, ==, 256);
    g_assert_cmpint(dev->slot, ==, -1);
    g_assert_false(d->blk.cache.writeback || d->blk.cache.direct);
    g_assert_cmpint(d->blk.aio, ==, BLOCK_AIO_IO_URING);
    options_free(o);

    /* -device before its -drive is fine, as in QEMU. */
    o = parse_ok("-device virtio-blk-pci,drive=x -drive if=none,id=x,file=/x");
    g_assert_cmpuint(o->devices->len, ==, 1);
    options_free(o);

    o = parse_ok("-drive if=none,id=u,file=/u,cache=unsafe "
                 "-device virtio-blk,drive=u,addr=1f.0,x-data-plane=yes");
    d = o->drives->pdata[0];
    dev = o->devices->pdata[0];
    g_assert_true(d->blk.cache.no_flush);
    g_assert_cmpint(dev->slot, ==, 0x1f);
    g_assert_true(dev->data_plane);
    g_assert_cmpint(dev->write_cache, ==, -1);
    options_free(o);

    o = parse_ok("-blockdev driver=file,node-name=d,filename=/x "
                 "-device virtio-blk-pci,drive=d,write-cache=off");
    g_assert_cmpint(((DeviceOptions *)o->devices->pdata[0])->write_cache, ==, 0);
    options_free(o);
    parse_bad("-blockdev driver=file,node-name=d,filename=/x "
              "-device virtio-blk-pci,drive=d,write-cache=maybe",
              "write-cache");

    o = parse_ok("-drive if=none,id=q,file=/q,cache=directsync,aio=native "
                 "-qmp unix:/tmp/q.sock,server=on,wait=off -chardev socket,id=m,path=/tmp/m "
                 "-mon chardev=m,mode=control -monitor none");
    g_assert_cmpuint(o->raw->len, ==, 4);
    g_assert_cmpstr(((RawOption *)o->raw->pdata[0])->name, ==, "-qmp");
    g_assert_cmpstr(((RawOption *)o->raw->pdata[0])->arg, ==,
                    "unix:/tmp/q.sock,server=on,wait=off");
    options_free(o);
}

static void test_object_iothread(void)
{
    VmmOptions *o = parse_ok("-object iothread,id=io1,poll-max-ns=0x100,poll-grow=4,poll-shrink=2,"
                             "aio-max-batch=8");
    const IothreadOptions *io = o->iothreads->pdata[0];

    g_assert_cmpint(io->params.poll_max_ns, ==, 256);
    g_assert_cmpint(io->params.poll_grow, ==, 4);
    g_assert_cmpint(io->params.poll_shrink, ==, 2);
    g_assert_cmpint(io->params.aio_max_batch, ==, 8);
    g_assert_cmpint(io->params.x_submit_early, ==, IOTHREAD_SUBMIT_EARLY_DEFAULT);
    options_free(o);
    o = parse_ok("-object iothread,id=io1,x-submit-early=0");
    io = o->iothreads->pdata[0];
    g_assert_cmpint(io->params.x_submit_early, ==, 0);
    g_assert_cmpint(io->params.x_complete_hold_ns, ==, 0); /* the completion hold: off */
    g_assert_cmpint(io->params.x_complete_hold_depth, ==, IOTHREAD_COMPLETE_HOLD_DEPTH_DEFAULT);
    options_free(o);
    o = parse_ok("-object iothread,id=io1,x-complete-hold-ns=50000,x-complete-hold-depth=8");
    io = o->iothreads->pdata[0];
    g_assert_cmpint(io->params.x_complete_hold_ns, ==, 50000);
    g_assert_cmpint(io->params.x_complete_hold_depth, ==, 8);
    options_free(o);
    parse_bad("-object iothread,id=io1,x-complete-hold-ns=1000001",
              "x-complete-hold-ns value must be in range [0, 1000000]");
    /* Out of range: one line that names the option, as QEMU's does. */
    parse_bad("-object iothread,id=io1,x-complete-hold-depth=0",
              "-object iothread,id=io1,x-complete-hold-depth=0: "
              "x-complete-hold-depth value must be in range [1, 4096]");
    parse_bad("-object iothread,id=io1,x-complete-hold-ns=-1",
              "x-complete-hold-ns value must be in range [0, 1000000]");
    /* A negative depth names the depth's own range, not the generic int64 one. */
    parse_bad("-object iothread,id=io1,x-complete-hold-depth=-1",
              "x-complete-hold-depth value must be in range [1, 4096]");
}

/*
 * -object secret: kept by the parse, registered by options_register_secrets()
 * (data= inline, file=, raw and base64), errors on one line without the data.
 */
static void test_object_secret(void)
{
    g_autofree char *path = NULL;
    g_autofree char *line = NULL;
    GError *err = NULL;
    VmmOptions *o;
    char *b64;
    int fd = g_file_open_tmp("vblk-secret-XXXXXX", &path, NULL);

    g_assert_cmpint(fd, >=, 0);
    g_assert_true(g_file_set_contents(path, "c2VjcmV0\n", -1, NULL)); /* "secret", with a newline */
    close(fd);
    line = g_strdup_printf("-object secret,id=s1,data=hunter2 -object iothread,id=io0 "
                           "-object secret,id=s2,file=%s,format=base64 "
                           "-object secret,id=s3,data=aHVudGVyMg==,format=base64", path);
    o = parse_ok(line);
    g_assert_cmpuint(o->secrets->len, ==, 3);
    g_assert_false(secret_exists("s1")); /* not before the machine starts */
    g_assert_true(options_register_secrets(o, &err));
    g_assert_no_error(err);
    b64 = secret_lookup_base64("s1", &err);
    g_assert_cmpstr(b64, ==, "aHVudGVyMg=="); /* base64 of "hunter2" */
    secret_free_string(b64);
    b64 = secret_lookup_base64("s2", &err);
    g_assert_cmpstr(b64, ==, "c2VjcmV0");
    secret_free_string(b64);
    b64 = secret_lookup_base64("s3", &err);
    g_assert_cmpstr(b64, ==, "aHVudGVyMg==");
    secret_free_string(b64);
    g_assert_no_error(err);
    g_assert_null(secret_lookup_base64("nope", &err));
    g_assert_cmpstr(err->message, ==, "No secret with id 'nope'");
    g_clear_error(&err);
    secret_clear_all();
    options_free(o);

    /* found when the machine starts: bad base64, a missing file */
    o = parse_ok("-object secret,id=b,data=hunter2,format=base64 "
                 "-object secret,id=f,file=/nonexistent/key");
    g_assert_false(options_register_secrets(o, &err));
    g_assert_nonnull(strstr(err->message, "-object secret,id=b: "));
    g_assert_nonnull(strstr(err->message, "not valid base64"));
    g_assert_null(strstr(err->message, "hunter2"));
    g_clear_error(&err);
    secret_clear_all();
    options_free(o);
    o = parse_ok("-object secret,id=f,file=/nonexistent/key");
    g_assert_false(options_register_secrets(o, &err));
    g_assert_nonnull(strstr(err->message, "-object secret,id=f: "));
    g_assert_nonnull(strstr(err->message, "/nonexistent/key"));
    g_assert_null(strchr(err->message, '\n'));
    g_clear_error(&err);
    secret_clear_all();
    options_free(o);
    /* a device or a FIFO is refused at once, not read until it ends (or forever) */
    {
        g_autofree char *fifo = g_strdup_printf("%s.fifo", path);
        g_autofree char *args = NULL;

        g_assert_cmpint(mkfifo(fifo, 0600), ==, 0);
        args = g_strdup_printf("-object secret,id=z,file=/dev/zero -object secret,id=p,file=%s",
                               fifo);
        o = parse_ok(args);
        g_assert_false(options_register_secrets(o, &err));
        g_assert_nonnull(strstr(err->message, "-object secret,id=z: "));
        g_assert_nonnull(strstr(err->message, "not a regular file"));
        g_clear_error(&err);
        secret_clear_all();
        options_free(o);
        g_free(args);
        args = g_strdup_printf("-object secret,id=p,file=%s", fifo);
        o = parse_ok(args);
        g_assert_false(options_register_secrets(o, &err));
        g_assert_nonnull(strstr(err->message, "not a regular file"));
        g_clear_error(&err);
        secret_clear_all();
        options_free(o);
        unlink(fifo);
    }
    unlink(path);

    parse_bad("-object secret,data=x", "id= is required");
    parse_bad("-object secret,id=s", "one of data= or file= is required");
    parse_bad("-object secret,id=s,data=hunter2,file=/k", "not both");
    parse_bad("-object secret,id=s,data=hunter2,format=hex",
              "-object secret,id=s: Parameter 'format' does not accept value 'hex'");
    parse_bad("-object secret,id=s,data=hunter2,keyid=k", "not supported");
    parse_bad("-object secret,id=s,data=hunter2,bogus=1", "Invalid parameter 'bogus'");
    parse_bad("-object iothread,id=a -object secret,id=a,data=hunter2", "duplicate ID 'a'");
    parse_bad("-object secret,id=a,data=hunter2 -object iothread,id=a", "duplicate ID 'a'");
    parse_bad("-object secret,id=a,data=x -object secret,id=a,data=hunter2", "duplicate ID 'a'");
}

static void test_bad_lines(void)
{
    parse_bad("-foo", "-foo");
    parse_bad("-m", "-m: requires an argument");
    parse_bad("-m 0", "-m 0");
    parse_bad("-m lots", "-m lots");
    parse_bad("-m 4T", "-m 4T");
    parse_bad("-smp 0", "-smp 0");
    parse_bad("-smp 1000", "-smp 1000");
    parse_bad("-smp cpus=2,bogus=1", "bogus");
    parse_bad("disk.img", "disk.img");
    parse_bad("-drive file=/x", "if=ide");
    parse_bad("-drive file=/x,if=ide", "if=ide");
    parse_bad("-drive if=none,id=a", "file= is required");
    parse_bad("-drive if=none,id=a,file=/x,format=qcow2", "format=qcow2");
    parse_bad("-drive if=none,id=a,file=/x,cache=fast", "cache");
    parse_bad("-drive if=none,id=a,file=/x,aio=posix", "aio");
    parse_bad("-drive if=none,id=a,file=/x,aio=native", "cache.direct");
    parse_bad("-drive if=none,id=a,file=/x,detect-zeroes=on", "detect-zeroes");
    parse_bad("-drive if=none,id=a,file=/x,readonly=perhaps", "readonly");
    parse_bad("-drive if=none,id=a,file=/x,bogus=1", "'bogus'");
    parse_bad("-drive if=none,id=a,file=/x -drive if=none,id=a,file=/y", "duplicate ID 'a'");
    parse_bad("-device e1000", "e1000");
    parse_bad("-device virtio-blk-pci", "drive property not set");
    parse_bad("-device virtio-blk-pci,drive=nope", "can't find value 'nope'");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a,scsi=on", "scsi");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a,bogus=1",
              "virtio-blk-pci.bogus");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a,addr=0x0", "addr");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a,addr=0x6.1", "addr");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a,bus=pci.1", "bus");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a,queue-size=100",
              "queue-size");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a,num-queues=0",
              "num-queues");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a,"
              "logical_block_size=4096,physical_block_size=512",
              "physical_block_size");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a,x-data-plane=2",
              "x-data-plane");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a,iothread=io9", "io9");
    parse_bad("-drive if=none,id=a,file=/x -device virtio-blk-pci,drive=a "
              "-device virtio-blk-pci,drive=a",
              "already in use");
    parse_bad("-drive if=none,id=a,file=/x -drive if=none,id=b,file=/y "
              "-device virtio-blk-pci,drive=a,addr=5 -device virtio-blk-pci,drive=b,addr=5",
              "slot");
    parse_bad("-object memory-backend-ram,id=m", "memory-backend-ram");
    parse_bad("-object iothread", "id= is required");
    parse_bad("-object iothread,id=a -object iothread,id=a", "duplicate ID");
    /* QEMU 7.2's messages for the typed iothread properties. */
    parse_bad(
        "-object iothread,id=t,poll-max-ns=x",
        "-object iothread,id=t,poll-max-ns=x: Parameter 'poll-max-ns' expects an int64 value");
    parse_bad("-object iothread,id=t,poll-grow=1.5",
              "Parameter 'poll-grow' expects an int64 value");
    parse_bad("-object iothread,id=t,poll-max-ns=",
              "Parameter 'poll-max-ns' expects an int64 value");
    parse_bad("-object iothread,id=t,poll-max-ns=99999999999999999999",
              "Parameter 'poll-max-ns' expects an int64 value");
    parse_bad("-object iothread,id=t,aio-max-batch=x",
              "Parameter 'aio-max-batch' expects an int64 value");
    parse_bad("-object iothread,id=t,poll-shrink=-5",
              "poll-shrink value must be in range [0, 9223372036854775807]");
    parse_bad("-object iothread,id=t,bogus=1",
              "-object iothread,id=t,bogus=1: Invalid parameter 'bogus'");
    parse_bad("-serial tcp:1.2.3.4:5", "-serial");
    parse_bad("-serial stdio -serial file:/x", "only one serial port");
    parse_bad("-accel tcg", "tcg");
    parse_bad("-machine microvm", "microvm");
    parse_bad("-machine pc,bogus=on", "bogus");
    parse_bad("-display gtk", "-display gtk");
    parse_bad("-vga qxl", "-vga qxl");
}

/* The seed workloads' command lines, as written, minus devices vblk does not have. */
static void test_seed_lines(void)
{
    VmmOptions *o;
    DeviceOptions *dev;

    /* 000: Stefan's original dataplane announcement and the follow-up run. */
    o = parse_ok("-drive if=none,id=drive0,cache=none,aio=native,format=raw,file=/img "
                 "-device virtio-blk-pci,drive=drive0,scsi=off,x-data-plane=on");
    g_assert_true(((DeviceOptions *)o->devices->pdata[0])->data_plane);
    options_free(o);
    o = parse_ok("-drive file=/dev/ram0,if=none,cache=none,aio=native,id=disk1 "
                 "-device virtio-blk-pci,x-data-plane=off,drive=disk1,scsi=off "
                 "-kernel /k -append 'root=/dev/sdb1 console=tty0' "
                 "-L /tmp/qemu-dataplane/share/qemu/ -nographic -vnc :0 -enable-kvm -m 2048 "
                 "-smp 4 -cpu qemu64,+x2apic -M pc");
    g_assert_cmpuint(o->ram_size, ==, 2048ULL << 20);
    g_assert_false(((DeviceOptions *)o->devices->pdata[0])->data_plane);
    options_free(o);
    /* The same run's IDE root disk is a device vblk does not have: refused clearly. */
    parse_bad("-drive file=/root/img/sid.img,if=ide", "if=ide");

    /* 002: the Windows guests' disks (virtio-serial, spice, AC97, usb left out). */
    o = parse_ok("-enable-kvm -smp 8 -name win2003 -M pc-0.15 -m 1024 -boot c "
                 "-drive file=/home/win2003.img,if=none,format=raw,cache=none,id=drive0 "
                 "-device virtio-blk-pci,drive=drive0,bus=pci.0,addr=0x6,bootindex=1 "
                 "-drive id=drive1,if=none,cache=none,format=raw,file=/home/data.img "
                 "-device virtio-blk-pci,drive=drive1,bus=pci.0,addr=0x7 "
                 "-drive id=drive2,if=none,cache=none,format=raw,file=/home/data2.img,"
                 "aio=native "
                 "-device virtio-blk-pci,drive=drive2,bus=pci.0,addr=0x8,scsi=off,"
                 "x-data-plane=on,config-wce=off");
    g_assert_cmpuint(o->smp, ==, 8);
    g_assert_cmpuint(o->devices->len, ==, 3);
    dev = o->devices->pdata[2];
    g_assert_cmpint(dev->slot, ==, 8);
    g_assert_true(dev->data_plane);
    g_assert_false(dev->config_wce);
    g_assert_false(((DeviceOptions *)o->devices->pdata[1])->data_plane);
    options_free(o);
    parse_bad("-device virtio-serial-pci,id=virtio-serial0,bus=pci.0,addr=0x5",
              "virtio-serial-pci");
    parse_bad("-device AC97,id=sound0,bus=pci.0,addr=0x4", "AC97");
}

static void test_help_version(void)
{
    VmmOptions *o = parse_ok("--help");

    g_assert_true(o->help);
    options_free(o);
    o = parse_ok("-version");
    g_assert_true(o->version);
    options_free(o);
    g_assert_nonnull(strstr(options_usage(), "-drive"));
}

static const char *block_opt(const DriveOptions *d, const char *key)
{
    for (guint i = 0; d->block_opts && i < d->block_opts->len; i++) {
        const OptPair *p = d->block_opts->pdata[i];

        if (!strcmp(p->key, key)) {
            return p->value;
        }
    }
    return NULL;
}

/* -blockdev: dotted and JSON forms name the same node graph; the device finds it by node-name. */
static void test_blockdev(void)
{
    VmmOptions *o = parse_ok("-blockdev driver=raw,node-name=disk0,file.driver=file,"
                             "file.filename=/x.img,file.aio=native,cache.direct=on "
                             "-device virtio-blk-pci,drive=disk0,id=vd0,x-data-plane=on");
    const DriveOptions *d = o->drives->pdata[0];
    const DeviceOptions *dev = o->devices->pdata[0];

    g_assert_true(d->blockdev);
    g_assert_cmpstr(d->id, ==, "disk0");
    g_assert_null(d->blk.file);
    g_assert_cmpstr(block_opt(d, "driver"), ==, "raw");
    g_assert_cmpstr(block_opt(d, "file.filename"), ==, "/x.img");
    g_assert_cmpstr(block_opt(d, "cache.direct"), ==, "on");
    g_assert_cmpstr(dev->drive, ==, "disk0");
    g_assert_true(dev->data_plane);
    g_assert_cmpint(dev->write_cache, ==, -1);
    options_free(o);

    o = parse_ok("-blockdev driver=file,node-name=d,filename=/x "
                 "-device virtio-blk-pci,drive=d,write-cache=off");
    g_assert_cmpint(((DeviceOptions *)o->devices->pdata[0])->write_cache, ==, 0);
    options_free(o);
    parse_bad("-blockdev driver=file,node-name=d,filename=/x "
              "-device virtio-blk-pci,drive=d,write-cache=maybe",
              "write-cache");

    o = parse_ok(
        "-blockdev '{\"driver\":\"raw\",\"node-name\":\"n1\",\"read-only\":true,"
        "\"file\":{\"driver\":\"blkdebug\",\"inject-error\":[{\"event\":\"read_aio\","
        "\"errno\":5,\"once\":false}],\"image\":{\"driver\":\"file\",\"filename\":\"/y\"}}}' "
        "-device virtio-blk-pci,drive=n1");
    d = o->drives->pdata[0];
    g_assert_cmpstr(d->id, ==, "n1");
    g_assert_cmpstr(block_opt(d, "read-only"), ==, "on");
    g_assert_cmpstr(block_opt(d, "file.driver"), ==, "blkdebug");
    g_assert_cmpstr(block_opt(d, "file.inject-error.0.event"), ==, "read_aio");
    g_assert_cmpstr(block_opt(d, "file.inject-error.0.errno"), ==, "5");
    g_assert_cmpstr(block_opt(d, "file.inject-error.0.once"), ==, "off");
    g_assert_cmpstr(block_opt(d, "file.image.filename"), ==, "/y");
    g_assert_cmpuint(d->block_opts->len, ==, 9);
    options_free(o);

    parse_bad("-blockdev driver=file,filename=/x", "'node-name' must be specified");
    parse_bad("-blockdev node-name=a,filename=/x", "Parameter 'driver' is missing");
    parse_bad("-blockdev '{\"driver\":\"file\",'", "JSON parse error");
    parse_bad("-blockdev [1,2]", "Parameter 'driver' is missing");
    parse_bad("-blockdev '{\"driver\":\"file\",\"node-name\":\"a\",\"filename\":null}'",
              "'filename' must not be null");
    parse_bad("-blockdev '{\"driver\":\"file\",\"node-name\":\"a\",\"x\":1.5}'", "'x' expects");
    parse_bad("-blockdev driver=file,node-name=a,filename=/x -drive if=none,id=a,file=/y",
              "duplicate ID 'a'");
    parse_bad("-blockdev driver=file,node-name=a,filename=/x -device virtio-blk-pci,drive=b",
              "can't find value 'b'");
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/vmm/options/split", test_split);
    g_test_add_func("/vmm/options/bool-and-size", test_bool_and_size);
    g_test_add_func("/vmm/options/machine", test_machine_options);
    g_test_add_func("/vmm/options/serial", test_serial_options);
    g_test_add_func("/vmm/options/drive-and-device", test_drive_and_device);
    g_test_add_func("/vmm/options/object-iothread", test_object_iothread);
    g_test_add_func("/vmm/options/object-secret", test_object_secret);
    g_test_add_func("/vmm/options/bad-lines", test_bad_lines);
    g_test_add_func("/vmm/options/seed-lines", test_seed_lines);
    g_test_add_func("/vmm/options/help-version", test_help_version);
    g_test_add_func("/vmm/options/blockdev", test_blockdev);
    return g_test_run();
}
