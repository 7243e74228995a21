#!/usr/bin/env python3
"""megatron_indices.py - build GPT indices with Megatron-Core itself, for
bench/indices.sh (the baseline of the index-build benchmark) and for the
golden arrays in tests/data/indices.  Bench-only: mds does not need Python.

It runs Megatron-Core's own BlendedMegatronDatasetBuilder(GPTDataset, sizes,
GPTDatasetConfig(...)).build(), the call pretrain_gpt.py makes, with:
  - a stand-in tokenizer object: GPTDataset reads only its eod id, vocab size,
    pad id (absent: -1, as for Megatron's legacy GPT-2 tokenizer) and
    unique_identifiers, which are those of _GPT2BPETokenizer so that the cache
    descriptions, and so the file names, are the ones mds writes;
  - a one-process gloo group (BlendedDataset asks torch.distributed for the
    rank whenever it writes a cache);
  - megatron/core/__init__.py bypassed: it imports the whole training stack
    (transformer engine, apex, recent torch.distributed symbols), which the
    datasets code does not use; megatron.core.utils, which only gives the
    datasets code log_single_rank, is replaced by megatron.core._rank_utils.
Nothing else of Megatron is touched.

Usage:
  megatron_indices.py --check     imports the datasets code, prints the version
  megatron_indices.py [--cache DIR] [--no-save] [--threads N] [--split S]
      [--train-data-path ...] [--valid-data-path ...] [--test-data-path ...]
      [--vocab-file F] [--merge-file F] [--seed N]
      --seq-length L --sizes TRAIN,VALID,TEST [--data-path W1 P1 ...]
--export DIR writes every array as DIR/{name}-{split}-{array}.npy (name: the
prefix's base name without "_text_document"; "blend" for a BlendedDataset)
with its description, and DIR/train-first5-samples.json: the fixture layout
of tests/data/indices.  --no-save turns numpy.save into a no-op inside gpt_dataset/blended_dataset
(the index arrays are still computed, nothing is written: Megatron's compute
alone).  Sizes may be "None".  Prints "build_s X", "peak_rss_mb Y" and, per
top-level dataset, its class and length.
"""
import argparse
import os
import resource
import sys
import time
import types
from collections import OrderedDict


def import_megatron():
    import importlib.util
    spec = importlib.util.find_spec("megatron")
    if spec is None or not spec.submodule_search_locations:
        sys.exit("megatron_indices: megatron-core is not installed")
    root = os.path.join(list(spec.submodule_search_locations)[0], "core")
    core = types.ModuleType("megatron.core")
    core.__path__ = [root]
    sys.modules["megatron.core"] = core
    import megatron.core._rank_utils as rank_utils
    utils = types.ModuleType("megatron.core.utils")
    utils.log_single_rank = rank_utils.log_single_rank
    sys.modules["megatron.core.utils"] = utils
    from megatron.core.datasets.blended_megatron_dataset_builder import BlendedMegatronDatasetBuilder
    from megatron.core.datasets.gpt_dataset import GPTDataset, GPTDatasetConfig
    return BlendedMegatronDatasetBuilder, GPTDataset, GPTDatasetConfig


class Tokenizer:
    """What GPTDataset asks of a tokenizer; no pad attribute (pad = -1)."""

    def __init__(self, vocab_file, merge_file):
        self.vocab_size = 50257
        self.eod = 50256
        self.unique_identifiers = OrderedDict(
            [("class", "_GPT2BPETokenizer"), ("tokenizer_path", [vocab_file, merge_file])])


def blend_from_list(tokens):
    """megatron.training.utils.get_blend_from_list"""
    if not tokens:
        return None
    if len(tokens) % 2 == 1:
        return ([t.strip() for t in tokens], None)
    try:
        weights = [float(t) for t in tokens[0::2]]
    except ValueError:
        return ([t.strip() for t in tokens], None)
    return ([t.strip() for t in tokens[1::2]], weights)


def export(a, datasets):
    import json
    import numpy
    os.makedirs(a.export, exist_ok=True)

    def put(name, split, arrays, desc):
        for k, v in arrays.items():
            numpy.save(os.path.join(a.export, "%s-%s-%s.npy" % (name, split, k)), v, allow_pickle=False)
        with open(os.path.join(a.export, "%s-%s-description.txt" % (name, split)), "w") as f:
            f.write(desc)

    def put_gpt(ds, split):
        name = os.path.basename(ds.dataset_path).replace("_text_document", "")
        put(name, split, {"document_index": ds.document_index, "sample_index": ds.sample_index,
                          "shuffle_index": ds.shuffle_index}, ds.unique_description)

    for split, ds in zip(("train", "valid", "test"), datasets):
        if ds is None:
            continue
        if hasattr(ds, "dataset_index"):
            for sub in ds.datasets:
                put_gpt(sub, split)
            put("blend", split, {"dataset_index": ds.dataset_index,
                                 "dataset_sample_index": ds.dataset_sample_index}, ds.unique_description)
        else:
            put_gpt(ds, split)
    samples = []
    train = datasets[0]
    for k in range(min(5, len(train)) if train is not None else 0):
        item = train[k]
        text = [int(x) for x in item["tokens"]] + [int(item["labels"][-1])]
        entry = {"index": k}
        if "dataset_id" in item:
            entry["dataset_id"] = int(item["dataset_id"])
        entry["text"] = text
        samples.append(entry)
    import importlib.metadata
    with open(os.path.join(a.export, "train-first5-samples.json"), "w") as f:
        json.dump({"config": os.path.basename(os.path.normpath(a.export)),
                   "impl": "megatron-core " + importlib.metadata.version("megatron-core"),
                   "seq_length": a.seq_length, "argv": sys.argv[1:], "samples": samples}, f)
        f.write("\n")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-path", nargs="*")
    ap.add_argument("--train-data-path", nargs="*")
    ap.add_argument("--valid-data-path", nargs="*")
    ap.add_argument("--test-data-path", nargs="*")
    ap.add_argument("--split", default=None)
    ap.add_argument("--seq-length", type=int, required=True)
    ap.add_argument("--sizes", required=True)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--cache", default=None)
    ap.add_argument("--no-save", action="store_true")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--export", default=None)
    ap.add_argument("--vocab-file", default="gpt2-vocab.json")
    ap.add_argument("--merge-file", default="gpt2-merges.txt")
    if sys.argv[1:] == ["--check"]:
        import importlib.metadata
        import_megatron()
        print(importlib.metadata.version("megatron-core"))
        return
    a = ap.parse_args()

    import torch
    Builder, GPTDataset, GPTDatasetConfig = import_megatron()
    import megatron.core.datasets.blended_dataset as bd
    import megatron.core.datasets.gpt_dataset as gd
    if a.no_save:
        import numpy
        fake = types.SimpleNamespace(**{k: getattr(numpy, k) for k in dir(numpy) if not k.startswith("__")})
        fake.save = lambda *args, **kw: None
        gd.numpy = fake
        bd.numpy = fake
    if a.cache:
        torch.distributed.init_process_group(
            "gloo", init_method="file://" + os.path.abspath(a.cache) + ".pg", rank=0, world_size=1)

    sizes = [None if s == "None" else int(s) for s in a.sizes.split(",")]
    per_split = [blend_from_list(x) for x in (a.train_data_path, a.valid_data_path, a.test_data_path)]
    kw = dict(random_seed=a.seed, sequence_length=a.seq_length, path_to_cache=a.cache,
              tokenizer=Tokenizer(a.vocab_file, a.merge_file), reset_position_ids=False,
              reset_attention_mask=False, eod_mask_loss=False,
              num_dataset_builder_threads=a.threads)
    if a.data_path:
        kw.update(blend=blend_from_list(a.data_path),
                  split=a.split if a.split is not None else "969, 30, 1")
    else:
        kw.update(blend_per_split=per_split)
    t0 = time.perf_counter()
    config = GPTDatasetConfig(**kw)
    datasets = Builder(GPTDataset, sizes, lambda: True, config).build()
    secs = time.perf_counter() - t0
    print("build_s %.3f" % secs)
    print("peak_rss_mb %d" % (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024))
    for name, ds in zip(("train", "valid", "test"), datasets):
        print("%s %s %s" % (name, type(ds).__name__ if ds is not None else "None",
                            len(ds) if ds is not None else 0))
    if a.export:
        export(a, datasets)
    if a.cache:
        torch.distributed.destroy_process_group()
        try:
            os.unlink(os.path.abspath(a.cache) + ".pg")
        except OSError:
            pass


if __name__ == "__main__":
    main()
