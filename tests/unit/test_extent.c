/* test_extent.c - lade_loader_sample_extent: for every source and transform
 * that delivers a plain range of a local file, the range's bytes are the
 * bytes the loader delivers for that sample (compared sample by sample);
 * where they are not a plain range (a deflated .npz member, a gzip-chunked
 * HDF5 dataset, a byte-swapped array) it says so. The fixtures are written
 * by numpy, tarfile and h5py; without /usr/bin/python3 and numpy the test
 * is skipped (77). */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lade/lade.h>

#include "harness.h"

#define N 12

static const char *dir;

/* A loader of source under dir (transform, extra setting or NULL), one
 * sample per batch in order, on one thread; NULL (a failed check) if none. */
static lade_loader_t *open_loader(const char *source, const char *transform, const char *extra) {
  char src[4096];
  snprintf(src, sizeof src, "%s/%s", dir, source);
  lade_config_t *cfg;
  lade_loader_t *L = NULL;
  CHECK_OK(lade_config_create(&cfg));
  CHECK_OK(lade_config_set(cfg, "source", src));
  CHECK_OK(lade_config_set(cfg, "transform", transform));
  CHECK_OK(lade_config_set(cfg, "batch_size", "1"));
  CHECK_OK(lade_config_set(cfg, "shuffle", "false"));
  CHECK_OK(lade_config_set(cfg, "threads", "1"));
  if (extra) CHECK_OK(lade_config_parse(cfg, extra));
  CHECK_OK(lade_loader_create(&L, cfg));
  lade_config_destroy(cfg);
  return L;
}

/* Loads source in order and compares each delivered sample with its
 * range's bytes. */
static void same_bytes(const char *source, const char *transform, const char *extra) {
  lade_loader_t *L = open_loader(source, transform, extra);
  if (!L) return;
  int seen = 0;
  lade_batch_t *b;
  while (lade_loader_next(L, &b) == 0 && b) {
    char path[8192];
    uint64_t off = 0, len = 0;
    CHECK_OK(lade_loader_sample_extent(L, (uint64_t)b->indices[0], path, sizeof path, &off, &len));
    CHECK_EQ_INT(len, b->nbytes);
    uint8_t *buf = malloc(len + 1);
    int fd = open(path, O_RDONLY);
    CHECK(fd >= 0 && pread(fd, buf, len, (off_t)off) == (ssize_t)len && memcmp(buf, b->data, len) == 0);
    if (fd >= 0) close(fd);
    free(buf);
    lade_batch_release(b);
    seen++;
  }
  CHECK_EQ_INT(seen, N);
  char path[64];
  uint64_t off, len;
  CHECK_EQ_INT(lade_loader_sample_extent(L, N, path, sizeof path, &off, &len), LADE_ERANGE);
  lade_loader_destroy(L);
}

/* The range of sample 0 is refused with a message holding `why`. */
static void refused(const char *source, const char *transform, const char *extra, const char *why) {
  char path[8192];
  lade_loader_t *L = open_loader(source, transform, extra);
  if (!L) return;
  uint64_t off, len;
  CHECK_EQ_INT(lade_loader_sample_extent(L, 0, path, sizeof path, &off, &len), LADE_EUNSUPPORTED);
  CHECK(strstr(lade_last_error(), why) != NULL);
  if (!strstr(lade_last_error(), why)) fprintf(stderr, "  message: %s\n", lade_last_error());
  lade_loader_destroy(L);
}

static void test_npy_folder(void) { same_bytes("npy", "npy", NULL); }
static void test_npy_stacked(void) { same_bytes("stacked.npy", "npy", NULL); }
static void test_folder_raw(void) { same_bytes("npy", "raw", "source_type=dir"); }
static void test_stacked_raw(void) { refused("stacked.npy", "raw", NULL, "header lade writes"); }
static void test_tar_npy(void) { same_bytes("npy.tar", "npy", NULL); }
static void test_npz_stored(void) { same_bytes("npz", "npz", "npz_member=x"); }
static void test_npz_deflated(void) { refused("npzc", "npz", "npz_member=x", "deflated"); }
static void test_byte_swapped(void) { refused("big", "npy", NULL, "byte-swapped"); }

static void test_hdf5(void) {
#ifdef LADE_HAVE_HDF5
  if (lade_test_sh("test -f %s/c.h5", dir)) {
    printf("  (no h5py to write the HDF5 fixtures: skipped)\n");
    return;
  }
  same_bytes("c.h5", "auto", NULL);
  refused("z.h5", "auto", NULL, "gzip-chunked");
#else
  printf("  (lade was built without libhdf5: skipped)\n");
#endif
}

static const char *PY =
    "import numpy as np, os, sys, tarfile\n"
    "d = sys.argv[1]\n"
    "for sub in ('npy', 'npz', 'npzc', 'big'): os.makedirs(os.path.join(d, sub))\n"
    "rows = [np.arange(i * 48, i * 48 + 48, dtype=np.float32).reshape(4, 12) for i in range(12)]\n"
    "for i, a in enumerate(rows):\n"
    "    np.save(os.path.join(d, 'npy', 's%02d.npy' % i), a)\n"
    "    np.save(os.path.join(d, 'big', 's%02d.npy' % i), a.astype('>f4'))\n"
    "    np.savez(os.path.join(d, 'npz', 's%02d.npz' % i), y=a[:1], x=a)\n"
    "    np.savez_compressed(os.path.join(d, 'npzc', 's%02d.npz' % i), x=a)\n"
    "np.save(os.path.join(d, 'stacked.npy'), np.stack(rows))\n"
    "with tarfile.open(os.path.join(d, 'npy.tar'), 'w', format=tarfile.USTAR_FORMAT) as t:\n"
    "    for i in range(12): t.add(os.path.join(d, 'npy', 's%02d.npy' % i), 's%02d.npy' % i)\n"
    "try:\n"
    "    import h5py\n"
    "except ImportError:\n"
    "    sys.exit(0)\n"
    "with h5py.File(os.path.join(d, 'c.h5'), 'w') as f: f['data'] = np.stack(rows)\n"
    "with h5py.File(os.path.join(d, 'z.h5'), 'w') as f:\n"
    "    f.create_dataset('data', data=np.stack(rows), chunks=(2, 4, 12), compression='gzip')\n";

int main(int argc, char **argv) {
  lade_test_args(argc, argv);
  dir = lade_test_tmpdir("extent");
  char py[4200];
  snprintf(py, sizeof py, "%s/make.py", dir);
  FILE *f = fopen(py, "w");
  if (f) fputs(PY, f), fclose(f);
  if (!f || lade_test_sh("/usr/bin/python3 -c 'import numpy' 2>/dev/null")) {
    printf("skipped: no /usr/bin/python3 with numpy to write the fixtures\n");
    return 77;
  }
  if (lade_test_sh("/usr/bin/python3 %s %s", py, dir)) {
    fprintf(stderr, "the fixtures could not be written\n");
    return 1;
  }
  RUN(test_npy_folder);
  RUN(test_npy_stacked);
  RUN(test_folder_raw);
  RUN(test_stacked_raw);
  RUN(test_tar_npy);
  RUN(test_npz_stored);
  RUN(test_npz_deflated);
  RUN(test_byte_swapped);
  RUN(test_hdf5);
  return lade_test_finish();
}
