# Two commands do everything on a fresh Debian 12 / Ubuntu 24.04 host as root:
#   make lab    bring up the local lab and deploy the fleet into it
#   make test   run every test gate
SHELL := /bin/bash
.DEFAULT_GOAL := help

export CONTAINERS_CONF := $(CURDIR)/lab/containers.conf
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
export PATH := $(CURDIR)/.venv/bin:$(PATH)

.PHONY: help bootstrap image wheelhouse model lab lab-down test lint sanity unit molecule

help: ## List the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-10s %s\n", $$1, $$2}'

bootstrap: ## Install system packages and the pinned .venv when missing
	@scripts/bootstrap.sh

image: bootstrap ## Build the lab base image when its recipe changed
	@lab/image/build.sh >/dev/null

wheelhouse: bootstrap ## Download the lab's vLLM CPU wheels when their recipe changed
	@lab/wheelhouse/build.sh

model: wheelhouse ## Build the tiny offline test model
	@lab/model/build.sh

lab: image wheelhouse model ## Bring up the lab and deploy site.yml into it
	python lab/lab.py up
	ansible-playbook site.yml -i inventories/lab
	@python lab/lab.py summary

lab-down: bootstrap ## Remove the lab's containers and network
	python lab/lab.py down

test: image wheelhouse model ## Run every test gate (lint, sanity, unit, molecule)
	@scripts/test.sh

lint: bootstrap ## Only the lint gates
	@scripts/test.sh yamllint ruff ansible-lint argument-specs

sanity: bootstrap ## Only ansible-test sanity
	@scripts/test.sh sanity

unit: bootstrap ## Only the unit tests
	@scripts/test.sh unit

molecule: image wheelhouse model ## Only the molecule scenarios
	@scripts/test.sh molecule
