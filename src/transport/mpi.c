/*
 * mpi.c - the MPI transport (docs/transport.md).
 *
 * One communication thread per process makes every MPI call lade makes but
 * the allgathers (the loader's open, lade_loader_allgather), which run on the
 * caller's thread beside it: lade asks for MPI_THREAD_MULTIPLE when it
 * initialises MPI itself (with only MPI_THREAD_SERIALIZED the transport runs
 * and the allgather is refused); when another library did - mpi4py,
 * torch.distributed - MPI must provide MPI_THREAD_MULTIPLE, since that
 * library's calls run beside ours. MPI is
 * initialised by that thread only if nobody has, and finalised at process
 * exit only if lade initialised it.
 *
 * Each loader is a channel with its own communicator (MPI_Comm_idup of
 * MPI_COMM_WORLD, so loaders never see each other's messages). The thread
 * loops over the channels: it serves queued sends (the serve() callback
 * copies the bytes; a sample whose admit is still being read is retried,
 * and after LADE__PUSHQ_ADMIT_WAIT_S served from storage; pushq.h), posts
 * them as MPI_Isend of one message [header | bytes], probes for arrived
 * messages and stores them by (step, sample) for recv(), and completes
 * finished sends. When nothing happens it sleeps, backing off from 20 us to
 * 1 ms.
 *
 * Bounds: opening (the collective communicator duplication and the settings
 * check) and every recv wait at most timeout_ms; a peer that died or stopped
 * makes the others fail with an error naming it and the step. Closing
 * flushes the queued sends, then exchanges a DONE message with every peer
 * (draining what still arrives) so no send is left unmatched, also bounded.
 * A learner that saw a peer time out and then misses that peer's DONE at
 * close aborts the job (MPI_Abort): MPI_Finalize would wait for the stopped
 * peer without bound.
 *
 * Backpressure: every learner tells its peers (TAG_GRANT) the step below
 * which they may send to it, its consumer's step + 2 * window + 2, again
 * whenever its consumer moved by window / 2 steps; a sender posts the head
 * of its queue only below that grant, so what arrives early is bounded by
 * the receiver's own window, whatever the lead of the senders.
 *
 * Integrity: each message carries the checksum of its payload (the sender's
 * bytes), checked by the receiver before the bytes are handed out.
 *
 * Locks: each channel's `mu` guards its queue, arrived messages, counters
 * and flags; `g.mu` guards the channel list and is held by the thread while
 * it works on the channels (so a channel unlinked under it is no longer
 * touched). Order: g.mu, then a channel's mu. serve() is called with g.mu
 * held and no channel lock.
 */
#ifdef LADE_HAVE_MPI
#include <errno.h>
#include <mpi.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/pushq.h"
#include "transport/transport.h"

#define TAG_DATA 7101
#define TAG_DONE 7102
#define TAG_GRANT 7103
#define MSG_MAGIC LADE__PUSHQ_MAGIC

typedef lade__pushq_hdr_t msg_hdr_t;
typedef lade__pushq_msg_t msg_t;
typedef lade__pushq_send_t sendreq_t;
#define chan_fail_locked(c, ...) lade__pushq_fail_locked(&(c)->pq, __VA_ARGS__)

typedef struct inflight {
  MPI_Request req;
  uint8_t *buf;
} inflight_t;

typedef struct chan {
  lade__transport_t base;
  lade__transport_params_t p;
  struct chan *next;
  MPI_Comm comm;
  uint32_t rank, world;

  pthread_mutex_t mu;
  pthread_cond_t cv; /* recv and wait_served waiters, open and close */
  int state;         /* OPENING, OPEN, CLOSING, CLOSED */
  lade__pushq_t pq; /* queue, arrived messages, grants, failure, counters */
  /* owned by the thread */
  inflight_t *fl;
  size_t nfl, flcap;
  uint8_t *done_from; /* close: DONE seen per rank */
  uint32_t *node_lead; /* per rank, the lowest rank on its node (node_leads); set at open */
  lade__buf_t sbuf;
} chan_t;

enum { OPENING = LADE__PUSHQ_OPENING, OPEN = LADE__PUSHQ_OPEN, CLOSING = LADE__PUSHQ_CLOSING,
       CLOSED = LADE__PUSHQ_CLOSED };

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_once_t once;
  bool started, stop, we_init, init_done;
  int prov; /* the thread level MPI provides */
  int init_rc;
  char init_msg[512];
  pthread_t thread;
  chan_t *chans;
  int world_rank, world_size;
  char lost_at_exit[1400]; /* set: abort instead of MPI_Finalize */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .once = PTHREAD_ONCE_INIT};

static const char *mpi_err(int rc, char *buf) {
  int n = 0;
  if (MPI_Error_string(rc, buf, &n) != MPI_SUCCESS) snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
  return buf;
}

/* ------------------------------------------------------------ the thread */

/* Polls a non-blocking collective until it completes or `limit` seconds
 * past t0; *done says which. Returns the MPI code. */
static int wait_request(int rc, MPI_Request *req, double t0, double limit, int *done) {
  *done = 0;
  while (rc == MPI_SUCCESS && !*done && lade__now() - t0 < limit) {
    rc = MPI_Test(req, done, MPI_STATUS_IGNORE);
    if (!*done) {
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
  }
  return rc;
}

/* Fails the open naming check i: this rank's value and every rank whose value
 * differs from it (all: w rows of n + 2 values, the count first, the node's
 * lowest rank last). */
static void checks_differ_locked(chan_t *c, const uint64_t *all, int w, uint32_t i, uint64_t mine) {
  const lade__transport_check_t *k = &c->p.checks[i];
  uint32_t n = c->p.nchecks;
  char who[768] = "";
  size_t len = 0;
  for (int r = 0; r < w && len < sizeof who - 64; r++) {
    const uint64_t *row = &all[(size_t)r * (n + 2)];
    if (row[0] == n && row[i + 1] == mine) continue;
    len += (size_t)snprintf(who + len, sizeof who - len, k->hash ? "%srank %d has %016llx" : "%srank %d has %llu",
                            len ? ", " : "", r, row[0] == n ? (unsigned long long)row[i + 1] : 0ull);
  }
  chan_fail_locked(c, k->hash ? "learners disagree on %s: rank %u has %016llx, %s (every rank must open the same "
                                "dataset with the same settings)"
                              : "learners disagree on setting '%s': rank %u has %llu, %s (every rank must run the "
                                "loader with the same settings)",
                   k->name, c->rank, (unsigned long long)mine, who);
}

/* The lowest rank (of comm) on this process's node: MPI's shared-memory
 * split, ranked by comm's rank so that its rank 0 is that lowest one. The
 * split blocks (MPI has no non-blocking form); it runs right after the idup
 * completed, which needs every rank to have joined it, so all of them reach
 * the split too. ~0u when MPI cannot tell. */
static uint32_t node_lead_of(MPI_Comm comm, int rank) {
  MPI_Comm shm = MPI_COMM_NULL;
  uint32_t lead = ~0u;
  if (MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &shm) != MPI_SUCCESS) return lead;
  MPI_Group gs, gc;
  int first = 0, in_comm = MPI_UNDEFINED;
  if (MPI_Comm_group(shm, &gs) == MPI_SUCCESS) {
    if (MPI_Comm_group(comm, &gc) == MPI_SUCCESS) {
      if (MPI_Group_translate_ranks(gs, 1, &first, gc, &in_comm) == MPI_SUCCESS && in_comm != MPI_UNDEFINED &&
          in_comm >= 0)
        lead = (uint32_t)in_comm;
      MPI_Group_free(&gc);
    }
    MPI_Group_free(&gs);
  }
  MPI_Comm_free(&shm);
  return lead;
}

/* Opening: communicator and the settings check, non-blocking so it is bounded
 * (but for the node split, node_lead_of). The same allgather carries each
 * rank's node (topology.h). */
static void chan_open_step(chan_t *c) {
  char eb[MPI_MAX_ERROR_STRING];
  MPI_Request req;
  double t0 = lade__now(), limit = c->p.timeout_ms / 1000.0;
  int done = 0;
  int rc = wait_request(MPI_Comm_idup(MPI_COMM_WORLD, &c->comm, &req), &req, t0, limit, &done);
  pthread_mutex_lock(&c->mu);
  if (rc != MPI_SUCCESS) {
    chan_fail_locked(c, "transport mpi: duplicating the communicator failed: %s", mpi_err(rc, eb));
  } else if (!done) {
    chan_fail_locked(c, "transport mpi: rank %d: the other learners did not open their loader within %u ms (one "
                     "failed to create it or was not started); every rank must create its loader", g.world_rank,
                     c->p.timeout_ms);
  }
  if (rc != MPI_SUCCESS || !done) c->state = CLOSED; /* an unfinished idup's communicator is left to MPI */
  pthread_mutex_unlock(&c->mu);
  if (rc != MPI_SUCCESS || !done) return;
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  int r = 0, w = 0;
  MPI_Comm_rank(c->comm, &r);
  MPI_Comm_size(c->comm, &w);
  c->rank = (uint32_t)r;
  c->pq.rank = c->rank;
  c->world = (uint32_t)w;
  uint32_t lead = node_lead_of(c->comm, r);
  /* every learner's settings, compared here: the first difference is named */
  uint32_t n = c->p.nchecks;
  uint64_t *all = calloc((size_t)w * (n + 2), sizeof *all), mine[64] = {0};
  if (!all || n > 62) {
    MPI_Comm_free(&c->comm);
    pthread_mutex_lock(&c->mu);
    chan_fail_locked(c, "transport mpi: out of memory for the settings check");
    c->state = CLOSED;
    pthread_mutex_unlock(&c->mu);
    free(all);
    return;
  }
  mine[0] = n;
  for (uint32_t i = 0; i < n; i++) mine[i + 1] = c->p.checks[i].value;
  mine[n + 1] = lead;
  rc = wait_request(MPI_Iallgather(mine, (int)(n + 2), MPI_UINT64_T, all, (int)(n + 2), MPI_UINT64_T, c->comm, &req),
                    &req, t0, limit, &done);
  pthread_mutex_lock(&c->mu);
  if (rc != MPI_SUCCESS || !done) {
    chan_fail_locked(c, "transport mpi: rank %u: the settings check did not complete within %u ms%s%s", c->rank,
                     c->p.timeout_ms, rc != MPI_SUCCESS ? ": " : "", rc != MPI_SUCCESS ? mpi_err(rc, eb) : "");
  } else {
    for (int k = 0; k < w && !c->pq.fatal; k++)
      for (uint32_t i = 0; i < n && !c->pq.fatal; i++) {
        uint64_t v = all[(size_t)k * (n + 2) + i + 1];
        if (all[(size_t)k * (n + 2)] != n || v != mine[i + 1])
          checks_differ_locked(c, all, w, i, mine[i + 1]);
      }
  }
  if (!c->pq.fatal) {
    c->done_from = calloc(c->world, 1);
    c->pq.grant = calloc(c->world, sizeof *c->pq.grant);
    if (!c->done_from || !c->pq.grant) chan_fail_locked(c, "transport mpi: out of memory");
  }
  /* the node split: kept only when every rank got an answer (else the
   * topology falls back to the environment) */
  bool leads = !c->pq.fatal;
  for (int k = 0; k < w && leads; k++) leads = all[(size_t)k * (n + 2) + n + 1] < (uint64_t)w;
  if (leads && (c->node_lead = malloc((size_t)w * sizeof *c->node_lead)))
    for (int k = 0; k < w; k++) c->node_lead[k] = (uint32_t)all[(size_t)k * (n + 2) + n + 1];
  bool failed = c->pq.fatal != 0;
  c->state = failed ? CLOSED : OPEN;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
  if (failed && done && rc == MPI_SUCCESS) MPI_Comm_free(&c->comm);
  free(all);
}

/* Room for one more send in flight; false (the channel failed) when out of memory. */
static bool fl_room(chan_t *c) {
  if (c->nfl < c->flcap) return true;
  size_t nc = c->flcap ? c->flcap * 2 : 64;
  inflight_t *f = realloc(c->fl, nc * sizeof *f);
  if (!f) {
    pthread_mutex_lock(&c->mu);
    chan_fail_locked(c, "transport mpi: out of memory");
    pthread_mutex_unlock(&c->mu);
    return false;
  }
  c->fl = f;
  c->flcap = nc;
  return true;
}

/* Tells every peer the step below which it may send here (backpressure):
 * at open, then whenever the consumer moved by window / 2 steps. Returns
 * how many messages were posted. */
static int chan_grants(chan_t *c) {
  uint64_t grant;
  if (!lade__pushq_grant_due(&c->pq, &grant)) return 0;
  int posted = 0;
  for (uint32_t r = 0; r < c->world; r++) {
    if (r == c->rank || !fl_room(c)) continue;
    uint64_t *v = malloc(sizeof *v);
    if (!v) break;
    *v = grant;
    if (MPI_Isend(v, (int)sizeof *v, MPI_BYTE, (int)r, TAG_GRANT, c->comm, &c->fl[c->nfl].req) != MPI_SUCCESS) {
      free(v);
      continue; /* that peer is gone: its receives report it */
    }
    c->fl[c->nfl++].buf = (uint8_t *)v;
    posted++;
  }
  return posted;
}

/* Serves and posts queued sends; returns how many were posted. */
static int chan_sends(chan_t *c) {
  int posted = 0;
  sendreq_t sr;
  uint8_t *buf;
  size_t len;
  for (int k = 0; k < 64 && lade__pushq_next(&c->pq, &c->state, &c->sbuf, &sr, &buf, &len); k++) {
    if (!fl_room(c)) {
      free(buf);
      break;
    }
    char eb[MPI_MAX_ERROR_STRING];
    int mrc = MPI_Isend(buf, (int)(sizeof(msg_hdr_t) + len), MPI_BYTE, (int)sr.dst, TAG_DATA, c->comm,
                        &c->fl[c->nfl].req);
    pthread_mutex_lock(&c->mu);
    if (mrc != MPI_SUCCESS) {
      free(buf);
      chan_fail_locked(c, "transport mpi: rank %u: sending sample %llu of step %llu to rank %u failed: %s", c->rank,
                       (unsigned long long)sr.idx, (unsigned long long)sr.q, sr.dst, mpi_err(mrc, eb));
    } else {
      c->fl[c->nfl++].buf = buf;
    }
    lade__pushq_pop_locked(&c->pq, mrc == MPI_SUCCESS, len);
    pthread_mutex_unlock(&c->mu);
    posted++;
    if (mrc != MPI_SUCCESS) break;
  }
  return posted;
}

/* Receives what arrived; returns how many messages. */
static int chan_recvs(chan_t *c) {
  int got = 0;
  char eb[MPI_MAX_ERROR_STRING];
  for (int k = 0; k < 256; k++) {
    int flag = 0;
    MPI_Status st;
    int rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->comm, &flag, &st);
    if (rc != MPI_SUCCESS) {
      pthread_mutex_lock(&c->mu);
      chan_fail_locked(c, "transport mpi: rank %u: probing for messages failed: %s", c->rank, mpi_err(rc, eb));
      pthread_mutex_unlock(&c->mu);
      return got;
    }
    if (!flag) break;
    int count = 0;
    MPI_Get_count(&st, MPI_BYTE, &count);
    uint8_t *buf = malloc(count > 0 ? (size_t)count : 1);
    if (!buf) {
      pthread_mutex_lock(&c->mu);
      chan_fail_locked(c, "transport mpi: out of memory for a %d-byte message", count);
      pthread_mutex_unlock(&c->mu);
      return got;
    }
    rc = MPI_Recv(buf, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, c->comm, MPI_STATUS_IGNORE);
    got++;
    if (rc == MPI_SUCCESS && st.MPI_TAG == TAG_GRANT && count == (int)sizeof(uint64_t)) {
      uint64_t v;
      memcpy(&v, buf, sizeof v);
      free(buf);
      pthread_mutex_lock(&c->mu);
      /* only ever raised: after a seek back, sends of later steps queued before it stay postable, so
       * they cannot hold up the replayed steps queued behind them */
      if (c->pq.grant && st.MPI_SOURCE >= 0 && (uint32_t)st.MPI_SOURCE < c->world && v > c->pq.grant[st.MPI_SOURCE])
        c->pq.grant[st.MPI_SOURCE] = v;
      pthread_mutex_unlock(&c->mu);
      continue;
    }
    if (rc == MPI_SUCCESS && st.MPI_TAG == TAG_DONE) {
      pthread_mutex_lock(&c->mu);
      if (c->done_from && st.MPI_SOURCE >= 0 && (uint32_t)st.MPI_SOURCE < c->world) c->done_from[st.MPI_SOURCE] = 1;
      pthread_mutex_unlock(&c->mu);
      free(buf);
      continue;
    }
    msg_hdr_t h;
    if (rc != MPI_SUCCESS || count < (int)sizeof h) {
      free(buf);
      pthread_mutex_lock(&c->mu);
      chan_fail_locked(c, "transport mpi: rank %u: a message from rank %d could not be received (%s)", c->rank,
                       st.MPI_SOURCE, rc != MPI_SUCCESS ? mpi_err(rc, eb) : "shorter than its header");
      pthread_mutex_unlock(&c->mu);
      return got;
    }
    memcpy(&h, buf, sizeof h);
    if (h.magic != MSG_MAGIC || h.len != (uint64_t)count - sizeof h) {
      free(buf);
      pthread_mutex_lock(&c->mu);
      chan_fail_locked(c, "transport mpi: rank %u: a malformed message from rank %d", c->rank, st.MPI_SOURCE);
      pthread_mutex_unlock(&c->mu);
      return got;
    }
    msg_t *m = malloc(sizeof *m);
    if (!m) {
      free(buf);
      pthread_mutex_lock(&c->mu);
      chan_fail_locked(c, "transport mpi: out of memory");
      pthread_mutex_unlock(&c->mu);
      return got;
    }
    memmove(buf, buf + sizeof h, h.len);
    *m = (msg_t){.q = h.q, .idx = h.idx, .src = (uint32_t)st.MPI_SOURCE, .error = h.error, .sum = h.sum,
                 .len = h.len, .data = buf};
    pthread_mutex_lock(&c->mu);
    lade__pushq_store_locked(&c->pq, m);
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
  }
  return got;
}

/* Completes finished sends; returns how many. */
static int chan_complete(chan_t *c) {
  int n = 0;
  for (size_t i = 0; i < c->nfl;) {
    int done = 0;
    MPI_Test(&c->fl[i].req, &done, MPI_STATUS_IGNORE);
    if (done) {
      free(c->fl[i].buf);
      c->fl[i] = c->fl[--c->nfl];
      n++;
    } else {
      i++;
    }
  }
  return n;
}

/* After a peer timeout (c->pq.lost), a peer that did not close its side either
 * is stopped or hung, not slow: MPI_Finalize (and any collective) would wait
 * for it without bound. The job is aborted, after saying why: Open MPI then
 * kills every process of it, a stopped one included. */
static void abort_if_lost(chan_t *c) {
  pthread_mutex_lock(&c->mu);
  bool abort_now = c->pq.lost && c->done_from && c->pq.lost_rank < c->world && !c->done_from[c->pq.lost_rank];
  uint32_t who = c->pq.lost_rank;
  char why[1024];
  snprintf(why, sizeof why, "%s", c->pq.lost_msg);
  pthread_mutex_unlock(&c->mu);
  if (!abort_now) return;
  fprintf(stderr, "lade: rank %u: %s; then rank %u did not close its side of the transport within %u ms either "
                  "(stopped or hung): aborting the MPI job (MPI_Abort), since MPI_Finalize would wait for it without "
                  "bound\n", c->rank, why, who, c->p.timeout_ms);
  fflush(stderr);
  MPI_Abort(MPI_COMM_WORLD, 1);
}

/* Closing: flush the queue, complete the sends, DONE to every peer, drain
 * until every peer's DONE (all bounded), free the communicator. */
static void chan_close_step(chan_t *c) {
  double t0 = lade__now(), limit = c->p.timeout_ms / 1000.0;
  while (lade__now() - t0 < limit) {
    pthread_mutex_lock(&c->mu);
    bool empty = !c->pq.sq_len || c->pq.fatal;
    pthread_mutex_unlock(&c->mu);
    if (empty) break;
    chan_sends(c);
    chan_recvs(c);
    chan_complete(c);
  }
  if (c->state != OPENING && c->comm != MPI_COMM_NULL) {
    static const uint8_t done = 1;
    MPI_Request *reqs = calloc(c->world, sizeof *reqs);
    for (uint32_t r = 0; reqs && r < c->world; r++)
      reqs[r] = MPI_REQUEST_NULL;
    for (uint32_t r = 0; reqs && r < c->world; r++)
      if (r != c->rank) MPI_Isend(&done, 1, MPI_BYTE, (int)r, TAG_DONE, c->comm, &reqs[r]);
    for (;;) {
      chan_recvs(c);
      chan_complete(c);
      uint32_t seen = 0;
      pthread_mutex_lock(&c->mu);
      for (uint32_t r = 0; c->done_from && r < c->world; r++) seen += r == c->rank || c->done_from[r];
      pthread_mutex_unlock(&c->mu);
      int all = 0;
      if (reqs) MPI_Testall((int)c->world, reqs, &all, MPI_STATUSES_IGNORE);
      if ((seen == c->world && all && c->nfl == 0) || lade__now() - t0 > limit) break;
      struct timespec ts = {0, 200000};
      nanosleep(&ts, NULL);
    }
    /* what is still unmatched after the bound belongs to a dead or stuck peer: leave it to MPI */
    free(reqs);
    abort_if_lost(c);
    if (c->nfl == 0) MPI_Comm_free(&c->comm);
  }
  /* sends still unmatched after the bound (a dead or stuck peer): MPI may
   * still read their buffers, so they are left allocated */
  c->nfl = 0;
  pthread_mutex_lock(&c->mu);
  lade__pushq_msgs_free_locked(&c->pq, UINT64_MAX);
  c->state = CLOSED;
  pthread_cond_broadcast(&c->cv);
  pthread_mutex_unlock(&c->mu);
}

static void *comm_main(void *arg) {
  (void)arg;
  int flag = 0, prov = 0;
  MPI_Initialized(&flag);
  int rc = MPI_SUCCESS;
  char eb[MPI_MAX_ERROR_STRING];
  if (!flag) {
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &prov); /* allgather runs on the caller's thread */
    if (rc == MPI_SUCCESS) g.we_init = true;
  } else {
    MPI_Query_thread(&prov);
  }
  pthread_mutex_lock(&g.mu);
  g.prov = prov;
  if (rc != MPI_SUCCESS) {
    g.init_rc = LADE_EIO;
    snprintf(g.init_msg, sizeof g.init_msg, "transport mpi: MPI_Init_thread failed: %s", mpi_err(rc, eb));
  } else if (!g.we_init && prov < MPI_THREAD_MULTIPLE) {
    g.init_rc = LADE_EUNSUPPORTED;
    snprintf(g.init_msg, sizeof g.init_msg, "transport mpi: MPI was initialised by another library with thread "
             "level %d; lade's transport thread runs beside it and needs MPI_THREAD_MULTIPLE (mpi4py's default; "
             "or let lade initialise MPI)", prov);
  } else if (g.we_init && prov < MPI_THREAD_SERIALIZED) {
    g.init_rc = LADE_EUNSUPPORTED;
    snprintf(g.init_msg, sizeof g.init_msg, "transport mpi: this MPI provides thread level %d; lade needs "
             "MPI_THREAD_SERIALIZED", prov);
  } else {
    MPI_Comm_rank(MPI_COMM_WORLD, &g.world_rank);
    MPI_Comm_size(MPI_COMM_WORLD, &g.world_size);
  }
  g.init_done = true;
  pthread_cond_broadcast(&g.cv);
  bool ok = g.init_rc == 0;
  pthread_mutex_unlock(&g.mu);
  long idle_ns = 20000;
  while (ok) {
    pthread_mutex_lock(&g.mu);
    if (g.stop && !g.chans) {
      pthread_mutex_unlock(&g.mu);
      break;
    }
    int work = 0;
    for (chan_t *c = g.chans; c; c = c->next) {
      pthread_mutex_lock(&c->mu);
      int state = c->state;
      pthread_mutex_unlock(&c->mu);
      if (state == OPENING) {
        chan_open_step(c);
        work++;
      } else if (state == OPEN) {
        work += chan_grants(c) + chan_sends(c) + chan_recvs(c) + chan_complete(c);
      } else if (state == CLOSING) {
        chan_close_step(c);
        work++;
      }
    }
    pthread_mutex_unlock(&g.mu);
    if (work) {
      idle_ns = 20000;
    } else {
      struct timespec ts = {0, idle_ns};
      nanosleep(&ts, NULL);
      if (idle_ns < 4000000) idle_ns *= 2;
    }
  }
  if (g.we_init) {
    int fin = 0;
    MPI_Finalized(&fin);
    if (!fin && g.lost_at_exit[0]) {
      fputs(g.lost_at_exit, stderr);
      fflush(stderr);
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    if (!fin) MPI_Finalize();
  }
  return NULL;
}

static void at_exit(void) {
  pthread_mutex_lock(&g.mu);
  bool started = g.started;
  /* a loader left open after a peer timeout: MPI_Finalize would wait for
   * that peer without bound (as in abort_if_lost) */
  for (chan_t *c = g.chans; c && g.we_init && !g.lost_at_exit[0]; c = c->next) {
    pthread_mutex_lock(&c->mu);
    if (c->pq.lost && c->state == OPEN)
      snprintf(g.lost_at_exit, sizeof g.lost_at_exit, "lade: rank %u: %s; the process exits with that loader open: "
               "aborting the MPI job (MPI_Abort), since MPI_Finalize would wait for that peer without bound\n",
               c->rank, c->pq.lost_msg);
    pthread_mutex_unlock(&c->mu);
  }
  g.stop = true;
  g.chans = NULL; /* loaders still open at exit: their channels are abandoned */
  pthread_mutex_unlock(&g.mu);
  if (started) pthread_join(g.thread, NULL);
}

static void start_thread(void) {
  if (pthread_create(&g.thread, NULL, comm_main, NULL) != 0) {
    g.init_rc = LADE_ETHREAD;
    snprintf(g.init_msg, sizeof g.init_msg, "transport mpi: cannot start the communication thread: %s",
             strerror(errno));
    g.init_done = true;
    return;
  }
  g.started = true;
  atexit(at_exit);
}

/* ------------------------------------------------------------ the vtable */

static int mpi_open(lade__transport_t **out, const lade__transport_params_t *p, uint32_t *rank, uint32_t *world) {
  *out = NULL;
  pthread_mutex_lock(&g.mu);
  if (!g.started && !g.init_done) start_thread();
  while (!g.init_done) pthread_cond_wait(&g.cv, &g.mu);
  if (g.init_rc) {
    int rc = lade__fail(g.init_rc, "%s", g.init_msg);
    pthread_mutex_unlock(&g.mu);
    return rc;
  }
  if (g.stop) {
    pthread_mutex_unlock(&g.mu);
    return lade__fail(LADE_ESTATE, "transport mpi: the process is exiting");
  }
  pthread_mutex_unlock(&g.mu);
  chan_t *c = calloc(1, sizeof *c);
  if (!c) return lade__fail(LADE_ENOMEM, "transport mpi: out of memory");
  c->base.ops = &lade__transport_mpi;
  c->base.pq = &c->pq;
  c->p = *p;
  c->comm = MPI_COMM_NULL;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  lade__pushq_init(&c->pq, "mpi", &c->p, &c->mu, &c->cv);
  c->state = OPENING;
  pthread_mutex_lock(&g.mu);
  c->next = g.chans;
  g.chans = c;
  pthread_mutex_unlock(&g.mu);
  pthread_mutex_lock(&c->mu);
  while (c->state == OPENING) pthread_cond_wait(&c->cv, &c->mu);
  int rc = c->pq.fatal ? lade__fail(c->pq.fatal, "%s", c->pq.fatal_msg) : 0;
  if (!rc && p->world > 1 && p->world != c->world)
    rc = lade__fail(LADE_EINVAL, "setting 'world_size' is %u but MPI runs %u processes", p->world, c->world);
  if (!rc && p->world > 1 && p->rank != c->rank)
    rc = lade__fail(LADE_EINVAL, "setting 'rank' is %u but this process is MPI rank %u", p->rank, c->rank);
  pthread_mutex_unlock(&c->mu);
  if (rc) {
    lade__transport_mpi.close(&c->base);
    return rc;
  }
  *rank = c->rank;
  *world = c->world;
  *out = &c->base;
  return 0;
}

static void mpi_close(lade__transport_t *d) {
  if (!d) return;
  chan_t *c = (chan_t *)d;
  pthread_mutex_lock(&c->mu);
  if (c->state == OPEN) c->state = CLOSING;
  struct timespec ts;
  lade__pushq_timespec_after(&ts, 3.0 * c->p.timeout_ms / 1000.0 + 1);
  while (c->state != CLOSED)
    if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT) break;
  pthread_mutex_unlock(&c->mu);
  /* unlinked under g.mu: the thread holds g.mu while it works on channels */
  pthread_mutex_lock(&g.mu);
  for (chan_t **pp = &g.chans; *pp; pp = &(*pp)->next)
    if (*pp == c) {
      *pp = c->next;
      break;
    }
  pthread_mutex_unlock(&g.mu);
  lade__pushq_free(&c->pq);
  free(c->fl);
  free(c->done_from);
  free(c->node_lead);
  lade__buf_free(&c->sbuf);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

static const uint32_t *mpi_node_leads(lade__transport_t *d) { return ((chan_t *)d)->node_lead; }

/* On the loader's communicator from the caller's thread (MPI_THREAD_MULTIPLE:
 * the communication thread's point-to-point traffic may run beside it, and
 * this is the communicator's only collective after its open), bounded. */
static int mpi_allgather(lade__transport_t *d, const void *mine, size_t len, void *all) {
  chan_t *c = (chan_t *)d;
  char eb[MPI_MAX_ERROR_STRING];
  if (len > INT_MAX) return lade__fail(LADE_ERANGE, "transport mpi: an allgather of %zu bytes per rank", len);
  if (g.prov < MPI_THREAD_MULTIPLE) /* the communication thread's calls run beside this one */
    return lade__fail(LADE_EUNSUPPORTED, "transport mpi: rank %u: an allgather needs MPI_THREAD_MULTIPLE and this MPI "
                      "provides thread level %d", c->rank, g.prov);
  MPI_Request req;
  int done = 0;
  int rc = wait_request(MPI_Iallgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, c->comm, &req), &req,
                        lade__now(), c->p.timeout_ms / 1000.0, &done);
  if (rc != MPI_SUCCESS)
    return lade__fail(LADE_EIO, "transport mpi: rank %u: an allgather over the loader's ranks failed: %s", c->rank,
                      mpi_err(rc, eb));
  if (!done)
    return lade__fail(LADE_ETIMEOUT, "transport mpi: rank %u: an allgather over the loader's ranks did not complete "
                      "within %u ms (setting peer_timeout_ms): a rank did not reach the same collective (its loader's "
                      "open, or lade_loader_allgather), or stopped", c->rank, c->p.timeout_ms);
  return 0;
}

const lade__transport_ops_t lade__transport_mpi = {"mpi", mpi_open, mpi_close, mpi_node_leads, mpi_allgather};
#else
/* built without MPI (LADE_WITH_MPI): the transport is local only */
typedef int lade__transport_mpi_unused;
#endif
