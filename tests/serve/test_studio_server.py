"""The studio's server without a browser (starlette's TestClient): what it refuses (paths out of
the served folder, bodies over the limit, other sites' pages), how it saves, and that a check
that overruns its time limit is stopped with an error while the server goes on answering."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("httpx")

from starlette.testclient import TestClient  # noqa: E402

from lbdl_dsl.compiler.driver import compile_spec  # noqa: E402
from lbdl_dsl.serve import folder  # noqa: E402
from lbdl_dsl.serve.app import MAX_BODY, create_app  # noqa: E402

BASE = "http://127.0.0.1"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, repo: Path) -> Iterator[tuple[Path, Path]]:
    """A folder of specs, with a secret beside it and a link from inside to that secret."""
    top = tmp_path_factory.mktemp("studio")
    root = top / "specs"
    shutil.copytree(repo / "specs", root)
    (top / "secret.lbdl").write_text("model secret:\n  input X: 4\n  output X\n")
    (root / "escape.lbdl").symlink_to(top / "secret.lbdl")
    (root / "away").symlink_to(top)
    yield root, top


@pytest.fixture(scope="module")
def client(served: tuple[Path, Path]) -> Iterator[TestClient]:
    app = create_app(served[0], "mlp.lbdl", workers=1)
    with TestClient(app, base_url=BASE) as c:
        yield c


ESCAPES = [
    "../secret.lbdl",
    "blocks/../../secret.lbdl",
    "/etc/passwd.lbdl",
    str(Path("/tmp/x.lbdl").absolute()),
    "escape.lbdl",  # a link inside the folder to a file outside it
    "away/secret.lbdl",  # a link to a folder outside it
    "C:/x.lbdl",
    "..\\secret.lbdl",
    "./mlp.lbdl",
    "mlp.py",
]


@pytest.mark.parametrize("name", ESCAPES)
def test_reads_and_writes_outside_the_folder_are_refused(
    client: TestClient, served: tuple[Path, Path], name: str
) -> None:
    root, top = served
    before = (top / "secret.lbdl").read_text()
    assert client.get("/api/file", params={"path": name}).status_code == 403
    saved = client.put("/api/file", json={"path": name, "text": "model x:\n  input X: 1\n"})
    assert saved.status_code == 403, saved.text
    checked = client.post("/api/check", json={"path": name, "text": "model x:\n"})
    assert checked.status_code == 403
    assert (top / "secret.lbdl").read_text() == before
    assert sorted(p.name for p in top.iterdir()) == ["secret.lbdl", "specs"]


def test_the_listing_leaves_out_links_that_leave_the_folder(client: TestClient) -> None:
    files = client.get("/api/files").json()
    assert files["first"] == "mlp.lbdl"
    assert "gpt2.lbdl" in files["files"] and "blocks/transformer.lbdl" in files["files"]
    assert "escape.lbdl" not in files["files"]
    assert not any(f.startswith("away/") for f in files["files"])


def test_a_save_replaces_one_file_and_touches_no_other(
    client: TestClient, served: tuple[Path, Path]
) -> None:
    root = served[0]
    before = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    text = (root / "lenet.lbdl").read_text().replace("# ", "## ", 1)
    reply = client.put("/api/file", json={"path": "lenet.lbdl", "text": text})
    assert reply.status_code == 200 and reply.json()["bytes"] == len(text.encode())
    assert (root / "lenet.lbdl").read_text() == text
    after = {p: p.stat().st_mtime_ns for p in root.rglob("*") if p.is_file()}
    assert set(after) == set(before)  # no temporary file left, no file made
    changed = [p.name for p in after if after[p] != before[p]]
    assert changed == ["lenet.lbdl"]


def test_a_new_spec_is_saved_where_its_folder_exists(
    client: TestClient, served: tuple[Path, Path]
) -> None:
    root = served[0]
    text = "model fresh:\n  input X: 4\n  fc 2\n  output Y\n"
    assert client.put("/api/file", json={"path": "blocks/fresh.lbdl", "text": text}).is_success
    assert (root / "blocks" / "fresh.lbdl").read_text() == text
    nowhere = client.put("/api/file", json={"path": "nowhere/fresh.lbdl", "text": text})
    assert nowhere.status_code == 403 and not (root / "nowhere").exists()


def test_a_body_over_the_limit_is_refused(client: TestClient) -> None:
    text = "#" * (MAX_BODY + 1)
    reply = client.post("/api/check", json={"path": "mlp.lbdl", "text": text})
    assert reply.status_code == 413
    assert "limit" in reply.json()["error"]
    reply = client.put("/api/file", json={"path": "mlp.lbdl", "text": text})
    assert reply.status_code == 413


def test_another_sites_page_is_refused(client: TestClient) -> None:
    evil = {"origin": "http://evil.example"}
    assert client.get("/api/files", headers=evil).status_code == 403
    assert client.get("/api/files", headers={"host": "evil.example"}).status_code == 403
    assert client.get("/api/files", headers={"origin": BASE}).status_code == 200


def test_a_check_gives_the_figure_the_counts_and_where_each_box_was_written(
    client: TestClient, repo: Path
) -> None:
    text = (repo / "specs" / "gpt2.lbdl").read_text()
    reply = client.post("/api/check", json={"path": "gpt2.lbdl", "text": text, "set": {"N": "2"}})
    result = reply.json()
    assert result["ok"], result
    expected = compile_spec(repo / "specs" / "gpt2.lbdl", overrides={"N": "2"})
    assert result["totals"]["params"] == expected.totals["params"].as_int()
    assert "<svg" in result["svg"] and "×2" in result["svg"]
    lines = text.splitlines()
    layernorm = next(b for b in result["boxes"].values() if b["op"] == "layernorm")
    assert lines[layernorm["span"]["line"] - 1].strip() == "layernorm"
    repeat = next(k for k, b in result["boxes"].items() if b.get("opens") == "tlayer")
    assert f"<title>{repeat}</title>" in result["svg"]
    opened = client.post(
        "/api/check", json={"path": "gpt2.lbdl", "text": text, "expand": ["tlayer"]}
    ).json()
    assert opened["boxes"][repeat]["open"] is True
    inside = [b for b in opened["boxes"].values() if b["span"]["file"].startswith("blocks/")]
    assert inside, "the open block's boxes point into the imported file"
    fields = {p["name"]: p["value"] for p in result["params"]}
    assert fields == {"N": 2, "D": 768, "H": 12, "V": 50_257, "L": 1024, "T": ""}
    given = {"set": {"T": "16"}, "path": "gpt2.lbdl", "text": text}
    assert {"name": "T", "value": "16", "kind": "number"} in client.post(
        "/api/check", json=given
    ).json()["params"]


def test_an_error_comes_with_its_span_and_hint(client: TestClient) -> None:
    text = "model m:\n  input X: 8\n  fc 4\n  reluu\n  output Y\n"
    result = client.post("/api/check", json={"path": "m.lbdl", "text": text}).json()
    assert not result["ok"]
    first = result["diagnostics"][0]
    assert first["span"]["line"] == 4 and first["span"]["column"] == 3
    assert "reluu" in first["message"] and "relu" in (first["hint"] or "")
    assert "m.lbdl:4:3: error:" in first["text"]


def test_an_error_quotes_the_text_being_edited_not_the_saved_file(
    client: TestClient, repo: Path
) -> None:
    edited = (repo / "specs" / "mlp.lbdl").read_text().replace("  relu\n", "  relu ((\n", 1)
    result = client.post("/api/check", json={"path": "mlp.lbdl", "text": edited}).json()
    assert not result["ok"]
    assert "relu ((" in result["diagnostics"][0]["text"]


def test_downloads_are_what_lbdl_build_writes(client: TestClient, repo: Path) -> None:
    text = (repo / "specs" / "mlp.lbdl").read_text()
    formats = (("svg", b"<?xml"), ("png", b"\x89PNG"), ("json", b"{"), ("py", b'"""mlp'))
    for fmt, start in formats:
        reply = client.post("/api/download", json={"path": "mlp.lbdl", "text": text, "format": fmt})
        assert reply.status_code == 200 and reply.content.startswith(start), fmt
        assert f'filename="mlp.{fmt}"' in reply.headers["content-disposition"]
    bad = client.post("/api/download", json={"path": "mlp.lbdl", "text": "model", "format": "py"})
    assert bad.status_code == 422


def test_an_onnx_download_too_large_for_one_file_is_refused_before_any_weight(
    client: TestClient, repo: Path
) -> None:
    text = (repo / "specs" / "gpt3.lbdl").read_text()
    reply = client.post("/api/download", json={"path": "gpt3.lbdl", "text": text, "format": "onnx"})
    assert reply.status_code == 422
    assert "2 GB" in reply.json()["diagnostics"][0]["message"]


@pytest.mark.full
def test_the_onnx_download_is_lbdl_exports(client: TestClient, repo: Path) -> None:
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("jax2onnx")
    text = (repo / "specs" / "mlp.lbdl").read_text()
    reply = client.post("/api/download", json={"path": "mlp.lbdl", "text": text, "format": "onnx"})
    assert reply.status_code == 200, reply.text
    model = onnx.load_model_from_string(reply.content)
    assert [i.name for i in model.graph.input] == ["X"]


def test_the_diff_view_is_lbdl_diff(client: TestClient, repo: Path) -> None:
    text = (repo / "specs" / "gpt2.lbdl").read_text()
    a = {"path": "gpt2.lbdl", "text": text, "set": {"N": "2"}}
    b = {"path": "gpt2.lbdl", "text": text, "set": {"N": "3"}}
    result = client.post("/api/diff", json={"a": a, "b": b}).json()
    assert result["ok"], result
    assert "<svg" in result["svg"] and "params" in result["table"]


def test_a_check_over_the_time_limit_is_stopped_and_the_server_goes_on(
    served: tuple[Path, Path], repo: Path
) -> None:
    app = create_app(served[0], workers=1)
    text = (repo / "specs" / "resnet50.lbdl").read_text()
    with TestClient(app, base_url=BASE) as c:
        pool = app.state.pool
        (first,) = pool.all
        pool.timeout = 0.001  # resnet50 takes about 0.1 s: far over
        slow = c.post("/api/check", json={"path": "resnet50.lbdl", "text": text}).json()
        assert not slow["ok"] and "longer than" in slow["diagnostics"][0]["message"]
        # the replacement's thread joins (and reaps) the worker: wait for its exit code rather
        # than join from this thread too, which can find it reaped and still say alive
        deadline = time.monotonic() + 10
        while first.proc.exitcode is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert first.proc.exitcode is not None
        pool.timeout = 60.0
        again = c.post("/api/check", json={"path": "resnet50.lbdl", "text": text}).json()
        assert again["ok"] and again["totals"]["params"] == 25_557_032
        assert pool.restarts == 1


def test_a_worker_stopped_by_two_threads_at_once_stops_once(tmp_path: Path) -> None:
    """A replacement (after a timeout) and the server's shutdown may stop one worker together:
    both return, and the pipe is closed once (two closes of one descriptor raised EBADF)."""
    import threading

    from lbdl_dsl.serve.worker import Worker

    worker = Worker(tmp_path)
    errors: list[BaseException] = []

    def stop() -> None:
        try:
            worker.stop()
        except BaseException as exc:  # noqa: BLE001 - any error is the failure
            errors.append(exc)

    threads = [threading.Thread(target=stop) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert not errors and worker.conn.closed and not worker.proc.is_alive()
    worker.stop()  # and once more, after


def test_resolve_follows_links_inside_the_folder(tmp_path: Path) -> None:
    (tmp_path / "real.lbdl").write_text("x")
    os.symlink(tmp_path / "real.lbdl", tmp_path / "alias.lbdl")
    assert folder.resolve(tmp_path, "alias.lbdl") == tmp_path / "real.lbdl"


def test_lbdl_serve_warns_beyond_loopback_and_serves(served: tuple[Path, Path]) -> None:
    import subprocess
    import sys
    import urllib.request

    root = served[0]
    cmd = [sys.executable, "-m", "lbdl_dsl", "serve", str(root / "mlp.lbdl"), "--port", "0"]
    with subprocess.Popen(
        [*cmd, "--host", "0.0.0.0", "--workers", "1"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        try:
            assert proc.stdout is not None and proc.stderr is not None
            assert "warning: listening on 0.0.0.0" in proc.stderr.readline()
            assert proc.stdout.readline().startswith("lbdl studio: serving")
            url = proc.stdout.readline().strip()
            assert url.endswith("/#mlp.lbdl")
            port = url.split(":")[-1].split("/")[0]
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/files") as reply:
                assert reply.status == 200
        finally:
            proc.terminate()
            proc.wait(30)


def test_lbdl_serve_refuses_what_is_not_a_spec_or_a_folder(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from lbdl_dsl import cli as main

    assert main.main(["serve", str(tmp_path / "missing.lbdl")]) == 1
    assert "not a spec or a folder" in capsys.readouterr().err


def test_the_figure_is_graphvizs_own_bytes(repo: Path) -> None:
    from lbdl_dsl.backends import diagram
    from lbdl_dsl.serve.dot_process import DotProcess

    graphviz = DotProcess()
    try:
        for name in ("mlp", "gpt2", "mlp"):
            figure = diagram.to_dot(compile_spec(repo / "specs" / f"{name}.lbdl"))
            graphviz.prepare()
            assert graphviz.svg(figure) == diagram.render(figure, "svg")
            assert graphviz.svg(figure) == diagram.render(figure, "svg")  # none waiting
    finally:
        graphviz.close()


def test_lbdl_serve_refuses_a_port_in_use(
    served: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    import socket

    from lbdl_dsl import cli as main

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main.main(["serve", str(served[0]), "--port", str(port)]) == 1
    err = capsys.readouterr().err
    assert f"cannot listen on 127.0.0.1:{port}" in err and "--port 0" in err


def test_lbdl_serve_refuses_a_host_that_is_no_name(
    served: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    """Bytes that are not text (a shell's non-UTF-8 argument) or a NUL in --host: a refusal
    naming the flag (the socket's 'encoding of hostname failed' was an internal error)."""
    from lbdl_dsl import cli as main

    for host in ("\udcff\udcfe", "local\x00host"):
        assert main.main(["serve", str(served[0]), "--host", host, "--port", "0"]) == 1
        err = capsys.readouterr().err
        assert "--host" in err and "not a host name or an address" in err, err
