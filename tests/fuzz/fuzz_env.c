/*
 * The job from the launcher's environment (rcci_env_job in lib/envjob.c,
 * what rcc_comm_init_env reads) and the checks on the caller's rcc_config_t
 * (rcci_config_check in lib/comm.c). Input: FUZZ_CONFIG_BYTES bytes laid
 * out as an rcc_config_t followed by bytes of a later version's fields
 * (size first), then 3 bytes whose bit i sets variable env_vars[i], then
 * the values of the variables set, in that order, each ended by '\n' (a
 * NUL ends one early, as in the environment; missing values are empty).
 *
 * Host names are resolved numerically only (fuzz_resolve.h).
 *
 * Invariants, environment:
 *  - the outcome is a reference model's: rank and size from the first
 *    launcher pair with either half set, each half a decimal number in
 *    0..2^24 (strtol's syntax), then the root (RCC_ROOT, else MASTER_ADDR
 *    and MASTER_PORT, bracketed when the address has a ':') as
 *    rcci_addr_parse reads it, then RCC_SECRET (64 hex digits; a bad one
 *    refused at the first bad digit), then 0 <= rank < size;
 *  - on success: rank in [0, nranks), nranks >= 1, the source, root text
 *    and parsed root as the model says, the secret RCC_SECRET's decoding
 *    when given, else derived (from a job id exactly when one is set);
 *  - a refusal is RCC_ERR_INVALID_USAGE (RCC_ERR_INVALID_ARGUMENT for a
 *    root that does not parse) with a text naming the model's reason;
 *  - only the variables of the launcher conventions are looked up;
 *  - one generation is taken exactly when the root was read; another
 *    generation gives another comm_id and the same secret;
 *  - deterministic: the same variables give the same job byte for byte,
 *    whatever the output held before (a field left unset would differ).
 * Invariants, config:
 *  - nothing past the config's `size` is read (ASan: the rest is poisoned);
 *  - accepted exactly when size holds every field, magic is
 *    RCC_CONFIG_MAGIC, blocking 1, timeout_ms >= 0 and chunk_bytes 0 or at
 *    least 64, with the timeout and chunk size the fields give; a refusal is
 *    RCC_ERR_INVALID_ARGUMENT naming the field, the outputs untouched.
 */
#include <ctype.h>
#include <sanitizer/asan_interface.h>

#include "comm.h"
#include "envjob.h"
#include "err.h"
#include "fuzz.h"
#include "fuzz_resolve.h"

#define FUZZ_CONFIG_BYTES (sizeof(rcc_config_t) + 8)

static const char *const env_vars[] = {"RCC_RANK",
                                       "RCC_NRANKS",
                                       "RANK",
                                       "WORLD_SIZE",
                                       "SLURM_PROCID",
                                       "SLURM_NTASKS",
                                       "OMPI_COMM_WORLD_RANK",
                                       "OMPI_COMM_WORLD_SIZE",
                                       "RCC_ROOT",
                                       "MASTER_ADDR",
                                       "MASTER_PORT",
                                       "RCC_SECRET",
                                       "TORCHELASTIC_RUN_ID",
                                       "SLURM_JOB_ID",
                                       "SLURM_STEP_ID",
                                       "OMPI_MCA_ess_base_jobid",
                                       "PMIX_NAMESPACE"};
enum { NVARS = sizeof env_vars / sizeof env_vars[0], V_ROOT = 8, V_ADDR, V_PORT, V_SECRET, V_JOB };

/* The environment: each value its own allocation (ASan sees overruns). */
typedef struct {
    char *value[NVARS]; /* NULL: unset */
} fake_env_t;

static const char *fake_lookup(const char *name, void *ctx)
{
    const fake_env_t *env = ctx;
    for (int i = 0; i < NVARS; i++)
        if (!strcmp(name, env_vars[i]))
            return env->value[i];
    FUZZ_ASSERT(0, "looked up %s, no launcher's variable", name);
    return NULL;
}

/* The value, NULL when unset or empty (as rcci_env_job counts them). */
static const char *val(const fake_env_t *env, int i)
{
    return env->value[i] && env->value[i][0] ? env->value[i] : NULL;
}

/* strtol's syntax (space, sign, decimal digits, nothing after), 0..2^24. */
static int ref_count(const char *t, int *out)
{
    while (isspace((unsigned char)*t))
        t++;
    int neg = *t == '-';
    if (*t == '+' || *t == '-')
        t++;
    if (!isdigit((unsigned char)*t))
        return 0;
    long v = 0;
    for (; isdigit((unsigned char)*t); t++)
        if ((v = v * 10 + (*t - '0')) > (1 << 24) + 1)
            v = (1 << 24) + 1;
    if (*t || (neg && v != 0) || v > (1 << 24))
        return 0;
    *out = (int)v;
    return 1;
}

static int ref_hex(char c)
{
    return isxdigit((unsigned char)c) ? (isdigit((unsigned char)c) ? c - '0' : (c | 32) - 'a' + 10)
                                      : -1;
}

/* The model's outcome: the result, a piece of its text, how far it got. */
typedef struct {
    rcc_result_t res;
    char says[96];
    int pair; /* the launcher pair read, -1 when none */
    int rank, nranks;
    char root[RCCI_ENV_ROOT_BYTES];
    int root_read; /* parsed: a generation is taken */
    rcci_addr_t root_addr;
    uint8_t secret[RCCI_SOCK_SECRET_BYTES];
} model_t;

static void model(const fake_env_t *env, model_t *m)
{
    memset(m, 0, sizeof *m);
    m->res = RCC_ERR_INVALID_USAGE;
    m->pair = -1;
    for (int p = 0; p < 4 && m->pair < 0; p++) {
        const char *r = val(env, 2 * p), *s = val(env, 2 * p + 1);
        if (!r && !s)
            continue;
        int i = r && !ref_count(r, &m->rank)     ? 2 * p
                : s && !ref_count(s, &m->nranks) ? 2 * p + 1
                                                 : -1;
        if (i >= 0) {
            snprintf(m->says, sizeof m->says, "%s='", env_vars[i]);
            return;
        }
        if (!r || !s) {
            snprintf(m->says, sizeof m->says, "%s is set but %s is not",
                     env_vars[r ? 2 * p : 2 * p + 1], env_vars[r ? 2 * p + 1 : 2 * p]);
            return;
        }
        m->pair = p;
    }
    if (m->pair < 0) {
        snprintf(m->says, sizeof m->says, "names no rank");
        return;
    }
    const char *addr = val(env, V_ADDR);
    if (val(env, V_ROOT))
        snprintf(m->root, sizeof m->root, "%s", val(env, V_ROOT));
    else if (addr && val(env, V_PORT))
        snprintf(m->root, sizeof m->root, "%s%s%s:%s", strchr(addr, ':') ? "[" : "", addr,
                 strchr(addr, ':') ? "]" : "", val(env, V_PORT));
    else {
        snprintf(m->says, sizeof m->says, "names no rendezvous");
        return;
    }
    if (rcci_addr_parse(m->root, &m->root_addr) != RCC_SUCCESS) {
        m->res = RCC_ERR_INVALID_ARGUMENT;
        snprintf(m->says, sizeof m->says, "%.90s", rcci_tls_error());
        return;
    }
    m->root_read = 1;
    const char *hex = val(env, V_SECRET);
    if (hex && strlen(hex) != 2 * RCCI_SOCK_SECRET_BYTES) {
        snprintf(m->says, sizeof m->says, "(it has %zu)", strlen(hex));
        return;
    }
    for (int i = 0; hex && i < 2 * RCCI_SOCK_SECRET_BYTES; i++) {
        if (ref_hex(hex[i]) < 0) {
            snprintf(m->says, sizeof m->says, "non-hex digit at %d", i);
            return;
        }
        m->secret[i / 2] |= (uint8_t)(ref_hex(hex[i]) << (i % 2 ? 0 : 4));
    }
    if (m->nranks < 1 || m->rank >= m->nranks) {
        snprintf(m->says, sizeof m->says, "rank %d of %d (from %s)", m->rank, m->nranks,
                 env_vars[2 * m->pair]);
        return;
    }
    m->res = RCC_SUCCESS;
}

/* rcci_env_job with the output filled with `fill` first; *took: how many
 * generations it took. */
static rcc_result_t read_job(fake_env_t *env, unsigned generation, int fill, rcci_env_job_t *job,
                             char *text, unsigned *took)
{
    atomic_uint gen = generation;
    memset(job, fill, sizeof *job);
    rcci_tls_error_clear();
    rcc_result_t res = rcci_env_job(fake_lookup, env, &gen, job);
    snprintf(text, RCCI_ERR_TEXT_BYTES, "%s", rcci_tls_error());
    *took = atomic_load(&gen) - generation;
    return res;
}

static void check_env(fake_env_t *env)
{
    model_t m;
    model(env, &m);
    static rcci_env_job_t job, again, next; /* large: off the stack */
    static char text[RCCI_ERR_TEXT_BYTES], text2[RCCI_ERR_TEXT_BYTES];
    unsigned took, took2;
    rcc_result_t res = read_job(env, 0, 0x00, &job, text, &took);
    FUZZ_ASSERT(res == m.res, "%s: model %s ('%s')", rcc_result_name(res), rcc_result_name(m.res),
                text);
    FUZZ_ASSERT(took == (unsigned)m.root_read, "took %u generations, root read %d", took,
                m.root_read);
    FUZZ_ASSERT(res == RCC_SUCCESS || (text[0] && strstr(text, m.says)), "'%s' does not say '%s'",
                text, m.says);
    if (m.pair >= 0)
        FUZZ_ASSERT(job.source && !strcmp(job.source, env_vars[2 * m.pair]) && job.rank == m.rank &&
                        job.nranks == m.nranks,
                    "%d of %d from %s, model %d of %d from %s", job.rank, job.nranks,
                    job.source ? job.source : "nothing", m.rank, m.nranks, env_vars[2 * m.pair]);
    else
        FUZZ_ASSERT(!job.source, "a source, %s, without a rank", job.source);
    if (m.root_read)
        FUZZ_ASSERT(!strcmp(job.root, m.root) &&
                        !memcmp(&job.id.root, &m.root_addr, sizeof m.root_addr),
                    "root '%s', model '%s'", job.root, m.root);
    if (res == RCC_SUCCESS) {
        FUZZ_ASSERT(job.nranks >= 1 && job.rank >= 0 && job.rank < job.nranks, "rank %d of %d",
                    job.rank, job.nranks);
        int derived = job.secret_from == RCCI_SECRET_JOB_ID || job.secret_from == RCCI_SECRET_ROOT;
        FUZZ_ASSERT(val(env, V_SECRET) ? job.secret_from == RCCI_SECRET_GIVEN : derived,
                    "secret from %d", (int)job.secret_from);
        if (val(env, V_SECRET))
            FUZZ_ASSERT(!memcmp(job.id.secret, m.secret, sizeof m.secret),
                        "RCC_SECRET '%s' decoded otherwise", val(env, V_SECRET));
        int job_id = 0;
        for (int i = V_JOB; i < NVARS; i++)
            job_id |= val(env, i) != NULL;
        FUZZ_ASSERT(!derived || (job.secret_from == RCCI_SECRET_JOB_ID) == job_id,
                    "secret from %d with%s a job id", (int)job.secret_from, job_id ? "" : "out");
    }
    /* Deterministic, every field set: again over other bytes. */
    rcc_result_t res2 = read_job(env, 0, 0xff, &again, text2, &took2);
    FUZZ_ASSERT(res2 == res && took2 == took && !strcmp(text, text2) &&
                    !memcmp(&job, &again, sizeof job),
                "a second read differs: %s '%s', then %s '%s'", rcc_result_name(res), text,
                rcc_result_name(res2), text2);
    /* The next generation: same job and secret, another id. */
    if (res == RCC_SUCCESS) {
        FUZZ_ASSERT(read_job(env, 1, 0x00, &next, text2, &took2) == RCC_SUCCESS, "generation 1: %s",
                    text2);
        FUZZ_ASSERT(!memcmp(next.id.secret, job.id.secret, sizeof job.id.secret) &&
                        next.id.comm_id != job.id.comm_id,
                    "generation 1: secret or id");
    }
}

static void check_config(const uint8_t raw[FUZZ_CONFIG_BYTES])
{
    rcc_config_t c = {0}; /* the fields as the model reads them */
    memcpy(&c, raw, sizeof c);
    /* The caller's config: nothing past its size (at least the size field) readable. */
    uint8_t *buf = malloc(FUZZ_CONFIG_BYTES);
    memcpy(buf, raw, FUZZ_CONFIG_BYTES);
    size_t readable = c.size < sizeof c.size       ? sizeof c.size
                      : c.size < FUZZ_CONFIG_BYTES ? c.size
                                                   : FUZZ_CONFIG_BYTES;
    ASAN_POISON_MEMORY_REGION(buf + readable, FUZZ_CONFIG_BYTES - readable);
    const char *says = NULL;
    if (c.size < offsetof(rcc_config_t, chunk_bytes) + sizeof c.chunk_bytes ||
        c.magic != RCC_CONFIG_MAGIC)
        says = "RCC_CONFIG_INITIALIZER";
    else if (c.blocking != 1)
        says = "config.blocking=";
    else if (c.timeout_ms < 0)
        says = "config.timeout_ms=";
    else if (c.chunk_bytes != 0 && c.chunk_bytes < 64)
        says = "config.chunk_bytes=";
    for (int round = 0; round < 2; round++) {
        int64_t timeout_ns = 12345;
        size_t chunk = 678;
        rcci_tls_error_clear();
        rcc_result_t res = rcci_config_check((const rcc_config_t *)buf, &timeout_ns, &chunk);
        if (says) {
            FUZZ_ASSERT(res == RCC_ERR_INVALID_ARGUMENT && strstr(rcci_tls_error(), says),
                        "size %zu: %s '%s', want '%s'", c.size, rcc_result_name(res),
                        rcci_tls_error(), says);
            FUZZ_ASSERT(timeout_ns == 12345 && chunk == 678, "refused, yet set");
            FUZZ_ASSERT(readable >= offsetof(rcc_config_t, magic) + sizeof c.magic ||
                            !strstr(rcci_tls_error(), "magic"),
                        "size %zu: names the magic it may not read", c.size);
        } else {
            FUZZ_ASSERT(res == RCC_SUCCESS, "%s '%s'", rcc_result_name(res), rcci_tls_error());
            FUZZ_ASSERT(timeout_ns == (c.timeout_ms ? c.timeout_ms * 1000000ll : 12345) &&
                            chunk == (c.chunk_bytes ? (size_t)c.chunk_bytes : 678),
                        "timeout %lld, chunk %zu from %d, %d", (long long)timeout_ns, chunk,
                        c.timeout_ms, c.chunk_bytes);
        }
    }
    ASAN_UNPOISON_MEMORY_REGION(buf, FUZZ_CONFIG_BYTES);
    free(buf);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in_t in = {data, size};
    uint8_t raw[FUZZ_CONFIG_BYTES];
    fuzz_bytes(&in, raw, sizeof raw);
    check_config(raw);

    uint32_t set = (uint32_t)fuzz_u64(&in, 3);
    fake_env_t env = {{0}};
    for (int i = 0; i < NVARS; i++) {
        if (!(set & (1u << i)))
            continue;
        const uint8_t *nl = memchr(in.p, '\n', in.left);
        size_t len = nl ? (size_t)(nl - in.p) : in.left;
        env.value[i] = malloc(len + 1);
        memcpy(env.value[i], in.p, len);
        env.value[i][len] = '\0';
        in.p += len + (nl != NULL);
        in.left -= len + (nl != NULL);
    }
    check_env(&env);
    for (int i = 0; i < NVARS; i++)
        free(env.value[i]);
    return 0;
}
