/* config.h - the typed settings behind lade_config_t. Every module reads
 * its settings from here; lade_config_set() validates them on entry. */
#ifndef LADE_CONFIG_H
#define LADE_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "lade/lade.h"

enum { LADE_SRC_AUTO = 0, LADE_SRC_DIR, LADE_SRC_NPY };
enum { LADE_XF_AUTO = 0, LADE_XF_RAW, LADE_XF_NPY, LADE_XF_IMAGENET_TRAIN, LADE_XF_IMAGENET_EVAL };
enum { LADE_ONERR_FAIL = 0, LADE_ONERR_SKIP };

#define LADE_PATH_MAX 4096

struct lade_config {
  char source[LADE_PATH_MAX];
  int source_type;
  int transform;
  uint32_t batch_size;
  uint64_t epochs;
  uint64_t seed;
  bool shuffle;
  bool drop_last;
  uint32_t rank;
  uint32_t world_size;
  uint32_t threads;      /* 0: online cores */
  uint32_t prefetch;     /* batches prepared ahead of the consumer (K) */
  uint32_t crop_size;
  uint32_t resize_size;
  int image_dtype;       /* LADE_DTYPE_FLOAT32 (CHW, normalised) or LADE_DTYPE_UINT8 (HWC) */
  double scale_min, scale_max, ratio_min, ratio_max, hflip;
  uint64_t raw_size;     /* raw slot bytes; 0: size of sample 0 */
  int on_error;
  char trace[LADE_PATH_MAX];
  char npy_dtype[16];    /* "" : taken from the first file */
  char npy_shape[128];   /* "" : taken from the first file, else "3,224,224" */
  lade_allocator_t allocator;
  bool has_allocator;
};

void lade__config_defaults(struct lade_config *c);

#endif
