#!/usr/bin/env python3
"""One measured run of bench/model_load.py: a safetensors model loaded (or saved) by one
loader, in a fresh process, so that its peak RSS is its own.

  python3 bench/compare/model_worker.py '<json spec>'

The scenarios, their measurement (bench/compare/worker.py's Phase: wall, CPU of this process
and the children it reaped, peak RSS as VmHWM reset at the phase's start) and their output
(`RESULT {json}` lines, a skip for a loader that cannot be imported) are compare's worker's;
this file adds the model scenarios to it:

  model_prepare  the synthetic model (bf16, transformer-like, ~300 tensors) written as
                 safetensors in 1 shard and in N shards + model.safetensors.index.json under
                 spec["dir"], and a manifest (name, dtype, shape, CRC-32 of the bytes) that
                 every load is checked against
  model_load     one loader (spec["client"]) of the 1-shard file or of the sharded model:
                 timed until every tensor is in memory; time to the first tensor where the
                 loader hands tensors over one by one
  model_first    s3flash.safetensors.safe_open + get_tensor of the first tensor in file
                 order: what a layer-by-layer loader waits for
  model_save     the model saved by one saver (s3flash.safetensors.save_file, s3torchconnector's
                 writer or boto3's upload_fileobj of safetensors.torch.save's bytes)
"""
import io
import json
import os
import shutil
import sys
import tempfile
import time
import zlib
from concurrent.futures import ThreadPoolExecutor

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
import worker  # noqa: E402  (compare's worker: Phase, emit, Env, main)
from worker import MiB, Phase, emit, sd_bytes  # noqa: E402
from client_bench import Child  # noqa: E402  (a CLI run under /usr/bin/time: its peak RSS)

INDEX = "model.safetensors.index.json"
ONE = "model.safetensors"


# -- the model -----------------------------------------------------------------------------
def layout(total):
    """[(name, shape)] of a decoder-only transformer of about `total` bytes in bf16: embeddings
    and lm_head (vocab x hidden), per layer q/k/v/o (hidden^2), a gated MLP (gate, up:
    hidden x inter; down: inter x hidden) and two norms (hidden), a final norm. 33 layers:
    300 tensors. The hidden size is the largest multiple of 64 whose layers take at most 3/4
    of the total; the vocabulary takes the rest."""
    layers = 33
    hidden = 64
    while layers * (4 * (hidden + 64) ** 2 + 3 * (hidden + 64) * 8 * (hidden + 64) // 3) * 2 \
            <= total * 3 // 4:
        hidden += 64
    inter = 8 * hidden // 3 // 64 * 64 or 64
    per_layer = (4 * hidden * hidden + 3 * hidden * inter + 2 * hidden) * 2
    vocab = max(1, (total - layers * per_layer - hidden * 2) // (4 * hidden))
    out = [("model.embed_tokens.weight", (vocab, hidden))]
    for i in range(layers):
        p = f"model.layers.{i}."
        out += [(p + "input_layernorm.weight", (hidden,))]
        out += [(p + f"self_attn.{w}_proj.weight", (hidden, hidden)) for w in "qkvo"]
        out += [(p + "post_attention_layernorm.weight", (hidden,)),
                (p + "mlp.gate_proj.weight", (inter, hidden)),
                (p + "mlp.up_proj.weight", (inter, hidden)),
                (p + "mlp.down_proj.weight", (hidden, inter))]
    out += [("model.norm.weight", (hidden,)), ("lm_head.weight", (vocab, hidden))]
    return out


def make_model(total, seed=33):
    """The model's tensors (random bits as bf16, every page touched), in file order."""
    import torch
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, shape in layout(total):
        n = 1
        for d in shape:
            n *= d
        sd[name] = torch.randint(0, 256, (2 * n,), dtype=torch.uint8, generator=g) \
            .view(torch.bfloat16).view(shape)
    return sd


def shard_names(n):
    return [f"model-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]


def split(sd, n):
    """The tensors in file order, cut into n shards of about equal bytes (as save_pretrained's
    max_shard_size does): [dict] of n."""
    total = sd_bytes(sd)
    shards, cur, done = [], {}, 0
    for k, t in sd.items():
        b = t.numel() * t.element_size()
        if cur and done + b / 2 > total * (len(shards) + 1) / n and len(shards) < n - 1:
            shards.append(cur)
            cur = {}
        cur[k] = t
        done += b
    shards.append(cur)
    while len(shards) < n:
        shards.append({})
    return shards


def crc(t):
    import torch
    return zlib.crc32(t.reshape(-1).view(torch.uint8).numpy().data) if t.numel() else 0


def model_prepare(env, spec):
    from safetensors.torch import save_file
    sd = make_model(spec["size"])
    d = spec["dir"]
    os.makedirs(os.path.join(d, "1"), exist_ok=True)
    save_file(sd, os.path.join(d, "1", ONE), metadata={"format": "pt"})
    n = spec["shards"]
    os.makedirs(os.path.join(d, str(n)), exist_ok=True)
    weight_map = {}
    for name, part in zip(shard_names(n), split(sd, n)):
        save_file(part, os.path.join(d, str(n), name), metadata={"format": "pt"})
        weight_map.update((k, name) for k in part)
    with open(os.path.join(d, str(n), INDEX), "w") as f:
        json.dump({"metadata": {"total_size": sd_bytes(sd)}, "weight_map": weight_map}, f,
                  indent=2)
    manifest = {k: [str(t.dtype), list(t.shape), crc(t)] for k, t in sd.items()}
    with open(os.path.join(d, "manifest.json"), "w") as f:
        json.dump(manifest, f)
    files = {s: sum(os.path.getsize(os.path.join(d, s, x)) for x in os.listdir(
        os.path.join(d, s)) if x.endswith(".safetensors")) for s in ("1", str(n))}
    emit({"phase": "prepare", "n": len(sd), "bytes": sd_bytes(sd), "files": files})


def check(got, manifest):
    """'' when the tensors are the manifest's (names, dtypes, shapes, bytes), else what
    differs."""
    if set(got) != set(manifest):
        miss, extra = set(manifest) - set(got), set(got) - set(manifest)
        return f"MISMATCH: {len(miss)} tensors missing, {len(extra)} unexpected"
    bad = [k for k, t in got.items()
           if [str(t.dtype), list(t.shape), crc(t)] != manifest[k]]
    return f"MISMATCH: {len(bad)} tensors differ, e.g. {bad[0]}" if bad else ""


# -- loaders: each returns run(ph) -> {name: tensor}; what it does before (imports, clients)
# is not timed, as in compare's worker ---------------------------------------------------------
def where(env, spec):
    """(the object to load: the 1-shard file or the index, the model's prefix URI)."""
    base = f"s3://{env.bucket}/{env.prefix}/{spec['shards']}/"
    return base + (ONE if spec["shards"] == 1 else INDEX), base


def s3flash_kwargs(fn, env):
    """The endpoint keywords the s3flash function takes (the environment has them too)."""
    import inspect
    params = inspect.signature(fn).parameters
    kw = {}
    if "region" in params:
        kw["region"] = env.region
    if "endpoint" in params:
        kw["endpoint"] = env.url
    if "s3client_config" in params:
        kw["s3client_config"] = env.s3flash_config(False)
    return kw


def load_s3flash(env, spec):
    """load_file of the 1-shard file; load_sharded of the index (its shards in parallel)."""
    from s3flash.safetensors import load_file, load_sharded
    uri, _ = where(env, spec)
    fn = load_file if spec["shards"] == 1 else load_sharded
    kw = s3flash_kwargs(fn, env)
    return lambda ph: fn(uri, **kw)


def load_runai(env, spec):
    """SafetensorsStreamer over the model's *.safetensors files (listed under its prefix with
    the streamer's own list_safetensors, as vLLM does); the endpoint, keys, path-style
    addressing and RUNAI_STREAMER_CONCURRENCY come from the environment (bench/model_load.py
    sets them)."""
    from runai_model_streamer import SafetensorsStreamer
    from runai_model_streamer.safetensors_streamer.safetensors_streamer import \
        list_safetensors
    uri, base = where(env, spec)

    def run(ph):
        paths = [uri] if spec["shards"] == 1 else sorted(list_safetensors(base))
        out = {}
        with SafetensorsStreamer() as s:
            s.stream_files(paths)
            for name, t in s.get_tensors():
                if not out:
                    ph.extra["first"] = time.perf_counter() - ph.t0
                out[name] = t
        return out
    return run


def _fetch_all(env, spec, get):
    """safetensors.torch.load of the model's files fetched whole with get(key) -> bytes: the
    1-shard file, or the index (fetched the same way) and its shards."""
    from safetensors.torch import load
    _, base = where(env, spec)
    prefix = base[len(f"s3://{env.bucket}/"):]

    def run(ph):
        keys = [ONE]
        if spec["shards"] > 1:
            keys = sorted(set(json.loads(get(prefix + INDEX))["weight_map"].values()))
        out = {}
        for k in keys:
            out.update(load(get(prefix + k)))
        return out
    return run


def load_s3tc(env, spec):
    from s3torchconnector._s3client import S3Client
    c = S3Client(env.region, endpoint=env.url, s3client_config=env.s3tc_config(False))
    return _fetch_all(env, spec, lambda key: c.get_object(env.bucket, key).read())


def load_boto3(env, spec):
    c = env.boto3()

    def get(key):
        b = io.BytesIO()
        c.download_fileobj(env.bucket, key, b)
        return b.getvalue()
    return _fetch_all(env, spec, get)


def _cli(spec, *args):
    """The s3flash CLI under /usr/bin/time: (Child, None) or (None, the error)."""
    try:
        return Child([spec["cli"], "-q", *args], os.environ, stdout=None), None
    except SystemExit as e:  # Child exits on a failed command; the row shows why
        return None, str(e)[-300:]


def load_two_step(env, spec):
    """`s3flash cp` of the model's files to the local disk, then safetensors.torch.load_file
    of each (the shards through the index, as transformers does)."""
    from safetensors.torch import load_file
    uri, base = where(env, spec)

    def run(ph):
        d = tempfile.mkdtemp(prefix="model-load-two-step.", dir=spec["local_dir"])
        try:
            if spec["shards"] == 1:
                ch, err = _cli(spec, "cp", uri, os.path.join(d, ONE))
                files = [ONE]
            else:
                ch, err = _cli(spec, "cp", "--recursive", base, d)
            if err:
                raise RuntimeError(f"s3flash cp: {err}")
            if spec["shards"] > 1:
                with open(os.path.join(d, INDEX)) as f:
                    files = sorted(set(json.load(f)["weight_map"].values()))
            ph.extra["child_rss"] = ch.maxrss
            out = {}
            for f in files:
                out.update(load_file(os.path.join(d, f)))
            return out
        finally:
            shutil.rmtree(d, ignore_errors=True)
    return run


LOADERS = {"s3flash": load_s3flash, "runai": load_runai, "s3tc": load_s3tc,
           "boto3": load_boto3, "two_step": load_two_step}


def model_load(env, spec):
    import torch  # noqa: F401  (a program that loads tensors has it; its import is not timed)
    with open(spec["manifest"]) as f:
        manifest = json.load(f)
    run = LOADERS[spec["client"]](env, spec)
    with Phase() as ph:
        got = run(ph)
    note = check(got, manifest)
    r = ph.result(sd_bytes(got), note=note, n=len(got))
    # the cp of the two-step path ran on its own: its peak, if higher, is the row's
    r["rss_peak"] = max(r["rss_peak"], r.pop("child_rss", 0))
    emit(r)


def model_cp(env, spec):
    """The transfer alone: `s3flash cp` of the model's files to stdout (/dev/null), one
    process per shard, all at once. Peak RSS: the processes' peaks, summed."""
    _, base = where(env, spec)
    names = [ONE] if spec["shards"] == 1 else shard_names(spec["shards"])
    with Phase() as ph:
        with ThreadPoolExecutor(len(names)) as ex:
            runs = list(ex.map(lambda n: _cli(spec, "cp", base + n, "-"), names))
    errs = [e for _, e in runs if e]
    if errs:
        emit({"error": f"s3flash cp: {errs[0]}"})
        return
    emit(ph.result(spec["want_bytes"], rss_peak=sum(c.maxrss for c, _ in runs), rss_base=0))


def model_first(env, spec):
    """s3flash.safetensors.safe_open + get_tensor of the first tensor in file order."""
    import torch  # noqa: F401  (as in model_load: not timed)
    from s3flash.safetensors import safe_open
    uri = f"s3://{env.bucket}/{env.prefix}/1/{ONE}"
    kw = s3flash_kwargs(safe_open, env)
    with Phase() as ph:
        with safe_open(uri, framework="pt", **kw) as f:
            first = next(iter(f.keys()))
            t = f.get_tensor(first)
    emit(ph.result(t.numel() * t.element_size(), first=ph.wall, tensor=first,
                   tensor_bytes=t.numel() * t.element_size()))


# -- savers --------------------------------------------------------------------------------
def model_save(env, spec):
    sd = make_model(spec["size"])
    key = f"{env.prefix}/save-{spec['client']}/{ONE}"
    uri = f"s3://{env.bucket}/{key}"
    client = spec["client"]
    if client == "s3flash":
        from s3flash.safetensors import save_file
        kw = s3flash_kwargs(save_file, env)
    else:
        from safetensors.torch import save
        if client == "s3tc":
            from s3torchconnector._s3client import S3Client
            c = S3Client(env.region, endpoint=env.url, s3client_config=env.s3tc_config(False))
        else:
            c = env.boto3()
    with Phase() as ph:
        if client == "s3flash":
            save_file(sd, uri, metadata={"format": "pt"}, **kw)
        else:
            data = save(sd, metadata={"format": "pt"})  # the bytes, then the upload
            if client == "s3tc":
                with c.put_object(env.bucket, key) as w:
                    w.write(data)
            else:
                c.upload_fileobj(io.BytesIO(data), env.bucket, key)
    try:
        size = env.head_size(key)
    finally:
        env.delete([key])
    emit(ph.result(size))


worker.SCENARIOS.update(model_prepare=model_prepare, model_load=model_load, model_cp=model_cp,
                        model_first=model_first, model_save=model_save)
worker.NEEDS.update({("model_load", "s3flash"): "s3flash.safetensors",
                     ("model_first", "s3flash"): "s3flash.safetensors",
                     ("model_save", "s3flash"): "s3flash.safetensors",
                     ("model_load", "runai"): "runai_model_streamer",
                     ("model_load", "s3tc"): "s3torchconnector._s3client",
                     ("model_save", "s3tc"): "s3torchconnector._s3client"})

if __name__ == "__main__":
    sys.exit(worker.main())
