/*
 * ncclConfig_t as NCCL reads it: `magic` proves NCCL_CONFIG_INITIALIZER made the struct, `size`
 * says how much of it the caller's header had. NCCL only appends fields, so a field's offset
 * never changes and a field lies in the caller's struct exactly when `size` covers it: a binary
 * built against an older header (shorter struct) gets defaults for what it lacks, one built
 * against a newer header has fields the shim ignores.
 */
#include <stddef.h>

#include "shim.h"

/* The first NCCL config (2.14) already had `blocking` after the header. */
#define CONFIG_MIN_BYTES (offsetof(ncclConfig_t, blocking) + sizeof(int))

#define CONFIG_HAS(config, field)                                                                  \
    ((config)->size >= offsetof(ncclConfig_t, field) + sizeof((config)->field))

ncclResult_t shim_config_read(const ncclConfig_t *config, shim_config_t *out, const char *func)
{
    *out = (shim_config_t){.blocking = 1, .comm_name = NULL};
    if (!config)
        return ncclSuccess;
    if (config->magic != SHIM_CONFIG_MAGIC)
        return shim_fail(ncclInvalidArgument, func,
                         "config magic is 0x%x, not 0x%x: initialise ncclConfig_t with "
                         "NCCL_CONFIG_INITIALIZER",
                         config->magic, SHIM_CONFIG_MAGIC);
    if (config->size < CONFIG_MIN_BYTES)
        return shim_fail(ncclInvalidArgument, func,
                         "config size %zu is smaller than any NCCL version's ncclConfig_t (%zu)",
                         config->size, (size_t)CONFIG_MIN_BYTES);
    if (config->blocking != SHIM_CONFIG_UNDEF_INT) {
        if (config->blocking != 0 && config->blocking != 1)
            return shim_fail(ncclInvalidArgument, func, "config blocking is %d, not 0 or 1",
                             config->blocking);
        out->blocking = config->blocking;
        out->blocking_set = 1;
    }
    if (CONFIG_HAS(config, commName))
        out->comm_name = config->commName;
    /* The rest (CTAs, cluster size, netName, splitShare, traffic class,
     * collnet, NVLS, ...) tunes NCCL's own kernels and transports; ringcc
     * has no counterpart, so they are accepted and ignored. */
    shim_log(SHIM_LOG_TRACE, "%s: config of %zu bytes, version %u, blocking %d", func, config->size,
             config->version, out->blocking);
    return ncclSuccess;
}
