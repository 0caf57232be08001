"""mount(2), umount2(2), /proc/self/mountinfo and the unix-socket messages (JSON, file
descriptors by SCM_RIGHTS) between the node process and the mounter."""

import ctypes
import ctypes.util
import json
import os
import socket

MS_RDONLY, MS_NOSUID, MS_NODEV, MS_REMOUNT, MS_BIND = 1, 2, 4, 32, 4096
MNT_DETACH = 2
_libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def _check(rc, what):
    if rc != 0:
        e = ctypes.get_errno()
        raise OSError(e, "%s: %s" % (what, os.strerror(e)))


def mount(source, target, fstype, flags, data=""):
    _check(_libc.mount(source.encode(), target.encode(),
                       fstype.encode() if fstype else None, ctypes.c_ulong(flags),
                       data.encode() if data else None),
           "mount %s on %s" % (source, target))


def umount(target, detach=False):
    _check(_libc.umount2(target.encode(), MNT_DETACH if detach else 0), "umount " + target)


def _unescape(s):
    return s.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n") \
            .replace("\\134", "\\")


def mounts():
    """[(mount point, fstype, source, super options, major:minor)] of this mount namespace."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            a, _, b = line.rstrip("\n").partition(" - ")
            fields, rest = a.split(" "), b.split(" ")
            out.append((_unescape(fields[4]), rest[0], _unescape(rest[1]),
                        rest[2] if len(rest) > 2 else "", fields[2]))
    return out


READ_AHEAD_KIB = 1024  # src/mount/mount.h MNT_READ_AHEAD_KIB: the largest FUSE request


def raise_read_ahead(path, kib=READ_AHEAD_KIB):
    """The kernel's read-ahead of the FUSE mount at path (what `s3flash mount` does for a
    mount it makes itself); False where sysfs cannot be written (not root, read-only /sys)."""
    dev = [m[4] for m in mounts() if m[0] == path]
    if not dev:
        return False
    try:
        with open("/sys/class/bdi/%s/read_ahead_kb" % dev[-1], "w") as f:
            f.write(str(kib))
        return True
    except OSError:
        return False


def is_mounted(path):
    return any(m[0] == path for m in mounts())


def fuse_mount(target, fsname, read_only, allow_other, uid=0, gid=0):
    """Open /dev/fuse and mount it on target (as fusermount3 does for a root caller);
    returns the descriptor, which the file system's daemon serves."""
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    try:
        st = os.stat(target)
        data = "fd=%d,rootmode=%o,user_id=%d,group_id=%d,default_permissions" % (
            fd, st.st_mode & 0o170000, uid, gid)
        if allow_other:
            data += ",allow_other"
        flags = MS_NOSUID | MS_NODEV | (MS_RDONLY if read_only else 0)
        mount(fsname, target, "fuse.s3flash", flags, data)
    except BaseException:
        os.close(fd)
        raise
    return fd


def bind(source, target, read_only):
    mount(source, target, "", MS_BIND)
    if read_only:
        try:
            mount("none", target, "", MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV)
        except OSError:
            umount(target, detach=True)
            raise


# ---- messages ----
MSG_MAX = 1 << 20


def send(sock, doc, fds=()):
    data = json.dumps(doc).encode()
    if fds:
        socket.send_fds(sock, [data], list(fds))
    else:
        sock.sendall(data)


def recv(sock):
    """(doc, [fds]) of one message (SOCK_SEQPACKET); (None, []) at the end."""
    data, fds, _flags, _addr = socket.recv_fds(sock, MSG_MAX, 4)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds


def call(path, doc, fds=(), timeout=120):
    """One request to the mounter's socket and its answer."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.settimeout(timeout)
    try:
        s.connect(path)
        send(s, doc, fds)
        reply, extra = recv(s)
        for fd in extra:
            os.close(fd)
        if reply is None:
            raise OSError("the mounter at %s closed the connection" % path)
        return reply
    finally:
        s.close()


def peer_cred(sock):
    """(pid, uid, gid) of the process at the other end of a unix socket (SO_PEERCRED: as it
    was when it connected)."""
    import struct
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)


def peer_pid(sock):
    return peer_cred(sock)[0]
