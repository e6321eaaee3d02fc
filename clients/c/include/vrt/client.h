/* The vRT client core, sans I/O (§5.1 client behaviour).
 *
 * A driver calls vrt_client_connection_made() when a WebSocket opens, feeds it the
 * frames it receives with the time (vrt_client_receive_text/_binary), sends what the
 * core writes through config.write, calls vrt_client_on_timer() at
 * vrt_client_deadline(), and hands the events of config.emit to the application.
 *
 * The core keeps the protocol's promises: sequencing and acks (§4.1, §4.2), duplicates
 * dropped (§4.3), heartbeats (§4.4), exact-once resume (§5.4), the epoch gate (§6.2),
 * tool calls one at a time with one result each (§7), playback reports (§8.4) and
 * capabilities (§3.3). The §5.1 client table is data (vrt/gen.h, generated).
 *
 * Memory: nothing is allocated. The application hands fixed buffers in vrt_config;
 * their sizes are the limits, and exceeding one is a clear error (see each function),
 * never a silent loss. Callbacks must not call back into the core (VRT_ERR_BUSY). */
#ifndef VRT_CLIENT_H
#define VRT_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "vrt/decode.h"
#include "vrt/gen.h"
#include "vrt/json.h"

/* Bytes of an id remembered for answered calls, audio items and tool streams, with its
 * NUL. A longer id is handled but not remembered (see docs/c-sdk.md). */
#ifndef VRT_ID_MAX
#define VRT_ID_MAX 96
#endif
/* Calls whose answer is remembered (§7.2: one result per call). */
#ifndef VRT_REMEMBERED_ANSWERS
#define VRT_REMEMBERED_ANSWERS 8
#endif
/* Audio items remembered for playback reports (§8.4). */
#ifndef VRT_REMEMBERED_ITEMS
#define VRT_REMEMBERED_ITEMS 4
#endif
/* tool-stream-v1 calls whose last phase is remembered (§7.5). */
#ifndef VRT_REMEMBERED_STREAMS
#define VRT_REMEMBERED_STREAMS 4
#endif
/* A session id: at most 256 code points (§11), in UTF-8, with its NUL. */
#define VRT_SESSION_ID_MAX 1025

/* §4.4 RECOMMENDED ping interval; a connection silent 2.5 intervals is dead. */
#define VRT_PING_INTERVAL_MS 15000u
/* §4.2 RECOMMENDED: ack within 250 ms, or after 32 messages. */
#define VRT_ACK_DELAY_MS 250u
#define VRT_ACK_AFTER_MESSAGES 32u

typedef uint64_t vrt_ms; /* a monotonic clock in milliseconds, the driver's */

typedef enum {
    VRT_OK = 0,
    VRT_ERR_STATE = -1,     /* not possible in this state (e.g. the session is closed) */
    VRT_ERR_FULL = -2,      /* every kept slot holds an unacknowledged message: retry after acks */
    VRT_ERR_TOO_LARGE = -3, /* the message does not fit a kept slot (or the scratch buffer) */
    VRT_ERR_INVALID = -4,   /* an argument is invalid (not JSON, an unregistered capability...) */
    VRT_ERR_BUSY = -5,      /* called from inside a callback */
    VRT_ERR_UNKNOWN = -6    /* no such call running */
} vrt_status;

typedef enum { VRT_PCM16, VRT_PCMU, VRT_OPUS } vrt_encoding;
typedef struct {
    vrt_encoding encoding;
    uint32_t sample_rate; /* Hz; pcmu is always 8000 */
} vrt_format;

typedef struct {
    const char *name;            /* ^[A-Za-z0-9_.-]{1,64}$ (§5.2) */
    const char *description;     /* or NULL */
    const char *parameters_json; /* a JSON Schema as JSON text, or NULL: any arguments */
} vrt_tool;

typedef enum {
    VRT_EV_CONNECTED,      /* ready: session_id, resumed, input, output */
    VRT_EV_SESSION_FAILED, /* code, message: the session cannot go on (§5.3, §5.4, §9.2) */
    VRT_EV_ERROR,          /* code, message, recoverable: an error, or an invalid frame (§9.1) */
    VRT_EV_TURN,           /* turn_id, epoch, state (turn.state) */
    VRT_EV_TEXT,           /* text, turn_id: a chunk of the agent's reply */
    VRT_EV_TRANSCRIPT,     /* role, text, final, item_id, turn_id */
    VRT_EV_AUDIO_STARTED,  /* item_id, turn_id, epoch (§8.3) */
    VRT_EV_AUDIO_CHUNK,    /* item_id, payload: play it (§8.3, §6.2) */
    VRT_EV_PLAYBACK_STOP,  /* epoch: stop playback, discard buffered audio (§8.4) */
    VRT_EV_INTERRUPTED,    /* epoch, local: the epoch closed (§6.2) */
    VRT_EV_TOOL_PREVIEW,   /* call_id, turn_id, epoch, json (preview): display only (§7.4) */
    VRT_EV_TOOL_STREAM,    /* call_id, name, turn_id, epoch, phase, json (delta, arguments,
                              progress or message, raw), ok and code (settled) (§7.5) */
    VRT_EV_RUN_TOOL,       /* call_id, name, json (arguments), turn_id, epoch: run it now */
    VRT_EV_CANCEL_TOOL     /* call_id: cancel the running call; its result is already sent */
} vrt_event_type;

/* Strings are UTF-8, NUL-terminated, valid during the callback only (RUN_TOOL's until
 * vrt_client_tool_finished()). `json` is raw JSON text of json_len bytes. */
typedef struct {
    vrt_event_type type;
    const char *session_id, *code, *message, *turn_id, *state, *text, *role, *item_id;
    const char *call_id, *name, *phase, *json;
    size_t text_len, json_len, payload_len;
    const uint8_t *payload;
    uint32_t epoch;
    int resumed, recoverable, final, local, ok;
    vrt_format input, output;
} vrt_event;

typedef enum { VRT_OUT_TEXT, VRT_OUT_BINARY, VRT_OUT_CLOSE } vrt_output_kind;
/* One frame to send: a text frame, a binary frame (head then data), or a close. */
typedef struct {
    vrt_output_kind kind;
    const uint8_t *head; /* binary: the 5-byte frame header (§8.1); else NULL */
    size_t head_len;
    const uint8_t *data; /* text, binary payload, or the close reason */
    size_t len;
    uint16_t close_code; /* §9.3 */
} vrt_output;

typedef struct {
    /* Buffers (the limits). kept: kept_slots x kept_slot_size bytes, the sequenced
     * messages sent and not yet acknowledged (§4.1), each at most kept_slot_size - 8
     * bytes encoded. calls: call_slots x call_slot_size bytes, tool calls queued or
     * running (§7.1). scratch: transient messages (hello with the tool declarations,
     * ack, ping). tokens: JSON tokens of one received message (§11). */
    uint8_t *kept;
    size_t kept_slots, kept_slot_size;
    uint8_t *calls;
    size_t call_slots, call_slot_size;
    char *scratch;
    size_t scratch_size;
    jsmntok_t *tokens;
    size_t token_count;
    /* What the client declares (§5.2, §3.3). */
    const vrt_tool *tools;
    size_t tool_count;
    const char *const *capabilities; /* registered (vrt/gen.h VRT_CAP_*) or x- tokens */
    size_t capability_count;
    const vrt_format *input, *output; /* preferences, or NULL */
    const char *auth;                 /* hello.auth as a string, or NULL (§5.3) */
    const char *context_json;         /* the initial context as JSON text, or NULL (§5.5) */
    uint32_t ping_interval_ms;        /* 0: VRT_PING_INTERVAL_MS */
    /* The driver's sinks. */
    void (*write)(void *ctx, const vrt_output *out);
    void (*emit)(void *ctx, const vrt_event *ev);
    void *ctx;
} vrt_config;

typedef struct {
    char id[VRT_ID_MAX];
    uint32_t epoch;
    uint64_t received_us;
    uint8_t used;
} vrt_item;

typedef struct {
    char id[VRT_ID_MAX];
    uint32_t epoch;
    uint8_t phase, used;
} vrt_stream;

typedef struct {
    vrt_config cfg;
    vrt_state state;
    uint8_t busy, has_session, has_closed, auth_refused, has_ack_due;
    char session_id[VRT_SESSION_ID_MAX];
    vrt_format input, output;
    uint32_t caps_in_effect; /* bit k: cfg.capabilities[k] is in effect */
    /* Outgoing stream (§4.1): a ring of kept messages. */
    uint32_t out_last_seq;
    size_t kept_head, kept_count;
    /* Incoming stream (§4.2, §4.3). */
    uint32_t in_last_seq, in_pending, gaps;
    vrt_ms ack_due;
    /* Epoch gate (§6.2). */
    uint32_t observed_epoch, closed_epoch;
    /* Tool calls (§7.1): a ring of call slots; the head may be running. */
    size_t call_head, call_count;
    uint8_t running;
    char answered[VRT_REMEMBERED_ANSWERS][VRT_ID_MAX];
    size_t answered_next;
    vrt_item items[VRT_REMEMBERED_ITEMS];
    int current_item; /* index in items, or -1 (§8.3) */
    size_t item_next;
    vrt_stream streams[VRT_REMEMBERED_STREAMS];
    size_t stream_next;
    uint32_t audio_out_seq;
    vrt_ms last_sent, last_received;
} vrt_client;

/* Check the configuration and start in `connecting`. VRT_ERR_INVALID: a tool name that
 * is not unique or not well formed, a capability that is not registered (§3.4), JSON
 * that is not JSON, or buffers too small for the hello. */
vrt_status vrt_client_init(vrt_client *c, const vrt_config *cfg);

/* Driver side. */
vrt_status vrt_client_connection_made(vrt_client *c, vrt_ms now);
vrt_status vrt_client_connection_lost(vrt_client *c, vrt_ms now);
/* A text frame; `data` is modified (strings are unescaped in place for the events). */
vrt_status vrt_client_receive_text(vrt_client *c, char *data, size_t len, vrt_ms now);
vrt_status vrt_client_receive_binary(vrt_client *c, const uint8_t *data, size_t len, vrt_ms now);
/* When vrt_client_on_timer() is next due; 0 if no timer runs. */
int vrt_client_deadline(const vrt_client *c, vrt_ms *at);
vrt_status vrt_client_on_timer(vrt_client *c, vrt_ms now);
/* Whether a lost connection may be resumed (§5.4). */
int vrt_client_resumable(const vrt_client *c);
/* Whether `token` (VRT_CAP_*) is in effect (§3.3). */
int vrt_client_has_capability(const vrt_client *c, const char *token);

/* Application side. Sequenced messages are numbered and kept until acknowledged, and
 * sent at once when the session is open, else after the next ready (§5.1). */
vrt_status vrt_client_send_text(vrt_client *c, const char *text, vrt_ms now);
vrt_status vrt_client_update_context(vrt_client *c, const char *context_json, vrt_ms now);
/* Close the observed epoch locally, then send interrupt (§6.2); *epoch gets it. */
vrt_status vrt_client_interrupt(vrt_client *c, const char *reason, vrt_ms now, uint32_t *epoch);
/* Report what was played of an item, never more than received (§8.4); *sent gets it. */
vrt_status vrt_client_playback(vrt_client *c, const char *item_id, uint32_t played_ms, vrt_ms now,
                               uint32_t *sent);
/* One input audio frame; VRT_ERR_STATE (dropped) unless the session is open (§5.1). */
vrt_status vrt_client_send_audio(vrt_client *c, const uint8_t *payload, size_t len, vrt_ms now);
/* The running call ended: output_json on success (NULL: null), else code (one of
 * INTERRUPTED, REJECTED, INVALID, TIMEOUT, FAILED; §7.3) and message. VRT_ERR_UNKNOWN:
 * not the running call (e.g. answered INTERRUPTED already: the outcome is discarded).
 * VRT_ERR_INVALID: output_json is not JSON, or code is not a failure code.
 * VRT_ERR_FULL / VRT_ERR_TOO_LARGE: nothing sent, the call still runs: retry later, or
 * finish it with a failure. */
vrt_status vrt_client_tool_finished(vrt_client *c, const char *call_id, int ok,
                                    const char *output_json, const char *code,
                                    const char *message, vrt_ms now);

/* Bytes of RAM the core's struct takes (for the footprint table). */
#define VRT_CLIENT_STRUCT_SIZE sizeof(vrt_client)

#endif
