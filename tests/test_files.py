"""trainables/common/files.py:write_atomically, the one temp-then-rename writer (compile-cache entries, OUT's
rebuilt state, the remembered answers): a reader sees the old file or the new one, never half of one."""

from __future__ import annotations

import threading

import pytest

from trainables.common.files import write_atomically


def test_readers_see_one_whole_content_while_writers_race_on_one_file(tmp_path):
    dest = tmp_path / "entry.bin"
    contents = [bytes([i]) * 1_000_000 for i in range(4)]
    write_atomically(dest, contents[0])
    seen: list[bytes] = []
    writing = threading.Event()

    def writer(data: bytes) -> None:
        for _ in range(10):
            write_atomically(dest, data)

    def reader() -> None:
        while writing.is_set():
            seen.append(dest.read_bytes())

    writing.set()
    read = threading.Thread(target=reader)
    read.start()
    writers = [threading.Thread(target=writer, args=(c,)) for c in contents]
    for w in writers:
        w.start()
    for w in writers:
        w.join()
    writing.clear()
    read.join()
    assert seen and all(data in contents for data in seen)
    assert dest.read_bytes() in contents
    assert [p.name for p in tmp_path.iterdir()] == ["entry.bin"]  # no writer's temp file left


def test_a_failed_write_leaves_the_old_file_and_no_temp_file(tmp_path):
    dest = tmp_path / "state.json"
    write_atomically(dest, '{"phases": {}}')
    with pytest.raises(UnicodeEncodeError):
        write_atomically(dest, "\ud800")  # a lone surrogate: fails after the temp file is opened
    assert dest.read_text() == '{"phases": {}}'
    assert [p.name for p in tmp_path.iterdir()] == ["state.json"]


def test_missing_folders_are_made(tmp_path):
    dest = tmp_path / "a" / "b" / "key.json"
    write_atomically(dest, "{}")
    assert dest.read_text() == "{}"
