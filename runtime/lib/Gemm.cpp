//===- Gemm.cpp - OpenBLAS sgemm as Halide extern stages ------------------===//
//
// Generated kernels built with `gemm=blas` (codegen/README.md) compute their
// large contractions here: a Halide extern stage calls
//
//   moert_gemm(A, B, k, trans_a, trans_b, out)
//   moert_gemm2(A1, B1, A2, B2, k1, k2, trans_a1, trans_b1, trans_a2, trans_b2, out)
//
// out = op(A) op(B) (+ op(A2) op(B2)), batched over out's third dimension.
// The `_rows` forms skip a dispatch buffer's empty slots (moe.expert_ffn's
// `rows`: group e's slots are `segments` segments, segment g routed in its
// first rows[e * segments + g] rows only):
//
//   moert_gemm_rows(A, B, k, trans_a, trans_b, rows, segments, count, mode, out)
//   moert_gemm2_rows(A1, B1, A2, B2, k1, k2, trans_a1, ..., rows, segments, count, mode, out)
//
// mode 0: out's rows are the slots (a forward product, dx, dh); only the
// routed rows are computed, the others set to zero. mode 1: the contraction
// runs over the slots (a weight gradient); only the routed rows are summed.
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
#include <vector>

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

/// Routed rows (null `rows`: every row counts).
struct Routed {
  const int32_t *rows = nullptr;
  int segments = 1;
  int mode = 0;
  /// Routed rows of segment `g` of group `batch`, `length` slots long.
  int64_t valid(int64_t batch, int64_t g, int64_t length) const {
    return std::clamp<int64_t>(rows[batch * segments + g], 0, length);
  }
};

/// One task of a mode-0 product: `rows` rows of out from `r0`, in `batch`.
struct RowTask {
  int64_t batch, r0, rows;
};

struct Job {
  const Product *products;
  int numProducts;
  halide_buffer_t *out;
  int64_t m, n, batches;
  int64_t blockRows, blockCols; ///< one task's block of out
  int64_t rowBlocks, colBlocks;
  Routed routed;
  const std::vector<RowTask> *rowTasks; ///< mode 0 with routed rows
};

/// op(A) rows [r0, r0 + rows) times op(B) columns [c0, c0 + cols) over k
/// in [k0, k0 + k), into (or, accumulate, onto) out's block.
void sgemmBlock(const Product &p, const halide_buffer_t *out, int64_t outRow, int64_t outCol,
                int64_t outBatch, int64_t rows, int64_t cols, int64_t k0, int64_t k,
                bool accumulate) {
  float *c = const_cast<float *>(at(out, outCol, outRow, outBatch));
  // A's rows (or transposed columns) follow out's rows; B's columns out's.
  const float *a = p.transA ? at(p.a, outRow, k0, outBatch) : at(p.a, k0, outRow, outBatch);
  const float *b = p.transB ? at(p.b, k0, outCol, outBatch) : at(p.b, outCol, k0, outBatch);
  cblas_sgemm(CblasRowMajor, p.transA ? CblasTrans : CblasNoTrans,
              p.transB ? CblasTrans : CblasNoTrans, rows, cols, k, 1.0f, a, p.a->dim[1].stride, b,
              p.b->dim[1].stride, accumulate ? 1.0f : 0.0f, c, out->dim[1].stride);
}

void zeroBlock(const halide_buffer_t *out, int64_t outRow, int64_t outCol, int64_t outBatch,
               int64_t rows, int64_t cols) {
  for (int64_t r = 0; r < rows; ++r)
    std::fill_n(const_cast<float *>(at(out, outCol, outRow + r, outBatch)), cols, 0.0f);
}

int runTask(void *, int task, uint8_t *closure) {
  const Job &job = *reinterpret_cast<const Job *>(closure);
  const halide_buffer_t *out = job.out;
  int64_t batch0 = out->dimensions > 2 ? out->dim[2].min : 0;
  if (job.rowTasks) {
    const RowTask &t = (*job.rowTasks)[task];
    for (int i = 0; i < job.numProducts; ++i)
      sgemmBlock(job.products[i], out, out->dim[1].min + t.r0, out->dim[0].min, batch0 + t.batch,
                 t.rows, job.n, 0, job.products[i].k, i > 0);
    return 0;
  }
  int64_t perBatch = job.rowBlocks * job.colBlocks;
  int64_t batch = task / perBatch, rem = task % perBatch;
  int64_t r0 = (rem / job.colBlocks) * job.blockRows;
  int64_t c0 = (rem % job.colBlocks) * job.blockCols;
  int64_t rows = std::min(job.blockRows, job.m - r0);
  int64_t cols = std::min(job.blockCols, job.n - c0);
  int64_t outRow = out->dim[1].min + r0, outCol = out->dim[0].min + c0;
  int64_t outBatch = batch0 + batch;
  bool written = false;
  for (int i = 0; i < job.numProducts; ++i) {
    const Product &p = job.products[i];
    if (!job.routed.rows) {
      sgemmBlock(p, out, outRow, outCol, outBatch, rows, cols, 0, p.k, i > 0);
      written = true;
      continue;
    }
    // The contraction over the routed rows of each segment only.
    int64_t length = p.k / job.routed.segments;
    for (int64_t g = 0; g < job.routed.segments; ++g)
      if (int64_t k = job.routed.valid(outBatch, g, length)) {
        sgemmBlock(p, out, outRow, outCol, outBatch, rows, cols, g * length, k, written);
        written = true;
      }
  }
  if (!written)
    zeroBlock(out, outRow, outCol, outBatch, rows, cols);
  return 0;
}

/// Blocks of at least 64 rows or columns, about 2 tasks per group when
/// there are few groups (Halide's pool hands them to its threads). Mode 0
/// with routed rows: tasks over the routed rows of each segment, about 8
/// in all, the other rows zeroed here.
int gemmSum(const Product *products, int count, halide_buffer_t *out, Routed routed = {},
            halide_buffer_t *rows = nullptr, int numRows = 0) {
  // Bounds queries (Halide asks what an extern stage reads before it
  // computes the stage's Func inputs): the output, or any input, has no
  // memory yet.
  bool query = out->is_bounds_query();
  for (int i = 0; i < count; ++i)
    query |= answerQuery(products[i], out);
  if (rows && rows->is_bounds_query()) {
    query = true;
    rows->dim[0].min = 0;
    rows->dim[0].extent = numRows;
  }
  if (query)
    return 0;
  for (int i = 0; i < count; ++i)
    for (const halide_buffer_t *x : {products[i].a, products[i].b})
      if (x->dim[0].stride != 1 || x->dimensions < 2)
        return -1;
  if (out->dim[0].stride != 1 || out->dimensions < 2)
    return -1;
  if (rows) {
    if (routed.segments < 1 || rows->dim[0].min != 0 || rows->dim[0].extent < numRows)
      return -1;
    routed.rows = reinterpret_cast<const int32_t *>(rows->host);
  }
  Job job{products,
          count,
          out,
          out->dim[1].extent,
          out->dim[0].extent,
          out->dimensions > 2 ? out->dim[2].extent : 1,
          0,
          0,
          1,
          1,
          routed,
          nullptr};
  openblas_set_num_threads(1);
  std::vector<RowTask> rowTasks;
  if (routed.rows && routed.mode == 0) {
    int64_t length = job.m / routed.segments, total = 0;
    int64_t batch0 = out->dimensions > 2 ? out->dim[2].min : 0;
    for (int64_t b = 0; b < job.batches; ++b)
      for (int64_t g = 0; g < routed.segments; ++g) {
        int64_t v = routed.valid(batch0 + b, g, length);
        total += v;
        zeroBlock(out, out->dim[1].min + g * length + v, out->dim[0].min, batch0 + b, length - v,
                  job.n);
      }
    int64_t block = std::max<int64_t>(64, ((total + 7) / 8 + 15) / 16 * 16);
    for (int64_t b = 0; b < job.batches; ++b)
      for (int64_t g = 0; g < routed.segments; ++g)
        for (int64_t v = routed.valid(batch0 + b, g, length), r = 0; r < v; r += block)
          rowTasks.push_back({b, g * length + r, std::min(block, v - r)});
    if (rowTasks.empty())
      return 0;
    job.rowTasks = &rowTasks;
    return halide_do_par_for(nullptr, runTask, 0, static_cast<int>(rowTasks.size()),
                             reinterpret_cast<uint8_t *>(&job));
  }
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

extern "C" int moert_gemm_rows(halide_buffer_t *a, halide_buffer_t *b, int k, int transA,
                               int transB, halide_buffer_t *rows, int segments, int count, int mode,
                               halide_buffer_t *out) {
  Product p{a, b, k, transA != 0, transB != 0};
  return gemmSum(&p, 1, out, Routed{nullptr, segments, mode}, rows, count);
}

extern "C" int moert_gemm2_rows(halide_buffer_t *a1, halide_buffer_t *b1, halide_buffer_t *a2,
                                halide_buffer_t *b2, int k1, int k2, int transA1, int transB1,
                                int transA2, int transB2, halide_buffer_t *rows, int segments,
                                int count, int mode, halide_buffer_t *out) {
  Product p[2] = {{a1, b1, k1, transA1 != 0, transB1 != 0},
                  {a2, b2, k2, transA2 != 0, transB2 != 0}};
  return gemmSum(p, 2, out, Routed{nullptr, segments, mode}, rows, count);
}
