/* Benchmark results as JSON or CSV (report.h). */
#include "report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

struct report {
    FILE *out;
    report_format_t format;
    int in_rows;  /* the metadata is closed, rows have begun */
    long nmeta;   /* metadata fields written (JSON commas) */
    long nrows;   /* rows written */
    int own_file; /* not stdout: closed at the end */
};

static void report_json_string(FILE *out, const char *s)
{
    fputc('"', out);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(out, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(out, "\\u%04x", *p);
        else
            fputc(*p, out);
    }
    fputc('"', out);
}

/* A CSV cell: quoted when it holds a separator, a quote or a line break (RFC 4180). */
static void report_csv_string(FILE *out, const char *s)
{
    if (!strpbrk(s, ",\"\r\n")) {
        fputs(s, out);
        return;
    }
    fputc('"', out);
    for (const char *p = s; *p; p++) {
        if (*p == '"')
            fputc('"', out);
        fputc(*p, out);
    }
    fputc('"', out);
}

static void report_value(const report_t *r, const report_field_t *f)
{
    switch (f->kind) {
    case REPORT_STR:
        if (r->format == REPORT_JSON)
            report_json_string(r->out, f->s ? f->s : "");
        else
            report_csv_string(r->out, f->s ? f->s : "");
        break;
    case REPORT_INT: fprintf(r->out, "%lld", (long long)f->i); break;
    case REPORT_NUM:
        if (isfinite(f->d))
            fprintf(r->out, "%.6g", f->d);
        else if (r->format == REPORT_JSON)
            fputs("null", r->out); /* JSON has no NaN or infinity */
        break;
    case REPORT_NULL:
        if (r->format == REPORT_JSON)
            fputs("null", r->out);
        break;
    }
}

/* `"key": value` (JSON, after a comma when not the first) or "# key: value" (CSV). */
static void report_named(report_t *r, const char *prefix, const report_field_t *f, long *count)
{
    if (r->format == REPORT_JSON) {
        fputs((*count)++ ? ", " : "", r->out);
        report_json_string(r->out, f->key);
        fputs(": ", r->out);
    } else {
        fprintf(r->out, "# %s%s: ", prefix, f->key);
    }
    report_value(r, f);
    if (r->format == REPORT_CSV)
        fputc('\n', r->out);
}

report_t *report_open(const char *path, report_format_t format, const char *tool)
{
    report_t *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->format = format;
    r->own_file = strcmp(path, "-") != 0;
    r->out = r->own_file ? fopen(path, "w") : stdout;
    if (!r->out) {
        free(r);
        return NULL;
    }
    if (format == REPORT_JSON) {
        fputs("{\"tool\": ", r->out);
        report_json_string(r->out, tool);
        fputs(", \"meta\": {", r->out);
    } else {
        fprintf(r->out, "# tool: %s\n", tool);
    }
    char host[256] = "?", date[32] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = '\0';
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(date, sizeof date, "%Y-%m-%dT%H:%M:%SZ", &tm);
    report_meta(r, (report_field_t[]){REPORT_S("date", date), REPORT_S("host", host)}, 2);
    return r;
}

void report_meta(report_t *r, const report_field_t *fields, int n)
{
    for (int i = 0; i < n && !r->in_rows; i++)
        report_named(r, "", &fields[i], &r->nmeta);
}

void report_meta_env(report_t *r)
{
    if (r->in_rows)
        return;
    if (r->format == REPORT_JSON)
        fprintf(r->out, "%s\"env\": {", r->nmeta++ ? ", " : "");
    else
        fputs("# env:", r->out);
    long k = 0;
    for (char **e = environ; *e; e++) {
        const char *eq = strchr(*e, '=');
        if (strncmp(*e, "RCC_", 4) != 0 || !eq || !strncmp(*e, "RCC_SECRET=", 11))
            continue; /* the job secret stays out of files that get shared */
        if (r->format == REPORT_CSV) {
            fputc(' ', r->out);
            report_csv_string(r->out, *e);
            continue;
        }
        fprintf(r->out, "%s\"%.*s\": ", k++ ? ", " : "", (int)(eq - *e), *e);
        report_json_string(r->out, eq + 1);
    }
    fputs(r->format == REPORT_JSON ? "}" : "\n", r->out);
}

void report_row(report_t *r, const report_field_t *fields, int n)
{
    if (!r->in_rows) {
        r->in_rows = 1;
        if (r->format == REPORT_JSON) {
            fputs("},\n \"rows\": [", r->out);
        } else {
            for (int i = 0; i < n; i++) {
                fputs(i ? "," : "", r->out);
                report_csv_string(r->out, fields[i].key);
            }
            fputc('\n', r->out);
        }
    }
    if (r->format == REPORT_JSON) {
        fputs(r->nrows ? ",\n  {" : "\n  {", r->out);
        long k = 0;
        for (int i = 0; i < n; i++)
            report_named(r, "", &fields[i], &k);
        fputc('}', r->out);
    } else {
        for (int i = 0; i < n; i++) {
            fputs(i ? "," : "", r->out);
            report_value(r, &fields[i]);
        }
        fputc('\n', r->out);
    }
    r->nrows++;
    fflush(r->out); /* rows of a long sweep are there as it runs */
}

int report_close(report_t *r, const report_field_t *summary, int n)
{
    if (!r)
        return 0;
    if (r->format == REPORT_JSON) {
        fputs(r->in_rows ? "\n ],\n \"summary\": {" : "},\n \"rows\": [],\n \"summary\": {",
              r->out);
        long k = 0;
        for (int i = 0; i < n; i++)
            report_named(r, "", &summary[i], &k);
        fputs("}}\n", r->out);
    } else {
        long k = 0;
        for (int i = 0; i < n; i++)
            report_named(r, "summary ", &summary[i], &k);
    }
    int failed = ferror(r->out) != 0;
    if (r->own_file)
        failed |= fclose(r->out) != 0;
    else
        failed |= fflush(r->out) != 0;
    free(r);
    return failed ? -1 : 0;
}
