/*
 * query-qmp-schema: QEMU's SchemaInfo list for exactly the commands and
 * events vblk has. Argument objects come from each command's QmpArgSpec,
 * unless its owner described them; return types and event data are
 * described by their owners in a compact notation (docs/qmp.md,
 * "query-qmp-schema"). As in QEMU, the object, enum and array types get
 * masked names: numbers in order of first use, "0" the empty object, "[N]"
 * an array of N; the builtins keep their names.
 */
#include <string.h>
#include "qmp-internal.h"

typedef struct SchemaDesc {
    char *name;
    char *args; /* NULL: from the QmpArgSpec */
    char *ret;  /* NULL: "any" */
} SchemaDesc;

typedef struct SchemaEvent {
    char *name;
    char *data; /* NULL: no data */
} SchemaEvent;

static GHashTable *descs; /* command name -> SchemaDesc */
static GPtrArray *events; /* SchemaEvent, in declaration order */

static void desc_free(gpointer p)
{
    SchemaDesc *d = p;

    g_free(d->name);
    g_free(d->args);
    g_free(d->ret);
    g_free(d);
}

static void event_free(gpointer p)
{
    SchemaEvent *e = p;

    g_free(e->name);
    g_free(e->data);
    g_free(e);
}

/* The notation must parse (single quotes allowed): a mistake is the caller's bug. */
static bool desc_valid(const char *desc, GError **errp)
{
    JsonNode *n;

    if (!desc) {
        return true;
    }
    n = qmp_json_parse(desc, strlen(desc), errp);
    if (!n) {
        g_prefix_error(errp, "schema description '%s': ", desc);
        return false;
    }
    json_node_unref(n);
    return true;
}

/* Context: monitor thread */
bool qmp_schema_describe(const char *command, const char *args, const char *ret, GError **errp)
{
    SchemaDesc *d;

    if (!desc_valid(args, errp) || !desc_valid(ret, errp)) {
        return false;
    }
    if (!descs) {
        descs = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, desc_free);
    }
    d = g_new0(SchemaDesc, 1);
    d->name = g_strdup(command);
    d->args = g_strdup(args);
    d->ret = g_strdup(ret);
    g_hash_table_replace(descs, d->name, d);
    return true;
}

/* Context: monitor thread */
bool qmp_schema_add_event(const char *event, const char *data, GError **errp)
{
    SchemaEvent *e;

    if (!desc_valid(data, errp)) {
        return false;
    }
    if (!events) {
        events = g_ptr_array_new_with_free_func(event_free);
    }
    for (guint i = 0; i < events->len; i++) {
        e = events->pdata[i];
        if (!strcmp(e->name, event)) {
            g_free(e->data);
            e->data = g_strdup(data);
            return true;
        }
    }
    e = g_new0(SchemaEvent, 1);
    e->name = g_strdup(event);
    e->data = g_strdup(data);
    g_ptr_array_add(events, e);
    return true;
}

/* Context: monitor thread */
void qmp_schema_cleanup(void)
{
    g_clear_pointer(&descs, g_hash_table_destroy);
    g_clear_pointer(&events, g_ptr_array_unref);
}

/* ---- generation ---------------------------------------------------------- */

typedef struct Gen {
    GHashTable *names; /* canonical form -> masked name */
    JsonArray *types;  /* SchemaInfo of the object/enum/array types, in number order */
    unsigned next;
} Gen;

static const char *builtin(const char *t)
{
    static const char *const ints[] = {"int",    "int8",   "int16",  "int32", "int64", "uint8",
                                       "uint16", "uint32", "uint64", "size",  "uint"};

    for (size_t i = 0; i < G_N_ELEMENTS(ints); i++) {
        if (!strcmp(t, ints[i])) {
            return "int";
        }
    }
    /* Static strings: @t dies with its description node (a bare 'str' return type). */
    static const char *const others[] = {"str", "bool", "number", "null"};

    for (size_t i = 0; i < G_N_ELEMENTS(others); i++) {
        if (!strcmp(t, others[i])) {
            return others[i];
        }
    }
    return "any";
}

static const char *type_of(Gen *g, JsonNode *desc);

/* Look up or number the type whose canonical form is @key; @info gets its name. */
static const char *intern(Gen *g, char *key, JsonObject *info, bool masked, const char *name)
{
    const char *have = g_hash_table_lookup(g->names, key);
    char *n;

    if (have) {
        g_free(key);
        json_object_unref(info);
        return have;
    }
    n = masked ? g_strdup_printf("%u", g->next++) : g_strdup(name);
    g_hash_table_insert(g->names, key, n);
    json_object_set_string_member(info, "name", n);
    json_array_add_object_element(g->types, info);
    return n;
}

static const char *enum_type(Gen *g, JsonArray *values)
{
    JsonObject *info = json_object_new();
    JsonArray *members = json_array_new(), *vals = json_array_new();
    GString *key = g_string_new("enum");

    for (guint i = 0; i < json_array_get_length(values); i++) {
        const char *v = json_array_get_string_element(values, i);
        JsonObject *m = json_object_new();

        json_object_set_string_member(m, "name", v);
        json_array_add_object_element(members, m);
        json_array_add_string_element(vals, v);
        g_string_append_printf(key, ":%s", v);
    }
    json_object_set_array_member(info, "members", members);
    json_object_set_string_member(info, "meta-type", "enum");
    json_object_set_array_member(info, "values", vals);
    return intern(g, g_string_free(key, FALSE), info, true, NULL);
}

static const char *array_type(Gen *g, JsonNode *elem)
{
    const char *et = type_of(g, elem);
    g_autofree char *name = g_strdup_printf("[%s]", et);
    JsonObject *info = json_object_new();

    json_object_set_string_member(info, "element-type", et);
    json_object_set_string_member(info, "meta-type", "array");
    return intern(g, g_strdup(name), info, false, name);
}

/* @members: (name, optional, type) triples already resolved. */
static const char *object_type(Gen *g, JsonArray *members, GString *key)
{
    JsonObject *info = json_object_new();

    json_object_set_array_member(info, "members", members);
    json_object_set_string_member(info, "meta-type", "object");
    return intern(g, g_string_free(key, FALSE), info, true, NULL);
}

static void add_member(JsonArray *members, GString *key, const char *name, bool optional,
                       const char *type)
{
    JsonObject *m = json_object_new();

    json_object_set_string_member(m, "name", name);
    if (optional) {
        json_object_set_null_member(m, "default");
    }
    json_object_set_string_member(m, "type", type);
    json_array_add_object_element(members, m);
    g_string_append_printf(key, "%s%s:%s,", optional ? "*" : "", name, type);
}

static const char *type_of(Gen *g, JsonNode *desc)
{
    if (JSON_NODE_HOLDS_VALUE(desc) && json_node_get_value_type(desc) == G_TYPE_STRING) {
        return builtin(json_node_get_string(desc));
    }
    if (JSON_NODE_HOLDS_ARRAY(desc) && json_array_get_length(json_node_get_array(desc)) == 1) {
        return array_type(g, json_array_get_element(json_node_get_array(desc), 0));
    }
    if (JSON_NODE_HOLDS_OBJECT(desc)) {
        JsonObject *o = json_node_get_object(desc);
        GList *names = json_object_get_members(o); /* in the description's order */
        JsonArray *members;
        GString *key;

        if (json_object_get_size(o) == 1 && json_object_has_member(o, "enum") &&
            JSON_NODE_HOLDS_ARRAY(json_object_get_member(o, "enum"))) {
            g_list_free(names);
            return enum_type(g, json_object_get_array_member(o, "enum"));
        }
        members = json_array_new();
        key = g_string_new("object:");
        for (GList *l = names; l; l = l->next) {
            const char *n = l->data;
            bool opt = n[0] == '*';
            const char *t = type_of(g, json_object_get_member(o, n));

            add_member(members, key, opt ? n + 1 : n, opt, t);
        }
        g_list_free(names);
        return object_type(g, members, key);
    }
    return "any";
}

static const char *type_of_text(Gen *g, const char *text)
{
    JsonNode *n = qmp_json_parse(text, strlen(text), NULL);
    const char *t = n ? type_of(g, n) : "any";

    if (n) {
        json_node_unref(n);
    }
    return t;
}

static const char *arg_spec_type(QmpArgType t)
{
    static const char *const names[] = {
        [QMP_ARG_STR] = "str",   [QMP_ARG_INT] = "int",       [QMP_ARG_UINT] = "int",
        [QMP_ARG_BOOL] = "bool", [QMP_ARG_NUMBER] = "number", [QMP_ARG_OBJECT] = "any",
        [QMP_ARG_ARRAY] = "any", [QMP_ARG_ANY] = "any",       [QMP_ARG_STR_OR_NULL] = "any",
    };
    return (unsigned)t < G_N_ELEMENTS(names) ? names[t] : "any";
}

static const char *args_type(Gen *g, QmpCommand *cmd, SchemaDesc *d)
{
    JsonArray *members;
    GString *key;

    if (d && d->args) {
        return type_of_text(g, d->args);
    }
    members = json_array_new();
    key = g_string_new("object:");
    for (QmpArgSpec *a = cmd->args; a && a->name; a++) {
        add_member(members, key, a->name, a->optional, arg_spec_type(a->type));
    }
    return object_type(g, members, key);
}

static void add_builtins(JsonArray *arr)
{
    static const char *const b[][2] = {
        {"str", "string"}, {"any", "value"}, {"bool", "boolean"},
        {"int", "int"},    {"null", "null"}, {"number", "number"},
    };

    for (size_t i = 0; i < G_N_ELEMENTS(b); i++) {
        JsonObject *o = json_object_new();

        json_object_set_string_member(o, "name", b[i][0]);
        json_object_set_string_member(o, "json-type", b[i][1]);
        json_object_set_string_member(o, "meta-type", "builtin");
        json_array_add_object_element(arr, o);
    }
}

/* Context: monitor thread */
JsonNode *qmp_schema_build(void)
{
    GPtrArray *cmds = qmp_command_list();
    Gen g = {.names = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, g_free),
             .types = json_array_new()};
    JsonArray *out = json_array_new();
    JsonNode *n;

    /* "0": the empty object, the arguments of most commands. */
    object_type(&g, json_array_new(), g_string_new("object:"));
    for (guint i = 0; i < cmds->len; i++) {
        QmpCommand *cmd = cmds->pdata[i];
        SchemaDesc *d = descs ? g_hash_table_lookup(descs, cmd->name) : NULL;
        JsonObject *o = json_object_new();

        json_object_set_string_member(o, "name", cmd->name);
        json_object_set_string_member(o, "meta-type", "command");
        json_object_set_string_member(o, "arg-type", args_type(&g, cmd, d));
        json_object_set_string_member(o, "ret-type",
                                      d && d->ret ? type_of_text(&g, d->ret) : "any");
        if (cmd->flags & QMP_CMD_ALLOW_OOB) {
            json_object_set_boolean_member(o, "allow-oob", true);
        }
        json_array_add_object_element(out, o);
    }
    for (guint i = 0; events && i < events->len; i++) {
        SchemaEvent *e = events->pdata[i];
        JsonObject *o = json_object_new();

        json_object_set_string_member(o, "name", e->name);
        json_object_set_string_member(o, "meta-type", "event");
        json_object_set_string_member(o, "arg-type", e->data ? type_of_text(&g, e->data) : "0");
        json_array_add_object_element(out, o);
    }
    for (guint i = 0; i < json_array_get_length(g.types); i++) {
        json_array_add_element(out, json_node_copy(json_array_get_element(g.types, i)));
    }
    add_builtins(out);
    json_array_unref(g.types);
    g_hash_table_destroy(g.names);
    n = json_node_init_array(json_node_alloc(), out);
    json_array_unref(out);
    return n;
}
