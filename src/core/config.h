/* config.h - the typed settings behind lade_config_t. Every module reads
 * its settings from here; lade_config_set() validates them on entry. */
#ifndef LADE__CONFIG_H
#define LADE__CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "core/core.h" /* LADE__PATH_MAX */
#include "lade/lade.h"

enum { LADE__SRC_AUTO = 0, LADE__SRC_DIR, LADE__SRC_NPY, LADE__SRC_S3, LADE__SRC_TAR, LADE__SRC_HDF5, LADE__SRC_TFRECORD };
/* the tfrecord_compression setting */
enum { LADE__TFREC_COMP_AUTO = 0, LADE__TFREC_COMP_NONE, LADE__TFREC_COMP_GZIP, LADE__TFREC_COMP_ZLIB };
enum { LADE__S3_ADDR_AUTO = 0, LADE__S3_ADDR_PATH, LADE__S3_ADDR_VIRTUAL };
/* the cache_policy setting (engine/resolve.c turns it into a cache/cache.h policy) */
enum { LADE__POLICY_AUTO = 0, LADE__POLICY_FIFO, LADE__POLICY_LRU, LADE__POLICY_CLAIRVOYANT, LADE__POLICY_PLAN };
enum { LADE__TRISTATE_AUTO = 0, LADE__TRISTATE_ON, LADE__TRISTATE_OFF };
enum { LADE__XF_AUTO = 0, LADE__XF_RAW, LADE__XF_NPY, LADE__XF_IMAGENET_TRAIN, LADE__XF_IMAGENET_EVAL, LADE__XF_NPZ };
enum { LADE__ONERR_FAIL = 0, LADE__ONERR_SKIP };
enum { LADE__TRANSPORT_AUTO = 0, LADE__TRANSPORT_LOCAL, LADE__TRANSPORT_MPI, LADE__TRANSPORT_UCX };
enum { LADE__DECODE_SCALE_OFF = 0, LADE__DECODE_SCALE_AUTO };

struct lade_config {
  char source[LADE__PATH_MAX];
  int source_type;
  int transform;
  uint32_t batch_size;
  uint64_t epochs;
  uint64_t seed;
  bool shuffle;
  bool drop_last;
  uint32_t rank;
  uint32_t world_size;
  uint32_t threads;      /* 0: online cores */
  uint32_t prefetch;     /* batches prepared ahead of the consumer (K) */
  uint32_t pool_max;     /* most batch buffers (0: no cap) */
  uint32_t crop_size;
  uint32_t resize_size;
  int image_dtype;       /* LADE_DTYPE_FLOAT32 (CHW, normalised) or LADE_DTYPE_UINT8 (HWC) */
  int decode_scale;      /* LADE__DECODE_SCALE_*: JPEG IDCT scaling in the image transforms */
  char device[32];       /* "cpu", "cuda" or "cuda:N" (lade__resolve_device) */
  bool pin_memory;       /* page-locked batch buffers (core/cuda.h) */
  uint32_t device_prefetch; /* device=cuda: ready batches copied ahead (engine/devring.h) */
  double scale_min, scale_max, ratio_min, ratio_max, hflip;
  uint64_t raw_size;     /* raw slot bytes; 0: size of sample 0 */
  int raw_overflow;      /* 0: error, 1: cut */
  int on_error;
  uint32_t skip_max_run;    /* on_error=skip: failed reads in a row that stop the loader (0: no bound) */
  double skip_max_fraction; /* on_error=skip: bad samples per epoch, as a fraction, that stop it (1: no bound) */
  char trace[LADE__PATH_MAX];
  char npy_dtype[16];    /* "" : taken from the first file */
  char npy_shape[128];   /* "" : taken from the first file, else "3,224,224" */
  char npz_member[256];  /* the npz transform's array: a member NAME or NAME.npy of each .npz */
  /* the hdf5 source */
  char hdf5_data[256];   /* dataset path of the samples (N x ...) */
  char hdf5_labels[256]; /* dataset path of the labels; "": "labels" when the file has it */
  uint64_t hdf5_gap;     /* coalesce reads of indices at most this far apart (0: off) */
  uint64_t hdf5_chunk_cache; /* bytes of libhdf5's chunk cache per dataset (0: its default, 1 MiB) */
  int hdf5_direct;       /* 0 (auto): pread contiguous datasets without libhdf5; 1 (off): always H5Dread */
  /* the tfrecord source */
  char tfrecord_feature[256]; /* the Example feature a sample is; "": the record's data, undecoded */
  char tfrecord_label[256];   /* the int64 feature labels come from; "": none */
  int tfrecord_compression;   /* LADE__TFREC_COMP_* */
  /* object stores (source=s3://bucket/prefix); "" falls back to the AWS_*
   * environment variables, read when the source opens */
  char s3_endpoint[512];
  char s3_region[64];
  int s3_addressing;
  char s3_access_key_id[256];      /* secret: never printed */
  char s3_secret_access_key[256];  /* secret: never printed */
  char s3_session_token[4096];     /* secret: never printed */
  /* every HTTP request (s3://, http(s):// shards); s3_concurrency ... are
   * aliases of the settings */
  uint32_t http_concurrency;       /* 0: tuned at run time */
  uint32_t http_max_concurrency;
  uint32_t http_timeout_ms;
  uint32_t http_connect_timeout_ms;
  uint32_t http_retries;
  uint32_t http_retry_base_ms;
  uint64_t max_sample_bytes;       /* no sample (file or object) larger than this is read */
  char label_file[LADE__PATH_MAX];
  uint64_t listing_ttl;            /* seconds a cached listing is reused; 0: never cached */
  uint64_t coalesce_gap_bytes;     /* remote tar shards: neighbours this close share one Range request */
  uint64_t readahead_bytes;        /* remote sources: bytes of future steps requested ahead (0: the batch window only) */
  char tls_ca_file[LADE__PATH_MAX];  /* PEM CA bundle for https:// (s3 and tar); "": $SSL_CERT_FILE, $CURL_CA_BUNDLE, system */
  /* cache tiers and the DELI prefetcher */
  char index_dir[LADE__PATH_MAX];   /* tar shards' indexes; "": cache_dir, else beside local shards */
  char cache_dir[LADE__PATH_MAX];
  uint64_t cache_disk_bytes;       /* 0 with cache_dir set: half the free space */
  uint64_t cache_mem_bytes;        /* 0: no memory tier */
  int cache_policy;                /* LADE__POLICY_* */
  int plan;                        /* lade_plan_kind_t */
  int plan_balance;                /* 0: peer, 1: storage */
  bool plan_reorder;
  uint32_t plan_imbalance;         /* plan=solar */
  uint64_t shuffle_buffer;         /* plan=shards, plan=dlio (tensorflow) */
  int dlio_reader;                 /* plan=dlio: LADE__DLIO_PYTORCH or LADE__DLIO_TENSORFLOW (cursor/cursor.h) */
  uint32_t dlio_samples_per_file, dlio_interleave;
  uint32_t model_parallel, devices_per_node;
  uint32_t ranks_per_node; /* 0: detect (transport/topology.h) */
  int transport;                   /* LADE__TRANSPORT_* */
  uint32_t peer_timeout_ms;
  char rendezvous_dir[LADE__PATH_MAX]; /* transport=ucx: the folder the ranks exchange their addresses in */
  int plan_order;                  /* lade_plan_order_algo_t */
  int prefetcher;                  /* LADE__TRISTATE_* */
  uint64_t fetch_size;             /* samples per prefetch; 0: half the disk cache (50/50 rule) */
  uint64_t prefetch_threshold;     /* fetched-but-unused samples that trigger a fetch; 0: = fetch_size */
  int node_cache;                  /* LADE__TRISTATE_*: one memory cache per node (docs/cache.md, Node cache) */
  char shm_dir[LADE__PATH_MAX];    /* the tmpfs folder of the node cache's segments */
  char job_id[256];                /* the job key the ranks share (node cache, UCX rendezvous); "": the launcher's */
  lade_allocator_t allocator;
  bool has_allocator;
  lade_position_t position; /* lade_config_set_position: where the loader starts (docs/plan.md "Resume") */
  bool has_position;
};

void lade__config_defaults(struct lade_config *c);
/* Zeroes every secret setting of c (lade__wipe). */
void lade__config_wipe_secrets(struct lade_config *c);

#endif
