#!/usr/bin/env bash
# Every test gate, in order from cheapest to dearest. Each runs even if an earlier one failed;
# each gate's output is kept in .cache/test-logs/, and the end of the output repeats what failed,
# so that a short tail of a CI log still tells why. The last line says how many passed and failed.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
export PATH=$PWD/.venv/bin:$PATH

gates=("$@")
((${#gates[@]})) || gates=(yamllint ruff ansible-lint argument-specs sanity unit aarch64 integration molecule)

run_gate() {
  case $1 in
    yamllint) yamllint --strict . ;;
    ruff) ruff check . ;;
    ansible-lint) ansible-lint --offline ;;
    argument-specs) python scripts/check_argument_specs.py ;;
    sanity) scripts/sanity.sh ;;
    unit) pytest -q tests/unit ;;
    integration) pytest -q -p no:cacheprovider tests/integration ;;
    aarch64) pytest -q -p no:cacheprovider tests/aarch64 ;;
    molecule) molecule test --all ;;
    *) echo "unknown gate $1" >&2; return 2 ;;
  esac
}

# The lines of a gate's log that say what failed: pytest's and Ansible's failure lines, without colour
# or molecule's frame.
failure_digest() {
  sed -e 's/\x1b\[[0-9;]*m//g' -e 's/^ *│ \{0,1\}//' "$1" |
    grep -E '^(FAILED|ERROR)[: ]|^E  |fatal: \[|FAILED! =>|Executed: Failed|^[a-z_/]+\.py:[0-9]+: |^ *--> ' |
    grep -v 'RETRYING' | tail -n 14 | cut -c 1-220
}

logs=.cache/test-logs
mkdir -p "$logs"
passed=() failed=()
start=$SECONDS
for gate in "${gates[@]}"; do
  echo "=== $gate"
  t0=$SECONDS
  if run_gate "$gate" 2>&1 | tee "$logs/$gate.log"; then
    passed+=("$gate")
    echo "=== $gate: passed in $((SECONDS - t0)) s"
  else
    failed+=("$gate")
    echo "=== $gate: FAILED in $((SECONDS - t0)) s"
  fi
done

for gate in "${failed[@]}"; do
  echo
  echo "=== what failed in $gate (whole log: $logs/$gate.log)"
  failure_digest "$logs/$gate.log"
  df -h --output=avail,pcent / | tail -n 1 | awk '{print "disk: " $1 " free (" $2 " used)"}'
done
echo
echo "passed gates: ${passed[*]:-none}"
echo "failed gates: ${failed[*]:-none}"
echo "time: $((SECONDS - start)) s"
echo "make test: ${#passed[@]} passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
