/* Requests written by hand to a connection's socket, and the replies read
 * back without waiting. Internal.
 *
 * hiredis copies every argument of a command into its output buffer; a
 * producer's request holds frames of up to megabytes. A sluicei_req is the
 * RESP text of one or more commands in which a bulk string may be a
 * reference to the caller's bytes instead of a copy: sluicei_conn_send()
 * writes the text and the referenced bytes with sendmsg(), in order,
 * without copying them. hiredis still parses the replies, which are read
 * as usual (sluicei_conn_read_reply(), or sluicei_conn_read_ready() here
 * without waiting).
 *
 * Build a request with sluicei_req_command() (the argument count of the
 * next command) followed by exactly that many arguments; sluicei_req_reset()
 * starts a new request and keeps the memory, so that steady state
 * allocates nothing. Not thread-safe: a request and a connection belong to
 * one thread. */
#ifndef SLUICE_CONN_SEND_H
#define SLUICE_CONN_SEND_H

#include "conn.h"
#include "wire.h"

#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

typedef struct sluicei_req_ref {
    size_t at;                 /* where in text the bytes go */
    const void *data;
    size_t len;
} sluicei_req_ref;

/* Zero-initialise it; sluicei_req_free() releases it. */
typedef struct sluicei_req {
    sluicei_buf text;          /* the RESP text around the referenced bytes */
    sluicei_req_ref *refs;     /* in text order */
    size_t nrefs, refcap;
    struct iovec *iov;         /* room for 2 * refcap + 1 pieces (sluicei_conn_send()) */
    sluice_err err;            /* the first failure to append (SLUICE_ERR_NOMEM): a caller
                                  may check it before sending; sending reports it */
} sluicei_req;

/* Empties r (keeping its memory). */
void sluicei_req_reset(sluicei_req *r);
/* Frees what r holds; r is zeroed (and may be used again). */
void sluicei_req_free(sluicei_req *r);

/* Starts a command of argc arguments (its name counts). */
void sluicei_req_command(sluicei_req *r, int argc);
/* An argument, copied: s[0..len), the string s, the concatenation of a
 * and b, a number in decimal. */
void sluicei_req_arg(sluicei_req *r, const void *s, size_t len);
void sluicei_req_str(sluicei_req *r, const char *s);
void sluicei_req_str2(sluicei_req *r, const char *a, const char *b);
void sluicei_req_u64(sluicei_req *r, uint64_t v);
/* An argument that is not copied: data[0..len) is read when the request
 * is sent, so it must stay valid and unchanged until then. */
void sluicei_req_ref_arg(sluicei_req *r, const void *data, size_t len);

/* Writes request r to c's socket, whatever partial writes it takes (after
 * anything hiredis still had to send, so that the order of commands is
 * kept). The replies are read as for any pipelined command. SLUICE_OK: all
 * of it was handed to the kernel. SLUICE_ERR_NOMEM: building r failed
 * (r->err; c->errstr says so; nothing was sent). SLUICE_ERR_IO: not
 * connected (c->errstr unchanged: it tells how the connection was lost),
 * or the socket failed (c->errstr says why, and the context is dropped:
 * c->ctx is NULL, the caller reconnects). A closed socket is an error, never a
 * SIGPIPE. r itself is not changed and may be sent again. */
sluice_err sluicei_conn_send(sluicei_conn *c, sluicei_req *r);

/* The next reply if it has arrived, without waiting: reads what the
 * socket holds already. SLUICE_OK with *out the reply (the caller's, as
 * sluicei_conn_read_reply(): an error reply is a reply here too) or NULL
 * when none is complete yet. SLUICE_ERR_IO: not connected (c->errstr
 * unchanged), or the connection was lost or broke the protocol (c->errstr
 * says why; the context is dropped). SLUICE_ERR_PROTOCOL: a reply beyond
 * the limits of c->guard (reply.h; c->errstr says which, the context is
 * dropped): final. */
sluice_err sluicei_conn_read_ready(sluicei_conn *c, redisReply **out);

/* Drops c's context (if any), so that the next reconnect starts afresh;
 * why (when not NULL) becomes c->errstr. For a connection whose pending
 * replies do not matter any more (a retryable error reply of Redis
 * Cluster: the next connect asks where the queue lives now). */
void sluicei_conn_drop(sluicei_conn *c, const char *why);

#endif
