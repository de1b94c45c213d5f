/* tarfmt.c - tar header reader (see tarfmt.h). It follows what Python's
 * tarfile accepts, which is the reference the tests compare with: a name is
 * the name field up to its first NUL (all 100 bytes when there is none),
 * joined after the ustar prefix field when that is not empty; a GNU 'L'
 * record or a pax "path" replaces it; a pax "size" replaces the size field;
 * numbers are octal (NUL/space terminated) or GNU base-256; the checksum may
 * be the unsigned or the signed byte sum. Global pax headers ('g') are
 * checked but not applied. Stricter than tarfile: a malformed pax record is
 * an error (tarfile stops parsing the record silently), and so is any size
 * that reaches past the end of the file. */
#include "tarfmt.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

#define BLOCK 512u

void lade__tar_init(lade__tar_reader_t *r, lade__tar_pread_fn fn, void *ctx, uint64_t file_size) {
  memset(r, 0, sizeof *r);
  r->pread = fn;
  r->ctx = ctx;
  r->file_size = file_size;
}

void lade__tar_free(lade__tar_reader_t *r) {
  free(r->name);
  free(r->meta);
  r->name = NULL;
  r->meta = NULL;
  r->name_cap = r->meta_cap = 0;
}

/* A name for messages: at most 200 bytes, anything unprintable as \xNN. */
static void shown(char *out, size_t size, const char *s, size_t n) {
  size_t o = 0;
  for (size_t i = 0; i < n && o + 5 < size; i++) {
    unsigned char c = (unsigned char)s[i];
    if (c >= 0x20 && c != 0x7f)
      out[o++] = (char)c;
    else
      o += (size_t)snprintf(out + o, size - o, "\\x%02x", c);
    if (i == 200) {
      o += (size_t)snprintf(out + o, size - o, "...");
      break;
    }
  }
  out[o < size ? o : size - 1] = '\0';
}

static size_t field_len(const uint8_t *f, size_t n) {
  const uint8_t *z = memchr(f, 0, n);
  return z ? (size_t)(z - f) : n;
}

/* tarfile's nti(): base-256 when the first byte has its top bit (0x80
 * positive, 0xff negative), else octal digits up to the first NUL, spaces
 * around them ignored; an empty field is 0. Returns 0, or -1 when malformed
 * or negative or over 2^63. */
static int parse_number(const uint8_t *f, size_t n, uint64_t *out) {
  if (f[0] == 0x80 || f[0] == 0xff) {
    if (f[0] == 0xff) return -1;
    uint64_t v = 0;
    for (size_t i = 1; i < n; i++) {
      if (v >> 55) return -1;
      v = (v << 8) | f[i];
    }
    *out = v;
    return 0;
  }
  size_t len = field_len(f, n), i = 0;
  while (i < len && (f[i] == ' ')) i++;
  while (len > i && (f[len - 1] == ' ')) len--;
  uint64_t v = 0;
  for (; i < len; i++) {
    if (f[i] < '0' || f[i] > '7') return -1;
    if (v >> 60) return -1;
    v = v * 8 + (uint64_t)(f[i] - '0');
  }
  *out = v;
  return 0;
}

static int set_name(lade__tar_reader_t *r, const char *a, size_t na, const char *b, size_t nb) {
  size_t need = na + (nb ? nb + 1 : 0) + 1;
  if (need > r->name_cap) {
    char *p = realloc(r->name, need);
    if (!p) return lade__fail(LADE_ENOMEM, "tar: out of memory for a %zu-byte name", need);
    r->name = p;
    r->name_cap = need;
  }
  memcpy(r->name, a, na);
  if (nb) {
    r->name[na] = '/';
    memcpy(r->name + na + 1, b, nb);
    na += nb + 1;
  }
  r->name[na] = '\0';
  return 0;
}

static int read_exact(lade__tar_reader_t *r, void *buf, size_t len, uint64_t off, const char *what) {
  long n = r->pread(r->ctx, buf, len, off);
  if (n < 0) return lade__fail(LADE_EIO, "cannot read %s at byte %llu: %s", what, (unsigned long long)off, strerror((int)-n));
  if ((size_t)n < len)
    return lade__fail(LADE_EFORMAT, "truncated: %s at byte %llu has %ld of %zu bytes", what, (unsigned long long)off, n,
                      len);
  return 0;
}

/* What pax records set for the next member. */
typedef struct pending {
  int has_name, has_size;
  char *pname; /* the path value */
  size_t name_len;
  uint64_t size;
} pending_t;

/* Parses pax records "LEN KEY=VALUE\n" of data[0..n); applies path and size
 * to *p when apply is set. `at`: the record's header offset, for messages. */
static int parse_pax(const uint8_t *d, size_t n, pending_t *p, int apply, uint64_t at) {
  size_t pos = 0;
  while (pos < n) {
    if (d[pos] == 0) { /* NUL padding after the last record */
      size_t k = pos;
      while (k < n && d[k] == 0) k++;
      if (k == n) break;
    }
    uint64_t len = 0;
    size_t i = pos, digits = 0;
    while (i < n && d[i] >= '0' && d[i] <= '9' && digits < 20) {
      len = len * 10 + (uint64_t)(d[i] - '0');
      i++;
      digits++;
    }
    if (!digits || i >= n || d[i] != ' ')
      return lade__fail(LADE_EFORMAT, "pax header at byte %llu: malformed record at offset %zu (no \"LENGTH \")",
                        (unsigned long long)at, pos);
    if (len > n - pos || len < digits + 3)
      return lade__fail(LADE_EFORMAT,
                        "pax header at byte %llu: record at offset %zu says %llu bytes, but %zu are left in the header",
                        (unsigned long long)at, pos, (unsigned long long)len, n - pos);
    const uint8_t *kv = d + i + 1, *end = d + pos + len - 1;
    if (*end != '\n')
      return lade__fail(LADE_EFORMAT, "pax header at byte %llu: record at offset %zu does not end in a newline",
                        (unsigned long long)at, pos);
    const uint8_t *eq = memchr(kv, '=', (size_t)(end - kv));
    if (!eq || eq == kv)
      return lade__fail(LADE_EFORMAT, "pax header at byte %llu: record at offset %zu has no KEY=", (unsigned long long)at,
                        pos);
    size_t klen = (size_t)(eq - kv), vlen = (size_t)(end - eq - 1);
    const uint8_t *v = eq + 1;
    if (apply && klen == 4 && memcmp(kv, "path", 4) == 0) {
      if (memchr(v, 0, vlen))
        return lade__fail(LADE_EFORMAT, "pax header at byte %llu: the path holds a NUL byte", (unsigned long long)at);
      char *nm = realloc(p->pname, vlen + 1);
      if (!nm) return lade__fail(LADE_ENOMEM, "tar: out of memory");
      memcpy(nm, v, vlen);
      nm[vlen] = '\0';
      p->pname = nm;
      p->name_len = vlen;
      p->has_name = 1;
    } else if (apply && klen == 4 && memcmp(kv, "size", 4) == 0) {
      uint64_t s = 0;
      if (!vlen || vlen > 19)
        return lade__fail(LADE_EFORMAT, "pax header at byte %llu: bad size value", (unsigned long long)at);
      for (size_t k = 0; k < vlen; k++) {
        if (v[k] < '0' || v[k] > '9')
          return lade__fail(LADE_EFORMAT, "pax header at byte %llu: bad size value", (unsigned long long)at);
        s = s * 10 + (uint64_t)(v[k] - '0');
      }
      p->size = s;
      p->has_size = 1;
    }
    pos += (size_t)len;
  }
  return 0;
}

static int meta_read(lade__tar_reader_t *r, uint64_t off, uint64_t size, const char *what) {
  if (size > LADE__TAR_META_MAX)
    return lade__fail(LADE_EFORMAT, "%s at byte %llu is %llu bytes, more than the %u a tar reader takes", what,
                      (unsigned long long)off, (unsigned long long)size, LADE__TAR_META_MAX);
  if (size + 1 > r->meta_cap) {
    uint8_t *p = realloc(r->meta, (size_t)size + 1);
    if (!p) return lade__fail(LADE_ENOMEM, "tar: out of memory");
    r->meta = p;
    r->meta_cap = (size_t)size + 1;
  }
  return size ? read_exact(r, r->meta, (size_t)size, off + BLOCK, what) : 0;
}

int lade__tar_next(lade__tar_reader_t *r, lade__tar_member_t *m) {
  pending_t p = {0};
  int rc = 0, have_long = 0;
  uint64_t first = r->pos;
  uint8_t h[BLOCK];
  char nm[512];
  for (;;) {
    if (r->pos >= r->file_size) {
      if (r->pos > first)
        rc = lade__fail(LADE_EFORMAT, "truncated: the archive ends after the extended header at byte %llu",
                        (unsigned long long)first);
      break;
    }
    uint64_t at = r->pos;
    rc = read_exact(r, h, BLOCK, at, "header");
    if (rc) break;
    size_t z = 0;
    while (z < BLOCK && h[z] == 0) z++;
    if (z == BLOCK) {
      if (at > first)
        rc = lade__fail(LADE_EFORMAT, "an end-of-archive block at byte %llu follows the extended header at byte %llu",
                        (unsigned long long)at, (unsigned long long)first);
      break;
    }
    size_t nlen = field_len(h, 100);
    shown(nm, sizeof nm, (const char *)h, nlen);
    uint64_t sum_field = 0;
    if (parse_number(h + 148, 8, &sum_field) != 0) {
      rc = lade__fail(LADE_EFORMAT, "header at byte %llu (member '%s'): the checksum field is not a number",
                      (unsigned long long)at, nm);
      break;
    }
    uint64_t usum = 256;
    int64_t ssum = 256;
    for (size_t i = 0; i < BLOCK; i++) {
      if (i >= 148 && i < 156) continue;
      usum += h[i];
      ssum += (int8_t)h[i];
    }
    if (sum_field != usum && (int64_t)sum_field != ssum) {
      rc = lade__fail(LADE_EFORMAT, "header at byte %llu (member '%s'): bad checksum (field %llo, bytes sum to %llo)",
                      (unsigned long long)at, nm, (unsigned long long)sum_field, (unsigned long long)usum);
      break;
    }
    uint64_t size;
    if (parse_number(h + 124, 12, &size) != 0) {
      rc = lade__fail(LADE_EFORMAT, "header at byte %llu (member '%s'): the size field is not a number",
                      (unsigned long long)at, nm);
      break;
    }
    char type = (char)h[156];
    uint64_t data_off = at + BLOCK;
    /* records carry their own size; a member's is replaced by a pax size */
    uint64_t msize = (type != 'x' && type != 'g' && type != 'L' && type != 'K' && p.has_size) ? p.size : size;
    const char *who = p.has_name ? p.pname : have_long ? r->name : NULL;
    if (who) shown(nm, sizeof nm, who, strlen(who));
    if (data_off > r->file_size || msize > r->file_size - data_off) {
      rc = lade__fail(LADE_EFORMAT,
                      "member '%s' (header at byte %llu): its %llu bytes run past the end of the file (%llu bytes)", nm,
                      (unsigned long long)at, (unsigned long long)msize, (unsigned long long)r->file_size);
      break;
    }
    uint64_t next = data_off + ((msize + BLOCK - 1) / BLOCK) * BLOCK;
    if (type == 'x' || type == 'g') {
      rc = meta_read(r, at, size, "pax header");
      if (!rc) rc = parse_pax(r->meta, (size_t)size, &p, type == 'x', at);
      if (rc) break;
      r->pos = next;
      continue;
    }
    if (type == 'L' || type == 'K') {
      rc = meta_read(r, at, size, type == 'L' ? "GNU long name" : "GNU long link name");
      if (rc) break;
      if (type == 'L') {
        rc = set_name(r, (const char *)r->meta, field_len(r->meta, (size_t)size), NULL, 0);
        if (rc) break;
        have_long = 1;
      }
      r->pos = next;
      continue;
    }
    if (type == 'S') {
      rc = lade__fail(LADE_EUNSUPPORTED, "member '%s' (header at byte %llu): GNU sparse files are not supported", nm,
                      (unsigned long long)at);
      break;
    }
    /* a member: its name is the pax path, else the GNU long name, else
     * prefix/name from the header */
    if (p.has_name) {
      rc = set_name(r, p.pname, p.name_len, NULL, 0);
    } else if (!have_long) {
      size_t plen = field_len(h + 345, 155);
      if (plen)
        rc = set_name(r, (const char *)h + 345, plen, (const char *)h, nlen);
      else
        rc = set_name(r, (const char *)h, nlen, NULL, 0);
    }
    if (rc) break;
    m->name = r->name;
    m->name_len = strlen(r->name);
    m->header_off = first;
    m->data_off = data_off;
    m->size = msize;
    m->regular = (type == '0' || type == '7' || (type == '\0' && !(m->name_len && r->name[m->name_len - 1] == '/')));
    r->pos = next;
    free(p.pname);
    return 1;
  }
  free(p.pname);
  return rc;
}
