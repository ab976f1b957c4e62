/*
 * Flat key=value option tables for block nodes: typed lookups that remember
 * which keys were consumed, so leftovers can be reported as QEMU does
 * ("Invalid parameter 'x'"), and extraction of "child." sub-tables.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <stdlib.h>

#include "block-int.h"

/* Context: any thread */
BlockOpts *block_opts_new(void)
{
    BlockOpts *o = g_new0(BlockOpts, 1);

    o->kv = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free);
    o->used = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, NULL);
    return o;
}

/* Context: any thread */
void block_opts_free(BlockOpts *o)
{
    if (o) {
        g_hash_table_destroy(o->kv);
        g_hash_table_destroy(o->used);
        g_free(o);
    }
}

/* Context: any thread */
void block_opts_set(BlockOpts *o, const char *key, const char *value)
{
    g_hash_table_replace(o->kv, g_strdup(key), g_strdup(value));
}

/* Context: any thread */
const char *block_opts_get(BlockOpts *o, const char *key)
{
    const char *v = g_hash_table_lookup(o->kv, key);

    if (v) {
        g_hash_table_add(o->used, g_strdup(key));
    }
    return v;
}

/* Context: any thread */
bool block_parse_bool(const char *s, bool *out)
{
    static const char *const yes[] = {"on", "yes", "true", "1"};
    static const char *const no[] = {"off", "no", "false", "0"};

    for (unsigned i = 0; i < G_N_ELEMENTS(yes); i++) {
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

/* Context: any thread. Plain number with an optional k/K/M/G/T/P/E suffix. */
bool block_parse_size(const char *s, uint64_t *out)
{
    static const char suffixes[] = "KMGTPE";
    char *end = NULL;
    unsigned long long v;
    unsigned shift = 0;

    if (!*s || *s == '-' || g_ascii_isspace(*s)) {
        return false;
    }
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s) {
        return false;
    }
    if (*end) {
        const char *p = strchr(suffixes, g_ascii_toupper(*end));

        if (!p || end[1] || !*p) {
            if (!strcmp(end, "b") || !strcmp(end, "B")) {
                *out = v;
                return true;
            }
            return false;
        }
        shift = 10 * (unsigned)(p - suffixes + 1);
    }
    if (shift && v > (UINT64_MAX >> shift)) {
        return false;
    }
    *out = (uint64_t)v << shift;
    return true;
}

/* Context: any thread */
bool block_opts_get_bool(BlockOpts *o, const char *key, bool def, bool *out, GError **errp)
{
    const char *v = block_opts_get(o, key);

    *out = def;
    if (v && !block_parse_bool(v, out)) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Parameter '%s' expects 'on' or 'off'", key);
        return false;
    }
    return true;
}

/* Context: any thread */
bool block_opts_get_size(BlockOpts *o, const char *key, uint64_t def, uint64_t *out, GError **errp)
{
    const char *v = block_opts_get(o, key);

    *out = def;
    if (v && !block_parse_size(v, out)) {
        g_set_error(errp, BLOCK_ERROR, EINVAL,
                    "Parameter '%s' expects a non-negative number below 2^64", key);
        return false;
    }
    return true;
}

/* Context: any thread */
BlockOpts *block_opts_extract(BlockOpts *o, const char *prefix)
{
    BlockOpts *sub = block_opts_new();
    g_autofree char *dotted = g_strconcat(prefix, ".", NULL);
    size_t plen = strlen(dotted);
    GHashTableIter it;
    gpointer k, v;

    g_hash_table_iter_init(&it, o->kv);
    while (g_hash_table_iter_next(&it, &k, &v)) {
        if (!strncmp(k, dotted, plen)) {
            block_opts_set(sub, (char *)k + plen, v);
            g_hash_table_add(o->used, g_strdup(k));
        }
    }
    return sub;
}

/* Context: any thread */
bool block_opts_check_unused(BlockOpts *o, GError **errp)
{
    GHashTableIter it;
    gpointer k;
    const char *first = NULL;

    g_hash_table_iter_init(&it, o->kv);
    while (g_hash_table_iter_next(&it, &k, NULL)) {
        /* report the smallest key so the message does not depend on hashing */
        if (!g_hash_table_contains(o->used, k) && (!first || strcmp(k, first) < 0)) {
            first = k;
        }
    }
    if (first) {
        g_set_error(errp, BLOCK_ERROR, EINVAL, "Invalid parameter '%s'", first);
        return false;
    }
    return true;
}
