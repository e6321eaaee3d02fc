/* vrt-c-client-under-test: the C client as the client under test of
 * `vrt conformance client` (conformance/README.md, "What a client under test must do").
 *
 *   vrt conformance client -- clients/c/build/vrt-c-client-under-test
 *
 * It adds nothing to the protocol: acks, pings, resume, dedupe, the epoch gate, one call
 * at a time and one result per call all come from the core (src/vrt_client.c). This file
 * is the contract around it: the three tools and their log, VRT_SAY, a simulated
 * speaker that reports playback (§8.4), and reconnecting until the server closes with
 * 1000. */
#define _POSIX_C_SOURCE 200809L
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vrt/client.h"
#include "vrt_posix.h"

#define KEPT_SLOTS 64
#define SLOT_SIZE 8192
#define CALL_SLOTS 8
#define TOKENS 4096
#define MAX_MESSAGE (1u << 20)

static uint8_t kept[KEPT_SLOTS * SLOT_SIZE];
static uint8_t calls[CALL_SLOTS * SLOT_SIZE];
static char scratch[SLOT_SIZE];
static jsmntok_t tokens[TOKENS];
static jsmntok_t arg_tokens[TOKENS];

/* Copy a string, cut to fit. */
static void copy_str(char *dst, size_t cap, const char *src) {
    size_t n = strlen(src);
    if (n >= cap) n = cap - 1;
    memcpy(dst, src, n);
    dst[n] = 0;
}

static const vrt_tool TOOLS[] = {
    {"conformance.record", "Return the arguments.", NULL},
    {"conformance.slow", "Sleep ms milliseconds.",
     "{\"type\":\"object\",\"properties\":{\"ms\":{\"type\":\"integer\"}},\"required\":[\"ms\"]}"},
    {"conformance.fail", "Always fail.", NULL},
};
/* Not pcm16 at 24000 Hz, so that the suite judges both format choices (§5.2, §8.2). */
static const vrt_format INPUT_PREFERENCE = {VRT_PCM16, 16000};

static const char *log_path;

static void log_line(const char *line) {
    if (!log_path) return;
    FILE *f = fopen(log_path, "a"); /* open, append, close per line: the suite reads it live */
    if (!f) return;
    fputs(line, f);
    fputc('\n', f);
    fclose(f);
}

/* A JSON string literal of s (s is UTF-8 from the core). */
static void json_string(char *out, size_t cap, const char *s) {
    size_t n = 0;
    out[n++] = '"';
    for (; *s && n + 8 < cap; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') n += (size_t)snprintf(out + n, cap - n, "\\%c", ch);
        else if (ch < 0x20) n += (size_t)snprintf(out + n, cap - n, "\\u%04x", ch);
        else out[n++] = (char)ch;
    }
    out[n++] = '"';
    out[n] = 0;
}

/* --- the tools ------------------------------------------------------------------------ */

typedef struct {
    int active, started;
    char call_id[1100], name[80];
    char *args;
    size_t args_len;
    vrt_ms end; /* conformance.slow */
    uint32_t ms;
    int invalid;
} running_t;

static running_t run;
static char args_buf[SLOT_SIZE];

static void tool_started(const vrt_event *e, vrt_ms now) {
    char id[1200], line[SLOT_SIZE + 1400];
    memset(&run, 0, sizeof run);
    run.active = 1;
    copy_str(run.call_id, sizeof run.call_id, e->call_id);
    copy_str(run.name, sizeof run.name, e->name);
    size_t n = e->json_len < sizeof args_buf - 1 ? e->json_len : sizeof args_buf - 1;
    memcpy(args_buf, e->json, n);
    args_buf[n] = 0;
    run.args = args_buf;
    run.args_len = n;
    if (!strcmp(run.name, "conformance.slow")) {
        /* §7.1 SHOULD: arguments that do not match the parameters: INVALID, not run. */
        vrt_json j;
        int ms = -1;
        if (vrt_json_parse(&j, args_buf, n, arg_tokens, TOKENS) == VRT_JSON_OK && arg_tokens[0].type == JSMN_OBJECT)
            ms = vrt_json_member(&j, 0, "ms");
        if (ms < 0 || vrt_json_u32(&j, ms, &run.ms) != VRT_NUM_U32) {
            run.invalid = 1;
            return;
        }
        run.end = now + run.ms;
    }
    json_string(id, sizeof id, run.call_id);
    snprintf(line, sizeof line, "{\"callId\":%s,\"name\":\"%s\",\"arguments\":%s}", id, run.name, args_buf);
    log_line(line);
    run.started = 1;
}

static void tool_log_finished(void) {
    char id[1200], line[1300];
    if (!run.started) return;
    json_string(id, sizeof id, run.call_id);
    snprintf(line, sizeof line, "{\"event\":\"finished\",\"callId\":%s}", id);
    log_line(line);
    run.started = 0;
}

/* Answer the running tool once its work is done. vrt_client_tool_finished() may start
 * the next call at once (its RUN_TOOL event fills `run` again), so `run` is released
 * before the call and taken back only if nothing was sent. */
static void tool_step(vrt_client *c, vrt_ms now) {
    if (!run.active) return;
    char id[sizeof run.call_id], out[64];
    int ok = 1;
    const char *output = NULL, *code = NULL, *message = NULL;
    if (!strcmp(run.name, "conformance.slow")) {
        if (run.invalid) {
            ok = 0, code = "INVALID", message = "ms must be an integer";
        } else {
            if (now < run.end) return;
            snprintf(out, sizeof out, "{\"slept\":%u}", (unsigned)run.ms);
            output = out;
        }
    } else if (!strcmp(run.name, "conformance.fail")) {
        ok = 0, code = "FAILED", message = "conformance.fail always fails";
    } else {
        output = run.args;
    }
    tool_log_finished();
    memcpy(id, run.call_id, sizeof id);
    running_t saved = run;
    run.active = 0;
    if (vrt_client_tool_finished(c, id, ok, output, code, message, now) == VRT_ERR_FULL) {
        run = saved; /* every kept slot is unacknowledged: retry after an ack */
    }
}

/* --- a simulated speaker (§8.4): items play one after another at their format's speed -- */

#define MAX_CHUNKS 4096
typedef struct {
    char item[VRT_ID_MAX];
    double start, seconds;
} chunk_t;
static chunk_t chunks[MAX_CHUNKS];
static size_t chunk_count;
static double busy_until;
typedef struct {
    char item[VRT_ID_MAX];
    uint32_t ms;
} report_t;
static report_t reports[64];
static size_t report_count;

static double seconds_of(const vrt_format *f, size_t n) {
    if (f->encoding == VRT_PCMU) return (double)n / 8000.0;
    if (f->encoding == VRT_OPUS) return 0.02;
    return f->sample_rate ? (double)(n / 2) / f->sample_rate : 0;
}

static void speaker_add(const char *item, double seconds, double now) {
    if (chunk_count >= MAX_CHUNKS) return;
    double start = now > busy_until ? now : busy_until;
    busy_until = start + seconds;
    copy_str(chunks[chunk_count].item, VRT_ID_MAX, item);
    chunks[chunk_count].start = start;
    chunks[chunk_count].seconds = seconds;
    chunk_count++;
}

/* Stop: what was played of each item queued since the last stop, to report. */
static void speaker_stop(double now) {
    for (size_t k = 0; k < chunk_count; k++) {
        double played = now - chunks[k].start;
        if (played < 0) played = 0;
        if (played > chunks[k].seconds) played = chunks[k].seconds;
        size_t r = 0;
        while (r < report_count && strcmp(reports[r].item, chunks[k].item)) r++;
        if (r == report_count) {
            if (report_count >= 64) continue;
            copy_str(reports[r].item, VRT_ID_MAX, chunks[k].item);
            reports[r].ms = 0;
            report_count++;
        }
        reports[r].ms += (uint32_t)(played * 1000.0);
    }
    chunk_count = 0;
    busy_until = now;
}

/* --- events ----------------------------------------------------------------------------- */

typedef struct {
    vrt_client *client;
    int connected_once, say_started;
    int failed_resume, unauthorized;
    vrt_format output;
} app_t;

static app_t app;

static double seconds_now(void) { return (double)vrt_posix_now() / 1000.0; }

static void on_event(void *ctx, const vrt_event *e) {
    (void)ctx;
    vrt_ms now = vrt_posix_now();
    switch (e->type) {
    case VRT_EV_CONNECTED:
        app.output = e->output;
        app.connected_once = 1;
        break;
    case VRT_EV_RUN_TOOL: tool_started(e, now); break;
    case VRT_EV_CANCEL_TOOL: /* §6.2: the tool stops at once; its result is already sent */
        if (run.active && !strcmp(run.call_id, e->call_id)) {
            tool_log_finished();
            run.active = 0;
        }
        break;
    case VRT_EV_AUDIO_CHUNK: speaker_add(e->item_id, seconds_of(&app.output, e->payload_len), seconds_now()); break;
    case VRT_EV_PLAYBACK_STOP: speaker_stop(seconds_now()); break;
    case VRT_EV_SESSION_FAILED:
        fprintf(stderr, "c client: session failed: %s %s\n", e->code ? e->code : "", e->message ? e->message : "");
        if (e->code && !strcmp(e->code, "RESUME_FAILED")) app.failed_resume = 1;
        if (e->code && !strcmp(e->code, "UNAUTHORIZED")) app.unauthorized = 1;
        break;
    case VRT_EV_ERROR:
        fprintf(stderr, "c client: error %s: %s\n", e->code ? e->code : "", e->message ? e->message : "");
        break;
    default: break;
    }
}

/* --- VRT_SAY ---------------------------------------------------------------------------- */

static char *say_lines[256];
static size_t say_count, say_next;
static vrt_ms say_at;

static void send_audio_ms(vrt_client *c, uint32_t ms, vrt_ms now) {
    const vrt_format *f = &c->input;
    if (f->encoding == VRT_OPUS) return;
    size_t per_ms = f->encoding == VRT_PCMU ? 8 : (size_t)f->sample_rate / 1000 * 2;
    static uint8_t frame[2 * 48 * 20 * 2];
    memset(frame, f->encoding == VRT_PCMU ? 0xff : 0, sizeof frame); /* silence */
    for (uint32_t done = 0; done < ms; done += 20) {
        uint32_t part = ms - done < 20 ? ms - done : 20;
        size_t n = per_ms * part;
        if (n > sizeof frame) n = sizeof frame;
        vrt_client_send_audio(c, frame, n, now);
    }
}

static void say_step(vrt_client *c, vrt_ms now) {
    while (app.say_started && say_next < say_count && now >= say_at) {
        const char *line = say_lines[say_next];
        unsigned ms;
        char rest;
        if (!strcmp(line, "/interrupt")) {
            if (vrt_client_interrupt(c, "user", now, NULL) == VRT_ERR_FULL) return;
        } else if (sscanf(line, "/sleep %u%c", &ms, &rest) == 1 && line[7] >= '0' && line[7] <= '9') {
            say_at = now + ms;
        } else if (sscanf(line, "/audio %u%c", &ms, &rest) == 1 && line[7] >= '0' && line[7] <= '9') {
            send_audio_ms(c, ms, now);
        } else if (vrt_client_send_text(c, line, now) == VRT_ERR_FULL) {
            return;
        }
        say_next++;
    }
}

static void flush_reports(vrt_client *c, vrt_ms now) {
    for (size_t k = 0; k < report_count; k++) vrt_client_playback(c, reports[k].item, reports[k].ms, now, NULL);
    report_count = 0;
}

/* --- main ------------------------------------------------------------------------------- */

static void sleep_ms(unsigned ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}

int main(void) {
    const char *url = getenv("VRT_URL");
    if (!url || !*url) {
        fprintf(stderr, "c client: VRT_URL is not set\n");
        return 2;
    }
    log_path = getenv("VRT_CONFORMANCE_LOG");
    static char say_buf[65536];
    copy_str(say_buf, sizeof say_buf, getenv("VRT_SAY") ? getenv("VRT_SAY") : "");
    for (char *line = strtok(say_buf, "\n"); line && say_count < 256; line = strtok(NULL, "\n"))
        say_lines[say_count++] = line;
    static char cap_buf[1024];
    static const char *caps[32];
    size_t cap_count = 0;
    copy_str(cap_buf, sizeof cap_buf, getenv("VRT_CAPABILITIES") ? getenv("VRT_CAPABILITIES") : "");
    for (char *cap = strtok(cap_buf, ","); cap && cap_count < 32; cap = strtok(NULL, ",")) {
        while (*cap == ' ') cap++;
        char *end = cap + strlen(cap);
        while (end > cap && end[-1] == ' ') *--end = 0;
        if (*cap) caps[cap_count++] = cap;
    }
    const char *auth = getenv("VRT_AUTH");
    const char *ping = getenv("VRT_PING_INTERVAL");

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
    cfg.tool_count = 3;
    cfg.capabilities = caps;
    cfg.capability_count = cap_count;
    cfg.input = &INPUT_PREFERENCE;
    cfg.auth = auth && *auth ? auth : NULL;
    cfg.ping_interval_ms = ping && *ping ? (uint32_t)(atof(ping) * 1000.0) : 0;
    cfg.write = vrt_posix_write;
    cfg.emit = on_event;
    app.client = &client;

    for (;;) { /* one session per pass: a new one after RESUME_FAILED */
        if (vrt_client_init(&client, &cfg) != VRT_OK) {
            fprintf(stderr, "c client: invalid configuration\n");
            return 2;
        }
        app.failed_resume = 0;
        unsigned backoff = 0;
        while (client.state != VRT_STATE_CLOSED) {
            char err[256];
            vrt_posix *t = vrt_posix_connect(url, MAX_MESSAGE, err, sizeof err);
            if (!t) {
                fprintf(stderr, "c client: %s\n", err);
                backoff = backoff ? (backoff * 2 > 2000 ? 2000 : backoff * 2) : 50;
                sleep_ms(backoff);
                continue;
            }
            backoff = 0;
            cfg.ctx = t;
            client.cfg.ctx = t;
            vrt_client_connection_made(&client, vrt_posix_now());
            while (vrt_posix_poll(t, &client, 20) == 0) {
                vrt_ms now = vrt_posix_now();
                if (app.connected_once && !app.say_started) {
                    app.say_started = 1; /* VRT_SAY once, after the first ready */
                    say_at = now;
                }
                flush_reports(&client, now);
                tool_step(&client, now);
                say_step(&client, now);
                flush_reports(&client, now);
            }
            uint16_t code = vrt_posix_close_code(t);
            vrt_posix_free(t);
            if (code == 1000) return 0; /* the suite ends the check */
            vrt_client_connection_lost(&client, vrt_posix_now());
            if (app.unauthorized || client.auth_refused) {
                fprintf(stderr, "c client: the credential was refused; not retrying it (§5.3)\n");
                return 1;
            }
        }
        if (!app.failed_resume) return 1;
        fprintf(stderr, "c client: RESUME_FAILED; opening a new session\n");
        run.active = 0;
    }
}
