//===- StepCommTest.cpp - the collectives a partitioned step calls --------===//
//
// runtime/lib/StepComm.cpp on ranks that are threads (moert_run_threads),
// called as codegen/lib/StepProgram.cpp's emitted step program calls it:
// grid groups, scaled all-reduces (alone and bucketed), dense and ragged
// all-to-alls, the sharded global norm, compressed all-reduces with their
// state and byte counters, and the error paths. Every expectation is
// computed here from the definitions in moert/Program.h and moec/contract/Abi.h,
// with plain loops over the grid, not by the routines under test.
//
//===----------------------------------------------------------------------===//

#include "moert/Codecs.h"
#include "moert/Comm.h"
#include "moert/Program.h"

#include "Trace.h" // runtime/lib: the trace a context records into

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <mutex>
#include <numeric>
#include <random>
#include <string>
#include <vector>

namespace {

//===----------------------------------------------------------------------===//
// Helpers
//===----------------------------------------------------------------------===//

/// A dp x ep x tp grid of ranks, rank = (d * ep + e) * tp + t.
struct Grid {
  int dp = 1, ep = 1, tp = 1;
  int size() const { return dp * ep * tp; }
  std::string name() const {
    return "dp" + std::to_string(dp) + " x ep" + std::to_string(ep) + " x tp" + std::to_string(tp);
  }
};

/// The context the trainer gives `rank` of `grid` (comm null on one rank).
moert_context contextOf(const Grid &grid, int rank, moert_comm *comm) {
  moert_context ctx;
  std::memset(&ctx, 0, sizeof ctx);
  ctx.run.comm = comm;
  ctx.run.rank = rank;
  ctx.run.dp = grid.dp;
  ctx.run.ep = grid.ep;
  ctx.run.tp = grid.tp;
  return ctx;
}

/// Runs `body(ctx)` on every rank of `grid`, ranks as threads; returns 0
/// when every rank returned 0. The communicator's message of each failing
/// rank goes to `errors`. Codec states left by a body are freed.
struct OnGrid {
  Grid grid;
  std::function<int(moert_context &)> body;
  std::vector<std::string> errors;
  std::mutex mutex;

  static int trampoline(moert_comm *comm, void *user) {
    auto *run = static_cast<OnGrid *>(user);
    moert_context ctx = contextOf(run->grid, moert_comm_rank(comm), comm);
    int rc = run->body(ctx);
    moert_async_free(&ctx);
    moert_codec_states_free(&ctx);
    if (rc != 0) {
      std::lock_guard<std::mutex> lock(run->mutex);
      run->errors.push_back(moert_comm_error(comm));
    }
    return rc;
  }
};

int onGrid(const Grid &grid, std::function<int(moert_context &)> body,
           std::vector<std::string> *errors = nullptr, double timeout = 10) {
  OnGrid run;
  run.grid = grid;
  run.body = std::move(body);
  int rc = moert_run_threads(grid.size(), timeout, OnGrid::trampoline, &run);
  if (errors)
    *errors = run.errors;
  return rc;
}

/// The group of `rank` over `axes` by definition: every rank whose grid
/// coordinates equal `rank`'s on the axes not in `axes`, in rank order
/// (which is axis order: dp outermost, tp innermost).
std::vector<int32_t> expectedGroup(const Grid &g, int rank, int axes) {
  struct Coord {
    int d, e, t;
  };
  std::vector<Coord> coord(g.size());
  for (int d = 0; d < g.dp; ++d)
    for (int e = 0; e < g.ep; ++e)
      for (int t = 0; t < g.tp; ++t)
        coord[(d * g.ep + e) * g.tp + t] = {d, e, t};
  std::vector<int32_t> members;
  const Coord &me = coord[rank];
  for (int r = 0; r < g.size(); ++r) {
    const Coord &c = coord[r];
    if ((axes & MOERT_AXIS_DP || c.d == me.d) && (axes & MOERT_AXIS_EP || c.e == me.e) &&
        (axes & MOERT_AXIS_TP || c.t == me.t))
      members.push_back(r);
  }
  return members;
}

/// Normal random floats, a different stream per (seed, rank).
std::vector<float> randomData(int64_t n, int seed, int rank, float scale = 1.0f) {
  std::mt19937 rng(1000 * seed + rank);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (float &x : v)
    x = normal(rng);
  return v;
}

/// Small integers (exact in float through sums and dyadic scales).
std::vector<float> integerData(int64_t n, int rank) {
  std::vector<float> v(n);
  for (int64_t k = 0; k < n; ++k)
    v[k] = static_cast<float>((rank + 1) * (k % 7 + 1) - 3 * (k % 3));
  return v;
}

/// A blocking all-to-all over ep (4 floats per member) between a
/// background collective's start and its wait.
int foregroundAllToAll(moert_context &ctx, const Grid &g) {
  std::vector<float> x(static_cast<size_t>(g.ep) * 4, float(ctx.run.rank)), y(x.size());
  const int64_t shape[] = {g.ep, 4};
  return moert_step_all_to_all(&ctx, y.data(), x.data(), shape, 2, 0, 0, MOERT_AXIS_EP, nullptr);
}

/// The member-order f32 sum the communicator defines ("results in member
/// order, the same bits everywhere"): ((0 + x_0) + x_1) + ...
std::vector<float> memberSum(const std::vector<std::vector<float>> &byRank,
                             const std::vector<int32_t> &group, int64_t n) {
  std::vector<float> sum(n, 0.0f);
  for (int32_t r : group)
    for (int64_t k = 0; k < n; ++k)
      sum[k] += byRank[r][k];
  return sum;
}

/// bfloat16 rounding (nearest, ties to even) by its bit definition.
float bf16Round(float v) {
  uint32_t x;
  std::memcpy(&x, &v, 4);
  x += 0x7fffu + ((x >> 16) & 1u);
  x &= 0xffff0000u;
  float r;
  std::memcpy(&r, &x, 4);
  return r;
}

/// What `n` floats become on the wire of codec `kind` (fp16, bf16, int8):
/// int8 as documented in moert/Codecs.h, scale = max |x| / 127 per block of
/// `block` elements, values rounded to nearest and clamped to +-127.
std::vector<float> wireRoundTrip(int kind, int64_t block, const float *x, int64_t n) {
  std::vector<float> y(x, x + n);
  switch (kind) {
  case MOERT_CODEC_BF16:
    for (float &v : y)
      v = bf16Round(v);
    break;
  case MOERT_CODEC_FP16:
    for (float &v : y)
      v = moert::halfToFloat(moert::floatToHalf(v));
    break;
  case MOERT_CODEC_INT8:
    for (int64_t lo = 0; lo < n; lo += block) {
      int64_t hi = std::min(n, lo + block);
      float peak = 0;
      for (int64_t i = lo; i < hi; ++i)
        peak = std::max(peak, std::fabs(x[i]));
      float scale = peak / 127.0f;
      for (int64_t i = lo; i < hi; ++i) {
        long q = scale > 0 ? std::lrint(x[i] / scale) : 0;
        y[i] = static_cast<float>(std::clamp(q, -127L, 127L)) * scale;
      }
    }
    break;
  default:
    ADD_FAILURE() << "no wire round trip for codec " << kind;
  }
  return y;
}

/// Row-major strides of `shape`.
std::vector<int64_t> stridesOf(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = static_cast<int>(shape.size()) - 2; i >= 0; --i)
    s[i] = s[i + 1] * shape[i + 1];
  return s;
}

int64_t numel(const std::vector<int64_t> &shape) {
  int64_t n = 1;
  for (int64_t d : shape)
    n *= d;
  return n;
}

/// moe.all_to_all by definition, for member `m` of a group of `p`: `in`
/// (shape) splits into p slices along `split`, slice m of member q's input
/// is the q-th slice of the output along `concat`.
std::vector<float> expectedAllToAll(const std::vector<std::vector<float>> &inByMember,
                                    const std::vector<int64_t> &shape, int split, int concat, int p,
                                    int m) {
  std::vector<int64_t> chunk = shape, out = shape;
  chunk[split] /= p;
  out[split] /= p;
  out[concat] *= p;
  std::vector<int64_t> inStrides = stridesOf(shape), outStrides = stridesOf(out);
  int rank = static_cast<int>(shape.size());
  std::vector<float> result(numel(out));
  for (int64_t flat = 0; flat < numel(out); ++flat) {
    std::vector<int64_t> idx(rank);
    for (int i = 0; i < rank; ++i)
      idx[i] = (flat / outStrides[i]) % out[i];
    int64_t q = idx[concat] / chunk[concat];
    idx[concat] %= chunk[concat];   // the index within q's chunk
    idx[split] += m * chunk[split]; // in q's input: slice m along split
    int64_t at = 0;
    for (int i = 0; i < rank; ++i)
      at += idx[i] * inStrides[i];
    result[flat] = inByMember[q][at];
  }
  return result;
}

/// Top-k by definition: the k elements of largest magnitude (ties: the
/// lower index) kept, every other element zero.
std::vector<float> topK(const std::vector<float> &y, int64_t k) {
  std::vector<int64_t> order(y.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int64_t a, int64_t b) { return std::fabs(y[a]) > std::fabs(y[b]); });
  std::vector<float> kept(y.size(), 0.0f);
  for (int64_t j = 0; j < k; ++j)
    kept[order[j]] = y[order[j]];
  return kept;
}

/// Valid-row counts of rank r's input blocks: zeros, full, over capacity
/// (capped) and negative (none), different on every rank.
std::vector<int32_t> raggedCounts(int r, int blocks, int32_t capacity) {
  std::vector<int32_t> counts(blocks);
  for (int b = 0; b < blocks; ++b) {
    int32_t pattern[] = {0, capacity, 1, capacity + 2, -1, capacity - 1, 2};
    counts[b] = pattern[(b + 3 * r) % 7];
  }
  if (r == 1)
    std::fill(counts.begin(), counts.end(), 0); // a rank that sends no rows
  return counts;
}

int32_t capped(int32_t n, int32_t capacity) { return std::clamp<int32_t>(n, 0, capacity); }

/// The L2 norm of the full gradient, directly: replicated tensors once,
/// every shard of the group once, squares summed in double.
float directNorm(const std::vector<std::vector<float>> &tensors) {
  double sum = 0;
  for (const std::vector<float> &t : tensors)
    for (float v : t)
      sum += double(v) * v;
  return static_cast<float>(std::sqrt(sum));
}

/// Runs one PowerSGD all-reduce (sum, scale 1) over dp 2 x ep 2 of member
/// matrices M_m = sum_j a_mj b_j^T (j < `rank`, b_j shared: the sum has
/// rank `rank`); returns every rank's output and residual, and the inputs.
struct PowerSGDRun {
  std::vector<std::vector<float>> in, out, residual;
};
PowerSGDRun runPowerSGD(int64_t rank, int64_t codecRank, int64_t rows, int64_t cols,
                        int64_t passedRows, int64_t passedCols) {
  const Grid g{2, 2, 1};
  const int p = g.size();
  const int64_t n = rows * cols;
  moert_codec codec = {MOERT_CODEC_POWERSGD, 256, 0.01, codecRank, 1};
  PowerSGDRun run;
  run.in.resize(p), run.out.resize(p), run.residual.resize(p);
  for (int r = 0; r < p; ++r) {
    run.in[r].assign(n, 0.0f);
    for (int64_t j = 0; j < rank; ++j) {
      std::vector<float> a = randomData(rows, 91 + static_cast<int>(j), r);
      std::vector<float> b = randomData(cols, 90 + static_cast<int>(j), 0);
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t c = 0; c < cols; ++c)
          run.in[r][i * cols + c] += a[i] * b[c];
    }
  }
  EXPECT_EQ(onGrid(g,
                   [&](moert_context &ctx) {
                     run.out[ctx.run.rank].resize(n);
                     int rc = moert_step_all_reduce_codec(
                         &ctx, run.out[ctx.run.rank].data(), run.in[ctx.run.rank].data(), n,
                         MOERT_AXIS_DP | MOERT_AXIS_EP, 0, 1.0, &codec, 0, passedRows, passedCols);
                     run.residual[ctx.run.rank] = moert::codecStates(&ctx).at(0).residual;
                     return rc;
                   }),
            0);
  return run;
}

/// Expects every rank's output to be the sum of the inputs (to float
/// accuracy) and the same bits everywhere, and the error-feedback residual
/// to be the input minus the mean sent (in - out / p).
void expectPowerSGDSum(const PowerSGDRun &run, const std::string &what) {
  int p = static_cast<int>(run.in.size());
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(run.out[r], run.out[0]) << what << " rank " << r;
    for (size_t i = 0; i < run.in[r].size(); ++i) {
      double sum = 0;
      for (int q = 0; q < p; ++q)
        sum += run.in[q][i];
      EXPECT_NEAR(run.out[r][i], sum, 1e-4 * (1 + std::fabs(sum))) << what << " element " << i;
      EXPECT_NEAR(run.residual[r][i], run.in[r][i] - run.out[r][i] / p, 1e-5)
          << what << " element " << i;
    }
  }
}

const Grid kGrids[] = {{1, 2, 1}, {2, 1, 1}, {2, 2, 1}, {1, 4, 1}, {2, 1, 2}};
const int kAxes[] = {MOERT_AXIS_DP,
                     MOERT_AXIS_EP,
                     MOERT_AXIS_DP | MOERT_AXIS_EP,
                     MOERT_AXIS_TP,
                     MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP,
                     0};

//===----------------------------------------------------------------------===//
// moert_grid_group
//===----------------------------------------------------------------------===//

// Members and size of every axis group of every rank of several grids,
// against the coordinates rank = (d * ep + e) * tp + t; spot checks by hand.
TEST(StepCommTest, GridGroupMembersFollowTheRankLayout) {
  const Grid grids[] = {{1, 1, 1}, {1, 2, 1}, {2, 1, 1}, {2, 2, 1},
                        {1, 4, 1}, {2, 2, 2}, {3, 2, 1}, {2, 3, 2}};
  for (const Grid &g : grids)
    for (int rank = 0; rank < g.size(); ++rank)
      for (int axes = 0; axes < 8; ++axes) {
        moert_context ctx = contextOf(g, rank, nullptr);
        std::vector<int32_t> members(g.size(), -1);
        int n = moert_grid_group(&ctx, axes, members.data());
        members.resize(std::max(n, 0));
        std::vector<int32_t> want = expectedGroup(g, rank, axes);
        EXPECT_EQ(members, want) << g.name() << " rank " << rank << " axes " << axes;
        int size = (axes & MOERT_AXIS_DP ? g.dp : 1) * (axes & MOERT_AXIS_EP ? g.ep : 1) *
                   (axes & MOERT_AXIS_TP ? g.tp : 1);
        EXPECT_EQ(n, size) << g.name() << " rank " << rank << " axes " << axes;
      }
  // By hand: dp 2 x ep 2, rank 1 is (d 0, e 1).
  moert_context ctx = contextOf({2, 2, 1}, 1, nullptr);
  int32_t m[4];
  ASSERT_EQ(moert_grid_group(&ctx, MOERT_AXIS_DP, m), 2);
  EXPECT_EQ(std::vector<int32_t>(m, m + 2), (std::vector<int32_t>{1, 3}));
  ASSERT_EQ(moert_grid_group(&ctx, MOERT_AXIS_EP, m), 2);
  EXPECT_EQ(std::vector<int32_t>(m, m + 2), (std::vector<int32_t>{0, 1}));
  // dp 2 x ep 3 x tp 2, rank 9 is (d 1, e 1, t 1).
  ctx = contextOf({2, 3, 2}, 9, nullptr);
  int32_t big[12];
  ASSERT_EQ(moert_grid_group(&ctx, MOERT_AXIS_EP, big), 3);
  EXPECT_EQ(std::vector<int32_t>(big, big + 3), (std::vector<int32_t>{7, 9, 11}));
  ASSERT_EQ(moert_grid_group(&ctx, MOERT_AXIS_DP | MOERT_AXIS_TP, big), 4);
  EXPECT_EQ(std::vector<int32_t>(big, big + 4), (std::vector<int32_t>{2, 3, 8, 9}));
}

// A zeroed context (dp = ep = tp = 0) is one rank: every group is {rank}.
// Bits outside MOERT_AXIS_* select no axis.
TEST(StepCommTest, GridGroupOfAZeroedContextAndUnknownBits) {
  moert_context ctx;
  std::memset(&ctx, 0, sizeof ctx);
  int32_t m[8] = {-1};
  EXPECT_EQ(moert_grid_group(&ctx, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, m), 1);
  EXPECT_EQ(m[0], 0);
  ctx = contextOf({2, 2, 1}, 2, nullptr);
  EXPECT_EQ(moert_grid_group(&ctx, 8, m), 1);
  EXPECT_EQ(m[0], 2);
  EXPECT_EQ(moert_grid_group(&ctx, 8 | MOERT_AXIS_EP, m), 2);
  EXPECT_EQ(std::vector<int32_t>(m, m + 2), (std::vector<int32_t>{2, 3}));
}

//===----------------------------------------------------------------------===//
// moert_step_all_reduce
//===----------------------------------------------------------------------===//

// out = scale * (sum, or mean when `mean`) over the axis group, exactly
// (integer data, dyadic scales: no rounding anywhere), in place and out of
// place, for counts 0, 1 and odd, over every axis combination of several
// grids. A scale applied twice, or a mean not divided, fails here. The
// input of an out-of-place call is untouched; the byte counter advances by
// the ring volume 2 (p-1) * count * 4 / p (nothing for a group of one).
TEST(StepCommTest, AllReduceSumMeanAndScale) {
  const int64_t counts[] = {0, 1, 7, 1001};
  const double scales[] = {1.0, 0.5, 3.0};
  for (const Grid &g : kGrids)
    for (int axes : kAxes) {
      int failures = 0;
      std::mutex mutex;
      int rc = onGrid(g, [&](moert_context &ctx) {
        std::vector<int32_t> group = expectedGroup(g, ctx.run.rank, axes);
        int64_t p = static_cast<int64_t>(group.size());
        for (int64_t count : counts) {
          // The exact sum over the group, element by element.
          std::vector<double> sum(count, 0.0);
          for (int32_t r : group) {
            std::vector<float> theirs = integerData(count, r);
            for (int64_t k = 0; k < count; ++k)
              sum[k] += theirs[k];
          }
          for (int mean = 0; mean < 2; ++mean)
            for (double scale : scales)
              for (int inPlace = 0; inPlace < 2; ++inPlace) {
                std::vector<float> in = integerData(count, ctx.run.rank), out(count, -7.0f);
                std::vector<float> original = in;
                float *dst = inPlace ? in.data() : out.data();
                int64_t before = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE);
                if (int rc = moert_step_all_reduce(&ctx, dst, in.data(), count, axes, mean, scale))
                  return rc;
                int64_t sent = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE) - before;
                bool ok = sent == (p > 1 ? 2 * (p - 1) * count * 4 / p : 0);
                if (!inPlace)
                  ok = ok && in == original;
                for (int64_t k = 0; k < count; ++k)
                  ok = ok && dst[k] == static_cast<float>(scale * sum[k] / (mean ? p : 1));
                if (!ok) {
                  std::lock_guard<std::mutex> lock(mutex);
                  ++failures;
                  ADD_FAILURE() << g.name() << " axes " << axes << " rank " << ctx.run.rank
                                << " count " << count << " mean " << mean << " scale " << scale
                                << " in place " << inPlace << ": got "
                                << (count ? dst[count - 1] : 0.0f) << " for "
                                << (count ? scale * sum[count - 1] / (mean ? p : 1) : 0.0)
                                << ", bytes " << sent;
                }
              }
        }
        return 0;
      });
      EXPECT_EQ(rc, 0) << g.name() << " axes " << axes;
      EXPECT_EQ(failures, 0);
    }
}

// Non-integer data: the result is the communicator's member-order f32 sum
// times the factor, bit for bit, and the same bits on every member.
TEST(StepCommTest, AllReduceIsBitIdenticalOnEveryMember) {
  const Grid g{2, 2, 1};
  const int64_t count = 257;
  const int axes = MOERT_AXIS_DP | MOERT_AXIS_EP;
  std::vector<std::vector<float>> in(g.size()), out(g.size());
  for (int r = 0; r < g.size(); ++r)
    in[r] = randomData(count, 1, r);
  ASSERT_EQ(onGrid(g,
                   [&](moert_context &ctx) {
                     out[ctx.run.rank].assign(count, 0.0f);
                     return moert_step_all_reduce(&ctx, out[ctx.run.rank].data(),
                                                  in[ctx.run.rank].data(), count, axes, 1, 0.1);
                   }),
            0);
  std::vector<float> sum = memberSum(in, expectedGroup(g, 0, axes), count);
  for (int64_t k = 0; k < count; ++k) {
    float want = static_cast<float>(sum[k] * (0.1 / 4));
    for (int r = 0; r < g.size(); ++r)
      ASSERT_EQ(out[r][k], want) << "rank " << r << " element " << k;
  }
}

// One rank needs no communicator: any axes give a group of one, and
// out = scale * in (mean over one is the value).
TEST(StepCommTest, AllReduceOnOneRankIsALocalScale) {
  moert_context ctx = contextOf({1, 1, 1}, 0, nullptr);
  std::vector<float> in = {1.0f, -2.0f, 3.5f}, out(3);
  ASSERT_EQ(moert_step_all_reduce(&ctx, out.data(), in.data(), 3,
                                  MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, 1, 0.5),
            0);
  EXPECT_EQ(out, (std::vector<float>{0.5f, -1.0f, 1.75f}));
  ASSERT_EQ(moert_step_all_reduce(&ctx, in.data(), in.data(), 3, MOERT_AXIS_DP, 0, 1.0), 0);
  EXPECT_EQ(in, (std::vector<float>{1.0f, -2.0f, 3.5f}));
}

// The one-pass scale of a group of one: a factor exact in float takes the
// float product, which is the double product rounded once (the same bits);
// any other factor the double product.
TEST(StepCommTest, OneRankScaleIsTheRoundedDoubleProduct) {
  moert_context ctx = contextOf({1, 1, 1}, 0, nullptr);
  std::vector<float> in(1000);
  for (size_t i = 0; i < in.size(); ++i)
    in[i] = std::ldexp(static_cast<float>(i) * 0.7310585f + 1e-3f, static_cast<int>(i % 200) - 140);
  for (double factor : {0.5, 0.375, 0.1, 1.0 / 3.0, 3e-39}) {
    std::vector<float> out(in.size());
    ASSERT_EQ(moert_step_all_reduce(&ctx, out.data(), in.data(), static_cast<int64_t>(in.size()),
                                    MOERT_AXIS_DP, 0, factor),
              0);
    for (size_t i = 0; i < in.size(); ++i)
      ASSERT_EQ(out[i], static_cast<float>(static_cast<double>(in[i]) * factor))
          << "factor " << factor << ", element " << i;
  }
}

// The runs of placed rows on each ep rank: empty positions (-1) split them,
// rows past the table are empty.
TEST(StepCommTest, PlacedRunsSkipEmptyPositions) {
  const int32_t table[] = {0, -1, 2, 3, /* rank 1 */ -1, -1, 1, 4, /* rank 2 */ 5, 6};
  int64_t runs[8];
  moert_context r0 = contextOf({1, 3, 1}, 0, nullptr);
  ASSERT_EQ(moert_step_placed_runs(&r0, table, 10, 4, runs), 2);
  EXPECT_EQ(std::vector<int64_t>(runs, runs + 4), (std::vector<int64_t>{0, 1, 2, 2}));
  moert_context r1 = contextOf({1, 3, 1}, 1, nullptr);
  ASSERT_EQ(moert_step_placed_runs(&r1, table, 10, 4, runs), 1);
  EXPECT_EQ(std::vector<int64_t>(runs, runs + 2), (std::vector<int64_t>{2, 2}));
  moert_context r2 = contextOf({1, 3, 1}, 2, nullptr);
  ASSERT_EQ(moert_step_placed_runs(&r2, table, 10, 4, runs), 1);
  EXPECT_EQ(std::vector<int64_t>(runs, runs + 2), (std::vector<int64_t>{0, 2}));
  const int32_t empty[] = {-1, -1, -1, -1};
  EXPECT_EQ(moert_step_placed_runs(&r0, empty, 4, 2, runs), 0);
}

//===----------------------------------------------------------------------===//
// moert_step_all_reduce_bucket
// Local steps (moert_context.inputs.replica_local): a reduction over dp stays in
// the data replica (its ep group): a mean over what is left, a sum over dp
// becomes dp times the replica's own; nothing crosses replicas (no bytes for
// a dp-only group), in the bucket and compressed forms too.
TEST(StepCommTest, ReplicaLocalReductionsStayInTheReplica) {
  const Grid g{2, 2, 1};
  const int64_t count = 9;
  int failures = 0;
  std::mutex mutex;
  ASSERT_EQ(onGrid(g,
                   [&](moert_context &ctx) {
                     ctx.inputs.replica_local = 1;
                     std::vector<float> in = integerData(count, ctx.run.rank), out(count);
                     std::vector<int32_t> ep = expectedGroup(g, ctx.run.rank, MOERT_AXIS_EP);
                     std::vector<double> epSum(count, 0.0);
                     for (int32_t r : ep) {
                       std::vector<float> theirs = integerData(count, r);
                       for (int64_t k = 0; k < count; ++k)
                         epSum[k] += theirs[k];
                     }
                     bool ok = true;
                     // [dp, ep] mean: the mean over the ep group.
                     if (int rc = moert_step_all_reduce(&ctx, out.data(), in.data(), count,
                                                        MOERT_AXIS_DP | MOERT_AXIS_EP, 1, 1.0))
                       return rc;
                     for (int64_t k = 0; k < count; ++k)
                       ok = ok && out[k] == static_cast<float>(epSum[k] / 2);
                     // [dp] sum, scale 0.25: dp x the replica's own x 0.25, no bytes.
                     int64_t before = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE);
                     float *outs[] = {out.data()};
                     const float *ins[] = {in.data()};
                     if (int rc = moert_step_all_reduce_bucket(&ctx, 1, outs, ins, &count,
                                                               MOERT_AXIS_DP, 0, 0.25))
                       return rc;
                     for (int64_t k = 0; k < count; ++k)
                       ok = ok && out[k] == static_cast<float>(in[k] * 0.5);
                     ok = ok && moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE) == before;
                     // A compressed [dp] reduction: uncompressed, within the replica.
                     moert_codec int8 = {MOERT_CODEC_INT8, 32, 0, 0, 0};
                     if (int rc =
                             moert_step_all_reduce_codec(&ctx, out.data(), in.data(), count,
                                                         MOERT_AXIS_DP, 1, 1.0, &int8, 0, count, 1))
                       return rc;
                     ok = ok && out == in;
                     if (!ok) {
                       std::lock_guard<std::mutex> lock(mutex);
                       ++failures;
                     }
                     return 0;
                   }),
            0);
  EXPECT_EQ(failures, 0);
}

// --emulate-cluster and --trace: inside a step (step_mark > 0), a
// collective first ends the compute before it, waits compute_slowdown times
// its duration (never less), and records the compute, the wait and the
// collective; the collective's end starts the next compute.
TEST(StepCommTest, EmulatedSlowdownAndTraceAroundACollective) {
  const Grid g{2, 1, 1};
  std::vector<moert_trace> traces(2);
  std::vector<double> marks(2);
  ASSERT_EQ(onGrid(g,
                   [&](moert_context &ctx) {
                     traces[ctx.run.rank].rank = ctx.run.rank;
                     ctx.run.trace = &traces[ctx.run.rank];
                     ctx.run.compute_slowdown = ctx.run.rank == 1 ? 2.0 : 0.0;
                     ctx.runtime.step_mark = moert::nowSeconds();
                     double busy = ctx.runtime.step_mark + 0.002; // 2 ms of "compute"
                     while (moert::nowSeconds() < busy) {
                     }
                     float v = 1.0f;
                     int rc = moert_step_all_reduce(&ctx, &v, &v, 1, MOERT_AXIS_DP, 0, 1.0);
                     marks[ctx.run.rank] = ctx.runtime.step_mark;
                     return rc;
                   }),
            0);
  for (int r = 0; r < 2; ++r) {
    const auto &events = traces[r].events;
    ASSERT_EQ(events.size(), r == 1 ? 3u : 2u) << "rank " << r;
    EXPECT_EQ(events[0].name, "compute");
    EXPECT_GE(events[0].end - events[0].start, 0.002);
    if (r == 1) {
      EXPECT_EQ(events[1].name, "emulated slowdown");
      EXPECT_GE(events[1].end - events[1].start, 2.0 * (events[0].end - events[0].start));
    }
    EXPECT_EQ(events.back().name, "all_reduce");
    EXPECT_EQ(events.back().lane, static_cast<int>(moert::TraceLane::Communication));
    EXPECT_EQ(marks[r], events.back().end);
    std::string text = traces[r].chromeEvents(events[0].start);
    EXPECT_NE(text.find("\"name\":\"rank " + std::to_string(r) + "\""), std::string::npos);
    EXPECT_NE(text.find("\"ph\":\"X\""), std::string::npos);
  }
}

// The emulations' wait: it never returns before its deadline, whether the
// deadline is past, within the final spin (200 us) or beyond it (a sleep,
// then the spin).
TEST(StepCommTest, WaitUntilNeverReturnsEarly) {
  for (double ahead : {-1e-3, 0.0, 20e-6, 150e-6, 400e-6, 2e-3}) {
    double deadline = moert::nowSeconds() + ahead;
    moert::waitUntil(deadline);
    EXPECT_GE(moert::nowSeconds(), deadline) << "ahead " << ahead;
  }
}

// --emulate-link: a collective takes at least its bytes over the bandwidth
// plus the latency of its messages (a ring all-reduce of 2 ranks: 2 (p-1)
// = 2 messages, 4000 bytes each way).
TEST(StepCommTest, EmulatedLinkTakesTheTransferTime) {
  const Grid g{2, 1, 1};
  std::vector<double> took(2);
  ASSERT_EQ(onGrid(g,
                   [&](moert_context &ctx) {
                     moert_comm_emulate_link(ctx.run.comm, 1e6, 1e-3);
                     std::vector<float> v(1000, 1.0f);
                     double start = moert::nowSeconds();
                     int rc = moert_all_reduce_f32(ctx.run.comm, v.data(), 1000,
                                                   std::vector<int32_t>{0, 1}.data(), 2);
                     took[ctx.run.rank] = moert::nowSeconds() - start;
                     return rc;
                   }),
            0);
  for (double t : took)
    EXPECT_GE(t, 4000 / 1e6 + 2 * 1e-3);
}

//===----------------------------------------------------------------------===//

// A bucket of tensors of different sizes (one empty, one in place) equals
// each reduced alone, bit for bit, and the member-order sum times the
// factor; the bucket is one collective of the packed total.
TEST(StepCommTest, AllReduceBucketEqualsEachTensorAlone) {
  const std::vector<int64_t> sizes = {3, 0, 1, 10, 33};
  const int n = static_cast<int>(sizes.size());
  for (const Grid &g : {Grid{1, 2, 1}, Grid{2, 2, 1}})
    for (int axes : {int(MOERT_AXIS_DP), MOERT_AXIS_DP | MOERT_AXIS_EP}) {
      // [rank][tensor]: the inputs, the bucket's outputs, the single ones.
      std::vector<std::vector<std::vector<float>>> in(g.size()), bucket(g.size()), alone(g.size());
      std::vector<int64_t> bytes(g.size());
      for (int r = 0; r < g.size(); ++r)
        for (int t = 0; t < n; ++t)
          in[r].push_back(randomData(sizes[t], 10 + t, r));
      ASSERT_EQ(onGrid(g,
                       [&](moert_context &ctx) {
                         int r = ctx.run.rank;
                         bucket[r] = in[r];
                         std::vector<float *> outs;
                         std::vector<const float *> ins;
                         for (int t = 0; t < n; ++t) {
                           if (t != 3) // tensor 3 in place
                             bucket[r][t].assign(sizes[t], 0.0f);
                           outs.push_back(bucket[r][t].data());
                           ins.push_back(t == 3 ? bucket[r][t].data() : in[r][t].data());
                         }
                         int64_t before = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE);
                         if (int rc = moert_step_all_reduce_bucket(&ctx, n, outs.data(), ins.data(),
                                                                   sizes.data(), axes, 1, 0.5))
                           return rc;
                         bytes[r] = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE) - before;
                         alone[r] = in[r];
                         for (int t = 0; t < n; ++t)
                           if (int rc =
                                   moert_step_all_reduce(&ctx, alone[r][t].data(), in[r][t].data(),
                                                         sizes[t], axes, 1, 0.5))
                             return rc;
                         return 0;
                       }),
                0);
      int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t(0));
      for (int r = 0; r < g.size(); ++r) {
        std::vector<int32_t> group = expectedGroup(g, r, axes);
        int64_t p = static_cast<int64_t>(group.size());
        EXPECT_EQ(bytes[r], 2 * (p - 1) * total * 4 / p) << g.name();
        for (int t = 0; t < n; ++t) {
          std::vector<std::vector<float>> tensorByRank(g.size());
          for (int q = 0; q < g.size(); ++q)
            tensorByRank[q] = in[q][t];
          std::vector<float> want = memberSum(tensorByRank, group, sizes[t]);
          for (float &v : want)
            v = static_cast<float>(v * (0.5 / static_cast<double>(p)));
          EXPECT_EQ(bucket[r][t], want)
              << g.name() << " axes " << axes << " rank " << r << " tensor " << t;
          EXPECT_EQ(bucket[r][t], alone[r][t]) << g.name() << " rank " << r << " tensor " << t;
        }
      }
    }
}

// Background all-reduces (moert_step_all_reduce_start / moert_step_wait,
// moe-schedule's async buckets): two buckets started, a blocking all-to-all
// run while they are in flight, then both waited for in the reverse order.
// The results equal the blocking bucket's bit for bit and the byte counter
// advances as much, whether the background yields to the blocking
// collective or not.
TEST(StepCommTest, BackgroundAllReduceEqualsTheBlockingOne) {
  const std::vector<int64_t> sizes = {7, 1, 300};
  for (const Grid &g : {Grid{1, 2, 1}, Grid{2, 2, 1}})
    for (int yield : {0, 1}) {
      std::vector<std::vector<std::vector<float>>> in(g.size()), bg(g.size()), blocking(g.size());
      std::vector<int64_t> bgBytes(g.size()), blockingBytes(g.size());
      for (int r = 0; r < g.size(); ++r)
        for (size_t t = 0; t < sizes.size(); ++t)
          in[r].push_back(randomData(sizes[t], 40 + static_cast<int>(t), r));
      ASSERT_EQ(
          onGrid(g,
                 [&](moert_context &ctx) {
                   int r = ctx.run.rank;
                   ctx.run.async_yield = yield;
                   bg[r] = blocking[r] = in[r];
                   float *outs[] = {bg[r][0].data(), bg[r][1].data(), bg[r][2].data()};
                   const float *ins[] = {in[r][0].data(), in[r][1].data(), in[r][2].data()};
                   int64_t before = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE);
                   // Bucket 0: tensors 0 and 1 (mean over dp, ep); bucket
                   // 1: tensor 2 (sum over ep, scaled).
                   if (int rc = moert_step_all_reduce_start(&ctx, 0, 2, outs, ins, sizes.data(),
                                                            MOERT_AXIS_DP | MOERT_AXIS_EP, 1, 1.0))
                     return rc;
                   if (int rc = moert_step_all_reduce_start(
                           &ctx, 1, 1, outs + 2, ins + 2, sizes.data() + 2, MOERT_AXIS_EP, 0, 0.25))
                     return rc;
                   if (int rc = foregroundAllToAll(ctx, g))
                     return rc;
                   if (int rc = moert_step_wait(&ctx, 1))
                     return rc;
                   if (int rc = moert_step_wait(&ctx, 0))
                     return rc;
                   bgBytes[r] = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE) - before;
                   before = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE);
                   float *bouts[] = {blocking[r][0].data(), blocking[r][1].data(),
                                     blocking[r][2].data()};
                   if (int rc = moert_step_all_reduce_bucket(&ctx, 2, bouts, ins, sizes.data(),
                                                             MOERT_AXIS_DP | MOERT_AXIS_EP, 1, 1.0))
                     return rc;
                   if (int rc = moert_step_all_reduce_bucket(
                           &ctx, 1, bouts + 2, ins + 2, sizes.data() + 2, MOERT_AXIS_EP, 0, 0.25))
                     return rc;
                   blockingBytes[r] = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE) - before;
                   return 0;
                 }),
          0)
          << g.name();
      for (int r = 0; r < g.size(); ++r) {
        EXPECT_EQ(bg[r], blocking[r]) << g.name() << " rank " << r << " yield " << yield;
        EXPECT_EQ(bgBytes[r], blockingBytes[r]) << g.name() << " rank " << r;
        // And the definition: bucket 1 is the ep sum times 0.25.
        std::vector<std::vector<float>> t2(g.size());
        for (int q = 0; q < g.size(); ++q)
          t2[q] = in[q][2];
        std::vector<float> want = memberSum(t2, expectedGroup(g, r, MOERT_AXIS_EP), sizes[2]);
        for (float &v : want)
          v = static_cast<float>(v * 0.25);
        EXPECT_EQ(bg[r][2], want) << g.name() << " rank " << r;
      }
    }
}

// ZeRO's reduce-scatter in the background (moe-schedule's async bucket):
// the same bits and bytes as the blocking one, with a foreground
// collective between start and wait.
TEST(StepCommTest, BackgroundReduceScatterEqualsTheBlockingOne) {
  const std::vector<int64_t> counts = {7, 300};
  for (const Grid &g : {Grid{2, 1, 1}, Grid{2, 2, 1}}) {
    const int axes = MOERT_AXIS_DP | MOERT_AXIS_EP, p = g.dp * g.ep;
    const std::vector<int64_t> shards = {(7 + p - 1) / p, (300 + p - 1) / p};
    std::vector<std::vector<std::vector<float>>> in(g.size()), bg(g.size()), blocking(g.size());
    std::vector<int64_t> bgBytes(g.size()), blockingBytes(g.size());
    for (int r = 0; r < g.size(); ++r)
      for (size_t t = 0; t < counts.size(); ++t) {
        in[r].push_back(randomData(counts[t], 60 + static_cast<int>(t), r));
        bg[r].emplace_back(shards[t], -1.0f);
        blocking[r].emplace_back(shards[t], -2.0f);
      }
    ASSERT_EQ(onGrid(g,
                     [&](moert_context &ctx) {
                       int r = ctx.run.rank;
                       float *outs[] = {bg[r][0].data(), bg[r][1].data()};
                       const float *ins[] = {in[r][0].data(), in[r][1].data()};
                       int64_t before = moert_comm_bytes(ctx.run.comm, MOERT_REDUCE_SCATTER);
                       if (int rc = moert_step_reduce_scatter_start(
                               &ctx, 3, 2, outs, ins, counts.data(), shards.data(), axes, 1, 1.0))
                         return rc;
                       if (int rc = foregroundAllToAll(ctx, g))
                         return rc;
                       if (int rc = moert_step_wait(&ctx, 3))
                         return rc;
                       bgBytes[r] = moert_comm_bytes(ctx.run.comm, MOERT_REDUCE_SCATTER) - before;
                       before = moert_comm_bytes(ctx.run.comm, MOERT_REDUCE_SCATTER);
                       float *bouts[] = {blocking[r][0].data(), blocking[r][1].data()};
                       if (int rc = moert_step_reduce_scatter(&ctx, 2, bouts, ins, counts.data(),
                                                              shards.data(), axes, 1, 1.0))
                         return rc;
                       blockingBytes[r] =
                           moert_comm_bytes(ctx.run.comm, MOERT_REDUCE_SCATTER) - before;
                       return 0;
                     }),
              0)
        << g.name();
    for (int r = 0; r < g.size(); ++r) {
      EXPECT_EQ(bg[r], blocking[r]) << g.name() << " rank " << r;
      EXPECT_EQ(bgBytes[r], blockingBytes[r]) << g.name() << " rank " << r;
      EXPECT_GT(bgBytes[r], 0) << g.name();
    }
  }
}

// Delayed gradients (moert_context.inputs.staleness = 1): the wait of step t
// gives the sum of step t - 1's inputs corrected by how the rank's own
// input changed, sum(t-1) + p (x(t) - x(t-1)) for a sum over p ranks (the
// exact sum at step 0), though the inputs change right after each start.
// Inputs x_r(s)[k] = 100 s (r + 1) + k + 10 r: rank-dependent changes.
TEST(StepCommTest, DelayedWaitGivesTheLastSumsWithTheLocalCorrection) {
  const Grid g{2, 1, 1};
  const int steps = 4;
  const int64_t n = 5;
  std::vector<std::vector<std::vector<float>>> got(g.size());
  ASSERT_EQ(onGrid(g,
                   [&](moert_context &ctx) {
                     ctx.inputs.staleness = 1;
                     std::vector<float> in(n), out(n, -1.0f);
                     for (int s = 0; s < steps; ++s) {
                       for (int64_t k = 0; k < n; ++k)
                         in[k] = float(100 * s * (ctx.run.rank + 1) + k + 10 * ctx.run.rank);
                       float *outs[] = {out.data()};
                       const float *ins[] = {in.data()};
                       if (int rc = moert_step_all_reduce_start(&ctx, 7, 1, outs, ins, &n,
                                                                MOERT_AXIS_DP, 0, 1.0))
                         return rc;
                       std::fill(in.begin(), in.end(), 1e9f); // the step goes on
                       if (int rc = moert_step_wait(&ctx, 7))
                         return rc;
                       got[ctx.run.rank].push_back(out);
                     }
                     return 0;
                   }),
            0);
  for (int r = 0; r < g.size(); ++r)
    for (int s = 0; s < steps; ++s)
      for (int64_t k = 0; k < n; ++k) {
        float want =
            s == 0 ? float(2 * k + 10) : float(300 * (s - 1) + 2 * k + 10 + 2 * 100 * (r + 1));
        EXPECT_EQ(got[r][s][k], want) << "rank " << r << " step " << s << " element " << k;
      }
}

// A wait for a handle never started, and a handle started twice before
// its wait, are errors naming the handle; on one rank (no communicator) a
// background reduction is a local scale.
TEST(StepCommTest, BackgroundAllReduceErrorsAndOneRank) {
  std::vector<std::string> errors;
  EXPECT_NE(
      onGrid(
          Grid{1, 2, 1}, [](moert_context &ctx) { return moert_step_wait(&ctx, 5); }, &errors),
      0);
  ASSERT_EQ(errors.size(), 2u);
  for (const std::string &e : errors)
    EXPECT_NE(e.find("wait on background all-reduce #5, which was not started"), std::string::npos)
        << e;
  EXPECT_NE(onGrid(
                Grid{1, 2, 1},
                [](moert_context &ctx) {
                  std::vector<float> a(4, 1.0f), b(4, 2.0f);
                  float *outs[] = {a.data()};
                  const float *ins[] = {a.data()};
                  int64_t n = 4;
                  if (int rc = moert_step_all_reduce_start(&ctx, 3, 1, outs, ins, &n, MOERT_AXIS_EP,
                                                           0, 1.0))
                    return rc;
                  float *outs2[] = {b.data()};
                  const float *ins2[] = {b.data()};
                  int rc = moert_step_all_reduce_start(&ctx, 3, 1, outs2, ins2, &n, MOERT_AXIS_EP,
                                                       0, 1.0);
                  moert_step_wait(&ctx, 3); // the first one, which its peer also started
                  return rc;
                },
                &errors),
            0);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("background all-reduce #3 started again before its wait"),
            std::string::npos)
      << errors[0];
  moert_context one = contextOf(Grid{}, 0, nullptr);
  std::vector<float> x = {1, 2, 3};
  float *outs[] = {x.data()};
  const float *ins[] = {x.data()};
  int64_t n = 3;
  ASSERT_EQ(moert_step_all_reduce_start(&one, 0, 1, outs, ins, &n, MOERT_AXIS_DP, 1, 2.0), 0);
  ASSERT_EQ(moert_step_wait(&one, 0), 0);
  EXPECT_EQ(x, (std::vector<float>{2, 4, 6}));
  moert_async_free(&one);
}

//===----------------------------------------------------------------------===//
// moert_step_all_to_all
//===----------------------------------------------------------------------===//

/// The groups the all-to-all tests exchange over: 2 and 4 ep members, two
/// groups of 2 at once (dp 2), and one group of 4 across dp and ep.
struct ExchangeGroup {
  Grid grid;
  int axes;
};
const ExchangeGroup kExchangeGroups[] = {{{1, 2, 1}, MOERT_AXIS_EP},
                                         {{1, 4, 1}, MOERT_AXIS_EP},
                                         {{2, 2, 1}, MOERT_AXIS_EP},
                                         {{2, 2, 1}, MOERT_AXIS_DP | MOERT_AXIS_EP}};

// Dense all-to-alls of several shapes and split/concat pairs (dispatch
// [E, C, D] 0 -> 1, combine [E/P, P*C, D] 1 -> 0, split after concat,
// split == concat) over groups of 2 and 4 (and two groups of 2 at once):
// every element lands where moe.all_to_all's definition puts it, and the
// byte counter advances by (p-1)/p of the buffer. Dispatch then combine is
// the identity.
TEST(StepCommTest, AllToAllMovesEachSliceToItsMember) {
  for (const ExchangeGroup &c : kExchangeGroups) {
    const Grid &g = c.grid;
    int p = static_cast<int>(expectedGroup(g, 0, c.axes).size());
    struct Exchange {
      std::vector<int64_t> shape;
      int split, concat;
    };
    const Exchange exchanges[] = {{{2L * p, 3, 2}, 0, 1},
                                  {{2, 3L * p, 2}, 1, 0},
                                  {{2, 2L * p, 3, 2}, 1, 3},
                                  {{3, 2, 2L * p}, 2, 1},
                                  {{2L * p, 3}, 0, 0}};
    for (const Exchange &x : exchanges) {
      int64_t total = numel(x.shape);
      std::vector<std::vector<float>> in(g.size()), out(g.size());
      std::vector<int64_t> bytes(g.size());
      for (int r = 0; r < g.size(); ++r) {
        in[r].resize(total);
        for (int64_t k = 0; k < total; ++k)
          in[r][k] = static_cast<float>(1000 * r + k); // who sent it, and from where
      }
      ASSERT_EQ(onGrid(g,
                       [&](moert_context &ctx) {
                         out[ctx.run.rank].assign(total, -1.0f);
                         int64_t before = moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL);
                         int rc = moert_step_all_to_all(&ctx, out[ctx.run.rank].data(),
                                                        in[ctx.run.rank].data(), x.shape.data(),
                                                        static_cast<int>(x.shape.size()), x.split,
                                                        x.concat, c.axes, nullptr);
                         bytes[ctx.run.rank] =
                             moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL) - before;
                         return rc;
                       }),
                0);
      for (int r = 0; r < g.size(); ++r) {
        std::vector<int32_t> group = expectedGroup(g, r, c.axes);
        std::vector<std::vector<float>> inByMember;
        int m = -1;
        for (int j = 0; j < p; ++j) {
          inByMember.push_back(in[group[j]]);
          if (group[j] == r)
            m = j;
        }
        EXPECT_EQ(out[r], expectedAllToAll(inByMember, x.shape, x.split, x.concat, p, m))
            << g.name() << " axes " << c.axes << " rank " << r << " split " << x.split << " concat "
            << x.concat;
        EXPECT_EQ(bytes[r], (p - 1) * total / p * 4);
      }
    }
    // Dispatch [2P, 3, 2] (0 -> 1) then combine [2, 3P, 2] (1 -> 0).
    std::vector<std::vector<float>> in(g.size()), back(g.size());
    ASSERT_EQ(onGrid(g,
                     [&](moert_context &ctx) {
                       const int64_t there[] = {2L * p, 3, 2}, mid[] = {2, 3L * p, 2};
                       in[ctx.run.rank] = randomData(12 * p, 20, ctx.run.rank);
                       std::vector<float> owned(12 * p);
                       back[ctx.run.rank].assign(12 * p, 0.0f);
                       if (int rc =
                               moert_step_all_to_all(&ctx, owned.data(), in[ctx.run.rank].data(),
                                                     there, 3, 0, 1, c.axes, nullptr))
                         return rc;
                       return moert_step_all_to_all(&ctx, back[ctx.run.rank].data(), owned.data(),
                                                    mid, 3, 1, 0, c.axes, nullptr);
                     }),
              0);
    EXPECT_EQ(back, in) << g.name();
  }
}

// With a codec (bf16, fp16, int8) each payload is rounded on the wire, the
// local chunk too ("the same rounding as a remote chunk"), including on
// one rank without a communicator; the byte counter advances by the
// encoded size (moert_all_to_all_wire_bytes).
TEST(StepCommTest, AllToAllWithACodecRoundsOnTheWire) {
  const int64_t block = 4;
  for (int kind : {MOERT_CODEC_BF16, MOERT_CODEC_FP16, MOERT_CODEC_INT8})
    for (const Grid &g : {Grid{1, 1, 1}, Grid{1, 2, 1}, Grid{1, 4, 1}}) {
      int p = g.size();
      moert_codec codec = {kind, block, 0, 0, 0};
      const std::vector<int64_t> shape = {2L * p, 3, 2};
      int64_t total = numel(shape);
      std::vector<std::vector<float>> in(p), out(p), rounded(p);
      std::vector<int64_t> bytes(p);
      for (int r = 0; r < p; ++r)
        in[r] = randomData(total, 30, r);
      auto body = [&](moert_context &ctx) {
        out[ctx.run.rank].assign(total, 0.0f);
        int64_t before = ctx.run.comm ? moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL) : 0;
        int rc = moert_step_all_to_all(&ctx, out[ctx.run.rank].data(), in[ctx.run.rank].data(),
                                       shape.data(), 3, 0, 1, MOERT_AXIS_EP, &codec);
        bytes[ctx.run.rank] =
            ctx.run.comm ? moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL) - before : 0;
        return rc;
      };
      if (p == 1) {
        moert_context ctx = contextOf(g, 0, nullptr);
        ASSERT_EQ(body(ctx), 0);
      } else {
        ASSERT_EQ(onGrid(g, body), 0);
      }
      // Each member encodes its chunk for member m (total / p consecutive
      // floats after packing: slice m of [2P, 3, 2] along 0 is contiguous).
      int64_t chunk = total / p;
      for (int r = 0; r < p; ++r) {
        rounded[r].resize(total);
        for (int m = 0; m < p; ++m) {
          std::vector<float> piece = wireRoundTrip(kind, block, in[r].data() + m * chunk, chunk);
          std::copy(piece.begin(), piece.end(), rounded[r].begin() + m * chunk);
        }
      }
      for (int m = 0; m < p; ++m) {
        EXPECT_EQ(out[m], expectedAllToAll(rounded, shape, 0, 1, p, m))
            << "codec " << kind << " " << g.name() << " member " << m;
        EXPECT_EQ(bytes[m], (p - 1) * moert_all_to_all_wire_bytes(kind, block, chunk));
      }
    }
}

//===----------------------------------------------------------------------===//
// moert_step_all_to_all_ragged
//===----------------------------------------------------------------------===//

// Dispatch ([E, C, D], split 0, concat 1) and combine ([E/P, P*C, D],
// split 1, concat 0) with routing-dependent counts, including a rank that
// sends nothing and counts over capacity: member m's output block (i, q)
// holds the valid rows of member q's block for expert m * E/P + i, then
// zeros; recv has the (capped) counts; only valid rows and the counts
// travel (byte counter). Combine brings every valid row home.
TEST(StepCommTest, AllToAllRaggedRoutesValidRowsOnly) {
  const int32_t C = 3;
  const int64_t D = 2;
  for (const ExchangeGroup &c : kExchangeGroups) {
    const Grid &g = c.grid;
    int p = static_cast<int>(expectedGroup(g, 0, c.axes).size());
    int E = 2 * p, A = E / p; // experts, experts per member
    const int64_t dispatchShape[] = {E, C, D}, combineShape[] = {A, p * C, D};
    int64_t total = E * C * D;
    std::vector<std::vector<float>> in(g.size()), owned(g.size()), back(g.size());
    std::vector<std::vector<int32_t>> counts(g.size()), recv(g.size()), backCounts(g.size());
    std::vector<int64_t> bytes(g.size());
    for (int r = 0; r < g.size(); ++r) {
      counts[r] = raggedCounts(r, E, C);
      in[r].resize(total);
      for (int64_t k = 0; k < total; ++k)
        in[r][k] = static_cast<float>(1000 * r + k);
    }
    ASSERT_EQ(onGrid(g,
                     [&](moert_context &ctx) {
                       int r = ctx.run.rank;
                       owned[r].assign(total, -1.0f);
                       back[r].assign(total, -1.0f);
                       recv[r].assign(E, -1);
                       backCounts[r].assign(E, -1);
                       int64_t before = moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL);
                       if (int rc = moert_step_all_to_all_ragged(
                               &ctx, owned[r].data(), in[r].data(), dispatchShape, 0, 1, c.axes,
                               counts[r].data(), recv[r].data(), nullptr))
                         return rc;
                       bytes[r] = moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL) - before;
                       return moert_step_all_to_all_ragged(
                           &ctx, back[r].data(), owned[r].data(), combineShape, 1, 0, c.axes,
                           recv[r].data(), backCounts[r].data(), nullptr);
                     }),
              0);
    for (int r = 0; r < g.size(); ++r) {
      std::vector<int32_t> group = expectedGroup(g, r, c.axes);
      int m = static_cast<int>(std::find(group.begin(), group.end(), r) - group.begin());
      // Dispatch: block (i, q) of [A, P*C, D] at i * P + q.
      std::vector<float> want(total, 0.0f);
      std::vector<int32_t> wantRecv(E);
      for (int i = 0; i < A; ++i)
        for (int q = 0; q < p; ++q) {
          int sender = group[q], expert = m * A + i;
          int32_t n = capped(counts[sender][expert], C);
          wantRecv[i * p + q] = n;
          for (int64_t row = 0; row < n; ++row)
            for (int64_t d = 0; d < D; ++d)
              want[((i * p + q) * C + row) * D + d] = in[sender][(expert * C + row) * D + d];
        }
      EXPECT_EQ(owned[r], want) << g.name() << " axes " << c.axes << " rank " << r;
      EXPECT_EQ(recv[r], wantRecv) << g.name() << " rank " << r;
      // Bytes: the counts (A per other member), then the valid rows.
      int64_t wantBytes = (p - 1) * A * 4;
      for (int q = 0; q < p; ++q)
        if (q != m)
          for (int i = 0; i < A; ++i)
            wantBytes += capped(counts[r][q * A + i], C) * D * 4;
      EXPECT_EQ(bytes[r], wantBytes) << g.name() << " rank " << r;
      // Combine: every valid row back where it was, zeros after it.
      std::vector<float> home(total, 0.0f);
      std::vector<int32_t> homeCounts(E);
      for (int e = 0; e < E; ++e) {
        homeCounts[e] = capped(counts[r][e], C);
        for (int64_t k = 0; k < homeCounts[e] * D; ++k)
          home[e * C * D + k] = in[r][e * C * D + k];
      }
      EXPECT_EQ(back[r], home) << g.name() << " rank " << r;
      EXPECT_EQ(backCounts[r], homeCounts) << g.name() << " rank " << r;
    }
  }
}

// Background exchanges (moert_step_all_to_all_ragged_start /
// moert_step_exchange_wait, moe-pipeline-experts' chunks): two dispatches
// started, a background all-reduce and a blocking all-to-all run while
// they are in flight, then waited for in the reverse order. They equal the
// blocking exchange bit for bit with the same bytes; a wait for an
// exchange never started, or a second start before the wait, is an error.
TEST(StepCommTest, BackgroundExchangeEqualsTheBlockingOne) {
  const int32_t C = 3;
  const int64_t D = 2;
  for (const ExchangeGroup &c : kExchangeGroups) {
    const Grid &g = c.grid;
    int p = static_cast<int>(expectedGroup(g, 0, c.axes).size());
    int E = 2 * p;
    const int64_t shape[] = {E, C, D};
    int64_t total = E * C * D;
    std::vector<std::vector<float>> in(g.size()), bg(g.size()), bg2(g.size()), blocking(g.size());
    std::vector<std::vector<int32_t>> counts(g.size()), recv(g.size()), recv2(g.size()),
        blockingRecv(g.size());
    std::vector<int64_t> bgBytes(g.size()), blockingBytes(g.size());
    std::vector<std::string> errors(g.size());
    for (int r = 0; r < g.size(); ++r) {
      counts[r] = raggedCounts(r, E, C);
      in[r] = randomData(total, 60, r);
    }
    ASSERT_EQ(
        onGrid(g,
               [&](moert_context &ctx) {
                 int r = ctx.run.rank;
                 ctx.run.async_yield = 1;
                 bg[r].assign(total, -1.0f);
                 bg2[r].assign(total, -1.0f);
                 blocking[r].assign(total, -1.0f);
                 recv[r].assign(E, -1);
                 recv2[r].assign(E, -1);
                 blockingRecv[r].assign(E, -1);
                 int64_t before = moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL);
                 if (int rc = moert_step_all_to_all_ragged_start(
                         &ctx, 5, bg[r].data(), in[r].data(), shape, 0, 1, c.axes, counts[r].data(),
                         recv[r].data(), nullptr))
                   return rc;
                 if (int rc = moert_step_all_to_all_ragged_start(
                         &ctx, 6, bg2[r].data(), in[r].data(), shape, 0, 1, c.axes,
                         counts[r].data(), recv2[r].data(), nullptr))
                   return rc;
                 // Started again before its wait: refused.
                 if (moert_step_all_to_all_ragged_start(&ctx, 6, bg2[r].data(), in[r].data(), shape,
                                                        0, 1, c.axes, counts[r].data(),
                                                        recv2[r].data(), nullptr) == 0)
                   return 2;
                 errors[r] = moert_comm_error(ctx.run.comm);
                 float sum = 1.0f, *out = &sum;
                 const float *inp = &sum;
                 const int64_t one = 1;
                 if (int rc =
                         moert_step_all_reduce_start(&ctx, 0, 1, &out, &inp, &one, c.axes, 0, 1.0))
                   return rc;
                 // The background bytes are counted at the waits.
                 int64_t mark = moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL);
                 if (int rc = foregroundAllToAll(ctx, g))
                   return rc;
                 before += moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL) - mark;
                 if (int rc = moert_step_exchange_wait(&ctx, 6))
                   return rc;
                 if (int rc = moert_step_exchange_wait(&ctx, 5))
                   return rc;
                 if (int rc = moert_step_wait(&ctx, 0))
                   return rc;
                 bgBytes[r] = moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL) - before;
                 before = moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL);
                 if (int rc = moert_step_all_to_all_ragged(&ctx, blocking[r].data(), in[r].data(),
                                                           shape, 0, 1, c.axes, counts[r].data(),
                                                           blockingRecv[r].data(), nullptr))
                   return rc;
                 blockingBytes[r] = 2 * (moert_comm_bytes(ctx.run.comm, MOERT_ALL_TO_ALL) - before);
                 // Never started: an error, not a hang.
                 return moert_step_exchange_wait(&ctx, 9) == 0 ? 3 : 0;
               }),
        0)
        << g.name();
    for (int r = 0; r < g.size(); ++r) {
      EXPECT_EQ(bg[r], blocking[r]) << g.name() << " rank " << r;
      EXPECT_EQ(bg2[r], blocking[r]) << g.name() << " rank " << r;
      EXPECT_EQ(recv[r], blockingRecv[r]) << g.name() << " rank " << r;
      EXPECT_EQ(recv2[r], blockingRecv[r]) << g.name() << " rank " << r;
      EXPECT_EQ(bgBytes[r], blockingBytes[r]) << g.name() << " rank " << r;
      EXPECT_NE(errors[r].find("background all_to_all #6 started again before its wait"),
                std::string::npos)
          << errors[r];
    }
  }
}

// The ragged form with an fp16 codec (only valid rows are encoded), and on
// one rank without a communicator (a local copy, still rounded).
TEST(StepCommTest, AllToAllRaggedWithACodecAndOnOneRank) {
  const int32_t C = 4;
  const int64_t D = 3;
  moert_codec codec = {MOERT_CODEC_FP16, 256, 0, 0, 0};
  for (const Grid &g : {Grid{1, 1, 1}, Grid{1, 2, 1}}) {
    int p = g.size(), E = 2 * p, A = 2;
    const int64_t shape[] = {E, C, D};
    int64_t total = E * C * D;
    std::vector<std::vector<float>> in(p), out(p);
    std::vector<std::vector<int32_t>> counts(p), recv(p);
    for (int r = 0; r < p; ++r) {
      in[r] = randomData(total, 40, r);
      counts[r] = raggedCounts(r, E, C);
    }
    auto body = [&](moert_context &ctx) {
      int r = ctx.run.rank;
      out[r].assign(total, -1.0f);
      recv[r].assign(E, -1);
      return moert_step_all_to_all_ragged(&ctx, out[r].data(), in[r].data(), shape, 0, 1,
                                          MOERT_AXIS_EP, counts[r].data(), recv[r].data(), &codec);
    };
    if (p == 1) {
      moert_context ctx = contextOf(g, 0, nullptr);
      ASSERT_EQ(body(ctx), 0);
    } else {
      ASSERT_EQ(onGrid(g, body), 0);
    }
    for (int m = 0; m < p; ++m) {
      std::vector<float> want(total, 0.0f);
      for (int i = 0; i < A; ++i)
        for (int q = 0; q < p; ++q) {
          int expert = m * A + i;
          int32_t n = capped(counts[q][expert], C);
          EXPECT_EQ(recv[m][i * p + q], n);
          std::vector<float> rows =
              wireRoundTrip(MOERT_CODEC_FP16, 256, in[q].data() + expert * C * D, n * D);
          std::copy(rows.begin(), rows.end(), want.begin() + (i * p + q) * C * D);
        }
      EXPECT_EQ(out[m], want) << g.name() << " member " << m;
    }
  }
}

//===----------------------------------------------------------------------===//
// moert_step_global_norm
//===----------------------------------------------------------------------===//

// Replicated and expert-sharded gradients over dp x ep grids (shards over
// ep, replicated over dp): every rank's norm is the same bits, and within
// one float ulp of the norm of the full gradient (replicated counted once,
// every shard once). A shard summed only locally, or a replicated tensor
// summed over the group, is off by far more. (Not always exactly the
// direct norm: the (hi, lo) pairs add in float, and a member's sum of
// squares must fit float's range.) The all-reduce sends two floats (the
// emitted volume 2 (p-1) * 2 * 4 / p). The norm also lands in
// ctx->outputs.grad_norm, and with ctx->buffers.grad_squares each tensor's squares at its
// parameter's index.
TEST(StepCommTest, GlobalNormCountsReplicatedOnceAndShardsOverTheGroup) {
  for (const Grid &g : {Grid{1, 2, 1}, Grid{2, 2, 1}, Grid{1, 4, 1}}) {
    // Tensor 0 and 2 replicated, 1 and 3 expert shards.
    const std::vector<int64_t> sizes = {5, 7, 3, 1};
    const unsigned char sharded[] = {0, 1, 0, 1};
    std::vector<std::vector<std::vector<float>>> grads(g.size());
    for (int r = 0; r < g.size(); ++r) {
      int e = r % g.ep;
      for (int t = 0; t < 4; ++t) // shards differ over ep, replicas are equal
        grads[r].push_back(randomData(sizes[t], 50 + t, sharded[t] ? e : 0, 0.5f + t));
    }
    std::vector<float> norms(g.size()), local(g.size()), gradNorms(g.size());
    std::vector<int64_t> bytes(g.size());
    std::vector<std::vector<double>> squares(g.size(), std::vector<double>(4, -1.0));
    ASSERT_EQ(onGrid(g,
                     [&](moert_context &ctx) {
                       int r = ctx.run.rank;
                       const float *ptrs[4];
                       for (int t = 0; t < 4; ++t)
                         ptrs[t] = grads[r][t].data();
                       int64_t before = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE);
                       if (int rc = moert_step_global_norm(&ctx, ptrs, sizes.data(), sharded,
                                                           nullptr, nullptr, 4, MOERT_AXIS_EP,
                                                           nullptr, nullptr, nullptr, &norms[r]))
                         return rc;
                       bytes[r] = moert_comm_bytes(ctx.run.comm, MOERT_ALL_REDUCE) - before;
                       gradNorms[r] = ctx.outputs.grad_norm;
                       // No `sharded`: no collective, this rank's tensors only;
                       // each tensor's squares recorded at its parameter index.
                       ctx.buffers.grad_squares = squares[r].data();
                       const int paramOf[] = {3, -1, 0, 1};
                       return moert_step_global_norm(&ctx, ptrs, sizes.data(), nullptr, nullptr,
                                                     paramOf, 4, MOERT_AXIS_EP, nullptr, nullptr,
                                                     nullptr, &local[r]);
                     }),
              0);
    std::vector<std::vector<float>> full = {grads[0][0], grads[0][2]};
    for (int e = 0; e < g.ep; ++e) {
      full.push_back(grads[e][1]);
      full.push_back(grads[e][3]);
    }
    float want = directNorm(full);
    for (int r = 0; r < g.size(); ++r) {
      EXPECT_EQ(norms[r], norms[0]) << g.name() << " rank " << r;
      EXPECT_LE(std::fabs(norms[r] - want), want - std::nextafter(want, 0.0f))
          << g.name() << " rank " << r << ": " << norms[r] << " vs " << want;
      EXPECT_EQ(local[r], directNorm(grads[r])) << g.name() << " rank " << r;
      EXPECT_EQ(bytes[r], 2 * (g.ep - 1) * 2 * 4 / g.ep);
      EXPECT_EQ(gradNorms[r], norms[r]) << "ctx->outputs.grad_norm, rank " << r;
      const int tensorOf[] = {2, 3, -1, 0}; // inverse of paramOf; parameter 2 untouched
      for (int param = 0; param < 4; ++param) {
        double want = -1.0;
        if (tensorOf[param] >= 0) {
          float n = directNorm({grads[r][tensorOf[param]]});
          want = double(n) * n;
        }
        EXPECT_NEAR(squares[r][param], want, 1e-6 * std::fabs(want)) << "parameter " << param;
      }
    }
  }
}

// ZeRO: a reduce-scatter of several tensors (sizes not divisible by the
// group, one smaller than the group) gives each member its elements
// [i S, (i + 1) S) of the reduced vector, zeros past its end, with the mean
// and scale applied; a shard slice of a tensor every member holds is the
// same piece without communication; and after each member writes its shard
// of a padded parameter, the gather leaves every member the whole
// parameter. The offsets follow the group's member order.
TEST(StepCommTest, ZeroReduceScatterShardSliceAndParameterGather) {
  for (const Grid &g : {Grid{2, 1, 1}, Grid{2, 2, 1}, Grid{1, 3, 1}, Grid{2, 1, 2}}) {
    const int axes = MOERT_AXIS_DP | MOERT_AXIS_EP;
    const int p = g.dp * g.ep;
    const std::vector<int64_t> counts = {7, 1, 12};
    std::vector<int64_t> shards;
    for (int64_t n : counts)
      shards.push_back((n + p - 1) / p);
    std::vector<std::vector<std::vector<float>>> in(g.size());
    for (int r = 0; r < g.size(); ++r)
      for (size_t t = 0; t < counts.size(); ++t)
        in[r].push_back(randomData(counts[t], 70 + static_cast<int>(t), r / g.tp));
    std::vector<std::vector<std::vector<float>>> out(g.size()), params(g.size());
    std::vector<std::vector<float>> slice(g.size());
    std::vector<int64_t> offset(g.size());
    ASSERT_EQ(onGrid(g,
                     [&](moert_context &ctx) {
                       int r = ctx.run.rank;
                       std::vector<float *> outs;
                       std::vector<const float *> ins;
                       for (size_t t = 0; t < counts.size(); ++t) {
                         out[r].emplace_back(shards[t], -1.0f);
                         outs.push_back(out[r][t].data());
                         ins.push_back(in[r][t].data());
                       }
                       if (int rc = moert_step_reduce_scatter(&ctx, 3, outs.data(), ins.data(),
                                                              counts.data(), shards.data(), axes, 1,
                                                              0.5))
                         return rc;
                       offset[r] = moert_step_shard_offset(&ctx, axes, shards[2]);
                       slice[r].assign(shards[2], -1.0f);
                       moert_step_shard_slice(&ctx, slice[r].data(), in[r][2].data(), counts[2],
                                              shards[2], axes);
                       // Each member writes its shard of two parameters,
                       // then gathers them.
                       std::vector<float *> ptrs;
                       for (int t : {0, 2}) {
                         params[r].emplace_back(p * shards[t], 0.0f);
                         int64_t at = moert_step_shard_offset(&ctx, axes, shards[t]);
                         for (int64_t k = 0; k < shards[t]; ++k)
                           params[r].back()[at + k] = at + k < counts[t] ? float(at + k) : 0.0f;
                       }
                       for (auto &v : params[r])
                         ptrs.push_back(v.data());
                       const int64_t gathered[] = {shards[0], shards[2]};
                       return moert_step_gather_params(&ctx, 2, ptrs.data(), gathered, axes);
                     }),
              0)
        << g.name();
    for (int r = 0; r < g.size(); ++r) {
      std::vector<int32_t> group = expectedGroup(g, r, axes);
      int index = static_cast<int>(std::find(group.begin(), group.end(), r) - group.begin());
      EXPECT_EQ(offset[r], index * shards[2]) << g.name();
      for (size_t t = 0; t < counts.size(); ++t)
        for (int64_t k = 0; k < shards[t]; ++k) {
          int64_t at = index * shards[t] + k;
          double want = 0;
          if (at < counts[t])
            for (int32_t m : group)
              want += in[m][t][at];
          want *= 0.5 / p;
          EXPECT_NEAR(out[r][t][k], want, 1e-5) << g.name() << " rank " << r << " tensor " << t;
          if (t == 2)
            EXPECT_EQ(slice[r][k], at < counts[t] ? in[r][t][at] : 0.0f);
        }
      for (size_t j = 0; j < 2; ++j) {
        int64_t n = counts[j == 0 ? 0 : 2];
        for (int64_t k = 0; k < static_cast<int64_t>(params[r][j].size()); ++k)
          EXPECT_EQ(params[r][j][k], k < n ? float(k) : 0.0f) << g.name() << " rank " << r;
      }
    }
  }
}

// Tensor parallelism: a piece that `copies` members of the norm's group
// hold (a slice tp splits but ep does not) counts 1/copies on each, so the
// norm counts it once.
TEST(StepCommTest, GlobalNormCountsCopiedPiecesOnce) {
  Grid g{1, 2, 2};
  // Tensor 0: an expert block split over ep and tp (each rank's own);
  // tensor 1: a tp slice the same on both ep ranks.
  const std::vector<int64_t> sizes = {3, 4};
  const unsigned char sharded[] = {1, 1};
  const int64_t copies[] = {1, 2};
  std::vector<std::vector<std::vector<float>>> grads(g.size());
  for (int r = 0; r < g.size(); ++r) {
    int e = r / g.tp, t = r % g.tp;
    grads[r].push_back(randomData(sizes[0], 90, r));
    grads[r].push_back(randomData(sizes[1], 91, t));
    (void)e;
  }
  std::vector<float> norms(g.size());
  ASSERT_EQ(
      onGrid(g,
             [&](moert_context &ctx) {
               const float *ptrs[] = {grads[ctx.run.rank][0].data(), grads[ctx.run.rank][1].data()};
               return moert_step_global_norm(&ctx, ptrs, sizes.data(), sharded, copies, nullptr, 2,
                                             MOERT_AXIS_EP | MOERT_AXIS_TP, nullptr, nullptr,
                                             nullptr, &norms[ctx.run.rank]);
             }),
      0);
  double want = 0;
  for (int r = 0; r < g.size(); ++r)
    for (float x : grads[r][0])
      want += double(x) * x;
  for (int t = 0; t < g.tp; ++t)
    for (float x : grads[t][1])
      want += double(x) * x;
  for (float n : norms)
    EXPECT_NEAR(n, std::sqrt(want), 1e-5 * std::sqrt(want));
}

// Precision: each member's sum of squares travels as a (hi, lo) float pair,
// so what a single float would round away still counts. Constructed so the
// float norm rounds up only when every lo bit arrives: replicated {1}, each
// of two ep shards {2^-12, 2^-25 x 3}, sum of squares 1 + 2^-23 + 6 * 2^-50
// (a member's 2^-24 + 3 * 2^-50 is 2^-24 in float); the norm is
// 1 + 2^-24 + ~2^-50, just above the tie: 1 + 2^-23 in float, 1 without lo.
// Also large magnitudes (squares ~1e30, far past float's 24 bits of their
// sum) and small ones (squares ~1e-30).
TEST(StepCommTest, GlobalNormKeepsWhatOneFloatPerMemberWouldLose) {
  const Grid g{1, 2, 1};
  auto run = [&](const std::vector<std::vector<float>> &replicated,
                 const std::vector<std::vector<std::vector<float>>> &shardsByRank) {
    std::vector<float> norms(g.size());
    EXPECT_EQ(onGrid(g,
                     [&](moert_context &ctx) {
                       std::vector<const float *> ptrs;
                       std::vector<int64_t> sizes;
                       std::vector<unsigned char> sharded;
                       for (const auto &t : replicated) {
                         ptrs.push_back(t.data());
                         sizes.push_back(static_cast<int64_t>(t.size()));
                         sharded.push_back(0);
                       }
                       for (const auto &t : shardsByRank[ctx.run.rank]) {
                         ptrs.push_back(t.data());
                         sizes.push_back(static_cast<int64_t>(t.size()));
                         sharded.push_back(1);
                       }
                       return moert_step_global_norm(
                           &ctx, ptrs.data(), sizes.data(), sharded.data(), nullptr, nullptr,
                           static_cast<int>(ptrs.size()), MOERT_AXIS_EP, nullptr, nullptr, nullptr,
                           &norms[ctx.run.rank]);
                     }),
              0);
    EXPECT_EQ(norms[0], norms[1]);
    return norms[0];
  };
  const float a = std::ldexp(1.0f, -12), b = std::ldexp(1.0f, -25);
  std::vector<std::vector<float>> shard = {{a, b, b, b}};
  float norm = run({{1.0f}}, {shard, shard});
  EXPECT_EQ(directNorm({{1.0f}, {a, b, b, b}, {a, b, b, b}}), 1.0f + std::ldexp(1.0f, -23));
  EXPECT_EQ(norm, 1.0f + std::ldexp(1.0f, -23));
  // Large and small magnitudes, random: within one ulp of the direct norm.
  for (float scale : {1e15f, 1e-15f}) {
    std::vector<std::vector<std::vector<float>>> shards(2);
    std::vector<std::vector<float>> full = {randomData(9, 60, 0, scale)};
    for (int r = 0; r < 2; ++r) {
      shards[r] = {randomData(300, 61, r, scale), randomData(4, 62, r, scale * 1e-4f)};
      full.insert(full.end(), shards[r].begin(), shards[r].end());
    }
    float want = directNorm(full);
    EXPECT_LE(std::fabs(run({full[0]}, shards) - want), want - std::nextafter(want, 0.0f))
        << "scale " << scale;
  }
}

//===----------------------------------------------------------------------===//
// moert_step_balance_bias
//===----------------------------------------------------------------------===//

/// The load rule by definition: bias[e] + rate * sign(mean - load[e]),
/// mean over the experts of the whole batch's loads.
std::vector<float> expectedBias(std::vector<float> bias, const std::vector<int64_t> &load,
                                double rate) {
  double mean = 0;
  for (int64_t n : load)
    mean += static_cast<double>(n) / static_cast<double>(load.size());
  for (size_t e = 0; e < bias.size(); ++e)
    if (static_cast<double>(load[e]) != mean)
      bias[e] = static_cast<float>(double(bias[e]) + (load[e] < mean ? rate : -rate));
  return bias;
}

// Each rank counts its own choices; the loads of the group decide every
// rank's update, the same on all; a load equal to the mean leaves its bias.
// On a dp 2 x ep 2 grid, summed over [dp, ep] and over [ep] only.
TEST(StepCommTest, BalanceBiasMovesEveryRanksBiasByTheGroupsLoad) {
  const Grid g{2, 2, 1};
  const int32_t experts = 4;
  // Rank r routes ids[r]; over all ranks expert 0 gets 6, 1 gets 2, 2 gets
  // 4 (the mean, 16 / 4), 3 gets 4.
  const std::vector<std::vector<int32_t>> ids = {
      {0, 0, 1, 2}, {0, 0, 2, 3}, {0, 1, 3, 3}, {0, 2, 2, 3}};
  const std::vector<float> start = {0.5f, -0.25f, 0.0f, 1e-3f};
  for (int axes : {int(MOERT_AXIS_DP | MOERT_AXIS_EP), int(MOERT_AXIS_EP)}) {
    std::vector<std::vector<float>> bias(g.size(), start);
    ASSERT_EQ(onGrid(g,
                     [&](moert_context &ctx) {
                       return moert_step_balance_bias(&ctx, bias[ctx.run.rank].data(), experts,
                                                      ids[ctx.run.rank].data(), 4, 1e-3, axes);
                     }),
              0);
    for (int r = 0; r < g.size(); ++r) {
      std::vector<int64_t> load(experts, 0);
      for (int32_t member : expectedGroup(g, r, axes))
        for (int32_t e : ids[member])
          ++load[e];
      EXPECT_EQ(bias[r], expectedBias(start, load, 1e-3)) << "rank " << r << " axes " << axes;
      for (int32_t member : expectedGroup(g, r, axes))
        EXPECT_EQ(bias[r], bias[member]);
    }
  }
  // The whole grid: expert 2 sits at the mean and keeps its bias.
  std::vector<float> one = start;
  moert_context ctx = contextOf(Grid{}, 0, nullptr);
  std::vector<int32_t> all;
  for (const auto &r : ids)
    all.insert(all.end(), r.begin(), r.end());
  ASSERT_EQ(moert_step_balance_bias(&ctx, one.data(), experts, all.data(),
                                    static_cast<int64_t>(all.size()), 1e-3, 0),
            0);
  EXPECT_EQ(one[2], start[2]);
  EXPECT_LT(one[0], start[0]);
  EXPECT_GT(one[1], start[1]);
}

// Loads past what a float holds exactly (2^24) are summed exactly. Rank 0
// routes 2^24 + 1 slots to expert 0, rank 1 one more to expert 0 and 2^24
// to expert 1: expert 0 is overloaded by 2. Summed as floats, 2^24 + 1
// rounds to 2^24 and the sum to 2^24, level with expert 1, and neither bias
// would move.
TEST(StepCommTest, BalanceBiasCountsLargeLoadsExactly) {
  const Grid g{1, 2, 1};
  const size_t n = (size_t(1) << 24);
  std::vector<std::vector<int32_t>> ids(2);
  ids[0].assign(n + 1, 0);
  ids[1].assign(n + 1, 1);
  ids[1][0] = 0;
  std::vector<std::vector<float>> bias(2, std::vector<float>(2, 0.0f));
  ASSERT_EQ(onGrid(g,
                   [&](moert_context &ctx) {
                     return moert_step_balance_bias(
                         &ctx, bias[ctx.run.rank].data(), 2, ids[ctx.run.rank].data(),
                         static_cast<int64_t>(ids[ctx.run.rank].size()), 0.5, MOERT_AXIS_EP);
                   }),
            0);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(bias[r][0], -0.5f);
    EXPECT_EQ(bias[r][1], 0.5f);
  }
}

// An index outside [0, experts) is an error, not a write out of bounds;
// rate 0 leaves the bias as it was.
TEST(StepCommTest, BalanceBiasRefusesBadIndicesAndRateZeroKeepsTheBias) {
  moert_context ctx = contextOf(Grid{}, 0, nullptr);
  std::vector<float> bias = {0.25f, 0.5f};
  const int32_t bad[] = {0, 2}, negative[] = {-1, 0}, skewed[] = {0, 0, 0, 1};
  ::testing::internal::CaptureStderr();
  EXPECT_NE(moert_step_balance_bias(&ctx, bias.data(), 2, bad, 2, 1e-3, 0), 0);
  EXPECT_NE(moert_step_balance_bias(&ctx, bias.data(), 2, negative, 2, 1e-3, 0), 0);
  std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("expert index 2, outside [0, 2)"), std::string::npos) << err;
  EXPECT_NE(err.find("expert index -1, outside [0, 2)"), std::string::npos) << err;
  EXPECT_EQ(bias, (std::vector<float>{0.25f, 0.5f}));
  EXPECT_EQ(moert_step_balance_bias(&ctx, bias.data(), 2, skewed, 4, 0.0, 0), 0);
  EXPECT_EQ(bias, (std::vector<float>{0.25f, 0.5f}));
  EXPECT_EQ(moert_step_balance_bias(&ctx, bias.data(), 2, skewed, 4, 0.125, 0), 0);
  EXPECT_EQ(bias, (std::vector<float>{0.125f, 0.625f}));
}

//===----------------------------------------------------------------------===//
// moert_step_all_reduce_codec and moert_codec_states_free
//===----------------------------------------------------------------------===//

// fp16, bf16 and int8 (block 4): the element chunks (ceil(n / p) each) are
// round-tripped on the wire, summed in member order on their owner, the sum
// round-tripped again, then scaled once; the same bits everywhere. For n
// not divisible by p (11 over 4: chunks 3, 3, 3, 2) and divisible. bf16
// also stays within its rounding bound of the exact mean.
TEST(StepCommTest, CodecAllReduceOfHalfAndInt8Payloads) {
  const int64_t block = 4;
  for (int kind : {MOERT_CODEC_BF16, MOERT_CODEC_FP16, MOERT_CODEC_INT8})
    for (const Grid &g : {Grid{1, 2, 1}, Grid{2, 2, 1}})
      for (int64_t n : {11, 16}) {
        const int axes = MOERT_AXIS_DP | MOERT_AXIS_EP;
        int p = g.size();
        moert_codec codec = {kind, block, 0, 0, 0};
        std::vector<std::vector<float>> in(p), out(p);
        for (int r = 0; r < p; ++r)
          in[r] = randomData(n, 70, r);
        ASSERT_EQ(onGrid(g,
                         [&](moert_context &ctx) {
                           out[ctx.run.rank].assign(n, 0.0f);
                           return moert_step_all_reduce_codec(&ctx, out[ctx.run.rank].data(),
                                                              in[ctx.run.rank].data(), n, axes, 1,
                                                              2.0, &codec, 0, n, 1);
                         }),
                  0);
        int64_t chunk = (n + p - 1) / p;
        std::vector<float> want(n);
        for (int64_t lo = 0; lo < n; lo += chunk) {
          int64_t len = std::min(chunk, n - lo);
          std::vector<float> sum(len, 0.0f);
          for (int r = 0; r < p; ++r) {
            std::vector<float> part = wireRoundTrip(kind, block, in[r].data() + lo, len);
            for (int64_t i = 0; i < len; ++i)
              sum[i] += part[i];
          }
          std::vector<float> back = wireRoundTrip(kind, block, sum.data(), len);
          for (int64_t i = 0; i < len; ++i)
            want[lo + i] = static_cast<float>(back[i] * (2.0 / p));
        }
        for (int r = 0; r < p; ++r)
          EXPECT_EQ(out[r], want) << "codec " << kind << " " << g.name() << " n " << n << " rank "
                                  << r;
        if (kind == MOERT_CODEC_BF16)
          for (int64_t i = 0; i < n; ++i) {
            double exact = 0, magnitude = 0;
            for (int r = 0; r < p; ++r)
              exact += in[r][i], magnitude += std::fabs(in[r][i]);
            // Each input and the sum rounded once: relative 2^-8 each.
            double bound = std::ldexp(1.0, -8) * (magnitude + std::fabs(exact)) * 1.01;
            EXPECT_LE(std::fabs(out[0][i] - 2.0 * exact / p), 2.0 * bound / p) << i;
          }
      }
}

// Top-k with error feedback over two calls of one site: each member sends
// the k = moert_topk_count(ratio, n) largest magnitudes of its input plus
// its residual, the results are summed in member order and scaled once,
// and the residual (what was not sent) carries to the next call. Another
// site keeps its own state; moert_codec_states_free drops every state, so
// the next call starts from zero residuals again.
TEST(StepCommTest, CodecAllReduceTopKCarriesTheResidual) {
  const Grid g{1, 2, 1};
  const int64_t n = 20;
  const int p = 2;
  moert_codec codec = {MOERT_CODEC_TOPK, 256, 0.1, 4, 1};
  int64_t k = moert_topk_count(0.1, n);
  ASSERT_EQ(k, 2);
  std::vector<std::vector<float>> x(p), y(p);
  for (int r = 0; r < p; ++r)
    x[r] = randomData(n, 80, r), y[r] = randomData(n, 81, r);
  // [rank]: first and second call on site 0, first call on site 1, residual
  // after the first call, the call after the states were freed.
  std::vector<std::vector<float>> first(p), second(p), other(p), residual(p), fresh(p);
  std::vector<int> freed(p);
  ASSERT_EQ(
      onGrid(g,
             [&](moert_context &ctx) {
               int r = ctx.run.rank;
               first[r].resize(n), second[r].resize(n), other[r].resize(n);
               fresh[r].resize(n);
               if (int rc = moert_step_all_reduce_codec(&ctx, first[r].data(), x[r].data(), n,
                                                        MOERT_AXIS_EP, 1, 3.0, &codec, 0, n, 1))
                 return rc;
               residual[r] = moert::codecStates(&ctx).at(0).residual;
               if (int rc = moert_step_all_reduce_codec(&ctx, second[r].data(), y[r].data(), n,
                                                        MOERT_AXIS_EP, 1, 3.0, &codec, 0, n, 1))
                 return rc;
               if (int rc = moert_step_all_reduce_codec(&ctx, other[r].data(), x[r].data(), n,
                                                        MOERT_AXIS_EP, 1, 3.0, &codec, 1, n, 1))
                 return rc;
               moert_codec_states_free(&ctx);
               freed[r] = ctx.runtime.codec_states == nullptr;
               moert_codec_states_free(&ctx); // twice is harmless
               return moert_step_all_reduce_codec(&ctx, fresh[r].data(), x[r].data(), n,
                                                  MOERT_AXIS_EP, 1, 3.0, &codec, 0, n, 1);
             }),
      0);
  // Call 1: top-k of x; residual x - sent.
  std::vector<std::vector<float>> sent(p), carry(p);
  std::vector<float> want1(n, 0.0f), want2(n, 0.0f);
  for (int r = 0; r < p; ++r) {
    sent[r] = topK(x[r], k);
    carry[r].resize(n);
    for (int64_t i = 0; i < n; ++i) {
      want1[i] += sent[r][i];
      carry[r][i] = x[r][i] - sent[r][i];
    }
    EXPECT_EQ(residual[r], carry[r]) << "rank " << r;
  }
  // Call 2: top-k of y + residual.
  for (int r = 0; r < p; ++r) {
    std::vector<float> z(n);
    for (int64_t i = 0; i < n; ++i)
      z[i] = y[r][i] + carry[r][i];
    std::vector<float> s = topK(z, k);
    for (int64_t i = 0; i < n; ++i)
      want2[i] += s[i];
  }
  for (float &v : want1)
    v = static_cast<float>(v * (3.0 / p));
  for (float &v : want2)
    v = static_cast<float>(v * (3.0 / p));
  for (int r = 0; r < p; ++r) {
    EXPECT_EQ(first[r], want1) << "rank " << r;
    EXPECT_EQ(second[r], want2) << "rank " << r;
    EXPECT_EQ(other[r], want1) << "site 1 has its own state, rank " << r;
    EXPECT_TRUE(freed[r]);
    EXPECT_EQ(fresh[r], want1) << "after moert_codec_states_free, rank " << r;
  }
}

// PowerSGD: a sum of members' matrices of rank r (each member's own is of
// rank r too, in the same row space) is recovered by a rank-r PowerSGD
// (P = sum M_m Q and Q = sum M_m^T P all-reduced), on every member alike;
// the residual is what the mean sent missed. A tensor whose [rows, cols]
// does not match its count is viewed as [count, 1] (then exact).
TEST(StepCommTest, CodecAllReducePowerSGDRecoversALowRankSum) {
  expectPowerSGDSum(runPowerSGD(1, 1, 6, 5, 6, 5), "rank 1 of rank 1");
  expectPowerSGDSum(runPowerSGD(2, 2, 6, 5, 6, 5), "rank 2 of rank 2");
  expectPowerSGDSum(runPowerSGD(3, 3, 7, 4, 7, 4), "rank 3 of rank 3");
  expectPowerSGDSum(runPowerSGD(3, 2, 6, 5, 0, 0), "[30, 1] view");
}

// A sum of rank lower than the codec's rank (an expert that few tokens
// reached: its weight gradient has rank <= its tokens) is recovered exactly
// too. (It came back up to ~60% wrong when Gram-Schmidt normalised a column
// that was only rounding noise.)
TEST(StepCommTest, CodecAllReducePowerSGDOfARankDeficientSum) {
  expectPowerSGDSum(runPowerSGD(1, 2, 6, 5, 6, 5), "rank 1 of rank 2");
  expectPowerSGDSum(runPowerSGD(2, 4, 8, 6, 8, 6), "rank 2 of rank 4");
}

// An empty tensor through every codec (top-k once selected from before the
// first element) is a no-op, not a crash.
TEST(StepCommTest, CodecAllReduceOfNothing) {
  for (int kind = MOERT_CODEC_FP16; kind <= MOERT_CODEC_POWERSGD; ++kind) {
    moert_codec codec = {kind, 16, 0.05, 3, 1};
    EXPECT_EQ(onGrid(Grid{1, 2, 1},
                     [&](moert_context &ctx) {
                       float in = 1, out = 2;
                       return moert_step_all_reduce_codec(&ctx, &out, &in, 0, MOERT_AXIS_EP, 1, 1.0,
                                                          &codec, 0, 0, 0);
                     }),
              0)
        << "codec " << kind;
  }
}

// Every codec's byte counters: one call adds to codec_sent exactly
// moert_codec_all_reduce_bytes(...) (in the collective kinds it uses) and
// to codec_uncompressed moert_ring_all_reduce_bytes(n, p), over groups of 2
// and 4; a second call adds as much again. A group of one sends nothing.
TEST(StepCommTest, CodecByteCountersFollowTheAbiFormulas) {
  const int64_t rows = 8, cols = 13, n = rows * cols;
  for (int kind = MOERT_CODEC_FP16; kind <= MOERT_CODEC_POWERSGD; ++kind)
    for (const Grid &g : {Grid{1, 2, 1}, Grid{2, 2, 1}, Grid{2, 1, 2}}) {
      const int axes = MOERT_AXIS_DP | MOERT_AXIS_EP;
      int64_t p = static_cast<int64_t>(expectedGroup(g, 0, axes).size());
      moert_codec codec = {kind, 16, 0.05, 3, 1};
      std::vector<std::vector<int64_t>> sent(g.size());
      std::vector<int64_t> uncompressed(g.size()), commTotal(g.size());
      ASSERT_EQ(onGrid(g,
                       [&](moert_context &ctx) {
                         std::vector<float> in = randomData(n, 100, ctx.run.rank), out(n);
                         for (int call = 0; call < 2; ++call)
                           if (int rc =
                                   moert_step_all_reduce_codec(&ctx, out.data(), in.data(), n, axes,
                                                               1, 1.0, &codec, 0, rows, cols))
                             return rc;
                         sent[ctx.run.rank].assign(ctx.runtime.codec_sent,
                                                   ctx.runtime.codec_sent + 6);
                         uncompressed[ctx.run.rank] = ctx.runtime.codec_uncompressed;
                         // The comm's own counters saw exactly the same.
                         int64_t all = 0;
                         for (int c = 0; c < MOERT_NUM_COLLECTIVES; ++c)
                           all += moert_comm_bytes(ctx.run.comm, c);
                         commTotal[ctx.run.rank] = all;
                         return 0;
                       }),
                0);
      int64_t want = moert_codec_all_reduce_bytes(kind, 16, 0.05, 3, n, rows, cols, p);
      // The collective each codec uses.
      std::vector<int64_t> wantBy(6, 0);
      if (kind <= MOERT_CODEC_INT8) {
        int64_t piece = moert_codec_encoded_bytes(kind, 16, 0, 0, (n + p - 1) / p, 0, 0);
        wantBy[MOERT_ALL_TO_ALL] = wantBy[MOERT_ALL_GATHER] = 2 * (p - 1) * piece;
      } else if (kind == MOERT_CODEC_POWERSGD) {
        wantBy[MOERT_ALL_REDUCE] = 2 * want;
      } else {
        wantBy[MOERT_ALL_GATHER] = 2 * want;
      }
      for (int r = 0; r < g.size(); ++r) {
        int64_t total = std::accumulate(sent[r].begin(), sent[r].end(), int64_t(0));
        EXPECT_EQ(total, 2 * want) << "codec " << kind << " " << g.name() << " rank " << r;
        EXPECT_EQ(sent[r], wantBy) << "codec " << kind << " " << g.name() << " rank " << r;
        EXPECT_EQ(commTotal[r], total) << "codec " << kind << " " << g.name();
        EXPECT_EQ(uncompressed[r], 2 * moert_ring_all_reduce_bytes(n, p)) << "codec " << kind;
      }
    }
  // A group of one: nothing sent, nothing that would have been.
  moert_context ctx = contextOf({1, 1, 1}, 0, nullptr);
  moert_codec topk = {MOERT_CODEC_TOPK, 256, 0.5, 4, 1};
  std::vector<float> in = {4.0f, -1.0f, 0.5f, 3.0f}, out(4);
  ASSERT_EQ(moert_step_all_reduce_codec(&ctx, out.data(), in.data(), 4, MOERT_AXIS_DP, 0, 1.0,
                                        &topk, 0, 4, 1),
            0);
  EXPECT_EQ(out, (std::vector<float>{4.0f, 0.0f, 0.0f, 3.0f}));
  for (int64_t v : ctx.runtime.codec_sent)
    EXPECT_EQ(v, 0);
  EXPECT_EQ(ctx.runtime.codec_uncompressed, 0);
  EXPECT_NE(ctx.runtime.codec_states, nullptr);
  moert_codec_states_free(&ctx);
  EXPECT_EQ(ctx.runtime.codec_states, nullptr);
}

//===----------------------------------------------------------------------===//
// Error paths
//===----------------------------------------------------------------------===//

// A group of more than one rank without a communicator is an error (1),
// not a crash, for every routine; so is a ragged split/concat pair other
// than (0, 1) and (1, 0).
TEST(StepCommTest, ErrorsWithoutACommunicatorAndBadRaggedDims) {
  moert_context ctx = contextOf({2, 2, 1}, 3, nullptr);
  std::vector<float> in(16, 1.0f), out(16);
  EXPECT_NE(moert_step_all_reduce(&ctx, out.data(), in.data(), 16, MOERT_AXIS_DP, 0, 1.0), 0);
  float *outs[] = {out.data()};
  const float *ins[] = {in.data()};
  const int64_t counts[] = {16};
  EXPECT_NE(moert_step_all_reduce_bucket(&ctx, 1, outs, ins, counts, MOERT_AXIS_EP, 0, 1.0), 0);
  const int64_t shape[] = {4, 2, 2};
  EXPECT_NE(
      moert_step_all_to_all(&ctx, out.data(), in.data(), shape, 3, 0, 1, MOERT_AXIS_EP, nullptr),
      0);
  int32_t rowCounts[4] = {1, 2, 0, 2}, recv[4];
  EXPECT_NE(moert_step_all_to_all_ragged(&ctx, out.data(), in.data(), shape, 0, 1, MOERT_AXIS_EP,
                                         rowCounts, recv, nullptr),
            0);
  const float *grads[] = {in.data()};
  const unsigned char sharded[] = {1};
  float norm = -1;
  EXPECT_NE(moert_step_global_norm(&ctx, grads, counts, sharded, nullptr, nullptr, 1, MOERT_AXIS_EP,
                                   nullptr, nullptr, nullptr, &norm),
            0);
  for (int kind = MOERT_CODEC_FP16; kind <= MOERT_CODEC_POWERSGD; ++kind) {
    moert_codec codec = {kind, 4, 0.25, 2, 1};
    EXPECT_NE(moert_step_all_reduce_codec(&ctx, out.data(), in.data(), 16, MOERT_AXIS_DP, 0, 1.0,
                                          &codec, 0, 4, 4),
              0)
        << "codec " << kind;
  }
  moert_codec_states_free(&ctx);
  // Ragged dims: only dispatch (0, 1) and combine (1, 0) exist.
  moert_context one = contextOf({1, 1, 1}, 0, nullptr);
  EXPECT_NE(moert_step_all_to_all_ragged(&one, out.data(), in.data(), shape, 0, 0, MOERT_AXIS_EP,
                                         rowCounts, recv, nullptr),
            0);
  EXPECT_NE(moert_step_all_to_all_ragged(&one, out.data(), in.data(), shape, 1, 2, MOERT_AXIS_EP,
                                         rowCounts, recv, nullptr),
            0);
}

// A communicator failure comes back as non-zero with the communicator's
// message: a peer that never arrives (timeout naming it) and members that
// disagree on the element count.
TEST(StepCommTest, CommunicatorFailuresAreReturned) {
  const Grid g{1, 2, 1};
  std::vector<std::string> errors;
  EXPECT_NE(onGrid(
                g,
                [&](moert_context &ctx) {
                  if (ctx.run.rank == 1)
                    return 0; // never joins
                  float x[3] = {1, 2, 3};
                  return moert_step_all_reduce(&ctx, x, x, 3, MOERT_AXIS_EP, 1, 1.0);
                },
                &errors, 0.2),
            0);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_NE(errors[0].find("rank(s) 1 did not arrive"), std::string::npos) << errors[0];
  // Different counts on the members of one all-reduce.
  EXPECT_NE(onGrid(
                g,
                [&](moert_context &ctx) {
                  float x[4] = {1, 2, 3, 4};
                  return moert_step_all_reduce(&ctx, x, x, 3 + ctx.run.rank, MOERT_AXIS_EP, 0, 1.0);
                },
                &errors, 2),
            0);
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_NE(errors[0].find("members passed different element counts"), std::string::npos)
      << errors[0];
  // A missing peer in the global norm's and a codec's collectives.
  EXPECT_NE(onGrid(
                g,
                [&](moert_context &ctx) {
                  if (ctx.run.rank == 0)
                    return 0;
                  float g0[2] = {1, 2}, norm;
                  const float *grads[] = {g0};
                  const int64_t sizes[] = {2};
                  const unsigned char sharded[] = {1};
                  moert_codec codec = {MOERT_CODEC_BF16, 256, 0, 0, 0};
                  int failures =
                      moert_step_global_norm(&ctx, grads, sizes, sharded, nullptr, nullptr, 1,
                                             MOERT_AXIS_EP, nullptr, nullptr, nullptr, &norm) != 0;
                  failures += moert_step_all_reduce_codec(&ctx, g0, g0, 2, MOERT_AXIS_EP, 0, 1.0,
                                                          &codec, 0, 2, 1) != 0;
                  return failures == 2 ? 1 : 0;
                },
                &errors, 0.2),
            0);
}

} // namespace
