/*
 * The CUDA runtime of the process, when it has one loaded (PyTorch does): found by name at run
 * time, never loaded by the shim, so the shim builds and runs without CUDA. ringcc's own
 * runtime (static, hidden in libringcc) is not reachable from here.
 */
#include <dlfcn.h>
#include <pthread.h>
#include <stddef.h>

#include "shim.h"

typedef int (*get_device_fn)(int *);
typedef int (*malloc_fn)(void **, size_t);
typedef int (*free_fn)(void *);

static pthread_once_t once = PTHREAD_ONCE_INIT;
static get_device_fn get_device;
static malloc_fn cuda_malloc;
static free_fn cuda_free;

/* The global scope first (a runtime loaded with RTLD_GLOBAL, or linked into
 * the program), then the usual sonames if some library already loaded one. */
static void *lookup(const char *name)
{
    static const char *sonames[] = {"libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0",
                                    "libcudart.so"};
    void *fn = dlsym(RTLD_DEFAULT, name);
    for (size_t i = 0; !fn && i < sizeof sonames / sizeof *sonames; i++) {
        void *lib = dlopen(sonames[i], RTLD_LAZY | RTLD_NOLOAD);
        if (lib) {
            fn = dlsym(lib, name);
            dlclose(lib); /* NOLOAD took a reference; the library stays loaded */
        }
    }
    return fn;
}

static void find_runtime(void)
{
    get_device = (get_device_fn)lookup("cudaGetDevice");
    cuda_malloc = (malloc_fn)lookup("cudaMalloc");
    cuda_free = (free_fn)lookup("cudaFree");
    shim_log(SHIM_LOG_TRACE, "CUDA runtime in the process: %s", get_device ? "yes" : "no");
}

int shim_cuda_current_device(void)
{
    pthread_once(&once, find_runtime);
    int dev = -1;
    if (!get_device || get_device(&dev) != 0)
        return -1;
    return dev;
}

int shim_cuda_malloc(void **ptr, size_t size)
{
    pthread_once(&once, find_runtime);
    return cuda_malloc ? cuda_malloc(ptr, size) : -1;
}

int shim_cuda_free(void *ptr)
{
    pthread_once(&once, find_runtime);
    return cuda_free ? cuda_free(ptr) : -1;
}
