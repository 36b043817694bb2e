"""torchrun with one change: its rendezvous store listens on 127.0.0.1 only. Imports torch.

`--master-addr 127.0.0.1` tells the ranks where to connect, but torchrun's agent still serves its
store on every interface: a TCPStore binds the wildcard address unless it is handed a socket that is
already bound. On a cluster that is what you want; on a laptop or a shared CI machine it opens a port
to the network for nothing. This hands the store a loopback socket, then runs torchrun's own `main`:

    python -m zero_lessons.run.loopback --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29500 \\
        -m zero_lessons.run.train --ds-config ds.json
"""

from __future__ import annotations

import socket

import torch.distributed as dist
from torch.distributed import run
from torch.distributed.elastic.rendezvous import static_tcp_rendezvous


def loopback_store(host: str, port: int, world_size: int, is_master: bool, *args, **kwargs) -> dist.TCPStore:
    """A TCPStore whose server, where this process hosts it, listens on 127.0.0.1 alone."""
    if is_master:
        kwargs["master_listen_fd"] = socket.create_server(("127.0.0.1", port)).detach()  # the store owns it
    return dist.TCPStore(host, port, world_size, is_master, *args, **kwargs)


if __name__ == "__main__":
    # --master-addr and --master-port pick the static rendezvous; its store is the one to bind.
    static_tcp_rendezvous.TCPStore = loopback_store
    run.main()
