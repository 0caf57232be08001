#!/usr/bin/env python3
"""A fake of the AWS credential endpoints, for the credentials tests (standard library only).

    python3 tests/servers/fake_aws.py --print-port (or --port-file F)

binds 127.0.0.1 on a free port and writes the port number to F (atomically), then serves:

  POST /                      STS AssumeRoleWithWebIdentity (form body, or GET with a query):
                              checks Action, Version, RoleArn (--role-arn) and WebIdentityToken
                              (--token); a bad token gets a 400 InvalidIdentityToken error
                              document, a bad role a 403 AccessDenied one.
  GET  /container/<anything>  the ECS/EKS container endpoint; requires
                              "Authorization: <--container-auth>", else 401 with a JSON error.
  PUT  /latest/api/token      IMDSv2 session token; needs X-aws-ec2-metadata-token-ttl-seconds.
  GET  /latest/meta-data/iam/security-credentials/[ROLE]
                              needs a valid X-aws-ec2-metadata-token, else 401 (no IMDSv1).

Control endpoints (for the tests):
  GET /_config?key=value&...  expiration_s (credentials expire that far ahead, default 3600),
                              delay_ms (added to each credentials response), imds_role
                              (empty: no role attached, 404), imds_token_status (non-200:
                              the token PUT fails with it), sts_status (force an STS error
                              status, with code sts_code)
  GET /_stats                 JSON counters of requests per endpoint
  GET /_reset                 counters to zero and the configuration to its defaults
"""

import argparse
import json
import os
import threading
import time
import urllib.parse
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

DEFAULTS = {
    "expiration_s": 3600,
    "delay_ms": 0,
    "imds_role": "s3flash-test-role",
    "imds_token_status": 200,
    "sts_status": 0,
    "sts_code": "IDPRejectedClaim",
}
STAT_NAMES = ["sts", "sts_rejected", "container", "container_rejected", "imds_token",
              "imds_role", "imds_creds", "imds_unauthorized", "other"]


class State:
    def __init__(self, args):
        self.args = args
        self.lock = threading.Lock()
        self.reset()

    def reset(self):
        with self.lock:
            self.config = dict(DEFAULTS)
            self.stats = {k: 0 for k in STAT_NAMES}
            self.tokens = set()
            self.serial = 0

    def count(self, name):
        with self.lock:
            self.stats[name] += 1
            self.serial += 1
            return self.serial


def iso(t):
    return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-aws/1"

    def log_message(self, fmt, *args):  # quiet
        pass

    @property
    def state(self):
        return self.server.state

    def reply(self, status, body, ctype="application/json"):
        data = body.encode() if isinstance(body, str) else body
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n else b""

    def creds(self, prefix, n):
        cfg = self.state.config
        if cfg["delay_ms"]:
            time.sleep(int(cfg["delay_ms"]) / 1000.0)
        exp = int(time.time()) + int(cfg["expiration_s"])
        return {
            "AccessKeyId": "ASIA%s%04d" % (prefix, n),
            "SecretAccessKey": "secret-%s-%d" % (prefix.lower(), n),
            "Token": "token-%s-%d" % (prefix.lower(), n),
            "Expiration": iso(exp),
        }

    # ---- control ----
    def control(self, path, query):
        if path == "/_stats":
            with self.state.lock:
                return self.reply(200, json.dumps(self.state.stats))
        if path == "/_reset":
            self.state.reset()
            return self.reply(200, "{}")
        if path == "/_config":
            with self.state.lock:
                for k, v in query.items():
                    if k not in DEFAULTS:
                        return self.reply(400, json.dumps({"error": "unknown key " + k}))
                    try:
                        self.state.config[k] = v[-1] if isinstance(DEFAULTS[k], str) else int(v[-1])
                    except ValueError:
                        return self.reply(400, json.dumps({"error": "bad value for " + k}))
            return self.reply(200, "{}")
        return self.reply(404, "{}")

    # ---- STS ----
    def sts(self, params):
        p = {k: v[-1] for k, v in params.items()}
        cfg = self.state.config

        def error(status, code, message):
            self.state.count("sts_rejected")
            doc = ('<ErrorResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">'
                   "<Error><Type>Sender</Type><Code>%s</Code><Message>%s</Message></Error>"
                   "<RequestId>fake-request-id-0001</RequestId></ErrorResponse>" % (code, message))
            return self.reply(status, doc, "text/xml")

        if p.get("Action") != "AssumeRoleWithWebIdentity" or p.get("Version") != "2011-06-15":
            return error(400, "InvalidAction", "Could not find operation")
        if cfg["sts_status"]:
            return error(int(cfg["sts_status"]), cfg["sts_code"], "Forced error")
        if p.get("WebIdentityToken") != self.state.args.token:
            return error(400, "InvalidIdentityToken", "The web identity token is not valid")
        if p.get("RoleArn") != self.state.args.role_arn:
            return error(403, "AccessDenied", "Not authorized to perform sts:AssumeRoleWithWebIdentity")
        if not p.get("RoleSessionName"):
            return error(400, "ValidationError", "RoleSessionName is required")
        n = self.state.count("sts")
        c = self.creds("STS", n)
        doc = ('<AssumeRoleWithWebIdentityResponse xmlns="https://sts.amazonaws.com/doc/2011-06-15/">\n'
               "  <AssumeRoleWithWebIdentityResult>\n"
               "    <SubjectFromWebIdentityToken>system:serviceaccount:ns:sa</SubjectFromWebIdentityToken>\n"
               "    <AssumedRoleUser><Arn>%s/%s</Arn><AssumedRoleId>AROA:%s</AssumedRoleId></AssumedRoleUser>\n"
               "    <Credentials>\n"
               "      <SessionToken>%s</SessionToken>\n"
               "      <SecretAccessKey>%s</SecretAccessKey>\n"
               "      <Expiration>%s</Expiration>\n"
               "      <AccessKeyId>%s</AccessKeyId>\n"
               "    </Credentials>\n"
               "  </AssumeRoleWithWebIdentityResult>\n"
               "  <ResponseMetadata><RequestId>fake-request-id-%04d</RequestId></ResponseMetadata>\n"
               "</AssumeRoleWithWebIdentityResponse>\n"
               % (p["RoleArn"], p["RoleSessionName"], p["RoleSessionName"], c["Token"],
                  c["SecretAccessKey"], c["Expiration"], c["AccessKeyId"], n))
        return self.reply(200, doc, "text/xml")

    # ---- IMDS ----
    def imds_token_ok(self):
        t = self.headers.get("X-aws-ec2-metadata-token")
        with self.state.lock:
            return t is not None and t in self.state.tokens

    def do_PUT(self):
        self.read_body()
        if self.path != "/latest/api/token":
            self.state.count("other")
            return self.reply(404, "")
        self.state.count("imds_token")
        status = int(self.state.config["imds_token_status"])
        if status != 200:
            return self.reply(status, "", "text/plain")
        ttl = self.headers.get("X-aws-ec2-metadata-token-ttl-seconds")
        if not ttl or not ttl.isdigit() or not 1 <= int(ttl) <= 21600:
            return self.reply(400, "", "text/plain")
        if self.headers.get("X-Forwarded-For"):
            return self.reply(403, "", "text/plain")
        with self.state.lock:
            tok = "imds-token-%d" % (len(self.state.tokens) + 1)
            self.state.tokens.add(tok)
        return self.reply(200, tok, "text/plain")

    def do_GET(self):
        u = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(u.query, keep_blank_values=True)
        if u.path.startswith("/_"):
            return self.control(u.path, query)
        if u.path == "/" and query:
            return self.sts(query)
        if u.path.startswith("/container/"):
            if self.headers.get("Authorization") != self.state.args.container_auth:
                self.state.count("container_rejected")
                return self.reply(401, json.dumps({"code": "AccessDenied",
                                                   "message": "invalid authorization token"}))
            n = self.state.count("container")
            c = self.creds("CONTAINER", n)
            c["RoleArn"] = "arn:aws:iam::123456789012:role/container"
            return self.reply(200, json.dumps(c))
        prefix = "/latest/meta-data/iam/security-credentials/"
        if u.path.startswith(prefix):
            if not self.imds_token_ok():
                self.state.count("imds_unauthorized")
                return self.reply(401, "", "text/plain")
            role = self.state.config["imds_role"]
            name = urllib.parse.unquote(u.path[len(prefix):])
            if name == "":
                self.state.count("imds_role")
                if not role:
                    return self.reply(404, "", "text/plain")
                return self.reply(200, role, "text/plain")
            if name != role:
                self.state.count("other")
                return self.reply(404, "", "text/plain")
            n = self.state.count("imds_creds")
            c = self.creds("IMDS", n)
            c.update({"Code": "Success", "LastUpdated": iso(time.time()), "Type": "AWS-HMAC"})
            return self.reply(200, json.dumps(c, indent=2))
        self.state.count("other")
        return self.reply(404, "{}")

    def do_POST(self):
        body = self.read_body().decode()
        if urllib.parse.urlsplit(self.path).path != "/":
            self.state.count("other")
            return self.reply(404, "")
        if not (self.headers.get("Content-Type") or "").startswith(
                "application/x-www-form-urlencoded"):
            return self.reply(415, "")
        return self.sts(urllib.parse.parse_qs(body, keep_blank_values=True))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--port-file", help="write the port here once listening")
    ap.add_argument("--print-port", action="store_true",
                    help="print 'port N' on stdout once listening (tests read the pipe)")
    ap.add_argument("--token", default="good-web-identity-token")
    ap.add_argument("--role-arn", default="arn:aws:iam::123456789012:role/s3flash-test")
    ap.add_argument("--container-auth", default="Bearer container-auth-token")
    args = ap.parse_args()
    srv = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    srv.daemon_threads = True
    srv.state = State(args)
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write("%d\n" % srv.server_address[1])
        os.replace(tmp, args.port_file)
    if args.print_port:
        print("port %d" % srv.server_address[1], flush=True)
    try:
        srv.serve_forever()
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
