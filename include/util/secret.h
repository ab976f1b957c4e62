/*
 * Named secrets, QEMU's `-object secret,id=ID,data=DATA|file=PATH
 * [,format=raw|base64]`: the process keeps each secret's bytes under its id
 * until exit, and a consumer (the rbd driver's key-secret=) looks one up by
 * id. With format=base64 the data (or the file's content, a trailing
 * newline aside) is base64 and the secret is its decoded bytes; with raw
 * (the default) the bytes are taken as they are. Encrypted secrets
 * (keyid=, iv=) are not supported.
 *
 * Context: any thread (a mutex guards the table).
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#ifndef VBLK_UTIL_SECRET_H
#define VBLK_UTIL_SECRET_H

#include <glib.h>
#include <stdbool.h>

#define SECRET_ERROR g_quark_from_static_string("vblk-secret-error")

/* The properties of one `-object secret` (borrowed strings, NULL if not given). */
typedef struct SecretProps {
    const char *id, *data, *file, *format;
} SecretProps;

/*
 * Set one property of `-object secret` by its QEMU name (id, data, file,
 * format; keyid and iv are refused). False with @errp set for any other.
 */
bool secret_props_set(SecretProps *p, const char *key, const char *value, GError **errp);

/*
 * Add the secret of @p. False with @errp set (one line) when the id is
 * missing or already taken, neither or both of data= and file= are given,
 * the file cannot be read, the format is unknown or base64 data is invalid
 * (the message does not name the secret: the caller says which).
 */
bool secret_add(const SecretProps *p, GError **errp);

/* Whether a secret of that id exists. */
bool secret_exists(const char *id);

/*
 * The secret @id's bytes as base64 (what Ceph's "key" option takes: a key
 * given as base64 with format=base64 comes back unchanged). NULL with
 * "No secret with id '@id'" in @errp. Free it with secret_free_string().
 */
char *secret_lookup_base64(const char *id, GError **errp);

/* Overwrite a string that held a secret with zeroes, then free it. NULL is fine. */
void secret_free_string(char *s);

/* Forget every secret (tests). */
void secret_clear_all(void);

#endif /* VBLK_UTIL_SECRET_H */
