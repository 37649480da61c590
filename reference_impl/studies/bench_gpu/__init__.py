"""GPU benchmark of the norms: ``python -m reference_impl.studies.bench_gpu`` (needs a CUDA device).

Run by ``scripts/gpu_check.sh`` on a lent GPU machine. For bfloat16 and float32 and rows x hidden from
4096 x 1024 to 32768 x 8192, in one run, it times:

- forward: a device-to-device copy into a preallocated buffer (the ceiling, measured in the same run),
  ``F.rms_norm``, ``torch.compile`` of a plain RMSNorm (``reference_impl.studies.bench.plain_rms_norm``,
  Llama order), ``F.layer_norm``, RMSNorm versions 1-4 of ``cuda/gpu``, our CUDA LayerNorm, our Triton
  RMSNorm and LayerNorm (``reference_impl.ops.triton_norm``) and Liger-Kernel's RMSNorm
  (``liger_kernel.ops.rms_norm.LigerRMSNormFunction``, casting mode ``"llama"``, ``in_place=False`` so
  that the timed calls leave their inputs unchanged);
- the fused residual add + RMSNorm: version 5 and the Triton kernel against a separate add followed by
  version 4, and against two copies (the same 4 N b);
- forward+backward: ``F.rms_norm``, ``torch.compile``, ``F.layer_norm``, our CUDA ops, our Triton ops and
  Liger-Kernel's RMSNorm;
- version 3's block size (claim C42) and version 4 with and without its 16-byte vector path (claim C29).

Method: every implementation is first checked against a float32 PyTorch computation of the same math on
the group's own inputs (relative L2 error of the output and, for forward+backward, of dx and dweight;
recorded, with a loose sanity limit that flags a broken kernel). Then, per dtype, shape and mode, each implementation is warmed up (compiled), and timed in
``REPS`` repetitions that interleave the implementations (implementation order rotated in each
repetition). A repetition times ``calls`` calls with CUDA events around each and keeps their median; the
data file gives the median over the repetitions and their min and max (``ms``, ``ms_min``, ``ms_max``,
``reps_ms``). Inputs smaller than 512 MiB are rotated among several copies so that small shapes do not
run from L2. GB/s counts the bytes that must move at minimum: forward 2 N b (+ the gain), residual
forward 4 N b, forward+backward 5 N b (+ the gain read twice and its gradient written), N elements of b
bytes. ``frac_copy`` divides by the copy's GB/s at the same shape and dtype, repetition by repetition
(the copy ran in the same repetition), with min and max over the repetitions; forward+backward divides
by the forward copy's median.

Writes ``docs/data/bench_gpu.json`` (device, driver, the versions of torch, triton and liger-kernel, and
the ``provenance`` block of :mod:`reference_impl.provenance`) and, where matplotlib is present, SVG plots
under ``docs/data/plots/cuda/``. The file is rewritten after every group with ``"complete": false`` so
that a run cut short still leaves its numbers. ``--dry-run`` prints the plan and checks what can be
checked without a GPU; ``--quick`` is a smoke run on two small shapes, written to
``build/bench_gpu_quick.json`` unless ``--out`` says otherwise (never commit it as the measurement).

The command is split by stage: :mod:`.cases` (settings, implementations, validation), :mod:`.measure` (the
timed loop), :mod:`.analyse` (comparisons), :mod:`.render` (plots) and :mod:`.cli` (the command). This
package re-exports their names.
"""
from __future__ import annotations

from . import analyse, cases, cli, measure, render

for _module in (cases, measure, analyse, render, cli):
    globals().update({k: v for k, v in vars(_module).items() if not k.startswith("__") and k != "annotations"})
del _module
