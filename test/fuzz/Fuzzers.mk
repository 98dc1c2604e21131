# Builds the libFuzzer targets of test/fuzz with clang (ASan + UBSan) from
# the sources they exercise; run-fuzz.sh calls it. Objects are rebuilt when
# a source or a header they include changes (clang's dependency files).
#   make -f test/fuzz/Fuzzers.mk SRC=<repo> BUILD=<cmake build dir> CXX=clang++-14 [all|NAME]

OUT := $(BUILD)/fuzz
LLVM_PREFIX ?= /usr/lib/llvm-22
CXXFLAGS := -std=c++17 -g -O1 -fsanitize=fuzzer-no-link,address,undefined \
  -fno-sanitize-recover=undefined -fexceptions -MMD -MP \
  -I$(SRC)/test/fuzz -I$(SRC)/frontend/include -I$(SRC)/runtime/include \
  -I$(SRC)/contract/include
# What includes MLIR matches libMLIR.so: no RTTI (so no vptr check).
MLIRFLAGS := -fno-rtti -fno-sanitize=vptr -DNDEBUG -I$(SRC)/dialect/include \
  -I$(BUILD)/dialect/include -isystem $(LLVM_PREFIX)/include
LDFLAGS := -fsanitize=fuzzer,address,undefined
MLIRLIBS := -L$(LLVM_PREFIX)/lib -Wl,-rpath,$(LLVM_PREFIX)/lib -lMLIR -lLLVM

SPEC := Diagnostics JsonDoc ObjectReader ModelJson ModelJsonWriter ModelSpec HFConfig ClusterJson DevicePresets
SPEC_OBJS := $(SPEC:%=$(OUT)/obj/frontend/%.o)
IR := ModelToMLIR ClusterToMLIR
IR_OBJS := $(IR:%=$(OUT)/obj/frontend/%.o)
DIALECT := $(basename $(notdir $(wildcard $(SRC)/dialect/lib/*.cpp)))
DIALECT_OBJS := $(DIALECT:%=$(OUT)/obj/dialect/%.o)

FUZZERS := model hf cluster checkpoint tokens mlir driver
all: $(FUZZERS:%=$(OUT)/%-fuzzer)

$(OUT)/model-fuzzer: $(OUT)/obj/ModelFuzzer.o $(SPEC_OBJS)
$(OUT)/hf-fuzzer: $(OUT)/obj/HFFuzzer.o $(SPEC_OBJS)
$(OUT)/cluster-fuzzer: $(OUT)/obj/ClusterFuzzer.o $(SPEC_OBJS)
$(OUT)/checkpoint-fuzzer: $(OUT)/obj/CheckpointFuzzer.o $(OUT)/obj/runtime/Checkpoint.o
$(OUT)/tokens-fuzzer: $(OUT)/obj/TokensFuzzer.o $(OUT)/obj/runtime/Data.o
$(OUT)/mlir-fuzzer: $(OUT)/obj/MlirFuzzer.o $(DIALECT_OBJS)
$(OUT)/driver-fuzzer: $(OUT)/obj/DriverFuzzer.o $(IR_OBJS) $(DIALECT_OBJS) $(SPEC_OBJS)

$(OUT)/model-fuzzer $(OUT)/hf-fuzzer $(OUT)/cluster-fuzzer $(OUT)/checkpoint-fuzzer $(OUT)/tokens-fuzzer:
	$(CXX) $(LDFLAGS) $^ -o $@
$(OUT)/mlir-fuzzer $(OUT)/driver-fuzzer:
	$(CXX) $(LDFLAGS) $^ $(MLIRLIBS) -o $@

# Harnesses and sources that include MLIR.
$(OUT)/obj/MlirFuzzer.o $(OUT)/obj/DriverFuzzer.o: EXTRA := $(MLIRFLAGS)
$(IR_OBJS) $(DIALECT_OBJS): EXTRA := $(MLIRFLAGS)

$(OUT)/obj/%.o: $(SRC)/test/fuzz/%.cpp
	@mkdir -p $(dir $@)
	$(CCACHE) $(CXX) $(CXXFLAGS) $(EXTRA) -c $< -o $@
$(OUT)/obj/frontend/%.o: $(SRC)/frontend/lib/%.cpp
	@mkdir -p $(dir $@)
	$(CCACHE) $(CXX) $(CXXFLAGS) $(EXTRA) -c $< -o $@
$(OUT)/obj/runtime/%.o: $(SRC)/runtime/lib/%.cpp
	@mkdir -p $(dir $@)
	$(CCACHE) $(CXX) $(CXXFLAGS) -c $< -o $@
$(OUT)/obj/dialect/%.o: $(SRC)/dialect/lib/%.cpp
	@mkdir -p $(dir $@)
	$(CCACHE) $(CXX) $(CXXFLAGS) $(EXTRA) -c $< -o $@

-include $(shell find $(OUT)/obj -name '*.d' 2>/dev/null)
.PHONY: all
