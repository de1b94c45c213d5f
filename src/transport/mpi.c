/*
 * mpi.c - the MPI transport (docs/transport.md): what the skeleton
 * (comm.h: the communication thread, the channels' states, the open and
 * close waits, grants, sends and the close's DONE exchange) needs from MPI.
 *
 * The communication thread makes every MPI call lade makes but the
 * allgathers (the loader's open, lade_loader_allgather), which run on the
 * caller's thread beside it: lade asks for MPI_THREAD_MULTIPLE when it
 * initialises MPI itself (with only MPI_THREAD_SERIALIZED the transport runs
 * and the allgather is refused); when another library did - mpi4py,
 * torch.distributed - MPI must provide MPI_THREAD_MULTIPLE, since that
 * library's calls run beside ours. MPI is initialised by that thread only
 * if nobody has, and finalised at process exit only if lade initialised it.
 *
 * Each loader is a channel with its own communicator (MPI_Comm_idup of
 * MPI_COMM_WORLD, so loaders never see each other's messages). A message
 * is one MPI_Isend of [header | bytes] tagged TAG_BASE + its type (comm.h);
 * arrived ones are taken with MPI_Iprobe/MPI_Recv, finished sends completed
 * with MPI_Test.
 *
 * Bounds: opening (the collective communicator duplication and the settings
 * check, one non-blocking allgather that also carries each rank's node)
 * waits at most timeout_ms. A learner that saw a peer time out and then
 * misses that peer's DONE at close aborts the job (MPI_Abort): MPI_Finalize
 * would wait for the stopped peer without bound.
 *
 * Locks (comm.h): W.mu guards the channel list (the skeleton's) and g; a
 * channel's mu its state and push protocol; Order: W.mu, then a channel's
 * mu. A channel's fl, node_lead and comm are the thread's (node_lead and
 * comm read by the caller once open). g.cv (under W.mu) signals the end of
 * MPI's initialisation.
 */
#ifdef LADE_HAVE_MPI
#include <errno.h>
#include <limits.h>
#include <mpi.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "transport/comm.h"
#include "transport/pushq.h"
#include "transport/transport.h"

#define TAG_BASE 7100 /* + the message type: 7101 DATA, 7102 DONE, 7103 GRANT */

typedef struct inflight {
  MPI_Request req;
  uint8_t *buf;
} inflight_t;

typedef struct chan {
  lade__comm_chan_t ch; /* first: the skeleton's channel */
  MPI_Comm comm;
  /* the thread's */
  inflight_t *fl;
  size_t nfl, flcap;
  uint32_t *node_lead; /* per rank, the lowest rank on its node (node_leads); set at open */
} chan_t;

enum { OPEN = LADE__PUSHQ_OPEN, CLOSED = LADE__PUSHQ_CLOSED };

static const lade__comm_ops_t ops;
static lade__comm_t W = LADE__COMM_INIT(&ops);

static struct {
  pthread_cond_t cv;
  bool we_init, init_done;
  int prov; /* the thread level MPI provides */
  int init_rc;
  char init_msg[512];
  int world_rank;
  char lost_at_exit[1400]; /* set: abort instead of MPI_Finalize */
} g = {.cv = PTHREAD_COND_INITIALIZER};

static const char *mpi_err(int rc, char *buf) {
  int n = 0;
  if (MPI_Error_string(rc, buf, &n) != MPI_SUCCESS) snprintf(buf, MPI_MAX_ERROR_STRING, "MPI error %d", rc);
  return buf;
}

/* ------------------------------------------------------------ opening */

/* Polls a non-blocking collective until it completes or `limit` seconds
 * past t0; *done says which. Returns the MPI code. */
static int wait_request(int rc, MPI_Request *req, double t0, double limit, int *done) {
  *done = 0;
  while (rc == MPI_SUCCESS && !*done && lade__now() - t0 < limit) {
    rc = MPI_Test(req, done, MPI_STATUS_IGNORE);
    if (!*done) lade__comm_nap(200000);
  }
  return rc;
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

/* The communicator, duplicated without blocking so it is bounded; false
 * (the channel CLOSED and failed) when that failed or timed out. */
static bool open_comm(chan_t *c, double t0, double limit) {
  char eb[MPI_MAX_ERROR_STRING];
  MPI_Request req;
  int done = 0;
  int rc = wait_request(MPI_Comm_idup(MPI_COMM_WORLD, &c->comm, &req), &req, t0, limit, &done);
  pthread_mutex_lock(&c->ch.mu);
  if (rc != MPI_SUCCESS) {
    lade__comm_fail_locked(&c->ch, "transport mpi: duplicating the communicator failed: %s", mpi_err(rc, eb));
  } else if (!done) {
    lade__comm_fail_locked(&c->ch, "transport mpi: rank %d: the other learners did not open their loader within %u "
                           "ms (one failed to create it or was not started); every rank must create its loader",
                           g.world_rank, c->ch.p.timeout_ms);
  }
  if (rc != MPI_SUCCESS || !done) c->ch.state = CLOSED; /* an unfinished idup's communicator is left to MPI */
  pthread_mutex_unlock(&c->ch.mu);
  if (rc != MPI_SUCCESS || !done) return false;
  MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN);
  int r = 0, w = 0;
  MPI_Comm_rank(c->comm, &r);
  MPI_Comm_size(c->comm, &w);
  c->ch.rank = (uint32_t)r;
  c->ch.pq.rank = c->ch.rank;
  c->ch.world = (uint32_t)w;
  return true;
}

/* Opening: communicator and the settings check, non-blocking so it is
 * bounded (but for the node split, node_lead_of). The same allgather
 * carries each rank's node (topology.h): rows of [count, checks..., lead]. */
static int mpi_open_step(lade__comm_chan_t *ch) {
  chan_t *c = (chan_t *)ch;
  char eb[MPI_MAX_ERROR_STRING];
  double t0 = lade__now(), limit = ch->p.timeout_ms / 1000.0;
  if (!open_comm(c, t0, limit)) return 1;
  int w = (int)ch->world, done = 0;
  uint32_t lead = node_lead_of(c->comm, (int)ch->rank);
  uint32_t n = ch->p.nchecks;
  uint64_t *all = calloc((size_t)w * (n + 2), sizeof *all), mine[64] = {0};
  if (!all || n > 62) {
    MPI_Comm_free(&c->comm);
    pthread_mutex_lock(&ch->mu);
    lade__comm_fail_locked(ch, "transport mpi: out of memory for the settings check");
    ch->state = CLOSED;
    pthread_mutex_unlock(&ch->mu);
    free(all);
    return 1;
  }
  mine[0] = n;
  for (uint32_t i = 0; i < n; i++) mine[i + 1] = ch->p.checks[i].value;
  mine[n + 1] = lead;
  MPI_Request req;
  int rc = wait_request(MPI_Iallgather(mine, (int)(n + 2), MPI_UINT64_T, all, (int)(n + 2), MPI_UINT64_T, c->comm,
                                       &req), &req, t0, limit, &done);
  pthread_mutex_lock(&ch->mu);
  if (rc != MPI_SUCCESS || !done)
    lade__comm_fail_locked(ch, "transport mpi: rank %u: the settings check did not complete within %u ms%s%s", ch->rank,
                           ch->p.timeout_ms, rc != MPI_SUCCESS ? ": " : "", rc != MPI_SUCCESS ? mpi_err(rc, eb) : "");
  else
    lade__comm_checks_locked(ch, all, n + 2);
  if (!ch->pq.fatal && !lade__comm_chan_peers(ch, ch->world))
    lade__comm_fail_locked(ch, "transport mpi: out of memory");
  /* the node split: kept only when every rank got an answer (else the
   * topology falls back to the environment) */
  bool leads = !ch->pq.fatal;
  for (int k = 0; k < w && leads; k++) leads = all[(size_t)k * (n + 2) + n + 1] < (uint64_t)w;
  if (leads && (c->node_lead = malloc((size_t)w * sizeof *c->node_lead)))
    for (int k = 0; k < w; k++) c->node_lead[k] = (uint32_t)all[(size_t)k * (n + 2) + n + 1];
  bool failed = ch->pq.fatal != 0;
  ch->state = failed ? CLOSED : OPEN;
  pthread_cond_broadcast(&ch->cv);
  pthread_mutex_unlock(&ch->mu);
  if (failed && done && rc == MPI_SUCCESS) MPI_Comm_free(&c->comm);
  free(all);
  return 1;
}

/* ------------------------------------------------------------ messages */

/* Room for one more send in flight; false (the channel failed) when out of memory. */
static bool fl_room(chan_t *c) {
  if (c->nfl < c->flcap) return true;
  size_t nc = c->flcap ? c->flcap * 2 : 64;
  inflight_t *f = realloc(c->fl, nc * sizeof *f);
  if (!f) {
    lade__comm_fail(&c->ch, "transport mpi: out of memory");
    return false;
  }
  c->fl = f;
  c->flcap = nc;
  return true;
}

static int mpi_post(lade__comm_chan_t *ch, uint32_t dst, int type, uint8_t *buf, size_t len, char *why, size_t cap) {
  chan_t *c = (chan_t *)ch;
  char eb[MPI_MAX_ERROR_STRING];
  int rc = fl_room(c) ? MPI_Isend(buf, (int)len, MPI_BYTE, (int)dst, TAG_BASE + type, c->comm, &c->fl[c->nfl].req)
                      : MPI_ERR_NO_MEM;
  if (rc != MPI_SUCCESS) {
    free(buf);
    snprintf(why, cap, "%s", mpi_err(rc, eb));
    return -1;
  }
  c->fl[c->nfl++].buf = buf;
  return 0;
}

/* Receives what arrived; returns how many messages. */
static int mpi_recvs(lade__comm_chan_t *ch) {
  chan_t *c = (chan_t *)ch;
  int got = 0;
  char eb[MPI_MAX_ERROR_STRING];
  for (int k = 0; k < 256; k++) {
    int flag = 0, count = 0;
    MPI_Status st;
    int rc = MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, c->comm, &flag, &st);
    if (rc != MPI_SUCCESS) {
      lade__comm_fail(ch, "transport mpi: rank %u: probing for messages failed: %s", ch->rank, mpi_err(rc, eb));
      return got;
    }
    if (!flag) break;
    MPI_Get_count(&st, MPI_BYTE, &count);
    uint8_t *buf = malloc(count > 0 ? (size_t)count : 1);
    if (!buf) {
      lade__comm_fail(ch, "transport mpi: out of memory for a %d-byte message", count);
      return got;
    }
    rc = MPI_Recv(buf, count, MPI_BYTE, st.MPI_SOURCE, st.MPI_TAG, c->comm, MPI_STATUS_IGNORE);
    got++;
    if (rc != MPI_SUCCESS) {
      free(buf);
      lade__comm_fail(ch, "transport mpi: rank %u: a message from rank %d could not be received (%s)", ch->rank,
                      st.MPI_SOURCE, mpi_err(rc, eb));
      return got;
    }
    pthread_mutex_lock(&ch->mu);
    lade__comm_take_locked(ch, st.MPI_TAG - TAG_BASE, (uint32_t)st.MPI_SOURCE, buf, (size_t)count);
    pthread_mutex_unlock(&ch->mu);
  }
  return got;
}

/* Completes finished sends; returns how many. */
static int mpi_complete(lade__comm_chan_t *ch) {
  chan_t *c = (chan_t *)ch;
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

static bool mpi_busy(lade__comm_chan_t *ch) { return ((chan_t *)ch)->nfl != 0; }

/* ------------------------------------------------------------ closing */

/* After a peer timeout (pq.lost), a peer that did not close its side either
 * is stopped or hung, not slow: MPI_Finalize (and any collective) would wait
 * for it without bound. The job is aborted, after saying why: Open MPI then
 * kills every process of it, a stopped one included. */
static void abort_if_lost(lade__comm_chan_t *c) {
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

/* The close's end: sends still unmatched after the bound (a dead or stuck
 * peer) are left to MPI, which may still read their buffers, so they stay
 * allocated and the communicator is not freed. */
static void mpi_drained(lade__comm_chan_t *ch) {
  chan_t *c = (chan_t *)ch;
  abort_if_lost(ch);
  if (c->nfl == 0) MPI_Comm_free(&c->comm);
  c->nfl = 0;
}

/* ------------------------------------------------------------ the thread's start and end */

static bool mpi_begin(void) {
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
  pthread_mutex_lock(&W.mu);
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
  }
  g.init_done = true;
  pthread_cond_broadcast(&g.cv);
  bool ok = g.init_rc == 0;
  pthread_mutex_unlock(&W.mu);
  return ok;
}

static void mpi_end(void) {
  if (!g.we_init) return;
  int fin = 0;
  MPI_Finalized(&fin);
  if (!fin && g.lost_at_exit[0]) {
    fputs(g.lost_at_exit, stderr);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  if (!fin) MPI_Finalize();
}

/* A loader left open after a peer timeout: MPI_Finalize would wait for
 * that peer without bound (as in abort_if_lost). Under W.mu. */
static void lost_at_exit_locked(lade__comm_chan_t *c) {
  if (!g.we_init || g.lost_at_exit[0]) return;
  pthread_mutex_lock(&c->mu);
  if (c->pq.lost && c->state == OPEN)
    snprintf(g.lost_at_exit, sizeof g.lost_at_exit, "lade: rank %u: %s; the process exits with that loader open: "
             "aborting the MPI job (MPI_Abort), since MPI_Finalize would wait for that peer without bound\n",
             c->rank, c->pq.lost_msg);
  pthread_mutex_unlock(&c->mu);
}

static void at_exit(void) { lade__comm_stop(&W, lost_at_exit_locked); }

static const lade__comm_ops_t ops = {.name = "mpi", .idle_max_ns = 4000000, .begin = mpi_begin, .end = mpi_end,
                                     .open_step = mpi_open_step, .post = mpi_post, .recvs = mpi_recvs,
                                     .complete = mpi_complete, .busy = mpi_busy, .drained = mpi_drained};

/* ------------------------------------------------------------ the vtable */

/* The thread (and MPI) once per process; its initialisation's outcome is
 * kept (a failure fails every later open the same way). */
static int start_locked(void) {
  if (!W.started && !g.init_done) {
    int rc = lade__comm_start_locked(&W);
    if (rc) {
      g.init_rc = rc;
      snprintf(g.init_msg, sizeof g.init_msg, "%s", lade_last_error());
      g.init_done = true;
    } else {
      atexit(at_exit);
    }
  }
  while (!g.init_done) pthread_cond_wait(&g.cv, &W.mu);
  return g.init_rc ? lade__fail(g.init_rc, "%s", g.init_msg) : 0;
}

static int mpi_open(lade__transport_t **out, const lade__transport_params_t *p, uint32_t *rank, uint32_t *world) {
  *out = NULL;
  chan_t *c = calloc(1, sizeof *c);
  if (!c) return lade__fail(LADE_ENOMEM, "transport mpi: out of memory");
  lade__comm_chan_init(&c->ch, &lade__transport_mpi, "mpi", p);
  c->comm = MPI_COMM_NULL;
  pthread_mutex_lock(&W.mu);
  int rc = start_locked();
  if (!rc) rc = lade__comm_link_locked(&W, &c->ch);
  pthread_mutex_unlock(&W.mu);
  if (!rc) rc = lade__comm_wait_open(&c->ch);
  if (!rc && p->world > 1 && p->world != c->ch.world)
    rc = lade__fail(LADE_EINVAL, "setting 'world_size' is %u but MPI runs %u processes", p->world, c->ch.world);
  if (!rc && p->world > 1 && p->rank != c->ch.rank)
    rc = lade__fail(LADE_EINVAL, "setting 'rank' is %u but this process is MPI rank %u", p->rank, c->ch.rank);
  return lade__comm_open_end(&c->ch, rc, out, rank, world);
}

static void mpi_close(lade__transport_t *d) {
  if (!d) return;
  chan_t *c = (chan_t *)d;
  lade__comm_chan_close(&W, &c->ch);
  free(c->fl);
  free(c->node_lead);
  lade__comm_chan_free(&c->ch);
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
                      "provides thread level %d", c->ch.rank, g.prov);
  MPI_Request req;
  int done = 0;
  int rc = wait_request(MPI_Iallgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, c->comm, &req), &req,
                        lade__now(), c->ch.p.timeout_ms / 1000.0, &done);
  if (rc != MPI_SUCCESS)
    return lade__fail(LADE_EIO, "transport mpi: rank %u: an allgather over the loader's ranks failed: %s", c->ch.rank,
                      mpi_err(rc, eb));
  if (!done)
    return lade__fail(LADE_ETIMEOUT, "transport mpi: rank %u: an allgather over the loader's ranks did not complete "
                      "within %u ms (setting peer_timeout_ms): a rank did not reach the same collective (its loader's "
                      "open, or lade_loader_allgather), or stopped", c->ch.rank, c->ch.p.timeout_ms);
  return 0;
}

const lade__transport_ops_t lade__transport_mpi = {"mpi", mpi_open, mpi_close, mpi_node_leads, mpi_allgather};
#else
/* built without MPI (LADE_WITH_MPI): the transport is local only */
typedef int lade__transport_mpi_unused;
#endif
