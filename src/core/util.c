/* util.c - clocks, aligned memory, byte buffers, version, dtypes, hashing. */
#define _POSIX_C_SOURCE 200809L
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "buf.h"
#include "config.h"
#include "core.h"
#include "cuda.h"

#define LADE__STR2(x) #x
#define LADE__STR(x) LADE__STR2(x)

const char *lade_version(void) {
  return LADE__STR(LADE_VERSION_MAJOR) "." LADE__STR(LADE_VERSION_MINOR) "." LADE__STR(LADE_VERSION_PATCH);
}

/* LADE_HAVE_* come from the generated lade_build_config.h (force-included);
 * cuda is a device found at the first call (core/cuda.h), not a build option. */
static char g_features[128];

static void features_once(void) {
  static const char *const f = ""
#ifdef LADE_HAVE_JPEG
                               " jpeg"
#endif
#ifdef LADE_HAVE_PNG
                               " png"
#endif
#ifdef LADE_HAVE_CURL
                               " curl"
#endif
#ifdef LADE_HAVE_MPI
                               " mpi"
#endif
#ifdef LADE_HAVE_UCX
                               " ucx"
#endif
#ifdef LADE_HAVE_HDF5
                               " hdf5"
#endif
#ifdef LADE_HAVE_ZLIB
                               " zlib"
#endif
      ;
  snprintf(g_features, sizeof g_features, "%s%s", f[0] ? f + 1 : f, lade__cuda_usable() ? " cuda" : "");
}

const char *lade_features(void) {
  static pthread_once_t once = PTHREAD_ONCE_INIT;
  pthread_once(&once, features_once);
  return g_features;
}

double lade__now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

uint64_t lade__now_us(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void *lade__aligned_alloc(size_t size, size_t align) {
  void *p = NULL;
  if (align < sizeof(void *)) align = sizeof(void *);
  if (size == 0) size = 1;
  if (posix_memalign(&p, align, size) != 0) return NULL;
  return p;
}

void lade__aligned_free(void *p) { free(p); }

int lade__resize_u64(uint64_t **p, size_t n, const char *what) {
  uint64_t *q = n && n <= SIZE_MAX / sizeof *q ? realloc(*p, n * sizeof *q) : NULL;
  if (!q) return lade__fail(LADE_ENOMEM, "%s: out of memory for %zu entries", what, n);
  *p = q;
  return 0;
}

int lade__resize_array(void *arr, size_t n, size_t esize, const char *what) {
  void *p, *q;
  memcpy(&p, arr, sizeof p); /* arr is the address of a T *: its bytes, not a void * object */
  q = n && n <= SIZE_MAX / esize ? realloc(p, n * esize) : NULL;
  if (!q) return lade__fail(LADE_ENOMEM, "%s: out of memory for %zu entries", what, n);
  memcpy(arr, &q, sizeof q);
  return 0;
}

int lade__cmp_names(const char *a, size_t an, const char *b, size_t bn) {
  int c = memcmp(a, b, an < bn ? an : bn);
  return c ? c : (an < bn ? -1 : an > bn);
}

int lade__reserve_bytes(char **a, size_t *cap, size_t need, size_t first, const char *what) {
  if (need <= *cap) return 0;
  size_t c = *cap ? *cap : first;
  while (c < need && c <= SIZE_MAX / 2) c *= 2;
  char *q = c >= need ? realloc(*a, c) : NULL;
  if (!q) return lade__fail(LADE_ENOMEM, "%s: out of memory for %zu bytes", what, need);
  *a = q;
  *cap = c;
  return 0;
}

char *lade__strdup(const char *s) {
  if (!s) return NULL;
  size_t n = strlen(s) + 1;
  char *d = malloc(n);
  if (d) memcpy(d, s, n);
  return d;
}

size_t lade_dtype_size(int dtype) {
  switch (dtype) {
    case LADE_DTYPE_UINT8:
    case LADE_DTYPE_INT8:
    case LADE_DTYPE_BOOL:
      return 1;
    case LADE_DTYPE_INT16:
    case LADE_DTYPE_UINT16:
    case LADE_DTYPE_FLOAT16:
      return 2;
    case LADE_DTYPE_INT32:
    case LADE_DTYPE_UINT32:
    case LADE_DTYPE_FLOAT32:
      return 4;
    case LADE_DTYPE_INT64:
    case LADE_DTYPE_UINT64:
    case LADE_DTYPE_FLOAT64:
      return 8;
  }
  return 0;
}

const char *lade_dtype_name(int dtype) {
  switch (dtype) {
    case LADE_DTYPE_UINT8: return "uint8";
    case LADE_DTYPE_INT8: return "int8";
    case LADE_DTYPE_INT16: return "int16";
    case LADE_DTYPE_UINT16: return "uint16";
    case LADE_DTYPE_INT32: return "int32";
    case LADE_DTYPE_INT64: return "int64";
    case LADE_DTYPE_FLOAT16: return "float16";
    case LADE_DTYPE_FLOAT32: return "float32";
    case LADE_DTYPE_FLOAT64: return "float64";
    case LADE_DTYPE_BOOL: return "bool";
    case LADE_DTYPE_UINT32: return "uint32";
    case LADE_DTYPE_UINT64: return "uint64";
  }
  return "unknown";
}

uint64_t lade__hash64(const void *data, size_t n, uint64_t h) {
  /* 8 bytes at a time FNV-style multiply-xor; the tail byte-wise. Fast enough
   * to checksum every delivered byte in `lade bench` without dominating. */
  const uint8_t *p = data;
  const uint64_t prime = 0x100000001b3ull;
  if (h == 0) h = 0xcbf29ce484222325ull;
  while (n >= 8) {
    uint64_t w;
    memcpy(&w, p, 8);
    h = (h ^ w) * prime;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  while (n--) h = (h ^ *p++) * prime;
  return h;
}

uint64_t lade_checksum(const void *data, size_t n, uint64_t seed) {
  /* Four independent multiply-xor lanes over 32-byte blocks so the loop runs
   * near memory speed, then the lanes, the tail and the length are folded. */
  const uint8_t *p = data;
  const uint64_t m = 0x9e3779b97f4a7c15ull;
  uint64_t a = seed ^ 0x243f6a8885a308d3ull, b = seed ^ 0x13198a2e03707344ull, c = seed ^ 0xa4093822299f31d0ull,
           d = seed ^ 0x082efa98ec4e6c89ull;
  size_t blocks = n / 32;
  for (size_t i = 0; i < blocks; i++, p += 32) {
    uint64_t w[4];
    memcpy(w, p, 32);
    a = (a ^ w[0]) * m;
    b = (b ^ w[1]) * m;
    c = (c ^ w[2]) * m;
    d = (d ^ w[3]) * m;
    a ^= a >> 31;
    b ^= b >> 31;
    c ^= c >> 31;
    d ^= d >> 31;
  }
  uint64_t h = lade__mix64(a) ^ lade__mix64(b + 1) ^ lade__mix64(c + 2) ^ lade__mix64(d + 3);
  h = lade__hash64(p, n % 32, h ^ (uint64_t)n);
  return lade__mix64(h);
}

int lade__mkdir_private(const char *path) {
  char p[LADE__PATH_MAX];
  size_t n = strlen(path);
  if (n == 0 || n >= sizeof p) return lade__fail(LADE_EINVAL, "folder '%s': empty or too long", path);
  memcpy(p, path, n + 1);
  for (size_t i = 1; i <= n; i++) {
    if (p[i] != '/' && p[i] != '\0') continue;
    char c = p[i];
    p[i] = '\0';
    if (mkdir(p, 0700) != 0 && errno != EEXIST)
      return lade__fail(LADE_EIO, "folder %s: cannot create: %s", p, strerror(errno));
    p[i] = c;
  }
  struct stat st;
  if (stat(path, &st) != 0) return lade__fail(LADE_EIO, "folder %s: %s", path, strerror(errno));
  if (!S_ISDIR(st.st_mode)) return lade__fail(LADE_EIO, "folder %s: not a directory", path);
  if ((st.st_mode & 07777) != 0700 && chmod(path, 0700) != 0)
    return lade__fail(LADE_EIO, "folder %s: mode %04o, cannot change it to 0700: %s", path,
                      (unsigned)(st.st_mode & 07777), strerror(errno));
  return 0;
}

void lade__wipe(void *p, size_t n) {
  /* a volatile function pointer: the store cannot be proven dead */
  static void *(*volatile set)(void *, int, size_t) = memset;
  if (p && n) set(p, 0, n);
}

int lade__buf_reserve(lade__buf_t *b, size_t cap) {
  if (b->cap >= cap) return 0;
  size_t n = b->cap ? b->cap : 4096;
  while (n < cap) n *= 2;
  uint8_t *p = realloc(b->data, n);
  if (!p) return lade__fail(LADE_ENOMEM, "out of memory for a %zu-byte buffer", n);
  b->data = p;
  b->cap = n;
  return 0;
}

void lade__buf_free(lade__buf_t *b) {
  free(b->data);
  memset(b, 0, sizeof *b);
}

/* ---- growable public structs */

int lade__struct_in(void *ours, size_t have, const void *theirs, size_t size, size_t least, const char *what) {
  if (size < least) return lade__fail(LADE_EINVAL, "%s: size %zu is below %zu bytes; pass its sizeof", what, size, least);
  const unsigned char *t = theirs;
  for (size_t i = have; i < size; i++)
    if (t[i])
      return lade__fail(LADE_EUNSUPPORTED, "%s: the struct is %zu bytes and this library knows %zu; byte %zu is set, "
                        "a field this library does not have", what, size, have, i);
  memcpy(ours, theirs, LADE__MIN(size, have));
  return 0;
}

void lade__struct_out(void *theirs, size_t size, const void *ours, size_t have) {
  memcpy(theirs, ours, LADE__MIN(size, have));
  if (size > have) memset((char *)theirs + have, 0, size - have);
}
