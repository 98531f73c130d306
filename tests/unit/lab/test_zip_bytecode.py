"""lab/director_vm/zip_bytecode.py: what a director VM imports from a zip file is compiled once, then read back."""

import os
import subprocess
import sys
import zipfile

HOOK = os.path.join(os.path.dirname(__file__), "..", "..", "..", "lab", "director_vm")
IMPORT = """
import sys
sys.path.insert(0, %r)
import zip_bytecode
zip_bytecode.CACHE = %r
zip_bytecode.install()
sys.path.insert(0, %r)
from pkg import mod
try:
    mod.fail()
except ZeroDivisionError as e:
    tb = e.__traceback__
    while tb.tb_next:
        tb = tb.tb_next
    where = tb.tb_frame.f_code.co_filename
print(mod.ANSWER, zip_bytecode.compiled, mod.fail.__code__.co_filename == where == mod.__file__, where)
"""


def payload(path, answer):
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("pkg/__init__.py", "")
        archive.writestr("pkg/mod.py", "ANSWER = %d\n\ndef fail():\n    return 1 / 0\n" % answer)
    return str(path)


def run(tmp_path, archive, env=None):
    code = IMPORT % (HOOK, str(tmp_path / "cache"), archive)
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                            env=dict(os.environ, **(env or {})))
    answer, compiled, same_file, where = result.stdout.split()
    return int(answer), int(compiled), same_file == "True", where


def test_a_second_payload_with_the_same_source_reads_the_bytecode_back_under_its_own_path(tmp_path):
    first = payload(tmp_path / "ansible_a_payload.zip", 42)
    second = payload(tmp_path / "ansible_b_payload.zip", 42)

    # Each module once (Python 3.11's zipimport asks twice).
    assert run(tmp_path, first) == (42, 2, True, os.path.join(first, "pkg", "mod.py"))
    # Then none: both come from the cache, and a traceback names the zip it ran from.
    assert run(tmp_path, second) == (42, 0, True, os.path.join(second, "pkg", "mod.py"))
    # One finished entry per module (a key, no partial file's suffix).
    assert [name for name in os.listdir(tmp_path / "cache") if "." not in name] == os.listdir(tmp_path / "cache")
    assert len(os.listdir(tmp_path / "cache")) == 2


def test_a_changed_source_is_compiled_again(tmp_path):
    run(tmp_path, payload(tmp_path / "ansible_a_payload.zip", 1))

    answer, compiled, _same, _where = run(tmp_path, payload(tmp_path / "ansible_b_payload.zip", 2))

    assert (answer, compiled) == (2, 1)  # mod, not the unchanged __init__


def test_it_can_be_turned_off_for_a_process(tmp_path):
    archive = payload(tmp_path / "ansible_a_payload.zip", 7)
    run(tmp_path, archive)

    # Python's own compile only: the counter never moves.
    assert run(tmp_path, archive, {"LLMOPS_LAB_ZIP_BYTECODE": "0"})[:2] == (7, 0)


def test_an_unwritable_cache_only_costs_the_compile(tmp_path):
    (tmp_path / "cache").write_text("not a directory")

    assert run(tmp_path, payload(tmp_path / "ansible_a_payload.zip", 3))[:2] == (3, 4)
