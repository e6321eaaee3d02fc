/* libFuzzer target: any bytes as a server's text frame, to the decoder and then to a
 * client core in the open state (so that the handlers run too), and as a binary frame.
 * Nothing may crash, read out of bounds or overflow (ASan, UBSan). */
#include <stdint.h>
#include <string.h>

#include "vrt/client.h"

static uint8_t kept[8][1024];
static uint8_t calls[4][1024];
static char scratch[2048];
static jsmntok_t tokens[256];
static char text[1 << 16];
static const vrt_tool tools[] = {{"t", NULL, NULL}};

static void sink_write(void *ctx, const vrt_output *o) { (void)ctx, (void)o; }
static void sink_emit(void *ctx, const vrt_event *e) { (void)ctx, (void)e; }

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size >= sizeof text) return 0;
    vrt_message m;
    memcpy(text, data, size);
    vrt_decode_server(&m, text, size, tokens, 256, NULL);

    static vrt_client c;
    vrt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.kept = &kept[0][0];
    cfg.kept_slots = 8;
    cfg.kept_slot_size = 1024;
    cfg.calls = &calls[0][0];
    cfg.call_slots = 4;
    cfg.call_slot_size = 1024;
    cfg.scratch = scratch;
    cfg.scratch_size = sizeof scratch;
    cfg.tokens = tokens;
    cfg.token_count = 256;
    cfg.tools = tools;
    cfg.tool_count = 1;
    cfg.write = sink_write;
    cfg.emit = sink_emit;
    if (vrt_client_init(&c, &cfg) != VRT_OK) return 0;
    vrt_client_connection_made(&c, 0);
    char ready[] = "{\"v\":1,\"seq\":0,\"type\":\"ready\",\"sessionId\":\"s\",\"input\":{\"encoding\":\"pcm16\"},"
                   "\"output\":{\"encoding\":\"pcm16\"}}";
    vrt_client_receive_text(&c, ready, strlen(ready), 1);
    char start[] = "{\"v\":1,\"seq\":0,\"type\":\"audio.start\",\"itemId\":\"i\",\"turnId\":\"t\",\"epoch\":1}";
    vrt_client_receive_text(&c, start, strlen(start), 2);
    /* Several messages in one input, split at NUL bytes: sequences of handlers run. */
    size_t from = 0;
    for (size_t k = 0; k <= size; k++) {
        if (k == size || text[k] == 0) {
            vrt_client_receive_text(&c, text + from, k - from, 3 + k);
            from = k + 1;
        }
    }
    memcpy(text, data, size);
    vrt_client_receive_binary(&c, (const uint8_t *)text, size, 4 + size);
    vrt_client_tool_finished(&c, "x", 1, "{}", NULL, NULL, 5 + size);
    vrt_client_playback(&c, "i", 1000, 6 + size, NULL);
    vrt_client_on_timer(&c, 100000 + size);
    return 0;
}
