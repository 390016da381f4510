#include "common.h"

#include <stdio.h>
#include <cJSON.h>

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static _Thread_local char g_err[1024];

void ds_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g_err, sizeof g_err, fmt, ap);
    va_end(ap);
}

void ds_error_prefix(const char *fmt, ...) {
    char ctx[512], old[sizeof g_err];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ctx, sizeof ctx, fmt, ap);
    va_end(ap);
    memcpy(old, g_err, sizeof old);
    snprintf(g_err, sizeof g_err, "%.500s: %.500s", ctx, old);
}

const char *ds_errmsg(void) { return g_err[0] ? g_err : "unknown error"; }
void ds_error_clear(void) { g_err[0] = 0; }

void *ds_malloc(size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) ds_error("out of memory allocating %zu bytes for %s", n, what);
    return p;
}

void *ds_calloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) ds_error("out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}

void *ds_realloc(void *p, size_t n, const char *what) {
    void *q = realloc(p, n ? n : 1);
    if (!q) ds_error("out of memory growing %s to %zu bytes", what, n);
    return q;
}

void *ds_aligned_alloc(size_t n, const char *what) {
    void *p = NULL;
    if (posix_memalign(&p, 64, n ? n : 64) != 0) {
        ds_error("out of memory allocating %zu aligned bytes for %s", n, what);
        return NULL;
    }
    return p;
}

/* large read-mostly buffers (the repacked weights): 2 MB aligned and marked for transparent huge pages,
 * so streaming a 1 GB model walks ~500 TLB entries instead of ~250,000 (the kernel's THP mode here is
 * "madvise"; where it is "never" the advice is a no-op and the buffer works the same) */
void *ds_huge_alloc(size_t n, const char *what) {
    const size_t huge = (size_t)2 << 20;
    if (n < huge) return ds_aligned_alloc(n, what);
    void *p = NULL;
    if (posix_memalign(&p, huge, n) != 0) {
        ds_error("out of memory allocating %zu bytes for %s", n, what);
        return NULL;
    }
#ifdef MADV_HUGEPAGE
    (void)madvise(p, (n + huge - 1) / huge * huge, MADV_HUGEPAGE); /* advice only: its failure changes no result */
#endif
    return p;
}

char *ds_strndup(const char *s, size_t n, const char *what) {
    char *p = ds_malloc(n + 1, what);
    if (!p) return NULL;
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

double ds_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int ds_map_file(const char *path, size_t min_size, const char *what, const uint8_t **map, size_t *size) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) {
        ds_error("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        ds_error("%s: not a regular file", path);
        close(fd);
        return -1;
    }
    if ((size_t)st.st_size < min_size) {
        ds_error("%s: file truncated: %lld bytes is smaller than %s", path, (long long)st.st_size, what);
        close(fd);
        return -1;
    }
    void *p = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED) {
        ds_error("%s: mmap failed: %s", path, strerror(errno));
        return -1;
    }
    *map = p;
    *size = (size_t)st.st_size;
    return 0;
}

void ds_unmap(const uint8_t *map, size_t size) {
    if (map) munmap((void *)map, size);
}

size_t ds_release_mapped(const uint8_t *map, size_t size, const void *p, size_t n) {
    const uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE), a = (uintptr_t)p, m0 = (uintptr_t)map;
    if (!map || !p || a < m0 || n > size || a - m0 > size - n) return 0; /* not inside this mapping */
    uintptr_t lo = (a + pg - 1) / pg * pg, hi = (a + n) / pg * pg; /* whole pages only */
    if (hi <= lo) return 0;
    /* a read-only private file mapping: dropped pages read back from the file on their next touch,
     * so only residency changes; a refusal (never expected) leaves them resident, which is no error */
    return madvise((void *)lo, hi - lo, MADV_DONTNEED) == 0 ? hi - lo : 0;
}

int ds_mkdirs(const char *dir, const char *what) {
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", dir) >= (int)sizeof buf) {
        ds_error("%s: path too long for %s", dir, what);
        return -1;
    }
    for (char *p = buf + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) break; /* the final mkdir reports it */
            *p = '/';
        }
    struct stat st;
    if (mkdir(buf, 0755) != 0 && (errno != EEXIST || stat(buf, &st) != 0 || !S_ISDIR(st.st_mode))) {
        ds_error("%s: cannot create %s: %s", dir, what, errno == EEXIST ? "a file of that name exists" : strerror(errno));
        return -1;
    }
    return 0;
}

int ds_mkdirs_for(const char *path, const char *what) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (!slash || slash == dir) return 0;
    *slash = 0;
    return ds_mkdirs(dir, what);
}

int ds_read_file(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    char *buf = NULL;
    if (!f) {
        ds_error("%s: cannot open: %s", path, strerror(errno));
        return -1;
    }
    size_t cap = 1 << 16, n = 0;
    DS_TRYP(buf = ds_malloc(cap, path));
    for (;;) {
        if (n + 1 >= cap) {
            char *nb = ds_realloc(buf, cap * 2, path);
            DS_TRYP(nb);
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    DS_CHECK(!ferror(f), "%s: read error: %s", path, strerror(errno));
    fclose(f);
    buf[n] = 0;
    *out = buf;
    if (len) *len = n;
    return 0;
fail:
    free(buf);
    fclose(f);
    return -1;
}

const char *ds_json_why(int why) {
    return why == DS_JSON_TRAILING ? "text after the JSON value"
           : why == DS_JSON_NUL    ? "a \\u0000 escape (U+0000 would end the text there)"
           : why == DS_JSON_BAD    ? "not valid JSON"
                                   : "valid JSON";
}

/* offset of the first \u0000 escape in a parsed JSON text, or n: outside strings a valid text has no
 * backslash, so skipping each escape's next character is enough to read "\\u0000" as no NUL */
static size_t json_nul_escape(const char *txt, size_t n) {
    for (size_t i = 0; i + 1 < n; i++)
        if (txt[i] == '\\') {
            if (txt[i + 1] == 'u' && i + 5 < n && !memcmp(txt + i + 2, "0000", 4)) return i;
            i++;
        }
    return n;
}

cJSON *ds_json_parse(const char *txt, size_t n, size_t *stop, int *why) {
    const char *end = NULL;
    cJSON *j = cJSON_ParseWithLengthOpts(txt, n, &end, 0);
    size_t at = end && end >= txt && end <= txt + n ? (size_t)(end - txt) : 0;
    int w = DS_JSON_OK;
    if (!j) w = DS_JSON_BAD;
    else {
        while (at < n && (txt[at] == ' ' || txt[at] == '\t' || txt[at] == '\r' || txt[at] == '\n')) at++;
        if (at < n) w = DS_JSON_TRAILING;
        else if ((at = json_nul_escape(txt, n)) < n) w = DS_JSON_NUL;
    }
    if (why) *why = w;
    if (stop) *stop = w == DS_JSON_OK ? n : at;
    if (w != DS_JSON_OK) {
        cJSON_Delete(j);
        return NULL;
    }
    return j;
}

cJSON *ds_read_json(const char *path) {
    char *txt;
    size_t n, stop;
    int why;
    if (ds_read_file(path, &txt, &n)) return NULL;
    cJSON *j = ds_json_parse(txt, n, &stop, &why);
    if (!j) {
        int line = 1;
        for (size_t q = 0; q < stop && q < n; q++) line += txt[q] == '\n';
        ds_error("%s: %s (line %d)%s", path, ds_json_why(why), line, why == DS_JSON_TRAILING ? ": one value per file" : "");
    }
    free(txt);
    return j;
}

int ds_same_file(const char *a, const char *b) {
    struct stat x, y;
    if (strcmp(a, b) == 0) return 1;
    return stat(a, &x) == 0 && stat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

int ds_write_json(const cJSON *j, const char *path) {
    char *txt = cJSON_Print(j);
    if (!txt) {
        ds_error("%s: out of memory rendering JSON", path);
        return -1;
    }
    int rc = ds_mkdirs_for(path, "the JSON file's folder") || ds_write_file_atomic(path, txt, strlen(txt));
    free(txt);
    return rc ? -1 : 0;
}

void ds_progress_start(ds_progress *p, const char *label, const char *unit, long total) {
    p->label = label;
    p->unit = unit;
    p->total = total;
    p->t0 = p->last = ds_now();
}

void ds_progress_update(ds_progress *p, long done, const char *extra) {
    double now = ds_now();
    if (done < p->total && now - p->last < 0.5) return; /* at most two redraws a second */
    p->last = now;
    double el = now - p->t0, rate = el > 0 ? (double)done / el : 0;
    double eta = rate > 0 ? (double)(p->total - done) / rate : 0;
    fprintf(stderr, "\r%s %ld/%ld  %.2f %s/s  ETA %02d:%02d  %s\033[K", p->label, done, p->total, rate,
            p->unit, (int)(eta / 60), (int)eta % 60, extra ? extra : "");
    fflush(stderr);
}

void ds_progress_end(ds_progress *p) {
    fprintf(stderr, "  (%.1f s)\n", ds_now() - p->t0);
}

int ds_write_file_atomic(const char *path, const void *data, size_t n) {
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.%d.tmp", path, (int)getpid());
    FILE *f = fopen(tmp, "wb");
    if (!f) {
        ds_error("%s: cannot create: %s", tmp, strerror(errno));
        return -1;
    }
    int ok = fwrite(data, 1, n, f) == n;
    int err = ok ? 0 : errno;
    if (fclose(f) != 0 && ok) ok = 0, err = errno;
    if (!ok) {
        ds_error("%s: write failed: %s", tmp, err ? strerror(err) : "short write");
        remove(tmp);
        return -1;
    }
    if (rename(tmp, path) != 0) {
        ds_error("%s: cannot rename to %s: %s", tmp, path, strerror(errno));
        remove(tmp);
        return -1;
    }
    return 0;
}
