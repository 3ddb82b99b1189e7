# egress-proxies-operator
#
# make demo   run the operator end to end on the embedded local provider
# make test   build what the tests need and run them all
# make soak   the crash soak: SIGKILL the operator at random through Proxy cycles
# make bench-fleet  the fleet benchmark: N Proxies against the API server's floor
# make drills the fault drills: backend and API-server faults under a fleet
# make drill-group  the group failover drill on the libvirt test host (issue 24)
# make drill-node-lost  the group drill on a lost node of the two-node e2e cluster

SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

IMG ?= egress-proxies-operator:dev
LOCALBIN ?= $(CURDIR)/bin
GO ?= go

CONTROLLER_TOOLS_VERSION ?= v0.23.0
KUSTOMIZE_VERSION ?= v5.8.1
CONTROLLER_GEN ?= $(LOCALBIN)/controller-gen-$(CONTROLLER_TOOLS_VERSION)
KUSTOMIZE ?= $(LOCALBIN)/kustomize-$(KUSTOMIZE_VERSION)

# The control plane for envtest is built from source (hack/build-control-plane.sh)
# into a cache outside the work tree, once per version.
ENVTEST_ASSETS = $(shell hack/build-control-plane.sh path)

.PHONY: all
all: build

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*##"} /^[a-zA-Z_-]+:.*?##/ { printf "  %-18s %s\n", $$1, $$2 }' $(MAKEFILE_LIST)

##@ Development

.PHONY: manifests
manifests: $(CONTROLLER_GEN) ## Generate CRDs and RBAC from the markers.
	$(CONTROLLER_GEN) rbac:roleName=manager-role crd paths="./..." output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) crd paths=sigs.k8s.io/cluster-api/api/ipam/v1beta2 output:crd:artifacts:config=config/components/ipam-crds

.PHONY: generate
generate: $(CONTROLLER_GEN) ## Generate deepcopy code.
	$(CONTROLLER_GEN) object:headerFile="hack/boilerplate.go.txt" paths="./..."

.PHONY: providers-doc
providers-doc: ## Generate docs/providers.md and docs/api.md's ready-per-provider block from the providers' profiles (internal/provider/*/profile.go).
	$(GO) run ./hack/providers-doc -o docs/providers.md -api docs/api.md

.PHONY: verify-generated
verify-generated: manifests generate providers-doc ## Fail when generated files are stale.
	@git diff --exit-code -- api config/crd config/components/ipam-crds config/rbac docs/providers.md docs/api.md || { echo "generated files are stale: run 'make manifests generate providers-doc' and commit"; exit 1; }

.PHONY: fmt
fmt:
	$(GO) fmt ./...

.PHONY: vet
vet: ## go vet ./...
	$(GO) vet ./...

.PHONY: install-test-deps
install-test-deps: ## Install the Debian packages the tests use (squid, cloud-init, genisoimage, xorriso, keepalived, libvirt-clients, libxml2-utils; root or sudo). SKIP_SQUID_TESTS=1 / SKIP_CLOUDINIT_TESTS=1 / SKIP_ISO_TESTS=1 / SKIP_VRRP_TESTS=1 / SKIP_LIBVIRT_SCHEMA_TESTS=1 leave one out.
	hack/install-test-deps.sh

.PHONY: envtest-assets
envtest-assets: ## Build kube-apiserver and etcd for envtest (cached; 10-30 min cold).
	hack/build-control-plane.sh

# What a cold `make test` waits for, overlapped: the control plane's build
# is CPU-bound; the module downloads, the Debian packages and the libvirt
# guest (mmdebstrap) wait on the network. So two chains run side by side
# (-j2): the apt steps stay in one chain, one after the other (one dpkg
# lock). Warm, each step is a cache hit of a second or two. The guest is
# built early only as root (it needs root); otherwise test-libvirt comes to
# it, after the other tests, as before.
.PHONY: test-prereqs
test-prereqs:
	$(MAKE) --no-print-directory -j2 envtest-assets test-downloads

.PHONY: test-downloads
test-downloads:
	$(GO) mod download
	$(MAKE) --no-print-directory install-test-deps
	$(MAKE) --no-print-directory otelcol
	@if [ "$${SKIP_LIBVIRT_TESTS:-}" != 1 ] && [ "$$(id -u)" = 0 ]; then $(MAKE) --no-print-directory libvirt-guest; fi

# The trace tests (test/traces, test/libvirt/e2e, internal/testenv/otelcol)
# read what the operator exported back from this real collector.
.PHONY: otelcol
otelcol: ## Build the OpenTelemetry Collector the trace tests and test-e2e read spans from (hack/tools/otelcol; cached by version, about 5 min cold).
	@hack/tools/otelcol/build.sh >/dev/null

# One build for vet and the tests: -vet=all runs every analyzer go vet runs,
# on the packages as the -race build compiles them (a separate go vet would
# compile the whole tree a second time, without -race). test/libvirt/...,
# which runs inside the libvirt test host only, is vetted with -race too, so
# its dependencies are the ones just built.
.PHONY: test
test: manifests generate test-prereqs ## Run every test against a real kube-apiserver and etcd, a real Squid and cloud-init, and (as root) a real libvirtd, QEMU and OpenSSH, vetted in the same build. SKIP_LIBVIRT_TESTS=1 leaves the last out. Fuzzing for new inputs is `make fuzz`.
	@echo "control plane for the tests: $$($(ENVTEST_ASSETS)/kube-apiserver --version), $$($(ENVTEST_ASSETS)/etcd --version | head -1)"
	@# test/libvirt/... runs inside the libvirt test host (test-libvirt below), never outside it.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test $$($(GO) list ./... | grep -v '/test/libvirt/') -vet=all -race -count=1 -timeout 25m
	$(GO) vet -race ./test/libvirt/...
	@if [ "$${SKIP_LIBVIRT_TESTS:-}" = 1 ]; then \
		echo "SKIP_LIBVIRT_TESTS=1: the tests against the real libvirtd (make test-libvirt) are left out"; \
	else \
		KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(MAKE) --no-print-directory test-libvirt PKG=./test/libvirt/...; \
	fi

# Every native fuzzer (func FuzzXxx in a fuzz_test.go), one `go test -fuzz`
# each: go fuzzes one target per run. Plain `go test` (so `make test`)
# already replays each seed corpus (testdata/fuzz/FuzzXxx); this searches
# for new inputs, a step of its own in CI (.ci/run).
# Go 1.26's fuzz coordinator can fail a run with a bare "context deadline
# exceeded" at the end of -fuzztime on a loaded machine, with no input found
# (golang/go#75804, fixed in Go 1.27): such a run is reported and skipped;
# any run that writes a failing input, or fails otherwise, fails the target.
FUZZTIME ?= 10s

.PHONY: fuzz
fuzz: ## Run every fuzzer for FUZZTIME (default 10s) in turn; a failing input is written to the package's testdata/fuzz.
	@for f in $$(find internal -name fuzz_test.go | sort); do \
		pkg=./$$(dirname $$f); \
		for name in $$(sed -n 's/^func \(Fuzz[A-Za-z0-9_]*\)(.*/\1/p' $$f); do \
			echo "fuzz: $$pkg $$name for $(FUZZTIME)"; \
			out=$$($(GO) test $$pkg -run '^$$' -fuzz "^$$name\$$" -fuzztime=$(FUZZTIME) 2>&1) && { echo "$$out" | tail -2; continue; }; \
			echo "$$out"; \
			if echo "$$out" | grep -q 'Failing input written' || ! echo "$$out" | grep -qx '    context deadline exceeded'; then exit 1; fi; \
			echo "fuzz: $$pkg $$name: the end-of-fuzztime race of golang/go#75804, no input found; not a failure"; \
		done; \
	done

.PHONY: bench
bench: envtest-assets ## Run the benchmarks.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test ./... -run '^$$' -bench . -benchmem

##@ e2e cluster (hack/cluster; root; docs/testing.md "The e2e cluster")

.PHONY: cluster-install cluster-assets cluster-up cluster-down cluster-smoke cluster-load
cluster-install: ## Install containerd, runc, the CNI plugins and busybox-static from Debian (starts no service).
	hack/cluster/install.sh

cluster-assets: ## Build kube-controller-manager, kube-scheduler, kubelet and kubectl next to the envtest binaries (one go build; cached).
	hack/build-control-plane.sh cluster

# One retry: once (CI at 3352d44) kube-controller-manager was seen to exit
# at start with an empty log, and the next up worked; up.sh takes down what
# a failed start made, and prints the logs' last lines before it does.
cluster-up: ## Start the one-node e2e cluster (etcd, apiserver, controller-manager, scheduler, containerd, kubelet; bridge CNI, no route off the machine); prints its KUBECONFIG.
	hack/cluster/up.sh || { echo "cluster-up: the start failed (above); trying once more"; hack/cluster/up.sh; }

cluster-down: ## Stop the e2e cluster and remove all it made (processes, containers, mounts, cgroups, bridge, iptables chains, state dir).
	hack/cluster/down.sh

cluster-smoke: ## Check the running e2e cluster: node Ready, a non-root read-only Pod, Pod to Pod by IP, the API server from a Pod, garbage collection.
	hack/cluster/smoke.sh

cluster-load: ## Import an image archive (docker-archive or OCI) into the e2e cluster's containerd: IMAGE_ARCHIVE=path.tar.
	hack/cluster/load.sh "$(IMAGE_ARCHIVE)"

.PHONY: test-e2e
test-e2e: $(KUSTOMIZE) ## End to end on the e2e cluster: cluster-up, both images built and imported, the OpenTelemetry Collector (hack/tools/otelcol, cached) deployed, test/e2e/config applied, go test ./test/e2e, cluster-down (root; E2E_RUN=FetchThroughSquid runs one subtest; docs/testing.md).
	KUSTOMIZE="$(KUSTOMIZE)" test/e2e/run.sh

##@ libvirt test host (hack/libvirt; root; `make test` runs test-libvirt with PKG=./test/libvirt/...)

# The packages test-libvirt runs inside the host, and extra go test flags.
PKG ?= ./test/libvirt/...
TESTFLAGS ?=

.PHONY: libvirt-install
libvirt-install: ## Install libvirtd, QEMU, OpenSSH and the guest build tools from Debian (starts and enables no service).
	hack/libvirt/install.sh

.PHONY: libvirt-guest
libvirt-guest: libvirt-install ## Build the Debian 12 test guest (cloud-init, qemu-ga, Squid), cached in ~/.cache/egress-proxies-operator/libvirt-guest.
	hack/libvirt/build-guest.sh

.PHONY: libvirt-up
libvirt-up: libvirt-install ## Start the libvirt test host: libvirtd and sshd in a network namespace with no route out.
	hack/libvirt/up.sh

.PHONY: libvirt-down
libvirt-down: ## Remove the libvirt test host: guests, daemons, namespace, pool, keys.
	hack/libvirt/down.sh

.PHONY: test-libvirt
test-libvirt: libvirt-guest ## Bring the libvirt test host up, run PKG (default ./test/libvirt/...) inside it, tear it down even on failure.
	PKG="$(PKG)" TESTFLAGS="$(TESTFLAGS)" hack/libvirt/test.sh

.PHONY: drill-group
drill-group: envtest-assets ## The group failover drill on the libvirt test host (root; about 20 minutes): a ProxyGroup of two guests holding one address, the holder's domain destroyed, then only its Squid stopped, then a template change rolled, then grown to three members and back (peers told in place); prints the gaps in answers (docs/groups.md).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" EPO_GROUP_DRILL=1 $(MAKE) --no-print-directory test-libvirt PKG=./test/libvirt/group/... TESTFLAGS="-run TestGroupFailoverDrill"

.PHONY: drill-node-lost
drill-node-lost: ## The group drill on the kubernetes provider's lost node (root; about 12 minutes): make test-e2e on a two-node cluster (CLUSTER_NODES=2), a ProxyGroup of two members, the second node lost (hack/cluster/lose-node.sh); prints when the node went NotReady, the Service dropped the member, both served again (docs/groups.md).
	CLUSTER_NODES=2 E2E_RUN=ProxyGroupNodeLost $(MAKE) --no-print-directory test-e2e

##@ Build

.PHONY: build
build: manifests generate ## Build bin/manager.
	$(GO) build -o $(LOCALBIN)/manager ./cmd

# make image / image-squid write OCI archives into IMAGE_DIR with no
# registry and no daemon (hack/image, docs/images.md). IMAGE_LOAD=<containerd
# socket> also imports them into its k8s.io namespace. SQUID_IMG empty means
# egress-proxies-operator/squid:<Debian squid version>.
IMAGE_DIR ?= $(LOCALBIN)/image
SQUID_IMG ?=
IMAGE_LOAD ?=

.PHONY: image
image: manifests generate ## Build the operator's image IMG as a reproducible OCI archive (bin/image/manager.oci.tar) and print its digest.
	IMG="$(IMG)" IMAGE_DIR="$(IMAGE_DIR)" IMAGE_LOAD="$(IMAGE_LOAD)" hack/image/manager.sh

.PHONY: image-squid
image-squid: ## Build the kubernetes provider's Squid image from Debian's squid package (bin/image/squid.oci.tar) and print its digest.
	SQUID_IMG="$(SQUID_IMG)" IMAGE_DIR="$(IMAGE_DIR)" IMAGE_LOAD="$(IMAGE_LOAD)" hack/image/squid.sh

.PHONY: image-test
image-test: envtest-assets ## Check both images: built twice with one digest, their configs, and Squid in a private containerd with the provider's config.
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" hack/image/test.sh

.PHONY: run
run: manifests generate ## Run the operator against the current kubeconfig with hack/providers-dev.yaml.
	$(GO) run ./cmd --providers-config hack/providers-dev.yaml

##@ Demo

.PHONY: demo
demo: build envtest-kubectl ## Run the operator end to end on the local provider (Ctrl-C stops everything); the manager's log goes to bin/demo-manager.log, its warnings and errors to the screen.
	$(GO) build -o $(LOCALBIN)/demo ./cmd/demo
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(LOCALBIN)/demo --manager $(LOCALBIN)/manager --manager-log $(LOCALBIN)/demo-manager.log

.PHONY: demo-check
demo-check: build envtest-assets ## The demo without a terminal: exit 0 only if a fetch through the proxy worked.
	$(GO) build -o $(LOCALBIN)/demo ./cmd/demo
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(LOCALBIN)/demo --manager $(LOCALBIN)/manager --manager-log $(LOCALBIN)/demo-manager.log --check

SOAK_PROVIDER ?= kubernetes
SOAK_CYCLES ?=
SOAK_SEED ?= 0
SOAK_FLAGS ?=

.PHONY: soak
soak: build envtest-assets ## Crash soak: Proxy cycles while the operator is SIGKILLed at random; fails on a stuck Proxy, a leaked instance or a duplicate (SOAK_PROVIDER=kubernetes|libvirt SOAK_CYCLES= (100; libvirt 15) SOAK_SEED=0 SOAK_FLAGS=--inject-leak=behind; docs/testing.md). libvirt brings the libvirt test host up and down (root).
	$(GO) build -o $(LOCALBIN)/soak ./test/soak
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" SOAK_PROVIDER=$(SOAK_PROVIDER) SOAK_CYCLES=$(SOAK_CYCLES) SOAK_SEED=$(SOAK_SEED) \
		$(if $(filter libvirt,$(SOAK_PROVIDER)),test/soak/libvirt.sh )$(LOCALBIN)/soak --manager $(LOCALBIN)/manager $(SOAK_FLAGS)

BENCH_FLAGS ?=

.PHONY: bench-fleet
bench-fleet: build envtest-assets ## Fleet benchmark: the API server's floor and the operator on N Proxies per provider, `key: value` figures (N=1000 PROVIDERS=local,kubernetes BENCH_MANAGER_FLAGS= BENCH_MANAGER_MEMORY_LIMIT= BENCH_MANAGER_GOMEMLIMIT=; docs/performance.md).
	$(GO) build -o $(LOCALBIN)/benchfleet ./test/benchfleet
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(LOCALBIN)/benchfleet --manager $(LOCALBIN)/manager $(BENCH_FLAGS)

# The fault drills (test/drills): the operator as assembled, the fake
# provider, a real kube-apiserver and etcd; full size here, a quick size
# under plain go test. DRILL_RUN=Quota runs one.
DRILL_PROXIES ?= 200
DRILL_OUTAGE ?= 5m
DRILL_APISERVER_DOWN ?= 60s
DRILL_QUOTA_WINDOW ?= 2m
DRILL_SEED ?= 1
DRILL_RUN ?= .

.PHONY: drills
drills: envtest-assets ## Fault drills: chaos, quota, backend outage, API server down, delete during create; `key: value` figures (DRILL_PROXIES=200 DRILL_OUTAGE=5m DRILL_APISERVER_DOWN=60s DRILL_QUOTA_WINDOW=2m DRILL_SEED=1 DRILL_RUN=.; docs/testing.md).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" DRILLS=1 DRILL_PROXIES=$(DRILL_PROXIES) DRILL_OUTAGE=$(DRILL_OUTAGE) \
		DRILL_APISERVER_DOWN=$(DRILL_APISERVER_DOWN) DRILL_QUOTA_WINDOW=$(DRILL_QUOTA_WINDOW) DRILL_SEED=$(DRILL_SEED) \
		$(GO) test ./test/drills -run '$(DRILL_RUN)' -v -count=1 -timeout 150m

.PHONY: envtest-kubectl
envtest-kubectl:
	BUILD_KUBECTL=1 hack/build-control-plane.sh

##@ Deployment

.PHONY: install
install: manifests $(KUSTOMIZE) ## Install the CRDs into the cluster of the current kubeconfig.
	$(KUSTOMIZE) build config/crd | kubectl apply -f -

.PHONY: deploy
deploy: manifests $(KUSTOMIZE) ## Deploy the operator with config/default.
	cd config/manager && $(KUSTOMIZE) edit set image controller=$(IMG)
	$(KUSTOMIZE) build config/default | kubectl apply -f -

# make kvm-ssh-secret KVM_SSH_KEY=./id_ed25519 KVM_KNOWN_HOSTS=./known_hosts
# Server-side apply, so no last-applied annotation keeps a second copy of the
# key; only kubectl's one-line result is printed, never the files' content.
KVM_SSH_KEY ?=
KVM_KNOWN_HOSTS ?=
KVM_SSH_NAMESPACE ?= egress-proxies-operator-system
KUBECTL ?= kubectl

.PHONY: kvm-ssh-secret
kvm-ssh-secret: ## Create or update the kvm-ssh Secret (the kvm/kvm2 providers' SSH key and known_hosts) from the files KVM_SSH_KEY and KVM_KNOWN_HOSTS.
	@test -n "$(KVM_SSH_KEY)" -a -r "$(KVM_SSH_KEY)" || { echo "KVM_SSH_KEY must name a readable file: the unencrypted private key the operator logs in with" >&2; exit 2; }
	@test -n "$(KVM_KNOWN_HOSTS)" -a -r "$(KVM_KNOWN_HOSTS)" || { echo "KVM_KNOWN_HOSTS must name a readable known_hosts file pinning every host's key (docs/libvirt-provider.md)" >&2; exit 2; }
	@$(KUBECTL) -n "$(KVM_SSH_NAMESPACE)" create secret generic kvm-ssh \
		--type=kubernetes.io/ssh-auth \
		--from-file=ssh-privatekey="$(KVM_SSH_KEY)" \
		--from-file=known_hosts="$(KVM_KNOWN_HOSTS)" \
		--dry-run=client -o yaml \
	| $(KUBECTL) apply --server-side --field-manager=make-kvm-ssh-secret -f -

.PHONY: build-installer
build-installer: manifests $(KUSTOMIZE) ## Render config/default into dist/install.yaml.
	mkdir -p dist
	$(KUSTOMIZE) build config/default > dist/install.yaml

##@ Tools

$(LOCALBIN):
	mkdir -p $(LOCALBIN)

$(CONTROLLER_GEN): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) $(GO) install sigs.k8s.io/controller-tools/cmd/controller-gen@$(CONTROLLER_TOOLS_VERSION)
	mv $(LOCALBIN)/controller-gen $@

$(KUSTOMIZE): | $(LOCALBIN)
	GOBIN=$(LOCALBIN) $(GO) install sigs.k8s.io/kustomize/kustomize/v5@$(KUSTOMIZE_VERSION)
	mv $(LOCALBIN)/kustomize $@

.PHONY: docker-build
docker-build: ## Build the manager image with a container engine (the project's own path is `make image`).
	docker build -t $(IMG) .

.PHONY: test-idle-fleet
test-idle-fleet: envtest-assets ## Count the API writes of an idle fleet (IDLE_FLEET_WINDOW=10m IDLE_FLEET_DEFAULTS=1 for the real figure).
	KUBEBUILDER_ASSETS="$(ENVTEST_ASSETS)" $(GO) test ./internal/operator -run TestIdleFleetWrites -v -count=1 -timeout 40m
