/*
 * Memory one process shares with another on the same host, named by a
 * small handle that travels through the bootstrap or a transport: a memfd
 * mapped MAP_SHARED, opened by the peer through /proc/PID/fd/FD. The CUDA
 * device table (lib/cuda/devapi_cuda.c) uses it for the host-mapped flag
 * pages of the cudaipc transport; the stand-in device (tests/mp/fakedev.c)
 * for its "device memory" too. No /dev/shm name is ever created, so a
 * process killed with its memory exported leaves nothing behind: the pages
 * live as long as some process maps them.
 */
#ifndef RINGCC_IPCMEM_H
#define RINGCC_IPCMEM_H

#include <stddef.h>
#include <stdint.h>

#include "ringcc.h"

#define RCCI_IPCMEM_MAGIC 0x4d435052u /* "RPCM" */

/* The handle's layout (host byte order: both ends are on one host). */
typedef struct {
    uint32_t magic;
    int32_t pid;
    int32_t fd;
    uint32_t serial; /* unique per creation in the process: a descriptor number is reused,
                        and a handle must name one memory (those that map it cache by handle) */
    uint64_t bytes;
} rcci_ipcmem_handle_t;

/* Creates `bytes` (> 0) of zeroed shared memory, mapped at *p, and its
 * handle. The descriptor stays open in this process until rcci_ipcmem_free. */
rcc_result_t rcci_ipcmem_create(size_t bytes, void **p, rcci_ipcmem_handle_t *handle);
void rcci_ipcmem_free(void *p, const rcci_ipcmem_handle_t *handle);
/* Maps a peer's memory. RCC_ERR_PEER_LOST when the exporting process is
 * gone; RCC_ERR_INVALID_ARGUMENT for a handle that is not one. */
rcc_result_t rcci_ipcmem_open(const rcci_ipcmem_handle_t *handle, void **p);
void rcci_ipcmem_close(void *p, size_t bytes);

/* The state letter of process `pid` on this host, as /proc/PID/stat gives
 * it ('R', 'S', 'T' stopped, 'Z' zombie...), or 0 when there is no such
 * process: whether the process that exported or opened memory still runs
 * (a zombie's mappings are gone already). */
char rcci_process_state(int32_t pid);
/* 1 while process `pid` runs: there, and not a zombie. */
int rcci_process_running(int32_t pid);

#endif /* RINGCC_IPCMEM_H */
