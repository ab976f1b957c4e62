/*
 * QMP server library: QEMU-compatible monitor protocol on a GMainContext.
 *
 * Threading rule (see docs/qmp.md): everything here runs on the thread that
 * iterates the GMainContext given to qmp_init() ("the monitor thread", the
 * VMM's main thread), except qmp_event_emit() and qmp_reply_deferred(), which
 * may be called from any thread.
 */
#ifndef VBLK_QMP_H
#define VBLK_QMP_H

#include <stdbool.h>
#include <stdint.h>
#include <glib.h>
#include <json-glib/json-glib.h>

/* ---- errors ------------------------------------------------------------ */

/* QEMU's error classes; the enum value is the GError code in QMP_ERROR. */
typedef enum {
    QMP_ERROR_GENERIC = 0,       /* "GenericError" */
    QMP_ERROR_COMMAND_NOT_FOUND, /* "CommandNotFound" */
    QMP_ERROR_DEVICE_NOT_ACTIVE, /* "DeviceNotActive" */
    QMP_ERROR_DEVICE_NOT_FOUND,  /* "DeviceNotFound" */
    QMP_ERROR_KVM_MISSING_CAP,   /* "KVMMissingCap" */
} QmpErrorClass;

#define QMP_ERROR (qmp_error_quark())
GQuark qmp_error_quark(void);

/* ---- lifecycle --------------------------------------------------------- */

/*
 * Set up the dispatcher, the generic commands and the QOM root on @ctx
 * (NULL: the global default context).  Idempotent pairs with qmp_cleanup().
 */
void qmp_init(GMainContext *ctx);
/* Close every monitor and forget every command, object and hook. */
void qmp_cleanup(void);
/* Write out pending replies/events, blocking up to @timeout_ms (e.g. before exit). */
void qmp_flush(int timeout_ms);

/* ---- monitors (transports) --------------------------------------------- */

typedef enum {
    QMP_CHR_UNIX,
    QMP_CHR_TCP,
    QMP_CHR_STDIO,
} QmpChardevKind;

typedef struct QmpChardevOpts {
    char *id; /* -chardev id=; NULL for -qmp */
    QmpChardevKind kind;
    char *path; /* unix */
    char *host; /* tcp */
    char *port; /* tcp */
    bool server;
    bool wait;   /* block in qmp_monitor_open() until the first client connects */
    bool telnet; /* tcp with telnet negotiation (-monitor telnet:...) */
} QmpChardevOpts;

typedef struct QmpMonitor QmpMonitor;

/* Option-string parsers: the raw value after -qmp / -chardev / -mon. */
bool qmp_parse_qmp_arg(const char *value, QmpChardevOpts *out, GError **errp);
bool qmp_parse_chardev_arg(const char *value, QmpChardevOpts *out, GError **errp);
void qmp_chardev_opts_clear(QmpChardevOpts *opts);

/* -qmp VALUE: parse and open a monitor now. */
QmpMonitor *qmp_monitor_add_qmp(const char *value, GError **errp);
/* -chardev VALUE: remember a chardev definition for a later -mon. */
bool qmp_chardev_add(const char *value, GError **errp);
/*
 * -monitor VALUE: the human monitor (HMP) on stdio, unix:PATH,server=on,...,
 * tcp:HOST:PORT,server=on,... or telnet:HOST:PORT,server=on,... (an empty
 * telnet host is 127.0.0.1).  "stdio" is the caller's to special-case when
 * the console shares it (qmp_monitor_open_hmp_mux).
 */
QmpMonitor *qmp_monitor_add_hmp(const char *value, GError **errp);
/*
 * HMP behind a console multiplexer: input from @rfd, where the console
 * writes the keys typed while the monitor has the focus, with NUL 'i' when
 * the monitor gets the focus and NUL 'o' when it loses it; output to @wfd.
 */
QmpMonitor *qmp_monitor_open_hmp_mux(int rfd, int wfd, GError **errp);
/* qmp_monitor_open(), as HMP when @hmp. */
QmpMonitor *qmp_monitor_open_mode(const QmpChardevOpts *opts, bool hmp, GError **errp);
/* -mon chardev=X[,mode=control|readline]: open a monitor on a defined chardev. */
QmpMonitor *qmp_monitor_add_mon(const char *value, GError **errp);
QmpMonitor *qmp_monitor_open(const QmpChardevOpts *opts, GError **errp);
void qmp_monitor_close(QmpMonitor *mon);
/* Bound TCP port (useful with port 0), or -1. */
int qmp_monitor_get_port(QmpMonitor *mon);
/* Number of connected clients (tests, diagnostics). */
unsigned qmp_monitor_client_count(QmpMonitor *mon);

/* ---- commands ---------------------------------------------------------- */

typedef enum {
    QMP_ARG_STR,
    QMP_ARG_INT,  /* JSON integer (no fraction/exponent) */
    QMP_ARG_UINT, /* JSON integer >= 0 */
    QMP_ARG_BOOL,
    QMP_ARG_NUMBER, /* integer or float */
    QMP_ARG_OBJECT,
    QMP_ARG_ARRAY,
    QMP_ARG_ANY,
    QMP_ARG_STR_OR_NULL,
} QmpArgType;

typedef struct QmpArgSpec {
    const char *name; /* NULL terminates the array */
    QmpArgType type;
    bool optional;
} QmpArgSpec;

/* Terminator of a QmpArgSpec array. */
#define QMP_ARGS_END                                                                               \
    {                                                                                              \
        NULL, QMP_ARG_STR, false                                                                   \
    }

typedef enum {
    QMP_CMD_FLAGS_NONE = 0,
    QMP_CMD_ALLOW_OOB = 1 << 0,  /* may be sent with "exec-oob" (run in order anyway) */
    QMP_CMD_EXTRA_ARGS = 1 << 1, /* do not reject undeclared arguments */
} QmpCommandFlags;

typedef struct QmpRequest QmpRequest;   /* one command being executed */
typedef struct QmpDeferred QmpDeferred; /* token for a reply that comes later */

/*
 * A command handler.  @args holds only declared (type-checked) arguments and
 * is never NULL.  Return the result (ownership passes to the caller; NULL
 * means "{}"), or NULL with @errp set (QMP_ERROR domain for a specific
 * class), or call qmp_request_defer() and return NULL.
 */
typedef JsonNode *(*QmpCommandFunc)(QmpRequest *req, JsonObject *args, GError **errp);

/* Copies @name and @args; false if @name is already registered. */
bool qmp_register_command(const char *name, QmpCommandFunc fn, const QmpArgSpec *args,
                          QmpCommandFlags flags, void *opaque);
bool qmp_command_exists(const char *name);

/*
 * query-qmp-schema (docs/qmp.md): describe @command's arguments (NULL: from
 * its QmpArgSpec) and return type (NULL: "any") in the compact notation:
 * a builtin name ("str", "int", "bool", "number", "any", "null"; "uint32",
 * "size"... are "int"), ["T"] an array, {"m": T, "*opt": T} an object,
 * {"enum": ["a", "b"]} an enum; QEMU's single quotes are accepted. False
 * (with @errp) if a description does not parse.
 */
bool qmp_schema_describe(const char *command, const char *args, const char *ret, GError **errp);
/* Declare an event vblk emits, with its data (NULL: none) in the same notation. */
bool qmp_schema_add_event(const char *event, const char *data, GError **errp);

/*
 * Detach the reply from the handler.  The client's later commands wait (in
 * order, as in QEMU) until qmp_reply_deferred() is called on the token;
 * other clients are unaffected.  Events still flow.
 */
QmpDeferred *qmp_request_defer(QmpRequest *req);
/*
 * Complete a deferred command with @result (may be NULL = "{}") or @error
 * (takes ownership of both).  Any thread; the reply is written by the
 * monitor thread.  Must be called exactly once per token.
 */
void qmp_reply_deferred(QmpDeferred *token, JsonNode *result, GError *error);

/* ---- events ------------------------------------------------------------ */

/*
 * Broadcast {"timestamp": ..., "event": @name, "data": @data} to every
 * negotiated client.  @data (an object node or NULL) is consumed.  Any
 * thread; from the monitor thread it is queued before the current reply.
 */
void qmp_event_emit(const char *name, JsonNode *data);

/* ---- run state and machine hooks --------------------------------------- */

typedef enum {
    QMP_RUN_STATE_PRELAUNCH,
    QMP_RUN_STATE_RUNNING,
    QMP_RUN_STATE_PAUSED,
    QMP_RUN_STATE_IO_ERROR,
    QMP_RUN_STATE_INTERNAL_ERROR,
    QMP_RUN_STATE_SHUTDOWN,
    QMP_RUN_STATE_SUSPENDED,
    QMP_RUN_STATE_GUEST_PANICKED,
    QMP_RUN_STATE__MAX,
} QmpRunState;

/* Callbacks the VMM provides; any may be NULL (then only state and events change). */
typedef struct QmpMachineHooks {
    bool (*stop)(void *opaque, GError **errp);      /* pause vCPUs and devices */
    bool (*cont)(void *opaque, GError **errp);      /* resume (resubmit parked I/O) */
    bool (*powerdown)(void *opaque, GError **errp); /* ACPI power button */
    bool (*reset)(void *opaque, GError **errp);     /* system reset */
    void (*quit)(void *opaque);                     /* runs after the reply is flushed */
    void *opaque;
} QmpMachineHooks;

void qmp_machine_set_hooks(const QmpMachineHooks *hooks);
QmpRunState qmp_run_state_get(void);
/* The run state's query-status name. Context: any thread (diagnostics; may be a moment old) */
const char *qmp_run_state_peek_name(void);
/* Plain state change (no hook, no event), e.g. prelaunch -> running at start. */
void qmp_run_state_set(QmpRunState state);
/* Stop the VM as "stop" does, ending in @state (paused, io-error, ...); STOP event. */
bool qmp_vm_stop(QmpRunState state, GError **errp);
/*
 * Ask for qmp_vm_stop(@state) from the main loop, soon, as QEMU's
 * qemu_system_vmstop_request(): for callers that must not pause the VM
 * themselves (pausing drops the BQL), e.g. a werror=stop failure inside a
 * completion callback. Only a running VM gets one; any number of calls before
 * it runs make one stop; `cont` before it runs cancels it.
 */
void qmp_vm_stop_request(QmpRunState state);
/* "cont": resume the VM (the machine's cont hook: vCPUs, parked I/O); RESUME event. */
bool qmp_vm_cont(GError **errp);
/* Events with QEMU's data shape, for guest-initiated transitions. */
void qmp_emit_shutdown(bool guest, const char *reason);
void qmp_emit_reset(bool guest, const char *reason);

/* ---- QOM property registry --------------------------------------------- */

/* @value is owned by the caller. @req is NULL when not called from qom-set. */
typedef JsonNode *(*QomGetter)(const char *path, const char *name, void *opaque, GError **errp);
typedef bool (*QomSetter)(const char *path, const char *name, JsonNode *value, QmpRequest *req,
                          void *opaque, GError **errp);

/*
 * Create @path (absolute, e.g. "/machine/peripheral/disk0") with QOM type
 * @type_name; missing parents become "container" objects.
 */
bool qom_add_object(const char *path, const char *type_name, GError **errp);
/* Remove @path and its children. */
bool qom_del_object(const char *path);
/*
 * @type is QOM's type string ("bool", "int", "uint64", "string", ...); for
 * bool/int/uint*\/string qom-set checks the value's JSON type generically.
 * A NULL @get or @set makes the property write-only / read-only.
 */
bool qom_add_property(const char *path, const char *name, const char *type, QomGetter get,
                      QomSetter set, void *opaque, GError **errp);

#endif /* VBLK_QMP_H */
