# Sourced by the lab's build scripts. Built artifacts (wheelhouse, model, arm64 tree, sources) live outside
# the clone, in the user's cache directory, one entry per recipe key, and are shared by every clone of this
# machine; a clone's .cache/ holds links to the entries its recipes ask for. `make clean-cache` removes them.
# shellcheck shell=bash

llmops_clone=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

# llmops_cache_dir: the shared cache's directory.
llmops_cache_dir() {
  echo "${LLMOPS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/llmops.vllm}"
}

# recipe_key FILE...: 12 hex digits of the sha256 of the files' contents.
recipe_key() {
  cat "$@" | sha256sum | cut -c1-12
}

# take_lock NAME: hold the cache's lock NAME until the script exits (fd 9).
take_lock() {
  mkdir -p "$(llmops_cache_dir)/locks"
  exec 9>"$(llmops_cache_dir)/locks/$1"
  flock 9
}

# link_clone PATH TARGET: the clone's PATH points at TARGET (a real directory of an older layout is removed).
link_clone() {
  local link=$llmops_clone/$1
  mkdir -p "$(dirname "$link")"
  if [[ -d $link && ! -L $link ]]; then
    rm -rf "$link"
  fi
  ln -sfn "$2" "$link"
  touch "$2"
}

# prune_entries DIR GLOB KEEP: remove all but the KEEP most recently used entries of DIR matching GLOB.
prune_entries() {
  local dir=$1 glob=$2 keep=$3
  find "$dir" -mindepth 1 -maxdepth 1 -name "$glob" -printf '%T@ %p\n' 2>/dev/null |
    sort -rn | tail -n +"$((keep + 1))" | cut -d' ' -f2- | xargs -r rm -rf
}
