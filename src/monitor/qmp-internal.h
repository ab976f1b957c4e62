/*
 * Internal interfaces of the QMP server library (src/monitor only).
 */
#ifndef VBLK_MONITOR_QMP_INTERNAL_H
#define VBLK_MONITOR_QMP_INTERNAL_H

#include "monitor/qmp.h"

/* Limits (documented in docs/qmp.md). */
#define QMP_MAX_MSG_SIZE (8u << 20)  /* one JSON input, bytes */
#define QMP_MAX_DEPTH    1024        /* nesting of {} and [] */
#define QMP_MAX_OUTBUF   (16u << 20) /* unread output before a client is dropped */
#define QMP_MAX_CLIENTS  64          /* per monitor */
#define QMP_QEMU_MAJOR   7
#define QMP_QEMU_MINOR   2
#define QMP_QEMU_MICRO   0

/* ---- json-stream.c: splits a byte stream into JSON texts ---------------- */

typedef enum {
    JSON_STREAM_NEED_MORE, /* all input consumed, no complete text yet */
    JSON_STREAM_MESSAGE,   /* json_stream_text() holds one complete text */
    JSON_STREAM_ERROR,     /* lexical/limit error; message in *err */
} JsonStreamEvent;

typedef struct JsonStream {
    GString *buf;      /* the text being collected */
    GByteArray *stack; /* open '{' / '[' */
    int state;
    char quote;
    bool escape;
} JsonStream;

void json_stream_init(JsonStream *js);
void json_stream_destroy(JsonStream *js);
/*
 * Feed up to @len bytes; returns how many were consumed before stopping at
 * an event.  On JSON_STREAM_ERROR *err is set (caller frees); on
 * JSON_STREAM_MESSAGE the text stays in json_stream_text() until the next feed.
 */
size_t json_stream_feed(JsonStream *js, const char *data, size_t len, JsonStreamEvent *ev,
                        char **err);
const char *json_stream_text(JsonStream *js, size_t *len);

/* ---- json-parse.c / json-write.c ------------------------------------- */

/* Strict JSON (plus QEMU's single-quoted strings) -> JsonNode; desc in errp. */
JsonNode *qmp_json_parse(const char *text, size_t len, GError **errp);
/* Serialize as QEMU does: ", " and ": " separators, \uXXXX for non-ASCII. */
void qmp_json_write(GString *out, JsonNode *node);
char *qmp_json_to_string(JsonNode *node);

/* ---- qmp-dispatch.c ---------------------------------------------------- */

typedef struct QmpClient QmpClient;

typedef struct QmpCommand {
    char *name;
    QmpCommandFunc fn;
    QmpArgSpec *args;
    QmpCommandFlags flags;
    void *opaque;
} QmpCommand;

GMainContext *qmp_context(void);
QmpClient *qmp_request_client(QmpRequest *req);
bool qmp_in_monitor_thread(void);
void qmp_dispatch_init(void);
void qmp_dispatch_cleanup(void);
/* Registered commands in registration order (borrowed). */
GPtrArray *qmp_command_list(void);
/*
 * Handle one complete input text from @c; replies through qmp_client_send().
 * Returns true if the command was deferred (the client must pause input).
 */
bool qmp_dispatch_text(QmpClient *c, const char *text, size_t len);
/* Reply for an input the stream rejected (lexical error). */
void qmp_dispatch_stream_error(QmpClient *c, const char *desc);
JsonNode *qmp_greeting(bool oob_offered);
/*
 * Runs command @name with @args (borrowed, may be NULL) on behalf of @c (HMP,
 * human-monitor-command): the same argument checks and handler as a QMP
 * input.  @done receives the result (a "{}" object for NULL) or the error,
 * owning both: at once, or from the loop if the handler deferred, in which
 * case this returns true.
 */
typedef void (*QmpInternalDone)(JsonNode *result, GError *err, void *opaque);
bool qmp_run_internal(QmpClient *c, const char *name, JsonObject *args, QmpInternalDone done,
                      void *opaque);
JsonNode *qmp_version_node(void);

/* ---- qmp-client.c ------------------------------------------------------ */

QmpClient *qmp_client_ref(QmpClient *c);
void qmp_client_unref(QmpClient *c);
bool qmp_client_alive(QmpClient *c);
bool qmp_client_negotiated(QmpClient *c);
bool qmp_client_oob_offered(QmpClient *c);
bool qmp_client_oob_enabled(QmpClient *c);
void qmp_client_set_negotiated(QmpClient *c, bool oob);
/* Queue one JSON line (+"\r\n") and try to write it now. */
void qmp_client_send(QmpClient *c, JsonNode *msg);
/* A deferred command finished: accept input again. */
void qmp_client_resume(QmpClient *c);
/* Queue raw bytes (HMP text) and try to write them now. */
void qmp_client_write(QmpClient *c, const char *buf, size_t len);
/* Send @line (already serialized, with \r\n) to every negotiated client. */
void qmp_clients_broadcast(const char *line);
void qmp_monitors_close_all(void);
void qmp_monitors_flush(int timeout_ms);

/* ---- qmp-chardev.c ---------------------------------------------------- */

void qmp_chardevs_cleanup(void);
/* Listening socket for @opts; -1 with errp set on failure. */
int qmp_chardev_listen(const QmpChardevOpts *opts, GError **errp);

/* ---- hmp.c: the human monitor ------------------------------------------ */

typedef struct HmpSession HmpSession;

/* One HMP connection's line editor; writes the banner and prompt unless @mux. */
HmpSession *hmp_session_new(QmpClient *c, bool telnet, bool mux);
void hmp_session_free(HmpSession *s);
/*
 * Feed input bytes; returns how many were consumed.  Stops after a command
 * whose reply is deferred (*busy = true); the session resumes the client
 * with qmp_client_resume() when it is done.
 */
size_t hmp_session_feed(HmpSession *s, const uint8_t *data, size_t len, bool *busy);
void hmp_commands_register(void);

/* ---- qmp-commands.c / qom.c ------------------------------------------- */

void qmp_commands_register(void);
void qmp_commands_cleanup(void);
void qom_init(void);
void qom_commands_register(void);
void qom_cleanup(void);

/* ---- qmp-schema.c ------------------------------------------------------ */

JsonNode *qmp_schema_build(void);
void qmp_schema_cleanup(void);

/* Generic argument checks in QEMU's words, shared with qom-set. */
bool qmp_check_arg_type(const char *name, JsonNode *value, QmpArgType type, GError **errp);

#endif /* VBLK_MONITOR_QMP_INTERNAL_H */
