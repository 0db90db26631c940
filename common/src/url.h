/* Redis addresses (redis://, rediss:// and unix:// URLs). Internal.
 *
 * Accepted addresses:
 *   redis://[user[:password]@]host[:port][/db][?wait=N]   (port 6379, db 0 by default)
 *   rediss://...  the same over TLS (tls.h)
 *   unix:///path/to/redis.sock[?db=N][&wait=N]
 * wait=N (0..16) sets wait_replicas.
 * A password in the URL wins; otherwise SLUICE_REDIS_PASSWORD is used when
 * set, or the first line of the file SLUICE_REDIS_PASSWORD_FILE names (both
 * set: an error), so that the secret need not appear on a command line.
 * user without password is an error only if the environment gives no
 * password either. */
#ifndef SLUICE_URL_H
#define SLUICE_URL_H

#include <stddef.h>
#include <sluice/common.h>

typedef struct sluicei_url {
    char *host;        /* NULL for unix sockets */
    int port;
    char *unix_path;   /* NULL for TCP */
    char *user;        /* NULL: no ACL user (AUTH password) */
    char *password;    /* NULL: no AUTH */
    int db;
    int tls;           /* rediss://: connections go through TLS (tls.h) */
    int wait_replicas; /* > 0: writes are followed by WAIT wait_replicas (see
                          SLUICEI_WAIT_MS); from "?wait=N", or set by the
                          cluster router when the node has replicas */
} sluicei_url;

/* Timeout of the WAIT that follows a write when url.wait_replicas > 0. A
 * WAIT that times out is not an error: the write stands, it is only not
 * known to be on a replica yet. */
#define SLUICEI_WAIT_MS 1000

/* Parses s into *u (zeroed first). On failure returns SLUICE_ERR_INVALID and
 * writes to err which part is wrong, e.g. "redis URL: port '70000' out of
 * range 1..65535 in 'redis://h:70000'". Never echoes the password. */
sluice_err sluicei_url_parse(const char *s, sluicei_url *u, char *err, size_t errlen);
void sluicei_url_free(sluicei_url *u);
/* Deep copy of src into *dst (zeroed first); SLUICE_ERR_NOMEM leaves *dst
 * zeroed. */
sluice_err sluicei_url_copy(sluicei_url *dst, const sluicei_url *src);
/* Writes a printable form of u without its password ("redis://h:6379/0"). */
void sluicei_url_describe(const sluicei_url *u, char *out, size_t outlen);

/* Error-message helpers shared by the address parsers (conn.c, cluster_addr.c):
 * printf into err (nothing when err is NULL), and a printable one-line
 * quote of s[0..n) (control bytes as '?', cut with "..." after
 * SLUICEI_QUOTE_MAX bytes) for dst of at least SLUICEI_QUOTE_MAX + 8. */
#define SLUICEI_QUOTE_MAX 48
void sluicei_seterr(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
const char *sluicei_quote(char *dst, size_t dstlen, const char *s, size_t n);
/* The same, cut after max bytes of s instead (and always within dstlen). */
const char *sluicei_quote_cut(char *dst, size_t dstlen, const char *s, size_t n, size_t max);

#endif
