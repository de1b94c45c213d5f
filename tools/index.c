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
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "lade/lade.h"
#include "pack.h"
#include "shown.h"

static int usage_index(FILE *f) {
  fprintf(f,
          "usage: lade index SHARD... [--to DIR] [--set key=value ...]\n\n"
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
          "files beside the shards (e.g. aws s3 cp DIR s3://bucket/prefix/ --recursive).\n");
  return f == stderr ? 2 : 0;
}

int lade_tool_index(int argc, char **argv) {
  static const struct option opts[] = {{"set", required_argument, 0, 'S'}, {"to", required_argument, 0, 't'},
                                       {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  lade_config_t *cfg = NULL;
  if (lade_config_create(&cfg)) return 1;
  int c, bad = 0;
  const char *to = NULL;
  optind = 1;
  while (!bad && (c = getopt_long(argc, argv, "S:t:h", opts, NULL)) != -1) {
    if (c == 'h') {
      lade_config_destroy(cfg);
      return usage_index(stdout);
    }
    if (c == 't') {
      to = optarg;
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
  int failed = 0;
  for (int i = optind; !bad && i < argc; i++) {
    char out[8192];
    const char *base = strrchr(argv[i], '/');
    base = base ? base + 1 : argv[i];
    if (to && (!base[0] || snprintf(out, sizeof out, "%s/%s.ladeidx", to, base) >= (int)sizeof out)) {
      fprintf(stderr, "lade index: %s: no file name to write %s/NAME.ladeidx for, or too long\n", argv[i], to);
      failed++;
    } else if (lade_shard_index_write_to(cfg, argv[i], to ? out : NULL)) {
      fprintf(stderr, "lade index: %s\n", lade_tool_error());
      failed++;
    } else if (to) {
      printf("%s\n", out);
    } else {
      printf("%s.ladeidx\n", argv[i]);
    }
  }
  lade_config_destroy(cfg);
  return bad ? bad : failed ? 1 : 0;
}
