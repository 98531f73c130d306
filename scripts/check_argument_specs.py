"""Check that every role's meta/argument_specs.yml matches its defaults/main.yml.

For each role: the same variable names on both sides (all entry points together), equal default values, a type and a
description for every option, and the `<role>_` prefix on every public variable but the fleet-level ones. Across
roles: a fleet-level variable that several roles read has one default and one type in all of them.
Exits non-zero and names each mismatch.
"""

import pathlib
import sys

import yaml

ROLES = pathlib.Path(__file__).resolve().parent.parent / "roles"
# Fleet-level variables: set once in the inventory, read by a role and by playbooks (facts.yml draws them).
FLEET_VARIABLES = {"vllm_instances", "vllm_reserved_cpus", "vllm_service_vips", "vllm_service_names",
                   "vllm_cuda_version", "llmops_tools_venv", "llmops_facts_dir",
                   "llmops_textfile_dir", "llmops_dcgm_exporter_port",
                   "llmops_node_exporter_port"}


def load(path):
    with path.open() as stream:
        return yaml.safe_load(stream) or {}


def check_role(role):
    errors = []
    name = role.name
    specs = load(role / "meta" / "argument_specs.yml").get("argument_specs", {})
    defaults_file = role / "defaults" / "main.yml"
    defaults = load(defaults_file) if defaults_file.exists() else {}
    if "main" not in specs:
        errors.append("%s: meta/argument_specs.yml has no 'main' entry point" % name)
    # Every entry point's options; one variable must mean the same in each.
    options = {}
    for entry, spec in sorted(specs.items()):
        for var, option in ((spec or {}).get("options") or {}).items():
            if var in options and options[var] != option:
                errors.append("%s: %s differs between entry points (%s)" % (name, var, entry))
            options.setdefault(var, option)

    for var in sorted(set(defaults) - set(options)):
        errors.append("%s: %s is in defaults/main.yml but not in meta/argument_specs.yml" % (name, var))
    for var in sorted(set(options) - set(defaults)):
        if options[var].get("required"):
            continue
        errors.append("%s: %s is in meta/argument_specs.yml but not in defaults/main.yml" % (name, var))
    for var, spec in sorted(options.items()):
        if not var.startswith(name + "_") and var not in FLEET_VARIABLES:
            errors.append("%s: public variable %s lacks the prefix %s_" % (name, var, name))
        for key in ("type", "description"):
            if key not in spec:
                errors.append("%s: %s has no %s in meta/argument_specs.yml" % (name, var, key))
        if var in defaults and not spec.get("required") and spec.get("default") != defaults[var]:
            errors.append(
                "%s: default of %s differs: argument_specs says %r, defaults/main.yml says %r"
                % (name, var, spec.get("default"), defaults[var])
            )
    return errors


def check_fleet_variables(roles):
    """A fleet-level variable read by several roles: the same default and type in each (the inventory sets it once)."""
    seen = {}
    for role in roles:
        defaults_file = role / "defaults" / "main.yml"
        defaults = load(defaults_file) if defaults_file.exists() else {}
        for spec in load(role / "meta" / "argument_specs.yml").get("argument_specs", {}).values():
            for var, option in ((spec or {}).get("options") or {}).items():
                if var in FLEET_VARIABLES:
                    seen.setdefault(var, {})[role.name] = (defaults.get(var), option.get("type"))
    errors = []
    for var, by_role in sorted(seen.items()):
        if len(set(map(repr, by_role.values()))) > 1:
            found = ", ".join("%s %r (%s)" % (name, default, kind) for name, (default, kind) in sorted(by_role.items()))
            errors.append("fleet variable %s has different defaults or types: %s" % (var, found))
    return errors


def main():
    roles = sorted(p for p in ROLES.iterdir() if (p / "meta" / "argument_specs.yml").exists())
    missing = sorted(p.name for p in ROLES.iterdir() if p.is_dir() and p not in roles)
    errors = ["%s: no meta/argument_specs.yml" % name for name in missing]
    for role in roles:
        errors.extend(check_role(role))
    errors.extend(check_fleet_variables(roles))
    for error in errors:
        print(error)
    print("argument specs: %d roles checked, %d problems" % (len(roles) + len(missing), len(errors)))
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
