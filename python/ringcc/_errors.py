"""ringcc's failures as Python exceptions carrying the library's own message."""
from ._lib import lib


class RingccError(RuntimeError):
    """A ringcc call failed. `code` is the rcc_result_t, `name` its symbol
    ("RCC_ERR_TIMEOUT"), `detail` the library's message (rcc_last_error)."""

    def __init__(self, code, detail):
        self.code = code
        self.name = lib.rcc_result_name(code).decode()
        self.detail = detail or lib.rcc_strerror(code).decode()
        super().__init__(f"{self.name}: {self.detail}")


def last_error(comm_handle=None):
    """The library's detail text of the last failure (of comm, else this thread's)."""
    text = lib.rcc_last_error(comm_handle)
    return text.decode(errors="replace") if text else ""


def check(code, comm_handle=None):
    """Raises RingccError for a failed result; the detail is read at once,
    on the thread that made the call (the library keeps it per thread and
    per communicator)."""
    if code != 0:
        detail = last_error(comm_handle) if comm_handle else ""
        raise RingccError(code, detail or last_error(None))
