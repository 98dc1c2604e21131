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

// Unequal groups (moe.token_shares, sequences per group: 3 and 1): sizes in
// tokens, and a capacity sized from the largest group, ceil(1.0 * 9 * 2 /
// 4) = 5 per group (the dispatch buffer holds 2 x 5 slots per expert).
// RUN: sed 's/module attributes {/module attributes {moe.token_shares = array<i64: 3, 1>, /; s/ep = 2/ep = 1/' %S/Inputs/routed-step.mlir | moe-opt --moe-fuse-gating --moe-routing-groups | FileCheck %s --check-prefix=SHARES
// SHARES: top_k 2 capacity 5 {{{.*}}group_sizes = array<i64: 9, 3>, groups = 2 : i64
// SHARES: moe.permute {{.*}} -> tensor<4x10x4xf32>
// RUN: sed 's/module attributes {/module attributes {moe.token_shares = array<i64: 3, 2>, /' %S/Inputs/routed-step.mlir | not moe-opt --moe-fuse-gating --moe-routing-groups 2>&1 | FileCheck %s --check-prefix=SHARESUM
// SHARESUM: error: 'moe.fused_gate' op cannot route in the module's moe.token_shares: they sum to 5 sequences, the batch has 4
// RUN: sed 's/module attributes {/module attributes {moe.token_shares = array<i64: 2, 1, 1>, /' %S/Inputs/routed-step.mlir | not moe-opt --moe-fuse-gating --moe-routing-groups 2>&1 | FileCheck %s --check-prefix=SHARECOUNT
// SHARECOUNT: error: moe-routing-groups: the module's moe.token_shares give 3 routing groups, not 2 (the grid's data replicas)
