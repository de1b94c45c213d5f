/*
 * ucx.c - the UCX transport (docs/transport.md, UCX): the push protocol
 * of mpi.c without an MPI launcher, for torchrun and any other way of
 * starting the ranks, on the skeleton (comm.h: the communication thread,
 * the channels' states, the open and close waits, grants, sends, the
 * close's DONE exchange). This file is the channels' part that talks to
 * UCX; the rest of the transport is ucx_impl.h's other pieces (the calls,
 * the process's worker and peers, the rendezvous folder, the allgather).
 *
 * UCX picks the transports (shared memory on one machine, TCP or RDMA
 * between machines; UCX_TLS is left to the user). Each loader is a
 * channel: the nth loader with this transport in a process is channel n on
 * every rank (loaders are opened in the same order on every rank, as MPI's
 * collective communicator duplication requires too). Messages are tagged
 * [channel 24 bits | type 8 | sender rank 32]; the thread takes every
 * message off UCX's queue (recv_any) and hands it to its channel, keeps one
 * for a channel this rank has yet to open, and drops one for a closed
 * channel (left in UCX, a large one would hold its sender's close until
 * the timeout). Opening sends the settings check to every peer and waits
 * (bounded) for every peer's (the allgather mpi.c makes). An open that
 * fails tells every peer (ABORT) which ranks it missed; one of those ranks
 * that opens that channel later takes the next number, as its peers' next
 * loader did (its own loader before failed before it opened the transport,
 * so its count fell behind theirs), and the numbers agree again. DATA,
 * GRANT and DONE are the skeleton's, with mpi.c's header, checksum, window
 * and bounds.
 *
 * Locks (ucx_impl.h): the world's mu (W.mu) guards the channel list, the
 * strays and sends of no channel (g), lade__ucx_proc and every UCX call,
 * and is held by the thread while it works on the channels; a channel's
 * mu its state, push protocol, checks_in, peer_lost, skip and allgather.
 * Order: W.mu, then a channel's mu. serve() is called with W.mu held and
 * no channel lock.
 */
#ifdef LADE_HAVE_UCX
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/comm.h"
#include "transport/pushq.h"
#include "transport/ucx_impl.h"

#define W lade__ucx_comm
#define P (&lade__ucx_proc)
#define MAX_CHECKS LADE__UCX_MAX_CHECKS
enum { OPENING = LADE__PUSHQ_OPENING, OPEN = LADE__PUSHQ_OPEN, CLOSED = LADE__PUSHQ_CLOSED };
enum { T_CHECK = LADE__UCX_CHECK, T_GATHER = LADE__UCX_GATHER, T_ABORT = LADE__UCX_ABORT };

typedef lade__ucx_chan_t chan_t;
typedef lade__ucx_pending_t pending_t;

static const lade__comm_ops_t ops;

/* Under W.mu. */
static struct {
  uint32_t next_chan; /* the channels this process numbered */
  pending_t *stray, *outs; /* receives for no open channel (recv_any); sends of no channel (aborts) */
  size_t nstray, stray_cap, nouts, outs_cap;
} g;

/* ------------------------------------------------------------ posting (under W.mu) */

static int ucx_post(lade__comm_chan_t *ch, uint32_t dst, int type, uint8_t *buf, size_t len, char *why, size_t cap) {
  ucs_status_t s = lade__ucx_post((chan_t *)ch, dst, type, buf, len);
  if (s == UCS_OK) return 0;
  snprintf(why, cap, "%s%s", U.ucs_status_string(s),
           P->ep_status[dst] != UCS_OK ? " (the connection to that rank broke: it died)" : "");
  return -1;
}

/* A peer's endpoint failed (it died, or its connection broke): its channels
 * fail the waits on it at once instead of at the timeout (the process's
 * lost hook, ucx_peers.c; under W.mu). */
static void peer_lost(uint32_t r) {
  for (lade__comm_chan_t *ch = W.chans; ch; ch = ch->next) {
    chan_t *c = (chan_t *)ch;
    pthread_mutex_lock(&ch->mu);
    if (c->peer_lost) c->peer_lost[r] = 1;
    pthread_cond_broadcast(&ch->cv);
    pthread_mutex_unlock(&ch->mu);
  }
}

/* ------------------------------------------------------------ receiving (under W.mu) */

/* A peer gave up opening this channel: [n, the ranks it missed..., its
 * error]. Under c's mu. */
static void take_abort_locked(chan_t *c, uint32_t src, const uint8_t *buf, size_t len) {
  uint32_t n = 0, r;
  bool me = false;
  if (len >= sizeof n) memcpy(&n, buf, sizeof n);
  if (n > c->ch.world || len < (n + 1) * sizeof n) n = 0, len = sizeof n;
  for (uint32_t i = 0; i < n; i++) me |= (memcpy(&r, buf + (i + 1) * sizeof r, sizeof r), r) == c->ch.rank;
  const char *why = (const char *)buf + (n + 1) * sizeof n;
  int wl = (int)(len - (n + 1) * sizeof n), pre = wl > 15 && !memcmp(why, "transport ucx: ", 15) ? 15 : 0;
  if (c->ch.state == OPENING && me) c->skip = true; /* this rank came late: the others' next loader is this one */
  else lade__comm_fail_locked(&c->ch, "transport ucx: rank %u: rank %u gave up on this loader: %.*s", c->ch.rank, src,
                              wl - pre, why + pre);
}

/* A peer's settings check, [count, values...]; a malformed one counts as a
 * check of another length, so it is named as a difference. Under c's mu. */
static void take_check_locked(chan_t *c, uint32_t src, const uint8_t *buf, size_t len) {
  uint64_t *row = &c->checks_in[(size_t)src * (MAX_CHECKS + 1)], cnt = 0;
  if (len >= sizeof cnt) memcpy(&cnt, buf, sizeof cnt);
  if (cnt <= MAX_CHECKS && len == (cnt + 1) * sizeof cnt) {
    row[0] = cnt;
    memcpy(row + 1, buf + sizeof cnt, cnt * sizeof cnt);
  } else {
    row[0] = MAX_CHECKS + 1;
  }
}

/* Takes one received message (buf malloc'd, owned from here). */
static void deliver(chan_t *c, ucp_tag_t tag, uint8_t *buf, size_t len) {
  int type = (int)((tag >> LADE__UCX_TYPE_SHIFT) & 0xff);
  uint32_t src = lade__ucx_tag_src(tag);
  if (lade__ucx_tag_chan(tag) != c->id) { /* for the number this channel had before it skipped */
    free(buf);
    return;
  }
  pthread_mutex_lock(&c->ch.mu);
  bool peer = src < c->ch.world;
  if (peer && type == T_GATHER) {
    lade__ucx_gather_take_locked(c, src, buf, len);
    buf = NULL;
  } else if (peer && (type == T_ABORT || type == T_CHECK)) {
    if (type == T_ABORT) take_abort_locked(c, src, buf, len);
    else take_check_locked(c, src, buf, len);
  } else {
    lade__comm_take_locked(&c->ch, type, src, buf, len);
    buf = NULL;
  }
  free(buf);
  pthread_cond_broadcast(&c->ch.cv);
  pthread_mutex_unlock(&c->ch.mu);
}

/* The channel open here (not closed) with number id. */
static chan_t *chan_live(uint32_t id) {
  for (lade__comm_chan_t *ch = W.chans; ch; ch = ch->next) {
    pthread_mutex_lock(&ch->mu);
    bool live = ((chan_t *)ch)->id == id && ch->state != CLOSED;
    pthread_mutex_unlock(&ch->mu);
    if (live) return (chan_t *)ch;
  }
  return NULL;
}



/* Receives every message that arrived, whatever its channel :
 * into its channel's receives when that is open here, else aside (strays):
 * kept for a channel this rank has yet to open (a peer's settings check or
 * abort comes first) until it opens, dropped for a closed one (a peer's late
 * grant, data or DONE), which in UCX's unexpected queue would stay for good,
 * the sender's large sends never completing (its close waiting out its
 * timeout). Completes the strays and the sends of no channel. */
static int recv_any(void) {
  int got = 0;
  for (int k = 0; k < 256; k++, got++) {
    ucp_tag_recv_info_t info;
    ucp_tag_message_h msg = U.ucp_tag_probe_nb(P->worker, 0, 0, 1, &info);
    if (!msg) break;
    chan_t *c = chan_live(lade__ucx_tag_chan(info.sender_tag));
    pending_t **v = c ? &c->recvs : &g.stray;
    size_t *n = c ? &c->nrecvs : &g.nstray, *cap = c ? &c->recvs_cap : &g.stray_cap;
    uint8_t *buf = malloc(info.length ? info.length : 1);
    ucp_request_param_t prm = {.op_attr_mask = 0};
    void *req = buf && lade__ucx_room(v, *n, cap) ? U.ucp_tag_msg_recv_nbx(P->worker, buf, info.length, msg, &prm)
                                        : UCS_STATUS_PTR(UCS_ERR_NO_MEMORY);
    if (!UCS_PTR_IS_ERR(req)) {
      (*v)[(*n)++] = (pending_t){.req = req, .buf = buf, .len = info.length, .tag = info.sender_tag};
      continue;
    }
    free(buf);
    if (!c) continue;
    lade__comm_fail(&c->ch, "transport ucx: rank %u: receiving a %zu-byte message from rank %u failed: %s",
                    c->ch.rank, info.length, lade__ucx_tag_src(info.sender_tag), U.ucs_status_string(UCS_PTR_STATUS(req)));
  }
  for (size_t i = 0; i < g.nstray;) {
    pending_t *p = &g.stray[i];
    ucs_status_t s = p->req ? U.ucp_request_check_status(p->req) : UCS_OK;
    if (s == UCS_INPROGRESS) {
      i++;
      continue;
    }
    if (p->req) U.ucp_request_free(p->req);
    p->req = NULL;
    uint32_t id = lade__ucx_tag_chan(p->tag);
    chan_t *c = s == UCS_OK ? chan_live(id) : NULL;
    if (!c && s == UCS_OK && id > g.next_chan) { /* kept, received */
      i++;
      continue;
    }
    pending_t done = *p;
    *p = g.stray[--g.nstray];
    if (c) deliver(c, done.tag, done.buf, done.len);
    else free(done.buf);
  }
  for (size_t i = 0; i < g.nouts;) {
    if (U.ucp_request_check_status(g.outs[i].req) == UCS_INPROGRESS) {
      i++;
      continue;
    }
    U.ucp_request_free(g.outs[i].req);
    free(g.outs[i].buf);
    g.outs[i] = g.outs[--g.nouts];
  }
  return got;
}

/* Receives (recv_any) and completes this channel's receives in flight.
 * Returns how many messages arrived. */
static int ucx_recvs(lade__comm_chan_t *ch) {
  chan_t *c = (chan_t *)ch;
  int got = recv_any();
  for (size_t i = 0; i < c->nrecvs;) {
    pending_t *p = &c->recvs[i];
    ucs_status_t s = p->req ? U.ucp_request_check_status(p->req) : UCS_OK;
    if (s == UCS_INPROGRESS) {
      i++;
      continue;
    }
    if (p->req) U.ucp_request_free(p->req);
    pending_t done = *p;
    *p = c->recvs[--c->nrecvs];
    if (s != UCS_OK) {
      free(done.buf);
      lade__comm_fail(ch, "transport ucx: rank %u: receiving a message from rank %u failed: %s", ch->rank,
                      lade__ucx_tag_src(done.tag), U.ucs_status_string(s));
      continue;
    }
    deliver(c, done.tag, done.buf, done.len);
  }
  return got;
}


static int ucx_complete(lade__comm_chan_t *ch) {
  chan_t *c = (chan_t *)ch;
  int n = 0;
  for (size_t i = 0; i < c->nsends;) {
    ucs_status_t s = U.ucp_request_check_status(c->sends[i].req);
    if (s == UCS_INPROGRESS) {
      i++;
      continue;
    }
    U.ucp_request_free(c->sends[i].req);
    free(c->sends[i].buf);
    c->sends[i] = c->sends[--c->nsends];
    n++;
  }
  return n;
}

/* Requests still in flight (a dead or stuck peer, a failed open) are
 * cancelled and released when they complete; their buffers are left to
 * UCX, which may still hold them. */
static void cancel_pending(chan_t *c) {
  for (size_t i = 0; i < c->nsends; i++) {
    U.ucp_request_cancel(P->worker, c->sends[i].req);
    U.ucp_request_free(c->sends[i].req);
  }
  for (size_t i = 0; i < c->nrecvs; i++)
    if (c->recvs[i].req) {
      U.ucp_request_cancel(P->worker, c->recvs[i].req);
      U.ucp_request_free(c->recvs[i].req);
    }
  c->nsends = c->nrecvs = 0;
}

static bool ucx_busy(lade__comm_chan_t *ch) { return ((chan_t *)ch)->nsends || ((chan_t *)ch)->nrecvs; }

static void ucx_drained(lade__comm_chan_t *ch) { cancel_pending((chan_t *)ch); }

/* Each pass: the worker's progress, and every arrived message taken off
 * UCX's queue, also with no loader open (what comes for closed ones is
 * dropped). */
static int ucx_poll(void) {
  int work = 0;
  for (int k = 0; k < 64 && U.ucp_worker_progress(P->worker); k++) work++;
  return work + recv_any();
}

/* ------------------------------------------------------------ opening (under W.mu) */


/* This rank gives up opening channel c (why: its error): every peer is
 * told, with the ranks whose settings check had not come; one of those that
 * opens this channel later takes the next number instead (it came late:
 * the others' next loader is its), the others fail at once naming why.
 * Under W.mu, not c->ch.mu. */
static void chan_abort(chan_t *c, const char *why) {
  size_t wl = strlen(why), n = 0;
  uint32_t *v = malloc((c->ch.world + 1) * sizeof *v + wl);
  if (!v) return;
  pthread_mutex_lock(&c->ch.mu);
  for (uint32_t r = 0; r < c->ch.world; r++)
    if (r != c->ch.rank && c->checks_in[(size_t)r * (MAX_CHECKS + 1)] == ~0ull) v[1 + n++] = r;
  pthread_mutex_unlock(&c->ch.mu);
  v[0] = (uint32_t)n;
  size_t len = (n + 1) * sizeof *v + wl;
  memcpy(v + n + 1, why, wl);
  for (uint32_t r = 0; r < c->ch.world; r++) {
    uint8_t *m = r == c->ch.rank ? NULL : malloc(len);
    if (m) lade__ucx_post_in(&g.outs, &g.nouts, &g.outs_cap, r, lade__ucx_tag(c->id, T_ABORT, c->ch.rank), memcpy(m, v, len), len);
  }
  free(v);
}


/* Sends this rank's settings check to every peer, once per number. */
static void send_checks(chan_t *c) {
  uint32_t n = c->ch.p.nchecks;
  c->checks_sent = true;
  c->opened_at = lade__now();
  for (uint32_t r = 0; r < c->ch.world; r++) {
    if (r == c->ch.rank) continue;
    uint64_t *v = malloc((n + 1) * sizeof *v);
    if (!v) break;
    v[0] = n;
    for (uint32_t i = 0; i < n; i++) v[i + 1] = c->ch.p.checks[i].value;
    lade__ucx_post(c, r, T_CHECK, (uint8_t *)v, (n + 1) * sizeof *v); /* a failed peer: named below */
  }
}

/* A peer gave up this number waiting for this rank (whose loader before
 * failed before it opened the transport, or came late): the numbers are the
 * process's count of loaders, so this one takes the next, as the peers'
 * next loader does, and they agree again. Called with c's mu, which it
 * releases. */
static void renumber_unlock(chan_t *c) {
  c->skip = false;
  c->skips++;
  c->checks_sent = false;
  for (uint32_t r = 0; r < c->ch.world; r++) c->checks_in[(size_t)r * (MAX_CHECKS + 1)] = ~0ull;
  pthread_mutex_unlock(&c->ch.mu);
  chan_abort(c, "it came late to this loader, which a peer had given up on, and went on to the next");
  c->id = ++g.next_chan;
}

/* Opening, one pass: the settings check goes to every peer once; the open
 * completes when every peer's has come (compared: the first difference is
 * named, as mpi.c names it), or fails past the timeout naming the ranks
 * that did not open. */
static int ucx_open_step(lade__comm_chan_t *ch) {
  chan_t *c = (chan_t *)ch;
  if (!c->checks_sent) send_checks(c);
  ucx_recvs(ch);
  ucx_complete(ch);
  pthread_mutex_lock(&ch->mu);
  if (c->skip && !ch->pq.fatal) {
    renumber_unlock(c);
    return 0;
  }
  uint32_t missing = 0, lost = 0;
  char who[512] = "";
  size_t len = 0;
  for (uint32_t r = 0; r < ch->world; r++)
    if (r != ch->rank && c->checks_in[(size_t)r * (MAX_CHECKS + 1)] == ~0ull) {
      if (missing++ < 8) len += (size_t)snprintf(who + len, sizeof who - len, "%s%u", len ? ", " : "", r);
      lost += c->peer_lost[r];
    }
  if (missing && (lost || lade__now() - c->opened_at > ch->p.timeout_ms / 1000.0))
    lade__comm_fail_locked(ch, "transport ucx: rank %u: rank%s %s%s did not open %s loader within %u ms (setting "
                           "peer_timeout_ms)%s: every rank must create its loader, with the same settings, in the "
                           "same order%s", ch->rank, missing > 1 ? "s" : "", who, missing > 8 ? ", ..." : "",
                           missing > 1 ? "their" : "its", ch->p.timeout_ms,
                           lost ? " (a connection broke: it died)" : "",
                           c->skips ? " (this rank had come late to their loader before, and waited for their next)"
                                    : "");
  if (!missing && !ch->pq.fatal) lade__comm_checks_locked(ch, c->checks_in, MAX_CHECKS + 1);
  if (ch->pq.fatal) ch->state = CLOSED;
  else if (!missing) ch->state = OPEN;
  if (ch->pq.fatal) {
    char why[sizeof ch->pq.fatal_msg];
    snprintf(why, sizeof why, "%s", ch->pq.fatal_msg);
    pthread_mutex_unlock(&ch->mu);
    cancel_pending(c);
    chan_abort(c, why);
    pthread_mutex_lock(&ch->mu);
  }
  pthread_cond_broadcast(&ch->cv);
  pthread_mutex_unlock(&ch->mu);
  return 0;
}

static const lade__comm_ops_t ops = {.name = "ucx", .idle_max_ns = 1000000, .poll = ucx_poll,
                                     .open_step = ucx_open_step, .open_pass = lade__ucx_gather_post, .post = ucx_post,
                                     .recvs = ucx_recvs, .complete = ucx_complete, .busy = ucx_busy,
                                     .drained = ucx_drained};

/* ------------------------------------------------------------ the vtable */

/* Frees what chan_new made; c is out of the list, no request in flight. */
static void chan_free(chan_t *c) {
  free(c->sends);
  free(c->recvs);
  free(c->peer_lost);
  free(c->checks_in);
  lade__ucx_gather_free(c);
  lade__comm_chan_free(&c->ch);
  free(c);
}

/* A channel of this process's world (alone: a world of its own) with its
 * tables; under W.mu. NULL when out of memory. */
static chan_t *chan_new(const lade__transport_params_t *p, bool alone) {
  chan_t *c = calloc(1, sizeof *c);
  if (!c) return NULL;
  lade__comm_chan_init(&c->ch, &lade__transport_ucx, "ucx", p);
  c->id = ++g.next_chan;
  c->ch.rank = alone ? 0 : P->rank;
  c->ch.pq.rank = c->ch.rank;
  uint32_t world = alone ? 1 : P->world;
  bool ok = lade__comm_chan_peers(&c->ch, world);
  c->peer_lost = calloc(world, 1);
  c->ch.pq.peer_lost = c->peer_lost; /* a wait for a rank whose endpoint failed fails at once */
  c->ch.pq.peer_lost_n = c->peer_lost ? world : 0;
  c->checks_in = malloc((size_t)world * (MAX_CHECKS + 1) * sizeof *c->checks_in);
  c->ag.have = calloc(world, 1);
  if (!ok || !c->peer_lost || !c->checks_in || !c->ag.have) {
    chan_free(c);
    return NULL;
  }
  for (uint32_t r = 0; r < world; r++) {
    c->checks_in[(size_t)r * (MAX_CHECKS + 1)] = ~0ull;
    c->peer_lost[r] = !alone && P->ep_status[r] != UCS_OK;
  }
  return c;
}

static int ucx_open(lade__transport_t **out, const lade__transport_params_t *p, uint32_t *rank, uint32_t *world) {
  *out = NULL;
  if (p->nchecks > MAX_CHECKS) return lade__fail(LADE_EINVAL, "transport ucx: too many settings to check");
  int rc = lade__ucx_bootstrap(p);
  if (rc) return rc;
  bool alone = p->world <= 1; /* one learner: nothing to exchange, no peers set up */
  chan_t *c = NULL;
  pthread_mutex_lock(&W.mu);
  W.ops = &ops; /* the world is ucx_peers.c's; its calls are this file's */
  P->lost = peer_lost;
  if (!alone && (p->world != P->world || p->rank != P->rank))
    rc = lade__fail(LADE_EINVAL, "transport ucx: settings 'rank' and 'world_size' say rank %u of %u, but this "
                    "process's peers were set up as rank %u of %u", p->rank, p->world, P->rank, P->world);
  else if (!alone)
    rc = lade__comm_start_locked(&W);
  if (!rc && !(c = chan_new(p, alone))) rc = lade__fail(LADE_ENOMEM, "transport ucx: out of memory");
  if (!rc && alone) c->ch.state = OPEN;
  else if (!rc) rc = lade__comm_link_locked(&W, &c->ch);
  pthread_mutex_unlock(&W.mu);
  if (!c) return rc;
  if (!rc) rc = lade__comm_wait_open(&c->ch);
  return lade__comm_open_end(&c->ch, rc, out, rank, world);
}

static void ucx_close(lade__transport_t *d) {
  if (!d) return;
  chan_t *c = (chan_t *)d;
  lade__comm_chan_close(&W, &c->ch);
  pthread_mutex_lock(&W.mu); /* UCX's calls; the thread no longer sees c */
  cancel_pending(c);
  pthread_mutex_unlock(&W.mu);
  chan_free(c);
}

/* The host names in the addresses give the nodes; set once with the peers. */
static const uint32_t *ucx_node_leads(lade__transport_t *d) {
  return ((chan_t *)d)->ch.world > 1 ? P->node_lead : NULL;
}

const lade__transport_ops_t lade__transport_ucx = {"ucx", ucx_open, ucx_close, ucx_node_leads, lade__ucx_allgather};
#else
/* built without UCX (LADE_WITH_UCX): ucx_peers.c's bootstrap calls say so */
typedef int lade__transport_ucx_unused;
#endif
