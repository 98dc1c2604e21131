//===- StepReduce.h - the step's all-reduce, on any communicator -*- C++ -*-===//
//
// moe.all_reduce's work without the timing around it, shared by the step's
// blocking collectives (StepComm.cpp) and its background ones
// (AsyncComm.cpp), so both give the same bits. Internal to the runtime.
//
//===----------------------------------------------------------------------===//

#ifndef MOERT_LIB_STEPREDUCE_H
#define MOERT_LIB_STEPREDUCE_H

#include "Trace.h"
#include "moert/Program.h"

#include <cstdint>
#include <vector>

namespace moert {

/// The step enters (+1) or leaves (-1) a blocking collective: background
/// all-reduces that yield to it wait (AsyncComm.cpp).
void asyncForeground(moert_context *ctx, int delta);

/// Adds the time of the outermost collective routine of this rank (ranks
/// may be threads; routines call each other) to ctx->outputs.comm_seconds; in a
/// step, ends the compute before it and records it (`name`) in the trace.
/// A `foreground` one holds back background all-reduces that yield; a wait
/// for them must not.
class CommTimer {
public:
  CommTimer(moert_context *ctx, const char *name, bool foreground = true)
      : ctx(ctx), name(name), outer(depth++ == 0), foreground(foreground) {
    if (!outer)
      return;
    moert_step_end_compute(ctx);
    if (foreground)
      asyncForeground(ctx, +1);
    start = nowSeconds();
  }
  ~CommTimer() {
    --depth;
    if (!outer)
      return;
    double end = nowSeconds();
    if (foreground)
      asyncForeground(ctx, -1);
    ctx->outputs.comm_seconds += end - start;
    if (ctx->run.trace)
      ctx->run.trace->add(TraceLane::Communication, name, start, end);
    if (ctx->runtime.step_mark > 0)
      ctx->runtime.step_mark = end;
  }
  CommTimer(const CommTimer &) = delete;
  CommTimer &operator=(const CommTimer &) = delete;

private:
  static thread_local int depth;
  moert_context *ctx;
  const char *name;
  bool outer, foreground;
  double start = 0;
};

/// moert_step_all_to_all_ragged's work over `comm` (the step's, or the
/// background exchange channel's), without the timing around it.
int raggedAllToAll(const moert_context *ctx, moert_comm *comm, float *out, const float *in,
                   const int64_t *shape, int split, int concat, int axes, const int32_t *counts,
                   int32_t *recv, const moert_codec *codec);

/// The group of grid `axes` for the calling rank into `group` (its size
/// returned), after a replica-local step's adjustment of axes and scale
/// (moert_context.inputs.replica_local).
int bucketGroup(const moert_context *ctx, int &axes, int mean, double &scale,
                std::vector<int32_t> &group);

/// outs[t] = (sum over the group of ins[t]) x scale (/ group size when
/// `mean`), for n tensors of counts[t] floats, over `comm` (null for a
/// group of one). Several tensors travel as one message.
int reduceBucket(moert_comm *comm, const int32_t *group, int groupSize, int n, float *const *outs,
                 const float *const *ins, const int64_t *counts, int mean, double scale);

/// ZeRO's flat reduce-scatter of n tensors as one collective: outs[t]
/// (shards[t] floats) = scale x (sum, or mean, over the group of this
/// member's elements of ins[t], zeros past counts[t]); `index` is the
/// member's slice.
int reduceScatterBucket(moert_comm *comm, const int32_t *group, int groupSize, int n,
                        float *const *outs, const float *const *ins, const int64_t *counts,
                        const int64_t *shards, int mean, double scale);

} // namespace moert

#endif // MOERT_LIB_STEPREDUCE_H
