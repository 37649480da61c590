"""The CPU benchmark of the normalization ops against the copy ceiling and the peers: ``python -m reference_impl.studies.bench``.

What one run measures, for float32 and bfloat16 and every shape of ``SHAPES`` (inputs of 8 MB and more):

- ``forward_out``: the forward into a reused, preallocated output buffer (nothing is allocated in the
  timed call). The ceiling is ``y.copy_(x)`` into the same reused buffer (same bytes: read x, write y),
  and, where the small extension below builds, a copy with non-temporal (streaming) stores, which skip
  reading the destination's cache lines before writing them. Against it: ``fused_rms_norm(..., out=y)``
  and ``fused_layer_norm(..., out=y)`` (when the op has ``out=``), ``torch.compile`` of the plain RMSNorm
  writing into ``out``, and ONNX Runtime's ``RMSNormalization`` (opset 23), ``SimplifiedLayerNormalization``
  and ``LayerNormalization`` with input and output bound to the same buffers (IOBinding), ORT at its best.
- ``forward_alloc``: the forward that allocates its output, as most code calls it: ``x.clone()`` (an
  allocating copy), the fused ops, ``F.rms_norm``, ``F.layer_norm``, ``torch.compile(plain RMSNorm)``, and
  ORT with outputs allocated by ORT itself (its arena keeps them for reuse).
- ``forward_backward``: ``y.backward(dy)`` after the forward, gradients for x and the gain (and bias).

``forward_alloc`` and ``forward_backward`` run once per allocator setting (glibc's malloc as it comes, glibc
with tunables that keep freed memory, jemalloc and tcmalloc from Debian packages via ``LD_PRELOAD``, and
jemalloc configured to keep freed memory): the command re-launches itself in one worker process per
setting, so every implementation in a comparison ran under the same allocator. A freshly allocated
buffer costs one page fault per 4 KiB page the first time it is written; the ``first_touch`` experiment
times that directly, and every record carries the minor page faults per call (``getrusage``).

Noise discipline: before timing, every implementation is checked against the float64 oracle. Then per
configuration there are ``repeats`` (>= 3) rounds; in each round every implementation runs ``k`` calls,
in an order rotated from round to round (interleaved, so a burst of load hits them alike). A record keeps
each round's median, the median and quartiles of all calls, and the spread. A comparison says "faster"
only where the slower implementation's fastest round is slower than the faster one's slowest round;
otherwise "within noise". The command waits (up to ``--wait`` seconds) until the 1-minute load average is
at most ``--max-load`` and refuses to measure a busy machine unless ``--force`` (which it records).

GB/s counts the bytes that must move at minimum: forward ``2 N b`` (read x, write y), forward+backward
``5 N b`` (forward, then read dy and x, write dx), plus the gain (and bias), for ``N`` elements of ``b``
bytes. Writes ``docs/data/bench_cpu.json`` and SVG plots under ``docs/data/plots/``.

The command is split by stage: :mod:`.cases` (settings and implementations), :mod:`.measure` (the timed
loop, workers), :mod:`.analyse` (verdicts, targets, advice), :mod:`.render` (tables, plots) and
:mod:`.cli` (the command); :mod:`.groups` (the short-row and QK-norm groups), :mod:`.limits` (the targets
of one machine) and :mod:`.archive` (one file per machine measured). This package re-exports their names.
"""
from __future__ import annotations

from . import analyse, archive, cases, cli, groups, limits, measure, render

for _module in (cases, groups, measure, limits, render, analyse, archive, cli):
    globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__") and k != "annotations"})
del _module
