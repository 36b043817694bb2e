"""Change the step view's controls 100 times inside a real kernel; print median and p95 update times."""

from widget_latency import run_in_kernel  # this folder is on sys.path when run as a script

CODE = r"""
import statistics, time
from zero_lessons.explorer.step_widget import StepExplorer
app = StepExplorer()   # the 7.5 B (32 blocks) on 8 GPUs, DeepSpeed ZeRO-3
k = app.knobs
changes = [(k["prefetch_bucket_size"], t) for t in ("10M", "100M", "50M")]
changes += [(k["max_live_parameters"], t) for t in ("300M", "1B")]
changes += [(k["max_reuse_distance"], t) for t in ("0", "1B")]
changes += [(k["param_persistence_threshold"], t) for t in ("1M", "100K")]
changes += [(k["reduce_bucket_size"], t) for t in ("200M", "500M")]
changes += [(k["contiguous_gradients"], False), (k["contiguous_gradients"], True)]
changes += [(app.gpus, t) for t in ("16", "8")] + [(app.checkpointing, True), (app.checkpointing, False)]
samples = []
for i in range(100):
    control, value = changes[i % len(changes)]
    start = time.perf_counter()
    control.value = value
    samples.append(time.perf_counter() - start)
assert app.status.value == "", app.status.value
samples.sort()
print(f"{len(samples)} changes: median {statistics.median(samples) * 1000:.1f} ms, "
      f"p95 {samples[94] * 1000:.1f} ms (targets: median ≤ 50 ms, p95 ≤ 100 ms)")
"""


def main() -> None:
    """Start a kernel, run the timing code in it, and print what it prints."""
    run_in_kernel(CODE, timeout=300)


if __name__ == "__main__":
    main()
