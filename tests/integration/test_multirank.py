"""Many ranks on several hosts: torchrun (gloo) across 2 compute namespaces, 2 ranks on each,
every rank saving and loading its shard through s3flash.dcp to one store, a Ceph RGW of its
own on the store host (tests/servers/netns.sh: `up`, `rgw start`).

The state is DTensors sharded by rows over all ranks (tests/integration/multirank_worker.py),
so each rank writes its own object and a load with another world size reshards. Checked:
  - 4 ranks save, the key layout is one object per rank plus .metadata, 4 ranks load it back;
  - then, in the same run, rank 3 SIGKILLed while writing a second checkpoint: both torchruns
    fail, the new checkpoint has no .metadata and does not load, the first one is untouched;
  - 2 ranks (one per host) load the 4-rank checkpoint (resharded) and fail to load the killed one
    (the first checkpoint intact: it loads, every value checked).
Runs in the plain build's pass only (the extension of a sanitized build needs its runtime
preloaded: tests/run.sh does that for tests/python, not for torchrun's children).
"""
import json
import os
import subprocess
import sys
import tempfile

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from netns import Netns, rank_logs, s3_harness, torchrun, unavailable  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PREFIX = "s3fmr"
BUCKET = "multirank"
HOSTS = ["c1", "c2"]


def build_dir():
    return os.environ.get("S3FLASH_BUILD_DIR", os.path.join(ROOT, "build"))


def why_skip():
    why = unavailable()
    if why:
        return why
    info = os.path.join(build_dir(), "meson-info", "intro-buildoptions.json")
    if os.path.exists(info):
        opts = {o["name"]: o["value"] for o in json.load(open(info))}
        if opts.get("b_sanitize", "none") not in ("none", "", []):   # a list in newer meson
            return "sanitized build: runs in the plain build's pass"
    try:
        import torch.distributed  # noqa: F401
    except ImportError:
        return "torch is not installed"
    return None


pytestmark = pytest.mark.skipif(why_skip() is not None, reason=str(why_skip()))


class Store:
    """The namespaces, the store's RGW and the environment every rank gets."""

    def __init__(self, tmp):
        self.tmp = tmp
        self.net = Netns(len(HOSTS), prefix=PREFIX)
        self.rgw_dir = tempfile.mkdtemp(prefix="s3flash-mr-rgw.", dir="/var/tmp")
        os.rmdir(self.rgw_dir)
        out = self.net.script("rgw", "start", self.rgw_dir, timeout=180)
        renv = dict(line.replace("export ", "", 1).split("=", 1)
                    for line in out.splitlines() if line.startswith("export "))
        # devenv.sh takes the build directory relative to the source root
        pypath = subprocess.run(["bash", os.path.join(ROOT, "tests", "python", "devenv.sh"),
                                 os.path.relpath(build_dir(), ROOT)], capture_output=True,
                                text=True, check=True)
        self.endpoint = renv["S3FLASH_TEST_ENDPOINT"]
        env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        env.update(S3FLASH_TEST_ENDPOINT=self.endpoint,
                   AWS_ACCESS_KEY_ID=renv["S3FLASH_TEST_ACCESS_KEY"],
                   AWS_SECRET_ACCESS_KEY=renv["S3FLASH_TEST_SECRET_KEY"],
                   AWS_REGION=renv["S3FLASH_TEST_REGION"],
                   AWS_CONFIG_FILE=os.path.join(tmp, "no-config"),
                   AWS_SHARED_CREDENTIALS_FILE=os.path.join(tmp, "no-credentials"),
                   PYTHONPATH=pypath.stdout.strip(), S3FLASH_LOG="info")
        self.env = env
        self.port = 29400
        self.harness("create", "")

    def harness(self, op, prefix):
        return s3_harness(self.net, "c1", self.endpoint, self.env, op, BUCKET, prefix)

    def torchrun(self, name, hosts, nproc, *args):
        self.port += 1
        out = os.path.join(self.tmp, name)
        res = torchrun(self.net, hosts, nproc, [*args, "--out", out], self.env,
                       os.path.join(self.tmp, name + "-logs"), self.port, timeout=150)
        return res, out

    def close(self):
        try:
            self.net.script("rgw", "stop", self.rgw_dir, timeout=120)
        finally:
            self.net.down()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    s = Store(str(tmp_path_factory.mktemp("multirank")))
    yield s
    s.close()


def ck(name):
    return f"s3://{BUCKET}/ck/{name}"


def describe(res, logs_dir=None):
    text = "\n".join(f"--- {h} rc {rc}\n{out[-3000:]}" for h, rc, out in res)
    if logs_dir and os.path.isdir(logs_dir):
        for r, log in sorted(rank_logs(logs_dir).items()):
            text += f"\n--- rank {r} stderr\n{log[-2000:]}"
    return text


def test_multirank_save_kill_and_resharded_load(store):
    # 4 ranks on 2 hosts save step-1 and load it back, then save step-2, in which rank 3 dies
    # (SIGKILL) while writing its data
    res, out = store.torchrun("save", HOSTS, 2, f"save={ck('step-1')}", f"load={ck('step-1')}",
                              f"save={ck('step-2')}", "--kill-rank", "3")
    for r in range(4):
        rep = json.load(open(os.path.join(out, f"rank-{r}-0-save.json")))
        assert rep["world"] == 4 and rep["bytes"] == 2 * 16 * 256 * 4, describe(res)  # 16 rows
        assert json.load(open(os.path.join(out, f"rank-{r}-1-load.json")))["op"] == "load"
        assert not os.path.exists(os.path.join(out, f"rank-{r}-2-save.json"))
    assert all(rc != 0 for _, rc, _ in res), describe(res)
    assert "Signal 9 (SIGKILL)" in dict((h, o) for h, _, o in res)["c2"], describe(res)
    keys = store.harness("list", "ck/step-1/")
    assert sorted(keys) == ["ck/step-1/.metadata"] + [
        f"ck/step-1/__{r}_0.distcp" for r in range(4)]
    keys2 = store.harness("list", "ck/step-2/")
    assert "ck/step-2/.metadata" not in keys2 and "ck/step-2/__3_0.distcp" not in keys2
    # half-way: the ranks of c1 had written their data (write_data has no collective; they
    # fail later, in the gather that precedes .metadata)
    assert {"ck/step-2/__0_0.distcp", "ck/step-2/__1_0.distcp"} <= set(keys2), keys2

    # 2 ranks, one per host: step-1 resharded from 4 ranks to 2; step-2 does not load
    res, out = store.torchrun("reshard", HOSTS, 1, f"load={ck('step-1')}",
                              f"fail={ck('step-2')}")
    assert all(rc == 0 for _, rc, _ in res), describe(res, out + "-logs")
    for r in range(2):
        rep = json.load(open(os.path.join(out, f"rank-{r}-0-load.json")))
        assert rep["world"] == 2 and rep["bytes"] == 2 * 32 * 256 * 4    # 32 rows each now
        assert json.load(open(os.path.join(out, f"rank-{r}-1-fail.json")))["op"] == "fail"
