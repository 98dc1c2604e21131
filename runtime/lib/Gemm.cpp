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
// routed rows are computed, the others set to zero (mode 2: left unwritten,
// for intermediates whose other rows nothing reads). mode 1: the
// contraction runs over the slots (a weight gradient); only the routed rows
// are summed.
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

/// Routed rows (null `rows`: every row counts). The modes are
/// codegen/generators/Matmul.h's GemmRows::Mode.
struct Routed {
  enum Mode { SlotsAreRows = 0, SlotsAreK = 1, RoutedRowsOnly = 2 };
  const int32_t *rows = nullptr;
  int segments = 1;
  int mode = SlotsAreRows;
  /// Routed rows of segment `g` of group `batch`, `length` slots long.
  int64_t valid(int64_t batch, int64_t g, int64_t length) const {
    return std::clamp<int64_t>(rows[batch * segments + g], 0, length);
  }
};

/// One task: a block of out (rows [r0, r0 + rows), columns [c0, c0 + cols))
/// in group `batch`.
struct Task {
  int64_t batch, r0, rows, c0, cols;
};

struct Job {
  const Product *products;
  int numProducts;
  halide_buffer_t *out;
  Routed routed;
  std::vector<Task> tasks;
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

int runTask(void *, int index, uint8_t *closure) {
  const Job &job = *reinterpret_cast<const Job *>(closure);
  const halide_buffer_t *out = job.out;
  const Task &t = job.tasks[index];
  int64_t outRow = out->dim[1].min + t.r0, outCol = out->dim[0].min + t.c0;
  int64_t outBatch = (out->dimensions > 2 ? out->dim[2].min : 0) + t.batch;
  bool written = false;
  for (int i = 0; i < job.numProducts; ++i) {
    const Product &p = job.products[i];
    if (!job.routed.rows || job.routed.mode != Routed::SlotsAreK) {
      sgemmBlock(p, out, outRow, outCol, outBatch, t.rows, t.cols, 0, p.k, i > 0);
      written = true;
      continue;
    }
    // The contraction over the routed rows of each segment only.
    int64_t length = p.k / job.routed.segments;
    for (int64_t g = 0; g < job.routed.segments; ++g)
      if (int64_t k = job.routed.valid(outBatch, g, length)) {
        sgemmBlock(p, out, outRow, outCol, outBatch, t.rows, t.cols, g * length, k, written);
        written = true;
      }
  }
  if (!written)
    zeroBlock(out, outRow, outCol, outBatch, t.rows, t.cols);
  return 0;
}

/// Cuts group `batch` of an m x n out into `pieces` blocks along its
/// longer side (blocks of at least 64 rows or columns, multiples of 16).
void splitBlocks(std::vector<Task> &tasks, int64_t batch, int64_t m, int64_t n, int64_t pieces) {
  bool byRows = m >= n;
  int64_t extent = byRows ? m : n;
  int64_t block = std::max<int64_t>(64, (extent + pieces - 1) / pieces);
  block = (block + 15) / 16 * 16;
  for (int64_t x = 0; x < extent; x += block) {
    int64_t size = std::min(block, extent - x);
    tasks.push_back(byRows ? Task{batch, x, size, 0, n} : Task{batch, 0, m, x, size});
  }
}

/// About 8 tasks in all, which Halide's pool hands to its threads; each
/// calls single-threaded OpenBLAS. Every slot counted: one task per group
/// when there are 4 or more, else blocks of one group. Routed rows, mode 0:
/// blocks of the routed rows of each segment (the other rows zeroed here);
/// mode 1: each group's share of the tasks follows its routed rows (a full
/// expert beside nearly empty ones is cut into several blocks).
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
  int64_t m = out->dim[1].extent, n = out->dim[0].extent;
  int64_t batches = out->dimensions > 2 ? out->dim[2].extent : 1;
  int64_t batch0 = out->dimensions > 2 ? out->dim[2].min : 0;
  Job job{products, count, out, routed, {}};
  std::vector<Task> &tasks = job.tasks;
  constexpr int64_t kTasks = 8;
  if (!routed.rows) {
    for (int64_t b = 0; b < batches; ++b)
      splitBlocks(tasks, b, m, n, batches >= 4 ? 1 : kTasks);
  } else if (routed.mode != Routed::SlotsAreK) {
    int64_t length = m / routed.segments, total = 0;
    for (int64_t b = 0; b < batches; ++b)
      for (int64_t g = 0; g < routed.segments; ++g) {
        int64_t v = routed.valid(batch0 + b, g, length);
        total += v;
        if (routed.mode == Routed::SlotsAreRows)
          zeroBlock(out, out->dim[1].min + g * length + v, out->dim[0].min, batch0 + b, length - v,
                    n);
      }
    int64_t block = std::max<int64_t>(64, ((total + kTasks - 1) / kTasks + 15) / 16 * 16);
    for (int64_t b = 0; b < batches; ++b)
      for (int64_t g = 0; g < routed.segments; ++g)
        for (int64_t v = routed.valid(batch0 + b, g, length), r = 0; r < v; r += block)
          tasks.push_back({b, g * length + r, std::min(block, v - r), 0, n});
  } else {
    int64_t length = products[0].k / routed.segments, total = 0;
    std::vector<int64_t> work(batches, 0);
    for (int64_t b = 0; b < batches; ++b) {
      for (int64_t g = 0; g < routed.segments; ++g)
        work[b] += routed.valid(batch0 + b, g, length);
      total += work[b];
    }
    for (int64_t b = 0; b < batches; ++b)
      splitBlocks(tasks, b, m, n,
                  total ? std::max<int64_t>(1, (kTasks * work[b] + total / 2) / total) : 1);
  }
  if (tasks.empty())
    return 0;
  openblas_set_num_threads(1);
  return halide_do_par_for(nullptr, runTask, 0, static_cast<int>(tasks.size()),
                           reinterpret_cast<uint8_t *>(&job));
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
