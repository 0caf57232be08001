"""`s3flash-csi controller`: CreateVolume gives each PersistentVolumeClaim its own prefix of
the bucket that the StorageClass names (parameters bucketName, prefixTemplate); DeleteVolume
(called by the external-provisioner when the StorageClass's reclaimPolicy is Delete) removes
the prefix's objects. Retain: the provisioner never calls DeleteVolume and the objects stay.

The volume id is `BUCKET/PREFIX` (BUCKET may be an access point ARN); the volume context carries the attributes the node reads
(bucketName, prefix and the StorageClass's other volume attributes). DeleteVolume is given no
StorageClass parameters, so the controller reaches the store through its own configuration
(AWS_ENDPOINT_URL, AWS_REGION, the credentials chain, or the provisioner secret's key_id and
access_key): a StorageClass's endpointUrl must name the same store."""

import logging
import os
import re

import grpc

from .node import _guard
from .options import CONTEXT_KEYS, VolumeError, invalid, split_bucket
from .proto import pb

log = logging.getLogger("s3flash-csi.controller")
DEFAULT_TEMPLATE = "${pvc.namespace}/${pvc.name}/"
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


class Controller:
    def __init__(self, client_factory=None):
        self.client_factory = client_factory or self._client

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

    def _check_caps(self, caps):
        for c in caps:
            if c.WhichOneof("access_type") == "block":
                raise invalid("block volumes are not served: an S3 prefix is a file system")

    @_guard
    def CreateVolume(self, req, ctx):
        if not req.name:
            raise invalid("name is missing")
        if not req.volume_capabilities:
            raise invalid("volume_capabilities are missing")
        self._check_caps(req.volume_capabilities)
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
        prefix = expand(params.get("prefixTemplate", DEFAULT_TEMPLATE), params, req.name)
        client = self.client_factory(params, dict(req.secrets))
        try:  # the bucket exists and the credentials may list it
            next(iter(client.list_objects(bucket, prefix=prefix, max_keys=1)), None)
        except Exception as e:
            text = str(e)
            code = grpc.StatusCode.NOT_FOUND if "NoSuchBucket" in text else \
                grpc.StatusCode.PERMISSION_DENIED if "AccessDenied" in text else \
                grpc.StatusCode.UNAVAILABLE
            raise VolumeError(code, "bucket %s: %s" % (bucket, text))
        context = {k: v for k, v in params.items() if k in CONTEXT_KEYS and k != "prefix"}
        context["bucketName"] = bucket
        context["prefix"] = prefix
        log.info("volume %s: s3://%s/%s", req.name, bucket, prefix)
        return pb.CreateVolumeResponse(volume=pb.Volume(
            volume_id="%s/%s" % (bucket, prefix), capacity_bytes=0, volume_context=context))

    @_guard
    def DeleteVolume(self, req, ctx):
        if not req.volume_id:
            raise invalid("volume_id is missing")
        bucket, prefix = split_bucket(req.volume_id) or ("", "")  # an ARN has slashes
        if not bucket or not prefix or not prefix.endswith("/"):
            log.info("DeleteVolume %s: not a volume this controller made: nothing to delete",
                     req.volume_id)
            return pb.DeleteVolumeResponse()
        client = self.client_factory({}, dict(req.secrets))
        n = 0
        try:
            for o in client.list_objects(bucket, prefix=prefix):
                client.delete_object(bucket, o.key)
                n += 1
        except Exception as e:
            if "NoSuchBucket" in str(e):
                return pb.DeleteVolumeResponse()
            raise VolumeError(grpc.StatusCode.INTERNAL, "deleting s3://%s/%s: %s after %d "
                              "objects" % (bucket, prefix, e, n))
        log.info("volume %s deleted (%d objects)", req.volume_id, n)
        return pb.DeleteVolumeResponse()

    def ValidateVolumeCapabilities(self, req, ctx):
        if not req.volume_id:
            ctx.abort(grpc.StatusCode.INVALID_ARGUMENT, "volume_id is missing")
        for c in req.volume_capabilities:
            if c.WhichOneof("access_type") == "block":
                return pb.ValidateVolumeCapabilitiesResponse(message="block volumes are not "
                                                                     "served")
        return pb.ValidateVolumeCapabilitiesResponse(
            confirmed=pb.ValidateVolumeCapabilitiesResponse.Confirmed(
                volume_context=req.volume_context,
                volume_capabilities=req.volume_capabilities))
