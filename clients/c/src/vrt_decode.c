#include "vrt/decode.h"

#include <string.h>

static int is_string(const vrt_json *j, int i) { return j->tok[i].type == JSMN_STRING; }

static int is_id(const vrt_json *j, int i) {
    if (!is_string(j, i)) return 0;
    size_t n = vrt_json_str_codepoints(j, i); /* §11, messages.md: code points */
    return n >= 1 && n <= 256;
}

static int in_set(const vrt_json *j, int i, int set) {
    if (!is_string(j, i)) return -1;
    for (int k = 0; k < vrt_enum_sets[set].count; k++)
        if (vrt_json_str_eq(j, i, vrt_enum_sets[set].values[k])) return k;
    return -1;
}

/* ^[a-z0-9]+([.-][a-z0-9]+)*$, at most 64 (ECMA-262: $ only at the very end). */
static int is_capability(const vrt_json *j, int i) {
    if (!is_string(j, i)) return 0;
    vrt_str_iter it;
    int n = 0, after_sep = 1;
    vrt_str_begin(j, i, &it);
    for (int32_t c; (c = vrt_str_next(&it)) >= 0;) {
        if (++n > 64) return 0;
        if ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')) after_sep = 0;
        else if ((c == '.' || c == '-') && !after_sep) after_sep = 1;
        else return 0;
    }
    return n > 0 && !after_sep;
}

/* ^[A-Z]+(_[A-Z]+)*$ (§9.2). */
static int is_error_code(const vrt_json *j, int i) {
    if (!is_string(j, i)) return 0;
    vrt_str_iter it;
    int n = 0, after_sep = 1;
    vrt_str_begin(j, i, &it);
    for (int32_t c; (c = vrt_str_next(&it)) >= 0; n++) {
        if (c >= 'A' && c <= 'Z') after_sep = 0;
        else if (c == '_' && !after_sep) after_sep = 1;
        else return 0;
    }
    return n > 0 && !after_sep;
}

static int is_format(const vrt_json *j, int i) {
    if (j->tok[i].type != JSMN_OBJECT) return 0;
    int enc = vrt_json_member(j, i, "encoding");
    if (enc < 0 || in_set(j, enc, VRT_FORMAT_ENUM_SET) < 0) return 0;
    int rate = vrt_json_member(j, i, "sampleRate");
    if (rate >= 0) {
        uint32_t v = 0;
        vrt_num kind = vrt_json_u32(j, rate, &v);
        if (kind == VRT_NUM_BIG) v = 0xffffffffu; /* an integer >= 1 (no maximum) */
        else if (kind != VRT_NUM_U32 || v < 1) return 0;
        if (vrt_json_str_eq(j, enc, "pcmu") && v != 8000) return 0; /* pcmu is 8000 Hz */
    }
    return 1;
}

static int is_capabilities(const vrt_json *j, int i, int unique) {
    if (j->tok[i].type != JSMN_ARRAY) return 0;
    int k = i + 1;
    for (int n = 0; n < j->tok[i].size; n++) {
        if (!is_capability(j, k)) return 0;
        if (unique) {
            int other = i + 1;
            for (int m = 0; m < n; m++, other++) {
                vrt_str_iter a, b;
                vrt_str_begin(j, k, &a);
                vrt_str_begin(j, other, &b);
                int32_t ca, cb;
                do {
                    ca = vrt_str_next(&a);
                    cb = vrt_str_next(&b);
                } while (ca == cb && ca >= 0);
                if (ca == cb) return 0;
            }
        }
        k++; /* capability tokens are strings: one token each */
    }
    return 1;
}

static int field_ok(const vrt_json *j, int i, const vrt_field *f) {
    uint32_t v = 0;
    switch ((vrt_kind)f->kind) {
    case VRT_K_TYPE:
    case VRT_K_V:
    case VRT_K_JSON: return 1;
    case VRT_K_SEQ_TRANSIENT: return vrt_json_u32(j, i, &v) == VRT_NUM_U32 && v == 0;
    case VRT_K_SEQ_SEQUENCED: return vrt_json_u32(j, i, &v) == VRT_NUM_U32 && v >= 1;
    case VRT_K_U32: return vrt_json_u32(j, i, &v) == VRT_NUM_U32;
    case VRT_K_ID: return is_id(j, i);
    case VRT_K_ID_OR_NULL: return vrt_json_is_literal(j, i, "null") || is_id(j, i);
    case VRT_K_STRING: return is_string(j, i);
    case VRT_K_BOOL: return vrt_json_is_literal(j, i, "true") || vrt_json_is_literal(j, i, "false");
    case VRT_K_ENUM: return in_set(j, i, f->enum_set) >= 0;
    case VRT_K_FORMAT: return is_format(j, i);
    case VRT_K_CAPABILITIES: return is_capabilities(j, i, f->unique);
    case VRT_K_ERROR_CODE: return is_error_code(j, i);
    case VRT_K_COUNT: break;
    }
    return 0;
}

/* A JSON Schema if/then on a member: true when it is absent or has the value. */
static int condition_holds(const vrt_message *m, uint8_t slot, const char *literal) {
    int i = m->member[slot];
    return i < 0 || vrt_json_is_literal(&m->json, i, literal);
}

static vrt_error_code check_field(vrt_message *m, const vrt_field *f, const char **reason) {
    int i = vrt_json_member(&m->json, 0, f->name);
    if (i < 0) {
        if (f->required) {
            *reason = "a required member is missing";
            return VRT_E_INVALID_FIELD;
        }
        return VRT_E_NONE;
    }
    m->member[f->slot] = (int16_t)i;
    if (!field_ok(&m->json, i, f)) {
        *reason = "a member has a value its schema forbids";
        return VRT_E_INVALID_FIELD;
    }
    return VRT_E_NONE;
}

vrt_error_code vrt_decode_server(vrt_message *m, const char *text, size_t len, jsmntok_t *tok,
                                 unsigned cap, const char **reason) {
    const char *why = "";
    vrt_error_code code = VRT_E_NONE;
    vrt_json *j = &m->json;
    for (int s = 0; s < VRT_SLOT_COUNT; s++) m->member[s] = -1;
    m->seq = 0;
    m->type = VRT_S_COUNT;
    int r = vrt_json_parse(j, text, len, tok, cap);
    if (r == VRT_JSON_TOO_BIG || r == VRT_JSON_TOO_DEEP) {
        why = r == VRT_JSON_TOO_BIG ? "the message has more JSON tokens than this client's limit (§11)"
                                    : "the message nests deeper than this client's limit (§11)";
        code = VRT_E_LIMIT_EXCEEDED;
        goto out;
    }
    if (r != VRT_JSON_OK || tok[0].type != JSMN_OBJECT || j->count > 0x7fff) {
        why = "not a JSON object (§9.1 rule 1)";
        code = VRT_E_MALFORMED;
        goto out;
    }
    /* §9.1 rule 2: v, its last occurrence (messages.md), must be the number 1. */
    int v = vrt_json_member(j, 0, "v");
    uint32_t vv = 0;
    if (v < 0 || vrt_json_u32(j, v, &vv) != VRT_NUM_U32 || vv != 1) {
        why = "v is absent or not 1 (§3.1)";
        code = VRT_E_UNSUPPORTED_VERSION;
        goto out;
    }
    /* §9.1 rule 3: a server type, compared exactly. */
    int t = vrt_json_member(j, 0, "type");
    int type = VRT_S_COUNT;
    if (t >= 0)
        for (int k = 0; k < VRT_S_COUNT; k++)
            if (vrt_json_str_eq(j, t, vrt_server_types[k].name)) type = k;
    if (type == VRT_S_COUNT) {
        why = "type is absent or not a server message type (§2.3)";
        code = VRT_E_UNKNOWN_TYPE;
        goto out;
    }
    m->type = (vrt_server_type)type;
    if (vrt_json_has_duplicates(j)) {
        why = "a member name appears twice (§2.2)";
        code = VRT_E_INVALID_FIELD;
        goto out;
    }
    const vrt_type_info *info = &vrt_server_types[type];
    for (int k = 0; k < info->field_count && code == VRT_E_NONE; k++)
        code = check_field(m, &vrt_server_fields[info->first_field + k], &why);
    for (int k = 0; k < info->condition_count && code == VRT_E_NONE; k++) {
        const vrt_condition *c = &vrt_server_conditions[info->first_condition + k];
        if (condition_holds(m, c->when_slot, c->when_literal) &&
            condition_holds(m, c->and_slot, c->and_literal))
            code = check_field(m, &c->field, &why);
    }
    if (code == VRT_E_NONE) m->seq = vrt_message_u32(m, VRT_SLOT_SEQ);
out:
    if (reason) *reason = why;
    return code;
}

uint32_t vrt_message_u32(const vrt_message *m, vrt_slot slot) {
    uint32_t v = 0;
    if (m->member[slot] >= 0 && vrt_json_u32(&m->json, m->member[slot], &v) == VRT_NUM_U32) return v;
    return 0;
}

int vrt_message_true(const vrt_message *m, vrt_slot slot) {
    return m->member[slot] >= 0 && vrt_json_is_literal(&m->json, m->member[slot], "true");
}

int vrt_message_enum(const vrt_message *m, vrt_slot slot, int set) {
    return m->member[slot] >= 0 ? in_set(&m->json, m->member[slot], set) : -1;
}

int vrt_frame_parse_output(const uint8_t *data, size_t len, uint32_t *seq, const uint8_t **payload,
                           size_t *payload_len) {
    if (len < VRT_FRAME_HEADER || data[0] != VRT_FRAME_OUTPUT) return VRT_E_MALFORMED;
    *seq = ((uint32_t)data[1] << 24) | ((uint32_t)data[2] << 16) | ((uint32_t)data[3] << 8) | data[4];
    *payload = data + VRT_FRAME_HEADER;
    *payload_len = len - VRT_FRAME_HEADER;
    return 0;
}

void vrt_frame_header(uint8_t out[VRT_FRAME_HEADER], uint32_t seq) {
    out[0] = VRT_FRAME_INPUT;
    out[1] = (uint8_t)(seq >> 24);
    out[2] = (uint8_t)(seq >> 16);
    out[3] = (uint8_t)(seq >> 8);
    out[4] = (uint8_t)seq;
}
