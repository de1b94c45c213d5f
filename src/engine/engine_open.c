/* engine_open.c - a loader's opening and closing (engine_impl.h): the
 * source listed, the settings resolved against it (engine/resolve.c), the
 * transport, the plan cursor, the fetch stage and the transform set up in
 * lade_loader_create(), so a missing or empty dataset fails there. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/cuda.h"
#include "engine/engine_impl.h"

/* Bumped in the child of every fork() (pthread_atfork): a loader made under
 * an older value belongs to a parent process; its threads and locks do not
 * exist here, so every call on it in the child returns at once. */
atomic_uint lade__engine_fork_gen;
static pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
static void on_fork_child(void) { atomic_fetch_add_explicit(&lade__engine_fork_gen, 1, memory_order_relaxed); }
static void register_atfork(void) { pthread_atfork(NULL, NULL, on_fork_child); }

/* ------------------------------------------------------------ allocation */

void lade__engine_close_stages(lade_loader_t *L) {
  if (L->stages_closed) return;
  L->stages_closed = true;
  if (L->dist) L->dist->ops->close(L->dist); /* flushes its sends: before the fetch stage that serves them */
  L->dist = NULL;
  lade__fetch_close(L->fetch);
  L->fetch = NULL;
  if (L->xf && L->xf->destroy && L->xf_state) L->xf->destroy(L->xf_state);
  L->xf_state = NULL;
  if (L->src_ops && L->src_ops->close) L->src_ops->close(&L->src);
  lade__cursor_close(L->cursor);
  L->cursor = NULL;
  lade__trace_close(L->trace);
  L->trace = NULL;
  lade__config_wipe_secrets(&L->cfg);
}

void lade__engine_free_all(lade_loader_t *L) {
  lade__engine_close_stages(L);
  lade__pool_close(&L->pool);
  free(L->sched);
  lade__epochs_free(&L->epochs);
  pthread_mutex_destroy(&L->mu);
  pthread_cond_destroy(&L->cv_work);
  pthread_cond_destroy(&L->cv_ready);
  free(L->workers);
  free(L);
}

/* ----------------------------------------------------------------- open */

static const lade__transform_ops_t *transform_of(int t) {
  switch (t) {
    case LADE__RXF_RAW: return &lade__xform_raw;
    case LADE__RXF_NPY: return &lade__xform_npy;
    case LADE__RXF_NPZ: return &lade__xform_npz;
    case LADE__RXF_IMAGENET_TRAIN: return &lade__xform_imagenet_train;
    case LADE__RXF_IMAGENET_EVAL: return &lade__xform_imagenet_eval;
  }
  return NULL;
}

static lade__source_kind_t source_kind(const lade__source_ops_t *ops) {
#ifdef LADE_HAVE_CURL
  bool s3 = ops == &lade__source_s3;
#else
  bool s3 = false; /* no s3 source in this build */
#endif
  return (lade__source_kind_t){.name = ops->name,
                               .is_dir = ops == &lade__source_dir,
                               .is_npy = ops == &lade__source_npy,
                               .is_hdf5 = !strcmp(ops->name, "hdf5"),
                               .is_s3 = s3};
}

static uint32_t online_cores(void) {
  long n = sysconf(_SC_NPROCESSORS_ONLN);
  return n > 0 ? (uint32_t)n : 1;
}

/* Mean bytes per sample: from the listing, else from sample 0. */
static uint64_t mean_sample_bytes(lade__source_t *s, const lade__source_ops_t *ops) {
  if (s->sizes && s->count) {
    uint64_t sum = 0;
    for (uint64_t i = 0; i < s->count; i++) sum += s->sizes[i];
    return LADE__MAX(sum / s->count, 1);
  }
  lade__buf_t b = {0};
  uint64_t n = ops->read(s, 0, &b) == 0 ? b.len : 4096;
  lade__buf_free(&b);
  lade__clear_error();
  return LADE__MAX(n, 1);
}

/* Free bytes of the file system of the cache folder (made if missing). */
static int disk_free(const char *dir, uint64_t *out) {
  struct statvfs v;
  int rc = lade__mkdir_private(dir);
  if (!rc && statvfs(dir, &v) != 0) rc = lade__fail(LADE_EIO, "cache_dir %s: %s", dir, strerror(errno));
  if (!rc) *out = (uint64_t)v.f_bavail * v.f_frsize;
  return rc;
}

static void wake_workers(void *ctx) {
  lade_loader_t *L = ctx;
  pthread_mutex_lock(&L->mu);
  pthread_cond_broadcast(&L->cv_work);
  pthread_mutex_unlock(&L->mu);
}

#ifdef LADE__HAVE_PEERS
/* The transport's serving side: the fetch stage (open before any send is queued). */
static int serve_peer(void *ctx, uint64_t idx, uint64_t q, int nonblock, lade__buf_t *out) {
  lade_loader_t *L = ctx;
  return lade__fetch_serve(L->fetch, idx, q, nonblock, out);
}
#endif

/* The dataset's fingerprint that the learners compare at open
 * (docs/transport.md): what each learner can see of its copy of the
 * dataset and the others' copies must equal. names: a digest of every
 * sample's name relative to the source (the path a node mounts it at may
 * differ); sizes: of the sizes the listing knows (object stores; 0 when it
 * knows none: a local listing does not stat every file); probes (local
 * sources): the bytes of PROBES samples spread over the dataset, read now,
 * so a copy with the same names and other bytes is caught before the first
 * batch. mtimes and inodes are left out: they differ between two nodes'
 * copies of the same bytes. A remote source's objects are the same objects
 * from every node: reading probes there would only cost requests. */
/* A digest of every sample's name relative to the source, in index order:
 * the learners compare it, and the disk tier's dataset identity holds it
 * (engine/fetch.c), so a listing that changed never reuses entries. One
 * describe() per sample: made once per open, only where one of them needs it. */
static uint64_t names_digest(lade_loader_t *L) {
  lade__source_t *s = &L->src;
  const char *root = L->cfg.source;
  size_t rlen = strlen(root);
  char name[LADE__PATH_MAX + 64];
  uint64_t h = 0;
  for (uint64_t i = 0; i < s->count; i++) {
    L->src_ops->describe(s, i, name, sizeof name);
    const char *rel = strncmp(name, root, rlen) ? name : name + rlen;
    while (*rel == '/') rel++;
    h = lade__hash64(rel, strlen(rel) + 1, h);
  }
  return h;
}

#ifdef LADE__HAVE_PEERS
#define PROBES 16
static int dataset_fingerprint(lade_loader_t *L, uint64_t *sizes, uint64_t *probes) {
  lade__source_t *s = &L->src;
  *sizes = s->sizes ? lade_checksum(s->sizes, s->count * sizeof *s->sizes, s->count) : 0;
  *probes = 0;
  if (L->src_ops->submit || !s->count) return 0;
  lade__buf_t b = {0};
  uint64_t k = LADE__MIN(s->count, (uint64_t)PROBES), p = 0;
  int rc = 0;
  for (uint64_t j = 0; j < k && !rc; j++) {
    uint64_t idx = j * s->count / k + (s->count / k) / 2; /* the same samples on every learner */
    rc = L->src_ops->read(s, idx, &b);
    if (!rc) p = lade_checksum(b.data, b.len, p ^ idx);
  }
  lade__buf_free(&b);
  *probes = p;
  return rc;
}
#endif

/* The transport resolve.c chose (docs/transport.md). Under MPI, rank and
 * world come from MPI (the settings must agree when set), under UCX from
 * the settings (or torchrun's); the learners' settings are compared. Without a transport, peer routes read
 * storage. The fetch stage serves the sends; it is wired in once open. */
static int open_transport(lade_loader_t *L) {
  lade__resolved_t *r = &L->res;
  L->cfg.rank = r->rank;
  L->cfg.world_size = r->world;
  if (r->note_no_mpi)
    fprintf(stderr, "lade: note: started by an MPI launcher, but this build has no MPI (LADE_WITH_MPI): samples the "
                    "plan routes to peers are read from storage\n");
  if (r->note_no_ucx)
    fprintf(stderr, "lade: note: started by torchrun, but this build has no UCX (LADE_WITH_UCX): samples the plan "
                    "routes to peers are read from storage\n");
  if (r->note_no_peers)
    fprintf(stderr, "lade: note: started by torchrun, but the ranks' UCX addresses are unknown: initialise "
                    "torch.distributed before creating the loader (the Python module exchanges them through it) or "
                    "set rendezvous_dir and job_id; until then samples the plan routes to peers are read from "
                    "storage\n");
  uint32_t env_rank = 0, env_size = 0;
  bool env_ok = lade__topology_env(&env_rank, &env_size);
  if (r->transport != LADE__TRANSPORT_MPI && r->transport != LADE__TRANSPORT_UCX)
    return lade__resolve_topology(&L->cfg, NULL, env_ok, env_rank, env_size, r);
#ifdef LADE__HAVE_PEERS
  lade__cursor_params_t *cp = &r->cursor;
  uint64_t fp_names = L->names_digest, fp_sizes = 0, fp_probes = 0;
  int rc = dataset_fingerprint(L, &fp_sizes, &fp_probes);
  if (rc) return lade__fail_prefix(rc, "reading the dataset's probe samples for the learners' check: ");
  const lade__transport_check_t checks[] = {
      {"samples (dataset size)", cp->plan.samples, false}, {"batch_size", cp->plan.batch_size, false},
      {"epochs", cp->plan.epochs, false},                  {"seed", cp->plan.seed, false},
      {"plan", (uint64_t)cp->plan.kind, false},            {"cache (samples per learner)", cp->plan.cache, false},
      {"drop_last", cp->drop_last, false},                 {"shuffle", cp->shuffle, false},
      {"plan_balance", (uint64_t)cp->plan.balance_peer, false}, {"plan_reorder", (uint64_t)cp->plan.reorder, false},
      {"plan_order", (uint64_t)cp->plan.order_algo, false}, {"plan_imbalance", cp->plan.imbalance, false},
      {"ranks_per_node", L->cfg.ranks_per_node, false},   {"node_cache", (uint64_t)L->cfg.node_cache, false},
      {"the resume position's epoch", cp->resumed ? cp->resume.epoch + 1 : 0, false},
      {"the resume position's consumed samples", cp->resumed ? cp->resume.consumed : 0, false},
      {"the dataset's sample names (a digest)", fp_names, true},
      {"the dataset's sample sizes as listed (a digest)", fp_sizes, true},
      {"the dataset's bytes (a digest of 16 probe samples)", fp_probes, true}};
  lade__transport_params_t dp = {.rank = L->cfg.rank, .world = L->cfg.world_size, .timeout_ms = L->cfg.peer_timeout_ms,
                                 .window = L->window, .serve = serve_peer, .serve_ctx = L, .checks = checks,
                                 .nchecks = (uint32_t)(sizeof checks / sizeof checks[0]),
                                 .rendezvous_dir = L->cfg.rendezvous_dir, .job_id = L->cfg.job_id};
  const lade__transport_ops_t *ops = NULL;
#ifdef LADE_HAVE_MPI
  if (r->transport == LADE__TRANSPORT_MPI) ops = &lade__transport_mpi;
#endif
#ifdef LADE_HAVE_UCX
  if (r->transport == LADE__TRANSPORT_UCX) ops = &lade__transport_ucx;
#endif
  if (!ops) return lade__fail(LADE_EUNSUPPORTED, "this build has no transport %d", r->transport);
  uint32_t rank = 0, world = 1;
  rc = ops->open(&L->dist, &dp, &rank, &world);
  if (rc) return rc;
  L->cfg.rank = r->rank = cp->rank = rank;
  L->cfg.world_size = r->world = cp->plan.learners = world;
  return lade__resolve_topology(&L->cfg, L->dist->ops->node_leads(L->dist), env_ok, env_rank, env_size, r);
#else
  return 0;
#endif
}

/* The node cache, once the nodes are known (engine/resolve.c,
 * docs/cache.md): its job key from the settings or the launcher, and the
 * dataset's names digest that its segment's name carries. */
static int resolve_node_cache(lade_loader_t *L) {
  char env_job[256];
  lade__topology_job_key(env_job, sizeof env_job);
  int rc = lade__resolve_node_cache(&L->cfg, env_job, &L->res);
  if (rc) return rc;
  if (L->res.note_no_job_key)
    fprintf(stderr, "lade: note: %u ranks share this node but no job key is known (setting job_id, or a launcher's "
                    "TORCHELASTIC_RUN_ID, SLURM_JOB_ID, PMIX_NAMESPACE, MASTER_ADDR/MASTER_PORT): each rank keeps "
                    "its own memory cache of cache_mem_bytes\n", L->res.topo.ranks_per_node);
  if (L->res.note_node_fifo && L->cfg.rank == 0)
    fprintf(stderr, "lade: note: the node cache evicts in insertion order (FIFO), not by cache_policy=lru: one rank's "
                    "recency cannot order the node's shared entries (node_cache=off keeps an LRU cache per rank)\n");
  if (L->res.fetch.node_cache && !L->names_digest) L->names_digest = names_digest(L);
  if (L->res.fetch.node_plan) { /* rank 0's random number names this loader's segment on every node */
    uint64_t mine = lade__mix64((uint64_t)(lade__now() * 1e9) ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)L);
    uint64_t *all = malloc(L->cfg.world_size * sizeof *all);
    rc = all ? L->dist->ops->allgather(L->dist, &mine, sizeof mine, all)
             : lade__fail(LADE_ENOMEM, "out of memory for the ranks' node cache names");
    if (!rc) L->res.fetch.node_nonce = all[0];
    free(all);
  }
  return rc;
}

/* A warm start: this learner's surviving entries (keys, ascending) and,
 * with share, every other learner's (a bitmap of the dataset each, over the
 * transport) seed the plan; the survivors it does not keep leave the disk. */
static int warm_plan(lade_loader_t *L, const uint64_t *keys, uint64_t n, bool share) {
  uint32_t W = L->cfg.world_size, me = L->cfg.rank;
  uint64_t N = L->src.count, bytes = (N + 7) / 8;
  uint64_t **lists = calloc(W, sizeof *lists), *counts = calloc(W, sizeof *counts);
  uint8_t *bits = share ? calloc(bytes ? bytes : 1, 1) : NULL, *all = share ? malloc((size_t)(W * bytes) + 1) : NULL;
  uint8_t *kept = malloc(n ? n : 1);
  int rc = !lists || !counts || !kept || (share && (!bits || !all))
               ? lade__fail(LADE_ENOMEM, "out of memory for the learners' surviving caches")
               : 0;
  if (!rc && share) {
    for (uint64_t i = 0; i < n; i++) bits[keys[i] / 8] |= (uint8_t)(1u << (keys[i] % 8));
    rc = L->dist->ops->allgather(L->dist, bits, bytes, all);
    for (uint32_t r = 0; !rc && r < W; r++) {
      const uint8_t *b = all + (size_t)r * bytes;
      uint64_t c = 0;
      for (uint64_t s = 0; s < N; s++) c += (b[s / 8] >> (s % 8)) & 1;
      if (r == me) continue;
      lists[r] = malloc((c ? c : 1) * sizeof **lists);
      if (!lists[r]) {
        rc = lade__fail(LADE_ENOMEM, "out of memory for the learners' surviving caches");
        break;
      }
      for (uint64_t s = 0; s < N; s++)
        if ((b[s / 8] >> (s % 8)) & 1) lists[r][counts[r]++] = s;
    }
  }
  if (!rc) {
    lists[me] = (uint64_t *)keys;
    counts[me] = n;
    rc = lade__cursor_warm(L->cursor, W, (const uint64_t *const *)lists, counts, kept);
    lists[me] = NULL;
  }
  for (uint64_t i = 0; !rc && i < n; i++)
    if (!kept[i]) lade__fetch_drop(L->fetch, keys[i]);
  for (uint32_t r = 0; lists && r < W; r++) free(lists[r]);
  free(lists);
  free(counts);
  free(bits);
  free(all);
  free(kept);
  return rc;
}

/* Lists the source, resolves the settings against it, opens the transport,
 * the plan cursor, the fetch stage and the transform. */
static int open_pipeline(lade_loader_t *L, lade__buf_t *buf) {
  L->src.on_ready = wake_workers;
  L->src.on_ready_ctx = L;
  uint32_t env_rank = 0, env_size = 0;
  bool env_ok = lade__topology_env(&env_rank, &env_size);
  L->src.node_ranks = lade__resolve_node_ranks(&L->cfg, env_ok, env_size);
  uint32_t lr = 0, lw = 0;
  bool several = L->src.node_ranks > 1 || L->cfg.world_size > 1 || (lade__transport_launched(&lr, &lw) && lw > 1) ||
                 (lade__transport_torchrun(&lr, &lw) && lw > 1);
  if (several) {
    char env_job[256];
    lade__topology_job_key(env_job, sizeof env_job);
    L->src.job = lade__resolve_job(&L->cfg, env_job);
  }
  int rc = L->src_ops->open(&L->src, &L->cfg);
  if (rc) return rc;
  lade__source_facts_t fa = {.kind = source_kind(L->src_ops),
                             .count = L->src.count,
                             .remote = L->src_ops->submit != NULL,
                             .shard_offsets = L->src.shard_offsets,
                             .shards = L->src.shards,
                             .npz = L->src.npz,
                             .online_cores = online_cores()};
  fa.launched = lade__transport_launched(&fa.launched_rank, &fa.launched_world) && fa.launched_world > 1;
  fa.torchrun = lade__transport_torchrun(&fa.torchrun_rank, &fa.torchrun_world) && fa.torchrun_world > 1;
  fa.ucx_peers = lade__ucx_peers_world();
  if (lade__resolve_wants_mean(&L->cfg, fa.remote)) fa.mean_bytes = mean_sample_bytes(&L->src, L->src_ops);
  if (lade__resolve_wants_disk_free(&L->cfg)) rc = disk_free(L->cfg.cache_dir, &fa.disk_free_bytes);
  if (!rc) rc = lade__resolve(&L->cfg, &fa, &L->res);
  if (!rc && (L->cfg.cache_dir[0] || L->res.transport == LADE__TRANSPORT_MPI || L->res.transport == LADE__TRANSPORT_UCX))
    L->names_digest = names_digest(L);
  if (!rc) rc = open_transport(L);
  if (!rc) rc = resolve_node_cache(L);
  if (rc) return rc;
  rc = lade__cursor_open(&L->cursor, &L->res.cursor);
  if (rc) return lade__fail_prefix(rc, "dataset %s: ", L->cfg.source);
  L->steps = lade__cursor_steps(L->cursor);
  L->routed = lade__cursor_routed(L->cursor);
  L->total = L->steps * L->cfg.epochs;
  /* a resumed run starts where its position stands (docs/plan.md "Resume") */
  L->first = lade__cursor_first(L->cursor);
  L->next_sched = L->next_deliver = L->evict_q = L->first;
  lade__fetch_params_t fp = {.conf = &L->res.fetch, .src = &L->src, .ops = L->src_ops, .steps = L->steps,
                             .batch = L->cfg.batch_size, .cursor = L->cursor, .names_digest = L->names_digest, .dist = L->dist};
  rc = lade__fetch_open(&L->fetch, &fp);
  if (rc) return rc;
  if (L->first) lade__fetch_seek(L->fetch, L->first * L->cfg.batch_size);
  if (L->res.fetch.warm) { /* the surviving disk cache is the plan's start (docs/plan.md "Warm restarts") */
    lade_plan_settings_t ps;
    lade__cursor_settings(L->cursor, &ps);
    /* every learner computes the plan, so it needs every learner's caches:
     * exchanged over the transport; without one that can, more than one
     * learner starts cold */
    bool share = L->cfg.world_size > 1 && L->dist && L->dist->ops->allgather;
    bool keep = L->cfg.world_size == 1 || share;
    uint64_t *keys = NULL, n = 0;
    rc = lade__fetch_survivors(L->fetch, keep, ps.cache, &keys, &n);
    if (!rc && keep) rc = warm_plan(L, keys, n, share);
    free(keys);
    if (rc) return rc;
  }
  L->async = lade__fetch_async(L->fetch);

  L->xf = transform_of(L->res.transform);
  L->direct_payload =
      L->xf == &lade__xform_npy && L->src_ops->read_payload && L->src.dtype && !lade__fetch_cached(L->fetch);
  if (L->direct_payload) {
    /* the source knows the sample's type: no need to read sample 0 */
    L->shape.dtype = L->src.dtype;
    L->shape.ndim = L->src.ndim;
    for (int i = 0; i < L->src.ndim; i++) L->shape.dims[i] = L->src.shape[i];
    L->shape.bytes = L->src.payload_bytes;
  } else {
    const uint8_t *first = NULL;
    size_t first_len = 0;
    /* sample 0 gives the slot size (raw without raw_size) or the .npy header
     * (npz: its member's); read through the tiers, so a warm cache sends no
     * request */
    if ((L->xf == &lade__xform_raw && !L->cfg.raw_size) || L->xf == &lade__xform_npy || L->xf == &lade__xform_npz) {
      int tier, note;
      rc = lade__fetch_read(L->fetch, 0, 0, LADE__ROUTE_ANY, buf, &tier, &note);
      if (rc) return rc;
      first = buf->data;
      first_len = buf->len;
    }
    rc = L->xf->init(&L->xf_state, &L->res.xform, first, first_len, &L->shape);
    if (rc && L->xf == &lade__xform_npz) { /* the archive is outside bytes: name it, as apply()'s errors are */
      char name[LADE__PATH_MAX + 64];
      L->src_ops->describe(&L->src, 0, name, sizeof name);
      return lade__fail_prefix(rc, "%s (sample 0): ", name);
    }
    if (rc) return rc;
  }
  if (L->shape.ndim + 1 > LADE_MAX_DIMS)
    return lade__fail(LADE_ESHAPE, "samples have %d dimensions; at most %d are supported", L->shape.ndim,
                      LADE_MAX_DIMS - 1);
  /* a zero-size array (.npy float32[0] or (3, 0)) is a sample, as np.load
   * reads it; a slot of 0 bytes with no zero dimension is not */
  bool zero_dim = false;
  for (int i = 0; i < L->shape.ndim; i++) zero_dim |= L->shape.dims[i] == 0;
  if (L->shape.bytes == 0 && !zero_dim)
    return lade__fail(LADE_ESHAPE, "samples of the dataset %s are empty", L->cfg.source);
  return 0;
}

/* ----------------------------------------------------------------- API */

int lade__engine_fail_forked(const lade_loader_t *L, const char *fn) {
  return lade__fail(LADE_ESTATE,
                    "%s: this loader was created in process %d, and this process (%d) is a fork() of it; a loader "
                    "cannot be used across fork(): create one in this process (its threads setting parallelises "
                    "loading)",
                    fn, (int)L->pid, (int)getpid());
}

/* device=cuda[:N] and pin_memory (core/cuda.h): the CUDA runtime opened now,
 * so its absence is said at create, naming the library and the device. */
static int open_device(const struct lade_config *cfg) {
  int ordinal, rc = lade__resolve_device(cfg, &ordinal);
  if (rc) return rc;
  if (ordinal >= 0) {
    char what[48];
    snprintf(what, sizeof what, "device=cuda:%d", ordinal);
    if ((rc = lade__cuda_open(ordinal, what)) != 0) return rc;
    return lade__fail(LADE_EUNSUPPORTED,
                      "%s: batches delivered in device memory are not built yet (issue 31); pin_memory=true gives "
                      "page-locked host batches, which tensor.cuda(non_blocking=True) copies by DMA",
                      what);
  }
  return cfg->pin_memory ? lade__cuda_open(0, "pin_memory=true") : 0;
}

int lade__engine_open(lade_loader_t **out, const lade_config_t *cfg) {
  if (!out || !cfg) return lade__fail(LADE_EINVAL, "lade_loader_create: NULL argument");
  *out = NULL;
  const lade__source_ops_t *ops = NULL;
  int rc = lade__source_select(cfg, &ops);
  if (rc) return rc;
  lade__source_kind_t kind = source_kind(ops);
  rc = lade__resolve_settings(cfg, &kind);
  if (!rc) rc = open_device(cfg);
  if (rc) return rc;
  lade_loader_t *L = calloc(1, sizeof *L);
  if (!L) return lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
  L->cfg = *cfg;
  L->src_ops = ops;
  pthread_once(&g_atfork_once, register_atfork);
  L->fork_gen = atomic_load_explicit(&lade__engine_fork_gen, memory_order_relaxed);
  L->pid = getpid();
  lade__counts_open(&L->counts, lade__now());
  pthread_mutex_init(&L->mu, NULL);
  pthread_cond_init(&L->cv_work, NULL);
  pthread_cond_init(&L->cv_ready, NULL);
  L->window = cfg->prefetch + 1;
  L->sched = calloc(L->window, sizeof *L->sched);
  rc = L->sched ? lade__pool_open(&L->pool, L, cfg) : lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
  if (rc) {
    lade__engine_free_all(L);
    return rc;
  }
  if (cfg->trace[0]) {
    rc = lade__trace_open(&L->trace, cfg->trace);
    if (rc) {
      lade__engine_free_all(L);
      return rc;
    }
  }
  /* list the source and plan now: a missing or empty dataset is an error of
   * create(), not of the first next() */
  lade__buf_t first = {0};
  rc = open_pipeline(L, &first);
  lade__buf_free(&first);
  if (!rc) {
    L->nworkers = L->res.threads;
    L->workers = calloc(L->nworkers, sizeof *L->workers);
    if (!L->workers) rc = lade__fail(LADE_ENOMEM, "lade_loader_create: out of memory");
  }
  if (rc) {
    lade__engine_free_all(L);
    return rc;
  }
  *out = L;
  return 0;
}

/* The loader's one collective for callers (lade.h): over the transport the
 * loader opened, so it runs on the same communicator (MPI) or channel (UCX)
 * as the loader's own exchanges, never a second connection. */
int lade_loader_allgather(lade_loader_t *L, const void *mine, size_t len, void *all) {
  if (!L || (len && (!mine || !all))) return lade__fail(LADE_EINVAL, "lade_loader_allgather: NULL argument");
  if (forked(L)) return lade__engine_fail_forked(L, "lade_loader_allgather");
  if (L->cfg.world_size <= 1) {
    if (len) memmove(all, mine, len);
    return 0;
  }
  if (!L->dist || !L->dist->ops->allgather)
    return lade__fail(LADE_EUNSUPPORTED, "lade_loader_allgather: rank %u of %u has no transport between ranks: set "
                      "transport=mpi (under mpirun) or transport=ucx with rendezvous_dir (under torchrun)",
                      L->cfg.rank, L->cfg.world_size);
  /* MPI and UCX take no empty contribution: a barrier sends one byte */
  uint8_t one = 1, *scratch = NULL;
  const void *m = mine;
  void *a = all;
  size_t n = len;
  if (!n) {
    scratch = malloc(L->cfg.world_size);
    if (!scratch) return lade__fail(LADE_ENOMEM, "lade_loader_allgather: out of memory");
    m = &one;
    a = scratch;
    n = 1;
  }
  int rc = L->dist->ops->allgather(L->dist, m, n, a);
  free(scratch);
  return rc;
}
