/*
 * Strict JSON parser for one complete QMP input text.
 *
 * json-glib's own parser accepts comments, hex numbers, unknown escapes and
 * silently wraps integers beyond 64 bits; QMP must reject or represent those
 * the way QEMU does, so the grammar is checked here and only the tree types
 * (JsonNode) come from json-glib.  QEMU's extensions are kept: single-quoted
 * strings, and \u0000 stored as the two bytes C0 80 so C strings stay whole
 * (json-write.c turns them back into \u0000).
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "qmp-internal.h"

typedef struct Parser {
    const char *p;
    const char *end;
    GError *err;
    int depth;
} Parser;

static JsonNode *parse_value(Parser *ps);

static void G_GNUC_PRINTF(2, 3) parse_fail(Parser *ps, const char *fmt, ...)
{
    va_list ap;
    char *msg;

    if (ps->err) {
        return; /* keep the first, innermost error */
    }
    va_start(ap, fmt);
    msg = g_strdup_vprintf(fmt, ap);
    va_end(ap);
    ps->err = g_error_new(QMP_ERROR, QMP_ERROR_GENERIC, "JSON parse error, %s", msg);
    g_free(msg);
}

static void skip_ws(Parser *ps)
{
    while (ps->p < ps->end &&
           (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r')) {
        ps->p++;
    }
}

static int hex_value(char c)
{
    return g_ascii_isxdigit(c) ? g_ascii_xdigit_value(c) : -1;
}

static bool parse_hex4(Parser *ps, gunichar *out)
{
    gunichar v = 0;

    if (ps->end - ps->p < 4) {
        parse_fail(ps, "invalid hex escape sequence in string");
        return false;
    }
    for (int i = 0; i < 4; i++) {
        int d = hex_value(ps->p[i]);
        if (d < 0) {
            parse_fail(ps, "invalid hex escape sequence in string");
            return false;
        }
        v = v << 4 | (gunichar)d;
    }
    ps->p += 4;
    *out = v;
    return true;
}

static bool parse_unicode_escape(Parser *ps, GString *s)
{
    gunichar cp, lo;
    const char *start = ps->p - 2;

    if (!parse_hex4(ps, &cp)) {
        return false;
    }
    if (cp >= 0xD800 && cp <= 0xDBFF) {
        if (ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
            ps->p += 2;
            if (!parse_hex4(ps, &lo)) {
                return false;
            }
            if (lo >= 0xDC00 && lo <= 0xDFFF) {
                g_string_append_unichar(s, 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00));
                return true;
            }
        }
        cp = 0xDC00; /* report as a lone surrogate below */
    }
    if (cp >= 0xDC00 && cp <= 0xDFFF) {
        parse_fail(ps, "%.*s is not a valid Unicode character", 6, start);
        return false;
    }
    if (cp == 0) {
        g_string_append_len(s, "\xC0\x80", 2);
    } else {
        g_string_append_unichar(s, cp);
    }
    return true;
}

static bool parse_escape(Parser *ps, GString *s)
{
    static const char from[] = "\"'\\/bfnrt";
    static const char to[] = "\"'\\/\b\f\n\r\t";
    const char *hit;
    char c;

    if (ps->p >= ps->end) {
        parse_fail(ps, "premature end of input");
        return false;
    }
    c = *ps->p++;
    if (c == 'u') {
        return parse_unicode_escape(ps, s);
    }
    hit = c ? strchr(from, c) : NULL;
    if (!hit) {
        parse_fail(ps, "invalid escape sequence in string");
        return false;
    }
    g_string_append_c(s, to[hit - from]);
    return true;
}

/* Returns the unescaped string (caller frees) or NULL on error. */
static char *parse_string_raw(Parser *ps)
{
    char quote = *ps->p++;
    GString *s = g_string_new(NULL);

    while (ps->p < ps->end && *ps->p != quote) {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) {
            parse_fail(ps, "control character in string");
            break;
        }
        ps->p++;
        if (c == '\\') {
            if (!parse_escape(ps, s)) {
                break;
            }
        } else {
            g_string_append_c(s, (char)c);
        }
    }
    if (!ps->err && ps->p >= ps->end) {
        parse_fail(ps, "premature end of input");
    }
    if (ps->err) {
        g_string_free(s, TRUE);
        return NULL;
    }
    ps->p++;
    return g_string_free(s, FALSE);
}

static size_t scan_number(const char *p, const char *end, bool *is_float)
{
    const char *q = p;

    *is_float = false;
    if (q < end && *q == '-') {
        q++;
    }
    if (q < end && *q == '0') {
        q++;
    } else if (q < end && *q >= '1' && *q <= '9') {
        while (q < end && g_ascii_isdigit(*q)) {
            q++;
        }
    } else {
        return 0;
    }
    if (q < end && *q == '.') {
        *is_float = true;
        if (++q >= end || !g_ascii_isdigit(*q)) {
            return 0;
        }
        while (q < end && g_ascii_isdigit(*q)) {
            q++;
        }
    }
    if (q < end && (*q == 'e' || *q == 'E')) {
        *is_float = true;
        q++;
        if (q < end && (*q == '+' || *q == '-')) {
            q++;
        }
        if (q >= end || !g_ascii_isdigit(*q)) {
            return 0;
        }
        while (q < end && g_ascii_isdigit(*q)) {
            q++;
        }
    }
    return q - p;
}

static JsonNode *number_node(const char *tok, bool is_float)
{
    JsonNode *n = json_node_new(JSON_NODE_VALUE);

    if (!is_float) {
        gint64 v;
        errno = 0;
        v = g_ascii_strtoll(tok, NULL, 10);
        if (errno == 0) {
            json_node_set_int(n, v);
            return n;
        }
        /* Beyond 64 bits: QEMU degrades to a double too (after uint64). */
    }
    json_node_set_double(n, g_ascii_strtod(tok, NULL));
    return n;
}

static JsonNode *parse_scalar(Parser *ps)
{
    const char *start = ps->p;
    size_t n, len = 0;
    bool is_float;
    char *tok;
    JsonNode *node = NULL;

    while (start + len < ps->end && (g_ascii_isalnum(start[len]) || start[len] == '+' ||
                                     start[len] == '-' || start[len] == '.')) {
        len++;
    }
    if (len == 0) {
        parse_fail(ps, "expecting value");
        return NULL;
    }
    tok = g_strndup(start, len);
    ps->p += len;
    n = scan_number(start, start + len, &is_float);
    if (n == len) {
        node = number_node(tok, is_float);
    } else if (!strcmp(tok, "true") || !strcmp(tok, "false")) {
        node = json_node_init_boolean(json_node_alloc(), tok[0] == 't');
    } else if (!strcmp(tok, "null")) {
        node = json_node_new(JSON_NODE_NULL);
    } else if (g_ascii_isdigit(tok[0]) || tok[0] == '-' || tok[0] == '+' || tok[0] == '.') {
        parse_fail(ps, "invalid number '%s'", tok);
    } else {
        parse_fail(ps, "invalid keyword '%s'", tok);
    }
    g_free(tok);
    return node;
}

static bool parse_member(Parser *ps, JsonObject *obj)
{
    char *key;
    JsonNode *val;

    skip_ws(ps);
    if (ps->p >= ps->end || (*ps->p != '"' && *ps->p != '\'')) {
        parse_fail(ps, ps->p < ps->end && *ps->p == '}' ? "expecting value"
                                                        : "key is not a string in object");
        return false;
    }
    key = parse_string_raw(ps);
    if (!key) {
        return false;
    }
    skip_ws(ps);
    if (ps->p >= ps->end || *ps->p != ':') {
        parse_fail(ps, "missing : in object pair");
        g_free(key);
        return false;
    }
    ps->p++;
    val = parse_value(ps);
    if (val && json_object_has_member(obj, key)) {
        parse_fail(ps, "duplicate key");
        json_node_unref(val);
        val = NULL;
    }
    if (val) {
        json_object_set_member(obj, key, val);
    }
    g_free(key);
    return val != NULL;
}

static JsonNode *parse_object(Parser *ps)
{
    JsonObject *obj = json_object_new();

    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == '}') {
        ps->p++;
        JsonNode *n = json_node_init_object(json_node_alloc(), obj);
        json_object_unref(obj);
        return n;
    }
    for (;;) {
        if (!parse_member(ps, obj)) {
            break;
        }
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == '}') {
            ps->p++;
            JsonNode *n = json_node_init_object(json_node_alloc(), obj);
            json_object_unref(obj);
            return n;
        }
        parse_fail(ps, ps->p >= ps->end ? "premature end of input" : "expected separator in dict");
        break;
    }
    json_object_unref(obj);
    return NULL;
}

static JsonNode *parse_array(Parser *ps)
{
    JsonArray *arr = json_array_new();

    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == ']') {
        ps->p++;
        JsonNode *n = json_node_init_array(json_node_alloc(), arr);
        json_array_unref(arr);
        return n;
    }
    for (;;) {
        JsonNode *v = parse_value(ps);
        if (!v) {
            break;
        }
        json_array_add_element(arr, v);
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            continue;
        }
        if (ps->p < ps->end && *ps->p == ']') {
            ps->p++;
            JsonNode *n = json_node_init_array(json_node_alloc(), arr);
            json_array_unref(arr);
            return n;
        }
        parse_fail(ps, ps->p >= ps->end ? "premature end of input" : "expected separator in list");
        break;
    }
    json_array_unref(arr);
    return NULL;
}

static JsonNode *parse_value(Parser *ps)
{
    JsonNode *n;
    char *s;

    skip_ws(ps);
    if (ps->p >= ps->end) {
        parse_fail(ps, "expecting value");
        return NULL;
    }
    switch (*ps->p) {
    case '{':
    case '[':
        if (++ps->depth > QMP_MAX_DEPTH) {
            parse_fail(ps, "nesting depth limit exceeded");
            return NULL;
        }
        n = *ps->p == '{' ? parse_object(ps) : parse_array(ps);
        ps->depth--;
        return n;
    case '"':
    case '\'':
        s = parse_string_raw(ps);
        if (!s) {
            return NULL;
        }
        n = json_node_new(JSON_NODE_VALUE);
        json_node_set_string(n, s);
        g_free(s);
        return n;
    default:
        return parse_scalar(ps);
    }
}

/* Context: monitor thread */
JsonNode *qmp_json_parse(const char *text, size_t len, GError **errp)
{
    Parser ps = {.p = text, .end = text + len};
    JsonNode *root;

    if (!g_utf8_validate(text, (gssize)len, NULL)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "JSON parse error, invalid UTF-8 sequence in string");
        return NULL;
    }
    root = parse_value(&ps);
    if (root) {
        skip_ws(&ps);
        if (ps.p < ps.end) {
            parse_fail(&ps, "expecting end of input");
            json_node_unref(root);
            root = NULL;
        }
    }
    if (!root) {
        g_propagate_error(errp, ps.err);
    }
    return root;
}
