/* Decoding what a server sends: control messages classified by the rules of §9.1 in
 * their order (MALFORMED, UNSUPPORTED_VERSION, UNKNOWN_TYPE, INVALID_FIELD) against the
 * server schemas (tables generated from schema/server/), and binary audio frames (§8.1).
 * Stateless with respect to the session, like the vectors of examples/. */
#ifndef VRT_DECODE_H
#define VRT_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "vrt/gen.h"
#include "vrt/json.h"

typedef struct {
    vrt_json json;
    vrt_server_type type;
    uint32_t seq;
    int16_t member[VRT_SLOT_COUNT]; /* token of each member present, or -1 */
} vrt_message;

/* VRT_E_NONE for a valid message; else its §9.1 code, or VRT_E_LIMIT_EXCEEDED when
 * `cap` tokens do not hold it. `*reason` (if not NULL) says why, in a static string. */
vrt_error_code vrt_decode_server(vrt_message *m, const char *text, size_t len, jsmntok_t *tok,
                                 unsigned cap, const char **reason);

/* The u32 value of member `slot` (0 when absent). */
uint32_t vrt_message_u32(const vrt_message *m, vrt_slot slot);
/* Whether member `slot` is present and the JSON literal true. */
int vrt_message_true(const vrt_message *m, vrt_slot slot);
/* The index of member `slot`'s string in `set`, or -1. */
int vrt_message_enum(const vrt_message *m, vrt_slot slot, int set);

#define VRT_FRAME_HEADER 5
#define VRT_FRAME_INPUT 1  /* client to server */
#define VRT_FRAME_OUTPUT 2 /* server to client */

/* Parse an output audio frame (§8.1): 0 when valid, else VRT_E_MALFORMED. */
int vrt_frame_parse_output(const uint8_t *data, size_t len, uint32_t *seq, const uint8_t **payload,
                           size_t *payload_len);
/* Write an input frame header for `seq` into out[0..4]. */
void vrt_frame_header(uint8_t out[VRT_FRAME_HEADER], uint32_t seq);

#endif
