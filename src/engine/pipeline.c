/* pipeline.c - a loader's opened stages (pipeline.h): the source listed,
 * the settings resolved against it (engine/resolve.c), the transport, the
 * plan cursor, the fetch stage and the transform set up in
 * lade_loader_create(), so a missing or empty dataset fails there. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "core/cuda.h"
#include "engine/pipeline.h"

void lade__pipeline_close(lade__pipeline_t *P) {
  if (P->closed) return;
  P->closed = true;
  if (P->dist) P->dist->ops->close(P->dist); /* flushes its sends: before the fetch stage that serves them */
  P->dist = NULL;
  lade__fetch_close(P->fetch);
  P->fetch = NULL;
  if (P->xf && P->xf->destroy && P->xf_state) P->xf->destroy(P->xf_state);
  P->xf_state = NULL;
  if (P->src_ops && P->src_ops->close) P->src_ops->close(&P->src);
  lade__cursor_close(P->cursor);
  P->cursor = NULL;
  lade__trace_close(P->trace);
  P->trace = NULL;
  lade__config_wipe_secrets(&P->cfg);
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

#ifdef LADE__HAVE_PEERS
/* The transport's serving side: the fetch stage (open before any send is queued). */
static int serve_peer(void *ctx, uint64_t idx, uint64_t q, int nonblock, lade__buf_t *out) {
  lade__pipeline_t *P = ctx;
  return lade__fetch_serve(P->fetch, idx, q, nonblock, out);
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
static uint64_t names_digest(lade__pipeline_t *P) {
  lade__source_t *s = &P->src;
  const char *root = P->cfg.source;
  size_t rlen = strlen(root);
  char name[LADE__PATH_MAX + 64];
  uint64_t h = 0;
  for (uint64_t i = 0; i < s->count; i++) {
    P->src_ops->describe(s, i, name, sizeof name);
    const char *rel = strncmp(name, root, rlen) ? name : name + rlen;
    while (*rel == '/') rel++;
    h = lade__hash64(rel, strlen(rel) + 1, h);
  }
  return h;
}

#ifdef LADE__HAVE_PEERS
#define PROBES 16
static int dataset_fingerprint(lade__pipeline_t *P, uint64_t *sizes, uint64_t *probes) {
  lade__source_t *s = &P->src;
  *sizes = s->sizes ? lade_checksum(s->sizes, s->count * sizeof *s->sizes, s->count) : 0;
  *probes = 0;
  if (P->src_ops->submit || !s->count) return 0;
  lade__buf_t b = {0};
  uint64_t k = LADE__MIN(s->count, (uint64_t)PROBES), p = 0;
  int rc = 0;
  for (uint64_t j = 0; j < k && !rc; j++) {
    uint64_t idx = j * s->count / k + (s->count / k) / 2; /* the same samples on every learner */
    rc = P->src_ops->read(s, idx, &b);
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
static int open_transport(lade__pipeline_t *P) {
  lade__resolved_t *r = &P->res;
  P->cfg.rank = r->rank;
  P->cfg.world_size = r->world;
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
    return lade__resolve_topology(&P->cfg, NULL, env_ok, env_rank, env_size, r);
#ifdef LADE__HAVE_PEERS
  lade__cursor_params_t *cp = &r->cursor;
  uint64_t fp_names = P->names_digest, fp_sizes = 0, fp_probes = 0;
  int rc = dataset_fingerprint(P, &fp_sizes, &fp_probes);
  if (rc) return lade__fail_prefix(rc, "reading the dataset's probe samples for the learners' check: ");
  const lade__transport_check_t checks[] = {
      {"samples (dataset size)", cp->plan.samples, false}, {"batch_size", cp->plan.batch_size, false},
      {"epochs", cp->plan.epochs, false},                  {"seed", cp->plan.seed, false},
      {"plan", (uint64_t)cp->plan.kind, false},            {"cache (samples per learner)", cp->plan.cache, false},
      {"drop_last", cp->drop_last, false},                 {"shuffle", cp->shuffle, false},
      {"plan_balance", (uint64_t)cp->plan.balance_peer, false}, {"plan_reorder", (uint64_t)cp->plan.reorder, false},
      {"plan_order", (uint64_t)cp->plan.order_algo, false}, {"plan_imbalance", cp->plan.imbalance, false},
      {"ranks_per_node", P->cfg.ranks_per_node, false},   {"node_cache", (uint64_t)P->cfg.node_cache, false},
      {"the resume position's epoch", cp->resumed ? cp->resume.epoch + 1 : 0, false},
      {"the resume position's consumed samples", cp->resumed ? cp->resume.consumed : 0, false},
      {"the dataset's sample names (a digest)", fp_names, true},
      {"the dataset's sample sizes as listed (a digest)", fp_sizes, true},
      {"the dataset's bytes (a digest of 16 probe samples)", fp_probes, true}};
  lade__transport_params_t dp = {.rank = P->cfg.rank, .world = P->cfg.world_size, .timeout_ms = P->cfg.peer_timeout_ms,
                                 .window = (uint32_t)(P->cfg.prefetch + 1), .serve = serve_peer, .serve_ctx = P, .checks = checks,
                                 .nchecks = (uint32_t)(sizeof checks / sizeof checks[0]),
                                 .rendezvous_dir = P->cfg.rendezvous_dir, .job_id = P->cfg.job_id};
  const lade__transport_ops_t *ops = NULL;
#ifdef LADE_HAVE_MPI
  if (r->transport == LADE__TRANSPORT_MPI) ops = &lade__transport_mpi;
#endif
#ifdef LADE_HAVE_UCX
  if (r->transport == LADE__TRANSPORT_UCX) ops = &lade__transport_ucx;
#endif
  if (!ops) return lade__fail(LADE_EUNSUPPORTED, "this build has no transport %d", r->transport);
  uint32_t rank = 0, world = 1;
  rc = ops->open(&P->dist, &dp, &rank, &world);
  if (rc) return rc;
  P->cfg.rank = r->rank = cp->rank = rank;
  P->cfg.world_size = r->world = cp->plan.learners = world;
  return lade__resolve_topology(&P->cfg, P->dist->ops->node_leads(P->dist), env_ok, env_rank, env_size, r);
#else
  return 0;
#endif
}

/* The node cache, once the nodes are known (engine/resolve.c,
 * docs/cache.md): its job key from the settings or the launcher, and the
 * dataset's names digest that its segment's name carries. */
static int resolve_node_cache(lade__pipeline_t *P) {
  char env_job[256];
  lade__topology_job_key(env_job, sizeof env_job);
  int rc = lade__resolve_node_cache(&P->cfg, env_job, &P->res);
  if (rc) return rc;
  if (P->res.note_no_job_key)
    fprintf(stderr, "lade: note: %u ranks share this node but no job key is known (setting job_id, or a launcher's "
                    "TORCHELASTIC_RUN_ID, SLURM_JOB_ID, PMIX_NAMESPACE, MASTER_ADDR/MASTER_PORT): each rank keeps "
                    "its own memory cache of cache_mem_bytes\n", P->res.topo.ranks_per_node);
  if (P->res.note_node_fifo && P->cfg.rank == 0)
    fprintf(stderr, "lade: note: the node cache evicts in insertion order (FIFO), not by cache_policy=lru: one rank's "
                    "recency cannot order the node's shared entries (node_cache=off keeps an LRU cache per rank)\n");
  if (P->res.fetch.node_cache && !P->names_digest) P->names_digest = names_digest(P);
  if (P->res.fetch.node_plan) { /* rank 0's random number names this loader's segment on every node */
    uint64_t mine = lade__mix64((uint64_t)(lade__now() * 1e9) ^ ((uint64_t)getpid() << 32) ^ (uintptr_t)P);
    uint64_t *all = malloc(P->cfg.world_size * sizeof *all);
    rc = all ? P->dist->ops->allgather(P->dist, &mine, sizeof mine, all)
             : lade__fail(LADE_ENOMEM, "out of memory for the ranks' node cache names");
    if (!rc) P->res.fetch.node_nonce = all[0];
    free(all);
  }
  return rc;
}

/* A warm start: this learner's surviving entries (keys, ascending) and,
 * with share, every other learner's (a bitmap of the dataset each, over the
 * transport) seed the plan; the survivors it does not keep leave the disk. */
static int warm_plan(lade__pipeline_t *P, const uint64_t *keys, uint64_t n, bool share) {
  uint32_t W = P->cfg.world_size, me = P->cfg.rank;
  uint64_t N = P->src.count, bytes = (N + 7) / 8;
  uint64_t **lists = calloc(W, sizeof *lists), *counts = calloc(W, sizeof *counts);
  uint8_t *bits = share ? calloc(bytes ? bytes : 1, 1) : NULL, *all = share ? malloc((size_t)(W * bytes) + 1) : NULL;
  uint8_t *kept = malloc(n ? n : 1);
  int rc = !lists || !counts || !kept || (share && (!bits || !all))
               ? lade__fail(LADE_ENOMEM, "out of memory for the learners' surviving caches")
               : 0;
  if (!rc && share) {
    for (uint64_t i = 0; i < n; i++) bits[keys[i] / 8] |= (uint8_t)(1u << (keys[i] % 8));
    rc = P->dist->ops->allgather(P->dist, bits, bytes, all);
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
    rc = lade__cursor_warm(P->cursor, W, (const uint64_t *const *)lists, counts, kept);
    lists[me] = NULL;
  }
  for (uint64_t i = 0; !rc && i < n; i++)
    if (!kept[i]) lade__fetch_drop(P->fetch, keys[i]);
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
static int open_stages(lade__pipeline_t *P, void (*wake)(void *), void *ctx, lade__buf_t *buf) {
  P->src.on_ready = wake;
  P->src.on_ready_ctx = ctx;
  uint32_t env_rank = 0, env_size = 0;
  bool env_ok = lade__topology_env(&env_rank, &env_size);
  P->src.node_ranks = lade__resolve_node_ranks(&P->cfg, env_ok, env_size);
  uint32_t lr = 0, lw = 0;
  bool several = P->src.node_ranks > 1 || P->cfg.world_size > 1 || (lade__transport_launched(&lr, &lw) && lw > 1) ||
                 (lade__transport_torchrun(&lr, &lw) && lw > 1);
  if (several) {
    char env_job[256];
    lade__topology_job_key(env_job, sizeof env_job);
    P->src.job = lade__resolve_job(&P->cfg, env_job);
  }
  int rc = P->src_ops->open(&P->src, &P->cfg);
  if (rc) return rc;
  lade__source_facts_t fa = {.kind = source_kind(P->src_ops),
                             .count = P->src.count,
                             .remote = P->src_ops->submit != NULL,
                             .shard_offsets = P->src.shard_offsets,
                             .shards = P->src.shards,
                             .npz = P->src.npz,
                             .online_cores = online_cores()};
  fa.launched = lade__transport_launched(&fa.launched_rank, &fa.launched_world) && fa.launched_world > 1;
  fa.torchrun = lade__transport_torchrun(&fa.torchrun_rank, &fa.torchrun_world) && fa.torchrun_world > 1;
  fa.ucx_peers = lade__ucx_peers_world();
  if (lade__resolve_wants_mean(&P->cfg, fa.remote)) fa.mean_bytes = mean_sample_bytes(&P->src, P->src_ops);
  if (lade__resolve_wants_disk_free(&P->cfg)) rc = disk_free(P->cfg.cache_dir, &fa.disk_free_bytes);
  if (!rc) rc = lade__resolve(&P->cfg, &fa, &P->res);
  if (!rc && (P->cfg.cache_dir[0] || P->res.transport == LADE__TRANSPORT_MPI || P->res.transport == LADE__TRANSPORT_UCX))
    P->names_digest = names_digest(P);
  if (!rc) rc = open_transport(P);
  if (!rc) rc = resolve_node_cache(P);
  if (rc) return rc;
  rc = lade__cursor_open(&P->cursor, &P->res.cursor);
  if (rc) return lade__fail_prefix(rc, "dataset %s: ", P->cfg.source);
  P->steps = lade__cursor_steps(P->cursor);
  P->routed = lade__cursor_routed(P->cursor);
  P->total = P->steps * P->cfg.epochs;
  /* a resumed run starts where its position stands (docs/plan.md "Resume") */
  P->first = lade__cursor_first(P->cursor);
  lade__fetch_params_t fp = {.conf = &P->res.fetch, .src = &P->src, .ops = P->src_ops, .steps = P->steps,
                             .batch = P->cfg.batch_size, .cursor = P->cursor, .names_digest = P->names_digest, .dist = P->dist};
  rc = lade__fetch_open(&P->fetch, &fp);
  if (rc) return rc;
  if (P->first) lade__fetch_seek(P->fetch, P->first * P->cfg.batch_size);
  if (P->res.fetch.warm) { /* the surviving disk cache is the plan's start (docs/plan.md "Warm restarts") */
    lade_plan_settings_t ps;
    lade__cursor_settings(P->cursor, &ps);
    /* every learner computes the plan, so it needs every learner's caches:
     * exchanged over the transport; without one that can, more than one
     * learner starts cold */
    bool share = P->cfg.world_size > 1 && P->dist && P->dist->ops->allgather;
    bool keep = P->cfg.world_size == 1 || share;
    uint64_t *keys = NULL, n = 0;
    rc = lade__fetch_survivors(P->fetch, keep, ps.cache, &keys, &n);
    if (!rc && keep) rc = warm_plan(P, keys, n, share);
    free(keys);
    if (rc) return rc;
  }
  P->async = lade__fetch_async(P->fetch);

  P->xf = transform_of(P->res.transform);
  P->direct_payload =
      P->xf == &lade__xform_npy && P->src_ops->read_payload && P->src.dtype && !lade__fetch_cached(P->fetch);
  if (P->direct_payload) {
    /* the source knows the sample's type: no need to read sample 0 */
    P->shape.dtype = P->src.dtype;
    P->shape.ndim = P->src.ndim;
    for (int i = 0; i < P->src.ndim; i++) P->shape.dims[i] = P->src.shape[i];
    P->shape.bytes = P->src.payload_bytes;
  } else {
    const uint8_t *first = NULL;
    size_t first_len = 0;
    /* sample 0 gives the slot size (raw without raw_size) or the .npy header
     * (npz: its member's); read through the tiers, so a warm cache sends no
     * request */
    if ((P->xf == &lade__xform_raw && !P->cfg.raw_size) || P->xf == &lade__xform_npy || P->xf == &lade__xform_npz) {
      int tier, note;
      rc = lade__fetch_read(P->fetch, 0, 0, LADE__ROUTE_ANY, buf, &tier, &note);
      if (rc) return rc;
      first = buf->data;
      first_len = buf->len;
    }
    rc = P->xf->init(&P->xf_state, &P->res.xform, first, first_len, &P->shape);
    if (rc && P->xf == &lade__xform_npz) { /* the archive is outside bytes: name it, as apply()'s errors are */
      char name[LADE__PATH_MAX + 64];
      P->src_ops->describe(&P->src, 0, name, sizeof name);
      return lade__fail_prefix(rc, "%s (sample 0): ", name);
    }
    if (rc) return rc;
  }
  if (P->shape.ndim + 1 > LADE_MAX_DIMS)
    return lade__fail(LADE_ESHAPE, "samples have %d dimensions; at most %d are supported", P->shape.ndim,
                      LADE_MAX_DIMS - 1);
  /* a zero-size array (.npy float32[0] or (3, 0)) is a sample, as np.load
   * reads it; a slot of 0 bytes with no zero dimension is not */
  bool zero_dim = false;
  for (int i = 0; i < P->shape.ndim; i++) zero_dim |= P->shape.dims[i] == 0;
  if (P->shape.bytes == 0 && !zero_dim)
    return lade__fail(LADE_ESHAPE, "samples of the dataset %s are empty", P->cfg.source);
  return 0;
}

/* device=cuda[:N] and pin_memory (core/cuda.h): the CUDA runtime opened now,
 * so its absence is said at create, naming the library and the device;
 * *ordinal the device (cuda: the calling thread's current one), -1 for cpu. */
static int open_device(const struct lade_config *cfg, int *ordinal) {
  int rc = lade__resolve_device(cfg, ordinal);
  if (rc) return rc;
  if (*ordinal != -1) {
    char what[48];
    snprintf(what, sizeof what, "device=%s", cfg->device);
    return lade__cuda_open(ordinal, what);
  }
  int current = LADE__CUDA_CURRENT;
  return cfg->pin_memory ? lade__cuda_open(&current, "pin_memory=true") : 0;
}

int lade__pipeline_check(const lade_config_t *cfg, const lade__source_ops_t **ops, int *device) {
  int rc = lade__source_select(cfg, ops);
  if (rc) return rc;
  lade__source_kind_t kind = source_kind(*ops);
  rc = lade__resolve_settings(cfg, &kind);
  return rc ? rc : open_device(cfg, device);
}

int lade__pipeline_open(lade__pipeline_t *P, const lade_config_t *cfg, const lade__source_ops_t *ops,
                        void (*wake)(void *), void *ctx) {
  P->cfg = *cfg;
  P->src_ops = ops;
  int rc = cfg->trace[0] ? lade__trace_open(&P->trace, cfg->trace) : 0;
  if (rc) return rc;
  /* list the source and plan now: a missing or empty dataset is an error of
   * create(), not of the first next() */
  lade__buf_t first = {0};
  rc = open_stages(P, wake, ctx, &first);
  lade__buf_free(&first);
  return rc;
}

/* The loader's one collective for callers (lade.h): over the transport the
 * loader opened, so it runs on the same communicator (MPI) or channel (UCX)
 * as the loader's own exchanges, never a second connection. */
int lade__pipeline_allgather(lade__pipeline_t *P, const void *mine, size_t len, void *all) {
  if (P->cfg.world_size <= 1) {
    if (len) memmove(all, mine, len);
    return 0;
  }
  if (!P->dist || !P->dist->ops->allgather)
    return lade__fail(LADE_EUNSUPPORTED, "lade_loader_allgather: rank %u of %u has no transport between ranks: set "
                      "transport=mpi (under mpirun) or transport=ucx with rendezvous_dir (under torchrun)",
                      P->cfg.rank, P->cfg.world_size);
  /* MPI and UCX take no empty contribution: a barrier sends one byte */
  uint8_t one = 1, *scratch = NULL;
  const void *m = mine;
  void *a = all;
  size_t n = len;
  if (!n) {
    scratch = malloc(P->cfg.world_size);
    if (!scratch) return lade__fail(LADE_ENOMEM, "lade_loader_allgather: out of memory");
    m = &one;
    a = scratch;
    n = 1;
  }
  int rc = P->dist->ops->allgather(P->dist, m, n, a);
  free(scratch);
  return rc;
}
