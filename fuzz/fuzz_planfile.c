/*
 * fuzz_planfile.c - libFuzzer target for the plan file reader
 * (src/planner/planfile.c: lade_plan_file_open, lade_plan_file_step). A plan
 * file is written by `lade plan --out` and read back by `lade plan --in`,
 * possibly on another machine, so its bytes are outside input.
 *
 *   byte 0, bit 0: append the trailer (checksum of the rest + "LADEEND") so
 *                  the reader gets past its checksum to the header and steps;
 *                  else the rest is the whole file
 *   the rest: the file
 *
 * For every step the reader accepts, the target reads what its contract in
 * include/lade/plan.h promises (as `lade plan --in --dump` does): learner r's
 * samples[offset[r] .. offset[r+1]) and from[], admit[admit_offset[r] ..],
 * evict[evict_offset[r] ..], every transfer. It checks the offsets are
 * ordered and within total and the transfers name learners of the plan;
 * anything out of bounds is a crash under ASan or a SEGV.
 *
 * Findings (fixed in planfile.c, regression tests in
 * tests/unit/test_planfile.c): a size not a multiple of 8 loaded the
 * trailer misaligned (UBSan); the step count, index offset, a step's
 * offset and its counts (total, admits, evicts, transfers) wrapped the
 * bounds arithmetic, so arrays were handed out past the mapping (SEGV);
 * offsets that were not ordered or did not end at the counts promised
 * slices outside the arrays (`lade plan --in --dump` read them).
 * Run, seeds in fuzz/corpus/planfile/ (UBSAN_OPTIONS=halt_on_error=1,
 * -max_total_time=120): 3,318,649 runs in 121 s, no finding after the fix.
 */
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/core.h"
#include "lade/plan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char g_path[256];

static void ordered(const uint64_t *off, uint32_t p, uint64_t limit) {
  if (off[0] != 0) abort();
  for (uint32_t r = 0; r < p; r++)
    if (off[r] > off[r + 1]) abort();
  if (off[p] > limit) abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_path[0]) {
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_path, sizeof g_path, "%s/lade_fuzz_plan.%ld", base, (long)getpid());
  }
  if (size < 1) return 0;
  int fd = open(g_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (fd < 0) abort();
  if (size > 1 && write(fd, data + 1, size - 1) != (ssize_t)(size - 1)) abort();
  if (data[0] & 1) {
    uint64_t tr[2];
    tr[0] = lade__hash64(data + 1, size - 1, 1469598103934665603ull);
    memcpy(&tr[1], "LADEEND", 8);
    if (write(fd, tr, sizeof tr) != (ssize_t)sizeof tr) abort();
  }
  close(fd);

  lade_plan_file_t *f = NULL;
  if (lade_plan_file_open(&f, g_path) == 0) {
    uint64_t n = lade_plan_file_steps(f), sum = 0;
    for (uint64_t i = 0; i < n && i < 64; i++) {
      const lade_plan_step_t *v;
      if (lade_plan_file_step(f, i, &v) != 0) continue;
      uint32_t p = v->learners;
      ordered(v->offset, p, v->total);
      if (v->offset[p] != v->total) abort();
      for (uint32_t r = 0; r < p; r++)
        for (uint64_t j = v->offset[r]; j < v->offset[r + 1]; j++) sum += v->samples[j] + (uint64_t)v->from[j];
      ordered(v->admit_offset, p, UINT64_MAX);
      ordered(v->evict_offset, p, UINT64_MAX);
      for (uint64_t j = 0; j < v->admit_offset[p]; j++) sum += v->admit[j];
      for (uint64_t j = 0; j < v->evict_offset[p]; j++) sum += v->evict[j];
      for (uint64_t t = 0; t < v->transfers; t++) {
        if (v->transfer[t].src >= p || v->transfer[t].dst >= p) abort();
        sum += v->transfer[t].count;
      }
    }
    if (sum == 42) fputc(0, stderr); /* keep the reads */
    lade_plan_file_close(f);
  }
  lade__clear_error();
  return 0;
}
