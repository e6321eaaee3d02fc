#include "vrt_jw.h"

#include <string.h>

void vrt_jw_init(vrt_jw *w, char *buf, size_t cap) {
    w->buf = buf;
    w->cap = cap;
    w->len = 0;
    w->overflow = 0;
}

void vrt_jw_raw(vrt_jw *w, const char *s, size_t n) {
    if (w->overflow || n > w->cap - w->len) {
        w->overflow = 1;
        return;
    }
    memcpy(w->buf + w->len, s, n);
    w->len += n;
}

void vrt_jw_lit(vrt_jw *w, const char *s) { vrt_jw_raw(w, s, strlen(s)); }

void vrt_jw_str(vrt_jw *w, const char *s) {
    static const char hex[] = "0123456789abcdef";
    vrt_jw_raw(w, "\"", 1);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        char esc[6] = {'\\', 'u', '0', '0', 0, 0};
        switch (*p) {
        case '"': vrt_jw_raw(w, "\\\"", 2); break;
        case '\\': vrt_jw_raw(w, "\\\\", 2); break;
        case '\n': vrt_jw_raw(w, "\\n", 2); break;
        case '\r': vrt_jw_raw(w, "\\r", 2); break;
        case '\t': vrt_jw_raw(w, "\\t", 2); break;
        default:
            if (*p < 0x20) {
                esc[4] = hex[*p >> 4];
                esc[5] = hex[*p & 15];
                vrt_jw_raw(w, esc, 6);
            } else {
                vrt_jw_raw(w, (const char *)p, 1);
            }
        }
    }
    vrt_jw_raw(w, "\"", 1);
}

void vrt_jw_u32(vrt_jw *w, uint32_t v) {
    char digits[10];
    int n = 0;
    do {
        digits[n++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    while (n) vrt_jw_raw(w, &digits[--n], 1);
}

void vrt_jw_key(vrt_jw *w, const char *name) {
    if (w->len && w->buf[w->len - 1] != '{') vrt_jw_raw(w, ",", 1);
    vrt_jw_str(w, name);
    vrt_jw_raw(w, ":", 1);
}

void vrt_jw_head(vrt_jw *w, const char *type, uint32_t seq) {
    vrt_jw_lit(w, "{\"v\":1,\"seq\":");
    vrt_jw_u32(w, seq);
    vrt_jw_lit(w, ",\"type\":");
    vrt_jw_str(w, type);
}
