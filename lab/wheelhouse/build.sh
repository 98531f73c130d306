#!/usr/bin/env bash
# Download the lab's wheelhouse (vLLM CPU and its dependencies, about 900 MB) into
# .cache/wheelhouse/lab, once per recipe: the same path an air-gapped site takes.
# torch's +cpu build is not on PyPI: it comes from a configured find-links folder that has it,
# else from PyTorch's CPU wheel index.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$(dirname "$here")")
dest=$repo/.cache/wheelhouse/lab
recipe=$(cat "$here/build.sh" "$here/requirements.txt" | sha256sum | cut -d' ' -f1)

if [[ -f $dest/.recipe && $(cat "$dest/.recipe") == "$recipe" ]]; then
  exit 0
fi

args=()
if ! compgen -G "${PIP_FIND_LINKS:-/nonexistent}/torch-*+cpu-*.whl" >/dev/null; then
  args+=(--extra-index-url https://download.pytorch.org/whl/cpu)
fi
echo "wheelhouse: downloading into $dest (about a minute)" >&2
rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
"$repo/.venv/bin/pip" download --quiet --disable-pip-version-check --dest "$dest.tmp" \
  -r "$here/requirements.txt" "${args[@]}" 2> >(grep -v "^WARNING: Location" >&2)
rm -rf "$dest" && mv "$dest.tmp" "$dest"
echo "$recipe" >"$dest/.recipe"
