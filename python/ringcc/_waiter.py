"""A thread that waits for a communicator's requests and runs a callback
for each, so that a caller (a DDP comm hook) gets a completion without
blocking its own thread. Requests finish in call order on a communicator,
so waiting for them one by one in that order loses nothing."""
import queue
import threading
import traceback


class Waiter:
    def __init__(self, name):
        self._queue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def add(self, request, callback):
        """callback(result, None) or callback(None, exception), on the waiter's thread."""
        self._queue.put((request, callback))

    def close(self):
        """Waits for what was added, then ends the thread (from a callback, where
        a communicator's last reference may go: without waiting for itself)."""
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join()

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            request, callback = item
            try:
                result, error = request.wait(), None  # the GIL is released inside rcc_wait
            except Exception as e:
                result, error = None, e
            try:
                callback(result, error)
            except Exception:  # a broken callback must not stop the others' completions
                traceback.print_exc()
