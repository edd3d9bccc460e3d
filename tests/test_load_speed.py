"""The verified-load benchmark's entry point (`flashtrie.harness.load_speed`): prepares both id orders' files once
and writes a JSON record per file and core count with the split of the load."""

from __future__ import annotations

import json

from flashtrie.harness import load_speed

from flashtrie import NarrowLoudsIndex


def test_prepare_builds_both_orders_once_and_measures_them(tmp_path, capsys):
    out = tmp_path / "load.json"
    argv = ["--prepare", "3k", "--dir", str(tmp_path / "files"), "--workers", "1", "--repeats", "1",
            "--device", "cpu", "--json", str(out)]
    assert load_speed.main(argv) == 0
    doc = json.loads(out.read_text())
    assert [r["path"].rsplit("-", 1)[1] for r in doc["results"]] == ["input.ftrie", "index.ftrie"]
    for r in doc["results"]:
        ix = NarrowLoudsIndex.load(r["path"])
        assert ix.num_keywords == 3000 and r["workers"] == 1 and r["gb_per_s"] > 0
        assert {"checksums", "rank directories", "LOUDS pass (degrees, leaves, longest keyword)"} <= set(r["split"])
    assert bool(NarrowLoudsIndex.load(doc["results"][0]["path"]).keyword_ids.size)
    assert "generated 3,000 keywords" in capsys.readouterr().out
    def stamps():
        return sorted((p.name, p.stat().st_mtime_ns) for p in (tmp_path / "files").iterdir())

    before = stamps()
    assert load_speed.main(argv) == 0  # the files are there: not built again
    assert "generated" not in capsys.readouterr().out
    assert stamps() == before
