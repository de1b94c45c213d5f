/*
 * fuzz_jpeg.c - libFuzzer target for the JPEG pipeline: header parse, then a
 * crop decode with a box derived from the image size and the input bytes, so
 * the crop/skip/DCT-scaling paths and both output dtypes are all reached.
 * Any outcome but a crash, a leak or a sanitizer report is fine.
 */
#include <stdint.h>
#include <stdlib.h>

#include "transform/imagenet.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static lade__imgdec_t *d;
  static uint8_t out[64 * 64 * 3 * 4];
  if (!d && lade__imgdec_create(&d) != 0) abort();
  int W, H;
  /* every size the library accepts (up to LADE__IMG_MAX_PIXELS = 2^28) is
   * fuzzed; lade__img_size refuses the larger ones itself */
  if (lade__img_size(d, data, size, &W, &H) != 0) return 0;
  if (W <= 0 || H <= 0) return 0;
  uint32_t h = 2166136261u;
  for (size_t i = 0; i < size && i < 64; i++) h = (h ^ data[i]) * 16777619u;
  int bw = 1 + (int)(h % (uint32_t)W), bh = 1 + (int)((h >> 8) % (uint32_t)H);
  /* the box, not the image, bounds lade's own buffers: keep it at most
   * 2^22 pixels so a huge image still runs the crop, skip and scaling paths
   * without making every input a gigabyte resample */
  while ((uint64_t)bw * (uint64_t)bh > ((uint64_t)1 << 22)) {
    if (bw >= bh)
      bw = (bw + 1) / 2;
    else
      bh = (bh + 1) / 2;
  }
  int left = (int)((h >> 4) % (uint32_t)(W - bw + 1)), top = (int)((h >> 12) % (uint32_t)(H - bh + 1));
  int out_size = 8 + (int)((h >> 20) % 57);
  int dtype = (h >> 28) & 1 ? LADE_DTYPE_FLOAT32 : LADE_DTYPE_UINT8;
  (void)lade__imgdec_crop(d, data, size, top, left, bh, bw, out_size, (h >> 29) & 1, dtype, out);
  if ((uint64_t)W * (uint64_t)H <= ((uint64_t)1 << 22))
    (void)lade__imgdec_crop(d, data, size, 0, 0, H, W, out_size, false, LADE_DTYPE_UINT8, out);
  return 0;
}
