/* wsload.c: the WebSocket load client of bench/run's ws scenarios.
 *
 * One thread, one epoll loop, written to cost less per echo than the servers
 * it measures: every connection's batch of K masked frames is built once at
 * start (the same mask key for all, as a client may: RFC 6455 asks that it
 * be unpredictable to intermediaries, which a loopback benchmark has none
 * of), so a round is one send() of prebuilt bytes and reads until K echoes
 * are in. Closed loop: a connection sends its next batch when the last
 * one's K echoes are back. Every echo is checked: FIN, binary opcode, no
 * mask, length equal to what was sent, and every payload byte (the sent
 * payload is a fixed pattern). A wrong echo counts as an error and ends the
 * run. Every WebSocket is open (its 101 read) before the first batch.
 *
 * It reads the server's CPU itself so that the window it counts echoes in
 * and the window of CPU are the same: utime + stime of /proc/PID/stat (all
 * threads), at the end of the warm-up and at the end of the run.
 *
 *   wsload --port P --pid PID [--path /echo] -c CONNS -k FRAMES -s BYTES -d SECONDS [-w WARMUP]
 *   wsload --port P --pid PID [--path /echo] --idle CONNS [--hold SECONDS]
 *
 * Echo mode prints key=value lines: echoes, seconds, echoes_per_s,
 * srv_ticks, srv_us_per_echo, client_us_per_echo, errors. Idle mode opens
 * one connection and echoes once (the server's code paths warm), reads the
 * server's VmRSS, opens CONNS more WebSockets (at most 256 handshakes in
 * flight), waits for every 101, holds SECONDS (1), reads VmRSS again and
 * prints rss_before_kib, rss_after_kib, bytes_per_conn, then checks one echo
 * on every 100th connection (echo_checked, errors).
 *
 * Build: gcc -O2 -o wsload wsload.c
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
#include <time.h>
#include <unistd.h>

#include "wsproto.h"

#define READ_MAX (256 * 1024)
#define EVENTS_MAX 512
#define KEY "dGhlIHNhbXBsZSBub25jZQ=="

enum phase { CONNECTING = 1, HANDSHAKE, OPEN, DONE };

struct conn {
    int fd;
    uint8_t phase;
    uint8_t hdr_len;
    uint8_t hdr[10];
    uint64_t remaining;  /* payload bytes of the echo being read */
    uint64_t payload_off;
    uint32_t outstanding; /* echoes still due for the batch sent */
    size_t sent;          /* bytes of the batch (or upgrade) sent */
    size_t head_len;
    char head[512];
};

static int epfd;
static struct conn *conns;
static int n_conns;
static size_t msg_bytes, frames_per_send = 1;
static uint8_t *batch, *payload;
static size_t batch_len;
static char upgrade[512];
static size_t upgrade_len;
static char accept_value[29];
static uint64_t echoes, errors;
static int stop_on_echo_round; /* no new batch after an echo (handshakes, idle mode) */
static uint8_t rbuf[READ_MAX];

static void die(const char *what) {
    perror(what);
    exit(1);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static long long proc_ticks(int pid) {
    char path[64], buf[2048];
    snprintf(path, sizeof(path), "/proc/%d/stat", pid);
    FILE *f = fopen(path, "r");
    if (!f) die(path);
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the name may hold spaces */
    if (!p) return -1;
    unsigned long long ut = 0, st = 0;
    /* after ')': state(3) ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime(14) stime(15) */
    if (sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2) return -1;
    return (long long)(ut + st);
}

static long rss_kib(int pid) {
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", pid);
    FILE *f = fopen(path, "r");
    if (!f) die(path);
    long kib = -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, "VmRSS:", 6) == 0) kib = atol(line + 6);
    fclose(f);
    return kib;
}

static double self_cpu_s(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_utime.tv_sec + ru.ru_utime.tv_usec / 1e6 + ru.ru_stime.tv_sec + ru.ru_stime.tv_usec / 1e6;
}

static void build_batch(void) {
    payload = malloc(msg_bytes ? msg_bytes : 1);
    for (size_t i = 0; i < msg_bytes; i++) payload[i] = (uint8_t)(i * 7 + 13);
    size_t hdr = 2 + (msg_bytes >= 126 ? (msg_bytes > 65535 ? 8 : 2) : 0) + 4;
    batch_len = frames_per_send * (hdr + msg_bytes);
    batch = malloc(batch_len);
    static const uint8_t mask[4] = {0x37, 0xfa, 0x21, 0x3d};
    uint8_t *p = batch;
    for (size_t f = 0; f < frames_per_send; f++) {
        *p++ = 0x82;
        if (msg_bytes < 126) {
            *p++ = 0x80 | (uint8_t)msg_bytes;
        } else if (msg_bytes <= 65535) {
            *p++ = 0x80 | 126;
            *p++ = (uint8_t)(msg_bytes >> 8);
            *p++ = (uint8_t)msg_bytes;
        } else {
            *p++ = 0x80 | 127;
            for (int k = 7; k >= 0; k--) *p++ = (uint8_t)((uint64_t)msg_bytes >> (8 * k));
        }
        memcpy(p, mask, 4);
        p += 4;
        for (size_t i = 0; i < msg_bytes; i++) *p++ = payload[i] ^ mask[i & 3];
    }
}

static void conn_fail(struct conn *c, const char *why) {
    if (errors++ < 5) fprintf(stderr, "wsload: connection %d: %s\n", (int)(c - conns), why);
    if (c->fd >= 0) close(c->fd);
    c->fd = -1;
    c->phase = DONE;
}

static void want(struct conn *c, uint32_t ev) {
    struct epoll_event e = {.events = ev, .data.u32 = (uint32_t)(c - conns)};
    if (epoll_ctl(epfd, EPOLL_CTL_MOD, c->fd, &e) < 0) die("epoll_ctl mod");
}

/* Sends what is left of buf; returns 1 when all is sent, 0 if waiting for
 * EPOLLOUT, -1 on error. */
static int send_rest(struct conn *c, const void *buf, size_t len) {
    while (c->sent < len) {
        ssize_t w = send(c->fd, (const char *)buf + c->sent, len - c->sent, MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) {
                want(c, EPOLLIN | EPOLLOUT);
                return 0;
            }
            return -1;
        }
        c->sent += (size_t)w;
    }
    return 1;
}

static void send_batch(struct conn *c) {
    c->sent = 0;
    c->outstanding = (uint32_t)frames_per_send;
    if (send_rest(c, batch, batch_len) < 0) conn_fail(c, "send");
}

static void start_conn(struct conn *c, int port) {
    c->fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c->fd < 0) die("socket");
    int one = 1;
    setsockopt(c->fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EINPROGRESS) die("connect");
    c->phase = CONNECTING;
    struct epoll_event e = {.events = EPOLLOUT, .data.u32 = (uint32_t)(c - conns)};
    if (epoll_ctl(epfd, EPOLL_CTL_ADD, c->fd, &e) < 0) die("epoll_ctl add");
}

/* Parses echoes from buf; returns -1 after a wrong one. */
static int parse_echoes(struct conn *c, const uint8_t *buf, size_t len) {
    size_t i = 0;
    while (i < len) {
        if (c->remaining == 0) {
            c->hdr[c->hdr_len++] = buf[i++];
            if (c->hdr_len < 2) continue;
            uint8_t len7 = c->hdr[1] & 0x7f;
            uint8_t need = 2 + (len7 == 126 ? 2 : len7 == 127 ? 8 : 0);
            if (c->hdr[1] & 0x80) {
                conn_fail(c, "masked frame from the server");
                return -1;
            }
            if (c->hdr_len < need) continue;
            uint64_t plen = len7 == 126 ? (uint64_t)c->hdr[2] << 8 | c->hdr[3] : len7;
            if (len7 == 127)
                for (int k = 0; k < 8; k++) plen = plen << 8 | c->hdr[2 + k];
            c->hdr_len = 0;
            if (c->hdr[0] != 0x82 || plen != msg_bytes) {
                char why[96];
                snprintf(why, sizeof(why), "echo has first byte 0x%02x and %llu bytes, sent 0x82 and %zu",
                         c->hdr[0], (unsigned long long)plen, msg_bytes);
                conn_fail(c, why);
                return -1;
            }
            c->remaining = plen;
            c->payload_off = 0;
            if (plen > 0) continue;
        } else {
            size_t n = len - i < c->remaining ? len - i : (size_t)c->remaining;
            if (memcmp(buf + i, payload + c->payload_off, n) != 0) {
                conn_fail(c, "echoed payload differs from what was sent");
                return -1;
            }
            i += n;
            c->payload_off += n;
            c->remaining -= n;
            if (c->remaining > 0) continue;
        }
        /* one whole echo */
        echoes++;
        if (c->outstanding == 0) {
            conn_fail(c, "more echoes than frames sent");
            return -1;
        }
        c->outstanding--;
    }
    return 0;
}

static int n_open, n_pending_handshakes;

/* The head has Sec-WebSocket-Accept (any case, optional white space) with
 * the value computed for KEY. */
static int accept_ok(const char *head) {
    for (const char *l = strstr(head, "\r\n"); l; l = strstr(l + 2, "\r\n")) {
        if (strncasecmp(l + 2, "Sec-WebSocket-Accept:", 21) != 0) continue;
        const char *v = l + 23;
        while (*v == ' ' || *v == '\t') v++;
        return strncmp(v, accept_value, 28) == 0;
    }
    return 0;
}

static void on_event(struct conn *c, uint32_t ev, int port) {
    (void)port;
    if (c->phase == CONNECTING) {
        int err = 0;
        socklen_t l = sizeof(err);
        getsockopt(c->fd, SOL_SOCKET, SO_ERROR, &err, &l);
        if (err) {
            errno = err;
            conn_fail(c, strerror(err));
            n_pending_handshakes--;
            return;
        }
        c->phase = HANDSHAKE;
        c->sent = 0;
        int r = send_rest(c, upgrade, upgrade_len);
        if (r < 0) {
            conn_fail(c, "send upgrade");
            n_pending_handshakes--;
            return;
        }
        if (r == 1) want(c, EPOLLIN);
        return;
    }
    if (ev & EPOLLOUT) {
        int r = c->phase == HANDSHAKE ? send_rest(c, upgrade, upgrade_len) : send_rest(c, batch, batch_len);
        if (r < 0) {
            conn_fail(c, "send");
            return;
        }
        if (r == 1) want(c, EPOLLIN);
        if (!(ev & EPOLLIN)) return;
    }
    for (;;) {
        ssize_t r = read(c->fd, rbuf, sizeof(rbuf));
        if (r == 0) {
            conn_fail(c, "server closed the connection");
            if (c->phase == HANDSHAKE) n_pending_handshakes--;
            return;
        }
        if (r < 0) {
            if (errno == EINTR) continue;
            if (errno == EAGAIN) break;
            conn_fail(c, strerror(errno));
            return;
        }
        size_t off = 0;
        if (c->phase == HANDSHAKE) {
            size_t take = (size_t)r < sizeof(c->head) - 1 - c->head_len ? (size_t)r : sizeof(c->head) - 1 - c->head_len;
            memcpy(c->head + c->head_len, rbuf, take);
            size_t before = c->head_len;
            c->head_len += take;
            c->head[c->head_len] = 0;
            char *end = strstr(c->head, "\r\n\r\n");
            if (!end) {
                if (c->head_len >= sizeof(c->head) - 1) conn_fail(c, "101 head too long");
                continue;
            }
            if (strncmp(c->head, "HTTP/1.1 101", 12) != 0 || !accept_ok(c->head)) {
                if (errors < 1) fprintf(stderr, "wsload: answer to the upgrade:\n%s\n", c->head);
                conn_fail(c, "no 101 with the right Sec-WebSocket-Accept");
                n_pending_handshakes--;
                return;
            }
            off = (size_t)(end - c->head) + 4 - before;
            c->phase = OPEN;
            n_open++;
            n_pending_handshakes--;
        }
        if (parse_echoes(c, rbuf + off, (size_t)r - off) < 0) return;
        if (c->outstanding == 0 && c->sent == batch_len && !stop_on_echo_round && c->phase == OPEN) {
            send_batch(c);
            if (c->phase != OPEN) return;
        }
        /* A short read drained the socket: no read() just to see EAGAIN
         * (one system call per echo saved at 1 frame per send). */
        if ((size_t)r < sizeof(rbuf)) break;
    }
}

static int loop_once(int port, int timeout_ms) {
    struct epoll_event evs[EVENTS_MAX];
    int n = epoll_wait(epfd, evs, EVENTS_MAX, timeout_ms);
    if (n < 0 && errno != EINTR) die("epoll_wait");
    for (int i = 0; i < n; i++) {
        struct conn *c = &conns[evs[i].data.u32];
        if (c->phase == DONE) continue;
        on_event(c, evs[i].events, port);
    }
    return n;
}

int main(int argc, char **argv) {
    int port = 0, pid = 0, idle = 0, warm_conns = 0;
    double dur = 5, warm = 1, hold = 1;
    const char *path = "/echo";
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v) { fprintf(stderr, "wsload: %s needs a value\n", a); return 2; }
        if (!strcmp(a, "--port")) port = atoi(v);
        else if (!strcmp(a, "--pid")) pid = atoi(v);
        else if (!strcmp(a, "--path")) path = v;
        else if (!strcmp(a, "-c")) n_conns = atoi(v);
        else if (!strcmp(a, "-k")) frames_per_send = (size_t)atoi(v);
        else if (!strcmp(a, "-s")) msg_bytes = (size_t)atol(v);
        else if (!strcmp(a, "-d")) dur = atof(v);
        else if (!strcmp(a, "-w")) warm = atof(v);
        else if (!strcmp(a, "--idle")) idle = atoi(v);
        else if (!strcmp(a, "--hold")) hold = atof(v);
        else { fprintf(stderr, "wsload: unknown argument %s\n", a); return 2; }
        i++;
    }
    if (!port || !pid || (!idle && (n_conns <= 0 || frames_per_send == 0))) {
        fprintf(stderr, "usage: wsload --port P --pid PID [--path /echo] (-c N -k K -s BYTES -d S [-w S] | --idle N [--hold S])\n");
        return 2;
    }
    signal(SIGPIPE, SIG_IGN);
    struct rlimit rl = {.rlim_cur = 1 << 20, .rlim_max = 1 << 20};
    if (setrlimit(RLIMIT_NOFILE, &rl) < 0) {
        getrlimit(RLIMIT_NOFILE, &rl);
        rl.rlim_cur = rl.rlim_max;
        setrlimit(RLIMIT_NOFILE, &rl);
    }
    upgrade_len = (size_t)snprintf(upgrade, sizeof(upgrade),
                                   "GET %s HTTP/1.1\r\nHost: 127.0.0.1:%d\r\nUpgrade: websocket\r\n"
                                   "Connection: Upgrade\r\nSec-WebSocket-Key: " KEY "\r\n"
                                   "Sec-WebSocket-Version: 13\r\n\r\n", path, port);
    ws_accept(KEY, strlen(KEY), accept_value);
    if (idle) {
        msg_bytes = 32;
        frames_per_send = 1;
    }
    build_batch();
    epfd = epoll_create1(EPOLL_CLOEXEC);
    if (epfd < 0) die("epoll_create1");

    if (!idle) {
        conns = calloc((size_t)n_conns, sizeof(*conns));
        for (int i = 0; i < n_conns; i++) {
            start_conn(&conns[i], port);
            n_pending_handshakes++;
        }
        /* Every WebSocket is open before any load: a server busy echoing
         * must not starve its own handshakes out of the warm-up. */
        stop_on_echo_round = 1;
        double deadline = now() + 30;
        while (n_pending_handshakes > 0 && now() < deadline && !errors) loop_once(port, 100);
        if (n_open < n_conns || errors) {
            fprintf(stderr, "wsload: %d of %d WebSockets open\n", n_open, n_conns);
            printf("errors=%llu\n", (unsigned long long)(errors ? errors : 1));
            return 1;
        }
        stop_on_echo_round = 0;
        for (int i = 0; i < n_conns; i++) send_batch(&conns[i]);
        double t_start = now(), t_mark = t_start + warm, t_end = t_mark + dur;
        double t0 = 0, cpu0 = 0;
        long long srv0 = 0;
        uint64_t e0 = 0;
        int marked = 0;
        for (;;) {
            loop_once(port, 10);
            if (errors) break;
            double t = now();
            if (!marked && t >= t_mark) {
                if (n_open < n_conns) {
                    fprintf(stderr, "wsload: %d of %d connections open after the warm-up\n", n_open, n_conns);
                    errors++;
                    break;
                }
                marked = 1;
                t0 = t;
                e0 = echoes;
                srv0 = proc_ticks(pid);
                cpu0 = self_cpu_s();
            }
            if (marked && t >= t_end) break;
        }
        if (errors || !marked) {
            printf("errors=%llu\n", (unsigned long long)(errors ? errors : 1));
            return 1;
        }
        double t1 = now();
        long long srv1 = proc_ticks(pid);
        double cpu1 = self_cpu_s();
        uint64_t n = echoes - e0;
        double tck = (double)sysconf(_SC_CLK_TCK);
        double srv_s = (double)(srv1 - srv0) / tck;
        printf("echoes=%llu\nseconds=%.3f\nechoes_per_s=%.0f\nsrv_ticks=%lld\nsrv_cpu_s=%.3f\n"
               "srv_us_per_echo=%.4f\nclient_cpu_s=%.3f\nclient_us_per_echo=%.4f\nerrors=0\n",
               (unsigned long long)n, t1 - t0, n / (t1 - t0), srv1 - srv0, srv_s, srv_s * 1e6 / (double)n,
               cpu1 - cpu0, (cpu1 - cpu0) * 1e6 / (double)n);
        return 0;
    }

    /* idle mode */
    (void)warm_conns;
    n_conns = idle + 1;
    conns = calloc((size_t)n_conns, sizeof(*conns));
    stop_on_echo_round = 1;
    start_conn(&conns[0], port);
    n_pending_handshakes = 1;
    double deadline = now() + 30;
    while (n_pending_handshakes > 0 && now() < deadline && !errors) loop_once(port, 100);
    if (n_open != 1) { printf("errors=1\n"); return 1; }
    send_batch(&conns[0]);
    while (echoes < 1 && now() < deadline && !errors) loop_once(port, 100);
    if (echoes != 1) { fprintf(stderr, "wsload: no echo on the first connection\n"); printf("errors=1\n"); return 1; }
    usleep(200000);
    long before = rss_kib(pid);
    int next = 1;
    deadline = now() + 120;
    while ((next < n_conns || n_pending_handshakes > 0) && now() < deadline && !errors) {
        while (next < n_conns && n_pending_handshakes < 256) {
            start_conn(&conns[next++], port);
            n_pending_handshakes++;
        }
        loop_once(port, 100);
    }
    if (n_open != n_conns || errors) {
        fprintf(stderr, "wsload: %d of %d WebSockets open\n", n_open, n_conns);
        printf("open=%d\nerrors=%llu\n", n_open, (unsigned long long)(errors ? errors : 1));
        return 1;
    }
    usleep((useconds_t)(hold * 1e6));
    long after = rss_kib(pid);
    printf("open=%d\nrss_before_kib=%ld\nrss_after_kib=%ld\nbytes_per_conn=%.0f\n", idle, before, after,
           (double)(after - before) * 1024.0 / idle);
    /* one echo on every 100th connection: the WebSockets are really open */
    uint64_t e0 = echoes;
    int checked = 0;
    for (int i = 1; i < n_conns; i += 100) {
        send_batch(&conns[i]);
        checked++;
    }
    deadline = now() + 30;
    while (echoes - e0 < (uint64_t)checked && now() < deadline && !errors) loop_once(port, 100);
    printf("echo_checked=%d\necho_ok=%llu\nerrors=%llu\n", checked, (unsigned long long)(echoes - e0),
           (unsigned long long)(errors + (echoes - e0 < (uint64_t)checked)));
    return errors ? 1 : 0;
}
