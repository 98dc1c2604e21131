#!/usr/bin/env bash
# Installs MoEC's build and test dependencies from Debian's archive.
# Idempotent: when every package is already present it returns in well under a second
# without touching the network. Run as root, or with sudo available.
set -euo pipefail

# What each package is for (the README repeats this table).
PKGS=(
  llvm-22-dev        # LLVM 22 headers, libLLVM, CMake config used by MLIR
  llvm-22-tools      # lit and FileCheck for the IR test suite
  libmlir-22-dev     # MLIR 22 headers, libMLIR.so, TableGen CMake helpers
  mlir-22-tools      # mlir-tblgen (ODS code generation)
  nlohmann-json3-dev # every JSON read or written
  libgtest-dev       # C++ unit tests
  clang-14 libclang-rt-14-dev # libFuzzer + sanitizers for the frontend fuzzer
  libhalide14-0-dev  # Halide 14: kernel generators (moe-halide-gen)
  libopenblas-dev    # OpenBLAS sgemm: the GEMMs of generated kernels (extern stages), and bench/'s baseline
  bible-kjv          # the demo's corpus: the King James Bible (public domain)
  python3-numpy      # numpy: the independent reference of the forward pass and loss (test/reference/independent)
  libjs-chart.js     # Chart.js: the charts moe-report embeds in its pages
  chromium           # headless Chromium: the test that renders a moe-report page
  libopenmpi-dev openmpi-bin # MPI: ranks as processes across nodes (runtime backend, tests)
  libsentencepiece-dev sentencepiece # SentencePiece: moe-tokenize, --tokenizer; spm_train trains models
  iproute2           # ip: network namespaces as separate MPI hosts (tools/scripts/netns-mpi.sh, its test)
  pocl-opencl-icd ocl-icd-opencl-dev clinfo # PoCL, an OpenCL device on the CPU: the tests of moec --target opencl
  cmake ninja-build g++ lld ccache python3
)
# `install-deps.sh --bench` adds what bench/ compares against (not needed to
# build or test).
if [ "${1:-}" = "--bench" ]; then
  PKGS+=(
    python3-torch    # PyTorch (CPU): the whole-step benchmark's baseline
    libopenblas0-openmp # OpenBLAS's OpenMP build, which PyTorch runs on in bench/vs-torch.sh
  )
fi

missing=()
for p in "${PKGS[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed"; then
    missing+=("$p")
  fi
done

if [ ${#missing[@]} -eq 0 ]; then
  echo "install-deps: all ${#PKGS[@]} packages present"
  exit 0
fi

SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO="sudo"; else
    echo "install-deps: need root (or sudo) to install: ${missing[*]}" >&2
    exit 1
  fi
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
echo "install-deps: done"
