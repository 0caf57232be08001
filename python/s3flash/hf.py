"""Hugging Face models, tokenizers and Trainer checkpoints to and from S3 (docs/PYTHON.md,
"Hugging Face"). Needs the extra ``hf``: ``pip install 's3flash[hf]'`` (transformers,
accelerate, safetensors).

    from transformers import AutoModelForCausalLM, AutoTokenizer
    import s3flash.hf

    model = s3flash.hf.from_pretrained(AutoModelForCausalLM, "s3://bucket/llama/")
    tok = s3flash.hf.from_pretrained(AutoTokenizer, "s3://bucket/llama/")
    s3flash.hf.save_pretrained(model, "s3://bucket/llama-ft/", tokenizer=tok)

The weights go through ``s3flash.safetensors`` (single file or shards with their index);
the model is built on the meta device and the loaded tensors are assigned to it
(``load_state_dict(assign=True)``), so the process holds one copy of the weights. Config,
generation config and tokenizer files are the small files beside them, fetched in parallel
into a private temporary folder and read by transformers' own loaders.

Training checkpoints (``S3CheckpointCallback``, ``S3AcceleratorCheckpoint``,
``resolve_checkpoint``, ``S3Trainer``) are in s3flash/_hf_train.py and exported here.
"""

from __future__ import annotations

import concurrent.futures
import importlib.util
import json
import os
import re
import shutil
import tempfile
from typing import Any, Dict, List, Optional, Tuple


def _missing_extra(name: str) -> ImportError:
    return ImportError(f"s3flash.hf needs the optional dependencies of the extra 'hf' "
                       f"(transformers, accelerate, safetensors): pip install 's3flash[hf]' "
                       f"({name} is not installed)")


try:
    import transformers  # noqa: F401
    import torch
except ImportError as e:  # tested without the extra (test_hf.py)
    raise _missing_extra(e.name or str(e)) from e
for _name in ("accelerate", "safetensors"):  # imported when used (accelerate is slow to load)
    if importlib.util.find_spec(_name) is None:
        raise _missing_extra(_name)

from ._client import ObjectInfo, S3Client, _shared_client
from ._config import S3ClientConfig
from . import _s3flash
from ._hf_train import (S3AcceleratorCheckpoint, S3CheckpointCallback,  # noqa: F401
                        S3ResumeMixin, S3Trainer, resolve_checkpoint)

__all__ = ["from_pretrained", "save_pretrained", "resolve_checkpoint",
           "S3CheckpointCallback", "S3AcceleratorCheckpoint", "S3ResumeMixin", "S3Trainer",
           "SAFE_WEIGHTS_NAME", "SAFE_WEIGHTS_INDEX_NAME"]

SAFE_WEIGHTS_NAME = "model.safetensors"
SAFE_WEIGHTS_INDEX_NAME = "model.safetensors.index.json"
_SHARD_RE = re.compile(r"model-\d{5}-of-\d{5}\.safetensors")
# files of a model folder that are weights or training state, never fetched as "small files"
_WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".h5", ".msgpack",
                    ".gguf", ".onnx", ".pkl", ".npz", ".ot")
_SMALL_FILE_MAX = 256 << 20   # a tokenizer.json is tens of MiB at most
_PARALLEL_FILES = 8


# -- the bucket side ----------------------------------------------------------------------

def _client_of(region: Optional[str], endpoint: Optional[str],
               s3client_config: Optional[S3ClientConfig], client: Optional[S3Client]
               ) -> S3Client:
    return client if client is not None else _shared_client(region, endpoint, s3client_config)


def _folder(uri: str) -> Tuple[str, str]:
    """(bucket, prefix ending in '/' or empty) of a folder URI."""
    bucket, prefix = _s3flash.parse_uri(uri)
    if prefix and not prefix.endswith("/"):
        prefix += "/"
    return bucket, prefix


def _listing(client: S3Client, bucket: str, prefix: str) -> Dict[str, ObjectInfo]:
    """The objects directly in the folder (not in its subfolders), by name."""
    return {o.key[len(prefix):]: o
            for o in client.list_objects(bucket, prefix, delimiter="/")
            if o.key[len(prefix):] and "/" not in o.key[len(prefix):]}


def _is_small_file(name: str, o: ObjectInfo) -> bool:
    return not name.lower().endswith(_WEIGHT_SUFFIXES) and o.size <= _SMALL_FILE_MAX


def _fetch_small_files(client: S3Client, bucket: str, prefix: str,
                       listing: Dict[str, ObjectInfo], dest: str) -> List[str]:
    """Download the folder's non-weight files (config, generation config, tokenizer...) into
    `dest`, in parallel, each pinned to the ETag of the listing."""
    names = sorted(n for n, o in listing.items() if _is_small_file(n, o))

    def get(name: str) -> None:
        etag = listing[name].etag.strip('"')
        client.download_file(bucket, prefix + name, os.path.join(dest, name),
                             if_match=f'"{etag}"' if etag else None)

    if names:
        with concurrent.futures.ThreadPoolExecutor(min(_PARALLEL_FILES, len(names))) as ex:
            list(ex.map(get, names))
    return names


def _upload_folder(client: S3Client, bucket: str, prefix: str, folder: str) -> List[str]:
    names = sorted(n for n in os.listdir(folder) if os.path.isfile(os.path.join(folder, n)))

    def put(name: str) -> None:
        client.upload_file(bucket, prefix + name, os.path.join(folder, name))

    if names:
        with concurrent.futures.ThreadPoolExecutor(min(_PARALLEL_FILES, len(names))) as ex:
            list(ex.map(put, names))
    return names


# -- s3flash.safetensors ------------------------------------------------------------------

def _load_weights(client: S3Client, bucket: str, prefix: str,
                  listing: Dict[str, ObjectInfo], device: Any
                  ) -> Dict[str, "torch.Tensor"]:
    """Every tensor of the folder's weights: model.safetensors, else the shards the index
    names (their tensors checked against the index by s3flash.safetensors)."""
    from . import safetensors as st
    uri = f"s3://{bucket}/{prefix}"
    if SAFE_WEIGHTS_NAME in listing:
        return st.load_file(uri + SAFE_WEIGHTS_NAME, device=device, client=client)
    if SAFE_WEIGHTS_INDEX_NAME in listing:
        return st.load_sharded(uri + SAFE_WEIGHTS_INDEX_NAME, device=device, client=client)
    others = sorted(n for n in listing if n.lower().endswith(_WEIGHT_SUFFIXES))
    raise FileNotFoundError(f"{uri}: no {SAFE_WEIGHTS_NAME} or {SAFE_WEIGHTS_INDEX_NAME} "
                            f"(weights found: {others or 'none'}; s3flash.hf loads "
                            "safetensors weights only)")


def _save_weights(client: S3Client, uri: str, shard_file: str,
                  tensors: Dict[str, "torch.Tensor"], metadata: Dict[str, str]) -> None:
    from . import safetensors as st
    st.save_file(tensors, uri + shard_file, metadata=metadata, client=client)


# -- loading ------------------------------------------------------------------------------

def _is_model_class(cls: Any) -> bool:
    from transformers import PreTrainedModel
    from transformers.models.auto.auto_factory import _BaseAutoModelClass
    return isinstance(cls, type) and (issubclass(cls, PreTrainedModel) or
                                      issubclass(cls, _BaseAutoModelClass))


def _as_dtype(dtype: Any) -> Optional["torch.dtype"]:
    if dtype is None or dtype == "auto":
        return None
    if isinstance(dtype, str):
        d = getattr(torch, dtype, None)
        if not isinstance(d, torch.dtype):
            raise ValueError(f"unknown dtype {dtype!r}")
        return d
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"dtype must be a torch.dtype, a name or 'auto', got {dtype!r}")
    return dtype


def _tied_targets(model: Any) -> set:
    keys = getattr(model, "all_tied_weights_keys", None)
    if keys is None and hasattr(model, "get_expanded_tied_weights_keys"):
        keys = model.get_expanded_tied_weights_keys(all_submodels=True)
    return set(keys or ())


def _ignored(keys: set, patterns: Any) -> set:
    if not patterns:
        return keys
    rx = re.compile("|".join(f"({p})" for p in patterns))
    return {k for k in keys if rx.search(k) is None}


def _build_empty(cls: Any, config: Any, dtype: Optional["torch.dtype"]) -> Any:
    """The model with its parameters on the meta device (no memory, no initialization) and
    its buffers real (non-persistent ones, such as rotary frequencies, are not in the
    checkpoint: they are computed here as usual)."""
    from accelerate import init_empty_weights
    from transformers.models.auto.auto_factory import _BaseAutoModelClass
    kw = {} if dtype is None else {"dtype": dtype}
    with init_empty_weights(include_buffers=False):
        if issubclass(cls, _BaseAutoModelClass):
            return cls.from_config(config, **kw)
        return cls._from_config(config, **kw)


def _assign_weights(model: Any, sd: Dict[str, "torch.Tensor"], dtype: Optional["torch.dtype"],
                    strict: bool, uri: str) -> None:
    if dtype is not None:
        for k, t in sd.items():
            if t.is_floating_point() and t.dtype != dtype:
                sd[k] = t.to(dtype)   # one tensor at a time: the original goes at once
    result = model.load_state_dict(sd, strict=False, assign=True)
    del sd
    missing = _ignored(set(result.missing_keys) - _tied_targets(model),
                       getattr(model, "_keys_to_ignore_on_load_missing", None))
    unexpected = _ignored(set(result.unexpected_keys),
                          getattr(model, "_keys_to_ignore_on_load_unexpected", None))
    if missing or (strict and unexpected):
        raise ValueError(
            f"{uri}: the weights do not match {type(model).__name__}: "
            f"missing {sorted(missing)[:10]}{' ...' if len(missing) > 10 else ''}, "
            f"unexpected {sorted(unexpected)[:10]}{' ...' if len(unexpected) > 10 else ''}"
            + ("" if strict else " (strict=False ignores unexpected keys only)"))
    model.tie_weights()
    left = [n for n, p in list(model.named_parameters()) + list(model.named_buffers())
            if p.is_meta]
    if left:
        raise ValueError(f"{uri}: no weights for {left[:10]} in {type(model).__name__}")


def from_pretrained(cls: Any, uri: str, *, dtype: Any = None, torch_dtype: Any = None,
                    config: Any = None, strict: bool = True, device: Any = "cpu",
                    region: Optional[str] = None, endpoint: Optional[str] = None,
                    s3client_config: Optional[S3ClientConfig] = None,
                    client: Optional[S3Client] = None, **kwargs: Any) -> Any:
    """``cls.from_pretrained`` for a folder in S3 (``s3://bucket/model/``).

    A model class (a ``PreTrainedModel`` subclass or an ``AutoModel*`` class): the config
    (``config``, else the folder's config.json with ``kwargs`` applied as transformers
    does), the model built on the meta device, its weights loaded by s3flash.safetensors
    (``model.safetensors``, else ``model.safetensors.index.json`` and its shards) onto
    ``device`` and assigned; tied weights tied again (``tie_weights``), the generation
    config read when there is one, the model in eval mode. The dtype is the stored one,
    unless ``dtype`` (or ``torch_dtype``) converts the floating tensors. Missing weights
    (other than tied ones) raise ValueError; unexpected ones too unless ``strict=False``.

    Any other class with ``from_pretrained`` (``AutoTokenizer``, ``AutoConfig``,
    ``AutoProcessor``, ``GenerationConfig``...): its files are fetched and it reads them.
    """
    c = _client_of(region, endpoint, s3client_config, client)
    bucket, prefix = _folder(uri)
    listing = _listing(c, bucket, prefix)
    if not listing:
        raise FileNotFoundError(f"s3://{bucket}/{prefix}: no objects in this folder")
    tmp = tempfile.mkdtemp(prefix="s3flash-hf-")  # 0700: private to this user
    try:
        fetched = _fetch_small_files(c, bucket, prefix, listing, tmp)
        if not _is_model_class(cls):
            try:
                obj = cls.from_pretrained(tmp, **kwargs)
            except (OSError, ValueError) as e:  # its message names the temporary folder
                raise (OSError if isinstance(e, OSError) else ValueError)(
                    f"{uri}: {getattr(cls, '__name__', cls)}.from_pretrained found nothing it "
                    f"reads among {fetched}: {e}") from e
            for attr in ("name_or_path", "_name_or_path"):
                if isinstance(getattr(obj, attr, None), str):
                    try:
                        setattr(obj, attr, uri)
                    except AttributeError:
                        pass
            return obj
        want = _as_dtype(dtype if dtype is not None else torch_dtype)
        if config is None:
            if "config.json" not in fetched:
                raise FileNotFoundError(f"{uri}: no config.json (pass config=)")
            from transformers import AutoConfig
            config_cls = getattr(cls, "config_class", None) or AutoConfig
            config = config_cls.from_pretrained(tmp, **kwargs)
        elif kwargs:
            raise TypeError(f"unexpected arguments with config=: {sorted(kwargs)}")
        model = _build_empty(cls, config, want)
        sd = _load_weights(c, bucket, prefix, listing, device)
        _assign_weights(model, sd, want, strict, uri)
        floating = next((p.dtype for p in model.parameters() if p.is_floating_point()), None)
        if floating is not None:
            model.config.dtype = floating
        model.config._name_or_path = uri
        if os.path.exists(os.path.join(tmp, "generation_config.json")) and \
                model.can_generate():
            from transformers import GenerationConfig
            model.generation_config = GenerationConfig.from_pretrained(tmp)
        model.eval()
        return model
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


# -- saving -------------------------------------------------------------------------------

def _state_dict_to_save(model: Any, state_dict: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """transformers' own steps: keys to ignore, tied duplicates removed (safetensors holds
    no aliases), weight conversions reverted to the original format."""
    from transformers.core_model_loading import revert_weight_conversion
    from transformers.modeling_utils import remove_tied_weights_from_state_dict
    sd = dict(model.state_dict() if state_dict is None else state_dict)
    for k in getattr(model, "_keys_to_ignore_on_save", None) or ():
        sd.pop(k, None)
    sd = remove_tied_weights_from_state_dict(sd, model)
    return revert_weight_conversion(model, sd)


def save_pretrained(model: Any, uri: str, *, tokenizer: Any = None,
                    max_shard_size: Any = "50GB", state_dict: Optional[Dict[str, Any]] = None,
                    region: Optional[str] = None, endpoint: Optional[str] = None,
                    s3client_config: Optional[S3ClientConfig] = None,
                    client: Optional[S3Client] = None) -> List[str]:
    """``model.save_pretrained`` into a folder in S3, as transformers lays it out:
    ``model.safetensors``, or shards ``model-00001-of-00003.safetensors`` and
    ``model.safetensors.index.json`` above ``max_shard_size`` (an int of bytes or "5GB"),
    each written by s3flash.safetensors.save_file (streamed, no local copy); config.json,
    generation_config.json and the ``tokenizer``'s (or processor's) files through the
    client. Weights go first, then the index, then the small files; weight files of an
    earlier save that the new one does not name are deleted last. Returns the names
    written. Not atomic: a reader during the save may see a mix; save each version to a
    folder of its own."""
    from huggingface_hub import split_torch_state_dict_into_shards
    from transformers.modeling_utils import unwrap_model
    c = _client_of(region, endpoint, s3client_config, client)
    bucket, prefix = _folder(uri)
    base = f"s3://{bucket}/{prefix}"
    m = unwrap_model(model)
    sd = _state_dict_to_save(m, state_dict)
    split = split_torch_state_dict_into_shards(
        sd, filename_pattern="model{suffix}.safetensors", max_shard_size=max_shard_size)
    written: List[str] = []
    for shard_file, names in split.filename_to_tensors.items():
        _save_weights(c, base, shard_file, {n: sd[n].contiguous() for n in names},
                      {"format": "pt"})
        written.append(shard_file)
    if split.is_sharded:
        index = {"metadata": {"total_parameters": m.num_parameters(), **split.metadata},
                 "weight_map": split.tensor_to_filename}
        body = (json.dumps(index, indent=2, sort_keys=True) + "\n").encode()
        c.native.put_object(bucket, prefix + SAFE_WEIGHTS_INDEX_NAME, body,
                            content_type="application/json")
        written.append(SAFE_WEIGHTS_INDEX_NAME)
    tmp = tempfile.mkdtemp(prefix="s3flash-hf-")
    try:
        # as transformers' save_pretrained: the stored dtype and the class in the config
        m.config.dtype = str(m.dtype).split(".")[1]
        m.config.architectures = [type(m).__name__.removeprefix("FSDP")]
        m.config.save_pretrained(tmp)
        if m.can_generate() and getattr(m, "generation_config", None) is not None:
            m.generation_config.save_pretrained(tmp)
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        written += _upload_folder(c, bucket, prefix, tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    stale = [prefix + n for n in _listing(c, bucket, prefix)
             if n not in written and (_SHARD_RE.fullmatch(n) or n in (
                 SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME))]
    if stale:
        c.native.delete_objects(bucket, stale)
    return written
