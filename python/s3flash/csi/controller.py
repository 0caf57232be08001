"""`s3flash-csi controller`: CreateVolume gives each PersistentVolumeClaim its own prefix of
the bucket that the StorageClass names (parameters bucketName, prefixTemplate); DeleteVolume
(called by the external-provisioner when the StorageClass's reclaimPolicy is Delete) removes
the prefix's objects. Retain: the provisioner never calls DeleteVolume and the objects stay.

Ownership: CreateVolume writes an owner record, `.s3flash-csi/volumes/PREFIX.volume` (JSON:
the request's name, a random token, the capacity asked for, the volume context), with
If-None-Match: *, and refuses a prefix that another volume's record holds, or one nested in
or around such a prefix. The volume id is `BUCKET/PREFIX#TOKEN` (BUCKET may be an access
point ARN): DeleteVolume deletes only while the record at PREFIX carries its token (checked
again before each batch of deletes, and the record deleted last), skips the prefixes nested in
it that other records hold, and answers OK when the record is gone or another volume's. So a
late or repeated DeleteVolume of a deleted claim never touches the objects of a claim made
since at the same prefix. Ids of the earlier form, `BUCKET/PREFIX/` (no record), delete their
prefix unless a record holds it now.

The volume context carries the attributes the node reads (bucketName, prefix and the
StorageClass's other volume attributes). DeleteVolume is given no StorageClass parameters, so
the controller reaches the store through its own configuration (AWS_ENDPOINT_URL, AWS_REGION,
the credentials chain, or the provisioner secret's key_id and access_key): a StorageClass's
endpointUrl must name the same store."""

import json
import logging
import os
import re
import secrets as pysecrets
import time

import grpc

from .node import NamedLocks, _guard
from .options import CONTEXT_KEYS, Volume, VolumeError, invalid, split_bucket
from .proto import pb

log = logging.getLogger("s3flash-csi.controller")
# ${pv.name} is the external-provisioner's PV name, pvc-<the claim's uid>: a claim deleted and
# made again under the same name gets a prefix of its own
DEFAULT_TEMPLATE = "${pvc.namespace}/${pvc.name}/${pv.name}/"
# the owner records (a template's components start with a letter or digit: no prefix it makes
# is under here, and no record name is a component)
RECORDS = ".s3flash-csi/volumes/"
RECORD_NAME = ".volume"
DELETE_BATCH = 1000
_VARS = {"pvc.name": "csi.storage.k8s.io/pvc/name",
         "pvc.namespace": "csi.storage.k8s.io/pvc/namespace",
         "pv.name": "csi.storage.k8s.io/pv/name"}
_COMPONENT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")


def expand(template, params, name):
    vals = {k: params.get(v, "") for k, v in _VARS.items()}
    vals["pv.name"] = vals["pv.name"] or name

    def sub(m):
        v = vals.get(m.group(1))
        if v is None:
            raise invalid("prefixTemplate names ${%s}; known: %s"
                          % (m.group(1), ", ".join("${%s}" % k for k in _VARS)))
        if not v:
            raise invalid("prefixTemplate needs ${%s}, which the provisioner did not pass "
                          "(run external-provisioner with --extra-create-metadata)" % m.group(1))
        return v
    prefix = re.sub(r"\$\{([a-z.]+)\}", sub, template)
    if not prefix.endswith("/"):
        prefix += "/"
    parts = prefix[:-1].split("/")
    if any(not _COMPONENT.match(p) for p in parts):
        raise invalid("prefix %r (from prefixTemplate %r) has an empty, '.' or '..' component"
                      % (prefix, template))
    return prefix


def record_key(prefix):
    return RECORDS + prefix + RECORD_NAME


def parse_id(volume_id):
    """(bucket, prefix, token) of a volume id this controller made (token "" for the earlier
    form without a record), else None."""
    base, _, token = volume_id.partition("#")
    bucket, prefix = split_bucket(base) or ("", "")
    if not bucket or not prefix or not prefix.endswith("/") or "#" in token:
        return None
    return bucket, prefix, token


def _s3_code(e, bucket, what):
    text = str(e)
    code = grpc.StatusCode.NOT_FOUND if "NoSuchBucket" in text else \
        grpc.StatusCode.PERMISSION_DENIED if "AccessDenied" in text else \
        grpc.StatusCode.UNAVAILABLE
    return VolumeError(code, "bucket %s: %s: %s" % (bucket, what, text))


def _capacity(req):
    return {"required_bytes": req.capacity_range.required_bytes,
            "limit_bytes": req.capacity_range.limit_bytes}


class Controller:
    def __init__(self, client_factory=None):
        self.client_factory = client_factory or self._client
        # one CreateVolume/DeleteVolume at a time per prefix in this process (the provisioner
        # runs one controller, by leader election); the records settle it between processes
        self._locks = NamedLocks()

    @staticmethod
    def _client(params, secrets):
        from .._client import S3Client
        from .._config import S3ClientConfig
        cfg = S3ClientConfig()
        if secrets.get("key_id"):
            cfg = S3ClientConfig(access_key_id=secrets["key_id"],
                                 secret_access_key=secrets.get("access_key"),
                                 session_token=secrets.get("session_token") or None,
                                 force_path_style=params.get("forcePathStyle") == "true")
        elif params.get("forcePathStyle") == "true":
            cfg = S3ClientConfig(force_path_style=True)
        return S3Client(region=params.get("region") or os.environ.get("AWS_REGION") or None,
                        endpoint=params.get("endpointUrl") or os.environ.get("AWS_ENDPOINT_URL"),
                        s3client_config=cfg)

    def ControllerGetCapabilities(self, req, ctx):
        T = pb.ControllerServiceCapability.RPC
        return pb.ControllerGetCapabilitiesResponse(capabilities=[
            pb.ControllerServiceCapability(rpc=T(type=T.CREATE_DELETE_VOLUME))])

    @staticmethod
    def _check_caps(caps, context):
        """What the node would refuse of these capabilities with this context: the node's own
        checks (options.Volume), nothing mounted. The refusal's message, else None."""
        for i, cap in enumerate(caps):
            try:
                Volume(pb.NodePublishVolumeRequest(volume_capability=cap,
                                                   volume_context=context), "")
            except VolumeError as e:
                return "volume_capabilities[%d]: %s" % (i, e.message)
        return None

    # ---- owner records ----
    @staticmethod
    def _record(client, bucket, prefix):
        """The owner record at prefix (a dict), or None."""
        from .. import _s3flash
        try:
            got = client.native.download_whole(bucket, record_key(prefix), 1 << 20)
        except _s3flash.S3NotFoundError as e:
            if "NoSuchBucket" in str(e):
                raise
            return None
        if got is None:
            raise VolumeError(grpc.StatusCode.INTERNAL, "s3://%s/%s is not an owner record "
                              "(over 1 MiB)" % (bucket, record_key(prefix)))
        try:
            doc = json.loads(got[0])
            if not all(isinstance(doc.get(k), str) for k in ("name", "token", "volume_id")):
                raise ValueError("no name, token or volume_id")
            return doc
        except (ValueError, AttributeError) as e:
            raise VolumeError(grpc.StatusCode.INTERNAL, "s3://%s/%s is not an owner record "
                              "(%s): remove it or fix it by hand"
                              % (bucket, record_key(prefix), e))

    def _nested(self, client, bucket, prefix):
        """The prefixes under prefix (itself excluded) that owner records hold."""
        out = []
        for o in client.list_objects(bucket, prefix=RECORDS + prefix):
            if o.key.endswith("/" + RECORD_NAME) and o.key != record_key(prefix):
                out.append(o.key[len(RECORDS):-len(RECORD_NAME)])
        return out

    def _holder(self, client, bucket, prefix):
        """The record of another volume whose prefix holds or is held in prefix: (its prefix,
        its record), else None. One GET per enclosing prefix, one LIST under it."""
        parts = prefix[:-1].split("/")
        for n in range(1, len(parts)):
            outer = "/".join(parts[:n]) + "/"
            rec = self._record(client, bucket, outer)
            if rec:
                return outer, rec
        for inner in self._nested(client, bucket, prefix):
            rec = self._record(client, bucket, inner)
            if rec:
                return inner, rec
        return None

    @_guard
    def CreateVolume(self, req, ctx):
        if not req.name:
            raise invalid("name is missing")
        if not req.volume_capabilities:
            raise invalid("volume_capabilities are missing")
        params = dict(req.parameters)
        unknown = sorted(k for k in params if k not in CONTEXT_KEYS and k != "prefixTemplate"
                         and not k.startswith("csi.storage.k8s.io/"))
        if unknown:
            raise invalid("unknown StorageClass parameter(s) %s (known: prefixTemplate, %s)"
                          % (", ".join(unknown), ", ".join(sorted(CONTEXT_KEYS - {"prefix"}))))
        if "prefix" in params:
            raise invalid("StorageClass parameter prefix: a claim's prefix comes from "
                          "prefixTemplate")
        bucket = params.get("bucketName")
        if not bucket:
            raise invalid("StorageClass parameter bucketName is missing")
        if req.capacity_range.limit_bytes < 0 or req.capacity_range.required_bytes < 0 or (
                req.capacity_range.limit_bytes and
                req.capacity_range.limit_bytes < req.capacity_range.required_bytes):
            raise VolumeError(grpc.StatusCode.OUT_OF_RANGE, "capacity_range %s: limit_bytes "
                              "is below required_bytes" % _capacity(req))
        prefix = expand(params.get("prefixTemplate", DEFAULT_TEMPLATE), params, req.name)
        context = {k: v for k, v in params.items() if k in CONTEXT_KEYS and k != "prefix"}
        context["bucketName"] = bucket
        context["prefix"] = prefix
        # what the node would refuse, refused now (its code: INVALID_ARGUMENT here)
        why = self._check_caps(req.volume_capabilities, context)
        if why:
            raise invalid(why)
        client = self.client_factory(params, dict(req.secrets))
        from .. import _s3flash
        with self._locks.hold((bucket, prefix), "a CreateVolume or DeleteVolume of s3://%s/%s is "
                              "in progress" % (bucket, prefix)):
            for _ in range(3):  # a record made meanwhile by another process: decide again
                try:
                    rec = self._record(client, bucket, prefix)
                    held = self._holder(client, bucket, prefix) if rec is None else None
                except VolumeError:
                    raise
                except Exception as e:  # the bucket exists and the credentials may read it
                    raise _s3_code(e, bucket, "reading the owner records")
                if rec is not None:
                    return self._existing(req, bucket, prefix, rec, context)
                if held:
                    raise VolumeError(grpc.StatusCode.FAILED_PRECONDITION,
                                      "prefix %s of bucket %s overlaps prefix %s of volume %s "
                                      "(a retained volume, or one not deleted yet): a claim's "
                                      "prefix is its own (its record: s3://%s/%s)"
                                      % (prefix, bucket, held[0], held[1]["name"], bucket,
                                         record_key(held[0])))
                token = pysecrets.token_hex(8)
                volume_id = "%s/%s#%s" % (bucket, prefix, token)
                doc = {"name": req.name, "token": token, "volume_id": volume_id,
                       "capacity": _capacity(req), "context": context,
                       "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
                try:
                    client.native.put_object(bucket, record_key(prefix),
                                             json.dumps(doc, sort_keys=True).encode(),
                                             if_none_match="*",
                                             content_type="application/json")
                except _s3flash.S3Exception as e:
                    if getattr(e, "status", "") == "S3F_ERR_PRECONDITION_FAILED":
                        continue  # another CreateVolume's record came first
                    raise _s3_code(e, bucket, "writing the owner record")
                # a server that ignores If-None-Match: the record read back is the one in force
                rec = self._record(client, bucket, prefix)
                if rec and rec["token"] == token:
                    log.info("volume %s: s3://%s/%s (%s)", req.name, bucket, prefix, volume_id)
                    return pb.CreateVolumeResponse(volume=pb.Volume(
                        volume_id=volume_id, capacity_bytes=0, volume_context=context))
            raise VolumeError(grpc.StatusCode.ABORTED, "prefix %s of bucket %s: its owner "
                              "record changed under each of 3 tries" % (prefix, bucket))

    @staticmethod
    def _existing(req, bucket, prefix, rec, context):
        """CreateVolume of a prefix with a record: the same volume (its name) again, if the
        request is compatible with it."""
        if rec["name"] != req.name:
            raise VolumeError(grpc.StatusCode.FAILED_PRECONDITION,
                              "prefix %s of bucket %s belongs to volume %s (a retained volume, "
                              "or one not deleted yet; its record: s3://%s/%s): a claim's "
                              "prefix is its own, so prefixTemplate must tell claims apart "
                              "(${pv.name})" % (prefix, bucket, rec["name"], bucket,
                                                record_key(prefix)))
        # the volume's capacity is what its first request asked for (an S3 prefix has no
        # size: capacity_bytes 0, unknown)
        had = rec.get("capacity", {}).get("required_bytes", 0)
        want = _capacity(req)
        if want["required_bytes"] > had or (want["limit_bytes"] and had > want["limit_bytes"]):
            raise VolumeError(grpc.StatusCode.ALREADY_EXISTS,
                              "volume %s exists with capacity %d bytes, not within %s"
                              % (req.name, had, want))
        if rec.get("context") != context:
            raise VolumeError(grpc.StatusCode.ALREADY_EXISTS,
                              "volume %s exists with other parameters" % req.name)
        return pb.CreateVolumeResponse(volume=pb.Volume(
            volume_id=rec["volume_id"], capacity_bytes=0, volume_context=rec["context"]))

    @_guard
    def DeleteVolume(self, req, ctx):
        if not req.volume_id:
            raise invalid("volume_id is missing")
        parsed = parse_id(req.volume_id)
        if not parsed:
            log.info("DeleteVolume %s: not a volume this controller made: nothing to delete",
                     req.volume_id)
            return pb.DeleteVolumeResponse()
        bucket, prefix, token = parsed
        client = self.client_factory({}, dict(req.secrets))
        from .. import _s3flash

        def ours():
            """Whether the record at prefix is this volume's (legacy ids: no record)."""
            rec = self._record(client, bucket, prefix)
            if token:
                return rec is not None and rec["token"] == token
            return rec is None

        n = 0
        with self._locks.hold((bucket, prefix), "a CreateVolume or DeleteVolume of s3://%s/%s "
                              "is in progress" % (bucket, prefix)):
            try:
                if not ours():
                    log.info("DeleteVolume %s: s3://%s/%s is not this volume's (deleted "
                             "already, or another volume's now): nothing deleted",
                             req.volume_id, bucket, prefix)
                    return pb.DeleteVolumeResponse()
                skip = tuple(self._nested(client, bucket, prefix))
                batch = []
                for o in client.list_objects(bucket, prefix=prefix):
                    if o.key.startswith(skip):
                        continue  # another volume's prefix, nested in this one
                    batch.append(o.key)
                    if len(batch) == DELETE_BATCH:
                        if not ours():  # a DeleteVolume beside this one finished first
                            return pb.DeleteVolumeResponse()
                        client.native.delete_objects(bucket, batch)
                        n += len(batch)
                        batch = []
                if batch and ours():
                    client.native.delete_objects(bucket, batch)
                    n += len(batch)
                if token and ours():
                    client.delete_object(bucket, record_key(prefix))
            except _s3flash.S3Exception as e:
                if "NoSuchBucket" in str(e):
                    return pb.DeleteVolumeResponse()
                raise VolumeError(grpc.StatusCode.INTERNAL, "deleting s3://%s/%s: %s after %d "
                                  "objects" % (bucket, prefix, e, n))
        log.info("volume %s deleted (%d objects%s)", req.volume_id, n,
                 ", %d nested prefixes of other volumes kept" % len(skip) if skip else "")
        return pb.DeleteVolumeResponse()

    @_guard
    def ValidateVolumeCapabilities(self, req, ctx):
        if not req.volume_id:
            raise invalid("volume_id is missing")
        if not req.volume_capabilities:
            raise invalid("volume_capabilities are missing")
        parsed = parse_id(req.volume_id)
        if not parsed:
            raise VolumeError(grpc.StatusCode.NOT_FOUND, "volume %s: not a volume id of this "
                              "driver (BUCKET/PREFIX#TOKEN)" % req.volume_id)
        bucket, prefix, token = parsed
        client = self.client_factory(dict(req.parameters), dict(req.secrets))
        try:
            rec = self._record(client, bucket, prefix)
            if not token:  # the earlier form: the volume is its bucket's prefix
                next(iter(client.list_objects(bucket, prefix=prefix, max_keys=1)), None)
        except VolumeError:
            raise
        except Exception as e:
            raise _s3_code(e, bucket, "reading the owner record")
        if token and (rec is None or rec["token"] != token):
            raise VolumeError(grpc.StatusCode.NOT_FOUND, "volume %s does not exist (s3://%s/%s "
                              "has %s)" % (req.volume_id, bucket, record_key(prefix),
                                           "no owner record" if rec is None else
                                           "another volume's record"))
        context = rec["context"] if token else (
            dict(req.volume_context) or {"bucketName": bucket, "prefix": prefix})
        why = self._check_caps(req.volume_capabilities, context)
        if why:
            return pb.ValidateVolumeCapabilitiesResponse(message=why)
        return pb.ValidateVolumeCapabilitiesResponse(
            confirmed=pb.ValidateVolumeCapabilitiesResponse.Confirmed(
                volume_context=req.volume_context,
                volume_capabilities=req.volume_capabilities,
                parameters=req.parameters))
