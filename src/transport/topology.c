/* topology.c - which ranks share a node (topology.h, docs/transport.md). */
#include "transport/topology.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"

static int from_blocks(uint32_t rank, uint32_t world, uint32_t size, lade__topology_t *out) {
  *out = (lade__topology_t){.node = rank / size, .nodes = world / size, .local_rank = rank % size,
                            .ranks_per_node = size};
  return 0;
}

static int from_leads(const lade__topology_in_t *in, lade__topology_t *out) {
  const uint32_t *lead = in->node_lead;
  for (uint32_t r = 0; r < in->world; r++)
    if (lead[r] > r || lead[lead[r]] != lead[r])
      return lade__fail(LADE_EINVAL, "topology: MPI says rank %u's node starts at rank %u, which is not the lowest "
                        "rank of a node", r, lead[r]);
  uint32_t mine = lead[in->rank];
  *out = (lade__topology_t){0};
  for (uint32_t r = 0; r < in->world; r++) {
    if (lead[r] == r) {
      out->nodes++;
      if (r < mine) out->node++;
    }
    if (lead[r] == mine) {
      out->ranks_per_node++;
      if (r < in->rank) out->local_rank++;
    }
  }
  return 0;
}

int lade__topology(const lade__topology_in_t *in, lade__topology_t *out) {
  *out = (lade__topology_t){0};
  if (in->world == 0 || in->rank >= in->world)
    return lade__fail(LADE_EINVAL, "topology: rank %u of a world of %u", in->rank, in->world);
  if (in->ranks_per_node) {
    if (in->world % in->ranks_per_node)
      return lade__fail(LADE_EINVAL, "setting 'ranks_per_node' (%u) must divide the world size (%u): nodes are "
                        "blocks of ranks_per_node consecutive ranks (0: detect)", in->ranks_per_node, in->world);
    return from_blocks(in->rank, in->world, in->ranks_per_node, out);
  }
  if (in->node_lead) return from_leads(in, out);
  uint32_t size = in->env_local_size;
  if (in->have_env && size && in->env_local_rank < size && in->world % size == 0 &&
      in->rank % size == in->env_local_rank)
    return from_blocks(in->rank, in->world, size, out);
  return from_blocks(in->rank, in->world, 1, out);
}

/* A non-negative decimal below 2^31, else false. */
static bool env_u32(const char *name, uint32_t *v) {
  const char *s = getenv(name);
  if (!s || *s < '0' || *s > '9') return false;
  char *end = NULL;
  unsigned long x = strtoul(s, &end, 10);
  if (*end || x > 0x7fffffff) return false;
  *v = (uint32_t)x;
  return true;
}

bool lade__topology_env(uint32_t *local_rank, uint32_t *local_size) {
  /* torchrun, Open MPI's mpirun, MPICH/Hydra */
  static const char *const vars[][2] = {{"LOCAL_RANK", "LOCAL_WORLD_SIZE"},
                                        {"OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"},
                                        {"MPI_LOCALRANKID", "MPI_LOCALNRANKS"}};
  *local_rank = *local_size = 0;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++)
    if (env_u32(vars[i][0], local_rank) && env_u32(vars[i][1], local_size)) return true;
  *local_rank = *local_size = 0;
  return false;
}

bool lade__topology_job_key(char *out, size_t size) {
  const char *run = getenv("TORCHELASTIC_RUN_ID"), *addr = getenv("MASTER_ADDR"), *port = getenv("MASTER_PORT");
  const char *sj = getenv("SLURM_JOB_ID"), *ss = getenv("SLURM_STEP_ID"), *pmix = getenv("PMIX_NAMESPACE");
  bool master = addr && *addr && port && *port;
  int n = 0;
  /* torchrun's run id is "none" unless --rdzv-id was given: its store's
   * address tells two such runs apart */
  if (run && *run) n = snprintf(out, size, "torchrun:%s@%s:%s", run, master ? addr : "", master ? port : "");
  else if (sj && *sj) n = snprintf(out, size, "slurm:%s.%s", sj, ss ? ss : "");
  else if (pmix && *pmix) n = snprintf(out, size, "pmix:%s", pmix);
  else if (master) n = snprintf(out, size, "master:%s:%s", addr, port);
  else if (size) out[0] = 0;
  if (n < 0 || (size_t)n >= size) {
    if (size) out[0] = 0;
    return false;
  }
  return size && out[0];
}
