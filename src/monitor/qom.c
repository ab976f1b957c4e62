/*
 * A tiny QOM-shaped property registry and the qom-list / qom-get / qom-set
 * commands over it.  Objects are named by absolute path; every object has a
 * read-only "type" property and a child<T> property per child, as in QEMU.
 * The VMM attaches typed properties with getter/setter callbacks.
 */
#include <string.h>
#include "qmp-internal.h"

typedef struct QomProp {
    char *name;
    char *type;
    QomGetter get;
    QomSetter set;
    void *opaque;
} QomProp;

typedef struct QomObject {
    char *path;
    char *name; /* last path component; "" for the root */
    char *type;
    struct QomObject *parent;
    GPtrArray *props;    /* QomProp */
    GPtrArray *children; /* QomObject, not owned */
} QomObject;

static GHashTable *qom_objects; /* path -> QomObject (owned) */

static void prop_free(gpointer p)
{
    QomProp *prop = p;

    g_free(prop->name);
    g_free(prop->type);
    g_free(prop);
}

static void object_free(gpointer p)
{
    QomObject *o = p;

    g_free(o->path);
    g_free(o->name);
    g_free(o->type);
    g_ptr_array_unref(o->props);
    g_ptr_array_unref(o->children);
    g_free(o);
}

static QomObject *object_new(QomObject *parent, const char *path, const char *name,
                             const char *type)
{
    QomObject *o = g_new0(QomObject, 1);

    o->path = g_strdup(path);
    o->name = g_strdup(name);
    o->type = g_strdup(type);
    o->parent = parent;
    o->props = g_ptr_array_new_with_free_func(prop_free);
    o->children = g_ptr_array_new();
    if (parent) {
        g_ptr_array_add(parent->children, o);
    }
    g_hash_table_insert(qom_objects, o->path, o);
    return o;
}

/* Context: monitor thread */
void qom_init(void)
{
    qom_objects = g_hash_table_new_full(g_str_hash, g_str_equal, NULL, object_free);
    object_new(NULL, "/", "", "container");
}

/* Context: monitor thread */
void qom_cleanup(void)
{
    g_clear_pointer(&qom_objects, g_hash_table_destroy);
}

static char *child_path(QomObject *parent, const char *name)
{
    return parent->parent ? g_strconcat(parent->path, "/", name, NULL)
                          : g_strconcat("/", name, NULL);
}

/* Context: monitor thread */
bool qom_add_object(const char *path, const char *type_name, GError **errp)
{
    g_auto(GStrv) parts = NULL;
    QomObject *cur;
    guint n;

    g_return_val_if_fail(qom_objects && path && type_name, false);
    if (path[0] != '/' || g_hash_table_contains(qom_objects, path)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Cannot create object at '%s'", path);
        return false;
    }
    parts = g_strsplit(path + 1, "/", -1);
    n = g_strv_length(parts);
    cur = g_hash_table_lookup(qom_objects, "/");
    for (guint i = 0; i < n; i++) {
        g_autofree char *p = NULL;
        QomObject *next;

        if (!parts[i][0]) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Invalid object path '%s'", path);
            return false;
        }
        p = child_path(cur, parts[i]);
        next = g_hash_table_lookup(qom_objects, p);
        if (!next) {
            next = object_new(cur, p, parts[i], i + 1 == n ? type_name : "container");
        }
        cur = next;
    }
    return true;
}

static void object_del_tree(QomObject *o)
{
    while (o->children->len) {
        object_del_tree(g_ptr_array_index(o->children, o->children->len - 1));
    }
    if (o->parent) {
        g_ptr_array_remove(o->parent->children, o);
    }
    g_hash_table_remove(qom_objects, o->path);
}

/* Context: monitor thread */
bool qom_del_object(const char *path)
{
    QomObject *o = qom_objects ? g_hash_table_lookup(qom_objects, path) : NULL;

    if (!o || !o->parent) {
        return false;
    }
    object_del_tree(o);
    return true;
}

static QomProp *find_prop(QomObject *o, const char *name)
{
    for (guint i = 0; i < o->props->len; i++) {
        QomProp *p = g_ptr_array_index(o->props, i);
        if (!strcmp(p->name, name)) {
            return p;
        }
    }
    return NULL;
}

static QomObject *find_child(QomObject *o, const char *name)
{
    for (guint i = 0; i < o->children->len; i++) {
        QomObject *c = g_ptr_array_index(o->children, i);
        if (!strcmp(c->name, name)) {
            return c;
        }
    }
    return NULL;
}

/* Context: monitor thread */
bool qom_add_property(const char *path, const char *name, const char *type, QomGetter get,
                      QomSetter set, void *opaque, GError **errp)
{
    QomObject *o = qom_objects ? g_hash_table_lookup(qom_objects, path) : NULL;
    QomProp *p;

    if (!o) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_FOUND, "Device '%s' not found", path);
        return false;
    }
    if (!strcmp(name, "type") || find_prop(o, name) || find_child(o, name)) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                    "attempt to add duplicate property '%s' to object (type '%s')", name, o->type);
        return false;
    }
    p = g_new0(QomProp, 1);
    p->name = g_strdup(name);
    p->type = g_strdup(type);
    p->get = get;
    p->set = set;
    p->opaque = opaque;
    g_ptr_array_add(o->props, p);
    return true;
}

/* ---- path resolution ----------------------------------------------------- */

/* QEMU also accepts a partial path that names exactly one object. */
static QomObject *resolve_path(const char *path, GError **errp)
{
    GHashTableIter it;
    gpointer key, val;
    QomObject *found = NULL;
    g_autofree char *suffix = NULL;
    int hits = 0;

    if (path[0] == '/') {
        found = g_hash_table_lookup(qom_objects, path);
    } else if (path[0]) {
        suffix = g_strconcat("/", path, NULL);
        g_hash_table_iter_init(&it, qom_objects);
        while (g_hash_table_iter_next(&it, &key, &val)) {
            if (g_str_has_suffix(key, suffix)) {
                found = val;
                hits++;
            }
        }
        if (hits > 1) {
            g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC,
                        "Path '%s' does not uniquely identify an object", path);
            return NULL;
        }
    }
    if (!found) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_DEVICE_NOT_FOUND, "Device '%s' not found", path);
    }
    return found;
}

static void prop_not_found(QomObject *o, const char *name, GError **errp)
{
    g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Property '%s.%s' not found", o->type, name);
}

/* ---- commands ------------------------------------------------------------ */

static void list_add(JsonArray *arr, const char *name, const char *type)
{
    JsonObject *e = json_object_new();

    json_object_set_string_member(e, "name", name);
    json_object_set_string_member(e, "type", type);
    json_array_add_object_element(arr, e);
}

static JsonNode *cmd_qom_list(QmpRequest *req, JsonObject *args, GError **errp)
{
    QomObject *o = resolve_path(json_object_get_string_member(args, "path"), errp);
    JsonArray *arr;
    JsonNode *n;

    if (!o) {
        return NULL;
    }
    arr = json_array_new();
    list_add(arr, "type", "string");
    for (guint i = 0; i < o->props->len; i++) {
        QomProp *p = g_ptr_array_index(o->props, i);
        list_add(arr, p->name, p->type);
    }
    for (guint i = 0; i < o->children->len; i++) {
        QomObject *c = g_ptr_array_index(o->children, i);
        g_autofree char *t = g_strdup_printf("child<%s>", c->type);
        list_add(arr, c->name, t);
    }
    n = json_node_init_array(json_node_alloc(), arr);
    json_array_unref(arr);
    return n;
}

static JsonNode *string_node(const char *s)
{
    JsonNode *n = json_node_new(JSON_NODE_VALUE);

    json_node_set_string(n, s);
    return n;
}

static JsonNode *cmd_qom_get(QmpRequest *req, JsonObject *args, GError **errp)
{
    const char *name = json_object_get_string_member(args, "property");
    QomObject *o = resolve_path(json_object_get_string_member(args, "path"), errp);
    QomObject *child;
    QomProp *p;

    if (!o) {
        return NULL;
    }
    if (!strcmp(name, "type")) {
        return string_node(o->type);
    }
    child = find_child(o, name);
    if (child) {
        return string_node(child->path);
    }
    p = find_prop(o, name);
    if (!p) {
        prop_not_found(o, name, errp);
        return NULL;
    }
    if (!p->get) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Property '%s.%s' is not readable", o->type,
                    name);
        return NULL;
    }
    return p->get(o->path, name, p->opaque, errp);
}

/* Primitive QOM types get QEMU's generic type error; others go to the setter as is. */
static bool check_prop_value(QomProp *p, JsonNode *value, GError **errp)
{
    QmpArgType t = QMP_ARG_ANY;

    if (!strcmp(p->type, "bool")) {
        t = QMP_ARG_BOOL;
    } else if (!strcmp(p->type, "string") || !strcmp(p->type, "str")) {
        t = QMP_ARG_STR;
    } else if (g_str_has_prefix(p->type, "int")) {
        t = QMP_ARG_INT;
    } else if (g_str_has_prefix(p->type, "uint") || !strcmp(p->type, "size")) {
        t = QMP_ARG_UINT;
    }
    return qmp_check_arg_type(p->name, value, t, errp);
}

static JsonNode *cmd_qom_set(QmpRequest *req, JsonObject *args, GError **errp)
{
    const char *name = json_object_get_string_member(args, "property");
    JsonNode *value = json_object_get_member(args, "value");
    QomObject *o = resolve_path(json_object_get_string_member(args, "path"), errp);
    QomProp *p;

    if (!o) {
        return NULL;
    }
    p = find_prop(o, name);
    if (!p && strcmp(name, "type") && !find_child(o, name)) {
        prop_not_found(o, name, errp);
        return NULL;
    }
    if (!p || !p->set) {
        g_set_error(errp, QMP_ERROR, QMP_ERROR_GENERIC, "Property '%s.%s' is not writable", o->type,
                    name);
        return NULL;
    }
    if (!check_prop_value(p, value, errp)) {
        return NULL;
    }
    p->set(o->path, name, value, req, p->opaque, errp);
    return NULL; /* "{}" on success; the dispatcher sees errors and deferrals */
}

static const QmpArgSpec qom_list_args[] = {
    {"path", QMP_ARG_STR, false},
    QMP_ARGS_END,
};

static const QmpArgSpec qom_get_args[] = {
    {"path", QMP_ARG_STR, false},
    {"property", QMP_ARG_STR, false},
    QMP_ARGS_END,
};

static const QmpArgSpec qom_set_args[] = {
    {"path", QMP_ARG_STR, false},
    {"property", QMP_ARG_STR, false},
    {"value", QMP_ARG_ANY, false},
    QMP_ARGS_END,
};

/* Context: monitor thread */
void qom_commands_register(void)
{
    qmp_register_command("qom-list", cmd_qom_list, qom_list_args, 0, NULL);
    qmp_register_command("qom-get", cmd_qom_get, qom_get_args, 0, NULL);
    qmp_register_command("qom-set", cmd_qom_set, qom_set_args, 0, NULL);
}
