/* npz.c - the `npz` transform: one array of each sample's .npz archive
 * (np.savez / np.savez_compressed), delivered as np.load(f)[npz_member]
 * gives it, in C order and the host's byte order.
 *
 * A sample is a whole file's bytes from any source, so this is a transform
 * like npy: every source, cache tier and plan serves it unchanged. Each
 * apply() parses the archive in place (core/zipfmt.c), finds the member as
 * numpy's NpzFile does (NAME, else NAME.npy), and reads its .npy header
 * (core/npyfmt.c):
 * - a stored member (np.savez) is parsed straight from the sample's bytes,
 *   no copy before the one into the slot;
 * - a deflated member (np.savez_compressed) is inflated (raw deflate) into
 *   the worker's scratch buffer, first only as far as the .npy header, so a
 *   member of another dtype or shape is refused before its array is
 *   inflated, and a member can never make the scratch larger than sample
 *   0's header and array allow (a zip bomb stops there; with raw_size, at
 *   an array of 4 GiB, as for any sample). The scratch and the
 *   z_stream belong to the worker (worker_init) and grow only when a larger
 *   member arrives: no heap allocation per sample in the steady state.
 * With raw_size > 0 (lade dlio: DLIO's arrays differ in shape from file to
 * file) each array's bytes, in C order and the host's byte order, fill a
 * uint8 slot of raw_size bytes as the raw transform fills it: zero padded,
 * or cut to the slot with raw_overflow=cut.
 * The CRC-32 of the whole member is checked against the central directory,
 * as zipfile does when np.load reads a member to its end (a stored member's
 * before its header is parsed, so damage is reported as such; a deflated
 * member's once it is inflated). Without zlib, stored members work and a
 * deflated one is a clear error. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef LADE_HAVE_ZLIB
#include <zlib.h>
#endif

#include "core/npyfmt.h"
#include "core/zipfmt.h"
#include "transform.h"

#define HDR_FIRST 4096u        /* bytes of a deflated member inflated first, for its .npy header */
#define HDR_MAX (1u << 20)     /* the longest .npy header read (np.load itself stops at 10000 bytes) */
#define ZCHUNK (1u << 30)      /* zlib counts in uInt: at most this much per call */

typedef struct npz_state {
  char member[256];        /* npz_member as given */
  char alt[264];           /* member + ".npy" */
  lade__npy_header_t hdr;  /* sample 0's member: every sample's must have its dtype and shape */
  size_t slot;             /* raw_size > 0: each array's bytes in a uint8 slot of this size, whatever its type */
  bool cut;                /* raw_overflow=cut: a longer array keeps its first slot bytes */
} npz_state_t;

typedef struct npz_worker {
  uint8_t *scratch; /* the inflated member */
  size_t cap;
  uint8_t *conv;    /* slot mode, an array cut that is not plain C order: the whole array converted */
  size_t conv_cap;
#ifdef LADE_HAVE_ZLIB
  z_stream z;       /* raw inflate, reset per member */
#endif
} npz_worker_t;

/* The member of one sample being read. */
typedef struct member {
  lade__zip_entry_t e;
  const uint8_t *in;    /* its stored bytes not yet given to zlib (deflated) */
  uint64_t in_left;
  const uint8_t *bytes; /* its uncompressed bytes: the sample's (stored) or the scratch (deflated) */
  size_t have;          /* how many of them are there */
  bool deflated, ended; /* ended: the deflate stream reached its end */
  char nm[100];         /* its name, for messages */
} member_t;

static int npz_worker_init(void *state, void **wstate) {
  npz_worker_t *w = calloc(1, sizeof *w);
  if (!w) return lade__fail(LADE_ENOMEM, "npz transform: out of memory");
#ifdef LADE_HAVE_ZLIB
  if (inflateInit2(&w->z, -15) != Z_OK) {
    free(w);
    return lade__fail(LADE_ENOMEM, "npz transform: no memory for an inflate stream");
  }
#endif
  *wstate = w;
  return 0;
}

static void npz_worker_free(void *state, void *wstate) {
  npz_worker_t *w = wstate;
  if (!w) return;
#ifdef LADE_HAVE_ZLIB
  inflateEnd(&w->z);
#endif
  free(w->scratch);
  free(w->conv);
  free(w);
}

/* Finds the member in the archive `in` and makes it ready to read. */
static int open_member(const npz_state_t *st, npz_worker_t *w, const uint8_t *in, size_t len, member_t *m) {
  lade__zip_t z;
  int rc = lade__zip_open(&z, in, len);
  if (rc) return rc;
  memset(m, 0, sizeof *m);
  if (lade__zip_find(&z, st->member, &m->e) && lade__zip_find(&z, st->alt, &m->e)) {
    char names[512];
    lade__zip_list_names(&z, 8, names, sizeof names);
    return lade__fail(LADE_ENOENT, "no member '%s' (nor '%s'): the archive holds %s (setting npz_member)",
                      st->member, st->alt, names);
  }
  lade__zip_show_name(&m->e, m->nm, sizeof m->nm);
  const uint8_t *data;
  rc = lade__zip_data(&z, &m->e, &data);
  if (rc) return rc;
  if (m->e.method == 0) { /* all there: checked first, so a damaged header is reported as damage */
    m->bytes = data;
    m->have = (size_t)m->e.usize; /* = csize, inside the archive (lade__zip_data) */
    return lade__zip_check_crc(&m->e, m->bytes);
  }
#ifdef LADE_HAVE_ZLIB
  if (inflateReset(&w->z) != Z_OK) return lade__fail(LADE_EFORMAT, "npz: inflate stream unusable");
  w->z.next_in = NULL;
  w->z.avail_in = 0;
  m->in = data;
  m->in_left = m->e.csize;
  m->bytes = w->scratch;
  m->deflated = true;
  return 0;
#else
  return lade__fail(LADE_EUNSUPPORTED, "npz member %s is deflated (np.savez_compressed), but lade was built without "
                    "zlib (LADE_WITH_ZLIB; apt-get install zlib1g-dev): only stored members (np.savez) are read",
                    m->nm);
#endif
}

#ifdef LADE_HAVE_ZLIB
/* Room for `need` bytes in the scratch; what is there is kept. */
static int grow(npz_worker_t *w, member_t *m, size_t need) {
  if (need > w->cap) {
    uint8_t *p = realloc(w->scratch, need);
    if (!p) return lade__fail(LADE_ENOMEM, "npz member %s: no memory for %zu bytes", m->nm, need);
    w->scratch = p;
    w->cap = need;
  }
  m->bytes = w->scratch;
  return 0;
}

/* Inflates until m->have == want (<= w->cap) or the stream ends. */
static int inflate_to(npz_worker_t *w, member_t *m, size_t want) {
  z_stream *z = &w->z;
  while (m->have < want && !m->ended) {
    if (z->avail_in == 0 && m->in_left) {
      uInt k = m->in_left > ZCHUNK ? ZCHUNK : (uInt)m->in_left;
      z->next_in = (Bytef *)m->in;
      z->avail_in = k;
      m->in += k;
      m->in_left -= k;
    }
    size_t room = want - m->have;
    uInt k = room > ZCHUNK ? ZCHUNK : (uInt)room;
    z->next_out = w->scratch + m->have;
    z->avail_out = k;
    int zr = inflate(z, Z_NO_FLUSH);
    m->have += k - z->avail_out;
    if (zr == Z_STREAM_END) m->ended = true;
    else if (zr == Z_BUF_ERROR) /* no progress with room left: the input is spent */
      return lade__fail(LADE_EFORMAT, "npz member %s: its deflate data ends after %zu of its %llu bytes (truncated)",
                        m->nm, m->have, (unsigned long long)m->e.usize);
    else if (zr != Z_OK)
      return lade__fail(LADE_EFORMAT, "npz member %s: corrupt deflate data (%s) after %zu of its %llu bytes", m->nm,
                        z->msg ? z->msg : "zlib error", m->have, (unsigned long long)m->e.usize);
  }
  return 0;
}

/* The rest of the member, whose usize bytes must be exactly the stream's:
 * one byte of room more tells a longer stream. */
static int inflate_all(npz_worker_t *w, member_t *m) {
  size_t n = (size_t)m->e.usize;
  int rc = grow(w, m, n + 1);
  if (!rc) rc = inflate_to(w, m, n);
  if (!rc && !m->ended) rc = inflate_to(w, m, n + 1);
  if (rc) return rc;
  if (m->have != n)
    return lade__fail(LADE_EFORMAT, "npz member %s inflates to %s%zu bytes, its directory entry says %zu", m->nm,
                      m->have > n ? "more than " : "", m->have > n ? n : m->have, n);
  if (!m->ended)
    return lade__fail(LADE_EFORMAT, "npz member %s: its deflate data does not end after its %zu bytes", m->nm, n);
  return 0;
}
#endif

/* Reads the member's .npy header (for a deflated member, inflating as far
 * as it reaches). */
static int read_header(npz_worker_t *w, member_t *m, lade__npy_header_t *h) {
  size_t usize = m->e.usize < HDR_MAX ? (size_t)m->e.usize : HDR_MAX;
  size_t want = usize < HDR_FIRST ? usize : HDR_FIRST;
  for (;;) {
#ifdef LADE_HAVE_ZLIB
    if (m->deflated) {
      int rc = grow(w, m, want);
      if (!rc) rc = inflate_to(w, m, want);
      if (rc) return rc;
    }
#endif
    int rc = lade__npy_parse(m->bytes, m->have, h);
    if (rc == 0) return 0;
    if (rc != LADE_ERANGE) return lade__fail_prefix(rc, "npz member %s: ", m->nm);
    if (m->deflated && want == HDR_MAX)
      return lade__fail(LADE_EFORMAT, "npz member %s: its .npy header is longer than 1 MiB", m->nm);
    if (!m->deflated || m->have < want || want == usize)
      return lade__fail(LADE_EFORMAT, "npz member %s: its %llu bytes end inside the .npy header", m->nm,
                        (unsigned long long)m->e.usize);
    want = want * 2 < usize ? want * 2 : usize;
  }
}

static bool same_type(const lade__npy_header_t *a, const lade__npy_header_t *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true; /* order and byte order are each file's own: converted per sample */
}

static int npz_init(void **state, const lade__xform_conf_t *cfg, const uint8_t *first, size_t first_len,
                    lade__sample_shape_t *shape) {
  const char *name = cfg->npz_member ? cfg->npz_member : "x";
  if (!name[0]) return lade__fail(LADE_EINVAL, "setting 'npz_member' is empty: name the array, e.g. x");
  if (strlen(name) >= sizeof ((npz_state_t *)0)->member)
    return lade__fail(LADE_EINVAL, "setting 'npz_member' is too long");
  if (!first) return lade__fail(LADE_EINVAL, "npz transform: sample 0's bytes are needed for the dtype and shape");
  npz_state_t *st = calloc(1, sizeof *st);
  if (!st) return lade__fail(LADE_ENOMEM, "npz transform: out of memory");
  strcpy(st->member, name);
  snprintf(st->alt, sizeof st->alt, "%s.npy", name);
  void *ws = NULL;
  int rc = npz_worker_init(st, &ws);
  if (!rc) {
    member_t m;
    rc = open_member(st, ws, first, first_len, &m);
    if (!rc) rc = read_header(ws, &m, &st->hdr);
    npz_worker_free(st, ws);
  }
  st->slot = (size_t)cfg->raw_size;
  st->cut = cfg->raw_cut;
  if (!rc && !st->slot) rc = lade__npy_check_sample_dims(st->hdr.ndim, "npz transform");
  if (!rc && (st->slot ? cfg->raw_size : st->hdr.payload_bytes) > UINT32_MAX)
    rc = lade__fail(LADE_ERANGE, "npz transform: %s of %llu bytes; a sample holds at most 4 GiB",
                    st->slot ? "a raw_size slot" : "arrays",
                    (unsigned long long)(st->slot ? cfg->raw_size : st->hdr.payload_bytes));
  if (rc) {
    free(st);
    return lade__fail_prefix(rc, "%s", "npz transform: ");
  }
  if (st->slot) { /* raw_size: bytes, as the raw transform gives them */
    shape->dtype = LADE_DTYPE_UINT8;
    shape->ndim = 1;
    shape->dims[0] = (int64_t)st->slot;
    shape->bytes = st->slot;
    *state = st;
    return 0;
  }
  shape->dtype = st->hdr.dtype;
  shape->ndim = st->hdr.ndim;
  for (int i = 0; i < st->hdr.ndim; i++) shape->dims[i] = st->hdr.shape[i];
  shape->bytes = st->hdr.payload_bytes;
  *state = st;
  return 0;
}

static void npz_destroy(void *state) { free(state); }

static int npz_apply(void *state, void *wstate, const uint8_t *in, size_t len, const lade__xform_ctx_t *ctx, void *out,
                     uint32_t *payload) {
  const npz_state_t *st = state;
  npz_worker_t *w = wstate;
  member_t m;
  lade__npy_header_t h;
  int rc = open_member(st, w, in, len, &m);
  if (!rc) rc = read_header(w, &m, &h);
  if (rc) return rc;
  if (st->slot && h.payload_bytes > st->slot && !st->cut) {
    char a[192];
    lade__npy_describe(&h, a, sizeof a);
    return lade__fail(LADE_ESHAPE, "npz member %s: %s is %zu bytes, larger than the raw slot of %zu bytes (set "
                      "raw_size, or raw_overflow=cut to keep its first raw_size bytes)", m.nm, a, h.payload_bytes,
                      st->slot);
  }
  if (st->slot && h.payload_bytes > UINT32_MAX)
    return lade__fail(LADE_ERANGE, "npz member %s: an array of %zu bytes; at most 4 GiB are read", m.nm,
                      h.payload_bytes);
  if (!st->slot && !same_type(&h, &st->hdr)) {
    char a[192], b[192];
    lade__npy_describe(&h, a, sizeof a);
    lade__npy_describe(&st->hdr, b, sizeof b);
    return lade__fail(LADE_ESHAPE, "npz member %s: %s differs from the dataset's %s (sample 0's)", m.nm, a, b);
  }
  /* exactly a header and the array: what np.save writes (the CRC covers it all) */
  size_t need = h.header_len + h.payload_bytes;
  if (m.e.usize != need)
    return lade__fail(LADE_EFORMAT, "npz member %s holds %llu bytes, its .npy header and array %zu", m.nm,
                      (unsigned long long)m.e.usize, need);
#ifdef LADE_HAVE_ZLIB
  if (m.deflated) { /* a stored member's CRC was checked by open_member */
    rc = inflate_all(w, &m);
    if (!rc) rc = lade__zip_check_crc(&m.e, m.bytes);
    if (rc) return rc;
  }
#endif
  const uint8_t *array = m.bytes + h.header_len;
  if (!st->slot) {
    lade__npy_to_c(&h, -1, array, out);
    *payload = (uint32_t)h.payload_bytes;
    return 0;
  }
  /* raw_size: the array's bytes in C order, zero padded, or its first slot bytes (cut) */
  size_t n = h.payload_bytes;
  if (n <= st->slot) {
    lade__npy_to_c(&h, -1, array, out);
    memset((uint8_t *)out + n, 0, st->slot - n);
  } else if (lade__npy_plain(&h)) {
    memcpy(out, array, st->slot);
  } else { /* fortran order or swapped: the whole array converted, then cut */
    if (n > w->conv_cap) {
      uint8_t *p = realloc(w->conv, n);
      if (!p) return lade__fail(LADE_ENOMEM, "npz member %s: no memory for %zu bytes", m.nm, n);
      w->conv = p;
      w->conv_cap = n;
    }
    lade__npy_to_c(&h, -1, array, w->conv);
    memcpy(out, w->conv, st->slot);
  }
  *payload = (uint32_t)(n < st->slot ? n : st->slot);
  return 0;
}

const lade__transform_ops_t lade__xform_npz = {.name = "npz",
                                               .init = npz_init,
                                               .destroy = npz_destroy,
                                               .worker_init = npz_worker_init,
                                               .worker_free = npz_worker_free,
                                               .apply = npz_apply};
