/*
 * remote.h - what the remote sources (s3.c, tar_http.c) share on top of the
 * HTTP client (http/http.h): its options from the settings, the source's
 * on_ready as its arrived hook, and its counters as the source's stats.
 * Needs libcurl (LADE_HAVE_CURL).
 */
#ifndef LADE__SOURCE_REMOTE_H
#define LADE__SOURCE_REMOTE_H

#include "http/http.h"
#include "source/source.h"

struct lade_config;

/* Zeroes *o and fills what every remote source's requests take from its
 * settings: http_timeout_ms, http_connect_timeout_ms, http_retries,
 * http_retry_base_ms, http_concurrency, http_max_concurrency,
 * max_sample_bytes and tls_ca_file (borrowed from cfg), and the arrived
 * hook that calls src's on_ready. The caller adds `what`, the other hooks,
 * and any headers or signing. */
void lade__remote_http_opts(lade__http_opts_t *o, const struct lade_config *cfg, lade__source_t *src);

/* The source's stats: h's counters (all 0 without a handle). */
void lade__remote_stats(lade__http_t *h, lade__source_stats_t *out);

#endif
