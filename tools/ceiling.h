/* ceiling.h - what the machine can do without lade, measured beside it:
 * the bare read rate of a dataset's files and the best whole-image JPEG
 * decode rate libjpeg-turbo offers, with a given number of threads. Used by
 * `lade bench` (its "ceiling" line) and bench/jpeg_transform.c. */
#ifndef LADE_TOOL_CEILING_H
#define LADE_TOOL_CEILING_H
#include <stddef.h>
#include <stdint.h>

/* Monotonic seconds. */
double lade_tool_mono(void);

/* The CPU's model name and family/model numbers from /proc/cpuinfo, e.g.
 * "AMD EPYC 9R45 (family 26 model 2)"; "unknown CPU" when unreadable. */
void lade_tool_cpu_model(char *out, size_t size);

/* Whole-image decodes of one JPEG with libjpeg-turbo's scanline API: the
 * full image into one buffer, RGB, as many rows per call as the decoder
 * gives (what TurboJPEG's tjDecompress2 does); rows=1 reads one row per
 * call (the old, understated baseline). buf and cap grow as needed.
 * Returns 0, or -1 (not a JPEG this build can decode; no libjpeg). */
int lade_tool_decode_whole(const uint8_t *jpeg, size_t len, int rows, uint8_t **buf, size_t *cap);

typedef struct lade_tool_ceiling {
  uint64_t files, bytes;   /* the sample measured */
  double read_per_s;       /* files read per second (pread of the whole file), 0 if not measured */
  double decode_per_s;     /* whole-image decodes per second, 0 if not measured (not JPEG, no libjpeg) */
  int threads;
  char why[160];           /* why a rate was not measured, or "" */
} lade_tool_ceiling_t;

/* What a caller does with the files' bytes once the rates are measured
 * (before they are freed): the stage account, which needs the same files. */
typedef void (*lade_tool_bytes_fn)(void *ctx, uint8_t *const *data, const size_t *len, uint64_t n);

/* Reads the n files of paths with `threads` threads (each whole, once),
 * then decodes the bytes read with the same threads (when they are JPEGs
 * and `decode` is set), then hands the bytes to then(ctx, ...) when it is
 * not NULL and every file was read. Files that are not regular files end
 * it with why set. The rates are per file. */
void lade_tool_ceiling(const char *const *paths, uint64_t n, int threads, int decode, lade_tool_ceiling_t *out,
                       lade_tool_bytes_fn then, void *ctx);

/* The copy ceiling of raw samples (`lade bench` with the raw, npy and npz
 * transforms): where up to 16,384 of the loader's samples (and about 4 GiB)
 * lie (lade_loader_sample_extent), the pages of each sample's range mapped
 * with MAP_POPULATE (so they are in the page cache and mapped before the
 * clock starts), then each range memcpy'd into a batch-sized ring of slots
 * per thread, the samples dealt round-robin to `threads` threads, for at
 * least a quarter of a second. A memcpy of the bytes from the page cache
 * is the least any loader does to put them in a batch: a pread is this
 * copy made by the kernel, plus a system call and the page cache's lookup.
 * The same ranges pread() with the same threads are measured beside it
 * (the descriptors opened beforehand), to tell the system's share from
 * lade's. */
typedef struct lade_tool_copy {
  uint64_t samples, bytes;  /* the samples measured and their bytes */
  double per_s;             /* samples copied per second, 0 if not measured */
  double gb_per_s;          /* the same in 1e9 bytes per second */
  double pread_per_s;       /* for comparison: the same ranges pread() from the files' open descriptors
                             * (0: more files than the process may hold open) */
  int threads;
  char why[200];            /* why it was not measured, or "" */
  void *ranges;             /* between the two calls below */
} lade_tool_copy_t;

struct lade_loader;
/* Takes the ranges of up to 16,384 of loader L's nsamples samples (fewer
 * when sample 0 is larger than 256 KiB), spread evenly (after its run,
 * before it is destroyed). 0, or -1 with out->why
 * set (the loader's message: a remote source, a deflated member...). */
int lade_tool_copy_ranges(struct lade_loader *L, uint64_t nsamples, lade_tool_copy_t *out);
/* Then, with nothing else running: maps the files and measures the copy
 * with `threads` threads and `batch` slots per thread; frees the ranges
 * (also when it fails, with out->why set). */
void lade_tool_copy_measure(lade_tool_copy_t *out, int threads, uint64_t batch);

#endif
