/*
 * verbsim: a userspace model of an RDMA adapter (one RoCE port, RC queue
 * pairs) and of rdma_cm, for tests on hosts without RDMA hardware. A test
 * program links verbsim.c and its own definitions of the ibv_* and rdma_*
 * calls the verbs transport makes take the place of libibverbs' and
 * librdmacm's (the linker binds the static library's references to the
 * program's definitions first); the pure helpers (ibv_wc_status_str, ...)
 * stay the real library's. verbsim.c's comment says what is modelled.
 */
#ifndef RINGCC_TESTS_VERBSIM_H
#define RINGCC_TESTS_VERBSIM_H

/* Misuses of the verbs API seen in this process so far (a CQ overrun, a
 * resource destroyed while in use, an event never acknowledged, ...). Each
 * is also printed to stderr, prefixed "verbsim:", when it happens. */
int verbsim_violations(void);

#endif
