/* The metrics server (common/cli/metrics.c) on a loopback port: its limits
 * (connections beyond the limit, accept() without file descriptors) and
 * what /readyz answers as the refreshes go. */
#include "metrics.h"
#include "test.h"

#include <arpa/inet.h>
#include <stdatomic.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void render(sluicei_mtext *out, void *arg)
{
    (void)arg;
    sluicei_mtext_family(out, "t_up", "gauge", "test");
    sluicei_mtext_sample(out, "t_up", NULL, 1);
}

/* A server on a free loopback port (options o, NULL: render only); its
 * port in *port. */
static sluicei_metrics *start_with(int *port, const sluicei_metrics_opts *o);

static sluicei_metrics *start(int *port)
{
    return start_with(port, NULL);
}

static sluicei_metrics *start_with(int *port, const sluicei_metrics_opts *with)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) != 0) {
        if (s >= 0)
            close(s);
        return NULL;
    }
    close(s);
    *port = ntohs(a.sin_port);
    char addr[32], err[256];
    snprintf(addr, sizeof addr, ":%d", *port);
    sluicei_metrics_opts o = {.render = render};
    if (with)
        o = *with;
    o.addr = addr;
    sluicei_metrics *m = NULL;
    if (sluicei_metrics_open(&m, &o, err, sizeof err) != SLUICE_OK)
        fprintf(stderr, "    metrics server: %s\n", err);
    return m;
}

/* A connected client socket (reads time out after 3 s), or -1. */
static int client(int port)
{
    int c = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                            .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    struct timeval tv = {3, 0};
    if (c < 0)
        return -1;
    setsockopt(c, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    if (connect(c, (struct sockaddr *)&a, sizeof a) != 0) {
        close(c);
        return -1;
    }
    return c;
}

/* Sends req (when not NULL) and reads what comes back until the server
 * closes or 3 s pass: its first line in status, and, when body is not
 * NULL, what follows the headers (bodyn bytes at most). */
static void exchange_body(int c, const char *req, char *status, size_t n, char *body,
                          size_t bodyn)
{
    char buf[4096];
    size_t len = 0;
    if (req && send(c, req, strlen(req), MSG_NOSIGNAL) < 0) {
        snprintf(status, n, "send failed");
        return;
    }
    for (;;) {
        ssize_t r = recv(c, buf + len, sizeof buf - 1 - len, 0);
        if (r <= 0 || (len += (size_t)r) == sizeof buf - 1)
            break;
    }
    buf[len] = '\0';
    if (body) {
        const char *b = strstr(buf, "\r\n\r\n");
        snprintf(body, bodyn, "%s", b ? b + 4 : "");
    }
    buf[strcspn(buf, "\r\n")] = '\0';
    snprintf(status, n, "%.100s", buf);
}

static void exchange(int c, const char *req, char *status, size_t n)
{
    exchange_body(c, req, status, n, NULL, 0);
}

/* GET path on a new connection: status line and body. */
static void get(int port, const char *path, char *status, size_t n, char *body, size_t bodyn)
{
    char req[128];
    int c = client(port);
    snprintf(req, sizeof req, "GET %s HTTP/1.0\r\n\r\n", path);
    snprintf(status, n, "no connection");
    body[0] = '\0';
    if (c < 0)
        return;
    exchange_body(c, req, status, n, body, bodyn);
    close(c);
}

static double cpu_seconds(void)
{
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    return (double)(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
           (double)(u.ru_utime.tv_usec + u.ru_stime.tv_usec) / 1e6;
}

static void test_over_the_limit(void)
{
    int port = 0, c[40], held = 0, busy = 0;
    char status[128];
    sluicei_metrics *m = start(&port);
    CHECK(m != NULL);
    if (!m)
        return;
    for (int i = 0; i < 40; i++)
        c[i] = client(port);
    /* The first 32 are held (no request yet); the others are refused at
     * once: 503, then closed. */
    for (int i = 32; i < 40; i++) {
        exchange(c[i], NULL, status, sizeof status);
        busy += strcmp(status, "HTTP/1.1 503 Service Unavailable") == 0;
    }
    CHECK(busy == 8);
    for (int i = 0; i < 32; i++) {
        exchange(c[i], "GET /healthz HTTP/1.0\r\n\r\n", status, sizeof status);
        held += strcmp(status, "HTTP/1.1 200 OK") == 0;
    }
    CHECK(held == 32);
    for (int i = 0; i < 40; i++)
        if (c[i] >= 0)
            close(c[i]);
    sluicei_metrics_close(m);
}

static void test_no_fds(void)
{
    int port = 0;
    char status[128];
    sluicei_metrics *m = start(&port);
    CHECK(m != NULL);
    if (!m)
        return;
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    low = old;
    low.rlim_cur = 256;
    CHECK(setrlimit(RLIMIT_NOFILE, &low) == 0);
    /* Every descriptor taken but one, for the client. */
    int fill[256], nfill = 0, fd;
    while (nfill < 256 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        fill[nfill++] = fd;
    CHECK(nfill > 0);
    if (nfill > 0)
        close(fill[--nfill]);
    int c = client(port);
    CHECK(c >= 0);
    /* The server cannot accept it (EMFILE): it must rest, not spin. */
    double t0 = cpu_seconds();
    struct timespec half = {0, 500000000L};
    nanosleep(&half, NULL);
    double spent = cpu_seconds() - t0;
    CHECK(spent < 0.1);
    if (spent >= 0.1)
        fprintf(stderr, "    %.3f s of CPU in 0.5 s without fds\n", spent);
    while (nfill > 0)
        close(fill[--nfill]);
    setrlimit(RLIMIT_NOFILE, &old);
    /* With descriptors back, the waiting client is served. */
    if (c >= 0) {
        exchange(c, "GET /healthz HTTP/1.0\r\n\r\n", status, sizeof status);
        CHECK(strcmp(status, "HTTP/1.1 200 OK") == 0);
        close(c);
    }
    sluicei_metrics_close(m);
}

/* What the test's refresh reports: 0 not ready, 1 ready, 2 stalled (the
 * refresh does not return until the mode changes). */
static atomic_int ready_mode;

static int refresh_ready(void *arg, char *why, size_t whylen)
{
    (void)arg;
    struct timespec ms10 = {0, 10000000L};
    while (atomic_load(&ready_mode) == 2)
        nanosleep(&ms10, NULL);
    if (atomic_load(&ready_mode) == 0) {
        snprintf(why, whylen, "queue 'q' does not exist\nsecond line");
        return 0;
    }
    return 1;
}

/* Polls path until its status line is want and, with want_body, its body
 * begins with that (5 s at most); the last body in body. */
static int wait_answer(int port, const char *path, const char *want, const char *want_body,
                       char *body, size_t bodyn)
{
    char status[128];
    for (int i = 0; i < 250; i++) {
        get(port, path, status, sizeof status, body, bodyn);
        if (strcmp(status, want) == 0 &&
            (!want_body || strncmp(body, want_body, strlen(want_body)) == 0))
            return 1;
        struct timespec ms20 = {0, 20000000L};
        nanosleep(&ms20, NULL);
    }
    fprintf(stderr, "    %s: still '%s' '%s', want '%s' '%s'\n", path, status, body, want,
            want_body ? want_body : "");
    return 0;
}

static int wait_status(int port, const char *path, const char *want, char *body, size_t bodyn)
{
    return wait_answer(port, path, want, NULL, body, bodyn);
}

static void test_readyz(void)
{
    int port = 0;
    char status[128], body[512];
    /* Without a refresh there is nothing to be ready for. */
    sluicei_metrics *m = start(&port);
    CHECK(m != NULL);
    if (!m)
        return;
    get(port, "/readyz", status, sizeof status, body, sizeof body);
    CHECK(strcmp(status, "HTTP/1.1 200 OK") == 0);
    get(port, "/nowhere", status, sizeof status, body, sizeof body);
    CHECK(strcmp(status, "HTTP/1.1 404 Not Found") == 0);
    CHECK(strstr(body, "/readyz") != NULL);
    sluicei_metrics_close(m);

    atomic_store(&ready_mode, 0);
    sluicei_metrics_opts o = {.render = render, .refresh = refresh_ready, .refresh_ms = 20,
                              .ready_max_age_ms = 300};
    m = start_with(&port, &o);
    CHECK(m != NULL);
    if (!m)
        return;
    /* Not ready: 503 with the refresh's reason, its first line only (before
     * the first refresh has ended, a 503 says so instead). */
    CHECK(wait_answer(port, "/readyz", "HTTP/1.1 503 Service Unavailable", "not ready: queue",
                      body, sizeof body));
    CHECK(strcmp(body, "not ready: queue 'q' does not exist\n") == 0);
    get(port, "/healthz", status, sizeof status, body, sizeof body);
    CHECK(strcmp(status, "HTTP/1.1 200 OK") == 0);
    atomic_store(&ready_mode, 1);
    CHECK(wait_status(port, "/readyz", "HTTP/1.1 200 OK", body, sizeof body));
    CHECK(strcmp(body, "ready\n") == 0);
    /* A refresh that hangs: ready until the last good one is too old. */
    atomic_store(&ready_mode, 2);
    CHECK(wait_answer(port, "/readyz", "HTTP/1.1 503 Service Unavailable",
                      "not ready: no successful read for ", body, sizeof body));
    get(port, "/healthz", status, sizeof status, body, sizeof body);
    CHECK(strcmp(status, "HTTP/1.1 200 OK") == 0);
    atomic_store(&ready_mode, 1);
    CHECK(wait_status(port, "/readyz", "HTTP/1.1 200 OK", body, sizeof body));
    sluicei_metrics_close(m);
}

const struct test metrics_tests[] = {
    {"metrics/connections over the limit", test_over_the_limit},
    {"metrics/accept without file descriptors", test_no_fds},
    {"metrics/readyz follows the refreshes", test_readyz},
    {NULL, NULL},
};
