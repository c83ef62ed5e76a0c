"""Whether a checkpoint's files are whole, read without TensorFlow (dtgui.worker.checkpoint_index,
through dtgui.core.bundles.checkpoint_files): an index TensorFlow wrote (tests/fixtures/
checkpoint/ckpt-9.index: a Keras model, its Adam optimizer and a step, one data shard of
24188 bytes) against shards whole, cut short and missing, an index cut short, and the newest
whole one of a directory whose newest save did not finish. And the look at a machine's
processes that tells whether a recorded task is left (dtgui.core.runs.liveness), here from
/proc and through the script sent over SSH."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from dtgui.core.bundles.checkpoint_files import newest_checkpoint
from dtgui.core.runs.liveness import GroupFacts, Member
from dtgui.launch.exec.host import read_groups
from dtgui.launch.exec.remote_scripts import GROUPS_SCRIPT, parse_groups
from dtgui.worker.checkpoint_index import checkpoint_problem, newest_whole, shard_needs

INDEX = Path(__file__).parent / "fixtures" / "checkpoint" / "ckpt-9.index"
SHARD = "data-00000-of-00001"
SHARD_BYTES = 24188


def checkpoint(directory: Path, step: int, shard_bytes: int = SHARD_BYTES) -> None:
    shutil.copyfile(INDEX, directory / f"ckpt-{step}.index")
    (directory / f"ckpt-{step}.{SHARD}").write_bytes(b"\0" * shard_bytes)


def test_a_tensorflow_index_says_how_long_each_shard_is_and_a_shorter_one_is_not_whole(
        tmp_path: Path) -> None:
    assert shard_needs(INDEX.read_bytes()) == (1, {0: SHARD_BYTES})
    checkpoint(tmp_path, 9)
    assert checkpoint_problem(str(tmp_path), "ckpt-9") == ""
    os.truncate(tmp_path / f"ckpt-9.{SHARD}", SHARD_BYTES // 2)
    assert checkpoint_problem(str(tmp_path), "ckpt-9") == (
        f"it was cut short (ckpt-9.{SHARD} holds {SHARD_BYTES // 2} of its {SHARD_BYTES} "
        "bytes)")
    (tmp_path / f"ckpt-9.{SHARD}").unlink()
    assert checkpoint_problem(str(tmp_path), "ckpt-9") == \
        "it is incomplete: data shard(s) 0 of 1 are missing"
    index = INDEX.read_bytes()
    (tmp_path / "ckpt-9.index").write_bytes(index[: len(index) // 2] + index[-8:])
    assert checkpoint_problem(str(tmp_path), "ckpt-9").startswith("ckpt-9.index is damaged: ")
    (tmp_path / "ckpt-9.index").write_bytes(index[:-1])
    assert checkpoint_problem(str(tmp_path), "ckpt-9") == (
        "ckpt-9.index is damaged: it does not end as a TensorFlow checkpoint index")


def test_the_newest_whole_checkpoint_is_chosen_and_each_newer_one_skipped_says_why(
        tmp_path: Path) -> None:
    for step in (3, 6):
        checkpoint(tmp_path, step)
    checkpoint(tmp_path, 9, SHARD_BYTES - 1)  # a save cut short by a full disk or a kill
    (tmp_path / "checkpoint").write_text(
        'model_checkpoint_path: "ckpt-9"\n' + "".join(
            f'all_model_checkpoint_paths: "{tmp_path}/ckpt-{s}"\n' for s in (3, 6, 9)))
    name, skipped = newest_whole(str(tmp_path))
    assert name == "ckpt-6" and [s for s, _ in skipped] == ["ckpt-9"]
    found = newest_checkpoint(tmp_path)
    assert found.ok and found.step == 6
    assert found.skipped_text == (
        f"the checkpoint of step 9 was skipped: it was cut short (ckpt-9.{SHARD} holds "
        f"{SHARD_BYTES - 1} of its {SHARD_BYTES} bytes)")
    for step in (3, 6):
        (tmp_path / f"ckpt-{step}.{SHARD}").unlink()
    found = newest_checkpoint(tmp_path)
    assert not found.ok and found.step == 9
    assert found.problem.startswith(f"no checkpoint in {tmp_path} is whole (the checkpoint "
                                    "of step 9 was skipped: it was cut short")


def test_a_task_is_told_by_its_group_and_start_here_and_through_the_ssh_script() -> None:
    pgid = os.getpgid(0)
    here = read_groups([pgid])
    sent = subprocess.run(["sh", "-s", "--", str(pgid)], input=GROUPS_SCRIPT, text=True,
                          capture_output=True, check=True).stdout
    there = parse_groups(sent, [pgid])
    assert there.boot == here.boot != ""
    mine = next(m for m in here.members[pgid] if m.pid == os.getpid())
    assert (mine.pid, mine.start) in [(m.pid, m.start) for m in there.members[pgid]]
    # the rules: the leader's start, a reboot, a leader gone with its children left
    facts = GroupFacts("boot", {7: [Member(7, "S", 100), Member(8, "R", 120)],
                                9: [Member(10, "S", 300)], 11: [Member(11, "Z", 5)]})
    assert facts.identity(7) == "boot/100" and facts.identity(9) == ""
    assert facts.left(7, "boot/100") and not facts.left(7, "boot/90")
    assert not facts.left(7, "other/100") and facts.left(7, "")
    assert facts.left(9, "boot/250") and not facts.left(9, "boot/350")
    assert not facts.left(11, "boot/5") and not facts.left(12, "")
