/* The C reference of the relay benchmark's rate mode (bench/relay_rate.py): the plainest
 * batched UDP forwarder in C. Every datagram received on LISTEN is sent, unchanged, to DEST.
 *
 * One loop: a blocking recvmmsg(2) with MSG_WAITFORONE (it sleeps until one datagram is queued,
 * then takes whatever else is queued, up to BATCH, without waiting) and one sendmmsg(2) of the
 * whole batch. No poll, no parsing, no added delay: the wake-up shape of a relay worker without
 * its Python. Bounded in seconds (SIGALRM, installed without SA_RESTART so that it interrupts
 * the receive) and in packets.
 *
 * usage: c_forwarder LISTEN_IP LISTEN_PORT DEST_IP DEST_PORT MAX_SECONDS MAX_PACKETS BUFFER_BYTES
 * IPv4 only. Prints "listening" once bound and "forwarded N" at the end, on stderr.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#define BATCH 256
#define SLOT 2048

static volatile sig_atomic_t time_up = 0;

static void on_alarm(int signum) {
    (void)signum;
    time_up = 1;
}

static int address(const char *ip, const char *port, struct sockaddr_in *out) {
    memset(out, 0, sizeof(*out));
    out->sin_family = AF_INET;
    out->sin_port = htons((unsigned short)atoi(port));
    return inet_pton(AF_INET, ip, &out->sin_addr) == 1 ? 0 : -1;
}

int main(int argc, char **argv) {
    static char data[BATCH][SLOT];
    static struct mmsghdr rx[BATCH], tx[BATCH];
    static struct iovec rx_iov[BATCH], tx_iov[BATCH];
    struct sockaddr_in listen_at, dest;
    if (argc != 8 || address(argv[1], argv[2], &listen_at) || address(argv[3], argv[4], &dest)) {
        fprintf(stderr, "usage: %s LISTEN_IP LISTEN_PORT DEST_IP DEST_PORT MAX_SECONDS "
                        "MAX_PACKETS BUFFER_BYTES\n", argv[0]);
        return 2;
    }
    double max_seconds = atof(argv[5]);
    long long max_packets = atoll(argv[6]);
    int buffer = atoi(argv[7]);
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buffer, sizeof(buffer)) ||
        setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buffer, sizeof(buffer)) ||
        bind(fd, (struct sockaddr *)&listen_at, sizeof(listen_at))) {
        perror("c_forwarder: socket");
        return 1;
    }
    for (int i = 0; i < BATCH; i++) {
        rx_iov[i].iov_base = data[i];
        rx_iov[i].iov_len = SLOT;
        rx[i].msg_hdr.msg_iov = &rx_iov[i];
        rx[i].msg_hdr.msg_iovlen = 1;
        tx_iov[i].iov_base = data[i];
        tx[i].msg_hdr.msg_iov = &tx_iov[i];
        tx[i].msg_hdr.msg_iovlen = 1;
        tx[i].msg_hdr.msg_name = &dest;
        tx[i].msg_hdr.msg_namelen = sizeof(dest);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_alarm; /* no SA_RESTART: the blocking receive returns EINTR */
    sigaction(SIGALRM, &sa, NULL);
    struct itimerval limit = {{0, 0}, {(long)max_seconds, (long)((max_seconds - (long)max_seconds) * 1e6)}};
    setitimer(ITIMER_REAL, &limit, NULL);
    fprintf(stderr, "listening\n");
    long long forwarded = 0;
    while (!time_up && forwarded < max_packets) {
        int n = recvmmsg(fd, rx, BATCH, MSG_WAITFORONE, NULL);
        if (n <= 0) {
            if (n < 0 && errno != EINTR && errno != EAGAIN) {
                perror("c_forwarder: recvmmsg");
                return 1;
            }
            continue;
        }
        for (int i = 0; i < n; i++)
            tx_iov[i].iov_len = rx[i].msg_len;
        int start = 0;
        while (start < n) { /* a failed entry is skipped, as the relay's SendBatch does */
            int sent = sendmmsg(fd, tx + start, n - start, MSG_DONTWAIT);
            start += sent > 0 ? sent : 1;
        }
        forwarded += n;
    }
    fprintf(stderr, "forwarded %lld\n", forwarded);
    return 0;
}
