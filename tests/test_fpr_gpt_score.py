"""DreamBench++'s GPT score (:mod:`nearid_lib.fpr.gpt_score`) through the real ``openai`` client
against a local stand-in of the chat-completions API on 127.0.0.1: the request's shape, the parsing
of answers, re-asking, the client's retries of server errors, failed requests recorded and asked
again by the next run, the answer cache and resuming, the reachability check of the gate, the
authors' random stream, and the DB++ columns of the FPR tables (:mod:`nearid_lib.fpr.dbpp_column`)."""
from __future__ import annotations

import base64
import io
import json
import random
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import numpy as np
import pandas as pd
import pytest
from PIL import Image

from nearid_lib.fpr import dbpp_column as D
from nearid_lib.fpr import gpt_score as G
from nearid_lib.runtime import reach

USER, ASSISTANT = "stand-in rubric: reply Score: N", "stand-in acknowledgement"


@pytest.fixture(autouse=True)
def _fresh_reachability(monkeypatch):
    """Each test checks reachability anew (the module remembers hosts for the process) and without a
    proxy of the environment in the way of 127.0.0.1."""
    monkeypatch.setattr(reach, "_REACHED", {})
    for v in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
              "no_proxy"):
        monkeypatch.delenv(v, raising=False)


def _closed_port() -> int:
    """A port of 127.0.0.1 nothing listens on (bound, then released): a connection is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Server:
    """An OpenAI-compatible ``POST /v1/chat/completions`` on 127.0.0.1 that answers from a script
    (a list of ``(status, text)``; the last one repeats) and records every request body."""

    def __init__(self, script):
        self.script, self.bodies = list(script), []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802 - the http.server API
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.bodies.append({"path": self.path, **body})
                status, text = owner.script.pop(0) if len(owner.script) > 1 else owner.script[0]
                # status 0: a 200 whose body holds no readable answer (an unparseable response)
                payload = ({"error": {"message": "stand-in failure", "type": "server_error"}} if status >= 400 else
                           {"id": "cmpl-1", "object": "chat.completion", "choices": []} if status == 0 else
                           {"id": "cmpl-1", "object": "chat.completion", "created": 0, "model": body["model"],
                            "choices": [{"index": 0, "finish_reason": "stop",
                                         "message": {"role": "assistant", "content": text}}],
                            "usage": {"prompt_tokens": 1450, "completion_tokens": 4, "total_tokens": 1454}})
                data = json.dumps(payload).encode()
                self.send_response(status or 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *a):
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self):
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    made = []

    def make(script):
        s = _Server(script)
        made.append(s)
        return s
    yield make
    for s in made:
        s.close()


def _judge(url, tmp_path, **kw):
    import openai

    client = openai.OpenAI(base_url=url, api_key="stand-in", max_retries=kw.pop("max_retries", 2), timeout=30)
    return G.GptJudge(USER, ASSISTANT, tmp_path / "answers", client=client, **kw)


def _images(tmp_path, n=3):
    out = []
    for i in range(n):
        p = tmp_path / f"im{i}.png"
        Image.new("RGB", (60 + 7 * i, 40), (40 * i, 90, 200 - 30 * i)).save(p)
        out.append(str(p))
    return out


def test_request_shape_and_score(server, tmp_path):
    s = server([(200, "Score: 3")])
    ims = _images(tmp_path)
    judge = _judge(s.url, tmp_path)
    pair = G.Pair("subj", ims[0], ims[1], 17)
    rows = judge.score([pair])
    assert rows.score.tolist() == [0.75] and rows.attempts.tolist() == [1] and judge.requests == 1
    body = s.bodies[0]
    assert body["path"] == "/v1/chat/completions" and body["model"] == "gpt-4o-2024-05-13"
    assert body["temperature"] == 1 and body["seed"] == 17
    m = body["messages"]
    assert [x["role"] for x in m] == ["user", "assistant", "user"] and m[0]["content"] == USER and m[1]["content"] == ASSISTANT
    assert [c["type"] for c in m[2]["content"]] == ["image_url", "image_url"]
    for c, src in zip(m[2]["content"], ims[:2]):
        assert c["image_url"]["detail"] == "high" and c["image_url"]["url"].startswith("data:image/jpeg;base64,")
        im = Image.open(io.BytesIO(base64.b64decode(c["image_url"]["url"].split(",", 1)[1])))
        assert im.format == "JPEG" and im.size == (512, 512)
        # reference first: the first image is the (resized) source's colour
        assert np.abs(np.asarray(im.convert("RGB"), float).mean((0, 1)) - np.asarray(Image.open(src), float).mean((0, 1))).max() < 4


@pytest.mark.parametrize("text, score", [("Score: 4", 4), ("score: 2", 2), ("Score: Good 3", 3), ("The Score:1", 1),
                                         ("Score: 2, Score: 3", None), ("no number", None), ("Score: three", None)])
def test_parse_score(text, score):
    assert G.parse_score(text) == score


def test_unparseable_answers_are_asked_again_then_recorded(server, tmp_path):
    s = server([(200, "looks similar"), (200, "Score: 2 or Score: 3"), (200, "Score: 1")])
    judge = _judge(s.url, tmp_path)
    ims = _images(tmp_path)
    rows = judge.score([G.Pair("a", ims[0], ims[1], 5)])
    assert rows.score.tolist() == [0.25] and rows.attempts.tolist() == [3] and len(s.bodies) == 3
    seeds = [b["seed"] for b in s.bodies]
    assert seeds[0] == 5 and all(0 <= x <= 100 for x in seeds)
    # never a parseable answer: after TRIES requests the pair is recorded without a score
    s2 = server([(200, "no idea")])
    j2 = _judge(s2.url, tmp_path / "b", tries=3)
    r2 = j2.score([G.Pair("a", ims[0], ims[2], 5)])
    assert np.isnan(r2.score[0]) and len(s2.bodies) == 3 and G.subject_scores(r2) == (pytest.approx(np.nan, nan_ok=True), 0, 1)


def test_server_errors_are_retried_by_the_client(server, tmp_path):
    s = server([(500, ""), (503, ""), (200, "Score: 4")])
    judge = _judge(s.url, tmp_path, max_retries=3)
    ims = _images(tmp_path)
    assert judge.score([G.Pair("a", ims[0], ims[1], 1)]).score.tolist() == [1.0]
    assert len(s.bodies) == 3 and judge.requests == 1          # two transport retries inside one request
    # still failing after the client's retries: the pair is recorded as failed, not as answered
    s2 = server([(500, "")])
    j2 = _judge(s2.url, tmp_path / "x", max_retries=1)
    rows = j2.score([G.Pair("a", ims[0], ims[2], 1)])
    assert np.isnan(rows.score[0]) and "InternalServerError" in rows.failed[0] and len(s2.bodies) == 2
    recs = [json.loads(x) for x in j2.path.read_text().splitlines()]
    assert len(recs) == 1 and recs[0]["failed"].startswith("InternalServerError") and recs[0]["score"] is None


def test_answers_are_cached_and_a_run_resumes(server, tmp_path):
    s = server([(200, "Score: 2")])
    ims = _images(tmp_path)
    pairs = [G.Pair("a", ims[0], ims[1], 3), G.Pair("a", ims[0], ims[2], 9), G.Pair("b", ims[1], ims[2], 0)]
    first = _judge(s.url, tmp_path).score(pairs[:2])
    assert len(s.bodies) == 2
    # a new process: the cached pairs are read, only the new one is asked
    again = _judge(s.url, tmp_path)
    rows = again.score(pairs)
    assert len(s.bodies) == 3 and again.requests == 1
    pd.testing.assert_frame_equal(rows.iloc[:2].reset_index(drop=True), first)
    # a line torn by a kill is ignored (that pair is asked again), and the file stays readable
    lines = again.path.read_text().splitlines()
    again.path.write_text("\n".join(lines[:-1]) + "\n" + lines[-1][:25])
    third = _judge(s.url, tmp_path)
    third.score(pairs)
    assert third.requests == 1 and len(s.bodies) == 4
    assert all(json.loads(x) for x in third.path.read_text().splitlines() if x.strip().startswith("{") and x.strip().endswith("}"))
    # another model or another prompt never reads these answers
    assert _judge(s.url, tmp_path, model="other-model").path != third.path


def test_pairs_replay_the_authors_stream():
    q = pd.DataFrame({"name": ["s1", "s1", "s2", "s2", "s2"], "file_path": [f"q{i}" for i in range(5)],
                      "ref_path": ["r1", "r1b", "r2", "r2", "r2b"]})
    g = pd.DataFrame({"name": ["s1", "s1", "s1", "s2"], "file_path": ["g1a", "g1b", "g1c", "g2a"]})
    rng = random.Random(101)
    want = []
    pick = rng.sample(["g1a", "g1b", "g1c"], 1)
    want += [("s1", pick[0], f, rng.randint(0, 100)) for f in ("q0", "q1")]
    want += [("s2", "g2a", f, rng.randint(0, 100)) for f in ("q2", "q3", "q4")]    # one image: no draw
    assert [(p.subject, p.src, p.tgt, p.seed) for p in G.plan_pairs(q, g)] == want
    rng = random.Random(101)
    assert [(p.src, p.tgt, p.seed) for p in G.plan_pairs(q)] == [(r, f, rng.randint(0, 100))
                                                                 for r, f in zip(q.ref_path, q.file_path)]
    # DreamBooth against the references, the others against their ref_path
    assert G.pairs_for("DreamBooth", q, g)[0].src in {"g1a", "g1b", "g1c"}
    assert G.pairs_for("IP Adapter", q, g)[0].src == "r1"


def test_prompts_and_the_gate(server, tmp_path, monkeypatch):
    for v in ("OPENAI_API_KEY", "OPENAI_BASE_URL"):
        monkeypatch.delenv(v, raising=False)
    live = server([(200, "Score: 1")]).url
    root = tmp_path / "dreambenchpp"
    root.mkdir()
    with pytest.raises(G.GptPromptError, match="dreambench_plus/prompts"):
        G.read_prompts(root)
    assert "OPENAI_API_KEY" in G.gpt_config_reason(None, root)
    assert "prompts" in G.gpt_config_reason(live, root)
    d = root / "dreambench_plus" / "prompts"
    d.mkdir(parents=True)
    (d / "user_prompt_subject_full.txt").write_text("  rubric \n")
    (d / "gpt_prompt_subject_full.txt").write_text("ack\n")
    assert G.read_prompts(root) == ("rubric", "ack")
    assert G.gpt_config_reason(live, root) is None
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.setenv("OPENAI_BASE_URL", live)          # the key's server: $OPENAI_BASE_URL, reachable
    assert G.gpt_config_reason(None, root) is None
    assert G.COST["usd_per_1000_requests"] == pytest.approx(7.325)


def test_an_unreachable_server_closes_the_gate_naming_the_host(server, tmp_path, monkeypatch):
    """A key on a node without internet: the gate closes, with the host, before any request; the
    declared gate ``fpr_gpt`` (what the dry run's table check reads) closes with it."""
    from nearid_lib import gates

    root = tmp_path / "dreambenchpp" / "prompts"
    root.mkdir(parents=True)
    for f in G.PROMPT_FILES:
        (root / f).write_text("p")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
    monkeypatch.delenv("NEARID_SET", raising=False)
    port = _closed_port()
    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    why = G.gpt_config_reason(None, root.parent)
    assert why and f"127.0.0.1:{port}" in why and "not reachable" in why
    assert gates.is_closed("fpr_gpt")
    live = server([(200, "Score: 1")]).url
    monkeypatch.setenv("OPENAI_BASE_URL", live)
    assert G.gpt_config_reason(None, root.parent) is None and not gates.is_closed("fpr_gpt")
    # the column itself: the gate's reason, and not one request
    from nearid_lib.config import get_profile
    from nearid_lib.data.fpr_layout import FPRSplit

    monkeypatch.setenv("OPENAI_BASE_URL", f"http://127.0.0.1:{port}/v1")
    cfg = get_profile("paper", {"eval.dbpp_root": str(root.parent)})
    empty = pd.DataFrame(columns=["name", "species", "file_path", "ref_path"])
    col = D.dbpp_columns(cfg, FPRSplit(empty, empty, tmp_path), None)
    assert col.reason and f"127.0.0.1:{port}" in col.reason and col.sidecar() == {"not_produced": {"dbpp": col.reason}}


def test_the_reachability_check_is_bounded_and_runs_once(monkeypatch):
    """A name lookup that hangs (a node without DNS) is given up after the timeout; a host is
    checked once per process; a proxy of the environment is what is reached."""
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    calls = []

    def hang(addr, timeout=None):
        calls.append(addr)
        time.sleep(5)
        raise OSError("gave up late")                # as a lookup that finally fails would

    monkeypatch.setattr(reach.socket, "create_connection", hang)
    t0 = time.monotonic()
    why = reach.endpoint_reason(None, timeout=0.2)                 # OpenAI's own server, the default
    assert time.monotonic() - t0 < 2.0
    assert "api.openai.com:443" in why and "no answer within 0.2 s" in why
    assert reach.endpoint_reason(None, timeout=0.2) == why and len(calls) == 1
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.internal:3128")
    assert "through the proxy proxy.internal:3128" in reach.endpoint_reason("https://gpt.example.org/v1", timeout=0.2)
    assert calls[-1] == ("proxy.internal", 3128)
    assert "names no host" in reach.endpoint_reason("not a url")


def test_failed_requests_are_asked_again_by_the_next_run(server, tmp_path):
    """A request that fails (HTTP error after the client's retries, an unreadable response) is
    recorded as failed and the others go on; the next run asks only the failed ones again."""
    ims = _images(tmp_path, 4)
    pairs = [G.Pair("a", ims[0], ims[1], 3), G.Pair("a", ims[0], ims[2], 9), G.Pair("b", ims[1], ims[3], 0)]
    # pair 2 fails on an HTTP error, pair 3 on a response without an answer
    s = server([(200, "Score: 4"), (500, ""), (0, ""), (200, "Score: 2")])
    first = _judge(s.url, tmp_path, max_retries=0)
    rows = first.score(pairs)
    assert rows.score.tolist()[0] == 1.0 and rows.score[1:].isna().all()
    assert "InternalServerError" in rows.failed[1] and "IndexError" in rows.failed[2] and pd.isna(rows.failed[0])
    assert len(s.bodies) == 3 and set(first.failed) == {pairs[1].key, pairs[2].key}
    # the next run (a new process on the same file): the answered pair is not asked, the failed ones are
    again = _judge(s.url, tmp_path, max_retries=0)
    assert set(again.failed) == {pairs[1].key, pairs[2].key}
    rows = again.score(pairs)
    assert again.requests == 2 and len(s.bodies) == 5 and [b["seed"] for b in s.bodies[3:]] == [9, 0]
    assert rows.score.tolist() == [1.0, 0.5, 0.5] and rows.failed.isna().all() and again.failed == {}
    third = _judge(s.url, tmp_path)
    assert third.score(pairs).score.tolist() == [1.0, 0.5, 0.5] and third.requests == 0


def test_failures_in_a_row_stop_the_run_naming_the_answers_file(server, tmp_path):
    ims = _images(tmp_path, 4)
    s = server([(200, "Score: 3"), (503, "")])
    judge = _judge(s.url, tmp_path, max_retries=0, max_failures=2)
    pairs = [G.Pair("a", ims[0], ims[i], i) for i in (1, 2, 3)]
    with pytest.raises(G.GptUnavailableError) as err:
        judge.score(pairs)
    msg = str(err.value)
    assert str(judge.path) in msg and "2 requests in a row" in msg and s.url in msg and "InternalServerError" in msg
    assert len(s.bodies) == 3                                   # the third pair was the second failure: stopped
    # one success between failures resets the count
    s2 = server([(503, ""), (200, "Score: 3"), (503, "")])
    j2 = _judge(s2.url, tmp_path / "b", max_retries=0, max_failures=2)
    assert j2.score(pairs).failed.notna().tolist() == [True, False, True]


def test_dbpp_columns_of_the_fpr_tables(server, tmp_path):
    from nearid_lib.config import get_profile
    from nearid_lib.data.fpr_layout import FPRSplit

    ims = _images(tmp_path, 8)
    train = pd.DataFrame({"name": ["k/a", "k/a", "k/b"], "species": ["k/s"] * 3, "file_path": ims[:3],
                          "ref_path": [ims[0], ims[0], ims[2]], "dataset": ["k"] * 3})
    gallery = pd.DataFrame({"name": ["k/a", "k/b"], "species": ["k/s"] * 2, "file_path": ims[3:5],
                            "ref_path": [ims[0], ims[2]], "dataset": ["k"] * 2})
    gen = pd.DataFrame({"name": ["k/a", "k/b", "k/a"], "species": ["k/s"] * 3, "file_path": ims[5:8],
                        "ref_path": [ims[0], ims[2], ims[0]], "method": ["Emu2", "Emu2", "DreamBooth"],
                        "dataset": ["k"] * 3})
    s = server([(200, "Score: 4"), (200, "Score: 0"), (200, "Score: 2")])
    col = D.dbpp_columns(get_profile("paper"), FPRSplit(train, gallery, tmp_path), gen, judge=_judge(s.url, tmp_path))
    assert col.reason is None and col.requests == len(s.bodies) == 3 + 3
    o = col.oracle.set_index("group")
    # subject a: two references (4 and 0 -> 1.0, 0.0), subject b: one (2 -> 0.5): mean of subject means
    assert o.dbpp["k/s"] == pytest.approx(((1.0 + 0.0) / 2 + 0.5) / 2) and o.n_subjects["k/s"] == 2
    oracle = pd.DataFrame({"group": ["k/s", "all"], "encoder": ["x", "x"]})
    assert D.with_oracle_dbpp(oracle, col).dbpp.tolist() == [pytest.approx(0.5), pytest.approx(0.5)]
    table = pd.DataFrame({"dataset": ["k", "k"], "method": ["Emu2", "DreamBooth"]})
    assert D.with_generated_dbpp(table, col).dbpp.notna().all()
    assert "requests_this_run" in col.sidecar()["dbpp"]
    assert col.sidecar()["dbpp"]["failed_pairs"] == 0 and o.n_failed["k/s"] == 0
    # a failed request: its pair left out of the score, counted, and the sidecar says a rerun asks it
    s2 = server([(200, "Score: 4"), (500, ""), (200, "Score: 2")])
    col2 = D.dbpp_columns(get_profile("paper"), FPRSplit(train, gallery, tmp_path), None,
                          judge=_judge(s2.url, tmp_path / "again", max_retries=0))
    assert col2.oracle.n_failed.tolist() == [1] and col2.sidecar()["dbpp"]["failed_pairs"] == 1
    assert "rerun asks them again" in col2.sidecar()["dbpp"]["failed_note"]
    gated = D.DbppColumn(reason="no key")
    assert D.with_generated_dbpp(table, gated).dbpp.isna().all() and gated.sidecar() == {"not_produced": {"dbpp": "no key"}}
