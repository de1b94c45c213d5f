/* hdf5_lock.c - libhdf5's one global lock (hdf5_impl.h): every H5* call of
 * hdf5.c and hdf5_chunk.c runs holding it, with libhdf5's error printing
 * turned off meanwhile (hdf5.c's opening comment says why). Below both. */
#include <pthread.h>

#include "source.h"

#ifdef LADE_HAVE_HDF5
#include "source/hdf5_impl.h"

static pthread_mutex_t h5_mu = PTHREAD_MUTEX_INITIALIZER;

void lade__h5_lock(lade__h5_guard_t *g) {
  pthread_mutex_lock(&h5_mu);
  H5Eget_auto2(H5E_DEFAULT, &g->func, &g->data);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

void lade__h5_unlock(lade__h5_guard_t *g) {
  H5Eset_auto2(H5E_DEFAULT, g->func, g->data);
  pthread_mutex_unlock(&h5_mu);
}

#endif /* LADE_HAVE_HDF5 */
