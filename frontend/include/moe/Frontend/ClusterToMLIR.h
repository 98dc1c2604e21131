//===- ClusterToMLIR.h - cluster spec as a module attribute -----*- C++ -*-===//

#ifndef MOE_FRONTEND_CLUSTERTOMLIR_H
#define MOE_FRONTEND_CLUSTERTOMLIR_H

#include "moe/Frontend/ClusterSpec.h"

#include "mlir/IR/BuiltinAttributes.h"

namespace moec::frontend {

/// The `moe.cluster` dictionary: name, totals, node groups, device kinds and
/// the inter-node link, in SI units (docs/ClusterJSON.md).
mlir::DictionaryAttr clusterAttr(const ClusterSpec &cluster, mlir::MLIRContext &context);

} // namespace moec::frontend

#endif // MOE_FRONTEND_CLUSTERTOMLIR_H
