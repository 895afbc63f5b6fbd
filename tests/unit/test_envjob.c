/* The job from the launcher's environment (lib/envjob.c) and the checks on
 * rcc_config_t (rcci_config_check), against hand-written expectations. */
#include <check.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../check_main.h"

#include "comm.h"
#include "envjob.h"

/* The environment of a test: "NAME=value" strings, NULL-terminated. */
static const char *fake_lookup(const char *name, void *ctx)
{
    size_t n = strlen(name);
    for (const char *const *v = ctx; *v; v++)
        if (!strncmp(*v, name, n) && (*v)[n] == '=')
            return *v + n + 1;
    return NULL;
}

static atomic_uint generation;

static rcc_result_t read_job(const char *const *vars, rcci_env_job_t *job)
{
    rcci_tls_error_clear();
    return rcci_env_job(fake_lookup, (void *)vars, &generation, job);
}

/* READ(&job, "RCC_RANK=1", ...): the job those variables describe. */
#define READ(job, ...) read_job((const char *const[]){__VA_ARGS__, NULL}, job)

static void expect_job(const rcci_env_job_t *job, int rank, int nranks, const char *source,
                       const char *root, int family, int port)
{
    ck_assert_int_eq(job->rank, rank);
    ck_assert_int_eq(job->nranks, nranks);
    ck_assert_str_eq(job->source, source);
    ck_assert_str_eq(job->root, root);
    ck_assert_int_eq(job->id.root.u.sa.sa_family, family);
    ck_assert_int_eq(rcci_addr_port(&job->id.root), port);
}

static void expect_error(rcc_result_t res, rcc_result_t code, const char *text)
{
    ck_assert_int_eq(res, code);
    ck_assert_msg(strstr(rcci_tls_error(), text), "'%s' does not say '%s'", rcci_tls_error(), text);
}

START_TEST(each_launcher)
{
    rcci_env_job_t job;
    ck_assert_int_eq(READ(&job, "RCC_RANK=2", "RCC_NRANKS=4", "RCC_ROOT=127.0.0.1:4310"),
                     RCC_SUCCESS);
    expect_job(&job, 2, 4, "RCC_RANK", "127.0.0.1:4310", AF_INET, 4310);
    ck_assert_int_eq(READ(&job, "RANK=0", "WORLD_SIZE=8", "MASTER_ADDR=10.1.2.3",
                          "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=none"),
                     RCC_SUCCESS);
    expect_job(&job, 0, 8, "RANK", "10.1.2.3:29500", AF_INET, 29500);
    ck_assert_int_eq(job.secret_from, RCCI_SECRET_JOB_ID);
    ck_assert_int_eq(
        READ(&job, "SLURM_PROCID=5", "SLURM_NTASKS=6", "SLURM_JOB_ID=4242", "RCC_ROOT=[::1]:7000"),
        RCC_SUCCESS);
    expect_job(&job, 5, 6, "SLURM_PROCID", "[::1]:7000", AF_INET6, 7000);
    ck_assert_int_eq(READ(&job, "OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2",
                          "MASTER_ADDR=127.0.0.1", "MASTER_PORT=1"),
                     RCC_SUCCESS);
    expect_job(&job, 1, 2, "OMPI_COMM_WORLD_RANK", "127.0.0.1:1", AF_INET, 1);
    ck_assert_int_eq(job.secret_from, RCCI_SECRET_ROOT);
    /* The largest job a rank count may name; strtol's syntax otherwise. */
    ck_assert_int_eq(READ(&job, "RCC_RANK=+0", "RCC_NRANKS= 16777216", "RCC_ROOT=127.0.0.1:9"),
                     RCC_SUCCESS);
    ck_assert_int_eq(job.nranks, 1 << 24);
}
END_TEST

START_TEST(precedence)
{
    rcci_env_job_t job;
    static const char *const all[] = {"OMPI_COMM_WORLD_RANK=3",
                                      "OMPI_COMM_WORLD_SIZE=4",
                                      "SLURM_PROCID=2",
                                      "SLURM_NTASKS=4",
                                      "RANK=1",
                                      "WORLD_SIZE=4",
                                      "RCC_RANK=0",
                                      "RCC_NRANKS=4",
                                      "MASTER_ADDR=127.0.0.2",
                                      "MASTER_PORT=2000",
                                      "RCC_ROOT=127.0.0.1:1000",
                                      NULL};
    /* Each convention wins over those after it (listed last to first here):
     * with the winner dropped each time, the next one wins. */
    static const char *const sources[] = {"RCC_RANK", "RANK", "SLURM_PROCID",
                                          "OMPI_COMM_WORLD_RANK"};
    for (int first = 0; first < 4; first++) {
        const char *vars[16];
        size_t n = 0;
        for (int i = 0; all[i]; i++)
            if (i < 2 * (4 - first) || i >= 8)
                vars[n++] = all[i];
        vars[n] = NULL;
        ck_assert_int_eq(read_job(vars, &job), RCC_SUCCESS);
        ck_assert_str_eq(job.source, sources[first]);
        ck_assert_int_eq(job.rank, first);
        ck_assert_str_eq(job.root, "127.0.0.1:1000"); /* RCC_ROOT before MASTER_* */
    }
    ck_assert_int_eq(
        READ(&job, "RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=127.0.0.2", "MASTER_PORT=2000"),
        RCC_SUCCESS);
    ck_assert_str_eq(job.root, "127.0.0.2:2000");
    /* An empty value is no value: the next convention is read. */
    ck_assert_int_eq(READ(&job, "RCC_RANK=", "RCC_NRANKS=", "RANK=1", "WORLD_SIZE=2",
                          "RCC_ROOT=", "MASTER_ADDR=127.0.0.2", "MASTER_PORT=2000"),
                     RCC_SUCCESS);
    ck_assert_str_eq(job.source, "RANK");
    ck_assert_str_eq(job.root, "127.0.0.2:2000");
}
END_TEST

START_TEST(missing_half)
{
    rcci_env_job_t job;
    expect_error(READ(&job, "RANK=1", "RCC_ROOT=127.0.0.1:1"), RCC_ERR_INVALID_USAGE,
                 "RANK is set but WORLD_SIZE is not");
    ck_assert_ptr_null(job.source);
    expect_error(READ(&job, "RCC_NRANKS=2", "RCC_ROOT=127.0.0.1:1"), RCC_ERR_INVALID_USAGE,
                 "RCC_NRANKS is set but RCC_RANK is not");
    /* A half-set convention is an error, not a reason to read the next. */
    expect_error(READ(&job, "SLURM_PROCID=0", "OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=1",
                      "RCC_ROOT=127.0.0.1:1"),
                 RCC_ERR_INVALID_USAGE, "SLURM_PROCID is set but SLURM_NTASKS is not");
    expect_error(READ(&job, NULL), RCC_ERR_INVALID_USAGE, "the environment names no rank");
    expect_error(READ(&job, "RCC_RANK=0", "RCC_NRANKS=1"), RCC_ERR_INVALID_USAGE,
                 "names no rendezvous");
    ck_assert_str_eq(job.source, "RCC_RANK"); /* what was read stays */
    expect_error(READ(&job, "RCC_RANK=0", "RCC_NRANKS=1", "MASTER_ADDR=127.0.0.1"),
                 RCC_ERR_INVALID_USAGE, "names no rendezvous");
    expect_error(READ(&job, "RCC_RANK=0", "RCC_NRANKS=1", "MASTER_PORT=80"), RCC_ERR_INVALID_USAGE,
                 "names no rendezvous");
}
END_TEST

START_TEST(out_of_range)
{
    rcci_env_job_t job;
    static const char *const bad[] = {
        "-1", "16777217", "abc", "3x", "0x10", "1.0", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char var[64], text[64];
        snprintf(var, sizeof var, "WORLD_SIZE=%s", bad[i]);
        snprintf(text, sizeof text, "WORLD_SIZE='%s' is not a rank or rank count", bad[i]);
        expect_error(READ(&job, "RANK=0", var, "RCC_ROOT=127.0.0.1:1"), RCC_ERR_INVALID_USAGE,
                     text);
    }
    expect_error(READ(&job, "RCC_RANK=3", "RCC_NRANKS=2", "RCC_ROOT=127.0.0.1:1"),
                 RCC_ERR_INVALID_USAGE, "rank 3 of 2 (from RCC_RANK) is not a valid rank");
    expect_error(READ(&job, "RCC_RANK=2", "RCC_NRANKS=2", "RCC_ROOT=127.0.0.1:1"),
                 RCC_ERR_INVALID_USAGE, "rank 2 of 2");
    expect_error(READ(&job, "RANK=0", "WORLD_SIZE=0", "RCC_ROOT=127.0.0.1:1"),
                 RCC_ERR_INVALID_USAGE, "rank 0 of 0 (from RANK)");
    /* Roots that do not parse come from rcci_addr_parse. */
    expect_error(READ(&job, "RCC_RANK=0", "RCC_NRANKS=1", "RCC_ROOT=127.0.0.1"),
                 RCC_ERR_INVALID_ARGUMENT, "host:port");
    expect_error(
        READ(&job, "RCC_RANK=0", "RCC_NRANKS=1", "MASTER_ADDR=127.0.0.1", "MASTER_PORT=65536"),
        RCC_ERR_INVALID_ARGUMENT, "not in 1..65535");
}
END_TEST

static const char secret_hex[] = "00112233445566778899aabbccddeeffFFEEDDCCBBAA99887766554433221100";

START_TEST(secret_given)
{
    rcci_env_job_t job;
    char var[100];
    snprintf(var, sizeof var, "RCC_SECRET=%s", secret_hex);
    ck_assert_int_eq(READ(&job, "RCC_RANK=0", "RCC_NRANKS=1", "RCC_ROOT=127.0.0.1:1", var),
                     RCC_SUCCESS);
    ck_assert_int_eq(job.secret_from, RCCI_SECRET_GIVEN);
    for (int i = 0; i < 16; i++) {
        ck_assert_uint_eq(job.id.secret[i], (unsigned)(i * 0x11));
        ck_assert_uint_eq(job.id.secret[16 + i], (unsigned)(0xff - i * 0x11));
    }
    /* A bad digit is named by its position, high or low half of a byte. */
    int positions[] = {0, 1, 10, 11, 63};
    for (size_t i = 0; i < sizeof positions / sizeof positions[0]; i++) {
        snprintf(var, sizeof var, "RCC_SECRET=%s", secret_hex);
        var[strlen("RCC_SECRET=") + positions[i]] = 'g';
        char text[64];
        snprintf(text, sizeof text, "RCC_SECRET has a non-hex digit at %d", positions[i]);
        expect_error(READ(&job, "RCC_RANK=0", "RCC_NRANKS=1", "RCC_ROOT=127.0.0.1:1", var),
                     RCC_ERR_INVALID_USAGE, text);
        ck_assert_int_eq(job.secret_from, RCCI_SECRET_UNREAD);
    }
    snprintf(var, sizeof var, "RCC_SECRET=%.63s", secret_hex);
    expect_error(READ(&job, "RCC_RANK=0", "RCC_NRANKS=1", "RCC_ROOT=127.0.0.1:1", var),
                 RCC_ERR_INVALID_USAGE, "RCC_SECRET must be 64 hex digits (it has 63)");
    snprintf(var, sizeof var, "RCC_SECRET=%s0", secret_hex);
    expect_error(READ(&job, "RCC_RANK=0", "RCC_NRANKS=1", "RCC_ROOT=127.0.0.1:1", var),
                 RCC_ERR_INVALID_USAGE, "(it has 65)");
}
END_TEST

START_TEST(secret_derived)
{
    rcci_env_job_t a, b;
    /* Every rank of a job derives the same secret and id; another job id,
     * root or size gives another. */
    atomic_store(&generation, 7);
    ck_assert_int_eq(READ(&a, "RANK=0", "WORLD_SIZE=2", "SLURM_JOB_ID=1", "RCC_ROOT=127.0.0.1:1"),
                     RCC_SUCCESS);
    atomic_store(&generation, 7);
    ck_assert_int_eq(READ(&b, "RANK=1", "WORLD_SIZE=2", "SLURM_JOB_ID=1", "RCC_ROOT=127.0.0.1:1"),
                     RCC_SUCCESS);
    ck_assert_int_eq(memcmp(a.id.secret, b.id.secret, sizeof a.id.secret), 0);
    ck_assert_uint_eq(a.id.comm_id, b.id.comm_id);
    ck_assert_uint_eq(atomic_load(&generation), 8);
    /* The next init from the environment: same secret, another id. */
    ck_assert_int_eq(READ(&b, "RANK=1", "WORLD_SIZE=2", "SLURM_JOB_ID=1", "RCC_ROOT=127.0.0.1:1"),
                     RCC_SUCCESS);
    ck_assert_int_eq(memcmp(a.id.secret, b.id.secret, sizeof a.id.secret), 0);
    ck_assert_uint_ne(a.id.comm_id, b.id.comm_id);
    const char *const others[][4] = {
        {"RANK=0", "WORLD_SIZE=2", "SLURM_JOB_ID=2", "RCC_ROOT=127.0.0.1:1"},
        {"RANK=0", "WORLD_SIZE=2", "SLURM_STEP_ID=1", "RCC_ROOT=127.0.0.1:1"},
        {"RANK=0", "WORLD_SIZE=2", "SLURM_JOB_ID=1", "RCC_ROOT=127.0.0.1:2"},
        {"RANK=0", "WORLD_SIZE=3", "SLURM_JOB_ID=1", "RCC_ROOT=127.0.0.1:1"}};
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        ck_assert_int_eq(READ(&b, others[i][0], others[i][1], others[i][2], others[i][3]),
                         RCC_SUCCESS);
        ck_assert_int_ne(memcmp(a.id.secret, b.id.secret, sizeof a.id.secret), 0);
    }
    ck_assert_int_eq(b.secret_from, RCCI_SECRET_JOB_ID);
    ck_assert_int_eq(READ(&b, "RANK=0", "WORLD_SIZE=2", "RCC_ROOT=127.0.0.1:1"), RCC_SUCCESS);
    ck_assert_int_eq(b.secret_from, RCCI_SECRET_ROOT);
    /* A generation is taken once the root is read, not before. */
    unsigned before = atomic_load(&generation);
    READ(&b, "RANK=0", "RCC_ROOT=127.0.0.1:1");
    READ(&b, "RANK=0", "WORLD_SIZE=2", "RCC_ROOT=127.0.0.1");
    ck_assert_uint_eq(atomic_load(&generation), before);
    READ(&b, "RANK=2", "WORLD_SIZE=2", "RCC_ROOT=127.0.0.1:1");
    ck_assert_uint_eq(atomic_load(&generation), before + 1);
}
END_TEST

START_TEST(master_addr_ipv6)
{
    rcci_env_job_t job;
    ck_assert_int_eq(READ(&job, "RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=::1", "MASTER_PORT=29500"),
                     RCC_SUCCESS);
    expect_job(&job, 0, 1, "RANK", "[::1]:29500", AF_INET6, 29500);
    ck_assert_int_eq(
        READ(&job, "RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=fe80::1:2", "MASTER_PORT=80"),
        RCC_SUCCESS);
    ck_assert_str_eq(job.root, "[fe80::1:2]:80");
    /* Already bracketed: wrapped again, and refused. */
    expect_error(READ(&job, "RANK=0", "WORLD_SIZE=1", "MASTER_ADDR=[::1]", "MASTER_PORT=80"),
                 RCC_ERR_INVALID_ARGUMENT, "[[::1]]:80");
}
END_TEST

/* ---- rcci_config_check ---------------------------------------------------- */

static rcc_result_t check_config(const rcc_config_t *config, int64_t *timeout_ns,
                                 size_t *chunk_bytes)
{
    *timeout_ns = 300000000000ll;
    *chunk_bytes = 256 << 10;
    rcci_tls_error_clear();
    return rcci_config_check(config, timeout_ns, chunk_bytes);
}

START_TEST(config_valid)
{
    int64_t timeout_ns;
    size_t chunk;
    rcc_config_t config = RCC_CONFIG_INITIALIZER;
    ck_assert_int_eq(check_config(NULL, &timeout_ns, &chunk), RCC_SUCCESS);
    ck_assert_int_eq(check_config(&config, &timeout_ns, &chunk), RCC_SUCCESS);
    ck_assert_int_eq(timeout_ns, 300000000000ll); /* 0: the defaults stay */
    ck_assert_uint_eq(chunk, 256 << 10);
    config.timeout_ms = 2500;
    config.chunk_bytes = 64;
    ck_assert_int_eq(check_config(&config, &timeout_ns, &chunk), RCC_SUCCESS);
    ck_assert_int_eq(timeout_ns, 2500000000ll);
    ck_assert_uint_eq(chunk, 64);
    config.timeout_ms = 2147483647;
    ck_assert_int_eq(check_config(&config, &timeout_ns, &chunk), RCC_SUCCESS);
    ck_assert_int_eq(timeout_ns, 2147483647000000ll);
    /* A caller built against a later version, with fields we do not know. */
    struct {
        rcc_config_t known;
        int later;
    } bigger = {RCC_CONFIG_INITIALIZER, 5};
    bigger.known.size = sizeof bigger;
    ck_assert_int_eq(check_config(&bigger.known, &timeout_ns, &chunk), RCC_SUCCESS);
    /* The smallest size that holds every field read. */
    config.size = offsetof(rcc_config_t, chunk_bytes) + sizeof(int);
    ck_assert_int_eq(check_config(&config, &timeout_ns, &chunk), RCC_SUCCESS);
}
END_TEST

START_TEST(config_refused)
{
    int64_t timeout_ns;
    size_t chunk;
    rcc_config_t config = RCC_CONFIG_INITIALIZER;
    char text[128];
    config.magic ^= 1;
    snprintf(text, sizeof text,
             "config was not initialised with RCC_CONFIG_INITIALIZER (magic 0x72636367, size %zu)",
             sizeof config);
    expect_error(check_config(&config, &timeout_ns, &chunk), RCC_ERR_INVALID_ARGUMENT, text);
    config = (rcc_config_t)RCC_CONFIG_INITIALIZER;
    config.size = offsetof(rcc_config_t, chunk_bytes);
    snprintf(text, sizeof text, "(magic 0x72636366, size %zu)", config.size);
    expect_error(check_config(&config, &timeout_ns, &chunk), RCC_ERR_INVALID_ARGUMENT, text);
    /* Too small to hold magic: magic is not read (nor named). */
    config.size = 4;
    config.magic = 0;
    expect_error(check_config(&config, &timeout_ns, &chunk), RCC_ERR_INVALID_ARGUMENT,
                 "config was not initialised with RCC_CONFIG_INITIALIZER (size 4)");
    config = (rcc_config_t)RCC_CONFIG_INITIALIZER;
    config.blocking = 0;
    expect_error(check_config(&config, &timeout_ns, &chunk), RCC_ERR_INVALID_ARGUMENT,
                 "config.blocking=0: only blocking (1) initialisation is supported");
    config.blocking = 2;
    expect_error(check_config(&config, &timeout_ns, &chunk), RCC_ERR_INVALID_ARGUMENT,
                 "config.blocking=2");
    config = (rcc_config_t)RCC_CONFIG_INITIALIZER;
    config.timeout_ms = -1;
    expect_error(check_config(&config, &timeout_ns, &chunk), RCC_ERR_INVALID_ARGUMENT,
                 "config.timeout_ms=-1 is negative");
    config = (rcc_config_t)RCC_CONFIG_INITIALIZER;
    int small[] = {1, 63, -1, -64};
    for (size_t i = 0; i < sizeof small / sizeof small[0]; i++) {
        config.chunk_bytes = small[i];
        snprintf(text, sizeof text, "config.chunk_bytes=%d: use 0 (default) or at least 64",
                 small[i]);
        expect_error(check_config(&config, &timeout_ns, &chunk), RCC_ERR_INVALID_ARGUMENT, text);
    }
    /* A refusal leaves the defaults alone, also with a valid timeout. */
    config.timeout_ms = 10;
    check_config(&config, &timeout_ns, &chunk);
    ck_assert_int_eq(timeout_ns, 300000000000ll);
    ck_assert_uint_eq(chunk, 256 << 10);
}
END_TEST

static Suite *envjob_suite(void)
{
    Suite *s = suite_create("envjob");
    TCase *tc = tcase_create("environment");
    tcase_add_test(tc, each_launcher);
    tcase_add_test(tc, precedence);
    tcase_add_test(tc, missing_half);
    tcase_add_test(tc, out_of_range);
    tcase_add_test(tc, secret_given);
    tcase_add_test(tc, secret_derived);
    tcase_add_test(tc, master_addr_ipv6);
    suite_add_tcase(s, tc);
    tc = tcase_create("config");
    tcase_add_test(tc, config_valid);
    tcase_add_test(tc, config_refused);
    suite_add_tcase(s, tc);
    return s;
}

RCC_TEST_MAIN(envjob_suite)
