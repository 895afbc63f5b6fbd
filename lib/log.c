/* Logging to stderr or RCC_DEBUG_FILE, one whole line per write. */
#include "log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "params.h"

static pthread_once_t log_once = PTHREAD_ONCE_INIT;
static rcci_log_level_t log_level_value = RCCI_LOG_WARN;
static FILE *log_file;
static char log_host[64];
static _Thread_local int log_rank = -1;
static uint32_t log_subsys_mask = ~0u;
static const char *const log_level_names[] = {"NONE", "WARN", "INFO", "TRACE"};
static const char *const log_subsys_names[] = {
#define LOG_SUBSYS_NAME_(id, name) name,
    RCCI_LOG_SUBSYS_LIST(LOG_SUBSYS_NAME_)
#undef LOG_SUBSYS_NAME_
};

void rcci_log_expand_path(const char *pattern, const char *host, char *out, size_t size)
{
    size_t n = 0;
    for (const char *p = pattern; *p && n + 1 < size; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            int w = p[1] == 'h' ? snprintf(out + n, size - n, "%s", host)
                                : snprintf(out + n, size - n, "%d", (int)getpid());
            n = w > 0 && (size_t)w < size - n ? n + (size_t)w : size - 1;
            p++;
        } else {
            out[n++] = *p;
        }
    }
    out[n] = '\0';
}

int rcci_log_level_named(const char *name, rcci_log_level_t *level)
{
    for (int i = 0; i < (int)(sizeof log_level_names / sizeof log_level_names[0]); i++) {
        if (!strcasecmp(name, log_level_names[i])) {
            *level = (rcci_log_level_t)i;
            return 1;
        }
    }
    *level = RCCI_LOG_WARN;
    return 0;
}

int rcci_log_subsys_parse(const char *text, uint32_t *mask, char *bad, size_t bad_size)
{
    int invert = text[0] == '^', ok = 1;
    uint32_t named = 0;
    snprintf(bad, bad_size, "%s", "");
    const char *p = text + invert;
    while (*p) {
        size_t len = strcspn(p, ",");
        int found = len == 3 && !strncasecmp(p, "all", 3);
        if (found)
            named = ~0u;
        for (int i = 0; i < RCCI_SUBSYS_COUNT && !found; i++)
            if (strlen(log_subsys_names[i]) == len && !strncasecmp(p, log_subsys_names[i], len))
                named |= 1u << i, found = 1;
        if (!found && len && ok) {
            ok = 0;
            snprintf(bad, bad_size, "%.*s", (int)(len < 64 ? len : 64), p);
        }
        p += len + (p[len] == ',');
    }
    *mask = invert ? ~named : named;
    return ok;
}

static void log_vwrite(rcci_log_level_t level, rcci_log_subsys_t subsys, const char *fmt,
                       va_list ap)
{
    char line[2048], rank[16] = "";
    if (log_rank >= 0)
        snprintf(rank, sizeof rank, " [%d]", log_rank);
    /* Upper case, as NCCL's "INFO NET" reads. */
    char sub[16];
    size_t k = 0;
    for (const char *c = log_subsys_names[subsys]; *c && k < sizeof sub - 1; c++)
        sub[k++] = (char)(*c - ('a' <= *c && *c <= 'z' ? 'a' - 'A' : 0));
    sub[k] = '\0';
    int n = snprintf(line, sizeof line, "%s:%d:%d ringcc %s %s%s ", log_host, (int)getpid(),
                     (int)syscall(SYS_gettid), log_level_names[level], sub, rank);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    /* One fputs of a whole line keeps lines of concurrent threads apart. */
    size_t len = strlen(line);
    if (len + 2 > sizeof line)
        len = sizeof line - 2;
    line[len] = '\n';
    line[len + 1] = '\0';
    fputs(line, log_file);
}

/* For log_init's own warnings: rcci_log would wait for log_init to finish (pthread_once). */
__attribute__((format(printf, 1, 2))) static void log_init_warn(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(RCCI_LOG_WARN, RCCI_SUBSYS_ENV, fmt, ap);
    va_end(ap);
}

static void log_init(void)
{
    gethostname(log_host, sizeof log_host - 1);
    char *dot = strchr(log_host, '.');
    if (dot)
        *dot = '\0';
    const char *level = rcci_param_str(RCCI_PARAM_DEBUG);
    int known = rcci_log_level_named(level, &log_level_value);
    const char *path = rcci_param_str(RCCI_PARAM_DEBUG_FILE);
    if (*path) {
        char expanded[4096];
        rcci_log_expand_path(path, log_host, expanded, sizeof expanded);
        log_file = fopen(expanded, "a");
        if (log_file)
            setvbuf(log_file, NULL, _IOLBF, 0);
    }
    if (!log_file)
        log_file = stderr;
    if (!known)
        log_init_warn("RCC_DEBUG='%s' is not a level (NONE, WARN, INFO, TRACE); using WARN", level);
    char bad[80];
    const char *subsys = rcci_param_str(RCCI_PARAM_DEBUG_SUBSYS);
    if (!rcci_log_subsys_parse(subsys, &log_subsys_mask, bad, sizeof bad) &&
        log_level_value >= RCCI_LOG_WARN)
        log_init_warn("RCC_DEBUG_SUBSYS='%s': '%s' is not a subsystem (init, bootstrap, net, coll, "
                      "p2p, cuda, env, timeline, all); ignored",
                      subsys, bad);
}

rcci_log_level_t rcci_log_level(void)
{
    pthread_once(&log_once, log_init);
    return log_level_value;
}

int rcci_log_on(rcci_log_level_t level, rcci_log_subsys_t subsys)
{
    pthread_once(&log_once, log_init);
    return log_level_value >= level && (level <= RCCI_LOG_WARN || (log_subsys_mask >> subsys & 1u));
}

void rcci_log_set_rank(int rank) { log_rank = rank; }

void rcci_log(rcci_log_level_t level, rcci_log_subsys_t subsys, const char *fmt, ...)
{
    pthread_once(&log_once, log_init);
    va_list ap;
    va_start(ap, fmt);
    log_vwrite(level, subsys, fmt, ap);
    va_end(ap);
}
