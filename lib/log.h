/*
 * RCC_DEBUG logging: WARN (default), INFO, TRACE; RCC_DEBUG_SUBSYS picks the
 * subsystems whose INFO and TRACE lines show (warnings always do);
 * RCC_DEBUG_FILE. Lines read "host:pid:tid ringcc INFO NET [rank] text".
 *
 * A source file names its subsystem by defining RCCI_LOG_SUBSYS before it
 * includes log.h (`#define RCCI_LOG_SUBSYS RCCI_SUBSYS_NET`); the default is
 * init. A definition after the include is a redefinition the build refuses.
 */
#ifndef RINGCC_LOG_H
#define RINGCC_LOG_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    RCCI_LOG_NONE = 0,
    RCCI_LOG_WARN = 1,
    RCCI_LOG_INFO = 2,
    RCCI_LOG_TRACE = 3
} rcci_log_level_t;

/* X(id, name): the subsystems of RCC_DEBUG_SUBSYS. */
#define RCCI_LOG_SUBSYS_LIST(X)                                                                    \
    X(INIT, "init")           /* communicator set-up: versions, features, choices */               \
    X(BOOTSTRAP, "bootstrap") /* rendezvous and the bootstrap ring */                              \
    X(NET, "net")             /* sockets, interfaces, the TCP transport */                         \
    X(COLL, "coll")           /* operations, the progress thread, stalls */                        \
    X(P2P, "p2p")             /* point-to-point connections and messages */                        \
    X(CUDA, "cuda")           /* devices, streams, kernels */                                      \
    X(ENV, "env")             /* the launcher's environment, parameters */                         \
    X(TIMELINE, "timeline")   /* RCC_TIMELINE files */

typedef enum {
#define LOG_SUBSYS_ID_(id, name) RCCI_SUBSYS_##id,
    RCCI_LOG_SUBSYS_LIST(LOG_SUBSYS_ID_)
#undef LOG_SUBSYS_ID_
        RCCI_SUBSYS_COUNT
} rcci_log_subsys_t;

#ifndef RCCI_LOG_SUBSYS
#define RCCI_LOG_SUBSYS RCCI_SUBSYS_INIT
#endif

/* The level from RCC_DEBUG, read once. */
rcci_log_level_t rcci_log_level(void);
/* Whether a line of `level` from `subsys` shows: warnings always do (when
 * the level is at least WARN), INFO and TRACE when RCC_DEBUG_SUBSYS has
 * the subsystem. */
int rcci_log_on(rcci_log_level_t level, rcci_log_subsys_t subsys);
void rcci_log(rcci_log_level_t level, rcci_log_subsys_t subsys, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* RCC_DEBUG's value: 1 and *level for NONE, WARN, INFO or TRACE (any case);
 * 0 and WARN for anything else. */
int rcci_log_level_named(const char *name, rcci_log_level_t *level);
/* RCC_DEBUG_SUBSYS's value: "all" or a comma-separated list of subsystem
 * names (any case), "^list" for all but those, into a bit mask (bit i:
 * subsystem i). Returns 1, or 0 naming the first unknown name in
 * bad (always NUL-terminated) with the known names still in *mask. */
int rcci_log_subsys_parse(const char *text, uint32_t *mask, char *bad, size_t bad_size);
/* RCC_DEBUG_FILE's pattern with %h (host) and %p (pid) expanded into out,
 * always NUL-terminated, cut to size - 1 characters. */
void rcci_log_expand_path(const char *pattern, const char *host, char *out, size_t size);
/* The rank shown in this thread's log lines (-1: none). */
void rcci_log_set_rank(int rank);

#define RCC_LOG_(level, ...)                                                                       \
    do {                                                                                           \
        if (rcci_log_on((level), RCCI_LOG_SUBSYS))                                                 \
            rcci_log((level), RCCI_LOG_SUBSYS, __VA_ARGS__);                                       \
    } while (0)
#define RCC_WARN(...) RCC_LOG_(RCCI_LOG_WARN, __VA_ARGS__)
#define RCC_INFO(...) RCC_LOG_(RCCI_LOG_INFO, __VA_ARGS__)
#define RCC_TRACE(...) RCC_LOG_(RCCI_LOG_TRACE, __VA_ARGS__)

#endif /* RINGCC_LOG_H */
