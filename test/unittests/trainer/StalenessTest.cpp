//===- StalenessTest.cpp - delayed gradient all-reduces -------------------===//

#include "TrainerTestProgram.h"
#include "trainer/Staleness.h"

using namespace moert::trainer;
using namespace moert::trainer::test;

namespace {

class StalenessTest : public RankTest {};

TEST_F(StalenessTest, DelaysAfterTheSynchronousStartOnly) {
  o.staleness = 1;
  o.syncSteps = 2;
  Rank &r = boundRank();
  Staleness component(r);
  for (long long s = 0; s < 4; ++s) {
    StepState st;
    st.step = s;
    component.beforeStep(st);
    EXPECT_EQ(st.inputs.staleness, s >= 2 ? 1 : 0) << "step " << s;
    // The step's inputs only: evaluations are not delayed.
    EXPECT_EQ(r.ctx.inputs.staleness, 0);
    component.afterStep(st);
  }
}

TEST_F(StalenessTest, NeedsBackgroundAllReduces) {
  o.staleness = 1;
  Rank &r = boundRank(); // compiled for one rank: no async buckets
  Staleness component(r);
  EXPECT_EXIT(component.configure(), testing::ExitedWithCode(1), "this binary has none");
}

TEST_F(StalenessTest, RefusesLocalSteps) {
  o.staleness = 1;
  o.localSteps = 2;
  static moert_program p; // outlives the rank, which TearDown ends
  p = fakeProgram();
  p.async_buckets = 2;
  Rank &r = boundRank(p);
  Staleness component(r);
  EXPECT_EXIT(component.configure(), testing::ExitedWithCode(1), "with --local-steps");
}

TEST_F(StalenessTest, OffChangesNothing) {
  Rank &r = boundRank();
  Staleness component(r);
  component.configure();
  StepState st;
  st.step = 5;
  component.beforeStep(st);
  EXPECT_EQ(st.inputs.staleness, 0);
}

} // namespace
