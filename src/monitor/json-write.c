/*
 * JSON serializer producing QEMU's exact wire format: `{"a": 1, "b": [1, 2]}`,
 * members in insertion order, non-ASCII and control characters as \uXXXX
 * with upper-case hex, doubles as "%.17g".  json-glib's generator differs in
 * all of these, and clients compare greetings byte for byte.
 */
#include <math.h>
#include <string.h>
#include "qmp-internal.h"

static void write_codepoint(GString *out, gunichar cp)
{
    if (cp >= 0x10000) {
        cp -= 0x10000;
        g_string_append_printf(out, "\\u%04X\\u%04X", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
    } else {
        g_string_append_printf(out, "\\u%04X", cp);
    }
}

static void write_string(GString *out, const char *s)
{
    static const char esc_from[] = "\"\\\b\f\n\r\t";
    static const char esc_to[] = "\"\\bfnrt";

    g_string_append_c(out, '"');
    while (*s) {
        unsigned char c = (unsigned char)*s;
        const char *hit = strchr(esc_from, c);

        if (hit) {
            g_string_append_c(out, '\\');
            g_string_append_c(out, esc_to[hit - esc_from]);
            s++;
        } else if (c >= 0x20 && c < 0x7F) {
            g_string_append_c(out, (char)c);
            s++;
        } else if (c == 0xC0 && (unsigned char)s[1] == 0x80) {
            write_codepoint(out, 0); /* QEMU's encoding of \u0000, see json-parse.c */
            s += 2;
        } else {
            gunichar cp = g_utf8_get_char_validated(s, -1);
            if (cp == (gunichar)-1 || cp == (gunichar)-2) {
                write_codepoint(out, 0xFFFD); /* never emit invalid UTF-8 */
                s++;
            } else {
                write_codepoint(out, cp);
                s = g_utf8_next_char(s);
            }
        }
    }
    g_string_append_c(out, '"');
}

static void write_value(GString *out, JsonNode *node)
{
    char buf[G_ASCII_DTOSTR_BUF_SIZE];
    double d;

    switch (json_node_get_value_type(node)) {
    case G_TYPE_INT64:
        g_string_append_printf(out, "%" G_GINT64_FORMAT, json_node_get_int(node));
        break;
    case G_TYPE_DOUBLE:
        d = json_node_get_double(node);
        if (!isfinite(d)) {
            g_string_append(out, "null"); /* QEMU prints "inf": not JSON */
        } else {
            g_string_append(out, g_ascii_formatd(buf, sizeof(buf), "%.17g", d));
        }
        break;
    case G_TYPE_BOOLEAN:
        g_string_append(out, json_node_get_boolean(node) ? "true" : "false");
        break;
    case G_TYPE_STRING:
        write_string(out, json_node_get_string(node) ?: "");
        break;
    default:
        g_string_append(out, "null");
        break;
    }
}

static void write_object(GString *out, JsonObject *obj)
{
    GList *members = obj ? json_object_get_members(obj) : NULL;

    g_string_append_c(out, '{');
    for (GList *l = members; l; l = l->next) {
        if (l != members) {
            g_string_append(out, ", ");
        }
        write_string(out, l->data);
        g_string_append(out, ": ");
        qmp_json_write(out, json_object_get_member(obj, l->data));
    }
    g_string_append_c(out, '}');
    g_list_free(members);
}

static void write_array(GString *out, JsonArray *arr)
{
    guint n = arr ? json_array_get_length(arr) : 0;

    g_string_append_c(out, '[');
    for (guint i = 0; i < n; i++) {
        if (i) {
            g_string_append(out, ", ");
        }
        qmp_json_write(out, json_array_get_element(arr, i));
    }
    g_string_append_c(out, ']');
}

/* Context: any thread (pure function) */
void qmp_json_write(GString *out, JsonNode *node)
{
    if (!node) {
        g_string_append(out, "null");
        return;
    }
    switch (JSON_NODE_TYPE(node)) {
    case JSON_NODE_OBJECT:
        write_object(out, json_node_get_object(node));
        break;
    case JSON_NODE_ARRAY:
        write_array(out, json_node_get_array(node));
        break;
    case JSON_NODE_VALUE:
        write_value(out, node);
        break;
    default:
        g_string_append(out, "null");
        break;
    }
}

/* Context: any thread (pure function) */
char *qmp_json_to_string(JsonNode *node)
{
    GString *s = g_string_new(NULL);

    qmp_json_write(s, node);
    return g_string_free(s, FALSE);
}
