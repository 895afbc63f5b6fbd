/* lib/cuda/reduce_cuda.cu, the file nvcc builds, built here by the host's C++ compiler against the
 * host model of CUDA (tests/cudaemu/README.md), and how the model runs one thread of its kernels.
 */
#include "cuda/reduce_cuda.cu"

/* Every kernel there takes one RedArgs by value. */
void cudaemu_thread(const void *func, void **args)
{
    reinterpret_cast<void (*)(RedArgs)>(const_cast<void *>(func))(*static_cast<RedArgs *>(args[0]));
}
