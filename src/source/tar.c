/*
 * tar.c - the `tar` source: WebDataset shards (docs/sources.md). A sample is
 * a group of consecutive members sharing a key (the name up to the first
 * '.' of its last path component: `a/n01_10026.jpg` and `a/n01_10026.cls`
 * are sample `a/n01_10026`); the member the transform needs is its bytes,
 * its label comes from the `.cls` member or else from the key's folder
 * (labels.c).
 *
 * Random access for any plan comes from an index per shard (every regular
 * member's data offset and size, and the value of each `.cls`), built by one
 * sequential pass over the shard's headers the first time it is opened and
 * stored checksummed, keyed by the shard's version: a changed shard, or a
 * damaged index, is indexed again. This file owns what every container
 * format shares (shard lists, the index and its stored form, the samples'
 * arrays, the source's vtable) and the tar format itself; the tfrecord
 * format (TFRecord files, a record per sample) is tar_tfrecord.c, chosen at
 * open by the source's ops (lade__source_tfrecord). Where a shard's bytes
 * come from is a backend (tar_impl.h): tar_local.c (pread) or tar_http.c
 * (Range requests over http(s):// and s3://).
 *
 * Threads: open() indexes up to the backend's index_threads shards at once (index_all);
 * `index_job_t.mu` guards only which shard is taken next, each thread
 * writes its own shard's slots, and the samples are added in shard order
 * by the opening thread after the joins. After open, reads need no lock.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>
#include <unistd.h>

#include "source/labels.h"
#include "source/tar_remote_index.h"
#include "tar_impl.h"

#define IDX_MAGIC "LADETAR2" /* 2: with the shard binding (bind) */
#define CLS_MAX 64u /* bytes of a .cls member */

/* ------------------------------------------------------- the tar format */

static int index_push(lade__tar_index_t *x, uint64_t off, uint64_t size, int64_t cls, const char *name, size_t nlen) {
  return lade__tar_index_push(x, &(lade__tar_entry_t){off, size, cls}, 0, name, nlen);
}

static int is_cls(const char *name) {
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  const char *dot = strchr(base, '.');
  return dot && strcmp(dot + 1, "cls") == 0;
}

/* A .cls member's value: a decimal integer in [0, 2^24), spaces around. */
static int parse_cls(const uint8_t *d, size_t n, int64_t *v) {
  size_t s = 0, e = n;
  while (s < e && (d[s] == ' ' || d[s] == '\t' || d[s] == '\n' || d[s] == '\r')) s++;
  while (e > s && (d[e - 1] == ' ' || d[e - 1] == '\t' || d[e - 1] == '\n' || d[e - 1] == '\r')) e--;
  uint64_t x;
  if (lade__tar_parse_u64((const char *)d + s, e - s, &x) != 0 || x >= (1u << 24)) return -1;
  *v = (int64_t)x;
  return 0;
}

/* One pass over the shard's headers, read through `fn` (a local shard's
 * buffered preads, or a remote shard's streamed GET). */
static int tar_walk(const lade__tar_t *tt, lade__tar_index_t *x, lade__tar_pread_fn fn, void *ctx, uint64_t size,
                    const char *shard) {
  (void)tt;
  lade__tar_reader_t t;
  lade__tar_init(&t, fn, ctx, size);
  lade__tar_member_t m;
  int rc;
  while ((rc = lade__tar_next(&t, &m)) == 1) {
    if (!m.regular) continue;
    int64_t cls = LADE__TAR_NO_CLS;
    if (is_cls(m.name)) {
      uint8_t b[CLS_MAX];
      long n = m.size <= CLS_MAX ? fn(ctx, b, (size_t)m.size, m.data_off) : -1;
      if (n != (long)m.size || parse_cls(b, (size_t)m.size, &cls) != 0) {
        char v[CLS_MAX + 1] = "";
        if (n > 0) snprintf(v, sizeof v, "%.*s", (int)n, (const char *)b);
        rc = lade__fail(LADE_EFORMAT, "%s: member '%s': not a class number below 2^24 (%llu bytes%s%s%s)", shard, m.name,
                        (unsigned long long)m.size, n > 0 ? ": \"" : "", v, n > 0 ? "\"" : "");
        break;
      }
    }
    rc = index_push(x, m.data_off, m.size, cls, m.name, m.name_len);
    if (rc) break;
  }
  if (rc < 0 && strncmp(lade_last_error(), shard, strlen(shard)) != 0) lade__fail_prefix(rc, "%s: ", shard);
  lade__tar_free(&t);
  return rc < 0 ? rc : 0;
}

/* The header block of up to 8 members spread over the index (first and
 * last included: lade__tar_bind_at) and the data of those that are .cls
 * members. */
static uint64_t tar_bind(const lade__tar_t *t, const lade__tar_index_t *x, lade__tar_pread_fn fn, void *ctx) {
  (void)t;
  uint64_t h = lade__hash64(&x->n, sizeof x->n, 0x62696e6474617200ull);
  size_t k = LADE__MIN(x->n, (size_t)LADE__TAR_BIND_ENTRIES);
  for (size_t j = 0; j < k; j++) {
    size_t i = lade__tar_bind_at(x->n, j);
    /* the block before a member's data is its own ustar header (name,
     * size, mtime, checksum): pax and long-name records come before it */
    uint8_t b[512 + CLS_MAX];
    size_t want = 512 + (x->m[i].cls != LADE__TAR_NO_CLS ? (size_t)LADE__MIN(x->m[i].size, (uint64_t)CLS_MAX) : 0);
    long n = x->m[i].data_off >= 512 ? fn(ctx, b, want, x->m[i].data_off - 512) : -1;
    h = lade__hash64(&n, sizeof n, h);
    if (n > 0) h = lade__hash64(b, (size_t)n, h);
  }
  return h ? h : 1;
}

/* A header's number field as tarfmt.c reads it: GNU base-256 (0x80
 * first), else octal between spaces up to a NUL. 0, or -1. */
static int header_number(const uint8_t *f, size_t n, uint64_t *out) {
  uint64_t v = 0;
  if (f[0] == 0x80) {
    for (size_t i = 1; i < n; i++) {
      if (v >> 55) return -1;
      v = (v << 8) | f[i];
    }
    *out = v;
    return 0;
  }
  const uint8_t *z = memchr(f, 0, n);
  size_t e = z ? (size_t)(z - f) : n, i = 0;
  while (i < e && f[i] == ' ') i++;
  while (e > i && f[e - 1] == ' ') e--;
  for (; i < e; i++) {
    if (f[i] < '0' || f[i] > '7' || (v >> 60)) return -1;
    v = v * 8 + (uint64_t)(f[i] - '0');
  }
  *out = v;
  return 0;
}

/* format.check_entry: the block before member i's data is a header (its
 * checksum, signed or unsigned as tarfmt.c takes it) of a regular member
 * of the index's size (unless a pax size, past 8 GiB, holds it) and name.
 * The name is compared when the index's is printable ASCII under 100
 * bytes: a longer or other one may come from a pax path or a GNU long name,
 * and the block then holds some cut of it. */
static int tar_check_entry(const lade__tar_t *t, const lade__tar_index_t *x, size_t i, lade__tar_pread_fn fn,
                           void *ctx, const char **why) {
  (void)t;
  const lade__tar_entry_t *m = &x->m[i];
  uint8_t h[512];
  *why = "a sampled member's header block is not in the shard";
  if (m->data_off < 512 || fn(ctx, h, sizeof h, m->data_off - 512) != (long)sizeof h) return -1;
  uint64_t field = 0, usum = 256, size = 0;
  int64_t ssum = 256;
  for (size_t k = 0; k < sizeof h; k++)
    if (k < 148 || k >= 156) usum += h[k], ssum += (int8_t)h[k];
  *why = "the block before a sampled member's data is not a tar header (its checksum)";
  if (header_number(h + 148, 8, &field) || (field != usum && (int64_t)field != ssum)) return -1;
  *why = "a sampled member's header is not a regular file's";
  if (h[156] != '0' && h[156] != '7' && h[156] != 0) return -1;
  *why = "a sampled member's header gives another size";
  if (m->size < 077777777777ull && (header_number(h + 124, 12, &size) || size != m->size)) return -1;
  const char *nm = lade__tar_strs_at(&x->names, i);
  size_t nl = strlen(nm), ascii = nl < 100;
  for (size_t k = 0; ascii && k < nl; k++) ascii = nm[k] >= 0x20 && nm[k] < 0x7f;
  if (!ascii) return 0;
  const uint8_t *z = memchr(h, 0, 100), *pz = memchr(h + 345, 0, 155);
  size_t fl = z ? (size_t)(z - h) : 100, pl = pz ? (size_t)(pz - (h + 345)) : 155;
  *why = "a sampled member's header names another member";
  if (pl ? nl != pl + 1 + fl || memcmp(nm, h + 345, pl) || nm[pl] != '/' || memcmp(nm + pl + 1, h, fl)
         : nl != fl || memcmp(nm, h, fl))
    return -1;
  return 0;
}

/* ------------------------------------------------------- local shard lists */

static int cmp_str(const void *a, const void *b) { return strcmp(*(char *const *)a, *(char *const *)b); }

/* The shards directly in folder root (.tar files; .tfrecord files), sorted
 * byte-wise. */
static int list_folder(const lade__tar_t *t, lade__tar_strs_t *out, const char *root) {
  DIR *d = opendir(root);
  if (!d) return lade__fail(LADE_EIO, "cannot read folder %s: %s", root, strerror(errno));
  lade__tar_strs_t tmp = {0};
  int rc = 0;
  struct dirent *e;
  while (!rc && (e = readdir(d)) != NULL) {
    if (e->d_name[0] == '.' || !t->fmt->is_shard(e->d_name, strlen(e->d_name))) continue;
    rc = lade__tar_strs_push(&tmp, e->d_name, strlen(e->d_name));
  }
  closedir(d);
  char **v = rc || !tmp.n ? NULL : malloc(tmp.n * sizeof *v);
  if (!rc && tmp.n && !v) rc = lade__fail(LADE_ENOMEM, "tar source: out of memory");
  if (!rc && !tmp.n) rc = lade__fail(LADE_EEMPTY, "no %s files in folder %s", t->fmt->shard_kind, root);
  if (!rc) {
    for (size_t i = 0; i < tmp.n; i++) v[i] = tmp.a + tmp.off[i];
    qsort(v, tmp.n, sizeof *v, cmp_str);
    char path[LADE__PATH_MAX * 2];
    for (size_t i = 0; !rc && i < tmp.n; i++) {
      lade__path_join(path, sizeof path, root, v[i]);
      rc = lade__tar_strs_push(out, path, strlen(path));
    }
  }
  free(v);
  lade__tar_strs_free(&tmp);
  return rc;
}

/* A local list file (lade__tar_list_lines). */
static int list_file(lade__tar_strs_t *out, const char *file) {
  lade__buf_t b = {0};
  int rc = lade__tar_read_small(file, 64u << 20, &b);
  if (rc) {
    lade__buf_free(&b);
    return rc;
  }
  char dir[LADE__PATH_MAX];
  const char *slash = strrchr(file, '/');
  snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - file) : 1, slash ? file : ".");
  if (slash == file) snprintf(dir, sizeof dir, "/");
  rc = lade__tar_list_lines(out, &b, dir, file);
  lade__buf_free(&b);
  return rc;
}

/* --------------------------------------------------------------- samples */

enum { WANT_IMAGE, WANT_NPY, WANT_RAW, WANT_NPZ };

/* The rank of a member's extension for the transform: lower is preferred,
 * -1 never taken. npy and npz take their own extension only; image
 * transforms the images, in lade__image_exts order (.jpg first); raw the
 * image, else the .npy or .npz, else any other extension but .cls. */
static int ext_rank(const char *ext, int want) {
  int r = 0;
  if (want == WANT_IMAGE || want == WANT_RAW)
    for (const char *const *e = lade__image_exts; *e; e++, r++)
      if (strcasecmp(ext, *e + 1) == 0) return r;
  if (strcasecmp(ext, "npy") == 0) return want == WANT_NPY || want == WANT_RAW ? 100 : -1;
  if (strcasecmp(ext, "npz") == 0) return want == WANT_NPZ || want == WANT_RAW ? 100 : -1;
  if (want == WANT_RAW && strcmp(ext, "cls") != 0) return 200;
  return -1;
}


/* Length of the key of a member name (up to the first '.' of its last
 * component), or 0 when the last component has no '.' (not a sample's). */
static size_t key_len(const char *name) {
  const char *base = strrchr(name, '/');
  base = base ? base + 1 : name;
  const char *dot = strchr(base, '.');
  return dot && dot > base ? (size_t)(dot - name) : 0;
}

/* Groups a shard's members into samples. */
static int tar_add(lade__tar_t *t, uint32_t si, const lade__tar_index_t *x) {
  int want = t->want;
  const char *shard = lade__tar_strs_at(&t->shards, si);
  size_t i = 0;
  while (i < x->n) {
    const char *first = lade__tar_strs_at(&x->names, i);
    size_t kl = key_len(first);
    if (!kl) {
      i++;
      continue;
    }
    size_t j = i + 1;
    while (j < x->n) {
      const char *nm = lade__tar_strs_at(&x->names, j);
      if (key_len(nm) != kl || memcmp(nm, first, kl) != 0) break;
      for (size_t k = i; k < j; k++)
        if (strcmp(lade__tar_strs_at(&x->names, k) + kl, nm + kl) == 0)
          return lade__fail(LADE_EFORMAT, "%s: member '%s' appears twice in sample '%.*s'", shard, nm, (int)kl, first);
      j++;
    }
    int best = -1, best_rank = INT32_MAX;
    int64_t cls = LADE__TAR_NO_CLS;
    for (size_t k = i; k < j; k++) {
      const char *ext = lade__tar_strs_at(&x->names, k) + kl + 1;
      if (x->m[k].cls != LADE__TAR_NO_CLS) cls = x->m[k].cls;
      int r = ext_rank(ext, want);
      if (r >= 0 && r < best_rank) best = (int)k, best_rank = r;
    }
    if (best < 0) {
      t->skipped++;
    } else {
      int32_t label = cls == LADE__TAR_NO_CLS ? -1 : (int32_t)cls;
      const lade__tar_entry_t *m = &x->m[best];
      int rc = lade__tar_push_sample(t, si, m->data_off, m->size, 0, label, lade__tar_strs_at(&x->names, (size_t)best));
      if (rc) return rc;
      if (cls != LADE__TAR_NO_CLS) t->with_cls++;
    }
    i = j;
  }
  return 0;
}

static const char *sample_name_of(void *ctx, uint64_t i) { return lade__tar_strs_at(&((lade__tar_t *)ctx)->names, i); }

/* Labels: from .cls members when every sample has one (WebDataset's
 * labels); some samples with a .cls and some without is an error. Without
 * any, from the keys' folders by labels.c's rule, the rule of the dir and s3
 * sources: the key's first folder is its class, a key without a folder -1. */
static int tar_labels(lade__tar_t *t, lade__source_t *s) {
  uint64_t with_cls = t->with_cls;
  if (with_cls == t->count) {
    int32_t mx = -1;
    for (uint64_t i = 0; i < t->count; i++) mx = LADE__MAX(mx, t->labels[i]);
    s->classes = (uint32_t)(mx + 1);
    s->labels = t->labels;
    return 0;
  }
  if (with_cls) {
    for (uint64_t i = 0; i < t->count; i++)
      if (t->labels[i] < 0) {
        const char *nm = lade__tar_strs_at(&t->names, i);
        return lade__fail(LADE_EFORMAT, "%s: sample '%.*s' has no .cls member while %llu other samples have one",
                          lade__tar_strs_at(&t->shards, t->shard[i]), (int)key_len(nm), nm,
                          (unsigned long long)with_cls);
      }
  }
  lade__classes_t c;
  int rc = lade__labels_from_folders(t->count, sample_name_of, t, lade__labels_root(t->count, sample_name_of, t), t->labels, &c, "tar source");
  if (rc) return rc;
  t->class_names = c.names;
  t->class_arena = c.arena;
  s->classes = c.n;
  s->labels = t->labels;
  s->class_names = c.n ? (const char *const *)t->class_names : NULL;
  return 0;
}

/* ------------------------------------------------------------ the vtable */

static void tar_close(lade__source_t *s) {
  lade__tar_t *t = s->impl;
  if (!t) return;
  if (t->be) t->be->close(t); /* first: a remote backend's thread reads the shard list */
  if (t->fmt && t->fmt->close) t->fmt->close(t);
  lade__tar_strs_free(&t->shards);
  lade__tar_strs_free(&t->names);
  free(t->shard);
  free(t->shard_off);
  free(t->off);
  free(t->sizes);
  free(t->span);
  free(t->labels);
  free(t->class_names);
  free(t->class_arena);
  free(t);
  s->impl = NULL;
  s->labels = NULL;
  s->sizes = NULL;
  s->class_names = NULL;
}

/* ------------------------------------------------------- remote shards */

/* A source naming remote shards: a URL (a shard, a brace pattern, a list
 * file), or a local list file whose first shard is a URL. */
int lade__tar_source_remote(const char *source) {
  if (lade__tar_is_url(source)) return 1;
  struct stat st;
  if (stat(source, &st) != 0 || !S_ISREG(st.st_mode) || lade__tar_has_suffix(source, ".tar") ||
      lade__tfrec_is_name(source, strlen(source)))
    return 0;
  lade__tar_strs_t one = {0};
  lade__buf_t b = {0};
  int remote = lade__tar_read_small(source, 64u << 20, &b) == 0 && lade__tar_list_lines(&one, &b, ".", source) == 0 &&
               lade__tar_is_url(lade__tar_strs_at(&one, 0));
  lade__clear_error();
  lade__buf_free(&b);
  lade__tar_strs_free(&one);
  return remote;
}

/* The shards the source names (see docs/sources.md). */
static int tar_shards(const lade__tar_t *t, lade__tar_strs_t *out, const char *src) {
  struct stat st;
  if (stat(src, &st) != 0) {
    if (strchr(src, '{')) return lade__tar_brace_expand(out, src, src);
    return lade__fail(errno == ENOENT ? LADE_ENOENT : LADE_EIO, "dataset %s: %s", src, strerror(errno));
  }
  if (S_ISDIR(st.st_mode)) return list_folder(t, out, src);
  if (S_ISREG(st.st_mode) && t->fmt->is_list(src)) return list_file(out, src);
  return lade__tar_strs_push(out, src, strlen(src));
}

/* Indexing the shards at open: up to the backend's index_threads at once
 * (a remote shard's index is a few requests, or one streamed GET, a first
 * open on a parallel file system one sequential read per shard: both wait
 * on latency), in windows of shards whose indexes are then added in shard
 * order, so the samples and the first error are those of the sequential
 * pass and the memory is a window's indexes. Measured: open of 5 remote
 * shards (200 MB at 20 ms per request) 0.45 s sequential, see
 * docs/sources.md; 1,000 remote shards with sidecars: bench/RESULTS.md. */
#define INDEX_THREADS_MAX 64
#define INDEX_WINDOW 64 /* shards, or 2 per thread when more */

typedef struct index_job {
  lade__tar_t *t;
  const struct lade_config *cfg;
  size_t base, n;            /* shards [base, base + n) */
  lade__tar_index_t *x;      /* one per shard of the window */
  int *rc;
  char **msg;                /* the error of a failed shard (its thread's lade_last_error) */
  pthread_mutex_t mu;
  size_t next;               /* the next shard of the window to take (mu) */
} index_job_t;

static void *index_worker(void *arg) {
  index_job_t *j = arg;
  for (;;) {
    pthread_mutex_lock(&j->mu);
    size_t k = j->next < j->n ? j->next++ : SIZE_MAX;
    pthread_mutex_unlock(&j->mu);
    if (k == SIZE_MAX) return NULL;
    j->rc[k] = j->t->be->index(j->t, j->cfg, j->base + k, &j->x[k]);
    if (j->rc[k]) j->msg[k] = lade__strdup(lade_last_error());
  }
}

static int index_all(lade__tar_t *t, const struct lade_config *cfg) {
  size_t want = t->index_threads ? LADE__MIN(t->index_threads, t->be->index_threads) : t->be->index_threads;
  size_t nthreads = LADE__MAX(LADE__MIN(want, (size_t)INDEX_THREADS_MAX), (size_t)1);
  size_t W = LADE__MIN(LADE__MAX((size_t)INDEX_WINDOW, 2 * nthreads), t->shards.n ? t->shards.n : 1);
  index_job_t j = {.t = t, .cfg = cfg};
  j.x = calloc(W, sizeof *j.x);
  j.rc = calloc(W, sizeof *j.rc);
  j.msg = calloc(W, sizeof *j.msg);
  int rc = !j.x || !j.rc || !j.msg ? lade__fail(LADE_ENOMEM, "tar source: out of memory") : 0;
  pthread_mutex_init(&j.mu, NULL);
  for (size_t base = 0; !rc && base < t->shards.n; base += W) {
    j.base = base;
    j.n = LADE__MIN(W, t->shards.n - base);
    j.next = 0;
    pthread_t th[INDEX_THREADS_MAX];
    size_t nth = 0;
    for (; nth < LADE__MIN(nthreads, j.n) - 1; nth++) /* and this thread */
      if (pthread_create(&th[nth], NULL, index_worker, &j) != 0) break;
    index_worker(&j);
    for (size_t i = 0; i < nth; i++) pthread_join(th[i], NULL);
    for (size_t k = 0; k < j.n; k++) {
      if (!rc && j.rc[k]) {
        rc = j.rc[k];
        lade__set_error_text(j.msg[k] ? j.msg[k] : "tar source: indexing failed");
      }
      if (!rc) rc = t->fmt->add(t, (uint32_t)(base + k), &j.x[k]);
      lade__tar_index_free(&j.x[k]);
      free(j.msg[k]);
      j.msg[k] = NULL;
      j.rc[k] = 0;
    }
  }
  pthread_mutex_destroy(&j.mu);
  free(j.x);
  free(j.rc);
  free(j.msg);
  return rc;
}

/* Opens the source with container format f (tar_open, tfr_open). */
static int open_format(lade__source_t *s, const struct lade_config *cfg, const lade__tar_format_t *f) {
  lade__tar_t *t = calloc(1, sizeof *t);
  if (!t) return lade__fail(LADE_ENOMEM, "%s source: out of memory", f->name);
  s->impl = t;
  t->fmt = f;
  t->max_sample = cfg->max_sample_bytes;
  t->want = cfg->transform == LADE__XF_NPY   ? WANT_NPY
            : cfg->transform == LADE__XF_NPZ ? WANT_NPZ
            : cfg->transform == LADE__XF_RAW ? WANT_RAW
                                             : WANT_IMAGE;
  int rc = f->open ? f->open(t, cfg) : 0;
  /* a URL names its shards itself (the backend lists them); a local list
   * file may name URLs */
  if (!rc && !lade__tar_is_url(cfg->source)) rc = tar_shards(t, &t->shards, cfg->source);
  int remote = lade__tar_is_url(cfg->source) || (!rc && lade__tar_is_url(lade__tar_strs_at(&t->shards, 0)));
#ifdef LADE_HAVE_CURL
  t->be = remote ? &lade__tar_http : &lade__tar_local;
#else
  t->be = &lade__tar_local;
  if (!rc && remote)
    rc = lade__fail(LADE_EUNSUPPORTED, "dataset %s: http(s):// shards need libcurl, which this build lacks "
                    "(LADE_WITH_CURL)", cfg->source);
#endif
  if (!rc) rc = t->be->open(t, cfg, s);
  for (size_t i = 0; !rc && i < t->shards.n; i++)
    if (lade__tar_is_url(lade__tar_strs_at(&t->shards, i)) != remote)
      rc = lade__fail(LADE_EINVAL, "dataset %s: shard %s is %s, the first is %s; shards are all local or all remote",
                      cfg->source, lade__tar_strs_at(&t->shards, i), remote ? "local" : "a URL",
                      remote ? "a URL" : "local");
  if (!rc && t->shards.n > UINT32_MAX) rc = lade__fail(LADE_ERANGE, "dataset %s: too many shards", cfg->source);
  if (!rc) rc = index_all(t, cfg);
  if (!rc && t->count == 0) rc = f->empty(t, cfg);
  /* the samples of a shard are consecutive: the offsets of the shards plan
   * (and a tfrecord sample's record number) */
  if (!rc && !(t->shard_off = calloc(t->shards.n + 1, sizeof *t->shard_off)))
    rc = lade__fail(LADE_ENOMEM, "%s source: out of memory", f->name);
  if (!rc) {
    for (uint64_t i = 0; i < t->count; i++) t->shard_off[t->shard[i] + 1]++;
    for (size_t i = 0; i < t->shards.n; i++) t->shard_off[i + 1] += t->shard_off[i];
  }
  if (!rc) rc = f->labels(t, s);
  if (!rc && t->be->start) rc = t->be->start(t);
  if (rc) {
    tar_close(s);
    return rc;
  }
  s->count = t->count;
  s->sizes = t->sizes;
  s->shard_offsets = t->shard_off;
  s->shards = t->shards.n;
  return 0;
}

static int tar_open(lade__source_t *s, const struct lade_config *cfg) { return open_format(s, cfg, &lade__tar_fmt_tar); }

static int tfr_open(lade__source_t *s, const struct lade_config *cfg) {
  return open_format(s, cfg, &lade__tar_fmt_tfrecord);
}

static int tar_empty(lade__tar_t *t, const struct lade_config *cfg) {
  int want = t->want;
  return lade__fail(LADE_EEMPTY, "dataset %s: no samples with a%s member in %zu shard%s (%llu groups without one)",
                    cfg->source,
                    want == WANT_NPY ? " .npy" : want == WANT_NPZ ? " .npz" : want == WANT_RAW ? " data" : "n image",
                    t->shards.n,
                    t->shards.n == 1 ? "" : "s", (unsigned long long)t->skipped);
}

/* A sample's span (the bytes its read takes) through the backend, then the
 * format's finish (tfrecord: the CRC checked, the feature taken). */
static int tar_read(lade__source_t *s, uint64_t idx, lade__buf_t *out) {
  lade__tar_t *t = s->impl;
  /* the shard's index is its own before any of its samples (or sizes) is served */
  int rc = t->be->check_shard ? t->be->check_shard(t, idx) : 0;
  if (rc) return rc;
  uint64_t span = lade__tar_span(t, idx), held = span - t->fmt->tail;
  if (held > t->max_sample || span >= SIZE_MAX) {
    char what[LADE__PATH_MAX + 64];
    t->fmt->what(t, idx, what, sizeof what);
    return lade__fail(LADE_ERANGE, "%s: %s: %llu bytes, more than max_sample_bytes (%llu); not read",
                      lade__tar_strs_at(&t->shards, t->shard[idx]), what, (unsigned long long)held,
                      (unsigned long long)t->max_sample);
  }
  if (span) {
    rc = t->be->read(t, idx, out);
  } else if (!(rc = lade__buf_reserve(out, 1))) {
    out->len = 0;
  }
  if (!rc && t->fmt->finish) rc = t->fmt->finish(t, idx, out);
  return rc;
}

static uint64_t tar_version(lade__source_t *s, uint64_t idx) {
  lade__tar_t *t = s->impl;
  return t->be->version(t, idx);
}

static void tar_describe(lade__source_t *s, uint64_t idx, char *buf, size_t size) {
  lade__tar_t *t = s->impl;
  t->fmt->describe(t, idx, buf, size);
}

/* SHARD/KEY: the shard's path and the sample's key. */
static void tar_fmt_describe(const lade__tar_t *t, uint64_t idx, char *buf, size_t size) {
  const char *name = lade__tar_strs_at(&t->names, idx);
  snprintf(buf, size, "%s/%.*s", lade__tar_strs_at(&t->shards, t->shard[idx]), (int)key_len(name), name);
}

/* member 'NAME' */
static void tar_what(const lade__tar_t *t, uint64_t idx, char *buf, size_t size) {
  snprintf(buf, size, "member '%s'", lade__tar_strs_at(&t->names, idx));
}

static int tar_is_shard(const char *name, size_t len) { return len >= 4 && !memcmp(name + len - 4, ".tar", 4); }

static int tar_is_list(const char *path) { return !lade__tar_has_suffix(path, ".tar"); }

const lade__tar_format_t lade__tar_fmt_tar = {
    .name = "tar",
    .magic = IDX_MAGIC,
    .index_name = "tarindex",
    .shard_kind = ".tar",
    .names = true,
    .is_shard = tar_is_shard,
    .is_list = tar_is_list,
    .walk = tar_walk,
    .bind = tar_bind,
    .check_entry = tar_check_entry,
    .add = tar_add,
    .labels = tar_labels,
    .empty = tar_empty,
    .what = tar_what,
    .describe = tar_fmt_describe};

#ifdef LADE_HAVE_CURL
static int tar_submit(lade__source_t *s, const uint64_t *idx, size_t n, int background) {
  lade__tar_t *t = s->impl;
  return t->be->submit(t, idx, n, background);
}

static bool tar_ready(lade__source_t *s, uint64_t idx) {
  lade__tar_t *t = s->impl;
  return t->be->ready(t, idx);
}

static void tar_reserve(lade__source_t *s, uint64_t samples, uint64_t bytes) {
  lade__tar_t *t = s->impl;
  if (t->be->reserve) t->be->reserve(t, samples, bytes);
}

static void tar_stats(lade__source_t *s, lade__source_stats_t *out) {
  lade__tar_t *t = s->impl;
  if (t && t->be && t->be->stats) t->be->stats(t, out);
  else memset(out, 0, sizeof *out);
}
#endif

/* The four faces of the source: tar shards or TFRecord files (select.c
 * picks by the source), local or remote (remote: submit/ready/stats/reserve,
 * so the engine keeps many Range requests in flight). */
#define TAR_OPS(nm, open_fn) .name = nm, .open = open_fn, .close = tar_close, .read = tar_read, \
                             .describe = tar_describe, .version = tar_version
#define TAR_REMOTE_OPS .submit = tar_submit, .ready = tar_ready, .stats = tar_stats, .reserve = tar_reserve

/* A local shard's member: its data's range in the shard (local tar shards
 * only: the op is not in the tfrecord or remote faces). */
static int tar_extent(lade__source_t *s, uint64_t idx, char *path, size_t size, uint64_t *off, uint64_t *len) {
  lade__tar_t *t = s->impl;
  snprintf(path, size, "%s", lade__tar_strs_at(&t->shards, t->shard[idx]));
  *off = t->off[idx];
  *len = lade__tar_span(t, idx);
  return 0;
}

const lade__source_ops_t lade__source_tar = {TAR_OPS("tar", tar_open), .extent = tar_extent};
const lade__source_ops_t lade__source_tfrecord = {TAR_OPS("tfrecord", tfr_open)};
#ifdef LADE_HAVE_CURL
const lade__source_ops_t lade__source_tar_remote = {TAR_OPS("tar", tar_open), TAR_REMOTE_OPS};
const lade__source_ops_t lade__source_tfrecord_remote = {TAR_OPS("tfrecord", tfr_open), TAR_REMOTE_OPS};
#endif

/* lade.h's lade_shard_index_write_to: the sidecar index of a local shard
 * (tar_local.c writes it) or of a remote one (tar_remote_index.c), in the
 * format the settings and the name choose. */
int lade_shard_index_write_to(const lade_config_t *cfg, const char *shard, const char *out_path) {
  lade_config_t *own = NULL;
  if (!shard) return lade__fail(LADE_EINVAL, "lade_shard_index_write: no shard");
  if (!cfg) {
    int rc = lade_config_create(&own);
    if (rc) return rc;
    cfg = own;
  }
  int rc = 0, url = lade__tar_is_url(shard);
  if (url && !out_path)
    rc = lade__fail(LADE_EINVAL, "%s: a URL; its sidecar index is written to a local file (lade index --to DIR), "
                    "then copied beside it", shard);
  int tfr = cfg->source_type == LADE__SRC_TFRECORD ||
            (cfg->source_type == LADE__SRC_AUTO && lade__tfrec_is_name(shard, strlen(shard)));
  lade__tar_t t = {.fmt = tfr ? &lade__tar_fmt_tfrecord : &lade__tar_fmt_tar, .max_sample = cfg->max_sample_bytes};
  if (!rc && t.fmt->open) rc = t.fmt->open(&t, cfg);
  char out[LADE__PATH_MAX + 64];
  if (!rc && snprintf(out, sizeof out, "%s%s", out_path ? out_path : shard, out_path ? "" : LADE__TAR_SIDECAR_SUFFIX) >=
                 (int)sizeof out)
    rc = lade__fail(LADE_ERANGE, "%s: path too long", out_path ? out_path : shard);
  if (!rc) rc = url ? lade__tar_remote_sidecar(&t, cfg, shard, out) : lade__tar_local_sidecar(&t, shard, out);
  if (t.fmt->close) t.fmt->close(&t);
  lade_config_destroy(own);
  return rc;
}

int lade_shard_index_write(const lade_config_t *cfg, const char *shard) {
  return lade_shard_index_write_to(cfg, shard, NULL);
}
