/*
 * hdf5_impl.h - what hdf5.c (the source: open, the stage, H5Dread and pread
 * reads) and hdf5_chunk.c (the chunk path: raw chunks inflated outside the
 * library's lock, with their cache) share: the source's state and the one
 * lock every libhdf5 call takes. Internal to src/source/.
 */
#ifndef LADE__HDF5_IMPL_H
#define LADE__HDF5_IMPL_H

#include <hdf5.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "source.h"

/* Takes the global lock of libhdf5 (a serial build: every H5* call of the
 * source runs under it) and stops libhdf5 from printing its error stack to
 * stderr for the calls that follow (the errors go into lade_last_error()
 * instead); the previous handler is put back by lade__h5_unlock, so h5py or
 * another user of the library in this process keeps its own setting. */
typedef struct lade__h5_guard {
  H5E_auto2_t func;
  void *data;
} lade__h5_guard_t;
void lade__h5_lock(lade__h5_guard_t *g);
void lade__h5_unlock(lade__h5_guard_t *g);

struct run;
struct slot;
struct centry;

typedef struct lade__h5 {
  char path[LADE__PATH_MAX];
  char dname[256], lname[256];
  int fd; /* the file, for version() and the in-place check */
  lade__file_ver_t ver; /* the file as open saw it: checked after every read */
  uint64_t max_sample;  /* max_sample_bytes */
  hid_t file, dset, fspace, mspace, mtype;
  bool own_mtype;
  int rank;
  hsize_t dims[LADE_MAX_DIMS + 1];
  size_t sample_bytes, sample_elems;
  int32_t *labels;
  char row_hdr[256];
  size_t row_hdr_len;
  uint64_t gap;
  bool direct;     /* read with pread at offset (read_direct) */
  bool allow_fast; /* hdf5_direct=auto */
  bool chunked;    /* read raw chunks, inflate outside the lock (the chunk path) */
  uint64_t rows;   /* samples per chunk (chunked) */
  int nfilters;
  int filter[3];   /* the filter pipeline, in write order (deflate, shuffle, fletcher32) */
  hsize_t cdims[LADE_MAX_DIMS + 1]; /* chunk dimensions (chunked datasets) */
  size_t chunk_bytes;               /* bytes of an inflated chunk */
  /* The H5Dread path of a gzip-chunked dataset: libhdf5's deflate filter
   * neither bounds nor checks the inflated size, so each chunk is inflated
   * here (bounded) once before libhdf5 reads it (hdf5_chunk.c). */
  bool verify;
  uint64_t nchunks;   /* chunks in the dataset */
  uint64_t *checked;  /* a bit per chunk checked (NULL: check every time); under the libhdf5 lock */
  pthread_mutex_t cmu; /* the chunk cache (hdf5_chunk.c): everything below */
  pthread_cond_t ccv;
  struct centry **cbucket;
  size_t cbuckets, centries, cmax;
  struct centry *cold_, *cnew;
  size_t chunk_cache; /* bytes of libhdf5's chunk cache for the dataset (0: libhdf5's default) */
  uint64_t offset; /* of the dataset's bytes in the file */
  _Atomic uint64_t reads;

  pthread_mutex_t mu; /* the stage: everything below */
  pthread_cond_t cv;
  struct slot *tab;
  size_t tab_cap, tab_n, tab_max;
  _Atomic uint64_t *staged; /* count bits (NULL above 2^28 samples: always look) */
  size_t stage_bytes, stage_max;
  struct run *oldest, *newest;
  /* buffers of dropped runs, reused: a fresh large malloc is an mmap whose
   * pages fault in zeroed on every run */
  uint8_t *spare[8];
  size_t spare_cap[8];
  int nspare;
} lade__h5_t;

/* The chunk path (hdf5_chunk.c). With the lock held, at open, after
 * lade__h5_chunk_layout: sets m->chunked (and rows) when the dataset's
 * chunks hold whole samples filtered by deflate, with or without shuffle,
 * in the host's byte order (needs zlib; without it m->chunked stays
 * false). */
void lade__h5_chunk_detect(lade__h5_t *m);
/* With the lock held, at open, for a dataset not read by pread: sets
 * m->verify (and cdims, chunk_bytes, filters) when its chunks are
 * deflate-filtered, alone or with shuffle and fletcher32. Both the chunk
 * path and the H5Dread path then check every chunk's inflated size. */
int lade__h5_chunk_layout(lade__h5_t *m);
/* With the lock held, before an H5Dread of samples [first, first + count):
 * inflates (bounded by the chunk's size) every chunk it touches that was
 * not checked yet; 0, or a LADE_EFORMAT naming file, dataset and chunk when
 * one inflates to another size than the chunk's. */
int lade__h5_chunk_check(lade__h5_t *m, uint64_t first, uint64_t count);
/* The chunk cache of m->chunk_cache bytes, for a chunked m: 0 or
 * LADE_ENOMEM. */
int lade__h5_chunk_init(lade__h5_t *m);
/* Sample idx into dst (sample_bytes) from its inflated chunk: 0, 1 when
 * the chunk path cannot serve it (a chunk never written: the caller reads
 * it through H5Dread), or a negative code naming the chunk when it is
 * corrupt. Thread-safe. */
int lade__h5_chunk_sample(lade__h5_t *m, uint64_t idx, void *dst);
/* Frees the chunk cache (no reader may be in lade__h5_chunk_sample). */
void lade__h5_chunk_free(lade__h5_t *m);

#endif
