/* main() for a Check test program: runs the suite that `make_suite()`
 * returns and exits non-zero when any test failed. */
#ifndef RINGCC_TEST_CHECK_MAIN_H
#define RINGCC_TEST_CHECK_MAIN_H

#include <check.h>

#define RCC_TEST_MAIN(make_suite)                                                                  \
    int main(void)                                                                                 \
    {                                                                                              \
        SRunner *sr = srunner_create(make_suite());                                                \
        srunner_run_all(sr, CK_NORMAL);                                                            \
        int failed = srunner_ntests_failed(sr);                                                    \
        srunner_free(sr);                                                                          \
        return failed ? 1 : 0;                                                                     \
    }

#endif /* RINGCC_TEST_CHECK_MAIN_H */
