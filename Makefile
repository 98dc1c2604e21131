# Thin wrapper so a newcomer never types cmake flags. Every target installs
# missing Debian packages first (tools/scripts/install-deps.sh is a no-op when
# all are present).
BUILD_DIR ?= build
EXAMPLE   ?= examples/models/tiny.json

.PHONY: all deps configure build test demo hf-example docs bench clean

all: build

deps:
	@./tools/scripts/install-deps.sh

configure: deps
	@cmake --preset default >/dev/null

build: configure
	@cmake --build $(BUILD_DIR) --target all mlir-doc

# The test command of the README and of .ci/run: lit and GoogleTest suites,
# then lit's summary (how many tests passed, and which were unsupported or
# skipped and why), from the results file the lit test writes; the status
# is ctest's.
LIT_RESULTS = $(BUILD_DIR)/test/lit-results.json
test: build
	@rm -f $(LIT_RESULTS)
	@ctest --test-dir $(BUILD_DIR) --output-on-failure; rc=$$?; \
	  if [ -f $(LIT_RESULTS) ]; then python3 tools/scripts/lit-summary.py $(LIT_RESULTS); fi; \
	  exit $$rc

# The main job: compile the tiny model with moec and train it on a real
# corpus (the King James Bible), printing progress and the final loss.
demo: build
	@./tools/scripts/demo.sh $(BUILD_DIR) $(EXAMPLE)

# Pretrained weights in and out (README, "Starting from a HuggingFace
# model"): a shrunk Qwen3-MoE, a SentencePiece tokenizer, a base checkpoint
# in HF format, fine-tuning from it, evaluation, export.
hf-example: build
	@./tools/scripts/hf-example.sh $(BUILD_DIR)

# Benchmarks against OpenBLAS and PyTorch (installs both first); not CI.
bench: build
	@./tools/scripts/install-deps.sh --bench
	@cmake --preset default >/dev/null
	@./bench/run.sh $(BUILD_DIR)

docs: build
	@echo "generated dialect reference: $(BUILD_DIR)/docs/Dialects/MoE.md"
	@echo "generated pass reference: $(BUILD_DIR)/docs/MoEPasses.md"

clean:
	rm -rf $(BUILD_DIR)
