// moe-opt registers the moe dialect and the upstream dialects moe IR uses.
// RUN: moe-opt --show-dialects | FileCheck %s
// RUN: moe-opt --help | FileCheck %s --check-prefix=HELP
// CHECK: Available Dialects: builtin,func,moe
// HELP: Available Dialects: builtin, func, moe
