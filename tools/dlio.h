/* dlio.h - `lade dlio`: DLIO's workloads (the benchmark MLPerf Storage runs)
 * run with lade (docs/dlio.md). Three parts, one file each:
 *   dlio_config.c  DLIO's workload YAML (libyaml) and key=value overrides,
 *                  into dlio_cfg_t: every key DLIO reads is emulated, named
 *                  as not emulated, or refused with its value;
 *   dlio_gen.c     `datagen`: the files DLIO's generators write (npz,
 *                  tfrecord), the same names and record shapes;
 *   dlio_run.c     `run` and `sweep`: emulated accelerators over lade's
 *                  loader, DLIO's metrics computed DLIO's way. */
#ifndef LADE_TOOL_DLIO_H
#define LADE_TOOL_DLIO_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define DLIO_PATH 4096

enum { DLIO_FMT_NPZ = 0, DLIO_FMT_TFRECORD = 1 };
enum { DLIO_FW_PYTORCH = 0, DLIO_FW_TENSORFLOW = 1 };
enum { DLIO_SHUFFLE_OFF = 0, DLIO_SHUFFLE_SEED = 1, DLIO_SHUFFLE_RANDOM = 2 };
/* A time DLIO draws per step (utils/utility.py sleep()): a fixed value or
 * one of numpy's distributions; the absolute value is slept. */
enum { DLIO_DIST_NONE = 0, DLIO_DIST_FIXED, DLIO_DIST_NORMAL, DLIO_DIST_UNIFORM, DLIO_DIST_GAMMA,
       DLIO_DIST_EXPONENTIAL, DLIO_DIST_POISSON };

typedef struct dlio_dist {
  int type;
  double mean, stdev, min, max, shape, scale, lam;
  bool has_mean, has_stdev;
} dlio_dist_t;

typedef struct dlio_cfg {
  char model[128];
  int framework;                    /* DLIO_FW_*: the default data_loader */
  bool generate_data, train;        /* workflow */
  char data_folder[DLIO_PATH];      /* a folder, s3:// or http(s):// prefix; no trailing '/' */
  int format;                       /* DLIO_FMT_* */
  uint64_t num_files_train, num_files_eval, num_samples_per_file, num_subfolders_train, num_subfolders_eval;
  double record_length, record_length_stdev, record_length_resize; /* bytes */
  char compression[16];             /* as written; DLIO's generators write uncompressed files whatever it says */
  char file_prefix[64];
  int data_loader;                  /* DLIO_FW_* */
  uint32_t read_threads, computation_threads, batch_size, prefetch_size;
  uint64_t shuffle_size;
  int file_shuffle, sample_shuffle; /* DLIO_SHUFFLE_* */
  dlio_dist_t preprocess_time;      /* per sample (slept by the reader) */
  uint64_t epochs;
  int64_t total_training_steps;     /* > 0: caps the steps of every epoch */
  bool seed_change_epoch;
  uint64_t seed;
  dlio_dist_t computation_time;     /* per step */
  double au;                        /* metric.au: the pass mark, 0..1 */
  uint64_t exclude_start, exclude_end; /* output.metric.exclude_{start,end}_steps */
  char output_folder[DLIO_PATH];
  char log_file[256];
  /* lade's own: plan=... (default dlio = DLIO's sharding) and any loader
   * setting as lade.KEY=VALUE */
  char plan[32];
  char (*lade_sets)[2][512];
  size_t nlade_sets;
  bool evict_cache;                 /* lade.evict_cache=1: drop the page cache of what each step read */
  bool log_samples;                 /* lade.log_samples=1: RANK_samples.csv, every batch's indices */
  uint32_t warnings;                /* keys named as unknown or not emulated */
} dlio_cfg_t;

/* Fills the defaults of DLIO's ConfigArguments. */
void dlio_cfg_default(dlio_cfg_t *c);
/* Loads a workload YAML file (NULL: none), then the overrides (DLIO's
 * `key=value`, with or without Hydra's `++workload.` prefix). Unknown keys
 * and keys lade does not emulate are warnings on stderr naming them; a bad
 * value is an error naming key and value (returns -1 with the reason in
 * err). */
int dlio_cfg_load(dlio_cfg_t *c, const char *yaml_path, int noverrides, char **overrides, char *err, size_t errlen);
void dlio_cfg_free(dlio_cfg_t *c);
/* The bytes of the file of train (eval = false) or eval file i, as DLIO
 * names it: DATA/train/PREFIX_{i}_of_{n}.EXT, {i} zero padded to n's digits
 * (a subfolder i % subfolders with num_subfolders > 1). */
void dlio_file_name(const dlio_cfg_t *c, bool eval, uint64_t i, char *buf, size_t size);
/* The draw of a dlio_dist_t (rng: any uniform [0,1) source keyed by the
 * caller), its absolute value in seconds. */
double dlio_dist_draw(const dlio_dist_t *d, uint64_t seed, uint64_t a, uint64_t b);

/* numpy's legacy RandomState (MT19937 seeded as np.random.seed(int), and
 * the polar-method normal of np.random.normal): DLIO draws its record
 * shapes with it, so datagen draws the same shapes. */
typedef struct dlio_mt {
  uint32_t mt[624];
  int mti;
  int has_gauss;
  double gauss;
} dlio_mt_t;
void dlio_mt_seed(dlio_mt_t *m, uint32_t seed);
uint32_t dlio_mt_u32(dlio_mt_t *m);
double dlio_mt_double(dlio_mt_t *m);
double dlio_mt_normal(dlio_mt_t *m, double loc, double scale);
/* DLIO's get_dimension(): 2 * files dims (file i: dims[2i] x dims[2i+1]),
 * normal around int(sqrt(record_length)) with stdev
 * record_length_stdev / 2 / sqrt(record_length), int() toward zero and at
 * least 1, drawn right after np.random.seed(10). Caller frees. */
int64_t *dlio_dims(const dlio_cfg_t *c, uint64_t files);

/* `lade dlio datagen`: writes the dataset (every rank of the launcher its
 * files i = rank, rank + world, ...). */
int dlio_datagen(const dlio_cfg_t *c, uint32_t rank, uint32_t world, char *err, size_t errlen);

/* `lade dlio ...`: the command (tools/main.c). */
int lade_tool_dlio(int argc, char **argv);

#endif
