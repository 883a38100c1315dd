/* backlog_client: a C client of the Python service in tests/idl/test_idl_live.py, checking the
 * generated binding's rpc backlog over a real channel (libmultihop_core.so).
 *
 * Built by the test from the stubs `multihop stubgen tests/c/backlog.if --lang c` writes.
 * Usage: backlog_client RUNTIME SERVICE CORE TRANSPORT
 *
 * 1. ask(3, blob): the service sends note 0..2, a blob, the response, then after(1). The rpc
 *    returns the answer; the four messages wait in the backlog; backlog_recv hands them out in
 *    order, then after(1) from the channel.
 * 2. ask(BACKLOG_MAX + 2): the backlog fills while the rpc waits: MH_E_BUSY with a full backlog.
 *    A second rpc returns MH_E_BUSY at once and sends nothing. backlog_recv then hands out every
 *    note in order, then the late response (handler ask_response).
 * 3. ask(0, slow) with a 100 ms timeout: MH_E_TIMEOUT; the response arrives later via backlog_recv.
 * 4. done(checks) -> the service answers done(rpc calls it saw) = 3.
 * Exit status: 0 if every check passed, 1 if one failed, 2 if a call failed.
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backlog.h"
#include "multihop.h"

#include "check.h"

/* What the handlers saw, in order. */
enum kind { NOTE, BLOB, AFTER, RESPONSE, DONE };
struct event { enum kind kind; uint32_t value; size_t len; char text[65]; };
static struct event seen[256];
static int nseen;

static void record(enum kind k, uint32_t value, size_t len, const char *text)
{
    if (nseen >= 256) { failures++; return; }
    seen[nseen].kind = k;
    seen[nseen].value = value;
    seen[nseen].len = len;
    snprintf(seen[nseen].text, sizeof seen[nseen].text, "%s", text ? text : "");
    nseen++;
}

static void on_note(void *st, uint32_t seq, const char *text) { (void)st; record(NOTE, seq, 0, text); }
static void on_blob(void *st, uint32_t seq, const uint8_t *data, size_t len)
{
    (void)st;
    bool ok = true;
    for (size_t i = 0; i < len; i++) ok = ok && data[i] == (uint8_t)(i * 7);
    CHECK(ok);
    record(BLOB, seq, len, NULL);
}
static void on_after(void *st, uint32_t seq) { (void)st; record(AFTER, seq, 0, NULL); }
static void on_response(void *st, uint32_t answer) { (void)st; record(RESPONSE, answer, 0, NULL); }
static void on_done(void *st, uint32_t count) { (void)st; record(DONE, count, 0, NULL); }

static void expect_note(int i, uint32_t seq)
{
    char want[65];
    snprintf(want, sizeof want, "note %u", (unsigned)seq);
    CHECK(i < nseen && seen[i].kind == NOTE && seen[i].value == seq && strcmp(seen[i].text, want) == 0);
}

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: %s RUNTIME SERVICE CORE TRANSPORT\n", argv[0]);
        return 2;
    }
    mh_dispatcher *d = NULL;
    mh_channel *ch = NULL;
    CALL(mh_attach(argv[1], (uint32_t)atoi(argv[3]), &d));
    CALL(mh_bind(d, argv[2], argv[4], T_MS, &ch));
    backlog_binding b;
    backlog_binding_init(&b, ch);
    backlog_rx_handlers h = {0};
    h.note = on_note;
    h.blob = on_blob;
    h.after = on_after;
    h.ask_response = on_response;
    h.done = on_done;

    /* ---- 1: three notes and a blob before the response, after(1) behind it ---- */
    uint32_t answer = 0;
    CALL(backlog_ask_rpc(&b, T_MS, 3, 1, &answer));
    CHECK(answer == 30);
    CHECK(backlog_backlog_count(&b) == 4);
    for (int i = 0; i < 5; i++) CALL(backlog_recv(&b, T_MS, &h, NULL));
    CHECK(backlog_backlog_count(&b) == 0);
    CHECK(nseen == 5);
    for (uint32_t i = 0; i < 3; i++) expect_note((int)i, i);
    CHECK(seen[3].kind == BLOB && seen[3].value == 3 && seen[3].len == 2000);
    CHECK(seen[4].kind == AFTER && seen[4].value == 1);
    CHECK(backlog_recv(&b, 0, &h, NULL) == MH_E_TIMEOUT); /* nothing else came */

    /* ---- 2: more notes than the backlog holds ---- */
    nseen = 0;
    const uint32_t many = backlog_BACKLOG_MAX + 2;
    answer = 0;
    CHECK(backlog_ask_rpc(&b, T_MS, many, 0, &answer) == MH_E_BUSY);
    CHECK(answer == 0);
    CHECK(backlog_backlog_count(&b) == backlog_BACKLOG_MAX);
    CHECK(backlog_ask_rpc(&b, T_MS, 0, 0, &answer) == MH_E_BUSY); /* refused before sending */
    CHECK(nseen == 0);
    for (uint32_t i = 0; i < many + 1; i++) CALL(backlog_recv(&b, T_MS, &h, NULL));
    CHECK(nseen == (int)many + 1);
    for (uint32_t i = 0; i < many; i++) expect_note((int)i, i);
    CHECK(seen[many].kind == RESPONSE && seen[many].value == many * 10);
    CHECK(backlog_backlog_count(&b) == 0);

    /* ---- 3: a response later than the rpc's timeout ---- */
    nseen = 0;
    CHECK(backlog_ask_rpc(&b, 100, 0, 2, &answer) == MH_E_TIMEOUT);
    CALL(backlog_recv(&b, T_MS, &h, NULL));
    CHECK(nseen == 1 && seen[0].kind == RESPONSE && seen[0].value == 0);

    /* ---- 4: the service saw three rpc calls (the refused one never left) ---- */
    nseen = 0;
    CALL(backlog_done_send(&b, T_MS, (uint32_t)checks));
    CALL(backlog_recv(&b, T_MS, &h, NULL));
    CHECK(nseen == 1 && seen[0].kind == DONE && seen[0].value == 3);

    backlog_binding_destroy(&b);
    CALL(mh_close(ch));
    mh_detach(d);
    printf("backlog_client: %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
