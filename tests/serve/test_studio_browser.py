"""The studio in a real browser: Playwright drives Debian's ``chromium`` (no browser download;
``make system`` installs the package) against a server on a copy of specs/.

CI runs the first test (open a spec, type, see the figure and the count follow); the rest are
``full``. With ``LBDL_STUDIO_SHOTS=DIR`` the tests save the screenshots docs/studio.md shows.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("starlette")
playwright = pytest.importorskip("playwright.sync_api")

from lbdl_dsl.compiler.driver import compile_spec  # noqa: E402
from lbdl_dsl.serve.app import create_app  # noqa: E402
from lbdl_dsl.serve.server import Background  # noqa: E402

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason="needs Debian's chromium (make system)")

WAIT_MS = 20_000


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory, repo: Path) -> Iterator[tuple[Path, str]]:
    root = tmp_path_factory.mktemp("studio") / "specs"
    shutil.copytree(repo / "specs", root)
    with Background(create_app(root, workers=1)) as url:
        yield root, url


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    page = browser.new_page(viewport={"width": 1400, "height": 860})
    errors: list[str] = []
    page.on("pageerror", lambda e: errors.append(str(e)))
    yield page
    page.close()
    assert not errors, errors


def shot(page: Any, name: str) -> None:
    """Save the page for docs/studio.md, in 128 colours (a third of the bytes, the same look)."""
    where = os.environ.get("LBDL_STUDIO_SHOTS")
    if where:
        Path(where).mkdir(parents=True, exist_ok=True)
        target = Path(where) / f"{name}.png"
        page.screenshot(path=str(target))
        with contextlib.suppress(ImportError):
            from PIL import Image

            with Image.open(target) as image:
                flat = image.convert("RGB").quantize(128, dither=Image.Dither.NONE)
            flat.save(target, optimize=True)


def open_spec(page: Any, url: str, name: str) -> None:
    page.goto(f"{url}/#{name}")
    page.wait_for_selector("#figure svg g.linked", timeout=WAIT_MS)


def settle(page: Any) -> None:
    """Wait until the newest text typed has been checked and shown."""
    page.wait_for_function(
        "() => !document.body.dataset.checking && document.body.dataset.checked", timeout=WAIT_MS
    )


def line_of(page: Any, text: str) -> Any:
    return page.locator(".cm-line", has_text=text).first


def count(page: Any) -> int:
    return int(page.inner_text("#params-count").split()[0].replace(",", ""))


def cursor_line(page: Any) -> int:
    return int(
        page.evaluate("() => studio.view.state.doc.lineAt(studio.view.state.selection.main.head)")[
            "number"
        ]
    )


def test_typing_updates_the_figure_and_the_count(served: tuple[Path, str], page: Any) -> None:
    root, url = served
    open_spec(page, url, "gpt2.lbdl")
    assert count(page) == 124_439_808
    assert "len=1024" in page.inner_text("#figure")
    line_of(page, "model gpt2(").click()
    page.keyboard.press("End")
    for key in ["ArrowLeft"] * 2 + ["Backspace"] * 4:
        page.keyboard.press(key)
    page.keyboard.type("2048")
    page.wait_for_function(
        "() => document.querySelector('#figure').textContent.includes('len=2048')",
        timeout=WAIT_MS,
    )
    settle(page)
    edited = page.evaluate("() => studio.view.state.doc.toString()")
    assert "L=2048):" in edited
    expected = compile_spec(root / "gpt2.lbdl", overrides={"L": "2048"})
    assert count(page) == expected.totals["params"].as_int() == 124_439_808 + 1024 * 768
    assert (root / "gpt2.lbdl").read_text() != edited  # nothing saved without asking
    shot(page, "typing")


@pytest.mark.full
def test_an_error_squiggles_and_the_last_figure_stays_dimmed(
    served: tuple[Path, str], page: Any
) -> None:
    _, url = served
    open_spec(page, url, "mlp.lbdl")
    line_of(page, "relu").first.click()
    page.keyboard.press("End")
    page.keyboard.type("u")
    page.wait_for_selector(".cm-lintRange-error", timeout=WAIT_MS)
    settle(page)
    assert "reluu" in page.inner_text("#problems")
    assert "hint:" in page.inner_text("#problems")
    assert page.locator("#figure.stale svg").count() == 1  # the last good figure, dimmed
    page.locator(".cm-lintRange-error").first.hover()
    tip = page.wait_for_selector(".cm-tooltip-lint", timeout=WAIT_MS)
    assert "reluu" in tip.inner_text()
    shot(page, "error")
    page.keyboard.press("Backspace")
    page.wait_for_function("() => document.body.dataset.state === 'ok'", timeout=WAIT_MS)
    assert page.locator("#figure.stale").count() == 0
    assert page.locator(".cm-lintRange-error").count() == 0


@pytest.mark.full
def test_a_click_on_a_box_moves_the_cursor_and_the_cursor_lights_its_box(
    served: tuple[Path, str], page: Any
) -> None:
    root, url = served
    open_spec(page, url, "mlp.lbdl")
    lines = (root / "mlp.lbdl").read_text().splitlines()
    page.locator('#figure g.node[data-id="fc_1"]').click()
    assert (
        lines[cursor_line(page) - 1].strip().startswith("fc")
        and "10" in lines[cursor_line(page) - 1]
    )
    assert page.locator('#figure g.current[data-id="fc_1"]').count() == 1
    page.locator(".cm-line").nth(lines.index("  fc         2")).click()
    page.wait_for_selector('#figure g.current[data-id="fc_2"]', timeout=WAIT_MS)
    assert page.locator("#figure g.current").count() == 1
    page.locator('#figure g.node[data-id="fc_0"]').hover()
    tip = page.wait_for_selector("#tip:not([hidden])", timeout=WAIT_MS).inner_text()
    assert "1,275" in tip and "50" in tip and "25" in tip  # params, in and out shapes
    shot(page, "hover")


@pytest.mark.full
def test_a_frame_opens_and_closes(served: tuple[Path, str], page: Any) -> None:
    _, url = served
    open_spec(page, url, "gpt2.lbdl")
    closed = page.locator("#figure g.cluster.opens.is-closed")
    assert closed.count() == 1
    boxes = page.locator("#figure g.node").count()
    closed.locator("text").first.click()  # the frame's ×12
    page.wait_for_selector("#figure g.cluster.opens.is-open", timeout=WAIT_MS)
    settle(page)
    assert page.locator("#figure g.node").count() > boxes
    assert "self-att" in page.inner_text("#figure")
    shot(page, "open")
    page.locator("#figure g.cluster.opens.is-open").first.locator("text").first.click()
    page.wait_for_selector("#figure g.cluster.opens.is-closed", timeout=WAIT_MS)
    settle(page)
    assert page.locator("#figure g.node").count() == boxes
    page.locator('#figure g.node.opens[data-id$="tlayer_0"]').dblclick()  # the box itself
    page.wait_for_selector("#figure g.cluster.opens.is-open", timeout=WAIT_MS)


@pytest.mark.full
def test_a_parameter_field_rechecks(served: tuple[Path, str], page: Any, repo: Path) -> None:
    _, url = served
    open_spec(page, url, "gpt2.lbdl")
    assert count(page) == 124_439_808
    field = page.locator('#fields input[data-param="N"]')
    assert field.input_value() == "12"
    field.fill("2")
    expected = compile_spec(repo / "specs" / "gpt2.lbdl", overrides={"N": "2"})
    want = f"{expected.totals['params'].as_int():,} params"
    page.wait_for_function(
        f"() => document.querySelector('#params-count').textContent === {want!r}",
        timeout=WAIT_MS,
    )
    assert re.search(r"×2\b", page.inner_text("#figure"))
    shot(page, "fields")


@pytest.mark.full
def test_save_writes_the_file(served: tuple[Path, str], page: Any) -> None:
    root, url = served
    open_spec(page, url, "lenet.lbdl")
    page.locator(".cm-content").click()
    page.keyboard.press("Control+Home")
    page.keyboard.type("# edited in the studio\n")
    assert page.locator(".tab.dirty").count() == 1
    page.keyboard.press("Control+s")
    page.wait_for_function(
        "() => document.querySelector('#status').textContent.startsWith('saved')",
        timeout=WAIT_MS,
    )
    assert page.locator(".tab.dirty").count() == 0
    text = (root / "lenet.lbdl").read_text()
    assert text.startswith("# edited in the studio\n")
    assert text == page.evaluate("() => studio.view.state.doc.toString()")


@pytest.mark.full
def test_tabs_and_the_diff_view(served: tuple[Path, str], page: Any) -> None:
    _, url = served
    open_spec(page, url, "gpt2.lbdl")
    page.locator('#files li[data-path="gpt.lbdl"]').click()
    page.wait_for_selector('.tab.active[data-path="gpt.lbdl"]', timeout=WAIT_MS)
    page.wait_for_selector("#figure svg g.linked", timeout=WAIT_MS)
    assert page.locator(".tab").count() == 2
    page.locator('.tab[data-path="gpt2.lbdl"]').click()
    page.wait_for_selector('.tab.active[data-path="gpt2.lbdl"]', timeout=WAIT_MS)
    page.locator('[data-view="diff"]').click()
    page.locator("#diff-set-a").fill("N=2")
    page.locator("#diff-b").select_option("gpt2.lbdl")
    page.locator("#diff-set-b").fill("N=3")
    page.locator("#diff-run").click()
    page.wait_for_selector("#diff-figure svg", timeout=WAIT_MS)
    assert "params" in page.inner_text("#diff-table")
    shot(page, "diff")
