/* The C interface of libpoolrun-tls.so, the module that holds the TLS client (OpenSSL). poolrun,
 * poolctl and the agent open it with dlopen only for an https:// pool, so that a launch on an
 * http:// or local pool does not load and relocate libssl and libcrypto (about 4 ms of CPU per
 * process here). Plain C types across the boundary: the module carries its own C++ runtime. */
#ifndef POOLRUN_COMMON_TLS_MODULE_H
#define POOLRUN_COMMON_TLS_MODULE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define POOLRUN_TLS_ABI 1

typedef struct poolrun_tls_client poolrun_tls_client;
typedef struct poolrun_tls_channel poolrun_tls_channel;

/* What a failure was: retried or not by the caller. */
enum {
  POOLRUN_TLS_FAILED = 1,  /* the exchange failed (I/O, a closed connection): may be retried */
  POOLRUN_TLS_TIMEOUT = 2, /* the handshake did not finish in time */
  POOLRUN_TLS_REFUSED = 3, /* a certificate was refused, by us or by the server: retrying will not cure it */
  POOLRUN_TLS_NOT_TLS = 4, /* the server does not speak TLS */
  POOLRUN_TLS_BAD_INPUT = 5, /* a certificate, key or CA text is malformed or does not match */
};

/* Returned by read and write: wait for the descriptor to be readable or writable, then call again. */
#define POOLRUN_TLS_WANT_READ (-2)
#define POOLRUN_TLS_WANT_WRITE (-3)
/* Returned by read and write: the server refused this client's certificate (TLS 1.3 says so after
 * the handshake, at the first read), err says why. */
#define POOLRUN_TLS_REFUSED_IO (-4)

typedef struct {
  int abi; /* POOLRUN_TLS_ABI */
  /* A client context. ca: PEM certificates to trust (NULL: the system's); cert and key: a client
   * certificate (chain) and its key in PEM, or NULL; ca_name names the CA's source in messages.
   * NULL with *kind and err set on failure. */
  poolrun_tls_client* (*client_new)(const char* ca, size_t ca_len, const char* cert, size_t cert_len,
                                    const char* key, size_t key_len, const char* ca_name, int* kind,
                                    char* err, size_t err_len);
  void (*client_free)(poolrun_tls_client*);
  /* Handshakes over the connected, non-blocking descriptor fd (which stays the caller's), checking
   * the server's certificate against host (a DNS name or an IP literal). */
  poolrun_tls_channel* (*connect)(poolrun_tls_client*, int fd, const char* host, int port, int timeout_ms,
                                  int* kind, char* err, size_t err_len);
  /* Bytes moved (> 0), 0 at the end of the stream, POOLRUN_TLS_WANT_*, POOLRUN_TLS_REFUSED_IO or -1
   * with err set. */
  long (*read)(poolrun_tls_channel*, char* data, size_t size, char* err, size_t err_len);
  long (*write)(poolrun_tls_channel*, const char* data, size_t size, char* err, size_t err_len);
  /* Decrypted bytes held that a read returns without waiting on the descriptor. */
  int (*pending)(const poolrun_tls_channel*);
  void (*close)(poolrun_tls_channel*);
} poolrun_tls_api;

/* The module's one exported symbol. */
const poolrun_tls_api* poolrun_tls_module(void);

#ifdef __cplusplus
}
#endif

#endif
