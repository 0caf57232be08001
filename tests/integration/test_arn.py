"""ARN buckets on the wire: the CLI addresses an access point ARN and a Multi-Region Access
Point ARN; the test build's S3FLASH_TEST_CONNECT_TO (libcurl's CURLOPT_CONNECT_TO) connects
the resolved AWS host to a TLS server started here on loopback, so the URL, the Host header
and the TLS name stay AWS's (the server's certificate names the AWS hosts, trusted through
AWS_CA_BUNDLE). The server records each request and checks its signature independently:

- access point: host NAME-ACCOUNT.s3-accesspoint.REGION.amazonaws.com, the ARN's region in
  the SigV4 scope (.../us-west-2/s3/aws4_request) though the client's region is us-east-1,
  and an HMAC signature recomputed from AWS's documented rules (test_express_sigv4's);
- MRAP: host ALIAS.accesspoint.s3-global.amazonaws.com, a SigV4a Authorization
  (AWS4-ECDSA-P256-SHA256, scope DATE/s3/aws4_request, X-Amz-Region-Set: * signed) whose
  ECDSA signature verifies with the public key derived here, in Python, from the test's
  secret as the AWS SDKs derive it (the KDF of aws-c-auth; `cryptography` for P-256).
"""
import hashlib
import os

import aws_host
import pytest
from aws_host import AP_ARN, AP_HOST, MRAP_ARN, MRAP_HOST

from test_express_sigv4 import canonical_request, expected_signature



@pytest.fixture
def aws_host_server(tmp_path):
    with aws_host.serve(tmp_path, [AP_HOST, MRAP_HOST]) as srv:
        yield srv


def run_cli(cli, port, cert, *args, **kw):
    env = cli.env(S3FLASH_TEST_CONNECT_TO=f"127.0.0.1:{port}", AWS_CA_BUNDLE=str(cert),
                  AWS_REGION="us-east-1")
    return cli.run(*args, endpoint=False, env=env, **kw)


def test_access_point_arn_host_and_scope(cli_nosrv, aws_host_server):
    port, cert, handler = aws_host_server
    r = run_cli(cli_nosrv, port, cert, "cp", "-", f"s3://{AP_ARN}/dir/a b.bin", input=b"hello")
    assert r.rc == 0, r
    r = run_cli(cli_nosrv, port, cert, "cp", f"s3://{AP_ARN}/dir/a b.bin", "-")
    assert r.rc == 0, r
    assert r.out == b"payload", r
    methods = [m for m, *_ in handler.seen]
    assert "PUT" in methods and "GET" in methods, handler.seen
    for method, path, h, body in handler.seen:
        assert h["host"] == AP_HOST, h
        assert path.split("?")[0] == "/dir/a%20b.bin", path
        assert "/us-west-2/s3/aws4_request" in h["authorization"], h["authorization"]
        akid, service, signed, got, want = expected_signature(
            method, path, h, cli_nosrv.rgw.secret_key)
        assert (akid, service) == (cli_nosrv.rgw.access_key, "s3")
        assert "host" in signed and got == want, (method, path)
        assert "x-amz-region-set" not in h
    assert any(body == b"hello" for m, _, _, body in handler.seen if m == "PUT")


def test_mrap_arn_signed_with_sigv4a(cli_nosrv, aws_host_server):
    ec = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.ec")
    hashes = pytest.importorskip("cryptography.hazmat.primitives.hashes")
    exceptions = pytest.importorskip("cryptography.exceptions")
    port, cert, handler = aws_host_server
    r = run_cli(cli_nosrv, port, cert, "cp", "-", f"s3://{MRAP_ARN}/ckpt/k.bin", input=b"mrap")
    assert r.rc == 0, r
    assert handler.seen, "no request reached the server"
    akid, secret = cli_nosrv.rgw.access_key, cli_nosrv.rgw.secret_key
    pub = ec.derive_private_key(aws_host.sigv4a_private_key(akid, secret), ec.SECP256R1()).public_key()
    other = ec.derive_private_key(aws_host.sigv4a_private_key(akid, secret + "x"),
                                  ec.SECP256R1()).public_key()
    for method, path, h, _ in handler.seen:
        assert h["host"] == MRAP_HOST, h
        assert h["x-amz-region-set"] == "*", h
        auth = h["authorization"]
        assert auth.startswith("AWS4-ECDSA-P256-SHA256 "), auth
        fields = dict(p.strip().split("=", 1)
                      for p in auth[len("AWS4-ECDSA-P256-SHA256 "):].split(","))
        cred = fields["Credential"].split("/")
        assert cred[0] == akid and cred[2:] == ["s3", "aws4_request"], cred  # no region
        signed = fields["SignedHeaders"].split(";")
        assert "x-amz-region-set" in signed and "host" in signed, signed
        creq = canonical_request(method, path, h, signed)
        sts = "\n".join(["AWS4-ECDSA-P256-SHA256", h["x-amz-date"], "/".join(cred[1:]),
                         hashlib.sha256(creq.encode()).hexdigest()])
        sig = bytes.fromhex(fields["Signature"])
        pub.verify(sig, sts.encode(), ec.ECDSA(hashes.SHA256()))  # raises if it does not
        with pytest.raises(exceptions.InvalidSignature):
            other.verify(sig, sts.encode(), ec.ECDSA(hashes.SHA256()))
        with pytest.raises(exceptions.InvalidSignature):
            pub.verify(sig, (sts + "x").encode(), ec.ECDSA(hashes.SHA256()))


def test_mount_of_an_access_point_arn(cli_path, aws_host_server, tmp_path):
    """`s3flash mount ARN/PREFIX/ DIR`: the ARN runs to the access point's name, the rest is
    the prefix; listings and reads go to the access point's host."""
    mountutil = pytest.importorskip("mountutil")
    why = mountutil.mount_supported()
    if why:
        pytest.skip(why)
    port, cert, handler = aws_host_server

    class ArnMount(mountutil.Mount):
        def argv(self):  # no custom endpoint, no path style: the rules' AWS host
            return [self.cli, "mount", "--foreground", *self.options, self.source, self.dir]

    m = ArnMount(cli_path, None, "AKIDARNMOUNT", "arn-mount-secret", f"{AP_ARN}/pre/",
                 tmp_path / "mnt", env={"S3FLASH_TEST_CONNECT_TO": f"127.0.0.1:{port}",
                                        "AWS_CA_BUNDLE": str(cert)}).start()
    try:
        assert os.listdir(m.dir) == ["a.bin"]
        with open(os.path.join(m.dir, "a.bin"), "rb") as f:
            assert f.read() == aws_host.PAYLOAD
    finally:
        m.stop()
    assert handler.seen
    for method, path, h, _ in handler.seen:
        assert h["host"] == AP_HOST, (method, path, h)
        assert "/us-west-2/s3/aws4_request" in h["authorization"]
    lists = [p for m_, p, _, _ in handler.seen if "list-type=2" in p]
    assert lists and all("prefix=pre%2F" in p for p in lists), lists
    assert any(m_ == "GET" and p.startswith("/pre/a.bin") for m_, p, _, _ in handler.seen)
