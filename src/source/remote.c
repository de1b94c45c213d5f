/* remote.c - the remote sources' share of the HTTP client (remote.h). */
#include "source/remote.h"

#ifdef LADE_HAVE_CURL
#include <string.h>

#include "core/config.h"

/* The arrived hook: samples a source submitted have arrived. */
static void arrived(void *ctx) {
  lade__source_t *s = ctx;
  if (s->on_ready) s->on_ready(s->on_ready_ctx);
}

void lade__remote_http_opts(lade__http_opts_t *o, const struct lade_config *cfg, lade__source_t *src) {
  memset(o, 0, sizeof *o);
  o->timeout_ms = cfg->http_timeout_ms;
  o->connect_timeout_ms = cfg->http_connect_timeout_ms;
  o->retries = cfg->http_retries;
  o->retry_base_ms = cfg->http_retry_base_ms;
  /* the bounds on requests in flight are the node's (8 ranks must not each
   * open http_max_concurrency): each rank of the node has its share */
  uint32_t ranks = src && src->node_ranks > 1 ? src->node_ranks : 1;
  o->fixed_conc = cfg->http_concurrency ? LADE__MAX(cfg->http_concurrency / ranks, 1u) : 0;
  o->max_conc = LADE__MAX(cfg->http_max_concurrency / ranks, 1u);
  /* the bound on unread results follows the unsplit bound */
  o->table_conc = LADE__MAX(cfg->http_max_concurrency, cfg->http_concurrency);
  o->max_body = cfg->max_sample_bytes;
  o->ca_file = cfg->tls_ca_file; /* copied by lade__http_create */
  o->arrived = src ? arrived : NULL;
  o->arrived_ctx = src;
}

void lade__remote_stats(lade__http_t *h, lade__source_stats_t *out) {
  memset(out, 0, sizeof *out);
  if (!h) return;
  lade__http_stats_t st;
  lade__http_stats(h, &st);
  *out = (lade__source_stats_t){.get_requests = st.get_requests, .list_requests = st.list_requests,
                                .retries = st.retries, .bytes = st.bytes, .in_flight = st.in_flight,
                                .concurrency = st.concurrency};
}
#endif
