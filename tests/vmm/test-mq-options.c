/*
 * Unit tests: -device's JSON form and iothread-vq-mapping (QEMU 9.0's
 * multiqueue property), with QEMU's validation: every error is one line that
 * names the option and carries QEMU's message; num-queues defaults to -smp.
 */
#include <glib.h>
#include <string.h>

#include "vmm/options.h"

#define IOT "-object iothread,id=t0 -object iothread,id=t1 -drive if=none,id=d0,file=null-co:// "

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

/* The error must be one line that names the option and says @expect. */
static void parse_bad(const char *line, const char *expect)
{
    GError *err = NULL;
    VmmOptions *o = parse_line(line, &err);

    g_assert_null(o);
    g_assert_nonnull(err);
    g_assert_null(strchr(err->message, '\n'));
    g_assert_true(g_str_has_prefix(err->message, "-device "));
    if (!strstr(err->message, expect)) {
        g_test_message("'%s' gave '%s', expected '%s'", line, err->message, expect);
        g_test_fail();
    }
    g_error_free(err);
}

static const DeviceOptions *only_device(VmmOptions *o)
{
    g_assert_cmpuint(o->devices->len, ==, 1);
    return o->devices->pdata[0];
}

static bool exists_t0_t1(const char *id, void *opaque)
{
    return !strcmp(id, "t0") || !strcmp(id, "t1");
}

/* The mapping of @d resolved for @nq queues, as "t0 t0 t1 t1". */
static char *resolved(const DeviceOptions *d, unsigned nq)
{
    const char *ids[64];
    GError *err = NULL;
    GString *s = g_string_new(NULL);

    g_assert_true(vq_mapping_resolve(d->vq_mapping, nq, exists_t0_t1, NULL, ids, &err));
    g_assert_no_error(err);
    for (unsigned q = 0; q < nq; q++) {
        g_string_append_printf(s, "%s%s", q ? " " : "", ids[q]);
    }
    return g_string_free(s, FALSE);
}

static void test_json_device(void)
{
    VmmOptions *o = parse_ok(IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\","
                                 "\"id\":\"vd0\",\"num-queues\":4,\"x-data-plane\":true,"
                                 "\"serial\":\"abc\",\"queue-size\":128}'");
    const DeviceOptions *d = only_device(o);

    g_assert_cmpstr(d->drive, ==, "d0");
    g_assert_cmpstr(d->id, ==, "vd0");
    g_assert_cmpstr(d->serial, ==, "abc");
    g_assert_cmpuint(d->num_queues, ==, 4);
    g_assert_cmpuint(d->queue_size, ==, 128);
    g_assert_true(d->data_plane);
    g_assert_null(d->vq_mapping);
    options_free(o);
    /* The JSON form's own errors. */
    parse_bad(IOT "-device '{\"driver\":\"virtio-blk-pci\",'", "JSON parse error");
    parse_bad(IOT "-device '{\"drive\":\"d0\"}'", "Parameter 'driver' is missing");
    parse_bad(IOT "-device '{\"driver\":\"e1000\",\"drive\":\"d0\"}'",
              "device 'e1000' is not supported");
    parse_bad(IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\",\"num-queues\":[1]}'",
              "Invalid parameter type for 'num-queues'");
    parse_bad(IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\",\"num-queues\":0}'",
              "invalid value '0' for property 'num-queues'");
    parse_bad(IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\",\"bogus\":1}'",
              "property 'virtio-blk-pci.bogus' not found");
}

static void test_mapping_ok(void)
{
    VmmOptions *o;
    g_autofree char *r1 = NULL, *r2 = NULL, *r3 = NULL;

    /* QEMU's example: explicit vqs. */
    o = parse_ok(IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\",\"num-queues\":4,"
                     "\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"vqs\":[0,1]},"
                     "{\"iothread\":\"t1\",\"vqs\":[2,3]}]}'");
    g_assert_cmpuint(only_device(o)->vq_mapping->len, ==, 2);
    g_assert_null(only_device(o)->iothread);
    r1 = resolved(only_device(o), 4);
    g_assert_cmpstr(r1, ==, "t0 t0 t1 t1");
    options_free(o);
    /* Round robin: no vqs anywhere. */
    o = parse_ok(IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\",\"num-queues\":5,"
                     "\"iothread-vq-mapping\":[{\"iothread\":\"t0\"},{\"iothread\":\"t1\"}]}'");
    r2 = resolved(only_device(o), 5);
    g_assert_cmpstr(r2, ==, "t0 t1 t0 t1 t0");
    options_free(o);
    /* num-queues defaults to the vCPU count (QEMU 5.2+): 3 queues for -smp 3. */
    o = parse_ok("-smp 3 " IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\","
                 "\"iothread-vq-mapping\":[{\"iothread\":\"t1\",\"vqs\":[2,0]},"
                 "{\"iothread\":\"t0\",\"vqs\":[1]}]}'");
    r3 = resolved(only_device(o), 3);
    g_assert_cmpstr(r3, ==, "t1 t0 t1");
    options_free(o);
    /* An empty list is no mapping, as in QEMU. */
    o = parse_ok(IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\","
                     "\"iothread-vq-mapping\":[]}'");
    g_assert_null(only_device(o)->vq_mapping);
    options_free(o);
}

#define DEV(map) IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\",\"num-queues\":4," map "}'"

static void test_mapping_bad(void)
{
    /* QEMU's checks, QEMU's messages. */
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t9\"}]"),
              "IOThread \"t9\" object does not exist");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\"},{\"iothread\":\"t0\"}]"),
              "duplicate IOThread name \"t0\" in iothread-vq-mapping");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"vqs\":[0,1,2,3]},"
                  "{\"iothread\":\"t1\"}]"),
              "either all items in iothread-vq-mapping must have vqs or none of them must have it");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\"},"
                  "{\"iothread\":\"t1\",\"vqs\":[0]}]"),
              "either all items in iothread-vq-mapping must have vqs or none of them must have it");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"vqs\":[0,4]},"
                  "{\"iothread\":\"t1\",\"vqs\":[1,2,3]}]"),
              "vq index 4 for IOThread \"t0\" must be less than num_queues 4 in "
              "iothread-vq-mapping");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"vqs\":[0,1]},"
                  "{\"iothread\":\"t1\",\"vqs\":[1,2,3]}]"),
              "cannot assign vq 1 to IOThread \"t1\" because it is already assigned");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"vqs\":[0,1]},"
                  "{\"iothread\":\"t1\",\"vqs\":[3]}]"),
              "missing vq 2 IOThread assignment in iothread-vq-mapping");
    parse_bad(DEV("\"iothread\":\"t0\",\"iothread-vq-mapping\":[{\"iothread\":\"t1\"}]"),
              "iothread and iothread-vq-mapping properties cannot be set at the same time");
    /* num-queues from -smp: 2 queues, so vq 3 is out of range. */
    parse_bad("-smp 2 " IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\","
              "\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"vqs\":[0,3]}]}'",
              "vq index 3 for IOThread \"t0\" must be less than num_queues 2");
    /* The type's own errors (QAPI's wording). */
    parse_bad(DEV("\"iothread-vq-mapping\":{\"iothread\":\"t0\"}"),
              "Invalid parameter type for 'iothread-vq-mapping', expected: array");
    parse_bad(DEV("\"iothread-vq-mapping\":[\"t0\"]"),
              "Invalid parameter type for 'iothread-vq-mapping[0]', expected: object");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"vqs\":[0]}]"),
              "Parameter 'iothread-vq-mapping[0].iothread' is missing");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":7}]"),
              "Invalid parameter type for 'iothread-vq-mapping[0].iothread', expected: string");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"vqs\":\"0\"}]"),
              "Invalid parameter type for 'iothread-vq-mapping[0].vqs', expected: array");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"vqs\":[0,\"1\"]}]"),
              "Invalid parameter type for 'iothread-vq-mapping[0].vqs[1]', expected: integer");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"vqs\":[-1]}]"),
              "Parameter 'iothread-vq-mapping[0].vqs[0]' expects uint16_t");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"vqs\":[65536]}]"),
              "Parameter 'iothread-vq-mapping[0].vqs[0]' expects uint16_t");
    parse_bad(DEV("\"iothread-vq-mapping\":[{\"iothread\":\"t0\",\"x\":1}]"),
              "Parameter 'iothread-vq-mapping[0].x' is unexpected");
    /* A list needs the JSON form. */
    parse_bad(IOT "-device virtio-blk-pci,drive=d0,iothread-vq-mapping=t0",
              "iothread-vq-mapping is a list: use the JSON form");
}

/* Hostile values: never a crash, always one line. */
static void test_mapping_hostile(void)
{
    static const char *const maps[] = {
        "null", "[null]", "[{}]", "[{\"iothread\":null}]", "[{\"iothread\":\"t0\",\"vqs\":null}]",
        "[{\"iothread\":\"t0\",\"vqs\":[[]]}]", "[{\"iothread\":\"t0\",\"vqs\":[1.5]}]",
        "[{\"iothread\":\"t0\",\"vqs\":[true]}]", "[[],[]]", "3",
        "[{\"iothread\":\"\"}]",
    };

    for (size_t i = 0; i < G_N_ELEMENTS(maps); i++) {
        g_autofree char *line = g_strdup_printf(
            IOT "-device '{\"driver\":\"virtio-blk-pci\",\"drive\":\"d0\",\"num-queues\":2,"
                "\"iothread-vq-mapping\":%s}'",
            maps[i]);

        parse_bad(line, "iothread-vq-mapping");
    }
}

int main(int argc, char **argv)
{
    g_test_init(&argc, &argv, NULL);
    g_test_add_func("/options/mq/json-device", test_json_device);
    g_test_add_func("/options/mq/mapping-ok", test_mapping_ok);
    g_test_add_func("/options/mq/mapping-bad", test_mapping_bad);
    g_test_add_func("/options/mq/mapping-hostile", test_mapping_hostile);
    return g_test_run();
}
