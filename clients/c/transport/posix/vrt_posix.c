#define _POSIX_C_SOURCE 200809L
#include "vrt_posix.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <mbedtls/base64.h>
#include <mbedtls/sha1.h>
#include <wslay/wslay.h>

#ifdef VRT_TLS
#include <mbedtls/ctr_drbg.h>
#include <mbedtls/entropy.h>
#include <mbedtls/error.h>
#include <mbedtls/net_sockets.h>
#include <mbedtls/ssl.h>
#include <mbedtls/x509_crt.h>
#endif

struct vrt_posix {
    int fd;
    int tls;
    wslay_event_context_ptr ws;
    vrt_client *client; /* during poll */
    int lost;
    uint16_t close_code;
    char *message; /* a received text message, copied: the core unescapes in place */
    size_t max_message;
    int urandom;
#ifdef VRT_TLS
    mbedtls_net_context net;
    mbedtls_ssl_context ssl;
    mbedtls_ssl_config conf;
    mbedtls_ctr_drbg_context drbg;
    mbedtls_entropy_context entropy;
    mbedtls_x509_crt ca;
#endif
};

vrt_ms vrt_posix_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (vrt_ms)ts.tv_sec * 1000u + (vrt_ms)(ts.tv_nsec / 1000000);
}

static void fill_random(vrt_posix *t, uint8_t *buf, size_t n) {
    size_t got = 0;
    while (got < n) {
        ssize_t r = read(t->urandom, buf + got, n - got);
        if (r <= 0) break;
        got += (size_t)r;
    }
}

/* --- raw I/O, plain or TLS ------------------------------------------------------------ */

static ssize_t io_send(vrt_posix *t, const uint8_t *data, size_t len) {
#ifdef VRT_TLS
    if (t->tls) {
        int r = mbedtls_ssl_write(&t->ssl, data, len);
        if (r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE) {
            errno = EAGAIN;
            return -1;
        }
        return r < 0 ? -1 : r;
    }
#endif
    ssize_t r;
    while ((r = send(t->fd, data, len, MSG_NOSIGNAL)) < 0 && errno == EINTR) {
    }
    return r;
}

static ssize_t io_recv(vrt_posix *t, uint8_t *buf, size_t len) {
#ifdef VRT_TLS
    if (t->tls) {
        int r = mbedtls_ssl_read(&t->ssl, buf, len);
        if (r == MBEDTLS_ERR_SSL_WANT_READ || r == MBEDTLS_ERR_SSL_WANT_WRITE) {
            errno = EAGAIN;
            return -1;
        }
        if (r == MBEDTLS_ERR_SSL_PEER_CLOSE_NOTIFY) return 0;
        return r < 0 ? -1 : r;
    }
#endif
    ssize_t r;
    while ((r = recv(t->fd, buf, len, 0)) < 0 && errno == EINTR) {
    }
    return r;
}

/* --- wslay callbacks ------------------------------------------------------------------ */

static ssize_t on_recv(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, int flags, void *user) {
    (void)flags;
    vrt_posix *t = user;
    ssize_t r = io_recv(t, buf, len);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (r <= 0) {
        t->lost = 1; /* reset or end of stream without a close frame */
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return r;
}

static ssize_t on_send(wslay_event_context_ptr ctx, const uint8_t *data, size_t len, int flags, void *user) {
    (void)flags;
    vrt_posix *t = user;
    ssize_t r = io_send(t, data, len);
    if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        wslay_event_set_error(ctx, WSLAY_ERR_WOULDBLOCK);
        return -1;
    }
    if (r < 0) {
        t->lost = 1;
        wslay_event_set_error(ctx, WSLAY_ERR_CALLBACK_FAILURE);
        return -1;
    }
    return r;
}

static int on_genmask(wslay_event_context_ptr ctx, uint8_t *buf, size_t len, void *user) {
    (void)ctx;
    fill_random(user, buf, len);
    return 0;
}

static void on_message(wslay_event_context_ptr ctx, const struct wslay_event_on_msg_recv_arg *arg, void *user) {
    (void)ctx;
    vrt_posix *t = user;
    vrt_ms now = vrt_posix_now();
    if (arg->opcode == WSLAY_TEXT_FRAME) {
        memcpy(t->message, arg->msg, arg->msg_length);
        t->message[arg->msg_length] = 0;
        vrt_client_receive_text(t->client, t->message, arg->msg_length, now);
    } else if (arg->opcode == WSLAY_BINARY_FRAME) {
        vrt_client_receive_binary(t->client, arg->msg, arg->msg_length, now);
    } else if (arg->opcode == WSLAY_CONNECTION_CLOSE) {
        t->close_code = arg->status_code;
    }
}

void vrt_posix_write(void *ctx, const vrt_output *out) {
    vrt_posix *t = ctx;
    if (out->kind == VRT_OUT_CLOSE) {
        wslay_event_queue_close(t->ws, out->close_code, out->data, out->len);
        return;
    }
    struct wslay_event_msg msg;
    uint8_t *joined = NULL;
    msg.opcode = out->kind == VRT_OUT_TEXT ? WSLAY_TEXT_FRAME : WSLAY_BINARY_FRAME;
    msg.msg = out->data;
    msg.msg_length = out->len;
    if (out->head_len) { /* wslay copies the message: join header and payload for it */
        joined = malloc(out->head_len + out->len);
        if (!joined) return;
        memcpy(joined, out->head, out->head_len);
        if (out->len) memcpy(joined + out->head_len, out->data, out->len);
        msg.msg = joined;
        msg.msg_length = out->head_len + out->len;
    }
    wslay_event_queue_msg(t->ws, &msg);
    free(joined);
}

/* --- connecting ----------------------------------------------------------------------- */

typedef struct {
    int secure;
    char host[256], port[8], path[1024];
} url_t;

static int parse_url(const char *url, url_t *u) {
    const char *p;
    if (!strncmp(url, "ws://", 5)) u->secure = 0, p = url + 5;
    else if (!strncmp(url, "wss://", 6)) u->secure = 1, p = url + 6;
    else return -1;
    const char *slash = strchr(p, '/');
    const char *end = slash ? slash : p + strlen(p);
    const char *colon = memchr(p, ':', (size_t)(end - p));
    const char *host_end = colon ? colon : end;
    if (host_end == p || (size_t)(host_end - p) >= sizeof u->host) return -1;
    memcpy(u->host, p, (size_t)(host_end - p));
    u->host[host_end - p] = 0;
    if (colon) {
        if ((size_t)(end - colon - 1) >= sizeof u->port || end == colon + 1) return -1;
        memcpy(u->port, colon + 1, (size_t)(end - colon - 1));
        u->port[end - colon - 1] = 0;
    } else {
        strcpy(u->port, u->secure ? "443" : "80");
    }
    snprintf(u->path, sizeof u->path, "%s", slash ? slash : "/");
    return 0;
}

static int tcp_connect(const url_t *u, char *err, size_t err_len) {
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    int rc = getaddrinfo(u->host, u->port, &hints, &res);
    if (rc) {
        snprintf(err, err_len, "cannot resolve %s: %s", u->host, gai_strerror(rc));
        return -1;
    }
    int fd = -1;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
        if (fd < 0) continue;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0) break;
        close(fd);
        fd = -1;
    }
    freeaddrinfo(res);
    if (fd < 0) snprintf(err, err_len, "cannot connect to %s:%s: %s", u->host, u->port, strerror(errno));
    return fd;
}

static int wait_fd(int fd, short events, int timeout_ms) {
    struct pollfd p = {fd, events, 0};
    return poll(&p, 1, timeout_ms);
}

/* The opening handshake (RFC 6455 §4.1): blocking, with a timeout per read. */
static int handshake(vrt_posix *t, const url_t *u, char *err, size_t err_len) {
    uint8_t nonce[16];
    unsigned char key[32], accept_want[32], digest[20], keyguid[64];
    size_t key_len = 0, accept_len = 0;
    fill_random(t, nonce, sizeof nonce);
    mbedtls_base64_encode(key, sizeof key, &key_len, nonce, sizeof nonce);
    key[key_len] = 0;
    char request[1400];
    int n = snprintf(request, sizeof request,
                     "GET %s HTTP/1.1\r\nHost: %s:%s\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n",
                     u->path, u->host, u->port, key);
    for (int sent = 0; sent < n;) {
        ssize_t r = io_send(t, (const uint8_t *)request + sent, (size_t)(n - sent));
        if (r <= 0) {
            snprintf(err, err_len, "handshake: send failed");
            return -1;
        }
        sent += (int)r;
    }
    char response[4096];
    size_t got = 0;
    /* Read byte by byte up to the blank line: nothing of the first frames is consumed. */
    while (got < sizeof response - 1) {
        if (!t->tls && wait_fd(t->fd, POLLIN, 10000) <= 0) break;
        ssize_t r = io_recv(t, (uint8_t *)response + got, 1);
        if (r <= 0) break;
        got++;
        if (got >= 4 && !memcmp(response + got - 4, "\r\n\r\n", 4)) break;
    }
    response[got] = 0;
    if (strncmp(response, "HTTP/1.1 101", 12)) {
        snprintf(err, err_len, "handshake refused: %.60s", response);
        return -1;
    }
    n = snprintf((char *)keyguid, sizeof keyguid, "%s258EAFA5-E914-47DA-95CA-C5AB0DC85B11", key);
    mbedtls_sha1_ret(keyguid, (size_t)n, digest);
    mbedtls_base64_encode(accept_want, sizeof accept_want, &accept_len, digest, sizeof digest);
    accept_want[accept_len] = 0;
    /* Header names are case-insensitive (RFC 7230 §3.2). */
    for (char *line = response; (line = strstr(line, "\r\n")) != NULL;) {
        line += 2;
        if (!strncasecmp(line, "Sec-WebSocket-Accept:", 21)) {
            char *v = line + 21;
            while (*v == ' ') v++;
            if (!strncmp(v, (char *)accept_want, accept_len)) return 0;
        }
    }
    snprintf(err, err_len, "handshake: Sec-WebSocket-Accept does not match");
    return -1;
}

#ifdef VRT_TLS
static int tls_start(vrt_posix *t, const url_t *u, char *err, size_t err_len) {
    int r;
    mbedtls_net_init(&t->net);
    mbedtls_ssl_init(&t->ssl);
    mbedtls_ssl_config_init(&t->conf);
    mbedtls_ctr_drbg_init(&t->drbg);
    mbedtls_entropy_init(&t->entropy);
    mbedtls_x509_crt_init(&t->ca);
    t->tls = 1;
    t->net.fd = t->fd;
    const char *ca_file = getenv("VRT_CA_FILE");
    if ((r = mbedtls_ctr_drbg_seed(&t->drbg, mbedtls_entropy_func, &t->entropy, NULL, 0)) ||
        (r = mbedtls_x509_crt_parse_file(&t->ca, ca_file ? ca_file : "/etc/ssl/certs/ca-certificates.crt")) < 0 ||
        (r = mbedtls_ssl_config_defaults(&t->conf, MBEDTLS_SSL_IS_CLIENT, MBEDTLS_SSL_TRANSPORT_STREAM,
                                         MBEDTLS_SSL_PRESET_DEFAULT))) {
        snprintf(err, err_len, "TLS setup failed: -0x%04x", (unsigned)-r);
        return -1;
    }
    mbedtls_ssl_conf_authmode(&t->conf, MBEDTLS_SSL_VERIFY_REQUIRED);
    mbedtls_ssl_conf_ca_chain(&t->conf, &t->ca, NULL);
    mbedtls_ssl_conf_rng(&t->conf, mbedtls_ctr_drbg_random, &t->drbg);
    if ((r = mbedtls_ssl_setup(&t->ssl, &t->conf)) || (r = mbedtls_ssl_set_hostname(&t->ssl, u->host))) {
        snprintf(err, err_len, "TLS setup failed: -0x%04x", (unsigned)-r);
        return -1;
    }
    mbedtls_ssl_set_bio(&t->ssl, &t->net, mbedtls_net_send, mbedtls_net_recv, NULL);
    while ((r = mbedtls_ssl_handshake(&t->ssl)) != 0) {
        if (r != MBEDTLS_ERR_SSL_WANT_READ && r != MBEDTLS_ERR_SSL_WANT_WRITE) {
            char why[100];
            mbedtls_strerror(r, why, sizeof why);
            snprintf(err, err_len, "TLS handshake with %s failed: %s", u->host, why);
            return -1;
        }
    }
    return 0;
}
#endif

vrt_posix *vrt_posix_connect(const char *url, size_t max_message, char *err, size_t err_len) {
    url_t u;
    if (parse_url(url, &u)) {
        snprintf(err, err_len, "not a ws:// or wss:// URL: %s", url);
        return NULL;
    }
#ifndef VRT_TLS
    if (u.secure) {
        snprintf(err, err_len, "wss:// needs a build with VRT_TLS");
        return NULL;
    }
#endif
    vrt_posix *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->max_message = max_message;
    t->message = malloc(max_message + 1);
    t->urandom = open("/dev/urandom", O_RDONLY | O_CLOEXEC);
    t->fd = tcp_connect(&u, err, err_len);
    if (!t->message || t->urandom < 0 || t->fd < 0) {
        vrt_posix_free(t);
        return NULL;
    }
#ifdef VRT_TLS
    if (u.secure && tls_start(t, &u, err, err_len)) {
        vrt_posix_free(t);
        return NULL;
    }
#endif
    if (handshake(t, &u, err, err_len)) {
        vrt_posix_free(t);
        return NULL;
    }
    fcntl(t->fd, F_SETFL, fcntl(t->fd, F_GETFL) | O_NONBLOCK);
    struct wslay_event_callbacks callbacks = {on_recv, on_send, on_genmask, NULL, NULL, NULL, on_message};
    if (wslay_event_context_client_init(&t->ws, &callbacks, t)) {
        snprintf(err, err_len, "out of memory");
        vrt_posix_free(t);
        return NULL;
    }
    wslay_event_config_set_max_recv_msg_length(t->ws, max_message);
    return t;
}

int vrt_posix_poll(vrt_posix *t, vrt_client *c, int timeout_ms) {
    if (t->lost) return -1;
    t->client = c;
    vrt_ms deadline;
    if (vrt_client_deadline(c, &deadline)) {
        vrt_ms now = vrt_posix_now();
        int until = deadline > now ? (int)(deadline - now) : 0;
        if (until < timeout_ms) timeout_ms = until;
    }
    short events = 0;
    if (wslay_event_want_read(t->ws)) events |= POLLIN;
    if (wslay_event_want_write(t->ws)) events |= POLLOUT;
    int pending = 0;
#ifdef VRT_TLS
    pending = t->tls && mbedtls_ssl_get_bytes_avail(&t->ssl) > 0;
#endif
    struct pollfd p = {t->fd, events, 0};
    int r = pending ? 1 : poll(&p, 1, timeout_ms);
    if (r > 0 && (pending || (p.revents & (POLLIN | POLLHUP | POLLERR)))) {
        if (wslay_event_recv(t->ws)) t->lost = 1;
    }
    if (!t->lost && vrt_client_deadline(c, &deadline) && vrt_posix_now() >= deadline)
        vrt_client_on_timer(c, vrt_posix_now());
    if (!t->lost && wslay_event_want_write(t->ws) && wslay_event_send(t->ws)) t->lost = 1;
    if (!wslay_event_want_read(t->ws) && !wslay_event_want_write(t->ws)) t->lost = 1; /* closed */
    if (wslay_event_get_close_sent(t->ws) && wslay_event_get_queued_msg_count(t->ws) == 0 &&
        !wslay_event_get_close_received(t->ws)) {
        /* We closed (the core's close: 4000, or a refused resume): do not wait for the echo. */
        t->lost = 1;
    }
    if (wslay_event_get_close_received(t->ws) && !t->close_code)
        t->close_code = wslay_event_get_status_code_received(t->ws);
    t->client = NULL;
    return t->lost ? -1 : 0;
}

uint16_t vrt_posix_close_code(const vrt_posix *t) {
    return t->close_code == WSLAY_CODE_NO_STATUS_RCVD ? 0 : t->close_code;
}

void vrt_posix_abort(vrt_posix *t) {
    if (t->fd >= 0) shutdown(t->fd, SHUT_RDWR);
    t->lost = 1;
}

void vrt_posix_free(vrt_posix *t) {
    if (!t) return;
    if (t->ws) wslay_event_context_free(t->ws);
#ifdef VRT_TLS
    if (t->tls) {
        mbedtls_ssl_free(&t->ssl);
        mbedtls_ssl_config_free(&t->conf);
        mbedtls_ctr_drbg_free(&t->drbg);
        mbedtls_entropy_free(&t->entropy);
        mbedtls_x509_crt_free(&t->ca);
    }
#endif
    if (t->fd >= 0) close(t->fd);
    if (t->urandom >= 0) close(t->urandom);
    free(t->message);
    free(t);
}
