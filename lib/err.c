/* Result code texts (from the one X-macro list in ringcc.h) and error detail. */
#include "err.h"

#include <stdio.h>
#include <string.h>

static _Thread_local char err_tls[RCCI_ERR_TEXT_BYTES];
static _Thread_local char err_cause_tls[RCCI_ERR_TEXT_BYTES]; /* without prefixes */

const char *rcc_strerror(rcc_result_t result)
{
    switch (result) {
#define ERR_TEXT_(name, value, text)                                                               \
    case name: return text;
        RCC_RESULT_LIST(ERR_TEXT_)
#undef ERR_TEXT_
    }
    return "unknown result code";
}

const char *rcc_result_name(rcc_result_t result)
{
    switch (result) {
#define ERR_NAME_(name, value, text)                                                               \
    case name: return #name;
        RCC_RESULT_LIST(ERR_NAME_)
#undef ERR_NAME_
    }
    return "RCC_UNKNOWN_RESULT";
}

static void err_vset(const char *fmt, va_list ap, int err)
{
    char buf[RCCI_ERR_TEXT_BYTES];
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    if (err != 0 && n >= 0 && (size_t)n < sizeof buf)
        snprintf(buf + n, sizeof buf - (size_t)n, ": %s", strerror(err));
    memcpy(err_tls, buf, sizeof buf);
    memcpy(err_cause_tls, buf, sizeof buf);
}

rcc_result_t rcci_error(rcc_result_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vset(fmt, ap, 0);
    va_end(ap);
    return code;
}

rcc_result_t rcci_error_errno(rcc_result_t code, int err, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vset(fmt, ap, err);
    va_end(ap);
    return code;
}

static void err_vprefix(const char *fmt, va_list ap)
{
    char prefix[256], old[RCCI_ERR_TEXT_BYTES];
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    memcpy(old, err_tls, sizeof old);
    size_t plen = strlen(prefix), olen = strnlen(old, sizeof old - 1);
    if (plen + olen >= sizeof err_tls)
        olen = sizeof err_tls - 1 - plen;
    memcpy(err_tls, prefix, plen);
    memcpy(err_tls + plen, old, olen);
    err_tls[plen + olen] = '\0';
}

void rcci_error_prefix(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vprefix(fmt, ap);
    va_end(ap);
}

rcc_result_t rcci_error_prefix_cause(rcc_result_t code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    err_vprefix(fmt, ap);
    va_end(ap);
    memcpy(err_cause_tls, err_tls, sizeof err_cause_tls);
    return code;
}

const char *rcci_tls_error(void) { return err_tls; }

const char *rcci_tls_cause(void) { return err_cause_tls; }

void rcci_tls_error_set(const char *text) { snprintf(err_tls, sizeof err_tls, "%s", text); }

void rcci_tls_error_restore(const char *text, const char *cause)
{
    snprintf(err_tls, sizeof err_tls, "%s", text);
    snprintf(err_cause_tls, sizeof err_cause_tls, "%s", cause);
}

void rcci_tls_error_clear(void) { err_tls[0] = err_cause_tls[0] = '\0'; }
