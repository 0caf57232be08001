"""The `s3flash` command of a pip-installed package: runs the CLI binary that the package
carries (s3flash/bin/s3flash, built with -Dpython_cli=true), with the same arguments,
environment and exit status (the process is replaced, so signals reach the CLI itself)."""

import os
import sys


def main() -> None:
    exe = os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "s3flash")
    if not os.access(exe, os.X_OK):
        sys.exit(f"s3flash: no CLI in this install ({exe} is missing): build the package with "
                 "-Dpython_cli=true, or the CLI with meson (README)")
    os.execv(exe, ["s3flash"] + sys.argv[1:])


if __name__ == "__main__":
    main()
