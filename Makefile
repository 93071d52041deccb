# beaconmux: the commands a newcomer runs. Each target installs missing Debian packages first.
#   make        build the release binaries (build/release/beaconmux, build/release/beaconsim)
#   make test   ASan + UBSan build, then every unit and integration test
#   make test-under-load   `make test` 5 times in a row (UNDER_LOAD_RUNS) on a fresh clone
#               beside two busy CPU loops; stops at the first red run (docs/testing.md)
#   make demo   beaconsim (3 nodes) + beaconmux, and what to open
#   make bench  wrk against a local upstream: direct, beaconmux, nginx, haproxy
#   make fuzz   every libFuzzer harness for FUZZ_SECONDS (default 30) each, or to FUZZ_RUNS
#               executions each (FUZZ_SECONDS then bounds each); FUZZ_HARNESSES="sse config"
#               runs only those
#   make soak   beaconmux in front of beaconsim for SOAK_SECONDS (default 1800) under mixed and
#               hostile traffic with node faults; fails on a crash, a lost or wrong duty answer,
#               an undelivered broadcast, or RSS / descriptors not back at the end
#               (SOAK_BUILD=release, or debug for the sanitizer build; docs/testing.md)
#   make e2e    a real Lodestar validator client behind beaconmux, three real Lodestar beacon
#               nodes, a chaos schedule; compared with the client's own fallback list
#               (E2E_SCHEDULE=long|short, E2E_SLOT_SECONDS=4; installs Lodestar from npm)
#   make install   the release build under PREFIX (default /usr/local), staged in DESTDIR
#   make package   build/release/beaconmux_<version>_<arch>.deb (docs/operations.md)
#   make image     the container image beaconmux:<version> (podman, offline, FROM scratch)

FUZZ_SECONDS ?= 30
FUZZ_RUNS ?=
FUZZ_HARNESSES ?=
SOAK_SECONDS ?= 1800
SOAK_BUILD ?= release
CTEST_JOBS ?= 2
E2E_SCHEDULE ?= long
E2E_SLOT_SECONDS ?= 4
PREFIX ?= /usr/local
DESTDIR ?=

.PHONY: all build deps test test-under-load demo bench fuzz soak e2e format clean install package image

all: build

deps:
	@scripts/install-deps.sh

build: deps
	cmake --preset release >/dev/null
	cmake --build --preset release

debug: deps
	cmake --preset debug >/dev/null
	cmake --build --preset debug

# Unit tests run in parallel; integration tests one at a time, because they measure
# timing against real slot clocks on a 2-core machine.
test: debug
	ctest --preset debug -L unit -j $(CTEST_JOBS)
	ctest --preset debug -L integration -j 1

UNDER_LOAD_RUNS ?= 5
test-under-load: deps
	scripts/test-under-load.sh $(UNDER_LOAD_RUNS)

demo: build
	scripts/demo.sh

bench: build
	@scripts/install-deps.sh bench
	bench/run.sh

fuzz: deps
	cmake --preset fuzz >/dev/null
	cmake --build --preset fuzz
	FUZZ_HARNESSES="$(FUZZ_HARNESSES)" scripts/fuzz.sh $(FUZZ_SECONDS) $(FUZZ_RUNS)

# Not part of `make test`: half an hour by default. Niced, as it shares the machine.
soak: deps
	cmake --preset $(SOAK_BUILD) >/dev/null
	cmake --build --preset $(SOAK_BUILD)
	nice -n 10 python3 tests/soak/soak.py --seconds $(SOAK_SECONDS) --bin-dir build/$(SOAK_BUILD) \
		--json build/$(SOAK_BUILD)/soak.json

# The checks' own tests first (a second), then Lodestar (npm ci from the pinned lockfile;
# nothing when installed), then both runs (docs: e2e/README.md).
e2e: build
	python3 e2e/test_checks.py
	e2e/install.sh
	python3 e2e/chaos.py --schedule $(E2E_SCHEDULE) --seconds-per-slot $(E2E_SLOT_SECONDS)

install: build
	cmake --preset release -DCMAKE_INSTALL_PREFIX=$(PREFIX) >/dev/null
	DESTDIR=$(DESTDIR) cmake --install build/release

# The package installs under /usr (and /etc, /lib/systemd/system), whatever PREFIX is.
package: build
	@scripts/install-deps.sh package
	cmake --preset release -DCMAKE_INSTALL_PREFIX=/usr >/dev/null
	cmake --build --preset release
	cd build/release && cpack -G DEB

image: package
	@scripts/install-deps.sh image
	scripts/build-image.sh build/release

format:
	clang-format -i src/*/*.[ch] sim/*.[ch] tests/unit/*.[ch] fuzz/*.c

clean:
	rm -rf build
