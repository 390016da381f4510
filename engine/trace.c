#include "trace.h"

#include <errno.h>
#include <fcntl.h>
#include <hdf5.h>
#include <math.h>
#include <sys/stat.h>
#include <unistd.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"

#define CHUNK_ROWS 1024

/* Every HDF5 call that can fail goes through H5TRY: a negative id or status becomes one message
 * naming the file and the call, and a jump to the function's cleanup. */
#define H5TRY(expr, path)                                                                                  \
    do {                                                                                                     \
        if ((expr) < 0) {                                                                                    \
            ds_error("%s: HDF5 call failed: %s (%s:%d)", path, #expr, __FILE__, __LINE__);                   \
            goto fail;                                                                                       \
        }                                                                                                    \
    } while (0)

/* ------------------------------------------------------------------------- row types */

typedef enum { T_ROUND, T_REQUEST, T_POSITION, T_CONF, T_LOSSLESS, T_NODE, N_TABLES } table_id;
static const char *TABLE_NAMES[N_TABLES] = {"rounds", "requests", "positions", "confidence", "lossless", "nodes"};
static const size_t ROW_SIZE[N_TABLES] = {sizeof(trace_round), sizeof(trace_request), sizeof(trace_position),
                                          sizeof(trace_conf), sizeof(trace_lossless), sizeof(trace_node)};

static hid_t str_type(size_t n) {
    hid_t t = H5Tcopy(H5T_C_S1);
    if (t >= 0) H5Tset_size(t, n);
    return t;
}

/* the in-memory compound type of a table's rows */
static hid_t mem_type(table_id id) {
    hid_t t = H5Tcreate(H5T_COMPOUND, ROW_SIZE[id]);
    if (t < 0) return t;
#define I32(S, f) H5Tinsert(t, #f, HOFFSET(S, f), H5T_NATIVE_INT32)
#define I64(S, f) H5Tinsert(t, #f, HOFFSET(S, f), H5T_NATIVE_INT64)
#define F32(S, f) H5Tinsert(t, #f, HOFFSET(S, f), H5T_NATIVE_FLOAT)
#define F64(S, f) H5Tinsert(t, #f, HOFFSET(S, f), H5T_NATIVE_DOUBLE)
#define STR(S, f)                                                                                            \
    do {                                                                                                     \
        hid_t s = str_type(sizeof(((S *)0)->f));                                                             \
        H5Tinsert(t, #f, HOFFSET(S, f), s);                                                                  \
        H5Tclose(s);                                                                                         \
    } while (0)
    switch (id) {
    case T_ROUND:
        I32(trace_round, request), I32(trace_round, round), I32(trace_round, mode), I32(trace_round, proposed);
        I32(trace_round, verified), I32(trace_round, accepted), I32(trace_round, emitted), I32(trace_round, batch_tokens);
        F64(trace_round, t_draft_us), F64(trace_round, t_sched_us), F64(trace_round, t_verify_us);
        break;
    case T_REQUEST:
        I32(trace_request, request), I32(trace_request, mode);
        STR(trace_request, dataset);
        STR(trace_request, domain);
        I32(trace_request, index), I32(trace_request, prompt_tokens), I32(trace_request, output_tokens);
        I32(trace_request, rounds), F64(trace_request, wall_s), I64(trace_request, output_hash);
        break;
    case T_POSITION: I32(trace_position, position), I64(trace_position, attempted), I64(trace_position, accepted); break;
    case T_CONF:
        I32(trace_conf, request), I32(trace_conf, round), I32(trace_conf, position);
        F32(trace_conf, c_raw), F32(trace_conf, c_cal), F32(trace_conf, c_star), I32(trace_conf, survived);
        break;
    case T_LOSSLESS:
        STR(trace_lossless, test);
        STR(trace_lossless, kind);
        I64(trace_lossless, N), F64(trace_lossless, statistic), F64(trace_lossless, p);
        I32(trace_lossless, control), I32(trace_lossless, pass);
        break;
    case T_NODE:
        I32(trace_node, request), I32(trace_node, round), I32(trace_node, node), I32(trace_node, depth);
        I32(trace_node, rank), F32(trace_node, conf), I32(trace_node, accepted), I32(trace_node, led_on);
        break;
    default: break;
    }
#undef I32
#undef I64
#undef F32
#undef F64
#undef STR
    return t;
}

/* ---------------------------------------------------------------------------- writing */

typedef struct {
    hid_t dset, mtype;
    char *buf;
    long n_buf, n_written;
} table;

struct trace {
    char *path, *tmp;
    int owns_tmp; /* this process created tmp (and may remove it) */
    hid_t file;
    table tab[N_TABLES];
};

static int table_open(trace *t, table_id id) {
    table *tb = &t->tab[id];
    hid_t ftype = -1, space = -1, dcpl = -1;
    hsize_t dims[1] = {0}, maxdims[1] = {H5S_UNLIMITED}, chunk[1] = {CHUNK_ROWS};
    H5TRY(tb->mtype = mem_type(id), t->tmp);
    H5TRY(ftype = H5Tcopy(tb->mtype), t->tmp);
    H5TRY(H5Tpack(ftype), t->tmp);
    H5TRY(space = H5Screate_simple(1, dims, maxdims), t->tmp);
    H5TRY(dcpl = H5Pcreate(H5P_DATASET_CREATE), t->tmp);
    H5TRY(H5Pset_chunk(dcpl, 1, chunk), t->tmp);
    if (H5Zfilter_avail(H5Z_FILTER_DEFLATE) > 0) {
        H5TRY(H5Pset_shuffle(dcpl), t->tmp);
        H5TRY(H5Pset_deflate(dcpl, 4), t->tmp);
    }
    H5TRY(tb->dset = H5Dcreate2(t->file, TABLE_NAMES[id], ftype, space, H5P_DEFAULT, dcpl, H5P_DEFAULT), t->tmp);
    DS_TRYP(tb->buf = ds_malloc(ROW_SIZE[id] * CHUNK_ROWS, "trace buffer"));
    H5Tclose(ftype);
    H5Sclose(space);
    H5Pclose(dcpl);
    return 0;
fail:
    if (ftype >= 0) H5Tclose(ftype);
    if (space >= 0) H5Sclose(space);
    if (dcpl >= 0) H5Pclose(dcpl);
    return -1;
}

static int table_flush(trace *t, table_id id) {
    table *tb = &t->tab[id];
    if (tb->n_buf == 0) return 0;
    hid_t fs = -1, ms = -1;
    hsize_t size[1] = {(hsize_t)(tb->n_written + tb->n_buf)}, start[1] = {(hsize_t)tb->n_written},
            count[1] = {(hsize_t)tb->n_buf};
    H5TRY(H5Dset_extent(tb->dset, size), t->tmp);
    H5TRY(fs = H5Dget_space(tb->dset), t->tmp);
    H5TRY(H5Sselect_hyperslab(fs, H5S_SELECT_SET, start, NULL, count, NULL), t->tmp);
    H5TRY(ms = H5Screate_simple(1, count, NULL), t->tmp);
    H5TRY(H5Dwrite(tb->dset, tb->mtype, ms, fs, H5P_DEFAULT, tb->buf), t->tmp);
    H5TRY(H5Fflush(t->file, H5F_SCOPE_LOCAL), t->tmp); /* a crash keeps what was written */
    H5Sclose(fs);
    H5Sclose(ms);
    tb->n_written += tb->n_buf;
    tb->n_buf = 0;
    return 0;
fail:
    if (fs >= 0) H5Sclose(fs);
    if (ms >= 0) H5Sclose(ms);
    return -1;
}

static int table_add(trace *t, table_id id, const void *row) {
    table *tb = &t->tab[id];
    memcpy(tb->buf + ROW_SIZE[id] * (size_t)tb->n_buf, row, ROW_SIZE[id]);
    if (++tb->n_buf == CHUNK_ROWS) return table_flush(t, id);
    return 0;
}

int trace_add_round(trace *t, const trace_round *r) { return table_add(t, T_ROUND, r); }
int trace_add_request(trace *t, const trace_request *r) { return table_add(t, T_REQUEST, r); }
int trace_add_position(trace *t, const trace_position *r) { return table_add(t, T_POSITION, r); }
int trace_add_conf(trace *t, const trace_conf *r) { return table_add(t, T_CONF, r); }
int trace_add_node(trace *t, const trace_node *r) { return table_add(t, T_NODE, r); }
int trace_add_lossless(trace *t, const trace_lossless *r) { return table_add(t, T_LOSSLESS, r); }

/* -1 when HDF5 could not close something (the file stays half-open inside the library) */
static int close_handles(trace *t) {
    int bad = 0;
    for (int i = 0; i < N_TABLES; i++) {
        if (t->tab[i].dset > 0) bad |= H5Dclose(t->tab[i].dset) < 0;
        if (t->tab[i].mtype > 0) bad |= H5Tclose(t->tab[i].mtype) < 0;
        free(t->tab[i].buf);
        t->tab[i].dset = t->tab[i].mtype = 0;
        t->tab[i].buf = NULL;
    }
    if (t->file > 0) bad |= H5Fclose(t->file) < 0;
    t->file = 0;
    return bad ? -1 : 0;
}

static void trace_free(trace *t) {
    free(t->path);
    free(t->tmp);
    free(t);
}

/* The trace is written to PATH.<pid>.tmp, a file this process created exclusively (O_EXCL), so two
 * runs on one PATH never write into or remove each other's file; trace_close marks it complete
 * and renames it over PATH atomically, so PATH is always a complete old or a complete new trace. */
/* Before the first HDF5 call: errors come through ds_error, not HDF5's stack dump. HDF5's own exit
 * handler is replaced by ours: after a failed close (a full disk) the library's cleanup closes that
 * file again and crashes (found by the fault-injection suite), so then teardown is skipped; every
 * other process tears HDF5 down, so nothing it holds looks leaked. */
static int h5_close_failed;

static void h5_exit(void) {
    if (!h5_close_failed) H5close();
}

static void h5_init(void) {
    static int done;
    if (done) return;
    H5dont_atexit();
    atexit(h5_exit);
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    done = 1;
}

trace *trace_create(const char *path) {
    h5_init();
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode)) {
        ds_error("%s: is a directory (--out names the trace file)", path);
        return NULL;
    }
    trace *t = ds_calloc(1, sizeof *t, "trace");
    if (!t) return NULL;
    size_t n = strlen(path);
    t->path = ds_strndup(path, n, "path");
    t->tmp = ds_malloc(n + 32, "path");
    if (!t->path || !t->tmp) goto fail_free;
    snprintf(t->tmp, n + 32, "%s.%d.tmp", path, (int)getpid());
    int fd = open(t->tmp, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        ds_error("%s: cannot create the trace file: %s", t->tmp, strerror(errno));
        goto fail_free;
    }
    close(fd);
    t->owns_tmp = 1;
    t->file = H5Fcreate(t->tmp, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    if (t->file < 0) {
        ds_error("%s: HDF5 cannot create the trace file (%s)", t->tmp, errno ? strerror(errno) : "no reason given");
        goto fail;
    }
    for (int i = 0; i < N_TABLES; i++)
        if (table_open(t, (table_id)i)) goto fail;
    return t;
fail:
    if (close_handles(t)) h5_close_failed = 1;
    if (t->owns_tmp) remove(t->tmp);
fail_free:
    trace_free(t);
    return NULL;
}

int trace_attr(trace *t, const char *name, const char *value) {
    hid_t ty = -1, sp = -1, at = -1;
    H5TRY(ty = str_type(strlen(value) + 1), t->tmp);
    H5TRY(sp = H5Screate(H5S_SCALAR), t->tmp);
    H5TRY(at = H5Acreate2(t->file, name, ty, sp, H5P_DEFAULT, H5P_DEFAULT), t->tmp);
    H5TRY(H5Awrite(at, ty, value), t->tmp);
    H5Aclose(at);
    H5Sclose(sp);
    H5Tclose(ty);
    return 0;
fail:
    if (at >= 0) H5Aclose(at);
    if (sp >= 0) H5Sclose(sp);
    if (ty >= 0) H5Tclose(ty);
    return -1;
}

static int scalar_attr(trace *t, const char *name, hid_t file_type, hid_t mem_type, const void *value) {
    hid_t sp = -1, at = -1;
    H5TRY(sp = H5Screate(H5S_SCALAR), t->tmp);
    H5TRY(at = H5Acreate2(t->file, name, file_type, sp, H5P_DEFAULT, H5P_DEFAULT), t->tmp);
    H5TRY(H5Awrite(at, mem_type, value), t->tmp);
    H5Aclose(at);
    H5Sclose(sp);
    return 0;
fail:
    if (at >= 0) H5Aclose(at);
    if (sp >= 0) H5Sclose(sp);
    return -1;
}

int trace_attr_u64(trace *t, const char *name, uint64_t value) {
    return scalar_attr(t, name, H5T_STD_U64LE, H5T_NATIVE_UINT64, &value);
}

int trace_attr_f64(trace *t, const char *name, double value) {
    return scalar_attr(t, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, &value);
}

int trace_close(trace *t) {
    int rc = 0;
    errno = 0;
    for (int i = 0; i < N_TABLES; i++) rc |= table_flush(t, (table_id)i);
    if (rc == 0) rc = trace_attr(t, "complete", "yes"); /* readers refuse a trace without it */
    int err = errno;
    if (rc == 0 && H5Fflush(t->file, H5F_SCOPE_GLOBAL) < 0) {
        err = errno;
        ds_error("%s: cannot write the trace: %s", t->tmp, err ? strerror(err) : "HDF5 flush failed");
        rc = -1;
    }
    if (close_handles(t)) h5_close_failed = 1;
    if (rc) {
        /* incomplete: never leave it looking like a result */
        if (err) ds_error_prefix("%s (%s)", t->tmp, strerror(err));
        remove(t->tmp);
    } else if (rename(t->tmp, t->path) != 0) {
        /* complete but not in place (PATH is a directory, the folder went read-only...): keep it */
        ds_error("%s: cannot rename to %s: %s; the complete trace is kept at %s", t->tmp, t->path, strerror(errno), t->tmp);
        rc = -1;
    }
    trace_free(t);
    return rc ? -1 : 0;
}

void trace_abort(trace *t) {
    if (!t) return;
    if (close_handles(t)) h5_close_failed = 1;
    if (t->owns_tmp) remove(t->tmp);
    trace_free(t);
}

/* ---------------------------------------------------------------------------- reading */

static char *read_str_attr(hid_t file, const char *name) {
    if (H5Aexists(file, name) <= 0) return NULL;
    hid_t at = H5Aopen(file, name, H5P_DEFAULT), ty = H5Aget_type(at);
    size_t n = H5Tget_size(ty);
    char *s = calloc(n + 1, 1);
    if (s && H5Aread(at, ty, s) < 0) {
        free(s);
        s = NULL;
    }
    H5Tclose(ty);
    H5Aclose(at);
    return s;
}

static double read_f64_attr(hid_t file, const char *name) {
    double v = 0;
    if (H5Aexists(file, name) <= 0) return 0;
    hid_t at = H5Aopen(file, name, H5P_DEFAULT);
    if (at < 0 || H5Aread(at, H5T_NATIVE_DOUBLE, &v) < 0) v = 0;
    if (at >= 0) H5Aclose(at);
    return v;
}

static int read_table(hid_t file, table_id id, void **rows, long *n, const char *path) {
    *rows = NULL;
    *n = 0;
    if (H5Lexists(file, TABLE_NAMES[id], H5P_DEFAULT) <= 0) return 0; /* older traces may lack a table */
    hid_t d = -1, sp = -1, mt = -1;
    H5TRY(d = H5Dopen2(file, TABLE_NAMES[id], H5P_DEFAULT), path);
    H5TRY(sp = H5Dget_space(d), path);
    /* a table is one row a element: another rank would read dims[0] x dims[1] rows into dims[0] (and
     * write a second extent past dims[]) */
    int rank = H5Sget_simple_extent_ndims(sp);
    DS_CHECK(rank == 1, "%s: table '%s' has %d dimensions, not 1", path, TABLE_NAMES[id], rank);
    hsize_t dims[1];
    H5TRY(H5Sget_simple_extent_dims(sp, dims, NULL), path);
    H5TRY(mt = mem_type(id), path);
    DS_TRYP(*rows = ds_calloc(dims[0] ? dims[0] : 1, ROW_SIZE[id], "trace rows"));
    if (dims[0]) H5TRY(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, *rows), path);
    *n = (long)dims[0];
    H5Tclose(mt);
    H5Sclose(sp);
    H5Dclose(d);
    return 0;
fail:
    if (mt >= 0) H5Tclose(mt);
    if (sp >= 0) H5Sclose(sp);
    if (d >= 0) H5Dclose(d);
    free(*rows);
    *rows = NULL;
    return -1;
}

/* Every row's values within what a writer of this project can record: readers index arrays with
 * positions, depths and ranks and size tables by request ids, so a hand-edited or foreign trace with a
 * negative depth or a conf position of -100000 corrupted memory in `report` (found by a mutation round
 * on metrics.c). One error names the table, row, field and value. Strings end inside their field. */
#define ROW_CHECK(ok, table, i, field, v, what)                                                                 \
    DS_CHECK(ok, "%s: table '%s' row %ld: %s = %lld (%s): not a trace this tool wrote", path, table, (long)(i), \
             field, (long long)(v), what)
static int rows_check(const trace_data *d, const char *path) {
    for (long i = 0; i < d->n_rounds; i++) {
        const trace_round *r = &d->rounds[i];
        ROW_CHECK(r->request >= 0, "rounds", i, "request", r->request, "an id is 0 or more");
        ROW_CHECK(r->mode == MODE_AR || r->mode == MODE_SPEC, "rounds", i, "mode", r->mode, "0 autoregressive, 1 speculative");
        ROW_CHECK(r->round >= 0 && r->proposed >= 0 && r->emitted >= 0 && r->batch_tokens >= 0, "rounds", i,
                  "round / proposed / emitted / batch_tokens", DS_MIN(DS_MIN(r->round, r->proposed), DS_MIN(r->emitted, r->batch_tokens)),
                  "counts are 0 or more");
        ROW_CHECK(r->verified >= 0 && r->accepted >= 0 && r->accepted <= r->verified, "rounds", i, "accepted", r->accepted,
                  "0 to the verified drafts");
        double tt = r->t_draft_us + r->t_sched_us + r->t_verify_us;
        DS_CHECK(r->t_draft_us >= 0 && r->t_sched_us >= 0 && r->t_verify_us >= 0 && isfinite(tt),
                 "%s: table 'rounds' row %ld: times %g / %g / %g us (finite, 0 or more): not a trace this tool wrote", path,
                 i, r->t_draft_us, r->t_sched_us, r->t_verify_us);
    }
    for (long i = 0; i < d->n_requests; i++) {
        trace_request *r = &d->requests[i];
        r->dataset[sizeof r->dataset - 1] = r->domain[sizeof r->domain - 1] = 0;
        ROW_CHECK(r->request >= 0, "requests", i, "request", r->request, "an id is 0 or more");
        ROW_CHECK(r->mode == MODE_AR || r->mode == MODE_SPEC, "requests", i, "mode", r->mode, "0 autoregressive, 1 speculative");
        ROW_CHECK(r->prompt_tokens >= 0 && r->output_tokens >= 0 && r->rounds >= 0, "requests", i,
                  "prompt_tokens / output_tokens / rounds", DS_MIN(r->prompt_tokens, DS_MIN(r->output_tokens, r->rounds)),
                  "counts are 0 or more");
        DS_CHECK(r->wall_s >= 0 && isfinite(r->wall_s),
                 "%s: table 'requests' row %ld: wall_s = %g (finite, 0 or more): not a trace this tool wrote", path, i, r->wall_s);
    }
    for (long i = 0; i < d->n_positions; i++) {
        const trace_position *p = &d->positions[i];
        ROW_CHECK(p->position >= 1, "positions", i, "position", p->position, "draft positions start at 1");
        ROW_CHECK(p->accepted >= 0 && p->accepted <= p->attempted, "positions", i, "accepted", p->accepted, "0 to attempted");
    }
    for (long i = 0; i < d->n_conf; i++) {
        const trace_conf *c = &d->conf[i];
        ROW_CHECK(c->request >= 0 && c->round >= 0, "confidence", i, "request / round", DS_MIN(c->request, c->round), "0 or more");
        ROW_CHECK(c->position >= 1, "confidence", i, "position", c->position, "draft positions start at 1");
        ROW_CHECK(c->survived >= -1 && c->survived <= 1, "confidence", i, "survived", c->survived, "-1 unknown, 0 or 1");
    }
    for (long i = 0; i < d->n_lossless; i++) {
        trace_lossless *l = &d->lossless[i];
        l->test[sizeof l->test - 1] = l->kind[sizeof l->kind - 1] = 0;
    }
    for (long i = 0; i < d->n_nodes; i++) {
        const trace_node *n = &d->nodes[i];
        ROW_CHECK(n->request >= 0 && n->round >= 0 && n->node >= 0, "nodes", i, "request / round / node",
                  DS_MIN(n->request, DS_MIN(n->round, n->node)), "0 or more");
        ROW_CHECK(n->depth >= 1, "nodes", i, "depth", n->depth, "a child of the anchor has depth 1");
        ROW_CHECK(n->rank >= 0, "nodes", i, "rank", n->rank, "sibling ranks start at 0");
        ROW_CHECK((n->accepted == 0 || n->accepted == 1) && (n->led_on == 0 || n->led_on == 1), "nodes", i, "accepted / led_on",
                  n->accepted != 0 && n->accepted != 1 ? n->accepted : n->led_on, "0 or 1");
    }
    return 0;
fail:
    return -1;
}
#undef ROW_CHECK

int trace_read(const char *path, trace_data *d) {
    memset(d, 0, sizeof *d);
    h5_init();
    if (H5Fis_hdf5(path) <= 0) {
        FILE *f = fopen(path, "rb");
        if (!f) ds_error("%s: cannot open trace: no such file", path);
        else {
            fclose(f);
            ds_error("%s: not an HDF5 trace", path);
        }
        return -1;
    }
    hid_t file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    if (file < 0) {
        ds_error("%s: cannot open as HDF5", path);
        return -1;
    }
    char *complete = read_str_attr(file, "complete");
    if (!complete) {
        H5Fclose(file);
        ds_error("%s: an incomplete trace (no 'complete' mark: the run that wrote it did not finish)", path);
        return -1;
    }
    free(complete);
    d->config = read_str_attr(file, "config");
    d->target_fingerprint = read_str_attr(file, "target_fingerprint");
    d->drafter_fingerprint = read_str_attr(file, "drafter_fingerprint");
    d->version = read_str_attr(file, "version");
    d->kernels = read_str_attr(file, "kernels");
    d->draft_seq_loop_s = read_f64_attr(file, "draft_seq_loop_s");
    int rc = read_table(file, T_ROUND, (void **)&d->rounds, &d->n_rounds, path) ||
             read_table(file, T_REQUEST, (void **)&d->requests, &d->n_requests, path) ||
             read_table(file, T_POSITION, (void **)&d->positions, &d->n_positions, path) ||
             read_table(file, T_CONF, (void **)&d->conf, &d->n_conf, path) ||
             read_table(file, T_LOSSLESS, (void **)&d->lossless, &d->n_lossless, path) ||
             read_table(file, T_NODE, (void **)&d->nodes, &d->n_nodes, path);
    H5Fclose(file);
    if (rc || rows_check(d, path)) {
        trace_data_free(d);
        return -1;
    }
    return 0;
}

void trace_data_free(trace_data *d) {
    free(d->config), free(d->target_fingerprint), free(d->drafter_fingerprint), free(d->version), free(d->kernels);
    free(d->rounds), free(d->requests), free(d->positions), free(d->conf), free(d->lossless), free(d->nodes);
    memset(d, 0, sizeof *d);
}
