/*
 * crc32c.h - CRC-32C (Castagnoli: reflected polynomial 0x82F63B78, initial
 * value and final xor ~0), the checksum of TFRecord files (the tfrecord
 * format of the tar source family, src/source/tfrecfmt.c) and the public
 * lade_crc32c(). One entry point picks the fastest implementation once per
 * process: SSE4.2's crc32 instruction where the CPU has it (a runtime
 * check), else slicing-by-8 tables. Both give the same value for every
 * input (tests/unit/test_tfrecord.c compares them).
 */
#ifndef LADE__CRC32C_H
#define LADE__CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* The CRC-32C of n bytes at p, continuing from crc (0 to start): chainable,
 * crc32c(b, crc32c(a, 0)) is the CRC of a followed by b, as zlib's crc32().
 * Thread-safe. */
uint32_t lade__crc32c(uint32_t crc, const void *p, size_t n);
/* The same with the tables only (the fallback), for tests. */
uint32_t lade__crc32c_sw(uint32_t crc, const void *p, size_t n);
/* 1 when lade__crc32c() uses the CPU's crc32 instruction. */
int lade__crc32c_hw(void);

#endif
