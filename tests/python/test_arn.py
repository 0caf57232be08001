"""ARN buckets from the Python package: a writer and a reader on an access point ARN, and a
writer on a Multi-Region Access Point ARN, go to the AWS hosts the endpoint rules give
(reached at tests/servers/aws_host.py's loopback TLS server through a CONNECT proxy that
tunnels every host there: the package under test is the wheel, which has no test hooks),
signed for the ARN's region (SigV4) or with SigV4a. The SigV4a
signature itself is verified in tests/integration/test_arn.py."""
import aws_host
import pytest
from connectproxy import ConnectProxy
from aws_host import AP_ARN, AP_HOST, MRAP_ARN, MRAP_HOST

from s3flash import S3Client, S3ClientConfig
from s3flash._checkpoint import parse_s3_uri



@pytest.fixture
def client_at_aws_hosts(tmp_path, monkeypatch):
    with aws_host.serve(tmp_path, [AP_HOST, MRAP_HOST]) as (port, cert, handler), \
            ConnectProxy(redirect=("127.0.0.1", port)) as proxy:
        cfg = S3ClientConfig(access_key_id="AKIDARNTEST", secret_access_key="arn-test-secret",
                             ca_bundle=str(cert), max_attempts=1, proxy=proxy.url)
        yield S3Client(region="us-east-1", s3client_config=cfg), handler
        # every request went through the proxy, to the hosts the endpoint rules give
        assert {r.split()[1] for r in proxy.seen()} <= {f"{AP_HOST}:443", f"{MRAP_HOST}:443"}


def test_parse_uri_takes_arn_buckets():
    assert parse_s3_uri(f"s3://{AP_ARN}/ckpt/model.pt") == (AP_ARN, "ckpt/model.pt")
    assert parse_s3_uri(f"s3://{MRAP_ARN}/a/b") == (MRAP_ARN, "a/b")


def test_access_point_and_mrap_on_the_wire(client_at_aws_hosts):
    client, handler = client_at_aws_hosts
    w = client.put_object(AP_ARN, "ckpt/model.pt")
    w.write(b"weights")
    w.close()
    assert client.get_object(AP_ARN, "ckpt/model.pt").read() == aws_host.PAYLOAD
    w = client.put_object(MRAP_ARN, "ckpt/model.pt")
    w.write(b"weights")
    w.close()
    ap = [(m, p, h) for m, p, h, _ in handler.seen if h["host"] == AP_HOST]
    mrap = [(m, p, h) for m, p, h, _ in handler.seen if h["host"] == MRAP_HOST]
    assert len(ap) + len(mrap) == len(handler.seen), handler.seen
    assert {m for m, _, _ in ap} >= {"PUT", "GET"}, ap
    assert [m for m, _, _ in mrap] == ["PUT"], mrap
    for _, path, h in ap:
        assert path.split("?")[0] == "/ckpt/model.pt"
        assert h["authorization"].startswith("AWS4-HMAC-SHA256 Credential=AKIDARNTEST/")
        assert "/us-west-2/s3/aws4_request" in h["authorization"]
    for _, path, h in mrap:
        assert path == "/ckpt/model.pt"
        assert h["x-amz-region-set"] == "*"
        assert h["authorization"].startswith("AWS4-ECDSA-P256-SHA256 Credential=AKIDARNTEST/")
        assert "/s3/aws4_request, SignedHeaders=" in h["authorization"]
