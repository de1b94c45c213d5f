/*
 * mpi.c - the MPI transport (docs/transport.md).
 *
 * One communication thread per process makes every MPI call lade makes (so
 * MPI_THREAD_SERIALIZED is enough when lade initialises MPI itself; when
 * another library did - mpi4py, torch.distributed - MPI must provide
 * MPI_THREAD_MULTIPLE, since that library's calls run beside ours). MPI is
 * initialised by that thread only if nobody has, and finalised at process
 * exit only if lade initialised it.
 *
 * Each loader is a channel with its own communicator (MPI_Comm_idup of
 * MPI_COMM_WORLD, so loaders never see each other's messages). The thread
 * loops over the channels: it serves queued sends (the serve() callback
 * copies the bytes; a sample whose admit is still being read is retried,
 * and after ADMIT_WAIT_S served from storage), posts them as MPI_Isend of
 * one message [header | bytes], probes for arrived messages and stores them
 * by (step, sample) for recv(), and completes finished sends. When nothing
 * happens it sleeps, backing off from 20 us to 1 ms.
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
#include <stdarg.h>
#include <pthread.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/transport.h"

#define TAG_DATA 7101
#define TAG_DONE 7102
#define TAG_GRANT 7103
#define MSG_MAGIC 0x4c41444550454552ull /* "LADEPEER" */
#define ADMIT_WAIT_S 1.0
#define NBUCKETS 1024

typedef struct msg_hdr {
  uint64_t magic, q, idx, len;
  int64_t error; /* nonzero: the sender could not produce the bytes; the payload is its message */
  uint64_t sum;  /* payload_sum() of the payload as the sender made it */
} msg_hdr_t;

typedef struct msg {
  struct msg *next;
  uint64_t q, idx;
  uint32_t src;
  int64_t error;
  uint64_t sum;
  size_t len;
  uint8_t *data; /* len bytes */
} msg_t;

typedef struct sendreq {
  uint64_t q, idx;
  uint32_t dst;
  double first_try;
} sendreq_t;

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
  int fatal;
  char fatal_msg[1024];
  sendreq_t *sq; /* FIFO ring of queued sends, in step order */
  size_t sq_head, sq_len, sq_cap;
  size_t nmsgs; /* messages arrived and not read */
  size_t held;  /* their payload bytes */
  uint64_t *grant;     /* per peer: this learner may send it steps below grant[peer] */
  uint64_t consumed_q; /* this learner's consumer step (forget_below) */
  int lost;            /* a receive or a send waited for a peer past the timeout */
  uint32_t lost_rank;  /* that peer (the first) */
  char lost_msg[1024];
  uint64_t max_queued_q; /* +1; 0: nothing queued yet */
  msg_t *bucket[NBUCKETS];
  lade__transport_stats_t st;
  /* owned by the thread */
  inflight_t *fl;
  size_t nfl, flcap;
  uint8_t *done_from; /* close: DONE seen per rank */
  uint32_t *node_lead; /* per rank, the lowest rank on its node (node_leads); set at open */
  lade__buf_t sbuf;
  bool granted;        /* a grant was sent, at consumer step grant_at */
  uint64_t grant_at;
} chan_t;

enum { OPENING = 0, OPEN, CLOSING, CLOSED };

static struct {
  pthread_mutex_t mu;
  pthread_cond_t cv;
  pthread_once_t once;
  bool started, stop, we_init, init_done;
  int init_rc;
  char init_msg[512];
  pthread_t thread;
  chan_t *chans;
  int world_rank, world_size;
  char lost_at_exit[1400]; /* set: abort instead of MPI_Finalize */
} g = {.mu = PTHREAD_MUTEX_INITIALIZER, .cv = PTHREAD_COND_INITIALIZER, .once = PTHREAD_ONCE_INIT};

/* Steps a receiver lets its peers send ahead of its consumer. */
static uint64_t grant_ahead(const chan_t *c) { return 2 * (uint64_t)c->p.window + 2; }

static uint64_t payload_sum(uint64_t q, uint64_t idx, const void *data, size_t len) {
  return lade_checksum(data, len, lade__mix64(q) ^ idx);
}

static inline size_t bucket_of(uint64_t q, uint64_t idx) {
  return (size_t)(lade__mix64(q * 0x9e3779b97f4a7c15ull ^ idx) % NBUCKETS);
}

static void timespec_after(struct timespec *ts, double s) {
  clock_gettime(CLOCK_REALTIME, ts);
  long long ns = ts->tv_nsec + (long long)(s * 1e9);
  ts->tv_sec += (time_t)(ns / 1000000000LL);
  ts->tv_nsec = (long)(ns % 1000000000LL);
}

static void chan_fail_locked(chan_t *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void chan_fail_locked(chan_t *c, const char *fmt, ...) {
  if (c->fatal) return;
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(c->fatal_msg, sizeof c->fatal_msg, fmt, ap);
  va_end(ap);
  c->fatal = LADE_EIO;
  pthread_cond_broadcast(&c->cv);
}

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
    for (int k = 0; k < w && !c->fatal; k++)
      for (uint32_t i = 0; i < n && !c->fatal; i++) {
        uint64_t v = all[(size_t)k * (n + 2) + i + 1];
        if (all[(size_t)k * (n + 2)] != n || v != mine[i + 1])
          checks_differ_locked(c, all, w, i, mine[i + 1]);
      }
  }
  if (!c->fatal) {
    c->done_from = calloc(c->world, 1);
    c->grant = calloc(c->world, sizeof *c->grant);
    if (!c->done_from || !c->grant) chan_fail_locked(c, "transport mpi: out of memory");
  }
  /* the node split: kept only when every rank got an answer (else the
   * topology falls back to the environment) */
  bool leads = !c->fatal;
  for (int k = 0; k < w && leads; k++) leads = all[(size_t)k * (n + 2) + n + 1] < (uint64_t)w;
  if (leads && (c->node_lead = malloc((size_t)w * sizeof *c->node_lead)))
    for (int k = 0; k < w; k++) c->node_lead[k] = (uint32_t)all[(size_t)k * (n + 2) + n + 1];
  bool failed = c->fatal != 0;
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
  pthread_mutex_lock(&c->mu);
  uint64_t q = c->consumed_q;
  pthread_mutex_unlock(&c->mu);
  uint64_t every = c->p.window / 2 ? c->p.window / 2 : 1;
  if (c->granted && q < c->grant_at + every) return 0;
  int posted = 0;
  for (uint32_t r = 0; r < c->world; r++) {
    if (r == c->rank || !fl_room(c)) continue;
    uint64_t *v = malloc(sizeof *v);
    if (!v) break;
    *v = q + grant_ahead(c);
    if (MPI_Isend(v, (int)sizeof *v, MPI_BYTE, (int)r, TAG_GRANT, c->comm, &c->fl[c->nfl].req) != MPI_SUCCESS) {
      free(v);
      continue; /* that peer is gone: its receives report it */
    }
    c->fl[c->nfl++].buf = (uint8_t *)v;
    posted++;
  }
  c->granted = true;
  c->grant_at = q;
  return posted;
}

/* Serves and posts queued sends; returns how many were posted. */
static int chan_sends(chan_t *c) {
  int posted = 0;
  for (int k = 0; k < 64; k++) {
    pthread_mutex_lock(&c->mu);
    if (!c->sq_len || c->fatal) {
      pthread_mutex_unlock(&c->mu);
      break;
    }
    sendreq_t sr = c->sq[c->sq_head];
    /* backpressure: the receiver has not let this step come yet (closing, the
     * last sends go out regardless: the peer drains them) */
    bool held_back = c->state == OPEN && sr.q >= c->grant[sr.dst];
    pthread_mutex_unlock(&c->mu);
    if (held_back) break;
    double now = lade__now();
    if (sr.first_try == 0) sr.first_try = now;
    c->sbuf.len = 0;
    int nonblock = now - sr.first_try < ADMIT_WAIT_S && c->state != CLOSING;
    lade__clear_error();
    int rc = c->p.serve(c->p.serve_ctx, sr.idx, sr.q, nonblock, &c->sbuf);
    if (rc == LADE__DIST_AGAIN) {
      pthread_mutex_lock(&c->mu);
      c->sq[c->sq_head].first_try = sr.first_try; /* the head waits; sends keep their order */
      pthread_mutex_unlock(&c->mu);
      break;
    }
    char err[1024] = "";
    if (rc) snprintf(err, sizeof err, "rank %u could not read sample %llu for step %llu: %s", c->rank,
                     (unsigned long long)sr.idx, (unsigned long long)sr.q, lade_last_error());
    size_t len = rc ? strlen(err) : c->sbuf.len;
    uint8_t *buf = malloc(sizeof(msg_hdr_t) + len);
    if (!buf) {
      pthread_mutex_lock(&c->mu);
      chan_fail_locked(c, "transport mpi: out of memory for a %zu-byte message", len);
      pthread_mutex_unlock(&c->mu);
      break;
    }
    const void *payload = rc ? (const void *)err : (const void *)c->sbuf.data;
    msg_hdr_t h = {MSG_MAGIC, sr.q, sr.idx, len, rc, payload_sum(sr.q, sr.idx, payload, len)};
    memcpy(buf, &h, sizeof h);
    memcpy(buf + sizeof h, payload, len);
    if (!fl_room(c)) {
      free(buf);
      break;
    }
    char eb[MPI_MAX_ERROR_STRING];
    int mrc = MPI_Isend(buf, (int)(sizeof h + len), MPI_BYTE, (int)sr.dst, TAG_DATA, c->comm, &c->fl[c->nfl].req);
    pthread_mutex_lock(&c->mu);
    if (mrc != MPI_SUCCESS) {
      free(buf);
      chan_fail_locked(c, "transport mpi: rank %u: sending sample %llu of step %llu to rank %u failed: %s", c->rank,
                       (unsigned long long)sr.idx, (unsigned long long)sr.q, sr.dst, mpi_err(mrc, eb));
    } else {
      c->fl[c->nfl++].buf = buf;
      c->st.sent++;
      c->st.sent_bytes += len;
    }
    c->sq_head = (c->sq_head + 1) % c->sq_cap;
    c->sq_len--;
    pthread_cond_broadcast(&c->cv);
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
      if (c->grant && st.MPI_SOURCE >= 0 && (uint32_t)st.MPI_SOURCE < c->world && v > c->grant[st.MPI_SOURCE])
        c->grant[st.MPI_SOURCE] = v;
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
    size_t b = bucket_of(h.q, h.idx);
    m->next = c->bucket[b];
    c->bucket[b] = m;
    c->nmsgs++;
    c->held += h.len;
    if (c->held > c->st.held_peak_bytes) c->st.held_peak_bytes = c->held;
    c->st.received++;
    c->st.received_bytes += h.len;
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

static void msgs_free(chan_t *c, uint64_t below) {
  for (size_t b = 0; b < NBUCKETS && c->nmsgs; b++)
    for (msg_t **pp = &c->bucket[b]; *pp;) {
      msg_t *m = *pp;
      if (m->q < below) {
        *pp = m->next;
        c->nmsgs--;
        c->held -= m->len;
        free(m->data);
        free(m);
      } else {
        pp = &m->next;
      }
    }
}

/* After a peer timeout (c->lost), a peer that did not close its side either
 * is stopped or hung, not slow: MPI_Finalize (and any collective) would wait
 * for it without bound. The job is aborted, after saying why: Open MPI then
 * kills every process of it, a stopped one included. */
static void abort_if_lost(chan_t *c) {
  pthread_mutex_lock(&c->mu);
  bool abort_now = c->lost && c->done_from && c->lost_rank < c->world && !c->done_from[c->lost_rank];
  uint32_t who = c->lost_rank;
  char why[1024];
  snprintf(why, sizeof why, "%s", c->lost_msg);
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
    bool empty = !c->sq_len || c->fatal;
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
  msgs_free(c, UINT64_MAX);
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
    rc = MPI_Init_thread(NULL, NULL, MPI_THREAD_SERIALIZED, &prov);
    if (rc == MPI_SUCCESS) g.we_init = true;
  } else {
    MPI_Query_thread(&prov);
  }
  pthread_mutex_lock(&g.mu);
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
    if (c->lost && c->state == OPEN)
      snprintf(g.lost_at_exit, sizeof g.lost_at_exit, "lade: rank %u: %s; the process exits with that loader open: "
               "aborting the MPI job (MPI_Abort), since MPI_Finalize would wait for that peer without bound\n",
               c->rank, c->lost_msg);
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
  c->p = *p;
  c->comm = MPI_COMM_NULL;
  pthread_mutex_init(&c->mu, NULL);
  pthread_cond_init(&c->cv, NULL);
  c->state = OPENING;
  pthread_mutex_lock(&g.mu);
  c->next = g.chans;
  g.chans = c;
  pthread_mutex_unlock(&g.mu);
  pthread_mutex_lock(&c->mu);
  while (c->state == OPENING) pthread_cond_wait(&c->cv, &c->mu);
  int rc = c->fatal ? lade__fail(c->fatal, "%s", c->fatal_msg) : 0;
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
  timespec_after(&ts, 3.0 * c->p.timeout_ms / 1000.0 + 1);
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
  msgs_free(c, UINT64_MAX);
  free(c->sq);
  free(c->fl);
  free(c->done_from);
  free(c->grant);
  free(c->node_lead);
  lade__buf_free(&c->sbuf);
  pthread_mutex_destroy(&c->mu);
  pthread_cond_destroy(&c->cv);
  free(c);
}

static int mpi_send(lade__transport_t *d, uint64_t q, const uint32_t *dst, const uint64_t *idx, uint32_t n) {
  chan_t *c = (chan_t *)d;
  pthread_mutex_lock(&c->mu);
  if (c->sq_len + n > c->sq_cap) {
    size_t nc = c->sq_cap ? c->sq_cap : 256;
    while (nc < c->sq_len + n) nc *= 2;
    sendreq_t *s = malloc(nc * sizeof *s);
    if (!s) {
      pthread_mutex_unlock(&c->mu);
      return lade__fail(LADE_ENOMEM, "transport mpi: out of memory for %u sends", n);
    }
    for (size_t i = 0; i < c->sq_len; i++) s[i] = c->sq[(c->sq_head + i) % c->sq_cap];
    free(c->sq);
    c->sq = s;
    c->sq_cap = nc;
    c->sq_head = 0;
  }
  for (uint32_t i = 0; i < n; i++)
    c->sq[(c->sq_head + c->sq_len++) % c->sq_cap] = (sendreq_t){.q = q, .idx = idx[i], .dst = dst[i]};
  if (q + 1 > c->max_queued_q) c->max_queued_q = q + 1;
  pthread_mutex_unlock(&c->mu);
  return 0;
}

static int mpi_wait_served(lade__transport_t *d, uint64_t q) {
  chan_t *c = (chan_t *)d;
  struct timespec ts;
  timespec_after(&ts, c->p.timeout_ms / 1000.0);
  pthread_mutex_lock(&c->mu);
  int rc = 0;
  while (!c->fatal && c->sq_len && c->sq[c->sq_head].q <= q)
    if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT && c->sq_len && c->sq[c->sq_head].q <= q) {
      const sendreq_t *h = &c->sq[c->sq_head];
      if (c->grant && h->q >= c->grant[h->dst])
        rc = lade__fail(LADE_ETIMEOUT, "transport mpi: rank %u: sample %llu of step %llu waited %u ms (setting "
                        "peer_timeout_ms) to be sent to rank %u, which lets its peers send only below step %llu "
                        "(its consumer's step plus its window): rank %u stopped or is that far behind", c->rank,
                        (unsigned long long)h->idx, (unsigned long long)h->q, c->p.timeout_ms, h->dst,
                        (unsigned long long)c->grant[h->dst], h->dst);
      else
        rc = lade__fail(LADE_ETIMEOUT, "transport mpi: rank %u: the sends of step %llu were not served within %u ms",
                        c->rank, (unsigned long long)q, c->p.timeout_ms);
      if (!c->lost) {
        c->lost = 1;
        c->lost_rank = h->dst;
        snprintf(c->lost_msg, sizeof c->lost_msg, "%s", lade_last_error());
      }
      break;
    }
  if (!rc && c->fatal) rc = lade__fail(c->fatal, "%s", c->fatal_msg);
  pthread_mutex_unlock(&c->mu);
  return rc;
}

static int mpi_recv(lade__transport_t *d, uint64_t q, uint64_t idx, uint32_t src, lade__buf_t *out) {
  chan_t *c = (chan_t *)d;
  struct timespec ts;
  timespec_after(&ts, c->p.timeout_ms / 1000.0);
  pthread_mutex_lock(&c->mu);
  msg_t *m = NULL;
  int rc = 0;
  for (;;) {
    for (msg_t **pp = &c->bucket[bucket_of(q, idx)]; *pp; pp = &(*pp)->next)
      if ((*pp)->q == q && (*pp)->idx == idx) {
        m = *pp;
        *pp = m->next;
        c->nmsgs--;
        c->held -= m->len;
        break;
      }
    if (m) break;
    if (c->fatal) {
      rc = lade__fail(c->fatal, "%s", c->fatal_msg);
      break;
    }
    if (pthread_cond_timedwait(&c->cv, &c->mu, &ts) == ETIMEDOUT) {
      rc = lade__fail(LADE_ETIMEOUT, "transport mpi: rank %u: sample %llu of step %llu did not arrive from rank %u "
                      "within %u ms (setting peer_timeout_ms): rank %u died, stopped early or is that far behind",
                      c->rank, (unsigned long long)idx, (unsigned long long)q, src, c->p.timeout_ms, src);
      if (!c->lost) {
        c->lost = 1;
        c->lost_rank = src;
        snprintf(c->lost_msg, sizeof c->lost_msg, "%s", lade_last_error());
      }
      break;
    }
  }
  pthread_mutex_unlock(&c->mu);
  if (!m) return rc;
  if (m->src != src)
    rc = lade__fail(LADE_ESTATE, "transport mpi: rank %u: sample %llu of step %llu came from rank %u, the plan says "
                    "rank %u (the learners' plans differ)", c->rank, (unsigned long long)idx, (unsigned long long)q,
                    m->src, src);
  else if (payload_sum(q, idx, m->data, m->len) != m->sum)
    rc = lade__fail(LADE_EIO, "transport mpi: rank %u: sample %llu of step %llu from rank %u arrived corrupted: its "
                    "%zu bytes do not match the checksum the sender computed", c->rank, (unsigned long long)idx,
                    (unsigned long long)q, src, m->len);
  else if (m->error)
    rc = lade__fail(LADE_EIO, "from rank %u: %.*s", src, (int)m->len, (const char *)m->data);
  else if (lade__buf_reserve(out, m->len) != 0)
    rc = lade__fail(LADE_ENOMEM, "transport mpi: out of memory for %zu bytes", m->len);
  else {
    memcpy(out->data, m->data, m->len);
    out->len = m->len;
  }
  free(m->data);
  free(m);
  return rc;
}

static void mpi_forget_below(lade__transport_t *d, uint64_t q) {
  chan_t *c = (chan_t *)d;
  pthread_mutex_lock(&c->mu);
  msgs_free(c, q);
  c->consumed_q = q; /* the thread grants the peers the steps from here on */
  pthread_mutex_unlock(&c->mu);
}

static void mpi_stats(lade__transport_t *d, lade__transport_stats_t *out) {
  chan_t *c = (chan_t *)d;
  pthread_mutex_lock(&c->mu);
  *out = c->st;
  pthread_mutex_unlock(&c->mu);
}

static const uint32_t *mpi_node_leads(lade__transport_t *d) { return ((chan_t *)d)->node_lead; }

/* On the loader's communicator from the caller's thread (MPI_THREAD_MULTIPLE:
 * the communication thread's point-to-point traffic may run beside it, and
 * this is the communicator's only collective after its open), bounded. */
static int mpi_allgather(lade__transport_t *d, const void *mine, size_t len, void *all) {
  chan_t *c = (chan_t *)d;
  char eb[MPI_MAX_ERROR_STRING];
  if (len > INT_MAX) return lade__fail(LADE_ERANGE, "transport mpi: an allgather of %zu bytes per rank", len);
  MPI_Request req;
  int done = 0;
  int rc = wait_request(MPI_Iallgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, c->comm, &req), &req,
                        lade__now(), c->p.timeout_ms / 1000.0, &done);
  if (rc != MPI_SUCCESS)
    return lade__fail(LADE_EIO, "transport mpi: rank %u: exchanging the learners' caches failed: %s", c->rank,
                      mpi_err(rc, eb));
  if (!done)
    return lade__fail(LADE_ETIMEOUT, "transport mpi: rank %u: the learners' caches were not exchanged within %u ms "
                      "(a rank did not reach its loader's open)", c->rank, c->p.timeout_ms);
  return 0;
}

const lade__transport_ops_t lade__transport_mpi = {"mpi", mpi_open, mpi_close, mpi_send, mpi_wait_served,
                                         mpi_recv, mpi_forget_below, mpi_stats, mpi_node_leads, mpi_allgather};
#else
/* built without MPI (LADE_WITH_MPI): the transport is local only */
typedef int lade__transport_mpi_unused;
#endif
