/* plan_cli.h - `lade plan` (plan_cli.c), `lade simulate` (plan_simulate.c)
 * and `lade model` (plan_model.c); their shared parts are in plan_opts.h. */
/* Every plan kind's name (lade_plan_kind_name), joined by sep; a static buffer. */
const char *lade_tool_plan_names(const char *sep);
int lade_tool_plan(int argc, char **argv);
int lade_tool_simulate(int argc, char **argv);
int lade_tool_model(int argc, char **argv);
