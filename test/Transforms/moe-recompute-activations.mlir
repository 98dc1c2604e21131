// moe-recompute-activations: layer 0's forward values the backward reads
// are computed again right before layer 0's backward, which reads the
// copies; its routing (moe.fused_gate) is kept, not repeated; layer 1, the
// last, keeps its values (its backward follows its forward at once).
// RUN: moe-translate --import-model %examples/models/tiny.json | moe-opt --moe-fuse-gating --moe-autodiff --moe-recompute-activations=enable=true | FileCheck %s --check-prefix=RC
// RC: module @tiny attributes {{{.*}}moe.recompute
// RC: %[[ATT0:.*]] = moe.attention
// RC: %[[ATT1:.*]] = moe.attention
// RC: moe.fill {{.*}}moe.loss_seed
// RC-NOT: moe.fused_gate
// RC: moe.attention_grad
// RC-NOT: moe.fused_gate
// RC: %[[NORM:[0-9]+]] = moe.rms_norm %1, %2
// RC: %[[Q:[0-9]+]] = moe.linear %[[NORM]], %4
// RC: %[[K:[0-9]+]] = moe.linear %[[NORM]], %6
// RC: %[[V:[0-9]+]] = moe.linear %[[NORM]], %8
// RC: moe.attention %[[Q]], %[[K]], %[[V]]
// RC: moe.permute
// RC: moe.expert_ffn swiglu
// RC-NOT: moe.fused_gate
// RC: moe.attention_grad %[[Q]], %[[K]], %[[V]]
// RC-NOT: moe.attention
// RC: moe.adamw_update

// Without enable or the module's moe.recompute: nothing changes (two
// attentions, the forward's); with the attribute it runs (three).
// RUN: moe-translate --import-model %examples/models/tiny.json | moe-opt --moe-fuse-gating --moe-autodiff --moe-recompute-activations | grep -c "= moe.attention " | FileCheck %s --check-prefix=OFF
// OFF: 2
// RUN: moe-translate --import-model %examples/models/tiny.json | sed 's/^module @tiny attributes {/module @tiny attributes {moe.recompute, /' | moe-opt --moe-fuse-gating --moe-autodiff --moe-recompute-activations | grep -c "= moe.attention " | FileCheck %s --check-prefix=ON
// ON: 3

// A step without its backward is an error.
// RUN: moe-translate --import-model %examples/models/tiny.json | not moe-opt --moe-recompute-activations=enable=true 2>&1 | FileCheck %s --check-prefix=FWD
// FWD: error: moe-recompute-activations: the step has no backward (its loss seed, moe.fill {moe.loss_seed}); run moe-autodiff first

// A step with one layer (or parameters not named lK.*) has nothing to
// recompute, and says so.
// RUN: moe-translate --import-model %S/../Driver/Inputs/micro.json | moe-opt --moe-fuse-gating --moe-autodiff --moe-recompute-activations=enable=true -o /dev/null 2>&1 | FileCheck %s --check-prefix=ONE
// ONE: warning: moe-recompute-activations: fewer than two layers (parameters named lK.*) in the step: nothing to recompute, it keeps its activations
