#!/usr/bin/env python3
"""Add the licences of the libraries a repaired wheel carries to its metadata, in place.

    python3 scripts/wheel-licenses.py WHEEL [--static DEBIAN_PACKAGE ...]

`auditwheel repair` copies the shared libraries the extension needs (libcurl, OpenSSL, ISA-L
and theirs) into s3flash.libs/ and lists the Debian packages they came from in its SBOM
(DIST-INFO/sboms/auditwheel.cdx.json); --static names packages linked in statically,
which no SBOM sees. For each package this copies Debian's /usr/share/doc/PKG/copyright (the
upstream licence and copyright notices) to DIST-INFO/licenses/bundled/PKG.copyright, and each
licence text those files refer to under /usr/share/common-licenses (the LGPL, GPL...) to
DIST-INFO/licenses/bundled/common-licenses/, writes DIST-INFO/licenses/bundled/README (which
file in the wheel comes from which package and version), adds a License-File line for each
to METADATA and rewrites RECORD. Runs on the machine that built the wheel (the packages must
be installed there). Fails if a package's copyright file is missing.
"""

import argparse
import base64
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
import zipfile


def deb_version(pkg):
    out = subprocess.run(["dpkg-query", "-W", "-f=${Version}", pkg], capture_output=True,
                         text=True)
    return out.stdout.strip() if out.returncode == 0 else "?"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("wheel")
    ap.add_argument("--static", action="append", default=[],
                    help="a Debian package linked in statically (its copyright is added)")
    args = ap.parse_args()

    with zipfile.ZipFile(args.wheel) as z:
        entries = [(i, z.read(i.filename)) for i in z.infolist()]
    names = [i.filename for i, _ in entries]
    dist_info = next(n.split("/")[0] for n in names if n.split("/")[0].endswith(".dist-info"))
    files = dict((i.filename, data) for i, data in entries)

    # package -> (version, [files in the wheel])
    pkgs = {}
    sbom_name = f"{dist_info}/sboms/auditwheel.cdx.json"
    if sbom_name in files:
        sbom = json.loads(files[sbom_name])
        for c in sbom.get("components", []):
            if c.get("purl", "").startswith("pkg:deb/"):
                pkgs.setdefault(c["name"], (c.get("version", "?"), []))
    # which file came from which package: dpkg, on the soname without auditwheel's hash
    libs = sorted(n for n in names if ".libs/" in n and not n.endswith("/"))
    for lib in libs:
        base = os.path.basename(lib)
        stem = re.sub(r"-[0-9a-f]{8}(?=\.|$)", "", base)   # libcurl-02fbea31.so.4.8.0 -> libcurl.so.4.8.0
        out = subprocess.run(["dpkg-query", "-S", f"*/{stem}"], capture_output=True, text=True)
        owner = out.stdout.split(":")[0].strip() if out.returncode == 0 else None
        if owner is None:
            sys.exit(f"wheel-licenses: no Debian package owns {stem} (for {lib})")
        pkgs.setdefault(owner, (deb_version(owner), []))[1].append(lib)
    for pkg in args.static:
        pkgs.setdefault(pkg, (deb_version(pkg), []))[1].append(
            "(linked statically into the extension module)")

    lic_dir = f"{dist_info}/licenses/bundled"
    added = {}
    common = set()
    readme = ["Libraries carried in this wheel, with the Debian 12 packages they were built",
              "from and those packages' copyright files (PKG.copyright). Licence texts the",
              "copyright files refer to under /usr/share/common-licenses are in common-licenses/.",
              "s3flash itself is Apache-2.0 (../LICENSE).", ""]
    for pkg in sorted(pkgs):
        ver, where = pkgs[pkg]
        path = f"/usr/share/doc/{pkg}/copyright"
        if not os.path.exists(path):
            sys.exit(f"wheel-licenses: {path} is missing (is {pkg} installed?)")
        text = open(path, "rb").read()
        added[f"{lic_dir}/{pkg}.copyright"] = text
        common.update(re.findall(rb"/usr/share/common-licenses/([A-Za-z0-9.+_-]+)", text))
        readme.append(f"{pkg} {ver}: " + ", ".join(os.path.basename(w) if "/" in w else w
                                                   for w in where))
    for name in sorted(common):
        name = name.decode().rstrip(".")
        p = f"/usr/share/common-licenses/{name}"
        if os.path.isfile(p):
            added[f"{lic_dir}/common-licenses/{name}"] = open(p, "rb").read()
    added[f"{lic_dir}/README"] = ("\n".join(readme) + "\n").encode()

    meta_name = f"{dist_info}/METADATA"
    meta = files[meta_name].decode()
    head, sep, body = meta.partition("\n\n")
    extra = "".join(f"License-File: {n[len(dist_info) + len('/licenses/'):]}\n"
                    for n in sorted(added))
    files[meta_name] = (head + "\n" + extra.rstrip("\n") + sep + body).encode()
    files.update(added)

    record_name = f"{dist_info}/RECORD"
    order = [n for n in names if n != record_name] + sorted(added) + [record_name]
    rows = []
    for n in order[:-1]:
        data = files[n]
        if n.endswith("/"):
            continue
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{n},sha256={digest},{len(data)}")
    rows.append(f"{record_name},,")
    files[record_name] = ("\n".join(rows) + "\n").encode()

    infos = {i.filename: i for i, _ in entries}
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(args.wheel)), suffix=".whl")
    os.close(fd)
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        for n in order:
            info = infos.get(n)
            if info is None:
                info = zipfile.ZipInfo(n, date_time=infos[meta_name].date_time)
                info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            z.writestr(info, files[n])
    os.chmod(tmp, os.stat(args.wheel).st_mode & 0o777)   # mkstemp's file is 0600
    os.replace(tmp, args.wheel)
    print(f"wheel-licenses: {len(pkgs)} packages, {len(added)} files under {lic_dir}")


if __name__ == "__main__":
    main()
