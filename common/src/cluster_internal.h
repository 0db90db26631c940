/* What the files of the cluster router share (cluster.h is the API): the
 * router's state (struct sluicei_router), its limits, and the functions one
 * file calls in another, each named after its file:
 *   cluster_addr.c   parses an address (a cluster, a list, one server)
 *                    into the router's servers and its printable form;
 *   cluster_slots.c  key slots, the slot map (read through short-lived
 *                    probe connections) and the node serving a queue;
 *   cluster.c        the router object, its pool of connections and the
 *                    run loop that follows redirects and retries.
 * Internal header: never installed, nothing exported. */
#ifndef SLUICE_CLUSTER_INTERNAL_H
#define SLUICE_CLUSTER_INTERNAL_H

#include "cluster.h"

#include <stddef.h>
#include <stdint.h>

#define CLUSTER_SCHEME "redis+cluster"
#define CLUSTER_TLS_SCHEME "rediss+cluster"
/* Most seeds in a cluster address, servers in a list. */
#define MAX_ADDRS 1024
/* Most nodes remembered (seeds, masters and replicas ever seen). */
#define MAX_NODES 4096
/* Longest piece of the input quoted back in an error message. */
#define QUOTE_MAX SLUICEI_QUOTE_MAX

typedef struct node {
    char *host;
    int port;
    int has_replica; /* a master with at least one replica not failed (last map) */
} node;

/* sluicei_router_bind(): what a connection's resolver follows. */
typedef struct binding {
    sluicei_router *r;
    char q[SLUICE_MAX_QUEUE_NAME + 8];
    struct binding *next;
} binding;

/* A connection of the router: pool ones (router_command/script, and
 * router_conn of a single server or a list) serve a node; in a cluster,
 * router_conn gives each queue one of its own (q set), which its resolver
 * moves with the queue. */
typedef struct rconn {
    sluicei_conn *c;
    char q[SLUICE_MAX_QUEUE_NAME + 8]; /* "" for a pool connection */
} rconn;

struct sluicei_router {
    sluicei_router_kind kind;
    int connect_timeout_ms;
    int cmd_timeout_ms;
    /* SINGLE: the server; LIST: the servers; CLUSTER: one per seed. */
    sluicei_url *servers;
    int nservers;
    int wait_explicit; /* CLUSTER: ?wait=N given: servers[0].wait_replicas */
    char *desc;

    /* CLUSTER: every node seen; slot_node[s] indexes it (-1: no master). */
    node *nodes;
    int nnodes, capnodes;
    int16_t slot_node[SLUICEI_CLUSTER_SLOTS];
    int map_ok;
    int last_good; /* node that answered CLUSTER SLOTS last (-1: none) */

    rconn *conns;
    int nconns, capconns;
    binding *bindings;

    sluicei_router_stats stats;
    char errstr[512];
};

/* ---- cluster_addr.c ---------------------------------------------------- */

/* Parses addr (not empty) into r: its kind, servers (one per seed of a
 * cluster), wait_explicit and desc. On failure writes why to err (never
 * the password) and returns SLUICE_ERR_INVALID or SLUICE_ERR_NOMEM; what
 * was parsed so far stays in r for cluster_addr_free(). No I/O. */
sluice_err cluster_addr_parse(sluicei_router *r, const char *addr, char *err, size_t errlen);
/* Frees r's servers and desc (what cluster_addr_parse() set). */
void cluster_addr_free(sluicei_router *r);

/* ---- cluster_slots.c --------------------------------------------------- */

/* Index of host[0..hl):port in r->nodes, added when new; -1 when the table
 * is full or out of memory. The table may move: pointers into it do not
 * survive the call. */
int cluster_slots_node_index(sluicei_router *r, const char *host, size_t hl, int port);
/* Reads the slot map from the first known node that answers (through
 * connections of its own, closed before it returns). On failure writes why
 * to err: SLUICE_ERR_AUTH, SLUICE_ERR_INVALID (not a cluster node),
 * SLUICE_ERR_IO, SLUICE_ERR_NOMEM. */
sluice_err cluster_slots_refresh(sluicei_router *r, char *err, size_t errlen);
/* The slot of queue q's keys ("sluice:{q}:..."). */
unsigned cluster_slots_queue_slot(const char *q);
/* Frees the node table. */
void cluster_slots_free(sluicei_router *r);

#endif
