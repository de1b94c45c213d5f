/*
 * resolve.h - every setting turned, once, into what each module acts on.
 *
 * A loader's settings (core/config.h) interact: a plan that routes samples
 * needs one cache tier and the `plan` policy, cache_mem_bytes means a
 * number of samples to the planner and a number of bytes to the memory
 * tier, the DELI prefetcher needs a disk tier and sizes its window from the
 * disk capacity and the mean sample size, read-ahead is bounded by the
 * remote source's table of unread results. All of those rules, and every
 * error about settings that do not go together, live in resolve.c, in two
 * pure functions (no threads, no files, no source reads): one before the
 * source is opened (settings alone and the chosen backend), one after (with
 * what the source reported). The engine hands each module only its part of
 * the result: the cursor its params, the fetch stage a lade__fetch_conf_t,
 * the cache tiers their options. docs/architecture.md walks one setting
 * through it.
 */
#ifndef LADE__RESOLVE_H
#define LADE__RESOLVE_H

#include <stdbool.h>
#include <stdint.h>

#include "core/config.h"
#include "engine/fetch.h"
#include "transform/transform.h"
#include "cursor/cursor.h"
#include "transport/topology.h"

/* The transform the engine runs (the `transform` setting, auto resolved). */
enum { LADE__RXF_RAW = 1, LADE__RXF_NPY, LADE__RXF_IMAGENET_TRAIN, LADE__RXF_IMAGENET_EVAL, LADE__RXF_NPZ };

/* What the chosen backend is, before it is opened. */
typedef struct lade__source_kind {
  const char *name; /* the backend's name: dir, npy, tar, hdf5, s3 */
  bool is_dir, is_npy, is_hdf5, is_s3;
} lade__source_kind_t;

/* What the opened source and the process report: the inputs of resolve
 * besides the settings. */
typedef struct lade__source_facts {
  lade__source_kind_t kind;
  uint64_t count;            /* samples */
  uint64_t mean_bytes;       /* mean sample size; only needed where lade__resolve_wants_mean() */
  bool npz;                  /* a dir source under transform=auto found .npz files (auto picks npz) */
  bool remote;               /* the source fetches in the background (submit) */
  const uint64_t *shard_offsets; /* tar shards: shards + 1 offsets (borrowed), else NULL */
  uint64_t shards;
  uint64_t disk_free_bytes;  /* free bytes of cache_dir's file system; only needed with cache_dir and no cache_disk_bytes */
  bool launched;             /* started by an MPI-style launcher with more than one process */
  uint32_t launched_rank, launched_world;
  uint32_t online_cores;
  bool torchrun;             /* started by torchrun with more than one process */
  uint32_t torchrun_rank, torchrun_world;
  uint32_t ucx_peers;        /* the world size lade_ucx_set_peers() set up in this process (0: none) */
} lade__source_facts_t;

typedef struct lade__resolved {
  lade__cursor_params_t cursor; /* the order (the plan's cache resolved to samples) */
  lade__fetch_conf_t fetch;
  int transform;                /* LADE__RXF_* */
  lade__xform_conf_t xform;     /* its settings */
  int transport;                /* LADE__TRANSPORT_LOCAL, _MPI or _UCX */
  bool note_no_mpi;             /* under an MPI launcher, a routed plan, no MPI in this build: say so */
  bool note_no_ucx;             /* under torchrun, a routed plan, no UCX in this build: say so */
  bool note_no_peers;           /* under torchrun, a routed plan, no way to reach the peers (auto): say how */
  uint32_t rank, world;         /* before an MPI transport reports its own */
  lade__topology_t topo;        /* this rank's node (set once the transport is open: lade__resolve_topology) */
  char job_key[320];            /* the node cache's job key (lade__resolve_node_cache); fetch.job_key points here */
  bool note_no_job_key;         /* node_cache=auto would share the node's cache but no job key is known: say so */
  bool note_node_fifo;          /* cache_policy=lru named, but the node's shared memory tier evicts FIFO: say so */
  uint32_t threads;             /* worker threads */
} lade__resolved_t;

/* Settings alone and the chosen backend: every error a setting can be
 * refused with before the source is opened (rank against world, ranges
 * that cross, settings that the backend would ignore, a transform this
 * build lacks). Pure. */
int lade__resolve_settings(const struct lade_config *cfg, const lade__source_kind_t *kind);

/* Whether lade__resolve needs facts->mean_bytes for these settings (the
 * plan's cache count, the prefetcher's window, read-ahead); a source without
 * listed sizes is read for it, so it is asked only when needed. */
bool lade__resolve_wants_mean(const struct lade_config *cfg, bool remote);

/* Whether it needs facts->disk_free_bytes (cache_dir without cache_disk_bytes). */
bool lade__resolve_wants_disk_free(const struct lade_config *cfg);
/* The ranks of this node that open the dataset, before the transport is
 * open (the source's node_ranks: the node-wide bounds on requests are
 * split among them): the setting ranks_per_node, else the launcher's local
 * size (env_ok, env_size: lade__topology_env), else 1. Pure. */
uint32_t lade__resolve_node_ranks(const struct lade_config *cfg, bool env_ok, uint32_t env_size);
/* The source's job: a hash of the setting job_id, else of env_job
 * (lade__topology_job_key; NULL or "": none), never 0; 0 when neither
 * names the job. Pure. */
uint64_t lade__resolve_job(const struct lade_config *cfg, const char *env_job);

/* Everything else: the cursor's params, each tier's capacity in bytes and
 * the plan's in samples, the cache policy, the prefetcher's window, the
 * read-ahead depth, the transport, the transform, the threads. Errors are
 * the settings that do not go together, named with the setting to change.
 * Pure: out is filled from cfg and facts alone. */
int lade__resolve(const struct lade_config *cfg, const lade__source_facts_t *facts, lade__resolved_t *out);

/* The nodes (transport/topology.h), once the transport is open and rank and
 * world are final: from the setting ranks_per_node, else MPI's answer
 * (node_lead, per rank the lowest rank on its node; NULL without MPI), else
 * the launcher's local rank and size (env_ok, env_rank, env_size). Fills
 * out->topo. Pure; LADE_EINVAL when ranks_per_node does not divide the world. */
int lade__resolve_topology(const struct lade_config *cfg, const uint32_t *node_lead, bool env_ok, uint32_t env_rank,
                           uint32_t env_size, lade__resolved_t *out);
/* The plan's ranks_per_node (lade_plan_settings_t; docs/plan.md, Nodes), set
 * in out->cursor by lade__resolve_topology: the node size when the nodes are
 * blocks of that many consecutive ranks (the setting, the launcher's local
 * size, or MPI's answer when it has that shape), else 1 (every rank plans as
 * its own node). Every rank computes the same value. Pure. */
uint32_t lade__resolve_plan_nodes(const struct lade_config *cfg, const uint32_t *node_lead, const lade__topology_t *t,
                                  uint32_t world);

/* The node cache (docs/cache.md, Node cache), once the nodes are known
 * (after lade__resolve_topology): node_cache=on, or auto with more than one
 * rank on the node, cache_mem_bytes, a plan that does not route, and a job
 * key (the setting job_id, else env_job: lade__topology_job_key). Fills
 * out->fetch's node fields and out->job_key; auto without a job key sets
 * out->note_no_job_key and stays per rank. Pure; LADE_EINVAL naming the
 * setting when node_cache=on cannot be. */
int lade__resolve_node_cache(const struct lade_config *cfg, const char *env_job, lade__resolved_t *out);

/* The setting device: -1 for cpu, else the CUDA device number (cuda:N), or
 * LADE__CUDA_CURRENT for cuda (core/cuda.h: the creating thread's current
 * device); LADE_EINVAL naming the forms for anything else. Pure. */
int lade__resolve_device(const struct lade_config *cfg, int *ordinal);

/* The transform's part of the settings alone (lade__resolve fills
 * out->xform with it; tools that run a transform without a loader call it).
 * Borrows cfg->npy_dtype and cfg->npz_member. */
lade__xform_conf_t lade__resolve_xform(const struct lade_config *cfg);

#endif
