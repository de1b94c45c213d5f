/* main.c - TEMPORARY dispatcher for plan/simulate/model so the planner CLI can
 * be tested on the `plan` branch; the real dispatcher lives on main. */
#include <stdio.h>
#include <string.h>

#include "lade/lade.h"
#include "plan_cli.h"

int main(int argc, char **argv) {
  if (argc < 2 || !strcmp(argv[1], "--help")) {
    printf("lade %s\nusage: lade plan|simulate|model [--help]\n", lade_version());
    return argc < 2;
  }
  if (!strcmp(argv[1], "plan")) return lade_tool_plan(argc - 1, argv + 1);
  if (!strcmp(argv[1], "simulate")) return lade_tool_simulate(argc - 1, argv + 1);
  if (!strcmp(argv[1], "model")) return lade_tool_model(argc - 1, argv + 1);
  fprintf(stderr, "lade: unknown command '%s'\n", argv[1]);
  return 2;
}
