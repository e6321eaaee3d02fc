/* The JSON layer: what jsmn leaves lenient is rejected (RFC 8259), integers by value. */
#include <string.h>

#include "test.h"
#include "vrt/json.h"

static int parses(const char *s) {
    jsmntok_t tok[64];
    vrt_json j;
    return vrt_json_parse(&j, s, strlen(s), tok, 64) == VRT_JSON_OK;
}

static vrt_num num(const char *s, uint32_t *v) {
    jsmntok_t tok[8];
    vrt_json j;
    if (vrt_json_parse(&j, s, strlen(s), tok, 8) != VRT_JSON_OK) return VRT_NUM_NOT_NUMBER;
    return vrt_json_u32(&j, 1, v);
}

void test_json(void) {
    CHECK(parses("{\"a\":[1,2,{\"b\":null}],\"c\":\"x\"}"), "valid nested");
    CHECK(parses(" { } "), "empty object with spaces");
    const char *bad[] = {"{\"a\" 1}", "{\"a\":1,}", "[1 2]", "{\"a\":1}{}", "{\"a\":01}",
                         "{\"a\":tru}", "{\"a\":\"\x01\"}", "{\"a\":\"\\x\"}", "{\"a\":1.}",
                         "{\"a\":\"\xff\"}", "{\"a\"::1}", "{,\"a\":1}", "{\"a\":[,1]}", "{1:2}",
                         "{\"a\":-}", "{\"a\":\"\xc0\xaf\"}"};
    for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) CHECK(!parses(bad[k]), "rejects %s", bad[k]);
    uint32_t v = 7;
    const char *ones[] = {"[1]", "[1.0]", "[1e0]", "[1E+0]", "[10e-1]", "[0.1e1]"};
    for (size_t k = 0; k < sizeof ones / sizeof ones[0]; k++)
        CHECK(num(ones[k], &v) == VRT_NUM_U32 && v == 1, "%s is 1", ones[k]);
    CHECK(num("[-0]", &v) == VRT_NUM_U32 && v == 0, "-0 is 0");
    CHECK(num("[1.5]", &v) == VRT_NUM_FRACTION, "1.5 is not an integer");
    CHECK(num("[4294967295]", &v) == VRT_NUM_U32 && v == 4294967295u, "u32 max");
    CHECK(num("[4294967296]", &v) == VRT_NUM_BIG, "u32 max + 1");
    CHECK(num("[-1]", &v) == VRT_NUM_NEGATIVE, "-1");
    CHECK(num("[1e400]", &v) == VRT_NUM_BIG, "1e400");
    CHECK(num("[true]", &v) == VRT_NUM_NOT_NUMBER, "true is not a number");
    jsmntok_t tok[16];
    vrt_json j;
    const char *dup = "{\"text\":1,\"t\\u0065xt\":2}";
    CHECK(vrt_json_parse(&j, dup, strlen(dup), tok, 16) == VRT_JSON_OK && vrt_json_has_duplicates(&j),
          "names compared unescaped");
    CHECK(vrt_json_parse(&j, "[1,2,3]", 7, tok, 2) == VRT_JSON_TOO_BIG, "token limit");
    /* Nesting: 64 levels pass; 100000 are refused without recursion (a device's stack
     * is small), in one pass. */
    static char deep[200002];
    static jsmntok_t deep_tok[100001];
    memset(deep, '[', 64);
    memset(deep + 64, ']', 64);
    CHECK(vrt_json_parse(&j, deep, 128, deep_tok, 100001) == VRT_JSON_OK, "64 levels");
    memset(deep, '[', 100000);
    memset(deep + 100000, ']', 100000);
    CHECK(vrt_json_parse(&j, deep, 200000, deep_tok, 100001) == VRT_JSON_TOO_DEEP, "100000 levels");
    CHECK(vrt_json_parse(&j, "[[1],[2,{\"a\":[3]}]]", 19, tok, 16) == VRT_JSON_OK, "siblings after a nested one");
    CHECK(vrt_json_parse(&j, "[[1] [2]]", 9, tok, 16) == VRT_JSON_MALFORMED, "a missing comma after a nested one");
    CHECK(vrt_json_parse(&j, "{\"a\":{}\"b\":1}", 14, tok, 16) == VRT_JSON_MALFORMED, "a missing comma in an object");
}
