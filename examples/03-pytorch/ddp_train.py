#!/usr/bin/env python3
"""PyTorch DistributedDataParallel under poolrun.

    poolrun -n 16 python3 ddp_train.py [--steps N] [--out FILE]

poolrun-rank gives every rank RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT (one port for the job), its GPU as CUDA_VISIBLE_DEVICES and NCCL's NIC and tuner
variables, so the default env:// initialisation needs nothing else. With a GPU the backend is NCCL;
without one (the simulated cluster) it is gloo on the CPU.

The model is a linear regression on data every rank generates alike; each rank trains on its
shard, DDP averages the gradients, and every rank ends with the same weights (checked here).
"""
import argparse
import json
import os
import sys

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--out", help="rank 0 writes the weights here as JSON")
    args = parser.parse_args()

    missing = [v for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        print(f"ddp_train.py: error: {', '.join(missing)} not set: start it with poolrun -n N python3 ddp_train.py",
              file=sys.stderr)
        return 2
    use_gpu = torch.cuda.is_available()
    backend = "nccl" if use_gpu else "gloo"
    dist.init_process_group(backend=backend)  # env://: the variables poolrun-rank exported
    rank, world = dist.get_rank(), dist.get_world_size()
    # The plan leaves each rank one visible GPU: device 0 is its own.
    device = torch.device("cuda", 0) if use_gpu else torch.device("cpu")

    generator = torch.Generator().manual_seed(1234)
    samples, features = 4096, 8
    truth = torch.randn(features, 1, generator=generator, dtype=torch.float64)
    x = torch.rand(samples, features, generator=generator, dtype=torch.float64) * 2 - 1
    y = x @ truth + 0.01 * torch.randn(samples, 1, generator=generator, dtype=torch.float64)
    shard = slice(rank, samples, world)
    x, y = x[shard].to(device), y[shard].to(device)

    model = torch.nn.Linear(features, 1, bias=False).double().to(device)
    torch.nn.init.zeros_(model.weight)
    ddp = DDP(model, device_ids=[0] if use_gpu else None)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.5)
    for _ in range(args.steps):
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # DDP averages the gradients of every rank here
        optimizer.step()

    weights = model.weight.detach().to("cpu").flatten()
    gathered = [torch.zeros_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights.to(device) if use_gpu else weights)
    same = all(torch.equal(g.to("cpu"), weights) for g in gathered)
    if rank == 0:
        error = (weights - truth.flatten()).abs().max().item()
        print(f"ddp_train.py: {world} ranks, backend {backend}, MASTER {os.environ['MASTER_ADDR']}:"
              f"{os.environ['MASTER_PORT']}, loss {loss.item():.3g}, largest weight error {error:.3g}, "
              f"same weights on every rank: {same}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"ranks": world, "backend": backend, "weights": weights.tolist(),
                           "truth": truth.flatten().tolist(), "same_on_every_rank": same}, f)
    dist.destroy_process_group()
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
