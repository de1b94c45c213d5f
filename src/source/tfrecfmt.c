/* tfrecfmt.c - TFRecord framing and the tf.train.Example decoder (see
 * tfrecfmt.h). Outside bytes: every length is checked against the bytes
 * that hold it before anything is read through it, so a malformed record
 * is an error naming what and where, never a read past its end (fuzzed by
 * fuzz/fuzz_tfrecord.c). The decoder is a loop over protobuf fields per
 * message level (Example > Features > map entry > Feature > list), with no
 * allocation and no recursion except for skipping groups (bounded). */
#include "tfrecfmt.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "core/core.h"
#include "core/crc32c.h"

#define GROUP_DEPTH 32

uint32_t lade__tfrec_mask(uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; }

uint32_t lade__tfrec_masked_crc(const void *p, size_t n) { return lade__tfrec_mask(lade__crc32c(0, p, n)); }

uint32_t lade__tfrec_u32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t u64le(const uint8_t *p) { return (uint64_t)lade__tfrec_u32(p) | (uint64_t)lade__tfrec_u32(p + 4) << 32; }

/* ------------------------------------------------------------- framing */

void lade__tfrec_init(lade__tfrec_reader_t *r, lade__tar_pread_fn fn, void *ctx, uint64_t file_size) {
  memset(r, 0, sizeof *r);
  r->pread = fn;
  r->ctx = ctx;
  r->file_size = file_size;
}

int lade__tfrec_next(lade__tfrec_reader_t *r, lade__tfrec_record_t *rec) {
  if (r->pos >= r->file_size) return 0;
  unsigned long long no = (unsigned long long)r->record, at = (unsigned long long)r->pos;
  uint64_t left = r->file_size - r->pos;
  uint8_t h[LADE__TFREC_HEAD];
  size_t want = (size_t)LADE__MIN(left, (uint64_t)LADE__TFREC_HEAD);
  long got = r->pread(r->ctx, h, want, r->pos);
  if (got == 0 && r->file_size == LADE__TFREC_STREAM) return 0;
  if (got < 0)
    return lade__fail(LADE_EIO, "record %llu (at byte %llu): cannot read its header: %s", no, at, strerror((int)-got));
  if ((size_t)got < LADE__TFREC_HEAD)
    return lade__fail(LADE_EFORMAT, "truncated: record %llu at byte %llu has %ld of its %u header bytes", no, at, got,
                      LADE__TFREC_HEAD);
  uint64_t len = u64le(h);
  uint32_t stored = lade__tfrec_u32(h + 8), computed = lade__tfrec_masked_crc(h, 8);
  if (stored != computed)
    return lade__fail(LADE_EFORMAT, "record %llu (at byte %llu): bad length CRC (stored 0x%08x, computed 0x%08x over "
                      "the length field, which says %llu bytes)", no, at, stored, computed, (unsigned long long)len);
  left -= LADE__TFREC_HEAD;
  if (left < LADE__TFREC_TAIL || len > left - LADE__TFREC_TAIL)
    return lade__fail(LADE_EFORMAT, "record %llu (at byte %llu): its %llu bytes of data and 4-byte CRC run past the end "
                      "of the file (%llu bytes; %llu left after the header): truncated?", no, at,
                      (unsigned long long)len, (unsigned long long)r->file_size, (unsigned long long)left);
  rec->index = r->record++;
  rec->off = r->pos;
  rec->data_off = r->pos + LADE__TFREC_HEAD;
  rec->len = len;
  r->pos = rec->data_off + len + LADE__TFREC_TAIL;
  return 1;
}

int lade__tfrec_check(const uint8_t *data, size_t len, const uint8_t *crc, uint32_t *stored, uint32_t *computed) {
  *stored = lade__tfrec_u32(crc);
  *computed = lade__tfrec_masked_crc(data, len);
  return *stored == *computed ? 0 : -1;
}

/* ------------------------------------------------------ protobuf fields */

typedef struct pb {
  const uint8_t *p, *end;
  const uint8_t *base; /* the Example's first byte, for offsets in messages */
  const char *what;    /* the message being read, for messages */
} pb_t;

typedef struct fld {
  uint32_t num;
  int wire;
  uint64_t v;       /* wire 0: the value */
  const uint8_t *p; /* wire 1, 2, 5: the bytes */
  size_t n;
} fld_t;

static int bad(const pb_t *b, const char *why) {
  return lade__fail(LADE_EFORMAT, "not a tf.train.Example: %s in a %s at byte %zu", why, b->what,
                    (size_t)(b->p - b->base));
}

/* A varint of at most 10 bytes whose value fits 64 bits. */
static int varint(pb_t *b, uint64_t *v) {
  uint64_t x = 0;
  for (int i = 0; i < 10; i++) {
    if (b->p == b->end) return bad(b, "a varint cut short");
    uint8_t c = *b->p++;
    if (i == 9 && c > 1) return bad(b, "a varint longer than 64 bits");
    x |= (uint64_t)(c & 0x7f) << (7 * i);
    if (!(c & 0x80)) {
      *v = x;
      return 0;
    }
  }
  return bad(b, "a varint longer than 64 bits"); /* not reached: byte 10 has c <= 1 */
}

static int take(pb_t *b, size_t n, fld_t *f) {
  if ((size_t)(b->end - b->p) < n) return bad(b, "a field's bytes run past the end");
  f->p = b->p;
  f->n = n;
  b->p += n;
  return 0;
}

static int field_in(pb_t *b, fld_t *f, int depth);

/* Skips the rest of group `num` (its start tag read). */
static int skip_group(pb_t *b, uint32_t num, int depth) {
  if (depth > GROUP_DEPTH) return bad(b, "groups nested too deep");
  for (;;) {
    fld_t g;
    if (b->p == b->end) return bad(b, "a group without its end");
    int rc = field_in(b, &g, depth + 1);
    if (rc < 0) return rc;
    if (rc == 2) return g.num == num ? 0 : bad(b, "a group ended by another group's end tag");
  }
}

/* One field: 1 with it in *f, 2 for an end-group tag (f->num set), or an
 * error. Groups are skipped whole and returned as wire 3 with no bytes. */
static int field_in(pb_t *b, fld_t *f, int depth) {
  uint64_t tag;
  int rc = varint(b, &tag);
  if (rc) return rc;
  if (tag >> 3 == 0 || tag >> 3 > 0x1fffffff) return bad(b, "a field number out of range");
  memset(f, 0, sizeof *f);
  f->num = (uint32_t)(tag >> 3);
  f->wire = (int)(tag & 7);
  switch (f->wire) {
    case 0: return varint(b, &f->v) ? LADE_EFORMAT : 1;
    case 1: return take(b, 8, f) ? LADE_EFORMAT : 1;
    case 2: {
      uint64_t n;
      if (varint(b, &n)) return LADE_EFORMAT;
      if (n > (uint64_t)(b->end - b->p)) return bad(b, "a length past the end of its message");
      return take(b, (size_t)n, f) ? LADE_EFORMAT : 1;
    }
    case 3: return skip_group(b, f->num, depth) ? LADE_EFORMAT : 1;
    case 4: return 2;
    case 5: return take(b, 4, f) ? LADE_EFORMAT : 1;
    default: return bad(b, "an invalid wire type (6 or 7)");
  }
}

/* The next field of message b: 1, 0 at its end, or an error. */
static int next(pb_t *b, fld_t *f) {
  if (b->p == b->end) return 0;
  int rc = field_in(b, f, 0);
  if (rc == 2) return bad(b, "an end-group tag outside a group");
  return rc;
}

static pb_t sub(const pb_t *b, const fld_t *f, const char *what) {
  return (pb_t){f->p, f->p + f->n, b->base, what};
}

/* ------------------------------------------------------------- lists */

static const char *const list_what[] = {"Feature", "BytesList", "FloatList", "Int64List"};

/* Walks a list message of `kind`: counts its values and, for numbers,
 * writes the first `max` of them at dst (when not NULL) as little-endian
 * int64 or float32. */
static int list_walk(const pb_t *in, int kind, uint8_t *dst, uint64_t max, uint64_t *count, const uint8_t **first,
                     size_t *first_n) {
  pb_t b = *in;
  fld_t f;
  int rc;
  uint64_t k = 0;
  while ((rc = next(&b, &f)) == 1) {
    if (f.num != 1) continue;
    if (kind == LADE__TFREC_BYTES && f.wire == 2) {
      if (!k && first) *first = f.p, *first_n = f.n;
      k++;
    } else if (kind == LADE__TFREC_FLOAT && (f.wire == 5 || f.wire == 2)) {
      if (f.wire == 2 && f.n % 4) return bad(&b, "a packed float list whose length is not a multiple of 4");
      for (size_t i = 0; dst && i < f.n / 4 && k + i < max; i++) /* little-endian on the wire, as the sample's */
        memcpy(dst + (k + i) * 4, f.p + i * 4, 4);
      k += f.n / 4;
    } else if (kind == LADE__TFREC_INT64 && f.wire == 0) {
      for (int i = 0; dst && k < max && i < 8; i++) dst[k * 8 + (uint64_t)i] = (uint8_t)(f.v >> (8 * i));
      k++;
    } else if (kind == LADE__TFREC_INT64 && f.wire == 2) {
      pb_t pk = sub(&b, &f, "packed Int64List");
      while (pk.p < pk.end) {
        uint64_t v;
        if (varint(&pk, &v)) return LADE_EFORMAT;
        for (int i = 0; dst && k < max && i < 8; i++) dst[k * 8 + (uint64_t)i] = (uint8_t)(v >> (8 * i));
        k++;
      }
    } /* else: field 1 with another wire type is an unknown field, as protobuf takes it */
  }
  if (rc < 0) return rc;
  *count = k;
  return 0;
}

static int list_of(const lade__tfrec_feature_t *f, pb_t *b) {
  if (f->kind < LADE__TFREC_BYTES || f->kind > LADE__TFREC_INT64)
    return lade__fail(LADE_EFORMAT, "the feature is empty (no bytes_list, float_list or int64_list)");
  *b = (pb_t){f->p, f->p + f->n, f->p, list_what[f->kind]};
  return 0;
}

int lade__tfrec_first_bytes(const lade__tfrec_feature_t *f, const uint8_t **p, size_t *len) {
  pb_t b;
  uint64_t k = 0;
  if (f->kind != LADE__TFREC_BYTES)
    return lade__fail(LADE_EFORMAT, "the feature is %s, not bytes_list", lade__tfrec_kind_name(f->kind));
  int rc = list_of(f, &b);
  if (!rc) rc = list_walk(&b, f->kind, NULL, 0, &k, p, len);
  if (!rc && !k) rc = lade__fail(LADE_EFORMAT, "the feature's bytes_list holds no value");
  return rc;
}

int lade__tfrec_numbers(const lade__tfrec_feature_t *f, uint8_t *dst, uint64_t max, uint64_t *count) {
  pb_t b;
  if (f->kind != LADE__TFREC_INT64 && f->kind != LADE__TFREC_FLOAT)
    return lade__fail(LADE_EFORMAT, "the feature is %s, not int64_list or float_list", lade__tfrec_kind_name(f->kind));
  int rc = list_of(f, &b);
  return rc ? rc : list_walk(&b, f->kind, dst, max, count, NULL, NULL);
}

int lade__tfrec_value_size(const lade__tfrec_feature_t *f, uint64_t *size) {
  if (f->kind == LADE__TFREC_BYTES) {
    const uint8_t *p;
    size_t n;
    int rc = lade__tfrec_first_bytes(f, &p, &n);
    if (!rc) *size = n;
    return rc;
  }
  uint64_t k;
  int rc = lade__tfrec_numbers(f, NULL, 0, &k);
  if (!rc) *size = k * (f->kind == LADE__TFREC_INT64 ? 8 : 4);
  return rc;
}

const char *lade__tfrec_kind_name(int kind) {
  switch (kind) {
    case LADE__TFREC_BYTES: return "bytes_list";
    case LADE__TFREC_FLOAT: return "float_list";
    case LADE__TFREC_INT64: return "int64_list";
    default: return "empty";
  }
}

/* ----------------------------------------------------------- Example */

/* A Feature message: its kind (the last one given wins, as in a oneof),
 * with the list checked. */
static int feature_of(const pb_t *in, lade__tfrec_feature_t *out) {
  pb_t b = *in;
  fld_t f;
  int rc;
  memset(out, 0, sizeof *out);
  while ((rc = next(&b, &f)) == 1)
    if (f.num >= 1 && f.num <= 3 && f.wire == 2) *out = (lade__tfrec_feature_t){(int)f.num, f.p, f.n};
  if (rc < 0) return rc;
  if (out->kind) {
    pb_t l = {out->p, out->p + out->n, in->base, list_what[out->kind]};
    uint64_t k;
    const uint8_t *p;
    size_t n;
    rc = list_walk(&l, out->kind, NULL, 0, &k, &p, &n);
  }
  return rc;
}

/* Calls fn for every map entry (key, Feature) of the Example, in order;
 * fn returns 0 to go on. */
typedef int (*entry_fn)(void *ctx, const uint8_t *key, size_t klen, const lade__tfrec_feature_t *f);

static int walk_example(const uint8_t *ex, size_t n, entry_fn fn, void *ctx) {
  pb_t e = {ex, ex + n, ex, "Example"};
  fld_t f;
  int rc;
  while ((rc = next(&e, &f)) == 1) {
    if (f.num != 1 || f.wire != 2) continue;
    pb_t fs = sub(&e, &f, "Features");
    fld_t g;
    while ((rc = next(&fs, &g)) == 1) {
      if (g.num != 1 || g.wire != 2) continue;
      pb_t me = sub(&fs, &g, "feature map entry");
      fld_t h, val = {0};
      const uint8_t *key = (const uint8_t *)"";
      size_t klen = 0;
      while ((rc = next(&me, &h)) == 1) {
        if (h.num == 1 && h.wire == 2) key = h.p, klen = h.n;
        if (h.num == 2 && h.wire == 2) val = h;
      }
      if (rc < 0) return rc;
      lade__tfrec_feature_t ft;
      pb_t fb = {val.p ? val.p : key, val.p ? val.p + val.n : key, ex, "Feature"}; /* no value: an empty Feature */
      if ((rc = feature_of(&fb, &ft)) != 0) return rc;
      if ((rc = fn(ctx, key, klen, &ft)) != 0) return rc;
    }
    if (rc < 0) return rc;
  }
  return rc;
}

typedef struct find_ctx {
  const char *name;
  size_t len;
  lade__tfrec_feature_t *f;
  int found;
} find_ctx_t;

static int find_one(void *ctx, const uint8_t *key, size_t klen, const lade__tfrec_feature_t *f) {
  find_ctx_t *c = ctx;
  if (klen == c->len && !memcmp(key, c->name, klen)) { /* a key given twice: the last wins, as in a protobuf map */
    *c->f = *f;
    c->found = 1;
  }
  return 0;
}

int lade__tfrec_find(const uint8_t *ex, size_t n, const char *name, lade__tfrec_feature_t *f) {
  lade__tfrec_feature_t tmp;
  find_ctx_t c = {name, strlen(name), f ? f : &tmp, 0};
  int rc = walk_example(ex, n, find_one, &c);
  return rc < 0 ? rc : c.found;
}

typedef struct names_ctx {
  char *buf;
  size_t size, len, count;
} names_ctx_t;

static int name_one(void *ctx, const uint8_t *key, size_t klen, const lade__tfrec_feature_t *f) {
  (void)f;
  names_ctx_t *c = ctx;
  c->count++;
  if (!c->size || c->len + 1 >= c->size) return 0;
  char one[80];
  size_t o = 0, i = 0;
  for (; i < klen && o + 5 < 64; i++) { /* at most about 64 bytes of a key, unprintable bytes as \xNN */
    unsigned char ch = key[i];
    if (ch >= 0x20 && ch != 0x7f && ch != '\'')
      one[o++] = (char)ch;
    else
      o += (size_t)snprintf(one + o, sizeof one - o, "\\x%02x", ch);
  }
  one[o] = '\0';
  int w = snprintf(c->buf + c->len, c->size - c->len, "%s'%s%s'", c->count > 1 ? ", " : "", one,
                   i < klen ? "..." : "");
  if (w < 0 || (size_t)w >= c->size - c->len) { /* cut: end with "..." */
    if (c->size >= 4) memcpy(c->buf + c->size - 4, "...", 4);
    c->len = c->size;
  } else {
    c->len += (size_t)w;
  }
  return 0;
}

size_t lade__tfrec_names(const uint8_t *ex, size_t n, char *buf, size_t size) {
  names_ctx_t c = {buf, size, 0, 0};
  if (size) buf[0] = '\0';
  int rc = walk_example(ex, n, name_one, &c);
  lade__clear_error();
  return rc < 0 ? 0 : c.count;
}
