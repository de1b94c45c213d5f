/* local.c - the transport of a single learner: nothing to send or receive
 * (no push protocol: transport.h's data path reports a send or a receive
 * here as the bug it is). A plan never routes to a peer with one learner. */
#include <stdlib.h>

#include "transport/transport.h"

static int local_open(lade__transport_t **out, const lade__transport_params_t *p, uint32_t *rank, uint32_t *world) {
  if (p->world > 1)
    return lade__fail(LADE_EINVAL, "transport local: %u learners need a transport between them (transport=mpi under "
                      "mpirun)", p->world);
  lade__transport_t *d = calloc(1, sizeof *d);
  if (!d) return lade__fail(LADE_ENOMEM, "transport: out of memory");
  d->ops = &lade__transport_local;
  *rank = 0;
  *world = 1;
  *out = d;
  return 0;
}

static void local_close(lade__transport_t *d) { free(d); }

static const uint32_t *local_node_leads(lade__transport_t *d) {
  (void)d;
  return NULL;
}

const lade__transport_ops_t lade__transport_local = {"local", local_open, local_close, local_node_leads, NULL};
