"""HTTP(S) proxies from the environment (issue 30): s3flash reads HTTP_PROXY / http_proxy,
HTTPS_PROXY / https_proxy, ALL_PROXY and NO_PROXY itself (libcurl alone ignores the upper
case HTTP_PROXY) and sets them on every request. A real proxy on loopback
(tests/servers/connectproxy.py) records what went through it."""
import sys
from pathlib import Path
from urllib.parse import urlparse

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "servers"))
from connectproxy import ConnectProxy  # noqa: E402
from s3servers import closed_port  # noqa: E402

NO_PROXY_ENV = {k: None for k in ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy",
                                  "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy")}


@pytest.fixture
def hproxy():
    with ConnectProxy() as p:
        yield p


def env(cli, **kw):
    e = dict(NO_PROXY_ENV)
    e.update(kw)
    return cli.env(**e)


@pytest.mark.parametrize("var", ["HTTP_PROXY", "http_proxy", "ALL_PROXY"])
def test_http_endpoint_through_the_proxy(cli, rgw, bucket, hproxy, tmp_path, var):
    src = tmp_path / "f"
    src.write_bytes(b"through the proxy\n")
    e = env(cli, **{var: hproxy.url})
    cli.ok("cp", src, f"s3://{bucket}/proxy/{var}", env=e)
    assert cli.ok("cat", f"s3://{bucket}/proxy/{var}", env=e).out == src.read_bytes()
    u = urlparse(rgw.endpoint)
    seen = hproxy.seen()
    assert f"PUT http://{u.hostname}:{u.port}/{bucket}/proxy/{var}" in seen, seen
    assert f"GET http://{u.hostname}:{u.port}/{bucket}/proxy/{var}" in seen, seen


@pytest.mark.parametrize("no_proxy", ["127.0.0.1", "localhost,127.0.0.1", "*"])
def test_no_proxy_names_the_host(cli, rgw, bucket, hproxy, no_proxy):
    e = env(cli, HTTP_PROXY=hproxy.url, NO_PROXY=no_proxy)
    cli.ok("ls", f"s3://{bucket}/", env=e)
    assert hproxy.seen() == []


def test_https_proxy_not_used_for_http(cli, rgw, bucket, hproxy):
    cli.ok("ls", f"s3://{bucket}/", env=env(cli, HTTPS_PROXY=hproxy.url))
    assert hproxy.seen() == []


def test_https_endpoint_tunnels_with_connect(cli, rgw, bucket, hproxy):
    # an https:// URL for the RGW's plain-HTTP port: the request goes through a CONNECT
    # tunnel to it (where TLS then fails, as it must against a plain-HTTP server)
    u = urlparse(rgw.endpoint)
    r = cli.run("--endpoint-url", f"https://{u.hostname}:{u.port}", "--aws-max-attempts", "1",
                "ls", f"s3://{bucket}/", endpoint=False, env=env(cli, HTTPS_PROXY=hproxy.url))
    assert r.rc == 1, r
    assert hproxy.seen() and set(hproxy.seen()) == {f"CONNECT {u.hostname}:{u.port}"}, \
        hproxy.seen()


def test_proxy_away_fails_the_request(cli, rgw, bucket):
    # a proxy that is set is used: one that does not answer fails the command, and the
    # error says it was the proxy (its password redacted)
    port = closed_port()
    r = cli.run("--aws-max-attempts", "1", "ls", f"s3://{bucket}/",
                env=env(cli, HTTP_PROXY=f"http://user:proxypass@127.0.0.1:{port}"))
    assert r.rc == 1, r
    assert f"(the proxy http://***@127.0.0.1:{port})" in r.err, r.err
    assert "proxypass" not in r.err
