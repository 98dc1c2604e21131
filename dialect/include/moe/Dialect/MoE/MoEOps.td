//===- MoEOps.td - all moe ops -----------------------------*- tablegen -*-===//
//
// One file per op family; this file only gathers them for mlir-tblgen.
//
//===----------------------------------------------------------------------===//

#ifndef MOE_OPS_TD
#define MOE_OPS_TD

include "moe/Dialect/MoE/MoEParamOps.td"
include "moe/Dialect/MoE/MoEModelOps.td"
include "moe/Dialect/MoE/MoERoutingOps.td"
include "moe/Dialect/MoE/MoECollectiveOps.td"
include "moe/Dialect/MoE/MoEGradOps.td"
include "moe/Dialect/MoE/MoEOptimizerOps.td"
include "moe/Dialect/MoE/MoEFusedOps.td"
include "moe/Dialect/MoE/MoEKernelOps.td"

#endif // MOE_OPS_TD
