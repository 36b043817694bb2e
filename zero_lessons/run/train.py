"""Train a small MLP with DeepSpeed from a config file: the loop, a checkpoint, a resume, each rank's bytes.

Start it the way you start a DeepSpeed job on a cluster, here with two CPU ranks on one machine:

    GLOO_SOCKET_IFNAME=lo torchrun --nproc-per-node 2 --master-addr 127.0.0.1 --master-port 29500 \\
        -m zero_lessons.run.train --ds-config ds.json

torchrun starts one process per rank and hands each its RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT,
which `deepspeed.init_distributed` reads. Every rank runs this same file. Imports torch and DeepSpeed.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import logging
from pathlib import Path

import deepspeed
import torch
import torch.distributed as dist
from deepspeed.utils import logger, safe_get_full_fp32_param
from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

from ..lab.rank_deepspeed import held  # the lab's byte counter: the one line that reaches into the lab
from ..planning.ds_config import ADAMW  # the optimizer for a config that names none
from .predict import WIDTHS  # layer widths, stated without torch so the prediction counts the same model


def build_model(seed: int) -> torch.nn.Module:
    """The MLP in fp32; every rank builds the same one from the same seed, as data parallelism needs."""
    torch.manual_seed(seed)
    layers = []
    for a, b in itertools.pairwise(WIDTHS):
        layers += [torch.nn.Linear(a, b), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def batch(step: int, rank: int, size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Inputs and targets of `rank` at `step`: each rank its own data, and a resumed run the same again."""
    generator = torch.Generator().manual_seed(1000 * step + rank)
    x = torch.randn(size, WIDTHS[0], generator=generator)
    return x, torch.randn(size, WIDTHS[-1], generator=generator)


def with_defaults(config: dict) -> dict:
    """`config` with AdamW added if it names no optimizer, and DeepSpeed's line per step turned off.

    Offloaded optimizer steps run on the host in DeepSpeed's CPU Adam (a C++ extension it compiles on
    first use); otherwise torch's own AdamW takes the step, which needs no compiler.
    """
    params = ADAMW["params"] | ({} if offloaded(config) else {"torch_adam": True})
    return {"optimizer": ADAMW | {"params": params}, "steps_per_print": 10**9} | config  # its own keys win


def make_engine(config: dict, seed: int):
    """A DeepSpeed engine around a fresh model: it casts and shards the weights and builds the optimizer."""
    model = build_model(seed)
    engine, *_ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=config)
    return engine


def train_step(engine, snapshot: bool = False) -> tuple[float, dict | None]:
    """One step on this rank's own batch; with `snapshot`, count the bytes held before `engine.step()` too."""
    x, target = batch(engine.global_steps, engine.global_rank, engine.train_micro_batch_size_per_gpu())
    dtype = next(engine.module.parameters()).dtype  # bf16 or fp16, as DeepSpeed cast the weights
    x, target = x.to(engine.device, dtype), target.to(engine.device)  # the CPU here; on GPUs the rank's own
    loss = torch.nn.functional.mse_loss(engine(x).float(), target)
    engine.backward(loss)  # scales the loss under fp16; averages the gradients over the ranks
    found = dataclasses.asdict(held(engine)) if snapshot else None  # stages 1 and 2 free gradients in step()
    engine.step()  # AdamW on this rank's part of the fp32 weights, then the bf16 copy is refreshed
    return loss.item(), found


def fp32_weights(engine) -> dict[str, torch.Tensor]:
    """The full fp32 weights by name. At stage 3 this gathers every rank's shard: every rank must call it."""
    out = {}
    for name, param in engine.module.named_parameters():
        master = safe_get_full_fp32_param(param)  # None when the engine keeps no separate fp32 copy
        out[name] = (param if master is None else master).detach().float().clone()
    return out


def same(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    """Whether two state dicts have the same names and bit-for-bit equal tensors."""
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def offloaded(config: dict) -> bool:
    """Whether the config offloads the optimizer, so that DeepSpeed's CPU Adam takes the steps."""
    return config.get("zero_optimization", {}).get("offload_optimizer", {}).get("device", "none") != "none"


def near(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor], start: dict[str, torch.Tensor]) -> bool:
    """Whether `a` and `b` agree to 1e-4 of the step each took from `start`, tensor by tensor.

    For DeepSpeed's CPU Adam, bit for bit is too much to ask: a running optimizer updates Adam's bias
    correction β^t by one more product each step, a resumed one computes it afresh with pow()
    (csrc/includes/cpu_adam.h, IncrementStep), and the two can differ in the last bit. Lost moments or a
    wrong step count would move the weights by a good part of a step, far more than 1e-4 of it.
    """
    return a.keys() == b.keys() and all(
        (a[k] - b[k]).abs().max() <= 1e-4 * (b[k] - start[k]).abs().max() for k in a
    )


def round_trip(engine, config: dict, folder: Path) -> int | None:
    """Save, resume into a fresh engine and consolidate, asserting each gives back the trained state.

    Returns how many tensors rank 0 consolidated; None on the other ranks, and at stage 0, whose
    checkpoint has no ZeRO shards (DeepSpeed's utility reads stage 1-3 checkpoints only).
    """
    stage = engine.zero_optimization_stage()
    engine.save_checkpoint(folder, tag="saved")  # every rank calls it and writes its own shard; the tag
    # names the subfolder (by default DeepSpeed names it global_step<N> and load_checkpoint reads "latest")
    saved = fp32_weights(engine)
    train_step(engine)
    expected = fp32_weights(engine)
    engine.destroy()
    fresh = make_engine(config, seed=1)  # other initial weights, so loading has to overwrite them all
    fresh.load_checkpoint(folder, tag="saved")
    assert same(fp32_weights(fresh), saved), "the resumed weights differ from the saved ones"
    train_step(fresh)
    # The same next step proves more than the weights came back: AdamW's moments and step count did too.
    resumed = fp32_weights(fresh)
    equal = same(resumed, expected) if not offloaded(config) else near(resumed, expected, saved)
    assert equal, "the resumed run's next step differs from the original's"
    fresh.destroy()
    dist.barrier()  # every shard is on disk before rank 0 reads them all
    if dist.get_rank() != 0 or stage == 0:
        return None
    consolidated = get_fp32_state_dict_from_zero_checkpoint(str(folder), tag="saved")  # reads every shard
    assert same(consolidated, saved), "the consolidated fp32 state dict differs from the trained weights"
    plain = build_model(seed=2)  # a plain torch model, no DeepSpeed: the weights now load like any others
    plain.load_state_dict(consolidated)  # strict: every name and shape must match
    assert same(dict(plain.named_parameters()), saved), "the plain model did not take the weights"
    return len(consolidated)


def run(path: Path, steps: int, checkpoints: Path) -> dict:
    """Train `steps` steps under the config at `path`, check its checkpoint, and return this rank's report."""
    config = with_defaults(json.loads(path.read_text()))
    engine = make_engine(config, seed=0)
    losses, found = [], None
    for number in range(steps):
        loss, found = train_step(engine, snapshot=number == steps - 1)
        losses.append(loss)
    params = sum(p.numel() for p in build_model(0).parameters())
    report = {"config": path.name, "rank": dist.get_rank(), "world": dist.get_world_size(), "params": params}
    report |= {
        "losses": losses,
        "held": found,
        "skipped_steps": engine.skipped_steps,
    }  # skipped: steps with an inf or NaN gradient (fp16 overflows; bf16 ones too at stages 1-2)
    folder = checkpoints / path.stem
    consolidated = round_trip(engine, config, folder)  # ends once every rank's shard is on disk
    files = sorted(str(f.relative_to(folder)) for f in folder.rglob("*") if f.is_file())
    return report | {"consolidated": consolidated, "files": files if dist.get_rank() == 0 else None}


def main(argv: list[str] | None = None) -> None:
    """Train under each config in turn; print (or add to `--report`) one JSON line per config and rank."""
    parser = argparse.ArgumentParser(prog="zero_lessons.run.train", description=__doc__.splitlines()[0])
    parser.add_argument("--ds-config", type=Path, nargs="+", required=True, help="DeepSpeed config file(s)")
    parser.add_argument("--steps", type=int, default=3, help="steps before the checkpoint")
    parser.add_argument("--checkpoints", type=Path, default=Path("checkpoints"), help="where checkpoints go")
    parser.add_argument("--report", type=Path, help="folder for rank<N>.jsonl reports (default: print them)")
    parser.add_argument("--local_rank", type=int, help=argparse.SUPPRESS)  # the deepspeed launcher passes it
    args = parser.parse_args(argv)
    logger.setLevel(logging.WARNING)  # DeepSpeed logs every step at INFO
    deepspeed.init_distributed(dist_backend="nccl" if torch.cuda.is_available() else "gloo")  # gloo on CPUs
    for path in args.ds_config:
        line = json.dumps(run(path, args.steps, args.checkpoints))
        if args.report:
            with open(args.report / f"rank{dist.get_rank()}.jsonl", "a") as out:
                print(line, file=out)
        else:
            print(line, flush=True)
    dist.barrier()  # gloo can abort at teardown unless every rank gets here first
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
