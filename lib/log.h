/*
 * RCC_DEBUG logging: WARN (default), INFO, TRACE; RCC_DEBUG_FILE.
 * Lines read "host:pid:tid ringcc INFO [rank] text".
 */
#ifndef RINGCC_LOG_H
#define RINGCC_LOG_H

#include <stddef.h>

typedef enum {
    RCCI_LOG_NONE = 0,
    RCCI_LOG_WARN = 1,
    RCCI_LOG_INFO = 2,
    RCCI_LOG_TRACE = 3
} rcci_log_level_t;

/* The level from RCC_DEBUG, read once. */
rcci_log_level_t rcci_log_level(void);
void rcci_log(rcci_log_level_t level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* RCC_DEBUG's value: 1 and *level for NONE, WARN, INFO or TRACE (any case);
 * 0 and WARN for anything else. */
int rcci_log_level_named(const char *name, rcci_log_level_t *level);
/* RCC_DEBUG_FILE's pattern with %h (host) and %p (pid) expanded into out,
 * always NUL-terminated, cut to size - 1 characters. */
void rcci_log_expand_path(const char *pattern, const char *host, char *out, size_t size);
/* The rank shown in this thread's log lines (-1: none). */
void rcci_log_set_rank(int rank);

#define RCC_LOG_(level, ...)                                                                       \
    do {                                                                                           \
        if (rcci_log_level() >= (level))                                                           \
            rcci_log((level), __VA_ARGS__);                                                        \
    } while (0)
#define RCC_WARN(...) RCC_LOG_(RCCI_LOG_WARN, __VA_ARGS__)
#define RCC_INFO(...) RCC_LOG_(RCCI_LOG_INFO, __VA_ARGS__)
#define RCC_TRACE(...) RCC_LOG_(RCCI_LOG_TRACE, __VA_ARGS__)

#endif /* RINGCC_LOG_H */
