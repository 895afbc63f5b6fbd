/* lib/cuda/reduce_cuda.cu, the file nvcc builds, built here by the host's C++ compiler against the
 * host model of CUDA (tests/cudaemu/README.md), and how the model keeps a launch's arguments and
 * runs one thread of its kernels.
 */
#include "cuda/reduce_cuda.cu"

/* Every kernel there takes one RedArgs by value: a launch copies it, as CUDA does, since the
 * caller's may be gone when the stream reaches the kernel. */
void *cudaemu_args_save(const void *func, void **args)
{
    (void)func;
    return new RedArgs(*static_cast<RedArgs *>(args[0]));
}

void cudaemu_args_free(const void *func, void *saved)
{
    (void)func;
    delete static_cast<RedArgs *>(saved);
}

void cudaemu_thread(const void *func, void *saved)
{
    reinterpret_cast<void (*)(RedArgs)>(const_cast<void *>(func))(*static_cast<RedArgs *>(saved));
}
