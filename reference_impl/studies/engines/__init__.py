"""What the engines compute: ``python -m reference_impl.studies.engines`` writes ``docs/data/engines.json``.

For each pinned release of a serving or training engine (:mod:`.sources`: vLLM, SGLang, TensorRT-LLM,
Megatron-core, Transformer Engine, Liger-Kernel, MLX through mlx-lm, llama.cpp as vendored by
llama-cpp-python), the study reads the released files at run time into the ignored ``.cache/engines/``:

- :mod:`.loader` takes a norm class or function out of a released file with :mod:`ast` and runs it with the
  smallest stubs, recording which;
- :mod:`.modelmap` reads which norm class and flags each of the engine's model files constructs, and
  whether its layers pass the residual stream (the fused add + norm);
- :mod:`.paths` names, per engine, the classes, the methods called and the model files;
- :mod:`.measure` runs each (path, model type) through the kit (:func:`reference_impl.check.check_norm`)
  against the model's module from the installed transformers, per x dtype and gain dtype, and measures
  an ulp histogram, batch invariance, determinism and the trainer x server agreement;
- :mod:`.read` states the order of kernels that cannot run here, each step with its released line;
- :mod:`.validate` checks the file against itself and the census; :mod:`.verify` re-runs rows whose
  release is at hand without downloading anything (the tests use it).

Run it once with network access to the package registry; ``--offline`` re-runs from the cache.
"""
