/*
 * relay-limit: the least a reverse proxy can do per request, as a floor for
 * the proxy scenarios (bench/proxy-cpu.sh). One thread, one epoll; every
 * accepted client gets its own upstream connection, opened at accept and
 * kept for the client's life; whatever the client sends is written to its
 * upstream as it is, and whatever the upstream sends back goes to the
 * client as it is. No parsing, no header rewriting, no pool, no limits:
 * one recv and one send each way per request, which is what a proxy that
 * keeps upstream connections alive cannot go below.
 *
 * Usage: relay PORT UPSTREAM_PORT   (both on 127.0.0.1)
 * Build: gcc -O2 -o relay bench/limit/relay.c
 *
 * Built with -DRELAY_SPIN it takes a third argument, SPIN: a loop of that
 * many iterations after each recv, user-space time and nothing else (no
 * system call, no memory beyond one counter). bench/proxy-sched.sh uses it
 * as a control: the relay at a proxy's user time, to tell what the kernel
 * charges for the user time itself (on one CPU, preemptions and wake-ups)
 * from what a proxy's own system calls cost. Without the macro the floor
 * is the code above, unchanged.
 */
#define _GNU_SOURCE /* accept4 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#define MAX_FD 65536
static int peer[MAX_FD];

#ifdef RELAY_SPIN
static unsigned long spin_iters;
static volatile unsigned long spin_sink;
/* User-space time only: the volatile store keeps the loop from being folded. */
static void spin(void) {
    for (unsigned long i = 0; i < spin_iters; i++)
        spin_sink += i;
}
#endif

static int upstream(int port) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (connect(fd, (struct sockaddr *)&a, sizeof a) < 0) {
        perror("connect");
        exit(1);
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, O_NONBLOCK);
    return fd;
}

static void drop(int ep, int fd) {
    int other = peer[fd];
    epoll_ctl(ep, EPOLL_CTL_DEL, fd, NULL);
    epoll_ctl(ep, EPOLL_CTL_DEL, other, NULL);
    close(fd);
    close(other);
}

int main(int argc, char **argv) {
#ifdef RELAY_SPIN
    if (argc != 4) {
        fprintf(stderr, "usage: relay-spin PORT UPSTREAM_PORT SPIN\n");
        return 2;
    }
    spin_iters = strtoul(argv[3], NULL, 10);
#else
    if (argc != 3) {
        fprintf(stderr, "usage: relay PORT UPSTREAM_PORT\n");
        return 2;
    }
#endif
    int port = atoi(argv[1]), up_port = atoi(argv[2]);
    int ls = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (bind(ls, (struct sockaddr *)&a, sizeof a) < 0 || listen(ls, 4096) < 0) {
        perror("bind");
        return 1;
    }
    fcntl(ls, F_SETFL, O_NONBLOCK);
    int ep = epoll_create1(0);
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = ls}, evs[512];
    epoll_ctl(ep, EPOLL_CTL_ADD, ls, &ev);
    static char buf[65536];
    for (;;) {
        int n = epoll_wait(ep, evs, 512, -1);
        for (int i = 0; i < n; i++) {
            int fd = evs[i].data.fd;
            if (fd == ls) {
                int c;
                while ((c = accept4(ls, NULL, NULL, SOCK_NONBLOCK)) >= 0) {
                    if (c >= MAX_FD) {
                        close(c);
                        continue;
                    }
                    setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
                    int u = upstream(up_port);
                    peer[c] = u;
                    peer[u] = c;
                    struct epoll_event e = {.events = EPOLLIN, .data.fd = c};
                    epoll_ctl(ep, EPOLL_CTL_ADD, c, &e);
                    e.data.fd = u;
                    epoll_ctl(ep, EPOLL_CTL_ADD, u, &e);
                }
                continue;
            }
            /* Level-triggered: one recv per event, forwarded whole (small
             * requests and answers fit; a short send would be a bug here). */
            ssize_t r = recv(fd, buf, sizeof buf, 0);
            if (r <= 0) {
                if (r < 0 && errno == EAGAIN)
                    continue;
                drop(ep, fd);
                continue;
            }
#ifdef RELAY_SPIN
            spin();
#endif
            ssize_t off = 0;
            while (off < r) {
                ssize_t w = send(peer[fd], buf + off, r - off, MSG_NOSIGNAL);
                if (w < 0) {
                    if (errno == EAGAIN)
                        continue;
                    break;
                }
                off += w;
            }
        }
    }
}
