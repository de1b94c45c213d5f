/* engine_stats.c - what a loader reports: stage times, bytes by tier,
 * latency percentiles, per-epoch counters (the run's through engine.h, the
 * stages' from the pipeline), the listing (classes, sample names, sizes and
 * extents) and the run's shape (steps, its start, positions, the plan's
 * settings), which read only the opened pipeline (pipeline.h). Structs the
 * caller passes carry their size, so they may grow at their end. */
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/npyfmt.h"
#include "core/zipfmt.h"
#include "engine/engine.h"

/* The fetch stage's counters (remote requests, tiers, the plan's, the
 * transport's, the node cache's) into lade_loader_stats' fields. */
static void fetch_stats(lade__fetch_t *f, lade_stats_t *out) {
  lade__fetch_stats_t fs;
  lade__fetch_stats(f, &fs);
  out->concurrency = fs.src.concurrency;
  out->get_requests = fs.src.get_requests;
  out->list_requests = fs.src.list_requests;
  out->sidecar_rejected = fs.src.sidecar_rejected;
  out->retries = fs.src.retries;
  out->remote_bytes = fs.src.bytes;
  out->cache_misses = fs.misses;
  out->prefetched = fs.prefetched;
  out->cache_corrupt = fs.corrupt;
  out->cache_stale = fs.stale;
  out->fetch_size = fs.fetch_size;
  out->prefetch_threshold = fs.threshold;
  out->plan_cache_hits = fs.plan_hits;
  out->plan_fallbacks = fs.plan_fallbacks;
  out->plan_peer_storage = fs.plan_peer;
  out->peer_messages_sent = fs.dist.sent;
  out->peer_bytes_sent = fs.dist.sent_bytes;
  out->peer_served_from_storage = fs.served_from_storage;
  out->peer_bytes_held_peak = fs.dist.held_peak_bytes;
  out->plan_admits_mem = fs.admits[0];
  out->plan_admits_disk = fs.admits[1];
  out->plan_moves_up = fs.moves_up;
  out->plan_moves_down = fs.moves_down;
  out->peer_served_from_disk = fs.served_from_disk;
  if (fs.node_cache) {
    out->node_cache_used_bytes = fs.node.used;
    out->node_cache_capacity = fs.node.capacity;
    out->node_cache_segment_bytes = fs.node.segment_bytes;
    out->node_cache_entries = fs.node.entries;
    out->node_cache_hits = fs.node.hits;
    out->node_cache_misses = fs.node.misses;
    out->node_cache_recovered = fs.node.recovered;
    out->node_cache_ranks = fs.node.attached;
  }
}

static int fill_stats(lade_loader_t *L, lade_stats_t *out) {
  memset(out, 0, sizeof *out);
  lade__pipeline_t *P;
  int rc = lade__engine_pipeline(L, "lade_loader_stats", &P);
  if (rc) return rc;
  double lat[LADE__LAT_RING];
  const uint64_t n = lade__engine_run_stats(L, out, lat);
  if (P->xf && P->xf->describe) P->xf->describe(P->xf_state, out->image_kernels, sizeof out->image_kernels);
  if (P->fetch) fetch_stats(P->fetch, out);
  out->plan = P->cfg.plan;
  out->node = P->res.topo.node;
  out->nodes = P->res.topo.nodes;
  out->local_rank = P->res.topo.local_rank;
  out->ranks_per_node = P->res.topo.ranks_per_node;
  lade__counts_report(lat, n, out);
  return 0;
}

static int fill_epoch_stats(lade_loader_t *L, uint64_t epoch, lade_epoch_stats_t *out) {
  memset(out, 0, sizeof *out);
  lade__pipeline_t *P;
  int rc = lade__engine_pipeline(L, "lade_loader_epoch_stats", &P);
  if (rc) return rc;
  out->epoch = epoch;
  struct epoch_acc a;
  lade__source_stats_t end = {0};
  bool have_next = false;
  if (!lade__engine_epoch(L, epoch, &a, &end, &have_next))
    return lade__fail(LADE_ERANGE, "epoch %llu has not started", (unsigned long long)epoch);
  if (!have_next && P->src_ops->stats) P->src_ops->stats(&P->src, &end);
  out->batches = a.batches;
  uint64_t total = 0;
  for (int t = 0; t < LADE__TIER_COUNT; t++) {
    out->samples_by_source[t] = a.samples[t];
    out->bytes_by_source[t] = a.bytes[t];
    total += a.samples[t];
  }
  out->samples = total;
  out->miss_rate = total && lade__fetch_cached(P->fetch) ? (double)a.samples[LADE__TIER_STORAGE] / (double)total : 0;
  out->wait_seconds = a.wait;
  out->get_requests = end.get_requests - a.at_start.get_requests;
  out->list_requests = end.list_requests - a.at_start.list_requests;
  out->remote_bytes = end.bytes - a.at_start.bytes;
  out->plan_fallbacks = a.plan_fallbacks;
  out->plan_peer_storage = a.plan_peer;
  out->peer_samples_node = a.peer_node;
  out->peer_bytes_node = a.peer_node_bytes;
  out->plan_node_reads = a.node_reads;
  return 0;
}

/* Copies a stats struct of this library (size `have`) into the caller's of
 * `want` bytes: a prefix when the caller's header is older, zeros for the
 * fields an older library does not know when it is newer. */
static void copy_sized(void *dst, size_t want, const void *src, size_t have) {
  memcpy(dst, src, LADE__MIN(want, have));
  if (want > have) memset((char *)dst + have, 0, want - have);
}

int lade_loader_stats(lade_loader_t *L, lade_stats_t *out, size_t out_size) {
  if (!L || !out) return lade__fail(LADE_EINVAL, "lade_loader_stats: NULL argument");
  if (out_size < sizeof(uint64_t))
    return lade__fail(LADE_EINVAL, "lade_loader_stats: out_size is %zu; pass sizeof(lade_stats_t)", out_size);
  lade_stats_t s;
  int rc = fill_stats(L, &s);
  copy_sized(out, out_size, &s, sizeof s);
  return rc;
}

int lade_loader_epoch_stats(lade_loader_t *L, uint64_t epoch, lade_epoch_stats_t *out, size_t out_size) {
  if (!L || !out) return lade__fail(LADE_EINVAL, "lade_loader_epoch_stats: NULL argument");
  if (out_size < sizeof(uint64_t))
    return lade__fail(LADE_EINVAL, "lade_loader_epoch_stats: out_size is %zu; pass sizeof(lade_epoch_stats_t)",
                      out_size);
  lade_epoch_stats_t s;
  int rc = fill_epoch_stats(L, epoch, &s);
  copy_sized(out, out_size, &s, sizeof s);
  return rc;
}

/* ------------------------------------------------- classes and samples */

/* The listing is read-only once the source is open (pipeline.h). */
static int listed(lade_loader_t *L, const char *fn, lade__pipeline_t **P) {
  if (!L) return lade__fail(LADE_EINVAL, "%s: NULL loader", fn);
  return lade__engine_pipeline(L, fn, P);
}

int lade_loader_classes(lade_loader_t *L, uint32_t *count) {
  lade__pipeline_t *P;
  int rc = listed(L, "lade_loader_classes", &P);
  if (rc) return rc;
  if (count) *count = P->src.classes;
  return 0;
}

int lade_loader_class_name(lade_loader_t *L, uint32_t index, const char **name) {
  lade__pipeline_t *P;
  int rc = listed(L, "lade_loader_class_name", &P);
  if (rc) return rc;
  if (index >= P->src.classes)
    return lade__fail(LADE_ERANGE, "class %u of a dataset with %u classes", index, P->src.classes);
  if (!P->src.class_names)
    return lade__fail(LADE_EUNSUPPORTED, "the %s source of %s does not name its classes (labels 0..%u)",
                      P->src_ops->name, P->cfg.source, P->src.classes - 1);
  if (name) *name = P->src.class_names[index];
  return 0;
}

int lade_loader_sample_bytes(lade_loader_t *L, uint64_t index, uint64_t *bytes) {
  lade__pipeline_t *P;
  int rc = listed(L, "lade_loader_sample_bytes", &P);
  if (rc) return rc;
  if (!bytes) return lade__fail(LADE_EINVAL, "lade_loader_sample_bytes: NULL bytes");
  if (index >= P->src.count)
    return lade__fail(LADE_ERANGE, "sample %llu of a dataset with %llu samples", (unsigned long long)index,
                      (unsigned long long)P->src.count);
  if (!P->src.sizes)
    return lade__fail(LADE_EUNSUPPORTED, "the %s source lists no sample sizes", P->src_ops->name);
  *bytes = P->src.sizes[index];
  return 0;
}

int lade_loader_sample(lade_loader_t *L, uint64_t index, char *path, size_t size, int64_t *label) {
  lade__pipeline_t *P;
  int rc = listed(L, "lade_loader_sample", &P);
  if (rc) return rc;
  if (index >= P->src.count)
    return lade__fail(LADE_ERANGE, "sample %llu of a dataset with %llu samples", (unsigned long long)index,
                      (unsigned long long)P->src.count);
  if (label) *label = P->src.labels ? P->src.labels[index] : -1;
  if (!path) return 0;
  char full[2 * LADE__PATH_MAX + 64];
  P->src_ops->describe(&P->src, index, full, sizeof full);
  size_t n = strlen(full);
  if (n >= size)
    return lade__fail(LADE_ERANGE, "the path of sample %llu needs %zu bytes, the buffer has %zu",
                      (unsigned long long)index, n + 1, size);
  memcpy(path, full, n + 1);
  return 0;
}

/* ------------------------------------------------- where a sample's bytes lie */

/* The C-order, native payload of the .npy held in b (n bytes): its offset
 * in b and its length. */
static int npy_payload_in(const uint8_t *b, size_t n, const char *what, uint64_t *at, uint64_t *len) {
  lade__npy_header_t h;
  int rc = lade__npy_parse(b, n, &h);
  if (rc) return rc;
  if (h.fortran || h.swap)
    return lade__fail(LADE_EUNSUPPORTED, "%s: a %s array is converted on the way into the batch, not copied", what,
                      h.fortran ? "Fortran-order" : "byte-swapped");
  if (h.header_len + h.payload_bytes > n)
    return lade__fail(LADE_EFORMAT, "%s: the array's %zu bytes do not fit in %zu", what, h.payload_bytes, n);
  *at = h.header_len;
  *len = h.payload_bytes;
  return 0;
}

/* The npz transform's member in the archive b: its array's offset in b and
 * length, when it is stored (np.savez). */
static int npz_payload_in(const lade__pipeline_t *P, const uint8_t *b, size_t n, const char *what, uint64_t *at,
                          uint64_t *len) {
  lade__zip_t z;
  lade__zip_entry_t e;
  char alt[sizeof P->cfg.npz_member + 8];
  snprintf(alt, sizeof alt, "%s.npy", P->cfg.npz_member);
  int rc = lade__zip_open(&z, b, n);
  if (rc) return rc;
  if (lade__zip_find(&z, P->cfg.npz_member, &e) && lade__zip_find(&z, alt, &e))
    return lade__fail(LADE_ENOENT, "%s: no member '%s'", what, P->cfg.npz_member);
  if (e.method != 0)
    return lade__fail(LADE_EUNSUPPORTED, "%s: member '%s' is deflated (np.savez_compressed): it is inflated, not "
                      "copied", what, P->cfg.npz_member);
  const uint8_t *data;
  if ((rc = lade__zip_data(&z, &e, &data))) return rc;
  uint64_t in = 0;
  if ((rc = npy_payload_in(data, (size_t)e.usize, what, &in, len))) return rc;
  *at = (uint64_t)(data - b) + in;
  return 0;
}

int lade_loader_sample_extent(lade_loader_t *L, uint64_t index, char *path, size_t size, uint64_t *offset,
                              uint64_t *length) {
  lade__pipeline_t *P;
  int rc = listed(L, "lade_loader_sample_extent", &P);
  if (rc) return rc;
  if (!path || !size || !offset || !length) return lade__fail(LADE_EINVAL, "lade_loader_sample_extent: NULL argument");
  if (index >= P->src.count)
    return lade__fail(LADE_ERANGE, "sample %llu of a dataset with %llu samples", (unsigned long long)index,
                      (unsigned long long)P->src.count);
  if (!P->src_ops->extent)
    return lade__fail(LADE_EUNSUPPORTED, "the %s source of %s reads no plain ranges of local files",
                      P->src_ops->name, P->cfg.source);
  if (P->res.transform == LADE__RXF_RAW && P->src_ops->read_payload)
    return lade__fail(LADE_EUNSUPPORTED, "the raw transform over the %s source delivers each sample as a .npy whose "
                      "header lade writes (transform=npy delivers the stored payload)", P->src_ops->name);
  if ((rc = P->src_ops->extent(&P->src, index, path, size, offset, length))) return rc;
  /* the source gave the bytes read() returns; the transforms that copy a
   * part of them (a .npy's payload, a stored .npz member's array) narrow it */
  bool npy = P->res.transform == LADE__RXF_NPY && !P->src_ops->read_payload, npz = P->res.transform == LADE__RXF_NPZ;
  if (!npy && !npz) return 0;
  lade__buf_t b = {0};
  char what[2 * LADE__PATH_MAX + 64];
  P->src_ops->describe(&P->src, index, what, sizeof what);
  uint64_t at = 0, len = 0;
  rc = P->src_ops->read(&P->src, index, &b);
  if (!rc && b.len != *length)
    rc = lade__fail(LADE_EIO, "%s: %zu bytes read, %llu expected", what, b.len, (unsigned long long)*length);
  if (!rc && npy) rc = npy_payload_in(b.data, b.len, what, &at, &len);
  else if (!rc) rc = npz_payload_in(P, b.data, b.len, what, &at, &len);
  lade__buf_free(&b);
  if (rc) return rc;
  *offset += at;
  *length = len;
  return 0;
}

/* ------------------------------------------------------- the run's shape */

int lade_loader_plan_settings(lade_loader_t *L, lade_plan_settings_t *out, size_t out_size, uint32_t *rank) {
  if (!L || !out) return lade__fail(LADE_EINVAL, "lade_loader_plan_settings: NULL argument");
  if (out_size < sizeof(uint64_t))
    return lade__fail(LADE_EINVAL, "lade_loader_plan_settings: out_size is %zu; pass sizeof(lade_plan_settings_t)",
                      out_size);
  lade__pipeline_t *P;
  int rc = lade__engine_pipeline(L, "lade_loader_plan_settings", &P);
  if (rc) return rc;
  lade_plan_settings_t s;
  lade__cursor_settings(P->cursor, &s);
  lade__struct_out(out, out_size, &s, sizeof s);
  if (rank) *rank = P->cfg.rank;
  return 0;
}

int lade_loader_start(const lade_loader_t *L, uint64_t *epoch, uint64_t *step) {
  if (!L) return lade__fail(LADE_EINVAL, "lade_loader_start: NULL loader");
  lade__pipeline_t *P;
  int rc = lade__engine_pipeline(L, "lade_loader_start", &P);
  if (rc) return rc;
  if (epoch) *epoch = P->steps ? P->first / P->steps : P->cfg.epochs;
  if (step) *step = P->steps ? P->first % P->steps : 0;
  return 0;
}

int lade_loader_position(lade_loader_t *L, uint64_t epoch, uint64_t step, lade_position_t *out, size_t size) {
  if (!L || !out) return lade__fail(LADE_EINVAL, "lade_loader_position: NULL argument");
  if (size < offsetof(lade_position_t, base_consumed))
    return lade__fail(LADE_EINVAL, "lade_loader_position: size is %zu; pass sizeof(lade_position_t)", size);
  lade__pipeline_t *P;
  int rc = lade__engine_pipeline(L, "lade_loader_position", &P);
  if (rc) return rc;
  bool at_end = step == 0 && epoch == P->cfg.epochs;
  uint64_t q = epoch * P->steps + step;
  if (!at_end && (epoch >= P->cfg.epochs || step >= P->steps || q < P->first))
    return lade__fail(LADE_ERANGE, "lade_loader_position: (epoch %llu, step %llu) is not in this loader's run (%llu "
                      "epochs of %llu steps from (epoch %llu, step %llu))", (unsigned long long)epoch,
                      (unsigned long long)step, (unsigned long long)P->cfg.epochs, (unsigned long long)P->steps,
                      (unsigned long long)(P->steps ? P->first / P->steps : 0),
                      (unsigned long long)(P->steps ? P->first % P->steps : 0));
  lade_position_t pos;
  rc = lade__cursor_position(P->cursor, q, &pos);
  if (!rc) lade__struct_out(out, size, &pos, sizeof pos);
  return rc;
}

int lade_loader_info(lade_loader_t *L, uint64_t *samples, uint64_t *steps, uint64_t *epochs) {
  if (!L) return lade__fail(LADE_EINVAL, "lade_loader_info: NULL loader");
  lade__pipeline_t *P;
  int rc = lade__engine_pipeline(L, "lade_loader_info", &P);
  if (rc) return rc;
  if (samples) *samples = P->src.count;
  if (steps) *steps = P->steps;
  if (epochs) *epochs = P->cfg.epochs;
  return 0;
}
