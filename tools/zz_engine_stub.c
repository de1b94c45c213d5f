/* zz_engine_stub.c - TEMPORARY: weak stand-ins for the engine's loader
 * functions (written on main) so tools/model_calibrate.c links on the `plan`
 * branch. Drop with the temporary dispatcher at merge. */
#include "lade/lade.h"
#define W __attribute__((weak))
W int lade_loader_create(lade_loader_t **out, const lade_config_t *cfg) {
  (void)out;
  (void)cfg;
  return LADE_EUNSUPPORTED;
}
W int lade_loader_next(lade_loader_t *l, lade_batch_t **out) {
  (void)l;
  (void)out;
  return LADE_EUNSUPPORTED;
}
W void lade_batch_release(lade_batch_t *b) { (void)b; }
W void lade_loader_destroy(lade_loader_t *l) { (void)l; }
W int lade_loader_stats(lade_loader_t *l, lade_stats_t *s) {
  (void)l;
  (void)s;
  return LADE_EUNSUPPORTED;
}
