#!/usr/bin/env bash
# Build the tiny offline test model (random-weight Llama, byte-level BPE tokenizer, about 1.4 MB) once per
# recipe into the shared cache (lab/cache.sh); the clone's .cache/models/tiny-llama links to it. Its builder
# runs in a small venv (.cache/model-venv), installed with no index from the lab wheelhouse (make wheelhouse):
# no network, no torch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$(dirname "$here")")
# shellcheck source=lab/cache.sh
. "$repo/lab/cache.sh"
cache_dir=$(llmops_cache_dir)
wheels=$repo/.cache/wheelhouse/lab
packages=(tokenizers safetensors numpy)
dest=$cache_dir/models/tiny-llama-$(recipe_key "$here/build.sh" "$here/build_tiny_model.py")

for package in "${packages[@]}"; do
  if ! compgen -G "$wheels/$package-*.whl" >/dev/null; then
    echo "model: no $package wheel in $wheels; run make wheelhouse" >&2
    exit 1
  fi
done
# The venv is keyed on this script and the wheels it installs.
venv_key=$({
  cat "$here/build.sh"
  cd "$wheels" && for package in "${packages[@]}"; do compgen -G "$package-*.whl"; done
} | sha256sum | cut -c1-12)
venv=$cache_dir/model-venv-$venv_key

mkdir -p "$cache_dir/models"
take_lock model  # one build at a time; a concurrent one may have finished while this one waited

if [[ ! -f $venv/.complete ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$wheels" \
    "${packages[@]}"
  touch "$venv/.complete"
  prune_entries "$cache_dir" 'model-venv-*' 2
fi

if [[ ! -f $dest/.recipe ]]; then
  echo "model: building $dest (about 10 s)" >&2
  tmp=$(mktemp -d "$dest.tmp.XXXXXX")
  trap 'rm -rf "$tmp"' EXIT
  "$venv/bin/python" "$here/build_tiny_model.py" "$tmp"
  basename "$dest" >"$tmp/.recipe"
  # mktemp makes the folder 0700 and safetensors writes 0600: a service user must be able to read the model.
  chmod -R u=rwX,go=rX "$tmp"
  rm -rf "$dest" && mv "$tmp" "$dest"
  prune_entries "$cache_dir/models" 'tiny-llama-*' 2
fi

link_clone .cache/models/tiny-llama "$dest"
link_clone .cache/model-venv "$venv"
