/* pack.h - `lade pack`: a dataset as WebDataset tar shards (tools/pack.c). */
#ifndef LADE_TOOLS_PACK_H
#define LADE_TOOLS_PACK_H

#include "lade/lade.h"

int lade_tool_pack(int argc, char **argv);
/* `lade index SHARD...` (index.c): the sidecar index beside each shard. */
int lade_tool_index(int argc, char **argv);

/* `lade pack SRC --to hdf5 OUT.h5` (pack_hdf5.c): cfg holds the --set
 * settings (borrowed); returns the exit status. */
int lade_tool_pack_hdf5(lade_config_t *cfg, const char *src, const char *out, const char *transform);

#endif
