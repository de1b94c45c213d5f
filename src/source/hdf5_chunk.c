/*
 * hdf5_chunk.c - the hdf5 source's chunk path (hdf5.c is the source;
 * hdf5_impl.h what the two share).
 *
 * A chunked dataset whose chunks hold whole samples, compressed with
 * deflate (gzip, as h5py writes it) with or without the shuffle filter, in
 * the host's byte order: libhdf5 only hands out the stored (compressed)
 * chunk with H5Dread_chunk, under the libhdf5 lock, and the worker inflates it with
 * zlib outside every lock, so decompression runs on all cores although
 * libhdf5 is serial. Decompressed chunks are kept in a cache of
 * hdf5_chunk_cache bytes (LRU), so a chunk is inflated once while it stays.
 * Chunks libhdf5 does not hand out (never written: fill values) and every
 * failure fall back to the H5Dread path for that sample.
 *
 * Locks: m->cmu guards the cache (entries, LRU, hash chains, counts); it is
 * never held while the libhdf5 lock is taken (a chunk is marked loading
 * under cmu, read under the libhdf5 lock alone, inflated with no lock, then
 * published under cmu). Readers copy out of a ready entry unlocked while
 * they pin it; a pinned or loading entry is never evicted.
 */
#ifdef LADE_HAVE_HDF5

#include <stdlib.h>
#include <string.h>

#include "source/hdf5_impl.h"

#ifdef LADE_HAVE_ZLIB
#include <zlib.h>

void lade__h5_chunk_detect(lade__h5_t *m) {
  hid_t dcpl = H5Dget_create_plist(m->dset), ft2 = H5Dget_type(m->dset);
  hsize_t cd[LADE_MAX_DIMS + 1];
  bool ok = dcpl >= 0 && ft2 >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED &&
            H5Pget_chunk(dcpl, m->rank, cd) == m->rank && H5Tequal(ft2, m->mtype) > 0;
  for (int d = 1; ok && d < m->rank; d++) ok = cd[d] == m->dims[d];
  int nf = ok ? H5Pget_nfilters(dcpl) : -1;
  ok = ok && nf >= 0 && nf <= 2;
  bool deflate = false;
  for (int k = 0; ok && k < nf; k++) {
    unsigned flags = 0, cdv[8];
    size_t ncd = 8;
    char name[64];
    H5Z_filter_t f = H5Pget_filter2(dcpl, (unsigned)k, &flags, &ncd, cdv, sizeof name, name, NULL);
    ok = f == H5Z_FILTER_DEFLATE || f == H5Z_FILTER_SHUFFLE;
    m->filter[k] = (int)f;
    deflate |= f == H5Z_FILTER_DEFLATE;
  }
  m->chunked = ok && deflate && cd[0] >= 1;
  m->nfilters = nf;
  m->rows = m->chunked ? cd[0] : 0;
  if (dcpl >= 0) H5Pclose(dcpl);
  if (ft2 >= 0) H5Tclose(ft2);
  H5Eclear2(H5E_DEFAULT);
}

int lade__h5_chunk_init(lade__h5_t *m) {
  m->cmax = LADE__MAX(m->chunk_cache / ((size_t)m->rows * m->sample_bytes), 1);
  m->cbuckets = 64;
  while (m->cbuckets < m->cmax * 2) m->cbuckets <<= 1;
  m->cbucket = calloc(m->cbuckets, sizeof *m->cbucket);
  if (!m->cbucket) return lade__fail(LADE_ENOMEM, "%s: out of memory for the chunk cache", m->path);
  return 0;
}


enum { CH_LOADING = 0, CH_READY };

typedef struct centry {
  uint64_t c;
  int state;
  uint32_t pins; /* readers copying out of buf, outside the lock */
  uint8_t *buf;
  struct centry *prev, *next, *hnext; /* LRU (oldest first), hash chain */
} centry_t;

static centry_t **cfind(lade__h5_t *m, uint64_t c) {
  centry_t **p = &m->cbucket[lade__mix64(c) & (m->cbuckets - 1)];
  while (*p && (*p)->c != c) p = &(*p)->hnext;
  return p;
}

static void clru_unlink(lade__h5_t *m, centry_t *e) {
  if (e->prev) e->prev->next = e->next;
  else m->cold_ = e->next;
  if (e->next) e->next->prev = e->prev;
  else m->cnew = e->prev;
  e->prev = e->next = NULL;
}

static void clru_push(lade__h5_t *m, centry_t *e) {
  e->prev = m->cnew;
  e->next = NULL;
  if (m->cnew) m->cnew->next = e;
  else m->cold_ = e;
  m->cnew = e;
}

static void cremove(lade__h5_t *m, centry_t *e) {
  centry_t **p = cfind(m, e->c);
  if (*p == e) *p = e->hnext;
  clru_unlink(m, e);
  m->centries--;
  free(e->buf);
  free(e);
}

/* Chunk c, inflated, into out (rows * sample_bytes). */
static int load_chunk(lade__h5_t *m, uint64_t c, uint8_t *out) {
  hsize_t off[LADE_MAX_DIMS + 1] = {0}, sz = 0;
  off[0] = c * m->rows;
  uint32_t mask = 0;
  uint8_t *raw = NULL;
  lade__h5_guard_t g;
  lade__h5_lock(&g);
  int rc = H5Dget_chunk_storage_size(m->dset, off, &sz) < 0 || sz == 0 ? -1 : 0;
  if (!rc) rc = (raw = malloc(sz)) ? 0 : -1;
  if (!rc && H5Dread_chunk(m->dset, H5P_DEFAULT, off, &mask, raw) < 0) rc = -1;
  H5Eclear2(H5E_DEFAULT);
  lade__h5_unlock(&g);
  atomic_fetch_add_explicit(&m->reads, 1, memory_order_relaxed);
  size_t len = (size_t)m->rows * m->sample_bytes;
  uint8_t *tmp = NULL, *cur = raw;
  size_t curlen = (size_t)sz;
  for (int k = m->nfilters - 1; !rc && k >= 0; k--) { /* undo the filters, last applied first */
    if (mask & (1u << k)) continue;                   /* skipped for this chunk */
    uint8_t *dst = cur == out ? (tmp ? tmp : (tmp = malloc(len))) : out;
    if (!dst) {
      rc = -1;
      break;
    }
    if (m->filter[k] == H5Z_FILTER_DEFLATE) {
      uLongf n = (uLongf)len;
      if (uncompress(dst, &n, cur, (uLong)curlen) != Z_OK || n != len) rc = -1;
    } else { /* shuffle: byte b of element i was stored at b * count + i */
      size_t es = m->sample_bytes / m->sample_elems;
      size_t count = len / es;
      if (curlen != len) rc = -1;
      for (size_t i = 0; !rc && i < count; i++)
        for (size_t b = 0; b < es; b++) dst[i * es + b] = cur[b * count + i];
    }
    cur = dst;
    curlen = len;
  }
  if (!rc && curlen != len) rc = -1; /* a chunk stored unfiltered at another size */
  if (!rc && cur != out) memcpy(out, cur, len);
  free(raw);
  free(tmp);
  return rc;
}

int lade__h5_chunk_sample(lade__h5_t *m, uint64_t idx, void *dst) {
  uint64_t c = idx / m->rows, row = idx % m->rows;
  pthread_mutex_lock(&m->cmu);
  for (;;) {
    centry_t *e = *cfind(m, c);
    if (e && e->state == CH_LOADING) {
      pthread_cond_wait(&m->ccv, &m->cmu);
      continue;
    }
    if (e) {
      clru_unlink(m, e);
      clru_push(m, e);
      e->pins++;
      pthread_mutex_unlock(&m->cmu);
      memcpy(dst, e->buf + row * m->sample_bytes, m->sample_bytes);
      pthread_mutex_lock(&m->cmu);
      e->pins--;
      pthread_mutex_unlock(&m->cmu);
      return 0;
    }
    /* a miss: make room, then load it with no lock held */
    for (centry_t *o = m->cold_; o && m->centries >= m->cmax;) {
      centry_t *next = o->next;
      if (o->state == CH_READY && !o->pins) cremove(m, o);
      o = next;
    }
    bool cached = m->centries < m->cmax;
    e = calloc(1, sizeof *e);
    uint8_t *buf = malloc((size_t)m->rows * m->sample_bytes);
    if (!e || !buf) {
      free(e);
      free(buf);
      pthread_mutex_unlock(&m->cmu);
      return 1;
    }
    e->c = c;
    e->buf = buf;
    if (cached) {
      e->state = CH_LOADING;
      *cfind(m, c) = e;
      clru_push(m, e);
      m->centries++;
    }
    pthread_mutex_unlock(&m->cmu);
    int rc = load_chunk(m, c, buf);
    if (!rc) memcpy(dst, buf + row * m->sample_bytes, m->sample_bytes);
    if (!cached) {
      free(buf);
      free(e);
      return rc ? 1 : 0;
    }
    pthread_mutex_lock(&m->cmu);
    if (rc) cremove(m, e); /* waiters load it again, or fall back themselves */
    else e->state = CH_READY;
    pthread_cond_broadcast(&m->ccv);
    pthread_mutex_unlock(&m->cmu);
    return rc ? 1 : 0;
  }
}

void lade__h5_chunk_free(lade__h5_t *m) {
  while (m->cold_) cremove(m, m->cold_);
  free(m->cbucket);
  m->cbucket = NULL;
}

#else /* no zlib: no chunk path, every sample through H5Dread */

void lade__h5_chunk_detect(lade__h5_t *m) { m->chunked = false; }

int lade__h5_chunk_init(lade__h5_t *m) {
  (void)m;
  return 0;
}

int lade__h5_chunk_sample(lade__h5_t *m, uint64_t idx, void *dst) {
  (void)m, (void)idx, (void)dst;
  return 1;
}

void lade__h5_chunk_free(lade__h5_t *m) { (void)m; }

#endif /* LADE_HAVE_ZLIB */
#endif /* LADE_HAVE_HDF5 */
