"""Tiny random-weight GGUFs of architectures no small real model on the
package index has, written by the tests themselves with the `gguf`
package: a recurrent one (Mamba) and hybrids of recurrent and attention
layers (Jamba; LFM2, whose state llama.cpp can roll back itself), to
exercise rewinds a KV cache alone does not need.  SmolLM2's tokenizer is copied in, so SmolLM2 can draft for them.

Random weights say nothing about acceptance; they say whether drafting
keeps the target alone's text, which is what these models test.  Each
file is written once per machine, under a name that changes with its
recipe.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np

RECIPE = 2  # bump when what _make writes changes
QWEN35_RECIPE = 1  # and this when what make_qwen35_mtp writes changes


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    path = Path(base) / "spec-cli" / "made-models"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _copy_tokenizer(writer, tokenizer_gguf: Path) -> int:
    """Copy the tokenizer's metadata from a real GGUF; returns its vocabulary size."""
    from gguf import GGUFReader, GGUFValueType

    reader = GGUFReader(tokenizer_gguf)
    n_vocab = 0
    for key, field in reader.fields.items():
        if not key.startswith("tokenizer."):
            continue
        kind = field.types[0]
        if kind == GGUFValueType.ARRAY:
            sub = field.types[1]
            if sub == GGUFValueType.STRING:
                values = [bytes(field.parts[i]).decode("utf-8", "surrogateescape") for i in field.data]
            else:
                values = [field.parts[i].tolist()[0] for i in field.data]
            writer.add_array(key, values)
            if key == "tokenizer.ggml.tokens":
                n_vocab = len(values)
        elif kind == GGUFValueType.STRING:
            writer.add_string(key, bytes(field.parts[field.data[0]]).decode("utf-8"))
        elif kind == GGUFValueType.BOOL:
            writer.add_bool(key, bool(field.parts[field.data[0]][0]))
        else:
            writer.add_uint32(key, int(field.parts[field.data[0]][0]))
    return n_vocab


def _begin(arch: str, tag: str, recipe: str, tokenizer_gguf: Path):
    """(path, None) where the file for `recipe` is already written; else
    (path, (writer, temporary path, vocabulary size)) for a new one, its
    name, tokenizer, context length and embedding width still to come."""
    key = hashlib.sha256(f"{recipe}|{tokenizer_gguf.name}".encode())
    path = _cache_dir() / f"{tag}-{key.hexdigest()[:12]}.gguf"
    if path.exists():
        return path, None
    import gguf

    tmp = path.with_suffix(".part")
    writer = gguf.GGUFWriter(str(tmp), arch)
    writer.add_name(f"{tag} (random weights)")
    n_vocab = _copy_tokenizer(writer, tokenizer_gguf)
    writer.add_context_length(4096)
    return path, (writer, tmp, n_vocab)


def _finish(writer, tmp: Path, path: Path) -> Path:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    os.replace(tmp, path)
    return path


class _Weights:
    """Random float32 tensors (numpy shapes are ggml's dimensions reversed):
    `rand` scaled by 1/sqrt(fan-in) unless told, `ones` for norms."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)

    def rand(self, *shape, scale=None) -> np.ndarray:
        scale = scale if scale is not None else 1.0 / np.sqrt(shape[-1])
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    @staticmethod
    def ones(n: int) -> np.ndarray:
        return np.ones(n, np.float32)

    def embeddings(self, writer, n_vocab: int, n_embd: int, norm: str = "output_norm.weight") -> None:
        """Token embeddings, the final norm, and an output matrix of its own
        (tied to the embedding, the model would repeat its last token)."""
        writer.add_tensor("token_embd.weight", self.rand(n_vocab, n_embd, scale=1.0))
        writer.add_tensor(norm, self.ones(n_embd))
        writer.add_tensor("output.weight", self.rand(n_vocab, n_embd, scale=3.0 / np.sqrt(n_embd)))


def make_mamba(tokenizer_gguf: Path, *, seed: int = 0) -> Path:
    """A Mamba (v1) GGUF with random weights: four recurrent layers."""
    return _make("mamba", tokenizer_gguf, seed=seed, attention=())


def make_jamba(tokenizer_gguf: Path, *, seed: int = 0) -> Path:
    """A hybrid (Jamba) GGUF with random weights: recurrent layers 0 and 2,
    attention layers 1 and 3 (a KV cache beside the recurrent state)."""
    return _make("jamba", tokenizer_gguf, seed=seed, attention=(1, 3))


def make_lfm2(tokenizer_gguf: Path, *, seed: int = 0) -> Path:
    """A hybrid (LFM2: short convolutions and attention) GGUF with random
    weights: convolution layers 0 and 2, attention layers 1 and 3.  Unlike
    Jamba's, llama.cpp can roll its recurrent state back (n_rs_seq)."""
    return _make("lfm2", tokenizer_gguf, seed=seed, attention=(1, 3))


def _make(arch: str, tokenizer_gguf: Path, *, seed: int, attention: tuple[int, ...], n_layer: int = 4,
          n_embd: int = 128) -> Path:
    """The path of a random-weight GGUF of `arch`, written once."""
    path, new = _begin(arch, f"{arch}-tiny", f"{RECIPE}|{arch}|{n_layer}|{n_embd}|{seed}|{attention}",
                       tokenizer_gguf)
    if new is None:
        return path
    writer, tmp, n_vocab = new
    w = _Weights(seed)
    rand, ones = w.rand, w.ones
    d_inner, d_state, d_conv = 2 * n_embd, 16, 4
    dt_rank = -(n_embd // -16)
    n_head, n_ff = 4, 2 * n_embd
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_layer)
    if arch == "mamba":
        writer.add_feed_forward_length(0)
        writer.add_head_count(0)
        writer.add_ssm_dt_b_c_rms(False)
    elif arch == "lfm2":
        writer.add_feed_forward_length(n_ff)
        writer.add_head_count(n_head)
        writer.add_head_count_kv([n_head if i in attention else 0 for i in range(n_layer)])
        writer.add_shortconv_l_cache(3)
        writer.add_rope_freq_base(10000.0)
    else:
        writer.add_feed_forward_length(n_ff)
        writer.add_head_count(n_head)
        writer.add_head_count_kv([n_head if i in attention else 0 for i in range(n_layer)])
        writer.add_expert_count(0)
    writer.add_ssm_conv_kernel(d_conv)
    writer.add_ssm_inner_size(d_inner)
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_time_step_rank(dt_rank)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_file_type(0)  # all F32
    w.embeddings(writer, n_vocab, n_embd, "token_embd_norm.weight" if arch == "lfm2" else "output_norm.weight")
    for i in range(n_layer):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones(n_embd))
        if i in attention:
            for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
                writer.add_tensor(p + name + ".weight", rand(n_embd, n_embd))
            if arch == "lfm2":
                writer.add_tensor(p + "attn_q_norm.weight", ones(n_embd // n_head))
                writer.add_tensor(p + "attn_k_norm.weight", ones(n_embd // n_head))
        elif arch == "lfm2":
            writer.add_tensor(p + "shortconv.conv.weight", rand(n_embd, 3))
            writer.add_tensor(p + "shortconv.in_proj.weight", rand(3 * n_embd, n_embd))
            writer.add_tensor(p + "shortconv.out_proj.weight", rand(n_embd, n_embd))
        else:
            writer.add_tensor(p + "ssm_in.weight", rand(2 * d_inner, n_embd))
            writer.add_tensor(p + "ssm_conv1d.weight", rand(d_inner, d_conv))
            writer.add_tensor(p + "ssm_conv1d.bias", rand(d_inner, scale=0.1))
            writer.add_tensor(p + "ssm_x.weight", rand(dt_rank + 2 * d_state, d_inner))
            writer.add_tensor(p + "ssm_dt.weight", rand(d_inner, dt_rank))
            writer.add_tensor(p + "ssm_dt.bias", rand(d_inner, scale=0.1) - 2.0)
            a = np.tile(np.arange(1, d_state + 1, dtype=np.float32), (d_inner, 1))
            writer.add_tensor(p + "ssm_a", -a)  # A = -exp(A_log), as the converter writes it
            writer.add_tensor(p + "ssm_d", ones(d_inner))
            writer.add_tensor(p + "ssm_out.weight", rand(n_embd, d_inner, scale=2.0 / np.sqrt(d_inner)))
            if arch == "jamba":
                writer.add_tensor(p + "ssm_dt_norm.weight", ones(dt_rank))
                writer.add_tensor(p + "ssm_b_norm.weight", ones(d_state))
                writer.add_tensor(p + "ssm_c_norm.weight", ones(d_state))
        if arch in ("jamba", "lfm2"):
            writer.add_tensor(p + "ffn_norm.weight", ones(n_embd))
            writer.add_tensor(p + "ffn_gate.weight", rand(n_ff, n_embd))
            writer.add_tensor(p + "ffn_up.weight", rand(n_ff, n_embd))
            writer.add_tensor(p + "ffn_down.weight", rand(n_embd, n_ff))
    return _finish(writer, tmp, path)


def make_qwen35_mtp(tokenizer_gguf: Path, *, seed: int = 0, n_embd: int = 128, residual: float = 0.05) -> Path:
    """A hybrid Qwen3.5 GGUF with random weights and one multi-token-prediction
    (NextN) block, as Qwen3.5/3.6 ship: gated-delta-net layers 0-2, a
    full-attention layer 3, and block 4 the MTP head (a full-attention block
    that reads the next token's embedding beside the trunk's hidden state).

    Random MTP weights would never guess the target's next token, and then
    a test could not tell a block fed the right inputs from one fed the
    wrong ones.  So the block is made to agree with the trunk, mostly: its
    layers add `residual` times their random output to the embedding (the
    model is then close to a function of the last token), and the MTP block
    passes the token's embedding straight to the shared output head, which
    is that function exactly.  A block that reads the right token at the
    right position is then accepted often but not always; one off by a
    position almost never."""
    path, new = _begin("qwen35", "qwen35-mtp-tiny", f"{QWEN35_RECIPE}|qwen35|{n_embd}|{seed}|{residual}",
                       tokenizer_gguf)
    if new is None:
        return path
    writer, tmp, n_vocab = new
    w = _Weights(seed)
    rand, ones = w.rand, w.ones
    n_trunk, n_head, n_head_kv, head = 4, 4, 2, 32
    d_state, n_group, dt_rank, d_conv = 32, 2, 4, 4  # linear attention: key/value heads of d_state
    key_dim, value_dim = d_state * n_group, d_state * dt_rank
    n_ff = 2 * n_embd
    writer.add_embedding_length(n_embd)
    writer.add_block_count(n_trunk + 1)
    writer.add_uint32("qwen35.nextn_predict_layers", 1)
    writer.add_feed_forward_length(n_ff)
    writer.add_head_count(n_head)
    writer.add_head_count_kv(n_head_kv)
    writer.add_key_length(head)
    writer.add_value_length(head)
    writer.add_rope_dimension_count(head)
    writer.add_array("qwen35.rope.dimension_sections", [6, 5, 5, 0])
    writer.add_rope_freq_base(10000000.0)
    writer.add_uint32("qwen35.full_attention_interval", 4)
    writer.add_ssm_conv_kernel(d_conv)
    writer.add_ssm_inner_size(value_dim)
    writer.add_ssm_state_size(d_state)
    writer.add_ssm_time_step_rank(dt_rank)
    writer.add_ssm_group_count(n_group)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_file_type(0)  # all F32
    w.embeddings(writer, n_vocab, n_embd)

    # `scale`: what a block's output adds to the residual stream, times its random weights
    def attention(p, scale):
        writer.add_tensor(p + "attn_q.weight", rand(2 * n_head * head, n_embd))  # query and gate
        writer.add_tensor(p + "attn_k.weight", rand(n_head_kv * head, n_embd))
        writer.add_tensor(p + "attn_v.weight", rand(n_head_kv * head, n_embd))
        writer.add_tensor(p + "attn_output.weight", rand(n_embd, n_head * head) * scale)
        writer.add_tensor(p + "attn_q_norm.weight", ones(head))
        writer.add_tensor(p + "attn_k_norm.weight", ones(head))

    def ffn(p, scale):
        writer.add_tensor(p + "post_attention_norm.weight", ones(n_embd))
        writer.add_tensor(p + "ffn_gate.weight", rand(n_ff, n_embd))
        writer.add_tensor(p + "ffn_up.weight", rand(n_ff, n_embd))
        writer.add_tensor(p + "ffn_down.weight", rand(n_embd, n_ff) * scale)

    for i in range(n_trunk):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", ones(n_embd))
        if (i + 1) % 4 == 0:
            attention(p, residual)
        else:
            writer.add_tensor(p + "attn_qkv.weight", rand(2 * key_dim + value_dim, n_embd))
            writer.add_tensor(p + "attn_gate.weight", rand(value_dim, n_embd))
            writer.add_tensor(p + "ssm_conv1d.weight", rand(2 * key_dim + value_dim, d_conv))
            writer.add_tensor(p + "ssm_dt.bias", rand(dt_rank, scale=0.1))
            writer.add_tensor(p + "ssm_a", -np.exp(rand(dt_rank, scale=0.5)))  # -exp(A_log)
            writer.add_tensor(p + "ssm_beta.weight", rand(dt_rank, n_embd))
            writer.add_tensor(p + "ssm_alpha.weight", rand(dt_rank, n_embd))
            writer.add_tensor(p + "ssm_norm.weight", ones(d_state))
            writer.add_tensor(p + "ssm_out.weight", rand(n_embd, value_dim) * residual)
        ffn(p, residual)
    # the MTP block: the token's embedding, normed, to the output head (its layers add nothing)
    p = f"blk.{n_trunk}."
    writer.add_tensor(p + "attn_norm.weight", ones(n_embd))
    attention(p, 0.0)
    ffn(p, 0.0)
    writer.add_tensor(p + "nextn.eh_proj.weight", np.hstack([np.eye(n_embd), np.zeros((n_embd, n_embd))])
                      .astype(np.float32))  # [embedding; hidden] -> embedding
    writer.add_tensor(p + "nextn.enorm.weight", ones(n_embd))
    writer.add_tensor(p + "nextn.hnorm.weight", ones(n_embd))
    writer.add_tensor(p + "nextn.shared_head_norm.weight", ones(n_embd))
    return _finish(writer, tmp, path)
