"""lance_ops vs pylance: adding appended rows to an IVF vector index (issue 22, vector updater).

    .venv/bin/python benchmarks/bench_index_upkeep_vector.py [--rows 1000000] [--new 100000] [--dim 32]
        [--kind IVF_PQ] [--partitions 64] [--rounds 3] [--max-ratio 1.5] [--dir /tmp]

Builds one 2.2 dataset (``rows`` indexed rows, then ``new`` appended unindexed rows), then on two
copies: pylance's ``optimize_indices(num_indices_to_merge=n)`` and lance_ops' vector updater
(``index_upkeep.vector.update_vector`` writing the segment; committed with pylance's CreateIndex, the
core ``optimize_indices`` lives on another branch). ``n`` = 0 (delta) then 1 (merged). Rounds
alternate A/B on fresh copies (copy untimed) and the minimum of each side is kept; prints the ratio
table (ours/pylance, lower is better) and exits 1 when a ratio is above ``--max-ratio``.
"""
from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import uuid

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import lance  # noqa: E402
from lance.dataset import Index, IndexFile  # noqa: E402

from benchmarks.bench_file_v22 import ab_rounds, report  # noqa: E402
from lance_ops.maintenance.index_upkeep.base import UpkeepRequest  # noqa: E402
from lance_ops.maintenance.index_upkeep.vector import update_vector  # noqa: E402
from lance_ops.table.dataset import LanceDataset  # noqa: E402
from lance_ops.table.indices import fragment_ids, index_kind, segment_uuid  # noqa: E402


def table(rng: np.random.Generator, n: int, start: int, dim: int) -> pa.Table:
    v = rng.standard_normal((n, dim)).astype(np.float32)
    return pa.table({"id": pa.array(np.arange(start, start + n), pa.int64()),
                     "vec": pa.FixedSizeListArray.from_arrays(pa.array(v.ravel()), dim)})


def build(uri: str, rows: int, new: int, dim: int, kind: str, partitions: int) -> None:
    rng = np.random.default_rng(7)
    ds = lance.write_dataset(table(rng, rows, 0, dim), uri, data_storage_version="2.2")
    params = {"num_partitions": partitions}
    if kind == "IVF_PQ":
        params["num_sub_vectors"] = dim // 4
    ds.create_index("vec", kind, **params)
    lance.write_dataset(table(rng, new, rows, dim), uri, mode="append")


def ours(uri: str, merge: bool) -> None:
    ods = LanceDataset(uri)
    segments = list(ods.manifest_file.index_section.indices)
    template = segments[-1]
    covered = {i for s in segments for i in fragment_ids(s)}
    merged = segments if merge else []
    request = UpkeepRequest(store=ods.store, base=ods.base, dataset=ods, index_name=template.name,
                            kind=index_kind(ods, template), merged=merged, template=template,
                            new_fragments=[f for f in ods.manifest.fragments if f.id not in covered],
                            new_uuid=str(uuid.uuid4()))
    out = update_vector(request)
    version = out.dataset_version if out.dataset_version is not None else ods.version
    new = Index(uuid=request.new_uuid, name=template.name, fields=list(template.fields), dataset_version=version,
                fragment_ids=set(out.fragment_ids), index_version=template.index_version,
                index_details=(template.index_details.type_url, bytes(template.index_details.value)),
                files=[IndexFile(n, s) for n, s in out.files])
    removed = [Index(uuid=segment_uuid(s), name=s.name, fields=list(s.fields), dataset_version=s.dataset_version,
                     fragment_ids=set(fragment_ids(s)), index_version=s.index_version) for s in merged]
    lance.LanceDataset.commit(uri, lance.LanceOperation.CreateIndex(new_indices=[new], removed_indices=removed),
                              read_version=ods.version)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--new", type=int, default=100_000)
    parser.add_argument("--dim", type=int, default=32)
    parser.add_argument("--kind", default="IVF_PQ")
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--max-ratio", type=float, default=1.5)
    parser.add_argument("--dir", default=tempfile.gettempdir())
    args = parser.parse_args()
    root = tempfile.mkdtemp(dir=args.dir)
    rows = []
    try:
        src = os.path.join(root, "src")
        build(src, args.rows, args.new, args.dim, args.kind, args.partitions)
        for merge in (False, True):
            work = [os.path.join(root, "ours"), os.path.join(root, "theirs")]

            def fresh(side: int) -> None:
                shutil.rmtree(work[side], ignore_errors=True)
                shutil.copytree(src, work[side])
                os.sync()

            t_o, t_t, _, _ = ab_rounds(
                args.rounds, lambda: ours(work[0], merge),
                lambda: lance.dataset(work[1]).optimize.optimize_indices(num_indices_to_merge=1 if merge else 0),
                setup=fresh)
            rows.append((f"{args.kind} {'merged' if merge else 'delta'}", t_o, t_t, None, None))
    finally:
        shutil.rmtree(root, ignore_errors=True)
    over = report(f"optimize_indices, {args.kind}: {args.rows} indexed + {args.new} new rows, dim {args.dim}, "
                  f"{args.partitions} partitions", rows, None, args.max_ratio)
    sys.exit(1 if over else 0)


if __name__ == "__main__":
    main()
