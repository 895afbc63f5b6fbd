"""What tests/shim/torch_collectives.py and torch_ddp.py share: launching N processes on one
GPU, each meeting the others with torch.distributed, and the check that the shim is in use."""
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

SKIP = 77


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(worker, nprocs, backend, *args):
    """Runs worker(rank, nprocs, port, backend, *args) in nprocs processes; SKIP without CUDA."""
    if backend == "nccl" and not torch.cuda.is_available():
        print("SKIP: torch.cuda.is_available() is False (no CUDA device, or a torch without CUDA)")
        return SKIP
    mp.spawn(worker, args=(nprocs, free_port(), backend) + args, nprocs=nprocs, join=True)
    return 0


def init_rank(rank, nranks, port, backend, require_shim, bind_device=True):
    """Joins the process group; returns the device: GPU 0 (shared by all ranks) for nccl, the
    CPU for gloo. require_shim: fail unless libringcc is loaded (it is only through the shim).
    bind_device: pass device_id (torch 2.3+), which makes torch create the communicator at once
    and later groups by ncclCommSplit."""
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    if backend != "nccl":
        dist.init_process_group(backend, rank=rank, world_size=nranks)
        return torch.device("cpu")
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    with open("/proc/self/maps") as maps:
        if require_shim and not any("libringcc" in line for line in maps):
            raise RuntimeError("libringcc_nccl.so is not loaded: run through run-torch.sh")
    try:
        if bind_device:
            dist.init_process_group(backend, rank=rank, world_size=nranks, device_id=device)
            return device
    except TypeError:  # torch before 2.3 has no device_id
        pass
    dist.init_process_group(backend, rank=rank, world_size=nranks)
    return device


def finish(backend):
    """Leaves the job. The pause lets every rank's watchdog retire its last operation before
    any rank destroys its communicator. It dates from before a clean destroy sent its peers a
    goodbye (README, "NCCL shim": their idle probes now stay ncclSuccess); it stays until a GPU
    run shows the job ends cleanly without it."""
    if backend == "nccl":
        torch.cuda.synchronize()
    dist.barrier()
    if backend == "nccl":
        torch.cuda.synchronize()
        time.sleep(0.5)
    dist.destroy_process_group()
