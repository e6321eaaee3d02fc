/* Opus (-DVRT_OPUS=ON): a 20 ms tone encoded, framed as output audio in an opus session,
 * counted by the core as 20 ms for playback (§8.4), and decoded back to 960 samples. */
#include <math.h>
#include <string.h>

#include "test.h"
#include "vrt/client.h"
#include "vrt_opus.h"

static uint8_t kept[4][512];
static char scratch[2048];
static jsmntok_t tokens[64];
static uint8_t chunk[4000];
static size_t chunk_len;

static void on_write(void *ctx, const vrt_output *o) { (void)ctx, (void)o; }
static void on_event(void *ctx, const vrt_event *e) {
    (void)ctx;
    if (e->type == VRT_EV_AUDIO_CHUNK && e->payload_len <= sizeof chunk) {
        memcpy(chunk, e->payload, e->payload_len);
        chunk_len = e->payload_len;
    }
}

void test_opus(void) {
    /* libopus's states, aligned for any member (a union with the widest types). */
    static union {
        long double align;
        uint8_t bytes[65536];
    } enc_state, dec_state;
    void *enc = enc_state.bytes, *dec = dec_state.bytes;
    int fits = vrt_opus_encoder_size() <= sizeof enc_state && vrt_opus_decoder_size() <= sizeof dec_state;
    CHECK(fits, "state sizes %zu, %zu", vrt_opus_encoder_size(), vrt_opus_decoder_size());
    if (!fits) return;
    CHECK(vrt_opus_encoder_init(enc) == 0 && vrt_opus_decoder_init(dec) == 0, "init");
    int16_t pcm[960];
    for (int k = 0; k < 960; k++) pcm[k] = (int16_t)(8000 * sin(2 * 3.14159265 * 440 * k / 48000.0));
    uint8_t frame[5 + 1500] = {2, 0, 0, 0, 0};
    int n = vrt_opus_encode(enc, pcm, 960, frame + 5, 1500);
    CHECK(n > 0, "encoded %d", n);

    vrt_client c;
    vrt_config cfg = {0};
    cfg.kept = &kept[0][0];
    cfg.kept_slots = 4;
    cfg.kept_slot_size = 512;
    cfg.scratch = scratch;
    cfg.scratch_size = sizeof scratch;
    cfg.tokens = tokens;
    cfg.token_count = 64;
    cfg.write = on_write;
    cfg.emit = on_event;
    CHECK(vrt_client_init(&c, &cfg) == VRT_OK, "client");
    vrt_client_connection_made(&c, 0);
    char ready[] = "{\"v\":1,\"seq\":0,\"type\":\"ready\",\"sessionId\":\"s\",\"input\":{\"encoding\":\"opus\"},"
                   "\"output\":{\"encoding\":\"opus\"}}";
    vrt_client_receive_text(&c, ready, strlen(ready), 1);
    char start[] = "{\"v\":1,\"seq\":0,\"type\":\"audio.start\",\"itemId\":\"i\",\"turnId\":\"t\",\"epoch\":1}";
    vrt_client_receive_text(&c, start, strlen(start), 2);
    vrt_client_receive_binary(&c, frame, (size_t)(5 + n), 3);
    uint32_t sent = 0;
    vrt_client_playback(&c, "i", 1000, 4, &sent);
    CHECK(sent == 20, "an Opus packet of 20 ms is 20 ms of playback (RFC 6716 §3.1): %u", sent);
    int16_t out[2880];
    CHECK(chunk_len == (size_t)n && vrt_opus_decode(dec, chunk, (int)chunk_len, out, 2880) == 960, "decoded 960 samples");
}
