/* npyfmt.c - a strict parser of the .npy header dictionary, and the copy of
 * a fortran-order or byte-swapped payload into C order, native byte order.
 * Input is outside bytes: every read is bounds-checked, every number
 * overflow-checked, and the reason for a rejection is spelled out (fuzzed by
 * fuzz/fuzz_npy.c). */
#include "npyfmt.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "core.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define LADE__HOST_BIG 1
#else
#define LADE__HOST_BIG 0
#endif

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n')) p++;
  return p;
}

/* Reads a quoted string ('x' or "x") into buf. */
static const char *parse_str(const char *p, const char *end, char *buf, size_t size) {
  if (p >= end || (*p != '\'' && *p != '"')) return NULL;
  char q = *p++;
  size_t n = 0;
  while (p < end && *p != q) {
    if (n + 1 >= size) return NULL;
    buf[n++] = *p++;
  }
  if (p >= end) return NULL;
  buf[n] = '\0';
  return p + 1;
}

/* The dtype of a descr string such as '<f4', or 0; *other is set when the
 * byte order is not the host's. */
static int dtype_from_descr(const char *d, bool *other) {
  /* byte order: '<' little, '>' big, '|' not applicable, '=' native */
  char order = d[0];
  const char *t = d + 1;
  if (order != '<' && order != '>' && order != '|' && order != '=') return 0;
  *other = order == (LADE__HOST_BIG ? '<' : '>');
  static const struct {
    const char *code;
    int dtype;
  } map[] = {{"u1", LADE_DTYPE_UINT8},   {"i1", LADE_DTYPE_INT8},    {"b1", LADE_DTYPE_BOOL},
             {"i2", LADE_DTYPE_INT16},   {"u2", LADE_DTYPE_UINT16},  {"i4", LADE_DTYPE_INT32},
             {"u4", LADE_DTYPE_UINT32},  {"i8", LADE_DTYPE_INT64},   {"u8", LADE_DTYPE_UINT64},
             {"f2", LADE_DTYPE_FLOAT16}, {"f4", LADE_DTYPE_FLOAT32}, {"f8", LADE_DTYPE_FLOAT64}};
  for (size_t i = 0; i < sizeof map / sizeof map[0]; i++)
    if (strcmp(t, map[i].code) == 0) return map[i].dtype;
  return 0;
}

int lade__npy_parse(const uint8_t *data, size_t len, lade__npy_header_t *out) {
  memset(out, 0, sizeof *out);
  if (len < 10) {
    if (len >= 6 && memcmp(data, "\x93NUMPY", 6) != 0)
      return lade__fail(LADE_EFORMAT, "not a .npy file (bad magic)");
    return lade__fail(LADE_ERANGE, "npy header truncated (%zu bytes)", len);
  }
  if (memcmp(data, "\x93NUMPY", 6) != 0) return lade__fail(LADE_EFORMAT, "not a .npy file (bad magic)");
  int major = data[6];
  size_t hlen, pre;
  if (major == 1) {
    hlen = (size_t)data[8] | ((size_t)data[9] << 8);
    pre = 10;
  } else if (major == 2 || major == 3) {
    if (len < 12) return lade__fail(LADE_ERANGE, "npy header truncated (%zu bytes)", len);
    hlen = (size_t)data[8] | ((size_t)data[9] << 8) | ((size_t)data[10] << 16) | ((size_t)data[11] << 24);
    pre = 12;
    if (hlen > (1u << 24)) return lade__fail(LADE_EFORMAT, "npy header length %zu is implausible", hlen);
  } else {
    return lade__fail(LADE_EFORMAT, "unsupported .npy format version %d.%d", major, data[7]);
  }
  if (pre + hlen > len)
    return lade__fail(LADE_ERANGE, "npy header truncated: needs %zu bytes, have %zu", pre + hlen, len);
  const char *p = (const char *)data + pre, *end = p + hlen;
  for (const char *c = p; c < end; c++)
    if ((unsigned char)*c >= 0x80 || (*c < 0x20 && *c != '\n' && *c != '\t'))
      return lade__fail(LADE_EFORMAT, "npy header has a non-ASCII or control byte at offset %zu",
                        (size_t)(c - (const char *)data));
  p = skip_ws(p, end);
  if (p >= end || *p++ != '{') return lade__fail(LADE_EFORMAT, "npy header is not a dictionary");
  bool have_descr = false, have_order = false, have_shape = false, fortran = false;
  char descr[32];
  for (;;) {
    p = skip_ws(p, end);
    if (p < end && *p == '}') break;
    char key[32];
    p = parse_str(p, end, key, sizeof key);
    if (!p) return lade__fail(LADE_EFORMAT, "npy header: malformed key");
    p = skip_ws(p, end);
    if (p >= end || *p++ != ':') return lade__fail(LADE_EFORMAT, "npy header: missing ':' after '%s'", key);
    p = skip_ws(p, end);
    if (strcmp(key, "descr") == 0) {
      p = parse_str(p, end, descr, sizeof descr);
      if (!p) return lade__fail(LADE_EFORMAT, "npy header: descr is not a simple type string");
      have_descr = true;
    } else if (strcmp(key, "fortran_order") == 0) {
      if (end - p >= 5 && strncmp(p, "False", 5) == 0) {
        p += 5;
      } else if (end - p >= 4 && strncmp(p, "True", 4) == 0) {
        p += 4;
        fortran = true;
      } else {
        return lade__fail(LADE_EFORMAT, "npy header: fortran_order is not a boolean");
      }
      have_order = true;
    } else if (strcmp(key, "shape") == 0) {
      if (p >= end || *p++ != '(') return lade__fail(LADE_EFORMAT, "npy header: shape is not a tuple");
      out->ndim = 0;
      for (;;) {
        p = skip_ws(p, end);
        if (p < end && *p == ')') {
          p++;
          break;
        }
        if (p >= end || *p < '0' || *p > '9')
          return lade__fail(LADE_EFORMAT, "npy header: shape has a negative or non-integer dimension");
        uint64_t v = 0;
        while (p < end && *p >= '0' && *p <= '9') {
          if (v > (UINT64_C(1) << 48)) return lade__fail(LADE_EFORMAT, "npy header: shape dimension too large");
          v = v * 10 + (uint64_t)(*p++ - '0');
        }
        /* Python 2 wrote longs as 2L; numpy reads them in 1.0 and 2.0 headers */
        if (p < end && *p == 'L' && major <= 2) p++;
        if (out->ndim >= LADE__NPY_MAX_DIMS)
          return lade__fail(LADE_EFORMAT, "npy header: more than %d dimensions (numpy's limit)", LADE__NPY_MAX_DIMS);
        out->shape[out->ndim++] = (int64_t)v;
        p = skip_ws(p, end);
        if (p < end && *p == ',') p++;
      }
      have_shape = true;
    } else {
      return lade__fail(LADE_EFORMAT, "npy header: unexpected key '%s'", key);
    }
    p = skip_ws(p, end);
    if (p < end && *p == ',') p++;
  }
  if (!have_descr || !have_order || !have_shape)
    return lade__fail(LADE_EFORMAT, "npy header: missing %s", !have_descr ? "descr" : !have_order ? "fortran_order" : "shape");
  bool other = false;
  int dt = dtype_from_descr(descr, &other);
  if (dt <= 0)
    return lade__fail(LADE_EFORMAT,
                      "npy dtype '%s' is not supported (lade reads bool, int8-64, uint8-64, float16-64, either byte "
                      "order)",
                      descr);
  out->dtype = dt;
  out->header_len = pre + hlen;
  uint64_t count = 1;
  int long_dims = 0;
  for (int i = 0; i < out->ndim; i++) {
    uint64_t d = (uint64_t)out->shape[i];
    if (d && count > (UINT64_C(1) << 50) / d) return lade__fail(LADE_EFORMAT, "npy shape is too large");
    count *= d;
    long_dims += d > 1;
  }
  out->payload_bytes = (size_t)(count * lade_dtype_size(dt));
  /* with at most one dimension longer than 1 both orders are the same bytes */
  out->fortran = fortran && long_dims > 1 && count > 0;
  out->swap = other && lade_dtype_size(dt) > 1;
  return 0;
}

int lade__npy_check_sample_dims(int ndim, const char *what) {
  if (ndim <= LADE__NPY_SAMPLE_DIMS) return 0;
  return lade__fail(LADE_ESHAPE,
                    "%s: samples of %d dimensions; a lade batch holds at most %d sample dimensions: lade_batch_t's "
                    "shape and strides are fixed arrays of LADE_MAX_DIMS (%d) entries in the C ABI, one of them the "
                    "batch dimension (numpy allows 32, 64 from numpy 2): reshape the arrays to at most that many and "
                    "restore the shape after loading",
                    what, ndim, LADE__NPY_SAMPLE_DIMS, LADE_MAX_DIMS);
}

bool lade__npy_same(const lade__npy_header_t *a, const lade__npy_header_t *b) {
  if (a->dtype != b->dtype || a->ndim != b->ndim || a->fortran != b->fortran || a->swap != b->swap) return false;
  for (int i = 0; i < a->ndim; i++)
    if (a->shape[i] != b->shape[i]) return false;
  return true;
}

void lade__npy_describe(const lade__npy_header_t *h, char *buf, size_t size) {
  size_t n = (size_t)snprintf(buf, size, "%s (", lade_dtype_name(h->dtype));
  for (int i = 0; i < h->ndim && n < size; i++)
    n += (size_t)snprintf(buf + n, size - n, "%s%lld", i ? "," : "", (long long)h->shape[i]);
  if (n < size) n += (size_t)snprintf(buf + n, size - n, ")%s", h->fortran ? ", fortran order" : "");
  if (n < size && h->swap) snprintf(buf + n, size - n, ", %s", LADE__HOST_BIG ? "little-endian" : "big-endian");
}

void lade__npy_swap(void *buf, size_t count, size_t esize) {
  uint8_t *p = buf;
  switch (esize) {
    case 2:
      for (size_t i = 0; i < count; i++, p += 2) {
        uint16_t v;
        memcpy(&v, p, 2);
        v = __builtin_bswap16(v);
        memcpy(p, &v, 2);
      }
      break;
    case 4:
      for (size_t i = 0; i < count; i++, p += 4) {
        uint32_t v;
        memcpy(&v, p, 4);
        v = __builtin_bswap32(v);
        memcpy(p, &v, 4);
      }
      break;
    case 8:
      for (size_t i = 0; i < count; i++, p += 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v = __builtin_bswap64(v);
        memcpy(p, &v, 8);
      }
      break;
    default:
      break;
  }
}

/* dst (C order, contiguous) <- the array of `ndim` dims at src with element
 * strides `stride`: an odometer over all but the last dimension, the last one
 * a strided copy loop per element size. */
static void gather(uint8_t *dst, const uint8_t *src, int ndim, const int64_t *shape, const int64_t *stride,
                   size_t esize) {
  if (ndim == 0) {
    memcpy(dst, src, esize);
    return;
  }
  int64_t idx[LADE__NPY_MAX_DIMS] = {0};
  const int64_t inner = shape[ndim - 1], step = stride[ndim - 1] * (int64_t)esize;
  for (int i = 0; i < ndim; i++)
    if (shape[i] == 0) return;
  for (;;) {
    int64_t off = 0;
    for (int i = 0; i < ndim - 1; i++) off += idx[i] * stride[i];
    const uint8_t *s = src + off * (int64_t)esize;
    switch (esize) {
      case 1:
        for (int64_t k = 0; k < inner; k++, s += step) *dst++ = *s;
        break;
      case 2:
        for (int64_t k = 0; k < inner; k++, s += step, dst += 2) memcpy(dst, s, 2);
        break;
      case 4:
        for (int64_t k = 0; k < inner; k++, s += step, dst += 4) memcpy(dst, s, 4);
        break;
      default:
        for (int64_t k = 0; k < inner; k++, s += step, dst += esize) memcpy(dst, s, esize);
        break;
    }
    int i = ndim - 2;
    while (i >= 0 && ++idx[i] == shape[i]) idx[i--] = 0;
    if (i < 0) return;
  }
}

void lade__npy_to_c(const lade__npy_header_t *h, int64_t row, const uint8_t *payload, void *dst) {
  const size_t esize = lade_dtype_size(h->dtype);
  const int skip = row >= 0 ? 1 : 0;
  const size_t bytes = row >= 0 ? (h->shape[0] ? h->payload_bytes / (size_t)h->shape[0] : 0) : h->payload_bytes;
  if (!h->fortran) {
    memcpy(dst, payload + (row >= 0 ? (size_t)row * bytes : 0), bytes);
  } else {
    /* fortran order: dimension 0 varies fastest; row r of a stacked array
     * starts at element r and steps by shape[0] along dimension 1 */
    int64_t stride[LADE__NPY_MAX_DIMS];
    int64_t s = 1;
    for (int i = 0; i < h->ndim; i++) {
      stride[i] = s;
      s *= h->shape[i];
    }
    gather(dst, payload + (row >= 0 ? (size_t)row * esize : 0), h->ndim - skip, h->shape + skip, stride + skip, esize);
  }
  if (h->swap) lade__npy_swap(dst, bytes / esize, esize);
}

int lade__npy_write_header(char *buf, size_t size, int dtype, int ndim, const int64_t *shape) {
  static const char *codes[] = {NULL,  "|u1", "|i1", "<i2", "<u2", "<i4", "<i8",
                                "<f2", "<f4", "<f8", "|b1", "<u4", "<u8"};
  if (dtype < 1 || dtype >= (int)(sizeof codes / sizeof codes[0]) || ndim < 0 || ndim > LADE_MAX_DIMS)
    return lade__fail(LADE_EINVAL, "npy header: bad dtype or ndim");
  char dict[512];
  int n = snprintf(dict, sizeof dict, "{'descr': '%s', 'fortran_order': False, 'shape': (", codes[dtype]);
  for (int i = 0; i < ndim; i++)
    n += snprintf(dict + n, sizeof dict - (size_t)n, "%lld%s", (long long)shape[i], ndim == 1 ? "," : (i + 1 < ndim ? ", " : ""));
  n += snprintf(dict + n, sizeof dict - (size_t)n, "), }");
  size_t total = 10 + (size_t)n + 1;
  size_t padded = (total + 63) / 64 * 64;
  if (padded > size || padded - 10 > 65535) return lade__fail(LADE_ERANGE, "npy header: buffer too small");
  memcpy(buf, "\x93NUMPY\x01\x00", 8);
  size_t hl = padded - 10;
  buf[8] = (char)(hl & 0xff);
  buf[9] = (char)(hl >> 8);
  memcpy(buf + 10, dict, (size_t)n);
  memset(buf + 10 + n, ' ', padded - 10 - (size_t)n - 1);
  buf[padded - 1] = '\n';
  return (int)padded;
}
