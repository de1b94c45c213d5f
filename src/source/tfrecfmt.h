/*
 * tfrecfmt.h - TensorFlow's TFRecord files and tf.train.Example records,
 * on their own so that they can be fuzzed without a file system (the bytes
 * of a file come through tarfmt's pread-like callback).
 *
 * A file is a sequence of records: uint64 length (little-endian), uint32
 * masked CRC-32C of those 8 bytes, the data, uint32 masked CRC-32C of the
 * data. A record's data is usually a serialized tf.train.Example:
 *
 *   Example  { Features features = 1; }
 *   Features { map<string, Feature> feature = 1; }   entries: key = 1, value = 2
 *   Feature  { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
 *                           Int64List int64_list = 3; } }
 *   BytesList { repeated bytes value = 1; }
 *   FloatList { repeated float value = 1 [packed]; }  packed or not
 *   Int64List { repeated int64 value = 1 [packed]; }  packed or not
 *
 * The decoder walks the protobuf wire format directly, with every length
 * checked against the bytes that hold it and varints of at most 10 bytes;
 * fields it does not know are skipped by wire type (groups included, nested
 * at most 32 deep). Where protobuf keeps the last of repeated singular
 * fields (a map key given twice, a Feature's kind given twice) so does the
 * decoder; it does not merge two occurrences of one message field (TF
 * never writes them). Nothing here allocates.
 */
#ifndef LADE__TFRECFMT_H
#define LADE__TFRECFMT_H

#include <stddef.h>
#include <stdint.h>

#include "tarfmt.h" /* lade__tar_pread_fn */

#define LADE__TFREC_HEAD 12u /* a record's length and its masked CRC */
#define LADE__TFREC_TAIL 4u  /* the masked CRC after a record's data */
/* lade__tfrec_init's file_size for bytes of unknown length (an inflated
 * stream): they may end after any whole record. */
#define LADE__TFREC_STREAM UINT64_MAX

/* TFRecord's masked CRC of a CRC-32C: ((c >> 15) | (c << 17)) + 0xa282ead8. */
uint32_t lade__tfrec_mask(uint32_t crc);
/* The masked CRC-32C of n bytes. */
uint32_t lade__tfrec_masked_crc(const void *p, size_t n);
/* The little-endian uint32 at p. */
uint32_t lade__tfrec_u32(const uint8_t *p);

/* Reads a file's record headers through a pread callback. */
typedef struct lade__tfrec_reader {
  lade__tar_pread_fn pread;
  void *ctx;
  uint64_t file_size;
  uint64_t pos;    /* offset of the next record */
  uint64_t record; /* number of the next record, from 0 */
} lade__tfrec_reader_t;

typedef struct lade__tfrec_record {
  uint64_t index;    /* its number in the file, from 0 */
  uint64_t off;      /* offset of its header */
  uint64_t data_off; /* off + 12 */
  uint64_t len;      /* bytes of data; its masked CRC follows them */
} lade__tfrec_record_t;

void lade__tfrec_init(lade__tfrec_reader_t *r, lade__tar_pread_fn fn, void *ctx, uint64_t file_size);
/* The next record's header into *rec: its length CRC checked and its data
 * and data CRC inside the file (the data itself is not read; for a
 * LADE__TFREC_STREAM the caller checks that they are there). Returns 1
 * with a record, 0 at the end of the file (right after a record), or a
 * negative LADE_E* code whose lade_last_error() names the record and its
 * offset ("record 3 (at byte 4113): ..."; not the file): a truncated
 * header, a bad length CRC, a length past the end of the file, or a read
 * error. */
int lade__tfrec_next(lade__tfrec_reader_t *r, lade__tfrec_record_t *rec);
/* 0 when the 4 bytes at crc are the masked CRC of len bytes of data, else
 * -1 with *stored and *computed (no error set). */
int lade__tfrec_check(const uint8_t *data, size_t len, const uint8_t *crc, uint32_t *stored, uint32_t *computed);

/* ---- tf.train.Example */

enum { LADE__TFREC_NONE = 0, LADE__TFREC_BYTES = 1, LADE__TFREC_FLOAT = 2, LADE__TFREC_INT64 = 3 };

/* One feature of an Example: its kind and the bytes of its list message
 * (a BytesList, FloatList or Int64List), borrowed from the Example. */
typedef struct lade__tfrec_feature {
  int kind; /* LADE__TFREC_*; NONE: a Feature with no kind set */
  const uint8_t *p;
  size_t n;
} lade__tfrec_feature_t;

/* Feature `name` of the serialized Example ex (n bytes). Returns 1 with *f,
 * 0 when the Example has no such feature, or LADE_EFORMAT when ex is not a
 * well-formed Example, with a message saying where ("not a tf.train.Example:
 * ..."). The whole Example is checked, not only up to the feature. */
int lade__tfrec_find(const uint8_t *ex, size_t n, const char *name, lade__tfrec_feature_t *f);
/* The names of ex's features for a message: "'image', 'size'" (at most
 * `size` bytes, cut with "..."); returns how many there are (0 for an
 * empty or malformed Example). Sets no error. */
size_t lade__tfrec_names(const uint8_t *ex, size_t n, char *buf, size_t size);
/* The first value of a BytesList feature: 0 with *p, *len, or LADE_EFORMAT
 * (message) when it holds no value or is malformed. */
int lade__tfrec_first_bytes(const lade__tfrec_feature_t *f, const uint8_t **p, size_t *len);
/* The values of an Int64List or FloatList feature (packed and unpacked
 * encodings, mixed too): the first `max` of them as a little-endian array
 * of int64 or float32 at dst (NULL: none); *count is the number of values.
 * 0, or LADE_EFORMAT (message) when malformed. */
int lade__tfrec_numbers(const lade__tfrec_feature_t *f, uint8_t *dst, uint64_t max, uint64_t *count);
/* The bytes a feature delivers as a sample: a BytesList's first value, an
 * Int64List's values as int64, a FloatList's as float32. 0 with *size, or
 * LADE_EFORMAT (message). */
int lade__tfrec_value_size(const lade__tfrec_feature_t *f, uint64_t *size);
/* Its name for messages: "bytes_list", "float_list", "int64_list", "empty". */
const char *lade__tfrec_kind_name(int kind);

#endif
