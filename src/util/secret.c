/*
 * Named secrets (QEMU's -object secret); see util/secret.h.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/secret.h"

typedef struct Secret {
    guchar *bytes;
    gsize len;
} Secret;

static GMutex lock;
static GHashTable *secrets; /* id -> Secret */

static void secret_wipe(gpointer data)
{
    Secret *s = data;

    if (s->bytes) {
        memset(s->bytes, 0, s->len);
        g_free(s->bytes);
    }
    g_free(s);
}

bool secret_props_set(SecretProps *p, const char *key, const char *value, GError **errp)
{
    if (!strcmp(key, "id")) {
        p->id = value;
    } else if (!strcmp(key, "data")) {
        p->data = value;
    } else if (!strcmp(key, "file")) {
        p->file = value;
    } else if (!strcmp(key, "format")) {
        p->format = value;
    } else if (!strcmp(key, "keyid") || !strcmp(key, "iv")) {
        g_set_error(errp, SECRET_ERROR, ENOTSUP,
                    "secret property '%s' is not supported (no encrypted secrets)", key);
        return false;
    } else {
        g_set_error(errp, SECRET_ERROR, EINVAL, "Invalid parameter '%s'", key);
        return false;
    }
    return true;
}

/* Strict base64: the alphabet, a length that is a multiple of 4, '=' only as the last 1 or 2. */
static bool base64_valid(const char *s, gsize n)
{
    gsize pad = 0;

    if (n == 0 || n % 4) {
        return false;
    }
    while (pad < 2 && s[n - 1 - pad] == '=') {
        pad++;
    }
    for (gsize i = 0; i < n - pad; i++) {
        if (!g_ascii_isalnum(s[i]) && s[i] != '+' && s[i] != '/') {
            return false;
        }
    }
    return true;
}

/* A key file is small; a larger one is not a secret file (or /dev/zero). */
#define SECRET_FILE_MAX (64 * 1024)

/*
 * Read a secret file: a regular file of at most SECRET_FILE_MAX bytes. Not
 * g_file_get_contents(), which reads a FIFO or a device such as /dev/zero
 * until it ends: file=/dev/zero must be an error, not a hang.
 */
static bool secret_read_file(const char *path, char **content, gsize *len, GError **errp)
{
    struct stat st;
    gsize got = 0;
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);

    if (fd < 0) {
        g_set_error(errp, SECRET_ERROR, errno, "cannot open secret file '%s': %s", path,
                    g_strerror(errno));
        return false;
    }
    if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_size > SECRET_FILE_MAX) {
        g_set_error(errp, SECRET_ERROR, EINVAL,
                    "secret file '%s' is not a regular file of at most %d bytes", path,
                    SECRET_FILE_MAX);
        close(fd);
        return false;
    }
    *content = g_malloc0((gsize)st.st_size + 1);
    while (got < (gsize)st.st_size) {
        ssize_t n = read(fd, *content + got, (gsize)st.st_size - got);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            g_set_error(errp, SECRET_ERROR, errno, "cannot read secret file '%s': %s", path,
                        g_strerror(errno));
            memset(*content, 0, got);
            g_clear_pointer(content, g_free);
            close(fd);
            return false;
        }
        if (n == 0) {
            break; /* shrank while we read: take what is there */
        }
        got += (gsize)n;
    }
    close(fd);
    *len = got;
    return true;
}

bool secret_add(const SecretProps *p, GError **errp)
{
    g_autofree char *content = NULL;
    const char *src;
    gsize len, clen = 0;
    bool b64;
    Secret *s;

    if (!p->id || !*p->id) {
        g_set_error(errp, SECRET_ERROR, EINVAL, "Parameter 'id' is missing");
        return false;
    }
    if (p->data && p->file) {
        g_set_error(errp, SECRET_ERROR, EINVAL, "give either 'data' or 'file', not both");
        return false;
    }
    if (!p->data && !p->file) {
        g_set_error(errp, SECRET_ERROR, EINVAL, "one of 'data' or 'file' is required");
        return false;
    }
    if (p->format && strcmp(p->format, "raw") && strcmp(p->format, "base64")) {
        g_set_error(errp, SECRET_ERROR, EINVAL,
                    "Parameter 'format' does not accept value '%s' (raw or base64)", p->format);
        return false;
    }
    b64 = p->format && !strcmp(p->format, "base64");
    if (p->file) {
        if (!secret_read_file(p->file, &content, &len, errp)) {
            return false;
        }
        src = content;
        clen = len;
        if (b64) {
            /* key files usually end in a newline */
            while (len && (content[len - 1] == '\n' || content[len - 1] == '\r')) {
                len--;
            }
        }
    } else {
        src = p->data;
        len = strlen(p->data);
    }
    s = g_new0(Secret, 1);
    if (b64) {
        g_autofree char *nul = g_strndup(src, len);

        if (memchr(src, '\0', len) || !base64_valid(nul, len)) {
            memset(nul, 0, len);
            g_set_error(errp, SECRET_ERROR, EINVAL, "the data is not valid base64");
            secret_wipe(s);
            goto out;
        }
        s->bytes = g_base64_decode(nul, &s->len);
        memset(nul, 0, len);
    } else {
        s->bytes = g_memdup2(src, len);
        s->len = len;
    }
    g_mutex_lock(&lock);
    if (!secrets) {
        secrets = g_hash_table_new_full(g_str_hash, g_str_equal, g_free, secret_wipe);
    }
    if (g_hash_table_contains(secrets, p->id)) {
        g_mutex_unlock(&lock);
        g_set_error(errp, SECRET_ERROR, EEXIST, "duplicate ID '%s' for object", p->id);
        secret_wipe(s);
        goto out;
    }
    g_hash_table_insert(secrets, g_strdup(p->id), s);
    g_mutex_unlock(&lock);
    s = NULL;
out:
    if (content) {
        memset(content, 0, clen);
    }
    return s == NULL;
}

bool secret_exists(const char *id)
{
    bool r;

    g_mutex_lock(&lock);
    r = secrets && g_hash_table_contains(secrets, id);
    g_mutex_unlock(&lock);
    return r;
}

char *secret_lookup_base64(const char *id, GError **errp)
{
    Secret *s;
    char *out = NULL;

    g_mutex_lock(&lock);
    s = secrets ? g_hash_table_lookup(secrets, id) : NULL;
    if (s) {
        out = g_base64_encode(s->bytes, s->len);
    }
    g_mutex_unlock(&lock);
    if (!out) {
        g_set_error(errp, SECRET_ERROR, ENOENT, "No secret with id '%s'", id);
    }
    return out;
}

void secret_free_string(char *s)
{
    if (s) {
        memset(s, 0, strlen(s));
        g_free(s);
    }
}

void secret_clear_all(void)
{
    g_mutex_lock(&lock);
    if (secrets) {
        g_hash_table_destroy(secrets);
        secrets = NULL;
    }
    g_mutex_unlock(&lock);
}
