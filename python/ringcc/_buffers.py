"""Numpy arrays, CPU torch tensors and buffer-protocol objects seen as
(address, element count, ringcc dtype), without copying them.

Torch is recognised only when the caller has imported it: this module never
imports torch (an import costs seconds)."""
import sys

import numpy as np

from ._types import Dtype

# numpy (kind, itemsize) -> ringcc dtype; native byte order only.
_NUMPY = {
    ("i", 1): Dtype.INT8,
    ("u", 1): Dtype.UINT8,
    ("i", 4): Dtype.INT32,
    ("u", 4): Dtype.UINT32,
    ("i", 8): Dtype.INT64,
    ("u", 8): Dtype.UINT64,
    ("f", 2): Dtype.FLOAT16,
    ("f", 4): Dtype.FLOAT32,
    ("f", 8): Dtype.FLOAT64,
}

# torch dtype name -> ringcc dtype (torch 1.13 has no uint32/uint64).
_TORCH = {
    "torch.int8": Dtype.INT8,
    "torch.uint8": Dtype.UINT8,
    "torch.int32": Dtype.INT32,
    "torch.int64": Dtype.INT64,
    "torch.float16": Dtype.FLOAT16,
    "torch.float32": Dtype.FLOAT32,
    "torch.float64": Dtype.FLOAT64,
    "torch.bfloat16": Dtype.BFLOAT16,
}


class Buffer:
    """One argument of a collective: `obj` is what the caller passed (kept
    alive while the library owns the memory), `array` the numpy array or
    torch tensor over the same memory."""

    __slots__ = ("obj", "array", "ptr", "count", "dtype", "is_torch")

    def __init__(self, obj, array, ptr, count, dtype, is_torch):
        self.obj, self.array, self.ptr = obj, array, ptr
        self.count, self.dtype, self.is_torch = count, dtype, is_torch

    @property
    def shape(self):
        return tuple(self.array.shape)

    def new(self, shape):
        """A fresh, uninitialised array of the same kind and dtype."""
        if self.is_torch:
            return sys.modules["torch"].empty(shape, dtype=self.array.dtype)
        return np.empty(shape, dtype=self.array.dtype)


def _is_tensor(obj):
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.Tensor)


def _from_tensor(obj, name, writable):
    if obj.device.type != "cpu" or obj.layout != sys.modules["torch"].strided:
        raise TypeError(f"ringcc: {name} must be a dense CPU tensor "
                        f"(got {obj.device}, {obj.layout})")
    if not obj.is_contiguous():
        raise ValueError(f"ringcc: {name} must be contiguous (call .contiguous() first)")
    dtype = _TORCH.get(str(obj.dtype))
    if dtype is None:
        raise TypeError(f"ringcc: {name} has dtype {obj.dtype}, which ringcc does not reduce "
                        f"(supported: {', '.join(sorted(_TORCH))})")
    return Buffer(obj, obj, obj.data_ptr(), obj.numel(), dtype, True)


def _numpy_dtype(dt, name):
    if dt.name == "bfloat16" and dt.itemsize == 2:  # ml_dtypes' bfloat16, where installed
        return Dtype.BFLOAT16
    dtype = _NUMPY.get((dt.kind, dt.itemsize))
    if dtype is None or not dt.isnative:
        raise TypeError(f"ringcc: {name} has dtype {dt}, which ringcc does not reduce (supported: "
                        "native int8, uint8, int32, uint32, int64, uint64, float16, float32, "
                        "float64)")
    return dtype


def _from_numpy(obj, name, writable):
    if isinstance(obj, np.ndarray):
        arr = obj
    else:
        try:
            view = memoryview(obj)  # refuses what has no buffer: np.asarray would copy it
        except TypeError:
            raise TypeError(f"ringcc: {name} must be a numpy array, a CPU torch tensor or an "
                            f"object with the buffer protocol (got {type(obj).__name__})") from None
        arr = np.asarray(view)
    if not arr.flags.c_contiguous:
        raise ValueError(f"ringcc: {name} must be C-contiguous "
                         "(np.ascontiguousarray would copy it)")
    if writable and not arr.flags.writeable:
        raise ValueError(f"ringcc: {name} receives the result but is read-only")
    dtype = _numpy_dtype(arr.dtype, name)
    return Buffer(obj, arr, arr.__array_interface__["data"][0], arr.size, dtype, False)


def as_buffer(obj, name, writable):
    """The Buffer over obj's memory; TypeError or ValueError when ringcc
    cannot use it in place (name says which argument, in the message)."""
    if _is_tensor(obj):
        return _from_tensor(obj, name, writable)
    return _from_numpy(obj, name, writable)


def same_dtype(a, b):
    if a.dtype != b.dtype:
        raise TypeError(f"ringcc: the input is {a.dtype.name.lower()} but the output is "
                        f"{b.dtype.name.lower()}")
