// Python glue for the GPU sweep in rsqrt_gpu.cu. Plain pybind11, no torch headers, so that it compiles in
// seconds on the lent GPU machine; tensors stay on the Python side (reference_impl/rsqrt.py passes device
// pointers), and the .cu never sees a C++ library header either.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>

namespace py = pybind11;

#include "rsqrt_gpu_api.h"

namespace {

void check(int err, const char* what) {
  if (err != 0) throw std::runtime_error(std::string(what) + " failed: " + RSQ_FN(rsqrt_gpu_error_string)(err));
}

int method_id(const std::string& name) {
  const int n = RSQ_FN(rsqrt_gpu_num_methods)();
  std::string known;
  for (int m = 0; m < n; ++m) {
    if (name == RSQ_FN(rsqrt_gpu_method_name)(m)) return m;
    known += std::string(" ") + RSQ_FN(rsqrt_gpu_method_name)(m);
  }
  throw py::value_error("unknown GPU rsqrt method '" + name + "'; known:" + known);
}

double as_double(unsigned long long u) {
  double d;
  std::memcpy(&d, &u, 8);
  return d;
}

float as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

py::list methods() {
  py::list out;
  for (int m = 0; m < RSQ_FN(rsqrt_gpu_num_methods)(); ++m) out.append(RSQ_FN(rsqrt_gpu_method_name)(m));
  return out;
}

// Statistics in the same layout as the CPU sweep's per-group dict (see reference_impl/rsqrt.py).
py::dict sweep(const std::string& name, uint64_t lo, uint64_t hi, uint64_t stride) {
  if (!(lo >= 1 && hi <= 0x7f800000ull && lo < hi && stride >= 1))
    throw py::value_error("sweep range must lie in [1, 0x7f800000) with stride >= 1");
  const int m = method_id(name);
  const uint64_t total = (hi - lo + stride - 1) / stride;
  unsigned long long v[RSQ_GPU_SWEEP_VALUES] = {};
  {
    py::gil_scoped_release release;
    check(RSQ_FN(rsqrt_gpu_sweep)(m, lo, stride, total, v), "rsqrt_gpu_sweep");
  }
  py::dict d;
  d["count"] = static_cast<int64_t>(v[0]);
  d["exact"] = static_cast<int64_t>(v[1]);
  d["nonfinite"] = static_cast<int64_t>(v[2]);
  d["max_ulp_int"] = static_cast<int64_t>(v[3]);
  d["max_ulp"] = as_double(v[4]);
  d["max_abs_rel"] = as_double(v[5]);
  d["max_rel"] = as_double(v[6]);
  d["min_rel"] = -as_double(v[7]);
  d["worst_ulp_x"] = static_cast<int64_t>(~static_cast<uint32_t>(v[8] & 0xffffffffull));
  d["worst_ulp_err_f32"] = as_float(static_cast<uint32_t>(v[8] >> 32));
  d["worst_rel_x"] = static_cast<int64_t>(~static_cast<uint32_t>(v[9] & 0xffffffffull));
  d["ambiguous"] = static_cast<int64_t>(v[10]);
  d["corrected"] = static_cast<int64_t>(v[11]);
  d["ties"] = static_cast<int64_t>(v[12]);
  std::vector<int64_t> uh(v + 13, v + 13 + 34), rh(v + 47, v + 47 + 52);
  d["ulp_hist"] = uh;
  d["rel_hist"] = rh;
  d["sum_abs_rel"] = as_double(v[99]);
  d["inputs"] = static_cast<int64_t>(total);
  return d;
}

// y[i] = method(x[i]) for i < n; x and y are device addresses of float32 buffers (tensor.data_ptr()).
void apply(const std::string& name, uintptr_t x, uintptr_t y, int64_t n) {
  const int m = method_id(name);
  if (n < 0) throw py::value_error("n must be >= 0");
  py::gil_scoped_release release;
  check(RSQ_FN(rsqrt_gpu_apply)(m, reinterpret_cast<const float*>(x), reinterpret_cast<float*>(y), n), "rsqrt_gpu_apply");
}

}  // namespace

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "GPU reciprocal square root sweep (rsqrt_gpu.cu)";
  m.def("methods", &methods);
  m.def("fast_math", [] { return RSQ_FN(rsqrt_gpu_fast_math)() != 0; });
  m.def("sweep", &sweep, py::arg("name"), py::arg("lo"), py::arg("hi"), py::arg("stride") = 1);
  m.def("apply", &apply, py::arg("name"), py::arg("x_ptr"), py::arg("y_ptr"), py::arg("n"));
}
