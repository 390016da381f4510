/* plot.c — gnuplot scripts and PNGs for the reports (plot.h). */
#include <stdlib.h>
#include <string.h>

#include "plot.h"

void plot_write(FILE *md, const char *base, const char *link_dir, const char *title, const char *xlabel,
                const char *ylabel, const char *settings, const char *body) {
    char gp[1200], png[1200], cmd[2600];
    snprintf(gp, sizeof gp, "%s.gp", base);
    snprintf(png, sizeof png, "%s.png", base);
    FILE *f = fopen(gp, "w");
    if (!f) {
        fprintf(md, "\n(cannot write the plot script %s)\n", gp);
        return;
    }
    fprintf(f, "set terminal pngcairo size 800,500 noenhanced\nset output '%s'\nset title '%s'\nset xlabel '%s'\n"
               "set ylabel '%s'\nset grid\n%s%s\n",
            png, title, xlabel, ylabel, settings, body);
    if (fclose(f)) {
        fprintf(md, "\n(cannot write the plot script %s)\n", gp);
        return;
    }
    snprintf(cmd, sizeof cmd, "gnuplot '%s' 2>/dev/null", gp);
    if (system(cmd) != 0) {
        fprintf(md, "\n(gnuplot not available: plot script left at %s)\n", gp);
        return;
    }
    if (!link_dir) {
        fprintf(md, "\n![%s](%s)\n", title, png);
        return;
    }
    const char *name = strrchr(png, '/');
    fprintf(md, "\n![%s](%s%s%s)\n", title, link_dir, link_dir[0] ? "/" : "", name ? name + 1 : png);
}

const char *plot_link_dir(const char *report, const char *plot_dir) {
    if (!report || !plot_dir) return NULL;
    const char *slash = strrchr(report, '/');
    if (!slash) return plot_dir[0] == '/' ? NULL : plot_dir;
    size_t n = (size_t)(slash - report);
    if (strncmp(plot_dir, report, n) == 0 && plot_dir[n] == '/' && plot_dir[n + 1]) return plot_dir + n + 1;
    return NULL;
}
