/* test_topology.c - which ranks share a node (src/transport/topology.h):
 * the setting's blocks, MPI's answer for any placement, the launcher's local
 * rank and size, the fallback, and the errors. */
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "harness.h"
#include "transport/topology.h"

static lade__topology_t topo_of(lade__topology_in_t in) {
  lade__topology_t t = {99, 99, 99, 99};
  CHECK_OK(lade__topology(&in, &t));
  return t;
}

#define CHECK_TOPO(t, n, ns, lr, rpn)      \
  do {                                     \
    lade__topology_t _t = (t);             \
    CHECK_EQ_INT(_t.node, n);              \
    CHECK_EQ_INT(_t.nodes, ns);            \
    CHECK_EQ_INT(_t.local_rank, lr);       \
    CHECK_EQ_INT(_t.ranks_per_node, rpn);  \
  } while (0)

/* ranks_per_node = 2 over 4 ranks: nodes 0,0,1,1, local ranks 0,1,0,1, and
 * the setting wins over MPI's answer and the environment */
static void test_setting_blocks(void) {
  static const uint32_t one_node[4] = {0, 0, 0, 0};
  for (uint32_t r = 0; r < 4; r++) {
    CHECK_TOPO(topo_of((lade__topology_in_t){.rank = r, .world = 4, .ranks_per_node = 2}), r / 2, 2, r % 2, 2);
    CHECK_TOPO(topo_of((lade__topology_in_t){.rank = r, .world = 4, .ranks_per_node = 2, .node_lead = one_node,
                                             .have_env = true, .env_local_rank = r, .env_local_size = 4}),
               r / 2, 2, r % 2, 2);
  }
  CHECK_TOPO(topo_of((lade__topology_in_t){.rank = 5, .world = 6, .ranks_per_node = 3}), 1, 2, 2, 3);
  CHECK_TOPO(topo_of((lade__topology_in_t){.rank = 5, .world = 6, .ranks_per_node = 6}), 0, 1, 5, 6);
  CHECK_TOPO(topo_of((lade__topology_in_t){.rank = 0, .world = 1, .ranks_per_node = 1}), 0, 1, 0, 1);
}

static void test_setting_must_divide(void) {
  lade__topology_t t;
  lade__topology_in_t in = {.rank = 1, .world = 4, .ranks_per_node = 3};
  CHECK_EQ_INT(lade__topology(&in, &t), LADE_EINVAL);
  CHECK(strstr(lade_last_error(), "'ranks_per_node' (3) must divide the world size (4)") != NULL);
  in = (lade__topology_in_t){.rank = 0, .world = 1, .ranks_per_node = 8};
  CHECK_EQ_INT(lade__topology(&in, &t), LADE_EINVAL);
  in = (lade__topology_in_t){.rank = 4, .world = 4};
  CHECK_EQ_INT(lade__topology(&in, &t), LADE_EINVAL);
  in = (lade__topology_in_t){.rank = 0, .world = 0};
  CHECK_EQ_INT(lade__topology(&in, &t), LADE_EINVAL);
}

/* MPI's answer: any placement, nodes numbered by their lowest rank, local
 * ranks in rank order, nodes of different sizes */
static void test_mpi_answer(void) {
  static const uint32_t one_node[4] = {0, 0, 0, 0};
  for (uint32_t r = 0; r < 4; r++)
    CHECK_TOPO(topo_of((lade__topology_in_t){.rank = r, .world = 4, .node_lead = one_node}), 0, 1, r, 4);
  /* mpirun --map-by node over two machines: ranks alternate */
  static const uint32_t by_node[6] = {0, 1, 0, 1, 0, 1};
  for (uint32_t r = 0; r < 6; r++)
    CHECK_TOPO(topo_of((lade__topology_in_t){.rank = r, .world = 6, .node_lead = by_node}), r % 2, 2, r / 2, 3);
  /* three machines holding 1, 3 and 2 ranks */
  static const uint32_t uneven[6] = {0, 1, 2, 1, 2, 1};
  static const uint32_t node[6] = {0, 1, 2, 1, 2, 1}, local[6] = {0, 0, 0, 1, 1, 2}, size[6] = {1, 3, 2, 3, 2, 3};
  for (uint32_t r = 0; r < 6; r++)
    CHECK_TOPO(topo_of((lade__topology_in_t){.rank = r, .world = 6, .node_lead = uneven}), node[r], 3, local[r],
               size[r]);
  /* MPI's answer wins over the environment */
  CHECK_TOPO(topo_of((lade__topology_in_t){.rank = 3, .world = 4, .node_lead = one_node, .have_env = true,
                                           .env_local_rank = 1, .env_local_size = 2}),
             0, 1, 3, 4);
  /* an answer that names a rank that is not its node's lowest is refused */
  static const uint32_t bad[3] = {0, 0, 1}, ahead[2] = {1, 1};
  lade__topology_t t;
  CHECK_EQ_INT(lade__topology(&(lade__topology_in_t){.rank = 0, .world = 3, .node_lead = bad}, &t), LADE_EINVAL);
  CHECK_EQ_INT(lade__topology(&(lade__topology_in_t){.rank = 0, .world = 2, .node_lead = ahead}, &t), LADE_EINVAL);
}

/* the launcher's local rank and size: taken when they describe consecutive
 * blocks of equal size, else every rank is its own node */
static void test_launcher_env(void) {
  for (uint32_t r = 0; r < 8; r++)
    CHECK_TOPO(topo_of((lade__topology_in_t){.rank = r, .world = 8, .have_env = true, .env_local_rank = r % 4,
                                             .env_local_size = 4}),
               r / 4, 2, r % 4, 4);
  /* round-robin placement (rank % size != local rank): not blocks */
  CHECK_TOPO(topo_of((lade__topology_in_t){.rank = 1, .world = 4, .have_env = true, .env_local_rank = 0,
                                           .env_local_size = 2}),
             1, 4, 0, 1);
  /* a size that does not divide the world, a local rank past the size, a size 0 */
  CHECK_TOPO(topo_of((lade__topology_in_t){.rank = 4, .world = 6, .have_env = true, .env_local_rank = 0,
                                           .env_local_size = 4}),
             4, 6, 0, 1);
  CHECK_TOPO(topo_of((lade__topology_in_t){.rank = 2, .world = 4, .have_env = true, .env_local_rank = 2,
                                           .env_local_size = 2}),
             2, 4, 0, 1);
  CHECK_TOPO(topo_of((lade__topology_in_t){.rank = 0, .world = 2, .have_env = true}), 0, 2, 0, 1);
  /* a launcher's environment left over from a larger job, read by one process alone */
  CHECK_TOPO(topo_of((lade__topology_in_t){.rank = 0, .world = 1, .have_env = true, .env_local_rank = 0,
                                           .env_local_size = 4}),
             0, 1, 0, 1);
  /* nothing known: every rank its own node */
  for (uint32_t r = 0; r < 3; r++) CHECK_TOPO(topo_of((lade__topology_in_t){.rank = r, .world = 3}), r, 3, 0, 1);
  CHECK_TOPO(topo_of((lade__topology_in_t){.rank = 0, .world = 1}), 0, 1, 0, 1);
}

static void test_env_reading(void) {
  static const char *const names[] = {"LOCAL_RANK", "LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                                      "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"};
  char *saved[6];
  for (int i = 0; i < 6; i++) {
    const char *v = getenv(names[i]);
    saved[i] = v ? strdup(v) : NULL;
    unsetenv(names[i]);
  }
  uint32_t lr = 7, ls = 7;
  CHECK(!lade__topology_env(&lr, &ls));
  CHECK_EQ_INT(lr, 0);
  CHECK_EQ_INT(ls, 0);
  setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2", 1);
  setenv("OMPI_COMM_WORLD_LOCAL_SIZE", "4", 1);
  CHECK(lade__topology_env(&lr, &ls));
  CHECK_EQ_INT(lr, 2);
  CHECK_EQ_INT(ls, 4);
  /* torchrun's names come first; a half-set or malformed pair is skipped */
  setenv("LOCAL_RANK", "1", 1);
  CHECK(lade__topology_env(&lr, &ls));
  CHECK_EQ_INT(lr, 2);
  setenv("LOCAL_WORLD_SIZE", "8", 1);
  CHECK(lade__topology_env(&lr, &ls));
  CHECK_EQ_INT(lr, 1);
  CHECK_EQ_INT(ls, 8);
  setenv("LOCAL_WORLD_SIZE", "-8", 1);
  CHECK(lade__topology_env(&lr, &ls));
  CHECK_EQ_INT(lr, 2);
  CHECK_EQ_INT(ls, 4);
  unsetenv("OMPI_COMM_WORLD_LOCAL_RANK");
  CHECK(!lade__topology_env(&lr, &ls));
  for (int i = 0; i < 6; i++) {
    if (saved[i]) setenv(names[i], saved[i], 1);
    else unsetenv(names[i]);
    free(saved[i]);
  }
}

/* The node cache's job key from the launcher (docs/cache.md): the same in
 * every process of one job, first match wins, "" without a launcher. */
static void test_job_key(void) {
  static const char *vars[] = {"TORCHELASTIC_RUN_ID", "MASTER_ADDR", "MASTER_PORT", "SLURM_JOB_ID", "SLURM_STEP_ID",
                               "PMIX_NAMESPACE"};
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
  char k[128];
  CHECK(!lade__topology_job_key(k, sizeof k) && k[0] == 0);
  setenv("MASTER_ADDR", "10.0.0.1", 1);
  setenv("MASTER_PORT", "29500", 1);
  CHECK(lade__topology_job_key(k, sizeof k) && strcmp(k, "master:10.0.0.1:29500") == 0);
  setenv("PMIX_NAMESPACE", "2039611393", 1);
  CHECK(lade__topology_job_key(k, sizeof k) && strcmp(k, "pmix:2039611393") == 0);
  setenv("SLURM_JOB_ID", "4242", 1);
  setenv("SLURM_STEP_ID", "3", 1);
  CHECK(lade__topology_job_key(k, sizeof k) && strcmp(k, "slurm:4242.3") == 0);
  /* torchrun's default run id is "none": the store's address tells two runs apart */
  setenv("TORCHELASTIC_RUN_ID", "none", 1);
  CHECK(lade__topology_job_key(k, sizeof k) && strcmp(k, "torchrun:none@10.0.0.1:29500") == 0);
  CHECK(!lade__topology_job_key(k, 8) && k[0] == 0); /* does not fit: no key rather than a cut one */
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) unsetenv(vars[i]);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_setting_blocks);
  RUN(test_setting_must_divide);
  RUN(test_mpi_answer);
  RUN(test_launcher_env);
  RUN(test_env_reading);
  RUN(test_job_key);
  return lade_test_finish();
}
