/*
 * Members of a QMP reply under construction (json-glib's builder), for the
 * QMP commands of src/devices.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_DEVICES_QMP_JSON_INT_H
#define VBLK_DEVICES_QMP_JSON_INT_H

#include <stdbool.h>
#include <stdint.h>
#include <json-glib/json-glib.h>

static inline void add_bool(JsonBuilder *b, const char *k, bool v)
{
    json_builder_set_member_name(b, k);
    json_builder_add_boolean_value(b, v);
}

static inline void add_str(JsonBuilder *b, const char *k, const char *v)
{
    json_builder_set_member_name(b, k);
    json_builder_add_string_value(b, v);
}

static inline void add_int(JsonBuilder *b, const char *k, int64_t v)
{
    json_builder_set_member_name(b, k);
    json_builder_add_int_value(b, v);
}

#endif
