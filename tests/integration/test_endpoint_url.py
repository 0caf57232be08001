"""Endpoint URLs that libcurl writes differently on the wire than they are written (an
abbreviated IPv4 address, dot segments in the path, a port with a leading zero): the host
and path the requests are signed with are those curl sends, so RGW accepts the signature
(before the endpoint was parsed by libcurl's curl_url(), these got SignatureDoesNotMatch
or NoSuchBucket)."""
import os
from urllib.parse import urlsplit

import pytest


def variants(endpoint):
    u = urlsplit(endpoint)
    assert u.hostname == "127.0.0.1", endpoint
    return [f"http://127.1:{u.port}",             # curl sends Host: 127.0.0.1:PORT
            f"http://127.0.0.1:{u.port}/x/../",   # curl sends the path without "x/.."
            f"http://127.0.0.1:0{u.port}"]        # one port, written with a leading zero


@pytest.mark.parametrize("i", range(3))
def test_endpoint_written_otherwise(cli, s3, bucket, i):
    ep = variants(cli.rgw.endpoint)[i]
    data = os.urandom(1000)
    s3.put_object(Bucket=bucket, Key=f"ep/{i}", Body=data)
    r = cli.run("--endpoint-url", ep, "cat", f"s3://{bucket}/ep/{i}", endpoint=False)
    assert r.rc == 0, r
    assert r.out == data
