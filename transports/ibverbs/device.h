/*
 * Which RDMA device the verbs transport uses, or why it cannot run here.
 * Connections are addressed by IP through rdma_cm (RoCE and IPoIB alike),
 * so the device is the one that owns the job's address (the interface the
 * engine chose: RCC_SOCKET_IFNAME or the route to the root); RCC_IB_HCA
 * names the device that must be, as NCCL_IB_HCA does.
 */
#ifndef RINGCC_IBVERBS_DEVICE_H
#define RINGCC_IBVERBS_DEVICE_H

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "transport.h"

typedef struct {
    struct ibv_context *verbs; /* owned by rdma_cm: valid while cm ids exist */
    struct ibv_pd *pd;
    uint8_t port;
    char name[IBV_SYSFS_NAME_MAX];
    struct rdma_event_channel *anchor_ch;
    struct rdma_cm_id *anchor; /* bound to the job's address: keeps `verbs` open */
} rcci_ibv_device_t;

/* Finds the device of the job's address and checks it against RCC_IB_HCA
 * and its port state. RCC_ERR_UNSUPPORTED with the reason when there is
 * none usable (no device at all, the address on no RDMA device, another
 * device than RCC_IB_HCA asks for, port down). */
rcc_result_t rcci_ibv_device_open(const rcci_transport_env_t *env, rcci_ibv_device_t *dev);
void rcci_ibv_device_close(rcci_ibv_device_t *dev);

#endif /* RINGCC_IBVERBS_DEVICE_H */
