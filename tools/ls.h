/* ls.h - `lade ls SOURCE`: the dataset as the loader sees it (tools/ls.c). */
#ifndef LADE_TOOLS_LS_H
#define LADE_TOOLS_LS_H

int lade_tool_ls(int argc, char **argv);

#endif
