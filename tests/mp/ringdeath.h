/*
 * A rank killed on the device ring: one case shared by the device ring's
 * tests over each transport (tests/mp/test_cudaipc.c, and
 * tests/mp/test_stream.c built with verbsim).
 */
#ifndef RINGCC_TEST_RINGDEATH_H
#define RINGCC_TEST_RINGDEATH_H

/* Runs `nranks` ranks on the stand-in GPU whose device ring must be over
 * `transport`; the last dies (SIGKILL) in the middle of a large allreduce
 * with every slot in use and another queued behind it. The others must
 * fail with RCC_ERR_PEER_LOST naming it, within the timeout, and their
 * streams go on. 0 when they did (and the last rank died of its kill). */
int ringdeath_run(int nranks, const char *transport);

#endif /* RINGCC_TEST_RINGDEATH_H */
