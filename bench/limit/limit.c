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
 *        limit PORT --response FILE
 *            answers with FILE's bytes instead (a whole response, head and
 *            body: the floor for a server that sends those same bytes,
 *            e.g. a file server's answer to a small file, bench/floor.sh)
 *        limit PORT --head FILE --sendfile BODY
 *            answers each request with FILE's bytes (a head) sent with
 *            MSG_MORE, then BODY with sendfile(2): the floor for a file
 *            server's answer to a large file. One request at a time per
 *            connection (no pipelining); a socket that is full is waited
 *            for with poll(2), which a client that reads never makes long.
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
#include <poll.h>
#include <sys/epoll.h>
#include <sys/sendfile.h>
#include <sys/stat.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

/* The Date is a fixed string: a real server formats it once per second and
 * caches it, a cost that rounds to zero per request, so leaving it out keeps
 * the limit honest. It has the same length as a real IMF-fixdate. */
static const char CANNED[] =
    "HTTP/1.1 200 OK\r\n"
    "Server: limit\r\n"
    "Date: Thu, 01 Jan 2026 00:00:00 GMT\r\n"
    "Content-Type: text/plain\r\n"
    "Content-Length: 13\r\n"
    "\r\n"
    "Hello, World!";
static const char *RESPONSE = CANNED;
static size_t RESPONSE_LEN = sizeof(CANNED) - 1;
/* --sendfile: the body's descriptor and length (-1: not in that mode) */
static int body_fd = -1;
static off_t body_len;

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

static char *read_file(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) die(path);
    char *buf = malloc((size_t)st.st_size + 1);
    if (!buf) die("alloc");
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t r = read(fd, buf + got, (size_t)st.st_size - got);
        if (r <= 0) die(path);
        got += (size_t)r;
    }
    close(fd);
    *len = got;
    return buf;
}

/* --sendfile mode: waits until fd is writable (the client reads). */
static int wait_writable(int fd) {
    struct pollfd p = {.fd = fd, .events = POLLOUT};
    return poll(&p, 1, 10000) == 1 ? 0 : -1;
}

/* --sendfile mode: the head with MSG_MORE, then the body with sendfile, n
 * times. Returns -1 if the connection died. */
static int respond_sendfile(int fd, size_t n) {
    for (size_t i = 0; i < n; i++) {
        size_t off = 0;
        while (off < RESPONSE_LEN) {
            ssize_t w = send(fd, RESPONSE + off, RESPONSE_LEN - off, MSG_NOSIGNAL | MSG_MORE);
            if (w < 0) {
                if (errno == EINTR) continue;
                if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait_writable(fd) == 0) continue;
                return -1;
            }
            off += (size_t)w;
        }
        off_t pos = 0;
        while (pos < body_len) {
            ssize_t w = sendfile(fd, body_fd, &pos, (size_t)(body_len - pos));
            if (w < 0) {
                if (errno == EINTR) continue;
                if ((errno == EAGAIN || errno == EWOULDBLOCK) && wait_writable(fd) == 0) continue;
                return -1;
            }
            if (w == 0) return -1;
        }
    }
    return 0;
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
        if (n > 0 && (body_fd >= 0 ? respond_sendfile(fd, n) : respond(fd, c, n)) < 0) {
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
    if (argc == 4 && strcmp(argv[2], "--response") == 0) {
        RESPONSE = read_file(argv[3], &RESPONSE_LEN);
    } else if (argc == 6 && strcmp(argv[2], "--head") == 0 && strcmp(argv[4], "--sendfile") == 0) {
        RESPONSE = read_file(argv[3], &RESPONSE_LEN);
        struct stat st;
        body_fd = open(argv[5], O_RDONLY | O_CLOEXEC);
        if (body_fd < 0 || fstat(body_fd, &st) < 0) die(argv[5]);
        body_len = st.st_size;
    } else if (argc != 2) {
        fprintf(stderr, "usage: %s PORT [--response FILE | --head FILE --sendfile BODY]\n", argv[0]);
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
