/* Redis addresses: parsing a redis://, rediss:// or unix:// URL, printing it without
 * its password, and the error-message helpers of the address parsers
 * (url.h). */
#include "url.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#define DEFAULT_PORT 6379
#define MAX_DB 1000000
/* Most replicas a "?wait=N" may ask for. */
#define MAX_WAIT 16
#define PASSWORD_ENV "SLUICE_REDIS_PASSWORD"
#define PASSWORD_FILE_ENV "SLUICE_REDIS_PASSWORD_FILE"
/* The longest password file read (Redis itself takes any length; a secret
 * file is a line). */
#define PASSWORD_FILE_MAX 4096
#define QUOTE_MAX SLUICEI_QUOTE_MAX

/* ---- small helpers ---------------------------------------------------- */

#define seterr sluicei_seterr
#define quote sluicei_quote

void sluicei_seterr(char *err, size_t errlen, const char *fmt, ...)
{
    if (!err || errlen == 0)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}

const char *sluicei_quote_cut(char *dst, size_t dstlen, const char *s, size_t n, size_t max)
{
    size_t o = 0, lim = n > max ? max : n;
    for (size_t i = 0; i < lim && o + 4 < dstlen; i++) {
        unsigned char ch = (unsigned char)s[i];
        dst[o++] = ch >= 32 && ch < 127 ? (char)ch : '?';
    }
    if (o < n && o + 4 <= dstlen) {
        memcpy(dst + o, "...", 3);
        o += 3;
    }
    dst[o] = '\0';
    return dst;
}

const char *sluicei_quote(char *dst, size_t dstlen, const char *s, size_t n)
{
    return sluicei_quote_cut(dst, dstlen, s, n, QUOTE_MAX);
}

static char *dupn(const char *s, size_t n)
{
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = '\0';
    }
    return d;
}

static int is_digit(char ch)
{
    return ch >= '0' && ch <= '9';
}

static int is_alnum(char ch)
{
    return is_digit(ch) || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
}

static int hexval(char ch)
{
    if (is_digit(ch))
        return ch - '0';
    if (ch >= 'a' && ch <= 'f')
        return ch - 'a' + 10;
    if (ch >= 'A' && ch <= 'F')
        return ch - 'A' + 10;
    return -1;
}

static int same_ascii_nocase(const char *a, size_t n, const char *b)
{
    if (strlen(b) != n)
        return 0;
    for (size_t i = 0; i < n; i++) {
        char x = a[i], y = b[i];
        if (x >= 'A' && x <= 'Z')
            x = (char)(x - 'A' + 'a');
        if (x != y)
            return 0;
    }
    return 1;
}

/* Value of n decimal digits, saturated at cap + 1 so that huge inputs cannot
 * overflow. */
static long digits_value(const char *s, size_t n, long cap)
{
    long v = 0;
    for (size_t i = 0; i < n; i++) {
        v = v * 10 + (s[i] - '0');
        if (v > cap)
            return cap + 1;
    }
    return v;
}

/* ---- URL parsing ------------------------------------------------------ */

/* Decodes %XX escapes of s[0..n) into a new string; NULL on a bad or %00
 * escape or out of memory (*bad tells which). */
static char *percent_decode(const char *s, size_t n, int *bad)
{
    char *d = malloc(n + 1);
    size_t o = 0;
    *bad = 0;
    if (!d)
        return NULL;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '%') {
            d[o++] = s[i];
            continue;
        }
        if (i + 2 >= n) {
            *bad = 1;
            free(d);
            return NULL;
        }
        int h = hexval(s[i + 1]), l = hexval(s[i + 2]);
        if (h < 0 || l < 0 || (h == 0 && l == 0)) {
            *bad = 1;
            free(d);
            return NULL;
        }
        d[o++] = (char)(h * 16 + l);
        i += 2;
    }
    d[o] = '\0';
    return d;
}

/* Parses the number s[0..n) of a URL of kind ("redis URL", "unix URL"):
 * what ("db", "wait") in 0..max, described as `desc` when it is no number
 * ("a non-negative integer", "a number of replicas 0..16"). */
static sluice_err parse_num(const char *kind, const char *what, const char *desc, long max,
                            const char *s, size_t n, int *out, char *err, size_t errlen)
{
    char q[QUOTE_MAX + 8];
    size_t d = 0;
    while (d < n && is_digit(s[d]))
        d++;
    if (d == 0 || d != n) {
        seterr(err, errlen, "%s: %s '%s' is not %s", kind, what, quote(q, sizeof q, s, n), desc);
        return SLUICE_ERR_INVALID;
    }
    long v = digits_value(s, n, max);
    if (v > max) {
        seterr(err, errlen, "%s: %s %s out of range 0..%ld", kind, what, quote(q, sizeof q, s, n),
               max);
        return SLUICE_ERR_INVALID;
    }
    *out = (int)v;
    return SLUICE_OK;
}

static sluice_err parse_db(const char *kind, const char *s, size_t n, int *db, char *err,
                           size_t errlen)
{
    return parse_num(kind, "db", "a non-negative integer", MAX_DB, s, n, db, err, errlen);
}

/* The replica count of "wait=N". */
static sluice_err parse_wait(const char *kind, const char *s, size_t n, int *wait, char *err,
                             size_t errlen)
{
    return parse_num(kind, "wait", "a number of replicas 0..16", MAX_WAIT, s, n, wait, err,
                     errlen);
}

/* The query of a redis:// URL, p[0..] after its '?': "wait=N" (empty
 * pieces between '&' are skipped). Anything else is quoted back, '?'
 * included, as following `after` (the host, port or db). */
static sluice_err parse_tcp_query(const char *p, const char *after, sluicei_url *u, char *err,
                                  size_t errlen)
{
    char q[QUOTE_MAX + 8];
    const char *s = p;
    while (*s) {
        size_t n = strcspn(s, "&");
        if (n > 5 && memcmp(s, "wait=", 5) == 0) {
            sluice_err e = parse_wait("redis URL", s + 5, n - 5, &u->wait_replicas, err, errlen);
            if (e != SLUICE_OK)
                return e;
        } else if (n == 5 && memcmp(s, "wait=", 5) == 0) {
            return parse_wait("redis URL", s + 5, 0, &u->wait_replicas, err, errlen);
        } else if (n > 0) {
            seterr(err, errlen, "redis URL: unexpected '%s' after the %s (the only parameter "
                                "is ?wait=N)",
                   quote(q, sizeof q, p - 1, strlen(p - 1)), after);
            return SLUICE_ERR_INVALID;
        }
        s += n;
        if (*s == '&')
            s++;
    }
    return SLUICE_OK;
}

/* user[:password] before the '@'; an empty user or password counts as
 * absent. Error messages never quote this part. */
static sluice_err parse_userinfo(const char *s, size_t n, sluicei_url *u, char *err,
                                 size_t errlen)
{
    const char *colon = memchr(s, ':', n);
    size_t ul = colon ? (size_t)(colon - s) : n;
    int bad = 0;
    if (ul > 0) {
        u->user = percent_decode(s, ul, &bad);
        if (!u->user) {
            seterr(err, errlen, bad ? "redis URL: bad %%-escape in the user name"
                                    : "redis URL: out of memory");
            return bad ? SLUICE_ERR_INVALID : SLUICE_ERR_NOMEM;
        }
    }
    if (colon && n - ul - 1 > 0) {
        u->password = percent_decode(colon + 1, n - ul - 1, &bad);
        if (!u->password) {
            seterr(err, errlen, bad ? "redis URL: bad %%-escape in the password"
                                    : "redis URL: out of memory");
            return bad ? SLUICE_ERR_INVALID : SLUICE_ERR_NOMEM;
        }
    }
    return SLUICE_OK;
}

/* r is what follows "redis://". */
static sluice_err parse_tcp(const char *r, sluicei_url *u, char *err, size_t errlen)
{
    char q[QUOTE_MAX + 8];
    /* The last '@' ends the userinfo, so a raw '@' or '/' in a password
     * still parses; host, port and db never contain one. */
    const char *at = strrchr(r, '@');
    const char *p = r;
    sluice_err e;
    if (at) {
        e = parse_userinfo(r, (size_t)(at - r), u, err, errlen);
        if (e != SLUICE_OK)
            return e;
        p = at + 1;
    }

    const char *host;
    size_t hl;
    if (*p == '[') {
        const char *close = strchr(p, ']');
        if (!close) {
            seterr(err, errlen, "redis URL: IPv6 host '[' without its closing ']'");
            return SLUICE_ERR_INVALID;
        }
        host = p + 1;
        hl = (size_t)(close - host);
        if (hl == 0) {
            seterr(err, errlen, "redis URL: empty host");
            return SLUICE_ERR_INVALID;
        }
        for (size_t i = 0; i < hl; i++)
            if (!is_alnum(host[i]) && host[i] != ':' && host[i] != '.' && host[i] != '%') {
                seterr(err, errlen, "redis URL: bad IPv6 address '[%s]'",
                       quote(q, sizeof q, host, hl));
                return SLUICE_ERR_INVALID;
            }
        if (!memchr(host, ':', hl)) {
            seterr(err, errlen, "redis URL: '[%s]' is not an IPv6 address",
                   quote(q, sizeof q, host, hl));
            return SLUICE_ERR_INVALID;
        }
        p = close + 1;
    } else {
        /* "redis://::1:6379": an IPv6 literal without its brackets. */
        size_t al = strcspn(p, "/?#"), colons = 0, hexish = 1;
        for (size_t i = 0; i < al; i++) {
            colons += p[i] == ':';
            hexish &= hexval(p[i]) >= 0 || p[i] == ':' || p[i] == '.';
        }
        if (colons >= 2 && hexish) {
            seterr(err, errlen, "redis URL: an IPv6 host goes in brackets, as in "
                                "redis://[::1]:6379");
            return SLUICE_ERR_INVALID;
        }
        host = p;
        hl = strcspn(p, ":/?#");
        if (hl == 0) {
            seterr(err, errlen, "redis URL: empty host");
            return SLUICE_ERR_INVALID;
        }
        for (size_t i = 0; i < hl; i++)
            if (!is_alnum(host[i]) && host[i] != '.' && host[i] != '-' && host[i] != '_') {
                seterr(err, errlen, "redis URL: host '%s' contains '%c'",
                       quote(q, sizeof q, host, hl),
                       host[i] >= 32 && host[i] < 127 ? host[i] : '?');
                return SLUICE_ERR_INVALID;
            }
        p += hl;
    }

    u->port = DEFAULT_PORT;
    int had_port = *p == ':';
    if (had_port) {
        const char *ps = ++p;
        size_t pl = strcspn(ps, "/?#");
        size_t d = 0;
        while (d < pl && is_digit(ps[d]))
            d++;
        if (pl == 0) {
            seterr(err, errlen, "redis URL: empty port after ':'");
            return SLUICE_ERR_INVALID;
        }
        if (d != pl) {
            seterr(err, errlen, "redis URL: port '%s' is not a number",
                   quote(q, sizeof q, ps, pl));
            return SLUICE_ERR_INVALID;
        }
        long v = digits_value(ps, pl, 65535);
        if (v < 1 || v > 65535) {
            seterr(err, errlen, "redis URL: port %s out of range 1..65535",
                   quote(q, sizeof q, ps, pl));
            return SLUICE_ERR_INVALID;
        }
        u->port = (int)v;
        p = ps + pl;
    }

    const char *after = had_port ? "port" : "host";
    if (*p == '/') {
        p++;
        after = "db";
        size_t d = 0;
        while (is_digit(p[d]))
            d++;
        if (d == 0 && (*p == '\0' || *p == '?')) {
            u->db = 0;
        } else if (d == 0) {
            return parse_db("redis URL", p, strlen(p), &u->db, err, errlen);
        } else {
            e = parse_db("redis URL", p, d, &u->db, err, errlen);
            if (e != SLUICE_OK)
                return e;
            p += d;
        }
    }
    if (*p == '?') {
        e = parse_tcp_query(p + 1, after, u, err, errlen);
        if (e != SLUICE_OK)
            return e;
    } else if (*p != '\0') {
        seterr(err, errlen, "redis URL: unexpected '%s' after the %s",
               quote(q, sizeof q, p, strlen(p)), after);
        return SLUICE_ERR_INVALID;
    }

    u->host = dupn(host, hl);
    if (!u->host) {
        seterr(err, errlen, "redis URL: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    return SLUICE_OK;
}

/* r is what follows "unix://": an absolute path, then ?db=N&wait=N. */
static sluice_err parse_unix(const char *r, sluicei_url *u, char *err, size_t errlen)
{
    char q[QUOTE_MAX + 8];
    size_t pl = strcspn(r, "?");
    if (pl == 0) {
        seterr(err, errlen, "unix URL: empty socket path (use unix:///path/to/redis.sock)");
        return SLUICE_ERR_INVALID;
    }
    if (r[0] != '/') {
        /* What precedes the path might be user:password@; do not quote it. */
        size_t al = strcspn(r, "/?");
        if (memchr(r, '@', al))
            seterr(err, errlen, "unix URL: no user or password in a unix URL (set "
                                PASSWORD_ENV " or " PASSWORD_FILE_ENV ")");
        else
            seterr(err, errlen, "unix URL: socket path '%s' is not absolute (use "
                                "unix:///path/to/redis.sock)", quote(q, sizeof q, r, pl));
        return SLUICE_ERR_INVALID;
    }
    size_t maxpath = sizeof(((struct sockaddr_un *)0)->sun_path) - 1;
    if (pl > maxpath) {
        seterr(err, errlen, "unix URL: socket path of %zu bytes is longer than the %zu a "
                            "socket address holds", pl, maxpath);
        return SLUICE_ERR_INVALID;
    }
    if (r[pl] == '?') {
        const char *p = r + pl + 1;
        while (*p) {
            size_t n = strcspn(p, "&");
            const char *eq = memchr(p, '=', n);
            size_t nl = eq ? (size_t)(eq - p) : n;
            if (n == 0) {
                /* "?&db=1" or a trailing '&': nothing to read. */
            } else if (nl == 2 && memcmp(p, "db", 2) == 0) {
                if (!eq) {
                    seterr(err, errlen, "unix URL: parameter 'db' needs a value, as in ?db=1");
                    return SLUICE_ERR_INVALID;
                }
                sluice_err e = parse_db("unix URL", eq + 1, n - nl - 1, &u->db, err, errlen);
                if (e != SLUICE_OK)
                    return e;
            } else if (nl == 4 && memcmp(p, "wait", 4) == 0) {
                if (!eq) {
                    seterr(err, errlen, "unix URL: parameter 'wait' needs a value, as in ?wait=1");
                    return SLUICE_ERR_INVALID;
                }
                sluice_err e = parse_wait("unix URL", eq + 1, n - nl - 1, &u->wait_replicas, err,
                                          errlen);
                if (e != SLUICE_OK)
                    return e;
            } else {
                seterr(err, errlen, "unix URL: unknown parameter '%s' (only db=N and wait=N)",
                       quote(q, sizeof q, p, nl));
                return SLUICE_ERR_INVALID;
            }
            p += n;
            if (*p == '&')
                p++;
        }
    }
    u->unix_path = dupn(r, pl);
    if (!u->unix_path) {
        seterr(err, errlen, "unix URL: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    return SLUICE_OK;
}

/* Zeroes n bytes of a secret, so that no copy stays in freed memory. */
static void wipe(char *p, size_t n)
{
    volatile char *v = p;
    while (n--)
        *v++ = '\0';
}

/* The password the environment gives: SLUICE_REDIS_PASSWORD, or the first
 * line of the file SLUICE_REDIS_PASSWORD_FILE names (a Docker or Kubernetes
 * secret); *out stays NULL when neither is set. Errors name the variable
 * and the file, never what the file holds. */
static sluice_err env_password(char **out, char *err, size_t errlen)
{
    const char *env = getenv(PASSWORD_ENV), *path = getenv(PASSWORD_FILE_ENV);
    if (env && *env && path && *path) {
        seterr(err, errlen, "redis password: both " PASSWORD_ENV " and " PASSWORD_FILE_ENV
                            " are set; set one");
        return SLUICE_ERR_INVALID;
    }
    if (env && *env) {
        *out = dupn(env, strlen(env));
        if (!*out) {
            seterr(err, errlen, "redis URL: out of memory");
            return SLUICE_ERR_NOMEM;
        }
        return SLUICE_OK;
    }
    if (!path || !*path)
        return SLUICE_OK;
    char q[QUOTE_MAX];
    quote(q, sizeof q, path, strlen(path));
    /* Non-blocking: a FIFO named by mistake must not hang the program. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    if (fd < 0) {
        seterr(err, errlen, PASSWORD_FILE_ENV " '%s': %s", q, strerror(errno));
        return SLUICE_ERR_INVALID;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > PASSWORD_FILE_MAX) {
        seterr(err, errlen, PASSWORD_FILE_ENV " '%s': not a regular file of at most %d bytes",
               q, PASSWORD_FILE_MAX);
        close(fd);
        return SLUICE_ERR_INVALID;
    }
    char buf[PASSWORD_FILE_MAX + 2];
    size_t n = 0;
    for (;;) {
        ssize_t r = read(fd, buf + n, sizeof buf - 1 - n);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            seterr(err, errlen, PASSWORD_FILE_ENV " '%s': %s", q, strerror(errno));
            close(fd);
            wipe(buf, n);
            return SLUICE_ERR_INVALID;
        }
        n += (size_t)r;
        if (r == 0 || n == sizeof buf - 1)
            break;
    }
    close(fd);
    /* One line: a final "\n" (or "\r\n") is not part of the password. */
    size_t len = n;
    if (len && buf[len - 1] == '\n')
        len--;
    if (len && buf[len - 1] == '\r')
        len--;
    const char *why = len == 0                      ? "is empty"
                      : memchr(buf, '\n', len)      ? "holds more than one line"
                      : memchr(buf, '\0', len)      ? "holds a NUL byte"
                      : n > PASSWORD_FILE_MAX        ? "is too long"
                                                    : NULL;
    if (why) {
        seterr(err, errlen, PASSWORD_FILE_ENV " '%s' %s (it must hold the password on one "
                            "line)", q, why);
        wipe(buf, n);
        return SLUICE_ERR_INVALID;
    }
    *out = dupn(buf, len);
    wipe(buf, n);
    if (!*out) {
        seterr(err, errlen, "redis URL: out of memory");
        return SLUICE_ERR_NOMEM;
    }
    return SLUICE_OK;
}

sluice_err sluicei_url_parse(const char *s, sluicei_url *u, char *err, size_t errlen)
{
    char q[QUOTE_MAX + 8];
    sluice_err e;
    memset(u, 0, sizeof *u);
    if (!s || !*s) {
        seterr(err, errlen, "redis URL: empty (use redis://host:port/db or unix:///path)");
        return SLUICE_ERR_INVALID;
    }
    /* A scheme is letters, digits, '+', '-', '.'; anything else before
     * "://" (say "user:pw@host://") is not quoted, as it may hold a secret. */
    const char *sep = strstr(s, "://");
    size_t sl = sep ? (size_t)(sep - s) : 0;
    int scheme_ok = sl > 0;
    for (size_t i = 0; i < sl && scheme_ok; i++)
        scheme_ok = is_alnum(s[i]) || s[i] == '+' || s[i] == '-' || s[i] == '.';
    if (!scheme_ok) {
        seterr(err, errlen, "redis URL: no scheme (use redis://host[:port][/db] or "
                            "unix:///path/to/redis.sock)");
        return SLUICE_ERR_INVALID;
    }
    if (same_ascii_nocase(s, sl, "redis") || same_ascii_nocase(s, sl, "rediss")) {
        e = parse_tcp(sep + 3, u, err, errlen);
        u->tls = sl == 6;
    } else if (same_ascii_nocase(s, sl, "unix")) {
        e = parse_unix(sep + 3, u, err, errlen);
    } else {
        seterr(err, errlen, "redis URL: unknown scheme '%s' (use redis://, rediss:// or "
                            "unix://)",
               quote(q, sizeof q, s, sl));
        return SLUICE_ERR_INVALID;
    }
    if (e == SLUICE_OK && !u->password) {
        e = env_password(&u->password, err, errlen);
        if (e == SLUICE_OK && !u->password && u->user) {
            /* ACL AUTH needs both; a lone user is almost surely a typo. */
            seterr(err, errlen, "redis URL: user '%s' has no password (write user:password@ "
                                "or set " PASSWORD_ENV " or " PASSWORD_FILE_ENV ")",
                   quote(q, sizeof q, u->user, strlen(u->user)));
            e = SLUICE_ERR_INVALID;
        }
    }
    if (e != SLUICE_OK)
        sluicei_url_free(u);
    return e;
}

void sluicei_url_free(sluicei_url *u)
{
    if (!u)
        return;
    free(u->host);
    free(u->unix_path);
    free(u->user);
    if (u->password) {
        /* Leave no copy of the secret in freed heap memory. */
        volatile char *p = u->password;
        while (*p)
            *p++ = '\0';
        free(u->password);
    }
    memset(u, 0, sizeof *u);
}

sluice_err sluicei_url_copy(sluicei_url *dst, const sluicei_url *src)
{
    memset(dst, 0, sizeof *dst);
    dst->port = src->port;
    dst->db = src->db;
    dst->wait_replicas = src->wait_replicas;
    dst->tls = src->tls;
    if ((src->host && !(dst->host = dupn(src->host, strlen(src->host)))) ||
        (src->unix_path && !(dst->unix_path = dupn(src->unix_path, strlen(src->unix_path)))) ||
        (src->user && !(dst->user = dupn(src->user, strlen(src->user)))) ||
        (src->password && !(dst->password = dupn(src->password, strlen(src->password))))) {
        sluicei_url_free(dst);
        return SLUICE_ERR_NOMEM;
    }
    return SLUICE_OK;
}

void sluicei_url_describe(const sluicei_url *u, char *out, size_t outlen)
{
    if (!out || outlen == 0)
        return;
    char wait[24] = "";
    if (u->unix_path) {
        if (u->wait_replicas > 0)
            snprintf(wait, sizeof wait, "%swait=%d", u->db ? "&" : "?", u->wait_replicas);
        if (u->db)
            snprintf(out, outlen, "unix://%s?db=%d%s", u->unix_path, u->db, wait);
        else
            snprintf(out, outlen, "unix://%s%s", u->unix_path, wait);
    } else if (u->host) {
        int v6 = strchr(u->host, ':') != NULL;
        if (u->wait_replicas > 0)
            snprintf(wait, sizeof wait, "?wait=%d", u->wait_replicas);
        snprintf(out, outlen, "%s://%s%s%s%s%s:%d/%d%s", u->tls ? "rediss" : "redis",
                 u->user ? u->user : "",
                 u->user ? "@" : "", v6 ? "[" : "", u->host, v6 ? "]" : "", u->port, u->db,
                 wait);
    } else {
        snprintf(out, outlen, "(no redis address)");
    }
}
