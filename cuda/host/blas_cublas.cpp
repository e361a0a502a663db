// Blas through cuBLAS (nvcc build). Row-major y[n][out] = x W^T is, read column-major,
// y^T (out x n) = W^T... cuBLAS sees W as a column-major in x out matrix (lda = in), so
// op(A) = A^T gives the out x in weight, and x as a column-major in x n matrix (ldb = in); y is
// column-major out x n with ldc = ldy (a slice of wider rows when ldy > out).
#include <cublas_v2.h>

#include <string>

#include "common/check.hpp"
#include "host/blas.hpp"

namespace specdec::cuda {

namespace {

void check(cublasStatus_t status, const char* what) {
  if (status != CUBLAS_STATUS_SUCCESS) {
    throw Error(std::string("cuBLAS error ") + cublasGetStatusName(status) + " in " + what);
  }
}

}  // namespace

Blas::Blas() {
  cublasHandle_t h = nullptr;
  check(cublasCreate(&h), "cublasCreate");
  handle_ = h;
}

Blas::~Blas() {
  if (handle_ != nullptr) cublasDestroy(static_cast<cublasHandle_t>(handle_));
}

void Blas::gemm_xwT(DType type, const void* w, const void* x, float* y, int n, int out, int in,
                    int ldy, cudaStream_t stream) {
  if (!is_16bit(type)) throw Error("Blas::gemm_xwT: the input type must be F16 or BF16");
  auto h = static_cast<cublasHandle_t>(handle_);
  check(cublasSetStream(h, stream), "cublasSetStream");
  const cudaDataType_t ab = type == DType::f16 ? CUDA_R_16F : CUDA_R_16BF;
  const float alpha = 1.0f;
  const float beta = 0.0f;
  check(cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &alpha, w, ab, in, x, ab, in, &beta,
                     y, CUDA_R_32F, ldy, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
}

}  // namespace specdec::cuda
