//===- MicroBatches.cpp - gradient sums over a step's micro-batches -------===//
//
// moert_step_micro_batch, moert_step_accumulate and moert_micro_batches_free
// (moert/Program.h): the state lives in ctx->runtime, made on first use.
//
//===----------------------------------------------------------------------===//

#include "moert/Program.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <vector>

/// The selection biases' load counts of the micro-batches so far, by bias.
using BiasLoads = std::map<const float *, std::vector<int64_t>>;

extern "C" void moert_step_micro_batch(moert_context *ctx, int32_t index, int32_t count) {
  ctx->runtime.micro_batch = index;
  ctx->runtime.micro_batches = count;
}

extern "C" int moert_step_accumulate(moert_context *ctx, float *grad, int64_t n, int64_t offset,
                                     int64_t total) {
  moert_runtime_state &state = ctx->runtime;
  const int32_t count = state.micro_batches, index = state.micro_batch;
  if (count <= 1)
    return 0;
  if (offset < 0 || n < 0 || offset + n > total) {
    std::fprintf(stderr, "error: gradient sum [%lld, %lld) outside the accumulator of %lld\n",
                 static_cast<long long>(offset), static_cast<long long>(offset + n),
                 static_cast<long long>(total));
    return 1;
  }
  if (state.grad_accum_floats != total) {
    std::free(state.grad_accum);
    state.grad_accum = static_cast<float *>(std::malloc(static_cast<size_t>(total) * 4));
    state.grad_accum_floats = state.grad_accum ? total : 0;
    if (!state.grad_accum) {
      std::fprintf(stderr,
                   "error: cannot allocate the gradient sums of the micro-batches (%lld "
                   "bytes)\n",
                   static_cast<long long>(total) * 4);
      return 1;
    }
  }
  float *sum = state.grad_accum + offset;
  if (index == 0) {
    std::memcpy(sum, grad, static_cast<size_t>(n) * 4);
  } else if (index + 1 < count) {
    for (int64_t i = 0; i < n; ++i)
      sum[i] += grad[i];
  } else {
    const float scale = 1.0f / static_cast<float>(count);
    for (int64_t i = 0; i < n; ++i)
      grad[i] = (sum[i] + grad[i]) * scale;
  }
  return 0;
}

extern "C" void moert_micro_batches_free(moert_context *ctx) {
  std::free(ctx->runtime.grad_accum);
  ctx->runtime.grad_accum = nullptr;
  ctx->runtime.grad_accum_floats = 0;
  delete static_cast<BiasLoads *>(ctx->runtime.bias_loads);
  ctx->runtime.bias_loads = nullptr;
}

/// moert_step_balance_bias with micro-batches: adds `load` to the step's
/// counts of `bias`; true when the update is to run now (the last
/// micro-batch, `load` then the step's counts).
bool moertMicroBatchLoads(moert_context *ctx, const float *bias, std::vector<int64_t> &load) {
  moert_runtime_state &state = ctx->runtime;
  if (state.micro_batches <= 1)
    return true;
  if (!state.bias_loads)
    state.bias_loads = new BiasLoads();
  auto &loads = *static_cast<BiasLoads *>(state.bias_loads);
  std::vector<int64_t> &sum = loads[bias];
  if (state.micro_batch == 0 || sum.size() != load.size())
    sum.assign(load.size(), 0);
  for (size_t e = 0; e < load.size(); ++e)
    sum[e] += load[e];
  if (state.micro_batch + 1 < state.micro_batches)
    return false;
  load = sum;
  loads.erase(bias);
  return true;
}
