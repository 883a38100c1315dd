/* allkinds_client: a C client of the Python service in tests/idl/test_idl_live.py, over the C ABI.
 *
 * Built by the test from the stubs `multihop stubgen tests/c/allkinds.if --lang c` writes, linked
 * against libmultihop_core.so. Usage: allkinds_client RUNTIME SERVICE CORE [TRANSPORT]
 * (TRANSPORT: "ump", the default, or "multihop").
 *
 * The exchange (every argument kind of Flounder, both directions):
 *   C -> Py   scalars(A), composite(A), dynamic(A)      the service checks values and bytes
 *   Py -> C   scalars(B), composite(B), dynamic(B)      checked here, through allkinds_recv
 *   C -> Py   rpc mix(in A) -> (out B)                  checked on both sides
 *   C -> Py   done(4); Py -> C done(4); C closes.
 * The values A and B are written out again in tests/idl/test_idl_live.py; keep the two in step.
 * Exit status: 0 if every check passed, 1 if one failed, 2 if a call failed.
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "allkinds.h"
#include "multihop.h"

#include "check.h"

static bool inner_eq(const allkinds_inner_t *x, const allkinds_inner_t *y)
{
    return x->a == y->a && x->b == y->b && x->c == y->c && x->d == y->d && x->e == y->e;
}

static bool outer_eq(const allkinds_outer_t *x, const allkinds_outer_t *y)
{
    return inner_eq(&x->first, &y->first) && x->tag == y->tag && x->ch == y->ch &&
           memcmp(x->small, y->small, sizeof x->small) == 0;
}

/* ---- values A: C -> Python ---------------------------------------------------------------- */
static const allkinds_outer_t OUTER_A = {{200, -300, 70000, true, allkinds_GREEN}, UINT64_MAX - 1, 'q', {-1, 0, 127}};
static const char NAME_A[] = "h\xc3\xa9llo w\xc3\xb6rld \xe2\x9c\x93"; /* "héllo wörld ✓" */
static const char OLDSTR_A[] = "old-style \xc3\xbc" "n\xc3\xaf" "code string";
static const char TEXT_A[] = "plain char text";
static const char S_A[] = "\xcf\x88 rpc"; /* "ψ rpc" */

/* ---- values B: Python -> C ---------------------------------------------------------------- */
static const allkinds_outer_t OUTER_B = {{0, 32767, 0, false, allkinds_BLUE}, 0, '\x01', {-128, -127, -126}};

static int stage; /* which message of B comes next */

static void on_scalars(void *st, uint8_t u8, uint16_t u16, uint32_t u32, uint64_t u64, int8_t i8, int16_t i16,
                       int32_t i32, int64_t i64, uint64_t sz, uint64_t up, int64_t ip, bool yes, bool no, char ch,
                       uint64_t ref, uint64_t err, uint64_t h, uint16_t core)
{
    (void)st;
    CHECK(stage == 0);
    stage = 1;
    CHECK(u8 == 1);
    CHECK(u16 == 2);
    CHECK(u32 == 3);
    CHECK(u64 == 4);
    CHECK(i8 == 127);
    CHECK(i16 == 32767);
    CHECK(i32 == INT32_MAX);
    CHECK(i64 == INT64_MAX);
    CHECK(sz == 0);
    CHECK(up == 1);
    CHECK(ip == -1);
    CHECK(yes == true);
    CHECK(no == false);
    CHECK((unsigned char)ch == 0xff);
    CHECK(ref == 7);
    CHECK(err == 0);
    CHECK(h == UINT64_MAX);
    CHECK(core == 0);
}

static void on_composite(void *st, allkinds_colour_t c, const allkinds_outer_t *o, const allkinds_triple_t t,
                         const int32_t fixed[4], const allkinds_inner_t pair[2], const allkinds_colour_t shades[2])
{
    (void)st;
    CHECK(stage == 1);
    stage = 2;
    static const allkinds_inner_t pair_b[2] = {{9, 9, 9, true, allkinds_GREEN}, {255, -32768, UINT32_MAX, false, allkinds_RED}};
    CHECK(c == allkinds_RED);
    CHECK(outer_eq(o, &OUTER_B));
    CHECK(t[0] == 0 && t[1] == 0 && t[2] == 7);
    CHECK(fixed[0] == INT32_MIN && fixed[1] == 1 && fixed[2] == 2 && fixed[3] == 3);
    CHECK(inner_eq(&pair[0], &pair_b[0]) && inner_eq(&pair[1], &pair_b[1]));
    CHECK(shades[0] == allkinds_BLUE && shades[1] == allkinds_BLUE);
}

static void on_dynamic(void *st, const uint8_t *blob, size_t blen, const int32_t *nums, size_t nlen,
                       const allkinds_inner_t *items, size_t ilen, const char *name, const char *text, size_t tlen,
                       const uint64_t *old, size_t olen, const char *oldstr, const uint8_t *empty, size_t elen)
{
    (void)st;
    (void)blob;
    (void)items;
    (void)old;
    CHECK(stage == 2);
    stage = 3;
    CHECK(blen == 0);
    CHECK(nlen == 64);
    for (size_t i = 0; i < nlen && i < 64; i++) CHECK(nums[i] == (int32_t)i - 32);
    CHECK(ilen == 0);
    CHECK(strcmp(name, "") == 0);
    CHECK(tlen == 256);
    for (size_t i = 0; i < tlen && i < 256; i++) CHECK((unsigned char)text[i] == i);
    CHECK(olen == 0);
    CHECK(strlen(oldstr) == 1000);
    for (size_t i = 0; i < 1000 && oldstr[i]; i++) CHECK(oldstr[i] == 'B');
    CHECK(elen == 16);
    for (size_t i = 0; i < elen && i < 16; i++) CHECK(empty[i] == 0);
}

static void on_done(void *st, uint32_t checked)
{
    (void)st;
    CHECK(stage == 3);
    stage = 4;
    CHECK(checked == 4);
}

int main(int argc, char **argv)
{
    if (argc != 4 && argc != 5) {
        fprintf(stderr, "usage: %s RUNTIME SERVICE CORE [TRANSPORT]\n", argv[0]);
        return 2;
    }
    mh_dispatcher *d = NULL;
    mh_channel *ch = NULL;
    CALL(mh_attach(argv[1], (uint32_t)atoi(argv[3]), &d));
    CALL(mh_bind(d, argv[2], argc == 5 ? argv[4] : "ump", T_MS, &ch));
    allkinds_binding b;
    allkinds_binding_init(&b, ch);

    /* ---- C -> Python: every kind, values A ---- */
    CALL(allkinds_scalars_send(&b, T_MS, UINT8_MAX, UINT16_MAX, UINT32_MAX, UINT64_MAX, INT8_MIN, INT16_MIN, INT32_MIN,
                               INT64_MIN, (UINT64_C(1) << 63) + 5, UINT64_C(0xdeadbeefcafebabe), -(INT64_C(1) << 62),
                               true, false, 'Z', UINT64_C(0x123456789abcdef0), UINT64_C(0xffff000000000001), 42, 65534));

    const allkinds_triple_t t_a = {1, 65535, 300};
    const int32_t fixed_a[4] = {-5, 0, 5, INT32_MAX};
    const allkinds_inner_t pair_a[2] = {{1, -1, 1, false, allkinds_RED}, {2, -2, 2, true, allkinds_BLUE}};
    const allkinds_colour_t shades_a[2] = {allkinds_GREEN, allkinds_RED};
    CALL(allkinds_composite_send(&b, T_MS, allkinds_BLUE, &OUTER_A, t_a, fixed_a, pair_a, shades_a));

    uint8_t blob[1000];
    for (int i = 0; i < 1000; i++) blob[i] = (uint8_t)((i * 37) % 256);
    const int32_t nums[5] = {-1, 0, 1, INT32_MAX, INT32_MIN};
    allkinds_inner_t items[8];
    for (int i = 0; i < 8; i++) {
        items[i] = (allkinds_inner_t){(uint8_t)i, (int16_t)-i, (uint32_t)(i * 1000), i % 2 == 0, (allkinds_colour_t)(i % 3)};
    }
    const uint64_t old[3] = {1, UINT64_MAX, 0};
    CALL(allkinds_dynamic_send(&b, T_MS, blob, sizeof blob, nums, 5, items, 8, NAME_A, TEXT_A, strlen(TEXT_A), old, 3,
                               OLDSTR_A, NULL, 0));

    /* ---- Python -> C: values B, through the generated dispatcher ---- */
    allkinds_rx_handlers h = {0};
    h.scalars = on_scalars;
    h.composite = on_composite;
    h.dynamic = on_dynamic;
    for (int i = 0; i < 3; i++) CALL(allkinds_recv(&b, T_MS, &h, NULL));
    CHECK(stage == 3);

    /* ---- rpc: in values A, out values B ---- */
    uint8_t data[30];
    for (int i = 0; i < 30; i++) data[i] = (uint8_t)(i % 3);
    uint64_t seq_back = 0, ref_back = 0, err_back = 0;
    allkinds_colour_t c_back = allkinds_RED;
    allkinds_outer_t o_back;
    memset(&o_back, 0, sizeof o_back);
    allkinds_triple_t t_back = {0, 0, 0};
    uint8_t data_back[allkinds_mix_response_data_back_MAX];
    size_t dblen = 0;
    char s_back[allkinds_mix_response_s_back_MAX + 1];
    const allkinds_triple_t t_mix = {3, 2, 1};
    CALL(allkinds_mix_rpc(&b, T_MS, 7, allkinds_GREEN, &OUTER_A, t_mix, data, sizeof data, S_A, 99, UINT64_C(1) << 63,
                          &seq_back, &c_back, &o_back, t_back, data_back, &dblen, s_back, &ref_back, &err_back));
    CHECK(seq_back == 8);
    CHECK(c_back == allkinds_BLUE);
    CHECK(outer_eq(&o_back, &OUTER_B));
    CHECK(t_back[0] == 9 && t_back[1] == 8 && t_back[2] == 7);
    CHECK(dblen == 256);
    for (size_t i = 0; i < dblen && i < 256; i++) CHECK(data_back[i] == i);
    CHECK(strlen(s_back) == 64);
    for (size_t i = 0; i < 64 && s_back[i]; i++) CHECK(s_back[i] == 'x');
    CHECK(ref_back == UINT64_MAX);
    CHECK(err_back == 1);

    /* ---- a value out of range is refused before anything is sent ---- */
    CHECK(allkinds_composite_send(&b, T_MS, (allkinds_colour_t)7, &OUTER_A, t_a, fixed_a, pair_a, shades_a) == MH_E_INVALID);

    /* ---- done, both ways ---- */
    CALL(allkinds_done_send(&b, T_MS, 4));
    h.done = on_done;
    CALL(allkinds_recv(&b, T_MS, &h, NULL));
    CHECK(stage == 4);

    CHECK(allkinds_backlog_count(&b) == 0);
    allkinds_binding_destroy(&b);
    CALL(mh_close(ch));
    mh_detach(d);
    printf("allkinds_client: %d checks, %d failed\n", checks, failures);
    return failures == 0 ? 0 : 1;
}
