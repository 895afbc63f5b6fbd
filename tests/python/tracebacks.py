"""Imported first by the tests here: a rank that ringcc-run stops at its
timeout (SIGTERM) prints every thread's Python traceback as it goes, beside
the gdb backtraces of --stacks, which show no Python frames."""
import faulthandler
import signal

faulthandler.register(signal.SIGTERM, all_threads=True, chain=True)
