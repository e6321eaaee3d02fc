/* Optional Opus for the C client (build with -DVRT_OPUS=ON; libopus, Debian
 * libopus-dev): encode input audio and decode output audio in a session whose format is
 * opus (§8.2), one packet per frame (§8.1). Non-allocating: the encoder and decoder
 * states live in memory the application hands (vrt_opus_*_size() bytes, aligned). The
 * core itself needs none of this: it frames Opus packets and accounts for their
 * duration (RFC 6716 §3.1) for playback reports. */
#ifndef VRT_OPUS_H
#define VRT_OPUS_H

#include <stddef.h>
#include <stdint.h>

/* Mono at 48000 Hz, as vRT's opus format is (§8.2). */
#define VRT_OPUS_RATE 48000

size_t vrt_opus_encoder_size(void);
size_t vrt_opus_decoder_size(void);
/* 0, or a libopus error code (negative). */
int vrt_opus_encoder_init(void *state);
int vrt_opus_decoder_init(void *state);
/* Encode `samples` pcm16 samples (2.5, 5, 10, 20, 40 or 60 ms) into one packet; its
 * length, or a negative libopus error. */
int vrt_opus_encode(void *state, const int16_t *pcm, int samples, uint8_t *packet, int capacity);
/* Decode one packet into at most `max_samples` samples; how many, or a negative error. */
int vrt_opus_decode(void *state, const uint8_t *packet, int len, int16_t *pcm, int max_samples);

#endif
