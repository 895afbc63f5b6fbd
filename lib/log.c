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
static const char *const log_level_names[] = {"NONE", "WARN", "INFO", "TRACE"};

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
        rcci_log(RCCI_LOG_WARN,
                 "RCC_DEBUG='%s' is not a level (NONE, WARN, INFO, TRACE); using WARN", level);
}

rcci_log_level_t rcci_log_level(void)
{
    pthread_once(&log_once, log_init);
    return log_level_value;
}

void rcci_log_set_rank(int rank) { log_rank = rank; }

void rcci_log(rcci_log_level_t level, const char *fmt, ...)
{
    pthread_once(&log_once, log_init);
    char line[2048];
    int n = log_rank >= 0
                ? snprintf(line, sizeof line, "%s:%d:%d ringcc %s [%d] ", log_host, (int)getpid(),
                           (int)syscall(SYS_gettid), log_level_names[level], log_rank)
                : snprintf(line, sizeof line, "%s:%d:%d ringcc %s ", log_host, (int)getpid(),
                           (int)syscall(SYS_gettid), log_level_names[level]);
    va_list ap;
    va_start(ap, fmt);
    if (n > 0 && (size_t)n < sizeof line)
        vsnprintf(line + n, sizeof line - (size_t)n, fmt, ap);
    va_end(ap);
    /* One fputs of a whole line keeps lines of concurrent threads apart. */
    size_t len = strlen(line);
    if (len + 2 > sizeof line)
        len = sizeof line - 2;
    line[len] = '\n';
    line[len + 1] = '\0';
    fputs(line, log_file);
}
