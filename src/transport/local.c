/* local.c - the transport of a single learner: nothing to send or receive.
 * A plan never routes to a peer with one learner; a send or a receive here
 * is a bug reported as such, not data silently made up. */
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

static int local_send(lade__transport_t *d, uint64_t q, const uint32_t *dst, const uint64_t *idx, uint32_t n) {
  (void)d, (void)dst, (void)idx;
  return n ? lade__fail(LADE_EINVAL, "transport local: step %llu sends to a peer, and there is none",
                        (unsigned long long)q)
           : 0;
}

static int local_wait_served(lade__transport_t *d, uint64_t q) {
  (void)d, (void)q;
  return 0;
}

static int local_recv(lade__transport_t *d, uint64_t q, uint64_t idx, uint32_t src, lade__buf_t *out) {
  (void)d, (void)out;
  return lade__fail(LADE_EINVAL, "transport local: sample %llu of step %llu is to come from rank %u, and there are no "
                    "peers", (unsigned long long)idx, (unsigned long long)q, src);
}

static void local_forget_below(lade__transport_t *d, uint64_t q) { (void)d, (void)q; }

static void local_stats(lade__transport_t *d, lade__transport_stats_t *out) {
  (void)d;
  *out = (lade__transport_stats_t){0};
}

static const uint32_t *local_node_leads(lade__transport_t *d) {
  (void)d;
  return NULL;
}

const lade__transport_ops_t lade__transport_local = {"local",          local_open,         local_close,
                                                     local_send,       local_wait_served,  local_recv,
                                                     local_forget_below, local_stats,      local_node_leads,
                                                     NULL};
