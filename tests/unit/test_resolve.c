/* test_resolve.c - engine/resolve.c without threads, files or a source:
 * settings plus what a source would report, in; each module's part and the
 * cross-setting errors, out. */
#include <string.h>

#include "cache/cache.h"
#include "core/config.h"
#include "engine/resolve.h"
#include "harness.h"

static const lade__source_kind_t DIR_KIND = {.name = "dir", .is_dir = true};
static const lade__source_kind_t NPY_KIND = {.name = "npy", .is_npy = true};
static const lade__source_kind_t TAR_KIND = {.name = "tar"};

/* Settings from "key=value" pairs (NULL-terminated) over the defaults. */
static lade_config_t *settings(const char *kv[]) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  lade_config_set(c, "source", "/data/x");
  for (int i = 0; kv && kv[i]; i++) {
    char key[64];
    const char *eq = strchr(kv[i], '=');
    snprintf(key, sizeof key, "%.*s", (int)(eq - kv[i]), kv[i]);
    if (lade_config_set(c, key, eq + 1) != 0) fprintf(stderr, "  bad setting %s: %s\n", kv[i], lade_last_error());
  }
  return c;
}

static lade__source_facts_t facts(uint64_t count, uint64_t mean, bool remote) {
  return (lade__source_facts_t){.kind = remote ? TAR_KIND : DIR_KIND, .count = count, .mean_bytes = mean,
                                .remote = remote, .online_cores = 2};
}

static int resolve(const char *kv[], const lade__source_facts_t *fa, lade__resolved_t *r) {
  lade_config_t *c = settings(kv);
  int rc = lade__resolve(c, fa, r);
  lade_config_destroy(c);
  return rc;
}

static bool wants_mean(const char *kv[], bool remote) {
  lade_config_t *c = settings(kv);
  bool r = lade__resolve_wants_mean(c, remote);
  lade_config_destroy(c);
  return r;
}

static bool wants_disk_free(const char *kv[]) {
  lade_config_t *c = settings(kv);
  bool r = lade__resolve_wants_disk_free(c);
  lade_config_destroy(c);
  return r;
}

static void expect_error(const char *kv[], const lade__source_facts_t *fa, const char *text) {
  lade__resolved_t r;
  int rc = resolve(kv, fa, &r);
  CHECK(rc == LADE_EINVAL || rc == LADE_EIO || rc == LADE_EUNSUPPORTED);
  if (!strstr(lade_last_error(), text)) fprintf(stderr, "  wanted \"%s\" in: %s\n", text, lade_last_error());
  CHECK(strstr(lade_last_error(), text) != NULL);
}

/* cache_mem_bytes: a number of bytes to the memory tier, a number of
 * samples to a routed plan, with room for the engine's window beyond it. */
static void test_cache_mem_bytes_walk(void) {
  lade__source_facts_t fa = facts(5000, 1000, false);
  lade__resolved_t r;
  const char *regular[] = {"cache_mem_bytes=1048576", "batch_size=32", "prefetch=2", NULL};
  CHECK_OK(resolve(regular, &fa, &r));
  CHECK_EQ_INT(r.fetch.mem_capacity, 1048576);
  CHECK_EQ_INT(r.cursor.plan.cache, 0);
  CHECK_EQ_INT(r.fetch.policy, LADE__CACHE_CLAIRVOYANT); /* auto */
  CHECK(r.fetch.next_use);
  CHECK(!r.fetch.routed);
  CHECK_EQ_INT(r.fetch.disk_capacity, 0);

  const char *routed[] = {"cache_mem_bytes=1048576", "batch_size=32", "prefetch=2", "plan=locality", NULL};
  CHECK_OK(resolve(routed, &fa, &r));
  uint64_t charge = lade__memcache_charge(1000);
  CHECK_EQ_INT(r.cursor.plan.cache, 1048576 / charge);
  CHECK_EQ_INT(r.fetch.mem_capacity, 1048576 + (2 + 2) * 32 * charge);
  CHECK_EQ_INT(r.fetch.policy, LADE__CACHE_PLAN);
  CHECK(r.fetch.routed);
  CHECK(!r.fetch.next_use);
  CHECK_EQ_INT(r.cursor.plan.kind, LADE_PLAN_LOCALITY);
  CHECK_EQ_INT(r.cursor.plan.samples, 5000);
  CHECK_EQ_INT(r.cursor.plan.batch_size, 32);

  /* never more samples than the dataset has */
  const char *big[] = {"cache_mem_bytes=1073741824", "plan=distcache", NULL};
  CHECK_OK(resolve(big, &fa, &r));
  CHECK_EQ_INT(r.cursor.plan.cache, 5000);

  /* the disk tier sizes the plan's cache when it is the one tier */
  const char *disk[] = {"cache_dir=/tmp/c", "cache_disk_bytes=4096000", "plan=regular+lru", NULL};
  CHECK_OK(resolve(disk, &fa, &r));
  CHECK_EQ_INT(r.cursor.plan.cache, 4096000 / lade__diskcache_charge(1000));
  CHECK_EQ_INT(r.fetch.mem_capacity, 0);
}

static void test_policies(void) {
  lade__resolved_t r;
  lade__source_facts_t fa = facts(100, 10, false);
  const char *fifo[] = {"cache_mem_bytes=1000", "cache_policy=fifo", NULL};
  CHECK_OK(resolve(fifo, &fa, &r));
  CHECK_EQ_INT(r.fetch.policy, LADE__CACHE_FIFO);
  CHECK(!r.fetch.next_use);
  /* sample indices that do not fit the next-use maps: LRU */
  lade__source_facts_t huge = facts(UINT64_C(1) << 32, 10, false);
  const char *aut[] = {"cache_mem_bytes=1000", NULL};
  CHECK_OK(resolve(aut, &huge, &r));
  CHECK_EQ_INT(r.fetch.policy, LADE__CACHE_LRU);
  /* no tier: clairvoyant, but no maps to keep */
  CHECK_OK(resolve(NULL, &fa, &r));
  CHECK(!r.fetch.next_use);
}

/* solar with both caches: two tiers, the disk's samples at most the rest of
 * the dataset; they start empty (no warm start from the disk). */
static void test_two_tiers(void) {
  lade__source_facts_t fa = facts(100, 10, false);
  lade__resolved_t r;
  const char *a[] = {"plan=solar", "epochs=3", "cache_mem_bytes=740", "cache_dir=/tmp/x", "cache_disk_bytes=81920",
                     NULL};
  CHECK_OK(resolve(a, &fa, &r));
  CHECK_EQ_INT(r.cursor.plan.cache, 10); /* 740 / (10 + 64) */
  CHECK_EQ_INT(r.cursor.plan.cache_disk, 20); /* 81920 / 4096 */
  CHECK(r.fetch.two_tiers && r.fetch.routed && !r.fetch.warm);
  const char *b[] = {"plan=solar", "epochs=3", "cache_mem_bytes=740", "cache_dir=/tmp/x", "cache_disk_bytes=8192000",
                     NULL};
  CHECK_OK(resolve(b, &fa, &r));
  CHECK_EQ_INT(r.cursor.plan.cache_disk, 90); /* the rest of the dataset */
  const char *c[] = {"plan=solar", "epochs=3", "cache_dir=/tmp/x", "cache_disk_bytes=81920", NULL};
  CHECK_OK(resolve(c, &fa, &r));
  CHECK(!r.fetch.two_tiers && r.fetch.warm);
  CHECK_EQ_INT(r.cursor.plan.cache_disk, 0);
}

static void test_cross_setting_errors(void) {
  lade__source_facts_t fa = facts(100, 10, false);
  const char *a[] = {"plan=locality", "cache_mem_bytes=1000", "cache_policy=fifo", NULL};
  expect_error(a, &fa, "cache_policy must be auto or plan");
  const char *b[] = {"plan=distcache", "cache_mem_bytes=1000", "cache_dir=/tmp/x", "cache_disk_bytes=10", NULL};
  expect_error(b, &fa, "set cache_mem_bytes or cache_dir, not both (memory and disk as two tiers of one plan: "
                       "plan=solar)");
  const char *c[] = {"plan=locality", "cache_dir=/tmp/x", NULL};
  expect_error(c, &fa, "set cache_disk_bytes");
  const char *d[] = {"plan=distcache", "prefetcher=on", "cache_mem_bytes=1000", NULL};
  expect_error(d, &fa, "runs with the regular plan only");
  const char *e[] = {"cache_policy=plan", "cache_mem_bytes=1000", NULL};
  expect_error(e, &fa, "cache_policy=plan follows a plan");
  const char *f[] = {"prefetcher=on", NULL};
  expect_error(f, &fa, "prefetcher=on needs a disk cache");
  /* half the free space, and none free */
  const char *g[] = {"cache_dir=/tmp/x", NULL};
  expect_error(g, &fa, "its file system has no free space");

  lade_config_t *cfg = settings((const char *[]){"rank=2", "world_size=2", NULL});
  CHECK(lade__resolve_settings(cfg, &DIR_KIND) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "'rank' (2) must be below 'world_size' (2)") != NULL);
  lade_config_destroy(cfg);
  cfg = settings((const char *[]){"label_file=/tmp/labels.txt", NULL});
  CHECK(lade__resolve_settings(cfg, &DIR_KIND) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "'label_file' applies to s3:// sources only") != NULL);
  lade_config_destroy(cfg);
  cfg = settings((const char *[]){"hdf5_gap=4", NULL});
  CHECK(lade__resolve_settings(cfg, &NPY_KIND) == LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "'hdf5_*' apply to HDF5 sources only") != NULL);
  lade_config_destroy(cfg);
  cfg = settings((const char *[]){"npy_dtype=float32", NULL});
  CHECK_OK(lade__resolve_settings(cfg, &NPY_KIND));
  lade_config_destroy(cfg);
}

/* The DELI prefetcher in front of a remote source: half the disk cache
 * (4 KiB blocks), less the engine's window, per window and trigger. */
static void test_prefetcher_window_and_readahead(void) {
  lade__source_facts_t fa = facts(100000, 100000, true);
  fa.disk_free_bytes = UINT64_C(2) << 30;
  lade__resolved_t r;
  const char *deli[] = {"cache_dir=/tmp/c", "batch_size=16", "prefetch=3", NULL};
  CHECK(wants_disk_free(deli));
  CHECK(wants_mean(deli, true));
  CHECK_OK(resolve(deli, &fa, &r));
  CHECK(r.fetch.prefetcher);
  uint64_t per = (100000 + 64 + 4095) / 4096 * 4096, slots = (UINT64_C(1) << 30) / per;
  CHECK_EQ_INT(r.fetch.disk_capacity, UINT64_C(1) << 30);
  CHECK_EQ_INT(r.fetch.fetch_size, (slots - 4 * 16) / 2);
  CHECK_EQ_INT(r.fetch.threshold, r.fetch.fetch_size);
  /* a disk that holds the dataset many times: a window of the dataset, no
   * more (the prefetcher's set and ring are sized by it) */
  lade__source_facts_t few = facts(1000, 100000, true);
  few.disk_free_bytes = UINT64_C(2) << 40;
  lade__resolved_t rf;
  CHECK_OK(resolve(deli, &few, &rf));
  CHECK_EQ_INT(rf.fetch.fetch_size, 1000);
  CHECK_EQ_INT(rf.fetch.threshold, 1000);
  /* read-ahead (64 MiB default) bounds the prefetcher's unread samples;
   * no step read-ahead with the prefetcher on */
  CHECK_EQ_INT(r.fetch.ra_samples, (64u << 20) / 100000);
  CHECK_EQ_INT(r.fetch.ra_steps, 0);
  /* without the prefetcher, steps are read ahead; never more than 1,024 samples */
  const char *plain[] = {"batch_size=16", NULL};
  CHECK_OK(resolve(plain, &fa, &r));
  CHECK(!r.fetch.prefetcher);
  CHECK_EQ_INT(r.fetch.ra_steps, ((64u << 20) / 100000) / 16);
  lade__source_facts_t small = facts(100000, 100, true);
  CHECK_OK(resolve(plain, &small, &r));
  CHECK_EQ_INT(r.fetch.ra_samples, 1024);
  /* a local source reads nothing ahead and needs no mean size */
  lade__source_facts_t local = facts(100000, 0, false);
  CHECK(!wants_mean(plain, false));
  CHECK(wants_mean(plain, true));
  CHECK_OK(resolve(plain, &local, &r));
  CHECK_EQ_INT(r.fetch.ra_samples, 0);
  CHECK_EQ_INT(r.fetch.mean_bytes, 0);
}

static void test_transport_transform_threads(void) {
  lade__source_facts_t fa = facts(100, 10, false);
  fa.launched = true;
  fa.launched_rank = 2;
  fa.launched_world = 4;
  lade__resolved_t r;
  CHECK_OK(resolve(NULL, &fa, &r));
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_LOCAL);
  CHECK_EQ_INT(r.rank, 2); /* the launcher's rank and world for the regular plan */
  CHECK_EQ_INT(r.world, 4);
  CHECK_EQ_INT(r.cursor.rank, 2);
  CHECK_EQ_INT(r.cursor.plan.learners, 4);
  const char *named[] = {"rank=1", "world_size=2", NULL};
  CHECK_OK(resolve(named, &fa, &r));
  CHECK_EQ_INT(r.rank, 1); /* settings win */
  CHECK_EQ_INT(r.world, 2);
  const char *routed[] = {"plan=distcache", NULL};
  CHECK_OK(resolve(routed, &fa, &r));
#ifdef LADE_HAVE_MPI
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_MPI);
#else
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_LOCAL);
  CHECK(r.note_no_mpi);
#endif
  CHECK_EQ_INT(r.transform, LADE__RXF_IMAGENET_TRAIN); /* auto over a folder */
  CHECK_EQ_INT(r.threads, 2);
  lade__source_facts_t npy = facts(100, 10, false);
  npy.kind = NPY_KIND;
  const char *eight[] = {"threads=8", NULL};
  CHECK_OK(resolve(eight, &npy, &r));
  CHECK_EQ_INT(r.transform, LADE__RXF_NPY);
  CHECK_EQ_INT(r.threads, 8);
}

/* UCX (docs/transport.md, UCX): auto picks it with peers set up by
 * lade_ucx_set_peers() or with a rendezvous_dir, for a routed plan only, and
 * MPI first under an MPI launcher; under torchrun without either, none and a
 * note; torchrun's rank and world stand in for unset settings. */
static void test_transport_ucx(void) {
  lade__source_facts_t fa = facts(100, 10, false);
  fa.torchrun = true;
  fa.torchrun_rank = 3;
  fa.torchrun_world = 4;
  lade__resolved_t r;
  const char *routed[] = {"plan=locality", NULL};
  CHECK_OK(resolve(routed, &fa, &r)); /* no way to reach the peers: none, and a note saying how */
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_LOCAL);
#ifdef LADE_HAVE_UCX
  CHECK(r.note_no_peers && !r.note_no_ucx);
#else
  CHECK(r.note_no_ucx);
#endif
  CHECK_EQ_INT(r.rank, 3);
  CHECK_EQ_INT(r.world, 4);
  fa.ucx_peers = 4; /* torch.distributed, through the Python module */
  CHECK_OK(resolve(routed, &fa, &r));
#ifdef LADE_HAVE_UCX
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_UCX);
  CHECK(!r.note_no_peers);
#endif
  CHECK_EQ_INT(r.rank, 3);
  CHECK_EQ_INT(r.world, 4);
  fa.ucx_peers = 0;
  const char *folder_tr[] = {"plan=locality", "rendezvous_dir=/tmp/x", NULL}; /* torchrun's world and a folder */
  CHECK_OK(resolve(folder_tr, &fa, &r));
#ifdef LADE_HAVE_UCX
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_UCX);
#endif
  CHECK_OK(resolve(NULL, &fa, &r)); /* regular: no transport, torchrun's rank and world */
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_LOCAL);
  CHECK_EQ_INT(r.rank, 3);
  CHECK_EQ_INT(r.world, 4);
  const char *named[] = {"plan=distcache", "rank=1", "world_size=2", NULL};
  CHECK_OK(resolve(named, &fa, &r));
  CHECK_EQ_INT(r.rank, 1); /* settings win */
  CHECK_EQ_INT(r.world, 2);
  fa.launched = true; /* under an MPI launcher, MPI */
  fa.launched_rank = 0;
  fa.launched_world = 4;
  CHECK_OK(resolve(routed, &fa, &r));
#ifdef LADE_HAVE_MPI
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_MPI);
#endif
  lade__source_facts_t plain = facts(100, 10, false);
  CHECK_OK(resolve(routed, &plain, &r)); /* neither launcher nor peers: none */
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_LOCAL);
  plain.ucx_peers = 4; /* torch.distributed, through the Python module */
  const char *given[] = {"plan=solar", "rank=2", "world_size=4", NULL};
  CHECK_OK(resolve(given, &plain, &r));
#ifdef LADE_HAVE_UCX
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_UCX);
#endif
  plain.ucx_peers = 0;
  const char *folder[] = {"plan=solar", "rank=2", "world_size=4", "rendezvous_dir=/tmp/x", NULL};
  CHECK_OK(resolve(folder, &plain, &r));
#ifdef LADE_HAVE_UCX
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_UCX);
  const char *local[] = {"plan=solar", "rank=2", "world_size=4", "rendezvous_dir=/tmp/x", "transport=local", NULL};
  CHECK_OK(resolve(local, &plain, &r));
  CHECK_EQ_INT(r.transport, LADE__TRANSPORT_LOCAL);
#else
  const char *ucx[] = {"plan=solar", "transport=ucx", NULL};
  expect_error(ucx, &plain, "this build has no UCX");
#endif
}

/* The node, once rank and world are final: the setting first, then MPI's
 * answer, then the launcher's local rank and size (transport/topology.h). */
static void test_topology(void) {
  lade__resolved_t r;
  const char *rpn2[] = {"ranks_per_node=2", NULL}, *rpn3[] = {"ranks_per_node=3", NULL};
  static const uint32_t one_node[4] = {0, 0, 0, 0};
  lade_config_t *c = settings(rpn2);
  memset(&r, 0, sizeof r);
  r.rank = 3, r.world = 4;
  CHECK_OK(lade__resolve_topology(c, one_node, true, 3, 4, &r));
  CHECK(r.topo.node == 1 && r.topo.nodes == 2 && r.topo.local_rank == 1 && r.topo.ranks_per_node == 2);
  lade_config_destroy(c);
  c = settings(NULL);
  CHECK_OK(lade__resolve_topology(c, one_node, true, 1, 2, &r));
  CHECK(r.topo.node == 0 && r.topo.nodes == 1 && r.topo.local_rank == 3 && r.topo.ranks_per_node == 4);
  CHECK_OK(lade__resolve_topology(c, NULL, true, 1, 2, &r));
  CHECK(r.topo.node == 1 && r.topo.nodes == 2 && r.topo.local_rank == 1 && r.topo.ranks_per_node == 2);
  r.rank = 0, r.world = 1;
  CHECK_OK(lade__resolve_topology(c, NULL, false, 0, 0, &r));
  CHECK(r.topo.node == 0 && r.topo.nodes == 1 && r.topo.local_rank == 0 && r.topo.ranks_per_node == 1);
  lade_config_destroy(c);
  c = settings(rpn3);
  r.rank = 0, r.world = 4;
  CHECK_EQ_INT(lade__resolve_topology(c, NULL, false, 0, 0, &r), LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "ranks_per_node") != NULL);
  lade_config_destroy(c);
}

/* The plan's ranks_per_node follows the nodes when they are blocks of
 * consecutive ranks (the setting, the launcher's, MPI's answer of that
 * shape), else 1: every rank must compute the same plan. */
static void test_plan_nodes(void) {
  lade__resolved_t r;
  const char *rpn2[] = {"ranks_per_node=2", NULL};
  static const uint32_t one_node[4] = {0, 0, 0, 0}, blocks[4] = {0, 0, 2, 2}, mixed[4] = {0, 1, 0, 1},
                        uneven[4] = {0, 0, 0, 3};
  lade_config_t *c = settings(rpn2);
  memset(&r, 0, sizeof r);
  r.rank = 3, r.world = 4;
  CHECK_OK(lade__resolve_topology(c, mixed, false, 0, 0, &r)); /* the setting wins over MPI's answer */
  CHECK_EQ_INT(r.cursor.plan.ranks_per_node, 2);
  lade_config_destroy(c);
  c = settings(NULL);
  CHECK_OK(lade__resolve_topology(c, one_node, false, 0, 0, &r));
  CHECK_EQ_INT(r.cursor.plan.ranks_per_node, 4);
  CHECK_OK(lade__resolve_topology(c, blocks, false, 0, 0, &r));
  CHECK_EQ_INT(r.cursor.plan.ranks_per_node, 2);
  r.rank = 1;
  CHECK_OK(lade__resolve_topology(c, mixed, false, 0, 0, &r)); /* round-robin placement: not blocks */
  CHECK_EQ_INT(r.topo.ranks_per_node, 2);
  CHECK_EQ_INT(r.cursor.plan.ranks_per_node, 1);
  r.rank = 0;
  CHECK_OK(lade__resolve_topology(c, uneven, false, 0, 0, &r)); /* nodes of 3 and 1 */
  CHECK_EQ_INT(r.cursor.plan.ranks_per_node, 1);
  CHECK_OK(lade__resolve_topology(c, NULL, true, 0, 2, &r)); /* the launcher's local size */
  CHECK_EQ_INT(r.cursor.plan.ranks_per_node, 2);
  CHECK_OK(lade__resolve_topology(c, NULL, false, 0, 0, &r));
  CHECK_EQ_INT(r.cursor.plan.ranks_per_node, 1);
  lade_config_destroy(c);
}

/* The node cache: on by auto with several ranks per node, a memory budget, a
 * plan that does not route and a job key; per rank otherwise, and
 * node_cache=on says why it cannot be. */
static int node_cache(const char *kv[], uint32_t ranks_per_node, uint32_t node, const char *env_job,
                      lade__resolved_t *r) {
  lade__source_facts_t fa = facts(1000, 4000, false);
  lade_config_t *c = settings(kv);
  memset(r, 0, sizeof *r);
  r->rank = 0, r->world = 8;
  int rc = lade__resolve(c, &fa, r);
  r->topo = (lade__topology_t){.node = node, .nodes = 8 / ranks_per_node, .ranks_per_node = ranks_per_node};
  if (!rc) rc = lade__resolve_node_cache(c, env_job, r);
  /* fetch.shm_dir borrows from the settings: kept for the checks */
  static char shm_dir[256];
  snprintf(shm_dir, sizeof shm_dir, "%s", r->fetch.shm_dir ? r->fetch.shm_dir : "");
  r->fetch.shm_dir = shm_dir;
  lade_config_destroy(c);
  return rc;
}

static void test_node_cache(void) {
  lade__resolved_t r;
  const char *mem[] = {"cache_mem_bytes=4000000", NULL}, *none[] = {NULL};
  CHECK_OK(node_cache(mem, 4, 1, "pmix:77", &r));
  CHECK(r.fetch.node_cache && strcmp(r.fetch.job_key, "pmix:77#node1") == 0);
  CHECK(strcmp(r.fetch.shm_dir, "/dev/shm") == 0 && r.fetch.mem_capacity == 4000000);
  CHECK(r.fetch.node_slots >= 4 * (4000000 / lade__shmcache_charge(4000)));
  CHECK(r.fetch.node_timeout_ms == 60000);
  lade_config_t *c = settings(mem);
  CHECK(lade__resolve_wants_mean(c, false)); /* the index is sized from the mean sample */
  lade_config_destroy(c);
  const char *job[] = {"cache_mem_bytes=4000000", "job_id=mine", NULL};
  CHECK_OK(node_cache(job, 2, 0, "pmix:77", &r));
  CHECK(r.fetch.node_cache && strcmp(r.fetch.job_key, "mine#node0") == 0);
  CHECK(!r.note_node_fifo); /* the default policy (auto) may be FIFO here without a note */
  const char *lru[] = {"cache_mem_bytes=4000000", "job_id=mine", "cache_policy=lru", NULL};
  CHECK_OK(node_cache(lru, 2, 0, "pmix:77", &r));
  CHECK(r.fetch.node_cache && r.note_node_fifo); /* lru named: the FIFO segment says so */
  const char *lru_off[] = {"cache_mem_bytes=4000000", "job_id=mine", "cache_policy=lru", "node_cache=off", NULL};
  CHECK_OK(node_cache(lru_off, 2, 0, "pmix:77", &r));
  CHECK(!r.fetch.node_cache && !r.note_node_fifo);
  /* auto stays per rank: one rank per node, no budget, a routed plan, clairvoyant, no job key */
  CHECK_OK(node_cache(mem, 1, 0, "pmix:77", &r));
  CHECK(!r.fetch.node_cache);
  CHECK_OK(node_cache(none, 4, 0, "pmix:77", &r));
  CHECK(!r.fetch.node_cache);
  const char *routed[] = {"cache_mem_bytes=4000000", "plan=locality", NULL};
  CHECK_OK(node_cache(routed, 4, 0, "pmix:77", &r));
  CHECK(!r.fetch.node_cache);
  const char *cv[] = {"cache_mem_bytes=4000000", "cache_policy=clairvoyant", NULL};
  CHECK_OK(node_cache(cv, 4, 0, "pmix:77", &r));
  CHECK(!r.fetch.node_cache);
  CHECK_OK(node_cache(mem, 4, 0, "", &r));
  CHECK(!r.fetch.node_cache && r.note_no_job_key);
  /* node_cache=off: never; on: even alone on its node, else an error naming the way out */
  const char *off[] = {"cache_mem_bytes=4000000", "node_cache=off", NULL};
  CHECK_OK(node_cache(off, 4, 0, "pmix:77", &r));
  CHECK(!r.fetch.node_cache);
  const char *on[] = {"cache_mem_bytes=4000000", "node_cache=on", NULL};
  CHECK_OK(node_cache(on, 1, 0, "pmix:77", &r));
  CHECK(r.fetch.node_cache);
  CHECK_EQ_INT(node_cache(on, 4, 0, "", &r), LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "job_id") != NULL);
  const char *on_routed[] = {"cache_mem_bytes=4000000", "node_cache=on", "plan=locality", NULL};
  CHECK_EQ_INT(node_cache(on_routed, 4, 0, "pmix:77", &r), LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "node_cache=off") != NULL);
  /* model-parallel groups: on without cache_mem_bytes, with a staging budget for the node's groups */
  const char *mp[] = {"plan=shards", "model_parallel=2", "batch_size=8", "prefetch=2", NULL};
  CHECK_OK(node_cache(mp, 4, 0, "pmix:77", &r));
  CHECK(r.fetch.node_cache && r.fetch.mem_capacity == 4ull * (2 + 2) * 8 * lade__shmcache_charge(4000) * 2);
  const char *mp_off[] = {"plan=shards", "model_parallel=2", "node_cache=off", NULL};
  CHECK_OK(node_cache(mp_off, 4, 0, "pmix:77", &r));
  CHECK(!r.fetch.node_cache && r.fetch.mem_capacity == 0);
  const char *on_none[] = {"node_cache=on", NULL};
  CHECK_EQ_INT(node_cache(on_none, 4, 0, "pmix:77", &r), LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "cache_mem_bytes") != NULL);
}

/* A saved position (lade_config_set_position) reaches the cursor when its
 * plan, dataset size and seed are this loader's and each field is in its own
 * range; world and batch may differ. Anything else is refused naming what
 * differs or which field is out of range (issue 29: a position past the run
 * never ends it silently). */
static void test_position(void) {
  lade__source_facts_t fa = facts(100, 10, false);
  const char *kv[] = {"plan=locality", "seed=4", "batch_size=3", "world_size=2", "cache_mem_bytes=1000", "epochs=3",
                      NULL};
  const lade_position_t pos = {.epoch = 1, .consumed = 40, .shuffle_epoch = 1, .world_size = 4, .batch_size = 5,
                               .groups = 4, .kind = LADE_PLAN_LOCALITY, .samples = 100, .seed = 4};
  lade_position_t p[11];
  for (int i = 0; i < 11; i++) p[i] = pos;
  p[0].kind = LADE_PLAN_REGULAR;
  p[1].samples = 99;
  p[2].seed = 5;
  p[3].world_size = 0;
  p[4].groups = 3;
  p[5].epoch = p[5].shuffle_epoch = 1ull << 40;
  p[6].shuffle_epoch = 2;
  p[7].consumed = 101;
  p[8].epoch = p[8].shuffle_epoch = 3; /* the end, with samples consumed */
  p[9].base_groups = 2, p[9].base_batch = 4;
  const struct {
    int rc;
    const char *text;
  } want[] = {{LADE_EINVAL, "another plan (regular; this loader: locality)"},
              {LADE_EINVAL, "another dataset size (samples) (99; this loader: 100)"},
              {LADE_EINVAL, "another seed (5; this loader: 4)"},
              {LADE_EINVAL, "not a saved position"},
              {LADE_EINVAL, "world_size 4, batch_size 5, 3 groups: not a saved position"},
              {LADE_ERANGE, "epoch 1099511627776 (epoch order 1099511627776) is out of range: epochs are 0 to 2"},
              {LADE_EINVAL, "epoch order 2 is not its epoch 1: only plan solar reorders epochs"},
              {LADE_ERANGE, "101 samples of epoch 1 were consumed: out of range (0 to the dataset's 100"},
              {LADE_ERANGE, "40 samples of epoch 3 were consumed: out of range (0 to the dataset's 100; 0 at the end"},
              {LADE_EINVAL, "base layout (2 groups of batch 4, 0 consumed) is not one a saved position holds"},
              {0, NULL}};
  for (int i = 0; i < 11; i++) {
    lade_config_t *c = settings(kv);
    CHECK_OK(lade_config_set_position(c, &p[i], sizeof p[i]));
    lade__resolved_t r;
    int rc = lade__resolve(c, &fa, &r);
    lade_config_destroy(c);
    if (!want[i].text) { /* the saver's world and batch differ: accepted, handed to the cursor */
      CHECK_OK(rc);
      CHECK(r.cursor.resumed);
      CHECK(memcmp(&r.cursor.resume, &pos, sizeof pos) == 0);
      continue;
    }
    CHECK_EQ_INT(rc, want[i].rc);
    if (!strstr(lade_last_error(), want[i].text))
      fprintf(stderr, "  case %d: wanted \"%s\" in: %s\n", i, want[i].text, lade_last_error());
    CHECK(strstr(lade_last_error(), want[i].text) != NULL);
  }
  /* without one, nothing is resumed; a short struct is refused */
  lade__resolved_t r;
  CHECK_OK(resolve(kv, &fa, &r));
  CHECK(!r.cursor.resumed);
  lade_config_t *c = settings(kv);
  CHECK(lade_config_set_position(c, &pos, 8) == LADE_EINVAL);
  CHECK_OK(lade_config_set_position(c, NULL, 0));
  lade_config_destroy(c);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_cache_mem_bytes_walk);
  RUN(test_policies);
  RUN(test_two_tiers);
  RUN(test_cross_setting_errors);
  RUN(test_prefetcher_window_and_readahead);
  RUN(test_transport_transform_threads);
  RUN(test_transport_ucx);
  RUN(test_topology);
  RUN(test_plan_nodes);
  RUN(test_node_cache);
  RUN(test_position);
  return lade_test_finish();
}
