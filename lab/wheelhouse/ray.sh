#!/usr/bin/env bash
# Download Ray's wheelhouse (Ray 2.60.0 and its dependencies, about 80 MB; molecule/multinode's ray_cluster role
# installs from it, as an air-gapped site would) once per recipe into the shared cache (lab/cache.sh); the clone's
# .cache/wheelhouse/ray links to it. A recipe of its own: a change here does not rebuild vLLM's wheelhouse.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$(dirname "$here")")
# shellcheck source=lab/cache.sh
. "$repo/lab/cache.sh"
cache_dir=$(llmops_cache_dir)
key=$(recipe_key "$here/ray.sh" "$here/ray.txt")
dest=$cache_dir/wheelhouse/ray-$key

mkdir -p "$(dirname "$dest")"
take_lock wheelhouse-ray
if [[ ! -f $dest/.complete ]]; then
  echo "wheelhouse: downloading Ray into $dest (80 MB)" >&2
  rm -rf "$dest.tmp" && mkdir -p "$dest.tmp"
  "$repo/.venv/bin/pip" download --quiet --disable-pip-version-check --dest "$dest.tmp" \
    -r "$here/ray.txt" 2> >(grep -v "^WARNING: Location" >&2)
  touch "$dest.tmp/.complete"
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
  prune_entries "$(dirname "$dest")" 'ray-*' 2
fi
link_clone .cache/wheelhouse/ray "$dest"
