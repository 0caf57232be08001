#!/usr/bin/env python3
"""The rules of tests/layering.py can fail: each case copies src/ and include/ to a
temporary directory, plants one violation, runs the checker on the copy and expects it to
fail naming the planted file and line and the rule. The unmodified copy, and a copy with
look-alikes that are no violation (a struct field `.open =`, `rename (copy)` in a string, an
mnt_* wrapper), must pass. A meson unit test (`meson test --suite unit`); by hand:
`python3 tests/test_layering_rules.py [SOURCE_ROOT]`.
"""
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKER = os.path.join(HERE, "layering.py")


def copy_tree(root, dst):
    for part in ("src", "include"):
        shutil.copytree(os.path.join(root, part), os.path.join(dst, part),
                        ignore=shutil.ignore_patterns("*.o", "__pycache__"))


def run_checker(tree):
    p = subprocess.run([sys.executable, CHECKER, os.path.join(tree, "src")],
                       capture_output=True, text=True)
    return p.returncode, p.stdout + p.stderr


def append(tree, rel, text):
    with open(os.path.join(tree, rel), "a", encoding="utf-8") as f:
        f.write(text)
    with open(os.path.join(tree, rel), encoding="utf-8") as f:
        return f.read().count("\n")  # the last line: where the plant ends


def insert_after_includes(tree, rel, text):
    """Insert `text` (one line) after the last #include line; return its line number."""
    path = os.path.join(tree, rel)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    last = max(i for i, l in enumerate(lines) if l.lstrip().startswith("#include"))
    lines.insert(last + 1, text)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return last + 2


# (name, plant(tree) -> (file, line or None), text the failure must contain)
def plant_transitive(tree):
    # s3/ may include http/, but s3/client.h is included by xfer/, which may not
    line = insert_after_includes(tree, "src/s3/client.h", '#include "http/http.h"')
    return "src/xfer/xfer.c", None, "includes http/http.h through s3/client.h: xfer/ may " \
        "not call http/ (transitively)"


def plant_transitive_library(tree):
    line = insert_after_includes(tree, "src/cache/cache.h", "#include <curl/curl.h>")
    return "src/xfer/xfer.c", None, "includes <curl/curl.h> through cache/cache.h: xfer/ " \
        "may not use curl (transitively)"


def plant_public_call(tree):
    line = append(tree, "src/cache/io.c",
                  "\nstatic void planted(void) { (void)s3f_head_object(NULL, NULL, NULL, "
                  "NULL, NULL, NULL); }\n")
    return "src/cache/io.c", line, "calls s3f_head_object: a public function of s3/"


def plant_public_call_format(tree):
    line = append(tree, "src/format/safetensors.c",
                  "\nstatic void planted(void) { s3f_client_free(NULL); }\n")
    return "src/format/safetensors.c", line, "calls s3f_client_free: a public function of xfer/"


def plant_mount_path_call(tree):
    line = append(tree, "src/mount/read.c",
                  "\nstatic int planted(const char *p) { struct stat st; "
                  "return stat(p, &st); }\n")
    return "src/mount/read.c", line, "calls stat: a system call on a path in a mount handler"


def plant_mount_rename(tree):
    line = append(tree, "src/mount/namespace.c",
                  "\nstatic int planted(const char *a, const char *b) "
                  "{ return rename(a, b); }\n")
    return "src/mount/namespace.c", line, "calls rename: a system call on a path"


def plant_mount_notify(tree):
    line = append(tree, "src/mount/fs.c",
                  "\nstatic void planted(struct fuse_session *s) "
                  "{ fuse_lowlevel_notify_inval_inode(s, 1, 0, 0); }\n")
    return "src/mount/fs.c", line, "calls fuse_lowlevel_notify_inval_inode: a mount handler " \
        "never notifies the kernel itself"


def plant_include_up(tree):  # an old rule: a direct include of a higher folder
    line = insert_after_includes(tree, "src/s3/ops.c", '#include "xfer/xfer.h"')
    return "src/s3/ops.c", line, "includes xfer/xfer.h: s3/ may not call xfer/"


def plant_unbounded_copy(tree):  # an old rule
    line = append(tree, "src/core/buf.c",
                  "\nstatic void planted(char *d, const char *s) { strcpy(d, s); }\n")
    return "src/core/buf.c", line, "calls strcpy: an unbounded copy"


def plant_curl_name(tree):  # an old rule
    line = append(tree, "src/cache/io.c", "\nstatic int planted(void) { return CURLE_OK; }\n")
    return "src/cache/io.c", line, "names CURLE_OK: libcurl stays in http/, auth/ and s3/"


CASES = [plant_transitive, plant_transitive_library, plant_public_call,
         plant_public_call_format, plant_mount_path_call, plant_mount_rename,
         plant_mount_notify, plant_include_up, plant_unbounded_copy, plant_curl_name]


def look_alikes(tree):
    """What is no violation: must still pass."""
    append(tree, "src/mount/read.c",
           '\nstruct planted_ops { int (*open)(int); int (*stat)(int); };\n'
           'static int planted_open(int x) { return x; }\n'
           'static const struct planted_ops planted_ops = { .open = planted_open };\n'
           'static int planted_call(const struct planted_ops *o) '
           '{ return o->open(1) + planted_ops.open(2); }\n'
           'static const char *planted_msg = "rename (copy) failed: stat(x)";\n'
           'static int mnt_stat(int x) { return x; }\n'
           'static int planted_wrap(void) { return mnt_stat(1) + (int)sizeof(struct stat); }\n'
           '/* a comment may say stat(path) and fuse_lowlevel_notify_inval_entry() */\n')
    # a public function of its own folder, and core/'s helpers, are fine inside the library
    append(tree, "src/s3/ops.c",
           "\nstatic const char *planted(void) { return s3f_status_name(S3F_OK); }\n")


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.dirname(HERE)
    failures = []
    with tempfile.TemporaryDirectory(prefix="s3f-layering-") as tmp:
        clean = os.path.join(tmp, "clean")
        copy_tree(root, clean)
        rc, out = run_checker(clean)
        print(f"unmodified copy: rc={rc}")
        if rc != 0:
            failures.append(f"the unmodified copy fails:\n{out}")
        alike = os.path.join(tmp, "alike")
        copy_tree(root, alike)
        look_alikes(alike)
        rc, out = run_checker(alike)
        print(f"look-alikes: rc={rc}")
        if rc != 0:
            failures.append(f"look-alikes taken for violations:\n{out}")
        for case in CASES:
            tree = os.path.join(tmp, case.__name__)
            copy_tree(root, tree)
            rel, line, rule = case(tree)
            rc, out = run_checker(tree)
            want = f"{rel}:{line}:" if line else f"{rel}:"
            hits = [l for l in out.splitlines() if l.startswith(want) and rule in l]
            print(f"{case.__name__}: rc={rc}: {hits[0] if hits else '(not named)'}")
            if rc != 1 or not hits:
                failures.append(f"{case.__name__}: expected rc 1 and a line starting "
                                f"{want!r} with {rule!r}; got rc {rc}:\n{out}")
    for f in failures:
        print("FAIL:", f)
    print(f"layering rules: {len(CASES)} planted violations, "
          f"{'all named' if not failures else str(len(failures)) + ' failure(s)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
