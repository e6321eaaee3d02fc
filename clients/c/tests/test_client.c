/* The client core against a scripted server: frames in, frames and events out. Each
 * test names the rule it judges. */
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "vrt/client.h"

#define MAX_LOG 64
typedef struct {
    char out[MAX_LOG][2048];
    int out_kind[MAX_LOG];
    int close_code[MAX_LOG];
    int n_out;
    vrt_event_type ev[MAX_LOG];
    char ev_text[MAX_LOG][256];
    int n_ev;
} log_t;

static void on_write(void *ctx, const vrt_output *o) {
    log_t *l = ctx;
    if (l->n_out >= MAX_LOG) return;
    size_t n = o->len < 2000 ? o->len : 2000;
    memcpy(l->out[l->n_out], o->data, n);
    l->out[l->n_out][n] = 0;
    l->out_kind[l->n_out] = o->kind;
    l->close_code[l->n_out] = o->close_code;
    l->n_out++;
}

static size_t last_text_len;

static void on_event(void *ctx, const vrt_event *e) {
    log_t *l = ctx;
    if (l->n_ev >= MAX_LOG) return;
    l->ev[l->n_ev] = e->type;
    const char *s = e->call_id ? e->call_id : e->text ? e->text : e->code ? e->code : e->item_id ? e->item_id : "";
    snprintf(l->ev_text[l->n_ev], 256, "%s", s);
    if (e->type == VRT_EV_TEXT) last_text_len = e->text_len;
    l->n_ev++;
}

static uint8_t kept[4][512];
static uint8_t calls[3][512];
static char scratch[2048];
static jsmntok_t tokens[128];
static const vrt_tool tools[] = {{"lookup", "Look up", "{\"type\":\"object\"}"}, {"slow", NULL, NULL}};
static const char *caps[] = {VRT_CAP_TOOL_STREAM_V1};
static log_t L;
static vrt_client C;

static void setup(size_t kept_slots) {
    memset(&L, 0, sizeof L);
    vrt_config cfg = {0};
    cfg.kept = &kept[0][0];
    cfg.kept_slots = kept_slots;
    cfg.kept_slot_size = sizeof kept[0];
    cfg.calls = &calls[0][0];
    cfg.call_slots = 3;
    cfg.call_slot_size = sizeof calls[0];
    cfg.scratch = scratch;
    cfg.scratch_size = sizeof scratch;
    cfg.tokens = tokens;
    cfg.token_count = 128;
    cfg.tools = tools;
    cfg.tool_count = 2;
    cfg.capabilities = caps;
    cfg.capability_count = 1;
    cfg.auth = "secret";
    cfg.write = on_write;
    cfg.emit = on_event;
    cfg.ctx = &L;
    vrt_status s = vrt_client_init(&C, &cfg);
    CHECK(s == VRT_OK, "init: %d", s);
}

static void recv(const char *text, vrt_ms now) {
    char buf[1024];
    size_t n = strlen(text);
    memcpy(buf, text, n + 1);
    vrt_client_receive_text(&C, buf, n, now);
}

static int out_has(int from, const char *needle) {
    for (int k = from; k < L.n_out; k++)
        if (strstr(L.out[k], needle)) return k;
    return -1;
}

static int ev_count(vrt_event_type t) {
    int n = 0;
    for (int k = 0; k < L.n_ev; k++) n += L.ev[k] == t;
    return n;
}

static const char *READY = "{\"v\":1,\"seq\":0,\"type\":\"ready\",\"sessionId\":\"s1\",\"input\":{\"encoding\":\"pcm16\"},"
                           "\"output\":{\"encoding\":\"pcm16\",\"sampleRate\":24000},\"capabilities\":[\"tool-stream-v1\"]}";

static void open_session(void) {
    setup(4);
    vrt_client_connection_made(&C, 0);
    recv(READY, 1);
}

static void test_hello_and_nothing_before_ready(void) {
    setup(4);
    CHECK(vrt_client_send_text(&C, "early", 0) == VRT_OK, "text before ready is kept (§5.1)");
    CHECK(L.n_out == 0, "nothing written before a connection");
    vrt_client_connection_made(&C, 0);
    CHECK(L.n_out == 1 && strstr(L.out[0], "\"type\":\"hello\"") && strstr(L.out[0], "\"seq\":0") &&
              strstr(L.out[0], "\"tools\":[{\"name\":\"lookup\"") && strstr(L.out[0], "\"auth\":\"secret\"") &&
              strstr(L.out[0], "\"capabilities\":[\"tool-stream-v1\"]") && !strstr(L.out[0], "sessionId"),
          "hello first (§5.2): %s", L.out[0]);
    CHECK(vrt_client_send_audio(&C, (const uint8_t *)"ab", 2, 1) == VRT_ERR_STATE, "audio before ready dropped");
    CHECK(L.n_out == 1, "nothing sequenced before ready (§5.1)");
    recv(READY, 2);
    CHECK(L.n_out == 2 && strstr(L.out[1], "\"seq\":1,\"type\":\"text\",\"text\":\"early\""),
          "kept text sent after ready: %s", L.out[1]);
    CHECK(ev_count(VRT_EV_CONNECTED) == 1, "connected event");
    CHECK(vrt_client_has_capability(&C, VRT_CAP_TOOL_STREAM_V1), "tool-stream-v1 in effect (§3.3)");
}

static void test_sequencing_acks_dedupe(void) {
    open_session();
    const char *t1 = "{\"v\":1,\"seq\":1,\"type\":\"text\",\"text\":\"h\\u00e9llo\",\"turnId\":null}";
    recv(t1, 10);
    recv(t1, 20);
    CHECK(ev_count(VRT_EV_TEXT) == 1 && !strcmp(L.ev_text[L.n_ev - 1], "h\xc3\xa9llo"),
          "a duplicate is not handled again (§4.3); text unescaped");
    recv("{\"v\":1,\"seq\":2,\"type\":\"text\",\"text\":\"a\\u0000b\",\"turnId\":\"t\"}", 10);
    CHECK(L.ev[L.n_ev - 1] == VRT_EV_TEXT && last_text_len == 3, "text_len counts an escaped NUL: %zu", last_text_len);
    vrt_ms at = 0;
    CHECK(vrt_client_deadline(&C, &at) && at == 260, "ack due 250 ms after the first message (§4.2): %llu",
          (unsigned long long)at);
    int before = L.n_out;
    vrt_client_on_timer(&C, at);
    CHECK(out_has(before, "{\"v\":1,\"seq\":0,\"type\":\"ack\",\"upTo\":2}") >= 0, "ack upTo 2");
    CHECK(vrt_client_send_text(&C, "a", 300) == VRT_OK && out_has(before, "\"seq\":1,\"type\":\"text\"") >= 0,
          "first sequenced message has seq 1 (§4.1)");
}

static void test_tools_one_at_a_time(void) {
    open_session();
    recv("{\"v\":1,\"seq\":1,\"type\":\"tool.call\",\"callId\":\"c1\",\"name\":\"slow\",\"arguments\":{\"ms\":5},"
         "\"turnId\":\"t\",\"epoch\":1}", 5);
    recv("{\"v\":1,\"seq\":2,\"type\":\"tool.call\",\"callId\":\"c2\",\"name\":\"lookup\",\"arguments\":[1],"
         "\"turnId\":\"t\",\"epoch\":1}", 6);
    recv("{\"v\":1,\"seq\":3,\"type\":\"tool.call\",\"callId\":\"c3\",\"name\":\"nope\",\"arguments\":{},"
         "\"turnId\":\"t\",\"epoch\":1}", 6);
    CHECK(ev_count(VRT_EV_RUN_TOOL) == 1, "one call runs at a time (§7.1)");
    CHECK(vrt_client_tool_finished(&C, "c2", 1, "{}", NULL, NULL, 7) == VRT_ERR_UNKNOWN, "only the running call");
    CHECK(vrt_client_tool_finished(&C, "c1", 1, "{\"a\":", NULL, NULL, 8) == VRT_ERR_INVALID, "output not JSON");
    static char wide[1200];
    for (int k = 0; k < 598; k++) wide[k] = k == 0 ? '[' : k % 2 ? '1' : ',';
    wide[598] = ']'; /* [1,1,...,1]: 299 values */
    CHECK(vrt_client_tool_finished(&C, "c1", 1, wide, NULL, NULL, 8) == VRT_ERR_TOO_LARGE,
          "output of more tokens than the client checks: too large, not invalid");
    CHECK(vrt_client_tool_finished(&C, "c1", 1, "{\"slept\":5}", NULL, NULL, 8) == VRT_OK, "finish c1");
    CHECK(out_has(0, "\"type\":\"tool.result\",\"callId\":\"c1\",\"epoch\":1,\"ok\":true,\"output\":{\"slept\":5}") >= 0,
          "c1 result");
    CHECK(ev_count(VRT_EV_RUN_TOOL) == 2 && !strcmp(L.ev_text[L.n_ev - 1], "c2"), "then c2 runs");
    CHECK(vrt_client_tool_finished(&C, "c2", 0, NULL, "REJECTED", "no", 9) == VRT_OK, "finish c2");
    CHECK(out_has(0, "\"callId\":\"c3\",\"epoch\":1,\"ok\":false,\"code\":\"FAILED\"") >= 0,
          "an undeclared tool is answered FAILED (§7.3)");
    CHECK(vrt_client_tool_finished(&C, "c2", 1, NULL, NULL, NULL, 9) == VRT_ERR_UNKNOWN, "one result per call (§7.2)");
    CHECK(vrt_client_tool_finished(&C, "c2", 0, NULL, "NOPE", NULL, 9) == VRT_ERR_UNKNOWN, "unknown still");
}

static void test_epoch_gate(void) {
    open_session();
    recv("{\"v\":1,\"seq\":1,\"type\":\"tool.call\",\"callId\":\"c1\",\"name\":\"slow\",\"arguments\":{},"
         "\"turnId\":\"t\",\"epoch\":1}", 5);
    recv("{\"v\":1,\"seq\":2,\"type\":\"tool.call\",\"callId\":\"c2\",\"name\":\"slow\",\"arguments\":{},"
         "\"turnId\":\"t\",\"epoch\":1}", 5);
    recv("{\"v\":1,\"seq\":3,\"type\":\"interrupted\",\"epoch\":1}", 6);
    CHECK(ev_count(VRT_EV_CANCEL_TOOL) == 1, "the running call is cancelled (§6.2)");
    CHECK(out_has(0, "\"callId\":\"c1\",\"epoch\":1,\"ok\":false,\"code\":\"INTERRUPTED\"") >= 0 &&
              out_has(0, "\"callId\":\"c2\",\"epoch\":1,\"ok\":false,\"code\":\"INTERRUPTED\"") >= 0,
          "running and queued calls answered INTERRUPTED");
    CHECK(vrt_client_tool_finished(&C, "c1", 1, "1", NULL, NULL, 7) == VRT_ERR_UNKNOWN, "late outcome discarded");
    recv("{\"v\":1,\"seq\":4,\"type\":\"tool.call\",\"callId\":\"c3\",\"name\":\"slow\",\"arguments\":{},"
         "\"turnId\":\"t\",\"epoch\":0}", 8);
    CHECK(ev_count(VRT_EV_RUN_TOOL) == 1 && out_has(0, "\"callId\":\"c3\",\"epoch\":0,\"ok\":false,\"code\":\"INTERRUPTED\"") >= 0,
          "a call of a closed epoch never starts");
    uint32_t epoch = 9;
    recv("{\"v\":1,\"seq\":5,\"type\":\"turn.state\",\"turnId\":\"t2\",\"epoch\":2,\"state\":\"speaking\"}", 9);
    CHECK(vrt_client_interrupt(&C, "user", 10, &epoch) == VRT_OK && epoch == 2, "interrupt the observed epoch");
    CHECK(out_has(0, "\"type\":\"interrupt\",\"epoch\":2,\"reason\":\"user\"") >= 0, "interrupt sent");
}

static void test_resume(void) {
    open_session();
    vrt_client_send_text(&C, "one", 2);
    vrt_client_send_text(&C, "two", 3);
    vrt_client_send_text(&C, "three", 4);
    recv("{\"v\":1,\"seq\":0,\"type\":\"ack\",\"upTo\":1}", 5);
    recv("{\"v\":1,\"seq\":1,\"type\":\"text\",\"text\":\"x\",\"turnId\":null}", 5);
    vrt_client_connection_lost(&C, 6);
    CHECK(vrt_client_resumable(&C), "resumable");
    int before = L.n_out;
    vrt_client_connection_made(&C, 7);
    CHECK(out_has(before, "\"sessionId\":\"s1\",\"resumeFrom\":1,\"auth\":\"secret\"") == before, "resuming hello (§5.4)");
    recv("{\"v\":1,\"seq\":0,\"type\":\"ready\",\"sessionId\":\"s1\",\"resumedFrom\":1,\"input\":{\"encoding\":\"pcm16\"},"
         "\"output\":{\"encoding\":\"pcm16\"}}", 8);
    CHECK(L.n_out == before + 3 && strstr(L.out[before + 1], "\"seq\":2") && strstr(L.out[before + 2], "\"seq\":3"),
          "seq 2 and 3 resent in order (§5.4)");
    vrt_client_connection_lost(&C, 9);
    vrt_client_connection_made(&C, 10);
    before = L.n_out;
    recv("{\"v\":1,\"seq\":0,\"type\":\"ready\",\"sessionId\":\"s1\",\"resumedFrom\":9,\"input\":{\"encoding\":\"pcm16\"},"
         "\"output\":{\"encoding\":\"pcm16\"}}", 11);
    CHECK(L.n_out == before + 1 && L.out_kind[before] == VRT_OUT_CLOSE && ev_count(VRT_EV_SESSION_FAILED) == 1,
          "resumedFrom beyond what was sent: close, RESUME_FAILED (§5.4)");
    CHECK(vrt_client_send_text(&C, "x", 12) == VRT_ERR_STATE && !vrt_client_resumable(&C), "the session is closed");
}

static void test_limits(void) {
    open_session();
    for (int k = 0; k < 4; k++) CHECK(vrt_client_send_text(&C, "m", 2) == VRT_OK, "kept %d", k);
    CHECK(vrt_client_send_text(&C, "m", 2) == VRT_ERR_FULL, "a fifth unacknowledged message: VRT_ERR_FULL");
    char big[600];
    memset(big, 'a', sizeof big - 1);
    big[sizeof big - 1] = 0;
    recv("{\"v\":1,\"seq\":0,\"type\":\"ack\",\"upTo\":4}", 3);
    CHECK(vrt_client_send_text(&C, big, 3) == VRT_ERR_TOO_LARGE, "larger than a slot: VRT_ERR_TOO_LARGE");
    CHECK(vrt_client_send_text(&C, "ok", 3) == VRT_OK, "after an ack there is room");
    /* A call interrupted while every slot is kept: its answer is owed, then sent. */
    for (int k = 0; k < 3; k++) vrt_client_send_text(&C, "m", 4);
    recv("{\"v\":1,\"seq\":1,\"type\":\"tool.call\",\"callId\":\"c1\",\"name\":\"slow\",\"arguments\":{},"
         "\"turnId\":\"t\",\"epoch\":1}", 5);
    recv("{\"v\":1,\"seq\":2,\"type\":\"interrupted\",\"epoch\":1}", 6);
    CHECK(out_has(0, "\"callId\":\"c1\"") < 0, "no slot: the answer waits");
    recv("{\"v\":1,\"seq\":0,\"type\":\"ack\",\"upTo\":8}", 7);
    CHECK(out_has(0, "\"callId\":\"c1\",\"epoch\":1,\"ok\":false,\"code\":\"INTERRUPTED\"") >= 0, "owed answer sent after the ack");
    char big_call[700];
    snprintf(big_call, sizeof big_call,
             "{\"v\":1,\"seq\":3,\"type\":\"tool.call\",\"callId\":\"c9\",\"name\":\"slow\",\"arguments\":\"%0500d\","
             "\"turnId\":\"t\",\"epoch\":2}", 0);
    recv(big_call, 8);
    CHECK(out_has(0, "\"callId\":\"c9\",\"epoch\":2,\"ok\":false,\"code\":\"FAILED\"") >= 0,
          "a call larger than a call slot fails with a clear message");
}

static void test_queue_and_kept_full(void) {
    open_session();
    for (int k = 0; k < 4; k++) vrt_client_send_text(&C, "m", 2);
    char call[256];
    for (int k = 1; k <= 4; k++) {
        snprintf(call, sizeof call,
                 "{\"v\":1,\"seq\":%d,\"type\":\"tool.call\",\"callId\":\"c%d\",\"name\":\"slow\","
                 "\"arguments\":{},\"turnId\":\"t\",\"epoch\":1}", k, k);
        recv(call, 3);
    }
    CHECK(ev_count(VRT_EV_RUN_TOOL) == 1 && L.ev[L.n_ev - 1] == VRT_EV_ERROR && !strcmp(L.ev_text[L.n_ev - 1], "LIMIT_EXCEEDED"),
          "a fourth call with the queue and every kept slot full: LIMIT_EXCEEDED, said");
    recv("{\"v\":1,\"seq\":0,\"type\":\"ack\",\"upTo\":4}", 4);
    CHECK(vrt_client_tool_finished(&C, "c1", 1, "1", NULL, NULL, 5) == VRT_OK, "the queue then goes on");
}

static void test_audio_and_playback(void) {
    open_session();
    uint8_t frame[5 + 960] = {2, 0, 0, 0, 0};
    vrt_client_receive_binary(&C, frame, sizeof frame, 2);
    CHECK(ev_count(VRT_EV_AUDIO_CHUNK) == 0, "audio before audio.start discarded (§8.3)");
    recv("{\"v\":1,\"seq\":0,\"type\":\"audio.start\",\"itemId\":\"i1\",\"turnId\":\"t\",\"epoch\":1}", 3);
    vrt_client_receive_binary(&C, frame, sizeof frame, 4); /* 480 samples at 24 kHz: 20 ms */
    CHECK(ev_count(VRT_EV_AUDIO_CHUNK) == 1, "played");
    uint32_t sent = 0;
    CHECK(vrt_client_playback(&C, "i1", 500, 5, &sent) == VRT_OK && sent == 20, "playedMs at most received (§8.4): %u", sent);
    CHECK(out_has(0, "\"type\":\"playback\",\"itemId\":\"i1\",\"playedMs\":20") >= 0, "playback sent");
    recv("{\"v\":1,\"seq\":1,\"type\":\"interrupted\",\"epoch\":1}", 6);
    vrt_client_receive_binary(&C, frame, sizeof frame, 7);
    CHECK(ev_count(VRT_EV_AUDIO_CHUNK) == 1, "audio of a closed epoch is not played (§6.2)");
    CHECK(vrt_client_send_audio(&C, frame + 5, 4, 8) == VRT_OK && L.out_kind[L.n_out - 1] == VRT_OUT_BINARY,
          "input audio frame");
}

static void test_invalid_and_heartbeat(void) {
    open_session();
    recv("{\"v\":2,\"seq\":1,\"type\":\"tool.call\",\"callId\":\"c1\",\"name\":\"slow\",\"arguments\":{},"
         "\"turnId\":\"t\",\"epoch\":1}", 2);
    recv("not json", 2);
    CHECK(ev_count(VRT_EV_ERROR) == 2 && ev_count(VRT_EV_RUN_TOOL) == 0, "invalid messages reported, not acted on (§9.1)");
    vrt_ms at;
    vrt_client_deadline(&C, &at);
    int before = L.n_out;
    vrt_client_on_timer(&C, 15001);
    CHECK(out_has(before, "\"type\":\"ping\"") >= 0, "ping after the interval (§4.4)");
    vrt_client_on_timer(&C, 2 + 37500);
    CHECK(L.out_kind[L.n_out - 1] == VRT_OUT_CLOSE && L.close_code[L.n_out - 1] == 4000 && C.state == VRT_STATE_CONNECTING,
          "silent 2.5 intervals: close 4000 and resume (§4.4)");
}

/* What the last tool.stream event said, copied: its strings live only during the callback. */
static struct {
    char phase[32], call_id[32], code[32];
    int ok;
} last_stream;
static char last_json[128];
static void on_stream(void *ctx, const vrt_event *e) {
    on_event(ctx, e);
    if (e->type != VRT_EV_TOOL_STREAM) return;
    snprintf(last_stream.phase, sizeof last_stream.phase, "%s", e->phase);
    snprintf(last_stream.call_id, sizeof last_stream.call_id, "%s", e->call_id ? e->call_id : "");
    snprintf(last_stream.code, sizeof last_stream.code, "%s", e->code ? e->code : "");
    last_stream.ok = e->ok;
    snprintf(last_json, sizeof last_json, "%.*s", (int)e->json_len, e->json ? e->json : "");
}

static void test_tool_stream(void) {
    open_session();
    C.cfg.emit = on_stream;
    recv("{\"v\":1,\"seq\":1,\"type\":\"tool.stream\",\"callId\":\"c\\u0031\",\"name\":\"lookup\",\"turnId\":\"t\","
         "\"epoch\":1,\"phase\":\"arguments-complete\",\"arguments\":{\"q\":\"\\u00e9\"}}", 2);
    CHECK(!strcmp(last_stream.phase, "arguments-complete") && !strcmp(last_stream.call_id, "c1") &&
              !strcmp(last_json, "{\"q\":\"\\u00e9\"}"),
          "tool.stream: the phase's member, raw: %s", last_json);
    CHECK(ev_count(VRT_EV_RUN_TOOL) == 0, "a tool.stream never runs anything (§7.5)");
    recv("{\"v\":1,\"seq\":2,\"type\":\"tool.stream\",\"callId\":\"c1\",\"name\":\"lookup\",\"turnId\":\"t\","
         "\"epoch\":1,\"phase\":\"settled\",\"ok\":false,\"code\":\"REJECTED\"}", 3);
    CHECK(!strcmp(last_stream.phase, "settled") && !last_stream.ok && !strcmp(last_stream.code, "REJECTED"),
          "settled, not ok, REJECTED");
    int before = ev_count(VRT_EV_TOOL_STREAM);
    recv("{\"v\":1,\"seq\":3,\"type\":\"tool.stream\",\"callId\":\"c1\",\"name\":\"lookup\",\"turnId\":\"t\","
         "\"epoch\":1,\"phase\":\"progress\",\"progress\":1}", 4);
    CHECK(ev_count(VRT_EV_TOOL_STREAM) == before, "nothing about a call after its terminal phase (§7.5)");
    recv("{\"v\":1,\"seq\":4,\"type\":\"turn.state\",\"turnId\":\"t2\",\"epoch\":2,\"state\":\"acting\"}", 5);
    recv("{\"v\":1,\"seq\":5,\"type\":\"tool.stream\",\"callId\":\"c2\",\"name\":\"lookup\",\"turnId\":\"t\","
         "\"epoch\":2,\"phase\":\"start\"}", 5);
    vrt_client_interrupt(&C, "user", 6, NULL);
    CHECK(!strcmp(last_stream.phase, "cancelled") && !strcmp(last_stream.call_id, "c2"),
          "a local interrupt cancels the unterminated call of the closed epoch (§7.5)");
}

static void test_init_limits(void) {
    vrt_client c;
    vrt_config cfg = {0};
    static const char *bad_caps[] = {"acme-turbo"};
    static const vrt_tool twice[] = {{"a", NULL, NULL}, {"a", NULL, NULL}};
    cfg.kept = &kept[0][0];
    cfg.kept_slots = 4;
    cfg.kept_slot_size = 512;
    cfg.scratch = scratch;
    cfg.scratch_size = sizeof scratch;
    cfg.tokens = tokens;
    cfg.token_count = 128;
    cfg.write = on_write;
    cfg.capabilities = bad_caps;
    cfg.capability_count = 1;
    CHECK(vrt_client_init(&c, &cfg) == VRT_ERR_INVALID, "an unregistered capability is refused (§3.4)");
    cfg.capability_count = 0;
    cfg.tools = twice;
    cfg.tool_count = 2;
    CHECK(vrt_client_init(&c, &cfg) == VRT_ERR_INVALID, "tool names must be unique (§5.2)");
    cfg.tool_count = 0;
    CHECK(vrt_client_init(&c, &cfg) == VRT_OK, "a minimal configuration");
}

/* The footprint's stated configuration (docs/c-sdk.md): 8 tools declared in a 2 KB
 * scratch buffer; more than fit is refused at init, not cut. */
static void test_footprint_configuration(void) {
    static vrt_tool many[20];
    static char names[20][16];
    for (int k = 0; k < 20; k++) {
        snprintf(names[k], sizeof names[k], "device.tool%d", k);
        many[k].name = names[k];
        many[k].description = "Switch the light.";
        many[k].parameters_json = "{\"type\":\"object\",\"properties\":{\"on\":{\"type\":\"boolean\"}}}";
    }
    vrt_client c;
    vrt_config cfg = {0};
    cfg.kept = &kept[0][0];
    cfg.kept_slots = 4;
    cfg.kept_slot_size = 512;
    cfg.scratch = scratch;
    cfg.scratch_size = 2048;
    cfg.tokens = tokens;
    cfg.token_count = 128;
    cfg.write = on_write;
    cfg.tools = many;
    cfg.tool_count = 8;
    CHECK(vrt_client_init(&c, &cfg) == VRT_OK, "8 tools in 2 KB of scratch");
    cfg.tool_count = 20;
    CHECK(vrt_client_init(&c, &cfg) == VRT_ERR_TOO_LARGE, "20 tools do not fit: refused at init");
    CHECK(sizeof(vrt_client) < 24 * 1024, "the core's own RAM is under 24 KB: %zu", sizeof(vrt_client));
}

void test_client(void) {
    test_footprint_configuration();
    test_hello_and_nothing_before_ready();
    test_sequencing_acks_dedupe();
    test_tools_one_at_a_time();
    test_epoch_gate();
    test_resume();
    test_limits();
    test_queue_and_kept_full();
    test_audio_and_playback();
    test_invalid_and_heartbeat();
    test_tool_stream();
    test_init_limits();
}
