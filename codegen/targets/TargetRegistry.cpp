//===- TargetRegistry.cpp - the registered target back ends ---------------===//
//
// Each target folder (codegen/targets/<name>/) defines one register
// function; registerAllTargets calls them in order, once, when the registry
// is first read. No static initialisers: a static library would drop an
// object nothing refers to.
//
//===----------------------------------------------------------------------===//

#include "moe/Codegen/TargetBackend.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/Twine.h"

using namespace llvm;
using namespace moec::codegen;

namespace moec::codegen {
// One per folder, defined there.
void registerHostTarget();
void registerOpenCLTarget();
void registerCudaTarget();
} // namespace moec::codegen

namespace {

std::vector<const TargetBackend *> &registry() {
  static std::vector<const TargetBackend *> backends;
  return backends;
}

/// The default target registers first.
void registerAllTargets() {
  registerHostTarget();
  registerOpenCLTarget();
  registerCudaTarget();
}

const std::vector<const TargetBackend *> &registered() {
  static const bool done = (registerAllTargets(), true);
  (void)done;
  return registry();
}


} // namespace

void moec::codegen::registerTarget(const TargetBackend &backend) {
  registry().push_back(&backend);
}

ArrayRef<const TargetBackend *> moec::codegen::targetBackends() { return registered(); }

const TargetBackend *moec::codegen::lookupTarget(StringRef name) {
  for (const TargetBackend *backend : registered())
    if (backend->name() == name)
      return backend;
  return nullptr;
}

const TargetBackend &moec::codegen::defaultTarget() { return *registered().front(); }

std::string moec::codegen::targetNames(StringRef separator) {
  std::string names;
  for (const TargetBackend *backend : registered())
    names += (names.empty() ? "" : separator.str()) + backend->name().str();
  return names;
}

Expected<const TargetBackend *> moec::codegen::parseTarget(StringRef name) {
  if (const TargetBackend *backend = lookupTarget(name))
    return backend;
  return createStringError("unknown target '" + name + "' (expected " + targetNames(", ") + ")");
}

Error moec::codegen::checkTargetOption(const TargetBackend &backend, StringRef name,
                                       StringRef value) {
  auto has = [&](const TargetBackend *b) {
    return llvm::any_of(b->options(), [&](const TargetOption &o) { return o.name == name; });
  };
  if (!has(&backend)) {
    std::string takers;
    for (const TargetBackend *b : registered())
      if (has(b))
        takers += (takers.empty() ? "--target=" : " or --target=") + b->name().str();
    return createStringError("--" + name + " applies to " + (takers.empty() ? "no target" : takers));
  }
  if (Error e = backend.checkOption(name, value))
    return createStringError("--" + name + " " + value + ": " + toString(std::move(e)));
  return Error::success();
}

std::string moec::codegen::halideTarget(const TargetBackend &backend, StringRef hostTarget,
                                        const TargetOptionValues &values) {
  return hostTarget.str() + backend.halideFeatures(values);
}

const TargetBackend *moec::codegen::targetInHalideTarget(StringRef halideTarget) {
  for (const TargetBackend *backend : registered()) {
    std::string text = backend->halideFeatures({});
    SmallVector<StringRef> features;
    StringRef(text).split(features, '-', -1, /*KeepEmpty=*/false);
    for (StringRef feature : features)
      if (halideTarget.contains(feature))
        return backend;
  }
  return nullptr;
}

Error TargetBackend::checkOption(StringRef, StringRef) const { return Error::success(); }

std::string TargetBackend::option(const TargetOptionValues &values, StringRef name) const {
  if (auto it = values.find(name.str()); it != values.end())
    return it->second;
  for (const TargetOption &o : options())
    if (o.name == name)
      return o.defaultValue.str();
  return "";
}

std::vector<std::string> TargetBackend::compileFlags(const TargetOptionValues &) const {
  return {};
}

std::vector<std::string> TargetBackend::linkFlags(const TargetOptionValues &) const { return {}; }
