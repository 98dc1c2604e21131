//===- MoEAttributes.cpp - moe attributes: syntax and verifiers -----------===//

#include "moe/Dialect/MoE/MoEDialect.h"

#include "mlir/IR/Builders.h"
#include "mlir/IR/DialectImplementation.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallSet.h"
#include "llvm/ADT/TypeSwitch.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MathExtras.h"

#include <cmath>

using namespace mlir;
using namespace mlir::moe;

#include "moe/Dialect/MoE/MoEEnums.cpp.inc"

/// A double parameter (MoE_F64Parameter): a float literal.
static FailureOr<APFloat> parseF64(AsmParser &parser) {
  double value;
  if (parser.parseFloat(value))
    return failure();
  return APFloat(value);
}

/// A whole number below 2^53 as `N.0` (MLIR's float syntax would print it in
/// hexadecimal when six significant digits do not hold it), else as MLIR
/// prints floats.
static void printF64(AsmPrinter &printer, const APFloat &value) {
  double v = value.convertToDouble();
  if (v == std::trunc(v) && std::fabs(v) < 0x1p53 && !value.isNegZero())
    printer.getStream() << llvm::format("%.1f", v);
  else
    printer << value;
}

#define GET_ATTRDEF_CLASSES
#include "moe/Dialect/MoE/MoEAttributes.cpp.inc"

void MoEDialect::registerAttributes() {
  addAttributes<
#define GET_ATTRDEF_LIST
#include "moe/Dialect/MoE/MoEAttributes.cpp.inc"
      >();
}

/// Parses `keyword` and maps it through `symbolize`, naming the choices on
/// failure.
template <typename EnumT, typename SymbolizeFn>
static FailureOr<EnumT> parseEnumKeyword(AsmParser &parser, StringRef what, StringRef choices,
                                         SymbolizeFn symbolize) {
  SMLoc loc = parser.getCurrentLocation();
  StringRef keyword;
  if (parser.parseKeyword(&keyword))
    return failure();
  std::optional<EnumT> value = symbolize(keyword);
  if (!value) {
    parser.emitError(loc) << "unknown " << what << " '" << keyword
                          << "' (expected one of: " << choices << ")";
    return failure();
  }
  return *value;
}

//===----------------------------------------------------------------------===//
// InitAttr: #moe.init<kind (, scale = S)?>
//===----------------------------------------------------------------------===//

Attribute InitAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  auto kind = parseEnumKeyword<InitKind>(parser, "initialiser", "zeros, ones, normal, uniform",
                                         [](StringRef s) { return symbolizeInitKind(s); });
  if (failed(kind))
    return {};
  double scale = 0.0;
  if (succeeded(parser.parseOptionalComma())) {
    if (parser.parseKeyword("scale") || parser.parseEqual() || parser.parseFloat(scale))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<InitAttr>(parser.getContext(), *kind, APFloat(scale));
}

void InitAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyInitKind(getKind());
  if (getScaleValue() != 0.0)
    printer << ", scale = " << getScaleValue();
  printer << ">";
}

LogicalResult InitAttr::verify(function_ref<InFlightDiagnostic()> emitError, InitKind kind,
                               APFloat scaleValue) {
  double scale = scaleValue.convertToDouble();
  bool random = kind == InitKind::normal || kind == InitKind::uniform;
  if (random && !(scale > 0.0))
    return emitError() << stringifyInitKind(kind) << " initialiser requires scale > 0, got "
                       << scale;
  if (!random && scale != 0.0)
    return emitError() << stringifyInitKind(kind) << " initialiser takes no scale";
  return success();
}

//===----------------------------------------------------------------------===//
// GridAttr
//===----------------------------------------------------------------------===//

LogicalResult GridAttr::verify(function_ref<InFlightDiagnostic()> emitError, int64_t dp, int64_t ep,
                               int64_t tp, ArrayAttr devices) {
  for (auto [name, degree] : {std::pair<StringRef, int64_t>{"dp", dp}, {"ep", ep}, {"tp", tp}})
    if (degree < 1)
      return emitError() << "grid degree " << name << " must be >= 1, got " << degree;
  if (!devices)
    return success();
  int64_t ranks = dp * ep * tp;
  if (static_cast<int64_t>(devices.size()) != ranks)
    return emitError() << "grid lists " << devices.size()
                       << " devices but has dp * ep * tp = " << ranks << " ranks";
  for (auto [i, device] : llvm::enumerate(devices)) {
    auto name = dyn_cast<StringAttr>(device);
    if (!name || name.getValue().empty())
      return emitError() << "grid device #" << i << " must be a non-empty string, got " << device;
  }
  return success();
}

int64_t GridAttr::getGroupSize(ArrayRef<Attribute> axes) const {
  int64_t size = 1;
  for (Attribute axis : axes) {
    StringRef name = cast<StringAttr>(axis).getValue();
    size *= name == "dp" ? getDp() : name == "ep" ? getEp() : getTp();
  }
  return size;
}

//===----------------------------------------------------------------------===//
// PlacementAttr: #moe.placement<[[0, 1], [2, 3]]>
//===----------------------------------------------------------------------===//

Attribute PlacementAttr::parse(AsmParser &parser, Type) {
  SmallVector<int64_t> experts, sizes;
  auto parseRank = [&]() -> ParseResult {
    size_t before = experts.size();
    if (parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, [&]() -> ParseResult {
          int64_t expert;
          if (parser.parseInteger(expert))
            return failure();
          experts.push_back(expert);
          return success();
        }))
      return failure();
    sizes.push_back(static_cast<int64_t>(experts.size() - before));
    return success();
  };
  if (parser.parseLess() ||
      parser.parseCommaSeparatedList(AsmParser::Delimiter::Square, parseRank) ||
      parser.parseGreater())
    return {};
  return parser.getChecked<PlacementAttr>(parser.getContext(), experts, sizes);
}

void PlacementAttr::print(AsmPrinter &printer) const {
  printer << "<[";
  for (size_t rank = 0, e = getNumRanks(); rank < e; ++rank) {
    if (rank)
      printer << ", ";
    printer << "[";
    llvm::interleaveComma(getExpertsOf(rank), printer);
    printer << "]";
  }
  printer << "]>";
}

LogicalResult PlacementAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                    ArrayRef<int64_t> experts, ArrayRef<int64_t> rankSizes) {
  if (rankSizes.empty())
    return emitError() << "placement must list at least one rank";
  int64_t total = 0;
  for (int64_t size : rankSizes) {
    if (size < 0)
      return emitError() << "placement rank sizes must be >= 0";
    total += size;
  }
  if (total != static_cast<int64_t>(experts.size()))
    return emitError() << "placement rank sizes sum to " << total << " but " << experts.size()
                       << " experts are listed";
  size_t offset = 0;
  for (auto [rank, size] : llvm::enumerate(rankSizes)) {
    llvm::SmallSet<int64_t, 8> seen;
    for (int64_t expert : experts.slice(offset, size)) {
      if (expert < 0)
        return emitError() << "placement lists negative expert " << expert << " on rank " << rank;
      if (!seen.insert(expert).second)
        return emitError() << "placement lists expert " << expert << " twice on rank " << rank;
    }
    offset += size;
  }
  return success();
}

ArrayRef<int64_t> PlacementAttr::getExpertsOf(size_t rank) const {
  ArrayRef<int64_t> sizes = getRankSizes();
  size_t offset = 0;
  for (size_t r = 0; r < rank; ++r)
    offset += sizes[r];
  return getExperts().slice(offset, sizes[rank]);
}

//===----------------------------------------------------------------------===//
// CodecAttr: #moe.codec<kind (, key = value | , error_feedback)*>
//===----------------------------------------------------------------------===//

Attribute CodecAttr::parse(AsmParser &parser, Type) {
  if (parser.parseLess())
    return {};
  auto kind = parseEnumKeyword<CodecKind>(parser, "codec", "fp16, bf16, int8, topk, sign, powersgd",
                                          [](StringRef s) { return symbolizeCodecKind(s); });
  if (failed(kind))
    return {};
  int64_t blockSize = 0, rank = 0;
  double ratio = 0.0;
  bool errorFeedback = false;
  llvm::SmallSet<StringRef, 4> seen;
  while (succeeded(parser.parseOptionalComma())) {
    SMLoc loc = parser.getCurrentLocation();
    StringRef key;
    if (parser.parseKeyword(&key))
      return {};
    if (!seen.insert(key).second) {
      parser.emitError(loc) << "codec parameter '" << key << "' given twice";
      return {};
    }
    if (key == "error_feedback") {
      errorFeedback = true;
      continue;
    }
    if (parser.parseEqual())
      return {};
    ParseResult result = key == "block_size" ? parser.parseInteger(blockSize)
                         : key == "rank"     ? parser.parseInteger(rank)
                         : key == "ratio"
                             ? parser.parseFloat(ratio)
                             : (parser.emitError(loc) << "unknown codec parameter '" << key
                                                      << "' (expected block_size, ratio, rank "
                                                         "or error_feedback)",
                                failure());
    if (failed(result))
      return {};
  }
  if (parser.parseGreater())
    return {};
  return parser.getChecked<CodecAttr>(parser.getContext(), *kind, blockSize, APFloat(ratio), rank,
                                      errorFeedback);
}

void CodecAttr::print(AsmPrinter &printer) const {
  printer << "<" << stringifyCodecKind(getKind());
  if (getBlockSize())
    printer << ", block_size = " << getBlockSize();
  if (getRatioValue() != 0.0)
    printer << ", ratio = " << getRatioValue();
  if (getRank())
    printer << ", rank = " << getRank();
  if (getErrorFeedback())
    printer << ", error_feedback";
  printer << ">";
}

LogicalResult CodecAttr::verify(function_ref<InFlightDiagnostic()> emitError, CodecKind kind,
                                int64_t blockSize, APFloat ratioValue, int64_t rank,
                                bool errorFeedback) {
  double ratio = ratioValue.convertToDouble();
  StringRef name = stringifyCodecKind(kind);
  auto foreign = [&](StringRef param) {
    return emitError() << "'" << param << "' is not a parameter of the " << name << " codec";
  };
  if (blockSize != 0 && kind != CodecKind::int8)
    return foreign("block_size");
  if (ratio != 0.0 && kind != CodecKind::topk)
    return foreign("ratio");
  if (rank != 0 && kind != CodecKind::powersgd)
    return foreign("rank");
  if (kind == CodecKind::int8 && blockSize < 1)
    return emitError() << "int8 codec requires block_size >= 1, got " << blockSize;
  if (kind == CodecKind::topk && !(ratio > 0.0 && ratio <= 1.0))
    return emitError() << "topk codec requires 0 < ratio <= 1, got " << ratio;
  if (kind == CodecKind::powersgd && rank < 1)
    return emitError() << "powersgd codec requires rank >= 1, got " << rank;
  if (errorFeedback && kind != CodecKind::topk && kind != CodecKind::sign &&
      kind != CodecKind::powersgd)
    return emitError() << "error_feedback applies to topk, sign and powersgd, "
                          "not to "
                       << name;
  return success();
}

bool CodecAttr::isElementwise() const {
  CodecKind kind = getKind();
  return kind == CodecKind::fp16 || kind == CodecKind::bf16 || kind == CodecKind::int8;
}

//===----------------------------------------------------------------------===//
// BufferPlanAttr, PlanAttr, CompressionAttr, CodecChoiceAttr
//===----------------------------------------------------------------------===//

/// Fails with "<what> <name> must be >= 0, got <value>" for the first
/// negative (or NaN) value.
template <typename T>
static LogicalResult checkNonNegative(function_ref<InFlightDiagnostic()> emitError, StringRef what,
                                      std::initializer_list<std::pair<StringRef, T>> values) {
  for (auto [name, value] : values)
    if (!(value >= 0))
      return emitError() << what << " " << name << " must be >= 0, got " << value;
  return success();
}

LogicalResult BufferPlanAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                     int64_t activationBytes, int64_t gradientBytes,
                                     int64_t parameterBytes, int64_t optimizerStateBytes,
                                     int64_t totalBytes, int64_t numKernels, int64_t numLaunches,
                                     int64_t alignment) {
  if (failed(checkNonNegative<int64_t>(emitError, "buffer plan",
                                       {{"activation_bytes", activationBytes},
                                        {"gradient_bytes", gradientBytes},
                                        {"parameter_bytes", parameterBytes},
                                        {"optimizer_state_bytes", optimizerStateBytes},
                                        {"total_bytes", totalBytes},
                                        {"num_kernels", numKernels},
                                        {"num_launches", numLaunches}})))
    return failure();
  if (!llvm::isPowerOf2_64(alignment))
    return emitError() << "buffer plan alignment must be a power of two, got " << alignment;
  int64_t sum = 0;
  for (int64_t bytes : {activationBytes, gradientBytes, parameterBytes, optimizerStateBytes})
    if (llvm::AddOverflow(sum, bytes, sum))
      break;
  if (sum != totalBytes)
    return emitError() << "buffer plan total_bytes must be the sum of the activation, gradient, "
                          "parameter and optimizer-state bytes, got "
                       << totalBytes;
  return success();
}

LogicalResult PlanAttr::verify(function_ref<InFlightDiagnostic()> emitError, APFloat predictedStep,
                               APFloat compute, APFloat allToAll, APFloat allReduce,
                               APFloat allReduceExposed, APFloat tensorParallel, int64_t zeroStage,
                               APFloat maxMemoryBytes, int64_t candidates) {
  if (failed(checkNonNegative<double>(emitError, "plan",
                                      {{"predicted_step_s", predictedStep.convertToDouble()},
                                       {"compute_s", compute.convertToDouble()},
                                       {"all_to_all_s", allToAll.convertToDouble()},
                                       {"all_reduce_s", allReduce.convertToDouble()},
                                       {"all_reduce_exposed_s", allReduceExposed.convertToDouble()},
                                       {"tensor_parallel_s", tensorParallel.convertToDouble()},
                                       {"max_memory_bytes", maxMemoryBytes.convertToDouble()}})))
    return failure();
  if (zeroStage < 0 || zeroStage > 2)
    return emitError() << "plan zero_stage must be 0, 1 or 2, got " << zeroStage;
  if (candidates < 1)
    return emitError() << "plan candidates must be >= 1, got " << candidates;
  return success();
}

LogicalResult CompressionAttr::verify(function_ref<InFlightDiagnostic()> emitError,
                                      int64_t warmupSteps, int64_t compressed) {
  return checkNonNegative<int64_t>(emitError, "compression",
                                   {{"warmup_steps", warmupSteps}, {"compressed", compressed}});
}

LogicalResult CodecChoiceAttr::verify(function_ref<InFlightDiagnostic()> emitError, StringRef codec,
                                      APFloat uncompressed, APFloat predicted) {
  if (codec != "none" && !symbolizeCodecKind(codec))
    return emitError() << "codec choice codec must be \"none\" or one of fp16, bf16, int8, topk, "
                          "sign, powersgd, got \""
                       << codec << "\"";
  return checkNonNegative<double>(emitError, "codec choice",
                                  {{"uncompressed_s", uncompressed.convertToDouble()},
                                   {"predicted_s", predicted.convertToDouble()}});
}
