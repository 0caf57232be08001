"""fsspec's ``s3://`` served by s3flash when nothing else can serve it.

fsspec maps ``s3`` to s3fs (``known_implementations``); without s3fs installed,
``fsspec.filesystem("s3")`` raises ImportError, and so does Lightning's
``ModelCheckpoint(dirpath="s3://...")``. ``provide_s3()`` registers
``s3flash.fsspec.S3FlashFileSystem`` for ``s3`` and ``s3a`` then, and only then: a class
already registered for the protocol (s3fs imported, ``fsspec.register_implementation``, a
plugin) or an importable implementation named in ``known_implementations`` (s3fs installed)
is left in place. ``s3flash.fsspec.register()`` takes the protocols over explicitly.

Called when ``s3flash.lightning`` is imported (for a source tree, or an installation whose
entry points fsspec does not see). An installed s3flash also declares the ``fsspec.specs``
entry points ``s3`` and ``s3a`` -> ``s3flash._fsspec_s3.S3FileSystem``, which resolves to s3fs
when it is importable and to s3flash otherwise, without any import of s3flash by the user.
Registration is lazy (a class path, as fsspec's own table): nothing is imported until fsspec
builds a filesystem.
"""

from __future__ import annotations

import importlib.util
from typing import Tuple

OUR_CLASS = "s3flash.fsspec.S3FlashFileSystem"
PROTOCOLS = ("s3", "s3a")


def _importable(class_path: str) -> bool:
    """Whether the top-level module of "pkg.mod.Class" (or "pkg.mod:Class") can be found."""
    module = class_path.split(":", 1)[0].split(".", 1)[0]
    if not module:
        return False
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a finder refused it, or a broken package
        return False


def provide_s3(protocols: Tuple[str, ...] = PROTOCOLS) -> Tuple[str, ...]:
    """Register s3flash for each protocol that nothing else serves; returns those taken."""
    try:
        import fsspec
        from fsspec.registry import known_implementations, registry
    except ImportError:  # no fsspec: nobody asks for s3:// through it
        return ()
    taken = []
    for p in protocols:
        if p in registry:
            continue  # a class is registered already (s3fs in use, or the user's)
        spec = known_implementations.get(p)
        cls = spec.get("class", "") if spec else ""
        if cls.startswith("s3flash."):
            continue  # ours already
        if cls and _importable(cls):
            continue  # s3fs (or another implementation) is installed: never displaced
        fsspec.register_implementation(
            p, OUR_CLASS, clobber=True,
            errtxt=f"s3flash's fsspec filesystem ({OUR_CLASS}) failed to import")
        taken.append(p)
    return tuple(taken)
