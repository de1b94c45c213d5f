/* zipfmt.h - a strict reader of a zip archive held in memory, enough for
 * numpy's .npz (np.savez: stored members, np.savez_compressed: deflated,
 * both written by Python's zipfile with zip64 local headers). Used by the
 * npz transform (src/transform/npz.c) and fuzzed by fuzz/fuzz_npz.c.
 *
 * The reference is Python's zipfile as np.load uses it: the end record is
 * the last one in the archive's tail, zip64 records replace its numbers, a
 * name is cut at its first NUL, the last directory entry of a name wins,
 * sizes come from the central directory (so data descriptors need nothing),
 * the local header's own name and extra lengths place the data, and the
 * name in the local header must be the directory's. Stricter than zipfile
 * where it costs nothing: the central directory must end where the end
 * records begin, its entry count and its bytes must agree, a member's data
 * must lie before the directory. Every offset and length is checked
 * against the archive's size before it is used; nothing is allocated. */
#ifndef LADE__ZIPFMT_H
#define LADE__ZIPFMT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* An archive: its bytes (borrowed; they must outlive it) and its central
 * directory, found and checked by lade__zip_open. */
typedef struct lade__zip {
  const uint8_t *data;
  size_t len;
  size_t cd_off, cd_len; /* the central directory's bytes */
  uint64_t entries;      /* its entries */
} lade__zip_t;

/* One central directory entry. */
typedef struct lade__zip_entry {
  const uint8_t *name;   /* into the archive, not NUL-terminated */
  size_t name_len;       /* up to its first NUL (zipfile cuts it there) */
  size_t raw_name_len;   /* the whole name field (what the local header must repeat) */
  bool utf8;             /* flag bit 11: the name is UTF-8 (else cp437) */
  uint16_t flags, method;
  uint32_t crc;
  uint64_t csize, usize; /* compressed and uncompressed sizes (zip64 ones where given) */
  uint64_t local_off;    /* offset of its local header */
} lade__zip_entry_t;

/* Finds the end records and the central directory of the `len` bytes at
 * `data`, and checks every directory entry's bounds. An archive must start
 * with a local header or an end record, as np.load decides. LADE_EFORMAT
 * with the reason in lade_last_error() (truncated, not a zip archive,
 * spanned, inconsistent). */
int lade__zip_open(lade__zip_t *z, const uint8_t *data, size_t len);

/* Reads the directory entry at offset *pos of the directory (start at 0)
 * into *e and moves *pos past it. 1: an entry was read; 0: the end; or a
 * negative code. Entries were checked by lade__zip_open. */
int lade__zip_next(const lade__zip_t *z, size_t *pos, lade__zip_entry_t *e);

/* The entry named `name` (bytes, NUL-terminated) as zipfile finds it: the
 * last entry of that name; a non-ASCII name matches only an entry flagged
 * UTF-8. 0, or LADE_ENOENT (no message set). */
int lade__zip_find(const lade__zip_t *z, const char *name, lade__zip_entry_t *e);

/* The member's stored bytes (e->csize of them, compressed or not) through
 * its local header. LADE_EFORMAT when it is encrypted, compressed with a
 * method other than stored (0) or deflated (8) (naming the method), stored
 * with two different sizes, or lies outside the archive. */
int lade__zip_data(const lade__zip_t *z, const lade__zip_entry_t *e, const uint8_t **data);

/* CRC-32 (zip's, zlib's crc32) of n bytes, continuing from crc (0 to start). */
uint32_t lade__zip_crc32(uint32_t crc, const uint8_t *p, size_t n);

/* 0 when the e->usize bytes at `bytes` have the directory's CRC-32, else
 * LADE_EFORMAT naming the member and both values. */
int lade__zip_check_crc(const lade__zip_entry_t *e, const uint8_t *bytes);

/* The entry's name for a message: quoted, at most about 80 bytes, control
 * and non-ASCII bytes as '?'. */
void lade__zip_show_name(const lade__zip_entry_t *e, char *buf, size_t size);

/* "'a.npy', 'b.npy', ... (N members)": the first `most` names, for a
 * message saying what the archive holds. */
void lade__zip_list_names(const lade__zip_t *z, int most, char *buf, size_t size);

#endif
