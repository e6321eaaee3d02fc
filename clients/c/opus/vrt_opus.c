#include "vrt_opus.h"

#include <opus/opus.h>

size_t vrt_opus_encoder_size(void) { return (size_t)opus_encoder_get_size(1); }
size_t vrt_opus_decoder_size(void) { return (size_t)opus_decoder_get_size(1); }

int vrt_opus_encoder_init(void *state) {
    /* VOIP: speech, as a voice agent's input is. */
    return opus_encoder_init((OpusEncoder *)state, VRT_OPUS_RATE, 1, OPUS_APPLICATION_VOIP);
}

int vrt_opus_decoder_init(void *state) { return opus_decoder_init((OpusDecoder *)state, VRT_OPUS_RATE, 1); }

int vrt_opus_encode(void *state, const int16_t *pcm, int samples, uint8_t *packet, int capacity) {
    return opus_encode((OpusEncoder *)state, pcm, samples, packet, capacity);
}

int vrt_opus_decode(void *state, const uint8_t *packet, int len, int16_t *pcm, int max_samples) {
    return opus_decode((OpusDecoder *)state, packet, len, pcm, max_samples, 0);
}
