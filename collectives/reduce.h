// Element-wise reductions on host buffers for every dtype, in Gloo's reduce-function shape
// (c = a ⊕ b over n elements), and the division that turns a sum into an average.
#pragma once

#include <cstddef>
#include <functional>

#include "collectives/collective_group.h"

namespace phalanx::collective {

using ReduceFn = std::function<void(void* c, const void* a, const void* b, size_t n)>;

// The reduction for `op` on `dtype` (kAvg reduces as a sum; then DivideInPlace).
ReduceFn ReduceFunction(DType dtype, ReduceOp op);

// data[i] /= divisor (integer division for integer types).
void DivideInPlace(void* data, size_t count, DType dtype, int divisor);

}  // namespace phalanx::collective
