"""Checks the chosen plan of a --emit=plan report (plan-capacity.test)."""
import json
import sys

report = json.load(open(sys.argv[1]))["sharding"]
c = report["chosen"]
devices = report["devices"]
assert c["dp"] * c["ep"] * c["tp"] == devices, c
print("chosen dp x ep x tp = %d devices, micro-batches %d" % (devices, c["micro_batches"]))
m = c["memory_bytes"]
parts = m["weights"] + m["gradients"] + m["optimizer_state"] + m["activations"]
assert abs(parts - m["total"]) <= 1e-9 * m["total"] and m["total"] <= m["capacity"], m
print("memory by kind adds up to the total, within the device's %d GB" % (m["capacity"] / 1e9))
tokens = 1024 * 4096
assert abs(c["tokens_per_s"] - tokens / c["step_s"]) <= 1e-9 * c["tokens_per_s"], c
flops = report["step_gflop"] * 1e9
assert abs(c["mfu"] - flops / c["step_s"] / c["peak_flops"]) <= 1e-9, c
assert 0 < c["mfu"] < 1, c
print("tokens/s = tokens / step_s; MFU %.1f%% in (0, 100%%)" % (100 * c["mfu"]))
b = c["collective_bytes"]
assert all(b[k] > 0 for k in ("all_to_all", "gradient_all_reduce", "tensor_parallel")), b
print("collectives: all_to_all, gradient_all_reduce, tensor_parallel > 0")
assert c["executable"] and "not_executable" not in c, c
print("executable: %d micro-batches%s" % (c["micro_batches"],
                                         " with activation recompute" if c["recompute"] else ""))
