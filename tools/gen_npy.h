/* gen_npy.h - `lade gen npy`: deterministic float32 .npy datasets. */
#ifndef LADE_TOOL_GEN_NPY_H
#define LADE_TOOL_GEN_NPY_H
#include <stddef.h>
#include <stdint.h>
/* shape: "D1,D2,..." of one sample. stacked: one DIR/data.npy of N x shape.
 * Returns 0 or -1 with the reason in err. */
int lade_tool_gen_npy(const char *dir, uint64_t count, uint64_t seed, const char *shape, int stacked, char *err,
                      size_t errlen);
#endif
