/* s3xml.h - the few XML replies of S3 (ListObjectsV2 pages, <Error>
 * bodies), parsed by hand: no libxml. Outside bytes: fuzzed by
 * fuzz/fuzz_s3xml.c. Needs no libcurl. */
#ifndef LADE__S3XML_H
#define LADE__S3XML_H

#include <stddef.h>
#include <stdint.h>

/* Decodes &amp; &lt; &gt; &quot; &apos; and numeric references in place. */
void lade__xml_unescape(char *s);
/* Finds <tag>text</tag> in [p, end): the text and its length, or NULL. */
const char *lade__xml_find(const char *p, const char *end, const char *tag, size_t *len);
/* The decoded, printable text of <tag> in [p, end) into out ("" when absent). */
void lade__xml_text(const char *p, const char *end, const char *tag, char *out, size_t size);

/* True when the n bytes end with </ListBucketResult> (white space after it
 * allowed): the page was not cut short. */
int lade__s3_list_complete(const char *b, size_t n);

typedef int (*lade__s3_push_fn)(void *ctx, const char *key, size_t klen, uint64_t size);
/* Parses one ListObjectsV2 page of n bytes; calls push per object; sets *more
 * and the continuation token. LADE_EFORMAT (naming `shown`) for a reply that
 * is not a listing, a page cut before its closing tag, a <Contents> without
 * a key or a valid size. */
int lade__s3_parse_list(const char *b, size_t n, lade__s3_push_fn push, void *ctx, char *token, size_t token_size,
                        int *more, const char *shown);

#endif
