//===- Staleness.cpp - delayed gradient all-reduces (--staleness) ---------===//

#include "Staleness.h"

#include <cstdio>

using namespace moert::trainer;

void Staleness::configure() {
  const Options &o = r.o;
  if (o.staleness <= 0)
    return;
  bool zero = false;
  for (int i = 0; i < r.prog.num_params; ++i)
    zero = zero || r.prog.params[i].zero_parts > 1;
  // Unequal token shares weigh each replica's gradient by its share: the
  // delayed form takes a rank's own gradient for the replicas' mean.
  if (r.binary.replica_batches)
    die("--staleness with unequal token shares (moec --token-shares or a mixed cluster) is not "
        "supported yet: the correction takes a rank's own weighted gradient for the mean");
  if (r.binary.loss_scale > 0)
    die("--staleness with a loss-scaled (f16) binary is not supported: a delayed sum would mix "
        "two steps' loss scales");
  if (zero)
    die("--staleness with a ZeRO binary (moec --zero) is not supported: the reduce-scatters "
        "are not delayed");
  if (!r.prog.async_buckets)
    die("--staleness delays the step's background all-reduces, and this binary has none "
        "(compiled for one rank, or with moec --schedule=blocking)");
  if (o.localSteps > 0)
    die("--staleness with --local-steps is not supported: local steps reduce nothing over dp");
  if (o.rebalanceEvery > 0)
    die("--staleness with --rebalance-every is not supported: a delayed expert gradient would "
        "land on the expert's old position");
  if (r.lead)
    std::printf("delayed gradients: from step %lld, each step applies the previous step's "
                "all-reduced gradients, corrected by the change of the rank's own (%d "
                "buckets)\n",
                o.syncSteps + 1, r.prog.async_buckets);
  if (r.lead && o.resume)
    std::printf("note: resuming with delayed gradients is not exact: the data replicas' "
                "parameters differed, the checkpoint holds the lead's, and the reductions "
                "in flight at the save are not in it\n");
}

/// Delayed gradients after the synchronous start.
void Staleness::beforeStep(StepState &st) {
  st.inputs.staleness = st.step >= r.o.syncSteps ? r.o.staleness : 0;
}

void Staleness::afterStep(StepState &st) {
  bool delayed = st.inputs.staleness > 0;
  if (!delayed || r.ranks <= 1)
    return;
  // Each rank's corrected gradient is its own: every rank stops if one
  // rank's norm is not finite.
  float bad = st.badNorm ? 1.0f : 0.0f;
  if (moert_step_all_reduce(&r.ctx, &bad, &bad, 1, MOERT_AXIS_DP | MOERT_AXIS_EP | MOERT_AXIS_TP, 0,
                            1.0) != 0)
    r.commError("step " + std::to_string(st.step) + ": agreeing on the gradient norm");
  st.badNorm = bad > 0;
}
