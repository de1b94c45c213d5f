/* gen_jpeg_check.c - checks tools/gen_jpeg.c: ImageFolder layout, every file
 * a valid distinct JPEG of a plausible size, byte-identical output for the
 * same seed, a different dataset for another seed, and a clean error for a
 * directory that cannot be created. Usage: gen_jpeg_check TMPDIR */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gen_jpeg.h"
#include "transform/imagenet.h"

static uint8_t *slurp(const char *path, size_t *len) {
  *len = 0;
  FILE *f = fopen(path, "rb");
  if (!f) return NULL;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  fseek(f, 0, SEEK_SET);
  uint8_t *b = malloc((size_t)n + 1);
  if (fread(b, 1, (size_t)n, f) != (size_t)n) n = 0;
  fclose(f);
  *len = (size_t)n;
  return b;
}

#define FAIL(...) (fprintf(stderr, "FAIL: " __VA_ARGS__), fputc('\n', stderr), exit(1))

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  char a[4096], b[4096], p[4200], q[4200], err[256];
  snprintf(a, sizeof(a), "%s/gen_a", argv[1]);
  snprintf(b, sizeof(b), "%s/gen_b", argv[1]);
  enum { N = 25 };
  if (lade_tool_gen_jpeg(a, N, 42, err, sizeof(err)) != 0) FAIL("gen a: %s", err);
  if (lade_tool_gen_jpeg(b, N, 42, err, sizeof(err)) != 0) FAIL("gen b: %s", err);
  lade__imgdec_t *d;
  if (lade__imgdec_create(&d) != 0) FAIL("decoder: %s", lade_last_error());
  uint64_t hashes[N];
  size_t total = 0;
  static uint8_t out[32 * 32 * 3];
  for (int i = 0; i < N; i++) {
    snprintf(p, sizeof(p), "%s/class_%02d/img_%08d.jpg", a, i % 10, i);
    snprintf(q, sizeof(q), "%s/class_%02d/img_%08d.jpg", b, i % 10, i);
    size_t la, lb;
    uint8_t *x = slurp(p, &la), *y = slurp(q, &lb);
    if (!x || !y) FAIL("missing %s", p);
    if (la != lb || memcmp(x, y, la) != 0) FAIL("not deterministic: %s", p);
    int W, H;
    if (lade__img_size(d, x, la, &W, &H) != 0) FAIL("%s: %s", p, lade_last_error());
    if (W < 300 || W > 640 || H < 300 || H > 640) FAIL("%s: odd size %dx%d", p, W, H);
    if (lade__imgdec_crop(d, x, la, 0, 0, H, W, 32, false, LADE_DTYPE_UINT8, out) != 0)
      FAIL("%s: %s", p, lade_last_error());
    hashes[i] = lade__hash64(x, la, 0);
    for (int j = 0; j < i; j++)
      if (hashes[j] == hashes[i]) FAIL("images %d and %d are identical", j, i);
    total += la;
    free(x);
    free(y);
  }
  printf("%d images, mean %.1f KB\n", N, total / 1024.0 / N);
  if (total / N < 50 * 1024 || total / N > 200 * 1024) FAIL("mean size %zu out of range", total / N);
  /* Another seed, another dataset. */
  uint8_t *o1, *o2;
  size_t l1, l2;
  if (lade_tool_gen_jpeg_one(1, 3, &o1, &l1, err, sizeof(err)) || lade_tool_gen_jpeg_one(2, 3, &o2, &l2, err, sizeof(err)))
    FAIL("gen one: %s", err);
  if (l1 == l2 && memcmp(o1, o2, l1) == 0) FAIL("seed ignored");
  free(o1);
  free(o2);
  /* An impossible directory: -1 and a message. */
  err[0] = 0;
  if (lade_tool_gen_jpeg("/proc/definitely/not/here", 3, 1, err, sizeof(err)) != -1 || !err[0])
    FAIL("no error for an impossible directory");
  printf("error as expected: %s\n", err);
  lade__imgdec_destroy(d);
  printf("ok\n");
  return 0;
}
