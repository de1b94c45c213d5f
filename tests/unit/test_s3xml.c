/* test_s3xml.c - the hand-written parser of S3's XML replies (no server
 * needed): ListObjectsV2 pages with entities, pagination, and broken pages. */
#include <string.h>

#include "harness.h"
#include "lade/lade.h"
#include "source/s3xml.h"

typedef struct got {
  char keys[8][64];
  uint64_t sizes[8];
  int n;
} got_t;

static int push(void *ctx, const char *key, size_t klen, uint64_t size) {
  got_t *g = ctx;
  if (g->n == 8 || klen >= 64) return LADE_ERANGE;
  memcpy(g->keys[g->n], key, klen + 1);
  g->sizes[g->n++] = size;
  return 0;
}

static int parse(const char *xml, got_t *g, char *token, int *more) {
  memset(g, 0, sizeof *g);
  return lade__s3_parse_list(xml, strlen(xml), push, g, token, 256, more, "s3://b/p/");
}

static void test_list_page(void) {
  got_t g;
  char token[256];
  int more = -1;
  CHECK_OK(parse("<?xml version=\"1.0\"?><ListBucketResult xmlns=\"x\"><IsTruncated>true</IsTruncated>"
                 "<NextContinuationToken>tok&amp;1</NextContinuationToken>"
                 "<Contents><Key>p/a&amp;b &lt;1&gt;.jpg</Key><Size>123</Size></Contents>"
                 "<Contents><Size>7</Size><Key>p/&#233;&#x4E2D;&apos;&quot;</Key></Contents>"
                 "</ListBucketResult>",
                 &g, token, &more));
  CHECK_EQ_INT(g.n, 2);
  CHECK(strcmp(g.keys[0], "p/a&b <1>.jpg") == 0);
  CHECK(strcmp(g.keys[1], "p/\xc3\xa9\xe4\xb8\xad'\"") == 0);
  CHECK_EQ_INT(g.sizes[0], 123);
  CHECK_EQ_INT(g.sizes[1], 7);
  CHECK_EQ_INT(more, 1);
  CHECK(strcmp(token, "tok&1") == 0);
  CHECK_OK(parse("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>", &g, token, &more));
  CHECK_EQ_INT(more, 0);
  CHECK_EQ_INT(g.n, 0);
}

static void test_broken_pages(void) {
  got_t g;
  char token[256];
  int more;
  CHECK_EQ_INT(parse("<Error><Code>AccessDenied</Code></Error>", &g, token, &more), LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "s3://b/p/") != NULL);
  CHECK_EQ_INT(parse("<ListBucketResult><IsTruncated>true</IsTruncated></ListBucketResult>", &g, token, &more),
               LADE_EFORMAT);
  CHECK_EQ_INT(parse("<ListBucketResult><Contents><Key>k</Key><Size>-1</Size></Contents></ListBucketResult>", &g,
                     token, &more),
               LADE_EFORMAT);
  CHECK_EQ_INT(parse("<ListBucketResult><Contents><Key>k</Key></Contents></ListBucketResult>", &g, token, &more),
               LADE_EFORMAT);
  CHECK_EQ_INT(parse("<ListBucketResult><Contents><Size>1</Size></Contents></ListBucketResult>", &g, token, &more),
               LADE_EFORMAT);
  /* an unterminated element ends the page instead of running past it, and a
   * page without its closing tag is refused: it was cut short */
  CHECK_EQ_INT(parse("<ListBucketResult><Contents><Key>k</Key><Size>1</Size>", &g, token, &more), LADE_EFORMAT);
  CHECK(strstr(lade_last_error(), "cut short") != NULL);
  CHECK_EQ_INT(g.n, 0);
  /* a page cut before <IsTruncated> (s3rver and others put it after the
   * objects) is an error, not taken as the last page */
  CHECK_EQ_INT(parse("<ListBucketResult><Contents><Key>k</Key><Size>1</Size></Contents><Contents><Key>l</Key>",
                     &g, token, &more),
               LADE_EFORMAT);
  CHECK_OK(parse("<ListBucketResult><IsTruncated>false</IsTruncated></ListBucketResult>\r\n ", &g, token, &more));
  CHECK(lade__s3_list_complete("x</ListBucketResult>\n", 21));
  CHECK(!lade__s3_list_complete("x</ListBucketResult", 19));
}

static void test_error_text(void) {
  const char *x = "<Error><Code>SlowDown</Code><Message>a\nb &amp; c</Message></Error>";
  char out[64];
  lade__xml_text(x, x + strlen(x), "Message", out, sizeof out);
  CHECK(strcmp(out, "a b & c") == 0); /* control characters become spaces */
  lade__xml_text(x, x + strlen(x), "Missing", out, sizeof out);
  CHECK(out[0] == '\0');
  lade__xml_text(x, x + strlen(x), "Code", out, 5); /* truncated to the buffer */
  CHECK(strcmp(out, "Slow") == 0);
}

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  RUN(test_list_page);
  RUN(test_broken_pages);
  RUN(test_error_text);
  return lade_test_finish();
}
