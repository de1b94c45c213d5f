/*
 * loader.c - the Loader type of the CPython extension (its fetcher thread,
 * next() with Ctrl-C and interrupt(), seek/tell/position, stats) and Iter,
 * the C iterator that hands batches to the for loop without losing one
 * (_lade.c's opening comment), plus c_run, the C API's own loop.
 */
#include "ladepy.h"

/* ------------------------------------------------------------ Loader */

typedef struct {
  PyObject_HEAD
  lade_loader_t *loader;
  /* fetcher thread */
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t cv_req, cv_done;
  int req, done, quit;
  int rc;
  lade_batch_t *out;
  char err[1024];
  batch_ref_t *pending; /* a batch taken but not handed out (interrupted): handed out next */
  int busy;
  int waiting;     /* a next() waits for the fetcher (guarded by mu) */
  int intr;        /* Loader.interrupt() asked that next() to stop (guarded by mu) */
  int interrupted; /* the last next() was interrupted: the next iter() continues there */
  pid_t pid;       /* the process that created this object (its fetcher thread and loader) */
  lade_position_t position; /* Loader(settings, position): where a resumed loader starts */
  int has_position;
  int iters;                 /* Iter objects over this loader not yet at their end */
  unsigned long iter_thread; /* the thread that last created or advanced one of them */
} LoaderObject;

/* The loader was inherited through fork(): its threads are the parent's. */
static int loader_forked(const LoaderObject *L) { return L->pid != getpid(); }


static void *fetcher_main(void *arg) {
  LoaderObject *L = arg;
  pthread_mutex_lock(&L->mu);
  for (;;) {
    while (!L->req && !L->quit) pthread_cond_wait(&L->cv_req, &L->mu);
    if (L->quit) break;
    L->req = 0;
    pthread_mutex_unlock(&L->mu);
    lade_batch_t *b = NULL;
    int rc = lade_loader_next(L->loader, &b);
    char err[sizeof L->err];
    err[0] = '\0';
    if (rc) snprintf(err, sizeof err, "%s", lade_last_error());
    pthread_mutex_lock(&L->mu);
    L->rc = rc;
    L->out = b;
    memcpy(L->err, err, sizeof err);
    L->done = 1;
    pthread_cond_signal(&L->cv_done);
  }
  pthread_mutex_unlock(&L->mu);
  return NULL;
}

static int loader_open(LoaderObject *L, PyObject *settings) {
  lade_config_t *cfg = NULL;
  int rc = lade_config_create(&cfg);
  if (rc) {
    raise_last(rc);
    return -1;
  }
  PyObject *seq = PySequence_Fast(settings, "settings must be a sequence of (key, value) pairs");
  if (!seq) goto fail;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  for (Py_ssize_t i = 0; i < n; i++) {
    PyObject *item = PySequence_Fast_GET_ITEM(seq, i);
    const char *k, *v;
    if (!PyArg_ParseTuple(item, "ss", &k, &v)) {
      Py_DECREF(seq);
      goto fail;
    }
    rc = lade_config_set(cfg, k, v);
    if (rc) {
      raise_last(rc);
      Py_DECREF(seq);
      goto fail;
    }
  }
  Py_DECREF(seq);
  if (L->has_position && (rc = lade_config_set_position(cfg, &L->position, sizeof L->position)) != 0) {
    raise_last(rc);
    goto fail;
  }
  Py_BEGIN_ALLOW_THREADS rc = lade_loader_create(&L->loader, cfg);
  if (rc) snprintf(L->err, sizeof L->err, "%s", lade_last_error());
  Py_END_ALLOW_THREADS if (rc) {
    L->loader = NULL;
    raise_lade(rc, L->err);
    goto fail;
  }
  lade_config_destroy(cfg);
  return 0;
fail:
  lade_config_destroy(cfg);
  return -1;
}

static int loader_init(LoaderObject *L, PyObject *args, PyObject *kwargs) {
  PyObject *settings, *position = Py_None;
  static char *kw[] = {"settings", "position", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O", kw, &settings, &position)) return -1;
  if (L->loader) {
    PyErr_SetString(LadeError, "loader already initialised");
    return -1;
  }
  L->has_position = 0;
  if (position != Py_None) { /* the tuple position() returns */
    unsigned long long v[12];
    if (!PyArg_ParseTuple(position, "KKKKKKKKKKKK", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8],
                          &v[9], &v[10], &v[11]))
      return -1;
    L->position = (lade_position_t){.epoch = v[0], .consumed = v[1], .shuffle_epoch = v[2],
                                    .world_size = (uint32_t)v[3], .batch_size = (uint32_t)v[4],
                                    .groups = (uint32_t)v[5], .kind = (int32_t)v[6], .samples = v[7], .seed = v[8],
                                    .base_consumed = v[9], .base_groups = (uint32_t)v[10],
                                    .base_batch = (uint32_t)v[11]};
    L->has_position = 1;
  }
  return loader_open(L, settings);
}

static PyObject *loader_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  LoaderObject *L = (LoaderObject *)type->tp_alloc(type, 0);
  if (!L) return NULL;
  pthread_mutex_init(&L->mu, NULL);
  pthread_condattr_t ca;
  pthread_condattr_init(&ca);
  pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
  pthread_cond_init(&L->cv_done, &ca);
  pthread_condattr_destroy(&ca);
  pthread_cond_init(&L->cv_req, NULL);
  L->pid = getpid();
  return (PyObject *)L;
}

static void loader_shutdown(LoaderObject *L) {
  if (loader_forked(L)) {
    /* the parent's fetcher thread and workers: nothing to stop or join
     * here; lade_loader_destroy() and lade_batch_release() leave the copy alone */
    L->thread_started = 0;
    ref_dec(L->pending);
    L->pending = NULL;
    lade_loader_destroy(L->loader);
    L->loader = NULL;
    return;
  }
  if (L->thread_started) {
    pthread_mutex_lock(&L->mu);
    L->quit = 1;
    pthread_cond_signal(&L->cv_req);
    pthread_mutex_unlock(&L->mu);
    Py_BEGIN_ALLOW_THREADS pthread_join(L->thread, NULL);
    Py_END_ALLOW_THREADS L->thread_started = 0;
  }
  ref_dec(L->pending);
  L->pending = NULL;
  if (L->loader) {
    lade_loader_t *ld = L->loader;
    L->loader = NULL;
    Py_BEGIN_ALLOW_THREADS lade_loader_destroy(ld);
    Py_END_ALLOW_THREADS
  }
}

static void loader_dealloc(LoaderObject *L) {
  int forked = loader_forked(L);
  loader_shutdown(L);
  if (forked) { /* the parent's fetcher may have held these at the fork */
    Py_TYPE(L)->tp_free((PyObject *)L);
    return;
  }
  pthread_mutex_destroy(&L->mu);
  pthread_cond_destroy(&L->cv_req);
  pthread_cond_destroy(&L->cv_done);
  Py_TYPE(L)->tp_free((PyObject *)L);
}

#define FORK_ADVICE                                                                                            \
  "lade parallelises loading itself (its threads setting): iterate one lade.Loader(..., threads=N) in the "   \
  "training process instead of wrapping it in torch.utils.data.DataLoader(num_workers>0) or a worker pool, or " \
  "create a new Loader in the child process"

static int loader_ready(LoaderObject *L) {
  if (!L->loader) {
    raise_lade(LADE_ESTATE, "loader is closed");
    return -1;
  }
  if (loader_forked(L)) {
    char msg[1024];
    snprintf(msg, sizeof msg,
             "this lade.Loader was created in process %d and this process (%d) is a fork of it (a DataLoader "
             "worker, multiprocessing, os.fork()): a loader cannot be used across fork(). " FORK_ADVICE,
             (int)L->pid, (int)getpid());
    raise_lade(LADE_ESTATE, msg);
    return -1;
  }
  if (L->busy) {
    raise_lade(LADE_ESTATE, "loader is in use by another thread");
    return -1;
  }
  return 0;
}

/* owned(who): raises "in use by another thread" when another thread is in
 * next() or iterates this loader (an Iter of it, not at its end, last
 * advanced there): load_state_dict() swaps the handle under that thread. */
static PyObject *loader_owned(LoaderObject *L, PyObject *args) {
  const char *who = "loader";
  if (!PyArg_ParseTuple(args, "|s", &who)) return NULL;
  if (L->busy || (L->iters > 0 && L->iter_thread != PyThread_get_thread_ident())) {
    char msg[256];
    snprintf(msg, sizeof msg, "%s: loader is in use by another thread (%s)", who,
             L->busy ? "it waits in next()" : "it iterates the loader");
    return raise_lade(LADE_ESTATE, msg);
  }
  Py_RETURN_NONE;
}

static PyObject *loader_close(LoaderObject *L, PyObject *unused) {
  if (L->busy) return raise_lade(LADE_ESTATE, "loader is in use by another thread");
  loader_shutdown(L);
  Py_RETURN_NONE;
}

static void add_ms(struct timespec *ts, long ms) {
  clock_gettime(CLOCK_MONOTONIC, ts);
  ts->tv_nsec += ms * 1000000L;
  while (ts->tv_nsec >= 1000000000L) {
    ts->tv_nsec -= 1000000000L;
    ts->tv_sec++;
  }
}

PyObject *batch_wrap_ref(batch_ref_t *r) {
  BatchObject *o = PyObject_New(BatchObject, &BatchType);
  if (!o) {
    ref_dec(r);
    return NULL;
  }
  o->b = r->batch;
  o->ref = r;
  return (PyObject *)o;
}

/* next() -> Batch, or None at the end of the last epoch. */
static PyObject *loader_next(LoaderObject *L, PyObject *unused) {
  if (loader_ready(L)) return NULL;
  if (L->pending) {
    batch_ref_t *r = L->pending;
    L->pending = NULL;
    L->interrupted = 0;
    return batch_wrap_ref(r);
  }
  if (!L->thread_started) {
    if (pthread_create(&L->thread, NULL, fetcher_main, L) != 0)
      return raise_lade(LADE_ETHREAD, "cannot start the fetcher thread");
    L->thread_started = 1;
  }
  L->busy = 1;
  int interrupted = 0; /* 1: a signal (the Python exception is set); 2: Loader.interrupt() */
  PyThreadState *ts = PyEval_SaveThread();
  pthread_mutex_lock(&L->mu);
  L->done = 0;
  L->req = 1;
  L->waiting = 1;
  pthread_cond_signal(&L->cv_req);
  for (;;) {
    if (L->intr && !interrupted) {
      interrupted = 2;
      lade_loader_interrupt(L->loader);
    }
    L->intr = 0;
    if (L->done) break;
    struct timespec dl;
    add_ms(&dl, 50);
    int w = pthread_cond_timedwait(&L->cv_done, &L->mu, &dl);
    if (w != ETIMEDOUT || L->done || L->intr) continue;
    if (interrupted) {
      lade_loader_interrupt(L->loader); /* the fetcher's next() may not have been waiting yet */
      continue;
    }
    pthread_mutex_unlock(&L->mu);
    PyEval_RestoreThread(ts);
    int sig = PyErr_CheckSignals();
    ts = PyEval_SaveThread();
    pthread_mutex_lock(&L->mu);
    if (sig) {
      interrupted = 1;
      lade_loader_interrupt(L->loader);
    }
  }
  L->waiting = 0;
  int rc = L->rc;
  lade_batch_t *b = L->out;
  L->out = NULL;
  char err[sizeof L->err];
  memcpy(err, L->err, sizeof err);
  pthread_mutex_unlock(&L->mu);
  PyEval_RestoreThread(ts);
  L->busy = 0;

  if (interrupted) {
    L->interrupted = 1;
    if (rc == 0 && b) {
      /* arrived while we stopped: the next call hands it out */
      L->pending = ref_new(b);
      if (!L->pending) lade_batch_release(b);
    }
    if (interrupted == 1) return NULL; /* KeyboardInterrupt from PyErr_CheckSignals */
    return raise_lade(LADE_EINTR, "lade.Loader.next: interrupted by Loader.interrupt()");
  }
  if (rc) return raise_lade(rc, err);
  if (!b) Py_RETURN_NONE;
  L->interrupted = 0;
  return batch_wrap(b);
}

/* Gives a batch that was taken but not handed out back to the loader: the
 * next next() returns it. */
static void loader_put_back(LoaderObject *L, BatchObject *o) {
  if (!o->ref) return;
  if (L->pending || !L->loader) return; /* cannot happen through Iter; the Batch keeps its reference */
  L->pending = o->ref;
  o->ref = NULL;
  L->interrupted = 1;
}

/* An integer argument (anything with __index__) as a uint64_t: 0 when it
 * is one, 1 when it is an integer out of 0..2^64-1 (a negative or huge
 * epoch must fail naming its value, not wrap as "K" wraps it), -1 with
 * TypeError when it is no integer. */
static int u64_of(PyObject *o, uint64_t *out) {
  PyObject *i = PyNumber_Index(o);
  if (!i) return -1;
  int over = 0;
  long long sv = PyLong_AsLongLongAndOverflow(i, &over);
  int bad = over < 0 || (!over && sv < 0);
  unsigned long long v = (unsigned long long)sv;
  if (!bad && over > 0) {
    v = PyLong_AsUnsignedLongLong(i);
    if (v == (unsigned long long)-1 && PyErr_Occurred()) {
      PyErr_Clear();
      bad = 1;
    }
  }
  Py_DECREF(i);
  if (bad) return 1;
  *out = v;
  return 0;
}

/* lade.Error (LADE_ERANGE): "`who`: `what` `value` is out of range: `range`". */
static PyObject *raise_range(const char *who, const char *what, PyObject *value, const char *range) {
  PyObject *m = PyUnicode_FromFormat("%s: %s %S is out of range: %s", who, what, value, range);
  if (!m) return NULL;
  const char *t = PyUnicode_AsUTF8(m);
  PyObject *r = t ? raise_lade(LADE_ERANGE, t) : NULL;
  Py_DECREF(m);
  return r;
}

/* seek(epoch, step, who="seek"): `who` names the caller (set_epoch,
 * load_state_dict) in the errors. */
static PyObject *loader_seek(LoaderObject *L, PyObject *args) {
  PyObject *eo, *so;
  const char *who = "seek";
  if (!PyArg_ParseTuple(args, "OO|s", &eo, &so, &who)) return NULL;
  if (loader_ready(L)) return NULL;
  uint64_t e = 0, s = 0;
  int re = u64_of(eo, &e), rs = re < 0 ? -1 : u64_of(so, &s);
  if (re < 0 || rs < 0) return NULL;
  if (re || rs) {
    uint64_t n = 0, spe = 0, ep = 0;
    int rc = lade_loader_info(L->loader, &n, &spe, &ep);
    if (rc) return raise_last(rc);
    char range[256];
    if (re)
      snprintf(range, sizeof range, "epochs are 0 to %llu on this loader (%llu epochs; (%llu, 0) is the end)",
               (unsigned long long)(ep ? ep - 1 : 0), (unsigned long long)ep, (unsigned long long)ep);
    else
      snprintf(range, sizeof range, "steps are 0 to %llu (%llu steps per epoch on this loader)",
               (unsigned long long)(spe ? spe - 1 : 0), (unsigned long long)spe);
    return raise_range(who, re ? "epoch" : "step", re ? eo : so, range);
  }
  ref_dec(L->pending);
  L->pending = NULL;
  L->interrupted = 0;
  int rc;
  char err[1024] = "";
  Py_BEGIN_ALLOW_THREADS rc = lade_loader_seek(L->loader, e, s);
  if (rc) snprintf(err, sizeof err, "%s%s%s", strcmp(who, "seek") ? who : "", strcmp(who, "seek") ? ": " : "",
                   lade_last_error());
  Py_END_ALLOW_THREADS if (rc) return raise_lade(rc, err);
  Py_RETURN_NONE;
}

/* The (epoch, step) of the next batch: a pending one (put back, not
 * consumed), else the loader's. 0, or -1 with the error raised. */
static int next_pos(LoaderObject *L, uint64_t *e, uint64_t *s) {
  if (L->pending) {
    *e = (uint64_t)L->pending->batch->epoch;
    *s = (uint64_t)L->pending->batch->step;
    return 0;
  }
  int rc = lade_loader_tell(L->loader, e, s);
  return rc ? (raise_last(rc), -1) : 0;
}

static PyObject *loader_tell(LoaderObject *L, PyObject *unused) {
  uint64_t e = 0, s = 0;
  if (loader_ready(L) || next_pos(L, &e, &s)) return NULL;
  return Py_BuildValue("(KK)", (unsigned long long)e, (unsigned long long)s);
}

/* position(): the global position of the next batch as the tuple
 * Loader(settings, position) takes (lade_position_t's fields in order). */
static PyObject *loader_position(LoaderObject *L, PyObject *unused) {
  uint64_t e = 0, s = 0;
  if (loader_ready(L) || next_pos(L, &e, &s)) return NULL;
  int rc;
  lade_position_t p;
  char err[1024] = "";
  Py_BEGIN_ALLOW_THREADS rc = lade_loader_position(L->loader, e, s, &p, sizeof p);
  if (rc) snprintf(err, sizeof err, "%s", lade_last_error());
  Py_END_ALLOW_THREADS if (rc) return raise_lade(rc, err);
  return Py_BuildValue("(KKKKKKLKKKKK)", (unsigned long long)p.epoch, (unsigned long long)p.consumed,
                       (unsigned long long)p.shuffle_epoch, (unsigned long long)p.world_size,
                       (unsigned long long)p.batch_size, (unsigned long long)p.groups, (long long)p.kind,
                       (unsigned long long)p.samples, (unsigned long long)p.seed,
                       (unsigned long long)p.base_consumed, (unsigned long long)p.base_groups,
                       (unsigned long long)p.base_batch);
}

static PyObject *loader_start(LoaderObject *L, PyObject *unused) {
  if (loader_ready(L)) return NULL;
  uint64_t e = 0, s = 0;
  int rc = lade_loader_start(L->loader, &e, &s);
  if (rc) return raise_last(rc);
  return Py_BuildValue("(KK)", (unsigned long long)e, (unsigned long long)s);
}

static PyObject *loader_info(LoaderObject *L, PyObject *unused) {
  if (loader_ready(L)) return NULL;
  uint64_t n = 0, spe = 0, ep = 0;
  int rc;
  char err[1024] = "";
  Py_BEGIN_ALLOW_THREADS rc = lade_loader_info(L->loader, &n, &spe, &ep);
  if (rc) snprintf(err, sizeof err, "%s", lade_last_error());
  Py_END_ALLOW_THREADS if (rc) return raise_lade(rc, err);
  return Py_BuildValue("(KKK)", (unsigned long long)n, (unsigned long long)spe, (unsigned long long)ep);
}

/* Wakes the next() that waits now (it raises lade.Error LADE_EINTR and takes
 * no batch); True if there was one, else False and nothing happens. */
static PyObject *loader_interrupt(LoaderObject *L, PyObject *unused) {
  int woke = 0;
  if (L->loader && !loader_forked(L)) {
    pthread_mutex_lock(&L->mu);
    if (L->waiting) {
      L->intr = 1;
      woke = 1;
      pthread_cond_signal(&L->cv_done);
    }
    pthread_mutex_unlock(&L->mu);
  }
  return PyBool_FromLong(woke);
}

static PyObject *loader_interrupted(LoaderObject *L, void *c) { return PyBool_FromLong(L->interrupted); }

static PyObject *stats_dict(const lade_stats_t *s) {
  PyObject *d = Py_BuildValue(
      "{sKsKsKs(KKKK)s(KKKK)sKs{sdsdsdsd}sdsdsdsdsdsKsI}", "batches", (unsigned long long)s->batches, "samples",
      (unsigned long long)s->samples, "bytes_read", (unsigned long long)s->bytes_read, "samples_by_source",
      (unsigned long long)s->samples_by_source[0], (unsigned long long)s->samples_by_source[1],
      (unsigned long long)s->samples_by_source[2], (unsigned long long)s->samples_by_source[3], "bytes_by_source",
      (unsigned long long)s->bytes_by_source[0], (unsigned long long)s->bytes_by_source[1],
      (unsigned long long)s->bytes_by_source[2], (unsigned long long)s->bytes_by_source[3], "substituted",
      (unsigned long long)s->substituted, "stage_seconds", "read", s->stage_seconds[LADE_STAGE_READ], "transform",
      s->stage_seconds[LADE_STAGE_TRANSFORM], "collate", s->stage_seconds[LADE_STAGE_COLLATE], "wait",
      s->stage_seconds[LADE_STAGE_WAIT], "first_batch_seconds", s->first_batch_seconds, "batch_latency_p50",
      s->batch_latency_p50, "batch_latency_p90", s->batch_latency_p90, "batch_latency_p99", s->batch_latency_p99,
      "batch_latency_max", s->batch_latency_max, "peak_pool_bytes", (unsigned long long)s->peak_pool_bytes,
      "threads", (unsigned int)s->threads);
  if (!d) return NULL;
  PyObject *more = Py_BuildValue(
      "{sIsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsKsIsIsIsI}", "concurrency", (unsigned int)s->concurrency, "get_requests",
      (unsigned long long)s->get_requests, "list_requests", (unsigned long long)s->list_requests, "sidecar_rejected",
      (unsigned long long)s->sidecar_rejected, "retries",
      (unsigned long long)s->retries, "remote_bytes", (unsigned long long)s->remote_bytes, "cache_misses",
      (unsigned long long)s->cache_misses, "prefetched", (unsigned long long)s->prefetched, "cache_corrupt",
      (unsigned long long)s->cache_corrupt, "fetch_size", (unsigned long long)s->fetch_size, "prefetch_threshold",
      (unsigned long long)s->prefetch_threshold, "plan_cache_hits", (unsigned long long)s->plan_cache_hits,
      "plan_fallbacks", (unsigned long long)s->plan_fallbacks, "plan_peer_storage",
      (unsigned long long)s->plan_peer_storage, "peer_messages_sent", (unsigned long long)s->peer_messages_sent,
      "peer_bytes_sent", (unsigned long long)s->peer_bytes_sent, "peer_served_from_storage",
      (unsigned long long)s->peer_served_from_storage, "peer_bytes_held_peak",
      (unsigned long long)s->peer_bytes_held_peak, "node", (unsigned int)s->node, "nodes", (unsigned int)s->nodes,
      "local_rank", (unsigned int)s->local_rank, "ranks_per_node", (unsigned int)s->ranks_per_node);
  if (more) { /* and a node-aware plan's intra-node handoffs (docs/plan.md, Nodes) */
    int bad = PyDict_Update(d, more) != 0;
    Py_DECREF(more);
    more = bad ? NULL
               : Py_BuildValue("{sKsK}", "peer_samples_node", (unsigned long long)s->peer_samples_node,
                               "peer_bytes_node", (unsigned long long)s->peer_bytes_node);
  }
  if (!more || PyDict_Update(d, more) != 0) {
    Py_XDECREF(more);
    Py_DECREF(d);
    return NULL;
  }
  Py_DECREF(more);
  PyObject *node = Py_BuildValue(
      "{sKsKsKsKsKsKsKsI}", "node_cache_used_bytes", (unsigned long long)s->node_cache_used_bytes,
      "node_cache_capacity", (unsigned long long)s->node_cache_capacity, "node_cache_segment_bytes",
      (unsigned long long)s->node_cache_segment_bytes, "node_cache_entries", (unsigned long long)s->node_cache_entries,
      "node_cache_hits", (unsigned long long)s->node_cache_hits, "node_cache_misses",
      (unsigned long long)s->node_cache_misses, "node_cache_recovered", (unsigned long long)s->node_cache_recovered,
      "node_cache_ranks", (unsigned int)s->node_cache_ranks);
  if (node) { /* and two tiers under a plan (docs/plan.md, Two tiers) */
    int bad = PyDict_Update(d, node) != 0;
    Py_DECREF(node);
    node = bad ? NULL
               : Py_BuildValue("{sKsKsKsKsKsKsKss}", "cache_stale", (unsigned long long)s->cache_stale,
                               "plan_node_reads", (unsigned long long)s->plan_node_reads,
                               "plan_admits_mem", (unsigned long long)s->plan_admits_mem,
                               "plan_admits_disk", (unsigned long long)s->plan_admits_disk, "plan_moves_up",
                               (unsigned long long)s->plan_moves_up, "plan_moves_down",
                               (unsigned long long)s->plan_moves_down, "peer_served_from_disk",
                               (unsigned long long)s->peer_served_from_disk, "image_kernels", s->image_kernels);
  }
  if (!node || PyDict_Update(d, node) != 0) {
    Py_XDECREF(node);
    Py_DECREF(d);
    return NULL;
  }
  Py_DECREF(node);
  /* device=cuda (docs/device.md): the batches' copies to the GPU */
  PyObject *dev = Py_BuildValue("{sKsKsdsd}", "h2d_bytes", (unsigned long long)s->h2d_bytes, "device_buffers",
                                (unsigned long long)s->device_buffers, "h2d_seconds", s->h2d_seconds,
                                "h2d_wait_seconds", s->h2d_wait_seconds);
  if (!dev || PyDict_Update(d, dev) != 0) {
    Py_XDECREF(dev);
    Py_DECREF(d);
    return NULL;
  }
  Py_DECREF(dev);
  return d;
}

static PyObject *loader_epoch_stats(LoaderObject *L, PyObject *args) {
  PyObject *eo;
  if (!PyArg_ParseTuple(args, "O", &eo)) return NULL;
  uint64_t epoch = 0;
  int r = u64_of(eo, &epoch);
  if (r < 0) return NULL;
  if (r) return raise_range("epoch_stats", "epoch", eo, "epochs are counted from 0");
  if (!L->loader) return raise_lade(LADE_ESTATE, "loader is closed");
  lade_epoch_stats_t e;
  int rc = lade_loader_epoch_stats(L->loader, epoch, &e, sizeof(lade_epoch_stats_t));
  if (rc) return raise_last(rc);
  return Py_BuildValue("{sKsKsKs(KKKK)s(KKKK)sdsdsKsKsKsKsKsKsKsK}", "epoch", (unsigned long long)e.epoch, "batches",
                       (unsigned long long)e.batches, "samples", (unsigned long long)e.samples, "samples_by_source",
                       (unsigned long long)e.samples_by_source[0], (unsigned long long)e.samples_by_source[1],
                       (unsigned long long)e.samples_by_source[2], (unsigned long long)e.samples_by_source[3],
                       "bytes_by_source", (unsigned long long)e.bytes_by_source[0],
                       (unsigned long long)e.bytes_by_source[1], (unsigned long long)e.bytes_by_source[2],
                       (unsigned long long)e.bytes_by_source[3], "miss_rate", e.miss_rate, "wait_seconds",
                       e.wait_seconds, "get_requests", (unsigned long long)e.get_requests, "list_requests",
                       (unsigned long long)e.list_requests, "remote_bytes", (unsigned long long)e.remote_bytes,
                       "plan_fallbacks", (unsigned long long)e.plan_fallbacks, "plan_peer_storage",
                       (unsigned long long)e.plan_peer_storage, "peer_samples_node",
                       (unsigned long long)e.peer_samples_node, "peer_bytes_node", (unsigned long long)e.peer_bytes_node,
                       "plan_node_reads", (unsigned long long)e.plan_node_reads);
}

static PyObject *loader_stats(LoaderObject *L, PyObject *unused) {
  if (!L->loader) return raise_lade(LADE_ESTATE, "loader is closed");
  lade_stats_t s;
  memset(&s, 0, sizeof s);
  int rc = lade_loader_stats(L->loader, &s, sizeof(lade_stats_t));
  if (rc) return raise_last(rc);
  return stats_dict(&s);
}

/* Waits for the listing with the GIL released; 0 or -1 with the error raised.
 * After it the class and sample accessors do not block. */
static int loader_listed(LoaderObject *L) {
  if (!L->loader) {
    raise_lade(LADE_ESTATE, "loader is closed");
    return -1;
  }
  int rc;
  char err[1024] = "";
  Py_BEGIN_ALLOW_THREADS rc = lade_loader_info(L->loader, NULL, NULL, NULL);
  if (rc) snprintf(err, sizeof err, "%s", lade_last_error());
  Py_END_ALLOW_THREADS if (rc) {
    raise_lade(rc, err);
    return -1;
  }
  return 0;
}

/* classes() -> [name, ...] (names decoded as os.fsdecode does, like os.scandir's). */
static PyObject *loader_classes(LoaderObject *L, PyObject *unused) {
  if (loader_listed(L)) return NULL;
  uint32_t n = 0;
  int rc = lade_loader_classes(L->loader, &n);
  if (rc) return raise_last(rc);
  PyObject *list = PyList_New(n);
  if (!list) return NULL;
  for (uint32_t i = 0; i < n; i++) {
    const char *name = NULL;
    rc = lade_loader_class_name(L->loader, i, &name);
    PyObject *o = rc ? raise_last(rc) : PyUnicode_DecodeFSDefault(name);
    if (!o) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, i, o);
  }
  return list;
}

static PyObject *sample_tuple(LoaderObject *L, uint64_t i, char *buf, size_t size) {
  int64_t label = -1;
  int rc = lade_loader_sample(L->loader, i, buf, size, &label);
  if (rc) return raise_last(rc);
  return Py_BuildValue("(NL)", PyUnicode_DecodeFSDefault(buf), (long long)label);
}

/* sample(index) -> (path, label) */
static PyObject *loader_sample(LoaderObject *L, PyObject *args) {
  PyObject *io;
  if (!PyArg_ParseTuple(args, "O", &io)) return NULL;
  uint64_t i = 0;
  int r = u64_of(io, &i);
  if (r < 0) return NULL;
  if (r) return raise_range("sample", "index", io, "dataset indices are counted from 0");
  if (loader_listed(L)) return NULL;
  char buf[2 * 4096 + 64];
  return sample_tuple(L, i, buf, sizeof buf);
}

/* samples() -> [(path, label), ...] in dataset index order, as ImageFolder.samples */
static PyObject *loader_samples(LoaderObject *L, PyObject *unused) {
  if (loader_listed(L)) return NULL;
  uint64_t n = 0;
  int rc = lade_loader_info(L->loader, &n, NULL, NULL);
  if (rc) return raise_last(rc);
  if (n > (uint64_t)PY_SSIZE_T_MAX) return raise_lade(LADE_ERANGE, "too many samples for a Python list");
  PyObject *list = PyList_New((Py_ssize_t)n);
  if (!list) return NULL;
  char buf[2 * 4096 + 64];
  for (uint64_t i = 0; i < n; i++) {
    PyObject *t = sample_tuple(L, i, buf, sizeof buf);
    if (!t) {
      Py_DECREF(list);
      return NULL;
    }
    PyList_SET_ITEM(list, (Py_ssize_t)i, t);
  }
  return list;
}

static PyObject *loader_closed(LoaderObject *L, void *c) { return PyBool_FromLong(L->loader == NULL); }

static PyMethodDef loader_methods[] = {
    {"owned", (PyCFunction)loader_owned, METH_VARARGS,
     "owned(who): raises lade.Error when another thread is in next() or iterates this loader"},
    {"next", (PyCFunction)loader_next, METH_NOARGS,
     "the next Batch in plan order, or None after the last epoch (GIL released; Ctrl-C interrupts)"},
    {"seek", (PyCFunction)loader_seek, METH_VARARGS,
     "seek(epoch, step, who='seek'): a value out of range raises lade.Error naming `who`, the value and the range"},
    {"tell", (PyCFunction)loader_tell, METH_NOARGS, "(epoch, step) of the next batch"},
    {"position", (PyCFunction)loader_position, METH_NOARGS,
     "the global position of the next batch (lade_position_t's fields), for Loader(settings, position)"},
    {"start", (PyCFunction)loader_start, METH_NOARGS, "(epoch, step) of the run's first batch (a resumed run's start)"},
    {"info", (PyCFunction)loader_info, METH_NOARGS, "(samples, steps_per_epoch, epochs)"},
    {"stats", (PyCFunction)loader_stats, METH_NOARGS, "counters as a dict"},
    {"epoch_stats", (PyCFunction)loader_epoch_stats, METH_VARARGS,
     "epoch_stats(epoch): that epoch's miss rate, consumer wait, requests and bytes by tier, as a dict"},
    {"interrupt", (PyCFunction)loader_interrupt, METH_NOARGS,
     "wake the next() that waits now (it raises lade.Error LADE_EINTR): True if one waited, else False (no effect)"},
    {"classes", (PyCFunction)loader_classes, METH_NOARGS, "[class name, ...]: label i is the i-th name"},
    {"sample", (PyCFunction)loader_sample, METH_VARARGS, "sample(index) -> (path, label)"},
    {"samples", (PyCFunction)loader_samples, METH_NOARGS,
     "[(path, label), ...] for every dataset index, as torchvision ImageFolder.samples"},
    {"close", (PyCFunction)loader_close, METH_NOARGS, "stop the workers; live batches stay valid"},
    {NULL, NULL, 0, NULL}};

static PyGetSetDef loader_getset[] = {{"closed", (getter)loader_closed, NULL, "True after close()", NULL},
                                      {"interrupted", (getter)loader_interrupted, NULL,
                                       "the last next() was interrupted (nothing handed out since)", NULL},
                                      {NULL, NULL, NULL, NULL, NULL}};

PyTypeObject LoaderType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lade._lade.Loader",
    .tp_basicsize = sizeof(LoaderObject),
    .tp_dealloc = (destructor)loader_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Low-level loader handle: Loader([(key, value), ...]).",
    .tp_methods = loader_methods,
    .tp_getset = loader_getset,
    .tp_init = (initproc)loader_init,
    .tp_new = loader_tp_new,
};

/* ------------------------------------------------------------ Iter */

/* Iter(loader, convert, count, meta, close): yields convert(batch) (plus the
 * Batch with meta) for `count` batches (-1: to the end). In C so that a batch
 * is never dropped between the engine and the for loop (see the top). */
typedef struct {
  PyObject_HEAD
  LoaderObject *owner;
  PyObject *conv;
  long long count;
  int meta, close;
  int live; /* counted in owner->iters: not yet at its end */
} IterObject;

/* The iterator is at its end (or gone): the loader no longer counts it. */
static void iter_done(IterObject *it) {
  if (!it->live) return;
  it->live = 0;
  it->owner->iters--;
}


static PyObject *iter_tp_new(PyTypeObject *type, PyObject *args, PyObject *kwargs) {
  PyObject *owner, *conv;
  long long count;
  int meta, close;
  if (!PyArg_ParseTuple(args, "O!OLpp", &LoaderType, &owner, &conv, &count, &meta, &close)) return NULL;
  IterObject *it = (IterObject *)type->tp_alloc(type, 0);
  if (!it) return NULL;
  Py_INCREF(owner);
  Py_INCREF(conv);
  it->owner = (LoaderObject *)owner;
  it->conv = conv;
  it->count = count;
  it->meta = meta;
  it->close = close;
  if (count != 0) {
    it->live = 1;
    it->owner->iters++;
    it->owner->iter_thread = PyThread_get_thread_ident();
  }
  return (PyObject *)it;
}

static void iter_dealloc(IterObject *it) {
  if (it->owner) iter_done(it);
  Py_XDECREF(it->owner);
  Py_XDECREF(it->conv);
  Py_TYPE(it)->tp_free((PyObject *)it);
}

static PyObject *iter_next(IterObject *it) {
  if (it->count == 0) {
    iter_done(it);
    return NULL;
  }
  if (it->live) it->owner->iter_thread = PyThread_get_thread_ident();
  PyObject *b = loader_next(it->owner, NULL);
  if (!b) return NULL;
  if (b == Py_None) {
    Py_DECREF(b);
    it->count = 0;
    iter_done(it);
    return NULL;
  }
  PyObject *out = PyObject_CallOneArg(it->conv, b);
  if (out && it->meta) {
    PyObject *tail = PyTuple_Pack(1, b);
    PyObject *both = tail ? PySequence_Concat(out, tail) : NULL;
    Py_XDECREF(tail);
    Py_SETREF(out, both);
  }
  /* a signal that arrived since the fetcher's last check: raise it now, with
   * the batch put back, rather than in the caller after the batch is gone */
  if (out && PyErr_CheckSignals() < 0) Py_CLEAR(out);
  if (!out) {
    loader_put_back(it->owner, (BatchObject *)b);
    Py_DECREF(b);
    return NULL;
  }
  if (it->close) { /* the arrays hold the buffer now */
    BatchObject *o = (BatchObject *)b;
    batch_ref_t *r = o->ref;
    o->ref = NULL;
    ref_dec(r);
  }
  Py_DECREF(b);
  if (it->count > 0 && --it->count == 0) iter_done(it);
  return out;
}

PyTypeObject IterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "lade._lade.Iter",
    .tp_basicsize = sizeof(IterObject),
    .tp_dealloc = (destructor)iter_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "Iter(loader, convert, count, meta, close): the batches of a lade.Loader, converted.",
    .tp_iter = PyObject_SelfIter,
    .tp_iternext = (iternextfunc)iter_next,
    .tp_new = iter_tp_new,
};

/*
 * c_run(settings, max_batches=-1, checksum=True) -> dict: iterates a loader
 * through the C API alone (no Python objects per batch), for checksums and the
 * C-API rate. Checksum: per batch, fnv1a over data bytes, then labels, then
 * indices (the same as the Python side computes with fnv1a()).
 */
PyObject *mod_c_run(PyObject *m, PyObject *args, PyObject *kwargs) {
  PyObject *settings;
  long long max_batches = -1;
  int checksum = 1;
  static char *kw[] = {"settings", "max_batches", "checksum", NULL};
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|Lp", kw, &settings, &max_batches, &checksum)) return NULL;
  LoaderObject tmp;
  memset(&tmp, 0, sizeof tmp);
  if (loader_open(&tmp, settings)) return NULL;
  lade_loader_t *ld = tmp.loader;
  PyObject *sums = PyList_New(0);
  if (!sums) {
    lade_loader_destroy(ld);
    return NULL;
  }
  unsigned long long batches = 0, samples = 0, bytes = 0;
  uint64_t chain = 0;
  int rc = 0;
  char err[1024] = "";
  double t0 = 0, t1 = 0;
  struct timespec a, z;
  clock_gettime(CLOCK_MONOTONIC, &a);
  for (;;) {
    if (max_batches >= 0 && (long long)batches >= max_batches) break;
    lade_batch_t *b = NULL;
    uint64_t h = FNV_OFFSET;
    Py_BEGIN_ALLOW_THREADS rc = lade_loader_next(ld, &b);
    if (rc) snprintf(err, sizeof err, "%s", lade_last_error());
    if (!rc && b && checksum && b->device >= 0) {
      snprintf(err, sizeof err, "_c_run: the batches are in GPU memory (device=cuda:%d): checksum=False", b->device);
      rc = LADE_EINVAL;
      lade_batch_release(b);
      b = NULL;
    }
    if (!rc && b && checksum) {
      chain = lade_checksum(b->data, b->nbytes, chain);
      h = fnv1a(h, b->data, b->nbytes);
      h = fnv1a(h, b->labels, (size_t)b->shape[0] * sizeof(int64_t));
      h = fnv1a(h, b->indices, (size_t)b->shape[0] * sizeof(int64_t));
    }
    Py_END_ALLOW_THREADS if (rc || !b) break;
    batches++;
    samples += (unsigned long long)b->shape[0];
    bytes += b->nbytes;
    lade_batch_release(b);
    if (checksum) {
      PyObject *v = PyLong_FromUnsignedLongLong(h);
      if (!v || PyList_Append(sums, v)) {
        Py_XDECREF(v);
        Py_DECREF(sums);
        lade_loader_destroy(ld);
        return NULL;
      }
      Py_DECREF(v);
    }
  }
  clock_gettime(CLOCK_MONOTONIC, &z);
  t1 = (double)(z.tv_sec - a.tv_sec) + 1e-9 * (double)(z.tv_nsec - a.tv_nsec);
  (void)t0;
  Py_BEGIN_ALLOW_THREADS lade_loader_destroy(ld);
  Py_END_ALLOW_THREADS if (rc) {
    Py_DECREF(sums);
    return raise_lade(rc, err);
  }
  return Py_BuildValue("{sKsKsKsdsNsK}", "batches", batches, "samples", samples, "bytes", bytes, "seconds", t1,
                       "checksums", sums, "checksum", (unsigned long long)chain);
}
