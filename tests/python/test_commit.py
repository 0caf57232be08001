"""The commit protocol on its own (s3flash/_commit.py's CommitLog) against Ceph RGW: commit
records and their sequence numbers, the conditional PUT that lets one writer of two take a
number, retention, and the records it refuses. No tensors and no checkpointer: a "save" here
is one object uploaded under step-N/<save id>/ and the record naming it.

Races are made certain at the socket: tests/servers/faultproxy.py holds one writer's commit
PUT until the other has committed, then lets it go (no sleeps)."""

import json
import time
import uuid
import warnings

import pytest

import s3flash
from s3flash import _commit, _s3flash
from s3flash._commit import CommitLog, ConcurrentWriterError, record_error

ONE = "0000000000000001.json"


@pytest.fixture
def prefix(request):
    return f"{request.node.name[:40]}-{uuid.uuid4().hex[:8]}/".replace("[", "-").replace("]", "")


@pytest.fixture
def client(region, endpoint):
    return s3flash.S3Client(region, endpoint=endpoint)


def _log(client, bucket, prefix, **kw):
    kw.setdefault("conditional_put", True)
    return CommitLog(client, bucket, prefix, **kw)


def _save(log, step, payload=b"state"):
    """One object under step-N/<save id>/ and the manifest naming it: (manifest, save id)."""
    sid = _commit._new_save_id()
    key = f"{log.prefix}{_commit._step_dir(step)}{sid}/state.pt"
    info = log._client.upload(log.bucket, key, payload)
    obj = {"name": "state.pt", "key": key, "size": len(payload), "crc32": "00000000",
           "etag": _commit._norm_etag(info.get("etag"))}
    return log.new_manifest(step, sid, [obj]), sid


def _commit_save(log, step, payload=b"state"):
    """A save committed as the next number: (seq, record key, manifest)."""
    manifest, sid = _save(log, step, payload)
    seq, key, _ = log.commit(manifest, sid)
    return seq, key, manifest


def _record(s3, bucket, key):
    return json.loads(s3.get_object(Bucket=bucket, Key=key)["Body"].read())


def _wait_for(cond, timeout=60):
    deadline = time.monotonic() + timeout
    while not cond():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_records_name_their_save_in_sequence(client, bucket, prefix, s3):
    """Each commit takes the next number; its record (commits/<16 digits>.json) carries that
    number, the step, the save id, the writer and every object, and is valid while they are
    there."""
    log = _log(client, bucket, prefix)
    got = [_commit_save(log, step) for step in (10, 5, 10)]
    assert [seq for seq, _, _ in got] == [1, 2, 3]
    assert [k for _, k, _ in got] == [f"{prefix}commits/{n:016d}.json" for n in (1, 2, 3)]
    rec = _record(s3, bucket, got[1][1])
    assert rec == got[1][2]
    assert (rec["format"], rec["version"], rec["seq"], rec["step"]) == \
        ("s3flash.checkpoint", 2, 2, 5)
    assert rec["writer"]["id"] == log.writer_id
    valid = log.valid_commits()
    assert [(c.seq, c.step) for c in valid] == [(1, 10), (2, 5), (3, 10)]
    assert all(c.error == "" for c in valid)


def _race(proxy, a, b):
    """A (through `proxy`) lists, chooses a number and its commit PUT is held at the proxy
    while B commits; then A's PUT goes. Returns (A's commit, B's commit, B's manifest)."""
    import threading
    ma, sa = _save(a, 7, b"from A")
    proxy.set_faults([{"match": {"method": "PUT", "path": r"/commits/\d{16}"},
                       "action": "delay", "seconds": 600, "max_count": 1}])
    done = {}

    def commit_a():
        try:
            done["a"] = a.commit(ma, sa)
        except BaseException as e:  # noqa: BLE001  (asserted below)
            done["a"] = e

    t = threading.Thread(target=commit_a)
    t.start()
    try:
        _wait_for(lambda: any(e["rule"] == 0 for e in proxy.stats()["log"]))
        got_b = _commit_save(b, 7, b"from B")
    finally:
        proxy.release(0)
        t.join(120)
    assert not t.is_alive()
    assert not isinstance(done["a"], BaseException), done["a"]
    return done["a"], got_b[:2], got_b[2]


def test_two_writers_race_for_one_number(region, bucket, prefix, s3, proxy, client):
    """Writer A has listed (no commit yet), chosen number 1, and its PUT of
    commits/0000000000000001.json is held at the proxy while writer B commits 1. Released, A's
    PUT carries If-None-Match: * and RGW refuses it (412): exactly one writer has number 1,
    B's record is not overwritten, and A commits under 2."""
    a = _log(s3flash.S3Client(region, endpoint=proxy.endpoint), bucket, prefix)
    b = _log(client, bucket, prefix)
    with warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always", s3flash.ConcurrentWriterWarning)
        (seq_a, key_a, _), (seq_b, key_b), mb = _race(proxy, a, b)
    assert (seq_b, key_b) == (1, f"{prefix}commits/{ONE}")
    assert (seq_a, key_a) == (2, f"{prefix}commits/{2:016d}.json")
    # A found the number it was committing under taken: a second live writer, said once
    said = [str(w.message) for w in warned if w.category is s3flash.ConcurrentWriterWarning]
    assert len(said) == 1 and f"writer {b.writer_id} " in said[0], said
    # number 1 is B's record, byte for byte what B wrote; 2 is A's
    assert _record(s3, bucket, key_b) == mb
    assert _record(s3, bucket, key_a)["writer"]["id"] == a.writer_id
    puts = [e for e in proxy.stats()["log"] if e["method"] == "PUT" and "/commits/" in e["path"]]
    assert [p["path"].rsplit("/", 1)[-1] for p in puts] == [ONE, f"{2:016d}.json"]
    assert [c.seq for c in b.valid_commits()] == [1, 2]


def test_a_record_saved_twice(client, bucket, prefix, s3):
    """The same record put again under its number is refused (412) and leaves it as it was;
    the same save committed again is a new commit under the next number, and the newer one
    is the latest."""
    log = _log(client, bucket, prefix)
    seq, key, manifest = _commit_save(log, 3)
    body = json.dumps(manifest, indent=1).encode()
    with pytest.raises(_s3flash.S3Exception) as ei:
        client.native.put_object(bucket, key, body + b" ", if_none_match="*")
    assert getattr(ei.value, "status", "") == "S3F_ERR_PRECONDITION_FAILED", ei.value
    assert s3.get_object(Bucket=bucket, Key=key)["Body"].read() == body
    seq2, key2, _ = log.commit(dict(manifest), manifest["save_id"])
    assert (seq, seq2) == (1, 2) and key2 != key
    valid = log.valid_commits()
    assert [c.seq for c in valid] == [1, 2]
    assert valid[-1].manifest["save_id"] == manifest["save_id"] == valid[0].manifest["save_id"]


def test_without_the_conditional_put_names_carry_the_save_id(region, bucket, prefix, s3,
                                                             proxy, client):
    """conditional_put=False (a server that ignores If-None-Match): two writers racing for
    number 1 both take it, each record named by its save id, so neither overwrites the
    other; both are valid, in the order of their names."""
    a = _log(s3flash.S3Client(region, endpoint=proxy.endpoint), bucket, prefix,
             conditional_put=False)
    b = _log(client, bucket, prefix, conditional_put=False)
    (seq_a, key_a, _), (seq_b, key_b), mb = _race(proxy, a, b)
    assert seq_a == seq_b == 1 and key_a != key_b
    sa = _record(s3, bucket, key_a)["save_id"]
    assert key_a.endswith(f"/{1:016d}-{sa}.json")
    assert key_b.endswith(f"/{1:016d}-{mb['save_id']}.json")
    assert _record(s3, bucket, key_b) == mb
    assert [c.key for c in a.valid_commits()] == sorted([key_a, key_b])


def test_the_probe_finds_the_conditional_put(client, bucket, prefix):
    """conditional_put=None: the first commit finds out once (a probe object under commits/,
    removed) that RGW refuses a second If-None-Match PUT, and names commits by number."""
    log = _log(client, bucket, prefix, conditional_put=None)
    seq, key, _ = _commit_save(log, 0)
    assert log.conditional_put is True and key.endswith(f"/{ONE}")
    left = [o.key for o in client.list_objects(bucket, prefix + "commits/")]
    assert left == [key]


def test_retention_keeps_n_and_never_the_newest(client, bucket, prefix):
    """keep_remote=2 after this writer's fifth commit: its commits 4 and 5 stay, 1 to 3 go
    with their objects. A commit of another writer newer than the one retention runs after
    (6) is never touched, nor are its objects, even with retention_window_s=0."""
    a = _log(client, bucket, prefix, keep_remote=2, retention_window_s=0)
    b = _log(client, bucket, prefix)
    mine = [_commit_save(a, step) for step in range(1, 6)]
    seq6, key6, m6 = _commit_save(b, 99)
    assert [s for s, _, _ in mine] == [1, 2, 3, 4, 5] and seq6 == 6
    a.retain(mine[-1][1])
    assert [c.seq for c in a.valid_commits()] == [4, 5, 6]
    left = {o.key for o in client.list_objects(bucket, prefix + "step-")}
    named = {o["key"] for _, _, m in mine[3:] + [(seq6, key6, m6)] for o in m["objects"]}
    assert left == named
    # keep 1: the commit retention runs after is kept, and so is the newer one
    a.keep_remote = 1
    a.retain(mine[-1][1])
    assert [c.seq for c in a.valid_commits()] == [5, 6]


def test_retention_spares_another_writers_young_commit(client, bucket, prefix):
    """Another writer's commit is removed only once older than retention_window_s (by the
    server's clock); this writer's own superseded commits go at once."""
    other = _log(client, bucket, prefix)
    _, okey, om = _commit_save(other, 1)
    a = _log(client, bucket, prefix, keep_remote=1)  # the default window: 3600 s
    keys = [_commit_save(a, s)[1] for s in (2, 3)]
    a.retain(keys[-1])
    assert [c.key for c in a.valid_commits()] == [okey, keys[-1]]
    a.retention_window_s = 0
    a.retain(keys[-1])
    assert [c.key for c in a.valid_commits()] == [keys[-1]]
    assert not list(client.list_objects(bucket, om["objects"][0]["key"]))


def test_malformed_and_foreign_records_are_refused(client, bucket, prefix):
    """Records under commits/ that are not this protocol's (not JSON, another format, a
    number other than their name's, a step that is no integer, an object gone) are refused,
    each with what is wrong; none is a commit, and the next commit takes a number past them
    (never overwriting one)."""
    log = _log(client, bucket, prefix)
    ok, _ = _save(log, 1)
    gone = dict(ok, objects=[dict(ok["objects"][0], key=prefix + "step-x/none")])
    bad = {
        1: b"not json {",
        2: json.dumps({"format": "delta.log", "seq": 2, "step": 1}).encode(),
        3: json.dumps(dict(ok, seq=7)).encode(),
        4: json.dumps(dict(ok, seq=4, step="4")).encode(),
        5: json.dumps(dict(gone, seq=5)).encode(),
    }
    for n, body in bad.items():
        client.native.put_object(bucket, f"{prefix}commits/{n:016d}.json", body)
    got = {c.seq: c for c in log.all_commits()}
    assert sorted(got) == [1, 2, 3, 4, 5]
    assert not any(c.valid for c in got.values())
    assert "not a JSON object" in got[1].error
    assert "format 'delta.log', not 's3flash.checkpoint'" in got[2].error
    assert "sequence number '7', not 3 (its name's)" in got[3].error
    assert "step '4' is not an integer" in got[4].error
    assert f"{prefix}step-x/none is gone" in got[5].error
    assert log.valid_commits() == []
    seq, key, _ = log.commit(ok, ok["save_id"])
    assert seq == 6
    assert [c.seq for c in log.valid_commits()] == [6]


def test_record_error_names_what_is_wrong():
    """record_error on parsed records (no server): "" for one of the protocol's, else why."""
    good = {"format": "s3flash.checkpoint", "seq": 3, "step": 9, "objects": []}
    assert record_error(good, 3) == ""
    assert record_error(None, 3).startswith("not a JSON object")
    assert record_error([1, 2], 3).startswith("not a JSON object")
    assert record_error({}, 3).startswith("format 'None'")
    assert record_error(dict(good, seq=4), 3) == "sequence number '4', not 3 (its name's)"
    assert record_error(dict(good, step=None), 3) == "step 'None' is not an integer"
    # version 1 (step-N/manifest.json): no number, the step of its folder
    assert record_error({"format": "s3flash.checkpoint", "step": 9}, None, 9) == ""
    assert record_error({"format": "s3flash.checkpoint", "step": 8}, None, 9) == \
        "step '8', not 9 (its folder's)"


def test_a_removed_object_fails_the_commit_check(client, bucket, prefix, s3):
    """After its record is written, verify() finds an object it names gone (another writer's
    retention) and raises ConcurrentWriterError naming that writer and the missing key."""
    other = _log(client, bucket, prefix)
    _commit_save(other, 1)
    log = _log(client, bucket, prefix)
    seq, key, manifest = _commit_save(log, 2)
    obj = manifest["objects"][0]["key"]
    s3.delete_object(Bucket=bucket, Key=obj)
    with pytest.raises(ConcurrentWriterError) as ei:
        log.verify(manifest, key, time.monotonic())
    assert ei.value.missing == [obj]
    assert [w["id"] for w in ei.value.writers] == [other.writer_id]
    assert f"{obj} is gone" in str(ei.value) and f"writer {other.writer_id}" in str(ei.value)
