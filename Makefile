# sprof's build and test entry points. `make test` is the one command CI
# runs (.ci/run); it installs what the tests need and runs all of them.

GO ?= go
PREFIX ?= /usr/local

.PHONY: all build install test deps vet unit matrix matrix-fetch kernel-matrix kernel-matrix-full generate check-generate

all: build

# A static binary: with cgo, Go's net package would link libc for its DNS
# resolver, and the binary would not run on a host or in an image with
# another libc. `sprof version` says which a binary is.
build:
	CGO_ENABLED=0 $(GO) build -o sprof ./cmd/sprof

# Installs what `make build` built, without building: under sudo, PATH
# (sudo's secure_path) usually lacks go.
install:
	@test -f sprof || { echo "install: no ./sprof; run make build first, as yourself"; exit 1; }
	install -D -m 0755 sprof $(DESTDIR)$(PREFIX)/bin/sprof

# The kernel matrix's downloads start first, in the background (network,
# little CPU), and its VMs boot last, after the unit tests whether or not
# they passed: its table comes next, then, if a unit test failed, what each
# failing test said (the log of a long run is often read from its end), and
# make test fails if either did.
test: deps matrix-fetch vet check-generate
	@status=0; \
	$(MAKE) --no-print-directory unit || status=1; \
	$(MAKE) --no-print-directory matrix || status=1; \
	./scripts/test-failures.sh $(UNIT_LOG); \
	exit $$status

deps:
	./scripts/install-test-deps.sh

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt: files above need formatting"; exit 1; }
	$(GO) vet ./...

# The unit tests' output is kept in UNIT_LOG for make test's summary of
# failures.
UNIT_LOG ?= $(or $(TMPDIR),/tmp)/sprof-unit-tests.log
unit:
	@echo "$(GO) test -count=1 -timeout 20m ./..."
	@bash -o pipefail -c '$(GO) test -count=1 -timeout 20m ./... 2>&1 | tee $(UNIT_LOG)'

# Boot Debian's kernels (5.10, 6.1, 6.12, newest sid; amd64 and arm64) one
# at a time under QEMU and run in each the end-to-end chain tests (frame
# pointers, none through libc, threads, PLT leaves, kernel frames, pprof
# output) and the sampler's load with every option; a table of kernel x
# test, with each VM's wall time, is printed at the end. Kernels are cached
# in /var/cache/sprof-kernels (SPROF_KERNEL_CACHE), initramfs images in
# /tmp/sprof-kernel-matrix (SPROF_MATRIX_OUT). Not root, or no network and
# nothing cached: skipped with the reason, as other kernel tests; under
# CI=true it fails. kernel-matrix adds `sprof check`'s tests and the bpf
# tests of what differs between kernels, and kernel-matrix-full all of
# bpf's tests: run one by hand before a change to bpf/ lands
# (scripts/kernel-matrix.sh says which tests each runs).
matrix:
	./scripts/kernel-matrix.sh

matrix-fetch:
	@./scripts/kernel-matrix.sh fetch-background

kernel-matrix:
	SPROF_MATRIX_SCOPE=kernel ./scripts/kernel-matrix.sh

kernel-matrix-full:
	SPROF_MATRIX_SCOPE=full ./scripts/kernel-matrix.sh

# Rebuild the committed BPF objects (needs clang-22).
generate:
	$(GO) generate ./bpf/...

# Fail when the committed BPF objects differ from what the sources give
# (bpf2go output is deterministic for a given clang and libbpf-dev).
check-generate: generate
	@git diff --exit-code -- bpf/ || { echo "check-generate: bpf/ changed after make generate; commit the regenerated files"; exit 1; }
