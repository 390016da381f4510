/* commands.h — one function per subcommand: 0 on success, -1 with ds_errmsg() set on failure. */
#ifndef DS_COMMANDS_H
#define DS_COMMANDS_H

int cmd_info(int argc, char **argv);
int cmd_generate(int argc, char **argv);
int cmd_bench_target(int argc, char **argv);
int cmd_lossless(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_report(int argc, char **argv);
int cmd_train(int argc, char **argv);
int cmd_calibrate(int argc, char **argv);
int cmd_bench_train(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_score(int argc, char **argv);

#endif
