"""What the torch tests share: skip without torch, and the torchrun
variables (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT) derived from
ringcc-run's when the launcher was ringcc-run. torch's store then takes
RCC_ROOT's port (free: ringcc-run only chose it), and ringcc's
communicators meet through torch (ringcc.torch.init, the backend)."""
import os
import sys


def import_torch():
    try:
        import torch
    except ImportError:
        print("SKIP: torch is not installed for", sys.executable)
        sys.exit(77)
    return torch


def torchrun_env():
    if "RANK" not in os.environ and "RCC_RANK" in os.environ:
        host, port = os.environ["RCC_ROOT"].rsplit(":", 1)
        os.environ.update(RANK=os.environ["RCC_RANK"], WORLD_SIZE=os.environ["RCC_NRANKS"],
                          MASTER_ADDR=host, MASTER_PORT=port)
    return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
