/* echo_bind: the generated echo_bind / echo_export / echo_accept of flounder-idl/echo.if over a real
 * runtime (libmultihop_core.so), against the Python bindings of tests/idl/test_idl_connect.py.
 *
 * Built by the test from the stubs `multihop stubgen flounder-idl/echo.if --lang c` writes.
 * Usage:
 *   echo_bind client RUNTIME CORE SERVICE TRANSPORT   bind (TRANSPORT "null" passes NULL: auto),
 *                                                     call echo("hello from C") and say("C"),
 *                                                     print both answers, close.
 *   echo_bind server RUNTIME CORE SERVICE             export, print "ready", accept one client and
 *                                                     serve it (echo reverses the bytes, say
 *                                                     answers "C heard TEXT") until it closes; print
 *                                                     "served N" (rpc calls answered).
 *   echo_bind nobody RUNTIME CORE SERVICE             bind "auto" to a service nobody exports:
 *                                                     print the code and mh_last_error().
 * Exit status: 0 if every check passed, 1 if one failed, 2 if a call failed.
 */
#include <stdio.h>
#include <string.h>

#include "echo.h"
#include "multihop.h"

#include "check.h"

static echo_binding *serving;
static int served;

static void on_echo_call(void *st, const uint8_t *request, size_t reqlen)
{
    (void)st;
    uint8_t reply[echo_echo_response_reply_MAX];
    for (size_t i = 0; i < reqlen; i++) reply[i] = request[reqlen - 1 - i];
    CALL(echo_echo_response_send(serving, T_MS, reply, reqlen));
    served++;
}

static void on_say_call(void *st, const char *text)
{
    (void)st;
    char answer[echo_say_response_answer_MAX + 1];
    snprintf(answer, sizeof answer, "C heard %s", text);
    CALL(echo_say_response_send(serving, T_MS, answer));
    served++;
}

static int client(mh_dispatcher *d, const char *service, const char *transport)
{
    echo_binding b;
    CALL(echo_bind(d, service, strcmp(transport, "null") == 0 ? NULL : transport, T_MS, &b));
    CHECK(b.ch != NULL);
    const char *hello = "hello from C";
    uint8_t reply[echo_echo_response_reply_MAX];
    size_t n = 0;
    CALL(echo_echo_rpc(&b, T_MS, (const uint8_t *)hello, strlen(hello), reply, &n));
    printf("echo %.*s\n", (int)n, (const char *)reply);
    char answer[echo_say_response_answer_MAX + 1];
    CALL(echo_say_rpc(&b, T_MS, "C", answer));
    printf("say %s\n", answer);
    CALL(mh_close(b.ch));
    echo_binding_destroy(&b);
    return 0;
}

static int server(mh_dispatcher *d, const char *service)
{
    mh_service *svc = NULL;
    CALL(echo_export(d, service, &svc));
    printf("ready\n");
    fflush(stdout);
    echo_binding b;
    CALL(echo_accept(svc, T_MS, &b));
    serving = &b;
    echo_rx_handlers h = {0};
    h.echo_call = on_echo_call;
    h.say_call = on_say_call;
    int rc;
    while ((rc = echo_recv(&b, T_MS, &h, NULL)) == MH_OK) {
    }
    CHECK(rc == MH_E_CLOSED);
    printf("served %d\n", served);
    mh_close(b.ch);
    echo_binding_destroy(&b);
    mh_service_free(svc);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 5) {
        fprintf(stderr, "usage: %s client|server|nobody RUNTIME CORE SERVICE [TRANSPORT]\n", argv[0]);
        return 2;
    }
    mh_dispatcher *d = NULL;
    CALL(mh_attach(argv[2], (uint32_t)atoi(argv[3]), &d));
    if (strcmp(argv[1], "client") == 0 && argc == 6) {
        client(d, argv[4], argv[5]);
    } else if (strcmp(argv[1], "server") == 0) {
        server(d, argv[4]);
    } else if (strcmp(argv[1], "nobody") == 0) {
        echo_binding b;
        int rc = echo_bind(d, argv[4], "auto", T_MS, &b);
        CHECK(b.ch == NULL);
        printf("%d %s\n", rc, mh_last_error());
    } else {
        return 2;
    }
    mh_detach(d);
    return failures == 0 ? 0 : 1;
}
