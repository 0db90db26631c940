/* Redis key schema and Lua scripts of a sluice queue. Internal.
 *
 * Every key of queue Q is "sluice:{Q}:<name>", so that one hash tag puts
 * them all in one cluster slot; every script receives the meta key as
 * KEYS[1] and derives the others from it. docs/PROTOCOL.md is the
 * reference; this file is its implementation. */
#ifndef SLUICE_PROTO_H
#define SLUICE_PROTO_H

#include "conn.h"
#include <sluice/batch.h>

#define SLUICE_MAX_QUEUE_NAME 128
#define SLUICE_MAX_KEY 256
/* Longest batch id string: "4294967295:18446744073709551615:4294967295". */
#define SLUICE_MAX_BATCH_ID 48
/* Largest seq of a batch: its bit in an acknowledgement bitmap is the
 * bitmap's size (lib.lua: valid_id). */
#define SLUICEI_MAX_SEQ 16777215u
/* The expiry next() gives the frame of a batch it hands to the
 * application (PEXPIREAT, the year 9999: it never fires), which marks the
 * batch as received (lib.lua: handed). */
#define SLUICEI_HANDED_AT "253402300799000"
/* The shortest consumer lease a queue may have (create.lua). */
#define SLUICEI_MIN_LEASE_MS 1000
/* The frame limit of a queue created without one. */
#define SLUICEI_MAX_FRAME_DEFAULT ((uint64_t)64 << 20)

/* The scripts, in the order of LUA_SCRIPTS in the Makefile (their sources
 * are common/lua/NAME.lua, embedded at build time). */
typedef enum sluicei_script_id {
    SLUICEI_SCRIPT_CREATE = 0,
    SLUICEI_SCRIPT_DELETE,
    SLUICEI_SCRIPT_PUSH,
    SLUICEI_SCRIPT_TAKE,
    SLUICEI_SCRIPT_CLAIM,
    SLUICEI_SCRIPT_ACK,
    SLUICEI_SCRIPT_REQUEUE,
    SLUICEI_SCRIPT_REAP,
    SLUICEI_SCRIPT_BEAT,
    SLUICEI_SCRIPT_DEAD,
    SLUICEI_SCRIPT_DEADADMIN,
    SLUICEI_SCRIPT_RESTORE,
    SLUICEI_SCRIPT_SUBMIT,
    SLUICEI_SCRIPT_TASK_CLAIM,
    SLUICEI_SCRIPT_TASK_RENEW,
    SLUICEI_SCRIPT_TASK_DONE,
    SLUICEI_SCRIPT_TASK_FAIL,
    SLUICEI_SCRIPT_TASK_CHECK,
    SLUICEI_SCRIPT_CHECKPOINT,
    SLUICEI_SCRIPT_COUNT
} sluicei_script_id;

/* Results of the push script. */
#define SLUICEI_PUSH_FULL 0      /* over a budget: wait for room, retry */
#define SLUICEI_PUSH_OK 1        /* stored */
#define SLUICEI_PUSH_DUP 2       /* this id is queued or was acked already */

/* Checks a queue name: 1..SLUICE_MAX_QUEUE_NAME bytes of [A-Za-z0-9_.-],
 * optionally ending in "#<partition>" (the name of one partition of a
 * partitioned queue, cluster.h).
 * On failure writes why to err and returns SLUICE_ERR_INVALID. */
sluice_err sluicei_queue_name_check(const char *q, char *err, size_t errlen);

/* Writes "Q#p", the name of partition p of queue q, to out
 * (SLUICE_MAX_QUEUE_NAME + 8 bytes). */
void sluicei_partition_name(char *out, const char *q, int p);

/* The field of a queue's dlv hash that is not a batch: its long value
 * keeps the hash in Redis's hashtable encoding (docs/PROTOCOL.md, section
 * 2). The batches a queue holds are HLEN dlv less HEXISTS dlv of it. */
#define SLUICEI_DLV_PIN "~"

/* Writes "sluice:{q}:name" to out (SLUICE_MAX_KEY bytes). */
void sluicei_key(char *out, const char *q, const char *name);
/* The same with the name formatted from fmt ("pending:%s"). Every key C
 * names goes through these two (the Lua scripts derive theirs from
 * KEYS[1], common/lua/lib.lua). */
void sluicei_keyf(char *out, const char *q, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The list of epoch e's batches: "ready:<e>", or "ready:<e>:<rank>" for a
 * rank of a coordinated queue (rank < 0: a free queue). */
void sluicei_key_ready(char *out, const char *q, uint64_t e, int rank);

/* Writes the batch id string "epoch:task:seq" to out (SLUICE_MAX_BATCH_ID bytes). */
void sluicei_batch_id_str(char *out, sluice_batch_id id);
/* Parses "epoch:task:seq"; returns 0 on success, -1 when malformed. */
int sluicei_batch_id_parse(const char *s, size_t len, sluice_batch_id *id);
/* Whether s[0..len) is a batch id as the queue's lists hold them, in
 * canonical decimal with seq <= SLUICEI_MAX_SEQ, optionally followed by
 * ":pad<k>" (a padding copy); *padding tells which, and *base the length
 * of the batch id before it. Binary-safe: a NUL byte makes it invalid. */
int sluicei_rid_check(const char *s, size_t len, size_t *base, int *padding);
/* Whether s[0..len) is an end marker "eof:<e>"; sets *e. */
int sluicei_marker_parse(const char *s, size_t len, uint32_t *e);

/* The source text of a script (for docs and tests), and its name. */
const char *sluicei_script_source(sluicei_script_id id);
const char *sluicei_script_name(sluicei_script_id id);
/* The script called name, or SLUICEI_SCRIPT_COUNT when there is none. */
sluicei_script_id sluicei_script_by_name(const char *name);

/* The key a call of script id with the given ARGV names as KEYS[1]
 * ("sluice:{Q}:" + this): one the role that runs the script may write, as
 * Redis checks the keys EVALSHA names against the caller's ACL: "meta" for
 * the admin's scripts, "producers" for a producer's, "consumers" for a
 * consumer's (beat: by its first argument). */
const char *sluicei_script_anchor(sluicei_script_id id, int argc, const char **argv);

/* The role whose ACL (docs/DEPLOY.md, "Roles") lets it run script id
 * with these arguments: "admin", "producer" or "consumer". */
const char *sluicei_script_role(sluicei_script_id id, int argc, const char **argv);
/* Writes to out the error of a script call on queue q that Redis refused
 * for the caller's ACL (SLUICE_ERR_AUTH), naming the script, its role and
 * Redis's reason why. */
void sluicei_script_denied(char *out, size_t n, sluicei_script_id id, int argc,
                           const char **argv, const char *q, const char *why);

/* Runs script id on queue q with the given ARGV (EVALSHA, falling back to
 * EVAL on NOSCRIPT). Same reply/error contract as sluicei_conn_command(). */
sluice_err sluicei_script_run(sluicei_conn *c, sluicei_script_id id, const char *q, int argc,
                              const char **argv, const size_t *argvlen, redisReply **out);
/* Appends the same call to the pipeline (EVALSHA only: the scripts must be
 * on the server, as every connect and reconnect of a sluicei_conn loads
 * them; after a NOSCRIPT, sluicei_script_load()). */
sluice_err sluicei_script_append(sluicei_conn *c, sluicei_script_id id, const char *q, int argc,
                                 const char **argv, const size_t *argvlen);
/* SCRIPT LOAD of every script (sluicei_conn_load_scripts()). */
sluice_err sluicei_script_load(sluicei_conn *c);
/* The SHA1 of script id (EVALSHA's name for it), known at build time. */
const char *sluicei_script_sha(sluicei_script_id id);

/* Maps a script error reply ("NOQUEUE ...", "TOOBIG ...", "OOM ...") to a
 * sluice_err. */
sluice_err sluicei_reply_error_code(const redisReply *r);

#endif
