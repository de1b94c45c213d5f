/*
 * dlio_config.c - DLIO's workload YAML and key=value overrides into
 * dlio_cfg_t (dlio.h, docs/dlio.md).
 *
 * The file is parsed with libyaml into one flat list of (dotted key, scalar)
 * pairs, then every override replaces or adds its pair, then each pair is
 * read through one table of the keys DLIO's LoadConfig reads
 * (utils/config.py). A key is one of:
 *   - emulated: read into the struct; a value that does not parse as the
 *     key's type or choices is an error naming the key and the value;
 *   - not emulated (checkpointing, evaluation, profiling, O_DIRECT, ...):
 *     a warning naming it and what lade does instead, never silence;
 *   - unknown: a warning naming it (a typo must not pass as a default).
 * Defaults are those of DLIO's ConfigArguments. The older key names of
 * MLPerf Storage v1.0 (record_length, model: NAME) are read too.
 */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include <lade/lade.h>

#include "dlio.h"

#ifdef LADE_HAVE_YAML
#include <yaml.h>
#endif

typedef struct kv {
  char key[256];
  char *val;     /* NULL: a mapping or sequence (no scalar) */
  int line;      /* 0: an override */
} kv_t;

typedef struct kvs {
  kv_t *a;
  size_t n, cap;
} kvs_t;

static int fail(char *err, size_t errlen, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(err, errlen, fmt, ap);
  va_end(ap);
  return -1;
}

static int kvs_set(kvs_t *s, const char *key, const char *val, int line) {
  for (size_t i = 0; i < s->n; i++)
    if (!strcmp(s->a[i].key, key)) {
      free(s->a[i].val);
      s->a[i].val = val ? strdup(val) : NULL;
      s->a[i].line = line;
      return 0;
    }
  if (s->n == s->cap) {
    size_t cap = s->cap ? s->cap * 2 : 64;
    kv_t *a = realloc(s->a, cap * sizeof *a);
    if (!a) return -1;
    s->a = a;
    s->cap = cap;
  }
  kv_t *k = &s->a[s->n++];
  snprintf(k->key, sizeof k->key, "%s", key);
  k->val = val ? strdup(val) : NULL;
  k->line = line;
  return 0;
}

static void kvs_free(kvs_t *s) {
  for (size_t i = 0; i < s->n; i++) free(s->a[i].val);
  free(s->a);
  memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------ YAML */

#ifdef LADE_HAVE_YAML
/* Flattens node into prefix.key pairs; a sequence is kept as one pair with
 * its items joined by ',' (DLIO's lists: iostat_devices, record_dims). */
static int flatten(yaml_document_t *doc, yaml_node_t *node, const char *prefix, kvs_t *out, int depth) {
  if (!node || depth > 16) return 0;
  if (node->type == YAML_SCALAR_NODE)
    return prefix[0] ? kvs_set(out, prefix, (const char *)node->data.scalar.value, (int)node->start_mark.line + 1) : 0;
  if (node->type == YAML_SEQUENCE_NODE) {
    char joined[1024] = "";
    size_t n = 0;
    for (yaml_node_item_t *it = node->data.sequence.items.start; it < node->data.sequence.items.top; it++) {
      yaml_node_t *c = yaml_document_get_node(doc, *it);
      if (c && c->type == YAML_SCALAR_NODE)
        n += (size_t)snprintf(joined + n, n < sizeof joined ? sizeof joined - n : 0, "%s%s", n ? "," : "",
                              (const char *)c->data.scalar.value);
    }
    return kvs_set(out, prefix, joined, (int)node->start_mark.line + 1);
  }
  if (node->type != YAML_MAPPING_NODE) return 0;
  if (prefix[0] && kvs_set(out, prefix, NULL, (int)node->start_mark.line + 1)) return -1; /* the section itself */
  for (yaml_node_pair_t *p = node->data.mapping.pairs.start; p < node->data.mapping.pairs.top; p++) {
    yaml_node_t *k = yaml_document_get_node(doc, p->key);
    if (!k || k->type != YAML_SCALAR_NODE) continue;
    char key[256];
    snprintf(key, sizeof key, "%s%s%s", prefix, prefix[0] ? "." : "", (const char *)k->data.scalar.value);
    if (flatten(doc, yaml_document_get_node(doc, p->value), key, out, depth + 1)) return -1;
  }
  return 0;
}

static int load_yaml(const char *path, kvs_t *out, char *err, size_t errlen) {
  FILE *f = fopen(path, "rb");
  if (!f) return fail(err, errlen, "cannot open workload file %s: %s", path, strerror(errno));
  yaml_parser_t p;
  yaml_document_t doc;
  yaml_parser_initialize(&p);
  yaml_parser_set_input_file(&p, f);
  int rc = 0;
  if (!yaml_parser_load(&p, &doc)) {
    rc = fail(err, errlen, "%s: line %zu column %zu: %s", path, p.problem_mark.line + 1, p.problem_mark.column + 1,
              p.problem ? p.problem : "not YAML");
  } else {
    yaml_node_t *root = yaml_document_get_root_node(&doc);
    if (root && root->type != YAML_MAPPING_NODE) rc = fail(err, errlen, "%s: the workload is not a mapping", path);
    else if (root && flatten(&doc, root, "", out, 0)) rc = fail(err, errlen, "out of memory reading %s", path);
    yaml_document_delete(&doc);
  }
  yaml_parser_delete(&p);
  fclose(f);
  return rc;
}
#endif

/* ------------------------------------------------------------ values */

static int parse_bool(const char *v, bool *out) {
  static const char *const yes[] = {"true", "True", "TRUE", "yes", "Yes", "on", "On", "1", NULL};
  static const char *const no[] = {"false", "False", "FALSE", "no", "No", "off", "Off", "0", NULL};
  for (int i = 0; yes[i]; i++)
    if (!strcmp(v, yes[i])) return *out = true, 0;
  for (int i = 0; no[i]; i++)
    if (!strcmp(v, no[i])) return *out = false, 0;
  return -1;
}

static int parse_f64(const char *v, double *out) {
  char *end;
  errno = 0;
  double d = strtod(v, &end);
  if (end == v || *end || errno || !isfinite(d)) return -1;
  *out = d;
  return 0;
}

/* A count: an integer (DLIO's int() also takes 1e3 written as a float) >= 0. */
static int parse_u64(const char *v, uint64_t *out) {
  double d;
  if (parse_f64(v, &d) || d < 0 || d > 1.8e19 || d != floor(d)) return -1;
  char *end;
  errno = 0;
  unsigned long long u = strtoull(v, &end, 10);
  *out = (!*end && !errno) ? (uint64_t)u : (uint64_t)d;
  return 0;
}

typedef enum { K_STR, K_U64, K_U32, K_I64, K_F64, K_BOOL, K_ENUM, K_DIST, K_NOT, K_NOTE } ktype_t;

typedef struct key {
  const char *key;
  ktype_t t;
  size_t off, size;
  const char *choices; /* K_ENUM: "a|b|c"; K_NOT/K_NOTE: what lade does instead */
} key_t_;

#define F(field) offsetof(dlio_cfg_t, field), sizeof(((dlio_cfg_t *)0)->field)
#define NONE 0, 0

/* Every key DLIO's LoadConfig reads. */
static const key_t_ keys[] = {
    {"framework", K_ENUM, F(framework), "pytorch|tensorflow"},
    {"model", K_STR, F(model), NULL}, /* MLPerf Storage v1.0: model: unet3d */
    {"model.name", K_STR, F(model), NULL},
    {"model.type", K_NOT, NONE, "sizes DLIO's checkpoints; checkpointing is not emulated"},
    {"model.model_size", K_NOT, NONE, "sizes DLIO's checkpoints; checkpointing is not emulated"},
    {"model.model_size_bytes", K_NOT, NONE, "sizes DLIO's checkpoints; checkpointing is not emulated"},
    {"workflow.generate_data", K_BOOL, F(generate_data), NULL},
    {"workflow.train", K_BOOL, F(train), NULL},
    {"workflow.checkpoint", K_NOT, NONE, "checkpointing is not emulated: no checkpoint is written or timed"},
    {"workflow.evaluation", K_NOT, NONE, "evaluation is not emulated: only the training epochs run"},
    {"workflow.profiling", K_NOT, NONE, "DLIO's profilers are not run; lade's `trace` setting writes a trace"},
    {"storage.storage_type", K_ENUM, NONE, "local_fs|parallel_fs|s3"},
    {"storage.storage_root", K_STR, NONE, NULL},
    {"storage.storage_options", K_NOT, NONE, "S3 credentials come from AWS_* variables or lade.s3_* settings"},
    {"dataset.data_folder", K_STR, F(data_folder), NULL},
    {"dataset.format", K_ENUM, F(format), "npz|tfrecord"},
    {"dataset.num_files_train", K_U64, F(num_files_train), NULL},
    {"dataset.num_files_eval", K_U64, F(num_files_eval), NULL},
    {"dataset.num_samples_per_file", K_U64, F(num_samples_per_file), NULL},
    {"dataset.num_subfolders_train", K_U64, F(num_subfolders_train), NULL},
    {"dataset.num_subfolders_eval", K_U64, F(num_subfolders_eval), NULL},
    {"dataset.record_length_bytes", K_F64, F(record_length), NULL},
    {"dataset.record_length_bytes_stdev", K_F64, F(record_length_stdev), NULL},
    {"dataset.record_length_bytes_resize", K_F64, F(record_length_resize), NULL},
    {"dataset.record_length", K_F64, F(record_length), NULL}, /* MLPerf Storage v1.0 names */
    {"dataset.record_length_stdev", K_F64, F(record_length_stdev), NULL},
    {"dataset.record_length_resize", K_F64, F(record_length_resize), NULL},
    {"dataset.compression", K_STR, F(compression), NULL},
    {"dataset.file_prefix", K_STR, F(file_prefix), NULL},
    {"dataset.compression_level", K_NOT, NONE, "DLIO's generators write uncompressed files, and so does datagen"},
    {"dataset.generation_buffer_size", K_NOTE, NONE, "datagen streams each file with 4 MiB writes"},
    {"dataset.keep_files", K_NOT, NONE, "the dataset is never deleted"},
    {"dataset.enable_chunking", K_NOT, NONE, "HDF5 only"},
    {"dataset.chunk_size", K_NOT, NONE, "HDF5 only"},
    {"dataset.record_element_bytes", K_NOT, NONE, "records are uint8 bytes"},
    {"dataset.record_element_type", K_NOT, NONE, "records are uint8 bytes"},
    {"dataset.record_dims", K_NOT, NONE, "record shapes come from record_length_bytes"},
    {"reader.data_loader", K_ENUM, F(data_loader), "pytorch|tensorflow"},
    {"reader.read_threads", K_U32, F(read_threads), NULL},
    {"reader.computation_threads", K_NOTE, NONE, "lade's read_threads also parse the records"},
    {"reader.batch_size", K_U32, F(batch_size), NULL},
    {"reader.prefetch_size", K_U32, F(prefetch_size), NULL},
    {"reader.shuffle_size", K_U64, F(shuffle_size), NULL},
    {"reader.file_shuffle", K_ENUM, F(file_shuffle), "off|seed|random"},
    {"reader.sample_shuffle", K_ENUM, F(sample_shuffle), "off|seed|random"},
    {"reader.preprocess_time", K_DIST, F(preprocess_time), NULL},
    {"reader.preprocess_time_stdev", K_DIST, NONE, NULL}, /* read with the dist */
    {"reader.batch_size_eval", K_NOT, NONE, "evaluation is not emulated"},
    {"reader.transfer_size", K_NOT, NONE, "lade reads whole records (one pread or Range request each)"},
    {"reader.odirect", K_NOT, NONE, "lade reads through the page cache; lade.evict_cache=1 drops it before each epoch"},
    {"reader.dont_use_mmap", K_NOTE, NONE, "lade does not map files"},
    {"reader.read_type", K_NOT, NONE, "every sample is read on demand"},
    {"reader.file_access", K_NOT, NONE, "every rank opens its own files"},
    {"reader.pin_memory", K_NOTE, NONE, "batches are host memory"},
    {"reader.multiprocessing_context", K_NOTE, NONE, "lade's readers are threads"},
    {"reader.data_loader_sampler", K_NOTE, NONE, "the sampler follows reader.data_loader"},
    {"reader.reader_classname", K_NOT, NONE, "custom readers are Python classes"},
    {"reader.data_loader_classname", K_NOT, NONE, "custom loaders are Python classes"},
    {"reader.transformed_record_dims", K_NOT, NONE, "batches hold record_length_bytes_resize bytes per sample"},
    {"reader.transformed_record_element_type", K_NOT, NONE, "batches are uint8"},
    {"train.epochs", K_U64, F(epochs), NULL},
    {"train.total_training_steps", K_I64, F(total_training_steps), NULL},
    {"train.seed_change_epoch", K_BOOL, F(seed_change_epoch), NULL},
    {"train.seed", K_U64, F(seed), NULL},
    {"train.computation_time", K_DIST, F(computation_time), NULL},
    {"train.computation_time_stdev", K_DIST, NONE, NULL}, /* read with the dist */
    {"evaluation", K_NOT, NONE, "evaluation is not emulated"},
    {"checkpoint", K_NOT, NONE, "checkpointing is not emulated"},
    {"profiling", K_NOT, NONE, "DLIO's profilers are not run"},
    {"metric.au", K_F64, F(au), NULL},
    {"output.folder", K_STR, F(output_folder), NULL},
    {"output.log_file", K_STR, F(log_file), NULL},
    {"output.metric.exclude_start_steps", K_U64, F(exclude_start), NULL},
    {"output.metric.exclude_end_steps", K_U64, F(exclude_end), NULL},
    {"metric.exclude_start_steps", K_U64, F(exclude_start), NULL}, /* as the field says it */
    {"metric.exclude_end_steps", K_U64, F(exclude_end), NULL},
};

void dlio_cfg_default(dlio_cfg_t *c) {
  memset(c, 0, sizeof *c);
  snprintf(c->model, sizeof c->model, "default");
  c->framework = DLIO_FW_TENSORFLOW;
  c->data_loader = -1; /* from the framework */
  c->train = true;
  snprintf(c->data_folder, sizeof c->data_folder, "./data");
  c->format = DLIO_FMT_TFRECORD;
  c->num_files_train = 8;
  c->num_samples_per_file = 1;
  c->record_length = 64 * 1024;
  snprintf(c->compression, sizeof c->compression, "none");
  snprintf(c->file_prefix, sizeof c->file_prefix, "img");
  c->read_threads = 1;
  c->computation_threads = 1;
  c->batch_size = 1;
  c->prefetch_size = 2;
  c->shuffle_size = 1024;
  c->epochs = 1;
  c->total_training_steps = -1;
  c->seed_change_epoch = true;
  c->seed = 123;
  c->au = 0.90;
  c->exclude_start = 1;
  snprintf(c->log_file, sizeof c->log_file, "dlio.log");
  snprintf(c->plan, sizeof c->plan, "dlio");
}

void dlio_cfg_free(dlio_cfg_t *c) {
  free(c->lade_sets);
  c->lade_sets = NULL;
  c->nlade_sets = 0;
}

static int enum_index(const char *choices, const char *v) {
  size_t n = strlen(v);
  int i = 0;
  for (const char *p = choices; *p; i++) {
    const char *bar = strchr(p, '|');
    size_t len = bar ? (size_t)(bar - p) : strlen(p);
    if (len == n && !strncasecmp(p, v, n)) return i;
    if (!bar) break;
    p = bar + 1;
  }
  return -1;
}

static const key_t_ *find_key(const char *k) {
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++)
    if (!strcmp(keys[i].key, k)) return &keys[i];
  return NULL;
}

/* The section a key belongs to when the section as a whole is not
 * emulated (checkpoint.*, evaluation.*, profiling.*). */
static const key_t_ *section_not_emulated(const char *k) {
  for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
    size_t n = strlen(keys[i].key);
    if (keys[i].t == K_NOT && !strncmp(k, keys[i].key, n) && k[n] == '.') return &keys[i];
  }
  return NULL;
}

static void where(const kv_t *kv, char *buf, size_t size) {
  if (kv->line) snprintf(buf, size, " (line %d)", kv->line);
  else snprintf(buf, size, " (override)");
}

/* A distribution key: `key: 0.3`, or a mapping key.type/mean/stdev/min/max/
 * shape/scale/lam, or key_stdev beside it. */
static int read_dist(const kvs_t *s, const char *base, dlio_dist_t *d, char *err, size_t errlen) {
  static const char *const fields[] = {"mean", "stdev", "min", "max", "shape", "scale", "lam"};
  double *dst[] = {&d->mean, &d->stdev, &d->min, &d->max, &d->shape, &d->scale, &d->lam};
  size_t bl = strlen(base);
  bool any = false;
  char type[32] = "";
  for (size_t i = 0; i < s->n; i++) {
    const kv_t *kv = &s->a[i];
    char w[32];
    where(kv, w, sizeof w);
    if (!strcmp(kv->key, base) && kv->val) {
      if (parse_f64(kv->val, &d->mean))
        return fail(err, errlen, "%s%s: '%s' is not a number of seconds or a distribution", base, w, kv->val);
      d->has_mean = any = true;
    } else if (!strncmp(kv->key, base, bl) && kv->key[bl] == '.' && kv->val) {
      const char *f = kv->key + bl + 1;
      if (!strcmp(f, "type")) {
        snprintf(type, sizeof type, "%s", kv->val);
        any = true;
        continue;
      }
      size_t j = 0;
      while (j < 7 && strcmp(f, fields[j])) j++;
      if (j == 7) return fail(err, errlen, "%s%s: unknown field '%s' (mean, stdev, min, max, shape, scale, lam, type)",
                              kv->key, w, f);
      if (parse_f64(kv->val, dst[j])) return fail(err, errlen, "%s%s: '%s' is not a number", kv->key, w, kv->val);
      if (j == 0) d->has_mean = true;
      if (j == 1) d->has_stdev = true;
      any = true;
    } else if (!strncmp(kv->key, base, bl) && !strcmp(kv->key + bl, "_stdev") && kv->val) {
      if (parse_f64(kv->val, &d->stdev)) return fail(err, errlen, "%s%s: '%s' is not a number", kv->key, w, kv->val);
      d->has_stdev = any = true;
    }
  }
  if (!any) return 0;
  if (type[0]) {
    int t = enum_index("normal|uniform|gamma|exponential|poisson", type);
    if (t < 0)
      return fail(err, errlen, "%s.type: '%s' is not one of normal, uniform, gamma, exponential, poisson", base, type);
    d->type = DLIO_DIST_NORMAL + t;
  } else {
    d->type = d->has_stdev ? DLIO_DIST_NORMAL : DLIO_DIST_FIXED;
  }
  return 0;
}

/* A key DLIO's configuration does not have: the parts of a distribution
 * and the sections pass, a section lade does not emulate and any other
 * key are a warning. */
static void unknown_key(dlio_cfg_t *c, const kv_t *kv, const char *w) {
  /* the parts of a distribution, and sections */
  if (!strncmp(kv->key, "train.computation_time.", 23) || !strncmp(kv->key, "reader.preprocess_time.", 23))
    return;
  const key_t_ *sec = section_not_emulated(kv->key);
  if (sec) {
    fprintf(stderr, "lade dlio: warning: %s%s is not emulated: %s\n", kv->key, w, sec->choices);
    c->warnings++;
    return;
  }
  if (!kv->val) { /* a section: its keys say more */
    static const char *const sections[] = {"model", "framework", "workflow", "storage", "dataset", "reader",
                                           "data_reader", "train", "metric", "output", "output.metric", NULL};
    bool known = false;
    for (int j = 0; sections[j]; j++) known |= !strcmp(kv->key, sections[j]);
    if (known) return;
  }
  fprintf(stderr, "lade dlio: warning: unknown key %s%s is ignored (DLIO's configuration has no such key)\n",
          kv->key, w);
  c->warnings++;
}

/* The value of key k (kv, w: where it was given) into its field of c; the
 * storage keys into storage_type and storage_root (32 and DLIO_PATH bytes),
 * read after all keys. */
static int set_key(dlio_cfg_t *c, const key_t_ *k, const kv_t *kv, const char *w, char *storage_type,
                   char *storage_root, char *err, size_t errlen) {
  void *dst = (char *)c + k->off;
  const char *v = kv->val;
  int bad = 0;
  switch (k->t) {
    case K_STR:
      if (!strcmp(k->key, "storage.storage_root")) snprintf(storage_root, DLIO_PATH, "%s", v);
      else if (strlen(v) >= k->size) bad = 1;
      else snprintf(dst, k->size, "%s", v);
      break;
    case K_U64: bad = parse_u64(v, dst); break;
    case K_U32: {
      uint64_t u;
      bad = parse_u64(v, &u) || u > UINT32_MAX;
      if (!bad) *(uint32_t *)dst = (uint32_t)u;
      break;
    }
    case K_I64: {
      double d;
      bad = parse_f64(v, &d) || d != floor(d) || fabs(d) > 9e18;
      if (!bad) *(int64_t *)dst = (int64_t)d;
      break;
    }
    case K_F64: bad = parse_f64(v, dst) || *(double *)dst < 0; break;
    case K_BOOL: bad = parse_bool(v, dst); break;
    case K_ENUM: {
      int e = enum_index(k->choices, v);
      if (!strcmp(k->key, "storage.storage_type")) {
        bad = e < 0;
        snprintf(storage_type, 32, "%s", v);
      } else if (e < 0) {
        bad = 1;
      } else {
        *(int *)dst = e;
      }
      break;
    }
    case K_DIST: break; /* read_dist, after all keys */
    case K_NOT:
      fprintf(stderr, "lade dlio: warning: %s%s = %s is not emulated: %s\n", kv->key, w, v, k->choices);
      c->warnings++;
      break;
    case K_NOTE:
      fprintf(stderr, "lade dlio: note: %s%s = %s: %s\n", kv->key, w, v, k->choices);
      break;
  }
  if (bad && k->t == K_ENUM)
    return fail(err, errlen, "%s%s: '%s' is not one of %s%s", kv->key, w, v, k->choices,
                !strcmp(k->key, "dataset.format") ? " (the formats lade reads as DLIO writes them)" : "");
  if (bad && k->t == K_STR) return fail(err, errlen, "%s%s: '%s' is longer than %zu bytes", kv->key, w, v, k->size - 1);
  if (bad)
    return fail(err, errlen, "%s%s: '%s' is not %s", kv->key, w, v,
                k->t == K_BOOL  ? "a boolean (True/False)"
                : k->t == K_F64 ? "a number >= 0"
                : k->t == K_I64 ? "an integer"
                                : "a whole number >= 0");
  return 0;
}

/* lade's own keys (lade.*): the plan, evict_cache, log_samples, and any
 * other as a loader setting. */
static int apply_lade(dlio_cfg_t *c, const kvs_t *s, char *err, size_t errlen) {
  for (size_t i = 0; i < s->n; i++) {
    const kv_t *kv = &s->a[i];
    if (strncmp(kv->key, "lade.", 5) || !kv->val) continue;
    const char *k = kv->key + 5;
    if (!strcmp(k, "plan")) {
      if (strlen(kv->val) >= sizeof c->plan) return fail(err, errlen, "lade.plan: '%s' is too long", kv->val);
      snprintf(c->plan, sizeof c->plan, "%s", kv->val);
    } else if (!strcmp(k, "evict_cache") || !strcmp(k, "log_samples")) {
      if (parse_bool(kv->val, k[0] == 'e' ? &c->evict_cache : &c->log_samples))
        return fail(err, errlen, "%s: '%s' is not a boolean", kv->key, kv->val);
    } else {
      void *a = realloc(c->lade_sets, (c->nlade_sets + 1) * sizeof *c->lade_sets);
      if (!a) return fail(err, errlen, "out of memory");
      c->lade_sets = a;
      if (strlen(k) >= 512 || strlen(kv->val) >= 512) return fail(err, errlen, "%s: too long", kv->key);
      snprintf(c->lade_sets[c->nlade_sets][0], 512, "%s", k);
      snprintf(c->lade_sets[c->nlade_sets][1], 512, "%s", kv->val);
      c->nlade_sets++;
    }
  }
  return 0;
}

static int apply(dlio_cfg_t *c, const kvs_t *s, char *err, size_t errlen) {
  char storage_type[32] = "", storage_root[DLIO_PATH] = "";
  for (size_t i = 0; i < s->n; i++) {
    const kv_t *kv = &s->a[i];
    char w[32];
    where(kv, w, sizeof w);
    if (!strncmp(kv->key, "lade.", 5)) continue; /* lade's own, below */
    const key_t_ *k = find_key(kv->key);
    if (!k) {
      unknown_key(c, kv, w);
      continue;
    }
    if (!kv->val && k->t != K_NOT && k->t != K_NOTE && strcmp(k->key, "model") != 0)
      return fail(err, errlen, "%s%s: expected a value, found a section", kv->key, w);
    if (!kv->val) continue;
    if (set_key(c, k, kv, w, storage_type, storage_root, err, errlen)) return -1;
  }
  if (read_dist(s, "train.computation_time", &c->computation_time, err, errlen) ||
      read_dist(s, "reader.preprocess_time", &c->preprocess_time, err, errlen))
    return -1;
  /* storage: an s3 root is the bucket the data folder is in (DLIO's layout) */
  if (!strcasecmp(storage_type, "s3") && !strstr(c->data_folder, "://")) {
    if (!storage_root[0] || !strcmp(storage_root, "./"))
      return fail(err, errlen, "storage.storage_type=s3 needs storage.storage_root (the bucket)");
    char tmp[2 * DLIO_PATH + 8];
    const char *df = c->data_folder;
    while (df[0] == '.' && df[1] == '/') df += 2;
    snprintf(tmp, sizeof tmp, "s3://%s/%s", storage_root, df);
    if (strlen(tmp) >= sizeof c->data_folder) return fail(err, errlen, "storage.storage_root + data_folder: too long");
    snprintf(c->data_folder, sizeof c->data_folder, "%s", tmp);
  }
  size_t dl = strlen(c->data_folder);
  while (dl > 1 && c->data_folder[dl - 1] == '/') c->data_folder[--dl] = '\0'; /* DLIO's rstrip('/') */
  if (c->data_loader < 0) c->data_loader = c->framework;
  if (c->au > 1) return fail(err, errlen, "metric.au: %g is more than 1 (a fraction: 0.90 is 90%%)", c->au);
  if (!c->batch_size) return fail(err, errlen, "reader.batch_size: 0 is not a batch");
  if (!c->num_samples_per_file) return fail(err, errlen, "dataset.num_samples_per_file: 0");
  if (!c->num_files_train && c->train) return fail(err, errlen, "dataset.num_files_train: 0 files to train on");
  if (c->record_length < 1) return fail(err, errlen, "dataset.record_length_bytes: %g is less than one byte",
                                        c->record_length);
  return apply_lade(c, s, err, errlen);
}

int dlio_cfg_load(dlio_cfg_t *c, const char *yaml_path, int noverrides, char **overrides, char *err, size_t errlen) {
  kvs_t s = {0};
  int rc = 0;
  if (yaml_path) {
#ifdef LADE_HAVE_YAML
    rc = load_yaml(yaml_path, &s, err, errlen);
#else
    rc = fail(err, errlen, "this lade was built without libyaml (LADE_WITH_YAML; apt-get install libyaml-dev): give "
              "the workload as key=value overrides");
#endif
  }
  for (int i = 0; !rc && i < noverrides; i++) {
    const char *o = overrides[i];
    const char *eq = strchr(o, '=');
    if (!eq || eq == o) {
      rc = fail(err, errlen, "override '%s' is not KEY=VALUE (e.g. dataset.num_files_train=64)", o);
      break;
    }
    char key[256];
    size_t kl = (size_t)(eq - o);
    if (kl >= sizeof key) kl = sizeof key - 1;
    memcpy(key, o, kl);
    key[kl] = '\0';
    const char *k = key;
    while (*k == '+') k++; /* Hydra's ++ */
    if (!strncmp(k, "workload.", 9)) k += 9;
    /* data_reader is DLIO's other name of the reader section */
    char alias[256];
    if (!strncmp(k, "data_reader.", 12)) {
      snprintf(alias, sizeof alias, "reader.%s", k + 12);
      k = alias;
    }
    /* a scalar override of a distribution replaces its parts */
    if (kvs_set(&s, k, eq + 1, 0)) rc = fail(err, errlen, "out of memory");
  }
  /* the YAML's data_reader section is reader */
  for (size_t i = 0; !rc && i < s.n; i++)
    if (!strncmp(s.a[i].key, "data_reader.", 12)) {
      char k[256];
      snprintf(k, sizeof k, "reader.%s", s.a[i].key + 12);
      snprintf(s.a[i].key, sizeof s.a[i].key, "%s", k);
    }
  if (!rc) rc = apply(c, &s, err, errlen);
  kvs_free(&s);
  return rc;
}

/* ------------------------------------------------------------ names, draws */

static int digits(uint64_t n) { /* at most 20 */
  int d = 1;
  while (n >= 10) n /= 10, d++;
  return d;
}

void dlio_file_name(const dlio_cfg_t *c, bool eval, uint64_t i, char *buf, size_t size) {
  uint64_t n = eval ? c->num_files_eval : c->num_files_train;
  uint64_t sub = eval ? c->num_subfolders_eval : c->num_subfolders_train;
  const char *ext = c->format == DLIO_FMT_NPZ ? "npz" : "tfrecord";
  const char *part = eval ? "valid" : "train";
  char sf[48] = "", num[48];
  if (sub > 1) snprintf(sf, sizeof sf, "%0*llu/", digits(sub) & 31, (unsigned long long)(i % sub));
  snprintf(num, sizeof num, "%0*llu", digits(n) & 31, (unsigned long long)i);
  snprintf(buf, size, "%s/%s/%s%s_%s_of_%llu.%s", c->data_folder, part, sf, c->file_prefix, num,
           (unsigned long long)n, ext);
}

/* Uniform [0, 1) from (seed, a, b, k): splitmix64 of a counter. */
static double unif(uint64_t seed, uint64_t a, uint64_t b, uint64_t k) {
  uint64_t z = seed * 0x9E3779B97F4A7C15ull ^ a * 0xBF58476D1CE4E5B9ull ^ b * 0x94D049BB133111EBull ^ (k + 1);
  for (int i = 0; i < 2; i++) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
  }
  return (double)(z >> 11) / 9007199254740992.0;
}

static double std_normal(uint64_t seed, uint64_t a, uint64_t b, uint64_t *k) {
  double u1 = unif(seed, a, b, (*k)++), u2 = unif(seed, a, b, (*k)++);
  if (u1 < 1e-300) u1 = 1e-300;
  return sqrt(-2 * log(u1)) * cos(2 * M_PI * u2);
}

/* Marsaglia-Tsang for shape >= 1, boosted below 1. */
static double gamma_draw(double shape, uint64_t seed, uint64_t a, uint64_t b, uint64_t *k) {
  if (shape <= 0) return 0;
  if (shape < 1) {
    double u = unif(seed, a, b, (*k)++);
    return gamma_draw(shape + 1, seed, a, b, k) * pow(u, 1 / shape);
  }
  double d = shape - 1.0 / 3, cc = 1 / sqrt(9 * d);
  for (int tries = 0; tries < 1000; tries++) {
    double x = std_normal(seed, a, b, k), v = 1 + cc * x;
    if (v <= 0) continue;
    v = v * v * v;
    double u = unif(seed, a, b, (*k)++);
    if (log(u) < 0.5 * x * x + d - d * v + d * log(v)) return d * v;
  }
  return d;
}

double dlio_dist_draw(const dlio_dist_t *d, uint64_t seed, uint64_t a, uint64_t b) {
  uint64_t k = 0;
  double v = 0;
  switch (d->type) {
    case DLIO_DIST_NONE: return 0;
    case DLIO_DIST_FIXED: v = d->mean; break;
    case DLIO_DIST_NORMAL: v = d->mean + d->stdev * std_normal(seed, a, b, &k); break;
    case DLIO_DIST_UNIFORM: v = d->min + (d->max - d->min) * unif(seed, a, b, k); break;
    case DLIO_DIST_GAMMA: v = gamma_draw(d->shape, seed, a, b, &k) * d->scale; break;
    case DLIO_DIST_EXPONENTIAL: v = -log(1 - unif(seed, a, b, k)) * d->scale; break;
    case DLIO_DIST_POISSON: { /* Knuth; small lambdas are what a step time takes */
      double L = exp(-d->lam), p = 1;
      int n = -1;
      do {
        p *= unif(seed, a, b, k++);
        n++;
      } while (p > L && n < 100000);
      v = n;
      break;
    }
  }
  return fabs(v);
}
