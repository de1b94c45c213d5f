/*
 * cuda.c - the CUDA runtime's few calls lade makes, opened on first use
 * (cuda.h). No CUDA header is needed to build: the calls are declared here
 * with the runtime's C ABI (cudaError_t is an int enum, 0 success).
 *
 * Lock: `mu` guards the load; once it succeeded `lib` and the pointers are
 * never written again, so whoever saw it succeed reads them without it.
 */
#include "core/cuda.h"

#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "core/core.h"

static lade__cuda_api_t C;

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static void *lib;
static int loaded;          /* 1: C is filled; -1: the last try failed (why holds it; tried again next time,
                             * so a fixed LADE_CUDA_LIB is taken) */
static int devices;         /* cudaGetDeviceCount's answer, when loaded */
static char why[5120];      /* the failed load's reason */
static char lib_name[4096]; /* the library loaded or tried */

/* dl_iterate_phdr: the path of a libcudart the process has loaded already. */
static int find_loaded(struct dl_phdr_info *info, size_t size, void *data) {
  (void)size;
  const char *base = info->dlpi_name ? strrchr(info->dlpi_name, '/') : NULL;
  if (!base || strncmp(base + 1, "libcudart.so", 12)) return 0;
  snprintf(data, 4096, "%s", info->dlpi_name);
  return 1;
}

/* The load, once; fills why on failure. LADE_CUDA_LIB when set; else a
 * libcudart already in the process (PyTorch's, CuPy's: from a wheel, off
 * the loader's search path), so lade shares its instance, and with it the
 * calling thread's current device (device=cuda); else the usual names. */
static int load(void) {
  pthread_mutex_lock(&mu);
  if (loaded != 1) {
    const char *env = getenv("LADE_CUDA_LIB");
    static const char *const names[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0", NULL};
    static char present[4096];
    const char *const *try = names, *one[2] = {env, NULL};
    if (env && *env) try = one;
    else if (dl_iterate_phdr(find_loaded, present)) one[0] = present, try = one;
    const char *err = "";
    for (; *try && !lib; try++) {
      snprintf(lib_name, sizeof lib_name, "%s", *try);
      if (!(lib = dlopen(*try, RTLD_NOW | RTLD_LOCAL))) err = dlerror();
    }
    if (!lib) {
      snprintf(why, sizeof why,
               "cannot load the CUDA runtime (%s); install it (the CUDA toolkit's libcudart, e.g. Debian's "
               "nvidia-cuda-toolkit, or the one PyTorch's CUDA wheels bring) or name it with LADE_CUDA_LIB",
               err && *err ? err : lib_name);
      loaded = -1;
    } else {
      loaded = 1;
#define CUDA_SYM(ret, name, args)                                                                                     \
  if (loaded == 1 && !(*(void **)&C.name = dlsym(lib, #name))) {                                                     \
    snprintf(why, sizeof why, "%s is not the CUDA runtime: it has no %s (LADE_CUDA_LIB names libcudart.so)",         \
             lib_name, #name);                                                                                        \
    loaded = -1;                                                                                                      \
  }
      LADE__CUDA_CALLS(CUDA_SYM)
#undef CUDA_SYM
      int e = loaded == 1 ? C.cudaGetDeviceCount(&devices) : 0;
      if (loaded == 1 && e != 0) {
        snprintf(why, sizeof why, "the CUDA runtime (%s) finds no usable device: %s (error %d of cudaGetDeviceCount; "
                 "is the NVIDIA driver installed and a GPU visible, CUDA_VISIBLE_DEVICES?)", lib_name,
                 C.cudaGetErrorString(e), e);
        loaded = -1;
      }
      if (loaded == -1) {
        dlclose(lib);
        lib = NULL;
      }
    }
  }
  int r = loaded;
  pthread_mutex_unlock(&mu);
  return r;
}

int lade__cuda_open(int *ordinalp, const char *what) {
  if (load() != 1) return lade__fail(LADE_EUNSUPPORTED, "%s: %s", what, why);
  int ordinal = *ordinalp;
  if (ordinal == LADE__CUDA_CURRENT && C.cudaGetDevice(&ordinal) != 0) ordinal = 0;
  *ordinalp = ordinal;
  if (ordinal < 0 || ordinal >= devices)
    return lade__fail(LADE_EUNSUPPORTED, "%s: no such device: the CUDA runtime (%s) sees %d device%s%s", what,
                      lib_name, devices, devices == 1 ? "" : "s", devices ? " (cuda:0 ...)" : "");
  return 0;
}

int lade__cuda_pin(void *p, size_t n) {
  int e = C.cudaHostRegister(p, n, 0);
  if (e) return lade__fail(LADE_EIO, "pinning %zu bytes of batch memory: %s (cudaHostRegister)", n, C.cudaGetErrorString(e));
  return 0;
}

void lade__cuda_unpin(void *p) { C.cudaHostUnregister(p); }

bool lade__cuda_usable(void) { return load() == 1 && devices > 0; }

const lade__cuda_api_t *lade__cuda(void) { return &C; }
