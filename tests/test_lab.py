"""The lab on real distributed PyTorch (gloo on 127.0.0.1): every rank's bytes and traffic equal the predictions."""

import json
import multiprocessing
import subprocess
import sys

import pytest

from conftest import need_module
from zero_lessons import lab
from zero_lessons.lab import predict, report

PSI = predict.param_count()

need_module("torch")


@pytest.fixture(scope="module")
def rows():
    """One full lab run (1, 2 and 4 ranks, every mode), shared by the tests below."""
    found, seconds = lab.run((1, 2, 4))
    print(f"\nlab matrix: {len(found)} rank reports in {seconds:.1f} s")
    return found


def by(rows, mode, gpus):
    return [r for r in rows if r.mode == mode and r.gpus == gpus]


def test_every_rank_matches_its_prediction(rows):
    assert len(rows) == len(lab.MODE_NAMES) * (1 + 2 + 4)
    assert [(r.mode, r.gpus, r.rank) for r in rows if not r.matches] == []


@pytest.mark.parametrize("mode", list(lab.MODE_NAMES))
@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_weights_and_gradients_are_the_same_on_every_rank(rows, mode, gpus):
    ranks = by(rows, mode, gpus)
    assert len({(r.measured["weights"], r.measured["gradients"]) for r in ranks}) == 1
    assert len({json.dumps(r.measured["traffic"], sort_keys=True) for r in ranks}) == 1


def test_ddp_is_the_paper_exactly(rows):
    for r in [r for r in rows if r.mode == "ddp"]:
        assert r.measured["weights"] + r.measured["gradients"] + r.measured["optimizer"] == 16 * PSI
        assert r.measured["traffic"] == {"all_reduce": PSI}  # 2Ψ by the paper's count


@pytest.mark.parametrize("mode", ["zero_redundancy_optimizer", "fsdp_reshard", "fsdp_no_reshard", "fsdp_bf16"])
@pytest.mark.parametrize("gpus", [2, 4])
def test_optimizer_state_is_split_unevenly_but_completely(rows, mode, gpus):
    shares = [r.measured["optimizer"] for r in by(rows, mode, gpus)]
    assert sum(shares) == 8 * PSI  # fp32 Adam: two 4-byte moments per parameter, each kept by exactly one rank
    assert len(set(shares)) > 1  # measured: neither framework splits it evenly for this model


def test_zero_redundancy_optimizer_sends_three_psi(rows):
    for r in [r for r in rows if r.mode == "zero_redundancy_optimizer"]:
        assert r.measured["traffic"] == {"all_reduce": PSI, "broadcast": PSI}


@pytest.mark.parametrize("gpus", [2, 4])
def test_fsdp_traffic_reshard_three_padded_psi_else_two(rows, gpus):
    padded = gpus * sum(predict.fsdp_padded(s, gpus) for s in predict.shapes(predict.WIDTHS))
    assert padded > PSI
    assert by(rows, "fsdp_reshard", gpus)[0].measured["traffic"] == {"all_gather": 2 * padded, "reduce_scatter": padded}
    assert by(rows, "fsdp_no_reshard", gpus)[0].measured["traffic"] == {"all_gather": padded, "reduce_scatter": padded}


@pytest.mark.parametrize("gpus", [2, 4])
def test_bf16_policy_halves_the_bytes_sent_but_not_the_state(rows, gpus):
    fp32, bf16 = by(rows, "fsdp_reshard", gpus)[0], by(rows, "fsdp_bf16", gpus)[0]
    assert {k: bf16.measured[k] for k in lab.FIELDS} == {k: fp32.measured[k] for k in lab.FIELDS}
    assert bf16.measured["traffic"] == fp32.measured["traffic"]
    assert {op: 2 * n for op, n in bf16.measured["traffic_bytes"].items()} == fp32.measured["traffic_bytes"]


def test_single_rank_fsdp_sends_nothing(rows):
    assert all(r.measured["traffic"] == {} for r in rows if r.gpus == 1 and r.mode.startswith("fsdp"))


def test_report_renders(rows):
    text = report.to_text(rows)
    groups = len(lab.MODE_NAMES) * 3  # one line per framework and world size
    assert text.count("\n") == groups and " NO" not in text
    assert report.Report(tuple(rows))._repr_html_().count("<tr>") == groups + 1
    assert "7200 / 3120 / 1200 / 520" in text  # ZeroRedundancyOptimizer's uneven shares on 4 ranks


def test_a_failing_rank_fails_the_lab_cleanly():
    with pytest.raises(lab.LabError, match="mode must be one of"):
        lab.run((2,), modes=("nonsense",), timeout=60)
    assert multiprocessing.active_children() == []


def test_parent_never_imports_torch_and_cli_runs_the_lab():
    code = ("import sys, zero_lessons.lab, zero_lessons.lab.report, zero_lessons.lab.predict; "
            "print('torch' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"
    out = subprocess.run([sys.executable, "-m", "zero_lessons", "lab", "--ranks", "1", "--json"], capture_output=True,
                         text=True, timeout=180)
    assert out.returncode == 0, out.stderr[-2000:]
    data = json.loads(out.stdout)
    assert len(data["rows"]) == len(lab.MODE_NAMES) and all(r["matches"] for r in data["rows"])
    bad = subprocess.run([sys.executable, "-m", "zero_lessons", "lab", "--ranks", "1,99"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--ranks" in bad.stderr
