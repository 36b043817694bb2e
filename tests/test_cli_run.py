"""From advice to a real run on the command line: `zero-lessons advise … --ds-config FILE` writes a config
for every stage and offload the advisor can choose, and one `zero-lessons run` trains on all of them on two
CPU ranks under torchrun, with each rank's bytes beside the package's prediction.

One launch trains every config (starting torch and DeepSpeed is most of the cost). NVMe offload is not
among them: the advisor never writes it (it offloads to CPU memory only), and this machine could not run
it anyway: DeepSpeed's async-I/O extension needs libaio, which is not installed (the last test checks).
"""

import contextlib
import importlib.util
import io
import json
import math
import subprocess
import sys

import pytest

from conftest import need
from zero_lessons.cli import main
from zero_lessons.run import predict

for _module in ("torch", "deepspeed"):  # found, not imported: only the ranks need them
    need(_module, importlib.util.find_spec(_module) is not None, "`make test` installs it with the lab extra")
pytestmark = pytest.mark.lab

#: advise's flags that lead to each (stage, offload) it can choose, as tests/test_run.py lists them.
ADVISE = {
    (0, "none"): "--params 100M --gpus 1 --gpu-memory 8GB",
    (1, "none"): "--params 1B --gpus 4 --gpu-memory 8GB",
    (2, "none"): "--params 10B --gpus 8 --gpu-memory 44GB",
    (3, "none"): "--params 1B --gpus 2 --gpu-memory 9GB",
    (2, "optimizer"): "--params 1B --gpus 1 --gpu-memory 8GB --cpu-memory 64GB",
    (3, "optimizer"): "--params 10B --gpus 2 --gpu-memory 16GB --cpu-memory 512GB",
    (3, "optimizer+parameters"): "--params 10B --gpus 1 --gpu-memory 16GB --cpu-memory 512GB",
}
TENSORS = 6  #: the script's MLP: a weight and a bias in each of 3 layers
STEPS = 2  #: the fewest whose last snapshot has Adam's state; and CPU Adam resumes after step 2 with a
#: last-bit difference from the running job (train.near), which a bit-for-bit check rejected


def file_name(choice: tuple[int, str]) -> str:
    """The config file's name for a (stage, offload) choice."""
    return f"zero{choice[0]}-{choice[1].replace('+', '-and-')}.json"


@pytest.fixture(scope="module")
def session(tmp_path_factory):
    """advise writes each config; then one `run --json` trains on them all. Returns what each printed."""
    folder = tmp_path_factory.mktemp("advised")
    advised, paths = {}, []
    for choice, flags in ADVISE.items():
        path = folder / file_name(choice)
        advised[choice] = in_process(["advise", *flags.split(), "--ds-config", str(path), "--json"])
        paths += ["--ds-config", str(path)]
    flags = f"--ranks 2 --steps {STEPS} --json".split()
    done = subprocess.run(  # as a user types it: `python -m zero_lessons run ...`
        [sys.executable, "-m", "zero_lessons", "run", *paths, *flags],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return folder, advised, (done.returncode, done.stdout, done.stderr)


def in_process(args: list[str]) -> tuple[int, str, str]:
    """The command line's entry point run in this process (a module fixture has no capsys)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err), pytest.raises(SystemExit) as stop:
        main(args)
    return stop.value.code, out.getvalue(), err.getvalue()


@pytest.mark.parametrize("choice", list(ADVISE), ids=file_name)
def test_advise_writes_a_config_for_each_stage_and_offload(session, choice):
    folder, advised, _ = session
    code, out, err = advised[choice]
    assert (code, err) == (0, "")
    answer = json.loads(out)
    assert (answer["stage"], answer["offload"]) == choice
    written = json.loads((folder / file_name(choice)).read_text())
    assert written == answer["ds_config"]
    assert (predict.stage_of(written), predict.device(written, "offload_optimizer")) == (
        choice[0],
        "none" if choice[1] == "none" else "cpu",
    )


def test_run_trains_every_config_and_every_rank_holds_the_prediction(session):
    code, out, err = session[2]
    assert (code, err) == (0, ""), err
    answer = json.loads(out)
    assert answer["as_predicted"] is True
    assert [c["config"] for c in answer["configs"]] == [file_name(c) for c in ADVISE]
    for choice, config in zip(ADVISE, answer["configs"], strict=True):
        assert config["not_predicted"] is None and config["differences"] == []
        ranks = config["ranks"]
        assert [(r["rank"], r["world"], r["stage"], r["offload"]) for r in ranks] == [
            (0, 2, *choice),
            (1, 2, *choice),
        ]
        for r, p in zip(ranks, config["predicted"], strict=True):
            assert r["held"] == p and r["total"] == sum(p.values())
            assert len(r["losses"]) == STEPS and all(math.isfinite(x) for x in r["losses"])
            assert r["skipped_steps"] == 0  # bf16: no loss scaling, so no step is skipped


def test_run_reports_the_checkpoint_consolidated_except_at_stage_0(session):
    """The script asserts the resumed state and the consolidated fp32 weights equal the trained ones (a
    failure fails the run); here, rank 0 rebuilt every tensor, and a stage-0 checkpoint has none to give."""
    for choice, config in zip(ADVISE, json.loads(session[2][1])["configs"], strict=True):
        first, second = config["ranks"]
        assert first["consolidated"] == (None if choice[0] == 0 else TENSORS)
        assert second["consolidated"] is None


def test_stage_3_halves_gradients_and_optimizer_state_and_offload_moves_no_weights(session):
    """The partitioning the advice is about, measured on 2 ranks: stage 3 holds half of stage 0's gradients
    and optimizer state (Ψ is a multiple of 2N: no padding), and more than half of its weights, because the
    small tensors stay whole under the persistence threshold."""
    by_name = {c["config"]: c["ranks"][0]["held"] for c in json.loads(session[2][1])["configs"]}
    zero0, zero3 = by_name[file_name((0, "none"))], by_name[file_name((3, "none"))]
    assert (2 * zero3["gradients"], 2 * zero3["optimizer"]) == (zero0["gradients"], zero0["optimizer"])
    assert zero0["weights"] / 2 < zero3["weights"] < zero0["weights"]
    for offload in ("optimizer", "optimizer+parameters"):
        assert by_name[file_name((3, offload))]["weights"] == zero3["weights"]


def test_nvme_offload_cannot_run_here_because_libaio_is_missing():
    """Why no NVMe config trains here: DeepSpeed's async-I/O extension links libaio, and this machine has no
    libaio to link (Debian's libaio-dev installs it)."""
    import ctypes.util

    from deepspeed.ops.op_builder import AsyncIOBuilder

    if AsyncIOBuilder().is_compatible(verbose=False):
        pytest.skip("DeepSpeed's async-I/O extension can be built here: NVMe offload is not refused for that")
    assert ctypes.util.find_library("aio") is None
