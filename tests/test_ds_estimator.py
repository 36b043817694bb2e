"""The package's re-derivation of DeepSpeed's estimators, checked against DeepSpeed itself when installed."""

import contextlib
import io
import itertools
import re

import pytest

from conftest import need_module
from zero_lessons import GiB, memory, recipes
from zero_lessons.planning import ds_estimator
from zero_lessons.planning import offload as offload_plan

PSI = 7_500_000_000


def test_zero2_is_the_paper_with_fp32_gradients_added():
    # Without offload, DeepSpeed's stage 2 equals the paper's formula for 2 + 2 + 16 bytes
    # (the 20-byte count).
    for gpus in (1, 8, 64):
        ds = ds_estimator.zero2(PSI, gpus, cpu_offload=False)
        assert ds.gpu_bytes == memory.per_gpu(PSI, gpus, 2, recipes.INFINITY_20).total
        assert ds.gpu_bytes - memory.per_gpu(PSI, gpus, 2).total == 4 * PSI // gpus


def test_zero3_adds_the_largest_layer():
    layer = 200_000_000
    ds = ds_estimator.zero3(PSI, layer, 8, cpu_offload=False, cpu_offload_params=False)
    assert ds.gpu_bytes == 4 * layer + 18 * PSI // 8
    assert ds_estimator.zero3(PSI, layer, 8).gpu_bytes == 4 * layer  # everything else on the host


def test_lines_are_gib_labelled_gb():
    line = ds_estimator.zero2(PSI, 8, 2, cpu_offload=False).line()
    assert line == "  335.28GB |  21.83GB | offload_optimizer=none"
    assert round(ds_estimator.zero2(PSI, 8, 2, cpu_offload=False).gpu_bytes / GiB, 2) == 21.83


def test_all_cold_rows_follow_deepspeed_order():
    assert len(ds_estimator.zero2_all_cold(PSI, 8)) == 2
    rows = ds_estimator.zero3_all_cold(PSI, 10**8, 8)
    assert [r.options for r in rows] == [
        "offload_param=cpu , offload_optimizer=cpu , zero_init=1",
        "offload_param=cpu , offload_optimizer=cpu , zero_init=0",
        "offload_param=none, offload_optimizer=cpu , zero_init=1",
        "offload_param=none, offload_optimizer=cpu , zero_init=0",
        "offload_param=none, offload_optimizer=none, zero_init=1",
        "offload_param=none, offload_optimizer=none, zero_init=0",
    ]


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: ds_estimator.zero2(0), "params must be"),
        (lambda: ds_estimator.zero2(PSI, 0), "gpus_per_node must be"),
        (
            lambda: ds_estimator.zero2(PSI, 8, 1, additional_buffer_factor=0),
            "additional_buffer_factor must be a number > 0",
        ),
        (lambda: ds_estimator.zero3(PSI, PSI + 1), "largest_layer_params must be"),
        (
            lambda: ds_estimator.zero3(PSI, 10, cpu_offload=False, cpu_offload_params=True),
            "cpu_offload_params needs",
        ),
    ],
)
def test_bad_input(call, words):
    with pytest.raises(ValueError, match=words):
        call()


def _deepspeed():
    """DeepSpeed's estimator modules, or a skip (a failure under CI, where the lab extra is installed)."""
    return need_module("deepspeed.runtime.zero.stage_1_and_2"), need_module("deepspeed.runtime.zero.stage3")


# Margins (additional_buffer_factor) and node counts whose reciprocals are exact in binary: there DeepSpeed's
# float arithmetic is exact too. (test_deepspeed_float_rounding shows what happens elsewhere.)
GRID = list(
    itertools.product(
        [10**6, 1_300_000_000, 6_738_415_616, PSI, 68_976_648_192, 175 * 10**9],
        [1, 2, 4, 8],
        [1, 2, 4, 16],
        [1, 1.25, 1.5, 2],
    )
)


@pytest.mark.slow  # imports DeepSpeed: seconds per worker, so `make check` leaves it out
def test_equal_to_deepspeed_on_a_grid():
    s12, s3 = _deepspeed()
    compared = 0
    for params, per_node, nodes, factor in GRID:
        for offload in (True, False):
            ours = ds_estimator.zero2(
                params, per_node, nodes, cpu_offload=offload, additional_buffer_factor=factor
            )
            assert s12.estimate_zero2_model_states_mem_needs(params, per_node, nodes, offload, factor) == (
                ours.cpu_bytes,
                ours.gpu_bytes,
            )
            compared += 1
        layer = params // 40
        for opt, par, init in [
            (o, p, i) for o in (True, False) for p in (True, False) if o or not p for i in (True, False)
        ]:
            ours = ds_estimator.zero3(
                params,
                layer,
                per_node,
                nodes,
                cpu_offload=opt,
                cpu_offload_params=par,
                zero_init=init,
                additional_buffer_factor=factor,
            )
            cpu, gpu, _ = s3.estimate_zero3_model_states_mem_needs(
                params, layer, per_node, nodes, opt, par, init, factor
            )
            assert (cpu, gpu) == (ours.cpu_bytes, ours.gpu_bytes)
            compared += 1
    assert compared == len(GRID) * 8 >= 50


@pytest.mark.slow  # imports DeepSpeed: seconds per worker, so `make check` leaves it out
def test_printed_all_cold_tables_match():
    s12, s3 = _deepspeed()
    numbers = lambda text: re.findall(r"(\d+\.\d\d)GB \|\s+(\d+\.\d\d)GB", text)  # noqa: E731
    for params, per_node, nodes, factor in GRID[::17]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            s12.estimate_zero2_model_states_mem_needs_all_cold(params, per_node, nodes, factor)
            s3.estimate_zero3_model_states_mem_needs_all_cold(params, params // 40, per_node, nodes, factor)
        ours = [
            r.line()
            for r in ds_estimator.zero2_all_cold(params, per_node, nodes, factor)
            + ds_estimator.zero3_all_cold(params, params // 40, per_node, nodes, factor)
        ]
        assert numbers(out.getvalue()) == numbers("\n".join(ours))


@pytest.mark.slow  # imports DeepSpeed: seconds per worker, so `make check` leaves it out
def test_deepspeed_float_rounding():
    # DeepSpeed multiplies floats: with 3 nodes, 1/3 is inexact, and int() can land one byte below
    # the exact value.
    _, s3 = _deepspeed()
    cpu, _, _ = s3.estimate_zero3_model_states_mem_needs(10**6, 10**4, 1, 3, True, False, True, 1.2)
    exact = ds_estimator.zero3(10**6, 10**4, 1, 3, cpu_offload_params=False, additional_buffer_factor=1.2)
    assert (cpu, exact.cpu_bytes) == (6_399_999, 6_400_000)


def _sums(explained):
    """Each line's GPU and host terms added up and truncated, as DeepSpeed's int() does."""
    return [
        (int(sum(t.nbytes for t in gpu)), int(sum(t.nbytes for t in host)))
        for _, gpu, host in explained.lines
    ]


@pytest.mark.parametrize("params, per_node, nodes, factor", GRID[::7])
def test_explained_terms_add_up_to_every_line(params, per_node, nodes, factor):
    for explained in (
        ds_estimator.explain_zero2(params, per_node, nodes, factor),
        ds_estimator.explain_zero3(params, params // 40, per_node, nodes, factor),
    ):
        assert _sums(explained) == [(e.gpu_bytes, e.cpu_bytes) for e, _, _ in explained.lines]
    assert len(ds_estimator.explain_zero3(params, params // 40, per_node, nodes, factor).lines) == 6


def test_explained_worked_numbers_for_the_article_model():
    # Lesson 06's numbers: 7.5 B parameters, one node of 8 GPUs, the largest layer a 50,257 × 4,352 embedding.
    layer = 50_257 * 4_352
    offloaded, plain = ds_estimator.explain_zero2(PSI, 8).lines
    assert [t.nbytes for t in offloaded[1]] == [2 * PSI]  # ZeRO-2 offload keeps only the fp16 weights: 2Ψ
    assert offloaded[0].line().split("|")[1].strip() == "13.97GB"
    # The package's offload split (the ZeRO-Offload paper's) keeps the same 2Ψ on the GPU; on the host it
    # counts the 16-bit gradient shard (2 B) where DeepSpeed counts an fp32 one (4 B) among its 16.
    on_gpu, on_host = offload_plan.offloaded(PSI, 8, 2)
    assert on_gpu.total == offloaded[0].gpu_bytes == 2 * PSI and on_host.total == 14 * PSI // 8
    # Host: 4 B × Ψ × 8 GPUs × 1.5 on both ZeRO-2 lines (the offload line's max(4 × 8, 16) is 32).
    assert offloaded[0].cpu_bytes == plain[0].cpu_bytes == 4 * PSI * 8 * 3 // 2
    assert [t.nbytes for t in plain[1]] == [2 * PSI, 18 * PSI // 8]
    z3 = ds_estimator.explain_zero3(PSI, layer, 8).lines
    assert [e.cpu_bytes for e, _, _ in z3] == [
        18 * PSI * 3 // 2,  # parameters and optimizer offloaded, zero.Init: 18 B × 1.5
        4 * PSI * 8 * 3 // 2,
        16 * PSI * 3 // 2,  # optimizer offloaded, zero.Init: 16 B × 1.5
        4 * PSI * 8 * 3 // 2,
        4 * layer * 8 * 3 // 2,  # no offload, zero.Init: one fp32 layer per process
        4 * PSI * 8 * 3 // 2,
    ]
    assert [e.gpu_bytes for e, _, _ in z3[::2]] == [
        4 * layer,
        4 * layer + 2 * PSI // 8,
        4 * layer + 18 * PSI // 8,
    ]


def test_the_split_labels_itemize_18_bytes_by_deepspeeds_comment_at_stage_2_and_by_our_reading_at_3():
    labels = {
        stage: [t.what for t in lines[-1][1] if t.what.startswith("split")]
        for stage, lines in (
            (2, ds_estimator.explain_zero2(PSI, 8).lines),
            (3, ds_estimator.explain_zero3(PSI, 10**6, 8).lines),
        )
    }
    assert labels == {2: [ds_estimator.SPLIT_18[2]], 3: [ds_estimator.SPLIT_18[3]]}
    assert (
        "our reading" in labels[3][0] and "our reading" not in labels[2][0]
    )  # stage 2: DeepSpeed's own comment
    for label in ds_estimator.SPLIT_18.values():  # 2 + 4 + 12, the 12 as the glossary's optimizer state
        assert sum(int(n) for n in re.findall(r"(\d+) (?:fp16|fp32 gradients|optimizer state)", label)) == 18
        assert (
            "12 optimizer state (4 fp32 master weights + 8 Adam moments)" in label
            and "Adam state" not in label
        )
    assert "2 fp16 gradients + 4 fp32 gradients" in labels[2][0] and "2 fp16 weights" in labels[3][0]
    # ZeRO-3's reading: under optimizer offload the GPU keeps 2 B of fp16 weights, the host the other 16
    kept = ds_estimator.zero3(PSI, 0, 8, cpu_offload_params=False).gpu_bytes
    host = ds_estimator.zero3(PSI, 0, 8, cpu_offload_params=False).cpu_bytes
    assert kept == 2 * PSI // 8 and host == 16 * PSI * 3 // 2


def test_deepspeeds_own_comment_itemizes_stage_2_only():
    import inspect

    s12, s3 = _deepspeed()
    zero2 = inspect.getsource(s12.estimate_zero2_model_states_mem_needs).replace(" ", "")
    assert "18=2_grads_16bit+4_grads_32bit+4_params_32bit+8_optimizer_states_32bit" in zero2
    assert "grads" not in inspect.getsource(s3.estimate_zero3_model_states_mem_needs)


def test_explained_tables_show_deepspeeds_gib_and_the_terms():
    explained = ds_estimator.explain_zero2(PSI, 8)
    markdown, html = explained._repr_markdown_(), explained._repr_html_()
    assert markdown.count("\n") == 3 and "**13.97 GiB**" in markdown and "**29.69 GiB**" in markdown
    assert html.count("<tr>") == 3 and "<b>335.28 GiB</b>" in html
    assert "max(4 B × 8 GPUs of the job, 16 B) × Ψ × 1.5 = 360 GB" in markdown
    three = ds_estimator.explain_zero3(PSI, 10**6, 8)._repr_html_()
    assert "&#x27;" not in three  # quotes need no escaping inside a cell
    assert "offloaded state (our reading): 18 B × Ψ × 1.5 = 202.5 GB" in three  # one node: no "/ 1 node"
    two_nodes = ds_estimator.explain_zero3(PSI, 10**6, 8, nodes=2)._repr_markdown_()
    assert "offloaded state, this node's share (our reading): 18 B × Ψ / 2 nodes × 1.5" in two_nodes


def test_only_keeps_the_lines_whose_options_match_in_deepspeeds_order():
    every = ds_estimator.explain_zero3(PSI, 10**6, 8)
    with_init = every.only("zero_init=1")
    assert [line for line, _, _ in with_init.lines] == [
        r for r in ds_estimator.zero3_all_cold(PSI, 10**6, 8)
    ][::2]
    assert all(line.options.endswith("zero_init=1") for line, _, _ in with_init.lines)
    assert with_init._repr_markdown_().count("\n") == 1 + 3 and every.only("no such option").lines == ()


def test_gpu_only_drops_the_host_column_from_every_rendering_and_keeps_it_dropped_through_only():
    explained = ds_estimator.explain_zero3(PSI, 10**6, 8)
    gpu = explained.gpu_only().only("zero_init=1")
    assert gpu.lines == explained.only("zero_init=1").lines and not gpu.host and explained.host
    markdown, html = gpu._repr_markdown_(), gpu._repr_html_()
    assert markdown.splitlines()[:2] == ["| options | per GPU |", "| --- | --- |"]
    assert "host memory" not in markdown + html and "B × Ψ × 1.5" not in markdown + html
    assert all(len(row) == 2 for row in gpu.cells()) and "**1.75 GiB**" in markdown  # the GPU column stays


def test_printout_is_deepspeeds_header_and_lines_without_trailing_blanks():
    shown = ds_estimator.printout(ds_estimator.zero2_all_cold(PSI, 8)).splitlines()
    assert shown[0] == "  per CPU  |  per GPU |   Options"  # as DeepSpeed prints it: per CPU is per node
    assert shown[1] == "  335.28GB |  13.97GB | offload_optimizer=cpu" and all(s == s.rstrip() for s in shown)
    with pytest.raises(TypeError, match="rows must be a list of ds_estimator.Estimate"):
        ds_estimator.printout(["  1GB | 1GB | x"])


@pytest.mark.slow  # imports DeepSpeed: seconds per worker, so `make check` leaves it out
def test_explained_terms_equal_deepspeed():
    s12, s3 = _deepspeed()
    for params, per_node, nodes, factor in GRID[::5]:
        z2 = ds_estimator.explain_zero2(params, per_node, nodes, factor)
        want = [
            s12.estimate_zero2_model_states_mem_needs(params, per_node, nodes, o, factor)
            for o in (True, False)
        ]
        assert [(cpu, gpu) for gpu, cpu in _sums(z2)] == want
        layer, choices = params // 40, [(True, True), (True, False), (False, False)]
        want = [
            s3.estimate_zero3_model_states_mem_needs(params, layer, per_node, nodes, o, p, i, factor)[:2]
            for o, p in choices
            for i in (True, False)
        ]
        assert [
            (cpu, gpu)
            for gpu, cpu in _sums(ds_estimator.explain_zero3(params, layer, per_node, nodes, factor))
        ] == want


@pytest.mark.slow  # imports DeepSpeed and torch
def test_the_largest_layer_is_the_module_with_the_most_parameters_of_its_own():
    """Lesson 06's `largest_layer_params`: DeepSpeed's `model_to_params` counts each module's own parameters,
    not its submodules', so a block of two linear layers (552 in all) loses to an embedding (400)."""
    torch = need_module("torch")
    _, s3 = _deepspeed()
    block = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Linear(32, 8))
    total, largest = s3.model_to_params(torch.nn.Sequential(torch.nn.Embedding(50, 8), block))
    assert (total, largest) == (50 * 8 + (8 * 32 + 32) + (32 * 8 + 8), 50 * 8)
