/* ls.c - `lade ls SOURCE`: the dataset as the loader sees it, one sample
 * (or class) per line (ls.h). Uses the public header only. */
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "lade/lade.h"
#include "ls.h"
#include "shown.h"

static int usage_ls(FILE *f) {
  fprintf(f,
          "usage: lade ls SOURCE [--transform T] [--classes] [--set key=value ...]\n\n"
          "Lists the dataset as the loader sees it, one sample per line:\n"
          "INDEX<TAB>LABEL<TAB>CLASS<TAB>PATH (CLASS is - without one). With --classes,\n"
          "one class per line: LABEL<TAB>NAME. The transform (default auto) decides which\n"
          "files of a folder are samples: images only, or every file with raw.\n");
  return f == stderr ? 2 : 0;
}

int lade_tool_ls(int argc, char **argv) {
  static const struct option opts[] = {{"transform", required_argument, 0, 't'}, {"set", required_argument, 0, 'S'},
                                       {"classes", no_argument, 0, 'c'},         {"help", no_argument, 0, 'h'},
                                       {0, 0, 0, 0}};
  lade_config_t *cfg = NULL;
  lade_config_create(&cfg);
  int c, bad = 0, classes_only = 0;
  optind = 1;
  while (!bad && (c = getopt_long(argc, argv, "t:S:ch", opts, NULL)) != -1) {
    switch (c) {
      case 't': bad = lade_tool_set(cfg, "transform", optarg); break;
      case 'S':
        if (lade_config_parse(cfg, optarg)) {
          fprintf(stderr, "lade: %s\n", lade_tool_error());
          bad = 1;
        }
        break;
      case 'c': classes_only = 1; break;
      case 'h':
        lade_config_destroy(cfg);
        return usage_ls(stdout);
      default: bad = 1;
    }
  }
  if (bad || argc - optind != 1) {
    lade_config_destroy(cfg);
    if (!bad) usage_ls(stderr);
    return 2;
  }
  /* one worker, one small batch: the loader is made for its listing only */
  if (lade_tool_set(cfg, "source", argv[optind]) || lade_tool_set(cfg, "threads", "1") ||
      lade_tool_set(cfg, "batch_size", "1") || lade_tool_set(cfg, "prefetch", "1")) {
    lade_config_destroy(cfg);
    return 2;
  }
  lade_loader_t *L = NULL;
  int rc = lade_loader_create(&L, cfg);
  lade_config_destroy(cfg);
  uint64_t n = 0;
  uint32_t nc = 0;
  if (!rc) rc = lade_loader_info(L, &n, NULL, NULL);
  if (!rc) rc = lade_loader_classes(L, &nc);
  const char **names = rc ? NULL : calloc(nc ? nc : 1, sizeof *names);
  for (uint32_t i = 0; !rc && i < nc; i++)
    if (lade_loader_class_name(L, i, &names[i])) names[i] = NULL; /* a source without names */
  /* names as the Python module's messages show them (shown.h): a 0xff byte as \xff */
  static char path[2 * 4096 + 64], shown_path[4 * sizeof path], shown_cls[4 * 4096 + 1];
  if (!rc && classes_only) {
    for (uint32_t i = 0; i < nc; i++)
      printf("%u\t%s\n", i, names[i] ? lade_tool_shown(names[i], shown_cls, sizeof shown_cls) : "-");
  } else if (!rc) {
    for (uint64_t i = 0; !rc && i < n; i++) {
      int64_t label = -1;
      rc = lade_loader_sample(L, i, path, sizeof path, &label);
      const char *cls = label >= 0 && (uint64_t)label < nc && names[label] ? names[label] : "-";
      if (!rc)
        printf("%llu\t%lld\t%s\t%s\n", (unsigned long long)i, (long long)label,
               lade_tool_shown(cls, shown_cls, sizeof shown_cls), lade_tool_shown(path, shown_path, sizeof shown_path));
    }
  }
  if (rc) fprintf(stderr, "lade ls: %s\n", lade_tool_error());
  free(names);
  lade_loader_destroy(L);
  return rc ? 1 : 0;
}
