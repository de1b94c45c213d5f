/* pack.h - `lade pack`: a dataset as WebDataset tar shards (tools/pack.c). */
#ifndef LADE_TOOLS_PACK_H
#define LADE_TOOLS_PACK_H

int lade_tool_pack(int argc, char **argv);

#endif
