/*
 * index.c - `lade index SHARD...`: writes the sidecar index of each local
 * tar shard (or TFRecord file) beside it, SHARD.ladeidx, for shards that
 * other tools wrote (`lade pack` writes its own); with --to DIR, of local or
 * remote shards (http(s)://, s3://: one streamed GET each) into DIR. Copied with the shards to
 * a web server or a bucket, the sidecars let a remote open fetch one small
 * file per shard instead of reading every shard whole (docs/sources.md,
 * "Sidecar indexes"). The library does the work (lade_shard_index_write_to);
 * this is its command line.
 */
#include <errno.h>
#include <getopt.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "lade/lade.h"
#include "pack.h"
#include "shown.h"

static int usage_index(FILE *f) {
  fprintf(f,
          "usage: lade index SHARD... [--to DIR] [--jobs N] [--set key=value ...]\n\n"
          "Writes SHARD.ladeidx beside each local WebDataset tar shard (or TFRecord file:\n"
          "a .tfrecord name, or --set source_type=tfrecord), replacing one there. It holds\n"
          "every member's offset and size, bound to the shard by its size and sampled member\n"
          "headers (not its mtime, so it survives a copy). Upload it beside the shard: a\n"
          "remote open (http(s)://, s3://) fetches it instead of reading the shard whole, and\n"
          "ignores it (counted in sidecar_rejected, said on stderr) if it is not that shard's.\n"
          "A TFRecord index depends on tfrecord_feature and tfrecord_label: --set them as the\n"
          "loader will. `lade pack` writes sidecars for the shards it writes.\n\n"
          "--to DIR writes DIR/NAME.ladeidx instead (NAME: the shard's file name; DIR is\n"
          "made), for local shards or remote ones: an http(s):// or s3:// URL is read once as\n"
          "a streamed GET (no copy on disk; --set s3_endpoint=..., tls_ca_file=... as for the\n"
          "loader), and its sidecar is the one a local copy would get. Then copy DIR's\n"
          "files beside the shards (e.g. aws s3 cp DIR s3://bucket/prefix/ --recursive).\n\n"
          "--jobs N indexes N shards at once (default 8; one stream each): an object store\n"
          "serves each stream at a bounded rate. The output lists them in the given order.\n");
  return f == stderr ? 2 : 0;
}

/* The shards to index, taken in turn by the --jobs threads; each one's
 * output path, or its error, kept for printing in the given order. */
typedef struct job {
  const lade_config_t *cfg;
  char **shards;
  const char *to;
  int n;
  int next; /* the next shard to take (atomic) */
  char **out, **err;
} job_t;

/* Shard i's sidecar: 0 with its path in j->out[i], or 1 with the error in j->err[i]. */
static int index_one(job_t *j, int i) {
  char out[8192];
  const char *sh = j->shards[i], *base = strrchr(sh, '/');
  base = base ? base + 1 : sh;
  if (j->to && (!base[0] || snprintf(out, sizeof out, "%s/%s.ladeidx", j->to, base) >= (int)sizeof out)) {
    snprintf(out, sizeof out, "%s: no file name to write %s/NAME.ladeidx for, or too long", sh, j->to);
    j->err[i] = strdup(out);
    return 1;
  }
  if (lade_shard_index_write_to(j->cfg, sh, j->to ? out : NULL)) {
    j->err[i] = strdup(lade_tool_error());
    return 1;
  }
  if (!j->to) snprintf(out, sizeof out, "%s.ladeidx", sh);
  j->out[i] = strdup(out);
  return 0;
}

static void *index_thread(void *arg) {
  job_t *j = arg;
  for (int i; (i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED)) < j->n;) index_one(j, i);
  return NULL;
}

int lade_tool_index(int argc, char **argv) {
  static const struct option opts[] = {{"set", required_argument, 0, 'S'}, {"to", required_argument, 0, 't'},
                                       {"jobs", required_argument, 0, 'j'}, {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  lade_config_t *cfg = NULL;
  if (lade_config_create(&cfg)) return 1;
  int c, bad = 0;
  const char *to = NULL;
  long jobs = 8;
  optind = 1;
  while (!bad && (c = getopt_long(argc, argv, "S:t:j:h", opts, NULL)) != -1) {
    if (c == 'h') {
      lade_config_destroy(cfg);
      return usage_index(stdout);
    }
    if (c == 't') {
      to = optarg;
    } else if (c == 'j') {
      char *end;
      jobs = strtol(optarg, &end, 10);
      if (*end || jobs < 1 || jobs > 256) {
        fprintf(stderr, "lade index: --jobs takes a whole number from 1 to 256, not '%s'\n", optarg);
        bad = 2;
      }
    } else if (c != 'S') {
      bad = 2;
    } else if (lade_config_parse(cfg, optarg)) {
      fprintf(stderr, "lade index: %s\n", lade_tool_error());
      bad = 2;
    }
  }
  if (!bad && optind >= argc) bad = usage_index(stderr);
  if (!bad && to && mkdir(to, 0777) != 0 && errno != EEXIST) {
    fprintf(stderr, "lade index: cannot make %s: %s\n", to, strerror(errno));
    bad = 1;
  }
  int failed = 0, n = argc - optind;
  job_t j = {cfg, argv + optind, to, n, 0, calloc((size_t)n + 1, sizeof(char *)), calloc((size_t)n + 1, sizeof(char *))};
  if (!bad && (!j.out || !j.err)) {
    fprintf(stderr, "lade index: out of memory\n");
    bad = 1;
  }
  pthread_t th[256];
  int started = 0;
  while (!bad && started < jobs && started < n && pthread_create(&th[started], NULL, index_thread, &j) == 0) started++;
  for (int t = 0; t < started; t++) pthread_join(th[t], NULL);
  if (!bad && !started) index_thread(&j); /* no thread could start: this one does the work */
  for (int i = 0; !bad && i < n; i++) {
    if (j.err[i] || !j.out[i]) {
      fprintf(stderr, "lade index: %s\n", j.err[i] ? j.err[i] : "out of memory");
      failed++;
    } else {
      printf("%s\n", j.out[i]);
    }
  }
  for (int i = 0; j.out && j.err && i < n; i++) {
    free(j.out[i]);
    free(j.err[i]);
  }
  free(j.out);
  free(j.err);
  lade_config_destroy(cfg);
  return bad ? bad : failed ? 1 : 0;
}
