/*
 * Streaming JSON splitter: finds where each top-level JSON text ends in a
 * byte stream that arrives in arbitrary pieces.  It lexes only as much as
 * framing needs (strings, escapes, nesting); json-parse.c does the real
 * grammar check on each complete text.
 *
 * Error recovery follows QEMU's lexer: after a lexical error, input is
 * skipped up to the next structural character ({ } [ ]), control character
 * or 0xFE/0xFF, so a client can always resynchronise with a newline.
 */
#include <string.h>
#include "qmp-internal.h"

enum {
    ST_START,    /* between tokens */
    ST_STRING,   /* inside "..." or '...' */
    ST_SCALAR,   /* inside a number or keyword */
    ST_RECOVERY, /* skipping garbage after an error */
    ST_DELIVERED /* a complete text is waiting to be picked up */
};

/* Context: monitor thread */
void json_stream_init(JsonStream *js)
{
    js->buf = g_string_new(NULL);
    js->stack = g_byte_array_new();
    js->state = ST_START;
    js->quote = 0;
    js->escape = false;
}

/* Context: monitor thread */
void json_stream_destroy(JsonStream *js)
{
    g_string_free(js->buf, TRUE);
    g_byte_array_free(js->stack, TRUE);
    js->buf = NULL;
    js->stack = NULL;
}

/* Context: monitor thread */
const char *json_stream_text(JsonStream *js, size_t *len)
{
    *len = js->buf->len;
    return js->buf->str;
}

static void stream_reset_text(JsonStream *js)
{
    g_string_truncate(js->buf, 0);
    g_byte_array_set_size(js->stack, 0);
    js->escape = false;
}

static bool is_scalar_char(unsigned char c)
{
    return g_ascii_isalnum(c) || c == '+' || c == '-' || c == '.';
}

static bool is_resync_char(unsigned char c)
{
    return c == '{' || c == '}' || c == '[' || c == ']' || (c < 0x20 && c != '\t') || c >= 0xFE;
}

static char *stray_error(unsigned char c)
{
    if (g_ascii_isprint(c)) {
        return g_strdup_printf("JSON parse error, stray '%c'", c);
    }
    return g_strdup_printf("JSON parse error, stray '\\x%02x'", c);
}

/* Returns true when the closing bracket ends the current top-level text. */
static bool stream_close(JsonStream *js, unsigned char c)
{
    guint n = js->stack->len;
    unsigned char open = c == '}' ? '{' : '[';

    if (n == 0 || js->stack->data[n - 1] != open) {
        /* Unbalanced: hand it to the parser now so it reports the error. */
        return true;
    }
    g_byte_array_set_size(js->stack, n - 1);
    return n == 1;
}

typedef enum { STEP_MORE, STEP_DONE, STEP_DONE_UNCONSUMED, STEP_ERROR, STEP_AGAIN } Step;

static Step stream_step_start(JsonStream *js, unsigned char c, char **err)
{
    if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        if (js->buf->len) {
            g_string_append_c(js->buf, c);
        }
        return STEP_MORE;
    }
    if (c < 0x20 || c >= 0xFE) {
        /* Deliberate reset byte: only an error if a text was in progress. */
        if (!js->buf->len) {
            return STEP_MORE;
        }
        *err = stray_error(c);
        return STEP_ERROR;
    }
    g_string_append_c(js->buf, c);
    if (c == '"' || c == '\'') {
        js->state = ST_STRING;
        js->quote = c;
        return STEP_MORE;
    }
    if (c == '{' || c == '[') {
        if (js->stack->len >= QMP_MAX_DEPTH) {
            *err = g_strdup("JSON parse error, nesting depth limit exceeded");
            return STEP_ERROR;
        }
        g_byte_array_append(js->stack, &c, 1);
        return STEP_MORE;
    }
    if (c == '}' || c == ']') {
        return stream_close(js, c) ? STEP_DONE : STEP_MORE;
    }
    if (c == ',' || c == ':') {
        return js->stack->len ? STEP_MORE : STEP_DONE;
    }
    if (is_scalar_char(c)) {
        js->state = ST_SCALAR;
        return STEP_MORE;
    }
    *err = stray_error(c);
    return STEP_ERROR;
}

static Step stream_step_string(JsonStream *js, unsigned char c, char **err)
{
    if (c < 0x20 || c >= 0xFE) {
        *err = g_strdup("JSON parse error, control character or invalid byte in string");
        js->state = ST_START;
        return STEP_ERROR;
    }
    g_string_append_c(js->buf, c);
    if (js->escape) {
        js->escape = false;
    } else if (c == '\\') {
        js->escape = true;
    } else if (c == (unsigned char)js->quote) {
        js->state = ST_START;
        return js->stack->len ? STEP_MORE : STEP_DONE;
    }
    return STEP_MORE;
}

static Step stream_step(JsonStream *js, unsigned char c, char **err)
{
    switch (js->state) {
    case ST_RECOVERY:
        if (!is_resync_char(c)) {
            return STEP_MORE;
        }
        js->state = ST_START;
        return STEP_AGAIN;
    case ST_STRING:
        return stream_step_string(js, c, err);
    case ST_SCALAR:
        if (is_scalar_char(c)) {
            g_string_append_c(js->buf, c);
            return STEP_MORE;
        }
        js->state = ST_START;
        return js->stack->len ? STEP_AGAIN : STEP_DONE_UNCONSUMED;
    default:
        return stream_step_start(js, c, err);
    }
}

/* Context: monitor thread */
size_t json_stream_feed(JsonStream *js, const char *data, size_t len, JsonStreamEvent *ev,
                        char **err)
{
    size_t i = 0;

    if (js->state == ST_DELIVERED) {
        stream_reset_text(js);
        js->state = ST_START;
    }
    *err = NULL;
    while (i < len) {
        Step s = stream_step(js, (unsigned char)data[i], err);

        if (s == STEP_AGAIN) {
            continue;
        }
        if (s == STEP_ERROR) {
            /* A control byte is itself the resync point; anything else skips on. */
            if (js->state != ST_START || !is_resync_char((unsigned char)data[i])) {
                js->state = ST_RECOVERY;
            }
            stream_reset_text(js);
            *ev = JSON_STREAM_ERROR;
            return i + 1;
        }
        if (s == STEP_DONE || s == STEP_DONE_UNCONSUMED) {
            js->state = ST_DELIVERED;
            *ev = JSON_STREAM_MESSAGE;
            return s == STEP_DONE ? i + 1 : i;
        }
        i++;
        if (js->buf->len > QMP_MAX_MSG_SIZE) {
            *err = g_strdup("JSON parse error, input size limit exceeded");
            stream_reset_text(js);
            js->state = ST_RECOVERY;
            *ev = JSON_STREAM_ERROR;
            return i;
        }
    }
    *ev = JSON_STREAM_NEED_MORE;
    return i;
}
