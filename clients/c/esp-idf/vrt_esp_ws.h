/* The ESP-IDF transport: the vRT client core over esp_websocket_client (ESP32). Thin by
 * design: the protocol is the tested core's (src/); this file only moves frames.
 *
 * Threads: esp_websocket_client delivers frames in its own task, which feeds them to the
 * core under the transport's lock; the transport's task runs the core's timer (acks,
 * pings, the dead-connection check, §4.2, §4.4) and the closes the core asks for (which
 * esp_websocket_client does not allow from its event handler). The application takes
 * the lock (vrt_esp_lock/unlock) around its own calls into the core, and must not call
 * the core from its event callback (the core refuses: VRT_ERR_BUSY). */
#ifndef VRT_ESP_WS_H
#define VRT_ESP_WS_H

#include <stddef.h>
#include <stdint.h>

#include "esp_err.h"
#include "esp_websocket_client.h"
#include "freertos/FreeRTOS.h"
#include "freertos/semphr.h"
#include "freertos/task.h"
#include "vrt/client.h"

typedef struct {
    const char *uri;                        /* ws:// or wss:// (TLS outside local development, §2.1) */
    const char *cert_pem;                   /* the server's CA, or NULL with crt_bundle_attach */
    esp_err_t (*crt_bundle_attach)(void *); /* esp_crt_bundle_attach, or NULL */
    char *rx;                               /* one received message: the largest the device takes */
    size_t rx_size;
    uint8_t *tx; /* one outgoing audio frame: 5 bytes + the largest payload sent */
    size_t tx_size;
    int reconnect_ms; /* delay before reconnecting (the client then resumes, §5.4) */
} vrt_esp_config;

typedef struct {
    vrt_esp_config cfg;
    vrt_client *client;
    esp_websocket_client_handle_t ws;
    SemaphoreHandle_t lock;
    StaticSemaphore_t lock_storage;
    TaskHandle_t task;
    size_t rx_len;
    int rx_text, rx_overflow;
    volatile int close_code; /* a close the core asked for, done by the transport's task */
    char close_reason[64];
} vrt_esp;

/* The vrt_config.write sink: ctx is the vrt_esp. */
void vrt_esp_write(void *ctx, const vrt_output *out);

/* Start: connect, and reconnect after every loss until vrt_esp_stop(). The client must be
 * initialised with cfg.write = vrt_esp_write and cfg.ctx = t. */
esp_err_t vrt_esp_start(vrt_esp *t, vrt_client *client, const vrt_esp_config *cfg);
void vrt_esp_stop(vrt_esp *t);

void vrt_esp_lock(vrt_esp *t);
void vrt_esp_unlock(vrt_esp *t);
vrt_ms vrt_esp_now(void);

#endif
