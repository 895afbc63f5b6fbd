/* The RCC_* parameter table, read from the environment once. */
#include "params.h"

#include <ctype.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"

static const rcci_param_info_t param_table[RCCI_PARAM_COUNT] = {
#define PARAM_INFO_(id, kind, def, lo, hi, desc)                                                   \
    [RCCI_PARAM_##id] = {"RCC_" #id, PARAM_KIND_##kind, def, lo, hi, desc},
#define PARAM_KIND_INT 1
#define PARAM_KIND_STR 0
    RCCI_PARAM_LIST(PARAM_INFO_)
#undef PARAM_INFO_
};

static int64_t param_ints[RCCI_PARAM_COUNT];
static const char *param_strs[RCCI_PARAM_COUNT];
static pthread_once_t param_once = PTHREAD_ONCE_INIT;
static rcc_result_t param_status;
static char param_error[RCCI_ERR_TEXT_BYTES];

rcc_result_t rcci_parse_size(const char *text, int64_t min, int64_t max, int64_t *out)
{
    const char *p = text;
    if (!isdigit((unsigned char)*p))
        return RCC_ERR_INVALID_ARGUMENT;
    errno = 0;
    char *end;
    unsigned long long v = strtoull(p, &end, 10);
    if (errno == ERANGE)
        return RCC_ERR_INVALID_ARGUMENT;
    unsigned shift = 0;
    switch (*end) {
    case 'k':
    case 'K':
        shift = 10;
        end++;
        break;
    case 'm':
    case 'M':
        shift = 20;
        end++;
        break;
    case 'g':
    case 'G':
        shift = 30;
        end++;
        break;
    default: break;
    }
    if (*end != '\0' || v > (unsigned long long)INT64_MAX >> shift)
        return RCC_ERR_INVALID_ARGUMENT;
    int64_t value = (int64_t)(v << shift);
    if (value < min || value > max)
        return RCC_ERR_INVALID_ARGUMENT;
    *out = value;
    return RCC_SUCCESS;
}

rcc_result_t rcci_param_parse(rcci_param_id_t id, const char *text, int64_t *value)
{
    const rcci_param_info_t *info = &param_table[id];
    if (!info->is_int)
        return RCC_SUCCESS;
    return rcci_parse_size(text, info->min, info->max, value);
}

static void param_load_once(void)
{
    param_status = RCC_SUCCESS;
    for (int i = 0; i < RCCI_PARAM_COUNT; i++) {
        const rcci_param_info_t *info = &param_table[i];
        const char *env = getenv(info->name);
        const char *text = (env && *env) ? env : info->default_text;
        param_strs[i] = text;
        if (!info->is_int)
            continue;
        if (rcci_param_parse((rcci_param_id_t)i, text, &param_ints[i]) != RCC_SUCCESS) {
            /* Keep the default so a caller that ignores the error still runs sanely. */
            rcci_parse_size(info->default_text, info->min, info->max, &param_ints[i]);
            if (param_status == RCC_SUCCESS) {
                param_status =
                    rcci_error(RCC_ERR_INVALID_ARGUMENT,
                               "%s='%s' is not valid: expected an integer in [%lld, "
                               "%lld] (suffixes K, M, G allowed)",
                               info->name, text, (long long)info->min, (long long)info->max);
                strcpy(param_error, rcci_tls_error());
            }
        }
    }
}

rcc_result_t rcci_params_load(void)
{
    pthread_once(&param_once, param_load_once);
    if (param_status != RCC_SUCCESS)
        rcci_tls_error_set(param_error);
    return param_status;
}

int64_t rcci_param_int(rcci_param_id_t id)
{
    rcci_params_load();
    return param_ints[id];
}

const char *rcci_param_str(rcci_param_id_t id)
{
    rcci_params_load();
    return param_strs[id] ? param_strs[id] : "";
}

const rcci_param_info_t *rcci_param_info(rcci_param_id_t id) { return &param_table[id]; }
