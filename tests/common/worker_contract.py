"""psync-worker's training contract, as the PyTorch reference scripts need it.

Shared by tests/integration/worker/*_reference.py so that both references
skip exactly what psync-worker's --skip-layer/--skip-pattern skips.
"""


def skip_active(pattern, index, step, micro, accumulate):
    """Whether layer/block `index` is skipped in micro-batch `micro` of `step`.

    index < 0: nothing is skipped. Patterns: "always", "odd" (odd steps),
    "lastmicro" (only the last micro-batch of each step's accumulation).
    """
    if index < 0:
        return False
    if pattern == "always":
        return True
    if pattern == "odd":
        return step % 2 == 1
    if pattern == "lastmicro":
        return micro == accumulate - 1
    raise ValueError(f"unknown skip pattern {pattern!r}")
