/*
 * ringcc-info — what this build and this host offer (libfabric's fi_info, NCCL's
 * NCCL_DEBUG=INFO banner, as a program): version, features built, transports and why
 * unusable ones are not, whether GPUDirect RDMA works, network interfaces, GPUs, RDMA
 * devices, and every RCC_*
 * parameter with its default, current value and description, straight from the one
 * parameter table (lib/params.h).
 *
 *   ringcc-info              everything
 *   ringcc-info --params     the parameters only
 *   ringcc-info --markdown   the parameters as the Markdown table of docs/env.md
 */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "devapi.h"
#include "hostinv.h"
#include "params.h"
#include "rcc_config.h"
#include "ringcc.h"
#include "socket.h"
#include "transport.h"

/* Transports ringcc knows of, built or not, and what a build without one lacks. tcp and
 * cudaipc are in every build; where cudaipc is unusable (no CUDA in this build, no usable
 * device), its init says why and info_transports prints that. */
static const struct {
    const char *name;
    const char *missing; /* why it is not in this build */
} info_known[] = {
    {"tcp", "(always built)"},
    {"ibverbs", "not built: libibverbs/librdmacm not found at configure time "
                "(meson feature ibverbs)"},
    {"cudaipc", "(always built)"},
};

static const rcci_transport_t *info_built(const char *name)
{
    for (int i = 0; rcci_transports[i]; i++)
        if (!strcmp(rcci_transports[i]->name, name))
            return rcci_transports[i];
    return NULL;
}

/* A context of `tr` for a one-rank job on the interface a job would pick
 * (RCC_SOCKET_IFNAME, else the first non-loopback one), or NULL with `why`
 * ("not usable: ..."); `ifname` and `addr` name the interface and its address. */
static void *info_transport_open(const rcci_transport_t *tr, char *ifname, size_t ifsize,
                                 char *addr, size_t addrsize, char *why, size_t size)
{
    rcci_addr_t local;
    if (rcci_addr_pick_local(rcci_param_str(RCCI_PARAM_SOCKET_IFNAME), NULL, &local, ifname,
                             ifsize) != RCC_SUCCESS) {
        snprintf(why, size, "not usable: no interface: %s", rcc_last_error(NULL));
        return NULL;
    }
    rcci_addr_format(&local, addr, addrsize);
    addr[strlen(addr) - 2] = '\0'; /* the port, ":0": nothing listens yet */
    rcci_transport_env_t env = {.rank = 0, .nranks = 1, .local_addr_len = local.len};
    memcpy(&env.local_addr, &local.u, local.len);
    void *tctx = NULL;
    if (tr->init(&env, &tctx) != RCC_SUCCESS) {
        snprintf(why, size, "not usable: %s", rcc_last_error(NULL));
        return NULL;
    }
    return tctx;
}

/* A built transport is usable when it initialises (info_transport_open). */
static void info_transport_usable(const rcci_transport_t *tr, char *why, size_t size)
{
    const char *only = rcci_param_str(RCCI_PARAM_TRANSPORT);
    char ifname[64], addr[80];
    void *tctx = info_transport_open(tr, ifname, sizeof ifname, addr, sizeof addr, why, size);
    if (!tctx)
        return;
    tr->fini(tctx);
    snprintf(why, size, "usable (on %s, %s; caps 0x%x)%s", ifname, addr, (unsigned)tr->caps,
             *only && strcmp(only, tr->name) ? ": but RCC_TRANSPORT excludes it" : "");
}

static void info_transports(void)
{
    printf("\nTransports (priority order; RCC_TRANSPORT forces one):\n");
    for (int i = 0; rcci_transports[i]; i++) { /* built, in the registry's order */
        char why[512];
        info_transport_usable(rcci_transports[i], why, sizeof why);
        printf("  %-8s %s\n", rcci_transports[i]->name, why);
    }
    for (size_t k = 0; k < sizeof info_known / sizeof info_known[0]; k++)
        if (!info_built(info_known[k].name))
            printf("  %-8s not usable: %s\n", info_known[k].name, info_known[k].missing);
}

static void info_gdr_register(const rcci_transport_t *verbs, void *buf, size_t bytes)
{
    char why[512], ifname[64], addr[80];
    void *tctx = NULL;
    rcci_mr_t *mr = NULL;
    if (!verbs) {
        printf("  ibverbs registration: not tried: ibverbs is not built\n");
        return;
    }
    tctx = info_transport_open(verbs, ifname, sizeof ifname, addr, sizeof addr, why, sizeof why);
    if (!tctx)
        printf("  ibverbs registration: not tried: ibverbs is %s\n", why);
    else if (verbs->reg_mem(tctx, buf, bytes, RCCI_MEM_CUDA, &mr) != RCC_SUCCESS)
        printf("  ibverbs registration: no: %s\n", rcc_last_error(NULL));
    else
        printf("  ibverbs registration: yes: device memory goes to the wire without staging\n");
    if (mr)
        verbs->dereg_mem(tctx, mr);
    if (tctx)
        verbs->fini(tctx);
}

/* GPUDirect RDMA, tried as a job would: 2 MiB of device memory exported as a dma-buf
 * (the GPU's half, answerable without an adapter), then registered with ibverbs. */
static void info_gdr(void)
{
    printf("\nGPUDirect RDMA (the RDMA adapter reads and writes GPU memory itself):\n");
    const rcci_transport_t *verbs = info_built("ibverbs");
    const rcci_devapi_t *dev = rcci_devapi();
    if (!rcc_cuda_available() || !dev || !dev->ipc_alloc) {
        printf("  no: no usable CUDA device\n");
        return;
    }
    const size_t bytes = 2u << 20;
    void *buf = NULL;
    char handle[RCCI_IPC_HANDLE_BYTES];
    if (dev->ipc_alloc(&buf, bytes, RCCI_IPC_DEVICE, handle) != RCC_SUCCESS) {
        printf("  no: 2 MiB of device memory: %s\n", rcc_last_error(NULL));
        return;
    }
    int fd = -1;
    uint64_t offset;
    if (!dev->dmabuf_export)
        printf("  dma-buf export: no: not in this build's device table\n");
    else if (dev->dmabuf_export(buf, bytes, &fd, &offset) != RCC_SUCCESS)
        printf("  dma-buf export: no: %s\n", rcc_last_error(NULL));
    else
        printf("  dma-buf export: yes\n");
    if (fd >= 0)
        close(fd);
    /* What a receiver does before its GPU reads data an adapter wrote
     * (the device ring over ibverbs); it needs no adapter to answer. */
    if (!dev->flush_remote_writes)
        printf("  flush of remote writes: not in this build's device table\n");
    else if (dev->flush_remote_writes() != RCC_SUCCESS)
        printf("  flush of remote writes: fails: %s\n", rcc_last_error(NULL));
    else
        printf("  flush of remote writes: works (or the GPU orders them itself)\n");
    info_gdr_register(verbs, buf, bytes);
    dev->ipc_free(buf);
}

static void info_features(void)
{
    int v = 0;
    rcc_get_version(&v);
    printf("ringcc %s (library %d.%d.%d)\n", RCC_VERSION_STRING, v / 10000, v / 100 % 100, v % 100);
    printf("\nFeatures built:\n");
    printf("  cuda     %s\n", RCC_HAVE_CUDA ? "yes (kernels for sm_80, sm_90 + PTX)"
                                            : "no (meson feature cuda off or nvcc not found)");
    printf("  ibverbs  %s\n", RCC_HAVE_IBVERBS ? "yes (libibverbs and librdmacm found)"
                                               : "no (libibverbs/librdmacm not found)");
    int cuda = rcc_cuda_available();
    printf("  CUDA buffers usable here: %s%s\n",
           cuda ? "yes" : "no: ", cuda ? "" : rcc_last_error(NULL));
}

/* The value in effect: the environment's when set, else the default; an INT value the
 * library would refuse is marked. */
static void info_current(const rcci_param_info_t *p, rcci_param_id_t id, char *buf, size_t size)
{
    const char *env = getenv(p->name);
    if (!env || !*env) {
        snprintf(buf, size, "%s", *p->default_text ? p->default_text : "(empty)");
        return;
    }
    int64_t v;
    int bad = rcci_param_parse(id, env, &v) != RCC_SUCCESS;
    snprintf(buf, size, "%s (set%s)", env, bad ? "; INVALID: communicator creation fails" : "");
}

static void info_params(void)
{
    printf("\nParameters (environment variables; read once per process):\n");
    for (int i = 0; i < RCCI_PARAM_COUNT; i++) {
        const rcci_param_info_t *p = rcci_param_info((rcci_param_id_t)i);
        char cur[256];
        info_current(p, (rcci_param_id_t)i, cur, sizeof cur);
        printf("  %s = %s   [default: %s]\n      %s\n", p->name, cur,
               *p->default_text ? p->default_text : "(empty)", p->description);
    }
}

/* The environment reference of docs/env.md: a Markdown table, one row per parameter. */
static void info_markdown(void)
{
    printf("| variable | default | range | meaning |\n|---|---|---|---|\n");
    for (int i = 0; i < RCCI_PARAM_COUNT; i++) {
        const rcci_param_info_t *p = rcci_param_info((rcci_param_id_t)i);
        char range[64] = "text";
        if (p->is_int)
            snprintf(range, sizeof range, "%lld to %lld", (long long)p->min, (long long)p->max);
        printf("| `%s` | %s%s%s | %s | %s |\n", p->name, *p->default_text ? "`" : "",
               *p->default_text ? p->default_text : "(empty)", *p->default_text ? "`" : "", range,
               p->description);
    }
}

static void info_usage(FILE *out)
{
    fprintf(out, "Usage: ringcc-info [-p | --params | -m | --markdown]\n"
                 "Print the version, features built, transports (and why one is unusable),\n"
                 "whether GPUDirect RDMA works (GPU memory exported as a dma-buf, then\n"
                 "registered with ibverbs), network interfaces, GPUs, RDMA devices and every\n"
                 "RCC_* parameter.\n"
                 "  -p, --params     only the parameters: default, current value, description\n"
                 "  -m, --markdown   the parameters as a Markdown table (docs/env.md)\n"
                 "  -h, --help       show this help and exit\n");
}

int main(int argc, char **argv)
{
    static const struct option longopts[] = {{"params", no_argument, NULL, 'p'},
                                             {"markdown", no_argument, NULL, 'm'},
                                             {"help", no_argument, NULL, 'h'},
                                             {NULL, 0, NULL, 0}};
    int mode = 'a', c;
    while ((c = getopt_long(argc, argv, "pmh", longopts, NULL)) != -1) {
        if (c == 'h') {
            info_usage(stdout);
            return 0;
        }
        if (c != 'p' && c != 'm') {
            info_usage(stderr);
            return 2;
        }
        mode = c;
    }
    if (optind < argc) {
        info_usage(stderr);
        return 2;
    }
    if (mode == 'm') {
        info_markdown();
        return 0;
    }
    if (mode == 'a') {
        info_features();
        info_transports();
        info_gdr();
        printf("\nNetwork interfaces:\n");
        hostinv_print_interfaces(stdout);
        printf("\nGPUs:\n");
        hostinv_print_gpus(stdout);
        printf("\nRDMA devices:\n");
        hostinv_print_rdma(stdout);
    }
    info_params();
    return 0;
}
