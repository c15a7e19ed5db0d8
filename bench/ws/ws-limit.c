/* ws-limit.c: the WebSocket floor for Peregrine's benchmarks, beside
 * bench/limit/limit.c and built the same way.
 *
 * A single-threaded epoll server with limit's system calls (epoll_wait,
 * read, send; accept4 and setsockopt at accept) that does the least a
 * WebSocket echo server can do. The handshake is answered minimally: the
 * request head is read up to "\r\n\r\n", its Sec-WebSocket-Key found and a
 * 101 sent with the real Sec-WebSocket-Accept (RFC 6455 section 4.2.2);
 * nothing else in the head is looked at. After that every frame is echoed as
 * it streams in: its header is rewritten without the mask (same FIN, same
 * opcode, same length; a ping becomes a pong, a close is echoed and the
 * connection closed) and its payload unmasked, byte ranges at a time, into
 * one output buffer, so a read() of many frames leaves in ONE send(). No
 * message is reassembled, no UTF-8 checked, no limit enforced: what any
 * real server adds on top is what this program does not spend.
 *
 * A frame's payload is never buffered: a connection holds only its header
 * bytes so far (at most 14) and the mask and count of the frame in flight,
 * so an open idle WebSocket costs sizeof(struct conn) plus the kernel's
 * socket. During the handshake a connection holds a head buffer, freed at
 * the 101.
 *
 * Usage: ws-limit PORT    (binds 127.0.0.1:PORT; any path is a WebSocket)
 * Build: gcc -O2 -o ws-limit ws-limit.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include "wsproto.h"

#define READ_MAX (64 * 1024)
/* Output per read: every frame header shrinks by its 4 mask bytes, and at
 * most one header carried from the previous read (14 bytes) is emitted. */
#define OUT_MAX (READ_MAX + 16)
#define HEAD_MAX 4096
#define EVENTS_MAX 512

enum phase { CLOSED = 0, HANDSHAKE, OPEN };

struct conn {
    uint8_t phase;
    uint8_t hdr_len;      /* header bytes gathered of the frame being read */
    uint8_t hdr[14];
    uint8_t mask[4];
    uint8_t mask_off;     /* payload bytes of the frame so far, mod 4 */
    uint8_t closing;      /* a close frame is being echoed: close after it */
    uint64_t remaining;   /* payload bytes of the frame still to come */
    char *head;           /* HANDSHAKE: the request head so far */
    uint16_t head_len;
    char *pending;        /* bytes the kernel did not take yet */
    size_t pending_len, pending_off, pending_cap;
};

static struct conn *conns;
static size_t n_conns_max;
static int epfd;
static uint8_t in_buf[READ_MAX];
static uint8_t out_buf[OUT_MAX];

static void die(const char *what) {
    perror(what);
    exit(1);
}

static void conn_close(int fd) {
    struct conn *c = &conns[fd];
    free(c->pending);
    free(c->head);
    memset(c, 0, sizeof(*c));
    close(fd);
}

static void interest(int fd, uint32_t events) {
    struct epoll_event ev = {.events = events, .data.fd = fd};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) < 0) die("epoll_ctl mod");
}

static void pending_append(struct conn *c, const uint8_t *buf, size_t len) {
    size_t live = c->pending_len - c->pending_off;
    if (c->pending_off > 0) {
        memmove(c->pending, c->pending + c->pending_off, live);
        c->pending_off = 0;
        c->pending_len = live;
    }
    if (live + len > c->pending_cap) {
        size_t cap = c->pending_cap ? c->pending_cap : 4096;
        while (cap < live + len) cap *= 2;
        char *p = realloc(c->pending, cap);
        if (!p) die("realloc");
        c->pending = p;
        c->pending_cap = cap;
    }
    memcpy(c->pending + c->pending_len, buf, len);
    c->pending_len += len;
}

static int pending_flush(int fd, struct conn *c) {
    while (c->pending_off < c->pending_len) {
        ssize_t w = send(fd, c->pending + c->pending_off, c->pending_len - c->pending_off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return 1;
            return -1;
        }
        c->pending_off += (size_t)w;
    }
    c->pending_off = c->pending_len = 0;
    return 0;
}

/* Sends buf in one send(); keeps what the kernel did not take and stops
 * reading until it drains (as limit does). Returns -1 if the connection died. */
static int output(int fd, struct conn *c, const uint8_t *buf, size_t len) {
    if (len == 0) return 0;
    if (c->pending_len > c->pending_off) {
        pending_append(c, buf, len);
        return 0;
    }
    size_t off = 0;
    for (;;) {
        ssize_t w = send(fd, buf, len, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return -1;
        }
        off = (size_t)w;
        if (off == len) return 0;
        break;
    }
    pending_append(c, buf + off, len - off);
    interest(fd, EPOLLOUT);
    return 0;
}

/* The total length of a frame header from its first two bytes. */
static uint8_t header_len(const uint8_t *h) {
    uint8_t n = 2 + ((h[1] & 0x80) ? 4 : 0);
    uint8_t len7 = h[1] & 0x7f;
    return n + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0);
}

/* out[k] = in[k] ^ mask[(off + k) % 4], eight bytes at a time (a real
 * server's unmasking is word-wide too: a byte loop here cost 3 us per
 * 4 KiB message, more than the system calls). */
static void unmask(uint8_t *out, const uint8_t *in, size_t n, const uint8_t mask[4], uint8_t off) {
    uint8_t rot[8];
    for (int k = 0; k < 8; k++) rot[k] = mask[(off + k) & 3];
    uint64_t m8;
    memcpy(&m8, rot, 8);
    size_t k = 0;
    for (; k + 8 <= n; k += 8) {
        uint64_t v;
        memcpy(&v, in + k, 8);
        v ^= m8;
        memcpy(out + k, &v, 8);
    }
    for (; k < n; k++) out[k] = in[k] ^ rot[k & 7];
}

/* Reframes and unmasks in[0..len) into out; returns the bytes written. */
static size_t reframe(struct conn *c, const uint8_t *in, size_t len, uint8_t *out) {
    size_t i = 0, o = 0;
    while (i < len) {
        if (c->remaining == 0 && c->hdr_len < 2) {
            c->hdr[c->hdr_len++] = in[i++];
            continue;
        }
        if (c->remaining == 0) {
            uint8_t need = header_len(c->hdr);
            while (c->hdr_len < need && i < len) c->hdr[c->hdr_len++] = in[i++];
            if (c->hdr_len < need) break;
            /* The header is whole: write the server's, unmasked. */
            uint8_t len7 = c->hdr[1] & 0x7f, ext = len7 == 126 ? 2 : len7 == 127 ? 8 : 0;
            uint64_t plen = ext ? 0 : len7;
            for (uint8_t k = 0; k < ext; k++) plen = plen << 8 | c->hdr[2 + k];
            uint8_t opcode = c->hdr[0] & 0x0f;
            out[o++] = opcode == 0x9 ? (uint8_t)((c->hdr[0] & 0xf0) | 0xA) : c->hdr[0];
            out[o++] = len7;
            memcpy(out + o, c->hdr + 2, ext);
            o += ext;
            if (c->hdr[1] & 0x80) memcpy(c->mask, c->hdr + 2 + ext, 4);
            else memset(c->mask, 0, 4);
            if (opcode == 0x8) c->closing = 1;
            c->mask_off = 0;
            c->hdr_len = 0;
            c->remaining = plen;
            if (plen == 0) continue;
        }
        size_t n = len - i < c->remaining ? len - i : (size_t)c->remaining;
        unmask(out + o, in + i, n, c->mask, c->mask_off);
        c->mask_off = (uint8_t)((c->mask_off + n) & 3);
        o += n;
        i += n;
        c->remaining -= n;
    }
    return o;
}

/* HANDSHAKE: gathers the head; at "\r\n\r\n" answers 101 and returns the
 * offset in buf just past the head (bytes beyond are frames), or -1 to
 * close, or (ssize_t)len + 1 when the head is not whole yet. */
static ssize_t handshake(int fd, struct conn *c, const uint8_t *buf, size_t len) {
    if (!c->head && !(c->head = malloc(HEAD_MAX))) die("malloc");
    size_t take = len < (size_t)(HEAD_MAX - 1 - c->head_len) ? len : (size_t)(HEAD_MAX - 1 - c->head_len);
    size_t before = c->head_len;
    memcpy(c->head + c->head_len, buf, take);
    c->head_len += (uint16_t)take;
    c->head[c->head_len] = 0;
    char *end = strstr(c->head, "\r\n\r\n");
    if (!end) return c->head_len >= HEAD_MAX - 1 ? -1 : (ssize_t)len + 1;
    size_t head_end = (size_t)(end - c->head) + 4;
    const char *key = NULL;
    size_t key_len = 0;
    for (char *line = strstr(c->head, "\r\n"); line && line < end; line = strstr(line + 2, "\r\n")) {
        if (strncasecmp(line + 2, "Sec-WebSocket-Key:", 18) == 0) {
            key = line + 20;
            while (*key == ' ') key++;
            const char *e = strstr(key, "\r\n");
            while (e > key && e[-1] == ' ') e--;
            key_len = (size_t)(e - key);
            break;
        }
    }
    if (!key) return -1;
    char accept[29], resp[160];
    ws_accept(key, key_len, accept);
    int n = snprintf(resp, sizeof(resp),
                     "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                     "Sec-WebSocket-Accept: %s\r\n\r\n", accept);
    free(c->head);
    c->head = NULL;
    c->head_len = 0;
    c->phase = OPEN;
    if (output(fd, c, (const uint8_t *)resp, (size_t)n) < 0) return -1;
    return (ssize_t)(head_end - before);
}

static void on_readable(int fd) {
    struct conn *c = &conns[fd];
    for (;;) {
        ssize_t r = read(fd, in_buf, sizeof(in_buf));
        if (r == 0) {
            conn_close(fd);
            return;
        }
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            conn_close(fd);
            return;
        }
        size_t start = 0;
        if (c->phase == HANDSHAKE) {
            ssize_t h = handshake(fd, c, in_buf, (size_t)r);
            if (h < 0) {
                conn_close(fd);
                return;
            }
            if (h > r) continue; /* head not whole yet */
            start = (size_t)h;
        }
        size_t n = reframe(c, in_buf + start, (size_t)r - start, out_buf);
        if (output(fd, c, out_buf, n) < 0) {
            conn_close(fd);
            return;
        }
        if (c->closing && c->remaining == 0) {
            /* The close is echoed (or queued): done with this connection. */
            if (c->pending_len == c->pending_off) conn_close(fd);
            return;
        }
        if (c->pending_len > c->pending_off) return;
        if ((size_t)r < sizeof(in_buf)) return;
    }
}

static void on_writable(int fd) {
    struct conn *c = &conns[fd];
    int rc = pending_flush(fd, c);
    if (rc < 0 || (rc == 0 && c->closing && c->remaining == 0)) {
        conn_close(fd);
    } else if (rc == 0) {
        interest(fd, EPOLLIN);
        on_readable(fd);
    }
}

static void on_acceptable(int lfd) {
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            perror("accept4");
            return;
        }
        if ((size_t)fd >= n_conns_max) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        memset(&conns[fd], 0, sizeof(conns[fd]));
        conns[fd].phase = HANDSHAKE;
        struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
        if (epoll_ctl(epfd, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl add");
    }
}

int main(int argc, char **argv) {
    if (argc != 2) {
        fprintf(stderr, "usage: %s PORT\n", argv[0]);
        return 2;
    }
    int port = atoi(argv[1]);
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0) die("getrlimit");
    n_conns_max = rl.rlim_cur == RLIM_INFINITY ? 1 << 20 : (size_t)rl.rlim_cur;
    conns = calloc(n_conns_max, sizeof(*conns));
    if (!conns) die("alloc");

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0) die("bind");
    if (listen(lfd, 4096) < 0) die("listen");
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev) < 0) die("epoll_ctl listen");
    printf("listening on 127.0.0.1:%d\n", port);
    fflush(stdout);

    struct epoll_event events[EVENTS_MAX];
    for (;;) {
        int n = epoll_wait(epfd, events, EVENTS_MAX, -1);
        if (n < 0) {
            if (errno == EINTR) continue;
            die("epoll_wait");
        }
        for (int i = 0; i < n; i++) {
            int fd = events[i].data.fd;
            uint32_t e = events[i].events;
            if (fd == lfd) {
                on_acceptable(lfd);
                continue;
            }
            if (conns[fd].phase == CLOSED) continue;
            if (e & EPOLLOUT) on_writable(fd);
            else if (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) on_readable(fd);
        }
    }
}
