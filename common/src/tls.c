/* TLS to Redis through a relay thread (tls.h): the settings from the
 * environment, the TCP connect and TLS handshake in the caller's thread,
 * and the local endpoints hiredis connects to; the relay that carries the
 * bytes is tls_relay.c. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* accept4, pipe2, SOCK_CLOEXEC */
#endif

#include "tls.h"
#include "tls_relay.h"
#include "url.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#define CA_ENV "SLUICE_TLS_CA_FILE"
#define CERT_ENV "SLUICE_TLS_CERT_FILE"
#define KEY_ENV "SLUICE_TLS_KEY_FILE"
#define NAME_ENV "SLUICE_TLS_SERVER_NAME"

/* What an SSL reads from its socket at once (read ahead). */
#define READ_AHEAD_BYTES (128 * 1024)
/* Longest first line of the server's answer to the PING of a new tunnel. */
#define PING_REPLY_MAX 256
/* Added to the wait for the server's verdict on a TLS 1.3 handshake
 * (await_verdict()). */
#define VERDICT_EXTRA_MS 5
/* How long sluicei_tls_accept() waits for the connection its caller made. */
#define ACCEPT_WAIT_MS 1000

/* Longest file or server name quoted whole in a message. */
#define NAME_QUOTE_MAX 160

#define seterr sluicei_seterr
#define QUOTE_MAX SLUICEI_QUOTE_MAX

/* ---- small helpers ---------------------------------------------------- */

static int64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Waits until fd is ready for events or the deadline passes: 1 ready, 0
 * timed out, -1 failed (errno). */
static int wait_fd(int fd, short events, int64_t deadline)
{
    for (;;) {
        int64_t left = deadline - mono_ms();
        if (left <= 0)
            return 0;
        struct pollfd p = {.fd = fd, .events = events};
        int r = poll(&p, 1, left > INT_MAX ? INT_MAX : (int)left);
        if (r > 0)
            return 1;
        if (r == 0)
            return 0;
        if (errno != EINTR)
            return -1;
    }
}

/* A printable copy of s (a file or server name) for a message: control
 * bytes as '?', cut with "..." to fit dst. */
static const char *quoted(char *dst, size_t n, const char *s)
{
    return sluicei_quote_cut(dst, n, s, strlen(s), n);
}

static const char *env(const char *name)
{
    const char *v = getenv(name);
    return v && *v ? v : NULL;
}

static int is_ip(const char *host)
{
    unsigned char b[16];
    return inet_pton(AF_INET, host, b) == 1 || inet_pton(AF_INET6, host, b) == 1;
}

/* The reason of OpenSSL's first error, the closest to the cause ("no
 * certificate or crl found"), and the error queue emptied. */
static const char *ssl_reason(char *buf, size_t n)
{
    unsigned long e = ERR_peek_error();
    const char *r = e ? ERR_reason_error_string(e) : NULL;
    if (r)
        snprintf(buf, n, "%s", r);
    else if (e)
        ERR_error_string_n(e, buf, n);
    else
        snprintf(buf, n, "no reason given");
    ERR_clear_error();
    return buf;
}

/* ---- settings and the SSL_CTX ---------------------------------------- */

typedef struct settings {
    const char *ca, *cert, *key, *name;   /* the SLUICE_TLS_* values; NULL when unset */
} settings;

static void read_settings(settings *s)
{
    s->ca = env(CA_ENV);
    s->cert = env(CERT_ENV);
    s->key = env(KEY_ENV);
    s->name = env(NAME_ENV);
}

/* The SSL_CTX of the settings last used, kept while they stay the same. */
static struct {
    pthread_mutex_t mu;
    SSL_CTX *ctx;
    char *ca, *cert, *key;
} cache = {.mu = PTHREAD_MUTEX_INITIALIZER};

static int same(const char *a, const char *b)
{
    return strcmp(a ? a : "", b ? b : "") == 0;
}

static char *dup_or_null(const char *s, int *fail)
{
    char *d = s ? strdup(s) : NULL;
    if (s && !d)
        *fail = 1;
    return d;
}

/* A key is never asked for on a terminal. */
static int no_passphrase(char *buf, int size, int rwflag, void *u)
{
    (void)buf, (void)size, (void)rwflag, (void)u;
    return 0;
}

/* 1 when the PEM file at path holds an encrypted key ("BEGIN ENCRYPTED
 * PRIVATE KEY", or a "Proc-Type: 4,ENCRYPTED" header). */
static int pem_encrypted(const char *path)
{
    char buf[8192];
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    return memmem(buf, (size_t)n, "ENCRYPTED", 9) != NULL;
}

/* Why the key file at path did not load, from OpenSSL's errors (emptied). */
static const char *key_problem(const char *path, char *buf, size_t n)
{
    unsigned long first = ERR_peek_error();
    ERR_clear_error();
    /* The passphrase callback gives none, so an encrypted key fails. */
    if (pem_encrypted(path))
        snprintf(buf, n, "the key has a passphrase (give it one without)");
    else if (ERR_GET_LIB(first) == ERR_LIB_OSSL_DECODER)
        snprintf(buf, n, "no PEM key in it");
    else
        snprintf(buf, n, "%s (it must hold a PEM key without a passphrase)",
                 first && ERR_reason_error_string(first) ? ERR_reason_error_string(first)
                                                         : "no reason given");
    return buf;
}

/* The file var names is a regular file we may read. */
static sluice_err check_file(const char *var, const char *path, char *err, size_t errlen)
{
    char q[NAME_QUOTE_MAX];
    /* Non-blocking: a FIFO named by mistake must not hang the program. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        seterr(err, errlen, "TLS: %s '%s': %s", var, quoted(q, sizeof q, path), strerror(errno));
        return SLUICE_ERR_INVALID;
    }
    struct stat st;
    int regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    close(fd);
    if (!regular) {
        seterr(err, errlen, "TLS: %s '%s': not a regular file", var, quoted(q, sizeof q, path));
        return SLUICE_ERR_INVALID;
    }
    return SLUICE_OK;
}

static sluice_err build_ctx(const settings *s, SSL_CTX **out, char *err, size_t errlen)
{
    char q[NAME_QUOTE_MAX], q2[NAME_QUOTE_MAX], why[160];
    sluice_err e;
    *out = NULL;
    if (s->cert && !s->key) {
        seterr(err, errlen, "TLS: " CERT_ENV " is set without " KEY_ENV " (set both: the "
                            "client certificate and its key)");
        return SLUICE_ERR_INVALID;
    }
    if (s->key && !s->cert) {
        seterr(err, errlen, "TLS: " KEY_ENV " is set without " CERT_ENV " (set both: the "
                            "client certificate and its key)");
        return SLUICE_ERR_INVALID;
    }
    if ((s->ca && (e = check_file(CA_ENV, s->ca, err, errlen)) != SLUICE_OK) ||
        (s->cert && (e = check_file(CERT_ENV, s->cert, err, errlen)) != SLUICE_OK) ||
        (s->key && (e = check_file(KEY_ENV, s->key, err, errlen)) != SLUICE_OK))
        return e;

    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
    if (!ctx) {
        seterr(err, errlen, "TLS: setting up OpenSSL: %s", ssl_reason(why, sizeof why));
        return SLUICE_ERR_NOMEM;
    }
    SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    /* The relay writes what it has and keeps the rest, from a buffer that
     * moves as it fills. */
    SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
    /* Reads take what the socket has, many records a system call. */
    SSL_CTX_set_read_ahead(ctx, 1);
    SSL_CTX_set_default_read_buffer_len(ctx, READ_AHEAD_BYTES);
    SSL_CTX_set_default_passwd_cb(ctx, no_passphrase);

    if (s->ca) {
        if (SSL_CTX_load_verify_locations(ctx, s->ca, NULL) != 1) {
            seterr(err, errlen, "TLS: " CA_ENV " '%s': %s (it must hold PEM certificates)",
                   quoted(q, sizeof q, s->ca), ssl_reason(why, sizeof why));
            e = SLUICE_ERR_INVALID;
            goto fail;
        }
    } else if (SSL_CTX_set_default_verify_paths(ctx) != 1) {
        seterr(err, errlen, "TLS: the system's CA store: %s (set " CA_ENV ")",
               ssl_reason(why, sizeof why));
        e = SLUICE_ERR_INVALID;
        goto fail;
    }
    if (s->cert) {
        if (SSL_CTX_use_certificate_chain_file(ctx, s->cert) != 1) {
            seterr(err, errlen, "TLS: " CERT_ENV " '%s': %s (it must hold a PEM certificate)",
                   quoted(q, sizeof q, s->cert), ssl_reason(why, sizeof why));
            e = SLUICE_ERR_INVALID;
            goto fail;
        }
        if (SSL_CTX_use_PrivateKey_file(ctx, s->key, SSL_FILETYPE_PEM) != 1) {
            int mismatch = ERR_GET_REASON(ERR_peek_last_error()) == X509_R_KEY_VALUES_MISMATCH;
            key_problem(s->key, why, sizeof why);
            if (mismatch)
                seterr(err, errlen, "TLS: " KEY_ENV " '%s' is not the key of " CERT_ENV " '%s'",
                       quoted(q, sizeof q, s->key), quoted(q2, sizeof q2, s->cert));
            else
                seterr(err, errlen, "TLS: " KEY_ENV " '%s': %s", quoted(q, sizeof q, s->key),
                       why);
            e = SLUICE_ERR_INVALID;
            goto fail;
        }
        if (SSL_CTX_check_private_key(ctx) != 1) {
            ERR_clear_error();
            seterr(err, errlen, "TLS: " KEY_ENV " '%s' is not the key of " CERT_ENV " '%s'",
                   quoted(q, sizeof q, s->key), quoted(q2, sizeof q2, s->cert));
            e = SLUICE_ERR_INVALID;
            goto fail;
        }
    }
    *out = ctx;
    return SLUICE_OK;
fail:
    SSL_CTX_free(ctx);
    return e;
}

/* A new SSL for the settings s (from the cached SSL_CTX, built again when
 * the settings changed). */
static sluice_err new_ssl(const settings *s, SSL **out, char *err, size_t errlen)
{
    *out = NULL;
    pthread_mutex_lock(&cache.mu);
    if (!cache.ctx || !same(cache.ca, s->ca) || !same(cache.cert, s->cert) ||
        !same(cache.key, s->key)) {
        SSL_CTX *ctx;
        sluice_err e = build_ctx(s, &ctx, err, errlen);
        if (e != SLUICE_OK) {
            pthread_mutex_unlock(&cache.mu);
            return e;
        }
        int fail = 0;
        char *ca = dup_or_null(s->ca, &fail), *cert = dup_or_null(s->cert, &fail),
             *key = dup_or_null(s->key, &fail);
        if (fail) {
            free(ca), free(cert), free(key);
            SSL_CTX_free(ctx);
            pthread_mutex_unlock(&cache.mu);
            seterr(err, errlen, "TLS: out of memory");
            return SLUICE_ERR_NOMEM;
        }
        /* SSLs made from the old one hold their own reference. */
        SSL_CTX_free(cache.ctx);
        free(cache.ca), free(cache.cert), free(cache.key);
        cache.ctx = ctx;
        cache.ca = ca, cache.cert = cert, cache.key = key;
    }
    SSL *ssl = SSL_new(cache.ctx);
    pthread_mutex_unlock(&cache.mu);
    if (!ssl) {
        ERR_clear_error();
        seterr(err, errlen, "TLS: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    *out = ssl;
    return SLUICE_OK;
}

/* ---- connecting: TCP, the handshake, a first PING -------------------- */

static sluice_err tcp_connect(const char *host, int port, int64_t deadline, int timeout_ms,
                              int *out, char *err, size_t errlen)
{
    struct addrinfo hints, *res = NULL;
    char ps[16];
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    snprintf(ps, sizeof ps, "%d", port);
    int rc = getaddrinfo(host, ps, &hints, &res);
    if (rc != 0) {
        seterr(err, errlen, "connect: %s", rc == EAI_SYSTEM ? strerror(errno) : gai_strerror(rc));
        return SLUICE_ERR_IO;
    }
    int last = ECONNREFUSED, timed_out = 0;
    for (struct addrinfo *ai = res; ai && !timed_out; ai = ai->ai_next) {
        int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        ai->ai_protocol);
        if (fd < 0) {
            last = errno;
            continue;
        }
        int w = 1;
        if (connect(fd, ai->ai_addr, ai->ai_addrlen) != 0)
            w = errno == EINPROGRESS ? wait_fd(fd, POLLOUT, deadline) : -1;
        int soerr = w < 0 ? errno : 0;
        socklen_t sl = sizeof soerr;
        if (w > 0 && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) != 0)
            soerr = errno;
        if (w > 0 && soerr == 0) {
            int one = 1;
            /* As hiredis does on its own TCP sockets: requests go out at once. */
            setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            freeaddrinfo(res);
            *out = fd;
            return SLUICE_OK;
        }
        if (w == 0)
            timed_out = 1;
        else
            last = soerr;
        close(fd);
    }
    freeaddrinfo(res);
    if (timed_out)
        seterr(err, errlen, "connect: no answer within %d ms", timeout_ms);
    else
        seterr(err, errlen, "connect: %s", strerror(last));
    return SLUICE_ERR_IO;
}

static int client_cert_alert(int reason)
{
    switch (reason) {
    case SSL_R_TLSV1_ALERT_UNKNOWN_CA:
    case SSL_R_SSLV3_ALERT_BAD_CERTIFICATE:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_UNKNOWN:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_EXPIRED:
    case SSL_R_SSLV3_ALERT_CERTIFICATE_REVOKED:
    case SSL_R_SSLV3_ALERT_UNSUPPORTED_CERTIFICATE:
    case SSL_R_TLSV1_ALERT_ACCESS_DENIED:
    case SSL_R_TLSV1_ALERT_DECRYPT_ERROR:
        return 1;
    default:
        return 0;
    }
}

/* Why an SSL call (SSL_get_error() gave se) of `stage` failed, in err. */
static sluice_err tls_fail(SSL *ssl, int se, const char *stage, const settings *s,
                           const char *name, char *err, size_t errlen)
{
    char q[NAME_QUOTE_MAX], why[160];
    int reason = ERR_GET_REASON(ERR_peek_last_error());
    int sys = errno;
    ssl_reason(why, sizeof why);
    if (se == SSL_ERROR_ZERO_RETURN || (se == SSL_ERROR_SYSCALL && sys == 0) ||
        (se == SSL_ERROR_SSL && reason == SSL_R_UNEXPECTED_EOF_WHILE_READING)) {
        seterr(err, errlen, "TLS: %s: the server closed the connection", stage);
        return SLUICE_ERR_IO;
    }
    if (se == SSL_ERROR_SYSCALL) {
        seterr(err, errlen, "TLS: %s: %s", stage, strerror(sys));
        return SLUICE_ERR_IO;
    }
    if (se != SSL_ERROR_SSL) {
        seterr(err, errlen, "TLS: %s: unexpected OpenSSL state %d", stage, se);
        return SLUICE_ERR_IO;
    }
    long v = SSL_get_verify_result(ssl);
    if (reason == SSL_R_CERTIFICATE_VERIFY_FAILED && v != X509_V_OK) {
        const char *what = X509_verify_cert_error_string(v);
        if (v == X509_V_ERR_HOSTNAME_MISMATCH || v == X509_V_ERR_IP_ADDRESS_MISMATCH)
            seterr(err, errlen, "TLS: certificate verify failed: %s: the server's certificate "
                                "does not name '%s'%s", what, quoted(q, sizeof q, name),
                   s->name ? " (" NAME_ENV ")"
                           : " (set " NAME_ENV " to a name it holds)");
        else if (s->ca)
            seterr(err, errlen, "TLS: certificate verify failed: %s (CA file '%s')", what,
                   quoted(q, sizeof q, s->ca));
        else
            seterr(err, errlen, "TLS: certificate verify failed: %s (the system's CA store; "
                                CA_ENV " names a CA file)", what);
        return SLUICE_ERR_AUTH;
    }
    if (!s->cert && (reason == SSL_R_TLSV13_ALERT_CERTIFICATE_REQUIRED ||
                     reason == SSL_R_SSLV3_ALERT_HANDSHAKE_FAILURE)) {
        seterr(err, errlen, "TLS: the server requires a client certificate (%s; set "
                            CERT_ENV " and " KEY_ENV ")", why);
        return SLUICE_ERR_AUTH;
    }
    if (s->cert && client_cert_alert(reason)) {
        seterr(err, errlen, "TLS: the server refused the client certificate " CERT_ENV
                            " '%s' (%s)", quoted(q, sizeof q, s->cert), why);
        return SLUICE_ERR_AUTH;
    }
    seterr(err, errlen, "TLS: %s failed: %s", stage, why);
    return SLUICE_ERR_PROTOCOL;
}

/* Looks, without taking them, at the first bytes the server sent: a TLS
 * record starts with its type (20..24); a plain Redis port answers a TLS
 * hello with an error line. */
static sluice_err check_first_bytes(int fd, int port, char *err, size_t errlen)
{
    char b[80], q[QUOTE_MAX + 8];
    ssize_t n = recv(fd, b, sizeof b - 1, MSG_PEEK | MSG_DONTWAIT);
    if (n <= 0 || (b[0] >= 20 && b[0] <= 24))
        return SLUICE_OK;   /* EOF and errors: the handshake reports them */
    b[n] = '\0';
    seterr(err, errlen, "TLS: the server answered in plain text, not TLS: '%s' (port %d is a "
                        "plain port: use redis:// for it, or Redis's tls-port)",
           sluicei_quote(q, sizeof q, b, strcspn(b, "\r\n")), port);
    return SLUICE_ERR_PROTOCOL;
}

static sluice_err handshake(SSL *ssl, int fd, int port, const settings *s, const char *name,
                            int64_t deadline, int timeout_ms, char *err, size_t errlen)
{
    int looked = 0;
    for (;;) {
        ERR_clear_error();
        errno = 0;
        int r = SSL_connect(ssl);
        if (r == 1)
            return SLUICE_OK;
        int se = SSL_get_error(ssl, r);
        short ev = se == SSL_ERROR_WANT_READ ? POLLIN : se == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (!ev)
            return tls_fail(ssl, se, "handshake", s, name, err, errlen);
        int w = wait_fd(fd, ev, deadline);
        if (w == 0) {
            seterr(err, errlen, "TLS: no handshake within %d ms (is port %d Redis's tls-port?)",
                   timeout_ms, port);
            return SLUICE_ERR_IO;
        }
        if (w < 0) {
            seterr(err, errlen, "TLS: handshake: %s", strerror(errno));
            return SLUICE_ERR_IO;
        }
        if (ev == POLLIN && !looked) {
            looked = 1;
            sluice_err e = check_first_bytes(fd, port, err, errlen);
            if (e != SLUICE_OK)
                return e;
        }
    }
}

/* TLS 1.3 ends the client's handshake before the server has judged the
 * client's certificate: the server's verdict comes after, as session
 * tickets or an alert. Writing at once would let the server close on
 * unread bytes, and its reset would drop the alert that says why; so the
 * client first waits for the verdict, up to the handshake's own duration
 * again (plus a little), as a server may send no tickets at all. */
static sluice_err await_verdict(SSL *ssl, int fd, const settings *s, const char *name,
                                int64_t started, int64_t deadline, char *err, size_t errlen)
{
    if (SSL_version(ssl) != TLS1_3_VERSION)
        return SLUICE_OK;
    int64_t now = mono_ms(), until = now + (now - started) + VERDICT_EXTRA_MS;
    if (until > deadline)
        until = deadline;
    while (wait_fd(fd, POLLIN, until) > 0) {
        char b[1];
        ERR_clear_error();
        errno = 0;
        /* A peek: the tickets are taken, any data stays for the relay. */
        int r = SSL_peek(ssl, b, sizeof b);
        int se = SSL_get_error(ssl, r);
        if (r > 0 || se == SSL_ERROR_WANT_READ)
            return SLUICE_OK;   /* tickets: accepted */
        if (se != SSL_ERROR_WANT_WRITE)
            return tls_fail(ssl, se, "after the handshake", s, name, err, errlen);
    }
    return SLUICE_OK;
}

/* Sends PING and reads the first line of the answer (any answer: +PONG,
 * -NOAUTH...). A server that refuses the client's certificate, or wants
 * one, says so only after the handshake (TLS 1.3): here, not in the
 * middle of the caller's first command. */
static sluice_err ping(SSL *ssl, int fd, const settings *s, const char *name, int64_t deadline,
                       int timeout_ms, char *err, size_t errlen)
{
    static const char cmd[] = "*1\r\n$4\r\nPING\r\n";
    char buf[PING_REPLY_MAX], q[QUOTE_MAX + 8];
    size_t sent = 0, got = 0;
    while (sent < sizeof cmd - 1 || !memchr(buf, '\n', got)) {
        if (got == sizeof buf)
            break;
        ERR_clear_error();
        errno = 0;
        int r = sent < sizeof cmd - 1
                    ? SSL_write(ssl, cmd + sent, (int)(sizeof cmd - 1 - sent))
                    : SSL_read(ssl, buf + got, (int)(sizeof buf - got));
        if (r > 0) {
            if (sent < sizeof cmd - 1)
                sent += (size_t)r;
            else
                got += (size_t)r;
            continue;
        }
        int se = SSL_get_error(ssl, r);
        short ev = se == SSL_ERROR_WANT_READ ? POLLIN : se == SSL_ERROR_WANT_WRITE ? POLLOUT : 0;
        if (!ev)
            return tls_fail(ssl, se, "the first command (PING)", s, name, err, errlen);
        int w = wait_fd(fd, ev, deadline);
        if (w == 0) {
            seterr(err, errlen, "TLS: no answer to PING within %d ms", timeout_ms);
            return SLUICE_ERR_IO;
        }
        if (w < 0) {
            seterr(err, errlen, "TLS: PING: %s", strerror(errno));
            return SLUICE_ERR_IO;
        }
    }
    if (buf[0] != '+' && buf[0] != '-') {
        size_t line = 0;
        while (line < got && buf[line] != '\r' && buf[line] != '\n')
            line++;
        seterr(err, errlen, "TLS: the server's answer to PING is not Redis's: '%s'",
               sluicei_quote(q, sizeof q, buf, line));
        return SLUICE_ERR_PROTOCOL;
    }
    return SLUICE_OK;
}

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static void init(void);

/* The TLS side of a tunnel: connected, verified, answering. */
static sluice_err tls_connect(const char *host, int port, int timeout_ms, int *fdp, SSL **sslp,
                              char *err, size_t errlen)
{
    char q[NAME_QUOTE_MAX], why[160];
    *fdp = -1;
    *sslp = NULL;
    pthread_once(&init_once, init);
    settings s;
    read_settings(&s);
    const char *name = s.name ? s.name : host;
    int64_t started = mono_ms(), deadline = started + timeout_ms;
    SSL *ssl;
    sluice_err e = new_ssl(&s, &ssl, err, errlen);
    if (e != SLUICE_OK)
        return e;
    int ok;
    if (is_ip(name)) {
        /* An address is checked against the IP entries; SNI carries names only. */
        ok = X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), name) == 1;
    } else {
        X509_VERIFY_PARAM_set_hostflags(SSL_get0_param(ssl), X509_CHECK_FLAG_NO_PARTIAL_WILDCARDS);
        ok = SSL_set1_host(ssl, name) == 1 && SSL_set_tlsext_host_name(ssl, name) == 1;
    }
    if (!ok) {
        seterr(err, errlen, "TLS: server name '%s' cannot be checked: %s%s",
               quoted(q, sizeof q, name), ssl_reason(why, sizeof why),
               s.name ? " (" NAME_ENV ")" : "");
        SSL_free(ssl);
        return SLUICE_ERR_INVALID;
    }
    int fd;
    e = tcp_connect(host, port, deadline, timeout_ms, &fd, err, errlen);
    if (e != SLUICE_OK) {
        SSL_free(ssl);
        return e;
    }
    if (SSL_set_fd(ssl, fd) != 1) {
        ERR_clear_error();
        seterr(err, errlen, "TLS: out of memory");
        e = SLUICE_ERR_NOMEM;
    }
    if (e == SLUICE_OK)
        e = handshake(ssl, fd, port, &s, name, deadline, timeout_ms, err, errlen);
    if (e == SLUICE_OK)
        e = await_verdict(ssl, fd, &s, name, started, deadline, err, errlen);
    if (e == SLUICE_OK)
        e = ping(ssl, fd, &s, name, deadline, timeout_ms, err, errlen);
    if (e != SLUICE_OK) {
        SSL_free(ssl);
        close(fd);
        return e;
    }
    *fdp = fd;
    *sslp = ssl;
    return SLUICE_OK;
}

/* ---- fork and exit ---------------------------------------------------- */

/* A fork finds the SSL_CTX cache and every tunnel at rest (the locks in
 * this order everywhere). */
static void fork_prepare(void)
{
    pthread_mutex_lock(&cache.mu);
    sluicei_relay_fork_prepare();
}

static void fork_parent(void)
{
    sluicei_relay_fork_parent();
    pthread_mutex_unlock(&cache.mu);
}

static void fork_child(void)
{
    sluicei_relay_fork_child();
    pthread_mutex_unlock(&cache.mu);
}

/* Before OpenSSL's own cleanup at exit (registered before this): the relay
 * stops, its tunnels close, its thread is joined; the SSL_CTX is freed. */
static void at_exit(void)
{
    sluicei_relay_stop();
    pthread_mutex_lock(&cache.mu);
    SSL_CTX_free(cache.ctx);
    free(cache.ca), free(cache.cert), free(cache.key);
    cache.ctx = NULL;
    cache.ca = cache.cert = cache.key = NULL;
    pthread_mutex_unlock(&cache.mu);
}

static void init(void)
{
    OPENSSL_init_ssl(OPENSSL_INIT_LOAD_SSL_STRINGS | OPENSSL_INIT_LOAD_CRYPTO_STRINGS, NULL);
    pthread_atfork(fork_prepare, fork_parent, fork_child);
    atexit(at_exit);
}

/* ---- the endpoints hiredis connects to -------------------------------- */

sluice_err sluicei_tls_open_fd(const char *host, int port, int timeout_ms, int *fd, char *err,
                               size_t errlen)
{
    int tls_fd, sv[2];
    SSL *ssl;
    *fd = -1;
    sluice_err e = tls_connect(host, port, timeout_ms, &tls_fd, &ssl, err, errlen);
    if (e != SLUICE_OK)
        return e;
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) {
        seterr(err, errlen, "TLS: socketpair: %s", strerror(errno));
        SSL_free(ssl);
        close(tls_fd);
        return SLUICE_ERR_SYS;
    }
    int fl = fcntl(sv[1], F_GETFL);
    fcntl(sv[1], F_SETFL, fl | O_NONBLOCK);
    e = sluicei_relay_add(tls_fd, sv[1], ssl, NULL, err, errlen);
    if (e != SLUICE_OK) {
        close(sv[0]);
        return e;
    }
    *fd = sv[0];
    return SLUICE_OK;
}

struct sluicei_tls_pending {
    SSL *ssl;
    int tls_fd, listen_fd;
    char dir[sizeof(((struct sockaddr_un *)0)->sun_path) - 2];
    char path[sizeof(((struct sockaddr_un *)0)->sun_path)];
};

const char *sluicei_tls_path(const sluicei_tls_pending *p)
{
    return p->path;
}

/* Removes the socket and its directory, and closes the listening socket. */
static void unlisten(sluicei_tls_pending *p)
{
    if (p->listen_fd >= 0)
        close(p->listen_fd);
    p->listen_fd = -1;
    if (p->path[0])
        unlink(p->path);
    if (p->dir[0])
        rmdir(p->dir);
    p->path[0] = p->dir[0] = '\0';
}

void sluicei_tls_cancel(sluicei_tls_pending *p)
{
    if (!p)
        return;
    unlisten(p);
    SSL_free(p->ssl);
    if (p->tls_fd >= 0)
        close(p->tls_fd);
    free(p);
}

/* A fresh directory of mode 0700 for the socket: in $TMPDIR, else /tmp
 * (also when $TMPDIR is too long for a socket's path). */
static int make_dir(sluicei_tls_pending *p)
{
    const char *tmp = getenv("TMPDIR");
    const char *bases[2] = {tmp && *tmp == '/' ? tmp : NULL, "/tmp"};
    for (int i = 0; i < 2; i++) {
        if (!bases[i])
            continue;
        int n = snprintf(p->dir, sizeof p->dir, "%s/sluice-tls.XXXXXX", bases[i]);
        if (n <= 0 || (size_t)n >= sizeof p->dir)
            continue;
        if (mkdtemp(p->dir)) {
            snprintf(p->path, sizeof p->path, "%s/s", p->dir);
            return 0;
        }
    }
    p->dir[0] = '\0';
    return -1;
}

sluice_err sluicei_tls_open_path(const char *host, int port, int timeout_ms,
                                 sluicei_tls_pending **out, char *err, size_t errlen)
{
    *out = NULL;
    sluicei_tls_pending *p = calloc(1, sizeof *p);
    if (!p) {
        seterr(err, errlen, "TLS: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    p->listen_fd = -1;
    sluice_err e = tls_connect(host, port, timeout_ms, &p->tls_fd, &p->ssl, err, errlen);
    if (e != SLUICE_OK) {
        free(p);
        return e;
    }
    const char *step = "a directory for the local socket (mkdtemp)";
    if (make_dir(p) == 0) {
        struct sockaddr_un sa;
        memset(&sa, 0, sizeof sa);
        sa.sun_family = AF_UNIX;
        snprintf(sa.sun_path, sizeof sa.sun_path, "%s", p->path);
        step = "the local socket";
        p->listen_fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (p->listen_fd >= 0 && bind(p->listen_fd, (struct sockaddr *)&sa, sizeof sa) == 0 &&
            listen(p->listen_fd, 1) == 0) {
            *out = p;
            return SLUICE_OK;
        }
    }
    seterr(err, errlen, "TLS: %s: %s", step, strerror(errno));
    sluicei_tls_cancel(p);
    return SLUICE_ERR_SYS;
}

sluice_err sluicei_tls_accept(sluicei_tls_pending *p, sluicei_tunnel **ref, char *err,
                              size_t errlen)
{
    if (ref)
        *ref = NULL;
    int fd = -1;
    int64_t deadline = mono_ms() + ACCEPT_WAIT_MS;
    /* The caller's connect has been queued already; a wait is only for a
     * connect still on its way. */
    while ((fd = accept4(p->listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK)) < 0 &&
           (errno == EAGAIN || errno == EINTR) && wait_fd(p->listen_fd, POLLIN, deadline) > 0) {
    }
    int sys = errno;
    unlisten(p);
    if (fd < 0) {
        seterr(err, errlen, "TLS: accepting the local connection: %s",
               sys == EAGAIN ? "none came" : strerror(sys));
        sluicei_tls_cancel(p);
        return SLUICE_ERR_SYS;
    }
    SSL *ssl = p->ssl;
    int tls_fd = p->tls_fd;
    p->ssl = NULL;
    p->tls_fd = -1;
    sluicei_tls_cancel(p);
    return sluicei_relay_add(tls_fd, fd, ssl, ref, err, errlen);
}
