/*
 * One case of the stream-form tests (tests/mp/test_stream.c on a stand-in
 * GPU, tests/gpu/test_stream_gpu.c on a real one): the collective, its
 * inputs, the result each rank expects, and the buffer layouts of ringcc.h
 * (in place or not).
 */
#ifndef RINGCC_TEST_STREAMCASE_H
#define RINGCC_TEST_STREAMCASE_H

#include <stddef.h>

#include "ringcc.h"

enum { K_ALLREDUCE, K_REDUCE_SCATTER, K_ALLGATHER, K_BROADCAST, K_REDUCE, K_NKINDS };

typedef struct {
    int kind, inplace, root, device;
    rcc_datatype_t dt;
    rcc_redop_t op;
    size_t count;
    unsigned seed;
} scase_t;

/* Elements this rank sends and receives, and the bytes of the larger. */
void scase_sizes(const scase_t *c, int n, size_t *send_elems, size_t *recv_elems, size_t *big);
/* in (send_elems) gets this rank's input, want (recv_elems) the result. */
void scase_expect(const scase_t *c, int rank, int n, char *in, char *want);
/* sendbuf and recvbuf inside `area` (in place) or `area` and `area2`. */
void scase_layout(const scase_t *c, int rank, char *area, char *area2, char **sendbuf,
                  char **recvbuf);
/* The call, on `stream`. */
rcc_result_t scase_call(const scase_t *c, const void *sendbuf, void *recvbuf, rcc_comm_t comm,
                        void *stream);
/* "rank 1/4 allreduce float32 sum count 1001 in place root 0" */
void scase_text(const scase_t *c, int rank, int n, char *buf, size_t size);
/* Whether this rank checks a result (reduce: the root only). */
int scase_has_result(const scase_t *c, int rank);

#endif /* RINGCC_TEST_STREAMCASE_H */
