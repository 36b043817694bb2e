"""Change the explorer's controls 100 times inside a real kernel; print median and p95 update times.

Run: python benchmarks/widget_latency.py. Target: median ≤ 50 ms, p95 ≤ 100 ms.
Each sample is one control change, timed from setting the value until every view has been
redrawn (the observers run synchronously inside the kernel).
"""

from jupyter_client.manager import start_new_kernel

CODE = r"""
import statistics, time
from zero_lessons.explorer import Explorer
app = Explorer()
changes = [(app.gpus_slider, n) for n in (16, 32, 64, 128)]
changes += [(app.params_slider, 10 ** x) for x in (9.5, 10, 10.5, 11)]
changes += [(app.params_text, t) for t in ("13B", "70B")] + [(app.gpu_memory, b) for b in ("40GB", "24 GiB")]
changes += [(app.unit, "GiB"), (app.unit, "GB"), (app.dtype, "fp32"), (app.dtype, "bf16")]
changes += [(app.bandwidth, "25 GB/s")]
samples = []
for i in range(100):
    control, value = changes[i % len(changes)]
    if control.value == value:
        value = {app.gpus_slider: 8, app.params_slider: 7.5e9}.get(control, value)
    start = time.perf_counter()
    control.value = value
    samples.append(time.perf_counter() - start)
samples.sort()
print(f"{len(samples)} changes: median {statistics.median(samples) * 1000:.1f} ms, "
      f"p95 {samples[94] * 1000:.1f} ms (targets: median ≤ 50 ms, p95 ≤ 100 ms)")
"""


def run_in_kernel(code: str, timeout: float = 120) -> None:
    """Start a kernel, run `code` in it, print what it prints (and any error), and shut the kernel down."""
    manager, client = start_new_kernel(kernel_name="python3")
    try:
        client.execute_interactive(
            code,
            timeout=timeout,
            output_hook=lambda msg: (
                print(msg["content"].get("text", "") or msg["content"].get("evalue", ""), end="")
                if msg["msg_type"] in ("stream", "error")
                else None
            ),
        )
    finally:
        client.stop_channels()
        manager.shutdown_kernel(now=True)


def main() -> None:
    """Start a kernel, run the timing code in it, and print what it prints."""
    run_in_kernel(CODE)


if __name__ == "__main__":
    main()
