"""The advisor's DeepSpeed configs train for real: every stage and offload it can emit, on two CPU ranks
started by torchrun, with the checkpoint saved, resumed bit for bit, and consolidated to fp32 by DeepSpeed's
own utility.

One torchrun launch trains every config in turn, because starting torch and DeepSpeed is most of the cost
on two cores; each config still gets its own `deepspeed.initialize`, checkpoint, checks and report line per
rank. The bit-for-bit checks run inside the script (`train.round_trip`): one that fails fails the launch.
"""

import importlib.util
import itertools
import json
import math
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import need
from zero_lessons.lab.runner import clear_batons, extensions_dir
from zero_lessons.planning import ds_config
from zero_lessons.planning.advice import advise
from zero_lessons.run import RunError, launch, launcher

for _module in ("torch", "deepspeed"):  # found, not imported: only the ranks need them
    need(_module, importlib.util.find_spec(_module) is not None, "`make test` installs it with the lab extra")
pytestmark = pytest.mark.lab

#: What the advisor can choose, by the article's rules: each stage with no offload; optimizer offload under
#: stages 2 and 3; optimizer and parameter offload under stage 3. Each with advise() inputs that lead to it.
CHOICES = {
    (0, "none"): (10**8, 1, "8GB", None),
    (1, "none"): (10**9, 4, "8GB", None),
    (2, "none"): (10**10, 8, "44GB", None),
    (3, "none"): (10**9, 2, "9GB", None),
    (2, "optimizer"): (10**9, 1, "8GB", "64GB"),
    (3, "optimizer"): (10**10, 2, "16GB", "512GB"),
    (3, "optimizer+parameters"): (10**10, 1, "16GB", "512GB"),
}
#: The script's MLP and data, written out again here so that the counts and the reference are independent.
WIDTHS = (32, 512, 512, 8)
BATCH = 4
PSI = sum(a * b + b for a, b in itertools.pairwise(WIDTHS))  # 283,656 parameters
TENSORS = 2 * (len(WIDTHS) - 1)  # a weight and a bias per layer


def name(choice: tuple[int, str]) -> str:
    """The config file's name for a (stage, offload) choice."""
    stage, offload = choice
    return f"zero{stage}-offload-{offload.replace('+', '-and-')}.json"


def chosen(choice: tuple[int, str]):
    """What the advisor says for the inputs that lead to `choice`."""
    params, gpus, memory, host = CHOICES[choice]
    return advise(params, gpus, memory, cpu_memory=host)


def listeners(port: int) -> set[str]:
    """The local address, as /proc/net writes it, of every socket listening on TCP `port` right now."""
    found = set()
    for table in (Path("/proc/net/tcp"), Path("/proc/net/tcp6")):
        for row in table.read_text().splitlines()[1:] if table.exists() else ():
            local, state = row.split()[1], row.split()[3]
            if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.add(local.rsplit(":", 1)[0])
    return found


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """One launch of every config the advisor can emit; and what torchrun's store listened on meanwhile."""
    folder = tmp_path_factory.mktemp("configs")
    paths = [folder / name(choice) for choice in CHOICES]
    for path, choice in zip(paths, CHOICES, strict=True):
        path.write_text(json.dumps(chosen(choice).ds_config(micro_batch=BATCH)))
    ports, seen, done, real = [], set(), threading.Event(), launcher.free_port

    def watch():
        while not done.wait(0.1):
            seen.update(listeners(ports[0]) if ports else ())

    watcher = threading.Thread(target=watch, daemon=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(launcher, "free_port", lambda: ports.append(real()) or ports[-1])
        watcher.start()
        try:
            report = launch(paths, ranks=2, steps=3, timeout=600)  # a cold start compiles CPU Adam: minutes
        finally:
            done.set()
            watcher.join()
    print(f"\n{len(paths)} configs on 2 ranks in {report.seconds:.1f} s")
    return report, seen


def test_the_advisor_emits_exactly_the_configs_tested_here():
    emitted = set()
    for params in (10**8, 10**9, 10**10, 10**11, 10**12):
        for gpus in (1, 2, 4, 8, 64, 512):
            for memory in ("8GB", "16GB", "24GB", "40GB", "80GB"):
                for host in (None, "64GB", "512GB", "2TB", "10TB"):
                    advice = advise(params, gpus, memory, cpu_memory=host)
                    emitted.add(json.dumps(advice.ds_config(micro_batch=BATCH)))
    tested = {json.dumps(ds_config.zero_config(*choice, micro_batch=BATCH)) for choice in CHOICES}
    assert emitted == tested
    assert all((int(chosen(c).stage), chosen(c).offload) == c for c in CHOICES)


@pytest.mark.parametrize("choice", list(CHOICES), ids=name)
def test_every_config_trains_on_two_ranks(run, choice):
    reports = run[0].of(name(choice))
    assert [(r.rank, r.world, r.stage, r.offload) for r in reports] == [(0, 2, *choice), (1, 2, *choice)]
    for r in reports:
        assert r.params == PSI
        assert len(r.losses) == 3 and all(math.isfinite(loss) for loss in r.losses)
        assert r.skipped_steps == 0  # bf16 has fp32's range: no loss scaling, no step skipped


@pytest.mark.parametrize("choice", list(CHOICES), ids=name)
def test_the_checkpoint_resumes_and_consolidates_to_fp32(run, choice):
    """The script asserts that the resumed state and the consolidated fp32 weights equal the trained ones,
    bit for bit; here, that rank 0 consolidated every tensor (stage 0 has no ZeRO shards to consolidate)."""
    first, second = run[0].of(name(choice))
    assert first.consolidated == (None if choice[0] == 0 else TENSORS)
    assert second.consolidated is None


@pytest.mark.parametrize("choice", list(CHOICES), ids=name)
def test_rank_0_lists_the_checkpoint_files_lesson_12_describes(run, choice):
    """The checkpoint folder as rank 0 lists it (the other rank lists nothing): in the tag's folder one
    optimizer-state file per rank, and one model-state file per rank at stage 3, where the weights are
    sharded, or a single one at stages 0-2, where they are whole; beside it `latest`, and DeepSpeed's
    zero_to_fp32.py wherever there are ZeRO shards to convert (stages 1-3)."""
    first, second = run[0].of(name(choice))
    stage, ranks = choice[0], (0, 1)
    optim = [f"saved/bf16_zero_pp_rank_{r}_mp_rank_00_optim_states.pt" for r in ranks] if stage else []
    per_rank = [f"saved/zero_pp_rank_{r}_mp_rank_00_model_states.pt" for r in ranks]
    model = per_rank if stage == 3 else ["saved/mp_rank_00_model_states.pt"]
    scripts = ["zero_to_fp32.py", "zero_to_torch.py"] if stage else []
    assert second.files is None
    assert first.files == tuple(sorted(["latest", *optim, *model, *scripts]))


@pytest.mark.parametrize("choice", list(CHOICES), ids=name)
def test_each_rank_holds_the_papers_optimizer_share(run, choice):
    """K = 12 bytes per parameter (fp32 master weights and Adam's two moments): whole at stage 0, split in
    two above it, offloaded or not. Ψ is a multiple of 2N, so there is no padding."""
    for r in run[0].of(name(choice)):
        assert r.held["optimizer"] == (12 * PSI if choice[0] == 0 else 12 * PSI // 2)


@pytest.mark.parametrize("choice", list(CHOICES), ids=name)
def test_stage_3_splits_the_big_weight_and_keeps_small_tensors_whole(run, choice):
    """bf16 weights: 2Ψ bytes on every rank below stage 3. Stage 3 holds less, but more than an even share:
    tensors under DeepSpeed's persistence threshold (100,000 elements) stay whole on every rank."""
    for r in run[0].of(name(choice)):
        if choice[0] < 3:
            assert r.held["weights"] == 2 * PSI
        else:
            assert 2 * PSI // 2 < r.held["weights"] < 2 * PSI


def test_zero_stages_1_to_3_train_the_same_model(run):
    """Partitioning moves state, not math: the same losses, bit for bit under torch's AdamW, and within
    float rounding under DeepSpeed's CPU Adam (the offloaded configs)."""
    reference = run[0].of(name((1, "none")))
    for choice in CHOICES:
        for r, ref in zip(run[0].of(name(choice)), reference, strict=True):
            if choice[0] > 0 and choice[1] == "none":
                assert r.losses == ref.losses
            elif choice[0] > 0:
                assert all(
                    math.isclose(a, b, rel_tol=1e-5) for a, b in zip(r.losses, ref.losses, strict=True)
                )


def plain_pytorch_losses(warm_up: bool) -> list[list[float]]:
    """Independent reference: one process, no DeepSpeed. A bf16 model, fp32 master weights, torch's AdamW,
    the gradient averaged over both ranks' batches. With `warm_up`, one AdamW step on zero gradients first."""
    import torch

    torch.manual_seed(0)
    layers = [m for a, b in itertools.pairwise(WIDTHS) for m in (torch.nn.Linear(a, b), torch.nn.ReLU())]
    model = torch.nn.Sequential(*layers[:-1]).to(torch.bfloat16)
    master = [p.detach().float().clone() for p in model.parameters()]
    optimizer = torch.optim.AdamW(master, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01)
    if warm_up:
        for p in master:
            p.grad = torch.zeros_like(p)
        optimizer.step()
    losses = []
    for step in range(3):
        losses.append([])
        for p in master:
            p.grad = torch.zeros_like(p)
        for rank in (0, 1):
            generator = torch.Generator().manual_seed(1000 * step + rank)  # the script's `batch`
            x, target = (torch.randn(BATCH, width, generator=generator) for width in (WIDTHS[0], WIDTHS[-1]))
            with torch.no_grad():
                for p, q in zip(model.parameters(), master, strict=True):
                    p.copy_(q)
            model.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x.to(torch.bfloat16)).float(), target)
            loss.backward()
            losses[-1].append(loss.item())
            for p, q in zip(model.parameters(), master, strict=True):
                q.grad += p.grad.float() / 2
        optimizer.step()
    return losses


def close(measured: tuple[float, ...], reference: list[list[float]], rank: int) -> bool:
    """Whether every step's loss is within 1% of the reference's (bf16 keeps about 3 digits of a gradient)."""
    return all(math.isclose(m, ref[rank], rel_tol=1e-2) for m, ref in zip(measured, reference, strict=True))


def test_the_losses_match_plain_pytorch_and_stage_0_starts_with_an_empty_adam_step(run):
    """Stages 1-3 follow plain PyTorch. Stage 0 (DeepSpeed's bf16 data parallelism, FP16_UnfusedOptimizer)
    follows it only after one AdamW step on zero gradients, which that optimizer takes at start to create
    Adam's state: its first real step then uses step 2's bias correction, about 0.74 of the learning rate."""
    plain, warmed = plain_pytorch_losses(warm_up=False), plain_pytorch_losses(warm_up=True)
    for choice in CHOICES:
        for r in run[0].of(name(choice)):
            if choice[0] == 0:
                assert close(r.losses, warmed, r.rank) and not close(r.losses, plain, r.rank)
            else:
                assert close(r.losses, plain, r.rank) and not close(r.losses, warmed, r.rank)


def test_torchruns_store_listens_on_loopback_only(run):
    assert run[1] == {"0100007F"}  # 127.0.0.1 as /proc/net/tcp writes it; nothing on 0.0.0.0 or ::


def test_fp16_on_the_cpu_accelerator(tmp_path):
    """fp16 needs oneDNN's fp16 kernels (AVX512-FP16 or AMX-FP16); DeepSpeed's CPU accelerator refuses
    it without them, in `deepspeed.initialize`."""
    import torch

    config = ds_config.zero_config(1, micro_batch=BATCH)
    config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}  # 0: dynamic loss scaling
    del config["bf16"]
    path = tmp_path / "fp16.json"
    path.write_text(json.dumps(config))
    if torch.ops.mkldnn._is_mkldnn_fp16_supported():
        report = launch(path, ranks=2, steps=3, timeout=300)
        assert all(math.isfinite(loss) for r in report.ranks for loss in r.losses)
    else:  # one rank is enough to see it refused, and the cheapest to start
        with pytest.raises(
            RunError, match=r"ValueError: Type fp16 is not supported on your device\.$"
        ) as error:
            launch(path, ranks=1, steps=3, timeout=300)
        assert "\n" not in str(error.value)


def alive(pid: int) -> bool:
    """Whether process `pid` still runs (a zombie, ended but not yet reaped, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def ranks_of(pid: int) -> list[int]:
    """The processes `pid` started, from /proc: torchrun's ranks."""
    found = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            if int(stat.read_text().rsplit(")", 1)[1].split()[1]) == pid:
                found.append(int(stat.parent.name))
        except OSError:
            continue
    return found


def torchrun_seen(interrupt: bool, seen: list[int]) -> type[subprocess.Popen]:
    """A Popen that, on the first wait, records torchrun and its two ranks once both run, then raises a Ctrl-C
    (with `interrupt`) or lets the real wait, and its time limit, go on."""

    class Watched(subprocess.Popen):
        def wait(self, timeout=None):
            if not seen:
                while len(seen) < 3 and self.poll() is None:
                    seen[:] = [self.pid, *ranks_of(self.pid)]
                    time.sleep(0.1)
                if interrupt:
                    raise KeyboardInterrupt
            return super().wait(timeout)

    return Watched


@pytest.mark.parametrize("interrupt", [False, True], ids=["time limit", "ctrl-c"])
def test_the_time_limit_or_ctrl_c_stops_torchrun_and_both_ranks(tmp_path, monkeypatch, interrupt):
    path = tmp_path / "ds.json"
    path.write_text(json.dumps(ds_config.zero_config(0, micro_batch=BATCH)))
    seen, before = [], time.time()
    monkeypatch.setattr(subprocess, "Popen", torchrun_seen(interrupt, seen))
    if interrupt:
        with pytest.raises(KeyboardInterrupt):
            launch(path, ranks=2, timeout=60)
    else:
        stopped = r"^the run did not finish within 1 s, and was stopped \(its last words: .+\)$"
        with pytest.raises(RunError, match=stopped):
            launch(path, ranks=2, timeout=1)  # the clock starts once both ranks run
    assert len(seen) == 3 and not any(alive(pid) for pid in seen)
    # a rank stopped while it loads DeepSpeed's ops leaves no build lock for the next run to wait on
    assert not [lock for lock in Path(extensions_dir()).glob("*/lock") if lock.stat().st_mtime >= before]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"ranks": 0}, "ranks must be a whole number from 1 to 8, got 0"),
        ({"ranks": 2.0}, "ranks must be a whole number from 1 to 8, got float 2.0"),
        ({"steps": 101}, "steps must be a whole number from 1 to 100, got 101"),
        ({"timeout": 0}, "timeout must be a number > 0, got 0"),
        ({"timeout": 7200}, "timeout must be a number of seconds > 0 and ≤ 3600, got 7200"),
    ],
)
def test_bad_arguments_are_one_line_errors(tmp_path, arguments, message):
    path = tmp_path / "ds.json"
    path.write_text("{}")
    with pytest.raises((ValueError, TypeError)) as error:
        launch(path, **arguments)
    assert str(error.value).startswith(message) and "\n" not in str(error.value)


def test_bad_config_files_are_one_line_errors(tmp_path):
    (tmp_path / "a.json").write_text("{not json")
    (tmp_path / "b.json").write_text("[1, 2]")
    cases = {
        "missing.json": f"ds_config: cannot read {tmp_path / 'missing.json'}: No such file or directory",
        "a.json": f"ds_config: {tmp_path / 'a.json'} is not JSON: Expecting property name",
        "b.json": f"ds_config: {tmp_path / 'b.json'} must hold a JSON object, got list",
    }
    for file, message in cases.items():
        with pytest.raises(ValueError) as error:
            launch(tmp_path / file)
        assert str(error.value).startswith(message)
    with pytest.raises(ValueError, match="^ds_config must name one or more files with different names, got "):
        launch([tmp_path / "b.json", tmp_path / "sub" / "b.json"])


def test_importing_the_package_part_loads_no_torch():
    code = "import json, sys, zero_lessons.run; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    loaded = {module.split(".")[0] for module in json.loads(out)}
    assert "zero_lessons" in loaded and not {"torch", "deepspeed"} & loaded


def test_clearing_build_locks_removes_only_those_made_since_the_run_began(tmp_path):
    """A rank killed while loading DeepSpeed's ops leaves `<op>/lock`, which later ranks wait on for ever."""
    old, new, built = (
        tmp_path / "cpu_adam" / "lock",
        tmp_path / "shm_comm" / "lock",
        tmp_path / "shm_comm" / "x.so",
    )
    for path in (old, new, built):
        path.parent.mkdir(exist_ok=True)
        path.write_text("")
    since = time.time()
    os.utime(old, (since - 60, since - 60))  # an older run's, perhaps still building: left alone
    os.utime(new, (since + 1, since + 1))
    assert clear_batons(str(tmp_path), since) == [new]
    assert old.exists() and not new.exists() and built.exists()
    assert clear_batons(str(tmp_path / "absent"), since) == []
