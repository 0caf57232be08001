#!/usr/bin/env python3
"""The layering of docs/ARCHITECTURE.md ("Who may call whom"), checked on the sources: each
folder under src/ includes only the headers of the folders it may call, the libraries it may
use, names no function of a layer above it, and makes no unbounded string copy (strcpy,
stpcpy, strcat, sprintf, vsprintf, gets). A meson unit test (`meson test --suite
unit`, so tests/run.sh runs it); run it by hand with `python3 tests/layering.py [SRC_DIR]`.

Exits 1 naming every forbidden edge (file:line, the include or the call, the rule).
"""
import os
import re
import sys

# folder -> the src/ folders whose headers it may include (its own always)
MAY_INCLUDE = {
    "core": set(),
    "auth": {"core", "http"},          # of http/ only the CURLcode map (checked below)
    "http": {"core"},
    "s3": {"core", "auth", "http"},
    "xfer": {"core", "s3", "cache"},
    "cache": {"core"},
    "format": {"core"},                # file formats read from objects (safetensors)
    "cli": {"mount"},                  # `s3flash mount` hands its options to the daemon
    "python": set(),
    "mount": set(),
}
# library headers (the part before the first '/' or '.h') -> the folders that may use them
LIBRARIES = {
    "curl": {"http", "auth", "s3"},
    "expat": {"s3", "auth"},
    "openssl": {"core", "auth"},
    "isa-l": {"core"},
    "Python": {"python"},
    "pythread": {"python"},
    "fuse3": {"mount"},
}
FRONT_ENDS = {"cli", "python", "mount"}
# a function definition at the start of a line: `type name(` (for the xfer/ functions)
DEFINITION = re.compile(r"^[a-z][\w \*]*?\b(s3f_\w+)\(", re.M)
# what only http/, auth/ and s3/ may name: libcurl's identifiers
CURL_NAME = re.compile(r"\b(curl_\w+|CURL\w*)\b")
# of http/, auth/ may use only the CURLcode map; xfer/ only the count of data connections
HTTP_ALLOWED = {"auth": {"s3f__http_status_of_curl"},
                "xfer": {"s3f__http_pool_data_connections", "s3f__http_read_fn"}}

# copies that trust the source to fit: not anywhere in src/ (issue 28, N12)
UNBOUNDED_COPY = re.compile(r"\b(strcpy|stpcpy|strcat|sprintf|vsprintf|gets)\s*\(")

# a timed wait's deadline is on the clock its condition variable waits on: every condition
# variable with a timed wait is made monotonic (s3f__cond_init_monotonic, mnt_cond_init), so
# every deadline comes from s3f__deadline_ms or mnt_deadline (issue 28, R8: a CLOCK_REALTIME
# deadline on a monotonic condition variable never times out)
TIMEDWAIT = re.compile(r"\bpthread_cond_timedwait\s*\([^;]*?,\s*&\s*(\w+)\s*\)")
DEADLINE_OF = r"\b{}\s*=\s*(s3f__deadline_ms|mnt_deadline)\s*\("

INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')


def strip_comments(text):
    text = re.sub(r"/\*.*?\*/", lambda m: re.sub(r"[^\n]", " ", m.group(0)), text, flags=re.S)
    text = re.sub(r"//[^\n]*", "", text)
    return re.sub(r'"(\\.|[^"\\\n])*"', '""', text)


def xfer_public(src):
    """The public functions the transfer engine defines (src/xfer/*.c)."""
    names = set()
    xdir = os.path.join(src, "xfer")
    for name in os.listdir(xdir):
        if name.endswith(".c"):
            with open(os.path.join(xdir, name), encoding="utf-8", errors="replace") as f:
                names.update(DEFINITION.findall(f.read()))
    return names


def check(src):
    problems = []
    above = xfer_public(src)
    for folder in sorted(os.listdir(src)):
        fdir = os.path.join(src, folder)
        if not os.path.isdir(fdir):
            continue
        if folder not in MAY_INCLUDE:
            problems.append(f"src/{folder}/: a folder docs/ARCHITECTURE.md does not place "
                            f"(add it to the table and to tests/layering.py)")
            continue
        for name in sorted(os.listdir(fdir)):
            if not name.endswith((".c", ".h")):
                continue
            path = os.path.join(fdir, name)
            rel = f"src/{folder}/{name}"
            with open(path, encoding="utf-8", errors="replace") as f:
                raw = f.read()
            for n, line in enumerate(raw.splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, inc = m.groups()
                top = inc.split("/", 1)[0] if "/" in inc else inc.rsplit(".", 1)[0]
                if inc in ("s3flash/s3flash.h", "core/assert.h"):
                    continue  # the public header, and the assertions: for every layer
                if kind == '"' and "/" in inc and top in MAY_INCLUDE:
                    if top != folder and top not in MAY_INCLUDE[folder]:
                        problems.append(f"{rel}:{n}: includes {inc}: {folder}/ may not "
                                        f"call {top}/")
                    continue
                if kind == '"' and "/" not in inc:
                    if folder in FRONT_ENDS or os.path.exists(os.path.join(fdir, inc)):
                        continue
                    problems.append(f"{rel}:{n}: includes \"{inc}\", not a header of "
                                    f"src/{folder}/")
                    continue
                if top in LIBRARIES and folder not in LIBRARIES[top]:
                    problems.append(f"{rel}:{n}: includes <{inc}>: {folder}/ may not use "
                                    f"{top}")
            code = strip_comments(raw)
            for m in TIMEDWAIT.finditer(code):
                if not re.search(DEADLINE_OF.format(re.escape(m.group(1))), code):
                    n = code.count("\n", 0, m.start()) + 1
                    problems.append(f"{rel}:{n}: a timed wait until {m.group(1)}, which is not "
                                    f"set from s3f__deadline_ms or mnt_deadline (the monotonic "
                                    f"clock of the condition variable)")
            for n, line in enumerate(code.splitlines(), 1):
                for m in UNBOUNDED_COPY.finditer(line):
                    problems.append(f"{rel}:{n}: calls {m.group(1)}: an unbounded copy "
                                    f"(use s3f__strlcpy in the library, snprintf(dst, "
                                    f"sizeof(dst), \"%s\", src) in the front ends)")
                if folder not in LIBRARIES["curl"]:
                    for m in CURL_NAME.finditer(line):
                        problems.append(f"{rel}:{n}: names {m.group(1)}: libcurl stays in "
                                        f"http/, auth/ and s3/")
                if folder in HTTP_ALLOWED:
                    for m in re.finditer(r"\bs3f__http_\w+", line):
                        if m.group(0) not in HTTP_ALLOWED[folder]:
                            problems.append(f"{rel}:{n}: calls {m.group(0)}: of http/, "
                                            f"{folder}/ may use only "
                                            f"{', '.join(sorted(HTTP_ALLOWED[folder]))}")
                if folder in ("core", "auth", "http", "s3", "cache"):
                    for m in re.finditer(r"\b(s3f_\w+)\s*\(", line):
                        if m.group(1) in above:
                            problems.append(f"{rel}:{n}: calls {m.group(1)}: a function of "
                                            f"the transfer engine (xfer/), above {folder}/")
                if folder == "s3" and re.search(
                        r"\bs3f__(xfer|pool|sched|up|reader|cache|bdp|janitor)_\w*\s*\(", line):
                    problems.append(f"{rel}:{n}: calls into xfer/ or cache/ from s3/ (the "
                                    f"engine is an opaque pointer there)")
    return problems


def unpackaged(src):
    """Python modules of python/s3flash/ that src/python/meson.build does not install: the
    wheel and `pip install .` would lack them (tests run from the source tree would not see
    it; the gate's Python step did, as an ImportError of s3flash.hf)."""
    root = os.path.dirname(os.path.abspath(src))
    pkg = os.path.join(root, "python", "s3flash")
    build = os.path.join(src, "python", "meson.build")
    if not os.path.isdir(pkg) or not os.path.exists(build):
        return []
    with open(build, encoding="utf-8") as f:
        listed = set(re.findall(r"python/s3flash/([\w.]+)'", f.read()))
    return [f"python/s3flash/{n}: not installed by src/python/meson.build's install_sources"
            for n in sorted(os.listdir(pkg))
            if n.endswith((".py", ".pyi")) and n not in listed]


def main():
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.environ.get("S3F_SOURCE_ROOT", os.path.join(os.path.dirname(__file__), "..")),
        "src")
    problems = check(src) + unpackaged(src)
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} forbidden edge(s); docs/ARCHITECTURE.md has the "
              f"rules")
        return 1
    print("layering: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
