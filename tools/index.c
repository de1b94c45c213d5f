/*
 * index.c - `lade index SHARD...`: writes the sidecar index of each local
 * tar shard (or TFRecord file) beside it, SHARD.ladeidx, for shards that
 * other tools wrote (`lade pack` writes its own). Copied with the shards to
 * a web server or a bucket, the sidecars let a remote open fetch one small
 * file per shard instead of reading every shard whole (docs/sources.md,
 * "Sidecar indexes"). The library does the work (lade_shard_index_write);
 * this is its command line.
 */
#include <getopt.h>
#include <stdio.h>
#include <string.h>

#include "lade/lade.h"
#include "pack.h"
#include "shown.h"

static int usage_index(FILE *f) {
  fprintf(f,
          "usage: lade index SHARD... [--set key=value ...]\n\n"
          "Writes SHARD.ladeidx beside each local WebDataset tar shard (or TFRecord file:\n"
          "a .tfrecord name, or --set source_type=tfrecord), replacing one there. It holds\n"
          "every member's offset and size, bound to the shard by its size and sampled member\n"
          "headers (not its mtime, so it survives a copy). Upload it beside the shard: a\n"
          "remote open (http(s)://, s3://) fetches it instead of reading the shard whole, and\n"
          "ignores it (counted in sidecar_rejected, said on stderr) if it is not that shard's.\n"
          "A TFRecord index depends on tfrecord_feature and tfrecord_label: --set them as the\n"
          "loader will. `lade pack` writes sidecars for the shards it writes.\n");
  return f == stderr ? 2 : 0;
}

int lade_tool_index(int argc, char **argv) {
  static const struct option opts[] = {{"set", required_argument, 0, 'S'}, {"help", no_argument, 0, 'h'}, {0, 0, 0, 0}};
  lade_config_t *cfg = NULL;
  if (lade_config_create(&cfg)) return 1;
  int c, bad = 0;
  optind = 1;
  while (!bad && (c = getopt_long(argc, argv, "S:h", opts, NULL)) != -1) {
    if (c == 'h') {
      lade_config_destroy(cfg);
      return usage_index(stdout);
    }
    if (c != 'S') {
      bad = 2;
    } else if (lade_config_parse(cfg, optarg)) {
      fprintf(stderr, "lade index: %s\n", lade_tool_error());
      bad = 2;
    }
  }
  if (!bad && optind >= argc) bad = usage_index(stderr);
  int failed = 0;
  for (int i = optind; !bad && i < argc; i++) {
    if (lade_shard_index_write(cfg, argv[i])) {
      fprintf(stderr, "lade index: %s\n", lade_tool_error());
      failed++;
    } else {
      printf("%s.ladeidx\n", argv[i]);
    }
  }
  lade_config_destroy(cfg);
  return bad ? bad : failed ? 1 : 0;
}
