/* vrt_client_script: the client core driven by a script on standard input, for the
 * differential test against the Python client core (tests/c_sdk/test_c_core_agrees.py).
 * One command per line, T a time in milliseconds:
 *   connect T | lost T | timer T | say T TEXT | interrupt T | playback T ITEM MS
 *   text T JSON | binary T HEX | finish T CALL ok JSON | finish T CALL fail CODE
 * Output, one line per frame or event:
 *   out text JSON | out binary HEX | out close CODE
 *   ev TYPE KEY   (KEY: the call id, epoch, text, code or item id the event is about) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vrt/client.h"

static uint8_t kept[256][4096];
static uint8_t calls[64][4096];
static char scratch[8192];
static jsmntok_t tokens[4096];
static const vrt_tool tools[] = {{"slow", NULL, NULL}, {"lookup", NULL, NULL}};
static const char *capabilities[] = {VRT_CAP_TOOL_STREAM_V1};

static void on_write(void *ctx, const vrt_output *o) {
    (void)ctx;
    if (o->kind == VRT_OUT_TEXT) {
        printf("out text %.*s\n", (int)o->len, (const char *)o->data);
    } else if (o->kind == VRT_OUT_BINARY) {
        printf("out binary ");
        for (size_t k = 0; k < o->head_len; k++) printf("%02x", o->head[k]);
        for (size_t k = 0; k < o->len; k++) printf("%02x", o->data[k]);
        printf("\n");
    } else {
        printf("out close %u\n", o->close_code);
    }
}

static void on_event(void *ctx, const vrt_event *e) {
    (void)ctx;
    switch (e->type) {
    case VRT_EV_CONNECTED: printf("ev connected %s %d\n", e->session_id, e->resumed); break;
    case VRT_EV_SESSION_FAILED: printf("ev session_failed %s\n", e->code ? e->code : ""); break;
    case VRT_EV_ERROR: printf("ev error %s %d\n", e->code ? e->code : "", e->recoverable); break;
    case VRT_EV_TURN: printf("ev turn %s %u %s\n", e->turn_id, e->epoch, e->state); break;
    case VRT_EV_TEXT: printf("ev text %.*s\n", (int)e->text_len, e->text); break;
    case VRT_EV_TRANSCRIPT: printf("ev transcript %s\n", e->text); break;
    case VRT_EV_AUDIO_STARTED: printf("ev audio_started %s %u\n", e->item_id, e->epoch); break;
    case VRT_EV_AUDIO_CHUNK: printf("ev audio_chunk %s %zu\n", e->item_id, e->payload_len); break;
    case VRT_EV_PLAYBACK_STOP: printf("ev playback_stop %u\n", e->epoch); break;
    case VRT_EV_INTERRUPTED: printf("ev interrupted %u %d\n", e->epoch, e->local); break;
    case VRT_EV_TOOL_PREVIEW: printf("ev tool_preview %s\n", e->call_id); break;
    case VRT_EV_TOOL_STREAM: printf("ev tool_stream %s %s\n", e->call_id, e->phase); break;
    case VRT_EV_RUN_TOOL: printf("ev run_tool %s %s\n", e->call_id, e->name); break;
    case VRT_EV_CANCEL_TOOL: printf("ev cancel_tool %s\n", e->call_id); break;
    }
}

static size_t unhex(const char *s, uint8_t *out, size_t cap) {
    size_t n = 0;
    while (s[0] && s[1] && n < cap) {
        unsigned v;
        if (sscanf(s, "%2x", &v) != 1) break;
        out[n++] = (uint8_t)v;
        s += 2;
    }
    return n;
}

int main(void) {
    static vrt_client c;
    vrt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.kept = &kept[0][0];
    cfg.kept_slots = 256;
    cfg.kept_slot_size = 4096;
    cfg.calls = &calls[0][0];
    cfg.call_slots = 64;
    cfg.call_slot_size = 4096;
    cfg.scratch = scratch;
    cfg.scratch_size = sizeof scratch;
    cfg.tokens = tokens;
    cfg.token_count = 4096;
    cfg.tools = tools;
    cfg.tool_count = 2;
    cfg.capabilities = capabilities;
    cfg.capability_count = 1;
    cfg.write = on_write;
    cfg.emit = on_event;
    if (vrt_client_init(&c, &cfg) != VRT_OK) return 2;
    static char line[1 << 16];
    static uint8_t bytes[1 << 15];
    while (fgets(line, sizeof line, stdin)) {
        line[strcspn(line, "\n")] = 0;
        char cmd[16];
        unsigned long long t;
        int used = 0;
        if (sscanf(line, "%15s %llu %n", cmd, &t, &used) < 2) continue;
        char *rest = line + used;
        printf("> %s\n", cmd);
        if (!strcmp(cmd, "connect")) vrt_client_connection_made(&c, t);
        else if (!strcmp(cmd, "lost")) vrt_client_connection_lost(&c, t);
        else if (!strcmp(cmd, "timer")) vrt_client_on_timer(&c, t);
        else if (!strcmp(cmd, "say")) vrt_client_send_text(&c, rest, t);
        else if (!strcmp(cmd, "interrupt")) vrt_client_interrupt(&c, "user", t, NULL);
        else if (!strcmp(cmd, "text")) vrt_client_receive_text(&c, rest, strlen(rest), t);
        else if (!strcmp(cmd, "binary")) vrt_client_receive_binary(&c, bytes, unhex(rest, bytes, sizeof bytes), t);
        else if (!strcmp(cmd, "playback")) {
            char item[128];
            unsigned ms;
            if (sscanf(rest, "%127s %u", item, &ms) == 2) vrt_client_playback(&c, item, ms, t, NULL);
        } else if (!strcmp(cmd, "finish")) {
            char id[128], how[8];
            int n = 0;
            if (sscanf(rest, "%127s %7s %n", id, how, &n) >= 2) {
                if (!strcmp(how, "ok")) vrt_client_tool_finished(&c, id, 1, rest + n, NULL, NULL, t);
                else vrt_client_tool_finished(&c, id, 0, NULL, rest + n, NULL, t);
            }
        }
    }
    return 0;
}
