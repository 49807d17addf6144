"""The PyTorch side of bench/: one Gloo process group on loopback.

Shared by ddp_torch.py, gpt_torch.py and allreduce_torch.py so that every
PyTorch peer is set up the same way (loopback, a free port, N threads).
"""

import os
import socket


def free_port():
    """A TCP port on 127.0.0.1 that was free a moment ago (for MASTER_PORT)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def init_gloo(rank, world, port, threads):
    """torch.distributed with Gloo over loopback; `threads` intra-op threads."""
    import torch
    import torch.distributed as dist
    torch.set_num_threads(threads)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", rank=rank, world_size=world)
    return dist
