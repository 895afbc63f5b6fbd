/* The transports built into this library, in priority order: the first
 * whose can_connect accepts a peer wins (RCC_TRANSPORT overrides). */
#include "err.h"
#include "rcc_config.h"
#include "transport.h"

extern const rcci_transport_t rcci_transport_cudaipc;
extern const rcci_transport_t rcci_transport_tcp;
#if RCC_HAVE_IBVERBS
extern const rcci_transport_t rcci_transport_ibverbs;
#endif

const rcci_transport_t *const rcci_transports[] = {
    /* Same-host GPU peers, for device buffers only: the engine gives host
     * buffers to the first transport below that has no RCCI_CAP_DEVICE_MEM
     * unless RCC_TRANSPORT names this one (lib/comm.c). */
    &rcci_transport_cudaipc,
#if RCC_HAVE_IBVERBS
    &rcci_transport_ibverbs, /* where its init finds an RDMA device for the job's address */
#endif
    &rcci_transport_tcp,
    NULL,
};

rcc_result_t rcci_transport_unsupported_write(rcci_conn_t *conn, const void *buf, size_t bytes,
                                              rcci_mr_t *mr, const void *remote_key,
                                              uint64_t remote_offset, rcci_request_t **req)
{
    (void)conn, (void)buf, (void)bytes, (void)mr, (void)remote_key, (void)remote_offset, (void)req;
    return rcci_error(RCC_ERR_UNSUPPORTED, "this transport has no one-sided write");
}

static rcc_result_t no_inplace(void)
{
    return rcci_error(RCC_ERR_UNSUPPORTED, "this transport moves no message in place");
}

int rcci_transport_no_listener_fd(rcci_listener_t *listener)
{
    (void)listener;
    return -1;
}

size_t rcci_transport_no_inplace_bytes(rcci_conn_t *conn, int send)
{
    (void)conn, (void)send;
    return 0;
}

rcc_result_t rcci_transport_unsupported_irecv_inplace(rcci_conn_t *conn, size_t bytes,
                                                      const rcci_tag_t *tag, const void **data,
                                                      rcci_request_t **req)
{
    (void)conn, (void)bytes, (void)tag, (void)data, (void)req;
    return no_inplace();
}

rcc_result_t rcci_transport_unsupported_release(rcci_conn_t *conn, void *stream)
{
    (void)conn, (void)stream;
    return no_inplace();
}

rcc_result_t rcci_transport_unsupported_reserve_send(rcci_conn_t *conn, size_t bytes, void **data)
{
    (void)conn, (void)bytes, (void)data;
    return no_inplace();
}

rcc_result_t rcci_transport_unsupported_commit_send(rcci_conn_t *conn, size_t bytes,
                                                    const rcci_tag_t *tag, void *stream,
                                                    uint32_t flags, rcci_request_t **req)
{
    (void)conn, (void)bytes, (void)tag, (void)stream, (void)flags, (void)req;
    return no_inplace();
}

static rcc_result_t no_queued(void)
{
    return rcci_error(RCC_ERR_UNSUPPORTED, "this transport queues no message on a stream");
}

rcc_result_t rcci_transport_unsupported_queue_recv(rcci_conn_t *conn, void *stream, size_t bytes,
                                                   const void **data, uint32_t *ticket)
{
    (void)conn, (void)stream, (void)bytes, (void)data, (void)ticket;
    return no_queued();
}

rcc_result_t rcci_transport_unsupported_queue_send(rcci_conn_t *conn, void *stream, size_t bytes,
                                                   void **data)
{
    (void)conn, (void)stream, (void)bytes, (void)data;
    return no_queued();
}

rcc_result_t rcci_transport_unsupported_queue_commit(rcci_conn_t *conn, void *stream, size_t bytes,
                                                     const rcci_tag_t *tag, uint32_t *ticket)
{
    (void)conn, (void)stream, (void)bytes, (void)tag, (void)ticket;
    return no_queued();
}

rcc_result_t rcci_transport_unsupported_queue_test(rcci_conn_t *conn, int send, uint32_t ticket,
                                                   size_t bytes, const rcci_tag_t *tag, int *done)
{
    (void)conn, (void)send, (void)ticket, (void)bytes, (void)tag, (void)done;
    return no_queued();
}

void rcci_transport_no_queue_abort(rcci_conn_t *conn) { (void)conn; }
