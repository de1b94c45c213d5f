/* gen_jpeg.h - the synthetic ImageNet-like dataset generator behind
 * `lade gen-jpeg` (and the JPEG benchmark). Public API only. */
#ifndef LADE_TOOL_GEN_JPEG_H
#define LADE_TOOL_GEN_JPEG_H
#include <stddef.h>
#include <stdint.h>

/*
 * Writes `count` JPEGs (quality 90, mostly 500x375, some portrait and other
 * sizes, photo-like gradients + texture, ~100 KB each) in ImageFolder layout:
 * dir/class_00 .. dir/class_09, file i is dir/class_<i%10>/img_<i:08>.jpg.
 * Deterministic in (count, seed); every image differs. Creates the folders.
 * Returns 0, or -1 with a message in err (errlen bytes, NUL-terminated).
 */
int lade_tool_gen_jpeg(const char *dir, uint64_t count, uint64_t seed, char *err, size_t errlen);

/* Encodes image `index` of the dataset for `seed` into memory (malloc'd,
 * *out owned by the caller); for benchmarks and tests. Returns 0 or -1. */
int lade_tool_gen_jpeg_one(uint64_t seed, uint64_t index, uint8_t **out, size_t *len, char *err, size_t errlen);
#endif
