/* JSON text as jsmn tokens, checked against RFC 8259 where jsmn is lenient (separators,
 * number and literal spelling, string escapes, control characters, UTF-8), with the
 * lookups the decoder needs: a member by its unescaped name (the last occurrence, as
 * messages.md says), duplicate names at any depth (§2.2), integer values compared by
 * value (1.0 and 1e0 are 1: messages.md). Nothing allocates: tokens are the caller's. */
#ifndef VRT_JSON_H
#define VRT_JSON_H

#include <stddef.h>
#include <stdint.h>

#ifndef JSMN_STRICT
#define JSMN_STRICT
#endif
#ifndef JSMN_STATIC
#define JSMN_HEADER
#endif
#include <jsmn.h>

typedef struct {
    const char *js;
    size_t len;
    const jsmntok_t *tok;
    int count;
} vrt_json;

enum { VRT_JSON_OK = 0, VRT_JSON_MALFORMED = -1, VRT_JSON_TOO_BIG = -2, VRT_JSON_TOO_DEEP = -3 };

/* Nesting accepted, the outermost value being depth 1 (§11; as the Python core's
 * max_depth). Checking costs 12 bytes of stack per level. */
#ifndef VRT_JSON_MAX_DEPTH
#define VRT_JSON_MAX_DEPTH 64
#endif

/* Tokenize and check `js`; VRT_JSON_TOO_BIG when `cap` tokens are not enough,
 * VRT_JSON_TOO_DEEP when it nests deeper than VRT_JSON_MAX_DEPTH. */
int vrt_json_parse(vrt_json *j, const char *js, size_t len, jsmntok_t *tok, unsigned cap);
/* The index just after token i and everything inside it. */
int vrt_json_skip(const vrt_json *j, int i);
/* The value of member `name` of object i (its last occurrence), or -1. */
int vrt_json_member(const vrt_json *j, int obj, const char *name);
/* Whether some object, at any depth, has a member name twice (compared unescaped). */
int vrt_json_has_duplicates(const vrt_json *j);

/* Iterating the code points of string token i, escapes decoded. */
typedef struct {
    const char *p, *end;
} vrt_str_iter;
void vrt_str_begin(const vrt_json *j, int i, vrt_str_iter *it);
/* The next code point, or -1 at the end. */
int32_t vrt_str_next(vrt_str_iter *it);
/* Whether string token i is exactly the UTF-8 string `s`. */
int vrt_json_str_eq(const vrt_json *j, int i, const char *s);
/* Code points of string token i. */
size_t vrt_json_str_codepoints(const vrt_json *j, int i);
/* Copy string token i unescaped (UTF-8) into out; -1 if it needs more than cap-1 bytes. */
int vrt_json_str_copy(const vrt_json *j, int i, char *out, size_t cap);

typedef enum { VRT_NUM_NOT_NUMBER, VRT_NUM_FRACTION, VRT_NUM_NEGATIVE, VRT_NUM_BIG, VRT_NUM_U32 } vrt_num;
/* Classify primitive token i as an integer by value; *out set for VRT_NUM_U32. */
vrt_num vrt_json_u32(const vrt_json *j, int i, uint32_t *out);
/* Token i is the literal `lit` (true, false, null) or a string equal to a "quoted" one. */
int vrt_json_is_literal(const vrt_json *j, int i, const char *lit);
/* Whether s[0..n) is UTF-8 (RFC 3629). */
int vrt_utf8_valid(const char *s, size_t n);
/* Whether s[0..n) is one JSON value (RFC 8259), with `cap` tokens to check it: a
 * VRT_JSON_* code. */
int vrt_json_check(const char *s, size_t n, jsmntok_t *tok, unsigned cap);

#endif
