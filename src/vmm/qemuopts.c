/*
 * vblk: QemuOpts-style value syntax: "implied,key=value,key=value" where ",,"
 * is a literal comma, plus the boolean and size grammars QEMU uses.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vmm/options.h"
#include "vmm/vmm.h"

static void opt_pair_free(gpointer p)
{
    OptPair *pair = p;

    g_free(pair->key);
    g_free(pair->value);
    g_free(pair);
}

/* Reads up to an unescaped ',' (or '=' when @stop_at_eq); ",," becomes ','. */
static char *opts_token(const char **p, bool stop_at_eq)
{
    GString *s = g_string_new(NULL);

    while (**p) {
        if (**p == ',') {
            if ((*p)[1] == ',') {
                g_string_append_c(s, ',');
                *p += 2;
                continue;
            }
            break;
        }
        if (stop_at_eq && **p == '=') {
            break;
        }
        g_string_append_c(s, **p);
        (*p)++;
    }
    return g_string_free(s, FALSE);
}

/* Context: any thread */
GPtrArray *opts_split(const char *arg, const char *implied, GError **errp)
{
    GPtrArray *pairs = g_ptr_array_new_with_free_func(opt_pair_free);
    const char *p = arg;
    bool first = true;

    while (*p) {
        OptPair *pair = g_new0(OptPair, 1);

        pair->key = opts_token(&p, true);
        if (*p == '=') {
            p++;
            pair->value = opts_token(&p, false);
        } else if (first && implied) {
            pair->value = pair->key;
            pair->key = g_strdup(implied);
        } else {
            pair->value = g_strdup("on"); /* a bare "key" means key=on */
        }
        g_ptr_array_add(pairs, pair);
        if (!*pair->key) {
            g_set_error(errp, VMM_ERROR, EINVAL, "empty parameter name in '%s'", arg);
            g_ptr_array_free(pairs, TRUE);
            return NULL;
        }
        if (*p == ',') {
            p++;
        }
        first = false;
    }
    return pairs;
}

/* Context: any thread */
bool opts_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"on", "yes", "true", "y"};
    static const char *const no[] = {"off", "no", "false", "n"};

    for (size_t i = 0; i < G_N_ELEMENTS(yes); i++) {
        if (!strcmp(s, yes[i])) {
            *out = true;
            return true;
        }
        if (!strcmp(s, no[i])) {
            *out = false;
            return true;
        }
    }
    return false;
}

static int opts_suffix_shift(char c)
{
    switch (g_ascii_toupper(c)) {
    case 'B':
        return 0;
    case 'K':
        return 10;
    case 'M':
        return 20;
    case 'G':
        return 30;
    case 'T':
        return 40;
    case 'P':
        return 50;
    case 'E':
        return 60;
    default:
        return -1;
    }
}

/* Context: any thread */
bool opts_parse_size(const char *s, uint64_t default_unit, uint64_t *out)
{
    char *end;
    double val, unit = (double)default_unit;
    int shift;

    if (!g_ascii_isdigit(*s) && *s != '.') {
        return false;
    }
    errno = 0;
    val = g_ascii_strtod(s, &end);
    if (errno || end == s || !isfinite(val) || val < 0) {
        return false;
    }
    if (*end) {
        shift = opts_suffix_shift(*end);
        if (shift < 0 || end[1]) {
            return false;
        }
        unit = ldexp(1.0, shift);
    }
    val *= unit;
    /* QEMU refuses fractions of a byte and anything past 2^64. */
    if (val >= 18446744073709551616.0 || val != floor(val)) {
        return false;
    }
    *out = (uint64_t)val;
    return true;
}
