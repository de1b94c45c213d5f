/*
 * fuzz_npz.c - libFuzzer target for the zip reader (src/core/zipfmt.c) and
 * the npz transform over it (src/transform/npz.c: member lookup, inflate,
 * CRC, the member's .npy header and its conversion). Checks the reader's
 * promises on success: every entry's name lies inside the directory, a
 * member's data inside the archive; and runs the transform on the input as
 * sample 0 and as a sample (typed, and into a cut raw_size slot), its
 * output in an allocation of exactly the slot's size so a write past it is
 * caught (ASan).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "core/zipfmt.h"
#include "transform/transform.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The npz transform over the input, member `x` (x or x.npy): typed
 * (raw_size 0) or into a raw_size slot, longer arrays cut. */
static void run_transform(const uint8_t *in, size_t size, uint64_t raw_size) {
  lade__xform_conf_t conf = {.npz_member = "x", .raw_size = raw_size, .raw_cut = raw_size > 0};
  lade__sample_shape_t sh;
  void *st = NULL, *ws = NULL;
  if (lade__xform_npz.init(&st, &conf, in, size, &sh) != 0) return;
  if (sh.bytes <= (1u << 20) && lade__xform_npz.worker_init(st, &ws) == 0) {
    uint8_t *out = malloc(sh.bytes ? sh.bytes : 1);
    uint32_t payload = 0;
    if (!out) abort();
    if (lade__xform_npz.apply(st, ws, in, size, NULL, out, &payload) == 0 &&
        (raw_size ? payload > sh.bytes : payload != sh.bytes))
      abort();
    /* twice on one worker: its scratch and inflate stream are reused */
    (void)lade__xform_npz.apply(st, ws, in, size, NULL, out, &payload);
    free(out);
    lade__xform_npz.worker_free(st, ws);
  }
  lade__xform_npz.destroy(st);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  /* the input in its own allocation: a read past its end is caught */
  uint8_t *in = malloc(size ? size : 1);
  if (!in) abort();
  memcpy(in, data, size);
  lade__zip_t z;
  if (lade__zip_open(&z, in, size) == 0) {
    if (z.cd_off > size || z.cd_len > size - z.cd_off) abort();
    size_t pos = 0;
    lade__zip_entry_t e;
    while (lade__zip_next(&z, &pos, &e) == 1) {
      if (e.name < in + z.cd_off || e.name + e.raw_name_len > in + z.cd_off + z.cd_len) abort();
      const uint8_t *d;
      if (lade__zip_data(&z, &e, &d) == 0) {
        if (d < in || e.csize > (uint64_t)(in + size - d)) abort();
        if (e.method == 0) (void)lade__zip_check_crc(&e, d);
      }
    }
    char names[256];
    lade__zip_list_names(&z, 4, names, sizeof names);
  }
  run_transform(in, size, 0);
  run_transform(in, size, 64);
  free(in);
  return 0;
}
