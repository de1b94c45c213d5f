/*
 * tarfmt.h - a reader of tar headers (POSIX ustar, GNU long names, pax
 * extended headers; old v7 headers too), on its own so that it can be fuzzed
 * without a file system: the bytes come through a pread-like callback.
 *
 * The reader walks the headers only; member data is skipped by offset, never
 * read, except the data of pax ('x', 'g') and GNU long-name ('L', 'K')
 * records, which are bounded (LADE__TAR_META_MAX). Every size and offset is
 * checked against the file's size before it is used.
 */
#ifndef LADE__TARFMT_H
#define LADE__TARFMT_H

#include <stddef.h>
#include <stdint.h>

/* The most bytes one pax or GNU long-name record may hold. */
#define LADE__TAR_META_MAX (1u << 20)

/* Reads up to len bytes at off into buf; returns the bytes read (fewer only
 * at the end of the file) or a negative errno value. */
typedef long (*lade__tar_pread_fn)(void *ctx, void *buf, size_t len, uint64_t off);

typedef struct lade__tar_reader {
  lade__tar_pread_fn pread;
  void *ctx;
  uint64_t file_size;
  uint64_t pos;      /* offset of the next header block */
  char *name;        /* the current member's name (malloc'd, NUL-terminated) */
  size_t name_cap;
  uint8_t *meta;     /* pax / long-name record buffer */
  size_t meta_cap;
} lade__tar_reader_t;

typedef struct lade__tar_member {
  const char *name;     /* borrowed from the reader, valid until the next call */
  size_t name_len;
  uint64_t header_off;  /* offset of its first header (pax or long-name records included) */
  uint64_t data_off;    /* offset of its data */
  uint64_t size;        /* bytes of data */
  int regular;          /* 1: a regular file ('0', '\0', '7'); 0: anything else (folder, link, ...) */
} lade__tar_member_t;

/* Starts reading a tar of file_size bytes. */
void lade__tar_init(lade__tar_reader_t *r, lade__tar_pread_fn fn, void *ctx, uint64_t file_size);
void lade__tar_free(lade__tar_reader_t *r);

/* Reads the next member's headers into *m. Returns 1 with a member, 0 at the
 * end of the archive (an end-of-archive block, or the end of the file on a
 * block boundary), or a negative LADE_E* code whose lade_last_error() names
 * the member (or the header's offset) and what is wrong: a truncated header
 * or data, a bad checksum, a size past the end of the file, a malformed or
 * oversized pax record, an unsupported member type. */
int lade__tar_next(lade__tar_reader_t *r, lade__tar_member_t *m);

#endif
