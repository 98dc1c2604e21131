# -*- Python -*-
# lit configuration of the MoEC IR tests.

import glob
import os
import shutil
import subprocess

import lit.formats
from lit.llvm import llvm_config

config.name = "MoEC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.moe_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unittests", "Inputs", "reference", "codegen", "fuzz"]

config.substitutions.append(("%examples", os.path.join(config.moe_src_root, "examples")))
config.substitutions.append(("%moec_build", config.moe_obj_root))

llvm_config.use_default_substitutions()
# moec's kernel cache in the build tree, not the user's home (every test
# compiling a model shares it; test/Driver/kernel-cache.test checks it).
config.environment["MOEC_KERNEL_CACHE"] = os.path.join(config.moe_obj_root, "test", "kernel-cache")
# MOERT_ASSUME_CPU=x86-64-v3 (or another x86-64 level) runs the suite as on
# a CPU of that level: moec builds for it and the binaries check against it
# (docs/Targets.md, "The host CPU").
llvm_config.with_system_environment(["MOERT_ASSUME_CPU"])
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)
llvm_config.add_tool_substitutions(["moe-opt", "moe-translate", "moec", "moe-ref-train", "moe-lsp-server", "moe-report", "moe-tokenize"], [config.moe_tools_dir])

# Partitioned binaries also run under mpiexec (OpenMPI). Unless the build
# was configured with MOEC_MPI=OFF, a missing mpiexec is an error, not a
# silent skip of the MPI tests.
if config.moec_mpi and not (config.mpiexec and os.path.exists(config.mpiexec)):
    lit_config.fatal("mpiexec '%s' is missing; the MPI tests need it (or configure with "
                     "-DMOEC_MPI=OFF)" % config.mpiexec)
if config.moec_mpi:
    config.available_features.add("mpi")
    config.substitutions.append(("%mpiexec", "env OMPI_ALLOW_RUN_AS_ROOT=1 "
        "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_btl_vader_single_copy_mechanism=none "
        + config.mpiexec + " --oversubscribe"))

# tools/scripts/netns-mpi.sh runs MPI ranks on hosts that are network
# namespaces (TCP between them, a daemon per host): it needs root and a
# kernel that lets this process create namespaces, which CI has. Where the
# probe fails (no root, a container without CAP_SYS_ADMIN), the tests that
# need it are unsupported, and lit's summary names the feature.
if config.moec_mpi and os.geteuid() == 0 and shutil.which("ip") and shutil.which("unshare"):
    probe = "moec-probe-%d" % os.getpid()
    try:
        made = subprocess.run(["ip", "netns", "add", probe], capture_output=True,
                              timeout=30).returncode == 0
        if made:
            subprocess.run(["ip", "netns", "del", probe], capture_output=True, timeout=30)
            config.available_features.add("netns")
            config.substitutions.append(("%netns_mpi", os.path.join(
                config.moe_src_root, "tools", "scripts", "netns-mpi.sh")))
    except subprocess.TimeoutExpired:
        lit_config.fatal("ip netns add did not answer in 30 s")

# An OpenCL platform runs the binaries of moec --target opencl
# (test/Driver/target-opencl.test); tools/scripts/install-deps.sh installs
# PoCL, which runs OpenCL on the CPU, so a machine without one is an error.
clinfo = shutil.which("clinfo")
platforms = ""
if clinfo:
    try:
        platforms = subprocess.run([clinfo, "-l"], capture_output=True, text=True,
                                   timeout=120).stdout
    except subprocess.TimeoutExpired:
        lit_config.fatal("clinfo -l did not answer in 120 s")
if "Platform" not in platforms:
    lit_config.fatal("no OpenCL platform (clinfo -l lists none); the --target opencl tests "
                     "run on one (tools/scripts/install-deps.sh installs PoCL and clinfo)")
config.available_features.add("opencl")

# The CUDA toolkit's PTX assembler, where a toolkit is installed, checks that
# every kernel of moec --target cuda assembles for its GPU
# (test/Driver/target-cuda-ptxas.test); the project does not install the
# toolkit, so without one that test is unsupported, not failed.
ptxas = shutil.which("ptxas") or next(
    (p for p in ["/usr/local/cuda/bin/ptxas"] + sorted(glob.glob("/usr/local/cuda-*/bin/ptxas"))
     if os.access(p, os.X_OK)), None)
if ptxas:
    config.available_features.add("ptxas")
    config.substitutions.append(("%ptxas", ptxas))

# An NVIDIA GPU runs the binaries of moec --target cuda
# (test/Driver/target-cuda-gpu.test, REQUIRES: cuda-gpu); without one the
# binary stops with one clear error (test/Driver/target-cuda-no-gpu.test,
# UNSUPPORTED: cuda-gpu), so lit's summary counts whichever did not run as
# unsupported. A GPU is there when `nvidia-smi -L` lists one; a driver that
# does not answer in 30 s counts as none, with a warning.
nvidia_smi = shutil.which("nvidia-smi")
if nvidia_smi:
    try:
        gpus = subprocess.run([nvidia_smi, "-L"], capture_output=True, text=True,
                              timeout=30).stdout
        if any(line.startswith("GPU ") for line in gpus.splitlines()):
            config.available_features.add("cuda-gpu")
    except subprocess.TimeoutExpired:
        lit_config.warning("nvidia-smi -L did not answer in 30 s: the CUDA tests run as "
                           "without a GPU")

# Headless Chromium renders moe-report's pages (test/Tools/moe-report.test);
# tools/scripts/install-deps.sh installs it, so a missing one is an error.
chromium = shutil.which("chromium") or shutil.which("chromium-browser")
if not chromium:
    lit_config.fatal("chromium is missing; the moe-report test renders a page with it "
                     "(tools/scripts/install-deps.sh installs it)")
config.substitutions.append(("%chromium", chromium + " --headless --no-sandbox --disable-gpu "
                             "--disable-dev-shm-usage --no-first-run"))
