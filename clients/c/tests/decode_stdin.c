/* vrt_decode_stdin: the C decoder as a filter, for the differential test against the
 * Python decoder (tests/c_sdk/test_c_decoder_agrees.py). Input: records of a 4-byte
 * big-endian length and that many bytes; output: one line per record, "valid" or the
 * §9.1 code the decoder gives it. */
#include <stdio.h>
#include <stdlib.h>

#include "vrt/decode.h"

static char frame[1 << 20];
static jsmntok_t tokens[4096];

int main(void) {
    unsigned char head[4];
    while (fread(head, 1, 4, stdin) == 4) {
        size_t len = ((size_t)head[0] << 24) | ((size_t)head[1] << 16) | ((size_t)head[2] << 8) | head[3];
        if (len > sizeof frame || fread(frame, 1, len, stdin) != len) return 2;
        vrt_message m;
        vrt_error_code code = vrt_decode_server(&m, frame, len, tokens, 4096, NULL);
        puts(code == VRT_E_NONE ? "valid" : vrt_error_names[code]);
    }
    return 0;
}
