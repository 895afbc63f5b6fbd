/* Choosing the RDMA device: see device.h. */
#include "device.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "err.h"
#include "log.h"
#include "params.h"
#include "socket.h"

/* RCC_IB_HCA as NAME[:PORT]: whether `name` and `port` match it. */
static int dev_hca_matches(const char *hca, const char *name, int port)
{
    const char *colon = strchr(hca, ':');
    size_t len = colon ? (size_t)(colon - hca) : strlen(hca);
    if (strncmp(hca, name, len) != 0 || name[len] != '\0') /* mlx5_1 is not mlx5_10 */
        return 0;
    return !colon || atoi(colon + 1) == port;
}

/* The devices present, as text for messages ("mlx5_0, mlx5_1"); 0 if none. */
static int dev_list(char *buf, size_t size)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    buf[0] = '\0';
    for (int i = 0; list && i < n; i++) {
        size_t used = strlen(buf);
        snprintf(buf + used, size - used, "%s%s", i ? ", " : "", ibv_get_device_name(list[i]));
    }
    if (list)
        ibv_free_device_list(list);
    return n;
}

rcc_result_t rcci_ibv_device_open(const rcci_transport_env_t *env, rcci_ibv_device_t *dev)
{
    rcc_result_t res = RCC_SUCCESS;
    const char *hca = rcci_param_str(RCCI_PARAM_IB_HCA);
    char names[256], addr[80];
    rcci_addr_t local = {.len = env->local_addr_len};
    memcpy(&local.u, &env->local_addr, local.len);
    rcci_addr_set_port(&local, 0);
    rcci_addr_format(&local, addr, sizeof addr);
    *dev = (rcci_ibv_device_t){0};

    if (dev_list(names, sizeof names) == 0)
        RCC_FAIL(RCC_ERR_UNSUPPORTED,
                 "no RDMA device: ibv_get_device_list found none (no InfiniBand/RoCE adapter, or "
                 "its driver, or rdma_rxe for Soft-RoCE, is not loaded)");
    dev->anchor_ch = rdma_create_event_channel();
    if (!dev->anchor_ch)
        RCC_FAIL(RCC_ERR_UNSUPPORTED, "rdma_create_event_channel: %s (is rdma_ucm loaded?)",
                 strerror(errno));
    if (rdma_create_id(dev->anchor_ch, &dev->anchor, NULL, RDMA_PS_TCP))
        RCC_FAIL(RCC_ERR_UNSUPPORTED, "rdma_create_id: %s", strerror(errno));
    if (rdma_bind_addr(dev->anchor, &local.u.sa) || !dev->anchor->verbs)
        RCC_FAIL(RCC_ERR_UNSUPPORTED,
                 "the job's address %s is on no RDMA device (devices: %s; choose an interface "
                 "of one with RCC_SOCKET_IFNAME)",
                 addr, names);
    dev->verbs = dev->anchor->verbs;
    dev->port = dev->anchor->port_num;
    snprintf(dev->name, sizeof dev->name, "%s", ibv_get_device_name(dev->verbs->device));
    if (hca[0] && !dev_hca_matches(hca, dev->name, dev->port))
        RCC_FAIL(RCC_ERR_UNSUPPORTED,
                 "RCC_IB_HCA=%s, but the job's address %s is on %s port %d (choose an interface "
                 "of %s with RCC_SOCKET_IFNAME)",
                 hca, addr, dev->name, dev->port, hca);
    /* The protocol rests on RDMA WRITE WITH IMMEDIATE and the IB connection
     * manager's semantics (a disconnect flushes the QP): iWARP has neither. */
    if (dev->verbs->device->transport_type != IBV_TRANSPORT_IB)
        RCC_FAIL(RCC_ERR_UNSUPPORTED,
                 "%s is not an InfiniBand/RoCE device (iWARP or another transport: no RDMA "
                 "WRITE WITH IMMEDIATE)",
                 dev->name);
    struct ibv_port_attr pa;
    int err = ibv_query_port(dev->verbs, dev->port, &pa); /* returns the errno value */
    if (err)
        RCC_FAIL(RCC_ERR_UNSUPPORTED, "ibv_query_port(%s, %d): %s", dev->name, dev->port,
                 strerror(err));
    if (pa.state != IBV_PORT_ACTIVE)
        RCC_FAIL(RCC_ERR_UNSUPPORTED, "%s port %d is not active (state %s)", dev->name, dev->port,
                 ibv_port_state_str(pa.state));
    dev->pd = ibv_alloc_pd(dev->verbs);
    if (!dev->pd)
        RCC_FAIL(RCC_ERR_UNSUPPORTED, "ibv_alloc_pd(%s): %s", dev->name, strerror(errno));
    RCC_INFO("ibverbs: %s port %d (%s) for %s", dev->name, dev->port,
             pa.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand", addr);
out:
    if (res != RCC_SUCCESS)
        rcci_ibv_device_close(dev);
    return res;
}

void rcci_ibv_device_close(rcci_ibv_device_t *dev)
{
    if (dev->pd)
        ibv_dealloc_pd(dev->pd);
    if (dev->anchor)
        rdma_destroy_id(dev->anchor);
    if (dev->anchor_ch)
        rdma_destroy_event_channel(dev->anchor_ch);
    *dev = (rcci_ibv_device_t){0};
}
