#include "args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "../runtime/backends/backend.h"
#include "../runtime/model/models.h"
#include "../drafters/drafter.h"
#include "../schedulers/scheduler.h"

void args_help(const char *cmd, const char *usage, const opt_def *opts) {
    printf("usage: dspark-bench %s %s\n\n", cmd, usage);
    for (const opt_def *o = opts; o->name; o++) {
        char left[64];
        snprintf(left, sizeof left, "--%s%s%s", o->name, o->metavar ? " " : "", o->metavar ? o->metavar : "");
        printf("  %-28s %s\n", left, o->help);
    }
    printf("  %-28s %s\n", "--help", "show this help");
    printf("\n");
    args_registries(stdout);
}

void args_registries(FILE *f) {
    char buf[1024];
    drafter_list(buf, sizeof buf, 0);
    fprintf(f, "registered names (a config's \"name\" / \"scheduler\" / \"backend\", or the options above):\n");
    fprintf(f, "  drafters:   %s\n", buf);
    drafter_list(buf, sizeof buf, 1);
    fprintf(f, "  trainable:  %s\n", buf);
    scheduler_list(buf, sizeof buf, 0);
    fprintf(f, "  schedulers: %s\n", buf);
    fprintf(f, "  backends:   %s\n", backend_names());
    fprintf(f, "  models:     %s (`make model MODEL=NAME` fetches one; %s)\n", model_names(), model_cache_dir());
}

static int set_value(const opt_def *o, const char *v) {
    char *end;
    errno = 0;
    /* strtoull reads " -1" as 2^64 - 1 (it skips blanks, then negates): numbers start at their first character */
    if ((o->type == OPT_INT || o->type == OPT_U64 || o->type == OPT_FLOAT) && isspace((unsigned char)*v)) goto bad;
    switch (o->type) {
    case OPT_INT: {
        long x = strtol(v, &end, 10);
        if (*v == 0 || *end || errno) goto bad;
        if (o->lo != o->hi && (x < o->lo || x > o->hi)) goto range;
        *(int *)o->ptr = (int)x;
        return 0;
    }
    case OPT_U64: {
        if (*v == '-') goto bad;
        unsigned long long x = strtoull(v, &end, 10);
        if (*v == 0 || *end || errno) goto bad;
        *(uint64_t *)o->ptr = x;
        return 0;
    }
    case OPT_FLOAT: {
        double x = strtod(v, &end);
        if (*v == 0 || *end || errno || !isfinite(x)) goto bad;
        if (o->lo != o->hi && (x < o->lo || x > o->hi)) goto range;
        *(float *)o->ptr = (float)x;
        return 0;
    }
    case OPT_STR: *(const char **)o->ptr = v; return 0;
    case OPT_FLAG: *(int *)o->ptr = 1; return 0;
    }
bad:
    ds_error("option --%s: '%s' is not a valid %s", o->name, v,
             o->type == OPT_FLOAT ? "number" : o->type == OPT_INT || o->type == OPT_U64 ? "integer" : "value");
    return -1;
range:
    ds_error("option --%s: %s is outside the allowed range %g..%g", o->name, v, o->lo, o->hi);
    return -1;
}

int args_parse(const char *cmd, const char *usage, const opt_def *opts, int argc, char **argv, const char **pos,
               int max_pos, int *n_pos) {
    *n_pos = 0;
    for (int i = 0; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            args_help(cmd, usage, opts);
            return 1;
        }
        if (strncmp(a, "--", 2) != 0 || a[2] == 0) {
            if (*n_pos >= max_pos) {
                ds_error("%s: unexpected argument '%s' (see dspark-bench %s --help)", cmd, a, cmd);
                return -1;
            }
            pos[(*n_pos)++] = a;
            continue;
        }
        const char *name = a + 2, *eq = strchr(name, '=');
        size_t nl = eq ? (size_t)(eq - name) : strlen(name);
        const opt_def *o = opts;
        for (; o->name; o++)
            if (strlen(o->name) == nl && strncmp(o->name, name, nl) == 0) break;
        if (!o->name) {
            ds_error("%s: unknown option '--%.*s' (see dspark-bench %s --help)", cmd, (int)nl, name, cmd);
            return -1;
        }
        const char *v;
        if (o->type == OPT_FLAG) {
            if (eq) {
                ds_error("%s: option --%s takes no value", cmd, o->name);
                return -1;
            }
            v = "1";
        } else if (eq) {
            v = eq + 1;
        } else {
            if (i + 1 >= argc) {
                ds_error("%s: option --%s needs a value (%s)", cmd, o->name, o->metavar ? o->metavar : "value");
                return -1;
            }
            v = argv[++i];
        }
        if (set_value(o, v)) return -1;
        if (o->seen) *o->seen = 1;
    }
    return 0;
}

