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


# One planted violation per case: (name, file to change, how: "append" a line at its end or
# "include" one after its last #include, the text, the file the failure names (None: the
# changed one, at the planted line), the text the failure must contain).
CASES = [
    # new: includes, transitively (s3/ may include http/, but xfer/ includes s3/client.h)
    ("transitive_include", "src/s3/client.h", "include", '#include "http/http.h"',
     "src/xfer/xfer.c", "includes http/http.h through s3/client.h: xfer/ may not call http/ "
     "(transitively)"),
    ("transitive_library", "src/cache/cache.h", "include", "#include <curl/curl.h>",
     "src/xfer/xfer.c", "includes <curl/curl.h> through cache/cache.h: xfer/ may not use curl "
     "(transitively)"),
    # new: no public s3f_* call from inside the library
    ("public_call", "src/cache/io.c", "append",
     "static void planted(void) { (void)s3f_head_object(NULL, NULL, NULL, NULL, NULL, NULL); }",
     None, "calls s3f_head_object: a public function of s3/"),
    ("public_call_format", "src/format/safetensors.c", "append",
     "static void planted(void) { s3f_client_free(NULL); }",
     None, "calls s3f_client_free: a public function of xfer/"),
    # new: no path system call and no kernel notification in a mount handler
    ("mount_path_call", "src/mount/read.c", "append",
     "static int planted(const char *p) { struct stat st; return stat(p, &st); }",
     None, "calls stat: a system call on a path in a mount handler"),
    ("mount_rename", "src/mount/namespace.c", "append",
     "static int planted(const char *a, const char *b) { return rename(a, b); }",
     None, "calls rename: a system call on a path"),
    ("mount_notify", "src/mount/fs.c", "append",
     "static void planted(struct fuse_session *s) "
     "{ fuse_lowlevel_notify_inval_inode(s, 1, 0, 0); }",
     None, "calls fuse_lowlevel_notify_inval_inode: a mount handler never notifies the kernel "
     "itself"),
    # older rules
    ("include_up", "src/s3/ops.c", "include", '#include "xfer/xfer.h"',
     None, "includes xfer/xfer.h: s3/ may not call xfer/"),
    ("unbounded_copy", "src/core/buf.c", "append",
     "static void planted(char *d, const char *s) { strcpy(d, s); }",
     None, "calls strcpy: an unbounded copy"),
    ("curl_name", "src/cache/io.c", "append", "static int planted(void) { return CURLE_OK; }",
     None, "names CURLE_OK: libcurl stays in http/, auth/ and s3/"),
]


def plant(tree, rel, how, text):
    """Plant `text` as one line of tree/rel; return its line number."""
    path = os.path.join(tree, rel)
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    if how == "include":
        at = max(i for i, l in enumerate(lines) if l.lstrip().startswith("#include")) + 1
    else:
        at = len(lines)
    lines.insert(at, text)
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines))
    return at + 1


def look_alikes(tree):
    """What is no violation: must still pass."""
    plant(tree, "src/mount/read.c", "append",
          'struct planted_ops { int (*open)(int); int (*stat)(int); };\n'
          'static int planted_open(int x) { return x; }\n'
          'static const struct planted_ops planted_ops = { .open = planted_open };\n'
          'static int planted_call(const struct planted_ops *o) '
          '{ return o->open(1) + planted_ops.open(2); }\n'
          'static const char *planted_msg = "rename (copy) failed: stat(x)";\n'
          'static int mnt_stat(int x) { return x; }\n'
          'static int planted_wrap(void) { return mnt_stat(1) + (int)sizeof(struct stat); }\n'
          '/* a comment may say stat(path) and fuse_lowlevel_notify_inval_entry() */')
    # a public function of its own folder, and core/'s helpers, are fine inside the library
    plant(tree, "src/s3/ops.c", "append",
          "static const char *planted(void) { return s3f_status_name(S3F_OK); }")


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
        for name, rel, how, text, named, rule in CASES:
            tree = os.path.join(tmp, name)
            copy_tree(root, tree)
            line = plant(tree, rel, how, text)
            rc, out = run_checker(tree)
            want = f"{named}:" if named else f"{rel}:{line}:"
            hits = [l for l in out.splitlines() if l.startswith(want) and rule in l]
            print(f"{name}: rc={rc}: {hits[0] if hits else '(not named)'}")
            if rc != 1 or not hits:
                failures.append(f"{name}: expected rc 1 and a line starting {want!r} with "
                                f"{rule!r}; got rc {rc}:\n{out}")
    for f in failures:
        print("FAIL:", f)
    print(f"layering rules: {len(CASES)} planted violations, "
          f"{'all named' if not failures else str(len(failures)) + ' failure(s)'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
