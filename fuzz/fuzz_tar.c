/*
 * fuzz_tar.c - libFuzzer target for the tar header reader
 * (lade__tar_next, src/source/tarfmt.c): the input is a whole shard, read
 * through a pread callback over the input buffer. Checks the reader's
 * promises for every member it returns: its data lies inside the file, its
 * header lies before its data, its name is NUL-terminated at name_len, and
 * each call moves forward (so the walk ends); an error always leaves a
 * message.
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"
#include "lade/lade.h"
#include "fuzz_mem.h"
#include "source/tarfmt.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  mem_t m = {data, size};
  lade__tar_reader_t r;
  lade__tar_init(&r, mem_pread, &m, size);
  lade__tar_member_t mb;
  uint64_t last = 0;
  int rc;
  while ((rc = lade__tar_next(&r, &mb)) == 1) {
    if (mb.data_off > size || mb.size > size - mb.data_off) abort();
    if (mb.header_off + 512 > mb.data_off || mb.header_off < last) abort();
    if (strlen(mb.name) != mb.name_len) abort();
    if (r.pos <= mb.header_off) abort();
    last = r.pos;
  }
  if (rc < 0 && !lade_last_error()[0]) abort();
  lade__clear_error();
  lade__tar_free(&r);
  return 0;
}
