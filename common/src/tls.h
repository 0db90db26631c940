/* TLS to Redis (rediss:// addresses) through a relay in this process.
 * Internal.
 *
 * hiredis 0.14 speaks no TLS, so a TLS connection is made here: the caller's
 * thread opens the TCP connection, completes the TLS handshake (the server's
 * certificate verified, its name checked) and sees the server answer a PING
 * through it, all within the connect timeout; then hiredis is given a local
 * stream socket, and the relay thread carries the bytes between that socket
 * and the TLS connection, both ways. Closing hiredis's end ends the tunnel;
 * the server closing its end closes hiredis's (after the bytes the server
 * sent before). hiredis's reconnects open new tunnels.
 *
 * The relay thread (tls_relay.h: one per process, started with the first
 * tunnel, ended when the last tunnel closes) owns the tunnels; its buffers
 * are bounded (SLUICEI_TLS_BUF_BYTES each way per tunnel). A fork()ed child keeps none
 * of the parent's tunnels (their sockets are closed in the child, so the
 * parent's connections still end when the parent closes them) and starts
 * its own relay when it connects. Every descriptor is close-on-exec.
 *
 * The environment sets the TLS side, read when a tunnel opens:
 *   SLUICE_TLS_CA_FILE     PEM file of the CAs to trust (else the system's
 *                          default store)
 *   SLUICE_TLS_CERT_FILE   client certificate (PEM, with its chain), and
 *   SLUICE_TLS_KEY_FILE    its key (PEM, no passphrase): both or neither
 *   SLUICE_TLS_SERVER_NAME the name to send (SNI) and to find in the
 *                          server's certificate, instead of the address's
 *                          host (for a server reached by IP whose
 *                          certificate names a host)
 * Verification is always on. An IP address is checked against the
 * certificate's IP entries and sent without SNI. */
#ifndef SLUICE_TLS_H
#define SLUICE_TLS_H

#include <stddef.h>
#include <sluice/common.h>

/* Bytes the relay holds per tunnel in each direction. */
#define SLUICEI_TLS_BUF_BYTES (256 * 1024)

/* Opens a TLS tunnel to host:port within timeout_ms and gives hiredis's
 * end as *fd, a connected stream socket (close-on-exec, blocking) for
 * redisConnectFd(); on SLUICE_OK *fd is the caller's, and closing it ends
 * the tunnel. On failure *fd is -1 and err says what failed, beginning with
 * "connect: " or "TLS: ", without the address (the caller's messages name
 * it). Results: SLUICE_ERR_IO (no connection, timeout, reset: worth
 * retrying), SLUICE_ERR_AUTH (the server's certificate failed verification,
 * or the server refused ours or wants one), SLUICE_ERR_INVALID (a
 * SLUICE_TLS_* file or setting is wrong), SLUICE_ERR_PROTOCOL (the server
 * does not speak TLS on that port), SLUICE_ERR_NOMEM, SLUICE_ERR_SYS.
 * Thread-safe. */
sluice_err sluicei_tls_open_fd(const char *host, int port, int timeout_ms, int *fd, char *err,
                               size_t errlen);

/* The same for a client that can only connect to a path (hiredis's async
 * API): the tunnel is made, and *out holds the path of a Unix socket in a
 * fresh directory of mode 0700 that waits for exactly one connection. The
 * caller connects to sluicei_tls_path(*out), then calls
 * sluicei_tls_accept(), which takes that connection, removes the socket
 * and its directory, and hands the tunnel to the relay; or, when its
 * connect failed, sluicei_tls_cancel(). Either frees *out. Errors as
 * sluicei_tls_open_fd(). */
typedef struct sluicei_tls_pending sluicei_tls_pending;
typedef struct sluicei_tunnel sluicei_tunnel;
sluice_err sluicei_tls_open_path(const char *host, int port, int timeout_ms,
                                 sluicei_tls_pending **out, char *err, size_t errlen);
const char *sluicei_tls_path(const sluicei_tls_pending *p);
/* ref, when not NULL, gets a reference to the tunnel on SLUICE_OK (else
 * NULL), for sluicei_tunnel_write(); the caller gives it back with
 * sluicei_tunnel_release() once it writes no more. */
sluice_err sluicei_tls_accept(sluicei_tls_pending *p, sluicei_tunnel **ref, char *err,
                              size_t errlen);
void sluicei_tls_cancel(sluicei_tls_pending *p);   /* NULL is a no-op */

/* Writes buf into the tunnel's TLS connection from the calling thread,
 * after whatever hiredis wrote into its end before (which the caller must
 * no longer write to): returns 0 once every byte is in the kernel's socket
 * buffer, as a write to a plain socket would, so that a process killed
 * right after loses none of it. Waits for room up to deadline_ms
 * (sluicei_now_ms()); -1 when that passes first or the tunnel is over or
 * failed (what was not written then still goes, in order, if it can).
 * Thread-safe against the relay. */
int sluicei_tunnel_write(sluicei_tunnel *t, const void *buf, size_t len, int64_t deadline_ms);
/* The TCP socket under the tunnel's TLS connection, for socket options
 * (corking) only; it stays open as long as the reference. */
int sluicei_tunnel_tcp_fd(const sluicei_tunnel *t);
/* Gives back a reference from sluicei_tls_accept(); NULL is a no-op. */
void sluicei_tunnel_release(sluicei_tunnel *t);

#endif
