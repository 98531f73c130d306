#!/usr/bin/env bash
# ansible-test sanity, offline: the collection is copied under ansible_collections/llmops/vllm,
# and ansible-test's pip bootstrap script is replaced by one that uses ensurepip.
set -euo pipefail
repo=$(cd "$(dirname "$0")/.." && pwd)
work=${SANITY_WORKDIR:-$repo/.cache/sanity}
dest=$work/ansible_collections/llmops/vllm

cache=$HOME/.ansible/test/cache
mkdir -p "$cache"
grep -ho "pip='[0-9.]*'" "$repo"/.venv/lib/python3*/site-packages/ansible_test/_internal/python_requirements.py |
  cut -d"'" -f2 | while read -r version; do
  cp "$repo/scripts/get_pip_offline.py" "$cache/get_pip_${version//./_}.py"
done

rm -rf "$dest" && mkdir -p "$dest"
# Tracked files plus new ones that git does not ignore: what a commit would hold.
(cd "$repo" && git ls-files -z --cached --others --exclude-standard -- . ":!collections" | xargs -0 -r -I{} sh -c 'test -e "{}" && printf "%s\0" "{}"' | tar --null -T - -cf -) | tar -C "$dest" -xf -
cd "$dest"
git init -q && git add -A >/dev/null
exec "$repo/.venv/bin/ansible-test" sanity --venv --python "$("$repo/.venv/bin/python" -c 'import sys; print("%d.%d" % sys.version_info[:2])')" "$@"
