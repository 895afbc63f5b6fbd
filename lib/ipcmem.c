/* Shared memory between processes of one host (ipcmem.h). */
#include "ipcmem.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "err.h"

rcc_result_t rcci_ipcmem_create(size_t bytes, void **p, rcci_ipcmem_handle_t *handle)
{
    if (bytes == 0)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT, "shared memory of 0 bytes");
    int fd = memfd_create("ringcc-ipc", MFD_CLOEXEC);
    if (fd < 0)
        return rcci_error(RCC_ERR_SYSTEM, "memfd_create: %s", strerror(errno));
    if (ftruncate(fd, (off_t)bytes) != 0) {
        int e = errno;
        close(fd);
        return rcci_error(RCC_ERR_NO_MEMORY, "%zu bytes of shared memory: %s", bytes, strerror(e));
    }
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
        int e = errno;
        close(fd);
        return rcci_error(RCC_ERR_NO_MEMORY, "mapping %zu bytes of shared memory: %s", bytes,
                          strerror(e));
    }
    static uint32_t serial;
    *p = m;
    *handle = (rcci_ipcmem_handle_t){.magic = RCCI_IPCMEM_MAGIC,
                                     .pid = (int32_t)getpid(),
                                     .fd = fd,
                                     .serial = __atomic_add_fetch(&serial, 1, __ATOMIC_RELAXED),
                                     .bytes = bytes};
    return RCC_SUCCESS;
}

void rcci_ipcmem_free(void *p, const rcci_ipcmem_handle_t *handle)
{
    if (!p)
        return;
    munmap(p, (size_t)handle->bytes);
    close(handle->fd);
}

rcc_result_t rcci_ipcmem_open(const rcci_ipcmem_handle_t *h, void **p)
{
    if (h->magic != RCCI_IPCMEM_MAGIC || h->pid <= 0 || h->fd < 0 || h->bytes == 0)
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "not a shared-memory handle (magic 0x%x, pid %d, fd %d, %llu bytes)",
                          h->magic, h->pid, h->fd, (unsigned long long)h->bytes);
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)h->pid, (int)h->fd);
    int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return rcci_error(errno == ENOENT ? RCC_ERR_PEER_LOST : RCC_ERR_SYSTEM,
                          "opening process %d's shared memory (%s): %s", (int)h->pid, path,
                          strerror(errno));
    /* The size is checked, not trusted: a short file would fault on access. */
    off_t size = lseek(fd, 0, SEEK_END);
    if (size < 0 || (uint64_t)size < h->bytes) {
        close(fd);
        return rcci_error(RCC_ERR_INVALID_ARGUMENT,
                          "process %d's shared memory has %lld bytes, the handle says %llu",
                          (int)h->pid, (long long)size, (unsigned long long)h->bytes);
    }
    void *m = mmap(NULL, (size_t)h->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    int e = errno;
    close(fd); /* the mapping keeps the pages */
    if (m == MAP_FAILED)
        return rcci_error(RCC_ERR_NO_MEMORY, "mapping process %d's shared memory: %s", (int)h->pid,
                          strerror(e));
    *p = m;
    return RCC_SUCCESS;
}

void rcci_ipcmem_close(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

char rcci_process_state(int32_t pid)
{
    char path[64], line[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    int n = fgets(line, sizeof line, f) != NULL;
    fclose(f);
    const char *end = n ? strrchr(line, ')') : NULL; /* the command's name may hold spaces */
    return end && end[1] == ' ' ? end[2] : '?';
}

int rcci_process_running(int32_t pid)
{
    char state = rcci_process_state(pid);
    return state != 0 && state != 'Z' && state != 'X';
}
