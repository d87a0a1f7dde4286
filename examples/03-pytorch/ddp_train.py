#!/usr/bin/env python3
"""PyTorch DistributedDataParallel under poolrun, elastic: it checkpoints and resumes.

    poolrun -n 16 python3 ddp_train.py [--steps N] [--out FILE]
    poolrun -n 2:8 --resize-interval 600 python3 ddp_train.py --steps 100000

poolrun-rank gives every rank RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and
MASTER_PORT (one port for the job), its GPU as CUDA_VISIBLE_DEVICES and NCCL's NIC and tuner
variables, so the default env:// initialisation needs nothing else. With a GPU the backend is NCCL;
without one (the simulated cluster) it is gloo on the CPU.

The model is a linear regression on data every rank generates alike; each rank trains on its
shard, DDP averages the gradients, and every rank ends with the same weights (checked here). The
shards are equal, so a step is full-batch gradient descent whatever the world size: a run that is
stopped and resumed at another size follows the same losses as one that never stopped.

Stopping and resuming, in torchrun's model: at SIGTERM (a preemption, or an elastic lease that
changes size) the ranks agree to stop after the step they are in, rank 0 writes the checkpoint
(the weights, the optimizer's state and the next step, written whole or not at all) and every rank
exits 0; poolrun starts the job again (POOLRUN_RESTART_COUNT one higher, maybe another WORLD_SIZE)
and it goes on from the checkpoint. The checkpoint is --checkpoint, by default ddp_train.ckpt in
the job directory (POOLRUN_JOB_DIR); without either, no checkpoint is written or read.
"""
import signal

# Before anything slow (importing torch takes seconds): a SIGTERM from then on asks for a stop at
# the end of a step instead of killing the rank with its work unsaved.
STOP = {"asked": False}
signal.signal(signal.SIGTERM, lambda *_: STOP.update(asked=True))

import argparse  # noqa: E402
import faulthandler  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def default_checkpoint() -> str:
    job_dir = os.environ.get("POOLRUN_JOB_DIR")
    return os.path.join(job_dir, "ddp_train.ckpt") if job_dir else ""


def save_checkpoint(path: str, model, optimizer, step: int, loss: float, world: int) -> None:
    # Written beside it, flushed, then renamed over it: a kill half-way leaves the last one whole.
    tmp = f"{path}.tmp.{os.getpid()}"
    with open(tmp, "wb") as f:
        torch.save({"schema": "poolrun.example.ddp-train/1", "step": step, "loss": loss, "world": world,
                    "model": model.state_dict(), "optimizer": optimizer.state_dict()}, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def load_checkpoint(path: str):
    """The checkpoint at path, or None where there is none yet; a damaged one stops the job."""
    if not path or not os.path.exists(path):
        return None
    try:
        state = torch.load(path, map_location="cpu")
        if not isinstance(state, dict) or state.get("schema") != "poolrun.example.ddp-train/1":
            raise ValueError("not a ddp_train.py checkpoint (schema poolrun.example.ddp-train/1)")
        return state
    except Exception as e:  # torch.load raises many kinds on a damaged file
        raise SystemExit(f"ddp_train.py: error: cannot resume from {path}: {e}; move it away to start afresh")


def leave(code: int) -> int:
    """Ends the process group, every rank together, and the process without the interpreter's
    teardown. Twice in CI (2026-12-02 and -03, PyTorch 1.13 with gloo, on a loaded machine) a job
    whose ranks had all printed their results never ended: one rank hung after its last
    collective. The barrier brings every rank to the end together; should a rank still hang, the
    stacks of its threads are printed after 60 s and it exits (1) rather than waiting for the
    launcher's timeout; and os._exit skips the interpreter's teardown, where PyTorch's threads
    are joined."""
    faulthandler.dump_traceback_later(60, exit=True)
    dist.barrier()
    dist.destroy_process_group()
    faulthandler.cancel_dump_traceback_later()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=200, help="steps in all, over every restart")
    parser.add_argument("--out", help="rank 0 writes the weights here as JSON")
    parser.add_argument("--checkpoint", default=default_checkpoint(),
                        help="the checkpoint to resume from and write at SIGTERM (default: "
                             "$POOLRUN_JOB_DIR/ddp_train.ckpt; empty: none)")
    parser.add_argument("--log", help="rank 0 appends a JSON line per step here (step, loss, world, restart)")
    parser.add_argument("--step-seconds", type=float, default=0.0,
                        help="sleep this long after each step (a stand-in for real work, for demonstrations)")
    args = parser.parse_args()
    if args.steps < 1 or args.step_seconds < 0:
        print(f"ddp_train.py: error: --steps {args.steps} --step-seconds {args.step_seconds}: "
              "steps must be at least 1 and seconds not negative", file=sys.stderr)
        return 2

    missing = [v for v in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT") if v not in os.environ]
    if missing:
        print(f"ddp_train.py: error: {', '.join(missing)} not set: start it with poolrun -n N python3 ddp_train.py",
              file=sys.stderr)
        return 2
    use_gpu = torch.cuda.is_available()
    backend = "nccl" if use_gpu else "gloo"
    dist.init_process_group(backend=backend)  # env://: the variables poolrun-rank exported
    rank, world = dist.get_rank(), dist.get_world_size()
    restart = int(os.environ.get("POOLRUN_RESTART_COUNT", "0"))
    # The plan leaves each rank one visible GPU: device 0 is its own.
    device = torch.device("cuda", 0) if use_gpu else torch.device("cpu")

    generator = torch.Generator().manual_seed(1234)
    samples, features = 4096, 8
    truth = torch.randn(features, 1, generator=generator, dtype=torch.float64)
    x = torch.rand(samples, features, generator=generator, dtype=torch.float64) * 2 - 1
    y = x @ truth + 0.01 * torch.randn(samples, 1, generator=generator, dtype=torch.float64)
    if samples % world:
        print(f"ddp_train.py: error: {world} ranks do not divide the {samples} samples evenly", file=sys.stderr)
        return 2
    shard = slice(rank, samples, world)
    x, y = x[shard].to(device), y[shard].to(device)

    model = torch.nn.Linear(features, 1, bias=False).double().to(device)
    torch.nn.init.zeros_(model.weight)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    first = 0
    state = load_checkpoint(args.checkpoint)  # every rank reads it: no broadcast needed
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        first = state["step"]
        if rank == 0:
            print(f"ddp_train.py: resumed from {args.checkpoint} at step {first} of {args.steps} (it was written "
                  f"by {state['world']} ranks, loss {state['loss']:.6g}); {world} ranks now, restart {restart}",
                  flush=True)
    ddp = DDP(model, device_ids=[0] if use_gpu else None)

    log = open(args.log, "a") if args.log and rank == 0 else None
    loss = None
    step = first
    while step < args.steps:
        optimizer.zero_grad()
        loss = torch.nn.functional.mse_loss(ddp(x), y)
        loss.backward()  # DDP averages the gradients of every rank here
        optimizer.step()
        step += 1
        # The loss over every sample (the shards are equal: the mean of the ranks' means), not rank 0's.
        whole = loss.detach().clone()
        dist.all_reduce(whole)
        loss = whole / world
        if log:
            log.write(json.dumps({"step": step, "loss": loss.item(), "world": world, "restart": restart}) + "\n")
            log.flush()
        if args.step_seconds:
            time.sleep(args.step_seconds)
        # Every rank stops after the same step: the signal reaches them at different moments.
        asked = torch.tensor([1.0 if STOP["asked"] else 0.0], device=device)
        dist.all_reduce(asked, op=dist.ReduceOp.MAX)
        if asked.item() and step < args.steps:
            if rank == 0 and args.checkpoint:
                save_checkpoint(args.checkpoint, model, optimizer, step, loss.item(), world)
                print(f"ddp_train.py: stopped at step {step} of {args.steps} (SIGTERM); checkpoint in "
                      f"{args.checkpoint}", flush=True)
            if log:
                log.close()
            return leave(0)
    if rank == 0 and args.checkpoint and loss is not None:  # done: a restart after this has nothing to do
        save_checkpoint(args.checkpoint, model, optimizer, step, loss.item(), world)

    weights = model.weight.detach().to("cpu").flatten()
    gathered = [torch.zeros_like(weights) for _ in range(world)]
    dist.all_gather(gathered, weights.to(device) if use_gpu else weights)
    same = all(torch.equal(g.to("cpu"), weights) for g in gathered)
    if rank == 0:
        error = (weights - truth.flatten()).abs().max().item()
        final = loss.item() if loss is not None else state["loss"]
        print(f"ddp_train.py: {world} ranks, backend {backend}, MASTER {os.environ['MASTER_ADDR']}:"
              f"{os.environ['MASTER_PORT']}, loss {final:.3g}, largest weight error {error:.3g}, "
              f"same weights on every rank: {same}")
        if args.out:
            with open(args.out, "w") as f:
                json.dump({"ranks": world, "backend": backend, "weights": weights.tolist(),
                           "truth": truth.flatten().tolist(), "same_on_every_rank": same,
                           "steps": step, "resumed_from": first, "restart": restart}, f)
    if log:
        log.close()
    return leave(0 if same else 1)


if __name__ == "__main__":
    sys.exit(main())
