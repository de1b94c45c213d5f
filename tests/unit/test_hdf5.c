/* test_hdf5.c - the hdf5 source under threads (built for ThreadSanitizer in
 * scripts/test.sh): a file written with the HDF5 C API, read by 4 workers
 * with coalescing on, through the direct pread path, the chunk path (gzip
 * chunks inflated outside libhdf5's lock) and the locked H5Dread path
 * (contiguous and gzip-chunked); every sample and label checked,
 * reads issued below one per sample. Exits 77 (skipped) without libhdf5. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "lade/lade.h"

#ifndef LADE_HAVE_HDF5
int main(void) {
  printf("skipped: lade was built without libhdf5 (LADE_WITH_HDF5)\n");
  return 77;
}
#else
#include <hdf5.h>

#define N 3000
#define DIM 24

static char path[4096];

static float value(uint64_t i, int k) { return (float)(i * 100 + (uint64_t)k) * 0.5f; }

static void make_file(void) {
  snprintf(path, sizeof path, "%s/d.h5", lade_test_tmpdir("hdf5"));
  float *x = malloc((size_t)N * DIM * sizeof *x);
  int64_t *lab = malloc(N * sizeof *lab);
  for (uint64_t i = 0; i < N; i++) {
    for (int k = 0; k < DIM; k++) x[i * DIM + (uint64_t)k] = value(i, k);
    lab[i] = (int64_t)(i % 17);
  }
  hid_t f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t dims[2] = {N, DIM}, chunk[2] = {10, DIM}, ln = N;
  hid_t sp = H5Screate_simple(2, dims, NULL), ls = H5Screate_simple(1, &ln, NULL);
  hid_t d = H5Dcreate2(f, "data", H5T_IEEE_F32LE, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
  H5Dclose(d);
  hid_t pl = H5Pcreate(H5P_DATASET_CREATE);
  H5Pset_chunk(pl, 2, chunk);
  H5Pset_deflate(pl, 1);
  d = H5Dcreate2(f, "gz", H5T_IEEE_F32LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, x);
  H5Dclose(d);
  d = H5Dcreate2(f, "labels", H5T_STD_I64LE, ls, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(d, H5T_NATIVE_INT64, H5S_ALL, H5S_ALL, H5P_DEFAULT, lab);
  H5Dclose(d);
  H5Pclose(pl);
  H5Sclose(sp);
  H5Sclose(ls);
  H5Fclose(f);
  free(x);
  free(lab);
}

static void load(const char *data, const char *direct, const char *gap) {
  lade_config_t *c = NULL;
  lade_config_create(&c);
  char s_data[64], s_direct[64], s_gap[64];
  snprintf(s_data, sizeof s_data, "hdf5_data=%s", data);
  snprintf(s_direct, sizeof s_direct, "hdf5_direct=%s", direct);
  snprintf(s_gap, sizeof s_gap, "hdf5_gap=%s", gap);
  const char *kv[] = {"threads=4", "batch_size=50", "epochs=2", "prefetch=3", s_data, s_direct, s_gap};
  CHECK_OK(lade_config_set(c, "source", path));
  for (size_t i = 0; i < sizeof kv / sizeof kv[0]; i++) CHECK_OK(lade_config_parse(c, kv[i]));
  lade_loader_t *L = NULL;
  CHECK_OK(lade_loader_create(&L, c));
  lade_config_destroy(c);
  if (!L) return;
  static uint32_t seen[2][N];
  memset(seen, 0, sizeof seen);
  uint64_t samples = 0;
  int bad = 0;
  for (;;) {
    lade_batch_t *b = NULL;
    CHECK_OK(lade_loader_next(L, &b));
    if (!b) break;
    CHECK_EQ_INT(b->dtype, LADE_DTYPE_FLOAT32);
    const float *v = b->data;
    for (int64_t j = 0; j < b->shape[0]; j++) {
      uint64_t i = (uint64_t)b->indices[j];
      for (int k = 0; k < DIM && !bad; k++)
        if (v[j * DIM + k] != value(i, k)) bad = 1;
      if (b->labels[j] != (int64_t)(i % 17)) bad = 1;
      seen[b->epoch][i]++;
      samples++;
    }
    lade_batch_release(b);
  }
  CHECK(!bad);
  for (int e = 0; e < 2; e++)
    for (int i = 0; i < N; i++) CHECK_EQ_INT(seen[e][i], 1);
  lade_stats_t st;
  CHECK_OK(lade_loader_stats(L, &st, sizeof(lade_stats_t)));
  if (strcmp(gap, "0") == 0) CHECK_EQ_INT(st.get_requests, samples + 1); /* + the labels */
  else CHECK(st.get_requests < samples);
  lade_loader_destroy(L);
}

static void test_direct(void) { load("data", "auto", "8"); }
static void test_locked_contiguous(void) { load("data", "off", "8"); }
static void test_chunk_path_gzip(void) { load("gz", "auto", "8"); } /* raw chunks inflated by the workers */
static void test_locked_gzip(void) { load("gz", "off", "8"); }
static void test_no_coalescing(void) { load("data", "auto", "0"); }

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  make_file();
  RUN(test_direct);
  RUN(test_locked_contiguous);
  RUN(test_chunk_path_gzip);
  RUN(test_locked_gzip);
  RUN(test_no_coalescing);
  return lade_test_finish();
}
#endif
