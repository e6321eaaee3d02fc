/* vrt-c-chat: a small chat over the POSIX transport.
 *
 *   vrt-c-chat ws://127.0.0.1:8765            # lines from standard input
 *   vrt-c-chat ws://127.0.0.1:8765 "echo hi" "call device.status {\"verbose\":true}"
 *
 * Each line is sent as user text once the agent's previous reply is complete, and the
 * reply is printed as one line "agent: TEXT" when its turn goes idle. The device hosts
 * one tool, device.status, which returns {"battery":87,"asked":ARGUMENTS}. Lines that
 * are commands do not wait for a reply:
 *   /drop      close the socket without a close frame (a lost connection): the client
 *              reconnects and resumes, and nothing sequenced is lost or doubled (§5.4)
 *   /wait MS   wait MS milliseconds
 * and one does:
 *   /sync      wait until the previous reply is complete
 * It exits once every line is done (or at the end of standard input), closing with 1000;
 * with status 1 when the server cannot be reached three times before a session opened.
 * wss:// URLs are checked against the system's CAs, or those of VRT_CA_FILE. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vrt/client.h"
#include "vrt_posix.h"

#define KEPT_SLOTS 16
#define SLOT_SIZE 2048
#define CALL_SLOTS 4
#define TOKENS 512
#define MAX_MESSAGE 65536

static uint8_t kept[KEPT_SLOTS * SLOT_SIZE];
static uint8_t calls[CALL_SLOTS * SLOT_SIZE];
static char scratch[SLOT_SIZE];
static jsmntok_t tokens[TOKENS];

/* Copy a string, cut to fit. */
static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

static const vrt_tool TOOLS[] = {
    {"device.status", "The device's battery level.", "{\"type\":\"object\"}"},
};

static char reply[1 << 20];
static size_t reply_len;
static int waiting_reply, turns_done;
static char tool_call[1100], tool_output[SLOT_SIZE];
static int tool_pending;

static void on_event(void *ctx, const vrt_event *e) {
    (void)ctx;
    switch (e->type) {
    case VRT_EV_CONNECTED:
        fprintf(stderr, "%s session %s\n", e->resumed ? "resumed" : "opened", e->session_id);
        break;
    case VRT_EV_TEXT:
        if (reply_len + e->text_len < sizeof reply) {
            memcpy(reply + reply_len, e->text, e->text_len);
            reply_len += e->text_len;
        }
        break;
    case VRT_EV_TURN:
        if (!strcmp(e->state, "idle")) {
            printf("agent: %.*s\n", (int)reply_len, reply);
            fflush(stdout);
            reply_len = 0;
            waiting_reply = 0;
            turns_done++;
        }
        break;
    case VRT_EV_RUN_TOOL: /* run after the core returns: callbacks must not call it */
        printf("tool: %s %.*s\n", e->name, (int)e->json_len, e->json);
        fflush(stdout);
        copy_str(tool_call, sizeof tool_call, e->call_id);
        snprintf(tool_output, sizeof tool_output, "{\"battery\":87,\"asked\":%.*s}", (int)e->json_len, e->json);
        tool_pending = 1;
        break;
    case VRT_EV_CANCEL_TOOL: tool_pending = 0; break;
    case VRT_EV_ERROR: fprintf(stderr, "error %s: %s\n", e->code, e->message ? e->message : ""); break;
    case VRT_EV_SESSION_FAILED: fprintf(stderr, "session failed: %s\n", e->code); break;
    default: break;
    }
}

static void sleep_ms(unsigned ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: vrt-c-chat URL [LINE...]\n");
        return 2;
    }
    static char *lines[1024];
    static char stdin_buf[1 << 16];
    size_t count = 0, next = 0;
    if (argc > 2) {
        for (int k = 2; k < argc && count < 1024; k++) lines[count++] = argv[k];
    } else {
        size_t n = fread(stdin_buf, 1, sizeof stdin_buf - 1, stdin);
        stdin_buf[n] = 0;
        for (char *l = strtok(stdin_buf, "\n"); l && count < 1024; l = strtok(NULL, "\n")) lines[count++] = l;
    }
    static vrt_client client;
    vrt_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.kept = kept;
    cfg.kept_slots = KEPT_SLOTS;
    cfg.kept_slot_size = SLOT_SIZE;
    cfg.calls = calls;
    cfg.call_slots = CALL_SLOTS;
    cfg.call_slot_size = SLOT_SIZE;
    cfg.scratch = scratch;
    cfg.scratch_size = sizeof scratch;
    cfg.tokens = tokens;
    cfg.token_count = TOKENS;
    cfg.tools = TOOLS;
    cfg.tool_count = 1;
    cfg.auth = getenv("VRT_AUTH");
    cfg.write = vrt_posix_write;
    cfg.emit = on_event;
    if (vrt_client_init(&client, &cfg) != VRT_OK) {
        fprintf(stderr, "invalid configuration\n");
        return 2;
    }
    vrt_ms wait_until = 0;
    unsigned backoff = 0;
    int failures = 0;
    while (client.state != VRT_STATE_CLOSED) {
        char err[256];
        vrt_posix *t = vrt_posix_connect(argv[1], MAX_MESSAGE, err, sizeof err);
        if (!t) {
            fprintf(stderr, "%s\n", err);
            if (!client.has_session && ++failures >= 3) return 1; /* never reached: give up */
            backoff = backoff ? (backoff * 2 > 2000 ? 2000 : backoff * 2) : 100;
            sleep_ms(backoff); /* reconnect with backoff, then resume (§5.1) */
            continue;
        }
        backoff = 0;
        client.cfg.ctx = t;
        vrt_client_connection_made(&client, vrt_posix_now());
        while (vrt_posix_poll(t, &client, 20) == 0) {
            vrt_ms now = vrt_posix_now();
            if (tool_pending) {
                tool_pending = 0;
                vrt_client_tool_finished(&client, tool_call, 1, tool_output, NULL, NULL, now);
            }
            if (client.state != VRT_STATE_OPEN || now < wait_until) continue;
            unsigned ms;
            const char *line = next < count ? lines[next] : "";
            int command = !strcmp(line, "/drop") || sscanf(line, "/wait %u", &ms) == 1;
            if (next < count && (!waiting_reply || command)) {
                if (!strcmp(line, "/drop")) {
                    next++;
                    fprintf(stderr, "dropping the connection\n");
                    vrt_posix_abort(t);
                    continue;
                }
                if (sscanf(line, "/wait %u", &ms) == 1) {
                    wait_until = now + ms;
                } else if (!strcmp(line, "/sync")) {
                    /* reached once no reply is awaited: nothing more to do */
                } else if (vrt_client_send_text(&client, line, now) == VRT_OK) {
                    waiting_reply = 1;
                } else {
                    continue; /* VRT_ERR_FULL: retry once acks free a slot */
                }
                next++;
            } else if (next >= count && !waiting_reply && client.kept_count == 0) {
                vrt_output bye = {VRT_OUT_CLOSE, NULL, 0, (const uint8_t *)"bye", 3, VRT_CLOSE_NORMAL};
                vrt_posix_write(t, &bye);
                vrt_posix_poll(t, &client, 100);
                vrt_posix_free(t);
                return 0;
            }
        }
        vrt_posix_free(t);
        vrt_client_connection_lost(&client, vrt_posix_now());
    }
    return 1;
}
