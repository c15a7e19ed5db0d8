/* limit.c: the physical-limit reference for Peregrine's benchmarks.
 *
 * A single-threaded epoll server that parses NOTHING. It scans the byte
 * stream of each connection for request-head terminators ("\r\n\r\n") and,
 * for each one found, appends a canned 200 response. Every response produced
 * by one read() goes out in ONE send(). Whatever a real HTTP/1.1 server does
 * on top of this (parsing, routing, header building, date formatting) costs
 * time that this program does not spend, so its requests/s and CPU per
 * request are the floor that the other servers are measured against.
 *
 * It is not an HTTP server: a request with a body, a chunked body or a bare
 * "\n\n" terminator is mis-answered. wrk and the idle client send plain GETs.
 *
 * Usage: limit PORT            (binds 127.0.0.1:PORT)
 *
 * Build: gcc -O2 -o limit limit.c
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* The Date is a fixed string: a real server formats it once per second and
 * caches it, a cost that rounds to zero per request, so leaving it out keeps
 * the limit honest. It has the same length as a real IMF-fixdate. */
static const char RESPONSE[] =
    "HTTP/1.1 200 OK\r\n"
    "Server: limit\r\n"
    "Date: Thu, 01 Jan 2026 00:00:00 GMT\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: 13\r\n"
    "\r\n"
    "Hello, World!";
#define RESPONSE_LEN (sizeof(RESPONSE) - 1)

/* One read() takes at most this much; the smallest request head that can
 * carry a terminator is 4 bytes, so one read yields at most READ_MAX / 4
 * responses and the output buffer is sized for that. */
#define READ_MAX (64 * 1024)
#define OUT_MAX ((READ_MAX / 4 + 1) * RESPONSE_LEN)

#define EVENTS_MAX 512

/* Per-connection state. Nothing is allocated for a connection until a
 * send() comes up short, so an idle connection costs sizeof(struct conn). */
struct conn {
    uint8_t matched;   /* bytes of "\r\n\r\n" matched at the end of the stream */
    uint8_t open;
    char *pending;     /* responses the kernel did not take yet */
    size_t pending_len;
    size_t pending_off;
    size_t pending_cap;
};

static struct conn *conns;
static size_t n_conns_max;
static int epfd;
static char in_buf[READ_MAX];
static char *out_buf;

static void die(const char *what) {
    perror(what);
    exit(1);
}

/* Counts the terminators in buf, carrying the partial match across reads.
 * The pattern "\r\n\r\n" has one self-overlap: any '\r' that breaks a match
 * starts a new one, so a mismatch goes back to state 1 on '\r', 0 otherwise. */
static size_t count_terminators(uint8_t *matched, const char *buf, size_t len) {
    static const char pat[4] = {'\r', '\n', '\r', '\n'};
    size_t n = 0;
    uint8_t m = *matched;
    for (size_t i = 0; i < len; i++) {
        char c = buf[i];
        if (c == pat[m]) {
            if (++m == 4) {
                n++;
                m = 0;
            }
        } else {
            m = (c == '\r');
        }
    }
    *matched = m;
    return n;
}

static void conn_close(int fd) {
    struct conn *c = &conns[fd];
    free(c->pending);
    memset(c, 0, sizeof(*c));
    close(fd); /* close() also removes fd from the epoll set */
}

static void interest(int fd, uint32_t events) {
    struct epoll_event ev = {.events = events, .data.fd = fd};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, fd, &ev) < 0) die("epoll_ctl mod");
}

/* Keeps the bytes the kernel did not take, in order. */
static void pending_append(struct conn *c, const char *buf, size_t len) {
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

/* Writes what is pending. Returns -1 if the connection died, 1 if bytes are
 * still pending, 0 when all is written. */
static int pending_flush(int fd, struct conn *c) {
    while (c->pending_off < c->pending_len) {
        ssize_t w = send(fd, c->pending + c->pending_off,
                         c->pending_len - c->pending_off, MSG_NOSIGNAL);
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

/* Sends n responses in one send(); keeps the rest and waits for EPOLLOUT.
 * Returns -1 if the connection died. */
static int respond(int fd, struct conn *c, size_t n) {
    size_t len = n * RESPONSE_LEN;
    for (size_t i = 0; i < n; i++) memcpy(out_buf + i * RESPONSE_LEN, RESPONSE, RESPONSE_LEN);
    if (c->pending_len > c->pending_off) { /* order: behind what waits already */
        pending_append(c, out_buf, len);
        return 0;
    }
    size_t off = 0;
    for (;;) {
        ssize_t w = send(fd, out_buf + off, len - off, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) break;
            return -1;
        }
        off += (size_t)w;
        if (off == len) return 0;
        /* A short send means the socket buffer is full: the next one would
         * fail with EAGAIN, so keep the rest without trying. */
        break;
    }
    pending_append(c, out_buf + off, len - off);
    /* Stop reading until the client drains what it asked for, so a client
     * that pipelines without reading cannot grow the buffer without bound. */
    interest(fd, EPOLLOUT);
    return 0;
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
        size_t n = count_terminators(&c->matched, in_buf, (size_t)r);
        if (n > 0 && respond(fd, c, n) < 0) {
            conn_close(fd);
            return;
        }
        if (c->pending_len > c->pending_off) return; /* wait for EPOLLOUT */
        if ((size_t)r < sizeof(in_buf)) return;       /* drained */
    }
}

static void on_writable(int fd) {
    struct conn *c = &conns[fd];
    int rc = pending_flush(fd, c);
    if (rc < 0) {
        conn_close(fd);
    } else if (rc == 0) {
        interest(fd, EPOLLIN);
        on_readable(fd); /* bytes may have arrived while reads were off */
    }
}

static void on_acceptable(int lfd) {
    for (;;) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED) continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK) return;
            perror("accept4"); /* EMFILE and friends: try again on the next event */
            return;
        }
        if ((size_t)fd >= n_conns_max) {
            close(fd);
            continue;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        memset(&conns[fd], 0, sizeof(conns[fd]));
        conns[fd].open = 1;
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
    out_buf = malloc(OUT_MAX);
    if (!conns || !out_buf) die("alloc");

    int lfd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (lfd < 0) die("socket");
    int one = 1;
    setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (setsockopt(lfd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one)) < 0) die("SO_REUSEPORT");
    struct sockaddr_in addr = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(lfd, (struct sockaddr *)&addr, sizeof(addr)) < 0) die("bind");
    if (listen(lfd, 4096) < 0) die("listen");

    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) die("epoll_create1");
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = lfd};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, lfd, &ev) < 0) die("epoll_ctl listen");

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
            if (!conns[fd].open) continue; /* closed earlier in this batch */
            if (e & EPOLLOUT) {
                on_writable(fd);
            } else if (e & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
                /* read() reports the EOF or the error and closes */
                on_readable(fd);
            }
        }
    }
}
