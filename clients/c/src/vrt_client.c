/* The client role, sans I/O: one vrt_client across its connections, walking the rows
 * of the §5.1 client table (vrt_client_table, generated from vrt.protocol.tables).
 * The Python core (src/vrt/protocol/client/) is the model: the same inputs, actions and
 * events; memory is the application's fixed buffers. */
#include "vrt/client.h"

#include <string.h>

#include "vrt_jw.h"

/* --- small helpers ------------------------------------------------------------------ */

static void emit(vrt_client *c, vrt_event *ev) {
    if (c->cfg.emit) c->cfg.emit(c->cfg.ctx, ev);
}

static void event_init(vrt_event *ev, vrt_event_type type) {
    memset(ev, 0, sizeof *ev);
    ev->type = type;
}

static void emit_error(vrt_client *c, const char *code, const char *message, int recoverable) {
    vrt_event ev;
    event_init(&ev, VRT_EV_ERROR);
    ev.code = code;
    ev.message = message;
    ev.recoverable = recoverable;
    emit(c, &ev);
}

static void out_text(vrt_client *c, const char *data, size_t len, vrt_ms now) {
    vrt_output out = {VRT_OUT_TEXT, NULL, 0, (const uint8_t *)data, len, 0};
    c->cfg.write(c->cfg.ctx, &out);
    c->last_sent = now;
}

static void out_close(vrt_client *c, uint16_t code, const char *reason) {
    vrt_output out = {VRT_OUT_CLOSE, NULL, 0, (const uint8_t *)reason, strlen(reason), code};
    c->cfg.write(c->cfg.ctx, &out);
}

static int id_copy(char *dst, const char *src) {
    size_t n = strlen(src);
    if (n >= VRT_ID_MAX) return 0;
    memcpy(dst, src, n + 1);
    return 1;
}

/* --- the outgoing stream (§4.1, §4.2, §5.4): kept slots hold [seq u32][len u32][bytes] -- */

#define KEPT_HEADER 8

static uint8_t *kept_slot(vrt_client *c, size_t k) {
    return c->cfg.kept + ((c->kept_head + k) % c->cfg.kept_slots) * c->cfg.kept_slot_size;
}

static uint32_t get_u32(const uint8_t *p) {
    uint32_t v;
    memcpy(&v, p, 4);
    return v;
}

static void put_u32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }

/* The slot the next sequenced message is encoded into, or NULL when all are kept. */
static vrt_status kept_reserve(vrt_client *c, vrt_jw *w) {
    if (c->kept_count >= c->cfg.kept_slots) return VRT_ERR_FULL;
    if (c->out_last_seq == 0xffffffffu) return VRT_ERR_STATE; /* §4.1: seq never wraps */
    uint8_t *slot = kept_slot(c, c->kept_count);
    vrt_jw_init(w, (char *)slot + KEPT_HEADER, c->cfg.kept_slot_size - KEPT_HEADER);
    return VRT_OK;
}

static void kept_ack(vrt_client *c, uint32_t up_to) {
    while (c->kept_count && get_u32(kept_slot(c, 0)) <= up_to) {
        c->kept_head = (c->kept_head + 1) % c->cfg.kept_slots;
        c->kept_count--;
    }
}

/* Whether everything after `from` can be resent (§5.4), as OutgoingStream.resend_after. */
static int kept_can_resend(vrt_client *c, uint32_t from) {
    if (from > c->out_last_seq) return 0;
    if (from < c->out_last_seq && (!c->kept_count || get_u32(kept_slot(c, 0)) > from + 1)) return 0;
    return 1;
}

/* --- the client table --------------------------------------------------------------- */

typedef struct {
    const vrt_message *m;   /* a received message, or NULL */
    vrt_jw *w;              /* SEND: a message encoded into the next kept slot */
    const uint8_t *payload; /* SEND_AUDIO, OUTPUT_AUDIO */
    size_t len;
    const char *reason; /* READY_MISMATCH, CANNOT_RESEND, INVALID */
    vrt_error_code invalid;
} arg_t;

static vrt_status input(vrt_client *c, vrt_input in, arg_t *a, vrt_ms now);

/* Unescape a string member in place (the text never grows, and the member is not read
 * as JSON again); its length in *len, which counts any \u0000 inside. */
static char *take_str_len(const vrt_message *m, vrt_slot slot, size_t *len) {
    int i = m->member[slot];
    if (i < 0 || m->json.tok[i].type != JSMN_STRING) return NULL;
    char *start = (char *)m->json.js + m->json.tok[i].start;
    size_t room = (size_t)(m->json.tok[i].end - m->json.tok[i].start) + 1; /* + the quote */
    int n = vrt_json_str_copy(&m->json, i, start, room);
    if (n < 0) return NULL;
    if (len) *len = (size_t)n;
    return start;
}

static char *take_str(const vrt_message *m, vrt_slot slot) { return take_str_len(m, slot, NULL); }

static void raw_json(const vrt_message *m, vrt_slot slot, const char **p, size_t *n) {
    int i = m->member[slot];
    if (i < 0) {
        *p = "null";
        *n = 4;
        return;
    }
    const jsmntok_t *t = &m->json.tok[i];
    int start = t->type == JSMN_STRING ? t->start - 1 : t->start;
    int end = t->type == JSMN_STRING ? t->end + 1 : t->end;
    *p = m->json.js + start;
    *n = (size_t)(end - start);
}

/* --- the epoch gate (§6.2) and tool calls (§7) -------------------------------------- */

enum { CALL_QUEUED, CALL_RUNNING, CALL_OWED };

typedef struct {
    uint32_t epoch;
    uint32_t args_len;
    uint16_t id_len, name_len, turn_len;
    uint8_t state, owed_code;
} call_hdr;

static uint8_t *call_slot(vrt_client *c, size_t k) { return c->cfg.calls + k * c->cfg.call_slot_size; }
static call_hdr *call_at(vrt_client *c, size_t k) { return (call_hdr *)(void *)call_slot(c, k); }
static char *call_id(vrt_client *c, size_t k) { return (char *)call_slot(c, k) + sizeof(call_hdr); }
static char *call_name(vrt_client *c, size_t k) { return call_id(c, k) + call_at(c, k)->id_len + 1; }
static char *call_turn(vrt_client *c, size_t k) { return call_name(c, k) + call_at(c, k)->name_len + 1; }
static char *call_args(vrt_client *c, size_t k) { return call_turn(c, k) + call_at(c, k)->turn_len + 1; }

static void call_remove(vrt_client *c, size_t k) {
    size_t size = c->cfg.call_slot_size;
    memmove(call_slot(c, k), call_slot(c, k + 1), (c->call_count - k - 1) * size);
    c->call_count--;
}

static int is_closed(const vrt_client *c, uint32_t epoch) {
    return c->has_closed && epoch <= c->closed_epoch;
}

static void observe(vrt_client *c, uint32_t epoch) {
    if (epoch > c->observed_epoch) c->observed_epoch = epoch;
}

static int answered(const vrt_client *c, const char *id) {
    for (size_t k = 0; k < VRT_REMEMBERED_ANSWERS; k++)
        if (c->answered[k][0] && !strcmp(c->answered[k], id)) return 1;
    return 0;
}

static const char *const failure_messages[] = {
    "the turn was interrupted", "the call was rejected", "the arguments are invalid",
    "the call timed out", "the call failed"};

/* Encode and send a tool.result (§7.2). */
static vrt_status send_result(vrt_client *c, const char *id, uint32_t epoch, int ok,
                              const char *output, size_t output_len, const char *code,
                              const char *message, vrt_ms now) {
    if (c->state == VRT_STATE_CLOSED) return VRT_ERR_STATE;
    vrt_jw w;
    vrt_status s = kept_reserve(c, &w);
    if (s != VRT_OK) return s;
    vrt_jw_head(&w, "tool.result", c->out_last_seq + 1);
    vrt_jw_key(&w, "callId");
    vrt_jw_str(&w, id);
    vrt_jw_key(&w, "epoch");
    vrt_jw_u32(&w, epoch);
    if (ok) {
        vrt_jw_lit(&w, ",\"ok\":true,\"output\":");
        vrt_jw_raw(&w, output, output_len);
    } else {
        vrt_jw_lit(&w, ",\"ok\":false,\"code\":");
        vrt_jw_str(&w, code);
        vrt_jw_key(&w, "message");
        if (message) vrt_jw_str(&w, message);
        else vrt_jw_lit(&w, "null");
    }
    vrt_jw_lit(&w, "}");
    if (w.overflow) return VRT_ERR_TOO_LARGE;
    arg_t a = {0};
    a.w = &w;
    s = input(c, VRT_IN_SEND, &a, now);
    if (s == VRT_OK) {
        /* §7.2: one result per call; remembered to refuse a second. */
        if (!id_copy(c->answered[c->answered_next], id)) c->answered[c->answered_next][0] = 0;
        c->answered_next = (c->answered_next + 1) % VRT_REMEMBERED_ANSWERS;
    }
    return s;
}

/* Answer call k with a failure the core decides (INTERRUPTED, FAILED); when no kept
 * slot is free the answer is owed and sent after the next ack: never lost. */
static void answer_failure(vrt_client *c, size_t k, int code, const char *message, vrt_ms now) {
    call_hdr *h = call_at(c, k);
    vrt_status s = send_result(c, call_id(c, k), h->epoch, 0, NULL, 0,
                               vrt_enum_sets[1].values[code], message, now);
    if (s == VRT_ERR_FULL && c->state != VRT_STATE_CLOSED) {
        h->state = CALL_OWED;
        h->owed_code = (uint8_t)code;
    } else {
        call_remove(c, k);
    }
}

static int failure_index(const char *code) {
    for (int k = 0; k < vrt_enum_sets[1].count; k++)
        if (!strcmp(vrt_enum_sets[1].values[k], code)) return k;
    return -1;
}
#define F_INTERRUPTED failure_index("INTERRUPTED")
#define F_FAILED failure_index("FAILED")

static int has_tool(const vrt_client *c, const char *name) {
    for (size_t k = 0; k < c->cfg.tool_count; k++)
        if (!strcmp(c->cfg.tools[k].name, name)) return 1;
    return 0;
}

static int running_index(vrt_client *c) {
    for (size_t k = 0; k < c->call_count; k++)
        if (call_at(c, k)->state == CALL_RUNNING) return (int)k;
    return -1;
}

/* §7.1: start the next queued call once the previous one has its result. */
static void next_call(vrt_client *c, vrt_ms now) {
    if (running_index(c) >= 0) return;
    size_t k = 0;
    while (k < c->call_count) {
        call_hdr *h = call_at(c, k);
        if (h->state != CALL_QUEUED) {
            k++;
            continue;
        }
        size_t before = c->call_count;
        if (is_closed(c, h->epoch)) {
            answer_failure(c, k, F_INTERRUPTED, failure_messages[0], now);
        } else if (!has_tool(c, call_name(c, k))) {
            answer_failure(c, k, F_FAILED, "no tool of that name (§7.3)", now);
        } else {
            h->state = CALL_RUNNING;
            vrt_event ev;
            event_init(&ev, VRT_EV_RUN_TOOL);
            ev.call_id = call_id(c, k);
            ev.name = call_name(c, k);
            ev.turn_id = call_turn(c, k);
            ev.json = call_args(c, k);
            ev.json_len = h->args_len;
            ev.epoch = h->epoch;
            emit(c, &ev);
            return;
        }
        if (c->call_count == before) k++; /* owed: kept in place */
    }
}

/* Send the answers owed for want of a kept slot, in order (after an ack or a ready). */
static void flush_owed(vrt_client *c, vrt_ms now) {
    size_t k = 0;
    while (k < c->call_count && c->kept_count < c->cfg.kept_slots) {
        call_hdr *h = call_at(c, k);
        if (h->state == CALL_OWED) {
            size_t before = c->call_count;
            answer_failure(c, k, h->owed_code, failure_messages[h->owed_code], now);
            if (c->call_count == before) return;
        } else {
            k++;
        }
    }
}

static void close_epoch(vrt_client *c, uint32_t epoch, int local, vrt_ms now) {
    if (is_closed(c, epoch)) return; /* §6.2: no further effect */
    c->has_closed = 1;
    c->closed_epoch = epoch;
    vrt_event ev;
    event_init(&ev, VRT_EV_PLAYBACK_STOP);
    ev.epoch = epoch;
    emit(c, &ev);
    int r = running_index(c);
    if (r >= 0 && is_closed(c, call_at(c, r)->epoch)) {
        /* §7.2: answer at once; the tool's later outcome is discarded. */
        event_init(&ev, VRT_EV_CANCEL_TOOL);
        ev.call_id = call_id(c, (size_t)r);
        emit(c, &ev);
        answer_failure(c, (size_t)r, F_INTERRUPTED, failure_messages[0], now);
    }
    size_t k = 0;
    while (k < c->call_count) {
        call_hdr *h = call_at(c, k);
        size_t before = c->call_count;
        if (h->state == CALL_QUEUED && is_closed(c, h->epoch))
            answer_failure(c, k, F_INTERRUPTED, failure_messages[0], now);
        if (c->call_count == before) k++;
    }
    next_call(c, now);
    if (local && vrt_client_has_capability(c, VRT_CAP_TOOL_STREAM_V1)) {
        /* §7.5: unterminated calls of the closed epoch count as cancelled at once. */
        for (size_t s = 0; s < VRT_REMEMBERED_STREAMS; s++) {
            vrt_stream *st = &c->streams[s];
            if (!st->used || (vrt_phase_terminal >> st->phase & 1u) || !is_closed(c, st->epoch)) continue;
            st->phase = VRT_PHASE_CANCELLED;
            event_init(&ev, VRT_EV_TOOL_STREAM);
            ev.call_id = st->id;
            ev.epoch = st->epoch;
            ev.phase = vrt_phase_names[VRT_PHASE_CANCELLED];
            emit(c, &ev);
        }
    }
    event_init(&ev, VRT_EV_INTERRUPTED);
    ev.epoch = epoch;
    ev.local = local;
    emit(c, &ev);
}

static int call_known(vrt_client *c, const char *id) {
    if (answered(c, id)) return 1;
    for (size_t k = 0; k < c->call_count; k++)
        if (!strcmp(call_id(c, k), id)) return 1;
    return 0;
}

static void on_tool_call(vrt_client *c, const vrt_message *m, vrt_ms now) {
    uint32_t epoch = vrt_message_u32(m, VRT_SLOT_EPOCH);
    observe(c, epoch);
    const char *args;
    size_t args_len;
    raw_json(m, VRT_SLOT_ARGUMENTS, &args, &args_len);
    char *id = take_str(m, VRT_SLOT_CALLID);
    char *name = take_str(m, VRT_SLOT_NAME);
    char *turn = take_str(m, VRT_SLOT_TURNID);
    if (!id || !name || !turn || call_known(c, id)) return;
    size_t id_len = strlen(id), name_len = strlen(name), turn_len = strlen(turn);
    size_t need = sizeof(call_hdr) + id_len + name_len + turn_len + args_len + 4;
    const char *refusal = NULL;
    if (is_closed(c, epoch))
        refusal = NULL;
    else if (c->call_count >= c->cfg.call_slots)
        refusal = "the client's call queue is full (§11)";
    else if (need > c->cfg.call_slot_size)
        refusal = "the call exceeds the client's call slot size (§11)";
    if (is_closed(c, epoch) || refusal) {
        /* §6.2: never start a call of a closed epoch; a call that cannot be held fails
         * with a clear message rather than waiting forever. */
        int code = is_closed(c, epoch) ? F_INTERRUPTED : F_FAILED;
        vrt_status s = send_result(c, id, epoch, 0, NULL, 0, vrt_enum_sets[1].values[code],
                                   refusal ? refusal : failure_messages[0], now);
        if (s != VRT_OK) emit_error(c, "LIMIT_EXCEEDED", "a tool call could not be answered: no kept slot", 1);
        return;
    }
    size_t k = c->call_count++;
    call_hdr *h = call_at(c, k);
    h->epoch = epoch;
    h->args_len = (uint32_t)args_len;
    h->id_len = (uint16_t)id_len;
    h->name_len = (uint16_t)name_len;
    h->turn_len = (uint16_t)turn_len;
    h->state = CALL_QUEUED;
    h->owed_code = 0;
    memcpy(call_id(c, k), id, id_len + 1);
    memcpy(call_name(c, k), name, name_len + 1);
    memcpy(call_turn(c, k), turn, turn_len + 1);
    memcpy(call_args(c, k), args, args_len);
    call_args(c, k)[args_len] = 0;
    next_call(c, now);
}

static void on_preview(vrt_client *c, const vrt_message *m) {
    uint32_t epoch = vrt_message_u32(m, VRT_SLOT_EPOCH);
    if (is_closed(c, epoch)) return; /* §6.2: SHOULD discard closed previews */
    vrt_event ev;
    event_init(&ev, VRT_EV_TOOL_PREVIEW);
    raw_json(m, VRT_SLOT_PREVIEW, &ev.json, &ev.json_len);
    ev.epoch = epoch;
    ev.call_id = take_str(m, VRT_SLOT_CALLID);
    ev.turn_id = take_str(m, VRT_SLOT_TURNID);
    emit(c, &ev);
}

static void on_tool_stream(vrt_client *c, const vrt_message *m) {
    uint32_t epoch = vrt_message_u32(m, VRT_SLOT_EPOCH);
    int phase = vrt_message_enum(m, VRT_SLOT_PHASE, 0);
    vrt_stream *slot = NULL;
    for (size_t s = 0; s < VRT_REMEMBERED_STREAMS; s++)
        if (c->streams[s].used && vrt_json_str_eq(&m->json, m->member[VRT_SLOT_CALLID], c->streams[s].id))
            slot = &c->streams[s];
    if (slot && (vrt_phase_terminal >> slot->phase & 1u)) return; /* §7.5: nothing after terminal */
    if (is_closed(c, epoch) || phase < 0) return;                   /* §7.5: SHOULD discard */
    vrt_event ev;
    event_init(&ev, VRT_EV_TOOL_STREAM);
    /* The member the phase carries (§7.5), raw, taken before strings are unescaped. */
    vrt_slot member = VRT_SLOT_COUNT;
    switch (phase) {
    case VRT_PHASE_ARGUMENTS_DELTA: member = VRT_SLOT_DELTA; break;
    case VRT_PHASE_ARGUMENTS_COMPLETE: member = VRT_SLOT_ARGUMENTS; break;
    case VRT_PHASE_PROGRESS: member = VRT_SLOT_PROGRESS; break;
    case VRT_PHASE_FAILED: member = VRT_SLOT_MESSAGE; break;
    default: break;
    }
    if (member != VRT_SLOT_COUNT) raw_json(m, member, &ev.json, &ev.json_len);
    ev.epoch = epoch;
    ev.phase = vrt_phase_names[phase];
    if (phase == VRT_PHASE_SETTLED) {
        ev.ok = vrt_message_true(m, VRT_SLOT_OK);
        ev.code = take_str(m, VRT_SLOT_CODE);
    }
    char *id = take_str(m, VRT_SLOT_CALLID);
    if (!slot) {
        slot = &c->streams[c->stream_next];
        c->stream_next = (c->stream_next + 1) % VRT_REMEMBERED_STREAMS;
        slot->used = (uint8_t)id_copy(slot->id, id);
    }
    slot->phase = (uint8_t)phase;
    slot->epoch = epoch;
    ev.call_id = id;
    ev.name = take_str(m, VRT_SLOT_NAME);
    ev.turn_id = take_str(m, VRT_SLOT_TURNID);
    emit(c, &ev);
}

/* --- errors ------------------------------------------------------------------------- */

static vrt_input error_input(const vrt_message *m) {
    const vrt_json *j = &m->json;
    int code = m->member[VRT_SLOT_CODE];
    if (vrt_json_str_eq(j, code, "RESUME_FAILED")) return VRT_IN_RESUME_FAILED;
    if (vrt_json_str_eq(j, code, "UNAUTHORIZED")) return VRT_IN_UNAUTHORIZED;
    if (!vrt_message_true(m, VRT_SLOT_RECOVERABLE)) {
        /* §9.2: these two say the session cannot continue; for others a resume tells. */
        if (vrt_json_str_eq(j, code, "AGENT_ERROR") || vrt_json_str_eq(j, code, "SERVER_SHUTDOWN"))
            return VRT_IN_SESSION_ENDED;
        return VRT_IN_ERROR_NOT_RECOVERABLE;
    }
    return VRT_IN_ERROR;
}

/* --- audio (§8) --------------------------------------------------------------------- */

/* Microseconds of one Opus packet (RFC 6716 §3.1: the TOC byte and the frame count). */
static uint64_t opus_us(const uint8_t *p, size_t n) {
    static const uint16_t frame_us10[32] = {1000, 2000, 4000, 6000, 1000, 2000, 4000, 6000,
                                            1000, 2000, 4000, 6000, 1000, 2000, 1000, 2000,
                                            250,  500,  1000, 2000, 250,  500,  1000, 2000,
                                            250,  500,  1000, 2000, 250,  500,  1000, 2000};
    if (n < 1) return 0;
    uint64_t frame = (uint64_t)frame_us10[p[0] >> 3] * 10;
    unsigned code = p[0] & 3u, frames = code == 0 ? 1 : code < 3 ? 2 : (n >= 2 ? (p[1] & 0x3Fu) : 0);
    return frame * frames;
}

static uint64_t duration_us(const vrt_format *f, size_t n, const uint8_t *payload) {
    if (f->encoding == VRT_PCM16) return f->sample_rate ? (uint64_t)(n >> 1) * 1000000u / f->sample_rate : 0;
    if (f->encoding == VRT_PCMU) return (uint64_t)n * 125u; /* 8000 Hz */
    return opus_us(payload, n);
}

static vrt_item *item_find(vrt_client *c, const char *id) {
    for (size_t k = 0; k < VRT_REMEMBERED_ITEMS; k++)
        if (c->items[k].used && !strcmp(c->items[k].id, id)) return &c->items[k];
    return NULL;
}

static void on_audio_start(vrt_client *c, const vrt_message *m) {
    uint32_t epoch = vrt_message_u32(m, VRT_SLOT_EPOCH);
    observe(c, epoch);
    char *id = take_str(m, VRT_SLOT_ITEMID);
    vrt_item *item = item_find(c, id);
    if (!item) {
        item = &c->items[c->item_next];
        c->item_next = (c->item_next + 1) % VRT_REMEMBERED_ITEMS;
        item->used = (uint8_t)id_copy(item->id, id);
        item->epoch = epoch;
        item->received_us = 0;
        if (!item->used) emit_error(c, "LIMIT_EXCEEDED", "an itemId longer than VRT_ID_MAX: no playback report for it", 1);
    }
    c->current_item = item->used ? (int)(item - c->items) : -1;
    if (!is_closed(c, epoch)) {
        vrt_event ev;
        event_init(&ev, VRT_EV_AUDIO_STARTED);
        ev.item_id = id;
        ev.turn_id = take_str(m, VRT_SLOT_TURNID);
        ev.epoch = epoch;
        emit(c, &ev);
    }
}

static void play(vrt_client *c, const uint8_t *data, size_t len) {
    uint32_t seq;
    const uint8_t *payload;
    size_t n;
    if (vrt_frame_parse_output(data, len, &seq, &payload, &n)) return; /* §8.1: dropped */
    /* §8.3: frames before any audio.start, and of a closed epoch, are discarded. */
    if (c->current_item < 0) return;
    vrt_item *item = &c->items[c->current_item];
    if (is_closed(c, item->epoch)) return;
    item->received_us += duration_us(&c->output, n, payload);
    vrt_event ev;
    event_init(&ev, VRT_EV_AUDIO_CHUNK);
    ev.item_id = item->id;
    ev.payload = payload;
    ev.payload_len = n;
    emit(c, &ev);
}

/* --- actions -------------------------------------------------------------------------- */

static void write_format(vrt_jw *w, const vrt_format *f) {
    static const char *const names[] = {"pcm16", "pcmu", "opus"};
    vrt_jw_lit(w, "{\"encoding\":");
    vrt_jw_str(w, names[f->encoding]);
    if (f->encoding != VRT_OPUS) {
        vrt_jw_lit(w, ",\"sampleRate\":");
        vrt_jw_u32(w, f->encoding == VRT_PCMU ? 8000u : f->sample_rate);
    }
    vrt_jw_lit(w, "}");
}

static vrt_status encode_hello(vrt_client *c, vrt_jw *w) {
    vrt_jw_init(w, c->cfg.scratch, c->cfg.scratch_size);
    vrt_jw_head(w, "hello", 0);
    if (c->has_session) {
        /* §5.2: context only when opening; tools are those declared at the start (§5.4). */
        vrt_jw_key(w, "sessionId");
        vrt_jw_str(w, c->session_id);
        vrt_jw_key(w, "resumeFrom");
        vrt_jw_u32(w, c->in_last_seq);
    } else {
        if (c->cfg.tool_count) {
            vrt_jw_key(w, "tools");
            vrt_jw_lit(w, "[");
            for (size_t k = 0; k < c->cfg.tool_count; k++) {
                const vrt_tool *t = &c->cfg.tools[k];
                vrt_jw_lit(w, k ? ",{" : "{");
                vrt_jw_key(w, "name");
                vrt_jw_str(w, t->name);
                if (t->description) {
                    vrt_jw_key(w, "description");
                    vrt_jw_str(w, t->description);
                }
                if (t->parameters_json) {
                    vrt_jw_key(w, "parameters");
                    vrt_jw_lit(w, t->parameters_json);
                }
                vrt_jw_lit(w, "}");
            }
            vrt_jw_lit(w, "]");
        }
        if (c->cfg.input) {
            vrt_jw_key(w, "input");
            write_format(w, c->cfg.input);
        }
        if (c->cfg.output) {
            vrt_jw_key(w, "output");
            write_format(w, c->cfg.output);
        }
        if (c->cfg.capability_count) {
            vrt_jw_key(w, "capabilities");
            vrt_jw_lit(w, "[");
            for (size_t k = 0; k < c->cfg.capability_count; k++) {
                if (k) vrt_jw_lit(w, ",");
                vrt_jw_str(w, c->cfg.capabilities[k]);
            }
            vrt_jw_lit(w, "]");
        }
        if (c->cfg.context_json) {
            vrt_jw_key(w, "context");
            vrt_jw_lit(w, c->cfg.context_json);
        }
    }
    if (c->cfg.auth) {
        vrt_jw_key(w, "auth");
        vrt_jw_str(w, c->cfg.auth);
    }
    vrt_jw_lit(w, "}");
    return w->overflow ? VRT_ERR_TOO_LARGE : VRT_OK;
}

static void send_hello(vrt_client *c, vrt_ms now) {
    vrt_jw w;
    c->auth_refused = 0;
    c->last_received = now;
    c->current_item = -1; /* §8.3: a new connection starts without a current item */
    encode_hello(c, &w);  /* its size was checked by vrt_client_init */
    out_text(c, w.buf, w.len, now);
}

static vrt_format read_format(const vrt_message *m, vrt_slot slot) {
    vrt_format f = {VRT_PCM16, 24000};
    const vrt_json *j = &m->json;
    int obj = m->member[slot];
    int enc = vrt_json_member(j, obj, "encoding");
    int rate = vrt_json_member(j, obj, "sampleRate");
    if (enc >= 0 && vrt_json_str_eq(j, enc, "pcmu")) f.encoding = VRT_PCMU, f.sample_rate = 8000;
    else if (enc >= 0 && vrt_json_str_eq(j, enc, "opus")) f.encoding = VRT_OPUS, f.sample_rate = 48000;
    else if (rate >= 0 && vrt_json_u32(j, rate, &f.sample_rate) != VRT_NUM_U32) f.sample_rate = 0xffffffffu;
    return f;
}

static void open_session(vrt_client *c, const vrt_message *m, vrt_ms now) {
    int resumed = m->member[VRT_SLOT_RESUMEDFROM] >= 0;
    uint32_t from = vrt_message_u32(m, VRT_SLOT_RESUMEDFROM);
    c->input = read_format(m, VRT_SLOT_INPUT);
    c->output = read_format(m, VRT_SLOT_OUTPUT);
    c->caps_in_effect = 0;
    int caps = m->member[VRT_SLOT_CAPABILITIES];
    if (caps >= 0) /* §3.3: only what was offered is in effect; unknown tokens ignored */
        for (int k = 0; k < m->json.tok[caps].size; k++)
            for (size_t o = 0; o < c->cfg.capability_count && o < 32; o++)
                if (vrt_json_str_eq(&m->json, caps + 1 + k, c->cfg.capabilities[o])) c->caps_in_effect |= 1u << o;
    char *sid = take_str(m, VRT_SLOT_SESSIONID);
    if (!c->has_session) {
        memcpy(c->session_id, sid, strlen(sid) + 1); /* ≤ 256 code points: it fits */
        c->has_session = 1;
    }
    /* §5.4: resend what the server lacks, in order, before any new sequenced message. */
    for (size_t k = 0; k < c->kept_count; k++) {
        uint8_t *slot = kept_slot(c, k);
        if (get_u32(slot) > from) out_text(c, (const char *)slot + KEPT_HEADER, get_u32(slot + 4), now);
    }
    vrt_event ev;
    event_init(&ev, VRT_EV_CONNECTED);
    ev.session_id = c->session_id;
    ev.resumed = resumed;
    ev.input = c->input;
    ev.output = c->output;
    emit(c, &ev);
}

static void report(vrt_client *c, arg_t *a) {
    if (!a->m) { /* §9.1: a client reports an invalid message and continues */
        emit_error(c, vrt_error_names[a->invalid], a->reason, 1);
        return;
    }
    vrt_event ev;
    event_init(&ev, VRT_EV_ERROR);
    ev.recoverable = vrt_message_true(a->m, VRT_SLOT_RECOVERABLE);
    ev.code = take_str(a->m, VRT_SLOT_CODE);
    ev.message = take_str(a->m, VRT_SLOT_MESSAGE);
    emit(c, &ev);
}

static void clear_calls(vrt_client *c) {
    /* §5.4: after the session ends nothing old is ever resent, here or elsewhere: queued
     * calls are dropped. The running one stays known, so that the application's
     * tool_finished() (VRT_ERR_STATE, nothing sent) and a cancellation still find it. */
    size_t k = 0;
    while (k < c->call_count) {
        if (call_at(c, k)->state == CALL_RUNNING) k++;
        else call_remove(c, k);
    }
}

static void session_failed(vrt_client *c, const char *code, const char *message) {
    vrt_event ev;
    event_init(&ev, VRT_EV_SESSION_FAILED);
    ev.code = code;
    ev.message = message;
    emit(c, &ev);
}

static void handle(vrt_client *c, const vrt_message *m, vrt_ms now);

static vrt_status input(vrt_client *c, vrt_input in, arg_t *a, vrt_ms now) {
    const vrt_row *row = &vrt_client_table[c->state][in];
    switch ((vrt_action)row->action) {
    case VRT_ACT_NONE: return VRT_ERR_STATE;
    case VRT_ACT_SEND_HELLO: send_hello(c, now); break;
    case VRT_ACT_OPEN: open_session(c, a->m, now); break;
    case VRT_ACT_REPORT: report(c, a); break;
    case VRT_ACT_REPORT_AND_STOP:
    case VRT_ACT_STOP:
        clear_calls(c);
        session_failed(c, take_str(a->m, VRT_SLOT_CODE), take_str(a->m, VRT_SLOT_MESSAGE));
        break;
    case VRT_ACT_ABANDON:
        out_close(c, VRT_CLOSE_NORMAL, "resume failed");
        clear_calls(c);
        session_failed(c, "RESUME_FAILED", a->reason);
        break;
    case VRT_ACT_AWAIT_CREDENTIAL: /* §5.3: only a fresh credential may be tried */
        c->auth_refused = 1;
        session_failed(c, take_str(a->m, VRT_SLOT_CODE), take_str(a->m, VRT_SLOT_MESSAGE));
        break;
    case VRT_ACT_HANDLE: handle(c, a->m, now); break;
    case VRT_ACT_ANNOUNCE: on_audio_start(c, a->m); break;
    case VRT_ACT_PLAY: play(c, a->payload, a->len); break;
    case VRT_ACT_APPLY_ACK:
        kept_ack(c, vrt_message_u32(a->m, VRT_SLOT_UPTO));
        if (c->state == VRT_STATE_OPEN) flush_owed(c, now);
        break;
    case VRT_ACT_IGNORE: break;
    case VRT_ACT_RECONNECT: c->current_item = -1; break;
    case VRT_ACT_CLOSE_DEAD: /* §4.4: treat the connection as dead, close it, resume */
        out_close(c, VRT_CLOSE_REPLACED, "no frame from the server");
        c->current_item = -1;
        break;
    case VRT_ACT_KEEP:
    case VRT_ACT_WRITE: {
        if (in == VRT_IN_SEND_AUDIO) {
            uint8_t head[VRT_FRAME_HEADER];
            vrt_frame_header(head, c->audio_out_seq++); /* §8.1: wraps modulo 2^32 */
            vrt_output out = {VRT_OUT_BINARY, head, VRT_FRAME_HEADER, a->payload, a->len, 0};
            c->cfg.write(c->cfg.ctx, &out);
            c->last_sent = now;
            break;
        }
        /* Number and keep it (§4.1); write it now when the session is open (§5.1). */
        uint8_t *slot = kept_slot(c, c->kept_count);
        put_u32(slot, ++c->out_last_seq);
        put_u32(slot + 4, (uint32_t)a->w->len);
        c->kept_count++;
        if (row->action == VRT_ACT_WRITE) out_text(c, a->w->buf, a->w->len, now);
        break;
    }
    case VRT_ACT_DROP: return VRT_ERR_STATE;
    case VRT_ACT_REFUSE: return VRT_ERR_STATE;
    case VRT_ACT_COUNT: return VRT_ERR_STATE;
    }
    if (row->next != VRT_NEXT_UNCHANGED) c->state = (vrt_state)row->next;
    return VRT_OK;
}

static void handle(vrt_client *c, const vrt_message *m, vrt_ms now) {
    /* §4.3: a duplicate is not handled again, and is acknowledged again. */
    if (!c->has_ack_due) {
        c->has_ack_due = 1;
        c->ack_due = now + VRT_ACK_DELAY_MS;
    }
    if (m->seq <= c->in_last_seq) return;
    if (m->seq != c->in_last_seq + 1) c->gaps++; /* tolerated (§4.3) */
    c->in_last_seq = m->seq;
    if (++c->in_pending >= VRT_ACK_AFTER_MESSAGES) c->ack_due = now; /* §4.2 */
    vrt_event ev;
    switch (m->type) {
    case VRT_S_TOOL_CALL: on_tool_call(c, m, now); break;
    case VRT_S_TURN_STATE:
        event_init(&ev, VRT_EV_TURN);
        ev.epoch = vrt_message_u32(m, VRT_SLOT_EPOCH);
        observe(c, ev.epoch);
        ev.turn_id = take_str(m, VRT_SLOT_TURNID);
        ev.state = take_str(m, VRT_SLOT_STATE);
        emit(c, &ev);
        if (!strcmp(ev.state, "listening")) { /* §8.4: the user speaks */
            event_init(&ev, VRT_EV_PLAYBACK_STOP);
            ev.epoch = vrt_message_u32(m, VRT_SLOT_EPOCH);
            emit(c, &ev);
        }
        break;
    case VRT_S_TEXT:
        event_init(&ev, VRT_EV_TEXT);
        ev.text = take_str_len(m, VRT_SLOT_TEXT, &ev.text_len);
        ev.turn_id = take_str(m, VRT_SLOT_TURNID);
        emit(c, &ev);
        break;
    case VRT_S_TRANSCRIPT:
        event_init(&ev, VRT_EV_TRANSCRIPT);
        ev.final = vrt_message_true(m, VRT_SLOT_FINAL);
        ev.role = take_str(m, VRT_SLOT_ROLE);
        ev.text = take_str_len(m, VRT_SLOT_TEXT, &ev.text_len);
        ev.item_id = take_str(m, VRT_SLOT_ITEMID);
        ev.turn_id = take_str(m, VRT_SLOT_TURNID);
        emit(c, &ev);
        break;
    case VRT_S_INTERRUPTED: close_epoch(c, vrt_message_u32(m, VRT_SLOT_EPOCH), 0, now); break;
    case VRT_S_TOOL_CALL_DELTA: on_preview(c, m); break;
    case VRT_S_TOOL_STREAM: on_tool_stream(c, m); break;
    case VRT_S_ERROR: {
        arg_t a = {0};
        a.m = m;
        input(c, error_input(m), &a, now);
        break;
    }
    default: break; /* transient types are never sequenced (the decoder checks seq) */
    }
}

/* --- the public functions ----------------------------------------------------------- */

#define ENTER(c)                               \
    do {                                       \
        if ((c)->busy) return VRT_ERR_BUSY;    \
        (c)->busy = 1;                         \
    } while (0)
#define LEAVE(c, s)     \
    do {                \
        (c)->busy = 0;  \
        return (s);     \
    } while (0)

/* JSON the application hands: VRT_ERR_INVALID when it is not JSON, VRT_ERR_TOO_LARGE
 * when it has more tokens or levels than the client checks (token_count, 64 levels). */
static vrt_status json_status(const char *s, jsmntok_t *tokens, size_t count) {
    int r = vrt_json_check(s, strlen(s), tokens, (unsigned)count);
    return r == VRT_JSON_OK ? VRT_OK : r == VRT_JSON_MALFORMED ? VRT_ERR_INVALID : VRT_ERR_TOO_LARGE;
}

static int tool_name_ok(const char *s) {
    size_t n = strlen(s);
    if (n < 1 || n > 64) return 0;
    for (size_t k = 0; k < n; k++) {
        char ch = s[k];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '.' || ch == '-'))
            return 0;
    }
    return 1;
}

static int capability_ok(const char *s) {
    /* §3.4: only registered tokens, or x- ones, may be offered. */
    for (size_t k = 0; k < VRT_REGISTERED_CAPABILITY_COUNT; k++)
        if (!strcmp(s, vrt_registered_capabilities[k])) return 1;
    if (strncmp(s, "x-", 2) || strlen(s) > 64) return 0;
    int after_sep = 1;
    for (const char *p = s; *p; p++) {
        if ((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9')) after_sep = 0;
        else if ((*p == '.' || *p == '-') && !after_sep) after_sep = 1;
        else return 0;
    }
    return !after_sep;
}

vrt_status vrt_client_init(vrt_client *c, const vrt_config *cfg) {
    memset(c, 0, sizeof *c);
    c->cfg = *cfg;
    c->state = VRT_STATE_CONNECTING;
    c->current_item = -1;
    if (!cfg->write || !cfg->kept || cfg->kept_slots < 1 || cfg->kept_slot_size <= KEPT_HEADER + 64 ||
        !cfg->scratch || !cfg->tokens || cfg->token_count < 16 || (cfg->call_slots && !cfg->calls) ||
        (cfg->call_slots && cfg->call_slot_size <= sizeof(call_hdr) + 8) || cfg->capability_count > 32)
        return VRT_ERR_INVALID;
    if (!c->cfg.ping_interval_ms) c->cfg.ping_interval_ms = VRT_PING_INTERVAL_MS;
    for (size_t k = 0; k < cfg->tool_count; k++) {
        if (!tool_name_ok(cfg->tools[k].name)) return VRT_ERR_INVALID;
        for (size_t o = 0; o < k; o++)
            if (!strcmp(cfg->tools[o].name, cfg->tools[k].name)) return VRT_ERR_INVALID; /* §5.2 */
        const char *p = cfg->tools[k].parameters_json;
        if (p && (json_status(p, cfg->tokens, cfg->token_count) != VRT_OK || p[0] != '{'))
            return VRT_ERR_INVALID;
        if (cfg->tools[k].description && !vrt_utf8_valid(cfg->tools[k].description, strlen(cfg->tools[k].description)))
            return VRT_ERR_INVALID;
    }
    for (size_t k = 0; k < cfg->capability_count; k++)
        if (!capability_ok(cfg->capabilities[k])) return VRT_ERR_INVALID;
    if (cfg->context_json && json_status(cfg->context_json, cfg->tokens, cfg->token_count) != VRT_OK)
        return VRT_ERR_INVALID;
    if (cfg->auth && !vrt_utf8_valid(cfg->auth, strlen(cfg->auth))) return VRT_ERR_INVALID;
    vrt_jw w;
    if (encode_hello(c, &w) != VRT_OK) return VRT_ERR_TOO_LARGE;
    /* A resuming hello carries an id of up to 1024 bytes and resumeFrom. */
    if (cfg->scratch_size < 1200 + (cfg->auth ? strlen(cfg->auth) * 6 : 0)) return VRT_ERR_TOO_LARGE;
    return VRT_OK;
}

vrt_status vrt_client_connection_made(vrt_client *c, vrt_ms now) {
    ENTER(c);
    arg_t a = {0};
    LEAVE(c, input(c, VRT_IN_CONNECTION_OPENED, &a, now));
}

vrt_status vrt_client_connection_lost(vrt_client *c, vrt_ms now) {
    ENTER(c);
    arg_t a = {0};
    LEAVE(c, input(c, VRT_IN_CONNECTION_LOST, &a, now));
}

static vrt_input classify_ready(vrt_client *c, const vrt_message *m, const char **reason) {
    if (c->state != VRT_STATE_WAITING) return VRT_IN_READY;
    int resumed = m->member[VRT_SLOT_RESUMEDFROM] >= 0;
    if (resumed != c->has_session ||
        (c->has_session && !vrt_json_str_eq(&m->json, m->member[VRT_SLOT_SESSIONID], c->session_id))) {
        *reason = "ready does not match the session resumed";
        return VRT_IN_READY_MISMATCH;
    }
    if (!kept_can_resend(c, vrt_message_u32(m, VRT_SLOT_RESUMEDFROM))) {
        *reason = "cannot resend what the server missed (§5.4)";
        return VRT_IN_CANNOT_RESEND;
    }
    return VRT_IN_READY;
}

vrt_status vrt_client_receive_text(vrt_client *c, char *data, size_t len, vrt_ms now) {
    ENTER(c);
    c->last_received = now;
    vrt_message m;
    arg_t a = {0};
    const char *why;
    vrt_error_code code = vrt_decode_server(&m, data, len, c->cfg.tokens, (unsigned)c->cfg.token_count, &why);
    if (code != VRT_E_NONE) {
        a.invalid = code;
        a.reason = why;
        LEAVE(c, input(c, VRT_IN_INVALID, &a, now));
    }
    a.m = &m;
    vrt_input in;
    if (m.seq) in = VRT_IN_SEQUENCED;
    else if (m.type == VRT_S_READY) in = classify_ready(c, &m, &a.reason);
    else if (m.type == VRT_S_AUDIO_START) in = VRT_IN_AUDIO_START;
    else if (m.type == VRT_S_ACK) in = VRT_IN_ACK;
    else if (m.type == VRT_S_ERROR) in = error_input(&m); /* seq 0: no session bound */
    else if (m.type == VRT_S_PONG) in = VRT_IN_PONG;
    else {
        /* A sequenced type with seq 0 cannot pass the decoder; kept for completeness. */
        a.m = NULL;
        a.invalid = VRT_E_INVALID_FIELD;
        a.reason = "seq 0 on a sequenced message";
        in = VRT_IN_INVALID;
    }
    vrt_status s = input(c, in, &a, now);
    if (in == VRT_IN_READY && c->state == VRT_STATE_OPEN) flush_owed(c, now);
    LEAVE(c, s);
}

vrt_status vrt_client_receive_binary(vrt_client *c, const uint8_t *data, size_t len, vrt_ms now) {
    ENTER(c);
    c->last_received = now;
    arg_t a = {0};
    a.payload = data;
    a.len = len;
    LEAVE(c, input(c, VRT_IN_OUTPUT_AUDIO, &a, now));
}

int vrt_client_deadline(const vrt_client *c, vrt_ms *at) {
    if (c->state == VRT_STATE_CONNECTING || c->state == VRT_STATE_CLOSED) return 0;
    vrt_ms interval = c->cfg.ping_interval_ms;
    vrt_ms deadline = c->last_sent + interval;
    vrt_ms dead_at = c->last_received + interval * 5 / 2; /* §4.4: 2.5 intervals */
    if (dead_at < deadline) deadline = dead_at;
    if (c->state == VRT_STATE_OPEN && c->has_ack_due && c->ack_due < deadline) deadline = c->ack_due;
    *at = deadline;
    return 1;
}

vrt_status vrt_client_on_timer(vrt_client *c, vrt_ms now) {
    ENTER(c);
    if (c->state == VRT_STATE_CONNECTING || c->state == VRT_STATE_CLOSED) LEAVE(c, VRT_OK);
    vrt_ms interval = c->cfg.ping_interval_ms;
    if (now >= c->last_received + interval * 5 / 2) {
        arg_t a = {0};
        LEAVE(c, input(c, VRT_IN_SILENT, &a, now));
    }
    vrt_jw w;
    if (c->state == VRT_STATE_OPEN && c->has_ack_due && now >= c->ack_due) {
        c->has_ack_due = 0;
        c->in_pending = 0;
        vrt_jw_init(&w, c->cfg.scratch, c->cfg.scratch_size);
        vrt_jw_head(&w, "ack", 0);
        vrt_jw_key(&w, "upTo");
        vrt_jw_u32(&w, c->in_last_seq);
        vrt_jw_lit(&w, "}");
        out_text(c, w.buf, w.len, now);
    }
    if (now >= c->last_sent + interval) { /* §4.4: allowed before ready too */
        vrt_jw_init(&w, c->cfg.scratch, c->cfg.scratch_size);
        vrt_jw_head(&w, "ping", 0);
        vrt_jw_lit(&w, "}");
        out_text(c, w.buf, w.len, now);
    }
    LEAVE(c, VRT_OK);
}

int vrt_client_resumable(const vrt_client *c) { return c->has_session && c->state != VRT_STATE_CLOSED; }

int vrt_client_has_capability(const vrt_client *c, const char *token) {
    for (size_t k = 0; k < c->cfg.capability_count && k < 32; k++)
        if ((c->caps_in_effect >> k & 1u) && !strcmp(c->cfg.capabilities[k], token)) return 1;
    return 0;
}

/* Encode one sequenced message with `body` (members after type) and send it. */
static vrt_status send_sequenced(vrt_client *c, const char *type, const char *key, const char *str,
                                 const char *raw, vrt_ms now) {
    vrt_jw w;
    vrt_status s = kept_reserve(c, &w);
    if (s != VRT_OK) return s;
    vrt_jw_head(&w, type, c->out_last_seq + 1);
    vrt_jw_key(&w, key);
    if (str) vrt_jw_str(&w, str);
    else vrt_jw_lit(&w, raw);
    vrt_jw_lit(&w, "}");
    if (w.overflow) return VRT_ERR_TOO_LARGE;
    arg_t a = {0};
    a.w = &w;
    return input(c, VRT_IN_SEND, &a, now);
}

vrt_status vrt_client_send_text(vrt_client *c, const char *text, vrt_ms now) {
    ENTER(c);
    if (!vrt_utf8_valid(text, strlen(text))) LEAVE(c, VRT_ERR_INVALID);
    LEAVE(c, send_sequenced(c, "text", "text", text, NULL, now));
}

vrt_status vrt_client_update_context(vrt_client *c, const char *context_json, vrt_ms now) {
    ENTER(c);
    const char *raw = context_json ? context_json : "null";
    vrt_status valid = json_status(raw, c->cfg.tokens, c->cfg.token_count);
    if (valid != VRT_OK) LEAVE(c, valid);
    LEAVE(c, send_sequenced(c, "context", "context", NULL, raw, now));
}

vrt_status vrt_client_interrupt(vrt_client *c, const char *reason, vrt_ms now, uint32_t *epoch_out) {
    ENTER(c);
    if (strcmp(reason, "speech") && strcmp(reason, "user") && strcmp(reason, "keyboard")) LEAVE(c, VRT_ERR_INVALID);
    uint32_t epoch = c->observed_epoch;
    vrt_jw w;
    vrt_status s = kept_reserve(c, &w);
    if (s != VRT_OK) LEAVE(c, s);
    close_epoch(c, epoch, 1, now); /* §6.2: locally at once, then tell the server */
    s = kept_reserve(c, &w);
    if (s != VRT_OK) LEAVE(c, s);
    vrt_jw_head(&w, "interrupt", c->out_last_seq + 1);
    vrt_jw_key(&w, "epoch");
    vrt_jw_u32(&w, epoch);
    vrt_jw_key(&w, "reason");
    vrt_jw_str(&w, reason);
    vrt_jw_lit(&w, "}");
    if (w.overflow) LEAVE(c, VRT_ERR_TOO_LARGE);
    arg_t a = {0};
    a.w = &w;
    if (epoch_out) *epoch_out = epoch;
    LEAVE(c, input(c, VRT_IN_SEND, &a, now));
}

vrt_status vrt_client_playback(vrt_client *c, const char *item_id, uint32_t played_ms, vrt_ms now,
                               uint32_t *sent) {
    ENTER(c);
    vrt_item *item = item_find(c, item_id);
    uint64_t limit = item ? item->received_us / 1000u : 0;
    uint32_t played = played_ms < limit ? played_ms : (uint32_t)limit;
    vrt_jw w;
    vrt_status s = kept_reserve(c, &w);
    if (s != VRT_OK) LEAVE(c, s);
    vrt_jw_head(&w, "playback", c->out_last_seq + 1);
    vrt_jw_key(&w, "itemId");
    vrt_jw_str(&w, item_id);
    vrt_jw_key(&w, "playedMs");
    vrt_jw_u32(&w, played);
    vrt_jw_lit(&w, "}");
    if (w.overflow) LEAVE(c, VRT_ERR_TOO_LARGE);
    arg_t a = {0};
    a.w = &w;
    if (sent) *sent = played;
    LEAVE(c, input(c, VRT_IN_SEND, &a, now));
}

vrt_status vrt_client_send_audio(vrt_client *c, const uint8_t *payload, size_t len, vrt_ms now) {
    ENTER(c);
    arg_t a = {0};
    a.payload = payload;
    a.len = len;
    LEAVE(c, input(c, VRT_IN_SEND_AUDIO, &a, now));
}

vrt_status vrt_client_tool_finished(vrt_client *c, const char *id, int ok, const char *output_json,
                                    const char *code, const char *message, vrt_ms now) {
    ENTER(c);
    int r = running_index(c);
    if (r < 0 || strcmp(call_id(c, (size_t)r), id)) LEAVE(c, VRT_ERR_UNKNOWN);
    const char *output = output_json ? output_json : "null";
    vrt_status valid = ok ? json_status(output, c->cfg.tokens, c->cfg.token_count) : VRT_OK;
    if (valid != VRT_OK) LEAVE(c, valid);
    if (!ok && (!code || failure_index(code) < 0 || (message && !vrt_utf8_valid(message, strlen(message)))))
        LEAVE(c, VRT_ERR_INVALID);
    call_hdr *h = call_at(c, (size_t)r);
    vrt_status s = send_result(c, id, h->epoch, ok, output, strlen(output), code, message, now);
    if (s != VRT_OK && s != VRT_ERR_STATE) LEAVE(c, s); /* the call still runs: retry */
    call_remove(c, (size_t)r);
    next_call(c, now);
    LEAVE(c, s);
}
