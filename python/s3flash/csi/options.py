"""A volume's settings from a NodePublishVolume request: volume_context keys (Mountpoint's
driver's names where it has them), the PersistentVolume's mountOptions (mount_flags) checked
against an allow-list of `s3flash mount` flags, the access mode and readonly. Everything here
is validated before anything is mounted; a refusal is a VolumeError(INVALID_ARGUMENT, ...),
or FAILED_PRECONDITION for a capability beyond the driver's (check_capability)."""

import hashlib
import json
import re

import grpc

from .proto import pb
from .cgroups import parse_size

# kubelet's keys in volume_context (podInfoOnMount, tokenRequests): per pod, never part of
# what makes two publishes "the same arguments"
POD_INFO_KEYS = ("csi.storage.k8s.io/pod.name", "csi.storage.k8s.io/pod.namespace",
                 "csi.storage.k8s.io/pod.uid", "csi.storage.k8s.io/serviceAccount.name",
                 "csi.storage.k8s.io/ephemeral", "csi.storage.k8s.io/serviceAccount.tokens")
TOKENS_KEY = "csi.storage.k8s.io/serviceAccount.tokens"

# volume_context keys the driver reads
CONTEXT_KEYS = {"bucketName", "prefix", "region", "endpointUrl", "forcePathStyle", "cache",
                "cacheMaxSize", "authenticationSource", "stsRegion", "roleArn",
                # Mountpoint's driver's (docs/KUBERNETES.md's table says what each means here)
                "cacheEmptyDirSizeLimit", "cacheEmptyDirMedium", "cacheEphemeralStorageClassName",
                "cacheEphemeralStorageResourceRequest", "mountpointPodServiceAccountName",
                "mountpointContainerResourcesRequestsCpu",
                "mountpointContainerResourcesRequestsMemory",
                "mountpointContainerResourcesLimitsCpu", "mountpointContainerResourcesLimitsMemory"}
# Mountpoint's `cache` kinds; any other value of `cache` names a persistent cache
CACHE_EMPTY_DIR, CACHE_EPHEMERAL = "emptyDir", "ephemeral"
# the emptyDir caches under the cache root: one per daemon, removed with it (not a NAME: a
# name starts with a letter or digit)
EMPTY_DIR_ROOT = ".emptydir"
# Mountpoint's driver keeps an emptyDir's cache at 95% of its sizeLimit (its daemon overshoots
# its target by 1-2%, and kubelet evicts a pod whose emptyDir outgrows the limit)
EMPTY_DIR_SAFETY = 0.95
# Mountpoint's default memory target: 95% of its (cgroup-limited) memory
MEMORY_TARGET_SHARE = 0.95
MIB = 1 << 20

# mountpointEnv.NAME: Mountpoint's driver's allow-list of the variables a volume may give its
# own daemon (pkg/driver/node/envprovider: userEnvAllowlist), with the values taken here
ENV_PREFIX = "mountpointEnv."
_PROXY_URL = re.compile(r"^https?://([A-Za-z0-9._~%!$&'()*+,;=:-]+@)?[A-Za-z0-9.\-\[\]:]+/?$")
_NO_PROXY = re.compile(r"^[A-Za-z0-9.*:/\[\]_, -]{0,4096}$")
USER_ENV = {"HTTPS_PROXY": _PROXY_URL, "NO_PROXY": _NO_PROXY}

_NUM = re.compile(r"^[0-9]{1,10}$")
_OCTAL = re.compile(r"^0?[0-7]{3,4}$")
_SECONDS = re.compile(r"^[0-9]{1,8}(\.[0-9]{1,3})?$")
_SIZE = re.compile(r"^[0-9]{1,12}[KMGT]?$")
_REGION = re.compile(r"^[a-z0-9-]{1,40}$")
_HOST_PATH = r"[A-Za-z0-9.\-\[\]:]+(/[A-Za-z0-9._~\-/]*)?$"
_URL = re.compile(r"^https?://" + _HOST_PATH)
# the daemon's OTLP push is plain HTTP (src/core/metrics_export.c): an https URL is refused here,
# at publish, rather than by the daemon at mount time
_OTLP_URL = re.compile(r"^http://" + _HOST_PATH)
_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.\-_]{2,62}$")
# an access point, Outposts, Multi-Region or Object Lambda access point ARN (the mount
# resolves it as the endpoint rules say; split_bucket checks its shape)
_ARN = re.compile(r"^arn:aws[a-z-]*:s3(-outposts|-object-lambda)?:[a-z0-9-]*:[0-9]{12}:"
                  r"[A-Za-z0-9._:/-]{1,200}$")
# Mountpoint's request options
_SSE = re.compile(r"^(AES256|aws:kms|aws:kms:dsse)$")
_KMS_KEY = re.compile(r"^[A-Za-z0-9:/_.-]{1,2048}$")
_STORAGE_CLASS = re.compile(r"^[A-Z_]{1,64}$")
_OWNER = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
_ATTEMPTS = re.compile(r"^([1-9]|[1-9][0-9]|100)$")
_USER_AGENT = re.compile(r"^[A-Za-z0-9 ._/()+;:,=-]{1,256}$")
# S3's canned ACLs of objects (x-amz-acl)
_ACL = re.compile(r"^(private|public-read|public-read-write|authenticated-read|aws-exec-read|"
                  r"bucket-owner-read|bucket-owner-full-control)$")
# a JSON object (checked further by _encryption_context)
_JSON_OBJECT = re.compile(r"^\{.*\}$")
_CACHE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
# a size in Mountpoint's MiB (a bare number), or with s3flash's explicit unit (10G)
_MIB = re.compile(r"^[0-9]{1,12}$")
# a Kubernetes resource.Quantity (500Mi, 1G, 1.5Gi, 2e9, 100m)
_QUANTITY = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)(Ki|Mi|Gi|Ti|Pi|Ei|k|M|G|T|P|E|m|"
                       r"[eE][+-]?[0-9]+)?$")
_QUANTITY_UNITS = {"": 1, "Ki": 1 << 10, "Mi": 1 << 20, "Gi": 1 << 30, "Ti": 1 << 40,
                   "Pi": 1 << 50, "Ei": 1 << 60, "k": 10 ** 3, "M": 10 ** 6, "G": 10 ** 9,
                   "T": 10 ** 12, "P": 10 ** 15, "E": 10 ** 18}
_IFACE = re.compile(r"^[A-Za-z0-9._:-]{1,15}$")

# `s3flash mount` flags a PersistentVolume may set: name -> value pattern (None: a switch)
FLAGS = {
    "allow-delete": None, "allow-overwrite": None, "allow-rename": None,
    "incremental-upload": None,
    "allow-other": None, "read-only": None, "debug": None,
    "uid": _NUM, "gid": _NUM, "dir-mode": _OCTAL, "file-mode": _OCTAL,
    "metadata-ttl": _SECONDS, "negative-metadata-ttl": _SECONDS,
    # Mountpoint's MiB (a bare number) become s3flash's explicit M; "10G" is s3flash's own
    "max-cache-size": _SIZE, "memory-target": _SIZE, "max-threads": _NUM, "part-size": _SIZE,
    # the rest of mount-s3's flags, Mountpoint's names, units and meaning (docs/CLI.md)
    "read-part-size": _SIZE, "write-part-size": _SIZE, "maximum-throughput-gbps": _NUM,
    "upload-checksums": re.compile(r"^(crc32c|crc64nvme|off)$"),
    "bucket-type": re.compile(r"^(general-purpose|directory)$"),
    "requester-pays": None, "transfer-acceleration": None, "dual-stack": None,
    "infer-content-type": None, "no-sign-request": None, "allow-root": None,
    "debug-crt": None, "no-log": None, "bind": _IFACE,
    "cache-xz": _BUCKET, "cache-block-size": _NUM, "otlp-export-interval": _NUM,
    # server-side encryption and request options, Mountpoint's names and meaning
    "sse": _SSE, "sse-kms-key-id": _KMS_KEY, "storage-class": _STORAGE_CLASS,
    "expected-bucket-owner": _OWNER, "aws-max-attempts": _ATTEMPTS,
    "user-agent-prefix": _USER_AGENT,
    # the CLI's: the canned ACL of the objects written, the KMS encryption context, S3 Bucket
    # Keys, and SSE-C (its key comes from the publish's secrets: creds.sse_customer_key)
    "acl": _ACL, "sse-kms-encryption-context": _JSON_OBJECT, "bucket-key-enabled": None,
    "sse-c": re.compile(r"^AES256$"),
    # metrics (docs/METRICS.md): OTLP/HTTP push to a collector, as Mountpoint's CSI driver's
    # metrics example sets it (an http(s) URL, no user or password), and the periodic log line
    "otlp-endpoint": _OTLP_URL, "log-metrics": None,
}
# mountOptions that Mountpoint's driver takes as flags and s3flash as volume attributes
FLAG_ATTRIBUTES = {"region": "region", "prefix": "prefix", "endpoint-url": "endpointUrl",
                   "force-path-style": "forcePathStyle"}
# spellings of other drivers and of kubelet: name -> (s3flash flag or None to drop it, value)
ALIASES = {"ro": ("read-only", None), "rw": (None, None)}
# what Mountpoint's driver drops from mountOptions (pkg/mountpoint/args.go: ParseArgs)
DROPPED = {"foreground", "-f", "help", "-h", "version", "-v"}
# flags that may be given more than once (each value one --NAME VALUE)
REPEATED = {"bind"}
# values that Mountpoint reads in MiB (s3flash: explicit units)
IN_MIB = {"max-cache-size", "memory-target"}
# Mountpoint's metadata-ttl words
TTL_WORDS = {"indefinite": "31536000", "minimal": "1"}
# flags that would let a volume reach the node's files or processes: refused by name
UNSAFE = {"log-file": "names a host file (the daemon logs to the mounter's log)",
          "profile": "reads the node's AWS config files (use nodePublishSecretRef or "
                     "authenticationSource: pod)",
          "log-directory": "names a host directory (the daemon logs to the mounter's log, the "
                           "container's: kubectl logs)",
          "ca-bundle": "names a host file (as in Mountpoint's driver; set AWS_CA_BUNDLE in the "
                       "mounter's environment)",
          "-o": "(fstab's options) is not a mount option (as in Mountpoint's driver)",
          "auto-unmount": "cannot apply: the node makes the mount and the daemon serves its "
                          "descriptor (mount-s3 refuses it on a FUSE descriptor too, so "
                          "Mountpoint's driver cannot mount it either)",
          "metrics-listen": "is the mounter's to decide (the node serves every volume's "
                            "metrics on its --metrics-port)",
          "metrics-allow-remote": "is the mounter's to decide (the daemons listen on "
                                  "loopback only)",
          "sse-c-key": "names a host file (the SSE-C key is the nodePublishSecretRef's "
                       "sse_customer_key)"}


class VolumeError(Exception):
    def __init__(self, code, message):
        super().__init__(message)
        self.code = code
        self.message = message


def invalid(msg):
    return VolumeError(grpc.StatusCode.INVALID_ARGUMENT, msg)


def _truthy(v, what):
    if v.lower() in ("true", "1", "yes"):
        return True
    if v.lower() in ("false", "0", "no", ""):
        return False
    raise invalid("%s must be true or false, not %r" % (what, v))


def _encryption_context(v):
    """The mount option's JSON object of strings, compact (as the daemon's flag)."""
    try:
        doc = json.loads(v)
    except ValueError as e:
        raise invalid("mount option sse-kms-encryption-context is not JSON (%s): %r" % (e, v))
    if not isinstance(doc, dict) or not all(isinstance(x, str) for x in doc.values()):
        raise invalid("mount option sse-kms-encryption-context must be a JSON object of "
                      "strings, like {\"project\": \"x\"}, not %r" % v)
    out = json.dumps(doc, separators=(",", ":"), ensure_ascii=True)
    if len(out) > 2048:
        raise invalid("mount option sse-kms-encryption-context is %d bytes as JSON (at most "
                      "2048)" % len(out))
    return out


def quantity(v, what):
    """A Kubernetes quantity (resource.Quantity) in bytes, rounded up as its Value() is."""
    from fractions import Fraction
    m = _QUANTITY.match(v or "")
    if not m:
        raise invalid("%s %r is not a Kubernetes quantity like 500Mi or 2Gi" % (what, v))
    num, unit = Fraction(m.group(1)), m.group(3) or ""
    if unit == "m":
        num /= 1000
    elif unit[:1] in ("e", "E") and unit not in _QUANTITY_UNITS:
        num *= Fraction(10) ** int(unit[1:])
    else:
        num *= _QUANTITY_UNITS[unit]
    n = -(-num.numerator // num.denominator)
    if n > 1 << 62:
        raise invalid("%s %r is too large" % (what, v))
    return n


def user_env(ctx):
    """The volume's mountpointEnv.NAME attributes: {NAME: value}, Mountpoint's allow-list."""
    env = {}
    for k, v in ctx.items():
        if not k.startswith(ENV_PREFIX):
            continue
        name = k[len(ENV_PREFIX):]
        if name not in USER_ENV:
            raise invalid("environment variable not allowed: %s (allowed: %s, as in "
                          "Mountpoint's driver)" % (k, ", ".join(sorted(USER_ENV))))
        if not USER_ENV[name].fullmatch(v):
            raise invalid("%s %r is not %s" % (k, v, "an http(s):// URL of a proxy (no path)"
                                                if name == "HTTPS_PROXY" else
                                                "a list of host names, domains and addresses"))
        env[name] = v
    return env


def _exclusive(flags):
    """Mount-s3's exclusions, refused before anything is mounted."""
    for a, b in (("allow-root", "allow-other"), ("part-size", "read-part-size"),
                 ("part-size", "write-part-size")):
        if a in flags and b in flags:
            raise invalid("mount options %s and %s exclude each other" % (a, b))
    if "no-log" in flags:
        for f in ("debug", "debug-crt", "log-metrics"):
            if f in flags:
                raise invalid("mount options no-log and %s exclude each other" % f)
    if "otlp-export-interval" in flags and "otlp-endpoint" not in flags:
        raise invalid("mount option otlp-export-interval needs otlp-endpoint")
    for f in ("maximum-throughput-gbps", "otlp-export-interval", "cache-block-size"):
        if f in flags and int(flags[f]) < 1:
            raise invalid("mount option %s must be at least 1, not %s" % (f, flags[f]))


def _empty_dir_limit(ctx, flags):
    """cache: emptyDir's bound, as Mountpoint's driver sets it (pkg/driver/node/node.go): an
    explicit max-cache-size above cacheEmptyDirSizeLimit is refused, one above 95% of it is
    lowered to that, and without one the cache gets 95% of the limit."""
    medium = ctx.get("cacheEmptyDirMedium", "")
    if medium not in ("", "Memory"):
        raise invalid("unknown value for cacheEmptyDirMedium: %r. Only \"Memory\" supported"
                      % medium)
    if medium == "Memory":
        raise invalid("cacheEmptyDirMedium: Memory (a tmpfs cache counted in the Mountpoint "
                      "Pod's memory) is not served: the daemons live in the node pod; leave "
                      "it out for a cache on the node's disk")
    limit = ctx.get("cacheEmptyDirSizeLimit")
    if not limit:
        return
    n = quantity(limit, "cacheEmptyDirSizeLimit")
    safe = int(n * EMPTY_DIR_SAFETY) // MIB
    if safe < 1:
        raise invalid("cacheEmptyDirSizeLimit %s leaves no room for a cache (95%% of it is "
                      "under 1 MiB)" % limit)
    if "max-cache-size" in flags:
        asked = parse_size(flags["max-cache-size"])
        if asked > (n // MIB) * MIB:
            raise invalid("max-cache-size (%d MiB) exceeds cacheEmptyDirSizeLimit (%s = %d "
                          "MiB). Reduce max-cache-size or increase cacheEmptyDirSizeLimit."
                          % (asked // MIB, limit, n // MIB))
        if asked <= safe * MIB:
            return
    flags["max-cache-size"] = "%dM" % safe


def _resources(ctx, flags):
    """The Mountpoint Pod's attributes: its memory limit bounds the volume's daemon (its
    default memory-target is 95% of it, as Mountpoint's is of its cgroup's); the bytes, or
    None. Requests and the CPU limit are checked; the daemons share the node pod's CPU."""
    if ctx.get("mountpointPodServiceAccountName"):
        raise invalid("mountpointPodServiceAccountName is not served: there is no Mountpoint "
                      "Pod, and the volume's identity would silently be the driver's; use "
                      "authenticationSource: pod or a nodePublishSecretRef")
    for k in ("mountpointContainerResourcesRequestsCpu",
              "mountpointContainerResourcesRequestsMemory",
              "mountpointContainerResourcesLimitsCpu", "mountpointContainerResourcesLimitsMemory"):
        if ctx.get(k):
            quantity(ctx[k], k)
    limit = ctx.get("mountpointContainerResourcesLimitsMemory")
    if not limit:
        return None
    n = quantity(limit, "mountpointContainerResourcesLimitsMemory")
    target = int(n * MEMORY_TARGET_SHARE) // MIB
    if "memory-target" in flags:
        if parse_size(flags["memory-target"]) > n:
            raise invalid("memory-target %s exceeds mountpointContainerResourcesLimitsMemory %s"
                          % (flags["memory-target"], limit))
    elif target < 32:
        raise invalid("mountpointContainerResourcesLimitsMemory %s is below the daemon's "
                      "least memory target (32 MiB, and 95%% of the limit is its target)"
                      % limit)
    else:
        flags["memory-target"] = "%dM" % target
    return n


def split_bucket(path):
    """(bucket, rest) of 'BUCKET/REST' (REST may be ""), where BUCKET is a bucket name or
    an ARN, whose resource has slashes of its own (accesspoint/NAME, outpost/ID/...): split
    as the library splits s3://ARN/KEY. None for an ARN of another shape."""
    if path.startswith("arn:"):
        from .. import _s3flash
        try:
            bucket, rest = _s3flash.parse_uri("s3://" + path)
        except Exception:
            return None
        if not _ARN.match(bucket) or path != (bucket + "/" + rest if rest or
                                              path.endswith("/") else bucket):
            return None
        return bucket, rest
    bucket, _, rest = path.partition("/")
    return bucket, rest


def parse_flag(raw):
    """'--uid=1000', 'uid 1000', 'allow-delete' -> ('uid', '1000') / ('allow-delete', None)."""
    s = raw.strip()
    if s.startswith("--"):
        s = s[2:]
    m = re.match(r"^([A-Za-z0-9-]+)(?:[= ]\s*(.*))?$", s)
    if not m:
        raise invalid("mount option %r is not NAME or NAME=VALUE" % raw)
    return m.group(1).lower(), (None if m.group(2) is None else m.group(2).strip())


def check_capability(cap):
    """A volume capability this driver serves, else a VolumeError: FAILED_PRECONDITION for
    one beyond the driver's (the spec's "Exceeds capabilities": a block volume, another file
    system, the access modes of the SINGLE_NODE_MULTI_WRITER node capability, which is not
    advertised, a volume_mount_group without the VOLUME_MOUNT_GROUP one), INVALID_ARGUMENT for
    one left out. The node (NodePublishVolume) and the controller (CreateVolume,
    ValidateVolumeCapabilities, through Volume) refuse the same capabilities."""
    beyond = lambda msg: VolumeError(grpc.StatusCode.FAILED_PRECONDITION, msg)  # noqa: E731
    if cap.WhichOneof("access_type") is None:
        raise invalid("volume_capability has no access_type (mount)")
    if cap.WhichOneof("access_type") != "mount":
        raise beyond("only mount volumes are served (access_type %s): an S3 prefix is a "
                     "file system" % cap.WhichOneof("access_type"))
    M = pb.VolumeCapability.AccessMode
    mode = cap.access_mode.mode
    if mode == M.UNKNOWN:
        raise invalid("volume_capability.access_mode is missing")
    if mode in (M.SINGLE_NODE_SINGLE_WRITER, M.SINGLE_NODE_MULTI_WRITER):
        raise beyond("access mode %s needs the node capability SINGLE_NODE_MULTI_WRITER, "
                     "which this driver does not advertise (use SINGLE_NODE_WRITER or a "
                     "MULTI_NODE mode)" % M.Mode.Name(mode))
    if cap.mount.fs_type not in ("", "fuse", "s3flash", "fuse.s3flash"):
        raise beyond("fs_type %r: this driver mounts s3flash only" % cap.mount.fs_type)
    if cap.mount.volume_mount_group:
        raise beyond("volume_mount_group is not served (the node capability "
                     "VOLUME_MOUNT_GROUP is not advertised): use the mount option gid")


class Volume:
    """The validated settings of one publish. `daemon_flags` are the `s3flash mount` flags
    (no credentials, no host paths); `key_material` is everything that must match for two
    publishes to share one daemon."""

    def __init__(self, req, cache_root):
        ctx = dict(req.volume_context)
        unknown = [k for k in ctx if k not in CONTEXT_KEYS and k not in POD_INFO_KEYS
                   and not k.startswith(ENV_PREFIX)]
        if unknown:
            raise invalid("unknown volume attribute(s) %s (known: %s, %sNAME)"
                          % (", ".join(sorted(unknown)), ", ".join(sorted(CONTEXT_KEYS)),
                             ENV_PREFIX))
        self.env = user_env(ctx)
        cap = req.volume_capability
        if not req.HasField("volume_capability"):
            raise invalid("volume_capability is missing")
        check_capability(cap)
        M = pb.VolumeCapability.AccessMode
        reader_only = cap.access_mode.mode in (M.SINGLE_NODE_READER_ONLY,
                                               M.MULTI_NODE_READER_ONLY)

        self.bucket = ctx.get("bucketName", "")
        if not self.bucket:
            raise invalid("volume attribute bucketName is missing (the bucket to mount)")
        if not (_BUCKET.match(self.bucket) if not self.bucket.startswith("arn:")
                else split_bucket(self.bucket) == (self.bucket, "")):
            raise invalid("bucketName %r is not a bucket name nor an access point ARN"
                          % self.bucket)
        attrs = {k: ctx[k] for k in ("prefix", "region", "endpointUrl", "forcePathStyle")
                 if k in ctx}
        flags = {}
        cache_option = False
        for raw in cap.mount.mount_flags:
            # "a,b,c" is three options; a JSON value with commas is one
            one = " " in raw or "{" in raw
            for part in raw.split(",") if "," in raw and not one else [raw]:
                name, value = parse_flag(part)
                if name in ALIASES and value is None:
                    name, value = ALIASES[name]
                    if name is None:
                        continue
                if name in DROPPED:
                    continue
                if name in ("metadata-ttl", "negative-metadata-ttl") and value in TTL_WORDS:
                    value = TTL_WORDS[value]
                if name in UNSAFE:
                    raise invalid("mount option %r %s" % (name, UNSAFE[name]))
                if name == "cache":
                    # Mountpoint's driver v2: the path is ignored and the volume gets an
                    # emptyDir cache (its docs/CACHING.md, "cache flag via mountOptions")
                    cache_option = True
                    continue
                if name in FLAG_ATTRIBUTES:
                    attrs[FLAG_ATTRIBUTES[name]] = "true" if value is None else value
                    continue
                if name not in FLAGS:
                    raise invalid("unknown mount option %r (allowed: %s)"
                                  % (name, ", ".join(sorted(list(FLAGS) + list(FLAG_ATTRIBUTES)))))
                if name == "sse-c" and value in (None, ""):
                    value = "AES256"   # `sse-c` alone, or the CLI's `sse-c AES256`
                pat = FLAGS[name]
                if pat is None and value not in (None, "", "true"):
                    raise invalid("mount option %r takes no value (got %r)" % (name, value))
                if pat is not None and (value is None or not pat.match(value)):
                    raise invalid("mount option %r needs a value like %s, not %r"
                                  % (name, pat.pattern, value))
                if name == "sse-kms-encryption-context":
                    value = _encryption_context(value)
                if name in IN_MIB and _MIB.match(value):
                    value += "M"    # Mountpoint's MiB, in s3flash's explicit unit
                if name in REPEATED:
                    flags.setdefault(name, [])
                    if value not in flags[name]:
                        flags[name].append(value)
                    continue
                flags[name] = value if pat is not None else None
        if req.readonly or reader_only:
            flags["read-only"] = None
        if "read-only" in flags:
            for f in ("allow-delete", "allow-overwrite", "allow-rename", "incremental-upload"):
                flags.pop(f, None)  # a read-only publish of a writable volume
        self.read_only = "read-only" in flags
        if "sse" in flags and "sse-c" in flags:
            raise invalid("mount options sse and sse-c exclude each other (SSE-C is a key of "
                          "your own instead of S3's or KMS's)")
        kms_only = [f for f in ("sse-kms-key-id", "sse-kms-encryption-context",
                                "bucket-key-enabled") if f in flags]
        if kms_only and not flags.get("sse", "").startswith("aws:kms"):
            raise invalid("mount option(s) %s need sse aws:kms or sse aws:kms:dsse"
                          % ", ".join(kms_only))
        self.sse_c = "sse-c" in flags
        _exclusive(flags)

        prefix = attrs.get("prefix", "")
        if prefix:
            if prefix.startswith("/") or "//" in prefix or ".." in prefix.split("/"):
                raise invalid("prefix %r has an empty or '..' component" % prefix)
            if not prefix.endswith("/"):
                prefix += "/"
        self.prefix = prefix
        self.region = attrs.get("region", "")
        if self.region and not _REGION.match(self.region):
            raise invalid("region %r is not a region name" % self.region)
        self.endpoint = attrs.get("endpointUrl", "")
        if self.endpoint and not _URL.match(self.endpoint):
            raise invalid("endpointUrl %r is not an http(s) URL" % self.endpoint)
        self.path_style = _truthy(attrs.get("forcePathStyle", "false"), "forcePathStyle")

        self.cache_name = ctx.get("cache", "")
        if cache_option:
            if self.cache_name:
                raise invalid("the cache is configured both with the mount option cache and "
                              "the volume attribute cache: remove the mount option (as "
                              "Mountpoint's driver asks)")
            self.cache_name = CACHE_EMPTY_DIR
        if self.cache_name == CACHE_EPHEMERAL:
            for k in ("cacheEphemeralStorageClassName", "cacheEphemeralStorageResourceRequest"):
                if not ctx.get(k):
                    raise invalid("%s must be given with cache: ephemeral" % k)
            quantity(ctx["cacheEphemeralStorageResourceRequest"],
                     "cacheEphemeralStorageResourceRequest")
            raise invalid("cache: ephemeral is not served: it is a claim of StorageClass %s "
                          "made for each Mountpoint Pod, and s3flash-csi runs no pod per "
                          "volume; use cache: emptyDir with cacheEmptyDirSizeLimit (a cache "
                          "on the node's cache root that ends with the mount), or cache: NAME "
                          "(a cache kept across mounts)" % ctx["cacheEphemeralStorageClassName"])
        for k in ("cacheEphemeralStorageClassName", "cacheEphemeralStorageResourceRequest"):
            if k in ctx:
                raise invalid("%s needs cache: ephemeral" % k)
        for k in ("cacheEmptyDirSizeLimit", "cacheEmptyDirMedium"):
            if k in ctx and self.cache_name != CACHE_EMPTY_DIR:
                raise invalid("%s needs cache: emptyDir" % k)
        if self.cache_name and self.cache_name != CACHE_EMPTY_DIR and \
                not _CACHE_NAME.match(self.cache_name):
            raise invalid("cache %r must be emptyDir, ephemeral or a name (letters, digits, "
                          ". _ -), not a path: the directory is the driver's cache root / "
                          "that name" % self.cache_name)
        if ctx.get("cacheMaxSize"):
            if not self.cache_name:
                raise invalid("cacheMaxSize needs the attribute cache")
            if not _SIZE.match(ctx["cacheMaxSize"]):
                raise invalid("cacheMaxSize %r is not a size like 10G" % ctx["cacheMaxSize"])
            flags["max-cache-size"] = ctx["cacheMaxSize"]
        elif "max-cache-size" in flags and not self.cache_name:
            raise invalid("mount option max-cache-size needs the volume attribute cache")
        if "cache-block-size" in flags and not self.cache_name and "cache-xz" not in flags:
            raise invalid("mount option cache-block-size needs a cache (the volume attribute "
                          "cache, or the mount option cache-xz)")
        self.empty_dir = self.cache_name == CACHE_EMPTY_DIR
        if self.empty_dir:
            _empty_dir_limit(ctx, flags)
        self.cache_root = cache_root
        self.memory_limit = _resources(ctx, flags)

        self.auth = ctx.get("authenticationSource", "driver") or "driver"
        if self.auth not in ("driver", "pod"):
            raise invalid("authenticationSource must be driver or pod, not %r" % self.auth)
        self.sts_region = ctx.get("stsRegion", "") or self.region
        self.role_arn = ctx.get("roleArn", "")
        self.context = ctx
        self.flags = flags

        self.daemon_flags = []
        for name in sorted(flags):
            if name == "allow-root":
                # the node mounts with user_id=0 and no allow_other: root alone may enter,
                # which is what allow_root gives a mount that root owns
                continue
            for value in flags[name] if name in REPEATED else [flags[name]]:
                self.daemon_flags.append("--" + name)
                if value is not None:
                    self.daemon_flags.append(value)
        if self.region:
            self.daemon_flags += ["--region", self.region]
        if self.endpoint:
            self.daemon_flags += ["--endpoint-url", self.endpoint]
        if self.path_style:
            self.daemon_flags.append("--force-path-style")

    @property
    def source(self):
        return "%s/%s" % (self.bucket, self.prefix) if self.prefix else self.bucket

    def digest(self, volume_id, target):
        """What a second publish of `target` must repeat to be 'the same arguments' (the
        volume, its attributes and flags; not the pod's token or the secrets' values)."""
        doc = {"volume_id": volume_id, "target": target, "flags": self.flags,
               "context": {k: v for k, v in self.context.items() if k not in POD_INFO_KEYS}}
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()

    def share_key(self, volume_id, identity):
        """Publishes with the same key share one daemon: the same volume, mount flags and
        credentials."""
        doc = {"volume_id": volume_id, "source": self.source, "flags": self.daemon_flags, "cache": self.cache_name,
               "identity": identity}
        if self.env:
            doc["env"] = self.env
        return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:32]


# the flags a Volume adds from its attributes (FLAG_ATTRIBUTES' s3flash spellings)
_ATTRIBUTE_FLAGS = {"region": _REGION, "endpoint-url": _URL, "force-path-style": None}


def check_daemon_request(source, flags):
    """The mounter's own check of what the node asks it to run (R10: it trusts no caller):
    `source` is BUCKET or BUCKET/PREFIX/ as Volume.source makes it, `flags` only the
    `s3flash mount` flags a Volume makes (FLAGS with values their patterns allow, none of
    UNSAFE). VolumeError(INVALID_ARGUMENT) naming the first that is not."""
    if not isinstance(source, str) or not isinstance(flags, list):
        raise invalid("a mount request needs a source and a list of flags")
    parts = split_bucket(source)
    if parts is None or not (parts[0].startswith("arn:") or _BUCKET.match(parts[0])):
        raise invalid("source %r is not a bucket name nor an access point ARN" % source)
    prefix = parts[1]
    if prefix and (not prefix.endswith("/") or "//" in prefix or ".." in prefix.split("/")):
        raise invalid("source %r has an empty or '..' prefix component" % source)
    i = 0
    while i < len(flags):
        tok = flags[i]
        if not isinstance(tok, str) or not tok.startswith("--"):
            raise invalid("mount flag %r is not --NAME" % (tok,))
        name = tok[2:]
        if name in UNSAFE:
            raise invalid("mount flag --%s %s" % (name, UNSAFE[name]))
        if name not in FLAGS and name not in _ATTRIBUTE_FLAGS:
            raise invalid("mount flag --%s is not one a volume may set" % name)
        pat = FLAGS.get(name, _ATTRIBUTE_FLAGS.get(name))
        i += 1
        if pat is None:
            continue
        value = flags[i] if i < len(flags) else None
        if not isinstance(value, str) or not pat.match(value):
            raise invalid("mount flag --%s needs a value like %s, not %r"
                          % (name, pat.pattern, value))
        i += 1
