/* jpeg_stages.h - the stage account of an imagenet transform over JPEGs:
 * where a crop's time goes (entropy decode to the region's last row, the
 * decoder's work inside the region, lade's horizontal pass, vertical pass
 * and store), beside a whole-image decode and its entropy-only part, on one
 * thread, for the same images and boxes. Used by bench/jpeg_transform.c and
 * `lade bench` (its "stages" lines): one command that says, on a CPU no one
 * here can profile, which stage holds the gap to the decode. */
#ifndef LADE_TOOL_JPEG_STAGES_H
#define LADE_TOOL_JPEG_STAGES_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "lade/lade.h"

/* Seconds per image, each the best of the rounds (a shared machine only
 * ever slows a round down). */
typedef struct lade_tool_stages {
  double whole;           /* whole-image decode (the scanline API in row blocks) */
  double entropy_whole;   /* entropy decode of the whole image, nothing transformed */
  lade_image_stages_t s;  /* the transform's stages (lade_image_stages) */
} lade_tool_stages_t;

/* The whole decodes, then lade_image_stages over the n JPEGs with cfg (an
 * imagenet transform). Returns 0, or -1 with why set. */
int lade_tool_jpeg_stages(uint8_t *const *img, const size_t *len, int n, const lade_config_t *cfg, int rounds,
                          lade_tool_stages_t *out, char *why, size_t wsize);

/* The account as text lines in ms per image, the first starting with
 * `first`, the others with `indent`; or as one JSON object after `key`. */
void lade_tool_stages_print(FILE *fp, const char *first, const char *indent, const lade_tool_stages_t *s);
void lade_tool_stages_json(FILE *fp, const char *key, const lade_tool_stages_t *s);

/* The entropy (Huffman) decode alone of each image, whole: images/s, or 0
 * without libjpeg. */
double lade_tool_entropy_only(uint8_t *const *img, const size_t *len, int n);

#endif
