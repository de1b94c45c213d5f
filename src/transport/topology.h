/*
 * topology.h - which ranks share a node (docs/transport.md, "Nodes").
 *
 * A node is the set of ranks that can share memory. Where it comes from,
 * first match wins:
 *   1. the setting ranks_per_node (> 0): nodes are blocks of ranks_per_node
 *      consecutive ranks (node = rank / ranks_per_node, local rank = rank %
 *      ranks_per_node), as mpirun's default mapping (by slot) and torchrun
 *      place them; it must divide the world size. Tests and benchmarks run
 *      several "nodes" on one machine with it.
 *   2. MPI's answer (the mpi transport): MPI_Comm_split_type(shared) gives,
 *      for every rank, the lowest rank on its node; any placement works.
 *   3. the launcher's local rank and size (torchrun's LOCAL_RANK and
 *      LOCAL_WORLD_SIZE, Open MPI's OMPI_COMM_WORLD_LOCAL_RANK/_SIZE, MPICH
 *      Hydra's MPI_LOCALRANKID/MPI_LOCALNRANKS), taken when they describe
 *      consecutive blocks of equal size (rank % size == local rank, size
 *      divides the world): without a transport nothing is exchanged, so a
 *      node's members are known only from that rule.
 *   4. otherwise every rank is its own node: nothing is assumed shared.
 */
#ifndef LADE__TOPOLOGY_H
#define LADE__TOPOLOGY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct lade__topology {
  uint32_t node;           /* this rank's node, 0 .. nodes - 1, nodes numbered by their lowest rank */
  uint32_t nodes;
  uint32_t local_rank;     /* this rank's place among its node's ranks, in rank order */
  uint32_t ranks_per_node; /* ranks on this rank's node */
} lade__topology_t;

typedef struct lade__topology_in {
  uint32_t rank, world;
  uint32_t ranks_per_node;   /* the setting; 0: detect */
  const uint32_t *node_lead; /* MPI's answer: per rank (world entries), the lowest rank on its node; or NULL */
  bool have_env;             /* the launcher's local rank and size (lade__topology_env) */
  uint32_t env_local_rank, env_local_size;
} lade__topology_in_t;

/* The topology of in->rank by the rules above. Pure. LADE_EINVAL, naming
 * the setting, when ranks_per_node does not divide the world size, and when
 * rank, world or MPI's answer are inconsistent. */
int lade__topology(const lade__topology_in_t *in, lade__topology_t *out);

/* The launcher's local rank and size from the environment (rule 3); false
 * when no launcher set them. */
bool lade__topology_env(uint32_t *local_rank, uint32_t *local_size);

/* The job key from the launcher's environment, the same in every process
 * of one job and different between two jobs running at once on a node
 * (docs/cache.md, Node cache): torchrun's TORCHELASTIC_RUN_ID with
 * MASTER_ADDR:MASTER_PORT, Slurm's SLURM_JOB_ID.SLURM_STEP_ID, Open MPI's
 * PMIX_NAMESPACE (its job id), else MASTER_ADDR:MASTER_PORT. Writes ""
 * and returns false when no launcher set any of them. */
bool lade__topology_job_key(char *out, size_t size);

#endif
