/*
 * The part of Check's API our Check programs use, for machines without
 * Check (the GPU machine: tests/gpu/run-device.sh builds with
 * -Dcheck=disabled). A program compiled with RCC_MINICHECK includes this
 * instead of <check.h> and runs the same tests: each test (and each index
 * of a loop test) in a forked child under its test case's timeout (Check's
 * default, 4 s, unless tcase_set_timeout says otherwise; CK_TIMEOUT_MULTIPLIER
 * scales it, as in Check), a failed assertion ends the child with its
 * location, and the runner prints one line per failure and Check's summary
 * line. Suites of one test case at most MINICHECK_TESTS tests.
 */
#ifndef RINGCC_TEST_MINICHECK_H
#define RINGCC_TEST_MINICHECK_H

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define MINICHECK_TESTS 64

typedef struct {
    const char *name;
    void (*fn)(int);
} mc_test_t;

typedef struct {
    const char *name;
    double timeout_s;
    int ntests;
    struct {
        const mc_test_t *test;
        int start, end; /* the loop's indices [start, end) */
    } tests[MINICHECK_TESTS];
} TCase;

typedef struct {
    const char *name;
    TCase *tc;
} Suite;

typedef struct {
    Suite *suite;
    int run, failed;
} SRunner;

enum print_output { CK_NORMAL };

#define START_TEST(test)                                                                           \
    static void test##_fn(int _i);                                                                 \
    static const mc_test_t test##_mc = {#test, test##_fn};                                         \
    static const mc_test_t *const test = &test##_mc;                                               \
    static void test##_fn(int _i __attribute__((unused)))
#define END_TEST

#define ck_assert_int_eq(a, b)                                                                     \
    do {                                                                                           \
        long long mc_a_ = (long long)(a), mc_b_ = (long long)(b);                                  \
        if (mc_a_ != mc_b_) {                                                                      \
            printf("%s:%d: Assertion '%s == %s' failed: %s == %lld, %s == %lld\n", __FILE__,       \
                   __LINE__, #a, #b, #a, mc_a_, #b, mc_b_);                                        \
            fflush(stdout);                                                                        \
            _exit(1);                                                                              \
        }                                                                                          \
    } while (0)

static inline Suite *suite_create(const char *name)
{
    Suite *s = calloc(1, sizeof *s);
    if (!s)
        abort();
    s->name = name;
    return s;
}

static inline TCase *tcase_create(const char *name)
{
    TCase *tc = calloc(1, sizeof *tc);
    if (!tc)
        abort();
    tc->name = name;
    tc->timeout_s = 4; /* Check's default */
    return tc;
}

static inline void tcase_set_timeout(TCase *tc, double seconds) { tc->timeout_s = seconds; }

static inline void tcase_add_loop_test(TCase *tc, const mc_test_t *test, int start, int end)
{
    if (tc->ntests == MINICHECK_TESTS)
        abort(); /* a test program's bug: raise MINICHECK_TESTS */
    tc->tests[tc->ntests].test = test;
    tc->tests[tc->ntests].start = start;
    tc->tests[tc->ntests].end = end;
    tc->ntests++;
}

#define tcase_add_test(tc, test) tcase_add_loop_test((tc), (test), 0, 1)

static inline void suite_add_tcase(Suite *s, TCase *tc) { s->tc = tc; }

static inline SRunner *srunner_create(Suite *s)
{
    SRunner *sr = calloc(1, sizeof *sr);
    if (!sr)
        abort();
    sr->suite = s;
    return sr;
}

/* One test index in a child; 0 when it passed. */
static inline int mc_run_one(const TCase *tc, const mc_test_t *test, int i)
{
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        const char *mult = getenv("CK_TIMEOUT_MULTIPLIER");
        double t = tc->timeout_s * (mult && atof(mult) > 0 ? atof(mult) : 1);
        alarm((unsigned)(t + 0.999));
        test->fn(i);
        fflush(stdout);
        _exit(0);
    }
    int status = 0;
    pid_t got;
    while ((got = waitpid(pid, &status, 0)) < 0 && errno == EINTR) {
    }
    if (got < 0) {
        printf("%s:%s:%d: waitpid: %s\n", tc->name, test->name, i, strerror(errno));
        return 1;
    }
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return 0;
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGALRM)
        printf("%s:%s:%d: Test timeout expired\n", tc->name, test->name, i);
    else if (WIFSIGNALED(status))
        printf("%s:%s:%d: Received signal %d (%s)\n", tc->name, test->name, i, WTERMSIG(status),
               strsignal(WTERMSIG(status)));
    else
        printf("%s:%s:%d: failed (exit status %d)\n", tc->name, test->name, i, WEXITSTATUS(status));
    return 1;
}

static inline void srunner_run_all(SRunner *sr, enum print_output mode)
{
    (void)mode;
    const TCase *tc = sr->suite->tc;
    printf("Running suite(s): %s\n", sr->suite->name);
    for (int k = 0; tc && k < tc->ntests; k++)
        for (int i = tc->tests[k].start; i < tc->tests[k].end; i++) {
            sr->run++;
            sr->failed += mc_run_one(tc, tc->tests[k].test, i);
        }
    printf("%d%%: Checks: %d, Failures: %d, Errors: 0\n",
           sr->run ? 100 * (sr->run - sr->failed) / sr->run : 100, sr->run, sr->failed);
}

static inline int srunner_ntests_failed(SRunner *sr) { return sr->failed; }

static inline void srunner_free(SRunner *sr)
{
    if (sr->suite) {
        free(sr->suite->tc);
        free(sr->suite);
    }
    free(sr);
}

#endif /* RINGCC_TEST_MINICHECK_H */
