// Declares the `normlab` library with the schemas of cuda/ops.h (where the contract is written down).
#include "ops.h"

TORCH_LIBRARY(normlab, m) { normlab::define_ops(m); }
