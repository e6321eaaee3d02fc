/* The test vectors of examples/ (every file of server/ and the client-received cases of
 * binary/frames.json), as tests/vectors_gen.h holds them: the same cases the Python
 * decoder passes (§9.1, §8.1). */
#include <string.h>

#include "test.h"
#include "vectors_gen.h"
#include "vrt/decode.h"

void test_vectors(void) {
    static jsmntok_t tok[512];
    for (size_t k = 0; k < sizeof server_vectors / sizeof server_vectors[0]; k++) {
        const vrt_text_vector *v = &server_vectors[k];
        vrt_message m;
        const char *why;
        vrt_error_code code = vrt_decode_server(&m, v->text, v->len, tok, 512, &why);
        const char *got = code == VRT_E_NONE ? "" : vrt_error_names[code];
        if (v->valid)
            CHECK(code == VRT_E_NONE, "%s: valid, decoded %s (%s)", v->id, got, why);
        else
            CHECK(strcmp(got, v->error) == 0, "%s: want %s, decoded %s (%s)", v->id, v->error,
                  code == VRT_E_NONE ? "valid" : got, why);
    }
    /* §11, beyond the vectors: nesting deeper than the limit is LIMIT_EXCEEDED. */
    static char deep[300];
    int n = snprintf(deep, sizeof deep, "{\"v\":1,\"seq\":1,\"type\":\"text\",\"turnId\":null,\"text\":\"x\",\"u\":");
    for (int k = 0; k < 70; k++) deep[n++] = '[';
    for (int k = 0; k < 70; k++) deep[n++] = ']';
    deep[n++] = '}';
    vrt_message m;
    CHECK(vrt_decode_server(&m, deep, (size_t)n, tok, 512, NULL) == VRT_E_LIMIT_EXCEEDED, "nesting beyond 64");
    for (size_t k = 0; k < sizeof binary_vectors / sizeof binary_vectors[0]; k++) {
        const vrt_binary_vector *v = &binary_vectors[k];
        uint32_t seq = 0;
        const uint8_t *payload = NULL;
        size_t n = 0;
        int r = vrt_frame_parse_output((const uint8_t *)v->frame, v->len, &seq, &payload, &n);
        if (v->valid)
            CHECK(r == 0 && seq == v->seq && n == v->payload_len &&
                      (n == 0 || memcmp(payload, v->payload, n) == 0),
                  "%s: valid frame", v->id);
        else
            CHECK(r == VRT_E_MALFORMED, "%s: MALFORMED", v->id);
    }
}
