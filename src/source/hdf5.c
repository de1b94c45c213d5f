/*
 * hdf5.c - the `hdf5` source: dataset `hdf5_data` (N x ..., any integer,
 * float or h5py-bool type) of one HDF5 file, labels from the 1-D integer
 * dataset `hdf5_labels`. Sample i is the hyperslab [i, ...] read with
 * H5Dread straight into the batch slot (read_payload), in the host's byte
 * order, so a delivered sample equals h5py's f[data][i] bit for bit.
 *
 * Locks. Debian's libhdf5 is the serial build: not thread-safe, and it keeps
 * global state (the ID tables, the chunk cache, the error stack) that any
 * call may touch. So every H5* call of this file and of hdf5_chunk.c runs
 * with the one global lock held (lade__h5_lock, hdf5_lock.c), whichever loader it
 * serves; the reads of all worker threads
 * are serialised (docs/sources.md measures what that costs). `st->mu` guards
 * one source's stage (below). Order: st->mu is never held while taking
 * h5_mu, nor the other way round: a stage run is marked "loading" under
 * st->mu, read under h5_mu alone, then published under st->mu.
 *
 * Coalescing (SOLAR's "aggregated chunk loading", paper 002 section 4.4). The fetch stage
 * calls plan_batch() with each planned batch. Its indices are sorted; runs
 * of them whose neighbours are at most hdf5_gap apart (and whose span fits
 * RUN_MAX_BYTES) become one stage entry, read by the first worker that
 * needs any of them as ONE contiguous hyperslab [first, last] (the skipped
 * samples in between are read too: that is the trade the probe measures).
 * Every index of the run is then copied out of the stage by the worker
 * that loads it. A single index is never staged: it is read on its own,
 * straight into the slot. The stage is bounded (entries and bytes); when a
 * new batch does not fit, the oldest runs not being read are dropped (a
 * seek, or samples a cache tier answered, leave planned runs nobody reads);
 * a dropped or failed run's samples are read on their own, so an error is
 * always reported by the reader of the sample, with the file named.
 *
 * A gzip-chunked dataset is read by the chunk path instead (hdf5_chunk.c:
 * raw chunks inflated outside the lock, with a cache of its own); a
 * contiguous one in the host's order by pread (read_direct).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source.h"

#ifdef LADE_HAVE_HDF5
#include "source/hdf5_impl.h"

#include "core/coalesce.h"
#include "core/npyfmt.h"

#define RUN_MAX_BYTES ((size_t)16 << 20) /* the largest hyperslab one staged run reads */
#define STAGE_MIN_BYTES ((size_t)64 << 20)

/* The innermost message of libhdf5's error stack (call with h5_mu held). */
static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *ctx) {
  char *buf = ctx;
  if (n == 0 && e->desc) snprintf(buf, 200, "%s", e->desc);
  return 0;
}

static const char *h5_msg(char buf[200]) {
  buf[0] = '\0';
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_DOWNWARD, walk_cb, buf);
  H5Eclear2(H5E_DEFAULT);
  if (!buf[0]) snprintf(buf, 200, "libhdf5 error");
  return buf;
}

enum { RUN_NEW = 0, RUN_LOADING, RUN_READY, RUN_FAILED };

typedef struct run {
  uint64_t first, last; /* the hyperslab [first, last] */
  int state;
  uint32_t wants;       /* planned reads of its indices not yet taken */
  uint8_t *buf;         /* (last - first + 1) samples once READY */
  size_t buf_cap;
  uint64_t *idx;        /* its distinct indices */
  uint32_t nidx;
  struct run *prev, *next; /* oldest first */
} run_t;

/* index -> run, open addressing with backward-shift deletion */
typedef struct slot {
  uint64_t key;
  run_t *run; /* NULL: empty */
  uint32_t count;
} slot_t;


/* A buffer of at least len bytes for a run (called with mu held). */
static uint8_t *buf_take(lade__h5_t *m, size_t len, size_t *cap) {
  for (int i = 0; i < m->nspare; i++)
    if (m->spare_cap[i] >= len) {
      uint8_t *b = m->spare[i];
      *cap = m->spare_cap[i];
      m->spare[i] = m->spare[--m->nspare];
      m->spare_cap[i] = m->spare_cap[m->nspare];
      return b;
    }
  *cap = len;
  return NULL; /* the caller mallocs, outside the lock */
}

static void buf_give(lade__h5_t *m, uint8_t *b, size_t cap) {
  if (!b) return;
  if (m->nspare < 8) {
    m->spare[m->nspare] = b;
    m->spare_cap[m->nspare++] = cap;
    return;
  }
  int small = 0; /* keep the largest */
  for (int i = 1; i < m->nspare; i++)
    if (m->spare_cap[i] < m->spare_cap[small]) small = i;
  if (m->spare_cap[small] < cap) {
    free(m->spare[small]);
    m->spare[small] = b;
    m->spare_cap[small] = cap;
  } else {
    free(b);
  }
}

/* ------------------------------------------------------------- the stage */

static size_t tab_find(const lade__h5_t *m, uint64_t k) {
  size_t mask = m->tab_cap - 1, i = (size_t)lade__mix64(k) & mask;
  while (m->tab[i].run && m->tab[i].key != k) i = (i + 1) & mask;
  return i;
}

/* The staged bitmap: a bit per sample, set while the stage holds it, so
 * that get_sample() of the (many) samples not staged skips the stage's lock.
 * Written under mu; read without it (the engine hands a planned batch to
 * the workers through its own lock, after plan_batch set the bits). */
static void staged_set(lade__h5_t *m, uint64_t idx, bool on) {
  if (!m->staged) return;
  uint64_t bit = 1ull << (idx & 63);
  if (on) atomic_fetch_or_explicit(&m->staged[idx >> 6], bit, memory_order_relaxed);
  else atomic_fetch_and_explicit(&m->staged[idx >> 6], ~bit, memory_order_relaxed);
}

static bool maybe_staged(lade__h5_t *m, uint64_t idx) {
  return !m->staged || (atomic_load_explicit(&m->staged[idx >> 6], memory_order_relaxed) >> (idx & 63) & 1);
}

static void tab_del(lade__h5_t *m, size_t i) {
  size_t mask = m->tab_cap - 1;
  staged_set(m, m->tab[i].key, false);
  m->tab[i].run = NULL;
  m->tab_n--;
  for (size_t j = (i + 1) & mask; m->tab[j].run; j = (j + 1) & mask) {
    size_t home = (size_t)lade__mix64(m->tab[j].key) & mask;
    if ((j > i && (home <= i || home > j)) || (j < i && (home <= i && home > j))) {
      m->tab[i] = m->tab[j];
      m->tab[j].run = NULL;
      i = j;
    }
  }
}

static void run_unlink(lade__h5_t *m, run_t *r) {
  if (r->prev) r->prev->next = r->next;
  else m->oldest = r->next;
  if (r->next) r->next->prev = r->prev;
  else m->newest = r->prev;
}

static size_t run_bytes(const lade__h5_t *m, const run_t *r) { return (size_t)(r->last - r->first + 1) * m->sample_bytes; }

/* Frees a run that nobody is reading; with its indices' table entries. */
static void run_drop(lade__h5_t *m, run_t *r) {
  for (uint32_t j = 0; j < r->nidx; j++) {
    size_t i = tab_find(m, r->idx[j]);
    if (m->tab[i].run == r) tab_del(m, i);
  }
  run_unlink(m, r);
  m->stage_bytes -= run_bytes(m, r);
  buf_give(m, r->buf, r->buf_cap);
  free(r->idx);
  free(r);
}

/* Drops the oldest runs no worker is reading until `bytes` and `entries`
 * more fit; false when they cannot. */
static bool stage_make_room(lade__h5_t *m, size_t bytes, size_t entries) {
  run_t *r = m->oldest;
  while (r && (m->stage_bytes + bytes > m->stage_max || m->tab_n + entries > m->tab_max)) {
    run_t *next = r->next;
    if (r->state != RUN_LOADING) run_drop(m, r);
    r = next;
  }
  return m->stage_bytes + bytes <= m->stage_max && m->tab_n + entries <= m->tab_max;
}

static int cmp_u64(const void *a, const void *b) {
  uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
  return x < y ? -1 : x > y;
}

/* Stages the run of sorted distinct indices v[0..k) (k >= 2). */
static void stage_run(lade__h5_t *m, const uint64_t *v, size_t k, const uint32_t *mult) {
  run_t *r = calloc(1, sizeof *r);
  uint64_t *idx = malloc(k * sizeof *idx);
  if (!r || !idx || !stage_make_room(m, (size_t)(v[k - 1] - v[0] + 1) * m->sample_bytes, k)) {
    free(r);
    free(idx);
    return; /* read on their own: slower, not wrong */
  }
  r->first = v[0];
  r->last = v[k - 1];
  r->idx = idx;
  for (size_t j = 0; j < k; j++) {
    size_t i = tab_find(m, v[j]);
    if (!m->tab[i].run) m->tab_n++; /* else it held a failed run's want, dropped here */
    m->tab[i] = (slot_t){.key = v[j], .run = r, .count = mult[j]};
    staged_set(m, v[j], true);
    r->idx[r->nidx++] = v[j];
    r->wants += mult[j];
  }
  m->stage_bytes += run_bytes(m, r);
  r->prev = m->newest;
  if (m->newest) m->newest->next = r;
  else m->oldest = r;
  m->newest = r;
}

static void h5_plan_batch(lade__source_t *s, const uint64_t *idx, size_t n) {
  lade__h5_t *m = s->impl;
  if (!m->gap || n < 2) return;
  uint64_t *v = malloc(n * sizeof *v);
  uint32_t *mult = malloc(n * sizeof *mult);
  lade__span_t *sp = malloc(n * sizeof *sp);
  lade__run_t *runs = malloc(n * sizeof *runs);
  if (!v || !mult || !sp || !runs) goto out;
  memcpy(v, idx, n * sizeof *v);
  qsort(v, n, sizeof *v, cmp_u64);
  size_t k = 0;
  for (size_t i = 0; i < n; i++) { /* distinct, with multiplicities (padding repeats a sample) */
    if (k && v[k - 1] == v[i]) {
      mult[k - 1]++;
      continue;
    }
    v[k] = v[i];
    mult[k++] = 1;
  }
  pthread_mutex_lock(&m->mu);
  /* indices another planned run still holds get one more want there */
  size_t w = 0;
  for (size_t i = 0; i < k; i++) {
    size_t t = tab_find(m, v[i]);
    if (m->tab[t].run && m->tab[t].run->state != RUN_FAILED) {
      m->tab[t].count += mult[i];
      m->tab[t].run->wants += mult[i];
      continue;
    }
    v[w] = v[i];
    mult[w++] = mult[i];
  }
  /* indices at most `gap` apart, a run of at most max_span samples: in
   * bytes for lade__coalesce, the rule the tar source's Range requests
   * follow too (a gap of g samples leaves g - 1 samples between) */
  uint64_t sb = m->sample_bytes, max_span = LADE__MAX(RUN_MAX_BYTES / sb, 1);
  for (size_t i = 0; i < w; i++) sp[i] = (lade__span_t){0, v[i] * sb, sb};
  size_t nr = lade__coalesce(sp, w, (m->gap - 1) * sb, max_span * sb, runs);
  for (size_t r = 0; r < nr; r++)
    if (runs[r].count >= 2) stage_run(m, v + runs[r].first, runs[r].count, mult + runs[r].first);
  pthread_mutex_unlock(&m->mu);
out:
  free(v);
  free(mult);
  free(sp);
  free(runs);
}

/* ------------------------------------------------------------- reading */

/* The direct path: a contiguous, unfiltered dataset stored in the host's
 * byte order is count * sample_bytes bytes at offset + first * sample_bytes
 * of the file, so one pread() reads exactly what H5Dread would, without
 * libhdf5 and its lock. */
static int read_direct(lade__h5_t *m, uint64_t first, uint64_t count, void *dst) {
  size_t len = (size_t)count * m->sample_bytes, got = 0;
  off_t off = (off_t)(m->offset + first * m->sample_bytes);
  atomic_fetch_add_explicit(&m->reads, 1, memory_order_relaxed);
  while (got < len) {
    ssize_t n = pread(m->fd, (uint8_t *)dst + got, len - got, off + (off_t)got);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return lade__fail(n < 0 ? LADE_EIO : LADE_EFORMAT, "%s: cannot read samples %llu..%llu of dataset '%s': %s",
                        m->path, (unsigned long long)first, (unsigned long long)(first + count - 1), m->dname,
                        n < 0 ? strerror(errno) : "the file ended early (truncated?)");
    got += (size_t)n;
  }
  return 0;
}

/* Samples [first, first + count) into dst (count * sample_bytes): one
 * H5Dread of one hyperslab (or one pread on the direct path). */
static int read_slab(lade__h5_t *m, uint64_t first, uint64_t count, void *dst) {
  if (m->direct) return read_direct(m, first, count, dst);
  hsize_t start[LADE_MAX_DIMS + 1] = {0}, cnt[LADE_MAX_DIMS + 1];
  start[0] = first;
  cnt[0] = count;
  for (int d = 1; d < m->rank; d++) cnt[d] = m->dims[d];
  hsize_t nelem = (hsize_t)(count * m->sample_elems);
  lade__h5_guard_t g;
  char msg[200];
  lade__h5_lock(&g);
  int rc = 0;
  hid_t ms = count == 1 ? m->mspace : H5Screate_simple(1, &nelem, NULL);
  /* gzip chunks: their inflated size checked (bounded) before libhdf5's
   * filter, which checks nothing, inflates them */
  int crc = lade__h5_chunk_check(m, first, count);
  if (crc) rc = crc;
  else if (ms < 0 || H5Sselect_hyperslab(m->fspace, H5S_SELECT_SET, start, NULL, cnt, NULL) < 0 ||
           H5Dread(m->dset, m->mtype, ms, m->fspace, H5P_DEFAULT, dst) < 0) {
    h5_msg(msg);
    rc = -1;
  }
  if (ms >= 0 && ms != m->mspace) H5Sclose(ms);
  lade__h5_unlock(&g);
  atomic_fetch_add_explicit(&m->reads, 1, memory_order_relaxed);
  if (crc) return crc;
  if (rc) {
    if (count == 1)
      return lade__fail(LADE_EIO, "%s: cannot read sample %llu of dataset '%s': %s", m->path,
                        (unsigned long long)first, m->dname, msg);
    return lade__fail(LADE_EIO, "%s: cannot read samples %llu..%llu of dataset '%s': %s", m->path,
                      (unsigned long long)first, (unsigned long long)(first + count - 1), m->dname, msg);
  }
  return 0;
}

/* Sample idx into dst: from the stage when a planned run holds it (reading
 * the run first if nobody has), else on its own. */
static int get_sample(lade__h5_t *m, uint64_t idx, void *dst) {
  int crc = m->chunked ? lade__h5_chunk_sample(m, idx, dst) : 1;
  if (crc <= 0) return crc;
  if (m->gap && maybe_staged(m, idx)) {
    pthread_mutex_lock(&m->mu);
    for (;;) {
      size_t t = tab_find(m, idx);
      run_t *r = m->tab[t].run;
      if (!r || r->state == RUN_FAILED) break;
      if (r->state == RUN_LOADING) {
        pthread_cond_wait(&m->cv, &m->mu);
        continue;
      }
      if (r->state == RUN_NEW) {
        r->state = RUN_LOADING;
        size_t len = run_bytes(m, r), cap;
        uint8_t *buf = buf_take(m, len, &cap);
        pthread_mutex_unlock(&m->mu);
        if (!buf) buf = malloc(len);
        int rc = buf ? read_slab(m, r->first, r->last - r->first + 1, buf) : -1;
        lade__clear_error(); /* a failed run is read sample by sample: each reader reports its own */
        pthread_mutex_lock(&m->mu);
        if (rc) buf_give(m, buf, cap);
        else r->buf = buf, r->buf_cap = cap;
        r->state = rc ? RUN_FAILED : RUN_READY;
        pthread_cond_broadcast(&m->cv);
        continue;
      }
      memcpy(dst, r->buf + (idx - r->first) * m->sample_bytes, m->sample_bytes);
      if (--m->tab[t].count == 0) tab_del(m, t);
      if (--r->wants == 0) run_drop(m, r);
      pthread_mutex_unlock(&m->mu);
      return 0;
    }
    /* not staged, or its run failed: this want is served on its own */
    size_t t = tab_find(m, idx);
    run_t *r = m->tab[t].run;
    if (r) {
      if (--m->tab[t].count == 0) tab_del(m, t);
      if (--r->wants == 0) run_drop(m, r);
    }
    pthread_mutex_unlock(&m->mu);
  }
  return read_slab(m, idx, 1, dst);
}

static int h5_read_payload(lade__source_t *s, uint64_t idx, void *dst, size_t len) {
  lade__h5_t *m = s->impl;
  if (len != m->sample_bytes)
    return lade__fail(LADE_EINVAL, "hdf5: slot of %zu bytes for %zu-byte samples", len, m->sample_bytes);
  if (idx >= s->count) return lade__fail(LADE_ERANGE, "%s: sample %llu of %llu", m->path, (unsigned long long)idx,
                                         (unsigned long long)s->count);
  int rc = get_sample(m, idx, dst);
  /* the file rewritten in place since open: dst may hold new bytes read
   * through old structures (chunk addresses, the data's offset) */
  return rc ? rc : lade__file_check(m->fd, &m->ver, m->path);
}

/* All bytes of a sample: a C-order, native .npy of the row, so the npy
 * transform (and a cache tier) handle it like a stacked .npy's row. */
static int h5_read(lade__source_t *s, uint64_t idx, lade__buf_t *out) {
  lade__h5_t *m = s->impl;
  if (idx >= s->count) return lade__fail(LADE_ERANGE, "%s: sample %llu of %llu", m->path, (unsigned long long)idx,
                                         (unsigned long long)s->count);
  int rc = lade__buf_reserve(out, m->row_hdr_len + m->sample_bytes);
  if (rc) return rc;
  memcpy(out->data, m->row_hdr, m->row_hdr_len);
  rc = get_sample(m, idx, out->data + m->row_hdr_len);
  if (!rc) rc = lade__file_check(m->fd, &m->ver, m->path);
  out->len = rc ? 0 : m->row_hdr_len + m->sample_bytes;
  return rc;
}

static void h5_describe(lade__source_t *s, uint64_t idx, char *buf, size_t size) {
  lade__h5_t *m = s->impl;
  snprintf(buf, size, "%s:%s[%llu]", m->path, m->dname, (unsigned long long)idx);
}

/* A row of a contiguous dataset in the host's byte order (the direct path:
 * read with one pread); any other is read through libhdf5. */
static int h5_extent(lade__source_t *s, uint64_t idx, char *path, size_t size, uint64_t *off, uint64_t *len) {
  lade__h5_t *m = s->impl;
  if (!m->direct)
    return lade__fail(LADE_EUNSUPPORTED, "%s: dataset '%s' is %s, not one plain range of the file per sample",
                      m->path, m->dname,
                      m->chunked ? "gzip-chunked: its chunks are inflated"
                                 : "read through libhdf5's H5Dread (chunked, filtered or converted)");
  snprintf(path, size, "%s", m->path);
  *off = m->offset + idx * m->sample_bytes;
  *len = m->sample_bytes;
  return 0;
}

static uint64_t h5_version(lade__source_t *s, uint64_t idx) {
  lade__h5_t *m = s->impl;
  struct stat st;
  return lade__stat_version(fstat(m->fd, &st), &st);
}

static void h5_stats(lade__source_t *s, lade__source_stats_t *out) {
  lade__h5_t *m = s->impl;
  memset(out, 0, sizeof *out);
  out->get_requests = atomic_load_explicit(&m->reads, memory_order_relaxed);
}

/* ---------------------------------------------------------------- open */

/* The lade dtype of an HDF5 type, and the memory type that reads it in the
 * host's order; 0 when lade has none. */
static int map_type(hid_t ft, hid_t *mt, bool *own) {
  *own = false;
  H5T_class_t cls = H5Tget_class(ft);
  size_t size = H5Tget_size(ft);
  if (cls == H5T_INTEGER) {
    bool sig = H5Tget_sign(ft) == H5T_SGN_2;
    switch (size) {
      case 1: *mt = sig ? H5T_NATIVE_INT8 : H5T_NATIVE_UINT8; return sig ? LADE_DTYPE_INT8 : LADE_DTYPE_UINT8;
      case 2: *mt = sig ? H5T_NATIVE_INT16 : H5T_NATIVE_UINT16; return sig ? LADE_DTYPE_INT16 : LADE_DTYPE_UINT16;
      case 4: *mt = sig ? H5T_NATIVE_INT32 : H5T_NATIVE_UINT32; return sig ? LADE_DTYPE_INT32 : LADE_DTYPE_UINT32;
      case 8: *mt = sig ? H5T_NATIVE_INT64 : H5T_NATIVE_UINT64; return sig ? LADE_DTYPE_INT64 : LADE_DTYPE_UINT64;
    }
    return 0;
  }
  if (cls == H5T_FLOAT) {
    size_t spos, epos, esize, mpos, msize;
    if (H5Tget_fields(ft, &spos, &epos, &esize, &mpos, &msize) < 0) return 0;
    if (size == 4 && esize == 8 && msize == 23) return *mt = H5T_NATIVE_FLOAT, LADE_DTYPE_FLOAT32;
    if (size == 8 && esize == 11 && msize == 52) return *mt = H5T_NATIVE_DOUBLE, LADE_DTYPE_FLOAT64;
    if (size == 2 && spos == 15 && epos == 10 && esize == 5 && mpos == 0 && msize == 10 && H5Tget_ebias(ft) == 15) {
      /* IEEE half (numpy float16, as h5py writes it): read as the same type in the host's order */
      hid_t t = H5Tcopy(ft);
      if (t < 0 || H5Tset_order(t, H5Tget_order(H5T_NATIVE_FLOAT)) < 0) return 0;
      *mt = t;
      *own = true;
      return LADE_DTYPE_FLOAT16;
    }
    return 0;
  }
  if (cls == H5T_ENUM && size == 1 && H5Tget_nmembers(ft) == 2) {
    /* numpy bool as h5py writes it: enum int8 {FALSE = 0, TRUE = 1} */
    int8_t v0 = -1, v1 = -1;
    char *n0 = H5Tget_member_name(ft, 0), *n1 = H5Tget_member_name(ft, 1);
    H5Tget_member_value(ft, 0, &v0);
    H5Tget_member_value(ft, 1, &v1);
    bool ok = n0 && n1 && !strcmp(n0, "FALSE") && !strcmp(n1, "TRUE") && v0 == 0 && v1 == 1;
    H5free_memory(n0);
    H5free_memory(n1);
    if (!ok) return 0;
    hid_t t = H5Tcopy(ft);
    if (t < 0) return 0;
    *mt = t;
    *own = true;
    return LADE_DTYPE_BOOL;
  }
  return 0;
}

static const char *class_name(H5T_class_t c) {
  switch (c) {
    case H5T_STRING: return "string";
    case H5T_COMPOUND: return "compound";
    case H5T_OPAQUE: return "opaque";
    case H5T_REFERENCE: return "reference";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    case H5T_ENUM: return "enum";
    case H5T_BITFIELD: return "bitfield";
    case H5T_TIME: return "time";
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "float";
    default: return "unknown";
  }
}

/* The names at the file's root, for "no dataset X" errors. */
typedef struct names {
  char buf[512];
  size_t n;
} names_t;

static herr_t name_cb(hid_t g, const char *name, const H5L_info_t *info, void *ctx) {
  names_t *nm = ctx;
  if (nm->n < sizeof nm->buf)
    nm->n += (size_t)snprintf(nm->buf + nm->n, sizeof nm->buf - nm->n, "%s'%s'", nm->n ? ", " : "", name);
  return 0;
}

/* Whether path names an object (each component checked, as H5Lexists wants). */
static bool path_exists(hid_t file, const char *path) {
  char part[256];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof part) return false;
  for (size_t i = 1; i <= n; i++) {
    if (i < n && path[i] != '/') continue;
    memcpy(part, path, i);
    part[i] = '\0';
    if (!strcmp(part, "/")) continue;
    if (H5Lexists(file, part, H5P_DEFAULT) <= 0) return false;
  }
  return true;
}

static hid_t open_dataset(lade__h5_t *m, const char *name, const char *setting) {
  char msg[200];
  if (!path_exists(m->file, name)) {
    names_t nm = {.n = 0};
    H5Literate(m->file, H5_INDEX_NAME, H5_ITER_INC, NULL, name_cb, &nm);
    H5Eclear2(H5E_DEFAULT);
    lade__fail(LADE_EFORMAT, "%s: no dataset '%s' (setting %s); the file's root holds %s", m->path, name, setting,
               nm.n ? nm.buf : "nothing");
    return -1;
  }
  /* a chunked dataset: libhdf5 keeps decompressed chunks in a per-dataset
   * cache (1 MiB by default: a few chunks, so shuffled reads decompress a
   * whole chunk per sample); hdf5_chunk_cache sets its size */
  hid_t dapl = H5Pcreate(H5P_DATASET_ACCESS);
  if (dapl >= 0 && m->chunk_cache) H5Pset_chunk_cache(dapl, 100003, m->chunk_cache, H5D_CHUNK_CACHE_W0_DEFAULT);
  hid_t d = H5Dopen2(m->file, name, dapl >= 0 ? dapl : H5P_DEFAULT);
  if (dapl >= 0) H5Pclose(dapl);
  if (d < 0) lade__fail(LADE_EFORMAT, "%s: '%s' (setting %s) is not a dataset: %s", m->path, name, setting, h5_msg(msg));
  return d;
}

/* open_locked's labels: the named dataset (hdf5_labels), or "labels" when
 * present (none is fine); one per sample of the data dataset, m->dims[0]. */
static int open_labels(lade__source_t *s, lade__h5_t *m) {
  char msg[200];
  bool given = m->lname[0] != '\0';
  if (!given && H5Lexists(m->file, "labels", H5P_DEFAULT) > 0) snprintf(m->lname, sizeof m->lname, "labels");
  H5Eclear2(H5E_DEFAULT);
  if (!m->lname[0]) return 0;
  hid_t ld = open_dataset(m, m->lname, "hdf5_labels");
  if (ld < 0) return LADE_EFORMAT;
  int rc = 0;
  hid_t lt = H5Dget_type(ld), ls = H5Dget_space(ld);
  hsize_t ldims[LADE_MAX_DIMS + 1];
  int lrank = ls >= 0 ? H5Sget_simple_extent_ndims(ls) : -1;
  if (lrank >= 1 && lrank <= LADE_MAX_DIMS) H5Sget_simple_extent_dims(ls, ldims, NULL);
  if (lt < 0 || H5Tget_class(lt) != H5T_INTEGER) {
    rc = lade__fail(LADE_EFORMAT, "%s: label dataset '%s' has a %s type; labels must be integers", m->path, m->lname,
                    lt < 0 ? "unreadable" : class_name(H5Tget_class(lt)));
  } else if (lrank != 1) {
    rc = lade__fail(LADE_ESHAPE, "%s: label dataset '%s' has %d dimensions; labels must be 1-D (one per sample)",
                    m->path, m->lname, lrank);
  } else if (ldims[0] != m->dims[0]) {
    rc = lade__fail(LADE_ESHAPE, "%s: label dataset '%s' has %llu entries, dataset '%s' has %llu samples", m->path,
                    m->lname, (unsigned long long)ldims[0], m->dname, (unsigned long long)m->dims[0]);
  }
  int64_t *tmp = rc ? NULL : malloc((size_t)ldims[0] * sizeof *tmp);
  if (!rc && (!tmp || !(m->labels = malloc((size_t)ldims[0] * sizeof *m->labels))))
    rc = lade__fail(LADE_ENOMEM, "%s: out of memory for %llu labels", m->path, (unsigned long long)ldims[0]);
  if (!rc && H5Dread(ld, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, tmp) < 0)
    rc = lade__fail(LADE_EFORMAT, "%s: cannot read label dataset '%s': %s", m->path, m->lname, h5_msg(msg));
  if (!rc) {
    atomic_fetch_add_explicit(&m->reads, 1, memory_order_relaxed);
    int64_t top = -1;
    for (uint64_t i = 0; !rc && i < ldims[0]; i++) {
      if (tmp[i] < 0 || tmp[i] > INT32_MAX)
        rc = lade__fail(LADE_ERANGE, "%s: label dataset '%s': entry %llu is %lld; labels are 0..2^31-1", m->path,
                        m->lname, (unsigned long long)i, (long long)tmp[i]);
      m->labels[i] = (int32_t)tmp[i];
      if (tmp[i] > top) top = tmp[i];
    }
    s->labels = m->labels;
    s->classes = (uint32_t)(top + 1);
  }
  free(tmp);
  if (lt >= 0) H5Tclose(lt);
  if (ls >= 0) H5Sclose(ls);
  H5Dclose(ld);
  return rc;
}

static int open_locked(lade__source_t *s, lade__h5_t *m) {
  char msg[200];
  m->file = H5Fopen(m->path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (m->file < 0)
    return lade__fail(LADE_EFORMAT, "%s: not a readable HDF5 file (truncated or corrupt?): %s", m->path, h5_msg(msg));
  m->dset = open_dataset(m, m->dname, "hdf5_data");
  if (m->dset < 0) return LADE_EFORMAT;
  hid_t ft = H5Dget_type(m->dset);
  if (ft < 0) return lade__fail(LADE_EFORMAT, "%s: dataset '%s': %s", m->path, m->dname, h5_msg(msg));
  int dtype = map_type(ft, &m->mtype, &m->own_mtype);
  H5T_class_t cls = H5Tget_class(ft);
  size_t tsize = H5Tget_size(ft);
  H5Tclose(ft);
  if (!dtype)
    return lade__fail(LADE_EFORMAT,
                      "%s: dataset '%s' has a %zu-byte %s type; lade reads integer (8..64 bit), IEEE float (16, 32, "
                      "64 bit) and bool datasets", m->path, m->dname, tsize, class_name(cls));
  m->fspace = H5Dget_space(m->dset);
  int rank = m->fspace >= 0 ? H5Sget_simple_extent_ndims(m->fspace) : -1;
  if (rank < 1)
    return lade__fail(LADE_ESHAPE, "%s: dataset '%s' is a scalar; it needs N samples along its first axis", m->path,
                      m->dname);
  if (rank > LADE_MAX_DIMS)
    return lade__fail(LADE_ESHAPE, "%s: dataset '%s' has %d dimensions; at most %d (N + %d per sample)", m->path,
                      m->dname, rank, LADE_MAX_DIMS, LADE_MAX_DIMS - 1);
  m->rank = rank;
  H5Sget_simple_extent_dims(m->fspace, m->dims, NULL);
  if (m->dims[0] == 0) return lade__fail(LADE_EEMPTY, "%s: dataset '%s' has 0 samples", m->path, m->dname);
  uint64_t nelem = 1, sbytes = 0;
  bool over = false;
  for (int d = 1; d < rank; d++) over |= __builtin_mul_overflow(nelem, (uint64_t)m->dims[d], &nelem);
  if (!over && nelem == 0) return lade__fail(LADE_ESHAPE, "%s: dataset '%s' has empty samples", m->path, m->dname);
  over |= __builtin_mul_overflow(nelem, (uint64_t)lade_dtype_size(dtype), &sbytes);
  if (over || sbytes > m->max_sample || sbytes >= SIZE_MAX) {
    /* refused before a batch buffer of batch_size such samples is sized */
    char shape[32 * (LADE_MAX_DIMS + 1)];
    size_t n = 0;
    for (int d = 0; d < rank; d++)
      n += (size_t)snprintf(shape + n, sizeof shape - n, "%s%llu", d ? ", " : "(", (unsigned long long)m->dims[d]);
    snprintf(shape + n, sizeof shape - n, "%s", rank == 1 ? ",)" : ")");
    char size[48];
    if (over) snprintf(size, sizeof size, "more than 2^64 bytes");
    else snprintf(size, sizeof size, "%llu bytes", (unsigned long long)sbytes);
    return lade__fail(LADE_ERANGE, "%s: dataset '%s' of shape %s: a sample is %s, more than max_sample_bytes (%llu)",
                      m->path, m->dname, shape, size, (unsigned long long)m->max_sample);
  }
  m->sample_bytes = (size_t)sbytes;
  m->sample_elems = nelem;
  hsize_t ne = nelem;
  m->mspace = H5Screate_simple(1, &ne, NULL);
  s->count = m->dims[0];
  s->dtype = dtype;
  s->ndim = rank - 1;
  for (int d = 1; d < rank; d++) s->shape[d - 1] = (int64_t)m->dims[d];
  s->payload_bytes = m->sample_bytes;
  if (m->direct) { /* hdf5_direct=auto: is the dataset laid out so that pread reads it? */
    hid_t dcpl = H5Dget_create_plist(m->dset), fcpl = H5Fget_create_plist(m->file), ft2 = H5Dget_type(m->dset);
    hsize_t ub = 1;
    haddr_t off = H5Dget_offset(m->dset);
    struct stat st;
    m->direct = dcpl >= 0 && fcpl >= 0 && ft2 >= 0 && H5Pget_layout(dcpl) == H5D_CONTIGUOUS &&
                H5Pget_external_count(dcpl) == 0 && H5Pget_userblock(fcpl, &ub) >= 0 && ub == 0 &&
                off != HADDR_UNDEF && H5Tequal(ft2, m->mtype) > 0 && fstat(m->fd, &st) == 0 &&
                (uint64_t)st.st_size >= off + (uint64_t)m->dims[0] * m->sample_bytes;
    m->offset = off;
    if (dcpl >= 0) H5Pclose(dcpl);
    if (fcpl >= 0) H5Pclose(fcpl);
    if (ft2 >= 0) H5Tclose(ft2);
    H5Eclear2(H5E_DEFAULT);
  }
  if (!m->direct) {
    int rc = lade__h5_chunk_layout(m);
    if (rc) return rc;
    if (m->chunk_cache && m->allow_fast) lade__h5_chunk_detect(m);
  }
  return open_labels(s, m);
}

static void close_locked(lade__h5_t *m) {
  if (m->own_mtype) H5Tclose(m->mtype);
  if (m->mspace > 0) H5Sclose(m->mspace);
  if (m->fspace > 0) H5Sclose(m->fspace);
  if (m->dset > 0) H5Dclose(m->dset);
  if (m->file > 0) H5Fclose(m->file);
  m->own_mtype = false;
  m->mspace = m->fspace = m->dset = m->file = -1;
}

static void h5_free(lade__h5_t *m) {
  while (m->oldest) run_drop(m, m->oldest);
  lade__h5_chunk_free(m);
  pthread_mutex_destroy(&m->cmu);
  pthread_cond_destroy(&m->ccv);
  for (int i = 0; i < m->nspare; i++) free(m->spare[i]);
  if (m->fd >= 0) close(m->fd);
  free(m->labels);
  free(m->tab);
  free((void *)m->staged);
  pthread_mutex_destroy(&m->mu);
  pthread_cond_destroy(&m->cv);
  free(m);
}

static int h5_open(lade__source_t *s, const struct lade_config *cfg) {
  lade__h5_t *m = calloc(1, sizeof *m);
  if (!m) return lade__fail(LADE_ENOMEM, "hdf5 source: out of memory");
  pthread_mutex_init(&m->mu, NULL);
  pthread_cond_init(&m->cv, NULL);
  pthread_mutex_init(&m->cmu, NULL);
  pthread_cond_init(&m->ccv, NULL);
  m->file = m->dset = m->fspace = m->mspace = -1;
  snprintf(m->path, sizeof m->path, "%s", cfg->source);
  snprintf(m->dname, sizeof m->dname, "%s", cfg->hdf5_data);
  snprintf(m->lname, sizeof m->lname, "%s", cfg->hdf5_labels);
  m->gap = cfg->hdf5_gap;
  m->direct = m->allow_fast = cfg->hdf5_direct == LADE__TRISTATE_AUTO;
  m->chunk_cache = (size_t)cfg->hdf5_chunk_cache;
  m->max_sample = cfg->max_sample_bytes;
  struct stat st;
  m->fd = lade__open_regular(AT_FDCWD, cfg->source, cfg->source, &st);
  if (m->fd < 0) {
    int rc = m->fd;
    m->fd = -1;
    h5_free(m);
    return rc;
  }
  lade__file_ver_of(&m->ver, &st);
  lade__h5_guard_t g;
  lade__h5_lock(&g);
  int rc = open_locked(s, m);
  if (rc) close_locked(m);
  lade__h5_unlock(&g);
  if (!rc) {
    int hl = lade__npy_write_header(m->row_hdr, sizeof m->row_hdr, s->dtype, s->ndim, s->shape);
    if (hl < 0) rc = lade__fail_prefix(hl, "%s: ", cfg->source);
    else m->row_hdr_len = (size_t)hl;
  }
  if (!rc && m->chunked) {
    /* the chunk path inflates whole chunks: the chunk cache, not the stage, merges reads */
    m->gap = 0;
    rc = lade__h5_chunk_init(m);
  }
  if (!rc && m->gap) {
    /* the stage: a few windows of the engine's batches */
    size_t batch = (size_t)cfg->batch_size * (cfg->prefetch + 2);
    m->tab_max = LADE__MAX(batch * 2, 64);
    m->tab_cap = 64;
    while (m->tab_cap < m->tab_max * 2) m->tab_cap <<= 1;
    m->stage_max = LADE__MAX(STAGE_MIN_BYTES, 2 * batch * m->sample_bytes);
    m->tab = calloc(m->tab_cap, sizeof *m->tab);
    if (s->count <= (1ull << 28)) m->staged = calloc((size_t)(s->count + 63) / 64, sizeof *m->staged);
    if (!m->tab) rc = lade__fail(LADE_ENOMEM, "%s: out of memory for the read stage", cfg->source);
  }
  if (rc) {
    lade__h5_lock(&g);
    close_locked(m);
    lade__h5_unlock(&g);
    h5_free(m);
    s->labels = NULL;
    return rc;
  }
  s->impl = m;
  return 0;
}

static void h5_close(lade__source_t *s) {
  lade__h5_t *m = s->impl;
  if (!m) return;
  lade__h5_guard_t g;
  lade__h5_lock(&g);
  close_locked(m);
  lade__h5_unlock(&g);
  h5_free(m);
  s->impl = NULL;
}

const lade__source_ops_t lade__source_hdf5 = {.name = "hdf5",
                                              .open = h5_open,
                                              .close = h5_close,
                                              .read = h5_read,
                                              .read_payload = h5_read_payload,
                                              .describe = h5_describe,
                                              .version = h5_version,
                                              .extent = h5_extent,
                                              .plan_batch = h5_plan_batch,
                                              .stats = h5_stats};

#endif /* LADE_HAVE_HDF5 */
