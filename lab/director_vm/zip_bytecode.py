"""The lab's director VMs only: keep the bytecode of what Python imports from zip files, Ansible's module payloads.

Python compiles a module it imports from a zip file at every import (3.11 even twice: for its file name, then for
its code) and never keeps the result, so each Ansible task on a director compiled ansible.module_utils again. Under
QEMU's software emulation a play of director tasks took 0.78 of its time with this cache (bench/director_bench.py).
build.sh installs this file and a .pth line that calls install() at every start of the VM's python3 (not under -S
or -I, as the breaker runs). The cache is keyed on Python's version, the file's path inside the zip and its source;
a code object read back gets the current zip's path for its tracebacks. LLMOPS_LAB_ZIP_BYTECODE=0 turns it off for
one process (the benchmark's other arm).
"""

import _thread
import os
import sys
import zipimport

CACHE = "/var/cache/llmops-lab/zip-bytecode"
compiled = 0
_compile_source = zipimport._compile_source


def _with_filename(code, filename):
    consts = tuple(_with_filename(const, filename) if isinstance(const, type(code)) else const
                   for const in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def compile_source(pathname, source):
    """zipimport's _compile_source, through the cache."""
    global compiled
    import hashlib
    import marshal

    inner = pathname.rpartition(".zip")[2]
    key = hashlib.sha256(b"\0".join((sys.version.encode(), inner.encode(), source))).hexdigest()
    path = os.path.join(CACHE, key)
    try:
        with open(path, "rb") as cached:
            return _with_filename(marshal.load(cached), pathname)
    except (OSError, EOFError, ValueError, TypeError):
        pass
    code = _compile_source(pathname, source)
    compiled += 1
    try:
        os.makedirs(CACHE, mode=0o700, exist_ok=True)
        partial = "%s.%d.%d" % (path, os.getpid(), _thread.get_ident())  # threads of a process import too
        with open(partial, "wb") as out:
            marshal.dump(code, out)
        os.replace(partial, path)
    except OSError:
        pass
    return code


def install():
    if os.environ.get("LLMOPS_LAB_ZIP_BYTECODE", "1") != "0":
        zipimport._compile_source = compile_source
