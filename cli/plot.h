/* plot.h — a gnuplot figure beside a Markdown report: the script is always written (so a machine
 * without gnuplot can render it later), the PNG when gnuplot runs, and the report links it or
 * says where the script is. */
#ifndef DS_PLOT_H
#define DS_PLOT_H

#include <stdio.h>

/* BASE.gp: a PNG terminal, output BASE.png, the title and axis labels, then `settings` (extra
 * "set" lines, may be "") and `body` (data blocks and the plot command). The report `md` gets
 * ![title](link) where link = `link_dir`/BASE's file name, or BASE.png when link_dir is NULL. */
void plot_write(FILE *md, const char *base, const char *link_dir, const char *title, const char *xlabel,
                const char *ylabel, const char *settings, const char *body);

/* The plot folder as a link from a report written to `report`: the part of plot_dir under the
 * report's own folder (plot_dir itself when the report is in the working folder), NULL when the
 * plots are elsewhere (then links keep the path as given). */
const char *plot_link_dir(const char *report, const char *plot_dir);

#endif
