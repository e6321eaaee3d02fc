#include "vrt_esp_ws.h"

#include <string.h>

#include "esp_log.h"
#include "esp_timer.h"

static const char *TAG = "vrt";

vrt_ms vrt_esp_now(void) { return (vrt_ms)(esp_timer_get_time() / 1000); }

void vrt_esp_lock(vrt_esp *t) { xSemaphoreTakeRecursive(t->lock, portMAX_DELAY); }
void vrt_esp_unlock(vrt_esp *t) { xSemaphoreGiveRecursive(t->lock); }

void vrt_esp_write(void *ctx, const vrt_output *out) {
    vrt_esp *t = ctx;
    if (out->kind == VRT_OUT_TEXT) {
        esp_websocket_client_send_text(t->ws, (const char *)out->data, (int)out->len, portMAX_DELAY);
    } else if (out->kind == VRT_OUT_BINARY) {
        /* One frame: header and payload joined in the configured buffer (§8.1). */
        if (out->head_len + out->len > t->cfg.tx_size) {
            ESP_LOGE(TAG, "audio frame of %u bytes exceeds tx_size: not sent", (unsigned)out->len);
            return;
        }
        memcpy(t->cfg.tx, out->head, out->head_len);
        memcpy(t->cfg.tx + out->head_len, out->data, out->len);
        esp_websocket_client_send_bin(t->ws, (const char *)t->cfg.tx, (int)(out->head_len + out->len), portMAX_DELAY);
    } else {
        /* Not allowed from the event handler: the transport's task closes. */
        size_t n = out->len < sizeof t->close_reason - 1 ? out->len : sizeof t->close_reason - 1;
        memcpy(t->close_reason, out->data, n);
        t->close_reason[n] = 0;
        t->close_code = out->close_code;
        if (t->task) xTaskNotifyGive(t->task);
    }
}

static void on_ws_event(void *arg, esp_event_base_t base, int32_t id, void *event_data) {
    (void)base;
    vrt_esp *t = arg;
    esp_websocket_event_data_t *d = event_data;
    vrt_esp_lock(t);
    switch (id) {
    case WEBSOCKET_EVENT_CONNECTED:
        t->rx_len = 0;
        vrt_client_connection_made(t->client, vrt_esp_now());
        break;
    case WEBSOCKET_EVENT_DISCONNECTED:
    case WEBSOCKET_EVENT_CLOSED:
        vrt_client_connection_lost(t->client, vrt_esp_now()); /* then reconnect and resume */
        break;
    case WEBSOCKET_EVENT_DATA:
        if (d->op_code != 0x1 && d->op_code != 0x2 && d->op_code != 0x0) break; /* control frames */
        if (d->payload_offset == 0) {
            t->rx_len = 0;
            t->rx_overflow = 0;
            if (d->op_code != 0x0) t->rx_text = d->op_code == 0x1;
        }
        /* Messages larger than the buffer esp_websocket_client uses arrive in pieces. */
        if (t->rx_len + (size_t)d->data_len > t->cfg.rx_size - 1) {
            t->rx_overflow = 1;
        } else {
            memcpy(t->cfg.rx + t->rx_len, d->data_ptr, (size_t)d->data_len);
            t->rx_len += (size_t)d->data_len;
        }
        if (d->payload_offset + d->data_len < d->payload_len || !d->fin) break;
        if (t->rx_overflow) {
            ESP_LOGE(TAG, "a message of %d bytes exceeds rx_size: dropped (§11)", d->payload_len);
        } else if (t->rx_text) {
            vrt_client_receive_text(t->client, t->cfg.rx, t->rx_len, vrt_esp_now());
        } else {
            vrt_client_receive_binary(t->client, (const uint8_t *)t->cfg.rx, t->rx_len, vrt_esp_now());
        }
        t->rx_len = 0;
        break;
    default: break;
    }
    vrt_esp_unlock(t);
}

static void transport_task(void *arg) {
    vrt_esp *t = arg;
    for (;;) {
        vrt_ms at = 0, now = vrt_esp_now();
        vrt_esp_lock(t);
        int has = vrt_client_deadline(t->client, &at);
        vrt_esp_unlock(t);
        TickType_t wait = has ? (at > now ? pdMS_TO_TICKS(at - now) : 0) : pdMS_TO_TICKS(1000);
        ulTaskNotifyTake(pdTRUE, wait ? wait : 1);
        if (t->close_code) {
            int code = t->close_code;
            t->close_code = 0;
            esp_websocket_client_close_with_code(t->ws, code, t->close_reason, (int)strlen(t->close_reason),
                                                 pdMS_TO_TICKS(1000));
            esp_websocket_client_start(t->ws); /* a new connection: resume, or a new session */
        }
        vrt_esp_lock(t);
        if (vrt_client_deadline(t->client, &at) && vrt_esp_now() >= at) vrt_client_on_timer(t->client, vrt_esp_now());
        vrt_esp_unlock(t);
    }
}

esp_err_t vrt_esp_start(vrt_esp *t, vrt_client *client, const vrt_esp_config *cfg) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    t->client = client;
    t->lock = xSemaphoreCreateRecursiveMutexStatic(&t->lock_storage);
    esp_websocket_client_config_t ws = {0};
    ws.uri = cfg->uri;
    ws.cert_pem = cfg->cert_pem;
    ws.crt_bundle_attach = cfg->crt_bundle_attach;
    ws.reconnect_timeout_ms = cfg->reconnect_ms > 0 ? cfg->reconnect_ms : 1000;
    ws.network_timeout_ms = 10000;
    /* The core runs in the websocket task: about 1.1 KB of its own stack (docs/c-sdk.md)
     * plus the application's callbacks, beyond the 4 KB the task has by default. */
    ws.task_stack = 6144;
    t->ws = esp_websocket_client_init(&ws);
    if (!t->ws) return ESP_ERR_NO_MEM;
    esp_websocket_register_events(t->ws, WEBSOCKET_EVENT_ANY, on_ws_event, t);
    if (xTaskCreate(transport_task, "vrt", 4096, t, 5, &t->task) != pdPASS) return ESP_ERR_NO_MEM;
    return esp_websocket_client_start(t->ws);
}

void vrt_esp_stop(vrt_esp *t) {
    if (t->task) vTaskDelete(t->task);
    esp_websocket_client_close(t->ws, pdMS_TO_TICKS(1000));
    esp_websocket_client_destroy(t->ws);
}
