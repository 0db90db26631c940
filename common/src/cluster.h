/* Many Redis servers under one address: Redis Cluster and lists of
 * independent servers. Internal.
 *
 * An address is one of
 *   redis://... | rediss://... | unix://...       one server (conn.h)
 *   redis+cluster://[user[:password]@]host:port[,host:port...][/][?wait=N]
 *                                                 a Redis Cluster; the hosts
 *                                                 are seeds, any one will do
 *   rediss+cluster://...                          the same over TLS (tls.h):
 *                                                 every node it learns of too
 *   redis://a:1,redis://b:2,...                   independent servers
 *
 * A queue (or a partition "Q#p" of a partitioned queue Q) lives wholly on
 * one node: every key of it carries the hash tag {Q} / {Q#p}, so it maps to
 * one cluster slot (CRC16 of the tag, mod 16384). On a list of servers,
 * partition p lives on server p mod n (a plain queue on the first).
 *
 * The router is not thread-safe: one per thread. Its connections are
 * opened on first use: one per node for sluicei_router_command/script
 * (and sluicei_router_conn on a single server or a list), one per queue
 * for sluicei_router_conn in a cluster (each follows its own queue). */
#ifndef SLUICE_CLUSTER_H
#define SLUICE_CLUSTER_H

#include "conn.h"
#include "proto.h"

#include <stdint.h>

#define SLUICEI_CLUSTER_SLOTS 16384

typedef enum sluicei_router_kind {
    SLUICEI_ROUTER_SINGLE = 0,
    SLUICEI_ROUTER_LIST,
    SLUICEI_ROUTER_CLUSTER,
} sluicei_router_kind;

typedef struct sluicei_router sluicei_router;

/* The slot of a key: CRC16-CCITT (XMODEM) of its hash tag (the part between
 * the first '{' and the next '}', when not empty) or of the whole key,
 * mod 16384 (Redis's keyHashSlot; CLUSTER KEYSLOT gives the same). */
unsigned sluicei_key_slot(const char *key, size_t len);
/* The CRC16 itself (crc16("123456789") = 0x31C3). */
unsigned sluicei_crc16(const char *buf, size_t len);

/* Parses addr and, for a cluster, reads the slot map from the first seed
 * that answers (CLUSTER SLOTS). No connection is kept open. On failure
 * writes why to err (never the password): SLUICE_ERR_INVALID for a bad
 * address (or a seed that is not a cluster node), SLUICE_ERR_AUTH when a
 * node refused the credentials, SLUICE_ERR_IO when no seed answered.
 * A user:password in a cluster address applies to every node;
 * SLUICE_REDIS_PASSWORD is used when it has none. connect_timeout_ms and
 * cmd_timeout_ms (0: defaults) are those of every connection it opens. */
sluice_err sluicei_router_open(sluicei_router **out, const char *addr, int connect_timeout_ms,
                               int cmd_timeout_ms, char *err, size_t errlen);
/* The same without any I/O: the address is only parsed (a cluster's slot
 * map is read on first use). For tests and the fuzzer. */
sluice_err sluicei_router_parse(sluicei_router **out, const char *addr, char *err, size_t errlen);
void sluicei_router_close(sluicei_router *r);   /* NULL is a no-op */
sluicei_router_kind sluicei_router_kind_of(const sluicei_router *r);
/* Printable form of the address, without password. */
const char *sluicei_router_describe(const sluicei_router *r);
/* Why the last sluicei_router_command/script failed, one line. */
const char *sluicei_router_errstr(const sluicei_router *r);

/* What the router has done so far (for tests and logs). */
typedef struct sluicei_router_stats {
    uint64_t moved;     /* MOVED replies followed */
    uint64_t ask;       /* ASK replies followed */
    uint64_t retries;   /* pauses before sending again */
    uint64_t refreshes; /* slot maps read */
} sluicei_router_stats;
void sluicei_router_get_stats(const sluicei_router *r, sluicei_router_stats *out);

/* Writes to *u (caller frees with sluicei_url_free) the URL of the node
 * that serves queue q ("Q" or "Q#p") now: credentials and db from the
 * address, host and port of the slot's master, and, in a cluster,
 * wait_replicas 1 when that master has a replica (unless the address
 * says ?wait=N). refresh != 0 reads the slot map again first (after
 * MOVED, or when the node is unreachable). On a list of servers: server
 * p mod n for "Q#p", the first for a plain Q; on a single server: that
 * server (no refresh, no I/O). SLUICE_ERR_IO when no node gives the map or
 * the slot has no master now (a failover under way). */
sluice_err sluicei_router_url(sluicei_router *r, const char *q, int refresh, sluicei_url *u,
                              char *err, size_t errlen);

/* A connection (owned by the router, closed by sluicei_router_close;
 * scripts loaded) to the node that serves q. In a cluster it is q's own
 * connection, with its resolver bound (below), and the same one on every
 * call for q; on a single server or a list, the one connection to that
 * server, shared by every queue there. A connection found dropped is
 * reconnected first (for up to the connect timeout). */
sluice_err sluicei_router_conn(sluicei_router *r, const char *q, sluicei_conn **out, char *err,
                               size_t errlen);

/* Makes c follow queue q: before each reconnect attempt c->url is pointed
 * at the node serving q now (the slot map read again, through short-lived
 * connections of its own). r must outlive c and live in c's thread. For a
 * single server or a list this does nothing (a queue never moves). */
void sluicei_router_bind(sluicei_router *r, const char *q, sluicei_conn *c);

/* 1 when an error reply means "the data is elsewhere, or about to be, or
 * the cluster is in a passing state": MOVED, ASK, CLUSTERDOWN, READONLY,
 * EXECABORT, a script's "non local key" error (a slot being migrated), and
 * the server's passing states of sluicei_error_transient() (retry.h). The
 * caller drops the connection (so that the next one is resolved again),
 * pauses and sends the command again.
 * Scripts never write before the first such error (docs/PROTOCOL.md,
 * "Redis Cluster"), so sending again is safe. */
int sluicei_cluster_retryable(const char *msg, size_t len);

/* Runs a command / a script on the node serving q, following MOVED
 * (refreshing the map), ASK (ASKING on the target node), and sending again
 * after 100 ms on the other retryable errors and on lost connections,
 * until deadline_ms (sluicei_now_ms() clock; < 0: 30 s from now): 100 ms
 * doubling to 1 s (+-25%) between attempts, none before the first redirect.
 * Same reply/error contract as sluicei_conn_command() (the script: as
 * sluicei_script_run()); details in sluicei_router_errstr(). At the
 * deadline the last error stands (an error reply stays in *out). On a
 * single server or a list, MOVED or ASK is a final error (the address
 * names a cluster node). */
sluice_err sluicei_router_command(sluicei_router *r, const char *q, int64_t deadline_ms,
                                  redisReply **out, int argc, const char **argv,
                                  const size_t *argvlen);
sluice_err sluicei_router_script(sluicei_router *r, const char *q, int64_t deadline_ms,
                                 sluicei_script_id id, int argc, const char **argv,
                                 const size_t *argvlen, redisReply **out);

/* The partitions of queue q: *partitions 0 for a plain queue (sluice:{Q}:meta
 * exists), P for a partitioned one (sluice:{Q#0}:meta has partitions P).
 * SLUICE_ERR_NOQUEUE when neither exists; SLUICE_ERR_PROTOCOL when the
 * partitions field is not 1..SLUICE_MAX_PARTITIONS. Retries redirects and
 * lost connections for up to the command timeout. */
sluice_err sluicei_queue_partitions(sluicei_router *r, const char *q, int *partitions,
                                    char *err, size_t errlen);

/* The most partitions a queue may have. */
#define SLUICE_MAX_PARTITIONS 1024

#endif
