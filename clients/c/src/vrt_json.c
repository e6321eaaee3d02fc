/* jsmn's functions live here, static: the core exports only its own names. */
#define JSMN_STATIC
#define JSMN_STRICT
#include <jsmn.h>

#include <string.h>

#include "vrt/json.h"

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* The bytes a token spans in the text, quotes included for strings. */
static int outer_start(const jsmntok_t *t) { return t->type == JSMN_STRING ? t->start - 1 : t->start; }
static int outer_end(const jsmntok_t *t) { return t->type == JSMN_STRING ? t->end + 1 : t->end; }

/* Whether js[from, to) is whitespace around exactly one `sep` (or only whitespace, sep 0). */
static int gap_is(const char *js, int from, int to, char sep) {
    int seen = 0;
    for (int k = from; k < to; k++) {
        if (is_ws(js[k])) continue;
        if (sep && js[k] == sep && !seen) {
            seen = 1;
            continue;
        }
        return 0;
    }
    return sep ? seen : 1;
}

static int check_number(const char *s, int n) {
    int k = 0;
    if (k < n && s[k] == '-') k++;
    if (k >= n) return 0;
    if (s[k] == '0') {
        k++;
    } else if (s[k] >= '1' && s[k] <= '9') {
        while (k < n && s[k] >= '0' && s[k] <= '9') k++;
    } else {
        return 0;
    }
    if (k < n && s[k] == '.') {
        k++;
        if (k >= n || s[k] < '0' || s[k] > '9') return 0;
        while (k < n && s[k] >= '0' && s[k] <= '9') k++;
    }
    if (k < n && (s[k] == 'e' || s[k] == 'E')) {
        k++;
        if (k < n && (s[k] == '+' || s[k] == '-')) k++;
        if (k >= n || s[k] < '0' || s[k] > '9') return 0;
        while (k < n && s[k] >= '0' && s[k] <= '9') k++;
    }
    return k == n;
}

static int check_primitive(const char *s, int n) {
    if ((n == 4 && !memcmp(s, "true", 4)) || (n == 5 && !memcmp(s, "false", 5)) ||
        (n == 4 && !memcmp(s, "null", 4)))
        return 1;
    return check_number(s, n);
}

static int hex4(const char *p, uint32_t *out) {
    uint32_t v = 0;
    for (int k = 0; k < 4; k++) {
        char c = p[k];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    *out = v;
    return 1;
}

/* One UTF-8 sequence at p (RFC 3629: no overlongs, no surrogates); its length or 0. */
static int utf8_len(const unsigned char *p, const unsigned char *end, uint32_t *cp) {
    unsigned char c = p[0];
    int n;
    uint32_t v;
    if (c < 0x80) { *cp = c; return 1; }
    if (c >= 0xC2 && c <= 0xDF) { n = 2; v = c & 0x1F; }
    else if (c >= 0xE0 && c <= 0xEF) { n = 3; v = c & 0x0F; }
    else if (c >= 0xF0 && c <= 0xF4) { n = 4; v = c & 0x07; }
    else return 0;
    if (end - p < n) return 0;
    for (int k = 1; k < n; k++) {
        if ((p[k] & 0xC0) != 0x80) return 0;
        v = (v << 6) | (p[k] & 0x3F);
    }
    if ((n == 3 && v < 0x800) || (n == 4 && (v < 0x10000 || v > 0x10FFFF)) ||
        (v >= 0xD800 && v <= 0xDFFF))
        return 0;
    *cp = v;
    return n;
}

/* Escapes, control characters and UTF-8 of a string's contents (jsmn checks only some). */
static int check_string(const char *s, int n) {
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        uint32_t cp = 0;
        if (*p < 0x20) return 0;
        if (*p == '\\') {
            if (end - p < 2) return 0;
            switch (p[1]) {
            case '"': case '\\': case '/': case 'b': case 'f': case 'n': case 'r': case 't':
                p += 2;
                continue;
            case 'u':
                if (end - p < 6 || !hex4((const char *)p + 2, &cp)) return 0;
                p += 6; /* lone surrogates are valid JSON text (RFC 8259 §8.2) */
                continue;
            default:
                return 0;
            }
        }
        int k = utf8_len(p, end, &cp);
        if (!k) return 0;
        p += k;
    }
    return 1;
}

int vrt_json_skip(const vrt_json *j, int i) {
    int pending = 1;
    while (pending > 0 && i < j->count) {
        pending += j->tok[i].size - 1;
        i++;
    }
    return i;
}

/* The separators between values (RFC 8259 §2, §4, §5), which jsmn does not check, in
 * one pass over the tokens. No recursion: an explicit stack of VRT_JSON_MAX_DEPTH open
 * containers (12 bytes each); deeper is VRT_JSON_TOO_DEEP. */
static int check_structure(const vrt_json *j) {
    struct {
        int index, remaining, pos; /* the container, its children left, the text checked up to */
    } open[VRT_JSON_MAX_DEPTH];
    const jsmntok_t *tok = j->tok;
    if (tok[0].type != JSMN_OBJECT && tok[0].type != JSMN_ARRAY) return j->count == 1 ? VRT_JSON_OK : VRT_JSON_MALFORMED;
    int depth = 1, k = 1;
    open[0].index = 0;
    open[0].remaining = tok[0].size;
    open[0].pos = tok[0].start + 1;
    while (depth > 0) {
        int p = depth - 1;
        const jsmntok_t *t = &tok[open[p].index];
        if (open[p].remaining == 0) {
            if (!gap_is(j->js, open[p].pos, t->end - 1, 0)) return VRT_JSON_MALFORMED;
            depth--;
            if (depth > 0) open[depth - 1].pos = t->end;
            continue;
        }
        if (k >= j->count) return VRT_JSON_MALFORMED;
        const jsmntok_t *c = &tok[k];
        if (!gap_is(j->js, open[p].pos, outer_start(c), open[p].remaining < t->size ? ',' : 0))
            return VRT_JSON_MALFORMED;
        if (t->type == JSMN_OBJECT) {
            if (c->type != JSMN_STRING || c->size != 1 || k + 1 >= j->count ||
                !gap_is(j->js, outer_end(c), outer_start(&tok[k + 1]), ':'))
                return VRT_JSON_MALFORMED;
            c = &tok[++k];
        }
        open[p].remaining--;
        if (c->type == JSMN_OBJECT || c->type == JSMN_ARRAY) {
            if (depth == VRT_JSON_MAX_DEPTH) return VRT_JSON_TOO_DEEP;
            open[depth].index = k;
            open[depth].remaining = c->size;
            open[depth].pos = c->start + 1;
            depth++;
        } else {
            if (c->size != 0) return VRT_JSON_MALFORMED;
            open[p].pos = outer_end(c);
        }
        k++;
    }
    return k == j->count ? VRT_JSON_OK : VRT_JSON_MALFORMED;
}

/* Whether the text nests deeper than VRT_JSON_MAX_DEPTH, in one pass over its bytes:
 * checked before jsmn runs, whose closing of a container walks back over the tokens
 * (quadratic in the nesting depth), and so that the structure check needs no more than
 * VRT_JSON_MAX_DEPTH levels of stack. */
static int too_deep(const char *js, size_t len) {
    int depth = 0, in_string = 0;
    for (size_t k = 0; k < len; k++) {
        char c = js[k];
        if (in_string) {
            if (c == '\\') k++;
            else if (c == '"') in_string = 0;
        } else if (c == '"') {
            in_string = 1;
        } else if (c == '{' || c == '[') {
            if (++depth > VRT_JSON_MAX_DEPTH) return 1;
        } else if (c == '}' || c == ']') {
            depth--;
        }
    }
    return 0;
}

int vrt_json_parse(vrt_json *j, const char *js, size_t len, jsmntok_t *tok, unsigned cap) {
    jsmn_parser parser;
    jsmn_init(&parser);
    j->js = js;
    j->len = len;
    j->tok = tok;
    j->count = 0;
    if (len > 0x7fffffff) return VRT_JSON_TOO_BIG;
    if (too_deep(js, len)) return VRT_JSON_TOO_DEEP;
    int r = jsmn_parse(&parser, js, len, tok, cap);
    if (r == JSMN_ERROR_NOMEM) return VRT_JSON_TOO_BIG;
    if (r <= 0) return VRT_JSON_MALFORMED;
    j->count = r;
    /* One value and nothing but whitespace around it (jsmn also stops at a NUL byte). */
    const jsmntok_t *root = &tok[0];
    if (!gap_is(js, 0, outer_start(root), 0) || outer_end(root) > (int)len ||
        !gap_is(js, outer_end(root), (int)len, 0))
        return VRT_JSON_MALFORMED;
    for (int k = 0; k < r; k++) {
        const jsmntok_t *t = &tok[k];
        if (t->start < 0 || t->end < 0) return VRT_JSON_MALFORMED;
        if (t->type == JSMN_PRIMITIVE && !check_primitive(js + t->start, t->end - t->start))
            return VRT_JSON_MALFORMED;
        if (t->type == JSMN_STRING && !check_string(js + t->start, t->end - t->start))
            return VRT_JSON_MALFORMED;
    }
    return check_structure(j);
}

void vrt_str_begin(const vrt_json *j, int i, vrt_str_iter *it) {
    it->p = j->js + j->tok[i].start;
    it->end = j->js + j->tok[i].end;
}

int32_t vrt_str_next(vrt_str_iter *it) {
    if (it->p >= it->end) return -1;
    const unsigned char *p = (const unsigned char *)it->p;
    uint32_t cp = 0;
    if (*p == '\\') {
        char e = (char)p[1];
        it->p += 2;
        switch (e) {
        case 'b': return '\b';
        case 'f': return '\f';
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case 'u':
            hex4(it->p, &cp);
            it->p += 4;
            if (cp >= 0xD800 && cp <= 0xDBFF && it->end - it->p >= 6 && it->p[0] == '\\' &&
                it->p[1] == 'u') {
                uint32_t low;
                if (hex4(it->p + 2, &low) && low >= 0xDC00 && low <= 0xDFFF) {
                    it->p += 6;
                    return (int32_t)(0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00));
                }
            }
            return (int32_t)cp;
        default: return e;
        }
    }
    int n = utf8_len(p, (const unsigned char *)it->end, &cp);
    it->p += n ? n : 1;
    return (int32_t)cp;
}

static int utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

int vrt_json_str_eq(const vrt_json *j, int i, const char *s) {
    if (j->tok[i].type != JSMN_STRING) return 0;
    vrt_str_iter it;
    vrt_str_begin(j, i, &it);
    const unsigned char *q = (const unsigned char *)s, *qend = q + strlen(s);
    for (;;) {
        int32_t cp = vrt_str_next(&it);
        if (cp < 0) return q == qend;
        uint32_t want;
        if (q >= qend) return 0;
        int n = utf8_len(q, qend, &want);
        if (!n || want != (uint32_t)cp) return 0;
        q += n;
    }
}

static int names_equal(const vrt_json *j, int a, int b) {
    const jsmntok_t *ta = &j->tok[a], *tb = &j->tok[b];
    if (ta->end - ta->start == tb->end - tb->start &&
        !memcmp(j->js + ta->start, j->js + tb->start, (size_t)(ta->end - ta->start)))
        return 1;
    vrt_str_iter x, y;
    vrt_str_begin(j, a, &x);
    vrt_str_begin(j, b, &y);
    for (;;) {
        int32_t cx = vrt_str_next(&x), cy = vrt_str_next(&y);
        if (cx != cy) return 0;
        if (cx < 0) return 1;
    }
}

size_t vrt_json_str_codepoints(const vrt_json *j, int i) {
    vrt_str_iter it;
    size_t n = 0;
    vrt_str_begin(j, i, &it);
    while (vrt_str_next(&it) >= 0) n++;
    return n;
}

int vrt_json_str_copy(const vrt_json *j, int i, char *out, size_t cap) {
    vrt_str_iter it;
    size_t n = 0;
    char buf[4];
    vrt_str_begin(j, i, &it);
    for (int32_t cp; (cp = vrt_str_next(&it)) >= 0;) {
        int k = utf8_put((uint32_t)cp, buf);
        if (n + (size_t)k + 1 > cap) return -1;
        memcpy(out + n, buf, (size_t)k);
        n += (size_t)k;
    }
    if (cap == 0) return -1;
    out[n] = 0;
    return (int)n;
}

int vrt_json_member(const vrt_json *j, int obj, const char *name) {
    if (obj < 0 || j->tok[obj].type != JSMN_OBJECT) return -1;
    int found = -1, k = obj + 1;
    for (int m = 0; m < j->tok[obj].size; m++) {
        if (vrt_json_str_eq(j, k, name)) found = k + 1;
        k = vrt_json_skip(j, k + 1);
    }
    return found;
}

int vrt_json_has_duplicates(const vrt_json *j) {
    for (int o = 0; o < j->count; o++) {
        if (j->tok[o].type != JSMN_OBJECT) continue;
        int a = o + 1;
        for (int m = 0; m < j->tok[o].size; m++) {
            int b = vrt_json_skip(j, a + 1);
            for (int n = m + 1; n < j->tok[o].size; n++) {
                if (names_equal(j, a, b)) return 1;
                b = vrt_json_skip(j, b + 1);
            }
            a = vrt_json_skip(j, a + 1);
        }
    }
    return 0;
}

vrt_num vrt_json_u32(const vrt_json *j, int i, uint32_t *out) {
    const jsmntok_t *t = &j->tok[i];
    const char *s = j->js + t->start, *end = j->js + t->end;
    if (t->type != JSMN_PRIMITIVE || !(*s == '-' || (*s >= '0' && *s <= '9'))) return VRT_NUM_NOT_NUMBER;
    int negative = *s == '-';
    if (negative) s++;
    /* The significant digits and the power of ten of the last one. */
    char digits[24];
    int ndigits = 0, dropped_nonzero = 0;
    long exponent = 0;
    int in_fraction = 0;
    for (; s < end && *s != 'e' && *s != 'E'; s++) {
        if (*s == '.') { in_fraction = 1; continue; }
        if (ndigits == 0 && *s == '0') { if (in_fraction) exponent--; continue; }
        if (ndigits < (int)sizeof digits) {
            digits[ndigits++] = *s;
            if (in_fraction) exponent--;
        } else {
            if (*s != '0') dropped_nonzero = 1;
            if (!in_fraction) exponent++;
        }
    }
    if (s < end) {
        s++;
        int eneg = 0;
        if (*s == '+' || *s == '-') eneg = *s++ == '-';
        long e = 0;
        for (; s < end; s++)
            if (e < 100000) e = e * 10 + (*s - '0');
        exponent += eneg ? -e : e;
    }
    while (ndigits > 0 && digits[ndigits - 1] == '0') { ndigits--; exponent++; }
    if (ndigits == 0) {
        if (dropped_nonzero) return negative ? VRT_NUM_NEGATIVE : VRT_NUM_BIG;
        *out = 0;
        return VRT_NUM_U32; /* 0, -0, 0.0e5 */
    }
    if (exponent < 0 || dropped_nonzero) return VRT_NUM_FRACTION;
    if (negative) return VRT_NUM_NEGATIVE;
    if (ndigits + exponent > 10) return VRT_NUM_BIG;
    uint64_t v = 0;
    for (int k = 0; k < ndigits; k++) v = v * 10 + (uint64_t)(digits[k] - '0');
    for (long k = 0; k < exponent; k++) v *= 10;
    if (v > 0xffffffffu) return VRT_NUM_BIG;
    *out = (uint32_t)v;
    return VRT_NUM_U32;
}

int vrt_json_is_literal(const vrt_json *j, int i, const char *lit) {
    const jsmntok_t *t = &j->tok[i];
    size_t n = strlen(lit);
    if (lit[0] == '"') {
        char inner[32];
        if (n < 2 || n - 2 >= sizeof inner) return 0;
        memcpy(inner, lit + 1, n - 2);
        inner[n - 2] = 0;
        return vrt_json_str_eq(j, i, inner);
    }
    return t->type == JSMN_PRIMITIVE && (size_t)(t->end - t->start) == n &&
           !memcmp(j->js + t->start, lit, n);
}

int vrt_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s, *end = p + n;
    while (p < end) {
        uint32_t cp = 0;
        int k = utf8_len(p, end, &cp);
        if (!k) return 0;
        p += k;
    }
    return 1;
}

int vrt_json_check(const char *s, size_t n, jsmntok_t *tok, unsigned cap) {
    /* jsmn's strict mode wants a delimiter after a top-level primitive: check it alone. */
    const char *p = s, *e = s + n;
    while (p < e && is_ws(*p)) p++;
    if (p < e && *p != '{' && *p != '[' && *p != '"') {
        while (e > p && is_ws(e[-1])) e--;
        return check_primitive(p, (int)(e - p)) ? VRT_JSON_OK : VRT_JSON_MALFORMED;
    }
    vrt_json j;
    return vrt_json_parse(&j, s, n, tok, cap);
}
