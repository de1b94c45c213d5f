/*
 * pack.c - `lade pack DIR|s3://B/P --to tar --shard-size SIZE OUT/`: writes a dataset
 * lade can read as WebDataset tar shards that the tar source reads back as
 * the same samples in the same order with the same labels.
 *
 * Design: the listing comes from a loader (as `lade ls`), so "which files are
 * samples, in which order, with which label" is decided by the library, not
 * again here. The shard boundaries are computed from the listing and the
 * file sizes before anything is written, so they are a pure function of the
 * settings: a restart can trust a complete shard of an earlier run when the
 * manifest (OUT/.lade-pack) says the same settings checksum and the same
 * first/last sample and the file has the size the plan says. Each shard is
 * written to OUT/.shard-NNNNNN.tar.tmp and renamed when complete; the
 * manifest is rewritten (tmp + rename) after each rename. The bytes are
 * deterministic: mtime 0, uid/gid 0, mode 0644, no user names, no padding
 * to a 10 KiB record (two zero blocks end each shard). Beside each shard
 * goes its sidecar index, OUT/shard-NNNNNN.tar.ladeidx
 * (lade_shard_index_write, after the rename and before the manifest lists
 * the shard; deterministic too: bound by size and headers, not mtime), so
 * a remote open of the shards need not read them whole.
 */
#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "lade/lade.h"
#include "pack.h"
#include "shown.h"

#define BLOCK 512u
#define MANIFEST ".lade-pack"

static uint64_t pad512(uint64_t n) { return (n + BLOCK - 1) / BLOCK * BLOCK; }

typedef struct entry {
  char *path;   /* the file, as lade_loader_sample names it */
  char *name;   /* member name KEY.EXT */
  char *cls;    /* member name KEY.cls, NULL without a label */
  int64_t label;
  uint64_t size;
} entry_t;

typedef struct shard {
  uint64_t first, last, bytes;
} shard_t;

static int usage_pack(FILE *f) {
  fprintf(f,
          "usage: lade pack DIR|s3://BUCKET/PREFIX --to tar --shard-size SIZE OUT [--transform T] [--set key=value ...]\n"
          "       lade pack SRC --to hdf5 OUT.h5 [--transform T] [--set key=value ...]\n\n"
          "Writes the dataset DIR (anything `lade ls DIR` lists as files: an ImageFolder tree,\n"
          "a folder of .npy files) as WebDataset tar shards OUT/shard-000000.tar,\n"
          "OUT/shard-000001.tar, ... (read them back with source=OUT or\n"
          "OUT/shard-{000000..NNNNNN}.tar). Samples keep the listing's order, so sample i of the\n"
          "shards is sample i of DIR. Each sample is KEY.EXT (its bytes; EXT its extension in\n"
          "lower case) and KEY.cls (its label as decimal text) when DIR has labels; KEY is its\n"
          "path under DIR without the extension, with '.' in the file's stem replaced by '_'\n"
          "(WebDataset splits a key at the first '.'); a key equal to the previous one gets _1,\n"
          "_2, ...\n\n"
          "s3://BUCKET/PREFIX (the s3 source: one object per sample, class folders in the keys;\n"
          "endpoint and credentials as for any s3:// source, e.g. --set s3_endpoint=URL): the\n"
          "objects under PREFIX are packed the same way, KEY being the key under PREFIX; their\n"
          "bytes come through a loader (many requests in flight, retried) and each must have\n"
          "its listed size.\n\n"
          "SIZE: bytes, or with KB/MB/GB (10^3..) or KiB/MiB/GiB (2^10..); a shard is at most\n"
          "SIZE bytes except that a sample larger than that gets a shard of its own.\n"
          "POSIX ustar (pax headers for longer names), mtime 0, uid/gid 0, mode 0644: packing\n"
          "twice gives the same bytes. Each shard gets its sidecar index beside it,\n"
          "shard-NNNNNN.tar.ladeidx: copied with the shards to a web server or a bucket, it\n"
          "spares a remote open from reading every shard whole (see `lade index`).\n"
          "Resumable: complete shards are listed in OUT/.lade-pack;\n"
          "a second run with the same settings keeps them and goes on from the first missing\n"
          "or incomplete one. A progress line goes to stderr when it is a terminal.\n\n"
          "--to hdf5: writes the samples the loader delivers for SRC (a folder of .npy files or\n"
          "a stacked .npy; unshuffled, the npy transform) as dataset 'data' (N x sample shape,\n"
          "their dtype, contiguous) and, when SRC has classes, 'labels' (int64, N) of OUT.h5;\n"
          "sample i of OUT.h5 is sample i of SRC. Image folders have no fixed shape and are\n"
          "refused unless a transform gives one: --transform imagenet-eval --set image_dtype=uint8\n"
          "stores decoded HxWxC images. Resumable: it writes OUT.h5.part, whose attribute\n"
          "lade_pack_done counts the samples flushed (about once a second); a second run with\n"
          "the same settings goes on from there, then renames it to OUT.h5. An existing OUT.h5\n"
          "is replaced only when lade pack wrote it; any other file there is refused.\n");
  return f == stderr ? 2 : 0;
}

/* "1GB", "500MB", "64KiB", "4096" */
static int parse_size(const char *s, uint64_t *out) {
  char *end = NULL;
  errno = 0;
  if (!isdigit((unsigned char)s[0])) return -1;
  unsigned long long v = strtoull(s, &end, 10);
  if (errno) return -1;
  static const struct {
    const char *suffix;
    uint64_t mul;
  } units[] = {{"", 1},
               {"B", 1},
               {"KB", 1000ull},
               {"MB", 1000000ull},
               {"GB", 1000000000ull},
               {"TB", 1000000000000ull},
               {"KIB", 1ull << 10},
               {"MIB", 1ull << 20},
               {"GIB", 1ull << 30},
               {"TIB", 1ull << 40}};
  char up[8];
  size_t n = strlen(end);
  if (n >= sizeof up) return -1;
  size_t i = 0;
  for (; i < n && i + 1 < sizeof up; i++) up[i] = (char)toupper((unsigned char)end[i]);
  up[i] = 0;
  for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
    if (!strcmp(up, units[u].suffix)) {
      if (v == 0 || v > UINT64_MAX / units[u].mul) return -1;
      *out = v * units[u].mul;
      return 0;
    }
  }
  return -1;
}

/* ------------------------------------------------------------------ tar */

/* A name that fits ustar's name (100) or prefix (155) + '/' + name fields:
 * the split point (index of the '/'), -1 for the name field alone, -2 when
 * it needs a pax header. */
static int ustar_split(const char *name) {
  size_t len = strlen(name);
  if (len <= 100) return -1;
  for (size_t p = len - 1; p > 0; p--) {
    if (name[p] != '/') continue;
    if (len - p - 1 > 100) break; /* the name part only grows further left */
    if (p <= 155 && len - p - 1 > 0) return (int)p;
  }
  return -2;
}

static size_t pax_record_len(const char *kw, size_t vlen) {
  size_t base = 1 + strlen(kw) + 1 + vlen + 1; /* ' ' kw '=' value '\n' */
  size_t n = base + 1;
  for (;;) {
    char d[32];
    size_t want = base + (size_t)snprintf(d, sizeof d, "%zu", n);
    if (want == n) return n;
    n = want;
  }
}

static int needs_pax_size(uint64_t size) { return size > 077777777777ull; }

/* Bytes one member takes in the archive: headers, data and padding. */
static uint64_t member_bytes(const char *name, uint64_t size) {
  uint64_t pax = 0;
  if (ustar_split(name) == -2) pax += pax_record_len("path", strlen(name));
  if (needs_pax_size(size)) pax += pax_record_len("size", 20);
  return (pax ? BLOCK + pad512(pax) : 0) + BLOCK + pad512(size);
}

static void octal(char *field, size_t width, uint64_t v) {
  snprintf(field, width, "%0*llo", (int)(width - 1), (unsigned long long)v);
}

static void header(unsigned char h[BLOCK], const char *name, size_t namelen, char type, uint64_t size) {
  memset(h, 0, BLOCK);
  memcpy(h, name, namelen < 100 ? namelen : 100);
  octal((char *)h + 100, 8, 0644);
  octal((char *)h + 108, 8, 0);
  octal((char *)h + 116, 8, 0);
  octal((char *)h + 124, 12, needs_pax_size(size) ? 0 : size);
  octal((char *)h + 136, 12, 0);
  h[156] = (unsigned char)type;
  memcpy(h + 257, "ustar", 6);
  memcpy(h + 263, "00", 2);
  octal((char *)h + 329, 8, 0);
  octal((char *)h + 337, 8, 0);
  memset(h + 148, ' ', 8);
  unsigned sum = 0;
  for (unsigned i = 0; i < BLOCK; i++) sum += h[i];
  snprintf((char *)h + 148, 8, "%06o", sum);
  h[155] = ' ';
}

static int put_zeros(FILE *f, uint64_t n) {
  static const unsigned char z[BLOCK];
  while (n) {
    size_t k = n < BLOCK ? (size_t)n : BLOCK;
    if (fwrite(z, 1, k, f) != k) return -1;
    n -= k;
  }
  return 0;
}

/* Headers of one member (a pax header first when needed). */
static int put_headers(FILE *f, const char *name, uint64_t size) {
  unsigned char h[BLOCK];
  int split = ustar_split(name);
  if (split == -2 || needs_pax_size(size)) {
    size_t cap = strlen(name) + 128, used = 0;
    char *rec = malloc(cap);
    if (!rec) return -1;
    if (split == -2) {
      size_t n = pax_record_len("path", strlen(name));
      used += (size_t)snprintf(rec + used, cap - used, "%zu path=%s\n", n, name);
    }
    if (needs_pax_size(size)) {
      char v[24];
      int vl = snprintf(v, sizeof v, "%llu", (unsigned long long)size);
      size_t n = pax_record_len("size", (size_t)vl);
      used += (size_t)snprintf(rec + used, cap - used, "%zu size=%s\n", n, v);
    }
    header(h, "././@PaxHeader", 14, 'x', used);
    int bad = fwrite(h, 1, BLOCK, f) != BLOCK || fwrite(rec, 1, used, f) != used || put_zeros(f, pad512(used) - used);
    free(rec);
    if (bad) return -1;
  }
  if (split >= 0) {
    header(h, name + split + 1, strlen(name + split + 1), '0', size);
    memcpy(h + 345, name, (size_t)split); /* prefix; the checksum is computed again below */
    memset(h + 148, ' ', 8);
    unsigned sum = 0;
    for (unsigned i = 0; i < BLOCK; i++) sum += h[i];
    snprintf((char *)h + 148, 8, "%06o", sum);
    h[155] = ' ';
  } else {
    header(h, name, strlen(name), '0', size);
  }
  return fwrite(h, 1, BLOCK, f) == BLOCK ? 0 : -1;
}

static int put_file(FILE *out, const entry_t *e) {
  if (put_headers(out, e->name, e->size)) return -1;
  FILE *in = fopen(e->path, "rb");
  if (!in) {
    char shown[4 * 4096 + 1], *why = strerror(errno);
    fprintf(stderr, "lade pack: %s: %s\n", lade_tool_shown(e->path, shown, sizeof shown), why);
    return -1;
  }
  static char buf[1 << 20];
  uint64_t done = 0;
  size_t k;
  while ((k = fread(buf, 1, sizeof buf, in)) > 0) {
    if (done + k > e->size || fwrite(buf, 1, k, out) != k) break;
    done += k;
  }
  int err = ferror(in) || done != e->size || !feof(in);
  fclose(in);
  if (err) {
    char shown[4 * 4096 + 1];
    fprintf(stderr, "lade pack: %s: read %llu bytes, the listing said %llu (changed while packing?)\n",
            lade_tool_shown(e->path, shown, sizeof shown),
            (unsigned long long)done, (unsigned long long)e->size);
    return -1;
  }
  return put_zeros(out, pad512(e->size) - e->size);
}

/* The bytes of an s3:// dataset's samples, in index order, from a loader
 * with the raw transform (its requests many in flight, retried as any
 * loader's): sample i must be asked in increasing order. */
typedef struct feed {
  lade_loader_t *L;
  lade_batch_t *b; /* the batch holding the samples asked now */
  uint64_t batch;  /* samples per batch */
  int started;
} feed_t;

static int feed_get(feed_t *f, uint64_t i, const unsigned char **data, uint64_t *len) {
  if (!f->started) {
    f->started = 1;
    if (i >= f->batch && lade_loader_seek(f->L, 0, i / f->batch)) {
      fprintf(stderr, "lade pack: %s\n", lade_tool_error());
      return -1;
    }
  }
  while (!f->b || i >= f->b->step * f->batch + (uint64_t)f->b->shape[0]) {
    if (f->b) lade_batch_release(f->b);
    f->b = NULL;
    if (lade_loader_next(f->L, &f->b) || !f->b) {
      fprintf(stderr, "lade pack: %s\n", f->b ? "" : lade_tool_error()[0] ? lade_tool_error() : "the dataset ended early");
      return -1;
    }
  }
  uint64_t j = i - f->b->step * f->batch;
  if (i < f->b->step * f->batch || (uint64_t)f->b->indices[j] != i) {
    fprintf(stderr, "lade pack: sample %llu came out of order (a bug)\n", (unsigned long long)i);
    return -1;
  }
  *data = (const unsigned char *)f->b->data + j * (uint64_t)f->b->shape[1];
  *len = f->b->sizes[j];
  return 0;
}

/* A sample's member from bytes already read (an s3:// object). */
static int put_data(FILE *out, const entry_t *e, const unsigned char *data, uint64_t len) {
  if (len != e->size) {
    char shown[4 * 4096 + 1];
    fprintf(stderr, "lade pack: %s: read %llu bytes, the listing said %llu (changed while packing?)\n",
            lade_tool_shown(e->path, shown, sizeof shown),
            (unsigned long long)len, (unsigned long long)e->size);
    return -1;
  }
  if (put_headers(out, e->name, e->size) || fwrite(data, 1, (size_t)len, out) != len) return -1;
  return put_zeros(out, pad512(e->size) - e->size);
}

static int put_cls(FILE *out, const entry_t *e) {
  char v[24];
  int n = snprintf(v, sizeof v, "%lld", (long long)e->label);
  if (put_headers(out, e->cls, (uint64_t)n) || fwrite(v, 1, (size_t)n, out) != (size_t)n) return -1;
  return put_zeros(out, pad512((uint64_t)n) - (uint64_t)n);
}

static uint64_t sample_bytes(const entry_t *e) {
  return member_bytes(e->name, e->size) + (e->cls ? member_bytes(e->cls, 24) : 0);
}

/* ------------------------------------------------------------ listing */

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
  const unsigned char *b = p;
  for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 1099511628211ull;
  return h;
}

/* KEY.EXT and KEY.cls from the path relative to the root. */
static int make_names(entry_t *e, const char *rel, const char *prev_key, char **key_out) {
  const char *base = strrchr(rel, '/');
  base = base ? base + 1 : rel;
  const char *dot = strrchr(base, '.');
  if (dot == base) dot = NULL; /* ".hidden": no extension */
  size_t dirlen = (size_t)(base - rel), stemlen = dot ? (size_t)(dot - base) : strlen(base);
  const char *ext = dot ? dot + 1 : "bin";
  size_t cap = strlen(rel) + 32;
  char *key = malloc(cap);
  if (!key) return -1;
  memcpy(key, rel, dirlen);
  for (size_t i = 0; i < stemlen; i++) key[dirlen + i] = base[i] == '.' ? '_' : base[i];
  if (stemlen == 0) key[dirlen + stemlen++] = '_';
  key[dirlen + stemlen] = 0;
  /* consecutive members with the same key are one sample: a.jpg and a.png must not merge */
  size_t keylen = dirlen + stemlen;
  for (unsigned k = 1; prev_key && !strcmp(key, prev_key); k++) snprintf(key + keylen, cap - keylen, "_%u", k);
  size_t kl = strlen(key), el = strlen(ext);
  e->name = malloc(kl + el + 2);
  if (!e->name) {
    free(key);
    return -1;
  }
  memcpy(e->name, key, kl);
  e->name[kl] = '.';
  for (size_t i = 0; i <= el; i++) e->name[kl + 1 + i] = (char)tolower((unsigned char)ext[i]);
  if (e->label >= 0) {
    e->cls = malloc(kl + 5);
    if (!e->cls) {
      free(key);
      return -1;
    }
    memcpy(e->cls, key, kl);
    memcpy(e->cls + kl, ".cls", 5);
  }
  *key_out = key;
  return 0;
}

static int list_entries(lade_loader_t *L, const char *root, int remote, entry_t **out, uint64_t *count) {
  uint64_t n = 0;
  uint32_t nc = 0;
  int rc = lade_loader_info(L, &n, NULL, NULL);
  if (!rc) rc = lade_loader_classes(L, &nc);
  if (rc) {
    fprintf(stderr, "lade pack: %s\n", lade_tool_error());
    return -1;
  }
  entry_t *es = calloc(n ? n : 1, sizeof *es);
  if (!es) return -1;
  *out = es;
  *count = n;
  size_t rootlen = strlen(root);
  while (rootlen > 1 && root[rootlen - 1] == '/') rootlen--;
  static char path[2 * 4096 + 64];
  char *prev = NULL;
  for (uint64_t i = 0; i < n; i++) {
    entry_t *e = &es[i];
    if (lade_loader_sample(L, i, path, sizeof path, &e->label)) {
      fprintf(stderr, "lade pack: %s\n", lade_tool_error());
      free(prev);
      return -1;
    }
    if (nc == 0) e->label = -1;
    struct stat st;
    int under = !strncmp(path, root, rootlen) && path[rootlen] == '/' && path[rootlen + 1];
    if (remote && under) { /* an object under the prefix: its listed size */
      if (lade_loader_sample_bytes(L, i, &e->size)) {
        fprintf(stderr, "lade pack: %s\n", lade_tool_error());
        free(prev);
        return -1;
      }
    } else if (!under || stat(path, &st) || !S_ISREG(st.st_mode)) {
      fprintf(stderr,
              "lade pack: sample %llu is %s, not a file under %s: pack reads a folder dataset or an s3:// "
              "prefix of one object per sample (not a stacked .npy or tar shards)\n",
              (unsigned long long)i, path, root);
      free(prev);
      return -1;
    } else {
      e->size = (uint64_t)st.st_size;
    }
    e->path = strdup(path);
    char *key = NULL;
    if (!e->path || make_names(e, path + rootlen + 1, prev, &key)) {
      free(prev);
      return -1;
    }
    free(prev);
    prev = key;
  }
  free(prev);
  return 0;
}

static uint64_t settings_sum(const entry_t *es, uint64_t n, uint64_t shard_size, const char *transform,
                             const char *src) {
  uint64_t h = 14695981039346656037ull;
  h = fnv(h, "lade-pack tar 1", 16);
  h = fnv(h, src, strlen(src) + 1);
  h = fnv(h, &shard_size, sizeof shard_size);
  h = fnv(h, transform, strlen(transform) + 1);
  h = fnv(h, &n, sizeof n);
  for (uint64_t i = 0; i < n; i++) {
    h = fnv(h, es[i].name, strlen(es[i].name) + 1);
    h = fnv(h, &es[i].label, sizeof es[i].label);
    h = fnv(h, &es[i].size, sizeof es[i].size);
  }
  return h;
}

/* ------------------------------------------------------------ manifest */

static char *join(const char *dir, const char *name) {
  size_t n = strlen(dir) + strlen(name) + 2;
  char *p = malloc(n);
  if (p) snprintf(p, n, "%s/%s", dir, name);
  return p;
}

static int write_manifest(const char *outdir, uint64_t sum, const shard_t *sh, uint64_t done) {
  char *path = join(outdir, MANIFEST), *tmp = join(outdir, MANIFEST ".tmp");
  FILE *f = path && tmp ? fopen(tmp, "w") : NULL;
  int rc = -1;
  if (f) {
    fprintf(f, "lade-pack 1 tar %016llx\n", (unsigned long long)sum);
    for (uint64_t k = 0; k < done; k++)
      fprintf(f, "shard-%06llu.tar %llu %llu %llu\n", (unsigned long long)k, (unsigned long long)sh[k].first,
              (unsigned long long)sh[k].last, (unsigned long long)sh[k].bytes);
    rc = fflush(f) || fsync(fileno(f)) ? -1 : 0;
    if (fclose(f)) rc = -1;
    if (!rc && rename(tmp, path)) rc = -1;
  }
  if (rc) fprintf(stderr, "lade pack: cannot write %s/%s: %s\n", outdir, MANIFEST, strerror(errno));
  free(path);
  free(tmp);
  return rc;
}

/* How many leading shards of the plan an earlier run completed. */
static uint64_t kept_shards(const char *outdir, uint64_t sum, const shard_t *sh, uint64_t nshards) {
  char *path = join(outdir, MANIFEST);
  FILE *f = path ? fopen(path, "r") : NULL;
  free(path);
  if (!f) return 0;
  uint64_t k = 0;
  unsigned long long s = 0;
  char line[256];
  if (fgets(line, sizeof line, f) && sscanf(line, "lade-pack 1 tar %llx", &s) == 1 && s == sum) {
    while (k < nshards && fgets(line, sizeof line, f)) {
      unsigned long long idx, first, last, bytes;
      if (sscanf(line, "shard-%llu.tar %llu %llu %llu", &idx, &first, &last, &bytes) != 4 || idx != k ||
          first != sh[k].first || last != sh[k].last || bytes != sh[k].bytes)
        break;
      char name[64];
      snprintf(name, sizeof name, "shard-%06llu.tar", idx);
      char *p = join(outdir, name);
      struct stat st;
      int ok = p && !stat(p, &st) && S_ISREG(st.st_mode) && (uint64_t)st.st_size == bytes;
      free(p);
      if (!ok) break;
      k++;
    }
  }
  fclose(f);
  return k;
}

/* Shards of an earlier, larger pack and temporary files: a folder source
 * would read the stale shards as more samples. */
static void remove_stale(const char *outdir, uint64_t nshards) {
  DIR *d = opendir(outdir);
  if (!d) return;
  struct dirent *de;
  while ((de = readdir(d))) {
    unsigned long long idx;
    int end = 0;
    int stale = 0;
    if (sscanf(de->d_name, "shard-%6llu.tar%n", &idx, &end) == 1 && end == 16 && !de->d_name[end])
      stale = idx >= nshards;
    else if (sscanf(de->d_name, "shard-%6llu.tar.ladeidx%n", &idx, &end) == 1 && end == 24 &&
             (!de->d_name[end] || !strncmp(de->d_name + end, ".tmp.", 5))) /* a sidecar, or one half-written */
      stale = de->d_name[end] || idx >= nshards;
    else if (sscanf(de->d_name, ".shard-%6llu.tar.tmp%n", &idx, &end) == 1 && end == 21 && !de->d_name[end])
      stale = 1;
    if (stale) {
      char *p = join(outdir, de->d_name);
      if (p && !unlink(p)) fprintf(stderr, "lade pack: removed %s (not part of this pack)\n", p);
      free(p);
    }
  }
  closedir(d);
}

/* ------------------------------------------------------------------ cmd */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* The shard's sidecar index beside it (docs/sources.md, "Sidecar indexes"). */
static int write_sidecar(const char *path) {
  if (!lade_shard_index_write(NULL, path)) return 0;
  fprintf(stderr, "lade pack: %s\n", lade_tool_error());
  return -1;
}

/* A kept shard without its sidecar (a run killed between the two). */
static int sidecar_missing(const char *outdir, uint64_t k) {
  char name[64];
  snprintf(name, sizeof name, "shard-%06llu.tar", (unsigned long long)k);
  char *path = join(outdir, name);
  if (!path) return -1;
  size_t n = strlen(path);
  char *side = malloc(n + 9);
  struct stat st;
  int rc = -1;
  if (side) {
    memcpy(side, path, n);
    memcpy(side + n, ".ladeidx", 9);
    rc = stat(side, &st) == 0 ? 0 : write_sidecar(path);
  }
  free(side);
  free(path);
  return rc;
}

static int write_shard(const char *outdir, uint64_t k, const shard_t *s, const entry_t *es, uint64_t n,
                       uint64_t nshards, int tty, feed_t *feed) {
  char name[64], tname[64];
  snprintf(name, sizeof name, "shard-%06llu.tar", (unsigned long long)k);
  snprintf(tname, sizeof tname, ".shard-%06llu.tar.tmp", (unsigned long long)k);
  char *path = join(outdir, name), *tmp = join(outdir, tname);
  FILE *f = path && tmp ? fopen(tmp, "wb") : NULL;
  int rc = f ? 0 : -1;
  if (!f) fprintf(stderr, "lade pack: %s: %s\n", tmp ? tmp : outdir, strerror(errno));
  static double last;
  for (uint64_t i = s->first; !rc && i <= s->last; i++) {
    if (feed) {
      const unsigned char *data = NULL;
      uint64_t len = 0;
      rc = feed_get(feed, i, &data, &len);
      if (!rc) rc = put_data(f, &es[i], data, len);
    } else {
      rc = put_file(f, &es[i]);
    }
    if (!rc && es[i].cls) rc = put_cls(f, &es[i]);
    if (tty && (now_s() - last > 0.2 || i + 1 == n)) {
      last = now_s();
      fprintf(stderr, "\rlade pack: shard %llu/%llu, sample %llu/%llu", (unsigned long long)k + 1,
              (unsigned long long)nshards, (unsigned long long)i + 1, (unsigned long long)n);
    }
  }
  if (!rc) rc = put_zeros(f, 2 * BLOCK);
  if (f) {
    if (!rc && (fflush(f) || fsync(fileno(f)))) rc = -1;
    if (fclose(f)) rc = -1;
  }
  struct stat st;
  if (!rc && stat(tmp, &st)) {
    fprintf(stderr, "lade pack: %s: %s\n", tmp, strerror(errno));
    rc = -1;
  } else if (!rc && (uint64_t)st.st_size != s->bytes) {
    fprintf(stderr, "lade pack: %s: %lld bytes written, %llu planned (a bug)\n", tmp, (long long)st.st_size,
            (unsigned long long)s->bytes);
    rc = -1;
  }
  if (!rc && rename(tmp, path)) {
    fprintf(stderr, "lade pack: %s: %s\n", path, strerror(errno));
    rc = -1;
  }
  if (!rc) rc = write_sidecar(path);
  free(path);
  free(tmp);
  return rc;
}

/* lade pack's options into cfg (--set), *to, *transform and *shard_size;
 * returns 0, 1 for a bad one (said), or 2 for --help. */
static int pack_options(int argc, char **argv, lade_config_t *cfg, const char **to, const char **transform,
                        uint64_t *shard_size) {
  static const struct option opts[] = {{"to", required_argument, 0, 'o'},        {"shard-size", required_argument, 0, 's'},
                                       {"transform", required_argument, 0, 't'}, {"set", required_argument, 0, 'S'},
                                       {"help", no_argument, 0, 'h'},            {0, 0, 0, 0}};
  int c, bad = 0;
  optind = 1;
  while (!bad && (c = getopt_long(argc, argv, "o:s:t:S:h", opts, NULL)) != -1) {
    switch (c) {
      case 'o': *to = optarg; break;
      case 's':
        if (parse_size(optarg, shard_size)) {
          fprintf(stderr, "lade pack: --shard-size '%s': want bytes, or a number with KB MB GB KiB MiB GiB\n", optarg);
          bad = 1;
        }
        break;
      case 't': *transform = optarg; break;
      case 'S':
        if (lade_config_parse(cfg, optarg)) {
          fprintf(stderr, "lade pack: %s\n", lade_tool_error());
          bad = 1;
        }
        break;
      case 'h': return 2;
      default: bad = 1;
    }
  }
  return bad;
}

/* An s3:// dataset's bytes come from a second loader (feed->L, from cfg):
 * the raw transform in index order, a slot as large as the largest object,
 * batches of up to 64 samples or 64 MiB. */
static int open_feed(lade_config_t *cfg, const entry_t *es, uint64_t n, feed_t *feed) {
  uint64_t most = 1;
  for (uint64_t i = 0; i < n; i++) most = es[i].size > most ? es[i].size : most;
  uint64_t per = (64u << 20) / most;
  feed->batch = per < 1 ? 1 : per > 64 ? 64 : per;
  char v[32];
  snprintf(v, sizeof v, "%llu", (unsigned long long)most);
  int bad_set = lade_config_set(cfg, "transform", "raw") || lade_config_set(cfg, "raw_size", v) ||
                lade_config_set(cfg, "shuffle", "false") || lade_config_set(cfg, "epochs", "1") ||
                lade_config_set(cfg, "drop_last", "false") || lade_config_set(cfg, "threads", "2") ||
                lade_config_set(cfg, "prefetch", "2");
  snprintf(v, sizeof v, "%llu", (unsigned long long)feed->batch);
  if (!bad_set) bad_set = lade_config_set(cfg, "batch_size", v);
  if (bad_set || lade_loader_create(&feed->L, cfg)) {
    fprintf(stderr, "lade pack: %s\n", lade_tool_error());
    return -1;
  }
  return 0;
}

/* The plan: shard boundaries from the sizes alone (*nshards of them; NULL
 * when out of memory). */
static shard_t *plan_shards(const entry_t *es, uint64_t n, uint64_t shard_size, uint64_t *nshards) {
  shard_t *sh = calloc(n ? n : 1, sizeof *sh);
  *nshards = 0;
  for (uint64_t i = 0; sh && i < n; i++) {
    uint64_t b = sample_bytes(&es[i]);
    if (*nshards && sh[*nshards - 1].bytes + b <= shard_size) {
      sh[*nshards - 1].bytes += b;
      sh[*nshards - 1].last = i;
    } else {
      sh[(*nshards)++] = (shard_t){i, i, 2 * BLOCK + b};
    }
  }
  return sh;
}

static void print_packed(const shard_t *sh, uint64_t nshards, uint64_t n, uint64_t kept, const char *outdir) {
  uint64_t total = 0;
  for (uint64_t k = 0; k < nshards; k++) total += sh[k].bytes;
  printf("packed %llu samples into %llu shards (%llu bytes) in %s", (unsigned long long)n,
         (unsigned long long)nshards, (unsigned long long)total, outdir);
  if (kept) printf("; kept %llu complete shards of an earlier run", (unsigned long long)kept);
  printf("\n");
}

static void free_entries(entry_t *es, uint64_t n) {
  for (uint64_t i = 0; es && i < n; i++) {
    free(es[i].path);
    free(es[i].name);
    free(es[i].cls);
  }
  free(es);
}

int lade_tool_pack(int argc, char **argv) {
  lade_config_t *cfg = NULL;
  if (lade_config_create(&cfg)) return 1;
  const char *to = NULL, *transform = "auto";
  uint64_t shard_size = 0;
  int bad = pack_options(argc, argv, cfg, &to, &transform, &shard_size);
  if (bad == 2) {
    lade_config_destroy(cfg);
    return usage_pack(stdout);
  }
  if (!bad && to && !strcmp(to, "hdf5")) { /* pack_hdf5.c */
    if (argc - optind != 2 || shard_size) {
      usage_pack(stderr);
      lade_config_destroy(cfg);
      return 2;
    }
    int rc = lade_tool_pack_hdf5(cfg, argv[optind], argv[optind + 1], transform);
    lade_config_destroy(cfg);
    return rc;
  }
  if (!bad && (argc - optind != 2 || !to || !shard_size)) {
    usage_pack(stderr);
    bad = 1;
  } else if (!bad && strcmp(to, "tar")) {
    fprintf(stderr, "lade pack: --to %s: tar or hdf5\n", to);
    bad = 1;
  }
  const char *src = bad ? NULL : argv[optind], *outdir = bad ? NULL : argv[optind + 1];
  if (!bad && (lade_config_set(cfg, "source", src) || lade_config_set(cfg, "transform", transform) ||
               lade_config_set(cfg, "threads", "1") || lade_config_set(cfg, "batch_size", "1") ||
               lade_config_set(cfg, "prefetch", "1"))) {
    fprintf(stderr, "lade pack: %s\n", lade_tool_error());
    bad = 1;
  }
  if (bad) {
    lade_config_destroy(cfg);
    return 2;
  }
  int remote = !strncmp(src, "s3://", 5);
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, cfg);
  if (rc) {
    fprintf(stderr, "lade pack: %s\n", lade_tool_error());
    lade_config_destroy(cfg);
    return 1;
  }
  entry_t *es = NULL;
  uint64_t n = 0;
  rc = list_entries(L, src, remote, &es, &n);
  lade_loader_destroy(L);
  feed_t feed = {0};
  if (!rc && remote) rc = open_feed(cfg, es, n, &feed);
  lade_config_destroy(cfg);

  uint64_t nshards = 0;
  shard_t *sh = rc ? NULL : plan_shards(es, n, shard_size, &nshards);
  if (!rc && !sh) rc = -1;
  uint64_t sum = rc ? 0 : settings_sum(es, n, shard_size, transform, src);
  if (!rc && mkdir(outdir, 0777) && errno != EEXIST) {
    fprintf(stderr, "lade pack: %s: %s\n", outdir, strerror(errno));
    rc = -1;
  }
  uint64_t kept = rc ? 0 : kept_shards(outdir, sum, sh, nshards);
  if (!rc && write_manifest(outdir, sum, sh, kept)) rc = -1;
  if (!rc) remove_stale(outdir, nshards);
  for (uint64_t k = 0; !rc && k < kept; k++) rc = sidecar_missing(outdir, k);
  int tty = isatty(2);
  for (uint64_t k = kept; !rc && k < nshards; k++) {
    rc = write_shard(outdir, k, &sh[k], es, n, nshards, tty, remote ? &feed : NULL);
    if (!rc) rc = write_manifest(outdir, sum, sh, k + 1);
  }
  if (tty && kept < nshards) fputc('\n', stderr);
  if (!rc) print_packed(sh, nshards, n, kept, outdir);
  if (feed.b) lade_batch_release(feed.b);
  lade_loader_destroy(feed.L);
  free_entries(es, n);
  free(sh);
  return rc ? 1 : 0;
}
