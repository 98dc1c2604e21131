"""Checks a run's comm_bytes_inter_node against its comm_bytes, per step:
check-inter-node.py METRICS none|some|all -- none: every step 0; some:
every step more than 0 and less than all the bytes the rank sent; all:
equal to them (each rank its own node). The bytes sent are the metrics'
comm_bytes (every collective) plus the compressed all-reduces' codec bytes.
"""

import json
import sys


def main(path, want):
    steps = [json.loads(l) for l in open(path) if '"comm_bytes_inter_node"' in l]
    if not steps:
        print("FAIL: no comm_bytes_inter_node in %s" % path)
        return 1
    for s in steps:
        inter = s["comm_bytes_inter_node"]
        sent = sum(s["comm_bytes"].values()) + s["codec_bytes"]["sent"]
        ok = {"none": inter == 0, "some": 0 < inter < sent, "all": inter == sent}[want]
        if not ok:
            print("FAIL: step %d: %d bytes to other nodes of %d sent (expected %s)"
                  % (s["step"], inter, sent, want))
            return 1
    print("%d steps: %s" % (len(steps), {
        "none": "no byte crosses a node",
        "some": "some bytes cross nodes, fewer than all",
        "all": "every byte crosses a node"}[want]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
