/*
 * Error detail: a thread-local "last error" text set where a failure is
 * first seen, copied into the communicator when it surfaces to the user.
 */
#ifndef RINGCC_ERR_H
#define RINGCC_ERR_H

#include <stdarg.h>

#include "ringcc.h"

#define RCCI_ERR_TEXT_BYTES 1024

/* Records `code` with a printf-style detail as this thread's last error and
 * returns `code`, so a failure site reads `return rcci_error(RCC_ERR_X, ...)`.
 * The detail should name the thing that failed (peer rank, address, value). */
rcc_result_t rcci_error(rcc_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
/* Like rcci_error, with errno's text appended (": Connection refused"). */
rcc_result_t rcci_error_errno(rcc_result_t code, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Prepends context to this thread's last error ("allreduce #4: " + old). */
void rcci_error_prefix(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The same, and the whole text becomes the cause too (rcci_tls_cause), for
 * context that the other ranks must hear in a failure notice (the rank or
 * the root a connection was for). Returns `code`. */
rcc_result_t rcci_error_prefix_cause(rcc_result_t code, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* This thread's last error text ("" when none). */
const char *rcci_tls_error(void);
/* The same without the context prefixes added since: the cause alone, as
 * first recorded (what a failure notice tells the other ranks). */
const char *rcci_tls_cause(void);
void rcci_tls_error_set(const char *text);
/* Puts back a text and cause saved from rcci_tls_error/rcci_tls_cause
 * (around work whose own failures do not matter). */
void rcci_tls_error_restore(const char *text, const char *cause);
void rcci_tls_error_clear(void);

/* Propagation with one cleanup label per function:
 *     rcc_result_t res = RCC_SUCCESS;
 *     RCC_CHECK(step_one());
 *   out:
 *     cleanup; return res;                                                 */
#define RCC_CHECK(expr)                                                                            \
    do {                                                                                           \
        rcc_result_t rcc_check_res_ = (expr);                                                      \
        if (rcc_check_res_ != RCC_SUCCESS) {                                                       \
            res = rcc_check_res_;                                                                  \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* Fail with `code` and a detail, jumping to the cleanup label. */
#define RCC_FAIL(code, ...)                                                                        \
    do {                                                                                           \
        res = rcci_error((code), __VA_ARGS__);                                                     \
        goto out;                                                                                  \
    } while (0)

#endif /* RINGCC_ERR_H */
