/*
 * The job a process belongs to as its launcher's environment tells it
 * (rcc_comm_init_env): rank and size, the rendezvous, the job secret.
 * Variables are read through a lookup function, never getenv itself, so
 * tests and fuzzers hand it any environment they like.
 */
#ifndef RINGCC_ENVJOB_H
#define RINGCC_ENVJOB_H

#include <stdatomic.h>

#include "bootstrap.h"

#define RCCI_ENV_ROOT_BYTES 300

/* Where the job secret came from. */
typedef enum {
    RCCI_SECRET_UNREAD, /* not read: an earlier step failed, or RCC_SECRET is malformed */
    RCCI_SECRET_GIVEN,  /* RCC_SECRET, decoded */
    RCCI_SECRET_JOB_ID, /* derived from the launcher's job id and the root address */
    RCCI_SECRET_ROOT    /* derived from the root address alone (no job id variable) */
} rcci_secret_source_t;

typedef struct {
    int rank, nranks;
    const char *source;             /* the rank variable they came from; NULL until found */
    char root[RCCI_ENV_ROOT_BYTES]; /* the rendezvous as text ("" until found) */
    rcci_secret_source_t secret_from;
    rcci_id_t id; /* root (parsed `root`), secret and comm_id */
} rcci_env_job_t;

/* The value of variable `name`, or NULL when it is unset. The text stays
 * valid until rcci_env_job returns. */
typedef const char *(*rcci_env_lookup_fn)(const char *name, void *ctx);

/* Reads the job from the variables `lookup` gives; an empty value counts as
 * unset. In order:
 *  - rank and size from the first pair of RCC_RANK/RCC_NRANKS,
 *    RANK/WORLD_SIZE, SLURM_PROCID/SLURM_NTASKS and
 *    OMPI_COMM_WORLD_RANK/OMPI_COMM_WORLD_SIZE with either half set; both
 *    halves must be, each a decimal number in 0..2^24 (strtol's syntax);
 *  - the root from RCC_ROOT, else MASTER_ADDR and MASTER_PORT joined as
 *    "addr:port" ("[addr]:port" when addr has a ':'), then parsed by
 *    rcci_addr_parse (which resolves host names);
 *  - a generation taken from *generation (incremented): the same for every
 *    rank's n-th init from the environment that got this far;
 *  - the secret from RCC_SECRET (2 * RCCI_SOCK_SECRET_BYTES hex digits),
 *    else derived from the root text, the size and the job id variables
 *    (TORCHELASTIC_RUN_ID, SLURM_JOB_ID, SLURM_STEP_ID,
 *    OMPI_MCA_ess_base_jobid, PMIX_NAMESPACE); comm_id from the same and
 *    the generation;
 *  - last, 0 <= rank < size.
 * *out is reset first; on failure what was read before it stays (source is
 * set once rank and size are, secret_from once the secret is).
 * Returns RCC_SUCCESS, or RCC_ERR_INVALID_USAGE (no job described, or a
 * malformed one) or RCC_ERR_INVALID_ARGUMENT (a root that does not parse),
 * with the detail, naming the variable, in this thread's error text. Logs
 * nothing; the same variables and generation give the same job. */
rcc_result_t rcci_env_job(rcci_env_lookup_fn lookup, void *ctx, atomic_uint *generation,
                          rcci_env_job_t *out);

#endif /* RINGCC_ENVJOB_H */
