# Everything installs into .venv at the repository root; a fresh machine needs only Python 3.11.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# Python keeps the project's compiled modules in __pycache__ (ignored by git) even where the
# environment says not to (PYTHONDONTWRITEBYTECODE=1, as these machines' images set it): else
# every stage, agent and CLI call the suite and the demo start compiles our sources again, 1.0 s
# of CPU at each start instead of 0.5, and the suite starts about 700 of them.
unexport PYTHONDONTWRITEBYTECODE

.PHONY: images install system jars tools demo test unit integration bench soak clean lint docs

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e '.[dev,docs]'
	touch $(STAMP)

# Peloton's protobuf API (proto/, the wire of `pelotonctl api`'s gRPC port): its Python messages
# and stubs generated into peloton/api (ignored by git) by grpcio-tools, at install and again
# whenever a .proto file changes. The import paths in proto/ make the modules peloton.api.*.
PROTOS := $(shell find proto -name '*.proto' | sort)
GENERATED := peloton/api/.generated
$(GENERATED): $(PROTOS) $(STAMP)
	rm -rf peloton/api
	$(BIN)/python -m grpc_tools.protoc -I proto --python_out=. --pyi_out=. --grpc_python_out=. $(PROTOS)
	touch $@

install: $(STAMP) $(GENERATED)

# The servers' jars from Maven Central (jvm/NAME/pom.xml pins each version): Apache Kafka's broker
# and tools, Apache Cassandra's server. Fetched once into an ignored folder, each apart from the
# other (they pin different Netty, Guava and Jackson); a fetch cut short leaves no half folder. The
# mark holds the pom's SHA-256: pelotonctl/dev/jars.py fetches again when the pom changed.
.jars/%/.complete: jvm/%/pom.xml
	@command -v mvn >/dev/null || { echo "Maven (mvn) and Java 17 are needed to fetch the servers' jars" >&2; exit 1; }
	rm -rf .jars/$*.partial
	mvn -q -B -f jvm/$*/pom.xml org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy-dependencies \
	  -DoutputDirectory=$(CURDIR)/.jars/$*.partial -DincludeScope=runtime
	rm -rf .jars/$* && mv .jars/$*.partial .jars/$* && sha256sum jvm/$*/pom.xml | cut -d' ' -f1 > $@

jars: .jars/kafka/.complete .jars/cassandra/.complete

# grpcurl, a generic gRPC client that finds the API's services through server reflection, built
# from the Go module proxy into .tools/ (ignored): about a minute the first time, then nothing.
# The version is in the stamp's name, so changing it builds again.
GRPCURL_VERSION := v1.9.4
tools: .tools/grpcurl
.tools/grpcurl: .tools/.grpcurl-$(GRPCURL_VERSION)
	@command -v go >/dev/null || { echo "Go 1.25 or newer is needed to build grpcurl from the Go module proxy" >&2; exit 1; }
	GOBIN=$(CURDIR)/.tools go install github.com/fullstorydev/grpcurl/cmd/grpcurl@$(GRPCURL_VERSION)
	touch $@
.tools/.grpcurl-%:
	rm -f .tools/.grpcurl-*
	mkdir -p .tools && touch $@

# The Debian packages the tests start real servers from: PostgreSQL (the multi-machine store),
# ZooKeeper (the instance registry), Chromium with its driver (the dashboard, seen in a real
# headless browser), runc (the OCI runtime agents run images with) and busybox-static (the
# tests' image). Installed when missing and this runs as root with apt;
# otherwise it says the one command to run.
system:
	@missing=""; \
	ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || missing="$$missing postgresql"; \
	[ -x /usr/share/zookeeper/bin/zkServer.sh ] || missing="$$missing zookeeper"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	command -v runc >/dev/null || missing="$$missing runc"; \
	dpkg -s busybox-static >/dev/null 2>&1 || missing="$$missing busybox-static"; \
	command -v promtool >/dev/null || missing="$$missing prometheus"; \
	if [ -n "$$missing" ]; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing$$missing (Debian packages)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq $$missing >/dev/null; \
	  else \
	    echo "missing Debian packages:$$missing; install them with: sudo apt-get install -y$$missing" >&2; \
	    exit 1; \
	  fi; \
	fi

# Container images for a cluster (docker/Containerfile; docker/compose.yaml runs them), built with
# podman on a Debian base made here by mmdebstrap (no registry is reached): the base once, the
# image at every call, the project's dependencies as wheels made on this machine. As root on
# Debian, podman and mmdebstrap come from apt.
IMAGE ?= localhost/peloton:latest
IMAGE_BASE ?= localhost/peloton-base:bookworm
DEBIAN_MIRROR ?= http://deb.debian.org/debian
BASE_PACKAGES := python3,python3-venv,ca-certificates,openjdk-17-jre-headless,zookeeper,postgresql,prometheus,procps
images: $(STAMP) $(GENERATED) jars
	@if ! command -v podman >/dev/null || ! command -v mmdebstrap >/dev/null; then \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	    echo "installing podman mmdebstrap (Debian packages)"; \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman mmdebstrap uidmap >/dev/null; \
	  else echo "podman and mmdebstrap are needed: sudo apt-get install -y podman mmdebstrap uidmap" >&2; exit 1; fi; \
	fi
	@podman image exists $(IMAGE_BASE) || { mkdir -p .images && rm -f .images/base.tar \
	  && mmdebstrap --quiet --variant=apt --include=$(BASE_PACKAGES) bookworm .images/base.tar $(DEBIAN_MIRROR) \
	  && podman import --quiet .images/base.tar $(IMAGE_BASE) && rm -f .images/base.tar; }
	rm -rf .images/wheels && $(BIN)/pip wheel --quiet -w .images/wheels .
	podman build --isolation=chroot --build-arg BASE=$(IMAGE_BASE) -f docker/Containerfile -t $(IMAGE) .

# Starts the embedded stack, runs the example jobs to completion with live progress, prints a
# summary with tasks per second, and stops the stack.
demo: $(STAMP) $(GENERATED) jars
	$(BIN)/pelotonctl dev demo

# Two workers (pytest-xdist; each starts its own broker and servers as it needs them) that take
# work from each other's queues: CI's two cores are about half idle with one, as the tests wait
# on brokers and processes. TEST_WORKERS=0 runs everything in one process. Tests marked alone
# bound a time, so they run afterwards in one process with nothing beside them; both phases run
# whatever the first one's outcome.
TEST_WORKERS ?= 2
test: $(STAMP) $(GENERATED) system jars
	@status=0; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=30 -m "not slow and not alone" || status=$$?; \
	$(BIN)/python -m pytest -q -m "alone and not slow" || status=$$?; \
	exit $$status

# The guards a developer runs before every commit, and CI before the tests: ruff (errors, imports,
# idioms) and mypy (types) over the tree, as pyproject.toml configures them.
lint: $(STAMP) $(GENERATED)
	$(BIN)/ruff check .
	$(BIN)/mypy

# The docs site into site/ (ignored): MkDocs runs docs/generate.py first (a hook in mkdocs.yml),
# which writes the reference pages (CLI, settings, API, topics, metrics; ignored too) from the
# code; --strict makes a broken link or anchor an error. CI builds it after the linters.
docs: $(STAMP) $(GENERATED)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# The pure unit tests: none that starts a server of its own (marked servers: the store contract on
# PostgreSQL and Cassandra) or is a soak run (slow); in two workers, under a minute. `make test`
# runs them all.
unit: $(STAMP) $(GENERATED) system
	$(BIN)/python -m pytest -q -n 2 --dist worksteal -m "not servers and not slow" tests/unit

integration: $(STAMP) $(GENERATED) system jars
	$(BIN)/python -m pytest -q tests/integration

# Figures, not pass/fail: first the benchmark page (docs/benchmarks/: the pipeline's burst on 1,000
# to 50,000 hosts and 10,000 to 100,000 tasks, its results.json, charts and table, with the date and
# machine), then the resource manager and placement alone, then the pipeline at cluster
# scale (10,000 simulated hosts, 50 jobs of 1,000 tasks): its throughput with every job submitted
# at once, beside a 4-hop relay of the same broker, its latency at a steady 80 % of that rate, and
# the same burst on 1,000 and 50,000 hosts, one instance of each stage and then two (each capped at
# a tenth of a core, as root), with the speed targets beside the figures; and the API's two faces,
# HTTP and gRPC, side by side (creates per second, a job's read p50 and p99).
bench: $(STAMP) $(GENERATED) jars
	$(BIN)/pip install --quiet -e '.[bench]'
	$(BIN)/python -m pelotonctl.bench.sweep
	$(BIN)/python -m pelotonctl.bench.charts
	$(BIN)/pelotonctl respool bench
	$(BIN)/python -m pelotonctl.bench.placement
	$(BIN)/python -m pelotonctl.bench.job_manager
	$(BIN)/python -m pelotonctl.bench.entitle_stage
	$(BIN)/python -m pelotonctl.bench.launch_stage
	$(BIN)/python -m pelotonctl.bench.api_calls
	$(BIN)/pelotonctl bench --targets --against 2c424af

# Scale and soak runs (tests marked slow), left out of `make test` to keep it within CI's time.
# The slow tests: the nemesis among them runs SOAK_MINUTES (30; `make soak SOAK_MINUTES=5` is the
# short form) and prints its table of faults and invariants (-rP shows passed tests' output).
SOAK_MINUTES ?= 30
soak: $(STAMP) $(GENERATED) system jars
	SOAK_MINUTES=$(SOAK_MINUTES) $(BIN)/python -m pytest -q -rP -m slow tests

clean:
	rm -rf $(VENV) .peloton .pytest_cache .jars .bench .tools site peloton/api
	git worktree prune 2>/dev/null || true
