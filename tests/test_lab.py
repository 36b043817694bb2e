"""The lab on real distributed PyTorch and DeepSpeed (gloo on 127.0.0.1): every rank's bytes and traffic equal
the predictions, and where the real code departs from the paper's formula, the test pins what it does."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import need_module
from zero_lessons import lab
from zero_lessons.lab import ds_predict, predict, report

PSI = predict.param_count()
SIZES = [predict.numel(s) for s in predict.shapes(predict.WIDTHS)]

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
def test_weights_and_traffic_are_the_same_on_every_rank(rows, mode, gpus):
    ranks = by(rows, mode, gpus)
    assert len({r.measured["weights"] for r in ranks}) == 1
    assert len({json.dumps(r.measured["traffic"], sort_keys=True) for r in ranks}) == 1
    assert len({json.dumps(r.measured.get("messages")) for r in ranks}) == 1


@pytest.mark.parametrize("mode", [m for m in lab.MODE_NAMES if m not in ("ds_zero1", "ds_zero2", "ds_zero2_reduce")])
@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_gradients_are_the_same_on_every_rank(rows, mode, gpus):
    assert len({r.measured["gradients"] for r in by(rows, mode, gpus)}) == 1


@pytest.mark.parametrize("mode", ["ds_zero1", "ds_zero2", "ds_zero2_reduce"])
def test_deepspeed_stage_1_and_2_keep_whole_gradients_of_every_parameter_touching_their_slice(rows, mode):
    """Measured: not every rank holds the same gradient bytes. Rank r keeps each parameter overlapping its slice
    of the flat buffer whole (so the 30x30 weight is kept twice), plus the flat buffer's padding on the last rank."""
    assert [r.measured["gradients"] for r in by(rows, mode, 2)] == [2 * (390 + 30 + 900), 2 * (900 + 30 + 150 + 5 + 3)]
    assert [r.measured["gradients"] for r in by(rows, mode, 4)] == [2 * 390, 2 * (390 + 30 + 900), 2 * 900,
                                                                     2 * (900 + 30 + 150 + 5 + 7)]
    assert by(rows, mode, 1)[0].measured["gradients"] == 2 * (PSI + 1)


def test_ddp_and_deepspeed_stage_0_are_the_paper_exactly(rows):
    for r in [r for r in rows if r.mode == "ds_zero0"]:
        assert r.measured["weights"] + r.measured["gradients"] + r.measured["optimizer"] == 16 * PSI
        assert r.measured["messages"] == [("all_reduce", PSI, "bfloat16")]  # 2Ψ by the paper's count, 2 bytes each
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


def messages(rows, mode, gpus):
    return by(rows, mode, gpus)[0].measured["messages"]


CONTROL_1_2 = [("all_reduce", 1, "float32"), ("all_reduce", 1, "uint8")]  # gradient norm, overflow flag


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_deepspeed_stages_1_and_2_hold_and_send_the_same_at_this_size(rows, gpus):
    """Both all-reduce the whole gradient (the default multi-rank bucket all-reduce), then all-gather the padded
    bf16 buffer: about 3Ψ by the paper's count, not its 2Ψ. After the backward pass both hold the same bytes."""
    one, two = by(rows, "ds_zero1", gpus), by(rows, "ds_zero2", gpus)
    assert [{k: r.measured[k] for k in lab.FIELDS} for r in one] == [{k: r.measured[k] for k in lab.FIELDS} for r in two]
    flat = ds_predict.padded_flat(PSI, gpus)
    gather = [("all_gather", flat, "bfloat16")] if gpus > 1 else []
    assert messages(rows, "ds_zero1", gpus) == messages(rows, "ds_zero2", gpus) == sorted(
        [("all_reduce", PSI, "bfloat16"), *CONTROL_1_2, *gather])
    assert {1: 1506, 2: 1508, 4: 1512}[gpus] == flat  # padded to a multiple of 2N


@pytest.mark.parametrize("gpus", [2, 4])
def test_deepspeed_stage_2_without_bucket_all_reduce_reduces_to_owners(rows, gpus):
    found = messages(rows, "ds_zero2_reduce", gpus)
    reduces = [n for op, n, dtype in found if op == "reduce"]
    assert sum(reduces) == PSI and len(reduces) == gpus  # one reduce per owner: Ψ in all, so ≈ 2Ψ with the gather
    assert sorted(reduces) == sorted({2: [754, 751], 4: [378, 378, 378, 371]}[gpus])


@pytest.mark.parametrize("gpus", [2, 4])
def test_deepspeed_stage_3_shards_each_parameter_evenly_and_reuses_gathered_parameters(rows, gpus):
    piece = sum(-(-n // gpus) for n in SIZES)
    assert piece == {2: 753, 4: 379}[gpus]
    for r in by(rows, "ds_zero3", gpus):
        assert (r.measured["weights"], r.measured["gradients"], r.measured["optimizer"]) == (2 * piece, 2 * piece,
                                                                                            12 * piece)
    steady = by(rows, "ds_zero3", gpus)[0].measured
    assert steady["traffic"] == {"all_gather": gpus * piece, "reduce_scatter": gpus * piece, "all_reduce": 1}
    # The first step has no trace yet: it gathers layer by layer, in the forward pass and again in the backward pass.
    assert steady["first_step_traffic"]["all_gather"] == 2 * gpus * piece
    no_reuse = by(rows, "ds_zero3_no_reuse", gpus)[0].measured["traffic"]
    assert no_reuse == {"all_gather": 2 * gpus * piece, "reduce_scatter": gpus * piece, "all_reduce": 1}  # the 3Ψ
    # The reuse distance alone changes nothing here: the prefetcher already passed every backward use.
    assert by(rows, "ds_zero3_reuse0", gpus)[0].measured["messages"] == by(rows, "ds_zero3", gpus)[0].measured["messages"]


@pytest.mark.parametrize("gpus", [2, 4])
def test_deepspeed_default_persistence_keeps_small_parameters_whole(rows, gpus):
    sharded, kept = by(rows, "ds_zero3", gpus)[0].measured, by(rows, "ds_zero3_persistent", gpus)[0].measured
    whole = sum(gpus * -(-n // gpus) for n in SIZES)  # every parameter of this model is under 100,000 elements
    assert kept["weights"] == sharded["weights"] + 2 * whole
    assert sorted(n for op, n, _ in messages(rows, "ds_zero3_persistent", gpus) if op == "all_gather") == sorted(
        gpus * -(-n // gpus) for n in SIZES)  # each rebuilt after the step, one call per parameter


def test_deepspeed_on_one_rank_stage_3_never_gathers(rows):
    for mode in ("ds_zero3", "ds_zero3_no_reuse", "ds_zero3_persistent"):
        one = by(rows, mode, 1)[0].measured
        assert "all_gather" not in one["traffic"] and one["weights"] == 2 * PSI


def test_deepspeed_bookkeeping_is_reported_apart(rows):
    for r in rows:
        expected = {0: 0, 1: 4, 2: 4, 3: 9}[ds_predict.ZERO_CONFIG[r.mode]["stage"]] if r.mode.startswith("ds_") else 0
        assert r.measured["other"] == expected  # fp32 norm (stages 1-2); fp64 norm + bool flag (stage 3)


def test_report_renders(rows):
    text = report.to_text(rows)
    groups = len(lab.MODE_NAMES) * 3  # one line per framework and world size
    assert text.count("\n") == groups and " NO" not in text
    assert report.Report(tuple(rows))._repr_html_().count("<tr>") == groups + 1
    assert "7200 / 3120 / 1200 / 520" in text  # ZeroRedundancyOptimizer's uneven shares on 4 ranks
    only = report.Report.of(rows, lab.DEEPSPEED_NAMES)
    assert repr(only).count("\n") == len(lab.DEEPSPEED_NAMES) * 3 and "DDP" not in repr(only)
    assert "24080" in repr(only)  # the paper's 16Ψ for stage 0, from the mixed-precision recipe


def test_a_failing_rank_fails_the_lab_cleanly():
    with pytest.raises(lab.LabError, match="mode must be one of"):
        lab.run((2,), modes=("nonsense",), timeout=60)
    assert multiprocessing.active_children() == []


def _signal_a_rank(sig: int, after: float) -> threading.Thread:
    """From a thread: once the lab's two ranks are running, wait `after` seconds and send `sig` to the second."""
    def send():
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            ranks = sorted(p.pid for p in multiprocessing.active_children())
            if len(ranks) == 2:
                time.sleep(after)
                os.kill(ranks[1], sig)
                return
            time.sleep(0.05)
    thread = threading.Thread(target=send, daemon=True)
    thread.start()
    return thread


def test_a_killed_rank_fails_the_lab_and_stops_the_other():
    thread, start = _signal_a_rank(signal.SIGKILL, after=1), time.monotonic()
    with pytest.raises(lab.LabError, match=r"rank \d"):  # "rank 1 exited with -9 ..." or the survivor's own failure
        lab.run((2,), modes=("ddp",), timeout=60)
    thread.join()
    assert time.monotonic() - start < 40
    assert multiprocessing.active_children() == []


def test_a_hung_rank_times_out_instead_of_hanging():
    thread, start = _signal_a_rank(signal.SIGSTOP, after=0.5), time.monotonic()  # alive, but never answers
    with pytest.raises(lab.LabError, match="no answer after 5 s"):
        lab.run((2,), modes=("ddp",), timeout=5)
    thread.join()
    assert time.monotonic() - start < 30  # the timeout, then terminate (ignored while stopped), then kill
    assert multiprocessing.active_children() == []


def test_parent_never_imports_torch_and_cli_runs_the_lab():
    code = ("import sys, zero_lessons.lab, zero_lessons.lab.report, zero_lessons.lab.predict, zero_lessons.lab.ds_predict; "
            "print('torch' in sys.modules, 'deepspeed' in sys.modules)")
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    assert found == "False False"
    out = subprocess.run([sys.executable, "-m", "zero_lessons", "lab", "--ranks", "1", "--json"], capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr == ""  # what the ranks print (DeepSpeed's warnings, its build) goes to their logs
    data = json.loads(out.stdout)
    assert len(data["rows"]) == len(lab.MODE_NAMES) and all(r["matches"] for r in data["rows"])
    bad = subprocess.run([sys.executable, "-m", "zero_lessons", "lab", "--ranks", "1,99"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--ranks" in bad.stderr
    bad = subprocess.run([sys.executable, "-m", "zero_lessons", "lab", "--modes", "ds_zero9"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--modes" in bad.stderr and "ds_zero3" in bad.stderr


def test_cli_runs_chosen_modes_only():
    out = subprocess.run([sys.executable, "-m", "zero_lessons", "lab", "--ranks", "2", "--modes", "ds_zero3,ddp", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)["rows"]
    assert [(r["mode"], r["rank"]) for r in rows] == [("ddp", 0), ("ddp", 1), ("ds_zero3", 0), ("ds_zero3", 1)]
    assert all(r["matches"] for r in rows)


def _children(pid: int) -> list[int]:
    """Every descendant of `pid`, read from /proc."""
    parents = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    parents[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    found, frontier = [], [pid]
    while frontier:
        kids = [p for p, parent in parents.items() if parent in frontier]
        found += kids
        frontier = kids
    return found


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the process table from /proc")
@pytest.mark.parametrize("whole_group", [True, False], ids=["terminal-ctrl-c", "kernel-interrupt"])
def test_ctrl_c_stops_the_lab_and_leaves_no_process_behind(whole_group):
    """A terminal's Ctrl-C reaches every process in the foreground group; Jupyter's "interrupt kernel" reaches only
    the kernel, so then the parent alone must stop the ranks."""
    proc = subprocess.Popen([sys.executable, "-m", "zero_lessons", "lab", "--ranks", "4"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline, kids = time.monotonic() + 60, []
    while time.monotonic() < deadline and len(kids) < 5:  # four ranks and multiprocessing's resource tracker
        kids = _children(proc.pid)
        time.sleep(0.2)
    assert len(kids) >= 4, kids
    time.sleep(3)  # the ranks are importing torch or training by now
    (os.killpg if whole_group else os.kill)(proc.pid, signal.SIGINT)
    interrupted = time.monotonic()
    proc.communicate(timeout=60)
    assert proc.returncode == 130
    assert time.monotonic() - interrupted < 10  # stopped, not left to finish the lab (about 20 s on 4 ranks)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(_alive(k) for k in kids):
        time.sleep(0.2)
    assert [k for k in kids if _alive(k)] == []
