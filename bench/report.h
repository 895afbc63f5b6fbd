/*
 * Machine-readable benchmark results: one JSON document or one CSV table per
 * run, written as the rows come (ringcc-perf; meant for ringcc-linkperf and
 * the other benchmarks too). bench/plot_busbw.py reads both.
 *
 * JSON:  {"tool": T, "meta": {...}, "rows": [{...}, ...], "summary": {...}}
 * CSV:   "# tool: T" and "# key: value" lines for meta, a header of the first
 *        row's keys, one line per row, then "# summary key: value" lines.
 */
#ifndef RINGCC_BENCH_REPORT_H
#define RINGCC_BENCH_REPORT_H

#include <stdint.h>

typedef enum { REPORT_JSON, REPORT_CSV } report_format_t;
typedef enum { REPORT_STR, REPORT_INT, REPORT_NUM, REPORT_NULL } report_kind_t;

/* One named value of a row, the metadata or the summary. */
typedef struct {
    const char *key;
    report_kind_t kind;
    const char *s;
    int64_t i;
    double d;
} report_field_t;

#define REPORT_S(k, v) ((report_field_t){.key = (k), .kind = REPORT_STR, .s = (v)})
#define REPORT_I(k, v) ((report_field_t){.key = (k), .kind = REPORT_INT, .i = (int64_t)(v)})
#define REPORT_D(k, v) ((report_field_t){.key = (k), .kind = REPORT_NUM, .d = (v)})
#define REPORT_NIL(k) ((report_field_t){.key = (k), .kind = REPORT_NULL})

typedef struct report report_t;

/* Opens `path` ("-": stdout) for a report of `tool`; NULL with errno set
 * when the file cannot be created. */
report_t *report_open(const char *path, report_format_t format, const char *tool);
/* Metadata, before the first row (may be called more than once). Adds the
 * date (UTC) and host itself. */
void report_meta(report_t *r, const report_field_t *fields, int n);
/* The RCC_* variables set in the environment, as metadata "env". */
void report_meta_env(report_t *r);
/* One row; every row has the keys of the first, in the same order. */
void report_row(report_t *r, const report_field_t *fields, int n);
/* Writes the summary, ends the document and closes the file (NULL: none).
 * Returns 0, or -1 when a write failed. */
int report_close(report_t *r, const report_field_t *summary, int n);

#endif /* RINGCC_BENCH_REPORT_H */
