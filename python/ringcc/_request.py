"""Request: the handle of a nonblocking collective (rcc_i<name>)."""
import ctypes
import threading

from ._errors import check
from ._lib import lib


class Request:
    """A collective in flight. The buffers it was given belong to the library
    until test() returns True or wait() returns; the request keeps them
    alive. wait() returns the collective's result array; a failure raises
    RingccError with the library's message. A request that is garbage
    collected before it finished is waited for first (its memory is still
    the library's)."""

    def __init__(self, handle, keep, result):
        self._handle = handle  # ctypes.c_void_p; NULL once finished
        self._keep = keep
        self._result = result
        self._lock = threading.Lock()  # rcc_test/rcc_wait: one thread per request
        self._error = None

    @property
    def done(self):
        return self._keep is None

    def test(self):
        """True once the operation has finished (raising its failure, if any); never blocks."""
        with self._lock:
            if self._keep is not None:
                flag = ctypes.c_int(0)
                code = lib.rcc_test(ctypes.byref(self._handle), ctypes.byref(flag))
                self._finish(code, flag.value)
            if self._error is not None:
                raise self._error
            return self._keep is None

    def wait(self):
        """Blocks (bounded by the communicator's timeout) and returns the result."""
        with self._lock:
            if self._keep is not None:
                self._finish(lib.rcc_wait(ctypes.byref(self._handle)), 1)
            if self._error is not None:
                raise self._error
            return self._result

    def _finish(self, code, finished):
        if not finished:
            return
        self._keep = None
        try:
            check(code)
        except Exception as e:  # kept: every later test()/wait() raises it again
            self._error = e

    def __del__(self):
        if getattr(self, "_keep", None) is not None:
            lib.rcc_wait(ctypes.byref(self._handle))
