#!/usr/bin/env bash
# Build the tiny offline test model (random-weight Llama, byte-level BPE tokenizer, about 1.4 MB) into
# .cache/models/tiny-llama, once per recipe. Its builder runs in a small venv, .cache/model-venv, installed
# with no index from the lab wheelhouse (make wheelhouse): no network, no torch.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$(dirname "$here")")
dest=$repo/.cache/models/tiny-llama
venv=$repo/.cache/model-venv
wheels=$repo/.cache/wheelhouse/lab
packages=(tokenizers safetensors numpy)
recipe=$(cat "$here/build.sh" "$here/build_tiny_model.py" | sha256sum | cut -d' ' -f1)

if [[ -f $dest/.recipe && $(cat "$dest/.recipe") == "$recipe" ]]; then
  exit 0
fi

for package in "${packages[@]}"; do
  if ! compgen -G "$wheels/$package-*.whl" >/dev/null; then
    echo "model: no $package wheel in $wheels; run make wheelhouse" >&2
    exit 1
  fi
done

# One build at a time; a concurrent one may have finished while this one waited.
mkdir -p "$(dirname "$dest")"
exec 9>"$dest.lock"
flock 9
if [[ -f $dest/.recipe && $(cat "$dest/.recipe") == "$recipe" ]]; then
  exit 0
fi

echo "model: building $dest (about 10 s)" >&2
# The venv is remade when this script or the wheels it installs change.
venv_recipe=$(
  cat "$here/build.sh"
  cd "$wheels" && for package in "${packages[@]}"; do compgen -G "$package-*.whl"; done
)
venv_recipe=$(sha256sum <<<"$venv_recipe" | cut -d' ' -f1)
if [[ ! -f $venv/.recipe || $(cat "$venv/.recipe") != "$venv_recipe" ]]; then
  rm -rf "$venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-index --find-links "$wheels" \
    "${packages[@]}"
  echo "$venv_recipe" >"$venv/.recipe"
fi

tmp=$(mktemp -d "$dest.tmp.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
"$venv/bin/python" "$here/build_tiny_model.py" "$tmp"
echo "$recipe" >"$tmp/.recipe"
# mktemp makes the folder 0700 and safetensors writes 0600: a service user must be able to read the model.
chmod -R u=rwX,go=rX "$tmp"
rm -rf "$dest" && mv "$tmp" "$dest"
