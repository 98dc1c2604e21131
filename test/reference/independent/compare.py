#!/usr/bin/env python3
"""Compares the reference interpreter's first-step loss with reference.py.

    compare.py MODEL.json DUMP_DIR [--tol T] [--routing-groups G]
               [--min-effect M] [--mutate NAME] [--steps N]

DUMP_DIR is what `moe-ref-train MODEL.json ... --dump DUMP_DIR` wrote:
params.safetensors (the initial parameters, rounded to f32, that the run
used) and step1.json (the first batch and the loss the interpreter computed
for it before any update). Pass the same --routing-groups as moe-ref-train.

For every feature the model exercises it prints

    FEATURE: interpreter L1, independent L2, relative difference D (MUTANT moves the loss by R)

where MUTANT is a plausible wrong reading of that feature (reference.MUTANTS)
computed by the same numpy code: R shows that the instance really exercises
the feature, so that agreement on it means something. The exit status is
non-zero when D > tol or is NaN, when a mutant moves the loss by less than
--min-effect (the instance does not exercise the feature), when the
parameters in the dump are not the ones the definition names, or when a
top-k choice is so close to a tie that rounding could flip it.

--at-step K compares step K instead of step 1, from the parameters and
batch of a dump of K or more steps (params-stepK.safetensors, stepK.json):
features whose parameters start at zero (qkv_bias) move the loss only once
training has moved them.

--mutate NAME computes the independent side with that mutant instead (to
show that the comparison fails when the reference is wrong).

--steps N (N > 1, a model with `router_bias`) checks the selection bias
over N steps (`moe-ref-train ... --steps N --dump DUMP_DIR` also writes
params-stepK.safetensors and stepK.json for every step K): the independent
side keeps its own bias, zero at step 1 and moved by the load rule after
each step from the loads it computed itself (reference.update_biases), and
recomputes each step's loss from the parameters the interpreter started that
step from, with that bias. Per step it prints

    step K: interpreter L1, independent L2, relative difference D, biases moved M of E (largest |bias| B)

and fails when D > tol, or when its bias differs from the interpreter's at
all (both add the same +-u to the same float64 values). Then, at the last
step, how much the bias's features move the loss: `router-bias-selection`
(the mutant bias-in-gates also adds the bias to the gate weights),
`router-bias-update` (bias-fixed: never updated) and
`router-bias-direction` (bias-sign-flipped: moved away from balance), each
at least --min-effect.
"""

import argparse
import json
import math
import os
from fractions import Fraction
import sys

try:
    import numpy as np
except ImportError:
    sys.exit("error: %s needs numpy (Debian's python3-numpy; tools/scripts/install-deps.sh "
             "installs it)" % sys.executable)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import reference  # noqa: E402

# Tolerance on the relative difference of the two losses. Both sides compute
# in float64 from the same float32 parameters and the same float32-rounded
# hyper-parameters; they differ only in the order of floating-point
# operations (summation order of dot products, of the softmax and
# log-sum-exp, of the mean over tokens). Each of the ~40 sequential stages of
# a 2-layer step adds at most a few ulps (2.2e-16) times a condition number
# near 1 (normalisations keep activations O(1)), and reductions are at most
# 256 long, so the expected difference is below 1e-13 (measured on the
# instances of test/Driver/independent-reference.test: at most 3e-16).
# 1e-11 leaves more than two orders of magnitude of headroom, is four orders
# below the smallest effect any reported feature has on its instance
# (--min-effect, 1e-7, checked per feature via its mutant), and is tight
# enough to see the float32 rounding of the hyper-parameters (3e-11 to 4e-10
# on the MoE instances: `--mutate hyper-f64`).
DEFAULT_TOL = 1e-11
DEFAULT_MIN_EFFECT = 1e-7
# A k-th and (k+1)-th routing score closer than this could be ordered
# differently by the two implementations' rounding; the instance is then
# ill-conditioned rather than wrong, and is rejected with that message.
MIN_TOPK_MARGIN = 1e-12


def features(spec, groups, base):
    """(feature name, mutant) for every feature this model exercises."""
    out = [("causal-attention", "no-causal-mask"), ("rms-norm", "eps-off")]
    if spec["clip_qkv"] is not None:
        out.append(("clip-qkv", "clip-off"))
        if spec["qk_norm"] != "none":
            out.append(("clip-after-qk-norm", "clip-before-norm"))
    if spec["qkv_bias"]:
        out.append(("qkv-bias", "qkv-bias-off"))
    if spec["qk_norm"] != "none":
        out.append(("qk-norm-" + spec["qk_norm"], "qk-norm-grouping-swapped"))
    if spec["rope_theta"] is not None:
        out.append(("rope", "rope-interleaved"))
    # Grouped-query attention; with one kv head (multi-query) every mapping
    # of query heads to kv heads is the same, so no mutant can tell.
    if 1 < spec["n_kv_heads"] < spec["n_heads"]:
        out.append(("gqa", "gqa-modulo"))
    la = spec["latent"]
    if la is not None:
        # Multi-head latent attention: the normalised kv latent, the score
        # scale 1/sqrt(dn + dr) (a mutant only tells when v_head_dim differs),
        # where the rotary part sits in each head, and that only it rotates.
        out.append(("latent-attention", "mla-no-kv-norm"))
        if la["v_head_dim"] != la["qk_nope_head_dim"] + la["qk_rope_head_dim"]:
            out.append(("latent-attention-scale", "mla-scale-v-dim"))
        out.append(("latent-attention-rope-last", "mla-k-rope-first"))
        if spec["rope_theta"] is not None:
            out.append(("latent-attention-rope-dims", "mla-rope-whole-head"))
        if la["q_lora_rank"] > 0:
            out.append(("latent-q-lora", "mla-no-q-norm"))
    layers = spec["layers"]
    moe = [L for L in layers if not L["dense"]]
    if any(L["dense"] for L in layers):
        out.append(("dense-layer", "dense-ffn-off"))
    if not moe:
        return out
    out.append(("moe-layer", "routed-off"))
    acts = {L["activation"] for L in moe}
    if "gelu" in acts:
        out.append(("gelu-experts", "gelu-erf"))
    if "relu" in acts:
        out.append(("relu-experts", "relu-as-gelu"))
    if any(L["num_shared_experts"] > 0 for L in moe):
        out.append(("shared-experts", "shared-off"))
    if any(L["shared_expert_gate"] for L in moe):
        out.append(("shared-expert-gate", "shared-gate-off"))
    scorings = {L["router_scoring"] for L in moe}
    if "softmax" in scorings:
        out.append(("softmax-routing", "scoring-swapped"))
    if "sigmoid" in scorings:
        out.append(("sigmoid-routing", "scoring-swapped"))
        if any(L["router_scoring"] == "sigmoid" and L["aux_loss_coef"] > 0 for L in moe):
            out.append(("sigmoid-aux-normalised", "sigmoid-aux-raw"))
    if any(L["renormalize"] for L in moe):
        out.append(("renormalisation", "renormalize-flipped"))
    if any(L["routed_scaling"] != 1 for L in moe):
        out.append(("routed-scaling", "routed-scaling-off"))
    if sum(base["dropped"]) > 0:
        top2 = any(L["top_k"] > 1 and L["capacity_factor"] is not None for L in moe)
        out.append(("capacity-drops", "drop-choice-major" if top2 else "drop-reverse-token-order"))
        if any(L["aux_loss_coef"] > 0 for L in moe):
            out.append(("aux-loss-counts-before-drops", "aux-loss-after-drops"))
    tg = spec["batch_size"] * spec["seq_len"] // groups
    for L in moe:
        cf = L["capacity_factor"]
        if cf is not None:
            k, e = L["top_k"], L["num_experts"]
            exact = min(math.ceil(Fraction(repr(float(cf))) * tg * k / e), tg)
            rounded = min(math.ceil(Fraction(float(np.float32(cf))) * tg * k / e), tg)
            if exact != rounded:
                out.append(("capacity-exact", "capacity-f32"))
                break
    if any(L["capacity_factor"] is None for L in moe):
        out.append(("dropless", "dropless-capped"))
    if any(L["aux_loss_coef"] > 0 for L in moe):
        out.append(("aux-loss", "aux-off"))
    # The sequence-wise balance loss; with one sequence per routing group
    # it is the group's loss, so no mutant can tell.
    if any(L["aux_loss_per_sequence"] and L["aux_loss_coef"] > 0 for L in moe) and \
            spec["batch_size"] > groups:
        out.append(("sequence-aux-loss", "seq-aux-batch"))
    if any(L["router_z_loss_coef"] > 0 for L in moe):
        out.append(("z-loss", "z-off"))
    # Routing groups bound the capacity and the batch-level balance and
    # z-losses; with every MoE layer dropless, its balance loss per sequence
    # (or off) and no z-loss, no mutant can tell.
    if groups > 1 and any(L["capacity_factor"] is not None or L["router_z_loss_coef"] > 0 or
                          (L["aux_loss_coef"] > 0 and not L["aux_loss_per_sequence"])
                          for L in moe):
        out.append(("routing-groups", "groups-one"))
    grouped = [L for L in moe if L["n_groups"] > 1]
    if grouped:
        out.append(("group-limited-routing", "expert-groups-off"))
        # The group score's rule; with one expert per group both rules agree.
        if any(L["num_experts"] // L["n_groups"] > 1 for L in grouped):
            out.append(("group-score", "group-score-swapped"))
    return out


def load_step(args, spec, k):
    """Parameters step k started from and its batch (tokens, targets, loss)."""
    name = "params.safetensors" if k == 1 else "params-step%d.safetensors" % k
    params = reference.load_safetensors(os.path.join(args.dump, name))
    with open(os.path.join(args.dump, "step%d.json" % k)) as f:
        step = json.load(f)
    b, s = step["batch_size"], step["seq_len"]
    if (b, s) != (spec["batch_size"], spec["seq_len"]):
        raise ValueError("step%d.json is %d x %d, the model %d x %d"
                         % (k, b, s, spec["batch_size"], spec["seq_len"]))
    return (params, np.array(step["tokens"]).reshape(b, s),
            np.array(step["targets"]).reshape(b, s), float(step["loss"]))


def compare_steps(args):
    """--steps N: the selection bias over N steps (see the module doc)."""
    spec = reference.load_model(args.model)
    groups = args.routing_groups
    if not reference.initial_biases(spec):
        print("FAIL --steps %d compares the selection bias over steps: %s has no router_bias"
              % (args.steps, args.model))
        return 1
    bias = reference.initial_biases(spec)
    failures, worst, steps = [], 0.0, []
    print("model %s: %d steps, routing groups %d, selection bias on %s, update rate %s%s"
          % (spec["name"], args.steps, groups, ", ".join(p[:-1] for p in sorted(bias)),
             ", ".join("%g" % spec["layers"][int(p[1:-1])]["router_bias_update_rate"]
                       for p in sorted(bias)),
             "" if not args.mutate else ", independent side mutated: " + ", ".join(args.mutate)))
    for k in range(1, args.steps + 1):
        try:
            params, tokens, targets, interp = load_step(args, spec, k)
        except (OSError, ValueError, KeyError) as e:
            print("FAIL step %d: %s" % (k, e))
            return 1
        problems = reference.check_params(spec, params)
        if problems:
            for p in problems:
                print("FAIL step %d parameters: %s" % (k, p))
            return 1
        # The interpreter's bias at the start of step k against ours.
        bias_diff = max(float(np.max(np.abs(params[p + "router_bias"] - b)))
                        for p, b in bias.items())
        out = reference.forward_loss(spec, params, tokens, targets, groups, args.mutate, bias)
        indep = out["loss"]
        diff = abs(indep - interp) / abs(interp) if interp != 0 else abs(indep - interp)
        worst = diff if not diff <= worst else worst
        moved = sum(int(np.count_nonzero(b)) for b in bias.values())
        total = sum(len(b) for b in bias.values())
        largest = max(float(np.max(np.abs(b))) for b in bias.values())
        print("step %d: interpreter %.17g, independent %.17g, relative difference %.3g, "
              "biases moved %d of %d (largest |bias| %.3g)"
              % (k, interp, indep, diff, moved, total, largest))
        if not (math.isfinite(interp) and math.isfinite(indep) and diff <= args.tol):
            failures.append("step %d loss: relative difference %.3g exceeds %g (interpreter "
                            "%.17g, independent %.17g)" % (k, diff, args.tol, interp, indep))
        if not bias_diff == 0:
            failures.append("step %d: the interpreter's selection bias differs from the load "
                            "rule's by up to %.3g" % (k, bias_diff))
        margin = out["min_margin"]
        if margin is not None and not margin > MIN_TOPK_MARGIN:
            failures.append("step %d: a top-k choice is within %.3g of a tie: rounding could "
                            "flip it, choose another instance" % (k, margin))
        steps.append((params, tokens, targets))
        last_bias, base = bias, out
        bias = reference.update_biases(spec, bias, out["load"], args.mutate)
    # What the bias's features do to the last step's loss: a mutant of the
    # gates on the last step, and mutants of the load rule over every step.
    if not any(np.count_nonzero(b) for b in last_bias.values()):
        failures.append("the bias is still zero at step %d: no step exercised it" % args.steps)
    for name, mutant in [("router-bias-selection", "bias-in-gates"),
                         ("router-bias-update", "bias-fixed"),
                         ("router-bias-direction", "bias-sign-flipped")]:
        b = last_bias
        if mutant != "bias-in-gates":
            b = reference.initial_biases(spec)
            for params, tokens, targets in steps[:-1]:
                o = reference.forward_loss(spec, params, tokens, targets, groups, [], b)
                b = reference.update_biases(spec, b, o["load"], [mutant])
        params, tokens, targets = steps[-1]
        m = reference.forward_loss(spec, params, tokens, targets, groups,
                                   [mutant] if mutant == "bias-in-gates" else [], b)
        effect = abs(m["loss"] - base["loss"]) / abs(base["loss"])
        print("%s at step %d: %s moves the loss by %.3g" % (name, args.steps, mutant, effect))
        if not effect >= args.min_effect:
            failures.append("%s: the mutant %s moves the loss by only %.3g (< %g): this "
                            "instance does not exercise the feature"
                            % (name, mutant, effect, args.min_effect))
    for msg in failures:
        print("FAIL " + msg)
    if failures:
        return 1
    print("PASS %s: %d steps, relative difference at most %.3g <= %g, the selection bias as "
          "the interpreter's at every step" % (spec["name"], args.steps, worst, args.tol))
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("dump")
    ap.add_argument("--tol", type=float, default=DEFAULT_TOL)
    ap.add_argument("--min-effect", type=float, default=DEFAULT_MIN_EFFECT)
    ap.add_argument("--routing-groups", type=int, default=1)
    ap.add_argument("--mutate", action="append", default=[],
                    choices=sorted(reference.MUTANTS))
    ap.add_argument("--steps", type=int, default=1)
    ap.add_argument("--at-step", type=int, default=1)
    args = ap.parse_args()
    if args.steps > 1:
        return compare_steps(args)

    spec = reference.load_model(args.model)
    k = args.at_step
    params = reference.load_safetensors(os.path.join(
        args.dump, "params.safetensors" if k == 1 else "params-step%d.safetensors" % k))
    with open(os.path.join(args.dump, "step%d.json" % k)) as f:
        step = json.load(f)
    failures = []
    problems = reference.check_params(spec, params)
    for p in problems:
        failures.append("parameters: " + p)
    if problems:
        for msg in failures:
            print("FAIL " + msg)
        return 1
    b, s = step["batch_size"], step["seq_len"]
    if (b, s) != (spec["batch_size"], spec["seq_len"]):
        print("FAIL step1.json is %d x %d, the model %d x %d"
              % (b, s, spec["batch_size"], spec["seq_len"]))
        return 1
    tokens = np.array(step["tokens"]).reshape(b, s)
    targets = np.array(step["targets"]).reshape(b, s)
    interp = float(step["loss"])

    base = reference.forward_loss(spec, params, tokens, targets, args.routing_groups)
    ours = base if not args.mutate else reference.forward_loss(
        spec, params, tokens, targets, args.routing_groups, args.mutate)
    indep = ours["loss"]
    diff = abs(indep - interp) / abs(interp) if interp != 0 else abs(indep - interp)
    margin = base["min_margin"]
    print("model %s: batch %d x %d, routing groups %d, capacity per layer %s, "
          "dropped token-slots per layer %s, smallest top-k margin %s%s"
          % (spec["name"], b, s, args.routing_groups, base["capacity"], base["dropped"],
             "n/a" if margin is None else "%.3g" % margin,
             "" if not args.mutate else ", independent side mutated: " + ", ".join(args.mutate)))
    print("  cross-entropy %.17g, router losses %.17g" % (ours["cross_entropy"], ours["router_loss"]))
    if base["group_limited"] is not None:
        print("  group-limited routing changes the selection of %d token-layers"
              % base["group_limited"])
    if margin is not None and not margin > MIN_TOPK_MARGIN:
        failures.append("a top-k choice is within %.3g of a tie: rounding could flip it, "
                        "choose another instance" % margin)
    # NaN never matches: `not (diff <= tol)` is true for NaN.
    ok = math.isfinite(interp) and math.isfinite(indep) and diff <= args.tol
    names = []
    for name, mutant in features(spec, args.routing_groups, base):
        names.append(name)
        m = reference.forward_loss(spec, params, tokens, targets, args.routing_groups, [mutant])
        effect = abs(m["loss"] - base["loss"]) / abs(base["loss"])
        print("%s: interpreter %.17g, independent %.17g, relative difference %.3g "
              "(%s moves the loss by %.3g)" % (name, interp, indep, diff, mutant, effect))
        if not effect >= args.min_effect:
            failures.append("%s: the mutant %s moves the loss by only %.3g (< %g): this instance "
                            "does not exercise the feature" % (name, mutant, effect, args.min_effect))
    if not ok:
        # One loss per instance: the difference belongs to all its features.
        failures.insert(0, "loss: relative difference %.3g exceeds %g (interpreter %.17g, "
                        "independent %.17g; the instance exercises %s)"
                        % (diff, args.tol, interp, indep, ", ".join(names)))
    if any(not L["dense"] and L["router_bias"] for L in spec["layers"]):
        print("note: router_bias is present but zero at initialisation, so it does not "
              "change the selection of this step (--steps N checks it over N steps)")
    for msg in failures:
        print("FAIL " + msg)
    if failures:
        return 1
    print("PASS %s: relative difference %.3g <= %g" % (spec["name"], diff, args.tol))
    return 0


if __name__ == "__main__":
    sys.exit(main())
