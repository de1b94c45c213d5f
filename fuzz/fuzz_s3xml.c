/*
 * fuzz_s3xml.c - libFuzzer target for the parser of S3's XML replies
 * (src/source/s3xml.c): ListObjectsV2 pages and <Error> bodies come from the
 * network. Checks the parser's promises: every key it hands out is
 * NUL-terminated at its length, the token fits its buffer, and error text is
 * printable.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "source/s3xml.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int push(void *ctx, const char *key, size_t klen, uint64_t sz) {
  (void)sz;
  if (strlen(key) != klen) abort();
  ++*(size_t *)ctx;
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  char *b = malloc(size + 1); /* the source NUL-terminates replies too */
  if (!b) return 0;
  memcpy(b, data, size);
  b[size] = '\0';
  char token[64];
  int more = 0;
  size_t n = 0;
  lade__s3_parse_list(b, size, push, &n, token, sizeof token, &more, "s3://fuzz/");
  if (strlen(token) >= sizeof token) abort();
  char msg[32];
  lade__xml_text(b, b + size, "Message", msg, sizeof msg);
  for (char *c = msg; *c; c++)
    if ((unsigned char)*c < 0x20) abort();
  free(b);
  return 0;
}
