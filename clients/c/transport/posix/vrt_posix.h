/* The POSIX reference transport: a WebSocket over a socket (wslay frames it), with TLS
 * through mbedTLS for wss:// URLs when built with VRT_TLS. It drives one vrt_client per
 * connection: frames in to the core, the core's output to the socket. It allocates (the
 * socket, wslay's queues, TLS); the core does not. */
#ifndef VRT_POSIX_H
#define VRT_POSIX_H

#include <stddef.h>
#include <stdint.h>

#include "vrt/client.h"

typedef struct vrt_posix vrt_posix;

/* The monotonic clock, in milliseconds. */
vrt_ms vrt_posix_now(void);

/* Open a connection to a ws:// or wss:// URL (the opening handshake included, RFC 6455
 * §4). `max_message` bounds a received message (larger: the connection fails with 1009).
 * NULL on failure, with the reason in err. */
vrt_posix *vrt_posix_connect(const char *url, size_t max_message, char *err, size_t err_len);

/* The vrt_config.write sink: ctx is the vrt_posix. Output is queued and sent by poll. */
void vrt_posix_write(void *ctx, const vrt_output *out);

/* Wait up to timeout_ms for frames (and the client's timer), feed them to the client,
 * send what is queued. 0 while the connection lives; -1 once it is gone (then
 * vrt_posix_close_code() says how it ended: the code of the server's close frame, or 0). */
int vrt_posix_poll(vrt_posix *t, vrt_client *c, int timeout_ms);

uint16_t vrt_posix_close_code(const vrt_posix *t);

/* Close the socket now, without a close frame (used to simulate a dropped connection). */
void vrt_posix_abort(vrt_posix *t);

void vrt_posix_free(vrt_posix *t);

#endif
