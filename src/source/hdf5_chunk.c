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
 * Chunks libhdf5 does not hand out (never written: fill values) fall back
 * to the H5Dread path for that sample.
 *
 * Checked sizes. libhdf5's deflate filter grows its buffer for as long as
 * the stream goes on and hands out a short result as a whole chunk (the
 * rest undefined). Here every gzip chunk inflates into exactly its declared
 * size and not a byte more (inflate_exact): a chunk of another size fails
 * naming the file, the dataset and the chunk. The H5Dread path of a gzip
 * dataset runs the same check once per chunk before libhdf5 inflates it
 * (lade__h5_chunk_check), so neither path delivers undefined bytes or
 * inflates a bomb.
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

int lade__h5_chunk_layout(lade__h5_t *m) {
  hid_t dcpl = H5Dget_create_plist(m->dset), ft = H5Dget_type(m->dset);
  bool ok = dcpl >= 0 && ft >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED &&
            H5Pget_chunk(dcpl, m->rank, m->cdims) == m->rank;
  int nf = ok ? H5Pget_nfilters(dcpl) : -1;
  ok = ok && nf >= 1 && nf <= 3;
  /* one deflate; shuffle only before it, fletcher32 anywhere (its 4 bytes
   * are counted): then the stored bytes are a zlib stream, fletcher32's
   * checksum after it */
  int deflate = 0;
  for (int k = 0; ok && k < nf; k++) {
    unsigned flags = 0, cdv[8];
    size_t ncd = 8;
    char name[64];
    H5Z_filter_t f = H5Pget_filter2(dcpl, (unsigned)k, &flags, &ncd, cdv, sizeof name, name, NULL);
    ok = f == H5Z_FILTER_DEFLATE || (f == H5Z_FILTER_SHUFFLE && !deflate) || f == H5Z_FILTER_FLETCHER32;
    m->filter[k] = (int)f;
    deflate += f == H5Z_FILTER_DEFLATE;
  }
  ok = ok && deflate == 1;
  uint64_t nchunks = 1, elems = 1;
  for (int d = 0; ok && d < m->rank; d++) {
    ok = m->cdims[d] >= 1;
    uint64_t n = ok ? (m->dims[d] + m->cdims[d] - 1) / m->cdims[d] : 0;
    ok = ok && !__builtin_mul_overflow(nchunks, n, &nchunks) && !__builtin_mul_overflow(elems, m->cdims[d], &elems);
  }
  size_t tsize = ft >= 0 ? H5Tget_size(ft) : 0;
  uint64_t bytes = 0;
  ok = ok && !__builtin_mul_overflow(elems, (uint64_t)tsize, &bytes) && bytes < ((uint64_t)1 << 32);
  m->verify = ok;
  m->nfilters = ok ? nf : 0;
  m->chunk_bytes = ok ? (size_t)bytes : 0;
  m->nchunks = ok ? nchunks : 0;
  if (dcpl >= 0) H5Pclose(dcpl);
  if (ft >= 0) H5Tclose(ft);
  H5Eclear2(H5E_DEFAULT);
  /* a bit per chunk (zero pages until touched); more chunks than 2^30: every read checks */
  if (ok && nchunks <= ((uint64_t)1 << 30) && !(m->checked = calloc((size_t)(nchunks + 63) / 64, 8)))
    return lade__fail(LADE_ENOMEM, "%s: out of memory for dataset '%s' (%llu chunks)", m->path, m->dname,
                      (unsigned long long)nchunks);
  return 0;
}

void lade__h5_chunk_detect(lade__h5_t *m) {
  hid_t ft2 = H5Dget_type(m->dset);
  bool ok = m->verify && ft2 >= 0 && H5Tequal(ft2, m->mtype) > 0 && m->nfilters <= 2;
  for (int d = 1; ok && d < m->rank; d++) ok = m->cdims[d] == m->dims[d];
  for (int k = 0; ok && k < m->nfilters; k++) ok = m->filter[k] != H5Z_FILTER_FLETCHER32;
  m->chunked = ok;
  m->rows = m->chunked ? m->cdims[0] : 0;
  if (ft2 >= 0) H5Tclose(ft2);
  H5Eclear2(H5E_DEFAULT);
}

/* "[4, 0, 0]": a chunk's offset, as h5py's chunk_offset shows it. */
static void chunk_name(const lade__h5_t *m, const hsize_t *off, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "[");
  for (int d = 0; d < m->rank && n < size; d++)
    n += (size_t)snprintf(buf + n, size - n, "%s%llu", d ? ", " : "", (unsigned long long)off[d]);
  if (n < size) snprintf(buf + n, size - n, "]");
}

/* Inflates the zlib stream src into dst, which it must fill exactly (len
 * bytes): never more than len + 1 bytes are produced, so a chunk that
 * inflates to far more (a zip bomb) costs len bytes and stops there. */
static int inflate_exact(const lade__h5_t *m, const hsize_t *off, const uint8_t *src, size_t srclen, uint8_t *dst,
                         size_t len) {
  z_stream z;
  memset(&z, 0, sizeof z);
  char cn[32 * (LADE_MAX_DIMS + 1)];
  if (inflateInit(&z) != Z_OK) return lade__fail(LADE_ENOMEM, "%s: out of memory to inflate a chunk", m->path);
  z.next_in = (Bytef *)src;
  z.avail_in = (uInt)srclen;
  z.next_out = dst;
  z.avail_out = (uInt)len;
  int zr = inflate(&z, Z_FINISH);
  uint8_t extra;
  if (zr != Z_STREAM_END && z.avail_out == 0 && zr != Z_DATA_ERROR && zr != Z_MEM_ERROR) {
    z.next_out = &extra; /* full: one byte more says whether the stream goes on */
    z.avail_out = 1;
    zr = inflate(&z, Z_FINISH);
    if (z.avail_out == 0) zr = Z_NEED_DICT + 100; /* more */
  }
  size_t out = (size_t)z.total_out;
  const char *msg = z.msg;
  inflateEnd(&z);
  if (zr == Z_STREAM_END && out == len) return 0;
  chunk_name(m, off, cn, sizeof cn);
  if (zr == Z_NEED_DICT + 100)
    return lade__fail(LADE_EFORMAT, "%s: dataset '%s': the gzip chunk at %s inflates to more than the chunk's %zu bytes",
                      m->path, m->dname, cn, len);
  if (zr == Z_STREAM_END)
    return lade__fail(LADE_EFORMAT, "%s: dataset '%s': the gzip chunk at %s inflates to %zu bytes, not the chunk's %zu",
                      m->path, m->dname, cn, out, len);
  return lade__fail(LADE_EFORMAT, "%s: dataset '%s': the gzip chunk at %s is not a whole deflate stream (%s, after %zu "
                    "of the chunk's %zu bytes)", m->path, m->dname, cn, msg ? msg : "it ends early", out, len);
}

/* Reads the stored chunk at off and undoes its filters into out
 * (chunk_bytes; NULL: only check its size), with the lock held. 1: the
 * chunk was never written (fill values: libhdf5's to give). */
static int chunk_unfilter(lade__h5_t *m, const hsize_t *off, uint8_t *out) {
  hsize_t sz = 0;
  uint32_t mask = 0;
  if (H5Dget_chunk_storage_size(m->dset, off, &sz) < 0 || sz == 0) {
    H5Eclear2(H5E_DEFAULT);
    return 1;
  }
  char cn[32 * (LADE_MAX_DIMS + 1)], msg[200] = "libhdf5 error";
  uint8_t *raw = malloc((size_t)sz), *tmp = NULL;
  if (!raw) return lade__fail(LADE_ENOMEM, "%s: out of memory for a chunk of %llu bytes", m->path, (unsigned long long)sz);
  if (H5Dread_chunk(m->dset, H5P_DEFAULT, off, &mask, raw) < 0) {
    chunk_name(m, off, cn, sizeof cn);
    free(raw);
    H5Eclear2(H5E_DEFAULT);
    return lade__fail(LADE_EIO, "%s: dataset '%s': cannot read the chunk at %s: %s", m->path, m->dname, cn, msg);
  }
  /* sizes in write order: shuffle keeps it, fletcher32 adds 4 bytes */
  size_t len = m->chunk_bytes, want = len, cur = (size_t)sz;
  int dk = -1;
  for (int k = 0; k < m->nfilters; k++) {
    if (mask & (1u << k)) continue; /* skipped for this chunk */
    if (m->filter[k] == H5Z_FILTER_DEFLATE && dk < 0) dk = k;
    else if (m->filter[k] == H5Z_FILTER_FLETCHER32 && dk < 0) want += 4;
    else if (m->filter[k] == H5Z_FILTER_FLETCHER32 && cur >= 4) cur -= 4; /* its checksum, after the stream */
  }
  bool shuffled = false;
  for (int k = 0; k < m->nfilters; k++) shuffled |= m->filter[k] == H5Z_FILTER_SHUFFLE && !(mask & (1u << k));
  int rc = 0;
  uint8_t *cur_p = raw;
  if (dk >= 0) {
    bool into_out = out && !shuffled && want == len; /* inflated straight into place */
    tmp = into_out ? NULL : malloc(want);
    cur_p = into_out ? out : tmp;
    rc = cur_p ? inflate_exact(m, off, raw, cur, cur_p, want)
               : lade__fail(LADE_ENOMEM, "%s: out of memory to inflate a chunk", m->path);
    cur = want;
  } else if (cur != want) {
    chunk_name(m, off, cn, sizeof cn);
    rc = lade__fail(LADE_EFORMAT, "%s: dataset '%s': the chunk at %s is stored unfiltered with %zu bytes, not %zu",
                    m->path, m->dname, cn, cur, want);
  }
  if (!rc && out) {
    /* the chunk path: deflate and shuffle only (lade__h5_chunk_detect) */
    if (shuffled) { /* byte b of element i was stored at b * count + i */
      size_t es = m->sample_bytes / m->sample_elems, count = len / es;
      for (size_t i = 0; i < count; i++)
        for (size_t b = 0; b < es; b++) out[i * es + b] = cur_p[b * count + i];
    } else if (cur_p != out) {
      memcpy(out, cur_p, len);
    }
  }
  free(raw);
  free(tmp);
  return rc;
}

int lade__h5_chunk_check(lade__h5_t *m, uint64_t first, uint64_t count) {
  if (!m->verify || !count) return 0;
  /* the chunks [c0, c1] along the samples, every chunk along the others */
  hsize_t idx[LADE_MAX_DIMS + 1] = {0}, off[LADE_MAX_DIMS + 1];
  uint64_t c1 = (first + count - 1) / m->cdims[0];
  idx[0] = first / m->cdims[0];
  for (;;) {
    uint64_t lin = 0;
    for (int d = 0; d < m->rank; d++) {
      lin = lin * ((m->dims[d] + m->cdims[d] - 1) / m->cdims[d]) + idx[d];
      off[d] = idx[d] * m->cdims[d];
    }
    if (!m->checked || !(m->checked[lin >> 6] >> (lin & 63) & 1)) {
      int rc = chunk_unfilter(m, off, NULL);
      if (rc < 0) return rc;
      if (m->checked) m->checked[lin >> 6] |= 1ull << (lin & 63);
    }
    int d = m->rank - 1; /* the next chunk, last dimension fastest */
    for (; d >= 1; d--) {
      if (++idx[d] < (m->dims[d] + m->cdims[d] - 1) / m->cdims[d]) break;
      idx[d] = 0;
    }
    if (d == 0 && ++idx[0] > c1) return 0;
  }
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

/* Chunk c, inflated, into out (rows * sample_bytes): 0, 1 (never written)
 * or a negative code naming the chunk. */
static int load_chunk(lade__h5_t *m, uint64_t c, uint8_t *out) {
  hsize_t off[LADE_MAX_DIMS + 1] = {0};
  off[0] = c * m->rows;
  lade__h5_guard_t g;
  lade__h5_lock(&g);
  int rc = chunk_unfilter(m, off, out);
  lade__h5_unlock(&g);
  atomic_fetch_add_explicit(&m->reads, 1, memory_order_relaxed);
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
      return rc;
    }
    pthread_mutex_lock(&m->cmu);
    if (rc) cremove(m, e); /* waiters load it again, or fall back themselves */
    else e->state = CH_READY;
    pthread_cond_broadcast(&m->ccv);
    pthread_mutex_unlock(&m->cmu);
    return rc;
  }
}

void lade__h5_chunk_free(lade__h5_t *m) {
  free(m->checked);
  m->checked = NULL;
  while (m->cold_) cremove(m, m->cold_);
  free(m->cbucket);
  m->cbucket = NULL;
}

#else /* no zlib: no chunk path, every sample through H5Dread */

int lade__h5_chunk_layout(lade__h5_t *m) {
  m->verify = false; /* not checked without zlib: docs/sources.md (hdf5, Integrity) */
  return 0;
}

int lade__h5_chunk_check(lade__h5_t *m, uint64_t first, uint64_t count) {
  (void)m, (void)first, (void)count;
  return 0;
}

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
