#!/usr/bin/env python3
"""The layering of docs/ARCHITECTURE.md ("Who may call whom"), checked on the sources: each
folder under src/ includes only the headers of the folders it may call, the libraries it may
use, directly or through the headers it includes (transitively), names no function of a
layer above it, calls no public s3f_* function of another folder from inside the library,
and makes no unbounded string copy (strcpy, stpcpy, strcat, sprintf, vsprintf, gets); a
mount handler makes no system call on a path and no fuse_lowlevel_notify_* call. A meson
unit test (`meson test --suite unit`, so tests/run.sh runs it); run it by hand with
`python3 tests/layering.py [SRC_DIR]`. tests/test_layering_rules.py plants one violation of
each rule in a copy of the tree and checks that this script names it.

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
# of http/, auth/ may use only the CURLcode map; xfer/ nothing (the count of data
# connections comes through s3f__s3_data_connections, a body's read callback is an
# s3f__s3_read_fn)
HTTP_ALLOWED = {"auth": {"s3f__http_status_of_curl"},
                "xfer": set()}

# copies that trust the source to fit: not anywhere in src/ (issue 28, N12)
UNBOUNDED_COPY = re.compile(r"\b(strcpy|stpcpy|strcat|sprintf|vsprintf|gets)\s*\(")

# a timed wait's deadline is on the clock its condition variable waits on: every condition
# variable with a timed wait is made monotonic (s3f__cond_init_monotonic, mnt_cond_init), so
# every deadline comes from s3f__deadline_ms or mnt_deadline (issue 28, R8: a CLOCK_REALTIME
# deadline on a monotonic condition variable never times out)
TIMEDWAIT = re.compile(r"\bpthread_cond_timedwait\s*\([^;]*?,\s*&\s*(\w+)\s*\)")
DEADLINE_OF = r"\b{}\s*=\s*(s3f__deadline_ms|mnt_deadline)\s*\("

# The library's folders (not the front ends).
LIBRARY = ("core", "auth", "http", "s3", "xfer", "cache", "format")
# A public function (declared in include/s3flash/*.h) is an entry point of the front ends:
# inside the library a folder calls the public functions of its own folder and of core/
# (the status and error helpers: s3f_error_clear, s3f_status_name..., pure and usable
# anywhere), and reaches any other folder through its internal s3f__ functions. The
# exceptions, by folder and name, each with its reason:
PUBLIC_CALLS_ALLOWED = {
    # xfer/ is the engine directly above s3/ and composes whole S3 operations: the public
    # function is the operation itself (its argument checks and one executed request),
    # with no internal function behind it that would not repeat it.
    "xfer": {"s3f_get_object",            # stream.c (stream GETs), xfer.c (the cache's origin,
                                          # the shared cache's GET)
             "s3f_put_object",            # xfer.c: the shared cache's PUT of a block
             "s3f_head_object",           # upload_known.c (a copy's source), xfer.c (origin)
             "s3f_list_multipart_uploads",  # upload_ctl.c: orphans of a key
             "s3f_abort_multipart_upload",  # upload_ctl.c
             "s3f_uploads_page_free",     # upload_ctl.c: the page the listing returned
             "s3f_client_endpoint"},      # xfer.c: the cache's scope
}
PUBLIC_DECL = re.compile(r"\b(s3f_[a-z]\w*)\s*\(")

# A mount handler makes no system call on a path (the kernel would send it back into the
# mount, or to a path the mount does not own) and never calls fuse_lowlevel_notify_*
# itself: docs/ARCHITECTURE.md, "Never re-enter". Every src/mount/*.c is a handler's file
# except the daemon's start-up (before FUSE serves) and the notifier threads' files.
MOUNT_STARTUP = "mount.c"
MOUNT_NOTIFIER = {"notify.c"}
PATH_CALL = re.compile(
    r"(?<![\w.>])(stat|lstat|fstatat|newfstatat|statx|open|open64|openat|creat|access|"
    r"faccessat|euidaccess|mkdir|mkdirat|rmdir|unlink|unlinkat|remove|rename|renameat|"
    r"renameat2|opendir|scandir|nftw|ftw|glob|realpath|canonicalize_file_name|readlink|"
    r"readlinkat|statfs|statvfs|chdir|chroot|truncate|utimensat|utimes|utime|chmod|fchmodat|"
    r"chown|lchown|fchownat|link|linkat|symlink|symlinkat|mknod|mknodat|mkfifo|getxattr|"
    r"lgetxattr|setxattr|lsetxattr|listxattr|removexattr|fopen|freopen|mkstemp|mkdtemp|"
    r"name_to_handle_at)\s*\(")
NOTIFY_CALL = re.compile(r"\b(fuse_lowlevel_notify_\w+)\s*\(")
# (file, call) -> why it is no call on the mount
PATH_CALLS_ALLOWED = {
    ("write.c", "fopen"): "process_of reads /proc/<tid>/status, never a path of the mount",
}

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


def public_functions(src):
    """The functions include/s3flash/*.h declares."""
    inc = os.path.join(os.path.dirname(os.path.abspath(src)), "include", "s3flash")
    names = set()
    if os.path.isdir(inc):
        for name in os.listdir(inc):
            if name.endswith(".h"):
                with open(os.path.join(inc, name), encoding="utf-8", errors="replace") as f:
                    names.update(PUBLIC_DECL.findall(strip_comments(f.read())))
    return names


def defined_in(src, names):
    """name -> the src/ folder whose .c defines it."""
    where = {}
    for folder in sorted(os.listdir(src)):
        fdir = os.path.join(src, folder)
        if not os.path.isdir(fdir):
            continue
        for name in os.listdir(fdir):
            if name.endswith(".c"):
                with open(os.path.join(fdir, name), encoding="utf-8", errors="replace") as f:
                    for n in DEFINITION.findall(f.read()):
                        if n in names:
                            where.setdefault(n, folder)
    return where


def includes_of(src, folder, name, cache):
    """The quoted headers of src/ (as 'folder/name.h') and the library headers (as
    '<lib/x.h>') that src/folder/name includes directly, with their line numbers."""
    key = (folder, name)
    if key in cache:
        return cache[key]
    out = []
    path = os.path.join(src, folder, name)
    if os.path.exists(path):
        with open(path, encoding="utf-8", errors="replace") as f:
            for n, line in enumerate(f.read().splitlines(), 1):
                m = INCLUDE.match(line)
                if not m:
                    continue
                kind, inc = m.groups()
                if kind == "<":
                    out.append((n, "<" + inc + ">"))
                elif "/" in inc:
                    if os.path.exists(os.path.join(src, inc)):
                        out.append((n, inc))
                elif os.path.exists(os.path.join(src, folder, inc)):
                    out.append((n, f"{folder}/{inc}"))
    cache[key] = out
    return out


def transitive_includes(src, folder, name, cache):
    """Every header reached from src/folder/name through another header: (line of the
    direct include, the chain of headers, the header reached)."""
    found = []
    for n, first in includes_of(src, folder, name, cache):
        if first.startswith("<"):
            continue
        seen = {first}
        todo = [(first, [first])]
        while todo:
            hdr, chain = todo.pop()
            hf, hn = hdr.split("/", 1)
            for _, nxt in includes_of(src, hf, hn, cache):
                if nxt in seen:
                    continue
                seen.add(nxt)
                found.append((n, chain, nxt))
                if not nxt.startswith("<"):
                    todo.append((nxt, chain + [nxt]))
    return found


def check(src):
    problems = []
    above = xfer_public(src)
    public = public_functions(src)
    public_home = defined_in(src, public)
    inc_cache = {}
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
            for n, chain, hdr in transitive_includes(src, folder, name, inc_cache):
                through = " -> ".join(chain)
                if hdr.startswith("<"):
                    lib = hdr[1:-1]
                    top = lib.split("/", 1)[0] if "/" in lib else lib.rsplit(".", 1)[0]
                    if top in LIBRARIES and folder not in LIBRARIES[top]:
                        problems.append(f"{rel}:{n}: includes {hdr} through {through}: "
                                        f"{folder}/ may not use {top} (transitively)")
                    continue
                top = hdr.split("/", 1)[0]
                if hdr in ("s3flash/s3flash.h", "core/assert.h") or top == folder:
                    continue
                if top in MAY_INCLUDE and top not in MAY_INCLUDE[folder]:
                    problems.append(f"{rel}:{n}: includes {hdr} through {through}: "
                                    f"{folder}/ may not call {top}/ (transitively)")
            code = strip_comments(raw)
            mount_handler = (folder == "mount" and name.endswith(".c") and
                             name != MOUNT_STARTUP and name not in MOUNT_NOTIFIER)
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
                                            f"{', '.join(sorted(HTTP_ALLOWED[folder])) or 'none'}")
                if folder in ("core", "auth", "http", "s3", "cache"):
                    for m in re.finditer(r"\b(s3f_\w+)\s*\(", line):
                        if m.group(1) in above:
                            problems.append(f"{rel}:{n}: calls {m.group(1)}: a function of "
                                            f"the transfer engine (xfer/), above {folder}/")
                if folder in LIBRARY:
                    for m in re.finditer(r"\b(s3f_[a-z]\w*)\s*\(", line):
                        home = public_home.get(m.group(1))
                        if (m.group(1) in public and home not in (None, folder, "core") and
                                m.group(1) not in PUBLIC_CALLS_ALLOWED.get(folder, ()) and
                                not DEFINITION.match(line)):
                            problems.append(f"{rel}:{n}: calls {m.group(1)}: a public "
                                            f"function of {home}/ (an entry point of the "
                                            f"front ends) from inside the library; call the "
                                            f"internal s3f__ function behind it, or have "
                                            f"the caller pass it in")
                if mount_handler:
                    for m in PATH_CALL.finditer(line):
                        if (name, m.group(1)) not in PATH_CALLS_ALLOWED:
                            problems.append(f"{rel}:{n}: calls {m.group(1)}: a system call "
                                            f"on a path in a mount handler (it may re-enter "
                                            f"the mount; only {MOUNT_STARTUP} at start-up)")
                    for m in NOTIFY_CALL.finditer(line):
                        problems.append(f"{rel}:{n}: calls {m.group(1)}: a mount handler "
                                        f"never notifies the kernel itself (only the "
                                        f"notifier: {', '.join(sorted(MOUNT_NOTIFIER))})")
                if folder == "s3" and re.search(
                        r"\bs3f__(xfer|pool|sched|up|reader|cache|bdp|janitor)_\w*\s*\(", line):
                    problems.append(f"{rel}:{n}: calls into xfer/ or cache/ from s3/ (the "
                                    f"engine is an opaque pointer there)")
    return problems


def unpackaged(src):
    """Python modules of python/s3flash/ and its subpackages that src/python/meson.build does
    not install: the
    wheel and `pip install .` would lack them (tests run from the source tree would not see
    it; the gate's Python step did, as an ImportError of s3flash.hf)."""
    root = os.path.dirname(os.path.abspath(src))
    pkg = os.path.join(root, "python", "s3flash")
    build = os.path.join(src, "python", "meson.build")
    if not os.path.isdir(pkg) or not os.path.exists(build):
        return []
    with open(build, encoding="utf-8") as f:
        listed = set(re.findall(r"python/s3flash/([\w./]+)'", f.read()))
    found = []
    for dirpath, dirs, files in os.walk(pkg):  # the subpackages too (s3flash.csi)
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        rel = os.path.relpath(dirpath, pkg)
        for n in sorted(files):
            name = n if rel == "." else f"{rel}/{n}"
            if n.endswith((".py", ".pyi")) and name not in listed:
                found.append(f"python/s3flash/{name}: not installed by src/python/meson.build's "
                             f"install_sources")
    return found


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
