"""Notebooks that open cleanly (issue 57, item 2): opening and saving a notebook leaves its tracked
``.py`` byte for byte unchanged unless a cell changed (``jupytext.toml``'s filters), and progress bars
leave no stale text in saved outputs (``scripts/finalise_notebook.py``, run by ``run_notebook.sh``)."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import jupytext
import nbformat
import pytest
from jupytext.config import load_jupytext_config

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.py"))


def _py_format(path: Path) -> dict:
    """The percent format with the repository's options (jupytext.toml), as jupytext writes it."""
    fmt = {"extension": ".py", "format_name": "percent"}
    load_jupytext_config(str(path)).set_default_format_options(fmt)
    return fmt


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_py_to_ipynb_and_back_is_identical(path):
    text = path.read_text()
    fmt = _py_format(path)
    ipynb = nbformat.writes(jupytext.reads(text, fmt=fmt))
    assert jupytext.writes(nbformat.reads(ipynb, as_version=4), fmt=fmt) == text


def _what_jupyterlab_adds(nb) -> None:
    """The metadata a JupyterLab session writes into a notebook: the kernel it ran, the language, the
    widgets' state, per cell collapsed / hidden / scrolled states, execution times, outputs."""
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (nearid)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"codemirror_mode": {"name": "ipython", "version": 3}, "file_extension": ".py",
                                    "mimetype": "text/x-python", "name": "python", "nbconvert_exporter": "python",
                                    "pygments_lexer": "ipython3", "version": "3.11.9"}
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}, "version_major": 2,
                                                                            "version_minor": 0}}
    for i, cell in enumerate(nb.cells):
        cell.metadata["jupyter"] = {"source_hidden": i % 2 == 0, "outputs_hidden": False}
        cell.metadata["collapsed"] = False
        if cell.cell_type == "code":
            cell.metadata["scrolled"] = True
            cell.metadata["execution"] = {"iopub.execute_input": "2026-11-28T10:00:00.0Z",
                                          "shell.execute_reply": "2026-11-28T10:00:01.0Z"}
            cell.execution_count = i + 1
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text="world/identities:  27%| | 6/22\n")]


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab's file layer: jupytext's contents manager on a copy of the notebooks and the
    repository's jupytext.toml (saving writes notebooks/NN.py and its pair build/lab/NN.ipynb)."""
    from jupytext import TextFileContentsManager

    root = tmp_path_factory.mktemp("lab")
    shutil.copy(ROOT / "jupytext.toml", root)
    shutil.copytree(ROOT / "notebooks", root / "notebooks", ignore=shutil.ignore_patterns("__pycache__"))
    cm = TextFileContentsManager()
    cm.root_dir = str(root)
    return cm, root


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_opening_and_saving_in_jupyterlab_keeps_the_source(lab, path):
    cm, root = lab
    rel = f"notebooks/{path.name}"
    for _ in range(2):                     # a first save (no pair yet), then a reopen from the pair
        nb = cm.get(rel)["content"]
        _what_jupyterlab_adds(nb)
        cm.save({"type": "notebook", "content": nb}, rel)
        assert (root / rel).read_bytes() == path.read_bytes()
    pair = nbformat.read(root / "build" / "lab" / f"{path.stem}.ipynb", as_version=4)
    assert pair.metadata["kernelspec"]["display_name"] == "Python 3 (nearid)"     # kept in the pair
    assert any(c.get("outputs") for c in pair.cells if c.cell_type == "code")


def test_a_changed_cell_changes_the_source_and_nothing_else(lab):
    cm, root = lab
    path = NOTEBOOKS[0]
    rel = f"notebooks/{path.name}"
    nb = cm.get(rel)["content"]
    _what_jupyterlab_adds(nb)
    cell = next(c for c in nb.cells if c.cell_type == "code" and "parameters" in c.metadata.get("tags", []))
    cell.source = cell.source.replace('PROFILE = "mini"', 'PROFILE = "smoke"')
    cm.save({"type": "notebook", "content": nb}, rel)
    old, new = path.read_text().splitlines(), (root / rel).read_text().splitlines()
    assert [(a, b) for a, b in zip(old, new) if a != b] == [('PROFILE = "mini"', 'PROFILE = "smoke"')]
    assert len(old) == len(new)            # the parameters tag and every other line kept


def test_jupytext_sync_keeps_the_source(tmp_path, monkeypatch):
    """`jupytext --sync`, what the issue saw add version lines to every source."""
    from jupytext.cli import jupytext as jupytext_cli

    shutil.copy(ROOT / "jupytext.toml", tmp_path)
    (tmp_path / "notebooks").mkdir()
    src = tmp_path / "notebooks" / NOTEBOOKS[1].name
    shutil.copy(NOTEBOOKS[1], src)
    monkeypatch.chdir(tmp_path)
    jupytext_cli(["--quiet", "--sync", str(src)])
    assert (tmp_path / "build" / "lab" / f"{src.stem}.ipynb").exists()
    assert src.read_bytes() == NOTEBOOKS[1].read_bytes()


# ----------------------------------------------------------------------------- progress bars
def _finaliser():
    spec = importlib.util.spec_from_file_location("finalise_notebook", ROOT / "scripts" / "finalise_notebook.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _bar(fin, nb, left: str, value: float, hi: float, right: str, first_text: str) -> dict:
    """A tqdm.notebook bar as papermill saves it: an HBox of (HTML, FloatProgress, HTML) in the
    widget state, and an output holding the text of the moment the bar appeared."""
    state = nb.metadata.setdefault("widgets", {}).setdefault(fin.WIDGET_STATE, {}).setdefault("state", {})
    k = len(state)
    state[f"l{k}"] = {"model_name": "HTMLModel", "state": {"value": left}}
    state[f"p{k}"] = {"model_name": "FloatProgressModel", "state": {"min": 0.0, "max": hi, "value": value}}
    state[f"r{k}"] = {"model_name": "HTMLModel", "state": {"value": right}}
    state[f"box{k}"] = {"model_name": "HBoxModel",
                        "state": {"children": [f"IPY_MODEL_l{k}", f"IPY_MODEL_p{k}", f"IPY_MODEL_r{k}"]}}
    return nbformat.v4.new_output("display_data", {fin.WIDGET_VIEW: {"model_id": f"box{k}", "version_major": 2},
                                                   "text/plain": first_text})


def test_progress_bars_get_their_final_text():
    """Text as tqdm 4.70 leaves it (figure spaces, HTML escapes); the executed notebooks of smoke and
    the dry run are checked the same way by make notebook-figures (tests/test_notebook_figures.py)."""
    fin = _finaliser()
    nb = nbformat.v4.new_notebook()
    c = nbformat.v4.new_code_cell("x")
    c.outputs = [_bar(fin, nb, "resumed:\u2007100%", 22, 22, "\u200722/22\u2007[00:02&lt;00:00,\u2007\u20079.61it/s]",
                      "resumed:  27%|##7       | 6/22 [00:00<?, ?it/s]"),
                 _bar(fin, nb, "stopped:\u200750%", 2, 4, "\u20072/4", "stopped:   0%|          | 0/4")]
    nb.cells.append(c)
    assert fin.finalise(nb) == 2
    assert [o["data"]["text/plain"] for o in c.outputs] == [
        "resumed: 100%|##########| 22/22 [00:02<00:00,  9.61it/s]", "stopped: 50%|#####     | 2/4"]


def test_other_widgets_and_bars_without_state_are_left_alone():
    fin = _finaliser()
    nb = nbformat.v4.new_notebook()
    c = nbformat.v4.new_code_cell("x")
    view = "application/vnd.jupyter.widget-view+json"
    c.outputs = [nbformat.v4.new_output("display_data", {view: {"model_id": "slider"}, "text/plain": "IntSlider(3)"}),
                 nbformat.v4.new_output("display_data", {view: {"model_id": "gone"}, "text/plain": "0%| | 0/9"})]
    nb.cells.append(c)
    nb.metadata["widgets"] = {fin.WIDGET_STATE: {"state": {"slider": {"model_name": "IntSliderModel", "state": {}}}}}
    assert fin.finalise(nb) == 0
    assert [o["data"]["text/plain"] for o in c.outputs] == ["IntSlider(3)", "0%| | 0/9"]
