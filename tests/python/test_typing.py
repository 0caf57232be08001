"""Type checkers see s3flash's real classes (issue 14 §1): mypy on a snippet that uses
S3MapDataset, S3IterableDataset and S3ClientConfig reveals the classes (not Any) and reports
the deliberate type errors in it. torch is not analysed (follow_imports=skip: its classes are
Any to mypy here), so the check takes seconds; errors inside s3flash itself are not the
subject and are ignored (only the snippet's lines are read)."""

import os
import re
import subprocess
import sys
import textwrap

import pytest

import s3flash

pytest.importorskip("mypy")

SNIPPET = textwrap.dedent("""
    from s3flash import S3ClientConfig, S3IterableDataset, S3MapDataset, S3Reader

    def size(r: S3Reader) -> int:
        return len(r.read())

    ds = S3MapDataset.from_prefix("s3://bucket/prefix", region="us-east-1", transform=size)
    reveal_type(ds)
    it = S3IterableDataset.from_objects(["s3://bucket/a"], enable_sharding=True)
    reveal_type(it)
    bad = S3IterableDataset.from_prefix(123)
    cfg = S3ClientConfig(requester_pays="yes")
    n: str = ds.from_objects
""")


def test_mypy_sees_the_real_classes(tmp_path):
    src = tmp_path / "snippet.py"
    src.write_text(SNIPPET)
    (tmp_path / "mypy.ini").write_text(textwrap.dedent("""
        [mypy]
        ignore_missing_imports = True
        [mypy-torch.*]
        follow_imports = skip
        [mypy-fsspec.*]
        follow_imports = skip
        [mypy-lightning.*,pytorch_lightning.*]
        follow_imports = skip
    """))
    env = dict(os.environ)
    # the package under test wherever it is imported from: an installed one mypy finds by
    # itself (PEP 561, py.typed; mypy refuses a site-packages in MYPYPATH), the dev stage
    # (tests/python/devenv.sh) through MYPYPATH
    where = os.path.dirname(os.path.dirname(os.path.abspath(s3flash.__file__)))
    if os.path.basename(where) not in ("site-packages", "dist-packages"):
        env["MYPYPATH"] = where
    p = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(tmp_path / "mypy.ini"),
                        "--cache-dir", str(tmp_path / "cache"), "--no-error-summary",
                        "--show-error-codes", str(src)],
                       capture_output=True, text=True, env=env, timeout=600)
    mine = [ln for ln in p.stdout.splitlines() if ln.startswith(str(src))]
    text = "\n".join(mine)
    assert re.search(r':8: note: Revealed type is "s3flash\._dataset\.S3MapDataset"', text), \
        p.stdout + p.stderr
    assert re.search(r':10: note: Revealed type is "s3flash\._dataset\.S3IterableDataset"',
                     text), text
    # the deliberate errors are reported: the classes are not Any
    assert re.search(r':11: error: Argument 1 to "from_prefix" of "S3IterableDataset" has '
                     r'incompatible type "int"; expected "str"', text), text
    assert re.search(r':12: error: Argument "requester_pays" to "S3ClientConfig" has '
                     r'incompatible type "str"; expected "bool"', text), text
    assert re.search(r':13: error: Incompatible types in assignment', text), text
    # and nothing else in the snippet is an error
    assert len([ln for ln in mine if ": error:" in ln]) == 3, text
