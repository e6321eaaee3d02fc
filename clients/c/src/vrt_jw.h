/* A JSON writer into a fixed buffer: compact, strings escaped, integers plain (§2.2).
 * Writing past the end sets `overflow` and writes nothing more. */
#ifndef VRT_JW_H
#define VRT_JW_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    char *buf;
    size_t cap, len;
    int overflow;
} vrt_jw;

void vrt_jw_init(vrt_jw *w, char *buf, size_t cap);
void vrt_jw_raw(vrt_jw *w, const char *s, size_t n);
void vrt_jw_lit(vrt_jw *w, const char *s);
void vrt_jw_str(vrt_jw *w, const char *s);
void vrt_jw_u32(vrt_jw *w, uint32_t v);
/* `,"name":` (the comma unless first). */
void vrt_jw_key(vrt_jw *w, const char *name);
/* {"v":1,"seq":SEQ,"type":"TYPE" (an object left open). */
void vrt_jw_head(vrt_jw *w, const char *type, uint32_t seq);

#endif
