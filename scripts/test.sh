#!/usr/bin/env bash
# Every test gate, in order from cheapest to dearest. Each runs even if an earlier one failed;
# the last line says how many passed and failed.
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

passed=() failed=()
start=$SECONDS
for gate in "${gates[@]}"; do
  echo "=== $gate"
  t0=$SECONDS
  if run_gate "$gate"; then
    passed+=("$gate")
    echo "=== $gate: passed in $((SECONDS - t0)) s"
  else
    failed+=("$gate")
    echo "=== $gate: FAILED in $((SECONDS - t0)) s"
  fi
done

echo
echo "passed gates: ${passed[*]:-none}"
echo "failed gates: ${failed[*]:-none}"
echo "time: $((SECONDS - start)) s"
echo "make test: ${#passed[@]} passed, ${#failed[@]} failed"
((${#failed[@]} == 0))
