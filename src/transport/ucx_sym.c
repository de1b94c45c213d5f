/*
 * ucx_sym.c - UCX's calls (ucx_impl.h's UCX_CALLS), opened on first use.
 *
 * UCX is opened with dlopen, not linked: a process that never uses this
 * transport (a laptop, mpirun, `import lade`) runs none of UCX's library
 * constructors, which install its SIGSEGV/SIGBUS handlers and its memory
 * hooks in every process that loads it. The build needs UCX's headers; the
 * run needs libucp.so.0 (Debian: libucx0) only where the transport runs,
 * found by the dynamic loader's search (LD_LIBRARY_PATH) or named by
 * LADE_UCX_LIB. The other pieces call UCX through U (lade__ucx_sym).
 *
 * Lock: lade__ucx_load runs under the world's mu (ucx_peers.c's start of
 * UCX); U is filled before it returns true and never written again, so
 * whoever got that answer reads U without a lock.
 */
#ifdef LADE_HAVE_UCX
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include "transport/ucx_impl.h"

lade__ucx_sym_t lade__ucx_sym;

bool lade__ucx_load(char *why, size_t cap) {
  if (U.lib) return true;
  const char *name = getenv("LADE_UCX_LIB");
  if (!name || !*name) name = "libucp.so.0";
  void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    snprintf(why, cap, "transport ucx: cannot load UCX (%s); install it (Debian: apt-get install libucx0) or name "
             "its libucp with LADE_UCX_LIB", dlerror());
    return false;
  }
#define UCX_SYM(f)                                                                                                    \
  if (!(*(void **)&U.f = dlsym(lib, #f))) {                                                                           \
    snprintf(why, cap, "transport ucx: %s has no %s (UCX %d.%d or later is needed)", name, #f, UCP_API_MAJOR,        \
             UCP_API_MINOR);                                                                                          \
    dlclose(lib);                                                                                                     \
    return false;                                                                                                     \
  }
  UCX_CALLS(UCX_SYM)
#undef UCX_SYM
  U.lib = lib;
  return true;
}
#else
/* built without UCX (LADE_WITH_UCX) */
typedef int lade__ucx_sym_unused;
#endif
