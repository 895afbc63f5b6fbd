/*
 * The RCC_* parameters (lib/params.c and their readers): every parameter's
 * value parsing as rcci_params_load does it, RCC_ALGO's names, RCC_DEBUG's
 * levels and RCC_DEBUG_FILE's %h/%p expansion. Input: the variable's text
 * (a NUL ends it early, as in the environment).
 *
 * Invariants:
 *  - an integer parameter accepts exactly what a reference parser accepts
 *    (decimal digits, one optional K/M/G suffix, no overflow, within the
 *    parameter's [min, max]) with the same value, and a value it accepts is
 *    within bounds; a refusal leaves the output alone;
 *  - RCC_ALGO: 0 for "auto", 1 and the algorithm of that name for a known
 *    name (distinct names, distinct algorithms), -1 for anything else;
 *  - RCC_DEBUG: known exactly for NONE/WARN/INFO/TRACE in any case, with
 *    that level; WARN otherwise;
 *  - RCC_DEBUG_FILE: the expansion is the full expansion cut to size - 1
 *    and terminated, for buffers of 1 byte up (no byte written past them).
 */
#include <ctype.h>
#include <stdio.h>
#include <strings.h>
#include <unistd.h>

#include "comm.h"
#include "fuzz.h"
#include "log.h"
#include "params.h"

static int ref_parse(const char *t, int64_t min, int64_t max, int64_t *out)
{
    const char *p = t;
    if (*p < '0' || *p > '9')
        return 0;
    uint64_t v = 0;
    int big = 0;
    for (; *p >= '0' && *p <= '9'; p++) {
        unsigned d = (unsigned)(*p - '0');
        if (v > (UINT64_MAX - d) / 10)
            big = 1;
        else
            v = v * 10 + d;
    }
    unsigned shift = 0;
    if (*p == 'k' || *p == 'K')
        shift = 10, p++;
    else if (*p == 'm' || *p == 'M')
        shift = 20, p++;
    else if (*p == 'g' || *p == 'G')
        shift = 30, p++;
    if (*p || big || v > ((uint64_t)INT64_MAX >> shift))
        return 0;
    int64_t value = (int64_t)(v << shift);
    if (value < min || value > max)
        return 0;
    *out = value;
    return 1;
}

static void check_size(const char *text, int64_t min, int64_t max)
{
    int64_t got = 0x5a5a5a5a5a5a5a5all, want = 0;
    int ok = rcci_parse_size(text, min, max, &got) == RCC_SUCCESS;
    int ref = ref_parse(text, min, max, &want);
    FUZZ_ASSERT(ok == ref, "'%s' in [%lld, %lld]: parser %d, reference %d", text, (long long)min,
                (long long)max, ok, ref);
    if (ok) {
        FUZZ_ASSERT(got == want, "'%s': %lld, reference %lld", text, (long long)got,
                    (long long)want);
        FUZZ_ASSERT(got >= min && got <= max, "'%s': %lld out of bounds", text, (long long)got);
    } else {
        FUZZ_ASSERT(got == 0x5a5a5a5a5a5a5a5all, "'%s': refused but wrote %lld", text,
                    (long long)got);
    }
}

static void check_algo(const char *text)
{
    static const char *const names[] = {"ring", "rabenseifner", "rd", "direct", "twostep", "star"};
    enum { NAMES = sizeof names / sizeof names[0] };
    static rcci_allreduce_algo_t seen[NAMES];
    static int have[NAMES];
    rcci_allreduce_algo_t algo = (rcci_allreduce_algo_t)-12345;
    int r = rcci_allreduce_algo_named(text, &algo);
    int known = -1;
    for (int i = 0; i < NAMES; i++)
        if (!strcmp(text, names[i]))
            known = i;
    if (!strcmp(text, "auto")) {
        FUZZ_ASSERT(r == 0, "'auto' gave %d", r);
    } else if (known >= 0) {
        FUZZ_ASSERT(r == 1, "'%s' gave %d", text, r);
        if (have[known])
            FUZZ_ASSERT(seen[known] == algo, "'%s' names two algorithms", text);
        for (int i = 0; i < NAMES; i++)
            FUZZ_ASSERT(i == known || !have[i] || seen[i] != algo, "'%s' and '%s' are one", text,
                        names[i]);
        seen[known] = algo, have[known] = 1;
    } else {
        FUZZ_ASSERT(r == -1, "'%s' gave %d", text, r);
        FUZZ_ASSERT(algo == (rcci_allreduce_algo_t)-12345, "'%s' refused but wrote", text);
    }
}

static void check_level(const char *text)
{
    static const char *const names[] = {"NONE", "WARN", "INFO", "TRACE"};
    rcci_log_level_t level;
    int r = rcci_log_level_named(text, &level);
    int want = -1;
    for (int i = 0; i < 4; i++)
        if (!strcasecmp(text, names[i]))
            want = i;
    FUZZ_ASSERT(r == (want >= 0), "'%s' gave %d", text, r);
    FUZZ_ASSERT((int)level == (want >= 0 ? want : RCCI_LOG_WARN), "'%s' gave level %d", text,
                (int)level);
}

static void check_expand(const char *text)
{
    static const char host[] = "fuzzhost";
    char pid[24];
    snprintf(pid, sizeof pid, "%d", (int)getpid());
    size_t len = strlen(text), full_len = 0;
    char *full = malloc(len * (sizeof pid > sizeof host ? sizeof pid : sizeof host) + 1);
    for (const char *p = text; *p; p++) {
        if (p[0] == '%' && (p[1] == 'h' || p[1] == 'p')) {
            const char *s = p[1] == 'h' ? host : pid;
            memcpy(full + full_len, s, strlen(s));
            full_len += strlen(s);
            p++;
        } else {
            full[full_len++] = *p;
        }
    }
    full[full_len] = '\0';
    static const size_t sizes[] = {1, 2, 3, 7, 16, 64, 4096};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t size = sizes[i];
        char *out = malloc(size); /* exactly size bytes: ASan sees any overrun */
        rcci_log_expand_path(text, host, out, size);
        size_t want = full_len < size - 1 ? full_len : size - 1;
        FUZZ_ASSERT(strnlen(out, size) == want, "'%s' in %zu bytes: length %zu, want %zu", text,
                    size, strnlen(out, size), want);
        FUZZ_ASSERT(!memcmp(out, full, want), "'%s' in %zu bytes: '%s', want a prefix of '%s'",
                    text, size, out, full);
        free(out);
    }
    free(full);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    char *text = fuzz_string(&in);
    check_size(text, 0, INT64_MAX);
    check_size(text, INT64_MIN, INT64_MAX);
    for (int id = 0; id < RCCI_PARAM_COUNT; id++) {
        const rcci_param_info_t *info = rcci_param_info((rcci_param_id_t)id);
        int64_t v = -77;
        rcc_result_t res = rcci_param_parse((rcci_param_id_t)id, text, &v);
        if (info->is_int) {
            check_size(text, info->min, info->max);
            int64_t want;
            FUZZ_ASSERT((res == RCC_SUCCESS) == ref_parse(text, info->min, info->max, &want),
                        "%s='%s': %d", info->name, text, (int)res);
            if (res == RCC_SUCCESS)
                FUZZ_ASSERT(v == want && v >= info->min && v <= info->max, "%s='%s': %lld",
                            info->name, text, (long long)v);
        } else {
            FUZZ_ASSERT(res == RCC_SUCCESS && v == -77, "%s is text, yet '%s' gave %d", info->name,
                        text, (int)res);
        }
    }
    check_algo(text);
    check_level(text);
    check_expand(text);
    free(text);
    return 0;
}
