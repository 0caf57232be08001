#!/usr/bin/env python3
"""The drop-in flow a new user runs after `pip install s3flash-*.whl`, against a real S3
server: scripts/wheel-test.sh runs it in a clean Debian root (no compiler, no -dev packages).

    S3FLASH_TEST_ENDPOINT=... S3FLASH_TEST_ACCESS_KEY=... S3FLASH_TEST_SECRET_KEY=... \
        python3 scripts/wheel-flow.py [--torch] [--ca-elsewhere]

Checks first that the extension's libraries (libcurl, OpenSSL, ISA-L...) were loaded from the
wheel's s3flash.libs/, not from the system; then, in a bucket of its own (removed at the end):
S3Client upload / get_object, a multipart write through S3Writer and ranged reads through
S3Reader, head/list/delete, the `s3flash` CLI (cp up and down, ls); with --torch, torch.save/torch.load through S3Checkpoint and
s3flash.save/load. With --ca-elsewhere (as root, in a throw-away root file system only): the
system CA bundle is moved from Debian's path to Fedora's for the step, and an S3 listing over
TLS from a local server whose certificate is in that bundle must verify, though the bundled
libcurl was built to look in Debian's place. Prints one line per step and "N passed, 0
failed"; exits 1 on a failure.
"""

import hashlib
import http.server
import os
import shutil
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import s3flash
from s3flash import S3Checkpoint, S3Client, S3ClientConfig

passed = 0


def step(name):
    def wrap(fn):
        global passed
        t0 = time.monotonic()
        fn()
        passed += 1
        print(f"ok   {name} ({time.monotonic() - t0:.2f} s)", flush=True)
    return wrap


LIST_XML = (b'<?xml version="1.0" encoding="UTF-8"?>'
            b'<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/">'
            b'<Name>tlsbucket</Name><Prefix></Prefix><KeyCount>1</KeyCount><MaxKeys>1000</MaxKeys>'
            b'<IsTruncated>false</IsTruncated><Contents><Key>hello.txt</Key>'
            b'<LastModified>2026-12-02T12:00:00.000Z</LastModified><ETag>"abc"</ETag>'
            b'<Size>5</Size><StorageClass>STANDARD</StorageClass></Contents></ListBucketResult>')


class _ListHandler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "application/xml")
        self.send_header("Content-Length", str(len(LIST_XML)))
        self.end_headers()
        self.wfile.write(LIST_XML)

    def log_message(self, *a):
        pass


def ca_elsewhere(region, config):
    """TLS verified against the system's CA bundle kept where Fedora/RHEL keep it."""
    debian, fedora = "/etc/ssl/certs/ca-certificates.crt", "/etc/pki/tls/certs/ca-bundle.crt"
    assert not os.path.exists(fedora), f"{fedora} exists: not a throw-away root?"
    tmp = tempfile.mkdtemp()
    cert, key = os.path.join(tmp, "cert.pem"), os.path.join(tmp, "key.pem")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
                    "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
                    "-keyout", key, "-out", cert], check=True, capture_output=True)
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _ListHandler)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(cert, key)
    srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    saved = debian + ".s3flash-saved"
    os.rename(debian, saved)
    try:
        os.makedirs(os.path.dirname(fedora), exist_ok=True)
        shutil.copy(cert, fedora)
        c = S3Client(region, f"https://127.0.0.1:{srv.server_address[1]}", config)
        keys = [o.key for o in c.list_objects("tlsbucket")]
        assert keys == ["hello.txt"], keys
    finally:
        os.rename(saved, debian)
        os.unlink(fedora)
        srv.shutdown()
        shutil.rmtree(tmp)


def main():
    use_torch = "--torch" in sys.argv[1:]
    endpoint = os.environ["S3FLASH_TEST_ENDPOINT"]
    region = os.environ.get("S3FLASH_TEST_REGION", "us-east-1")
    config = S3ClientConfig(force_path_style=True,
                            access_key_id=os.environ["S3FLASH_TEST_ACCESS_KEY"],
                            secret_access_key=os.environ["S3FLASH_TEST_SECRET_KEY"])
    client = S3Client(region, endpoint, config)
    bucket = f"s3flash-wheel-{uuid.uuid4().hex[:12]}"

    @step("libraries come from the wheel")
    def _():
        pkg = os.path.dirname(s3flash.__file__)
        libs = os.path.realpath(os.path.join(pkg, "..", "s3flash.libs"))
        mapped = set()
        with open("/proc/self/maps") as f:
            for line in f:
                path = line.split()[-1] if len(line.split()) >= 6 else ""
                if ".so" in path:
                    mapped.add(os.path.realpath(path))
        for stem in ("libcurl", "libssl", "libcrypto", "libisal"):
            hits = [p for p in mapped if os.path.basename(p).startswith(stem + "-")
                    or os.path.basename(p).startswith(stem + ".")]
            assert hits, f"{stem} is not loaded"
            outside = [p for p in hits if not p.startswith(libs + "/")]
            # Python's own _ssl may load the system libssl/libcrypto too: ours must be there
            assert any(p.startswith(libs + "/") for p in hits), \
                f"{stem} loaded only from outside the wheel: {outside}"

    client.native.create_bucket(bucket)
    try:
        small = os.urandom(1 << 20)
        big = os.urandom(24 << 20)   # multipart at the default part size (8 MiB)

        @step("S3Client.upload + get_object")
        def _():
            client.upload(bucket, "small.bin", small)
            with client.get_object(bucket, "small.bin") as r:
                assert r.read() == small

        @step("S3Writer (multipart) + S3Reader (seek, ranged read)")
        def _():
            with client.put_object(bucket, "big.bin") as w:
                for off in range(0, len(big), 3 << 20):
                    w.write(big[off:off + (3 << 20)])
            with client.get_object(bucket, "big.bin") as r:
                assert r.size == len(big)
                r.seek(17 << 20)
                assert r.read(4096) == big[17 << 20:(17 << 20) + 4096]
                r.seek(0)
                assert hashlib.sha256(r.read()).digest() == hashlib.sha256(big).digest()

        @step("head_object, list_objects")
        def _():
            assert client.head_object(bucket, "big.bin")["size"] == len(big)
            keys = sorted(o.key for o in client.list_objects(bucket))
            assert keys == ["big.bin", "small.bin"], keys

        @step("the s3flash CLI (console script in a venv; python -m s3flash._cli else)")
        def _():
            script = os.path.join(sys.prefix, "bin", "s3flash")
            cli = [script] if sys.prefix != sys.base_prefix else [sys.executable, "-m",
                                                                   "s3flash._cli"]
            assert os.path.exists(script) or sys.prefix == sys.base_prefix, script
            env = dict(os.environ, AWS_ACCESS_KEY_ID=os.environ["S3FLASH_TEST_ACCESS_KEY"],
                       AWS_SECRET_ACCESS_KEY=os.environ["S3FLASH_TEST_SECRET_KEY"],
                       AWS_REGION=region)
            common = ["--endpoint-url", endpoint, "--force-path-style", "--quiet"]
            tmp = tempfile.mkdtemp()
            try:
                src, back = os.path.join(tmp, "src.bin"), os.path.join(tmp, "back.bin")
                with open(src, "wb") as f:
                    f.write(big[:9 << 20])
                for args in (["cp", src, f"s3://{bucket}/cli.bin"],
                             ["cp", f"s3://{bucket}/cli.bin", back]):
                    r = subprocess.run(cli + args + common, env=env, capture_output=True,
                                       text=True, timeout=120)
                    assert r.returncode == 0, (args, r.returncode, r.stdout, r.stderr)
                with open(back, "rb") as f:
                    assert f.read() == big[:9 << 20]
                r = subprocess.run(cli + ["ls", f"s3://{bucket}/"] + common, env=env,
                                   capture_output=True, text=True, timeout=60)
                assert r.returncode == 0 and "cli.bin" in r.stdout, (r.stdout, r.stderr)
                client.delete_object(bucket, "cli.bin")
            finally:
                shutil.rmtree(tmp)

        if use_torch:
            import torch

            @step("torch.save/torch.load through S3Checkpoint")
            def _():
                ckpt = S3Checkpoint(region=region, endpoint=endpoint, s3client_config=config)
                model = torch.nn.Sequential(torch.nn.Linear(256, 512), torch.nn.ReLU(),
                                            torch.nn.Linear(512, 10))
                sd = model.state_dict()
                with ckpt.writer(f"s3://{bucket}/ckpt/model.pt") as f:
                    torch.save(sd, f)
                with ckpt.reader(f"s3://{bucket}/ckpt/model.pt") as f:
                    back = torch.load(f, weights_only=True)
                assert back.keys() == sd.keys()
                assert all(torch.equal(back[k], sd[k]) for k in sd)

            @step("s3flash.save/s3flash.load")
            def _():
                obj = {"step": 7, "w": torch.arange(1 << 20, dtype=torch.float32)}
                uri = f"s3://{bucket}/ckpt/obj.pt"
                s3flash.save(obj, uri, region=region, endpoint=endpoint, s3client_config=config)
                back = s3flash.load(uri, region=region, endpoint=endpoint,
                                    s3client_config=config, weights_only=True)
                assert back["step"] == 7 and torch.equal(back["w"], obj["w"])

        if "--ca-elsewhere" in sys.argv[1:]:
            @step("TLS: the system CA bundle where Fedora keeps it")
            def _():
                ca_elsewhere(region, config)

        @step("delete_object")
        def _():
            for o in list(client.list_objects(bucket)):
                client.delete_object(bucket, o.key)
            assert list(client.list_objects(bucket)) == []
    finally:
        for o in list(client.list_objects(bucket)):
            client.delete_object(bucket, o.key)
        client.native.delete_bucket(bucket)
    print(f"{passed} passed, 0 failed")


if __name__ == "__main__":
    try:
        main()
    except Exception as e:   # one closing line either way
        import traceback
        traceback.print_exc()
        print(f"{passed} passed, 1 failed")
        sys.exit(1)
