/* The relay under TLS tunnels (tls.h): one thread per process, started
 * with the first tunnel and ended when the last one closes, that copies
 * bytes between hiredis's local socket and the TLS connection of every
 * tunnel, both ways, through buffers of SLUICEI_TLS_BUF_BYTES; a full
 * buffer stops reading its side. Internal, for tls.c (which also
 * declares sluicei_tunnel_write() and its kin, implemented with it).
 *
 * hiredis closing its end ends a tunnel once what it sent is passed on
 * (or after 10 s); the server closing or failing its end closes hiredis's
 * once what the server sent before is delivered. */
#ifndef SLUICE_TLS_RELAY_H
#define SLUICE_TLS_RELAY_H

#include <stddef.h>
#include <openssl/ssl.h>
#include <sluice/common.h>

#include "tls.h"

/* Hands a tunnel to the relay, starting its thread when none runs: ssl is
 * connected over tls_fd (non-blocking), local_fd (non-blocking) is the
 * relay's end of hiredis's socket. On SLUICE_OK all three are the
 * relay's, and *ref (when ref is not NULL) a reference to the tunnel
 * (tls.h: sluicei_tunnel_write); on failure (SLUICE_ERR_NOMEM,
 * SLUICE_ERR_SYS: no thread) they are closed and freed. Thread-safe. */
sluice_err sluicei_relay_add(int tls_fd, int local_fd, SSL *ssl, sluicei_tunnel **ref, char *err,
                             size_t errlen);

/* pthread_atfork handlers (tls.c registers them): prepare waits until the
 * relay rests in poll() and holds it there; the child closes its copies of
 * every tunnel's sockets and forgets them (it has no relay thread; its
 * next tunnel starts one). */
void sluicei_relay_fork_prepare(void);
void sluicei_relay_fork_parent(void);
void sluicei_relay_fork_child(void);

/* At exit: closes every tunnel and joins the relay thread. Tunnels handed
 * over later are closed at once. */
void sluicei_relay_stop(void);

#endif
