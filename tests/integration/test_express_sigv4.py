"""The signatures of S3 Express requests, recomputed independently by a tiny zonal endpoint
written here (http.server, hashlib, hmac: no code shared with the client), from the rules of
AWS's documentation:

- "Signature Version 4 signing process" (the canonical request: method, the URI encoded once
  for S3, the sorted query, the signed headers as `name:value` lines, SignedHeaders, the
  payload hash; the string to sign AWS4-HMAC-SHA256 / date / scope / hash; the key
  HMAC("AWS4" + secret, date) -> region -> service -> "aws4_request").
- "Authorizing Zonal endpoint API operations with CreateSession" and the CreateSession API
  reference: CreateSession (GET /?session) is signed with the caller's own credentials for
  the service `s3express`; the zonal requests after it are signed with the *session's*
  secret for `s3express`, carry the session token in `x-amz-s3session-token` (among the
  signed headers) and no `x-amz-security-token`.

The server refuses (403 SignatureDoesNotMatch) any request whose signature it cannot
reproduce, so the CLI's success is the proof; the test also checks what it recorded.
"""
import hashlib
import hmac
import http.server
import threading
import types
import urllib.parse

import pytest

from helpers import Cli

BUCKET = "sig--use1-az4--x-s3"
CALLER = ("AKIDCALLERSIGV4", "caller-secret-key")
SESSION = ("ASIASESSIONSIGV4", "session-secret-key", "session-token-0123456789")


def enc(s, slash_ok):
    return urllib.parse.quote(s, safe="-_.~" + ("/" if slash_ok else ""))


def canonical_request(method, raw_path, headers, signed):
    """The SigV4 (and SigV4a) canonical request of an S3 request as received."""
    path, _, query = raw_path.partition("?")
    pairs = []
    for piece in filter(None, query.split("&")):
        k, _, v = piece.partition("=")
        pairs.append((enc(urllib.parse.unquote(k), False), enc(urllib.parse.unquote(v), False)))
    return "\n".join([
        method,
        path,  # S3: the path as sent, encoded once
        "&".join(f"{k}={v}" for k, v in sorted(pairs)),
        "".join(f"{h}:{' '.join(headers[h].split())}\n" for h in signed),
        ";".join(signed),
        headers["x-amz-content-sha256"],
    ])


def expected_signature(method, raw_path, headers, secret):
    auth = headers["authorization"]
    assert auth.startswith("AWS4-HMAC-SHA256 ")
    fields = dict(p.strip().split("=", 1) for p in auth[len("AWS4-HMAC-SHA256 "):].split(","))
    akid, date, region, service, term = fields["Credential"].split("/")
    signed = fields["SignedHeaders"].split(";")
    canonical = canonical_request(method, raw_path, headers, signed)
    scope = f"{date}/{region}/{service}/{term}"
    sts = "\n".join(["AWS4-HMAC-SHA256", headers["x-amz-date"], scope,
                     hashlib.sha256(canonical.encode()).hexdigest()])
    k = hmac.new(("AWS4" + secret).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return (akid, service, signed, fields["Signature"],
            hmac.new(k, sts.encode(), hashlib.sha256).hexdigest())


def session_result(token=SESSION[2], key=SESSION[0], secret=SESSION[1],
                   expiration="2099-01-01T00:00:00Z"):
    return ("<CreateSessionResult><Credentials>"
            f"<SessionToken>{token}</SessionToken>"
            f"<SecretAccessKey>{secret}</SecretAccessKey>"
            f"<AccessKeyId>{key}</AccessKeyId>"
            f"<Expiration>{expiration}</Expiration>"
            "</Credentials></CreateSessionResult>").encode()


class Zonal(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen = []
    bad_sessions = []  # CreateSession answers served (in order) before the good one

    def log_message(self, *a):
        pass

    def reply(self, status, body=b"", extra=None):
        self.send_response(status)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (extra or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(body)

    def deny(self, why):
        self.reply(403, f"<Error><Code>SignatureDoesNotMatch</Code><Message>{why}</Message>"
                        f"</Error>".encode())

    def handle_any(self):
        n = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(n) if n else b""
        h = {k.lower(): v for k, v in self.headers.items()}
        session = self.path.endswith("?session")
        secret = CALLER[1] if session else SESSION[1]
        akid, service, signed, got, want = expected_signature(self.command, self.path, h, secret)
        self.seen.append((self.command, self.path, h, akid, service, signed))
        if got != want:
            return self.deny(f"signature {got} != {want}")
        if service != "s3express":
            return self.deny("service")
        if session:
            if akid != CALLER[0] or "x-amz-s3session-token" in h:
                return self.deny("CreateSession is signed with the caller's credentials")
            if self.bad_sessions:
                return self.reply(200, self.bad_sessions.pop(0))
            return self.reply(200, session_result())
        if (akid != SESSION[0] or h.get("x-amz-s3session-token") != SESSION[2]
                or "x-amz-s3session-token" not in signed or "x-amz-security-token" in h):
            return self.deny("not a session's request")
        if self.command == "PUT":
            self.reply(200, extra={"ETag": '"%s"' % hashlib.md5(body).hexdigest()})
        else:
            self.reply(404, b"<Error><Code>NoSuchKey</Code><Message>x</Message></Error>")

    do_GET = do_PUT = do_HEAD = do_POST = do_DELETE = handle_any


@pytest.fixture
def zonal():
    Zonal.seen = []
    Zonal.bad_sessions = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Zonal)
    t = threading.Thread(target=srv.serve_forever, daemon=True)
    t.start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_session_requests_signed_as_aws_documents(cli_path, zonal, tmp_path):
    srv = types.SimpleNamespace(endpoint=f"http://127.0.0.1:{zonal.server_address[1]}",
                                region="us-east-1", access_key=CALLER[0], secret_key=CALLER[1])
    cli = Cli(cli_path, srv, tmp_path)
    # a key that needs encoding: the canonical URI is the path as sent, encoded once
    cli.ok("cp", "-", f"s3://{BUCKET}/dir/a b+c=d.bin", input=b"payload")
    methods = [(m, p.split("?")[1] if "?" in p else "") for m, p, *_ in Zonal.seen]
    assert methods[0] == ("GET", "session")
    assert methods[1][0] == "PUT"
    _, path, h, akid, service, signed = Zonal.seen[1]
    assert path == f"/{BUCKET}/dir/a%20b%2Bc%3Dd.bin"
    assert akid == SESSION[0] and service == "s3express"
    assert "x-amz-s3session-token" in signed and "x-amz-security-token" not in h
    # CreateSession: the caller's key, s3express, no session token
    _, _, h0, akid0, service0, _ = Zonal.seen[0]
    assert akid0 == CALLER[0] and service0 == "s3express"
    assert "x-amz-s3session-token" not in h0


def test_caller_session_token_goes_only_to_create_session(cli_path, zonal, tmp_path):
    # temporary caller credentials: their token is x-amz-security-token of CreateSession
    # only; the zonal request carries the session's token alone
    srv = types.SimpleNamespace(endpoint=f"http://127.0.0.1:{zonal.server_address[1]}",
                                region="us-east-1", access_key=CALLER[0], secret_key=CALLER[1])
    cli = Cli(cli_path, srv, tmp_path)
    cli.ok("cp", "-", f"s3://{BUCKET}/k", input=b"x",
           env=cli.env(AWS_SESSION_TOKEN="caller-sts-token"))
    _, _, h0, _, _, signed0 = Zonal.seen[0]
    assert h0.get("x-amz-security-token") == "caller-sts-token"
    assert "x-amz-security-token" in signed0
    _, _, h1, _, _, _ = Zonal.seen[1]
    assert "x-amz-security-token" not in h1
    assert h1["x-amz-s3session-token"] == SESSION[2]


# Issue 28, D5: a CreateSession answer with an empty or control-character token, key or
# secret, or an Expiration at the epoch ("never expires"), is refused and CreateSession asked
# again, as for a 5xx. Before, an empty token became no token at all, formatted with %s into
# x-amz-s3session-token (undefined behaviour), every request to the bucket failed
# INVALID_ARGUMENT, was not retried, and the session was kept; the epoch one was kept forever.
BAD_SESSIONS = {
    "empty-token": session_result(token=""),
    "token-control-char": session_result(token="session&#9;token"),
    "empty-key": session_result(key=""),
    "secret-control-char": session_result(secret="session&#127;secret"),
    "epoch-expiration": session_result(expiration="1970-01-01T00:00:00Z"),
}


@pytest.mark.parametrize("bad", sorted(BAD_SESSIONS))
def test_refused_session_answer_is_asked_again(cli_path, zonal, tmp_path, bad):
    srv = types.SimpleNamespace(endpoint=f"http://127.0.0.1:{zonal.server_address[1]}",
                                region="us-east-1", access_key=CALLER[0], secret_key=CALLER[1])
    cli = Cli(cli_path, srv, tmp_path)
    Zonal.bad_sessions = [BAD_SESSIONS[bad]]
    r = cli.run("cp", "-", f"s3://{BUCKET}/k", input=b"x", timeout=60,
                env=cli.env(S3FLASH_LOG="warn"))
    assert r.rc == 0, r
    methods = [(m, p.split("?")[1] if "?" in p else "") for m, p, *_ in Zonal.seen]
    assert methods[:2] == [("GET", "session"), ("GET", "session")], methods
    assert [m for m, _ in methods[2:]] == ["PUT"], methods
    assert "refused" in r.err, r.err  # the warning names what was wrong


def test_session_answers_refused_every_time_fail_naming_why(cli_path, zonal, tmp_path):
    srv = types.SimpleNamespace(endpoint=f"http://127.0.0.1:{zonal.server_address[1]}",
                                region="us-east-1", access_key=CALLER[0], secret_key=CALLER[1])
    cli = Cli(cli_path, srv, tmp_path)
    Zonal.bad_sessions = [BAD_SESSIONS["empty-token"]] * 10
    r = cli.run("cp", "-", f"s3://{BUCKET}/k", input=b"x", timeout=60)
    assert r.rc != 0, r
    assert "CreateSession" in r.err and "SessionToken" in r.err, r.err
    assert "PUT" not in [m for m, *_ in Zonal.seen]
    assert 2 <= len(Zonal.seen) <= 3, [(m, p) for m, p, *_ in Zonal.seen]  # bounded
