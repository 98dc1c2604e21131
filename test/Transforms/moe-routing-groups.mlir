// moe-routing-groups: capacity, drops and the balancing loss per group of
// whole sequences; the dispatch buffers hold G * capacity slots per expert.
// The input is a 4 x 3-token batch, 4 experts, top-2, capacity factor 1.
// RUN: moe-opt --moe-fuse-gating --moe-routing-groups=groups=2 %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=G2
// G2: moe.fused_gate softmax {{.*}} top_k 2 capacity 3 {{{.*}}groups = 2 : i64
// G2: moe.permute {{.*}} -> tensor<4x6x4xf32>
// G2: moe.expert_ffn swiglu {{.*}} -> tensor<4x6x4xf32>
// G2: moe.unpermute {{.*}} : (tensor<4x6x4xf32>,

// Four groups of one sequence: ceil(1.0 * 3 * 2 / 4) = 2 slots per group.
// RUN: moe-opt --moe-fuse-gating --moe-routing-groups=groups=4 %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=G4
// G4: top_k 2 capacity 2 {{{.*}}groups = 4 : i64
// G4: moe.permute {{.*}} -> tensor<4x8x4xf32>

// The default takes dp * ep from the module's grid (ep = 2 here).
// RUN: moe-opt --moe-fuse-gating --moe-routing-groups %S/Inputs/routed-step.mlir | FileCheck %s --check-prefix=G2

// Groups are whole sequences; the unfused router is refused.
// RUN: not moe-opt --moe-fuse-gating --moe-routing-groups=groups=3 %S/Inputs/routed-step.mlir 2>&1 | FileCheck %s --check-prefix=WHOLE
// WHOLE: error: 'moe.fused_gate' op cannot route in 3 groups: the batch (4 sequences) does not divide into whole-sequence groups
// RUN: not moe-opt --moe-routing-groups=groups=2 %S/Inputs/routed-step.mlir 2>&1 | FileCheck %s --check-prefix=UNFUSED
// UNFUSED: error: 'moe.router' op routing groups apply to moe.fused_gate: run moe-fuse-gating first
