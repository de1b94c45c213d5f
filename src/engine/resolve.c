/* resolve.c - the settings resolved once (resolve.h): pure functions from
 * (settings, what the source reports) to each module's part. */
#include "engine/resolve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cache/cache.h"
#include "core/core.h"
#include "core/cuda.h"

/* Most samples read ahead of the current step: what arrives ahead must fit
 * the remote source's table of unread results (docs/http.md). */
#define RA_MAX_SAMPLES 1024

static bool routed_kind(const struct lade_config *cfg) { return lade__plan_kind_routed(cfg->plan); }

/* Whether the settings (other than their defaults) name an hdf5_* setting. */
static bool hdf5_settings_given(const struct lade_config *cfg) {
  struct lade_config def;
  lade__config_defaults(&def);
  return strcmp(cfg->hdf5_data, def.hdf5_data) || strcmp(cfg->hdf5_labels, def.hdf5_labels) ||
         cfg->hdf5_gap != def.hdf5_gap || cfg->hdf5_direct != def.hdf5_direct ||
         cfg->hdf5_chunk_cache != def.hdf5_chunk_cache;
}

/* Whether npz_member was set to other than its default. */
static bool npz_member_given(const struct lade_config *cfg) {
  struct lade_config def;
  lade__config_defaults(&def);
  return strcmp(cfg->npz_member, def.npz_member) != 0;
}

/* The transform setting's name (LADE__XF_*), for messages. */
static const char *xf_name(int t) {
  static const char *const names[] = {"auto", "raw", "npy", "imagenet-train", "imagenet-eval", "npz"};
  return t >= 0 && t < (int)(sizeof names / sizeof names[0]) ? names[t] : "?";
}

/* Whether the settings (other than their defaults) name a tfrecord_* setting. */
static bool tfrecord_settings_given(const struct lade_config *cfg) {
  struct lade_config def;
  lade__config_defaults(&def);
  return strcmp(cfg->tfrecord_feature, def.tfrecord_feature) || strcmp(cfg->tfrecord_label, def.tfrecord_label) ||
         cfg->tfrecord_compression != def.tfrecord_compression;
}

int lade__resolve_device(const struct lade_config *cfg, int *ordinal) {
  const char *d = cfg->device;
  char *end = NULL;
  *ordinal = -1;
  if (!strcmp(d, "cpu")) return 0;
  if (!strcmp(d, "cuda")) { /* the current device of the thread that creates the loader */
    *ordinal = LADE__CUDA_CURRENT;
    return 0;
  }
  if (!strncmp(d, "cuda:", 5) && d[5] >= '0' && d[5] <= '9') {
    long n = strtol(d + 5, &end, 10);
    if (*end == 0 && n < 1024) {
      *ordinal = (int)n;
      return 0;
    }
  }
  return lade__fail(LADE_EINVAL, "setting 'device' is cpu, cuda or cuda:N (a device number), not '%s'", d);
}

int lade__resolve_settings(const struct lade_config *cfg, const lade__source_kind_t *k) {
  if (cfg->rank >= cfg->world_size)
    return lade__fail(LADE_EINVAL, "setting 'rank' (%u) must be below 'world_size' (%u)", cfg->rank, cfg->world_size);
  if (cfg->scale_min > cfg->scale_max || cfg->ratio_min > cfg->ratio_max)
    return lade__fail(LADE_EINVAL, "scale_min/ratio_min must not exceed scale_max/ratio_max");
  if (cfg->pool_max && cfg->pool_max < cfg->prefetch + 1)
    return lade__fail(LADE_EINVAL, "setting 'pool_max' (%u) must be 0 (no cap) or at least prefetch+1 (%u)",
                      cfg->pool_max, cfg->prefetch + 1);
  /* settings the chosen source would ignore are refused, not dropped */
  if (cfg->label_file[0] && !k->is_s3)
    return lade__fail(LADE_EINVAL, "setting 'label_file' applies to s3:// sources only; the %s source %s takes its labels "
                      "from its class folders", k->name, cfg->source);
  if ((cfg->npy_dtype[0] || cfg->npy_shape[0]) && !k->is_npy)
    return lade__fail(LADE_EINVAL, "settings 'npy_dtype'/'npy_shape' apply to .npy sources only; %s is read by the %s "
                      "source", cfg->source, k->name);
  /* npz_member: with transform=npz, or auto over a folder (which may hold .npz files: lade__resolve decides) */
  if (npz_member_given(cfg) && cfg->transform != LADE__XF_NPZ && !(cfg->transform == LADE__XF_AUTO && k->is_dir))
    return lade__fail(LADE_EINVAL, "setting 'npz_member' applies to the npz transform only; %s is read with "
                      "transform=%s by the %s source (set transform=npz)", cfg->source, xf_name(cfg->transform),
                      k->name);
  if (!k->is_hdf5 && hdf5_settings_given(cfg))
    return lade__fail(LADE_EINVAL, "settings 'hdf5_*' apply to HDF5 sources only; %s is read by the %s source",
                      cfg->source, k->name);
  if ((!k->name || strcmp(k->name, "tfrecord")) && tfrecord_settings_given(cfg))
    return lade__fail(LADE_EINVAL, "settings 'tfrecord_*' apply to TFRecord sources only; %s is read by the %s source "
                      "(source_type=tfrecord reads it as TFRecord files)", cfg->source, k->name ? k->name : "?");
#ifndef LADE_HAVE_JPEG
  if (cfg->transform == LADE__XF_IMAGENET_TRAIN || cfg->transform == LADE__XF_IMAGENET_EVAL ||
      (cfg->transform == LADE__XF_AUTO && k->is_dir))
    return lade__fail(LADE_EUNSUPPORTED, "JPEG transforms need libjpeg-turbo, which this build lacks (LADE_WITH_JPEG)");
#endif
  return 0;
}

/* The DELI prefetcher runs: a disk tier, the regular order, and asked for
 * (or auto, in front of a remote source). */
static bool prefetcher_on(const struct lade_config *cfg, bool remote) {
  return cfg->cache_dir[0] && !routed_kind(cfg) &&
         (cfg->prefetcher == LADE__TRISTATE_ON || (cfg->prefetcher == LADE__TRISTATE_AUTO && remote));
}

/* The plan's own tier is sized in samples: a routed plan with a cache. */
static bool plan_cache_sized(const struct lade_config *cfg) {
  return routed_kind(cfg) && (cfg->cache_mem_bytes || (cfg->cache_dir[0] && cfg->cache_disk_bytes));
}

/* Model-parallel groups (plan=shards, model_parallel > 1): their ranks
 * train on identical batches, so the node cache loads each sample once for
 * them, with a staging budget when cache_mem_bytes is 0 (stage_bytes). */
static bool model_parallel_groups(const struct lade_config *cfg) {
  return cfg->plan == LADE_PLAN_SHARDS && cfg->model_parallel > 1;
}

/* The node cache may be on (the rest is decided once the nodes are known). */
static bool node_cache_possible(const struct lade_config *cfg) {
  return (cfg->cache_mem_bytes || model_parallel_groups(cfg)) && cfg->node_cache != LADE__TRISTATE_OFF &&
         !routed_kind(cfg);
}

/* The node cache's budget for model-parallel groups without cache_mem_bytes:
 * each group on the node may be up to four windows of batches (prefetch + 2)
 * apart between its first and last rank, in mean-sized entries. */
static uint64_t stage_bytes(const struct lade_config *cfg, uint32_t ranks_per_node, uint64_t mean) {
  uint64_t groups = LADE__MAX(ranks_per_node / cfg->model_parallel, 1);
  return 4 * (uint64_t)(cfg->prefetch + 2) * cfg->batch_size * lade__shmcache_charge(LADE__MAX(mean, 1)) * groups;
}

bool lade__resolve_wants_mean(const struct lade_config *cfg, bool remote) {
  return plan_cache_sized(cfg) || prefetcher_on(cfg, remote) || (remote && cfg->readahead_bytes) ||
         node_cache_possible(cfg);
}

bool lade__resolve_wants_disk_free(const struct lade_config *cfg) {
  return cfg->cache_dir[0] && !cfg->cache_disk_bytes;
}

uint32_t lade__resolve_node_ranks(const struct lade_config *cfg, bool env_ok, uint32_t env_size) {
  if (cfg->ranks_per_node) return cfg->ranks_per_node;
  return env_ok && env_size ? env_size : 1;
}

uint64_t lade__resolve_job(const struct lade_config *cfg, const char *env_job) {
  const char *k = cfg->job_id[0] ? cfg->job_id : env_job ? env_job : "";
  return k[0] ? lade__hash64(k, strlen(k), 0x6e6f64656a6f62ull) | 1 : 0;
}

/* The cache checks of a routed plan: it drives one tier by its own admits
 * and evicts (docs/cache.md). */
static int check_cache(const struct lade_config *cfg) {
  bool routed = routed_kind(cfg);
  const char *plan = lade_plan_kind_name(cfg->plan);
  int policy = cfg->cache_policy;
  if (routed && policy != LADE__POLICY_AUTO && policy != LADE__POLICY_PLAN)
    return lade__fail(LADE_EINVAL, "plan=%s drives the memory cache by its own admits and evicts: cache_policy must "
                      "be auto or plan", plan);
  if (routed && cfg->cache_dir[0] && cfg->cache_mem_bytes && cfg->plan != LADE_PLAN_SOLAR)
    return lade__fail(LADE_EINVAL, "plan=%s drives one cache per learner: set cache_mem_bytes or cache_dir, not both "
                      "(memory and disk as two tiers of one plan: plan=solar)", plan);
  if (routed && cfg->cache_dir[0] && !cfg->cache_disk_bytes)
    return lade__fail(LADE_EINVAL, "plan=%s with a disk cache: set cache_disk_bytes (the plan's cache size)", plan);
  if (routed && cfg->prefetcher == LADE__TRISTATE_ON)
    return lade__fail(LADE_EINVAL, "plan=%s decides what the cache holds; the DELI prefetcher (prefetcher=on) runs "
                      "with the regular plan only", plan);
  if (!routed && policy == LADE__POLICY_PLAN)
    return lade__fail(LADE_EINVAL, "cache_policy=plan follows a plan's admits and evicts: set plan to one other "
                      "than regular (e.g. regular+belady, locality)");
  if (cfg->prefetcher == LADE__TRISTATE_ON && !cfg->cache_dir[0])
    return lade__fail(LADE_EINVAL, "prefetcher=on needs a disk cache: set cache_dir");
  return 0;
}

/* The cache tiers, the prefetcher and read-ahead (the fetch stage's part). */
static int resolve_fetch(const struct lade_config *cfg, const lade__source_facts_t *fa, lade__fetch_conf_t *o,
                         uint64_t *plan_cache, uint64_t *plan_cache_disk) {
  int rc = check_cache(cfg);
  if (rc) return rc;
  bool routed = routed_kind(cfg), pf = prefetcher_on(cfg, fa->remote);
  uint64_t mean = lade__resolve_wants_mean(cfg, fa->remote) ? LADE__MAX(fa->mean_bytes, 1) : 0;
  *o = (lade__fetch_conf_t){.source = cfg->source, .cache_dir = cfg->cache_dir, .routed = routed, .prefetcher = pf,
                            .mean_bytes = mean, .window = cfg->prefetch + 1, .epochs = cfg->epochs};
  /* the plan's cache: cache_mem_bytes (else cache_disk_bytes) over the
   * bytes one entry of the mean size is charged in that tier */
  *plan_cache = *plan_cache_disk = 0;
  if (plan_cache_sized(cfg))
    *plan_cache = LADE__MIN(cfg->cache_mem_bytes ? cfg->cache_mem_bytes / lade__memcache_charge(mean)
                                                 : cfg->cache_disk_bytes / lade__diskcache_charge(mean),
                            fa->count);
  /* solar with both: the disk tier under the memory tier, one hierarchy of
   * at most the dataset (docs/plan.md, Two tiers) */
  if (routed && cfg->cache_mem_bytes && cfg->cache_dir[0])
    *plan_cache_disk = LADE__MIN(cfg->cache_disk_bytes / lade__diskcache_charge(mean), fa->count - *plan_cache);
  o->two_tiers = *plan_cache_disk > 0;
  /* the policy: a routed plan drives its tier; auto is clairvoyant (Belady
   * from the order's next-use maps) while sample indices fit the maps */
  int policy = cfg->cache_policy;
  if (routed) policy = LADE__POLICY_PLAN;
  if (policy == LADE__POLICY_AUTO) policy = LADE__POLICY_CLAIRVOYANT;
  if (policy == LADE__POLICY_CLAIRVOYANT && fa->count >= UINT32_MAX) policy = LADE__POLICY_LRU;
  static const int tier_policy[] = {[LADE__POLICY_FIFO] = LADE__CACHE_FIFO,
                                    [LADE__POLICY_LRU] = LADE__CACHE_LRU,
                                    [LADE__POLICY_CLAIRVOYANT] = LADE__CACHE_CLAIRVOYANT,
                                    [LADE__POLICY_PLAN] = LADE__CACHE_PLAN};
  o->policy = tier_policy[policy];
  o->next_use = (cfg->cache_mem_bytes || cfg->cache_dir[0]) && o->policy == LADE__CACHE_CLAIRVOYANT;
  /* a plan's admits run ahead of the evicts of earlier steps by the
   * engine's window: each tier has room for it beyond the plan's cache */
  uint64_t slack = routed ? (uint64_t)(cfg->prefetch + 2) * cfg->batch_size : 0;
  if (cfg->cache_mem_bytes) o->mem_capacity = cfg->cache_mem_bytes + slack * lade__memcache_charge(mean);
  if (cfg->cache_dir[0]) {
    uint64_t cap = cfg->cache_disk_bytes ? cfg->cache_disk_bytes : fa->disk_free_bytes / 2;
    if (!cap) return lade__fail(LADE_EIO, "cache_dir %s: its file system has no free space", cfg->cache_dir);
    o->disk_capacity = cap + slack * lade__diskcache_charge(mean);
    if (pf) {
      /* DELI's 50/50 rule: fetch size = threshold = half the cache, in
       * samples (entries are charged in whole 4 KiB blocks on disk), less
       * the engine's own window of batches, resident too while it is read;
       * at most the dataset: a window of more positions holds no more
       * distinct samples, and the prefetcher's set and ring are sized by it
       * (half of a free disk of terabytes, in 4 KiB samples, was a set of
       * billions of entries, whose allocation failed the open) */
      uint64_t per = (mean + 64 + 4095) / 4096 * 4096;
      uint64_t slots = cap / per, window = (uint64_t)(cfg->prefetch + 1) * cfg->batch_size;
      uint64_t half = LADE__MAX(LADE__MIN((slots > window ? slots - window : 0) / 2, fa->count), 1);
      o->fetch_size = cfg->fetch_size ? cfg->fetch_size : half;
      o->threshold = cfg->prefetch_threshold ? cfg->prefetch_threshold : o->fetch_size;
    }
  }
  if (fa->remote && cfg->readahead_bytes) {
    o->ra_samples = LADE__MAX(LADE__MIN(cfg->readahead_bytes / mean, RA_MAX_SAMPLES), 1);
    if (!routed && !pf) o->ra_steps = o->ra_samples / cfg->batch_size;
  }
  return 0;
}

#ifdef LADE_HAVE_UCX
#define HAVE_UCX true
#else
#define HAVE_UCX false
#endif
#ifdef LADE_HAVE_MPI
#define HAVE_MPI true
#else
#define HAVE_MPI false
#endif

/* A transport `which` this build lacks (built false) where *mode chose it:
 * asked for by name, an error saying how to build it; chosen by auto, no
 * transport (*mode local) and *note set for the note at open. */
static int unbuilt(bool built, int asked, int which, int *mode, bool *note, const char *how) {
  if (built || *mode != which) return 0;
  if (asked == which) return lade__fail(LADE_EUNSUPPORTED, "%s", how);
  *note = true;
  *mode = LADE__TRANSPORT_LOCAL;
  return 0;
}

/* The transport a routed plan needs (docs/transport.md): MPI when asked, or
 * (auto) when started by an MPI launcher with more than one process; UCX
 * when asked, or (auto) when the peers were set up by lade_ucx_set_peers()
 * (the Python module over torch.distributed), or with a rendezvous_dir and
 * a world size (the settings' or torchrun's); under torchrun without
 * either, none, with a note saying how. Without MPI, under a launcher or
 * torchrun, the launcher's rank and world, unless the settings name them:
 * the same command runs from a laptop to mpirun or torchrun. Under MPI,
 * rank and world come from MPI once it is open. */
static int resolve_transport(const struct lade_config *cfg, const lade__source_facts_t *fa, lade__resolved_t *r) {
  int mode = cfg->transport;
  r->rank = cfg->rank;
  r->world = cfg->world_size;
  bool routed = routed_kind(cfg);
  if (mode == LADE__TRANSPORT_AUTO) {
    if (routed && fa->launched) mode = LADE__TRANSPORT_MPI;
    else if (routed && (fa->ucx_peers > 1 || (cfg->rendezvous_dir[0] && (cfg->world_size > 1 || fa->torchrun))))
      mode = LADE__TRANSPORT_UCX;
    else mode = LADE__TRANSPORT_LOCAL;
    r->note_no_peers = mode == LADE__TRANSPORT_LOCAL && routed && fa->torchrun && !fa->launched;
  }
  bool unset = cfg->world_size == 1 && cfg->rank == 0;
  if (mode == LADE__TRANSPORT_LOCAL && fa->launched && unset) {
    r->rank = fa->launched_rank;
    r->world = fa->launched_world;
  } else if (mode != LADE__TRANSPORT_MPI && !fa->launched && fa->torchrun && unset) {
    r->rank = fa->torchrun_rank;
    r->world = fa->torchrun_world;
  }
  int rc = unbuilt(HAVE_UCX, cfg->transport, LADE__TRANSPORT_UCX, &mode, &r->note_no_ucx,
                   "transport=ucx: this build has no UCX (LADE_WITH_UCX; apt-get install libucx-dev)");
  if (!HAVE_UCX) { /* torchrun's ranks without UCX: the note says no UCX, not how to set it up */
    r->note_no_ucx |= r->note_no_peers;
    r->note_no_peers = false;
  }
  if (!rc)
    rc = unbuilt(HAVE_MPI, cfg->transport, LADE__TRANSPORT_MPI, &mode, &r->note_no_mpi,
                 "transport=mpi: this build has no MPI (LADE_WITH_MPI; apt-get install libopenmpi-dev openmpi-bin)");
  if (!rc) r->transport = mode;
  return rc;
}

int lade__resolve_topology(const struct lade_config *cfg, const uint32_t *node_lead, bool env_ok, uint32_t env_rank,
                           uint32_t env_size, lade__resolved_t *r) {
  lade__topology_in_t in = {.rank = r->rank,
                            .world = r->world,
                            .ranks_per_node = cfg->ranks_per_node,
                            .node_lead = node_lead,
                            .have_env = env_ok,
                            .env_local_rank = env_rank,
                            .env_local_size = env_size};
  int rc = lade__topology(&in, &r->topo);
  if (!rc) r->cursor.plan.ranks_per_node = lade__resolve_plan_nodes(cfg, node_lead, &r->topo, r->world);
  return rc;
}

uint32_t lade__resolve_plan_nodes(const struct lade_config *cfg, const uint32_t *node_lead, const lade__topology_t *t,
                                  uint32_t world) {
  uint32_t rpn = t->ranks_per_node;
  if (rpn <= 1 || world % rpn) return 1;
  if (cfg->ranks_per_node) return rpn; /* the setting: blocks by definition */
  if (node_lead) /* MPI's answer: node-aware only when every node is a block of rpn consecutive ranks */
    for (uint32_t q = 0; q < world; q++)
      if (node_lead[q] != q - q % rpn) return 1;
  return rpn; /* the launcher's local rank and size are taken only as such blocks */
}

/* A node-aware plan (distcache, locality, solar with nodes of more than one
 * rank) keeps its node's cache in one segment shared by the node's ranks,
 * in plan mode: intra-node handoffs are reads of it, not messages
 * (docs/plan.md "Nodes"). It needs the memory tier alone and a transport
 * (which agrees on the segment's name: pipeline.c); no job key. */
static const char *node_plan_missing(const struct lade_config *cfg, const lade__resolved_t *r) {
  int k = cfg->plan;
  if (k != LADE_PLAN_DISTCACHE && k != LADE_PLAN_LOCALITY && k != LADE_PLAN_SOLAR)
    return "a routed plan shares the node's cache only for the node-aware kinds (distcache, locality, solar)";
  if (r->cursor.plan.ranks_per_node < 2) return "the plan has one rank per node";
  if (!cfg->cache_mem_bytes || cfg->cache_dir[0]) return "a routed plan shares the memory cache alone (no cache_dir)";
  if (r->transport != LADE__TRANSPORT_MPI && r->transport != LADE__TRANSPORT_UCX)
    return "a routed plan shares the node's cache under a transport (mpirun, or torchrun with UCX)";
  return NULL;
}

int lade__resolve_node_cache(const struct lade_config *cfg, const char *env_job, lade__resolved_t *r) {
  lade__fetch_conf_t *o = &r->fetch;
  o->node_cache = o->node_disk = o->node_plan = false;
  r->note_no_job_key = r->note_node_fifo = false;
  if (cfg->node_cache == LADE__TRISTATE_OFF) return 0;
  if (routed_kind(cfg)) {
    const char *why = node_plan_missing(cfg, r);
    if (why)
      return cfg->node_cache == LADE__TRISTATE_ON
                 ? lade__fail(LADE_EINVAL, "setting 'node_cache=on': %s (node_cache=off: a cache per rank)", why)
                 : 0;
    uint32_t rpn = r->cursor.plan.ranks_per_node;
    o->node_cache = o->node_plan = true;
    o->node_local = r->rank % rpn;
    o->node_ranks = rpn;
    o->node_base = r->rank - o->node_local;
    snprintf(r->job_key, sizeof r->job_key, "%s#plan-node%u", cfg->job_id[0] ? cfg->job_id : env_job ? env_job : "",
             r->rank / rpn);
    o->job_key = r->job_key;
    o->shm_dir = cfg->shm_dir;
    o->node_timeout_ms = cfg->peer_timeout_ms;
    /* the node's budget, each rank's admits ahead of the node's evicts (its window), and half as much again
     * for the records moved forward (shmcache.c, plan mode) */
    uint64_t mean = LADE__MAX(o->mean_bytes, 1), per = lade__shmcache_charge(mean);
    uint64_t ahead = (uint64_t)rpn * (cfg->prefetch + 2) * cfg->batch_size * per;
    o->mem_capacity = (cfg->cache_mem_bytes + ahead) / 2 * 3;
    o->node_slots = LADE__MAX((o->mem_capacity / per + 1) * 4, 1024);
    return 0;
  }
  bool on = cfg->node_cache == LADE__TRISTATE_ON;
  /* the memory tier shared unless clairvoyant; the disk tier shared whatever its policy (each rank orders its own
   * entries) */
  bool mp = model_parallel_groups(cfg) && !cfg->cache_mem_bytes; /* a staging budget of its own */
  bool mem = (cfg->cache_mem_bytes && cfg->cache_policy != LADE__POLICY_CLAIRVOYANT) || mp, disk = cfg->cache_dir[0];
  const char *why = !cfg->cache_mem_bytes && !disk && !mp ? "needs cache_mem_bytes or cache_dir (the node's budget)"
                    : cfg->cache_mem_bytes && !mem ? "evicts in insertion order, not by one rank's next uses: "
                                                     "cache_policy=clairvoyant is per rank"
                                                   : NULL;
  if (why) return on ? lade__fail(LADE_EINVAL, "setting 'node_cache=on' %s (node_cache=off: a cache per rank)", why) : 0;
  if (!on && r->topo.ranks_per_node < 2) return 0;
  const char *job = cfg->job_id[0] ? cfg->job_id : env_job ? env_job : "";
  if (!job[0]) {
    if (on)
      return lade__fail(LADE_EINVAL, "setting 'node_cache=on': the ranks of a node need a job key they share and no "
                        "other job uses: set job_id (none of TORCHELASTIC_RUN_ID, SLURM_JOB_ID, PMIX_NAMESPACE, "
                        "MASTER_ADDR/MASTER_PORT is set)");
    r->note_no_job_key = true; /* auto: a cache per rank, and say why */
    return 0;
  }
  /* the node's number too: nodes made by ranks_per_node on one machine keep their own caches */
  snprintf(r->job_key, sizeof r->job_key, "%s#node%u", job, r->topo.node);
  o->node_cache = mem;
  o->node_disk = disk;
  /* one rank's recency cannot order the node's entries: the segment is FIFO (docs/cache.md, Node cache) */
  r->note_node_fifo = mem && cfg->cache_policy == LADE__POLICY_LRU;
  if (mp) o->mem_capacity = stage_bytes(cfg, r->topo.ranks_per_node, o->mean_bytes);
  o->shm_dir = cfg->shm_dir;
  o->job_key = r->job_key;
  o->node_timeout_ms = cfg->peer_timeout_ms;
  /* room in the index for samples down to a third of the mean size */
  uint64_t mean = LADE__MAX(o->mean_bytes, 1), expected = o->mem_capacity / lade__shmcache_charge(mean) + 1;
  o->node_slots = LADE__MAX(expected * 4, 1024);
  return 0;
}

static int resolve_transform(const struct lade_config *cfg, const lade__source_facts_t *fa) {
  const lade__source_kind_t *k = &fa->kind;
  switch (cfg->transform) {
    case LADE__XF_RAW: return LADE__RXF_RAW;
    case LADE__XF_NPY: return LADE__RXF_NPY;
    case LADE__XF_IMAGENET_EVAL: return LADE__RXF_IMAGENET_EVAL;
    case LADE__XF_IMAGENET_TRAIN: return LADE__RXF_IMAGENET_TRAIN;
    case LADE__XF_NPZ: return LADE__RXF_NPZ;
    default:
      return k->is_npy || k->is_hdf5 ? LADE__RXF_NPY : fa->npz ? LADE__RXF_NPZ : LADE__RXF_IMAGENET_TRAIN;
  }
}

lade__xform_conf_t lade__resolve_xform(const struct lade_config *cfg) {
  return (lade__xform_conf_t){.raw_size = cfg->raw_size,
                            .raw_cut = cfg->raw_overflow == 1,
                            .npy_dtype = cfg->npy_dtype,
                            .npz_member = cfg->npz_member,
                            .crop_size = cfg->crop_size,
                            .resize_size = cfg->resize_size,
                            .image_dtype = cfg->image_dtype,
                            .decode_scale = cfg->decode_scale == LADE__DECODE_SCALE_AUTO,
                            .scale_min = cfg->scale_min,
                            .scale_max = cfg->scale_max,
                            .ratio_min = cfg->ratio_min,
                            .ratio_max = cfg->ratio_max,
                            .hflip = cfg->hflip};
}

/* A saved position (lade_config_set_position) resumes a run of the same
 * plan, dataset and seed; world size and batch size may differ (the cursor
 * re-stripes, docs/plan.md "Resume"). */
static int resolve_position(const struct lade_config *cfg, const lade__source_facts_t *fa, lade__cursor_params_t *cp) {
  if (!cfg->has_position) return 0;
  const lade_position_t *pos = &cfg->position;
  const char *why = NULL;
  char saved[64], here[64];
  if (pos->kind != cfg->plan) {
    why = "plan";
    snprintf(saved, sizeof saved, "%s", lade_plan_kind_name(pos->kind));
    snprintf(here, sizeof here, "%s", lade_plan_kind_name(cfg->plan));
  } else if (pos->samples != fa->count) {
    why = "dataset size (samples)";
    snprintf(saved, sizeof saved, "%llu", (unsigned long long)pos->samples);
    snprintf(here, sizeof here, "%llu", (unsigned long long)fa->count);
  } else if (pos->seed != cfg->seed) {
    why = "seed";
    snprintf(saved, sizeof saved, "%llu", (unsigned long long)pos->seed);
    snprintf(here, sizeof here, "%llu", (unsigned long long)cfg->seed);
  } else if (!pos->world_size || !pos->batch_size || !pos->groups || pos->groups > pos->world_size ||
             pos->world_size % pos->groups || (pos->kind != LADE_PLAN_SHARDS && pos->groups != pos->world_size)) {
    return lade__fail(LADE_EINVAL, "the resume position names world_size %u, batch_size %u, %u groups: not a saved "
                      "position (lade_loader_position)", pos->world_size, pos->batch_size, pos->groups);
  }
  if (why)
    return lade__fail(LADE_EINVAL, "the resume position was saved with another %s (%s; this loader: %s): only "
                      "world_size and batch_size may change on resume", why, saved, here);
  /* each field in its own range: a position past the run never ends it silently */
  uint64_t E = cfg->epochs;
  if (pos->epoch > E || pos->shuffle_epoch > E || (pos->epoch == E) != (pos->shuffle_epoch == E))
    return lade__fail(LADE_ERANGE, "the resume position's epoch %llu (epoch order %llu) is out of range: epochs are 0 "
                      "to %llu on this loader (%llu epochs; %llu is the end)", (unsigned long long)pos->epoch,
                      (unsigned long long)pos->shuffle_epoch, (unsigned long long)(E ? E - 1 : 0),
                      (unsigned long long)E, (unsigned long long)E);
  if (pos->shuffle_epoch != pos->epoch && pos->kind != LADE_PLAN_SOLAR)
    return lade__fail(LADE_EINVAL, "the resume position's epoch order %llu is not its epoch %llu: only plan solar "
                      "reorders epochs", (unsigned long long)pos->shuffle_epoch, (unsigned long long)pos->epoch);
  /* (dlio counts its steps' samples, which may repeat the files: dlio_samples_per_file) */
  if ((pos->consumed > fa->count && pos->kind != LADE_PLAN_DLIO) || (pos->epoch == E && pos->consumed))
    return lade__fail(LADE_ERANGE, "the resume position says %llu samples of epoch %llu were consumed: out of range "
                      "(0 to the dataset's %llu; 0 at the end)", (unsigned long long)pos->consumed,
                      (unsigned long long)pos->epoch, (unsigned long long)fa->count);
  if ((pos->base_groups && pos->kind != LADE_PLAN_SHARDS) || !pos->base_groups != !pos->base_batch ||
      (!pos->base_groups && pos->base_consumed) || pos->base_consumed > fa->count)
    return lade__fail(LADE_EINVAL, "the resume position's base layout (%u groups of batch %u, %llu consumed) is not "
                      "one a saved position holds (plan shards only)", pos->base_groups, pos->base_batch,
                      (unsigned long long)pos->base_consumed);
  cp->resumed = true;
  cp->resume = *pos;
  return 0;
}

/* A planned kind's disk cache is the plan's start: what survived an earlier
 * run (a restart) is not read again (docs/plan.md "Warm restarts"). */
static void resolve_warm(const struct lade_config *cfg, lade__fetch_conf_t *f) {
  f->warm = f->routed && cfg->cache_dir[0] && !cfg->cache_mem_bytes; /* two tiers start empty */
}

int lade__resolve(const struct lade_config *cfg, const lade__source_facts_t *fa, lade__resolved_t *r) {
  memset(r, 0, sizeof *r);
  uint64_t plan_cache = 0, plan_cache_disk = 0;
  int rc = resolve_fetch(cfg, fa, &r->fetch, &plan_cache, &plan_cache_disk);
  if (!rc) rc = resolve_transport(cfg, fa, r);
  if (rc) return rc;
  r->transform = resolve_transform(cfg, fa);
  if (r->transform != LADE__RXF_NPZ && npz_member_given(cfg))
    return lade__fail(LADE_EINVAL, "setting 'npz_member' applies to the npz transform only; %s is read with "
                      "transform=%s%s (set transform=npz)", cfg->source,
                      r->transform == LADE__RXF_RAW ? "raw" : r->transform == LADE__RXF_NPY ? "npy"
                      : r->transform == LADE__RXF_IMAGENET_EVAL ? "imagenet-eval" : "imagenet-train",
                      cfg->transform == LADE__XF_AUTO ? " (auto: its files are not .npz archives)" : "");
  r->xform = lade__resolve_xform(cfg);
  r->threads = cfg->threads ? cfg->threads : LADE__MAX(fa->online_cores, 1);
  lade__cursor_params_t *cp = &r->cursor;
  *cp = (lade__cursor_params_t){.rank = r->rank,
                                .shuffle = cfg->shuffle,
                                .drop_last = cfg->drop_last,
                                .shard_offsets = fa->shard_offsets,
                                .shards = fa->shards,
                                .shuffle_buffer = cfg->shuffle_buffer,
                                .dlio_reader = cfg->dlio_reader,
                                .dlio_rep = cfg->dlio_samples_per_file,
                                .dlio_interleave = cfg->dlio_interleave,
                                .model_parallel = cfg->model_parallel,
                                .devices_per_node = cfg->devices_per_node};
  lade_plan_settings_default(&cp->plan, sizeof cp->plan);
  cp->plan.kind = cfg->plan;
  cp->plan.samples = fa->count;
  cp->plan.learners = r->world;
  cp->plan.batch_size = cfg->batch_size;
  cp->plan.epochs = cfg->epochs;
  cp->plan.seed = cfg->seed;
  cp->plan.balance_peer = cfg->plan_balance == 0;
  cp->plan.reorder = cfg->plan_reorder;
  cp->plan.order_algo = cfg->plan_order;
  cp->plan.imbalance = cfg->plan_imbalance;
  cp->plan.coalesce = 0;
  cp->plan.cache = plan_cache;
  cp->plan.cache_disk = plan_cache_disk;
  resolve_warm(cfg, &r->fetch);
  return resolve_position(cfg, fa, cp);
}
