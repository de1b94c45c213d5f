int lade_tool_plan(int argc, char **argv);
int lade_tool_simulate(int argc, char **argv);
int lade_tool_model(int argc, char **argv);
