/*
 * ucx_impl.h - the UCX transport's pieces (docs/transport.md, UCX), one
 * file each, included only by them:
 *
 *   ucx_sym.c     UCX's calls, opened on first use (dlopen): lade__ucx_sym
 *   ucx_peers.c   the process's context, worker and address, the endpoint
 *                 to every peer (lade__ucx_proc), the public bootstrap calls
 *                 and the teardown at exit
 *   ucx_rdv.c     the rendezvous folder: the addresses exchanged as files
 *   ucx.c         the channels on the skeleton (comm.h): the messages (post,
 *                 receive every arrived one, complete), the open's settings
 *                 check and ABORT, the transport's vtable
 *   ucx_gather.c  the allgather: GATHER messages, numbered per channel
 *
 * Locks: the skeleton's world lock, lade__ucx_comm.mu ("the world's mu"),
 * guards lade__ucx_proc, the strays and every UCX call (the worker is
 * UCS_THREAD_MODE_SERIALIZED); a channel's mu guards its fields below but
 * those marked "thread's", and its allgather (lade__ucx_gather_t). Order:
 * the world's mu, then a channel's mu.
 */
#ifndef LADE__UCX_IMPL_H
#define LADE__UCX_IMPL_H

#include <stdbool.h>
#include <stdint.h>
#include <ucp/api/ucp.h>

#include "transport/comm.h"
#include "transport/transport.h"

/* ---- ucx_sym.c: the calls, through U once lade__ucx_load succeeded */
#define UCX_CALLS(X)                                                                                                  \
  X(ucp_config_read)                                                                                                  \
  X(ucp_config_release)                                                                                               \
  X(ucp_init_version)                                                                                                 \
  X(ucp_cleanup)                                                                                                      \
  X(ucp_worker_create)                                                                                                \
  X(ucp_worker_destroy)                                                                                               \
  X(ucp_worker_get_address)                                                                                           \
  X(ucp_worker_release_address)                                                                                       \
  X(ucp_worker_progress)                                                                                              \
  X(ucp_ep_create)                                                                                                    \
  X(ucp_ep_close_nbx)                                                                                                 \
  X(ucp_tag_send_nbx)                                                                                                 \
  X(ucp_tag_probe_nb)                                                                                                 \
  X(ucp_tag_msg_recv_nbx)                                                                                             \
  X(ucp_request_check_status)                                                                                         \
  X(ucp_request_cancel)                                                                                               \
  X(ucp_request_free)                                                                                                 \
  X(ucs_status_string)

typedef struct lade__ucx_sym {
  void *lib;
#define UCX_MEMBER(f) __typeof__(&f) f;
  UCX_CALLS(UCX_MEMBER)
#undef UCX_MEMBER
} lade__ucx_sym_t;

extern lade__ucx_sym_t lade__ucx_sym;
#define U lade__ucx_sym

/* Loads UCP and its calls once; false with the reason in why. Under the world's mu. */
bool lade__ucx_load(char *why, size_t cap);

/* ---- ucx_peers.c: the process's worker and peers, under the world's mu */
typedef struct lade__ucx_proc {
  bool inited;
  int init_rc;
  char init_msg[512];
  ucp_context_h ctx;
  ucp_worker_h worker;
  char *addr; /* this process's address text: hex, '@', the host name */
  bool peers_set;
  uint32_t rank, world;
  ucp_ep_h *ep;             /* per rank: its endpoint (NULL for this rank) */
  ucs_status_t *ep_status;  /* per rank: UCS_OK until its endpoint failed */
  uint32_t *node_lead;      /* per rank: the lowest rank with its host name */
  void (*lost)(uint32_t rank); /* a peer's endpoint failed: ucx.c's channels fail their waits on it */
} lade__ucx_proc_t;

extern lade__ucx_proc_t lade__ucx_proc;

/* UCX started and the address known, once; 0 or the (kept) failure. */
int lade__ucx_init_locked(void);
/* This process's peers, once: UCX started, and the addresses from
 * lade_ucx_set_peers() earlier or the rendezvous folder now (none for a
 * world of one). Takes the world's mu. */
int lade__ucx_bootstrap(const lade__transport_params_t *p);

/* ---- ucx_rdv.c */
/* Exchanges the addresses through the folder dir: writes this rank's
 * (`mine`), reads the others' into addr[r] (malloc'd), bounded by
 * timeout_ms. Without the world's mu. */
int lade__ucx_rendezvous(const char *dir, const char *job_id, uint32_t rank, uint32_t world, uint32_t timeout_ms,
                         const char *mine, char **addr);

/* ---- ucx.c: the channels */
/* Tags: [channel 24 bits | type 8 | sender rank 32]. */
#define LADE__UCX_CHAN_SHIFT 40
#define LADE__UCX_TYPE_SHIFT 32
#define LADE__UCX_MAX_CHECKS 62
/* the types past the skeleton's DATA, DONE and GRANT */
enum { LADE__UCX_CHECK = LADE__COMM_TYPES, LADE__UCX_GATHER, LADE__UCX_ABORT };

typedef struct lade__ucx_pending {
  void *req;
  uint8_t *buf;
  size_t len;
  ucp_tag_t tag; /* sends: 0; receives: the sender's tag */
} lade__ucx_pending_t;

/* ucx_gather.c: a channel's allgather in progress (active) or its last
 * one: its number, the caller's buffer, which ranks' bytes are in it, the
 * messages still to post (one per peer, built by the caller, handed to the
 * thread through `post`), and contributions to a later one. Under the
 * channel's mu. */
typedef struct lade__ucx_gather {
  uint64_t seq;
  bool active;
  uint8_t *all;
  size_t len;
  uint8_t *have;
  uint32_t count;
  uint8_t **out;
  bool post;
  char err[512];
  struct lade__ucx_early *early;
} lade__ucx_gather_t;

typedef struct lade__ucx_chan {
  lade__comm_chan_t ch; /* first: the skeleton's channel */
  uint32_t id;          /* its number: the nth UCX loader of the process (renumbered by a skip) */
  uint8_t *peer_lost;   /* per rank: its endpoint failed (it died); pq.peer_lost */
  uint64_t *checks_in;  /* per rank: [count, values...] of its settings check; count ~0 until it came */
  lade__ucx_gather_t ag;
  /* the thread's */
  lade__ucx_pending_t *sends, *recvs;
  size_t nsends, sends_cap, nrecvs, recvs_cap;
  double opened_at;
  bool checks_sent;
  bool skip;      /* a peer gave up opening this channel waiting for this rank: take the next number (its mu) */
  uint32_t skips; /* how many times */
} lade__ucx_chan_t;

/* The skeleton's world of the UCX transport: its lock, channels and thread
 * (defined in ucx_peers.c; its ops are ucx.c's, set at its first open). */
extern lade__comm_t lade__ucx_comm;

static inline ucp_tag_t lade__ucx_tag(uint32_t chan, int type, uint32_t src) {
  return ((ucp_tag_t)(chan & 0xffffff) << LADE__UCX_CHAN_SHIFT) | ((ucp_tag_t)type << LADE__UCX_TYPE_SHIFT) | src;
}
static inline uint32_t lade__ucx_tag_chan(ucp_tag_t tag) { return (uint32_t)(tag >> LADE__UCX_CHAN_SHIFT); }
static inline uint32_t lade__ucx_tag_src(ucp_tag_t tag) { return (uint32_t)(tag & 0xffffffffu); }

/* ---- ucx_peers.c: posting, under the world's mu */
/* Room for one more pending request in *v (n used of *cap). */
bool lade__ucx_room(lade__ucx_pending_t **v, size_t n, size_t *cap);
/* Posts one message with tag to rank dst, its request kept in v; buf is the
 * send's from here on. UCS_OK, or why not (buf freed). */
ucs_status_t lade__ucx_post_in(lade__ucx_pending_t **v, size_t *n, size_t *cap, uint32_t dst, ucp_tag_t tag,
                               uint8_t *buf, size_t len);
/* Posts one message of type to rank dst on channel c (lade__ucx_post_in into c's sends). */
ucs_status_t lade__ucx_post(lade__ucx_chan_t *c, uint32_t dst, int type, uint8_t *buf, size_t len);

/* ---- ucx_gather.c */
/* Takes one GATHER message from src (buf malloc'd, owned from here). Under c's mu. */
void lade__ucx_gather_take_locked(lade__ucx_chan_t *c, uint32_t src, uint8_t *buf, size_t len);
/* The thread: posts the parts of an allgather the caller started (open_pass). */
int lade__ucx_gather_post(lade__comm_chan_t *ch);
/* Frees what the allgather keeps (the channel closed). */
void lade__ucx_gather_free(lade__ucx_chan_t *c);
/* The transport's allgather (transport.h). */
int lade__ucx_allgather(lade__transport_t *d, const void *mine, size_t len, void *all);

#endif
