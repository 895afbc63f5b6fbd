/*
 * The job from the launcher's environment (envjob.h): rank and size from
 * the first launcher convention present, the rendezvous, the job secret.
 */
#include "envjob.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "hash.h"

typedef struct {
    rcci_env_lookup_fn lookup;
    void *ctx;
} env_t;

/* The variable's value, NULL when unset or empty. */
static const char *env_get(const env_t *env, const char *name)
{
    const char *v = env->lookup(name, env->ctx);
    return v && *v ? v : NULL;
}

static rcc_result_t env_int(const env_t *env, const char *name, int *value, int *found)
{
    const char *text = env_get(env, name);
    *found = text != NULL;
    if (!*found)
        return RCC_SUCCESS;
    char *end;
    errno = 0;
    long v = strtol(text, &end, 10);
    if (errno || *end || v < 0 || v > (1 << 24))
        return rcci_error(RCC_ERR_INVALID_USAGE, "%s='%s' is not a rank or rank count", name, text);
    *value = (int)v;
    return RCC_SUCCESS;
}

/* Rank and size from the first launcher convention present. */
static rcc_result_t env_rank_size(const env_t *env, rcci_env_job_t *job)
{
    static const char *const pairs[][2] = {{"RCC_RANK", "RCC_NRANKS"},
                                           {"RANK", "WORLD_SIZE"},
                                           {"SLURM_PROCID", "SLURM_NTASKS"},
                                           {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"}};
    for (size_t i = 0; i < sizeof pairs / sizeof pairs[0]; i++) {
        int has_rank, has_size;
        rcc_result_t res = env_int(env, pairs[i][0], &job->rank, &has_rank);
        if (res == RCC_SUCCESS)
            res = env_int(env, pairs[i][1], &job->nranks, &has_size);
        if (res != RCC_SUCCESS)
            return res;
        if (has_rank != has_size)
            return rcci_error(RCC_ERR_INVALID_USAGE, "%s is set but %s is not",
                              has_rank ? pairs[i][0] : pairs[i][1],
                              has_rank ? pairs[i][1] : pairs[i][0]);
        if (has_rank) {
            job->source = pairs[i][0];
            return RCC_SUCCESS;
        }
    }
    return rcci_error(RCC_ERR_INVALID_USAGE,
                      "the environment names no rank: set RCC_RANK and RCC_NRANKS (ringcc-run "
                      "does), or run under torchrun (RANK, WORLD_SIZE), Slurm (SLURM_PROCID, "
                      "SLURM_NTASKS) or Open MPI (OMPI_COMM_WORLD_RANK, OMPI_COMM_WORLD_SIZE)");
}

static rcc_result_t env_root(const env_t *env, char *text, size_t size)
{
    const char *root = env_get(env, "RCC_ROOT");
    if (root) {
        snprintf(text, size, "%s", root);
        return RCC_SUCCESS;
    }
    const char *addr = env_get(env, "MASTER_ADDR"), *port = env_get(env, "MASTER_PORT");
    if (addr && port) {
        snprintf(text, size, strchr(addr, ':') ? "[%s]:%s" : "%s:%s", addr, port);
        return RCC_SUCCESS;
    }
    return rcci_error(RCC_ERR_INVALID_USAGE, "the environment names no rendezvous: set "
                                             "RCC_ROOT=host:port (or MASTER_ADDR and MASTER_PORT)");
}

static int env_hex(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* RCC_SECRET, or a secret derived from what every rank of the job shares. */
static rcc_result_t env_secret(const env_t *env, uint64_t generation, rcci_env_job_t *job)
{
    rcci_id_t *id = &job->id;
    const char *hex = env_get(env, "RCC_SECRET");
    uint64_t h = rcci_fnv1a(RCCI_FNV1A_SEED, job->root, strlen(job->root));
    h = rcci_fnv1a(h, &job->nranks, sizeof job->nranks);
    if (hex) {
        if (strlen(hex) != 2 * RCCI_SOCK_SECRET_BYTES)
            return rcci_error(RCC_ERR_INVALID_USAGE,
                              "RCC_SECRET must be %d hex digits (it has %zu)",
                              2 * RCCI_SOCK_SECRET_BYTES, strlen(hex));
        for (int i = 0; i < RCCI_SOCK_SECRET_BYTES; i++) {
            int hi = env_hex(hex[2 * i]), lo = env_hex(hex[2 * i + 1]);
            if (hi < 0 || lo < 0)
                return rcci_error(RCC_ERR_INVALID_USAGE, "RCC_SECRET has a non-hex digit at %d",
                                  2 * i + (hi < 0 ? 0 : 1));
            id->secret[i] = (uint8_t)(hi << 4 | lo);
        }
        h = rcci_fnv1a(h, id->secret, sizeof id->secret);
        job->secret_from = RCCI_SECRET_GIVEN;
    } else {
        static const char *const job_vars[] = {"TORCHELASTIC_RUN_ID", "SLURM_JOB_ID",
                                               "SLURM_STEP_ID", "OMPI_MCA_ess_base_jobid",
                                               "PMIX_NAMESPACE"};
        job->secret_from = RCCI_SECRET_ROOT;
        for (size_t i = 0; i < sizeof job_vars / sizeof job_vars[0]; i++) {
            const char *v = env_get(env, job_vars[i]);
            if (v) {
                h = rcci_fnv1a(rcci_fnv1a(h, job_vars[i], strlen(job_vars[i])), v, strlen(v));
                job->secret_from = RCCI_SECRET_JOB_ID;
            }
        }
        for (int i = 0; i < RCCI_SOCK_SECRET_BYTES; i += 8) {
            uint64_t w = rcci_mix64(h + (uint64_t)i);
            memcpy(id->secret + i, &w, 8);
        }
    }
    /* The same for every rank's n-th init from the environment. */
    id->comm_id = rcci_mix64(h ^ rcci_mix64(generation + 0x72636321ull));
    return RCC_SUCCESS;
}

rcc_result_t rcci_env_job(rcci_env_lookup_fn lookup, void *ctx, atomic_uint *generation,
                          rcci_env_job_t *out)
{
    rcc_result_t res = RCC_SUCCESS;
    const env_t env = {lookup, ctx};
    memset(out, 0, sizeof *out);
    RCC_CHECK(env_rank_size(&env, out));
    RCC_CHECK(env_root(&env, out->root, sizeof out->root));
    RCC_CHECK(rcci_addr_parse(out->root, &out->id.root));
    RCC_CHECK(env_secret(&env, atomic_fetch_add(generation, 1), out));
    if (out->nranks < 1 || out->rank >= out->nranks)
        RCC_FAIL(RCC_ERR_INVALID_USAGE, "rank %d of %d (from %s) is not a valid rank", out->rank,
                 out->nranks, out->source);
out:
    return res;
}
