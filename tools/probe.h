/* probe.h - `lade probe FILE.h5`: per-sample vs coalesced HDF5 reads (tools/probe.c). */
#ifndef LADE_TOOLS_PROBE_H
#define LADE_TOOLS_PROBE_H

int lade_tool_probe(int argc, char **argv);

#endif
