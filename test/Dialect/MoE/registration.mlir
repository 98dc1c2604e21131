// moe-opt registers the moe dialect and the upstream dialects moe IR uses.
// RUN: moe-opt --show-dialects | FileCheck %s
// RUN: moe-opt --help | FileCheck %s --check-prefix=HELP --implicit-check-not=aarch64 --implicit-check-not=amdgpu --implicit-check-not=x86-
// CHECK: Available Dialects: builtin,func,moe
// --help lists MLIR's options and the passes, not the options of LLVM's
// back ends that libMLIR.so registers (--help-hidden still does).
// HELP: Available Dialects: builtin, func, moe
// HELP: --mlir-print-ir-after-all
// HELP: Passes:
// HELP: --moe-fuse-gating
// RUN: moe-opt --help-hidden | FileCheck %s --check-prefix=HIDDEN
// HIDDEN: --aarch64-neon-syntax
// RUN: moe-lsp-server --help | FileCheck %s --check-prefix=LSP --implicit-check-not=aarch64
// LSP: --log=<value>
