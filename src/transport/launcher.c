/* launcher.c - whether an MPI launcher (or torchrun) started this process,
 * and its rank and world, from the environment alone (no MPI call): what
 * every transport and the engine's rank detection share. */
#include <stdlib.h>

#include "transport/transport.h"

bool lade__transport_launched(uint32_t *rank, uint32_t *world) {
  /* Open MPI's mpirun, MPICH/Hydra and Slurm's PMI */
  static const char *const vars[][2] = {{"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}, {"PMI_RANK", "PMI_SIZE"}};
  *rank = *world = 0;
  for (size_t i = 0; i < sizeof vars / sizeof vars[0]; i++) {
    const char *r = getenv(vars[i][0]), *w = getenv(vars[i][1]);
    if (r && *r && w && *w) {
      *rank = (uint32_t)strtoul(r, NULL, 10);
      *world = (uint32_t)strtoul(w, NULL, 10);
      return *rank < *world;
    }
  }
  return false;
}

bool lade__transport_torchrun(uint32_t *rank, uint32_t *world) {
  const char *run = getenv("TORCHELASTIC_RUN_ID"), *lr = getenv("LOCAL_RANK"), *r = getenv("RANK"),
             *w = getenv("WORLD_SIZE");
  *rank = *world = 0;
  if (!(r && *r && w && *w)) return false;
  *rank = (uint32_t)strtoul(r, NULL, 10);
  *world = (uint32_t)strtoul(w, NULL, 10);
  return ((run && *run) || (lr && *lr)) && *rank < *world;
}
