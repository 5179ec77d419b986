# tpurun — run `make help` for the targets.
GO        ?= go
BIN       := bin
TPURUN    := $(BIN)/tpurun
PKGS      := ./...
FUZZTIME  ?= 20s

# The interpreter make wheel builds with: `make wheel PYTHON=/path/to/python3` names one; unset, the first of PATH's
# python3 and /usr/bin/python3 that imports PyPA's build, setuptools and wheel (a pyenv, conda or venv python3 first
# on PATH often lacks them, Debian's has them once python3-build is installed), else PATH's python3, which the wheel
# target's check then names with the command that fixes it.
WHEEL_DEPS := import build, setuptools, wheel.bdist_wheel
PYTHON    ?= $(shell for p in python3 /usr/bin/python3; do \
                 if $$p -c '$(WHEEL_DEPS)' >/dev/null 2>&1; then command -v $$p; exit; fi; done; echo python3)

.PHONY: help build wheel demo test lint bench fuzz clean

help: ## list the targets
	@grep -E '^[a-z]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-8s %s\n", $$1, $$2}'

# CGO_ENABLED=0: one static binary: it runs in any container image, with or without a C library. A
# build linked to this machine's glibc (the go command's default where a C compiler is installed) fails to start in
# Alpine or distroless with "no such file or directory". The tests build it the same way.
#
# bin/tpurun-etcd is the same command with the etcd rendezvous linked (-tags etcd): tpurun leaves the etcd client
# out (half its size and most of its start-up) and runs tpurun-etcd, found beside it, for --rdzv-backend etcd.
build: ## build bin/tpurun, bin/tpurun-etcd and the example workers
	CGO_ENABLED=0 $(GO) build -o $(TPURUN) ./cmd/tpurun
	CGO_ENABLED=0 $(GO) build -tags etcd -o $(TPURUN)-etcd ./cmd/tpurun
	CGO_ENABLED=0 $(GO) build -o $(BIN)/hello ./examples/hello

# The platform wheel: the static binary (for GOOS/GOARCH, this machine's unless set) and the tpurun Python package,
# built offline by setuptools (pyproject.toml, setup.py) under PyPA's frontend with the installed backend
# (Debian: python3-build, python3-setuptools, python3-wheel; .ci/deps installs them).
wheel: ## build dist/tpurun-VERSION-py3-none-PLATFORM.whl (binary + Python module): pip install --no-index dist/tpurun-*.whl
	@$(PYTHON) -c '$(WHEEL_DEPS)' >/dev/null 2>&1 || { \
	  echo "make wheel: $$(command -v $(PYTHON) || echo $(PYTHON)) cannot build the wheel: $$($(PYTHON) -c '$(WHEEL_DEPS)' 2>&1 | tail -n 1)"; \
	  echo "  fix: apt-get install -y python3-build python3-setuptools python3-wheel, then make wheel PYTHON=/usr/bin/python3"; \
	  echo "  (Debian's python3; unset, PYTHON is the first python3 that has them), or: $(PYTHON) -m pip install build setuptools wheel"; \
	  exit 1; } >&2
	rm -rf build # setuptools would add what an earlier build left there (a module since removed)
	$(PYTHON) -m build --wheel --no-isolation --outdir dist .

demo: build ## run the example on 4 CPU workers (no TPU needed)
	$(TPURUN) --nprocs 4 -- $(BIN)/hello

# -vet=all: every go vet check, run by go test on every package (those without tests too) on the packages it has
# built with -race already; a separate go vet would compile every package and dependency a second time (about 200
# CPU-seconds of a 2-core CI machine's cold build).
#
# Packages start in the order given, three at a time (-p 3: the packages' tests mostly wait on the processes they
# start, and with two at a time the 2-core machine was busy 82% of the run): the longest first (cmd/tpurun, the
# CLI's tests), then PyTorch's launcher tests on the CPU and the GPU host (torch imports, outside the heavy slot),
# then the rendezvous packages (mostly waits: etcd's elections, leases, timeouts) and the other packages that take a
# minute, so that the short packages fill in at the end instead of a long one running alone.
#
# -parallel 4: a package's parallel tests mostly wait on the processes they start, so four at a time keep the cores
# busier than two (go test's default, GOMAXPROCS); the CPU-heavy ones take turns through testutil.Heavy.
FIRST     := ./cmd/tpurun ./internal/testutil/porttest ./rendezvous ./docs ./internal/results \
             ./launcher ./rendezvous/etcd ./rendezvous/tcp ./worker
# .ci/deps first: it installs, with apt, the Debian packages the tests use (PyTorch, etcd, Jupyter, PyPA's build...)
# when one is missing (as root, or through sudo when it asks no password; else it fails naming the apt-get command),
# and downloads the modules; it does nothing when all are there. A fresh machine needs only Go, make and apt.
test: ## install what the tests use when missing (.ci/deps: apt), then run every test (race detector, every go vet check), as CI does
	.ci/deps
	$(GO) test -race -vet=all -count=1 -p 3 -parallel 4 -timeout 20m $(FIRST) $(PKGS)

lint: ## gofmt and go vet
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

bench: build ## measure tpurun against a shell, pipes and torchrun; writes docs/BENCHMARKS.md and docs/launch.svg
	.ci/deps
	$(GO) build -o $(BIN)/tpurun-bench ./cmd/tpurun-bench
	$(BIN)/tpurun-bench -tpurun $(TPURUN) -out docs/BENCHMARKS.md -svg docs/launch.svg

fuzz: ## run every fuzz target for FUZZTIME each
	@set -e; n=0; \
	for f in $$(grep -rl --include='*_test.go' '^func Fuzz' . | sort); do \
		pkg=./$$(dirname $${f#./}); \
		for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "== $$pkg $$name ($(FUZZTIME))"; \
			$(GO) test -run '^$$' -fuzz "^$$name\$$" -fuzztime $(FUZZTIME) $$pkg; \
			n=$$((n+1)); \
		done; \
	done; \
	echo "fuzz: $$n targets ran $(FUZZTIME) each without a crash"

clean: ## remove build output
	rm -rf $(BIN) build dist
