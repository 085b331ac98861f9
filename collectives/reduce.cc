#include "collectives/reduce.h"

#include <algorithm>
#include <cstdint>

#include "collectives/half.h"

namespace phalanx::collective {
namespace {

template <typename T, typename Op>
ReduceFn Plain(Op op) {
  return [op](void* c, const void* a, const void* b, size_t n) {
    T* out = static_cast<T*>(c);
    const T* x = static_cast<const T*>(a);
    const T* y = static_cast<const T*>(b);
    for (size_t i = 0; i < n; ++i) out[i] = op(x[i], y[i]);
  };
}

template <typename Op>
ReduceFn Via16(float (*to)(uint16_t), uint16_t (*from)(float), Op op) {
  return [to, from, op](void* c, const void* a, const void* b, size_t n) {
    uint16_t* out = static_cast<uint16_t*>(c);
    const uint16_t* x = static_cast<const uint16_t*>(a);
    const uint16_t* y = static_cast<const uint16_t*>(b);
    for (size_t i = 0; i < n; ++i) out[i] = from(op(to(x[i]), to(y[i])));
  };
}

template <typename Op>
ReduceFn ForDType(DType dtype, Op op) {
  switch (dtype) {
    case DType::kFloat32:
      return Plain<float>(op);
    case DType::kFloat64:
      return Plain<double>(op);
    case DType::kInt32:
      return Plain<int32_t>(op);
    case DType::kInt64:
      return Plain<int64_t>(op);
    case DType::kFloat16:
      return Via16(&HalfToFloat, &FloatToHalf, op);
    case DType::kBFloat16:
      return Via16(&Bf16ToFloat, &FloatToBf16, op);
  }
  return nullptr;
}

}  // namespace

ReduceFn ReduceFunction(DType dtype, ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return ForDType(dtype, [](auto x, auto y) { return x + y; });
    case ReduceOp::kProd:
      return ForDType(dtype, [](auto x, auto y) { return x * y; });
    case ReduceOp::kMin:
      return ForDType(dtype, [](auto x, auto y) { return std::min(x, y); });
    case ReduceOp::kMax:
      return ForDType(dtype, [](auto x, auto y) { return std::max(x, y); });
  }
  return nullptr;
}

void DivideInPlace(void* data, size_t count, DType dtype, int divisor) {
  switch (dtype) {
    case DType::kFloat32: {
      float* p = static_cast<float*>(data);
      for (size_t i = 0; i < count; ++i) p[i] /= static_cast<float>(divisor);
      break;
    }
    case DType::kFloat64: {
      double* p = static_cast<double*>(data);
      for (size_t i = 0; i < count; ++i) p[i] /= divisor;
      break;
    }
    case DType::kInt32: {
      int32_t* p = static_cast<int32_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] /= divisor;
      break;
    }
    case DType::kInt64: {
      int64_t* p = static_cast<int64_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] /= divisor;
      break;
    }
    case DType::kFloat16: {
      uint16_t* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = FloatToHalf(HalfToFloat(p[i]) / divisor);
      break;
    }
    case DType::kBFloat16: {
      uint16_t* p = static_cast<uint16_t*>(data);
      for (size_t i = 0; i < count; ++i) p[i] = FloatToBf16(Bf16ToFloat(p[i]) / divisor);
      break;
    }
  }
}

}  // namespace phalanx::collective
