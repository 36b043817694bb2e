"""The lab on real distributed PyTorch and DeepSpeed (gloo on 127.0.0.1): every rank's bytes and traffic equal
the predictions, and where the real code departs from the paper's formula, the test pins what it does.

The matrix (1, 2 and 4 ranks, every mode) runs once per session, in the `lab_run` fixture. That fixture also
lets lessons 10 and 11, which nbval executes later in the same `make test`, reuse this run instead of
starting the ranks again (see `zero_lessons.lab.reuse`).
"""

import ipaddress
import json
import multiprocessing
import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field

import pytest

from conftest import need_module
from zero_lessons import lab
from zero_lessons.lab import modes, predict_deepspeed, predict_torch, report, reuse
from zero_lessons.lab.model import MODEL
from zero_lessons.lab.results import FIELDS, Message, Results

PSI = MODEL.param_count
SIZES = MODEL.sizes
LISTEN = "0A"  #: the state of a listening socket in /proc/net/tcp

need_module("torch")


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """An address as /proc/net/tcp{,6} writes it (hex, 32-bit words in host order); IPv4-mapped as IPv4."""
    words = bytes.fromhex(text.split(":")[0])
    raw = b"".join(words[i : i + 4][::-1] for i in range(0, len(words), 4))
    address = ipaddress.ip_address(raw)
    return getattr(address, "ipv4_mapped", None) or address


def _sockets(pid: int) -> set[tuple[str, str, str]]:
    """The TCP sockets process `pid` holds, as (local, remote, state) lines of its /proc/<pid>/net/tcp{,6}."""
    try:
        links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        tables = [open(f"/proc/{pid}/net/{name}").read().splitlines()[1:] for name in ("tcp", "tcp6")]
    except OSError:  # it ended, or closed a descriptor while we looked
        return set()
    inodes = {link[len("socket:[") : -1] for link in links if link.startswith("socket:[")}
    return {(f[1], f[2], f[3]) for table in tables for f in map(str.split, table) if f[9] in inodes}


@contextmanager
def _recording_sockets():
    """While the block runs, record every TCP socket held by this process's descendants: the lab's ranks and
    whatever they start. Read from /proc, not multiprocessing, whose bookkeeping the lab itself is using."""
    found: set[tuple[str, str, str]] = set()
    done = threading.Event()

    def poll():
        while not done.is_set():
            for pid in _children(os.getpid()):
                found.update(_sockets(pid))
            time.sleep(0.1)

    thread = threading.Thread(target=poll, daemon=True)
    thread.start()
    try:
        yield found
    finally:
        done.set()
        thread.join()


def _another_interface() -> str | None:
    """A non-loopback network interface with an IPv4 address, where gloo could bind; None if none."""
    import fcntl
    import socket
    import struct

    with socket.socket() as sock:
        for _, name in socket.if_nameindex():
            try:
                request = struct.pack("256s", name.encode()[:15])
                address = socket.inet_ntoa(fcntl.ioctl(sock.fileno(), 0x8915, request)[20:24])  # SIOCGIFADDR
            except OSError:
                continue
            if not address.startswith("127."):
                return name
    return None


@dataclass(frozen=True)
class LabRun:
    """The session's lab run, and what was seen while it ran."""

    results: Results = field(repr=False)  #: every mode on 1, 2 and 4 ranks
    seconds: float  #: its wall time
    sockets: frozenset  #: every TCP socket its ranks held, as (local, remote, state) in /proc's hex
    interface: str | None  #: the non-loopback interface GLOO_SOCKET_IFNAME named during the run, if any


@pytest.fixture(scope="session")
def lab_run(tmp_path_factory):
    """One full lab run, shared by the tests below and by lessons 10 and 11 later in the session.

    It runs with GLOO_SOCKET_IFNAME naming a non-loopback interface, where the machine has one, so that
    the ranks must bind to loopback on their own; meanwhile a thread records the ranks' sockets.
    """
    os.environ[reuse.ENV] = str(tmp_path_factory.mktemp("lab-reuse"))
    before, interface = os.environ.get("GLOO_SOCKET_IFNAME"), _another_interface()
    if interface:
        os.environ["GLOO_SOCKET_IFNAME"] = interface
    try:
        with _recording_sockets() as sockets:
            # The step timelines ride along in the same ranks; tests/test_lab_timeline.py reuses them.
            results, seconds = lab.run((1, 2, 4), steps=tuple(lab.STEP_NAMES))
    finally:
        os.environ.pop("GLOO_SOCKET_IFNAME", None)
        if before is not None:
            os.environ["GLOO_SOCKET_IFNAME"] = before
    print(f"\nlab matrix: {len(results)} rank reports in {seconds:.1f} s")
    yield LabRun(results, seconds, frozenset(sockets), interface)
    os.environ.pop(reuse.ENV, None)


@pytest.fixture
def rows(lab_run) -> Results:
    return lab_run.results


def test_every_rank_matches_its_prediction(rows):
    assert len(rows) == len(lab.MODE_NAMES) * (1 + 2 + 4)
    assert [(r.mode, r.gpus, r.rank) for r in rows if not r.matches] == []
    assert rows.matches


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="reads the sockets from /proc")
def test_every_socket_of_every_rank_is_on_loopback(lab_run):
    """The store's listener, gloo's pair sockets and every connection: all on 127.0.0.1, even when the
    environment names another interface for gloo."""
    states = {state for _, _, state in lab_run.sockets}
    assert LISTEN in states and "01" in states, lab_run.sockets  # listeners and established ones were seen
    loopback = ipaddress.ip_address("127.0.0.1")
    elsewhere = [
        (_address(local), _address(remote), state)
        for local, remote, state in lab_run.sockets
        if _address(local) != loopback
        or (_address(remote) != loopback and not (state == LISTEN and _address(remote).is_unspecified))
    ]
    assert elsewhere == [], f"GLOO_SOCKET_IFNAME was {lab_run.interface!r} in the parent"


@pytest.mark.parametrize("mode", list(lab.MODE_NAMES))
@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_weights_and_traffic_are_the_same_on_every_rank(rows, mode, gpus):
    ranks = rows.ranks(mode, gpus)
    assert len(ranks) == gpus
    assert len({r.measured.held.weights for r in ranks}) == 1
    assert len({r.measured.traffic.messages for r in ranks}) == 1


@pytest.mark.parametrize(
    "mode", [m for m in lab.MODE_NAMES if m not in ("ds_zero1", "ds_zero2", "ds_zero2_reduce")]
)
@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_gradients_are_the_same_on_every_rank(rows, mode, gpus):
    assert len({r.measured.held.gradients for r in rows.ranks(mode, gpus)}) == 1


@pytest.mark.parametrize("mode", ["ds_zero1", "ds_zero2", "ds_zero2_reduce"])
def test_deepspeed_stage_1_and_2_keep_whole_gradients_of_every_parameter_touching_their_slice(rows, mode):
    """Measured: not every rank holds the same gradient bytes. Rank r keeps each parameter overlapping its
    slice of the flat buffer whole (so the 30x30 weight is kept twice), plus the flat buffer's padding on
    the last rank."""

    def gradients(gpus):
        return [r.measured.held.gradients for r in rows.ranks(mode, gpus)]

    assert gradients(2) == [2 * (390 + 30 + 900), 2 * (900 + 30 + 150 + 5 + 3)]
    assert gradients(4) == [2 * 390, 2 * (390 + 30 + 900), 2 * 900, 2 * (900 + 30 + 150 + 5 + 7)]
    assert gradients(1) == [2 * (PSI + 1)]


def test_deepspeed_stage_1_holds_every_gradient_whole_as_its_reduction_starts(rows):
    """Measured inside `reduce_gradients`: every rank holds all Ψ bf16 gradients, unpadded, beside its padded
    weights and optimizer slice, so on 2 and 4 ranks stage 1 peaks above what it keeps after backward.
    No other mode reduces after backward, and none reports it."""
    for r in rows.of("ds_zero1"):
        before, after = r.measured.before_reduction, r.measured.held
        assert before.gradients == 2 * PSI and before.weights == after.weights
        assert before.optimizer == after.optimizer
        # one rank: the flat buffer's one padding element makes the kept gradients 2 bytes larger
        assert before.states > after.states if r.gpus > 1 else before.states == after.states - 2
    assert {r.measured.before_reduction for r in rows if r.mode != "ds_zero1"} == {None}


def test_ddp_and_deepspeed_stage_0_are_the_paper_exactly(rows):
    for r in rows.of("ds_zero0"):
        assert r.measured.held.states == 16 * PSI
        assert r.measured.traffic.messages == (
            Message("all_reduce", PSI, "bfloat16"),
        )  # 2Ψ by the paper, 2 B each
    for r in rows.of("ddp"):
        assert r.measured.held.states == 16 * PSI
        assert r.measured.traffic.elements == {"all_reduce": PSI}  # 2Ψ by the paper's count
        assert r.measured.traffic.paper_elements == 2 * PSI


@pytest.mark.parametrize(
    "mode", ["zero_redundancy_optimizer", "fsdp_reshard", "fsdp_no_reshard", "fsdp_bf16"]
)
@pytest.mark.parametrize("gpus", [2, 4])
def test_optimizer_state_is_split_unevenly_but_completely(rows, mode, gpus):
    shares = [r.measured.held.optimizer for r in rows.ranks(mode, gpus)]
    assert (
        sum(shares) == 8 * PSI
    )  # fp32 Adam: two 4-byte moments per parameter, each kept by exactly one rank
    assert len(set(shares)) > 1  # measured: neither framework splits it evenly for this model


def test_zero_redundancy_optimizer_sends_three_psi(rows):
    for r in rows.of("zero_redundancy_optimizer"):
        assert r.measured.traffic.elements == {"all_reduce": PSI, "broadcast": PSI}
        assert r.measured.traffic.paper_elements == 3 * PSI


@pytest.mark.parametrize("gpus", [2, 4])
def test_fsdp_traffic_reshard_three_padded_psi_else_two(rows, gpus):
    padded = gpus * sum(predict_torch.fsdp_padded(s, gpus) for s in MODEL.shapes)
    assert padded > PSI
    assert rows.get("fsdp_reshard", gpus).measured.traffic.elements == {
        "all_gather": 2 * padded,
        "reduce_scatter": padded,
    }
    assert rows.get("fsdp_no_reshard", gpus).measured.traffic.elements == {
        "all_gather": padded,
        "reduce_scatter": padded,
    }


@pytest.mark.parametrize("gpus", [2, 4])
def test_bf16_policy_halves_the_bytes_sent_but_not_the_state(rows, gpus):
    fp32, bf16 = rows.get("fsdp_reshard", gpus).measured, rows.get("fsdp_bf16", gpus).measured
    assert bf16.held == fp32.held
    assert bf16.traffic.elements == fp32.traffic.elements
    assert {op: 2 * n for op, n in bf16.traffic.nbytes.items()} == fp32.traffic.nbytes


def test_single_rank_fsdp_sends_nothing(rows):
    assert all(r.measured.traffic.elements == {} for r in rows if r.gpus == 1 and r.mode.startswith("fsdp"))


CONTROL_1_2 = [
    Message("all_reduce", 1, "float32"),
    Message("all_reduce", 1, "uint8"),
]  # gradient norm, overflow flag


def _bf16(row, op: str) -> list[int]:
    """Elements of each bf16 message of one collective in the measured steady-state step, sorted."""
    return sorted(m.elements for m in row.measured.traffic.messages if m.op == op and m.dtype == "bfloat16")


@pytest.mark.parametrize("gpus", [1, 2, 4])
def test_deepspeed_stages_1_and_2_all_reduce_bucket_by_bucket(rows, gpus):
    """With 1,000-element buckets the gradients fill three buckets, each all-reduced whole (the default
    multi-rank bucket all-reduce): Ψ all-reduced, then the padded bf16 buffer all-gathered, about 3Ψ by the
    paper's count, not its 2Ψ. Stage 1 fills its buckets after backward in forward order (420 | 930 | 155);
    stage 2 during backward, last layer first, each bias before its weight (185 | 930 | 390). After the
    backward pass both hold the same bytes."""
    one, two = rows.ranks("ds_zero1", gpus), rows.ranks("ds_zero2", gpus)
    assert [r.measured.held for r in one] == [r.measured.held for r in two]
    assert _bf16(one[0], "all_reduce") == [155, 420, 930] and 420 == 390 + 30 and 155 == 150 + 5
    assert _bf16(two[0], "all_reduce") == [185, 390, 930] and 185 == 5 + 150 + 30
    flat = predict_deepspeed.padded_flat(PSI, gpus)
    assert {1: 1506, 2: 1508, 4: 1512}[gpus] == flat  # padded to a multiple of 2N
    for row in (one[0], two[0]):
        assert _bf16(row, "all_gather") == (
            [flat] if gpus > 1 else []
        )  # allgather_bucket_size splits nothing
        assert sorted(m for m in row.measured.traffic.messages if m.dtype != "bfloat16") == CONTROL_1_2
        assert row.measured.traffic.paper_elements == 2 * PSI + (flat if gpus > 1 else 0) + 2 * 2


@pytest.mark.parametrize("gpus", [2, 4])
def test_deepspeed_stage_2_without_bucket_all_reduce_reduces_each_bucket_to_its_owners(rows, gpus):
    """Each bucket is reduced once per rank whose slice it touches: Ψ in all, so ≈ 2Ψ with the gather.
    On 2 ranks (slices of 754) the 930-element bucket (the 30-bias and the 30x30 weight, flat positions 390
    to 1,319) straddles the boundary: 364 elements go to rank 0 and 566 to rank 1."""
    reduces = _bf16(rows.get("ds_zero2_reduce", gpus), "reduce")
    assert sum(reduces) == PSI and len(reduces) > gpus
    assert reduces == {2: [185, 364, 390, 566], 4: [12, 185, 186, 366, 378, 378]}[gpus]
    assert 364 == 754 - 390 and 566 == 1_320 - 754


@pytest.mark.parametrize("gpus", [2, 4])
def test_deepspeed_stage_3_shards_each_parameter_and_reduce_scatters_bucket_by_bucket(rows, gpus):
    piece = sum(
        -(-n // gpus) for n in SIZES
    )  # ceil(n/N) elements of each parameter, written out independently
    assert piece == {2: 753, 4: 379}[gpus]
    for mode in ("ds_zero3", "ds_zero3_short_reuse", "ds_zero3_reuse0", "ds_zero3_no_reuse"):
        for r in rows.ranks(mode, gpus):
            held = r.measured.held
            assert (held.weights, held.gradients, held.optimizer) == (2 * piece, 2 * piece, 12 * piece)
        # backward: the last layer (155), then the 30x30 weight and its bias (930), then the first layer
        # (420), each tensor padded to N pieces
        assert _bf16(rows.get(mode, gpus), "reduce_scatter") == {2: [156, 420, 930], 4: [160, 424, 932]}[gpus]


@pytest.mark.parametrize("gpus", [2, 4])
def test_deepspeed_stage_3_reuses_what_the_next_uses_need(rows, gpus):
    """What stage 3 gathers again in backward depends on the reuse distance. Layer sizes padded to N pieces:
    420 | 930 | 155 on 2 ranks, 424 | 932 | 160 on 4."""
    first, middle, last = {2: (420, 930, 156), 4: (424, 932, 160)}[gpus]
    once = first + middle + last

    def gathered(mode):
        return sum(_bf16(rows.get(mode, gpus), "all_gather"))

    assert gathered("ds_zero3") == once  # default distance (10^9): all kept from forward to backward: ≈ 2Ψ
    assert len(_bf16(rows.get("ds_zero3", gpus), "all_gather")) == 3  # in three prefetches of ≤ 500 or so
    assert gathered("ds_zero3_short_reuse") == once + first  # 400: the last two layers kept
    assert (
        gathered("ds_zero3_reuse0") == once + first + middle
    )  # 0: only what prefetch had passed (last layer)
    assert gathered("ds_zero3_no_reuse") == 2 * once  # no prefetch either: every layer twice, the paper's 3Ψ
    # The first step has no trace yet: it gathers layer by layer, in the forward pass and again in backward.
    assert rows.get("ds_zero3", gpus).measured.first_step.elements["all_gather"] == 2 * once


@pytest.mark.parametrize("gpus", [2, 4])
def test_deepspeed_default_persistence_keeps_small_parameters_whole(rows, gpus):
    sharded, kept = rows.get("ds_zero3", gpus).measured, rows.get("ds_zero3_persistent", gpus).measured
    whole = sum(
        gpus * -(-n // gpus) for n in SIZES
    )  # every parameter of this model is under 100,000 elements
    assert kept.held.weights == sharded.held.weights + 2 * whole
    assert sorted(m.elements for m in kept.traffic.messages if m.op == "all_gather") == sorted(
        gpus * -(-n // gpus) for n in SIZES
    )  # each rebuilt after the step, one call per parameter


def test_deepspeed_on_one_rank_stage_3_never_gathers(rows):
    for mode in ("ds_zero3", "ds_zero3_no_reuse", "ds_zero3_persistent"):
        one = rows.get(mode, 1).measured
        assert _bf16(rows.get(mode, 1), "reduce_scatter") == [155, 420, 930]  # still one per bucket
        assert "all_gather" not in one.traffic.elements and one.held.weights == 2 * PSI


def test_deepspeed_bookkeeping_is_reported_apart(rows):
    for r in rows:
        stage = modes.get(r.mode).stage
        expected = {0: 0, 1: 4, 2: 4, 3: 9}[stage] if r.mode.startswith("ds_") else 0
        assert r.measured.held.other == expected  # fp32 norm (stages 1-2); fp64 norm + bool flag (stage 3)


def test_report_renders(rows):
    text = report.to_text(rows)
    groups = len(lab.MODE_NAMES) * 3  # one line per framework and world size
    assert text.count("\n") == groups and " NO" not in text
    assert report.Report(rows)._repr_html_().count("<tr>") == groups + 1
    assert "7,200 / 3,120 / 1,200 / 520" in text  # ZeroRedundancyOptimizer's uneven shares on 4 ranks
    only = report.Report.of(rows, lab.DEEPSPEED_NAMES)
    assert repr(only).count("\n") == len(lab.DEEPSPEED_NAMES) * 3 and "DDP" not in repr(only)
    assert "24,080" in repr(only)  # the paper's 16Ψ for stage 0, from the mixed-precision recipe
    data = report.to_dict(rows)
    assert data[0]["measured"]["held"].keys() == set(FIELDS) and all(row["matches"] for row in data)


def test_results_lookups_name_what_is_missing(rows):
    assert [r.rank for r in rows.ranks("fsdp_bf16", 4)] == [0, 1, 2, 3]
    assert rows.get("fsdp_bf16", 4, rank=3) is rows.ranks("fsdp_bf16", 4)[3]
    with pytest.raises(ValueError, match=r"no mode 'ddp' on gpus=3; it has modes ddp, .* on gpus 1, 2, 4"):
        rows.get("ddp", 3)
    with pytest.raises(ValueError, match="rank must be a whole number from 0 to 1, got 2"):
        rows.get("ddp", 2, rank=2)


def test_the_session_reuses_its_run_and_only_the_same_run(lab_run, tmp_path, monkeypatch):
    """Lessons 10 and 11 call `lab.run((1, 2, 4))` in this session: they get these measurements without
    starting a rank, with predictions computed again. Another matrix, or reuse switched off, finds nothing."""
    start = time.monotonic()
    again, seconds = lab.run((1, 2, 4))
    assert time.monotonic() - start < 5 and multiprocessing.active_children() == []
    assert again == lab_run.results and seconds == lab_run.seconds
    assert reuse.load((1, 2), tuple(lab.MODE_NAMES)) is None
    monkeypatch.delenv(reuse.ENV)
    assert reuse.load((1, 2, 4), tuple(lab.MODE_NAMES)) is None


def test_the_reuse_key_changes_with_any_source_file(tmp_path, monkeypatch):
    matrix = ((1, 2, 4), tuple(lab.MODE_NAMES))
    package = tmp_path / "zero_lessons"
    (package / "lab").mkdir(parents=True)
    for path in reuse.PACKAGE.rglob("*.py"):
        target = package / path.relative_to(reuse.PACKAGE)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    monkeypatch.setattr(reuse, "PACKAGE", package)
    first = reuse.key(*matrix)
    assert reuse.key(*matrix) == first
    with (package / "lab" / "rank_torch.py").open("a") as source:
        source.write("# a change\n")
    assert reuse.key(*matrix) != first
    monkeypatch.setattr(reuse, "_version", lambda name: "0.0.other")
    assert len({first, reuse.key(*matrix), reuse.key((1, 2), matrix[1])}) == 3


def test_modes_are_deepspeeds_own_settings_with_its_defaults():
    """Each DeepSpeed mode's settings parse with DeepSpeed's own schema (which refuses unknown keys), and the
    defaults the predictions assume are DeepSpeed's."""
    config = need_module("deepspeed.runtime.zero.config")
    for mode in modes.MODES:
        if mode.framework == modes.DEEPSPEED:
            parsed = config.DeepSpeedZeroConfig(**modes.deepspeed_config(mode)["zero_optimization"])
            assert int(parsed.stage) == mode.stage
    defaults = config.DeepSpeedZeroConfig(stage=3).model_dump(by_alias=True)
    assert {name: defaults[name] for name in predict_deepspeed.DEFAULTS} == predict_deepspeed.DEFAULTS
    with pytest.raises(Exception, match="stage3_max_reuse_distanc"):
        config.DeepSpeedZeroConfig(stage=3, stage3_max_reuse_distanc=0)


def test_bad_input_is_refused_before_any_rank_starts():
    for kwargs, error, message in [
        ({"ranks": (1, 9)}, ValueError, "ranks must be a whole number from 1 to 8, got 9"),
        ({"ranks": 2}, TypeError, "ranks must be a non-empty tuple"),
        ({"ranks": ()}, TypeError, "ranks must be a non-empty tuple"),
        ({"modes": ("nonsense",)}, ValueError, "mode must be one of ddp, .*, got 'nonsense'"),
        ({"modes": "ddp"}, TypeError, "modes must be a non-empty tuple"),
        ({"timeout": 0}, ValueError, "timeout must be a number > 0"),
    ]:
        with pytest.raises(error, match=message):
            lab.run(**kwargs)
    assert multiprocessing.active_children() == []


def test_a_failing_rank_fails_the_lab_cleanly(tmp_path, monkeypatch):
    """A rank whose DeepSpeed cannot be imported (a broken install, here a stand-in on the ranks' path)."""
    (tmp_path / "deepspeed").mkdir()
    (tmp_path / "deepspeed" / "__init__.py").write_text(
        "raise ImportError('deepspeed is broken on purpose')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))  # spawned ranks start with the parent's sys.path
    with pytest.raises(lab.LabError, match=r"(?s)rank \d of 2 failed:.*deepspeed is broken on purpose"):
        lab.run((2,), modes=("ds_zero0",), timeout=60)
    assert multiprocessing.active_children() == []


def _signal_a_rank(sig: int, after: float) -> threading.Thread:
    """From a thread: once the lab's two ranks run, wait `after` seconds and send `sig` to the second."""

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
    with pytest.raises(
        lab.LabError, match=r"rank \d"
    ):  # "rank 1 exited with -9 ..." or the survivor's own failure
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
    parent_side = (
        "zero_lessons.lab",
        "zero_lessons.lab.report",
        "zero_lessons.lab.runner",
        "zero_lessons.lab.reuse",
        "zero_lessons.lab.predict_torch",
        "zero_lessons.lab.predict_deepspeed",
    )
    code = f"import sys, {', '.join(parent_side)}; print('torch' in sys.modules, 'deepspeed' in sys.modules)"
    found = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip()
    assert found == "False False"
    out = subprocess.run(
        [sys.executable, "-m", "zero_lessons", "lab", "--ranks", "1", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stderr == ""  # what the ranks print (DeepSpeed's warnings, its build) goes to their logs
    data = json.loads(out.stdout)
    assert len(data["rows"]) == len(lab.MODE_NAMES) and all(r["matches"] for r in data["rows"])
    bad = subprocess.run(
        [sys.executable, "-m", "zero_lessons", "lab", "--ranks", "1,99"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--ranks" in bad.stderr
    bad = subprocess.run(
        [sys.executable, "-m", "zero_lessons", "lab", "--modes", "ds_zero9"], capture_output=True, text=True
    )
    assert bad.returncode == 2 and "--modes" in bad.stderr and "ds_zero3" in bad.stderr


def test_cli_runs_chosen_modes_only():
    out = subprocess.run(
        [sys.executable, "-m", "zero_lessons", "lab", "--ranks", "2", "--modes", "ds_zero3,ddp", "--json"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    rows = json.loads(out.stdout)["rows"]
    assert [(r["mode"], r["rank"]) for r in rows] == [
        ("ddp", 0),
        ("ddp", 1),
        ("ds_zero3", 0),
        ("ds_zero3", 1),
    ]
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
    """A terminal's Ctrl-C reaches every process in the foreground group; Jupyter's "interrupt kernel"
    reaches only the kernel, so then the parent alone must stop the ranks."""
    # A real run, never one kept by the session's shared lab run (`reuse`), which would end at once.
    env = {key: value for key, value in os.environ.items() if key != reuse.ENV}
    proc = subprocess.Popen(
        [sys.executable, "-m", "zero_lessons", "lab", "--ranks", "4"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
        env=env,
        # A shell's background job (CI may run us as one) starts with SIGINT ignored, and Python keeps it
        # ignored; a terminal's foreground job never has it so, so give the lab the default disposition.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
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


@pytest.mark.parametrize("gpus", [2, 4])
def test_the_real_size_prediction_follows_the_rules_the_lab_measured(rows, gpus):
    """`planning.ds_scale` predicts a 7.5 B model from the same rules; run at the lab's size with the lab's
    settings, it gives exactly what the ranks measured: every bf16 message, and the fullest rank's bytes."""
    from zero_lessons.planning import ds_scale

    for mode in (
        "ds_zero0",
        "ds_zero1",
        "ds_zero2",
        "ds_zero2_reduce",
        *(m for m in lab.MODE_NAMES if m.startswith("ds_zero3") and m != "ds_zero3_persistent"),
    ):
        stage = modes.get(mode).stage
        found = ds_scale.predict(MODEL.layers, gpus, modes.ds_knobs(mode))[stage]
        measured = rows.ranks(mode, gpus)
        bf16 = sorted(
            (m.op, m.elements) for m in measured[0].measured.traffic.messages if m.dtype == "bfloat16"
        )
        assert sorted(found.messages) == bf16, mode
        assert found.held == max(r.measured.held.states for r in measured), mode
    pieces = gpus * sum(-(-n // gpus) for n in SIZES)
    # DeepSpeed's defaults at the lab's size: one bucket, every parameter reused: gathered once, ≈ 2Ψ
    assert ds_scale.predict(MODEL.layers, gpus)[3].sent == 2 * pieces
