/* s3xml.c - see s3xml.h. */
#include "source/s3xml.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

/* Decodes the XML character references S3 uses, in place. */
void lade__xml_unescape(char *s) {
  char *w = s;
  for (char *r = s; *r;) {
    if (*r != '&') {
      *w++ = *r++;
      continue;
    }
    char *semi = strchr(r, ';');
    if (!semi || semi - r > 10) {
      *w++ = *r++;
      continue;
    }
    size_t n = (size_t)(semi - r - 1);
    const char *ent = r + 1;
    unsigned long cp = 0;
    int ok = 1;
    if (n == 3 && !strncmp(ent, "amp", 3)) cp = '&';
    else if (n == 2 && !strncmp(ent, "lt", 2)) cp = '<';
    else if (n == 2 && !strncmp(ent, "gt", 2)) cp = '>';
    else if (n == 4 && !strncmp(ent, "quot", 4)) cp = '"';
    else if (n == 4 && !strncmp(ent, "apos", 4)) cp = '\'';
    else if (n >= 2 && ent[0] == '#') {
      char *end;
      cp = (ent[1] == 'x' || ent[1] == 'X') ? strtoul(ent + 2, &end, 16) : strtoul(ent + 1, &end, 10);
      ok = end == semi && cp > 0 && cp <= 0x10FFFF;
    } else {
      ok = 0;
    }
    if (!ok) {
      *w++ = *r++;
      continue;
    }
    /* UTF-8 encode (the encoded form is never longer than the reference) */
    if (cp < 0x80) {
      *w++ = (char)cp;
    } else if (cp < 0x800) {
      *w++ = (char)(0xC0 | (cp >> 6));
      *w++ = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      *w++ = (char)(0xE0 | (cp >> 12));
      *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
      *w++ = (char)(0x80 | (cp & 0x3F));
    } else {
      *w++ = (char)(0xF0 | (cp >> 18));
      *w++ = (char)(0x80 | ((cp >> 12) & 0x3F));
      *w++ = (char)(0x80 | ((cp >> 6) & 0x3F));
      *w++ = (char)(0x80 | (cp & 0x3F));
    }
    r = semi + 1;
  }
  *w = '\0';
}

/* Finds <tag>text</tag> in [p, end); returns a pointer to the text and its
 * length, or NULL. */
const char *lade__xml_find(const char *p, const char *end, const char *tag, size_t *len) {
  char open[64], close[64];
  snprintf(open, sizeof open, "<%s>", tag);
  snprintf(close, sizeof close, "</%s>", tag);
  size_t ol = strlen(open), cl = strlen(close);
  for (const char *q = p; q + ol <= end; q++) {
    q = memchr(q, '<', (size_t)(end - q));
    if (!q || q + ol > end) return NULL;
    if (memcmp(q, open, ol) != 0) continue;
    const char *t = q + ol;
    for (const char *e = t; e + cl <= end; e++) {
      e = memchr(e, '<', (size_t)(end - e));
      if (!e || e + cl > end) return NULL;
      if (memcmp(e, close, cl) == 0) {
        *len = (size_t)(e - t);
        return t;
      }
    }
    return NULL;
  }
  return NULL;
}

/* Copies the decoded text of <tag> in [p, end) into out ("" when absent). */
void lade__xml_text(const char *p, const char *end, const char *tag, char *out, size_t size) {
  size_t len = 0;
  const char *t = lade__xml_find(p, end, tag, &len);
  if (!t) len = 0;
  if (len >= size) len = size - 1;
  if (t) memcpy(out, t, len);
  out[len] = '\0';
  lade__xml_unescape(out);
  /* printable only: a server's message must not break a log line */
  for (char *c = out; *c; c++)
    if ((unsigned char)*c < 0x20) *c = ' ';
}

/* A page ends with </ListBucketResult> (then only white space): a body cut
 * short in transit, with a Content-Length that matches the cut, is not a
 * page even when what is left parses (its <IsTruncated> may be gone). */
int lade__s3_list_complete(const char *b, size_t n) {
  static const char close[] = "</ListBucketResult>";
  while (n && (b[n - 1] == ' ' || b[n - 1] == '\n' || b[n - 1] == '\r' || b[n - 1] == '\t')) n--;
  return n >= sizeof close - 1 && !memcmp(b + n - (sizeof close - 1), close, sizeof close - 1);
}

/* ListObjectsV2 page: every <Contents>'s decoded <Key> and <Size> go to push;
 * <IsTruncated> and <NextContinuationToken> tell whether and how to go on. */
int lade__s3_parse_list(const char *b, size_t n, lade__s3_push_fn push, void *ctx, char *token, size_t token_size,
                        int *more, const char *shown) {
  const char *end = b + n;
  char trunc[16];
  lade__xml_text(b, end, "IsTruncated", trunc, sizeof trunc);
  *more = !strcmp(trunc, "true");
  lade__xml_text(b, end, "NextContinuationToken", token, token_size);
  if (*more && !token[0]) return lade__fail(LADE_EFORMAT, "%s: truncated listing without a continuation token", shown);
  if (!memmem(b, n, "<ListBucketResult", 17))
    return lade__fail(LADE_EFORMAT, "%s: the reply is not a ListObjectsV2 result", shown);
  if (!lade__s3_list_complete(b, n))
    return lade__fail(LADE_EFORMAT, "%s: the listing page (%zu bytes) ends before </ListBucketResult>: cut short", shown,
                      n);
  char key[4096];
  for (const char *p = b;;) {
    size_t clen;
    const char *c = lade__xml_find(p, end, "Contents", &clen);
    if (!c) break;
    const char *ce = c + clen;
    size_t klen;
    const char *k = lade__xml_find(c, ce, "Key", &klen);
    char sz[32];
    lade__xml_text(c, ce, "Size", sz, sizeof sz);
    p = ce;
    if (!k || klen >= sizeof key) return lade__fail(LADE_EFORMAT, "%s: a listed object has no usable <Key>", shown);
    memcpy(key, k, klen);
    key[klen] = '\0';
    lade__xml_unescape(key);
    klen = strlen(key);
    char *e;
    errno = 0;
    unsigned long long size = strtoull(sz, &e, 10);
    if (!sz[0] || *e || errno || sz[0] == '-')
      return lade__fail(LADE_EFORMAT, "%s: object %s has no valid <Size>", shown, key);
    int rc = push(ctx, key, klen, size);
    if (rc) return rc;
  }
  return 0;
}
