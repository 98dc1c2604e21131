//===- Gemm.cpp - OpenBLAS sgemm as Halide extern stages ------------------===//
//
// Generated kernels built with `gemm=blas` (codegen/README.md) compute their
// large contractions here: a Halide extern stage calls
//
//   moert_gemm(A, B, k, trans_a, trans_b, out)
//   moert_gemm2(A1, B1, A2, B2, k1, k2, trans_a1, trans_b1, trans_a2, trans_b2, out)
//
// out = op(A) op(B) (+ op(A2) op(B2)), batched over out's third dimension.
// Buffers are Halide's (dim 0 innermost): a matrix is (columns, rows[,
// batch]), i.e. row-major. op(X) is X, or X transposed when trans_x. The
// fusion around the products (activations, their gradients) stays in Halide.
//
// The work is cut into tasks (one per group, or row or column blocks of one
// product) run on Halide's thread pool by halide_do_par_for; each task calls
// single-threaded OpenBLAS. One pool for the whole step: OpenBLAS's own
// threads would spin after each call (THREAD_TIMEOUT, about 2^28 cycles)
// and starve the next Halide kernel on the same cores.
//
//===----------------------------------------------------------------------===//

#include "HalideRuntime.h"

#include <cblas.h>

#include <algorithm>
#include <cstdint>

extern "C" void openblas_set_num_threads(int);

namespace {

/// Element (col, row, batch) of a matrix buffer.
const float *at(const halide_buffer_t *b, int64_t col, int64_t row, int64_t batch) {
  int64_t offset =
      (col - b->dim[0].min) * b->dim[0].stride + (row - b->dim[1].min) * b->dim[1].stride;
  if (b->dimensions > 2)
    offset += (batch - b->dim[2].min) * b->dim[2].stride;
  return reinterpret_cast<const float *>(b->host) + offset;
}

/// One product op(a) op(b) of a sum: op(a) is m x k, op(b) is k x n.
struct Product {
  const halide_buffer_t *a, *b;
  int k;
  bool transA, transB;
};

/// Asks for every element a product reads: the rows (or, transposed,
/// columns) of out, all k, every group. Returns whether this was a query.
bool answerQuery(const Product &p, const halide_buffer_t *out) {
  bool query = false;
  auto fill = [&](halide_buffer_t *x, bool trans, bool isA) {
    if (!x->is_bounds_query())
      return;
    query = true;
    // A is (k, m) or transposed (m, k); B is (n, k) or transposed (k, n).
    const halide_dimension_t &outer = isA ? out->dim[1] : out->dim[0];
    halide_dimension_t &kDim = x->dim[(isA != trans) ? 0 : 1];
    halide_dimension_t &oDim = x->dim[(isA != trans) ? 1 : 0];
    kDim.min = 0;
    kDim.extent = p.k;
    oDim.min = outer.min;
    oDim.extent = outer.extent;
    if (x->dimensions > 2) {
      x->dim[2].min = out->dimensions > 2 ? out->dim[2].min : 0;
      x->dim[2].extent = out->dimensions > 2 ? out->dim[2].extent : 1;
    }
  };
  fill(const_cast<halide_buffer_t *>(p.a), p.transA, true);
  fill(const_cast<halide_buffer_t *>(p.b), p.transB, false);
  return query;
}

struct Job {
  const Product *products;
  int numProducts;
  halide_buffer_t *out;
  int64_t m, n, batches;
  int64_t blockRows, blockCols; ///< one task's block of out
  int64_t rowBlocks, colBlocks;
};

int runTask(void *, int task, uint8_t *closure) {
  const Job &job = *reinterpret_cast<const Job *>(closure);
  int64_t perBatch = job.rowBlocks * job.colBlocks;
  int64_t batch = task / perBatch, rem = task % perBatch;
  int64_t r0 = (rem / job.colBlocks) * job.blockRows;
  int64_t c0 = (rem % job.colBlocks) * job.blockCols;
  int64_t rows = std::min(job.blockRows, job.m - r0);
  int64_t cols = std::min(job.blockCols, job.n - c0);
  const halide_buffer_t *out = job.out;
  int64_t outRow = out->dim[1].min + r0, outCol = out->dim[0].min + c0;
  int64_t outBatch = (out->dimensions > 2 ? out->dim[2].min : 0) + batch;
  float *c = const_cast<float *>(at(out, outCol, outRow, outBatch));
  for (int i = 0; i < job.numProducts; ++i) {
    const Product &p = job.products[i];
    // A's rows (or transposed columns) follow out's rows; B's columns out's.
    const float *a = p.transA ? at(p.a, outRow, 0, outBatch) : at(p.a, 0, outRow, outBatch);
    const float *b = p.transB ? at(p.b, 0, outCol, outBatch) : at(p.b, outCol, 0, outBatch);
    cblas_sgemm(CblasRowMajor, p.transA ? CblasTrans : CblasNoTrans,
                p.transB ? CblasTrans : CblasNoTrans, rows, cols, p.k, 1.0f, a, p.a->dim[1].stride,
                b, p.b->dim[1].stride, i == 0 ? 0.0f : 1.0f, c, out->dim[1].stride);
  }
  return 0;
}

/// Blocks of at least 64 rows or columns, about 2 tasks per group when
/// there are few groups (Halide's pool hands them to its threads).
int gemmSum(const Product *products, int count, halide_buffer_t *out) {
  // Bounds queries (Halide asks what an extern stage reads before it
  // computes the stage's Func inputs): the output, or any input, has no
  // memory yet.
  bool query = out->is_bounds_query();
  for (int i = 0; i < count; ++i)
    query |= answerQuery(products[i], out);
  if (query)
    return 0;
  for (int i = 0; i < count; ++i)
    for (const halide_buffer_t *x : {products[i].a, products[i].b})
      if (x->dim[0].stride != 1 || x->dimensions < 2)
        return -1;
  if (out->dim[0].stride != 1 || out->dimensions < 2)
    return -1;
  Job job{products,
          count,
          out,
          out->dim[1].extent,
          out->dim[0].extent,
          out->dimensions > 2 ? out->dim[2].extent : 1,
          0,
          0,
          1,
          1};
  job.blockRows = job.m;
  job.blockCols = job.n;
  int64_t wanted = job.batches >= 4 ? 1 : 8; // tasks per group
  if (wanted > 1) {
    bool byRows = job.m >= job.n;
    int64_t extent = byRows ? job.m : job.n;
    int64_t block = std::max<int64_t>(64, (extent + wanted - 1) / wanted);
    block = (block + 15) / 16 * 16;
    if (byRows) {
      job.blockRows = block;
      job.rowBlocks = (job.m + block - 1) / block;
    } else {
      job.blockCols = block;
      job.colBlocks = (job.n + block - 1) / block;
    }
  }
  openblas_set_num_threads(1);
  int tasks = static_cast<int>(job.batches * job.rowBlocks * job.colBlocks);
  return halide_do_par_for(nullptr, runTask, 0, tasks, reinterpret_cast<uint8_t *>(&job));
}

} // namespace

extern "C" int moert_gemm(halide_buffer_t *a, halide_buffer_t *b, int k, int transA, int transB,
                          halide_buffer_t *out) {
  Product p{a, b, k, transA != 0, transB != 0};
  return gemmSum(&p, 1, out);
}

extern "C" int moert_gemm2(halide_buffer_t *a1, halide_buffer_t *b1, halide_buffer_t *a2,
                           halide_buffer_t *b2, int k1, int k2, int transA1, int transB1,
                           int transA2, int transB2, halide_buffer_t *out) {
  Product p[2] = {{a1, b1, k1, transA1 != 0, transB1 != 0},
                  {a2, b2, k2, transA2 != 0, transB2 != 0}};
  return gemmSum(p, 2, out);
}
