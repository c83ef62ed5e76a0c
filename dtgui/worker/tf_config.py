"""TF_CONFIG: the cluster of a multi-process run and each task's place in it.

The one builder: the placement's TF_CONFIG (dtgui.core, the addresses chosen before the run),
a scheduler's allocation (a kind's task module, on the nodes) and the review page's
display of either are built here. Stdlib only (copied into bundles).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence


def tf_cluster(members: Iterable[tuple[str, int, str]]) -> dict[str, list[str]]:
    """(task type, index, "host:port") of every task -> TF_CONFIG's `cluster`: each type's
    addresses in index order, the types in name order."""
    cluster: dict[str, list[str]] = {}
    for kind, _, address in sorted(members, key=lambda m: (m[0], m[1])):
        cluster.setdefault(kind, []).append(address)
    return cluster


def task_tf_config(cluster: Mapping[str, Sequence[str]], task_type: str,
                   index: int) -> dict[str, object]:
    """The TF_CONFIG of one task of `cluster`."""
    return {"cluster": {k: list(v) for k, v in cluster.items()},
            "task": {"type": task_type, "index": index}}


def split_task_id(task_id: str) -> tuple[str, int]:
    """"worker:1" -> ("worker", 1)."""
    kind, _, index = task_id.partition(":")
    return kind, int(index or 0)
