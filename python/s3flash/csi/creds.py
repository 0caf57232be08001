"""A volume's credentials: the driver's own chain (the mounter's environment: web identity,
container credentials, IMDS), nodePublishSecretRef secrets (`key_id`, `access_key`,
`session_token`: Mountpoint's driver's names), or the pod's own (authenticationSource: pod: the
service-account token kubelet passes in volume_context, exchanged with STS
AssumeRoleWithWebIdentity); and a volume's SSE-C key (the same secrets' `sse_customer_key`,
for the mount option `sse-c`). They live in the node's and the mounter's memory only: never
written to disk, logged, or put on a command line."""

import base64
import binascii
import hashlib
import hmac
import json
import os
import urllib.error
import urllib.parse
import urllib.request
import xml.etree.ElementTree as ET

import grpc

from .options import TOKENS_KEY, VolumeError, invalid

STS_AUDIENCE = "sts.amazonaws.com"
ROLE_ANNOTATION = "eks.amazonaws.com/role-arn"
# STS error codes that mean "this token is not good": the caller is not authenticated
_UNAUTHENTICATED = {"InvalidIdentityToken", "ExpiredTokenException", "IDPRejectedClaim",
                    "IDPCommunicationError", "InvalidClientTokenId"}


class Credentials:
    """kind: 'driver' (nothing to pass: the daemon uses the mounter's environment), 'static'
    (env holds AWS_ACCESS_KEY_ID...), 'pod' (temporary, refreshed: served to the daemon by
    the mounter through credential_process). identity: what two volumes must share to share
    one daemon and a cache directory (no secret in it: an HMAC under the node's salt).
    sse_c_key: the volume's SSE-C key (base64), not part of message()."""

    def __init__(self, kind, identity, values=None, expiration=None):
        self.kind = kind
        self.identity = identity
        self.values = values or {}
        self.expiration = expiration
        self.sse_c_key = None

    def message(self):
        d = {"kind": self.kind}
        if self.values:
            d["values"] = self.values
        if self.expiration:
            d["expiration"] = self.expiration
        return d


def _fingerprint(salt, *parts):
    return hmac.new(salt, "\0".join(parts).encode(), hashlib.sha256).hexdigest()[:32]


SSE_C_SECRET = "sse_customer_key"


def sse_customer_key(vol, secrets):
    """The SSE-C key of a volume with the mount option sse-c: the secrets' sse_customer_key,
    the base64 of 32 bytes (canonical base64), else None. A refusal never quotes it."""
    raw = secrets.get(SSE_C_SECRET)
    if not vol.sse_c:
        if raw is not None:
            raise invalid("nodePublishSecretRef has %s but the volume has no mount option "
                          "sse-c: add it (objects are written and read with that key), or "
                          "remove the key from the Secret" % SSE_C_SECRET)
        return None
    if not raw or not raw.strip():
        raise invalid("mount option sse-c needs the SSE-C key: %s in the volume's "
                      "nodePublishSecretRef (the base64 of a 32-byte key)" % SSE_C_SECRET)
    try:
        key = base64.b64decode(raw.strip(), validate=True)
    except (binascii.Error, ValueError):
        key = None
    if key is None or len(key) != 32:
        raise invalid("%s of the nodePublishSecretRef is not the base64 of a 32-byte key (%s)"
                      % (SSE_C_SECRET, "not base64" if key is None
                         else "it decodes to %d bytes" % len(key)))
    return base64.b64encode(key).decode()


def resolve(vol, secrets, salt, sts_endpoint, kube, audience=STS_AUDIENCE):
    """The credentials of a publish (VolumeError on bad input or an STS refusal)."""
    secrets = dict(secrets)
    sse_c = sse_customer_key(vol, secrets)
    c = _resolve(vol, secrets, salt, sts_endpoint, kube, audience)
    if sse_c:  # another key: another daemon, another cache directory (it holds plaintext)
        c.sse_c_key = sse_c
        c.identity += "+sse-c:" + _fingerprint(salt, "sse-c", sse_c)
    return c


def _resolve(vol, secrets, salt, sts_endpoint, kube, audience):
    if vol.auth == "pod":
        return _pod(vol, sts_endpoint, kube, audience)
    if "key_id" in secrets or "access_key" in secrets:
        if not secrets.get("key_id") or not secrets.get("access_key"):
            raise invalid("nodePublishSecretRef needs both key_id and access_key")
        env = {"AWS_ACCESS_KEY_ID": secrets["key_id"],
               "AWS_SECRET_ACCESS_KEY": secrets["access_key"]}
        if secrets.get("session_token"):
            env["AWS_SESSION_TOKEN"] = secrets["session_token"]
        return Credentials("static", "static:" + _fingerprint(salt, secrets["key_id"],
                                                              secrets["access_key"],
                                                              secrets.get("session_token", "")),
                           env)
    return Credentials("driver", "driver")


def _pod(vol, sts_endpoint, kube, audience):
    ctx = vol.context
    raw = ctx.get(TOKENS_KEY)
    if not raw:
        raise invalid("authenticationSource is pod but volume_context has no %s (the "
                      "CSIDriver's tokenRequests must ask for audience %s)"
                      % (TOKENS_KEY, audience))
    try:
        token = json.loads(raw)[audience]["token"]
    except (ValueError, KeyError, TypeError):
        raise invalid("%s has no token for audience %s" % (TOKENS_KEY, audience))
    ns = ctx.get("csi.storage.k8s.io/pod.namespace", "")
    sa = ctx.get("csi.storage.k8s.io/serviceAccount.name", "")
    role = vol.role_arn
    if not role:
        if not (ns and sa):
            raise invalid("authenticationSource is pod but the pod's namespace and service "
                          "account are missing (the CSIDriver needs podInfoOnMount: true)")
        role = kube.service_account_role(ns, sa)
    session = ("s3flash-csi-%s-%s" % (ns, ctx.get("csi.storage.k8s.io/pod.uid", "")))[:64]
    session = "".join(c if c.isalnum() or c in "=,.@-_" else "-" for c in session)
    c = assume_role_with_web_identity(sts_endpoint, vol.sts_region, role, session, token)
    identity = "pod:" + hashlib.sha256(("%s\0%s\0%s" % (role, ns, sa)).encode()).hexdigest()[:32]
    return Credentials("pod", identity, c["values"], c["expiration"])


def sts_url(endpoint, region):
    if endpoint:
        return endpoint
    return "https://sts.%s.amazonaws.com/" % (region or "us-east-1")


def assume_role_with_web_identity(endpoint, region, role_arn, session, token, timeout=10):
    """{'values': {AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN},
    'expiration': ISO-8601}; a refusal is VolumeError(UNAUTHENTICATED | PERMISSION_DENIED)
    naming STS's code, message and request id (never the token)."""
    url = sts_url(endpoint, region)
    body = urllib.parse.urlencode({
        "Action": "AssumeRoleWithWebIdentity", "Version": "2011-06-15", "RoleArn": role_arn,
        "RoleSessionName": session, "WebIdentityToken": token}).encode()
    req = urllib.request.Request(url, data=body, method="POST", headers={
        "Content-Type": "application/x-www-form-urlencoded"})
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            doc = r.read()
    except urllib.error.HTTPError as e:
        code, msg, rid = _sts_error(e.read())
        status = grpc.StatusCode.PERMISSION_DENIED
        if code in _UNAUTHENTICATED or e.code == 401:
            status = grpc.StatusCode.UNAUTHENTICATED
        elif e.code >= 500 or code in ("Throttling", "ServiceUnavailable"):
            status = grpc.StatusCode.UNAVAILABLE
        raise VolumeError(status, "STS AssumeRoleWithWebIdentity for role %s at %s refused "
                          "(HTTP %d %s: %s; request id %s)" % (role_arn, url, e.code, code,
                                                               msg, rid))
    except (urllib.error.URLError, OSError) as e:
        raise VolumeError(grpc.StatusCode.UNAVAILABLE,
                          "STS AssumeRoleWithWebIdentity at %s: %s" % (url, e))
    try:
        root = ET.fromstring(doc)
    except ET.ParseError:
        raise VolumeError(grpc.StatusCode.INTERNAL, "STS at %s answered with no XML" % url)
    vals = {}
    for el in root.iter():
        tag = el.tag.rsplit("}", 1)[-1]
        if tag in ("AccessKeyId", "SecretAccessKey", "SessionToken", "Expiration"):
            vals[tag] = (el.text or "").strip()
    if not vals.get("AccessKeyId") or not vals.get("SecretAccessKey"):
        raise VolumeError(grpc.StatusCode.INTERNAL, "STS at %s answered without credentials"
                          % url)
    values = {"AWS_ACCESS_KEY_ID": vals["AccessKeyId"],
              "AWS_SECRET_ACCESS_KEY": vals["SecretAccessKey"]}
    if vals.get("SessionToken"):
        values["AWS_SESSION_TOKEN"] = vals["SessionToken"]
    return {"values": values, "expiration": vals.get("Expiration", "")}


def _sts_error(doc):
    code = msg = rid = "?"
    try:
        root = ET.fromstring(doc)
        for el in root.iter():
            tag = el.tag.rsplit("}", 1)[-1]
            if tag == "Code":
                code = el.text or "?"
            elif tag == "Message":
                msg = el.text or ""
            elif tag == "RequestId":
                rid = el.text or "?"
    except ET.ParseError:
        msg = doc[:200].decode("utf-8", "replace")
    return code, msg, rid


class Kube:
    """The one API call the node makes: a service account's role annotation (in-cluster:
    the pod's own service-account token and CA; S3FLASH_CSI_KUBE_API overrides the URL)."""

    SA_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"

    def service_account_role(self, ns, sa):
        base = os.environ.get("S3FLASH_CSI_KUBE_API")
        host = os.environ.get("KUBERNETES_SERVICE_HOST")
        if not base and host:
            base = "https://%s:%s" % (host, os.environ.get("KUBERNETES_SERVICE_PORT", "443"))
        if not base:
            raise invalid("authenticationSource is pod: no roleArn attribute and no Kubernetes "
                          "API to read the service account's %s annotation" % ROLE_ANNOTATION)
        url = "%s/api/v1/namespaces/%s/serviceaccounts/%s" % (
            base.rstrip("/"), urllib.parse.quote(ns), urllib.parse.quote(sa))
        headers = {}
        ctx = None
        tok = os.path.join(self.SA_DIR, "token")
        if os.path.exists(tok):
            with open(tok) as f:
                headers["Authorization"] = "Bearer " + f.read().strip()
            import ssl
            ctx = ssl.create_default_context(cafile=os.path.join(self.SA_DIR, "ca.crt"))
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers),
                                        timeout=10, context=ctx) as r:
                doc = json.loads(r.read())
        except (urllib.error.URLError, OSError, ValueError) as e:
            raise VolumeError(grpc.StatusCode.UNAVAILABLE,
                              "reading service account %s/%s: %s" % (ns, sa, e))
        role = (doc.get("metadata", {}).get("annotations") or {}).get(ROLE_ANNOTATION)
        if not role:
            raise VolumeError(grpc.StatusCode.FAILED_PRECONDITION,
                              "service account %s/%s has no %s annotation (the role its pods "
                              "assume)" % (ns, sa, ROLE_ANNOTATION))
        return role
