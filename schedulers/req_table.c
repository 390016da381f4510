/* req_table.c — per-request scheduler state: fixed-size zeroed slots found by request id.
 * A batch holds at most a few hundred requests, so a linear scan over packed ids is enough. */
#include <stdlib.h>
#include <string.h>

#include "../runtime/base/common.h"
#include "scheduler.h"

void *req_table_get(req_table *t, int id, size_t size) {
    if (t->size && t->size != size) {
        ds_error("scheduler state: slot size %zu requested, table holds %zu", size, t->size);
        return NULL;
    }
    t->size = size;
    for (int i = 0; i < t->n; i++)
        if (t->id[i] == id) return t->slot + (size_t)i * size;
    if (t->n == t->cap) {
        int cap = t->cap ? 2 * t->cap : 16;
        int *ids = realloc(t->id, sizeof(int) * (size_t)cap);
        if (!ids) goto oom;
        t->id = ids;
        unsigned char *sl = realloc(t->slot, size * (size_t)cap);
        if (!sl) goto oom;
        t->slot = sl;
        t->cap = cap;
    }
    t->id[t->n] = id;
    memset(t->slot + (size_t)t->n * size, 0, size);
    return t->slot + (size_t)t->n++ * size;
oom:
    ds_error("out of memory (scheduler state for %d requests)", t->n + 1);
    return NULL;
}

void req_table_drop(req_table *t, int id) {
    for (int i = 0; i < t->n; i++)
        if (t->id[i] == id) { /* the last slot moves into the hole */
            t->n--;
            t->id[i] = t->id[t->n];
            memmove(t->slot + (size_t)i * t->size, t->slot + (size_t)t->n * t->size, t->size);
            return;
        }
}

void req_table_clear(req_table *t) { t->n = 0; }

void req_table_free(req_table *t) {
    free(t->id);
    free(t->slot);
    memset(t, 0, sizeof *t);
}
