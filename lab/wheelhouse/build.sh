#!/usr/bin/env bash
# Download the lab's wheelhouse (vLLM CPU, its dependencies and vLLM's build requirements, about 950 MB) and
# vLLM's release source, once per recipe, into the shared cache (lab/cache.sh); the clone's
# .cache/wheelhouse/lab and .cache/sources link to them. The same path an air-gapped site takes.
# torch's +cpu build is not on PyPI: it comes from a configured find-links folder that has it,
# else from PyTorch's CPU wheel index.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$(dirname "$here")")
# shellcheck source=lab/cache.sh
. "$repo/lab/cache.sh"
cache_dir=$(llmops_cache_dir)
key=$(recipe_key "$here/build.sh" "$here/requirements.txt")
dest=$cache_dir/wheelhouse/lab-$key
sources=$cache_dir/sources
# The release source of the pinned vLLM, from PyPI (no git host is reachable), checked by its sha256.
sdist=vllm-0.32.0.tar.gz
sdist_sha256=d2c957d5eee3d0985012151315ddc62cbe0cd368fc96a5fc3510438d9dddf2ad
sdist_url=https://files.pythonhosted.org/packages/d5/df/5471312c76e335eaa2b8333e87ea39f0d37bfe24f10a582620e34ff12e33/$sdist

mkdir -p "$sources" "$(dirname "$dest")"
take_lock wheelhouse  # one download at a time; a concurrent clone waits, then finds it done

if [[ ! -f $sources/$sdist ]] || ! echo "$sdist_sha256  $sources/$sdist" | sha256sum --check --status; then
  echo "wheelhouse: downloading $sdist into $sources" >&2
  curl --fail --silent --show-error --location --output "$sources/$sdist.tmp" "$sdist_url"
  echo "$sdist_sha256  $sources/$sdist.tmp" | sha256sum --check --status
  mv "$sources/$sdist.tmp" "$sources/$sdist"
fi

if [[ ! -f $dest/.complete ]]; then
  args=()
  if ! compgen -G "${PIP_FIND_LINKS:-/nonexistent}/torch-*+cpu-*.whl" >/dev/null; then
    args+=(--extra-index-url https://download.pytorch.org/whl/cpu)
  fi
  echo "wheelhouse: downloading into $dest (about a minute)" >&2
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  "$repo/.venv/bin/pip" download --quiet --disable-pip-version-check --dest "$dest.tmp" \
    -r "$here/requirements.txt" "${args[@]}" 2> >(grep -v "^WARNING: Location" >&2)
  touch "$dest.tmp/.complete"
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
  # Wheelhouses of older recipes: the newest two are kept for clones of other commits.
  prune_entries "$(dirname "$dest")" 'lab-*' 2
fi

link_clone .cache/wheelhouse/lab "$dest"
link_clone .cache/sources "$sources"
