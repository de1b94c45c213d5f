/* zipfmt.c - a strict reader of a zip archive in memory (zipfmt.h): the
 * end records, the central directory, a member's local header and data, and
 * CRC-32. The input is outside bytes (an .npz from any source): every
 * offset and length is checked against the archive's size, in 64 bits,
 * before it is read, and a rejection says why (fuzzed by fuzz/fuzz_npz.c).
 * Nothing here allocates, so the npz transform calls it for every sample. */
#include "zipfmt.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifdef LADE_HAVE_ZLIB
#include <zlib.h>
#endif

#include "core.h"

#define SIG_LOCAL 0x04034b50u   /* PK\3\4 */
#define SIG_CENTRAL 0x02014b50u /* PK\1\2 */
#define SIG_END 0x06054b50u     /* PK\5\6 */
#define SIG_END64 0x06064b50u   /* PK\6\6 */
#define SIG_LOC64 0x07064b50u   /* PK\6\7 */
#define LOCAL_LEN 30
#define CENTRAL_LEN 46
#define END_LEN 22
#define END64_LEN 56
#define LOC64_LEN 20
#define MAX_COMMENT 65535
#define NO32 0xFFFFFFFFu /* "see the zip64 extra field" */

static uint16_t rd16(const uint8_t *p) { return (uint16_t)(p[0] | (unsigned)p[1] << 8); }
static uint32_t rd32(const uint8_t *p) {
  return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}
static uint64_t rd64(const uint8_t *p) { return rd32(p) | (uint64_t)rd32(p + 4) << 32; }

void lade__zip_show_name(const lade__zip_entry_t *e, char *buf, size_t size) {
  char s[96];
  size_t n = e->name_len < 80 ? e->name_len : 80, k = 0;
  for (size_t i = 0; i < n; i++) s[k++] = e->name[i] >= 0x20 && e->name[i] < 0x7f ? (char)e->name[i] : '?';
  s[k] = '\0';
  snprintf(buf, size, "'%s%s'", s, e->name_len > n ? "..." : "");
}

/* Reads the zip64 extra field (id 1) of an entry: the 64-bit values of the
 * fields whose 32-bit value is 0xFFFFFFFF, in zipfile's order (uncompressed
 * size, compressed size, local header offset); only the first such field
 * counts. Other fields are skipped; a field running past the extra data is
 * corrupt, fewer than 4 bytes left over are ignored (as zipfile does). */
static int zip64_extra(const uint8_t *x, size_t xl, lade__zip_entry_t *e) {
  bool need_u = e->usize == NO32, need_c = e->csize == NO32, need_o = e->local_off == NO32, done = false;
  char nm[100];
  while (xl >= 4) {
    uint16_t id = rd16(x), sz = rd16(x + 2);
    if ((size_t)sz + 4 > xl) {
      lade__zip_show_name(e, nm, sizeof nm);
      return lade__fail(LADE_EFORMAT, "zip archive corrupt: member %s: extra field 0x%04x of %u bytes runs past its "
                        "entry's %zu bytes of extra data", nm, id, sz, xl);
    }
    if (id == 1 && !done) {
      const uint8_t *p = x + 4;
      size_t left = sz;
      const char *lacks = NULL;
      if (need_u) {
        if (left < 8) lacks = "the uncompressed size";
        else e->usize = rd64(p), p += 8, left -= 8;
      }
      if (!lacks && need_c) {
        if (left < 8) lacks = "the compressed size";
        else e->csize = rd64(p), p += 8, left -= 8;
      }
      if (!lacks && need_o) {
        if (left < 8) lacks = "the local header offset";
        else e->local_off = rd64(p);
      }
      if (lacks) {
        lade__zip_show_name(e, nm, sizeof nm);
        return lade__fail(LADE_EFORMAT, "zip archive corrupt: member %s: its zip64 extra field (%u bytes) lacks %s",
                          nm, sz, lacks);
      }
      done = true;
    }
    x += 4 + (size_t)sz;
    xl -= 4 + (size_t)sz;
  }
  return 0;
}

/* Parses and checks the directory entry at *pos (lade__zip_next). */
int lade__zip_next(const lade__zip_t *z, size_t *pos, lade__zip_entry_t *e) {
  size_t at = *pos;
  if (at >= z->cd_len) return 0;
  const uint8_t *c = z->data + z->cd_off + at;
  size_t left = z->cd_len - at;
  if (left < CENTRAL_LEN || rd32(c) != SIG_CENTRAL)
    return lade__fail(LADE_EFORMAT, "zip archive corrupt: %s at offset %zu of the central directory (%zu bytes)",
                      left < CENTRAL_LEN ? "a truncated entry" : "no entry signature", at, z->cd_len);
  size_t nl = rd16(c + 28), xl = rd16(c + 30), cl = rd16(c + 32);
  if (CENTRAL_LEN + nl + xl + cl > left)
    return lade__fail(LADE_EFORMAT, "zip archive corrupt: the entry at offset %zu of the central directory runs past "
                      "its end (%zu + %zu + %zu bytes of name, extra and comment, %zu left)", at, nl, xl, cl,
                      left - CENTRAL_LEN);
  memset(e, 0, sizeof *e);
  e->flags = rd16(c + 8);
  e->method = rd16(c + 10);
  e->crc = rd32(c + 16);
  e->csize = rd32(c + 20);
  e->usize = rd32(c + 24);
  e->local_off = rd32(c + 42);
  e->name = c + CENTRAL_LEN;
  e->raw_name_len = nl;
  const uint8_t *nul = memchr(e->name, 0, nl);
  e->name_len = nul ? (size_t)(nul - e->name) : nl;
  e->utf8 = (e->flags & 0x800) != 0;
  int rc = zip64_extra(c + CENTRAL_LEN + nl, xl, e);
  if (rc) return rc;
  /* the member's local header and data lie before the directory */
  if (e->local_off > z->cd_off || z->cd_off - e->local_off < LOCAL_LEN || e->csize > z->cd_off) {
    char nm[100];
    lade__zip_show_name(e, nm, sizeof nm);
    return lade__fail(LADE_EFORMAT, "zip archive corrupt: member %s: local header at offset %llu with %llu bytes of "
                      "data, past the %zu bytes before the central directory (truncated?)", nm,
                      (unsigned long long)e->local_off, (unsigned long long)e->csize, z->cd_off);
  }
  *pos = at + CENTRAL_LEN + nl + xl + cl;
  return 1;
}

int lade__zip_open(lade__zip_t *z, const uint8_t *d, size_t len) {
  memset(z, 0, sizeof *z);
  if (len < 4 || (rd32(d) != SIG_LOCAL && rd32(d) != SIG_END)) {
    char hex[16] = "";
    for (size_t i = 0, k = 0; i < len && i < 4; i++, k = strlen(hex))
      snprintf(hex + k, sizeof hex - k, "%s%02x", i ? " " : "", d[i]);
    if (!len) return lade__fail(LADE_EFORMAT, "not a zip archive (.npz): the sample is empty");
    return lade__fail(LADE_EFORMAT, "not a zip archive (.npz): it starts with %s, not a zip local header (50 4b 03 04)",
                      hex);
  }
  if (len < END_LEN)
    return lade__fail(LADE_EFORMAT, "zip archive truncated: %zu bytes, fewer than an end record's %d", len, END_LEN);
  /* the last end record of the tail, as zipfile finds it (a comment may follow it) */
  size_t lo = len - END_LEN > MAX_COMMENT ? len - END_LEN - MAX_COMMENT : 0, end = SIZE_MAX;
  for (size_t p = len - END_LEN + 1; p-- > lo;)
    if (d[p] == 'P' && rd32(d + p) == SIG_END) {
      end = p;
      break;
    }
  if (end == SIZE_MAX)
    return lade__fail(LADE_EFORMAT, "zip archive truncated or corrupt: no end-of-central-directory record in its last "
                      "%zu bytes", len - lo);
  const uint8_t *e = d + end;
  if (end + END_LEN + rd16(e + 20) > len)
    return lade__fail(LADE_EFORMAT, "zip archive truncated: the end record's comment of %u bytes runs past the end of "
                      "the %zu-byte archive", rd16(e + 20), len);
  uint64_t disk = rd16(e + 4), cd_disk = rd16(e + 6), n_disk = rd16(e + 8), n = rd16(e + 10);
  uint64_t cd_len = rd32(e + 12), cd_off = rd32(e + 16);
  size_t cd_end = end; /* where the directory must end */
  if (end >= LOC64_LEN && rd32(e - LOC64_LEN) == SIG_LOC64) {
    /* zip64: the locator points at the zip64 end record, whose numbers replace the end record's */
    const uint8_t *l = e - LOC64_LEN;
    size_t loc = end - LOC64_LEN;
    uint64_t at = rd64(l + 8);
    if (rd32(l + 4) != 0 || rd32(l + 16) > 1)
      return lade__fail(LADE_EFORMAT, "zip archive spans %u disks: not supported", rd32(l + 16));
    if (at > loc || loc - at < END64_LEN || rd32(d + at) != SIG_END64 || rd64(d + at + 4) != loc - at - 12)
      return lade__fail(LADE_EFORMAT, "zip archive corrupt: no zip64 end record at offset %llu that reaches its "
                        "locator at offset %zu", (unsigned long long)at, loc);
    const uint8_t *r = d + at;
    disk = rd32(r + 16);
    cd_disk = rd32(r + 20);
    n_disk = rd64(r + 24);
    n = rd64(r + 32);
    cd_len = rd64(r + 40);
    cd_off = rd64(r + 48);
    cd_end = (size_t)at;
  }
  if (disk != 0 || cd_disk != 0 || n_disk != n)
    return lade__fail(LADE_EFORMAT, "zip archive spans disks (this is disk %llu, the directory's %llu, %llu of %llu "
                      "entries here): not supported", (unsigned long long)disk, (unsigned long long)cd_disk,
                      (unsigned long long)n_disk, (unsigned long long)n);
  if (cd_off > cd_end || cd_len != cd_end - cd_off)
    return lade__fail(LADE_EFORMAT, "zip archive truncated or corrupt: its central directory (offset %llu, %llu "
                      "bytes) does not end where the end record starts (offset %zu of %zu bytes)",
                      (unsigned long long)cd_off, (unsigned long long)cd_len, cd_end, len);
  z->data = d;
  z->len = len;
  z->cd_off = (size_t)cd_off;
  z->cd_len = (size_t)cd_len;
  z->entries = n;
  /* every entry checked once here, so a caller walking them meets no surprise */
  size_t pos = 0;
  uint64_t k = 0;
  lade__zip_entry_t en;
  int rc;
  while ((rc = lade__zip_next(z, &pos, &en)) == 1) k++;
  if (rc < 0) return rc;
  if (k != n)
    return lade__fail(LADE_EFORMAT, "zip archive corrupt: the central directory holds %llu entries, the end record "
                      "says %llu", (unsigned long long)k, (unsigned long long)n);
  return 0;
}

int lade__zip_find(const lade__zip_t *z, const char *name, lade__zip_entry_t *out) {
  size_t n = strlen(name), pos = 0;
  bool ascii = true;
  for (size_t i = 0; i < n; i++) ascii &= (unsigned char)name[i] < 0x80;
  lade__zip_entry_t e;
  bool found = false;
  while (lade__zip_next(z, &pos, &e) == 1)
    if (e.name_len == n && memcmp(e.name, name, n) == 0 && (ascii || e.utf8)) {
      *out = e; /* the last of a name wins, as in zipfile's NameToInfo */
      found = true;
    }
  return found ? 0 : LADE_ENOENT;
}

static const char *method_name(unsigned m) {
  switch (m) {
    case 1: return "shrunk";
    case 6: return "imploded";
    case 9: return "deflate64";
    case 12: return "bzip2";
    case 14: return "lzma";
    case 93: return "zstandard";
    case 95: return "xz";
    case 98: return "ppmd";
    case 99: return "AES-encrypted";
  }
  return "unknown";
}

int lade__zip_data(const lade__zip_t *z, const lade__zip_entry_t *e, const uint8_t **data) {
  char nm[100];
  lade__zip_show_name(e, nm, sizeof nm);
  if (e->flags & 0x41)
    return lade__fail(LADE_EFORMAT, "member %s is encrypted: not read", nm);
  if (e->flags & 0x20)
    return lade__fail(LADE_EFORMAT, "member %s is compressed patched data (flag 0x20): not supported", nm);
  if (e->method != 0 && e->method != 8)
    return lade__fail(LADE_EFORMAT, "member %s is compressed with method %u (%s); only stored (0) and deflated (8) "
                      "members are read", nm, e->method, method_name(e->method));
  if (e->method == 0 && e->csize != e->usize)
    return lade__fail(LADE_EFORMAT, "zip archive corrupt: member %s is stored in %llu bytes but says it holds %llu", nm,
                      (unsigned long long)e->csize, (unsigned long long)e->usize);
  /* lade__zip_next checked local_off + LOCAL_LEN <= cd_off */
  const uint8_t *l = z->data + e->local_off;
  if (rd32(l) != SIG_LOCAL)
    return lade__fail(LADE_EFORMAT, "zip archive corrupt: member %s: no local header at offset %llu, where the "
                      "central directory points", nm, (unsigned long long)e->local_off);
  uint64_t data_off = e->local_off + LOCAL_LEN + rd16(l + 26) + rd16(l + 28);
  if (data_off > z->cd_off || e->csize > z->cd_off - data_off)
    return lade__fail(LADE_EFORMAT, "zip archive truncated or corrupt: member %s: its %llu bytes at offset %llu run "
                      "past the %zu bytes before the central directory", nm, (unsigned long long)e->csize,
                      (unsigned long long)data_off, z->cd_off);
  if (rd16(l + 26) != e->raw_name_len || memcmp(l + LOCAL_LEN, e->name, e->raw_name_len) != 0)
    return lade__fail(LADE_EFORMAT, "zip archive corrupt: member %s: its local header at offset %llu names another "
                      "file", nm, (unsigned long long)e->local_off);
  *data = z->data + data_off;
  return 0;
}

#ifndef LADE_HAVE_ZLIB
/* Without zlib: the table-driven CRC-32 (polynomial 0xEDB88320, reflected). */
static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;
static void crc_init(void) {
  for (uint32_t i = 0; i < 256; i++) {
    uint32_t c = i;
    for (int k = 0; k < 8; k++) c = c & 1 ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    crc_table[i] = c;
  }
}
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HAVE_FOLD 1
/* CRC-32 by carry-less multiplication (PCLMULQDQ), folding 64 bytes per
 * step: Gopal et al., "Fast CRC Computation for Generic Polynomials Using
 * PCLMULQDQ Instruction" (Intel, 2009), with its constants for the
 * reflected polynomial 0x04C11DB7 (the same folding as Chromium's zlib,
 * crc32_simd.c). Stored .npz members are checked at the speed of the copy
 * (zlib 1.2.13's crc32 takes 3-4 times longer than copying the bytes). crc
 * is the running value inverted (~crc); n >= 64 and a multiple of 16. */
__attribute__((target("pclmul,sse4.1"))) static uint32_t crc_fold(uint32_t crc, const uint8_t *p, size_t n) {
  const __m128i k1k2 = _mm_set_epi64x(0x01c6e41596, 0x0154442bd4), k3k4 = _mm_set_epi64x(0x00ccaa009e, 0x01751997d0);
  const __m128i k5 = _mm_set_epi64x(0, 0x0163cd6124), poly = _mm_set_epi64x(0x01f7011641, 0x01db710641);
  const __m128i low32 = _mm_setr_epi32(~0, 0, ~0, 0);
  __m128i x1 = _mm_loadu_si128((const __m128i *)p), x2 = _mm_loadu_si128((const __m128i *)(p + 16));
  __m128i x3 = _mm_loadu_si128((const __m128i *)(p + 32)), x4 = _mm_loadu_si128((const __m128i *)(p + 48));
  x1 = _mm_xor_si128(x1, _mm_cvtsi32_si128((int)crc));
  for (p += 64, n -= 64; n >= 64; p += 64, n -= 64) {
    __m128i y1 = _mm_clmulepi64_si128(x1, k1k2, 0x00), y2 = _mm_clmulepi64_si128(x2, k1k2, 0x00);
    __m128i y3 = _mm_clmulepi64_si128(x3, k1k2, 0x00), y4 = _mm_clmulepi64_si128(x4, k1k2, 0x00);
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k1k2, 0x11), y1), _mm_loadu_si128((const __m128i *)p));
    x2 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x2, k1k2, 0x11), y2),
                       _mm_loadu_si128((const __m128i *)(p + 16)));
    x3 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x3, k1k2, 0x11), y3),
                       _mm_loadu_si128((const __m128i *)(p + 32)));
    x4 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x4, k1k2, 0x11), y4),
                       _mm_loadu_si128((const __m128i *)(p + 48)));
  }
  /* the four lanes into one, then 16 bytes at a time */
  __m128i next[3] = {x2, x3, x4};
  for (int i = 0; i < 3; i++)
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), _mm_clmulepi64_si128(x1, k3k4, 0x00)),
                       next[i]);
  for (; n >= 16; p += 16, n -= 16)
    x1 = _mm_xor_si128(_mm_xor_si128(_mm_clmulepi64_si128(x1, k3k4, 0x11), _mm_clmulepi64_si128(x1, k3k4, 0x00)),
                       _mm_loadu_si128((const __m128i *)p));
  /* 128 bits to 64, then Barrett's reduction to 32 */
  x2 = _mm_clmulepi64_si128(x1, k3k4, 0x10);
  x1 = _mm_xor_si128(_mm_srli_si128(x1, 8), x2);
  x2 = _mm_srli_si128(x1, 4);
  x1 = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(x1, low32), k5, 0x00), x2);
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x1, low32), poly, 0x10);
  x2 = _mm_clmulepi64_si128(_mm_and_si128(x2, low32), poly, 0x00);
  return (uint32_t)_mm_extract_epi32(_mm_xor_si128(x1, x2), 1);
}

static int g_fold; /* the CPU has PCLMULQDQ and SSE4.1 (decided once) */
static pthread_once_t g_fold_once = PTHREAD_ONCE_INIT;
static void fold_init(void) { g_fold = __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1"); }
#endif

uint32_t lade__zip_crc32(uint32_t crc, const uint8_t *p, size_t n) {
#ifdef HAVE_FOLD
  pthread_once(&g_fold_once, fold_init);
  if (g_fold && n >= 64) {
    size_t k = n & ~(size_t)15;
    crc = ~crc_fold(~crc, p, k);
    p += k;
    n -= k;
  }
#endif
#ifdef LADE_HAVE_ZLIB
  while (n) { /* crc32() takes a uInt length */
    uInt k = n > (1u << 30) ? (1u << 30) : (uInt)n;
    crc = (uint32_t)crc32(crc, p, k);
    p += k;
    n -= k;
  }
  return crc;
#else
  pthread_once(&crc_once, crc_init);
  crc = ~crc;
  for (size_t i = 0; i < n; i++) crc = crc_table[(crc ^ p[i]) & 0xff] ^ (crc >> 8);
  return ~crc;
#endif
}

int lade__zip_check_crc(const lade__zip_entry_t *e, const uint8_t *bytes) {
  uint32_t got = lade__zip_crc32(0, bytes, (size_t)e->usize);
  if (got == e->crc) return 0;
  char nm[100];
  lade__zip_show_name(e, nm, sizeof nm);
  return lade__fail(LADE_EFORMAT, "zip archive corrupt: member %s: CRC-32 of its %llu bytes is %08x, the central "
                    "directory says %08x", nm, (unsigned long long)e->usize, got, e->crc);
}

void lade__zip_list_names(const lade__zip_t *z, int most, char *buf, size_t size) {
  size_t pos = 0, at = 0;
  int shown = 0;
  lade__zip_entry_t e;
  buf[0] = '\0';
  while (shown < most && pos < size && lade__zip_next(z, &at, &e) == 1) {
    char nm[100];
    lade__zip_show_name(&e, nm, sizeof nm);
    pos += (size_t)snprintf(buf + pos, size - pos, "%s%s", shown ? ", " : "", nm);
    shown++;
  }
  if (pos < size)
    snprintf(buf + pos, size - pos, "%s%s(%llu member%s)", shown ? " " : "",
             (uint64_t)shown < z->entries ? "... " : "", (unsigned long long)z->entries, z->entries == 1 ? "" : "s");
}
