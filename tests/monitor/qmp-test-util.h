/*
 * Test helpers: a blocking-style QMP client over a real socket whose waits
 * pump the monitor's GMainContext in the same thread, so every test is
 * deterministic and can call the library directly.
 */
#ifndef VBLK_TESTS_QMP_TEST_UTIL_H
#define VBLK_TESTS_QMP_TEST_UTIL_H

#include <stdbool.h>
#include "monitor/qmp.h"

typedef struct TClient {
    int fd;
    GString *buf;
    bool eof;
} TClient;

#define QMP_TEST_GREETING                                                                          \
    "{\"QMP\": {\"version\": {\"qemu\": {\"micro\": 0, \"minor\": 2, \"major\": 7}, "              \
    "\"package\": \"vblk-" VBLK_VERSION "\"}, \"capabilities\": [\"oob\"]}}"

extern GMainContext *test_ctx;

/* Fresh library state with one unix monitor at a temporary path. */
QmpMonitor *test_setup(char **path_out);
void test_teardown(QmpMonitor *mon, char *path);
void test_pump(int ms);

TClient *tc_connect(const char *path);
TClient *tc_connect_tcp(int port);
void tc_close(TClient *c);
void tc_send(TClient *c, const char *s);
void tc_send_len(TClient *c, const char *s, size_t len);
/* Next line without "\r\n" (caller frees); NULL on EOF or after 5 s. */
char *tc_recv(TClient *c);
char *tc_cmd(TClient *c, const char *json);
/* Consume the greeting and negotiate; asserts both. */
void tc_negotiate(TClient *c);
/* Assert the next line is exactly @expected. */
void tc_expect(TClient *c, const char *expected);
/* True if no complete line arrives within @ms. */
bool tc_quiet(TClient *c, int ms);

#endif
