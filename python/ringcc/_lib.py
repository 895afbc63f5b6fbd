"""Loads libringcc and declares the C signatures that the package calls.

The library is found through RCC_LIBRARY (a path to libringcc.so), else by
the normal library search path (LD_LIBRARY_PATH, ldconfig's cache).
"""
import ctypes
import ctypes.util
import os

UNIQUE_ID_BYTES = 128  # RCC_UNIQUE_ID_BYTES


class UniqueId(ctypes.Structure):
    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


_comm = ctypes.c_void_p
_req = ctypes.c_void_p
_preq = ctypes.POINTER(ctypes.c_void_p)
_ptr = ctypes.c_void_p
_size = ctypes.c_size_t
_int = ctypes.c_int

# name: (restype, argtypes). Results are rcc_result_t (an int) unless noted.
_SIGNATURES = {
    "rcc_strerror": (ctypes.c_char_p, [_int]),
    "rcc_result_name": (ctypes.c_char_p, [_int]),
    "rcc_last_error": (ctypes.c_char_p, [_comm]),
    "rcc_get_version": (_int, [ctypes.POINTER(_int)]),
    "rcc_get_unique_id": (_int, [ctypes.POINTER(UniqueId)]),
    "rcc_comm_init_rank": (_int, [ctypes.POINTER(_comm), _int, UniqueId, _int, _ptr]),
    "rcc_comm_init_env": (_int, [ctypes.POINTER(_comm), _ptr]),
    "rcc_comm_destroy": (_int, [_comm]),
    "rcc_comm_abort": (_int, [_comm]),
    "rcc_comm_rank": (_int, [_comm, ctypes.POINTER(_int)]),
    "rcc_comm_size": (_int, [_comm, ctypes.POINTER(_int)]),
    "rcc_allreduce": (_int, [_ptr, _ptr, _size, _int, _int, _comm]),
    "rcc_iallreduce": (_int, [_ptr, _ptr, _size, _int, _int, _comm, _preq]),
    "rcc_reduce_scatter": (_int, [_ptr, _ptr, _size, _int, _int, _comm]),
    "rcc_ireduce_scatter": (_int, [_ptr, _ptr, _size, _int, _int, _comm, _preq]),
    "rcc_allgather": (_int, [_ptr, _ptr, _size, _int, _comm]),
    "rcc_iallgather": (_int, [_ptr, _ptr, _size, _int, _comm, _preq]),
    "rcc_broadcast": (_int, [_ptr, _ptr, _size, _int, _int, _comm]),
    "rcc_ibroadcast": (_int, [_ptr, _ptr, _size, _int, _int, _comm, _preq]),
    "rcc_barrier": (_int, [_comm]),
    "rcc_ibarrier": (_int, [_comm, _preq]),
    "rcc_group_start": (_int, []),
    "rcc_group_end": (_int, []),
    "rcc_test": (_int, [_preq, ctypes.POINTER(_int)]),
    "rcc_wait": (_int, [_preq]),
}


def _load():
    path = os.environ.get("RCC_LIBRARY") or ctypes.util.find_library("ringcc") or "libringcc.so"
    try:
        lib = ctypes.CDLL(path)
    except OSError as e:
        raise ImportError(
            f"ringcc: cannot load the library {path!r} ({e}); set RCC_LIBRARY to the path of "
            "libringcc.so or put its folder on LD_LIBRARY_PATH"
        ) from None
    for name, (restype, argtypes) in _SIGNATURES.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


lib = _load()
